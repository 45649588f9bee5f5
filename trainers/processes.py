"""Ending child processes: SIGTERM to all, one deadline for all, then SIGKILL.

Used by every part that ends processes it started on a Ctrl-C or a change of plan: the rank
processes of a trial stage (`trainers.elastic.stop_ranks`), the Prefect servers started early
(`tasks.prefect_start`) and Prefect's own temporary server (`tenantml.cli.service.end_now`).
It lives in the lowest layer that starts processes, so that each of them can import it. The
module itself needs only the standard library (importing it runs `trainers/__init__`, tens of
ms, no framework), and it is safe in a signal handler: no wait in it is unbounded.
"""

from __future__ import annotations

import contextlib
import subprocess
import time
from collections.abc import Iterable
from typing import Any

__all__ = ["end_processes"]

#: seconds a process killed with SIGKILL is waited for, to reap it (one in uninterruptible
#: sleep, a GPU being released, takes longer: it is left, and ends on its own)
REAP_S = 1.0


def end_processes(procs: Iterable[subprocess.Popen[Any] | None], timeout_s: float) -> None:
    """Send SIGTERM to each of `procs` still running (``None`` entries are skipped), wait for
    them until one deadline `timeout_s` from now (not `timeout_s` each), then SIGKILL those
    still running and reap them (`REAP_S` at most each)."""
    running = [p for p in procs if p is not None and p.poll() is None]
    for proc in running:
        proc.terminate()
    deadline = time.monotonic() + timeout_s
    for proc in running:
        try:
            proc.wait(timeout=max(deadline - time.monotonic(), 0.0))
        except subprocess.TimeoutExpired:
            proc.kill()
            with contextlib.suppress(subprocess.TimeoutExpired):
                proc.wait(timeout=REAP_S)
