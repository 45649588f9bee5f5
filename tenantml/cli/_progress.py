"""The one way the command line draws a progress bar: `progress_bar`.

A long command measures or simulates in a function that takes an ``on_step`` callback (called
once per unit of work; the function's docstring says what a unit is). The command opens a bar
here, on stderr, and passes the ``advance`` it gets as that callback::

    with progress_bar("decisions", total=decisions, background_refresh=False) as advance:
        result = measure_overhead(..., on_step=advance)

The bar is transient (gone once the work ends) and drawn only on an interactive terminal: with
stderr piped or captured (tests, ``2> file``) nothing is drawn or written. While a bar is drawn,
lines the command prints to stdout show above it when stdout is that terminal too, and go to
stdout as ever when stdout is redirected.
"""

from __future__ import annotations

import sys
import time
from collections.abc import Iterator
from contextlib import contextmanager
from typing import Protocol

from rich.console import Console
from rich.progress import (
    BarColumn,
    MofNCompleteColumn,
    Progress,
    TextColumn,
    TimeElapsedColumn,
    TimeRemainingColumn,
)

__all__ = ["Advance", "progress_bar"]

# With no background refresh, redraw at most this often (seconds) when steps are reported.
_MIN_REDRAW_S = 0.1


class Advance(Protocol):
    """Report ``steps`` units of work done (1 unless given). Safe to call from any thread."""

    def __call__(self, steps: int = 1) -> None: ...


def _ignore(steps: int = 1) -> None:
    """The `Advance` of a bar that is not drawn."""


@contextmanager
def progress_bar(
    description: str,
    total: int | None,
    *,
    background_refresh: bool = True,
    console: Console | None = None,
) -> Iterator[Advance]:
    """Show a bar ``description  ━━━━━╸━━━  M/N  elapsed  remaining`` on stderr while the
    block runs; yields the `Advance` that moves it.

    ``total``: the units of work expected (None: unknown; the bar then shows a pulse and
    ``M/?``). ``background_refresh``: redraw ten times a second from a thread of its own, so
    the elapsed time runs on during a long step. Benchmarks that time work in this process
    (wall or CPU time, which counts every thread) pass False: the bar is then redrawn only
    inside `Advance`, that is between the timed units, never during one. ``console``: where to
    draw (default: a new stderr console).
    """
    console = console or Console(stderr=True)
    if not console.is_interactive:
        yield _ignore
        return
    with Progress(
        TextColumn("{task.description}", style="bold", markup=False),  # a name may hold "["
        BarColumn(),
        MofNCompleteColumn(),
        TimeElapsedColumn(),
        TimeRemainingColumn(),
        console=console,
        transient=True,
        auto_refresh=background_refresh,
        # Printed lines are moved above the bar; only stdout on the terminal, not a redirected one.
        redirect_stdout=sys.stdout.isatty(),
    ) as progress:
        task = progress.add_task(description, total=total)
        last_redraw = time.monotonic()

        def advance(steps: int = 1) -> None:
            nonlocal last_redraw
            progress.advance(task, steps)
            if not background_refresh and time.monotonic() - last_redraw >= _MIN_REDRAW_S:
                progress.refresh()
                last_redraw = time.monotonic()

        yield advance
