"""Sending a real signal to a real `tenantml run` and reading how it ended: shared by the
embedded and the server tests."""

from __future__ import annotations

import os
import re
import signal
import subprocess
import threading
import time
from collections.abc import Callable

__all__ = ["STOPPED", "signal_after_dispatch"]

# The one line `tenantml run` ends with when a signal stopped it (tenantml.cli.service).
STOPPED = re.compile(
    r"^stopped by (SIGINT|SIGTERM): (\d+) jobs? in flight; they resume on the next "
    r"`tenantml run`",
    re.M,
)


def signal_after_dispatch(
    cmd: list[str],
    env: dict[str, str],
    sig: signal.Signals,
    to_group: bool,
    ready: Callable[[], bool],
    jobs: int = 2,
) -> tuple[int, str, str, float]:
    """Start `cmd` in a session of its own, read its output until `jobs` jobs were dispatched,
    wait until `ready()` (a job's MLflow run has started), send `sig` to its process group (as
    a terminal's Ctrl-C does) or to it alone, and return its exit code, standard output,
    standard error and the seconds from the signal to its end."""
    proc = subprocess.Popen(cmd, env=env, start_new_session=True, stdout=subprocess.PIPE,
                            stderr=subprocess.PIPE, text=True)  # fmt: skip
    assert proc.stdout is not None and proc.stderr is not None
    stderr: list[str] = []
    reader = threading.Thread(target=lambda: stderr.append(proc.stderr.read()), daemon=True)
    reader.start()
    lines: list[str] = []
    for line in proc.stdout:
        lines.append(line)
        if sum(": dispatched " in seen for seen in lines) >= jobs:
            break
    try:
        deadline = time.monotonic() + 120
        while proc.poll() is None and not ready() and time.monotonic() < deadline:
            time.sleep(0.2)
        assert proc.poll() is None, f"the scheduler ended before {jobs} jobs ran: {lines}"
        sent = time.monotonic()
        (os.killpg if to_group else os.kill)(proc.pid, sig)
        rest = proc.stdout.read()
        code = proc.wait(timeout=120)
        took = time.monotonic() - sent
    finally:
        if proc.poll() is None:
            os.killpg(proc.pid, signal.SIGKILL)
            proc.wait()
    reader.join(timeout=30)
    return code, "".join(lines) + rest, "".join(stderr), took
