"""The loss estimate the service shows: the posterior expected loss
E[max(0, min(1, max_k f_k) - b)]."""

from __future__ import annotations

import numpy as np
import pytest
from scipy.stats import norm

from policy import ArmPrior, TenantPosterior, independent_prior
from policy.estimates import expected_loss


def _ei(mu: float, sd: float, best: float) -> float:
    z = (mu - best) / sd
    return float((mu - best) * norm.cdf(z) + sd * norm.pdf(z))


def test_one_model_is_its_expected_improvement() -> None:
    rng = np.random.default_rng(0)
    got = expected_loss(np.array([0.8]), np.array([[0.01]]), 0.75, rng, samples=200_000)
    assert abs(got - _ei(0.8, 0.1, 0.75)) < 1e-3


def test_several_models_add_up_beyond_the_best_single_one() -> None:
    rng = np.random.default_rng(1)
    mu, sd, best = np.array([0.8, 0.8]), 0.1, 0.8
    both = expected_loss(mu, np.eye(2) * sd**2, best, rng, samples=200_000)
    assert both > _ei(0.8, sd, best) + 0.01  # two independent chances
    same = expected_loss(mu, np.full((2, 2), sd**2), best, rng, samples=200_000)
    assert abs(same - _ei(0.8, sd, best)) < 1e-3  # perfectly correlated: one chance
    assert expected_loss(np.zeros(0), np.zeros((0, 0)), best, rng) == 0.0


def test_no_model_gains_more_than_the_accuracy_left() -> None:
    """Thirty untried models believed about as good (mean 0.9, s.d. 0.1) as the best, 0.96:
    the Gaussian puts mass above 1, which no accuracy reaches; the estimate stops at 1 - b."""
    rng = np.random.default_rng(2)
    mu, cov, best = np.full(30, 0.9), np.eye(30) * 0.01, 0.96
    capped = expected_loss(mu, cov, best, rng)
    assert 0 < capped <= 1 - best
    uncapped = expected_loss(mu, cov, best, np.random.default_rng(2), ceiling=np.inf)
    assert uncapped > 0.1  # as the service showed for digits before the cap (0.165)


def test_posterior_covariance_is_the_joint_update() -> None:
    prior = independent_prior(np.full(3, 0.5), variance=0.04)
    cov = prior.cov + 0.02 * (1 - np.eye(3))
    post = TenantPosterior(ArmPrior.create(prior.mean, cov, 1e-4), np.arange(3))
    post.update(0, 0.9)
    post.update(2, 0.3)
    c = post.cov()
    assert np.allclose(np.diag(c), post.var)
    k_obs = cov[np.ix_([0, 2], [0, 2])] + 1e-4 * np.eye(2)
    expect = cov - cov[:, [0, 2]] @ np.linalg.solve(k_obs, cov[[0, 2], :])
    assert np.allclose(c, expect, atol=1e-9)


def test_calibration_narrows_a_tenant_the_prior_predicts_well() -> None:
    from policy import History, Observation, Problem, loss_estimates

    m = 12
    cov = 0.01 * (0.5 * np.eye(m) + 0.5)  # correlated arms, s.d. 0.1
    prior = ArmPrior.create(np.full(m, 0.7), cov, 1e-4)
    problem = Problem.create(["a"], [f"m{k}" for k in range(m)], np.ones((1, m), dtype=bool),
                             np.ones((1, m)), prior=prior)  # fmt: skip
    seen = History(tuple(Observation(0, k, 0.7, 1.0) for k in range(4)))  # just as predicted
    raw = loss_estimates(problem, seen, calibration=0)[0]
    calibrated = loss_estimates(problem, seen)[0]
    assert 0 < calibrated < raw
    surprised = History(tuple(Observation(0, k, 0.7 + 0.15 * (-1) ** k, 1.0) for k in range(4)))
    assert loss_estimates(problem, surprised)[0] > loss_estimates(problem, surprised,
                                                                  calibration=0)[0]  # fmt: skip


def test_the_calibration_scale_is_learnt_across_tenants() -> None:
    """A tenant with no results of its own starts from the scale the shared kernel earned on
    the other tenants (their surprises), not from the kernel's own claim: narrower where the
    kernel predicted the others better than it claimed, wider where worse. Its own results then
    move it from there; with none anywhere, every scale is 1."""
    from policy import History, Observation, Problem, loss_estimates
    from policy.estimates import calibration_scales

    kappa = calibration_scales(np.array([1.0, 0.0]), np.array([10, 0]), nu=3.0)
    # a's prior scale is the others' (b has none: 1); b's is a's, (3 + 1) / (3 + 10)
    assert np.allclose(kappa, [(3 * 1.0 + 1.0) / 13, (3 + 1.0) / (3 + 10)])
    assert np.allclose(calibration_scales(np.zeros(2), np.zeros(2, int)), 1.0)
    assert calibration_scales(np.array([40.0, 0.0]), np.array([10, 0]))[1] > 3  # surprised
    assert np.allclose(calibration_scales(np.array([5.0]), np.array([2]), nu=0), 1.0)
    # a lone tenant's scale is its own surprises' (3 pseudo-observations at 1), as before
    assert np.allclose(calibration_scales(np.array([0.5]), np.array([5])), (3 + 0.5) / (3 + 5))

    m = 12
    cov = 0.01 * (0.5 * np.eye(m) + 0.5)
    prior = ArmPrior.create(np.full(m, 0.7), cov, 1e-4)
    problem = Problem.create(["a", "new"], [f"m{k}" for k in range(m)],
                             np.ones((2, m), dtype=bool), np.ones((2, m)), prior=prior)  # fmt: skip
    new = 1
    own = (Observation(new, 0, 0.7, 1.0),)  # the new tenant's one result, as predicted
    raw = loss_estimates(problem, History(own), calibration=0)[new]
    alone = loss_estimates(problem, History(own))[new]  # no other tenant's evidence yet
    assert 0 < alone < raw
    as_predicted = History(own + tuple(Observation(0, k, 0.7, 1.0) for k in range(6)))
    learnt = loss_estimates(problem, as_predicted)[new]
    assert learnt < 0.8 * alone  # narrowed by what the kernel did on tenant a
    surprising = tuple(Observation(0, k, 0.7 + 0.2 * (-1) ** k, 1.0) for k in range(6))
    assert loss_estimates(problem, History(own + surprising))[new] > raw  # widened by it


def test_a_posterior_that_ran_high_on_the_others_moves_a_new_tenants_arms_down() -> None:
    """The mean surprise is learnt across tenants: where the shared posterior predicted tenant
    a's results too high (each 0.1 below its mean), a new tenant's untried arms are moved down
    by it, and its loss estimate falls; too low, it rises. The shift is ``m`` predictive sds,
    ``m`` the mean surprise over all results shrunk by ``nu`` pseudo-observations at 0, one for
    every tenant; with none anywhere, no shift."""
    from policy import History, Observation, Problem, loss_estimates
    from policy._book import TenantBook
    from policy.estimates import calibration_shifts

    m = calibration_shifts(np.array([-5.0, 1.0]), np.array([10, 2]), nu=3.0)
    assert np.allclose(m, [-4.0 / 15, -4.0 / 15])  # all results', 3 pseudo-observations at 0
    assert np.allclose(calibration_shifts(np.zeros(2), np.zeros(2, int)), 0.0)
    assert np.allclose(calibration_shifts(np.array([-5.0]), np.array([10]), nu=0), 0.0)
    assert np.allclose(calibration_shifts(np.array([2.0]), np.array([5])), 2.0 / 8)  # alone

    arms = 12
    cov = 0.01 * (0.9 * np.eye(arms) + 0.1)  # nearly independent arms, s.d. 0.1
    prior = ArmPrior.create(np.full(arms, 0.7), cov, 1e-4)
    problem = Problem.create(["a", "new"], [f"m{k}" for k in range(arms)],
                             np.ones((2, arms), dtype=bool), np.ones((2, arms)),
                             prior=prior)  # fmt: skip
    new = 1

    def on_a(offset: float) -> History:
        # tenant a's results, each `offset` from what the posterior before it predicted
        book = TenantBook(problem, cost_aware=False)
        log = [Observation(new, 0, 0.7, 1.0)]  # the new tenant's one result, as predicted
        for k in range(8):
            book.sync(History(tuple(log)))
            log.append(Observation(0, k, float(book.posterior(0).mu[k]) + offset, 1.0))
        return History(tuple(log))

    low, fair, high = (loss_estimates(problem, on_a(d))[new] for d in (-0.1, 0.0, 0.1))
    # (scaled alone, as until 2026-11-28, ``low`` and ``high`` were the same: equal z^2)
    assert 0 < low < fair < high and low < 0.5 * high, (low, fair, high)
    book = TenantBook(problem, cost_aware=False)
    book.sync(on_a(-0.1))
    assert book.sum_z[0] < -4 and book.sum_z[new] == 0  # signed, each tenant's own


def test_the_spread_is_each_tenants_own_about_the_shared_shift() -> None:
    """The moved covariance is scaled by the tenant's pooled mean square of ``z - m``, not by
    ``kappa_i - m^2``: tenant a predicted exactly (40 results at z = 0) beside tenant b
    predicted one sd too high (40 at z = -1) shares b's shift (m = -40/83), and its spread is
    about that distance squared, not ``kappa_a - m^2 < 0`` clipped to 0 (a fixed estimate)."""
    from policy.estimates import calibration_scales, calibration_shifts, calibration_spreads

    sum_z, sum_z2, n = np.array([0.0, -40.0]), np.array([0.0, 40.0]), np.array([40, 40])
    m = calibration_shifts(sum_z, n)[0]
    kappa = calibration_scales(sum_z2, n)
    v = calibration_spreads(sum_z, sum_z2, n)
    assert kappa[0] - m**2 < 0 < 0.2 < v[0] < 0.3  # a: about m^2 = 0.23
    assert 0.2 < v[1] < 0.3 < kappa[1]  # b: its variance about m, far below its mean square
    # a lone tenant's is its own variance, kappa - m^2; nu = 0: the posterior as it is
    lone = calibration_spreads(np.array([2.0]), np.array([3.0]), np.array([5]))
    assert np.allclose(lone, (3 + 3.0) / 8 - (2.0 / 8) ** 2)
    assert np.allclose(calibration_spreads(sum_z, sum_z2, n, nu=0), 1.0)


def test_a_tenants_estimate_is_its_own_whoever_else_is_served() -> None:
    """The tenants share one set of normal draws (`loss_estimates`), a row per arm: a tenant's
    estimate is the same alone, beside a tenant with more arms, or listed second, and is
    `expected_loss` on its own posterior."""
    from policy import History, Observation, Problem, loss_estimates
    from policy.estimates import SAMPLES

    m = 10
    cov = 0.01 * (0.5 * np.eye(m) + 0.5)
    prior = ArmPrior.create(np.linspace(0.6, 0.8, m), cov, 1e-4)

    def estimate(names: list[str], arms: list[int], at: int) -> float:
        avail = np.zeros((len(names), m), dtype=bool)
        for i, k in enumerate(arms):
            avail[i, :k] = True
        problem = Problem.create(names, [f"m{k}" for k in range(m)], avail,
                                 np.ones((len(names), m)), prior=prior)  # fmt: skip
        seen = History((Observation(at, 0, 0.75, 1.0), Observation(at, 1, 0.6, 1.0)))
        return float(loss_estimates(problem, seen, calibration=0)[at])

    alone = estimate(["a"], [6], 0)
    assert alone > 0
    assert estimate(["a", "b"], [6, 10], 0) == alone  # b has more arms: more draws
    assert estimate(["b", "a"], [10, 6], 1) == alone  # a listed second
    post = TenantPosterior(prior, np.arange(6))
    post.update(0, 0.75)
    post.update(1, 0.6)
    own = expected_loss(post.mu[2:], post.cov()[2:, 2:], 0.75, np.random.default_rng(0), SAMPLES)
    assert own == pytest.approx(alone, rel=1e-9)  # the same draws: seed 0, a row per arm
