"""A node crash: a worker and the job it started die together, so nobody reports the job's end.

Without `infra/prefect-automations.yaml` its flow run stays RUNNING forever and the scheduler
waits on it (a full `tenantml chaos` run hung in its drain this way). With it, the Prefect server
crashes a run of ours whose heartbeat stopped for 120 s; a run that ended is left alone.
Real servers on loopback (`tenantml up`), real processes, SIGKILL.
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
import urllib.request
from collections.abc import Iterator
from pathlib import Path

import pytest

from tenantml.ops.servers import down, flow_processes, up

pytestmark = [pytest.mark.integration, pytest.mark.slow, pytest.mark.full, pytest.mark.timeout(900)]

_RUN = """
import json, sys
from tasks.settings import Settings
Settings.load().apply()  # before Prefect is imported
from prefect.deployments import run_deployment
from tasks._service import JobSpec
from tenantml.client import Client
Client().submit("wine", "{input: {[Tensor[13]], []}, output: {[Tensor[3]], []}}")
spec = JobSpec("wine", "logistic_regression", 0, sys.argv[1], 0, "manual",
               sleep_s=float(sys.argv[2]))
print(run_deployment("train/train", parameters={"spec": spec.params()}, timeout=0).id)
"""


@pytest.fixture(scope="module")
def home(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Path]:
    root = tmp_path_factory.mktemp("zombies")
    up(root, slots=1)
    try:
        yield root
    finally:
        down(root)


def _start(home: Path, job_id: str, sleep_s: float) -> str:
    env = {**os.environ, "TENANTML_HOME": str(home)}
    out = subprocess.run([sys.executable, "-c", _RUN, job_id, str(sleep_s)], env=env,
                         capture_output=True, text=True, timeout=300)  # fmt: skip
    assert out.returncode == 0, out.stderr[-3000:]
    return out.stdout.strip().splitlines()[-1]


def _state(home: Path, flow_run_id: str) -> dict[str, str]:
    api = json.loads((home / "servers.json").read_text())["prefect_api_url"]
    with urllib.request.urlopen(f"{api}/flow_runs/{flow_run_id}", timeout=30) as resp:
        state = json.loads(resp.read())["state"]
    return {"type": state["type"], "message": state.get("message") or ""}


def _wait(home: Path, flow_run_id: str, types: set[str], within_s: float) -> dict[str, str]:
    deadline = time.monotonic() + within_s
    while True:
        state = _state(home, flow_run_id)
        if state["type"] in types or time.monotonic() > deadline:
            return state
        time.sleep(1.0)


def test_a_run_whose_worker_and_process_died_is_crashed_and_a_finished_one_is_not(
    home: Path,
) -> None:
    finished = _start(home, "sleep-short", 1.0)
    assert _wait(home, finished, {"COMPLETED"}, 300)["type"] == "COMPLETED"

    zombie = _start(home, "sleep-long", 900.0)
    assert _wait(home, zombie, {"RUNNING"}, 300)["type"] == "RUNNING"
    deadline = time.monotonic() + 120
    while not (procs := flow_processes(PREFECT__FLOW_RUN_ID=zombie)):
        assert time.monotonic() < deadline, "the run's process never showed"
        time.sleep(0.5)
    worker = json.loads((home / "servers" / "pids.json").read_text())["worker-0"]
    os.kill(worker, signal.SIGKILL)  # the node dies: its worker first...
    for pid in procs:
        os.kill(pid, signal.SIGKILL)  # ...and the job it had started
    killed = time.monotonic()
    assert _state(home, zombie)["type"] == "RUNNING"  # nobody is left to say otherwise

    state = _wait(home, zombie, {"CRASHED", "COMPLETED", "FAILED"}, 360)
    assert state["type"] == "CRASHED", state
    assert "no heartbeat for 120 s" in state["message"], state
    assert time.monotonic() - killed >= 60  # by the heartbeat rule, not by anything sooner
    assert _state(home, finished)["type"] == "COMPLETED"  # an ended run is left alone


def test_up_replaces_an_automation_an_older_tenantml_made(home: Path) -> None:
    """A home made before the rule started at Running keeps its old automation in Prefect's
    database; the next `up` must replace it, not keep it beside or instead of the new one."""
    from tenantml.ops.servers import _ensure_automations, post_json

    api = json.loads((home / "servers.json").read_text())["prefect_api_url"]
    (ours,) = post_json(f"{api}/automations/filter", {})
    old = {k: ours[k] for k in ("name", "description", "enabled", "actions", "trigger")}
    old["trigger"] = {**ours["trigger"], "after": ["prefect.flow-run.heartbeat"]}
    del old["trigger"]["id"]
    post_json(f"{api}/automations/", old)
    assert len(post_json(f"{api}/automations/filter", {})) == 2

    _ensure_automations(api, dict(os.environ), 60)
    (kept,) = post_json(f"{api}/automations/filter", {})
    assert kept["id"] == ours["id"]
    assert "prefect.flow-run.Running" in kept["trigger"]["after"]


def test_a_run_its_worker_left_pending_is_crashed(home: Path) -> None:
    """A worker killed between marking a run Pending ("Submitting") and starting its process
    (found by `tenantml chaos --nodes 2`): no process ever beats, so before `up`'s rule started
    its clock at Pending the run stayed PENDING and the scheduler's drain waited on it."""
    from tenantml.ops.servers import post_json

    worker = json.loads((home / "servers" / "pids.json").read_text())["worker-0"]
    try:
        os.kill(worker, signal.SIGKILL)  # no worker takes the run (the test above killed it)
    except ProcessLookupError:
        pass
    run = _start(home, "left-pending", 1.0)
    api = json.loads((home / "servers.json").read_text())["prefect_api_url"]
    # The worker's last word before it died: the run is being submitted.
    post_json(f"{api}/flow_runs/{run}/set_state",
              {"state": {"type": "PENDING", "name": "Submitting"}, "force": True})  # fmt: skip
    left = time.monotonic()
    assert _state(home, run)["type"] == "PENDING"

    state = _wait(home, run, {"CRASHED", "COMPLETED", "FAILED"}, 360)
    assert state["type"] == "CRASHED", state
    assert "no heartbeat for 120 s" in state["message"], state
    assert time.monotonic() - left >= 60  # by the rule's window, not by anything sooner
