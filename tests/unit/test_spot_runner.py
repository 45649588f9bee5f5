"""`tasks.capacity.run_jobs` with a back-end of plain processes: when one job's worker fails,
the other jobs' workers are stopped with it (only a timeout stopped them before, and a failed
job left its siblings training and writing checkpoints after `run_jobs` had raised)."""

from __future__ import annotations

import subprocess
import sys
import time

import numpy as np
import pytest

from policy.spot import Market
from tasks.capacity import run_jobs
from tasks.capacity._local import LocalInstance


class _Processes:
    """Job ``a``'s worker exits 3 at once; every other job's trains for a minute."""

    def __init__(self) -> None:
        self.markets = [
            Market("z", "m3.medium", np.full(10_000, 0.01), np.zeros(10_000, bool), 0.0, 1, 0, 0.1)
        ]
        self.procs: list[subprocess.Popen[bytes]] = []

    def minute(self) -> int:
        return 100

    def launch(self, market: int, max_price: float, spec: str) -> LocalInstance:
        code = (
            "import sys; sys.exit(3)"
            if spec.endswith("job-0.json")
            else "import time; time.sleep(60)"
        )
        proc = subprocess.Popen([sys.executable, "-c", code])
        self.procs.append(proc)
        return LocalInstance(market, max_price, proc, 100, time.monotonic(), log_path=self.log)

    def check(self, inst: LocalInstance) -> None:
        pass

    def terminate(self, inst: LocalInstance) -> None:
        inst.proc.kill()
        inst.proc.wait()

    log = "/dev/null"


def test_a_failed_job_stops_the_other_jobs_workers() -> None:
    backend = _Processes()
    jobs = [{"tenant": "t", "candidate": "lenet", "job_id": j} for j in ("a", "b")]
    try:
        with pytest.raises(RuntimeError, match="job a: worker exited 3"):
            run_jobs(jobs, backend, poll_s=0.1)  # type: ignore[arg-type]
        assert len(backend.procs) == 2
        assert all(p.poll() is not None for p in backend.procs)  # b's worker too
    finally:
        for p in backend.procs:
            if p.poll() is None:
                p.kill()
                p.wait()
