"""The elastic-tuning simulator (policy.seer.tuning) and its curve loader on hand fixtures."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from typer.testing import CliRunner

from policy.seer import PlanError, plan
from policy.seer.tuning import METHODS, Curves, TuningSettings, UniformSampler, run_method
from tenantml.bench.curves import BUILTIN_CURVES, CurveFormatError, load_curves
from tenantml.cli import app


def flat_curves(levels: list[float], length: int = 8) -> Curves:
    """Configuration i scores ``levels[i]`` at every evaluation; one evaluation per time unit."""
    t = np.arange(1.0, length + 1)
    return Curves(
        "flat",
        tuple(str(i) for i in range(len(levels))),
        tuple(t for _ in levels),
        tuple(np.full(length, v) for v in levels),
    )


def rising_curves(finals: list[float], length: int = 16) -> Curves:
    """Configuration i rises linearly to ``finals[i]``."""
    t = np.arange(1.0, length + 1)
    return Curves(
        "rising",
        tuple(str(i) for i in range(len(finals))),
        tuple(t for _ in finals),
        tuple(f * t / length for f in finals),
    )


def test_asha_promotes_the_top_1_over_eta_of_a_rung() -> None:
    """One worker, eta = 2, rungs 1, 2, 4, 8 evaluations (Li et al. 2020, Alg. 2)."""
    c = flat_curves([0.1, 0.4, 0.3, 0.2])
    seed = 3
    order = list(np.random.default_rng(seed).permutation(4))
    out = run_method("asha", c, 6.0, 6.0, seed, TuningSettings(eta=2, t_min=1))
    a, b = int(order[0]), int(order[1])
    best_ab = a if c.values[a][0] > c.values[b][0] else b
    # t=0 new a (rung 0); t=1: rung 0 = {a}, floor(1/2) = 0 to promote -> new b;
    # t=2: rung 0 = {a, b}, top 1 = best_ab -> promoted to rung 1 (one more evaluation);
    # t=3: rung 1 = {best_ab} has floor(1/2) = 0 -> rung 0's top 1 was promoted -> new order[2]
    assert out.jobs[:4] == ((0.0, a, 0), (1.0, b, 0), (2.0, best_ab, 1), (3.0, int(order[2]), 0))
    assert out.resource_time == pytest.approx(6.0)


def test_seer_returns_the_best_sampled_configuration_on_flat_curves() -> None:
    levels = list(np.linspace(0.1, 0.9, 40))
    c = flat_curves(levels, length=64)
    s = TuningSettings(eta=2, t_min=1, p_max=4)
    for seed in range(5):
        out = run_method("seer", c, 10, 80, seed, s)
        p = plan(10, 80, eta=2, p_max=4, t_min=1)
        assert out.trials == p.sampled_trials == 12
        sampler = UniformSampler(len(c), np.random.default_rng(seed))
        sampled = [sampler.sample() for _ in range(12)]
        assert out.value == pytest.approx(max(levels[i] for i in sampled))
        assert out.resource_time <= 80


def test_seer_gives_the_leaders_more_gpus() -> None:
    """Rising curves: the returned trial trained on 2 GPUs in its last stage goes further."""
    c = rising_curves([0.2, 0.9, 0.5, 0.3, 0.8, 0.1, 0.7, 0.4, 0.6, 0.95, 0.05, 0.15], 200)
    out = run_method("seer", c, 10, 80, 0, TuningSettings(eta=2, t_min=1, p_max=4))
    # best trial: 1.43 min at 1 or 2 GPUs, then 2.86 min and 5.71 min at 2 GPUs (lambda=2^0.8)
    lam2 = 2**0.8
    progress_lo = 10 / 7 * 1 + (20 / 7 + 40 / 7) * lam2
    assert out.value >= 0.95 * np.floor(progress_lo) / 200 - 1e-9


def test_random_trains_one_configuration_on_floor_b_over_t() -> None:
    c = rising_curves([0.5, 0.5, 0.5], 100)
    out = run_method("random", c, 10, 40, 0, TuningSettings())
    assert out.trials == 1
    assert out.value == pytest.approx(0.5 * np.floor(10 * 4**0.8) / 100)
    assert out.resource_time == pytest.approx(40)


def test_e_grid_explores_then_exploits_the_best() -> None:
    c = rising_curves([0.1, 0.2, 0.9, 0.3, 0.4, 0.5], 100)
    out = run_method("e-grid", c, 10, 60, 0, TuningSettings(p_max=4))
    # exploitation 4 GPUs x 5 min = 20, exploration (60 - 20) / 5 = 8 trials at 1 GPU
    assert out.trials == 8
    assert out.value == pytest.approx(0.9 * np.floor(5 + 5 * 4**0.8) / 100)


@pytest.mark.parametrize("method", sorted(METHODS))
def test_every_method_stays_within_budget_and_returns_a_sampled_value(method: str) -> None:
    c = rising_curves(list(np.linspace(0.1, 0.9, 30)), 50)
    s = TuningSettings(t_min=1)
    if method == "bohb":
        from tenantml.bench.tpe import tpe_sampler

        s = TuningSettings(t_min=1, bohb_sampler=tpe_sampler)
    for seed in range(3):
        out = run_method(method, c, 20, 80, seed, s)
        assert out.resource_time <= 80 * (1 + 1e-9)
        assert c.untrained <= out.value <= 0.9


@settings(max_examples=40, deadline=None)
@given(
    finals=st.lists(st.floats(0.05, 1.0), min_size=2, max_size=12),
    T=st.floats(2, 60),
    ratio=st.sampled_from([0.3, 0.6, 1.0, 4.0, 16.0]),
    seed=st.integers(0, 100),
)
def test_no_method_overspends(finals: list[float], T: float, ratio: float, seed: int) -> None:
    """Also with a budget below one GPU for the whole deadline, where ASHA, HyperSched, BOHB and
    E-Grid kept a worker (E-Grid p_min GPUs) until T: up to 3.3x B."""
    c = rising_curves(finals, 30)
    for method in ("seer", "seer-fill", "random", "asha", "hypersched", "bohb", "e-grid"):
        try:
            out = run_method(method, c, T, ratio * T, seed, TuningSettings(t_min=1))
        except PlanError:  # SEER's planner refuses a budget below one round, as documented
            assert method.startswith("seer") and ratio < 1
            continue
        assert out.resource_time <= ratio * T * (1 + 1e-9), method


def test_seer_fill_pays_for_the_whole_budget_where_the_paper_plan_leaves_a_third() -> None:
    """T = 12 epochs, B = 4T (issue 19's 4x case): the paper's plan pays 33.6 of 48, the filled
    one 48, on curves long enough that no trial ends early."""
    c = rising_curves(list(np.linspace(0.1, 0.9, 30)), 200)
    s = TuningSettings(t_min=1)
    assert run_method("seer", c, 12, 48, 0, s).resource_time == pytest.approx(33.6)
    filled = run_method("seer-fill", c, 12, 48, 0, s)
    assert filled.resource_time == pytest.approx(48) and filled.trials == 8


def test_seer_fill_keeps_the_stage_leaders_over_all_brackets() -> None:
    """Stage 2 of the filled plan (T = 12, B = 48) runs one trial: the best of stage 1's eight
    over both brackets, so on flat curves the best configuration sampled is returned. The
    paper's line 9 keeps stage 2's one trial from the 1-GPU bracket, and misses the best
    whenever it sat in the 2-GPU bracket."""
    levels = list(np.linspace(0.1, 0.9, 40))
    c = flat_curves(levels, 200)
    s = TuningSettings(t_min=1)
    missed = 0
    for seed in range(8):
        sampler = UniformSampler(len(c), np.random.default_rng(seed))
        sampled = [levels[sampler.sample()] for _ in range(8)]  # the paper's plan samples 7
        assert run_method("seer-fill", c, 12, 48, seed, s).value == max(sampled)
        missed += run_method("seer", c, 12, 48, seed, s).value < max(sampled[:7])
    assert missed > 0


def test_unknown_method_is_named() -> None:
    with pytest.raises(ValueError, match="unknown method 'sha'; valid: seer"):
        run_method("sha", flat_curves([0.1, 0.2]), 10, 10, 0)


@pytest.mark.parametrize("name", BUILTIN_CURVES)
def test_builtin_curve_sets_load(name: str) -> None:
    sets = load_curves(name)
    assert sets
    c = next(iter(sets.values()))
    assert len(c) >= 10 and c.full_time > c.epoch_time > 0


def _csv(tmp_path: Path, text: str) -> str:
    path = tmp_path / "c.csv"
    path.write_text(text)
    return str(path)


@pytest.mark.parametrize(
    ("text", "fragment"),
    [
        ("group,curve_id,step\ng,a,1\n", "missing column(s) metric"),
        ("group,curve_id,step,metric\ng,a,1,high\n", "row 2: metric='high' is not a finite"),
        ("group,curve_id,step,metric\ng,a,1,0.5\ng,a,1,0.6\n", "row 3: step 1 of curve 'a'"),
        (
            "group,curve_id,step,metric,seconds\ng,a,1,0.5,10\ng,a,2,0.6,5\n",
            "seconds must be > 0 and increase",
        ),
        ("group,curve_id,step,metric\n", "no rows"),
    ],
)
def test_bad_curve_files_name_the_problem(tmp_path: Path, text: str, fragment: str) -> None:
    with pytest.raises(CurveFormatError, match=fragment.replace("(", r"\(").replace(")", r"\)")):
        load_curves(_csv(tmp_path, text))


def test_minimize_negates_and_steps_are_time_units(tmp_path: Path) -> None:
    path = _csv(tmp_path, "group,curve_id,step,metric\ng,a,1,0.9\ng,a,2,0.5\n")
    c = load_curves(path, minimize=True)["g"]
    assert list(c.values[0]) == [-0.9, -0.5]
    assert list(c.times[0]) == [1.0, 2.0]
    assert c.upper == 0.0  # a loss recorded >= 0 cannot fall below 0
    signed = _csv(tmp_path, "group,curve_id,step,metric\ng,a,1,0.9\ng,a,2,-0.5\n")
    assert load_curves(signed, minimize=True)["g"].upper == np.inf
    assert load_curves(path)["g"].upper == np.inf  # a metric to maximise: no bound assumed


runner = CliRunner()


def test_cli_plan_json_and_errors() -> None:
    r = runner.invoke(app, ["seer", "plan", "--deadline", "10", "--budget", "80", "--eta", "2"])
    assert r.exit_code == 0, r.output
    assert "8x1 + 4x2" in r.output
    r = runner.invoke(
        app, ["seer", "plan", "--deadline", "10", "--budget", "80", "--eta", "2", "--json"]
    )
    d = json.loads(r.output)
    assert d["K"] == 3 and d["N"] == [8, 4] and d["P"] == [1, 2]
    assert d["stages"][2]["brackets"] == [
        {"gpus_per_trial": 1, "trials": 2},
        {"gpus_per_trial": 2, "trials": 1},
    ]
    r = runner.invoke(app, ["seer", "plan", "--deadline", "10", "--budget", "0.5"])
    assert r.exit_code == 2
    assert "below one trial-round" in r.output
    r = runner.invoke(app, ["seer", "plan", "--deadline", "10", "--budget", "9", "--p-max", "x"])
    assert r.exit_code == 2 and "--p-max 'x'" in r.output


def test_cli_simulate_writes_table_2_summary(tmp_path: Path) -> None:
    rows = ["group,curve_id,step,metric"]
    rng = np.random.default_rng(0)
    for g in ("g1", "g2"):
        for cid in range(12):
            final = rng.uniform(0.2, 0.9)
            rows += [f"{g},{cid},{s},{final * s / 20:.4f}" for s in range(1, 21)]
    path = _csv(tmp_path, "\n".join(rows) + "\n")
    out = tmp_path / "out"
    args = ["seer", "simulate", "--curves", path, "--deadline", "10", "--budget", "4x"]
    r = runner.invoke(app, [*args, "--seeds", "3", "--out", str(out), "--jobs", "1"])
    assert r.exit_code == 0, r.output
    s = json.loads((out / "summary.json").read_text())
    assert set(s["groups"]) == {"g1", "g2"}
    assert set(s["overall"]) == set(METHODS)
    assert set(s["overall"]["seer"]) == {"mean", "se"}
    assert s["spent"]["seer-fill"] >= s["spent"]["seer"] and s["spent"]["asha"] == 1.0
    assert (out / "methods.png").stat().st_size > 0 and (out / "seer_plan.png").exists()
    r = runner.invoke(app, [*args[:-1], "lots", "--out", str(out)])
    assert r.exit_code == 2 and "budget 'lots' is not valid" in r.output
    r = runner.invoke(app, ["seer", "simulate", "--curves", "nope", "--out", str(out)])
    assert r.exit_code == 2 and "no curve set 'nope'" in r.output


def test_deadlines_as_users_say_them() -> None:
    from datetime import datetime

    import typer

    from tenantml.cli.seer import _amount, parse_deadline

    now = datetime(2026, 11, 22, 9, 30)
    assert parse_deadline("18:00", now) == pytest.approx(8.5 * 60)  # "best model by 6 pm"
    assert parse_deadline("08:00", now) == pytest.approx(22.5 * 60)  # passed: tomorrow
    assert parse_deadline("6h", now) == 360 and parse_deadline("90m", now) == 90
    assert _amount("40h", "--budget") == 2400  # "at most 40 GPU-hours"
    with pytest.raises(typer.Exit):
        parse_deadline("25:99", now)
    r = runner.invoke(app, ["seer", "plan", "--deadline", "6h", "--budget", "40h", "--json"])
    assert r.exit_code == 0 and json.loads(r.output)["T"] == 360


def test_a_clock_deadline_names_the_same_job_when_run_again() -> None:
    """`seer run --deadline 18:00` again after a Ctrl-C: the job's id was a digest of the
    minutes left, another job each time, so it started afresh and spent its budget again."""
    from datetime import datetime

    from tasks import SeerOptions, seer_job_id
    from tenantml.cli.seer import deadline_at, parse_deadline

    ids = []
    for now in (datetime(2026, 11, 22, 9, 30), datetime(2026, 11, 22, 9, 37, 30)):
        at = deadline_at("18:00", now)
        assert at == datetime(2026, 11, 22, 18, 0)
        opts = SeerOptions(parse_deadline("18:00", now), 240.0)
        ids.append(seer_job_id("lenet", 3, opts, at.isoformat(timespec="minutes")))
    assert ids[0] == ids[1]
    assert deadline_at("90", datetime(2026, 11, 22, 9, 30)) is None
    assert deadline_at("08:00", datetime(2026, 11, 22, 9, 30)) == datetime(2026, 11, 23, 8, 0)
    # an amount of time is the request itself: its id follows it, as before
    assert seer_job_id("lenet", 3, SeerOptions(90.0, 240.0), None) != seer_job_id(
        "lenet", 3, SeerOptions(80.0, 240.0), None
    )
