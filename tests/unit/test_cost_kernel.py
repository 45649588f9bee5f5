"""The predicted costs' empirical kernel (policy/costs.py): a tenant's log costs as a GP whose
covariance is learnt across tenants, shrunk towards the additive model."""

import numpy as np
import pytest

from policy import Assignment
from policy.costs import (
    MIN_KERNEL_TENANTS,
    TIMING_VAR,
    CostEstimator,
    CostPrior,
    OnlineCostPrior,
    fit_cost_prior,
    prior_costs,
    refit_cost_prior,
    shrunk_cov,
)


def _two_families(n, m=12, seed=0, tau=0.8, g=1.2, s=0.05):
    """log c_ik = a_i + b_k + g_i [k >= m/2] + eps: the second half of the models (one family)
    has a scale of its own per tenant, which the additive model cannot hold."""
    rng = np.random.default_rng(seed)
    a = rng.normal(0, tau, n)
    b = rng.normal(0, 1.0, m)
    fam = (np.arange(m) >= m // 2).astype(float)
    gi = rng.normal(0, g, n)
    log_c = a[:, None] + b[None, :] + gi[:, None] * fam[None, :] + rng.normal(0, s, (n, m))
    return np.exp(log_c)


def test_shrinkage_keeps_the_target_without_data_and_leaves_it_with_plenty():
    rng = np.random.default_rng(1)
    m = 6
    true = np.full((m, m), 0.5) + np.diag(np.linspace(0.2, 1.0, m))
    true[:3, 3:] = true[3:, :3] = -0.2
    target = np.eye(m)
    for n in range(MIN_KERNEL_TENANTS):  # too few rows: the target itself
        x = rng.multivariate_normal(np.zeros(m), true, size=n).reshape(n, m)
        np.testing.assert_array_equal(shrunk_cov(x, target), target)
    x = rng.multivariate_normal(np.zeros(m), true, size=20_000)
    np.testing.assert_allclose(shrunk_cov(x, target), true, atol=0.05)
    few = shrunk_cov(x[:8], target)
    err_few = np.abs(few - true).sum()
    assert err_few > np.abs(shrunk_cov(x[:2_000], target) - true).sum()
    np.testing.assert_allclose(few, few.T)
    assert np.all(np.linalg.eigvalsh(few) > -1e-9)


def test_the_empirical_kernel_with_the_additive_covariance_predicts_as_the_additive_model():
    """GP with latent covariance tau^2 J + s^2 I and timing noise == additive with noise
    s^2 + TIMING_VAR: the additive model is the kernel's special case."""
    m, tau2, s2 = 7, 0.6, 0.3
    b = np.linspace(-1.0, 2.0, m)
    additive = CostPrior(b, 0.2, 0.0, tau2, s2 + TIMING_VAR)
    gp = CostPrior(b, 0.2, 0.0, tau2, s2, cov=tau2 * np.ones((m, m)) + s2 * np.eye(m))
    arms = [np.arange(m), np.array([0, 2, 4, 6])]
    est_a, est_g = CostEstimator(additive, arms), CostEstimator(gp, arms)
    for i in (0, 1):
        np.testing.assert_allclose(est_g.expected(i), est_a.expected(i), rtol=1e-9)
    seen = [(0, 3, 5.0), (0, 5, 40.0), (1, 4, 0.5), (1, 6, 9.0)]
    for tenant, model, cost in seen:
        est_a.observe(tenant, model, cost)
        est_g.observe(tenant, model, cost)
    for i in (0, 1):  # the models not run yet (a run one's prediction is its cost, for the GP)
        untried = ~np.isin(arms[i], [k for t, k, _ in seen if t == i])
        np.testing.assert_allclose(
            est_g.expected(i)[untried], est_a.expected(i)[untried], rtol=1e-9
        )
    avail = np.ones((2, m), dtype=bool)
    np.testing.assert_allclose(prior_costs(gp, avail), prior_costs(additive, avail), rtol=1e-9)


def test_the_empirical_kernel_learns_a_family_scale_the_additive_model_cannot_hold():
    c = _two_families(400, seed=2)
    train, test = c[:300], c[300:]
    priors = {k: fit_cost_prior(train, kernel=k) for k in ("additive", "empirical")}
    assert priors["additive"].cov is None and priors["empirical"].cov is not None
    errors = {}
    m = c.shape[1]
    for kernel, prior in priors.items():
        est = CostEstimator(prior, [np.arange(m)] * len(test))
        for i in range(len(test)):  # one job of each family seen
            est.observe(i, 0, float(test[i, 0]))
            est.observe(i, m - 1, float(test[i, m - 1]))
        pred = np.log(np.vstack([est.expected(i) for i in range(len(test))]))
        errors[kernel] = float(np.sqrt(np.mean((pred - np.log(test))[:, 1 : m - 1] ** 2)))
    assert errors["empirical"] < 0.3 < errors["additive"]


def test_an_unknown_cost_kernel_is_refused_naming_the_valid_ones():
    with pytest.raises(ValueError, match="unknown cost kernel 'gp'; valid: additive, empirical"):
        fit_cost_prior(np.ones((5, 3)), kernel="gp")  # type: ignore[arg-type]


def test_the_replay_refuses_a_bad_cost_kernel_and_runs_the_empirical_one():
    from tenantml.bench.datasets import BenchInputError, load_dataset
    from tenantml.bench.runner import Protocol, run_repeat

    table = load_dataset("easeml-dl")
    with pytest.raises(BenchInputError, match="--cost-kernel 'gp'; valid: additive, empirical"):
        Protocol(("rate",), 4, cost_kernel="gp").validate(table)
    proto = Protocol(("rate",), 4, costs="predicted", cost_kernel="empirical").validate(table)
    result = run_repeat(table, table.cost, proto, 0)
    assert result.jobs["rate"] > 0


def _base(m=6, b=None):
    """A hand-set additive prior (as the live service's): b_k, tau^2 = 1, s^2 = 0.5."""
    return CostPrior(np.zeros(m) if b is None else np.asarray(b, float), 0.0, 0.0, 1.0, 0.5)


def test_a_refit_learns_a_models_weight_from_the_tenants_that_ran_it():
    """Model 2 costs e^3 times what the base believes on every tenant; the base is refitted
    from four tenants that ran it: a fifth tenant's prediction moves towards the truth, models
    nobody ran keep the base's weight."""
    rng = np.random.default_rng(4)
    m, n = 6, 5
    true_b = np.array([0.0, 0.0, 3.0, 0.0, 0.0, 0.0])
    a = rng.normal(0, 0.5, n)
    cost = np.exp(a[:, None] + true_b[None, :] + rng.normal(0, 0.1, (n, m)))
    seen = np.full((n, m), np.nan)
    seen[:4, :3] = cost[:4, :3]  # four tenants ran models 0, 1, 2
    base = _base(m)
    refit = refit_cost_prior(base, seen)
    assert refit.log_base[2] > 2.0  # learnt: was 0
    np.testing.assert_allclose(refit.log_base[3:], base.log_base[3:], atol=1e-9)
    assert np.all(np.asarray(refit.base_var)[:3] < 0.2) and np.all(refit.base_var[3:] == 1.0)
    new = prior_costs(refit, np.ones((1, m), bool))[0]
    old = prior_costs(base, np.ones((1, m), bool))[0]
    assert new[2] / new[0] > 8.0 * old[2] / old[0]
    assert refit_cost_prior(base, np.full((3, m), np.nan)) is base  # nothing ran: the base
    with pytest.raises(ValueError, match=r"cost must be \(tenants, 6 models\)"):
        refit_cost_prior(base, np.ones((3, 4)))


def test_a_base_fitted_on_many_tenants_moves_little_with_a_few_new_ones():
    c = _two_families(300, seed=5)
    base = fit_cost_prior(c[:280], kernel="empirical")
    refit = refit_cost_prior(base, c[280:])
    assert np.max(np.abs(refit.log_base - base.log_base)) < 0.15
    assert base.cov is not None and refit.cov is not None
    assert np.max(np.abs(refit.cov - base.cov)) < 0.2 * np.max(np.abs(base.cov))


def test_the_online_cost_prior_refits_every_few_costs_and_skips_stopped_jobs():
    from policy import Observation

    online = OnlineCostPrior(_base(4), n_tenants=2, refit_every=3)
    online.observe([Observation(0, 1, 0.0, 99.0, 1.0, completed=False)])  # a lower bound
    assert online.seen == 0 and not online.due()
    online.observe([Observation(0, k, 0.7, 2.0, 1.0) for k in range(3)])
    assert online.seen == 3 and online.due()
    online.fit()
    assert not online.due()
    with pytest.raises(ValueError, match="refit_every must be >= 1"):
        OnlineCostPrior(_base(4), n_tenants=1, refit_every=0)


def test_the_loop_refits_its_cost_model_from_the_jobs_of_every_tenant():
    """SchedulerLoop with online_costs: model 0 is 20x dearer than believed; once two tenants
    ran it, a third tenant, which ran nothing, expects it dearer, and so does the policy."""
    from policy import Observation, Problem, fit_arm_prior, make_policy
    from policy.loop import SchedulerLoop

    m, n = 5, 3
    base = _base(m)
    avail = np.ones((n, m), dtype=bool)
    problem = Problem.create(
        [f"t{i}" for i in range(n)],
        [f"m{k}" for k in range(m)],
        avail,
        prior_costs(base, avail),
        prior=fit_arm_prior(np.random.default_rng(0).uniform(0.3, 0.9, (m, 8))),
        cost_prior=base,
    )
    loop = SchedulerLoop(
        problem, make_policy("rate"), online_costs=OnlineCostPrior(base, n, refit_every=2)
    )
    before = loop.expected_cost(Assignment(2, 0)) / loop.expected_cost(Assignment(2, 1))
    loop.finished([Observation(0, 0, 0.8, 20.0, 1.0), Observation(1, 0, 0.8, 20.0, 2.0)])
    loop.fill()  # the refit is due: it happens before the decision
    after = loop.expected_cost(Assignment(2, 0)) / loop.expected_cost(Assignment(2, 1))
    assert before == pytest.approx(1.0) and after > 3.0
    assert loop.problem.cost_prior is not base
    assert loop.problem.cost[2, 0] > 3.0 * loop.problem.cost[2, 1]


def test_the_log_median_lies_half_the_predictive_variance_below_the_log_mean():
    c = _two_families(60, seed=6)
    for kernel in ("additive", "empirical"):
        prior = fit_cost_prior(c[:50], kernel=kernel)
        est = CostEstimator(prior, [np.arange(c.shape[1])])
        est.observe(0, 2, float(c[50, 2]))
        gap = np.log(est.expected(0)) - est.log_median(0)
        assert np.all(gap > 0)
        if kernel == "additive":
            _, var = est.log_scale(0)
            np.testing.assert_allclose(gap, 0.5 * (var + prior.noise_var))
