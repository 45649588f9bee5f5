"""``infra/scripts/weights_effect.py``: bench-live runs with and without tenant weights."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from tests.scripts import load_script


def _run(directory: Path, weights: dict[str, float], served: dict[str, float]) -> None:
    """A one-split bench-live run whose tenants were served `served[t]` from t = 0.5 on: time-
    mean accuracy ``served / 2`` and, with their best that accuracy, regret AUC ``served / 2``."""
    entry = {
        "served": {t: [[0.5, acc]] for t, acc in served.items()},
        "test_regret_auc_by_tenant": {t: acc / 2 for t, acc in served.items()},
    }
    directory.mkdir(parents=True)
    summary = {"weights": weights, "systems": {"live": entry}}
    (directory / "summary.json").write_text(json.dumps(summary))


def test_the_pairs_are_compared_tenant_by_tenant_and_weighted(tmp_path: Path) -> None:
    """Two seeds: the weighted tenant a gains 0.1 and 0.2 of accuracy (0.05, 0.1 time-mean),
    b loses 0.1 on both (0.05); a seed without its pair is left out."""
    script = load_script("weights_effect")
    weights = {"a": 3.0, "b": 1.0}
    for seed, gain in ((1, 0.1), (2, 0.2)):
        _run(tmp_path / f"w-{seed}", weights, {"a": 0.6 + gain, "b": 0.7})
        _run(tmp_path / f"u-{seed}", {"a": 1.0, "b": 1.0}, {"a": 0.6, "b": 0.8})
    _run(tmp_path / "w-3", weights, {"a": 0.0, "b": 0.0})  # no u-3
    lines = script.report(tmp_path)
    assert lines[0] == "2 seeds; weights a=3"
    rows = {line.split()[0]: line for line in lines[1:]}
    assert rows["a"].startswith("a                +0.0750 ± 0.0250 (weighted ahead on 2 of 2)")
    assert "-0.0500 ± 0.0000 (weighted ahead on 0 of 2)" in rows["b"]
    # (3 x 0.05 - 0.05) / 4 and (3 x 0.1 - 0.05) / 4: 0.025 and 0.0625
    total = [line for line in lines if line.startswith("weighted mean")][0].split()
    assert float(total[2]) == pytest.approx(0.04375, abs=1e-4)
    assert float(total[4]) == pytest.approx(0.01875, abs=1e-4)


def test_no_pairs_is_said(tmp_path: Path) -> None:
    script = load_script("weights_effect")
    _run(tmp_path / "w-1", {"a": 2.0}, {"a": 0.5})
    with pytest.raises(SystemExit, match="no w-<seed>/ and u-<seed>/"):
        script.report(tmp_path)
