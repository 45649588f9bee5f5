"""infra/scripts/seer_table.py: the best baseline of a row, and whether our tuners reach it
within one standard error, for a metric to maximise (accuracy) and one to minimise (a loss)."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from tests.scripts import load_script


@pytest.mark.parametrize(
    ("minimize", "best", "verdict"),
    [(False, "e-grid 0.500", "no"), (True, "asha 0.200", "yes")],
)
def test_the_best_baseline_follows_the_metrics_direction(
    tmp_path: Path, minimize: bool, best: str, verdict: str
) -> None:
    overall = {
        "replan": {"mean": 0.25, "se": 0.06},
        "asha": {"mean": 0.2, "se": 0.01},
        "e-grid": {"mean": 0.5, "se": 0.01},
    }
    summary = {"overall": overall, "groups": {"g": {}}, "spent": {}, "minimize": minimize}
    (tmp_path / "row").mkdir()
    (tmp_path / "row" / "summary.json").write_text(json.dumps(summary))
    _, _, row = load_script("seer_table").methods_table(tmp_path)
    cells = [c.strip() for c in row.strip("|").split("|")]
    assert cells[5].startswith(best) and cells[6] == verdict
