"""SpotTune's formulas and EarlyCurve on hand fixtures (shared/papers/004)."""

from __future__ import annotations

import numpy as np
import pytest

from policy.spot import (
    Market,
    best_instance,
    calibrate,
    expected_step_cost,
    features,
    instance_cost,
    revoked_within,
    revpred_max_price,
)
from policy.spot.earlycurve import fit_stage, plateaued, predict_final, select_top, split_stages
from policy.spot.spottune import Trial, single_instance, spottune


def market(prices: list[float], cpus: int = 2, name: str = "m", start_s: float = 0.0) -> Market:
    p = np.asarray(prices, float)
    changed = np.r_[False, np.diff(p) != 0]
    return Market("z", name, p, changed, start_s, cpus, 0, 1.0)


def test_eq_2_expected_step_cost() -> None:
    m = market([0.1] * 30 + [0.3] * 30)
    assert m.mean_price(59) == pytest.approx(0.2)  # the last hour's mean price
    # E[sCost] = M[inst][hp] * (1 - p) * price-bar = 2.0 * 0.75 * 0.2
    assert expected_step_cost(2.0, 0.25, m.mean_price(59)) == pytest.approx(0.3)


def test_getbestinst_takes_the_lowest_expected_step_cost() -> None:
    cheap_slow = market([0.1] * 120, name="slow")
    dear_fast = market([0.3] * 120, name="fast")
    risky = market([0.2] * 120, name="risky")
    p = {"slow": 0.0, "fast": 0.0, "risky": 0.9}
    rng = np.random.default_rng(0)

    def rev(m: Market, t: int, b: float) -> float:
        assert m.prices[t] + 1e-5 <= b <= m.prices[t] + 0.2  # Alg. 1 line 4
        return p[m.instance_type]

    # s/step: slow 4.0 -> 0.4; fast 1.0 -> 0.3; risky 2.0 * 0.1 * 0.2 = 0.04
    j, _, cost = best_instance([cheap_slow, dear_fast, risky], 100, [4.0, 1.0, 2.0], rev, rng)
    assert j == 2 and cost == pytest.approx(0.04)
    p["risky"] = 0.0
    j, _, cost = best_instance([cheap_slow, dear_fast, risky], 100, [4.0, 1.0, 2.0], rev, rng)
    assert j == 1 and cost == pytest.approx(0.3)


def test_refund_rule() -> None:
    prices = np.full(200, 0.6)
    assert instance_cost(prices, 0, 59, revoked=True) == 0.0  # revoked in its first hour
    assert instance_cost(prices, 0, 90, revoked=True) == pytest.approx(0.9)
    assert instance_cost(prices, 0, 30, revoked=False) == pytest.approx(0.3)  # we shut it down


def test_alg_2_maximum_price() -> None:
    # the hour before t = 60, line 2's open interval: the 59 changes into minutes 1..59
    # (tau = t - 59 .. t - 1); 10 spikes of 0.05 (then back), the rest 0, and a jump into
    # minute 60 itself that Alg. 2 leaves out
    prices = [0.1] * 61
    for i in range(1, 11):
        prices[i * 5] = 0.15
    prices[60] = 0.5
    m = market(prices)
    deltas = np.sort(np.abs(np.diff(m.prices[0:60])))  # 59 deltas, 20 of 0.05
    L = len(deltas)
    assert L == 59
    trimmed = deltas[(np.arange(L) > 0.2 * L) & (np.arange(L) < 0.8 * L)].sum()
    assert revpred_max_price(m, 60) == pytest.approx(0.5 + trimmed / (0.6 * L))
    assert revpred_max_price(m, 60) > 0.5
    assert revoked_within(m, 0, 0.12) and not revoked_within(m, 50, 0.6)


def test_eq_3_calibration() -> None:
    # P / (1 - P) = 0.5 * 0.8 / (0.5 * 0.2) = 4  ->  P = 0.8
    assert calibrate(0.5, phi_pos=0.2, phi_neg=0.8) == pytest.approx(0.8)
    assert calibrate(0.5, phi_pos=0.5, phi_neg=0.5) == pytest.approx(0.5)


def test_six_features() -> None:
    start = 1438387200.0  # 2015-08-01 00:00 UTC, a Saturday
    m = market([0.1] * 30 + [0.2] * 10 + [0.3] * 30, start_s=start)
    f = features(m, 65)
    assert f[0] == 0.3  # current price
    assert f[1] == pytest.approx((24 * 0.1 + 10 * 0.2 + 26 * 0.3) / 60)  # minutes 6..65
    assert f[2] == 2  # two changes in the past hour
    assert f[3] == 65 - 40  # minutes since the price was set
    assert f[4] == 0.0 and f[5] == 1.0  # weekend, 01:05


def two_stage(k: np.ndarray) -> np.ndarray:
    """Stage 1 (steps 1-20): 1/(0.05 k^2 + 0.5 k + 1) + 1; a learning-rate step; stage 2
    (steps 21-40, k' = k - 20): 1/(0.02 k'^2 + 0.3 k' + 2.5) + 0.1."""
    k1 = np.minimum(k, 20)
    s1 = 1 / (0.05 * k1**2 + 0.5 * k1 + 1) + 1
    k2 = k - 20
    s2 = 1 / (0.02 * k2**2 + 0.3 * k2 + 2.5) + 0.1
    return np.where(k <= 20, s1, s2)


def test_earlycurve_splits_at_the_learning_rate_step_and_recovers_the_coefficients() -> None:
    k = np.arange(1, 41, dtype=float)
    y = two_stage(k)
    assert split_stages(y) == [0, 20]  # stage 2 starts at step 21 (index 20)
    fit = fit_stage(k[20:], y[20:])
    assert fit.start == 21
    np.testing.assert_allclose(fit.coef, (0.02, 0.3, 2.5, 0.1), rtol=0.05, atol=1e-3)
    s1 = fit_stage(k[:20], y[:20])
    np.testing.assert_allclose(s1.coef, (0.05, 0.5, 1.0, 1.0), rtol=0.05, atol=1e-3)


def test_earlycurve_beats_a_single_stage_fit_after_a_step() -> None:
    y = two_stage(np.arange(1, 61, dtype=float))
    seen = y[:30]  # theta = 0.5 of 60 steps: stage 2 partly observed
    staged = predict_final(seen, 60)
    single = predict_final(seen, 60, staged=False)
    assert abs(staged - y[-1]) / y[-1] < 0.02
    assert abs(single - y[-1]) > 5 * abs(staged - y[-1])


def test_plateau_and_selection() -> None:
    flat = [1.0, 0.5, 0.3] + [0.2] * 8
    assert plateaued(flat) and predict_final(flat, 100) == 0.2
    assert not plateaued([1.0, 0.8, 0.6, 0.4, 0.3, 0.25, 0.2])
    assert predict_final([1.0, float("nan")], 10) == float("inf")
    assert select_top([0.3, 0.1, 0.2, 0.5], 2) == [1, 2]


def test_spottune_simulation_refunds_redeploys_and_finishes() -> None:
    # market 0 is cheap but its price jumps above any maximum price for 5 minutes every 50
    prices0 = np.full(3000, 0.05)
    for s in range(40, 3000, 50):
        prices0[s : s + 5] = 5.0
    steady = np.full(3000, 0.2)
    markets = [market(list(prices0), cpus=4, name="volatile"), market(list(steady), cpus=4)]
    curves = [np.linspace(1.0, 0.1 + 0.1 * i, 60) for i in range(3)]
    trials = [Trial(f"hp{i}", c, (60.0, 60.0)) for i, c in enumerate(curves)]  # 1 step/min

    def rev(m: Market, t: int, b: float) -> float:
        return 0.0

    out = spottune(trials, markets, 0, rev, theta=1.0, restore_min=1)
    assert out.best_true and out.selected == [0]
    assert out.revocations > 0  # the volatile market is the cheapest and gets revoked
    assert out.free_steps > 0  # ... within the first hour: refunded
    assert out.steps == pytest.approx(180.0)  # every step of every trial ran exactly once
    early = spottune(trials, markets, 0, rev, theta=0.5, restore_min=1)
    assert early.steps < out.steps
    base = single_instance(trials, markets[1], 1, 0)
    assert base.cost == pytest.approx(180 * 0.2 / 60) and base.jct_h == pytest.approx(3.0)
    assert out.cost < base.cost


def test_hourly_redeploy() -> None:
    steady = market([0.2] * 600, cpus=1)
    trials = [Trial("long", np.linspace(1, 0.1, 150), (60.0,))]  # 150 minutes of training
    out = spottune(trials, [steady], 0, lambda m, t, b: 0.0, theta=1.0, restore_min=0)
    assert [e[2] for e in out.log] == ["hourly", "hourly"]
    assert out.checkpoints == 3
    assert out.cost == pytest.approx(150 * 0.2 / 60)


def test_earlycurve_cli_on_a_curve_file(tmp_path) -> None:  # type: ignore[no-untyped-def]
    import json

    from typer.testing import CliRunner

    from tenantml.cli import app

    rows = ["group,curve_id,step,metric"]
    k = np.arange(1, 41, dtype=float)
    for cid in range(4):
        y = two_stage(k) * (1 + 0.1 * cid)
        rows += [f"g,{cid},{int(s)},{v:.6f}" for s, v in zip(k, y, strict=True)]
    path = tmp_path / "c.csv"
    path.write_text("\n".join(rows) + "\n")
    r = CliRunner().invoke(app, ["spot", "earlycurve", "--curves", str(path), "--theta",
                                 "0.6,1.0", "--json", "--jobs", "1"])  # fmt: skip
    assert r.exit_code == 0, r.output
    d = json.loads(r.output)
    assert set(d["theta"]) == {"0.6", "1"}
    e, s = d["theta"]["0.6"]["earlycurve"], d["theta"]["0.6"]["single_stage"]
    assert e["top1"] == 1.0 and e["mre"] < s["mre"]
    assert d["theta"]["1"]["earlycurve"]["mre"] == 0.0
    r = CliRunner().invoke(app, ["spot", "earlycurve", "--curves", str(path), "--theta", "1.5"])
    assert r.exit_code == 2 and "theta 1.5 is not valid" in r.output
    r = CliRunner().invoke(app, ["spot", "simulate", "--predictor", "oracle"])
    assert r.exit_code == 2 and "--predictor 'oracle' is not valid" in r.output
    r = CliRunner().invoke(app, ["spot", "revpred", "--types", "p9.huge"])
    assert r.exit_code == 2 and "unknown instance type" in r.output
    r = CliRunner().invoke(app, ["spot", "revpred", "--start", "2016-01-01"])
    assert r.exit_code == 2 and "outside the price traces" in r.output
    # each raised ZeroDivisionError, KeyError or IndexError, or ran to a meaningless answer
    for argv in (
        ["spot", "earlycurve", "--curves", str(path), "--draws", "0"],
        ["spot", "earlycurve", "--curves", str(path), "--theta", ","],
        ["spot", "simulate", "--runs", "0"],
        ["spot", "simulate", "--step-scale", "0"],
        ["spot", "simulate", "--mcnt", "0"],
        ["spot", "simulate", "--restore-min", "-3"],
        ["spot", "revpred", "--stride", "0"],
        ["spot", "revpred", "--train-days", "0"],
        ["spot", "revpred", "--test-days", "-1"],
        ["spot", "revoke-bench", "--seconds-per-minute", "0"],
        ["seer", "simulate", "--methods", ","],
        ["seer", "simulate", "--t-min", "0"],
    ):
        r = CliRunner().invoke(app, argv)
        assert r.exit_code == 2 and r.output.startswith("error: "), (argv, r.output)
        assert len(r.output.strip().splitlines()) == 1, (argv, r.output)
