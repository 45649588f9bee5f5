"""Real servers on loopback for tests: start on a free port, wait until ready, stop by PID
(the helpers of `tenantml.ops.servers`, which `tenantml up` uses too)."""

from __future__ import annotations

import os
import subprocess
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path

from tenantml.ops.servers import executable, free_port, stop_pid, wait_http


@dataclass(frozen=True)
class S3Server:
    endpoint_url: str
    pid: int


@contextmanager
def s3_server(log_dir: Path) -> Iterator[S3Server]:
    """An S3-compatible server (moto, in memory) on 127.0.0.1; credentials are dummies."""
    port = free_port()
    log = open(log_dir / "moto.log", "wb")  # noqa: SIM115
    proc = subprocess.Popen(
        [executable("moto_server"), "-H", "127.0.0.1", "-p", str(port)],
        stdout=log,
        stderr=subprocess.STDOUT,
        start_new_session=True,
    )
    try:
        url = f"http://127.0.0.1:{port}"
        wait_http(url, 30, "the S3 server (moto)", proc.pid, log_dir / "moto.log")
        yield S3Server(url, proc.pid)
    finally:
        stop_pid(proc.pid)
        log.close()


@dataclass(frozen=True)
class PrefectServer:
    api_url: str
    env: dict[str, str]  # what a Prefect client process needs to reach it
    pid: int


@contextmanager
def prefect_server(home: Path) -> Iterator[PrefectServer]:
    """A Prefect server (SQLite under `home`) on 127.0.0.1, its log in `home`."""
    port = free_port()
    api = f"http://127.0.0.1:{port}/api"
    env = {
        "PREFECT_HOME": str(home / "prefect"),
        "PREFECT_API_URL": api,
        "PREFECT_SERVER_ANALYTICS_ENABLED": "false",
        "DO_NOT_TRACK": "1",
    }
    log = open(home / "prefect.log", "wb")  # noqa: SIM115
    proc = subprocess.Popen(
        [executable("prefect"), "server", "start", "--host", "127.0.0.1", "--port", str(port)],
        stdout=log,
        stderr=subprocess.STDOUT,
        env={**os.environ, **env},
        start_new_session=True,
    )
    try:
        wait_http(f"{api}/health", 120, "the Prefect server", proc.pid, home / "prefect.log")
        yield PrefectServer(api, env, proc.pid)
    finally:
        stop_pid(proc.pid)
        log.close()
