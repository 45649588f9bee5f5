"""Server outages with real servers on loopback: while the scheduler runs jobs on the process
worker pool, the MLflow server and then the Prefect server are stopped (killed by PID) for
`OUTAGE_S` seconds each and started again on the same port. The scheduler says which server is
unreachable and retries with bounded backoff, then finishes every tick; every job is recorded
exactly once; a CLI call during an outage fails within seconds naming the server."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path

import pytest

from tenantml.servers import down, restart, stop, up

pytestmark = [pytest.mark.integration, pytest.mark.slow]
OUTAGE_S = float(os.environ.get("TENANTML_TEST_OUTAGE_S", "30"))


@pytest.fixture(scope="module")
def home(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Path]:
    root = tmp_path_factory.mktemp("outages")
    up(root, slots=1)
    try:
        yield root
    finally:
        down(root)


def _env(home: Path) -> dict[str, str]:
    return {**os.environ, "TENANTML_HOME": str(home), "TENANTML_OUTAGE_PATIENCE_S": "300"}


def _cli(home: Path, *args: str, timeout: float = 120) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, "-m", "tenantml.cli", *args], env=_env(home),
                          capture_output=True, text=True, timeout=timeout)  # fmt: skip


def _records(home: Path) -> list[dict[str, object]]:
    code = (
        "import json\nfrom tenantml.client import Client\n"
        "from mlflow_plugin.tracking import job_records, tenant_experiments\nc = Client()\n"
        "print(json.dumps([r.__dict__ for r in job_records(c.mlflow, "
        "tenant_experiments(c.mlflow).values())]))"
    )
    out = subprocess.run([sys.executable, "-c", code], env=_env(home), capture_output=True,
                         text=True, timeout=120)  # fmt: skip
    assert out.returncode == 0, out.stderr[-2000:]
    return list(json.loads(out.stdout.strip().splitlines()[-1]))


def _outage(home: Path, name: str, what: str) -> float:
    """Stop `name` for OUTAGE_S; a CLI call meanwhile must fail fast naming `what`. Returns the
    CLI call's seconds."""
    stop(home, name)
    t0 = time.monotonic()
    res = _cli(home, "tenants")
    cli_s = time.monotonic() - t0
    assert res.returncode == 1, (res.stdout, res.stderr)
    assert what in res.stderr and "not reachable" in res.stderr, res.stderr
    time.sleep(max(0.0, OUTAGE_S - (time.monotonic() - t0)))
    restart(home, name)
    return cli_s


def test_scheduler_rides_out_mlflow_and_prefect_outages(home: Path) -> None:
    code = (
        "from tenantml.client import Client\nfrom tenantml import datasets\nc = Client()\n"
        "for n in ('wine', 'breast_cancer'):\n"
        "    d = datasets.load(n)\n    c.submit(n.replace('_', '-'), d.schema)\n"
        "    c.feed(n.replace('_', '-'), d.inputs, d.labels)\n"
    )
    subprocess.run([sys.executable, "-c", code], env=_env(home), check=True, timeout=120)
    ticks = 5
    log = home / "scheduler.log"
    with open(log, "w") as out:
        proc = subprocess.Popen(
            [sys.executable, "-m", "tenantml.cli", "run", "--slots", "1", "--ticks", str(ticks),
             "--policy", "roundrobin", "--max-epochs", "2"],
            env=_env(home), stdout=out, stderr=subprocess.STDOUT, start_new_session=True,
        )  # fmt: skip
        try:
            deadline = time.monotonic() + 300
            while time.monotonic() < deadline and proc.poll() is None:
                if any(r["status"] == "FINISHED" for r in _records(home)):
                    break
                time.sleep(1)
            cli_mlflow = _outage(home, "mlflow", "the MLflow server")
            cli_prefect = _outage(home, "prefect", "the Prefect server")
            proc.wait(timeout=600)
        finally:
            if proc.poll() is None:
                os.killpg(proc.pid, 9)
    text = log.read_text()
    assert proc.returncode == 0, text[-4000:]
    assert f"{ticks} ticks" in text, text[-3000:]
    assert "the MLflow server at http://127.0.0.1" in text and "is unreachable; retry" in text, (
        text[-4000:]
    )
    recs = _records(home)
    keys = [(r["tenant"], r["job_id"]) for r in recs]
    assert len(keys) == len(set(keys)) == ticks, keys  # one run per job: none lost, none twice
    assert all(r["status"] == "FINISHED" for r in recs), [(k, r["status"]) for k, r in
                                                          zip(keys, recs, strict=True)]  # fmt: skip
    assert cli_mlflow < 15 and cli_prefect < 15, (cli_mlflow, cli_prefect)
