"""`trainers.processes.end_processes`: SIGTERM to all, one deadline, SIGKILL to the rest."""

from __future__ import annotations

import signal
import subprocess
import sys

from trainers.processes import end_processes

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
