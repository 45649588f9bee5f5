"""The gain of a job when the served model is the one that *measures* best (policy/acquisition.py
`selected_improvement`, policy/rate.py): validation accuracies on a few examples are noisy."""

import dataclasses

import numpy as np
import pytest

from policy import (
    ArmPrior,
    History,
    Observation,
    Problem,
    Snapshot,
    fit_arm_prior,
    validate_problem,
)
from policy.acquisition import expected_improvement, selected_improvement
from policy.rate import RatePolicy


def test_the_gain_under_noisy_selection_matches_monte_carlo():
    """E[(f - b) 1{f - b + e > 0}] for f ~ N(mu, sd^2), e ~ N(0, v): the closed form against a
    Monte Carlo mean; v = 0 is EI; more noise, less gain; the bound at 1 still caps it."""
    rng = np.random.default_rng(0)
    mu, sd = np.array([0.9, 0.85, 0.95, 0.7]), np.array([0.05, 0.1, 0.03, 0.2])
    best = 0.88
    f = rng.normal(mu, sd, size=(400_000, 4))
    for v in (0.0, 0.002, 0.01):
        e = rng.normal(0.0, np.sqrt(v), size=f.shape)
        mc = np.where(f - best + e > 0, f - best, 0.0).mean(axis=0)
        assert selected_improvement(mu, sd, best, v) == pytest.approx(mc, abs=2e-3)
    np.testing.assert_allclose(
        selected_improvement(mu, sd, best, 0.0, 1.0), expected_improvement(mu, sd, best, 1.0)
    )
    gains = [selected_improvement(mu, sd, best, v, 1.0) for v in (0.0, 0.001, 0.01, 0.1)]
    assert all(np.all(a >= b) for a, b in zip(gains, gains[1:], strict=False))
    assert np.all(gains[-1] < gains[0])
    assert np.all(selected_improvement(mu, sd, 1.0, 0.01, 1.0) == 0.0)


def _two_tenants(val_sizes):
    rng = np.random.default_rng(1)
    m = 6
    prior = fit_arm_prior(rng.uniform(0.6, 0.95, (m, 20)))
    avail = np.ones((2, m), dtype=bool)
    return validate_problem(
        Problem.create(
            ["small", "large"],
            [f"m{k}" for k in range(m)],
            avail,
            np.ones((2, m)),
            prior=prior,
            val_sizes=val_sizes,
        )  # fmt: skip
    )


def test_rate_serves_the_tenant_whose_measurements_can_tell_a_better_model():
    """Two tenants alike in everything (prior, costs, one model measured at 0.85) but their
    validation sets: 30 examples against 3,000. Without sizes (a replay) they tie and the first
    goes first; with them, the tenant whose next measurement can tell a better model does."""
    history = History((Observation(0, 0, 0.85, 1.0, 1.0), Observation(1, 0, 0.85, 1.0, 1.0)))
    picks = {}
    for sizes in (None, np.array([30.0, 3000.0])):
        problem = _two_tenants(sizes)
        decision = RatePolicy().decide(Snapshot(problem, history, (), 1), None, None)
        picks[sizes is None] = decision.assignments[0].tenant
        book = RatePolicy().book(Snapshot(problem, history))
        if sizes is not None:
            assert RatePolicy.selection_noise(book, 0) == pytest.approx(2 * 0.5 * 0.85 * 0.15 / 30)
    assert picks == {True: 0, False: 1}
    # before its first model a tenant is served whatever it measures: no discount
    fresh = RatePolicy().book(Snapshot(_two_tenants(np.array([30.0, 3000.0])), History()))
    assert RatePolicy.selection_noise(fresh, 0) == 0.0


def test_a_small_tenants_measurements_move_its_posterior_less():
    """The GP conditions a tenant's validation accuracy with that measurement's own binomial
    noise ``(1 - r) q (1 - q) / n_val`` on top of the prior's: the same 0.95 on 30 examples
    moves the models it correlates with less, and leaves them less certain, than on 3,000 or in
    a replay (exact qualities: the prior's noise alone)."""
    m = 4
    cov = 0.01 * (0.2 * np.eye(m) + 0.8)  # models correlated 0.8, s.d. 0.1
    prior = ArmPrior.create(np.full(m, 0.8), cov, 1e-4)
    history = History((Observation(0, 0, 0.95, 1.0, 1.0), Observation(1, 0, 0.95, 1.0, 1.0)))

    def book(sizes):
        problem = Problem.create(
            ["small", "large"], [f"m{k}" for k in range(m)], np.ones((2, m), dtype=bool),
            np.ones((2, m)), prior=prior, val_sizes=sizes,
        )  # fmt: skip
        return RatePolicy().book(Snapshot(validate_problem(problem), history))

    small, replay = book(np.array([30.0, 3000.0])), book(None)
    assert small.measurement_noise(0, 0.95) == pytest.approx(0.5 * 0.95 * 0.05 / 30)
    assert replay.measurement_noise(0, 0.95) == 0.0
    noisy, exact = small.posterior(0), replay.posterior(0)
    assert np.all(noisy.mu[1:] < exact.mu[1:] - 0.005) and np.all(noisy.mu[1:] > 0.8)
    assert np.all(noisy.var[1:] > exact.var[1:])
    # 3,000 examples: s.d. 0.004, conditioned almost as exactly as the replay's
    np.testing.assert_allclose(small.posterior(1).mu, exact.mu, atol=0.01)
    assert small.posterior(1).mu[1] < exact.mu[1]


def test_a_bad_validation_size_is_refused_naming_the_tenant():
    problem = _two_tenants(np.array([30.0, 3000.0]))
    with pytest.raises(ValueError, match=r"validation size 0.0 of tenant 'large' is invalid"):
        validate_problem(dataclasses.replace(problem, val_sizes=np.array([30.0, 0.0])))
    with pytest.raises(ValueError, match=r"val_sizes has shape \(3,\); expected \(2,\)"):
        validate_problem(dataclasses.replace(problem, val_sizes=np.ones(3) * 5))
    exact = dataclasses.replace(problem, val_sizes=np.array([np.inf, 30.0]))
    assert validate_problem(exact) is exact  # inf: measured exactly


def test_the_service_tells_the_policy_each_tenants_validation_size():
    from store.schema import Schema, Tensor
    from tasks._service import TenantInfo, build_problem
    from trainers import CV_MAX_EXAMPLES, CV_WORK, VAL_FRACTION, candidates

    tab = Schema(input=Tensor(5), output=Tensor(2))
    img = Schema(input=Tensor(8, 8, 1), output=Tensor(10))
    names = tuple(c.name for c in candidates(tab))
    pixels = tuple(c.name for c in candidates(img))
    tenants = [
        TenantInfo("a", tab, names, 150, 1, "a"),
        TenantInfo("b", tab, names, 2400, 1, "b"),
        TenantInfo("c", img, pixels, 150, 1, "c"),
    ]
    problem, _ = build_problem(tenants)
    assert VAL_FRACTION == 0.2 and 150 <= CV_MAX_EXAMPLES < 2400
    # a small tabular tenant is cross-validated: every example scores; a large one, and an
    # image tenant (its networks hold out a fifth), are measured on their fifth
    np.testing.assert_array_equal(problem.val_sizes, [150.0, 480.0, 30.0])
    # and the cost model prices its folds: 5 fits on 4/5 and one on all, over one on 4/5
    assert CV_WORK == pytest.approx(6.25)
    np.testing.assert_allclose(problem.sizes, [150.0 * CV_WORK, 2400.0, 150.0])
