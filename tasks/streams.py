"""Standard streams that outlive their reader: a job must not fail because its worker died.

A process worker reads a flow run's stdout and stderr through pipes. When the worker is killed
(a node's agent restarted, `tenantml chaos`'s kill-worker), its flow runs go on in sessions of
their own, but their pipes have no reader left, and the next write that reaches one fails with
``BrokenPipeError``. Bounded chaos runs of 2026-11-29 showed two ways this ended jobs, in
their runs' Prefect logs:

* MLflow prints a run's URL to stdout when it ends it (``MlflowClient.set_terminated``): a job
  that had trained to the end failed there, and so did each of its flow's retries, in the same
  process with the same dead pipes;
* Prefect's console log handler (rich) turns a broken pipe into ``SystemExit(1)``: any log line
  of the run (its start, a task's end, a ``print``) crashed it.

`outlive_lost_output` points such a stream's file descriptor at ``/dev/null`` as soon as its
reader goes: a daemon thread waits (``poll``) for the error the kernel reports on a pipe whose
reading end has closed, so whoever holds the stream (Python's ``sys.stdout``, a log handler
made before) then writes into ``/dev/null``. A write through ``sys.stdout`` or ``sys.stderr``
that races the thread (in the moment between the reader's death and the swap) is caught too:
they are wrapped. One through a handler made before (Prefect's console handler holds the
stream it was made with) is not, in that moment. What the process prints after its reader
died is lost, as it would be anyway; its job is not.

Only for a flow-run process (a warm run's child, `flows.train` in a process a worker started):
in the embedded mode the `train` flow runs in threads of the user's own process, whose streams
are the user's to lose.
"""

from __future__ import annotations

import os
import select
import stat
import sys
import threading
from typing import Any, TextIO

__all__ = ["outlive_lost_output"]

_STD_FDS = (1, 2)
_started = threading.Lock()
_watching: set[int] = set()


def _to_devnull(fd: int) -> None:
    null = os.open(os.devnull, os.O_WRONLY)
    try:
        os.dup2(null, fd)
    finally:
        os.close(null)


def _is_pipe(fd: int) -> bool:
    try:
        mode = os.fstat(fd).st_mode
    except OSError:
        return False
    return stat.S_ISFIFO(mode) or stat.S_ISSOCK(mode)


def _watch(fds: list[int]) -> None:
    """Until each of `fds` (pipe write ends) has lost its reader: then point it at /dev/null.
    ``poll`` reports POLLERR on a pipe whose reading end closed (POLLHUP on a socket's);
    registered for no event, it waits for nothing else."""
    poller = select.poll()
    for fd in fds:
        poller.register(fd, 0)
    left = set(fds)
    while left:
        for fd, _event in poller.poll():
            _to_devnull(fd)
            poller.unregister(fd)
            left.discard(fd)


class _Outliving:
    """A text stream (`stream`, e.g. ``sys.stdout``) whose write or flush that finds its pipe
    broken (before the watcher has swapped it) points the descriptor at /dev/null and is done
    again there."""

    def __init__(self, stream: TextIO) -> None:
        self._stream = stream

    def write(self, text: str) -> int:
        try:
            return self._stream.write(text)
        except BrokenPipeError:
            _to_devnull(self._stream.fileno())
            return self._stream.write(text)  # buffered: what the dead pipe refused goes too

    def flush(self) -> None:
        try:
            self._stream.flush()
        except BrokenPipeError:
            _to_devnull(self._stream.fileno())
            self._stream.flush()

    def __getattr__(self, name: str) -> Any:  # fileno, isatty, encoding, buffer, ...
        return getattr(self._stream, name)


def outlive_lost_output() -> None:
    """Make this process's stdout and stderr (descriptors 1 and 2 where they are pipes, and
    ``sys.stdout`` and ``sys.stderr`` where they write to those) survive the death of their
    reader (see the module docstring); idempotent. A terminal or a file is left alone."""
    with _started:
        fds = [fd for fd in _STD_FDS if fd not in _watching and _is_pipe(fd)]
        if fds:
            _watching.update(fds)
            threading.Thread(target=_watch, args=(fds,), daemon=True, name="outlive-output").start()
        watched = set(_watching)
    for name in ("stdout", "stderr"):
        stream = getattr(sys, name)
        if stream is None or isinstance(stream, _Outliving):
            continue
        try:
            fd = stream.fileno()
        except (AttributeError, OSError, ValueError):  # not backed by a descriptor (a test's)
            continue
        if fd in watched:
            setattr(sys, name, _Outliving(stream))
