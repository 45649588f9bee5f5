"""``infra/scripts/gap_phases.py``: when in the budget ``live`` loses to itself given costs."""

from __future__ import annotations

import pytest

from tests.scripts import load_script


def test_the_windows_split_the_gap_between_the_two_aucs_whole() -> None:
    """The windows cover the budget once, so their contributions sum to the AUC gap; each
    window's mean loss is ``live``'s over that window, and the loss falls as jobs report."""
    script = load_script("gap_phases")
    live, given, windows = script.gap_by_window("easeml-dl", 2)
    assert len(windows) == len(script.WINDOWS)
    assert sum(share for _, share in windows) == pytest.approx(live - given, abs=1e-12)
    losses = [loss for loss, _ in windows]
    assert losses[0] > losses[-1] >= 0.0
    spans = [hi - lo for lo, hi in script.WINDOWS]
    assert sum(loss * span for loss, span in zip(losses, spans, strict=True)) == pytest.approx(
        live, rel=1e-2
    )


def test_a_bad_call_says_how_to_call_it() -> None:
    script = load_script("gap_phases")
    with pytest.raises(SystemExit, match="Usage"):
        script.main([])
