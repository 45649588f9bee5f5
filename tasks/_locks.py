"""Locks of one home on one machine: a file in ``TENANTML_HOME/locks`` held with ``flock``.

* `home_lock(home, name, holder, refuse)`: hold ``locks/<name>.lock``; the file names its
  holder (the process id, then what it is); ``refuse(pid, who)`` is raised when another
  process holds it. The kernel lets go
  of a lock with its process (a crash, a SIGKILL), so a lock never outlives its holder.
* `scheduler_lock(home)`: one scheduler per home (`SchedulerBusyError` for a second one).
* `holds_lock(home, name)`: whether this process holds it now.

`tasks._seer.request_lock` (one trainer per `tenantml seer run` request) is built on
`home_lock` too. Several machines with one home each are not covered: a lock is this
machine's.
"""

from __future__ import annotations

import fcntl
import os
import sys
from collections.abc import Callable, Iterator
from contextlib import AbstractContextManager, contextmanager
from pathlib import Path

__all__ = ["SchedulerBusyError", "holds_lock", "home_lock", "scheduler_lock"]

#: the lock files this process holds (`home_lock`)
_held: set[Path] = set()


class SchedulerBusyError(ValueError):
    """Another scheduler runs on this home; a ValueError, so a command says it in one line."""


@contextmanager
def home_lock(
    home: Path,
    name: str,
    holder: str,
    refuse: Callable[[str, str], Exception],
) -> Iterator[None]:
    """Hold ``home/locks/<name>.lock`` for the block, the file naming this process and
    `holder`.

    Raises:
        ``refuse(pid, who)``: another process holds it (its process id and what it is, as it
        wrote them; ``"unknown"`` and ``""`` where it wrote nothing).
    """
    path = home / "locks" / f"{name}.lock"
    path.parent.mkdir(parents=True, exist_ok=True)
    # not O_APPEND ("a+"): every write went to the end, and a refused reader, which reads the
    # first line, named the first holder ever
    fd = os.open(path, os.O_RDWR | os.O_CREAT | os.O_CLOEXEC, 0o644)
    try:
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            text = os.pread(fd, 4096, 0).decode(errors="replace")
            pid, _, who = text.strip().partition("\n")
            raise refuse(pid or "unknown", who) from None
        data = f"{os.getpid()}\n{holder}".encode()
        os.pwrite(fd, data, 0)  # one write at 0, then cut to its length: the id is never
        os.ftruncate(fd, len(data))  # missing (a reader between the two may see a longer tail)
        _held.add(path)
        try:
            yield
        finally:
            _held.discard(path)
            fcntl.flock(fd, fcntl.LOCK_UN)
    finally:
        os.close(fd)


def holds_lock(home: Path, name: str) -> bool:
    """Whether this process holds `home`'s lock `name` now (`home_lock`). While it does, no
    other process of this host holds it, whatever its pid namespace (a container sharing the
    home): the kernel keeps one lock per file."""
    return home / "locks" / f"{name}.lock" in _held


def _command() -> str:
    """This process's command line, short, as a refusal names it (``python -m tenantml.cli run
    --ticks 4``, ``python tenantml run``): the program and script by their base names."""
    try:
        words = [
            w.decode(errors="replace")
            for w in Path("/proc/self/cmdline").read_bytes().split(b"\0")
            if w
        ]
    except OSError:  # no /proc: what Python was given
        words = [sys.executable, *sys.argv]
    words = [Path(w).name if "/" in w else w for w in words[:2]] + words[2:]
    text = " ".join(" ".join(words).split())  # one line (a `python -c` script has several)
    return text if len(text) <= 120 else text[:117] + "..."


def scheduler_lock(home: Path) -> AbstractContextManager[None]:
    """Be the one scheduler of `home` for the block: two on one home each decided alone and
    sent jobs for the same free slots.

    Raises:
        SchedulerBusyError: another scheduler holds it (named: process id and command).
    """

    def refuse(pid: str, who: str) -> Exception:
        return SchedulerBusyError(
            f"a scheduler already runs on {home}: process {pid} ({who or 'unknown'}); stop it "
            "(Ctrl-C in its terminal, or `kill` that process) or wait for it to end, then "
            "start this one: two schedulers on one home would each fill the same slots"
        )

    return home_lock(home, "scheduler", _command(), refuse)
