"""What `--help` shows is what the code says: Typer renders help texts as Rich markup, where a
``[...]`` is a tag and vanishes (``tenant name: [a-z][a-z0-9_-]*`` showed as ``tenant name: *``,
``pip install 'tenantml[peers]'`` as ``pip install 'tenantml'``). A bracket meant as text is
written ``\\[``; this test finds the ones that are not."""

from __future__ import annotations

import re
from collections.abc import Iterator
from typing import Any

import typer
from typer.testing import CliRunner

from tenantml.cli import app

_TEXT_BRACKETS = re.compile(r"(?<!\\)\[[^\]\n]*\]")  # what Rich would read as a tag


def _commands(cmd: Any, path: tuple[str, ...] = ()) -> Iterator[tuple[tuple[str, ...], Any]]:
    """Every command under `cmd` (Typer's click), with the words that name it."""
    yield path, cmd
    if hasattr(cmd, "commands"):  # a group
        for name, sub in cmd.commands.items():
            if not sub.hidden:
                yield from _commands(sub, (*path, name))


def test_every_bracket_in_a_help_text_is_shown() -> None:
    root = typer.main.get_command(app)
    runner = CliRunner()
    missing = []
    for path, cmd in _commands(root):
        texts = [cmd.help or ""] + [getattr(p, "help", None) or "" for p in cmd.params]
        wanted = [b.replace("\\[", "[") for t in texts for b in _TEXT_BRACKETS.findall(t)]
        wanted = [w for w in wanted if not w.startswith(("[default", "[required"))]
        if not wanted:
            continue
        res = runner.invoke(app, [*path, "--help"], env={"COLUMNS": "400"}, terminal_width=400)
        assert res.exit_code == 0, (path, res.output)
        shown = " ".join(res.output.split())
        missing += [(" ".join(path), w) for w in wanted if w not in shown]
    assert not missing, f"help text brackets Rich reads as markup (write them \\[): {missing}"


def test_seer_simulate_names_every_built_in_curve_set() -> None:
    """The option's help spells the sets out (the CLI does not import pandas to list them)."""
    from tenantml.bench.curves import BUILTIN_CURVES

    res = CliRunner().invoke(app, ["seer", "simulate", "--help"], terminal_width=400)
    shown = " ".join(res.output.split())
    assert [n for n in BUILTIN_CURVES if f"{n}," not in shown and f"{n};" not in shown] == []
