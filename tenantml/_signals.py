"""SIGTERM taken as Ctrl-C by the commands that end on either with one line (`run`, `demo`,
`bench-live`): until their own handlers are armed, or while they wait on a child service."""

from __future__ import annotations

import signal
import threading
from typing import Any, NoReturn

__all__ = ["announce", "announced", "interrupt", "received", "reset", "sigterm_as_interrupt"]

#: the signals `interrupt` turned into KeyboardInterrupt in this process, in order
received: list[str] = []
_announced: list[bool] = [False]


def interrupt(signum: int, frame: Any) -> NoReturn:
    """A signal handler: KeyboardInterrupt, named after the signal (``"SIGTERM"``), and the
    signal recorded in `received`."""
    name = signal.Signals(signum).name
    received.append(name)
    raise KeyboardInterrupt(name)


def announce() -> None:
    """A command has printed its own line for the stop (`tenantml run`'s): the entry point
    prints none more."""
    _announced[0] = True


def announced() -> bool:
    return _announced[0]


def reset() -> None:
    """A new command in this process: no signal received, nothing announced."""
    received.clear()
    _announced[0] = False


def sigterm_as_interrupt() -> Any:
    """In the main thread, make SIGTERM raise KeyboardInterrupt as Ctrl-C does; returns the
    handler it replaced, for the caller to put back (None in another thread: nothing changed,
    Python lets only the main thread set handlers)."""
    if threading.current_thread() is not threading.main_thread():
        return None
    return signal.signal(signal.SIGTERM, interrupt)
