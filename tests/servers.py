"""Real servers on loopback for tests: start on a free port, wait until ready, stop by PID."""

from __future__ import annotations

import os
import shutil
import signal
import socket
import subprocess
import sys
import time
import urllib.request
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def wait_http(url: str, timeout: float, proc: subprocess.Popen[bytes] | None = None) -> None:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if proc is not None and proc.poll() is not None:
            raise RuntimeError(f"server for {url} exited with {proc.returncode}")
        try:
            with urllib.request.urlopen(url, timeout=2):
                return
        except OSError:
            time.sleep(0.2)
    raise TimeoutError(f"{url} not ready after {timeout} s")


def stop_pid(proc: subprocess.Popen[bytes], timeout: float = 10) -> None:
    """SIGTERM the process group by PID, then SIGKILL if it lingers."""
    if proc.poll() is not None:
        return
    try:
        os.killpg(proc.pid, signal.SIGTERM)
        proc.wait(timeout=timeout)
    except (ProcessLookupError, subprocess.TimeoutExpired):
        try:
            os.killpg(proc.pid, signal.SIGKILL)
        except ProcessLookupError:
            pass
        proc.wait(timeout=timeout)


@dataclass(frozen=True)
class S3Server:
    endpoint_url: str
    pid: int


def _moto_cmd() -> list[str]:
    exe = Path(sys.executable).with_name("moto_server")
    if exe.exists():
        return [str(exe)]
    found = shutil.which("moto_server")
    if found is None:
        raise RuntimeError("moto_server not found: pip install 'moto[server]' (in the dev extra)")
    return [found]


@contextmanager
def s3_server(log_dir: Path) -> Iterator[S3Server]:
    """An S3-compatible server (moto, in memory) on 127.0.0.1; credentials are dummies."""
    port = free_port()
    log = open(log_dir / "moto.log", "wb")  # noqa: SIM115
    proc = subprocess.Popen(
        [*_moto_cmd(), "-H", "127.0.0.1", "-p", str(port)],
        stdout=log,
        stderr=subprocess.STDOUT,
        start_new_session=True,
    )
    try:
        url = f"http://127.0.0.1:{port}"
        wait_http(url, 30, proc)
        yield S3Server(url, proc.pid)
    finally:
        stop_pid(proc)
        log.close()
