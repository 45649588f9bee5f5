"""SEER planner (shared/papers/003, Alg. 1-3): the Sec. 3.4 worked example and Fact 1."""

from __future__ import annotations

import math

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from policy.seer import (
    PlanError,
    assign_stage,
    compute_bracket_budgets,
    compute_bracket_parameters,
    eliminate,
    fill,
    plan,
)


def test_section_3_4_example_parameters() -> None:
    # T = 10 min, B = 80 GPU-min, eta = 2 (the example's), other defaults
    bp = compute_bracket_parameters(10, 80, eta=2)
    assert bp.r_star == pytest.approx(40 / 7)  # 5.714
    assert bp.K == 3
    assert bp.t1 == pytest.approx(10 / 7)  # 1.42
    assert bp.B0 == pytest.approx(120 / 7)  # 17.142
    assert bp.q_star == 2
    # Alg. 3 as printed (the text's [17.142, 34.283, 11.432] does not give N = [8, 4])
    assert bp.budgets == pytest.approx([240 / 7, 240 / 7, 80 / 7])
    assert bp.parallelism == (1, 2, 4)
    assert bp.trials == (8, 4)  # the third bracket gets floor(0.67) = 0 trials
    assert bp.gpus == (1, 2)


def test_section_3_4_example_schedule() -> None:
    p = plan(10, 80, eta=2)
    assert p.sampled_trials == 12
    shape = [[(b.trials, b.gpus_per_trial) for b in s.brackets] for s in p.stages]
    assert shape == [[(8, 1), (4, 2)], [(4, 1), (2, 2)], [(2, 1), (1, 2)]]
    starts = [s.start for s in p.stages]
    ends = [s.end for s in p.stages]
    assert starts == pytest.approx([0, 10 / 7, 30 / 7])  # 0, 1.42, 4.26
    assert ends == pytest.approx([10 / 7, 30 / 7, 10])  # ..., 9.94 printed
    assert p.resource_time <= 80
    d = p.to_dict()
    assert {"K", "t1", "N", "P", "stages"} <= set(d)
    assert d["stages"][0] == {  # type: ignore[index]
        "start": 0.0,
        "end": pytest.approx(10 / 7),
        "brackets": [{"gpus_per_trial": 1, "trials": 8}, {"gpus_per_trial": 2, "trials": 4}],
    }


def test_example_promotions_and_eliminations_per_stage() -> None:
    """Run the example's stage loop on fixed losses: trial t<i> has loss i/100 (t0 is best)."""
    p = plan(10, 80, eta=2)
    losses = {f"t{i}": i / 100 for i in range(12)}
    sampled = [f"t{i}" for i in reversed(range(12))]  # worst first, so stage 1 mixes nothing
    alive = sampled
    history = []
    for k, stage in enumerate(p.stages):
        groups = assign_stage(stage, alive, losses)
        history.append(groups)
        nxt = p.stages[k + 1] if k + 1 < len(p.stages) else None
        keep = [0] * len(stage.brackets)
        if nxt is not None:
            by_bracket = {b.bracket: b.trials for b in nxt.brackets}
            keep = [by_bracket.get(b.bracket, 0) for b in stage.brackets]
        alive = eliminate(groups, losses, keep) if nxt else alive
    assert [len(g) for g in history[0]] == [8, 4]
    # stage 1: bracket 1 (1 GPU) = t11..t4, bracket 2 (2 GPUs) = t3..t0
    # end of stage 1: each bracket drops its worst half -> t7..t4 and t1, t0 survive
    # stage 2: descending loss, best two to the 2-GPU bracket
    assert history[1] == [["t7", "t6", "t5", "t4"], ["t1", "t0"]]
    # end of stage 2: bracket 1 keeps t5, t4; bracket 2 keeps t0; best goes to 2 GPUs
    assert history[2] == [["t5", "t4"], ["t0"]]


def test_assign_stage_moves_a_low_bracket_winner_up() -> None:
    p = plan(10, 80, eta=2)
    losses = {f"t{i}": 0.5 for i in range(12)} | {"t0": 0.01, "t9": 0.9}
    groups = assign_stage(p.stages[1], [f"t{i}" for i in range(6)] + ["t9"], losses)
    assert "t0" in groups[-1]  # best trial: most GPUs
    assert all("t9" not in g for g in groups)  # over capacity and worst: not run


def test_eta_4_keeps_a_quarter() -> None:
    p = plan(60, 16 * 60)  # defaults eta = 4, v = 2
    counts = [s.trials for s in p.stages]
    for a, b in zip(counts[:-1], counts[1:], strict=True):
        assert b <= math.ceil(a / 4) + len(p.N)


@pytest.mark.parametrize(
    ("kwargs", "fragment"),
    [
        ({"T": 0, "B": 10}, "deadline T must be a positive"),
        ({"T": 10, "B": -1}, "budget B must be a positive"),
        ({"T": 10, "B": 0.5}, "below one trial-round"),
        ({"T": 0.5, "B": 10}, "shorter than one round"),
        ({"T": 10, "B": 10, "eta": 1}, "eta must be > 1"),
        ({"T": 10, "B": 10, "v": 0.5}, "v must be >= 1"),
        ({"T": 10, "B": 10, "p_min": 0}, "p_min must be an integer >= 1"),
        ({"T": 10, "B": 10, "p_min": 2, "p_max": 1}, "p_max must be an integer >= p_min"),
        ({"T": float("nan"), "B": 10}, "deadline T"),
    ],
)
def test_impossible_inputs_name_the_problem(kwargs: dict[str, float], fragment: str) -> None:
    with pytest.raises(PlanError, match=fragment):
        plan(**kwargs)  # type: ignore[arg-type]


def test_budget_below_deadline_runs_one_bracket_and_finishes_early() -> None:
    # Sec. 3.3: a budget that is "too small" gives one bracket at p_min that ends before T
    p = plan(100, 12)
    assert p.P == (1,)
    assert p.end < 100
    assert p.resource_time <= 12


def test_p_max_caps_parallelism() -> None:
    _, budgets, par = compute_bracket_budgets(1000, 10, 2, 1, 4)
    assert par == (1, 2, 4)
    assert budgets == pytest.approx([1000 / 3] * 3)
    assert max(plan(60, 64 * 60, p_max=4).P) <= 4


# Fact 1's random inputs: T, B = ratio x T, eta, v, p_min, p_max = p_min + extra (None: inf).
PLAN_INPUTS = {
    "T": st.floats(0.5, 5000),
    "ratio": st.floats(0.01, 200),
    "eta": st.floats(1.2, 8),
    "v": st.floats(1, 4),
    "p_min": st.integers(1, 4),
    "p_max_extra": st.one_of(st.none(), st.integers(0, 32)),
    "t_min": st.floats(0.1, 10),
}


@settings(max_examples=400, deadline=None)
@given(**PLAN_INPUTS)
def test_fact_1_no_plan_exceeds_deadline_or_budget(
    T: float, ratio: float, eta: float, v: float, p_min: int, p_max_extra: int | None, t_min: float
) -> None:
    """Fact 1: SEER completes in time at most T and spends resource-time at most B."""
    B = ratio * T
    p_max = math.inf if p_max_extra is None else p_min + p_max_extra
    try:
        p = plan(T, B, eta=eta, v=v, p_min=p_min, p_max=p_max, t_min=t_min)
    except PlanError:
        assert T < t_min or B < p_min * t_min
        return
    assert p.stages, "a valid input must give at least one stage"
    assert p.end <= T * (1 + 1e-9)
    assert p.resource_time <= B * (1 + 1e-9)
    for s in p.stages:
        assert s.end - s.start >= t_min * (1 - 1e-9)
        for b in s.brackets:
            assert p_min <= b.gpus_per_trial <= p_max
            assert isinstance(b.gpus_per_trial, int)


def _shape(p: object) -> list[list[tuple[int, int]]]:
    return [[(b.gpus_per_trial, b.trials) for b in s.brackets] for s in p.stages]  # type: ignore[attr-defined]


def test_fill_spends_what_the_floors_of_line_6_leave() -> None:
    """Issue 19's case: T/t_min = 12, B = 4T. Alg. 2 gives K = 2, t1 = 2.4, N = [4, 3],
    P = [1, 2]; line 6 runs floor(3/4) = 0 trials of the 2-GPU bracket in stage 2, so the plan
    pays 10 x 2.4 + 1 x 9.6 = 33.6 of B = 48. Filled: stage 2's trial gets a second GPU (9.6),
    stage 1 a fourth 2-GPU trial (4.8): 48, all of B, same stage times."""
    p = plan(12, 48, eta=4, p_max=4, t_min=1)
    assert (p.K, p.t1, p.N, p.P) == (2, pytest.approx(2.4), (4, 3), (1, 2))
    assert _shape(p) == [[(1, 4), (2, 3)], [(1, 1)]]
    assert p.resource_time == pytest.approx(33.6)
    f = fill(p)
    assert _shape(f) == [[(1, 4), (2, 4)], [(2, 1)]]
    assert f.resource_time == pytest.approx(48)
    assert [(s.start, s.end) for s in f.stages] == [(s.start, s.end) for s in p.stages]
    assert f.sampled_trials == 8 and p.sampled_trials == sum(p.N) == 7


def test_fill_on_the_section_3_4_example_gives_the_final_leader_the_rest() -> None:
    """Sec. 3.4 (T = 10, B = 80, eta = 2): three stages of 16 x 10/7 = 22.86 GPU-minutes each,
    68.57 in all. The 11.43 left buys the final stage's 2-GPU trial two more GPUs for its 40/7
    minutes; nothing else changes."""
    p = plan(10, 80, eta=2, t_min=1)
    assert p.resource_time == pytest.approx(480 / 7)
    f = fill(p)
    assert _shape(f) == [[(1, 8), (2, 4)], [(1, 4), (2, 2)], [(1, 2), (4, 1)]]
    assert f.resource_time == pytest.approx(80)


@settings(max_examples=300, deadline=None)
@given(**PLAN_INPUTS)
def test_fact_1_holds_for_filled_plans_and_they_leave_less_than_one_trial_round(
    T: float, ratio: float, eta: float, v: float, p_min: int, p_max_extra: int | None, t_min: float
) -> None:
    """A filled plan keeps Fact 1 (by T, within B), never drops what the plan had, never runs
    a stage with more trials than the stage before, and leaves less of B than the cheapest
    stage-1 trial would use."""
    B = ratio * T
    p_max = math.inf if p_max_extra is None else p_min + p_max_extra
    try:
        p = plan(T, B, eta=eta, v=v, p_min=p_min, p_max=p_max, t_min=t_min)
    except PlanError:
        return
    f = fill(p)
    assert f.end <= T * (1 + 1e-9)
    assert p.resource_time * (1 - 1e-9) <= f.resource_time <= B * (1 + 1e-9)
    for before, after in zip(p.stages, f.stages, strict=True):
        assert after.trials >= before.trials and after.gpus >= before.gpus
        for b in after.brackets:
            assert p_min <= b.gpus_per_trial <= p_max and isinstance(b.gpus_per_trial, int)
    for earlier, later in zip(f.stages, f.stages[1:], strict=False):
        assert later.trials <= earlier.trials
    first = f.stages[0]
    cheapest = min(b.gpus_per_trial for b in first.brackets) * (first.end - first.start)
    assert B - f.resource_time < cheapest * (1 + 1e-6)
