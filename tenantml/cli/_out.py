"""What every ``tenantml`` command shares for its output: an error line and a saved result.

- `fail`: one line ``error: <message>`` on stderr, and the ``typer.Exit`` to raise with it. The
  message is text, never Rich markup: ``pip install 'tenantml[peers]'`` keeps its brackets.
- `save_json`: a command's numbers to ``OUT/NAME`` when ``--out`` is given.
- `stdout_console`: where tables go: a terminal's width, or `LOG_WIDTH` in a log or a pipe.
"""

from __future__ import annotations

import json
import os
from collections.abc import Callable
from pathlib import Path
from typing import Any

import typer
from rich.console import Console
from rich.text import Text

__all__ = ["LOG_WIDTH", "fail", "save_json", "stdout_console"]

#: how wide tables are printed where stdout is no terminal (a log, a pipe) and ``COLUMNS`` is
#: unset: Rich's 80 there cut `bench-live`'s eleven columns to "0.…" in every cell
LOG_WIDTH = 160

_err = Console(stderr=True, highlight=False, soft_wrap=True)


def stdout_console(**kwargs: Any) -> Console:
    """A Rich console on stdout (`kwargs` as `Console` takes them): a terminal's own width,
    else ``COLUMNS`` or `LOG_WIDTH`."""
    out = Console(**kwargs)
    if not out.is_terminal and "COLUMNS" not in os.environ:
        out.width = LOG_WIDTH
    return out


def fail(message: str, code: int = 2) -> typer.Exit:
    """Print ``error: message`` on stderr; return the exit (``raise fail(...) from None``)."""
    _err.print(Text.assemble(("error:", "bold red"), " ", message))
    return typer.Exit(code)


def save_json(
    out: Path | None, name: str, data: object, default: Callable[[Any], Any] | None = None
) -> Path | None:
    """Write `data` as indented JSON to ``out / name`` (``out`` made if need be; `default`
    as `json.dumps` takes it, for values JSON lacks); the path written, or None without
    ``out``."""
    if out is None:
        return None
    out.mkdir(parents=True, exist_ok=True)
    path = out / name
    path.write_text(json.dumps(data, indent=2, default=default) + "\n")
    return path
