"""SIGTERM taken as Ctrl-C by the commands that end on either with one line (`run`, `demo`,
`bench-live`): until their own handlers are armed, or while they wait on a child service."""

from __future__ import annotations

import signal
import threading
from typing import Any, NoReturn

__all__ = ["interrupt", "sigterm_as_interrupt"]


def interrupt(signum: int, frame: Any) -> NoReturn:
    """A signal handler: KeyboardInterrupt, named after the signal (``"SIGTERM"``)."""
    raise KeyboardInterrupt(signal.Signals(signum).name)


def sigterm_as_interrupt() -> Any:
    """In the main thread, make SIGTERM raise KeyboardInterrupt as Ctrl-C does; returns the
    handler it replaced, for the caller to put back (None in another thread: nothing changed,
    Python lets only the main thread set handlers)."""
    if threading.current_thread() is not threading.main_thread():
        return None
    return signal.signal(signal.SIGTERM, interrupt)
