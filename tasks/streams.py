"""Standard streams that outlive their reader: a job must not fail because its worker died.

A process worker reads a flow run's stdout and stderr through pipes. When the worker is killed
(a node's agent restarted, `tenantml chaos`'s kill-worker), its flow runs go on in sessions of
their own, but their pipes have no reader left: the next write that reaches the pipe fails with
``BrokenPipeError``. MLflow writes to stdout whenever a run ends (its URL, in
``MlflowClient.set_terminated``), so a job that trained to the end failed there, and so did each
of its flow's retries, in the same process with the same dead pipes. A bounded chaos run of
2026-11-29 shows it (``Task run failed with exception: BrokenPipeError(32, 'Broken pipe')`` in
``JobRun.end``).

`outlive_lost_output` wraps ``sys.stdout`` and ``sys.stderr``: the first write or flush that
finds its pipe broken points that stream's file descriptor at ``/dev/null`` (so Python's own
buffers, and the flush at exit, succeed from then on) and the write is done again there. What
the process prints after its reader died is lost, as it would be anyway; its job is not.
"""

from __future__ import annotations

import os
import sys
from typing import Any, TextIO

__all__ = ["outlive_lost_output"]


class _Outliving:
    """A text stream (`stream`, e.g. ``sys.stdout``) whose broken pipe is replaced by
    ``/dev/null`` on the first write or flush that finds it broken."""

    def __init__(self, stream: TextIO) -> None:
        self._stream = stream

    def _to_devnull(self) -> None:
        null = os.open(os.devnull, os.O_WRONLY)
        try:
            os.dup2(null, self._stream.fileno())
        finally:
            os.close(null)

    def write(self, text: str) -> int:
        try:
            return self._stream.write(text)
        except BrokenPipeError:
            self._to_devnull()
            return self._stream.write(text)  # buffered: what the dead pipe refused goes too

    def flush(self) -> None:
        try:
            self._stream.flush()
        except BrokenPipeError:
            self._to_devnull()
            self._stream.flush()

    def __getattr__(self, name: str) -> Any:  # fileno, isatty, encoding, buffer, ...
        return getattr(self._stream, name)


def outlive_lost_output() -> None:
    """Make this process's ``sys.stdout`` and ``sys.stderr`` survive the death of their reader
    (see the module docstring); idempotent. Streams without a file descriptor are left as
    they are."""
    for name in ("stdout", "stderr"):
        stream = getattr(sys, name)
        if stream is None or isinstance(stream, _Outliving):
            continue
        try:
            stream.fileno()
        except (AttributeError, OSError, ValueError):  # not backed by a descriptor (a test's)
            continue
        setattr(sys, name, _Outliving(stream))
