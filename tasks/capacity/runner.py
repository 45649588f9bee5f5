"""SpotTune's provisioning loop over a capacity backend (shared/papers/004, Alg. 1 lines 15-46):
every waiting job goes to the instance GETBESTINST picks (:func:`policy.spot.best_instance`);
a job whose worker stopped on a revocation notice (exit 75, checkpoint written) or was revoked
goes back to the queue and resumes from its checkpoint on the next instance; a job on the same
instance for an hour is re-deployed (the first-hour refund rule makes that pay).
"""

from __future__ import annotations

import json
import os
import tempfile
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import Any

import numpy as np

from policy.spot import Market, best_instance
from tasks.capacity._local import LocalBackend, LocalInstance
from trainers.preemption import PREEMPTED_EXIT

__all__ = ["Attempt", "JobReport", "run_jobs"]


@dataclass
class Attempt:
    """One worker run of a job: where, how it ended and what the worker reported."""

    market: str
    exit_code: int | None
    noticed: bool
    revoked: bool
    wall_s: float
    report: dict[str, Any] = field(default_factory=dict)


@dataclass
class JobReport:
    name: str
    finished: bool = False
    attempts: list[Attempt] = field(default_factory=list)

    @property
    def lost_steps(self) -> int:
        """Steps an attempt reported done that the next attempt did not start from (work lost
        between the last checkpoint and the interruption)."""
        done = [a.report for a in self.attempts if "steps" in a.report]
        return sum(
            max(0, int(a["steps"]) - int(b["start_steps"]))
            for a, b in zip(done, done[1:], strict=False)
        )

    @property
    def hard_kills(self) -> int:
        """Attempts that ended without a report (revoked before they could answer)."""
        return sum(1 for a in self.attempts if not a.report)


def run_jobs(
    jobs: Sequence[dict[str, Any]],
    backend: LocalBackend,
    *,
    seconds_per_step: Sequence[float] | None = None,
    revocation: Callable[[Market, int, float], float] | None = None,
    max_price_delta: float | None = None,
    max_attempts: int = 50,
    timeout_s: float = 1800.0,
    poll_s: float = 0.1,
    seed: int = 0,
) -> list[JobReport]:
    """Run every job (a `trainers.TrainJob` as a dict) to completion on ``backend``.

    ``max_price_delta``: fixed maximum price above the market (default GETBESTINST's random
    ``U(1e-5, 0.2)``); ``seconds_per_step``: the speed matrix row M[inst] (default C0 / CPUs).
    """
    rng = np.random.default_rng(seed)
    markets = backend.markets
    sps = list(seconds_per_step or [1.0 / max(1, m.cpus) for m in markets])
    rev = revocation or (lambda m, t, b: 0.0)
    tmp = tempfile.mkdtemp(prefix="tenantml-spot-")
    reports = [JobReport(str(j.get("job_id") or i)) for i, j in enumerate(jobs)]
    specs = []
    for i, j in enumerate(jobs):
        path = os.path.join(tmp, f"job-{i}.json")
        with open(path, "w") as f:
            json.dump({"job": j}, f)
        specs.append(path)
    waiting = list(range(len(jobs)))
    running: dict[int, LocalInstance] = {}
    deadline = time.monotonic() + timeout_s
    try:
        while waiting or running:
            if time.monotonic() > deadline:
                raise TimeoutError(f"spot jobs not done in {timeout_s:g} s")
            for i in waiting:
                t = backend.minute()
                mk, max_price, _ = best_instance(markets, t, sps, rev, rng)
                if max_price_delta is not None:
                    max_price = float(markets[mk].prices[t]) + max_price_delta
                result = specs[i] + ".result"
                if os.path.exists(result):
                    os.remove(result)
                running[i] = backend.launch(mk, max_price, specs[i])
            waiting = []
            for i, inst in list(running.items()):
                backend.check(inst)
                code = inst.proc.poll()
                hour = (backend.minute() - inst.launched_minute) >= 60
                if code is None and hour and inst.noticed_at is None:
                    inst.proc.send_signal(15)  # Alg. 1 l. 31-34: checkpoint, shut down, re-deploy
                    inst.noticed_at = time.monotonic()
                    inst.extra["hourly"] = True
                    continue
                if code is None:
                    continue
                report: dict[str, Any] = {}
                if os.path.exists(specs[i] + ".result"):
                    with open(specs[i] + ".result") as f:
                        report = json.load(f)
                m = markets[inst.market]
                reports[i].attempts.append(
                    Attempt(
                        m.name,
                        code,
                        inst.noticed_at is not None,
                        inst.revoked,
                        time.monotonic() - inst.launched_at,
                        report,
                    )
                )
                del running[i]
                if code == 0:
                    reports[i].finished = True
                elif len(reports[i].attempts) >= max_attempts:
                    raise RuntimeError(
                        f"job {reports[i].name} failed {max_attempts} times; last exit {code}, "
                        f"log {inst.log_path}"
                    )
                elif code != PREEMPTED_EXIT and inst.noticed_at is None and not report:
                    with open(inst.log_path) as f:
                        tail = f.read()[-1500:]
                    raise RuntimeError(f"job {reports[i].name}: worker exited {code}:\n{tail}")
                else:
                    waiting.append(i)
            time.sleep(poll_s)
    except BaseException:  # a timeout, a failed job, Ctrl-C: no other job's worker left running
        for inst in running.values():
            backend.terminate(inst)
        raise
    return reports
