"""What `--help` shows is what the code says: Typer renders help texts as Rich markup, where a
``[...]`` is a tag and vanishes (``tenant name: [a-z][a-z0-9_-]*`` showed as ``tenant name: *``,
``pip install 'tenantml[peers]'`` as ``pip install 'tenantml'``). A bracket meant as text is
written ``\\[``; this test renders every command's help and looks for each bracket of its help
texts, escaped or not."""

from __future__ import annotations

import re
from collections import Counter
from collections.abc import Iterator
from typing import Any

import pytest
import typer
from typer.testing import CliRunner

from tenantml.cli import app

# a bracketed text in a help text, escaped (``\\[``: shown as ``[``) or not (a tag to Rich)
_BRACKETS = re.compile(r"\\?\[[^\]]*\]")
_ANSI = re.compile(r"\x1b\[[0-9;]*m")  # colour, where FORCE_COLOR or CI makes Rich use it


def _commands(cmd: Any, path: tuple[str, ...] = ()) -> Iterator[tuple[tuple[str, ...], Any]]:
    """Every command under `cmd` (Typer's click), with the words that name it."""
    yield path, cmd
    if hasattr(cmd, "commands"):  # a group
        for name, sub in cmd.commands.items():
            if not sub.hidden:
                yield from _commands(sub, (*path, name))


def _shown(args: list[str]) -> str:
    """``tenantml ARGS --help`` as one line of text (wide: no wrapping; no colour codes)."""
    res = CliRunner().invoke(app, [*args, "--help"], env={"COLUMNS": "400"}, terminal_width=400)
    assert res.exit_code == 0, (args, res.output)
    return " ".join(_ANSI.sub("", res.output).split())


def test_every_bracket_in_a_help_text_is_shown() -> None:
    root = typer.main.get_command(app)
    missing = []
    checked = 0
    for path, cmd in _commands(root):
        texts = [cmd.help or "", getattr(cmd, "epilog", None) or ""]
        texts += [p.help or "" for p in cmd.params if not getattr(p, "hidden", False)
                  and getattr(p, "help", None)]  # fmt: skip
        wanted = Counter(" ".join(b.removeprefix("\\").split()) for t in texts
                         for b in _BRACKETS.findall(t))  # fmt: skip
        if not wanted:
            continue
        shown = _shown(list(path))
        missing += [(" ".join(path), w) for w, n in wanted.items() if shown.count(w) < n]
        checked += sum(wanted.values())
    assert checked >= 3  # the escaped ones at least: submit's name, seer simulate's --peer
    assert not missing, f"help text brackets Rich reads as markup (write them \\[): {missing}"


def test_seer_simulate_names_every_built_in_curve_set() -> None:
    """The option's help spells the sets out (the CLI does not import pandas to list them)."""
    from tenantml.bench.curves import BUILTIN_CURVES

    shown = _shown(["seer", "simulate"])
    assert [n for n in BUILTIN_CURVES if f"{n}," not in shown and f"{n};" not in shown] == []


def test_bench_help_names_every_policy_run_only_by_name() -> None:
    """The replay's diagnostic columns are not among the defaults; `--help` is where a user
    finds their names (written out there: the CLI does not import the policy layer to show it)."""
    from policy.policies import ABLATION_NAMES
    from tenantml.bench.datasets import load_dataset
    from tenantml.bench.runner import LIVE_PRIOR, all_policy_names

    by_name = {*ABLATION_NAMES, LIVE_PRIOR} - set(all_policy_names(load_dataset("easeml-dl")))
    shown = _shown(["bench"])
    assert by_name == {*ABLATION_NAMES, LIVE_PRIOR}
    for name in by_name:
        assert name in shown.split("by name only:")[1], name


def test_tables_in_a_log_or_a_pipe_are_wide_enough_to_read(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """Where stdout is no terminal Rich took 80 columns, and `bench-live`'s table of eleven
    columns showed "0.…" in every cell of its log; a terminal keeps its own width, and
    ``COLUMNS`` still rules."""
    import io

    from rich.table import Table

    from tenantml.cli._out import LOG_WIDTH, stdout_console

    monkeypatch.delenv("COLUMNS", raising=False)
    log = io.StringIO()
    console = stdout_console(file=log)
    assert console.width == LOG_WIDTH
    table = Table(*(f"column {k}" for k in range(11)))
    table.add_row(*(f"{0.1234 + k:.4f}" for k in range(11)))
    console.print(table)
    assert all(f"{0.1234 + k:.4f}" in log.getvalue() for k in range(11))
    monkeypatch.setenv("COLUMNS", "100")
    assert stdout_console(file=io.StringIO()).width == 100
