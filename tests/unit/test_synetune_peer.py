"""Syne Tune's ASHA and BOHB on our curve sets (tenantml.bench.synetune_peer): the peer our
baselines are checked against. Skipped where syne-tune (the `peers` extra) is not installed."""

from __future__ import annotations

import importlib.util
import json
import sys
from dataclasses import replace
from pathlib import Path

import numpy as np
import pytest
from typer.testing import CliRunner

from policy.seer.tuning import Curves, TuningSettings, run_method
from tenantml.bench.synetune_peer import PeerUnavailable, check_available, run_peer
from tenantml.cli import app
from tests.unit.test_tuning_sim import flat_curves, rising_curves

runner = CliRunner()


def rising(finals: list[float], length: int = 40, hps: bool = False) -> Curves:
    """`rising_curves` (configuration i rises linearly to ``finals[i]``); with ``hps``, its one
    hyperparameter is its final value (a searcher can learn it)."""
    c = rising_curves(finals, length)
    return replace(c, hps=np.array(finals)[:, None], hp_names=("quality",)) if hps else c


def test_a_missing_syne_tune_is_named_with_its_install_command(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setitem(sys.modules, "syne_tune", None)  # as if not installed
    with pytest.raises(PeerUnavailable, match=r"pip install 'tenantml\[peers\]'"):
        check_available()


def test_the_peer_runs_only_asha_and_bohb() -> None:
    with pytest.raises(ValueError, match="runs asha, bohb, not 'seer'"):
        run_peer("seer", rising([0.5, 0.6]), 10, 40, 0, TuningSettings(t_min=1))


# The tests below run Syne Tune; `make test` does not install it (the `peers` extra).
needs_syne_tune = pytest.mark.skipif(
    importlib.util.find_spec("syne_tune") is None,
    reason="syne-tune is an optional peer: pip install 'tenantml[peers]'",
)


@needs_syne_tune
@pytest.mark.parametrize("method", ["asha", "bohb"])
def test_peer_returns_the_metric_of_a_sampled_configuration_and_pays_n_workers(
    method: str,
) -> None:
    finals = list(np.linspace(0.1, 0.9, 30))
    c = rising(finals, hps=method == "bohb")
    value, paid = run_peer(method, c, 20, 80, 0, TuningSettings(t_min=1))
    assert paid == 4 * 20  # floor(B/T) = 4 workers for all of T
    # the best model's last evaluation by T = 20: at most 20/40 of the best final
    assert 0 < value <= 0.9 * 20 / 40 + 1e-12
    assert value in {f * j / 40 for f in finals for j in range(1, 41)}


@needs_syne_tune
def test_the_two_ashas_differ_as_stopping_and_promotion_asha_do() -> None:
    """What the README explains: Syne Tune 0.16's ASHA is the stopping variant (a trial runs on
    until a rung ranks it out), ours the promotion variant of Li et al. (Alg. 2: at every rung
    the worker takes a promotion or a new trial). Both find a top configuration where one
    evaluation tells it (flat curves: the best of 60 scores 0.88), and ours, which tries more
    configurations, is at least as good there (means over 10 seeds); where curves keep rising
    past the deadline (T is half their length) the stopping variant's leaders get further along
    them and it wins."""
    rng = np.random.default_rng(3)
    levels = list(rng.uniform(0.2, 0.9, 60))
    s = TuningSettings(t_min=1)

    def both(c: Curves) -> tuple[list[float], list[float]]:
        ours = [run_method("asha", c, 20, 160, seed, s).value for seed in range(10)]
        return ours, [run_peer("asha", c, 20, 160, seed, s)[0] for seed in range(10)]

    ours, theirs = both(flat_curves(levels, 40))
    assert np.mean(ours) > 0.85 and np.mean(theirs) > 0.8
    assert np.mean(ours) >= np.mean(theirs)
    ours, theirs = both(rising(levels))
    assert np.mean(theirs) > np.mean(ours)


@needs_syne_tune
def test_cli_simulate_with_the_peer_adds_its_columns(tmp_path: Path) -> None:
    rows = ["group,curve_id,step,metric"]
    rng = np.random.default_rng(0)
    for cid in range(16):
        final = rng.uniform(0.2, 0.9)
        rows += [f"g,{cid},{s},{final * s / 20:.4f}" for s in range(1, 21)]
    path = tmp_path / "curves.csv"
    path.write_text("\n".join(rows) + "\n")
    out = tmp_path / "out"
    args = ["seer", "simulate", "--curves", str(path), "--deadline", "10", "--budget", "4x"]
    r = runner.invoke(
        app,
        [*args, "--methods", "seer,asha", "--peer", "synetune", "--seeds", "2", "--jobs", "1"]
        + ["--out", str(out)],
    )
    assert r.exit_code == 0, r.output
    summary = json.loads((out / "summary.json").read_text())
    assert list(summary["overall"]) == ["seer", "asha", "synetune:asha"]
    assert summary["spent"]["synetune:asha"] == 1.0
    r = runner.invoke(app, [*args, "--methods", "seer", "--peer", "synetune", "--out", str(out)])
    assert r.exit_code == 2 and "add one of them to the methods" in r.output
    r = runner.invoke(app, [*args, "--methods", "asha", "--peer", "optuna", "--out", str(out)])
    assert r.exit_code == 2 and "unknown peer 'optuna'; valid: synetune" in r.output
