"""Progress of the long benchmarks: each measurement calls its ``on_step`` once per unit of
work (the count the command line gives its bar as the total), and the bar helper draws them."""

from __future__ import annotations

import io
from pathlib import Path

from rich.console import Console

from tenantml.bench.feed import FEED_STEP, feed_steps, measure_feed
from tenantml.bench.overhead import measure_overhead
from tenantml.bench.service import measure_tick_cpu
from tenantml.cli._progress import progress_bar


class Counter:
    """An ``on_step`` that counts its calls."""

    def __init__(self) -> None:
        self.calls = 0

    def __call__(self) -> None:
        self.calls += 1


def test_overhead_steps_once_per_timed_decision() -> None:
    step = Counter()
    result = measure_overhead(20, 8, 3, decisions=7, on_step=step)
    assert step.calls == 7
    assert result.decision_ms_median > 0


def test_tick_cpu_steps_once_per_pass() -> None:
    step = Counter()
    result = measure_tick_cpu(5, 3, 2, 2, passes=3, on_step=step)
    assert step.calls == result["passes"] == 3


def test_feed_steps_once_per_block_of_examples(tmp_path: Path) -> None:
    n = 2 * FEED_STEP + 5  # two full blocks and a short one
    step = Counter()
    result = measure_feed(tmp_path / "with", n, (2, 2), on_step=step)
    assert step.calls == feed_steps(n) == 3
    assert result["examples"] == n
    quiet = measure_feed(tmp_path / "without", n, (2, 2))  # no callback: same figures
    assert quiet["examples"] == n and quiet["batches"] == result["batches"]


def test_progress_bar_draws_every_step_on_its_console() -> None:
    out = io.StringIO()
    console = Console(file=out, force_terminal=True, width=100)
    with progress_bar("decisions", 4, background_refresh=False, console=console) as advance:
        advance()
        advance(3)
    drawn = out.getvalue()
    assert "decisions" in drawn and "4/4" in drawn


def test_progress_bar_draws_nothing_off_a_terminal() -> None:
    out = io.StringIO()
    with progress_bar("repeats", 2, console=Console(file=out)) as advance:
        advance()
        advance()
    assert out.getvalue() == ""
