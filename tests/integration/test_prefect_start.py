"""The embedded service's Prefect server started early (`tasks.prefect_start`), for real: the
first new home migrates and leaves the template, the next new home starts from a copy of it and
its server answers; several homes in one process each get their own server and their own runs."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

pytestmark = pytest.mark.timeout(300)

_START = """
import json, sys, time
from prefect import flow, task
from prefect.client.orchestration import get_client
from prefect.events.worker import EventsWorker
from tenantml.client import Client

@task
def step():
    return 1

@flow
def job():  # a flow and a task: both report to the API (a task's run only through events)
    return step()

def serve(home):
    c = Client(home)
    c.start_prefect()
    c._prefect_start.wait()
    Client(home)  # the settings applied again: Prefect reads its settings again
    again = Client(home)
    again.start_prefect()  # a second `run` in the same process: the same server
    same = again._prefect_start is c._prefect_start
    again._prefect_start.wait()
    from prefect.settings import PREFECT_FLOWS_HEARTBEAT_FREQUENCY, temporary_settings
    with temporary_settings(updates={PREFECT_FLOWS_HEARTBEAT_FREQUENCY: None}):
        Client(home)  # applied again from a settings context of its own, as a job's thread
    job()
    with get_client(sync_client=True) as prefect:
        runs = len(prefect.read_flow_runs())
        ours = str(prefect.api_url).startswith(c._prefect_start.api_url)
    return c._prefect_start, {
        "seeded": c._prefect_start.seeded, "error": repr(c._prefect_start.error),
        "flow_runs": runs, "pointed_at": c._prefect_start.pointed_at, "ours": ours,
        "same": same, "prefect_server": "prefect.server.api.server" in sys.modules}

starts, results = zip(*(serve(home) for home in sys.argv[1:]))
EventsWorker.drain_all(timeout=10, at_exit=False)
deadline = time.monotonic() + 20  # the server records a task run from its events, in a while
with get_client(sync_client=True) as prefect:
    while not (task_runs := len(prefect.read_task_runs())) and time.monotonic() < deadline:
        time.sleep(0.2)
print(json.dumps({"homes": results, "last_task_runs": task_runs,
                  "alive": [start.alive for start in starts]}))
"""
# what every start should print, but the first one's "seeded"
_EXPECTED = {
    "error": "None",
    "flow_runs": 1,
    "pointed_at": True,
    "ours": True,
    "same": True,
    "prefect_server": False,  # Prefect's own server module (2-3 s) not imported
}


def _start(cache: Path, *homes: Path) -> dict[str, Any]:
    """`_START` in a new process: `homes` served in turn."""
    import json

    env = {**os.environ, "XDG_CACHE_HOME": str(cache), "TENANTML_HOME": str(homes[0])}
    env.pop("PREFECT_API_URL", None)
    out = subprocess.run(
        [sys.executable, "-c", _START, *map(str, homes)],
        env=env, capture_output=True, text=True, check=True, timeout=240,
    )  # fmt: skip
    result: dict[str, Any] = json.loads(out.stdout.strip().splitlines()[-1])
    return result


# Its first start migrates a database from nothing in an empty cache, on purpose: most of its
# 69 s. A start-up path, not a main one: `make test-full`.
@pytest.mark.full
def test_the_second_new_home_starts_from_the_first_ones_migrated_database(
    tmp_path: Path,
) -> None:
    cache = tmp_path / "cache"
    first = _start(cache, tmp_path / "a")
    assert first["homes"] == [{"seeded": False, **_EXPECTED}]
    assert first["last_task_runs"] == 1 and first["alive"] == [True]
    # no block catalogue registered (`tasks.prefect_start.NO_BLOCK_CATALOGUE`)
    assert _rows(tmp_path / "a", "block_type") == 0
    templates = list((cache / "tenantml").glob("prefect-*.db"))
    assert len(templates) == 1, templates
    # two more homes in one process (an SDK user's, a test's): Prefect follows the second, whose
    # task run (sent as events, by a worker Prefect keys without the URL) reaches its own server;
    # the first one's server, no longer used, is stopped
    then = _start(cache, tmp_path / "b", tmp_path / "c")
    assert then["homes"] == [{"seeded": True, **_EXPECTED}] * 2
    assert then["last_task_runs"] == 1 and then["alive"] == [False, True]
    # ...and the first home's task run, still in Prefect's events worker at the change, reached
    # the first home's server before it stopped
    assert _rows(tmp_path / "b", "task_run") == 1


def _rows(home: Path, table: str) -> int:
    import sqlite3

    with sqlite3.connect(home / "prefect" / "prefect.db") as db:
        (n,) = db.execute(f"SELECT COUNT(*) FROM {table}").fetchone()
    return int(n)


_ABANDON = """
import sys
from tenantml.client import Client

c = Client(sys.argv[1])
c.start_prefect()
print(c._prefect_start.process.pid, flush=True)
"""


def test_a_server_started_early_and_never_used_ends_with_its_process(tmp_path: Path) -> None:
    """A command that started the server and exited before any flow (an error, a user's
    Ctrl-C before `run`) leaves no uvicorn behind."""
    import time

    env = {**os.environ, "XDG_CACHE_HOME": str(tmp_path / "cache"),
           "TENANTML_HOME": str(tmp_path / "h")}  # fmt: skip
    env.pop("PREFECT_API_URL", None)
    out = subprocess.run([sys.executable, "-c", _ABANDON, str(tmp_path / "h")], env=env,
                         capture_output=True, text=True, check=True, timeout=120)  # fmt: skip
    pid = int(out.stdout.split()[-1])
    deadline = time.monotonic() + 10
    while _alive(pid) and time.monotonic() < deadline:
        time.sleep(0.1)
    assert not _alive(pid), f"the early server (pid {pid}) outlived its process"


def _alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    try:  # a zombie (ours to reap only if a child of ours: it is not) counts as ended
        return Path(f"/proc/{pid}/status").read_text().find("State:\tZ") < 0
    except OSError:
        return False
