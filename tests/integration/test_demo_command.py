"""`tenantml demo` (what `make demo` runs) end to end in a fresh home: bounded by ticks or a
wall-clock budget, run again on its own earlier jobs, and stopped by Ctrl-C with one line. Apart
from `test_embedded_service.py`, whose file ran for 10-14 min alone on one test worker."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
from pathlib import Path

import pytest

from tests.signals import STOPPED, signal_after_dispatch

pytestmark = pytest.mark.slow


def test_demo_command_runs_bounded(tmp_path: Path) -> None:
    """`make demo` runs `tenantml demo`: here with 3 ticks in a fresh home; run again there, it
    says it goes on from the earlier jobs and keeps to its ``--budget-s`` (a second `make demo`
    went on with the CNNs for 16 ticks: 399 s)."""

    def demo(*args: str) -> subprocess.CompletedProcess[str]:
        return subprocess.run(
            [sys.executable, "-m", "tenantml.cli", "demo", "--max-epochs", "1",
             "--home", str(tmp_path / "demo"), *args],
            capture_output=True, text=True, timeout=600, env={**os.environ, "COLUMNS": "120"},
        )  # fmt: skip

    out = demo("--ticks", "3")
    assert out.returncode == 0, out.stderr[-3000:]
    for tenant in ("digits", "breast-cancer", "wine", "japanese-vowels"):
        assert tenant in out.stdout
    assert "ticks," in out.stdout and "mlflow ui --backend-store-uri sqlite:///" in out.stdout
    assert "earlier demo" not in out.stdout
    again = demo("--budget-s", "0.5")  # no tick starts after half a second
    assert again.returncode == 0, again.stderr[-3000:]
    assert "jobs from an earlier demo: the scheduler goes on from them for 0.5 s" in again.stdout
    bad = demo("--budget-s", "0")
    assert bad.returncode == 2 and "--budget-s 0.0 is not valid" in bad.stdout + bad.stderr
    ticks = int(again.stdout.split(" ticks, ")[0].split()[-1])
    assert ticks <= 1, again.stdout


def test_ctrl_c_stops_the_demo_with_one_line(tmp_path: Path) -> None:
    """Ctrl-C (SIGINT to the demo's process group) while its jobs train: exit code 130, the one
    line `run` ends with, no traceback, nothing left running. (The demo's scheduler runs in a
    thread; the interpreter shut down around it: Prefect's tracebacks, then a hung process.)"""
    from mlflow.tracking import MlflowClient

    from mlflow_plugin.tracking import job_records, tenant_experiments

    home = tmp_path / "demo"
    client = MlflowClient(f"sqlite:///{home / 'mlflow.db'}")

    def training() -> bool:
        if not (home / "mlflow.db").exists():
            return False
        recs = job_records(client, tenant_experiments(client).values())
        return any(r.status == "RUNNING" for r in recs)

    cmd = [sys.executable, "-m", "tenantml.cli", "demo", "--home", str(home)]
    code, out, err, took = signal_after_dispatch(
        cmd, {**os.environ, "COLUMNS": "120"}, signal.SIGINT, True, ready=training, jobs=0
    )
    print(f"the demo ended {took:.2f} s after Ctrl-C")
    assert code == 130, (out, err[-3000:])
    assert STOPPED.search(out), out
    assert "Traceback" not in err, err[-3000:]
