"""`trainers.processes.end_processes`: SIGTERM to all, one deadline, SIGKILL to the rest."""

from __future__ import annotations

import signal
import subprocess
import sys
from typing import Any

from trainers.processes import REAP_S, end_processes

# a child that says it is ready once it ignores SIGTERM (before that, a SIGTERM would end it)
_IGNORES_TERM = (
    "import signal, sys, time\nsignal.signal(signal.SIGTERM, signal.SIG_IGN)\n"
    "print('ready', flush=True)\ntime.sleep(60)\n"
)


def _started(code: str) -> subprocess.Popen[str]:
    proc = subprocess.Popen([sys.executable, "-c", code], stdout=subprocess.PIPE, text=True)
    assert proc.stdout is not None and proc.stdout.readline() == "ready\n"
    return proc


def test_every_process_ends_the_obedient_by_sigterm_the_others_by_sigkill() -> None:
    obedient = _started("import time\nprint('ready', flush=True)\ntime.sleep(60)\n")
    stubborn = [_started(_IGNORES_TERM) for _ in range(2)]
    ended = subprocess.Popen([sys.executable, "-c", "pass"])
    ended.wait()
    end_processes([None, ended, obedient, *stubborn], timeout_s=0.5)
    assert obedient.returncode == -signal.SIGTERM
    assert [p.returncode for p in stubborn] == [-signal.SIGKILL] * 2
    assert ended.returncode == 0  # already ended: left as it was


def test_one_deadline_for_all_not_one_each() -> None:
    """The second stubborn process is given what is left of the deadline the first one used
    up: nothing (before, a Ctrl-C waited 1 s per Prefect server)."""
    stubborn = [_started(_IGNORES_TERM) for _ in range(2)]
    given: list[tuple[int, float | None]] = []
    for k, proc in enumerate(stubborn):
        real = proc.wait

        def spy(timeout: float | None = None, k: int = k, real: Any = real) -> int:
            given.append((k, timeout))
            return int(real(timeout=timeout))

        proc.wait = spy  # type: ignore[method-assign]
    end_processes(stubborn, timeout_s=0.5)
    waits = [t for k, t in given if t != REAP_S]  # leave out the reaping after SIGKILL
    assert [k for k, t in given if t != REAP_S] == [0, 1]
    assert waits[0] is not None and 0 < waits[0] <= 0.5 and waits[1] == 0.0, given
    assert [p.returncode for p in stubborn] == [-signal.SIGKILL] * 2
