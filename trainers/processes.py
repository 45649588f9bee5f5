"""Ending child processes: SIGTERM to all, one deadline for all, then SIGKILL.

Used by every part that ends processes it started on a Ctrl-C or a change of plan: the rank
processes of a trial stage (`trainers.elastic.stop_ranks`), the Prefect servers started early
(`tasks.prefect_start`) and Prefect's own temporary server (`tenantml.cli.service.end_now`).
It lives in the lowest layer that starts processes, so that each of them can import it; it
imports nothing of ours and no framework, and is safe in a signal handler.
"""

from __future__ import annotations

import subprocess
import time
from collections.abc import Iterable
from typing import Any

__all__ = ["end_processes"]


def end_processes(procs: Iterable[subprocess.Popen[Any] | None], timeout_s: float) -> None:
    """Send SIGTERM to each of `procs` still running (``None`` entries are skipped), wait for
    them until one deadline `timeout_s` from now (not `timeout_s` each), then SIGKILL and reap
    those still running. Returns once every one of them has ended."""
    running = [p for p in procs if p is not None and p.poll() is None]
    for proc in running:
        proc.terminate()
    deadline = time.monotonic() + timeout_s
    for proc in running:
        try:
            proc.wait(timeout=max(deadline - time.monotonic(), 0.0))
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait()
