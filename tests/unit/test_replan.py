"""The re-planning tuner (policy.seer.replan): its curve predictor, its choice between the rest of
the plan and exploiting the leaders, and Fact 1 (never past T or B) on random problems."""

from __future__ import annotations

import math
import re
from dataclasses import replace

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from policy.seer import PlanError, Stage, StageBracket, fill, plan
from policy.seer.replan import (
    MIN_POINTS,
    CurvePredictor,
    at_most,
    choose,
    diverged_at,
    e_grid_split,
    starting_plan,
)
from policy.seer.tuning import Curves, Outcome, TuningSettings, run_method
from tenantml.bench.curves import load_curves


def _predictor(values: list[float], length: int = 100, ceiling: float = 1.0) -> CurvePredictor:
    times = np.arange(1.0, len(values) + 1)
    return CurvePredictor(times, np.asarray(values), length, ceiling)


def test_too_few_points_predict_no_change() -> None:
    p = _predictor([0.3, 0.5][: MIN_POINTS - 1])
    assert p(50.0) == 0.5
    assert _predictor([])(5.0) == float("-inf")


def test_a_saturating_curve_is_extrapolated_up_to_the_horizon_and_its_length() -> None:
    """y_k = 0.9 - 0.5 / k is Eq. 4's form (a0 = a2 = 0, a1 = 2, a3 = ceiling - 0.9): the fit
    is exact; beyond 4x the evaluations seen (HORIZON) or the recipe's length it holds."""
    k = np.arange(1.0, 7.0)
    p = CurvePredictor(k, 0.9 - 0.5 / k, 100, 0.95)
    assert p(6.0) == pytest.approx(0.9 - 0.5 / 6)
    assert p(12.0) == pytest.approx(0.9 - 0.5 / 12, abs=1e-4)
    assert p(24.0) == pytest.approx(0.9 - 0.5 / 24, abs=1e-4)
    assert p(500.0) == pytest.approx(p(24.0))  # the horizon: 4 x 6 evaluations
    short = CurvePredictor(k, 0.9 - 0.5 / k, 10, 0.95)
    assert short(500.0) == pytest.approx(0.9 - 0.5 / 10, abs=1e-4)  # its 10th and last


def _stage(index: int, start: float, end: float, *brackets: tuple[int, int]) -> Stage:
    return Stage(
        index, start, end, tuple(StageBracket(g, n, i) for i, (g, n) in enumerate(brackets))
    )


def test_a_leader_that_keeps_improving_is_exploited_when_the_plan_starves_it() -> None:
    """Two trials left, 8 time units and 32 resource-units: the rest of the plan trains both on
    one resource (the leader reaches evaluation 14: 0.757); exploiting gives it four
    (lambda(4) = 3.03: evaluation 30, held at the horizon 24: 0.817), more than MARGIN better."""
    k = np.arange(1.0, 7.0)
    leader = CurvePredictor(k, 0.9 - 2.0 / k, 100, 0.95)
    other = CurvePredictor(k, 0.6 - 2.0 / k, 100, 0.95)
    rest = [_stage(2, 6.0, 14.0, (1, 2))]
    s = TuningSettings(t_min=1)
    got = choose(rest, {0: 6.0, 1: 6.0}, {0: leader, 1: other}, 8.0, 32.0, s)
    assert got.name == "exploit-1" and got.trials == (0,) and got.gpus == 4
    assert got.plan == pytest.approx(0.9 - 2.0 / 14, abs=1e-3)
    assert got.predicted == pytest.approx(0.9 - 2.0 / 24, abs=1e-3)
    # flat curves: nothing to gain from a bet, the plan goes on
    flat = {t: _predictor([0.7] * 6) for t in (0, 1)}
    assert choose(rest, {0: 6.0, 1: 6.0}, flat, 8.0, 32.0, s).name == "continue"
    # no budget for more than one resource each: exploiting is the plan, it goes on
    assert choose(rest, {0: 6.0, 1: 6.0}, {0: leader, 1: other}, 8.0, 8.0, s).name == "continue"


def _flat(levels: list[float], length: int = 64) -> Curves:
    t = np.arange(1.0, length + 1)
    ids = tuple(str(i) for i in range(len(levels)))
    return Curves("flat", ids, tuple(t for _ in levels), tuple(np.full(length, v) for v in levels))


def _alternating(name: str, odd: np.ndarray, even: np.ndarray, n: int) -> Curves:
    """``n`` configurations, one evaluation per time unit: odd ones follow ``odd``, even ones
    ``even``."""
    t = np.arange(1.0, len(odd) + 1)
    levels = tuple(odd if i % 2 else even for i in range(n))
    return Curves(name, tuple(str(i) for i in range(n)), tuple(t for _ in levels), levels)


def test_with_nothing_to_extrapolate_it_is_seer_fill() -> None:
    c = _flat(list(np.linspace(0.1, 0.9, 40)))
    s = TuningSettings(eta=2, t_min=1, p_max=4)
    for seed in range(3):
        ours, fill_ = (
            run_method("replan", c, 10, 80, seed, s),
            run_method("seer-fill", c, 10, 80, seed, s),
        )
        assert (ours.value, ours.trials) == (fill_.value, fill_.trials)
        assert ours.decisions and all(": continue" in d for d in ours.decisions)


def test_fill_caps_the_first_stage_of_a_remainder_at_the_trials_alive() -> None:
    """The rest of a plan from stage 2 on, with budget to spare: uncapped, fill would run more
    trials in its first stage than are alive (no new configuration may join)."""
    p = plan(40, 160, eta=4, p_max=4, t_min=1)
    rest = replace(p, B=400.0, stages=p.stages[1:])
    alive = p.stages[1].trials
    assert fill(rest).stages[0].trials > alive
    capped = fill(rest, first_cap=alive)
    assert capped.stages[0].trials == alive
    assert p.stages[1].resource_time < capped.resource_time <= 400.0 * (1 + 1e-9)


@settings(max_examples=25, deadline=None)
@given(
    asymptotes=st.lists(st.floats(0.2, 1.0), min_size=2, max_size=12),
    steepness=st.floats(0.05, 2.0),
    length=st.integers(2, 40),
    T=st.floats(3, 40),
    ratio=st.sampled_from([2.0, 4.0, 16.0]),
    seed=st.integers(0, 100),
)
def test_fact_1_replanning_never_spends_past_b(
    asymptotes: list[float], steepness: float, length: int, T: float, ratio: float, seed: int
) -> None:
    """Saturating curves of any steepness and length (some end before T, leaving budget the
    re-plan hands on): the run never pays more than B, and returns a value some trial reached."""
    t = np.arange(1.0, length + 1)
    c = Curves(
        "sat",
        tuple(str(i) for i in range(len(asymptotes))),
        tuple(t for _ in asymptotes),
        tuple(a - steepness / np.sqrt(t) for a in asymptotes),
    )
    out = run_method("replan", c, T, ratio * T, seed, TuningSettings(t_min=1))
    assert out.resource_time <= ratio * T * (1 + 1e-9)
    assert c.untrained <= out.value <= max(asymptotes)


def test_it_returns_the_best_trial_of_the_run_not_a_finalist_that_diverged() -> None:
    """Half the configurations lead for 8 epochs and then collapse (a learning rate too high),
    half hold 0.3. SEER-fill's finalists are the leaders after stage 2, and it
    returns one that collapsed in the last stage; `replan` the best trial of the whole run."""
    length = 64
    t = np.arange(1.0, length + 1)
    collapse = np.where(t <= 8, 0.6, 0.05)
    steady = np.full(length, 0.3)
    c = _alternating("diverging", collapse, steady, 40)
    s = TuningSettings(eta=2, t_min=1, p_max=4)
    for seed in range(3):
        assert run_method("seer-fill", c, 10, 80, seed, s).value == pytest.approx(0.05)
        assert run_method("replan", c, 10, 80, seed, s).value >= 0.3


def test_the_start_is_e_grids_plan_where_seers_bets_on_one_finalist_early() -> None:
    """T/t_min = 12 at 4x (OPDA AlexNet at 0.25x): SEER-fill's plan runs 4x1 + 4x2 trials for
    2.4 t_min, then one trial on 2 GPUs; the tuner starts from E-Grid's plan instead, 4 trials
    on 1 GPU for T/2 then the best on 4. With a first stage of 3.2 t_min (T/t_min = 16, LCDB at
    1x) or three stages (Sec. 3.4's example) it starts from SEER-fill's."""
    seer12 = fill(plan(12, 48, eta=4, v=2, p_min=1, p_max=4, t_min=1))
    assert [s.trials for s in seer12.stages] == [8, 1] and seer12.stages[0].end < MIN_POINTS
    p = starting_plan(12, 48, eta=4, v=2, p_min=1, p_max=4, t_min=1)
    assert p.origin == "e-grid" and p.to_dict()["origin"] == "e-grid"
    shape = [(s.start, s.end, [(b.trials, b.gpus_per_trial) for b in s.brackets]) for s in p.stages]
    assert shape == [(0.0, 6.0, [(4, 1)]), (6.0, 12.0, [(1, 4)])]
    assert p.resource_time == pytest.approx(48.0)
    assert e_grid_split(12, 48, 1, 4) == (4, 4)
    for T, B, eta in ((16, 64, 4), (10, 80, 2)):
        kept = starting_plan(T, B, eta=eta, v=2, p_min=1, p_max=4, t_min=1)
        assert kept.origin == "seer"
        assert kept == fill(plan(T, B, eta=eta, v=2, p_min=1, p_max=4, t_min=1))
    # one stage (T/t_min = 4: LCDB at 0.25x) has no decision point: E-Grid's plan gives one
    assert len(fill(plan(4, 16, eta=4, v=2, p_min=1, p_max=4, t_min=1)).stages) == 1
    assert starting_plan(4, 16, eta=4, v=2, p_min=1, p_max=4, t_min=1).origin == "e-grid"
    # halves shorter than t_min: SEER's plan stays
    assert starting_plan(1.5, 6, eta=4, v=2, p_min=1, p_max=4, t_min=1).origin == "seer"
    # p_max = inf (the live default): E-Grid would explore one configuration and exploit it
    assert e_grid_split(12, 48, 1, math.inf)[1] == 1
    assert starting_plan(12, 48, eta=4, v=2, p_min=1, p_max=math.inf, t_min=1).origin == "seer"
    # B < p_min T: E-Grid's one explorer and its finalist would cost 4 > 3 = B
    kept = starting_plan(4, 3, eta=4, v=2, p_min=1, p_max=4, t_min=1)
    assert kept.origin == "seer" and kept.resource_time <= 3


@settings(max_examples=300, deadline=None)
@given(
    T=st.floats(1, 1e4),
    ratio=st.floats(0.3, 64),
    t_min_share=st.floats(0.001, 1.0),
    p_min=st.sampled_from([1, 2]),
    p_max=st.sampled_from([2.0, 4.0, math.inf]),
)
def test_fact_1_for_the_starting_plan(
    T: float, ratio: float, t_min_share: float, p_min: int, p_max: float
) -> None:
    """Whichever plan it starts from: never past T, never over B, every stage >= t_min, and
    an E-Grid start explores at least two configurations."""
    t_min = T * t_min_share
    try:
        p = starting_plan(T, ratio * T, eta=4, v=2, p_min=p_min, p_max=p_max, t_min=t_min)
    except PlanError:
        return  # no SEER plan for these inputs (the planner's tests cover the message)
    assert p.end <= T * (1 + 1e-9) and p.resource_time <= ratio * T * (1 + 1e-9)
    assert all(s.end - s.start >= t_min * (1 - 1e-9) for s in p.stages)
    if p.origin == "e-grid":
        assert p.stages[0].trials >= 2


def test_at_most_trims_the_first_stage_from_its_fewest_resources_per_trial() -> None:
    """SEER's plan at T = 30 t_min, B = 4 T samples 16 + 6 trials; a space of 10
    configurations keeps the 6 on two resources and 4 on one, and no later stage grows."""
    p = plan(30, 120, eta=4, p_max=4, t_min=1)
    assert [(b.gpus_per_trial, b.trials) for b in p.stages[0].brackets] == [(1, 16), (2, 6)]
    q = at_most(p, 10)
    assert [(b.gpus_per_trial, b.trials) for b in q.stages[0].brackets] == [(1, 4), (2, 6)]
    trials = [st.trials for st in q.stages]
    assert trials == sorted(trials, reverse=True) and trials[1:] == [
        st.trials for st in p.stages[1:]
    ]
    assert [(st.start, st.end) for st in q.stages] == [(st.start, st.end) for st in p.stages]
    tiny = at_most(p, 1)
    assert [st.trials for st in tiny.stages] == [1] * len(tiny.stages)
    assert fill(at_most(p, 10), first_cap=10).resource_time <= 120 * (1 + 1e-9)


def test_a_finite_space_is_never_trained_twice() -> None:
    """Ten recorded configurations and a plan that samples 22: SEER-fill trains some twice (the
    same curve again), `replan` each once, and its result is no worse."""
    c = _flat(list(np.linspace(0.1, 0.9, 10)), length=64)
    s = TuningSettings(eta=4, t_min=1, p_max=4)
    for seed in range(3):
        ours, theirs = (
            run_method("replan", c, 30, 120, seed, s),
            run_method("seer-fill", c, 30, 120, seed, s),
        )
        assert theirs.trials > len(c) >= ours.trials
        assert ours.value >= theirs.value


def test_gpus_freed_by_curves_that_end_go_to_new_configurations() -> None:
    """Recipes of 4 evaluations and a deadline of 24: every trial has ended long before T.
    SEER-fill leaves most of B unpaid; `replan` starts new plans on new configurations in what
    is left, until T, B or the space runs out, and never pays more than B (Fact 1)."""
    c = _flat(list(np.linspace(0.1, 0.9, 200)), length=4)
    s = TuningSettings(eta=4, t_min=1, p_max=4)
    for seed in range(3):
        ours = run_method("replan", c, 24, 96, seed, s)
        theirs = run_method("seer-fill", c, 24, 96, seed, s)
        assert theirs.resource_time < 0.5 * 96
        assert 0.95 * 96 <= ours.resource_time <= 96 * (1 + 1e-9)
        assert ours.trials > theirs.trials and ours.value >= theirs.value
        assert any(d.endswith("new configurations") for d in ours.decisions)


def test_a_loss_bounded_by_zero_keeps_predictions_below_it() -> None:
    """The step-LR curves (validation loss, negated; upper 0): on group seed1 one trial reaches
    a loss of 2602 after leading. Without the bound the ceiling was the best value plus a tenth
    of the range it blew up (260), and predictions were of negative losses (7.9, 16.7 in seeds
    2 and 3); with it no prediction passes 0."""
    c = load_curves("steplr-digits", minimize=True)["lenet-digits-seed1"]
    assert c.upper == 0.0
    T = 0.25 * c.full_time
    for seed in range(4):
        out = run_method("replan", c, T, 16 * T, seed, TuningSettings())
        predicted = [
            float(x) for d in out.decisions for x in re.findall(r"predicted (\S+?)[;)]", d)
        ]
        assert predicted and max(predicted) <= 0.0


def test_once_the_space_is_tried_freed_gpus_resume_eliminated_trials() -> None:
    """Ten configurations: five lead for 3 evaluations and then collapse (a learning rate too
    high), five start at 0 and rise to 0.9 by the end of their 16. Stage 1 (1.4 evaluations)
    keeps leaders, so SEER-fill returns a collapsed one; `replan` has tried every configuration
    when the finalists' recipes end, and resumes the eliminated trials from their checkpoints."""
    length = 16
    t = np.arange(1.0, length + 1)
    trap, slow = np.where(t <= 3, 0.6, 0.05), np.where(t <= 3, 0.0, 0.9 * t / length)
    c = _alternating("traps", trap, slow, 10)
    s = TuningSettings(eta=4, t_min=1, p_max=4)
    for seed in range(3):
        assert run_method("seer-fill", c, 30, 120, seed, s).value == pytest.approx(0.05)
        ours = run_method("replan", c, 30, 120, seed, s)
        assert ours.value == pytest.approx(0.9) and ours.trials == len(c)
        assert ours.resource_time <= 120 * (1 + 1e-9)
        assert any(d.endswith("eliminated trials, resumed") for d in ours.decisions)


def test_the_budget_an_exploit_cannot_use_goes_to_a_new_plan() -> None:
    """Step-LR group seed0, 16x budget, 0.25x deadline, seed 1: `replan` exploits one trial on
    p_max = 4 GPUs with 10x that left in B. Before, the run ended there at 68% of B (loss
    0.288); the rest now resumes eliminated trials beside it, within B."""
    c = load_curves("steplr-digits", minimize=True)["lenet-digits-seed0"]
    T = 0.25 * c.full_time
    out = run_method("replan", c, T, 16 * T, 1, TuningSettings())
    assert out.decisions[0].split(": ")[1].startswith("exploit-1")
    assert "unused budget" in out.decisions[1] and out.decisions[1].endswith("resumed")
    assert 0.95 * 16 * T <= out.resource_time <= 16 * T * (1 + 1e-9)
    assert -out.value < 0.288


@pytest.mark.parametrize(
    ("values", "since", "expected"),
    [
        ([0.1, 0.5, 0.7, 0.1], 1, 3),  # rose most of the way, back to where it started
        ([0.1, 0.5, 0.7, 0.05, 0.8], 1, 3),  # below its start: diverged, whatever comes next
        ([0.1, 0.1, 0.1, 0.1, 0.6], 1, None),  # a warm-up: flat, then learning
        ([0.1, 0.15, 0.1, 0.12], 1, None),  # noise: it never rose a tenth of the way
        ([0.1, 0.5, 0.3, 0.2], 1, None),  # lost some of its gain, not all
        ([0.1, 0.5, float("nan")], 1, 2),  # NaN is the worst value
        ([0.1, 0.5, 0.1, 0.6, 0.1], 3, 4),  # only evaluations from `since` on
        ([0.1, 0.5], 1, None),  # too short to tell
    ],
)
def test_diverged_at(values: list[float], since: int, expected: int | None) -> None:
    assert diverged_at(np.asarray(values), 1.0, since) == expected


def _steplr(group: str, budget: float, seed: int) -> tuple[Curves, float, Outcome]:
    c = load_curves("steplr-digits", minimize=True)[group]
    T = 0.25 * c.full_time
    return c, T, run_method("replan", c, T, budget * T, seed, TuningSettings())


def test_a_finalist_that_diverges_is_stopped_and_eliminated_trials_resume() -> None:
    """Step-LR group seed1, 4x budget, 0.25x deadline, seed 1: E-Grid's finalist (a high
    learning rate, the leader after 3.75 epochs) diverges to chance (loss 2.3), where E-Grid
    ends. `replan` stops it there and resumes the eliminated trials on its GPUs: they have had
    more training than a new configuration could get before the deadline."""
    c, T, out = _steplr("lenet-digits-seed1", 4, 1)
    assert run_method("e-grid", c, T, 4 * T, 1, TuningSettings()).value < -2.2
    assert any(d.endswith("diverged (-2.31), stopped") for d in out.decisions)
    assert any(d.endswith("eliminated trials, resumed") for d in out.decisions)
    assert out.trials == 4  # no new configuration
    assert -out.value < 0.3
    assert out.resource_time <= 4 * T * (1 + 1e-9)


def test_too_little_left_for_a_plan_resumes_the_best_trial_to_the_deadline() -> None:
    """Step-LR group seed0, 4x budget, 0.25x deadline, seed 4: the finalist diverges with less
    than one epoch left, too little for any plan; the best eliminated trial trains on the
    freed GPUs to the deadline (before: loss 1.27 and 89% of B)."""
    _, T, out = _steplr("lenet-digits-seed0", 4, 4)
    assert "too little for a plan" in out.decisions[-1]
    assert -out.value < 0.35
    assert 0.99 * 4 * T <= out.resource_time <= 4 * T * (1 + 1e-9)
