"""Worked examples from ease.ml (shared/papers/000 Sec. 4.1)."""

import numpy as np

from policy import (
    FCFS,
    ModelMeta,
    Observation,
    Problem,
    RoundRobin,
    StaticOrder,
    TwoPhasePolicy,
    cumulative_regret,
    replay,
)

# Sec. 4.1: U1 = {M1: 90, M2: 95, M3: 100}, U2 = {M1: 70, M2: 95, M3: 100}.
QUALITY = np.array([[90.0, 95.0, 100.0], [70.0, 95.0, 100.0]])


def _problem() -> Problem:
    meta = ModelMeta(year=np.array([3.0, 2.0, 1.0]), citations=np.array([3.0, 2.0, 1.0]))
    return Problem.create(
        ["U1", "U2"], ["M1", "M2", "M3"], np.ones((2, 3), bool), np.ones((2, 3)), meta=meta
    )


def test_fcfs_regret_215_after_two_rounds() -> None:
    trace = [Observation(0, 0, 90.0, 1.0, 1.0), Observation(0, 1, 95.0, 1.0, 2.0)]
    r, r_prime = cumulative_regret(trace, QUALITY.max(1))
    assert r == 215.0 and r_prime == 215.0


def test_serving_u2_second_gives_150() -> None:
    trace = [Observation(0, 0, 90.0, 1.0, 1.0), Observation(1, 0, 70.0, 1.0, 2.0)]
    assert cumulative_regret(trace, QUALITY.max(1))[0] == 150.0


def test_policies_reproduce_the_example_traces() -> None:
    """FCFS keeps serving U1 (215); round robin serves U2 second (150)."""
    for picker, expected in ((FCFS(), 215.0), (RoundRobin(), 150.0)):
        policy = TwoPhasePolicy("p", picker, StaticOrder("year"))
        res = replay(_problem(), QUALITY, np.ones((2, 3)), policy, horizon=2.0)
        two = [o for o in res.trace if o.finished_at <= 2.0]
        assert cumulative_regret(two, QUALITY.max(1))[0] == expected


def test_ease_ml_regret_never_exceeds_classic_regret() -> None:
    """R'_T <= R_T (Sec. 4.1), e.g. when a later model is worse than an earlier one."""
    trace = [Observation(0, 2, 100.0, 1.0, 1.0), Observation(0, 0, 90.0, 1.0, 2.0)]
    r, r_prime = cumulative_regret(trace, QUALITY.max(1))
    assert r_prime < r
