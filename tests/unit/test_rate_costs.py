"""The joint ``rate`` picker (policy/rate.py) and the predicted-cost model (policy/costs.py)."""

import re
from dataclasses import replace

import numpy as np
import pytest

from policy import (
    ArmPrior,
    Assignment,
    History,
    Observation,
    Problem,
    Snapshot,
    TenantPosterior,
    fit_arm_prior,
    loss_curves,
    make_policy,
    replay,
)
from policy._book import TenantBook
from policy.acquisition import expected_improvement
from policy.costs import CostEstimator, CostPrior, fit_cost_prior, prior_costs, refit_cost_prior
from policy.loop import SchedulerLoop
from policy.rate import RatePolicy


def _problem(n=3, m=5, seed=0, weights=None, cost=None):
    rng = np.random.default_rng(seed)
    train = rng.uniform(0.3, 0.9, (m, 12))
    avail = np.ones((n, m), dtype=bool)
    c = rng.uniform(0.2, 2.0, (n, m)) if cost is None else cost
    prior = fit_arm_prior(train)
    return Problem.create(
        [f"t{i}" for i in range(n)], [f"m{k}" for k in range(m)], avail, c, weights, prior
    )


def _brute_force_rates(problem, history, calibration=0.0):
    """w_i EI_ik / c_ik for every pair, recomputed from scratch (no book, no cache)."""
    n, m = problem.cost.shape
    ref = float(np.nanmean(problem.cost))
    out = np.full((n, m), -np.inf)
    for i in range(n):
        post = TenantPosterior(problem.prior, np.arange(m))
        best, z2, t = 0.0, 0.0, 0
        tried = set()
        for o in history.log:
            if o.tenant == i:
                z2 += (o.quality - post.mu[o.arm]) ** 2 / (post.var[o.arm] + post.noise)
                post.update(o.arm, o.quality)
                best, t = max(best, o.quality), t + 1
                tried.add(o.arm)
        sd = np.sqrt(post.var)
        if calibration:
            sd = sd * np.sqrt((calibration + z2) / (calibration + t))
        ei = expected_improvement(post.mu, sd, best, upper=1.0)
        for k in range(m):
            if k not in tried:
                out[i, k] = problem.weights[i] * ei[k] / (problem.cost[i, k] / ref)
    return out


@pytest.mark.parametrize("calibration", [0.0, 3.0])
def test_rate_picks_the_pair_with_the_largest_expected_loss_reduction_per_cost(calibration):
    problem = _problem(weights=np.array([1.0, 2.0, 0.5]))
    log = (
        Observation(0, 1, 0.7, 1.0),
        Observation(1, 2, 0.55, 1.0),
        Observation(1, 0, 0.8, 1.0),
        Observation(2, 4, 0.6, 1.0),
    )
    hist = History(log)
    pol = RatePolicy(calibration=calibration)
    for step in range(len(log) + 1):  # also checks the incremental cache after each append
        h = History(log[:step])
        d = pol.decide(Snapshot(problem, h, (), 1), None, np.random.default_rng(0))
        rates = _brute_force_rates(problem, h, calibration)
        i, k = np.unravel_index(np.argmax(rates), rates.shape)
        assert d.assignments == (Assignment(int(i), int(k)),)
    assert hist  # the full history was exercised


def test_rate_serves_every_tenant_before_a_second_model_when_losses_are_large():
    problem = _problem(n=4, cost=np.ones((4, 5)))
    res = replay(problem, np.full((4, 5), 0.8), np.ones((4, 5)), make_policy("rate"), horizon=4)
    assert sorted(o.tenant for o in res.trace) == [0, 1, 2, 3]


def test_rate_fills_slots_with_distinct_pairs_and_believes_pending_jobs():
    problem = _problem(n=2)
    pol = RatePolicy()
    d = pol.decide(Snapshot(problem, History(), (), 6), None, np.random.default_rng(0))
    assert len(set(d.assignments)) == 6
    book = pol.book(Snapshot(problem, History()))
    # a pending job lowers the rates of its tenant's other arms (expected best rises)
    before = pol.tenant_rates(book, 0, ())
    after = pol.tenant_rates(book, 0, [0])
    assert after[0] == -np.inf and np.all(after[1:] <= before[1:] + 1e-12)
    # pending assignments passed in are never picked again
    d2 = pol.decide(Snapshot(problem, History(), d.assignments, 4), None, np.random.default_rng(0))
    assert not set(d2.assignments) & set(d.assignments)
    assert len(d2.assignments) == 4


def test_a_policy_decides_on_a_new_problem_as_a_fresh_one_would():
    """The live loop swaps its problem (a refitted prior, new costs, other arms) under one
    `RatePolicy`; its cached rates must go with the old book. A new book's generation started
    at 0 again, so a prior refit kept rates of the old prior, and fewer arms for a tenant
    indexed past its arm list (IndexError)."""
    rng = np.random.default_rng(0)
    names, models = ["t0", "t1"], ["m0", "m1", "m2"]
    avail, cost = np.ones((2, 3), dtype=bool), np.ones((2, 3))
    flat = ArmPrior.create(np.full(3, 0.5), np.eye(3) * 0.05, 1e-4)
    third_best = ArmPrior.create(np.array([0.1, 0.1, 0.9]), np.eye(3) * 0.05, 1e-4)
    first = Problem.create(names, models, avail, cost, prior=flat)
    refit = Problem.create(names, models, avail, cost, prior=third_best)
    fewer = avail.copy()
    fewer[0, :2] = False
    narrowed = Problem.create(names, models, fewer, cost, prior=flat)
    for new in (refit, narrowed):
        pol = RatePolicy()
        pol.decide(Snapshot(first, History(), (), 1), None, rng)
        got = pol.decide(Snapshot(new, History(), (), 2), None, rng).assignments
        assert got == RatePolicy().decide(Snapshot(new, History(), (), 2), None, rng).assignments


def test_a_completed_job_of_unknown_quality_counts_as_one_without_a_model():
    """An accuracy of NaN made the tenant's rates NaN, `argmax` landed on it and `rate` sent
    no job to any tenant."""
    problem = _problem(n=3, m=4)
    nan = History((Observation(0, 0, float("nan"), 1.0, 1.0),))
    failed = History((Observation(0, 0, 0.0, 1.0, 1.0, completed=False),))
    for name in ("rate", "hybrid"):
        got = make_policy(name).decide(
            Snapshot(problem, nan, (), 3), None, np.random.default_rng(0)
        )
        want = make_policy(name).decide(
            Snapshot(problem, failed, (), 3), None, np.random.default_rng(0)
        )
        assert got.assignments == want.assignments and len(got.assignments) == 3


def test_a_zero_weight_tenant_waits_until_the_others_are_done():
    problem = _problem(n=2, weights=np.array([0.0, 1.0]))
    q = np.full((2, 5), 0.7)
    res = replay(problem, q, np.asarray(problem.cost), make_policy("rate"), horizon=1e9)
    tenants = [o.tenant for o in res.trace]
    assert tenants[:5] == [1] * 5 and tenants[5:] == [0] * 5


def _log_additive(n, m, seed, tau=0.8, s=0.1):
    rng = np.random.default_rng(seed)
    a = rng.normal(0, tau, n)
    b = rng.normal(0, 1.5, m)
    return np.exp(a[:, None] + b[None, :] + rng.normal(0, s, (n, m))), a, b


def test_cost_prior_recovers_a_log_additive_model():
    c, a, b = _log_additive(200, 30, 0)
    c[np.random.default_rng(1).random(c.shape) < 0.3] = np.nan  # missing cells
    p = fit_cost_prior(c)
    # b is identified up to the level of a (centred): compare centred
    np.testing.assert_allclose(p.log_base - p.log_base.mean(), b - b.mean(), atol=0.05)
    assert p.noise_var == pytest.approx(0.01, rel=0.2)
    assert p.tenant_var == pytest.approx(np.var(a), rel=0.2)


def test_cost_prior_uses_tenant_sizes():
    rng = np.random.default_rng(2)
    sizes = np.exp(rng.uniform(5, 12, 100))
    b = rng.normal(0, 1, 20)
    c = np.exp(0.9 * np.log(sizes)[:, None] + b[None, :] + rng.normal(0, 0.05, (100, 20)))
    p = fit_cost_prior(c, sizes)
    assert p.size_slope == pytest.approx(0.9, abs=0.05)
    assert p.tenant_var < 0.01  # the size explains the tenant scale


def test_cost_estimator_refines_one_tenant_from_its_jobs():
    c, _, _ = _log_additive(300, 20, 3, tau=1.0, s=0.05)
    p = fit_cost_prior(c[:200])
    test = c[200:]
    arms = [np.arange(20)] * 100
    est = CostEstimator(p, arms)
    before = np.mean(np.abs(np.log(np.vstack([est.expected(i) for i in range(100)]) / test)))
    for i in range(100):
        est.observe(i, 3, float(test[i, 3]))
    after = np.mean(np.abs(np.log(np.vstack([est.expected(i) for i in range(100)]) / test)))
    assert after < 0.5 * before  # one observed job pins the tenant's scale
    with pytest.raises(ValueError, match="finite and > 0"):
        est.observe(0, 1, -1.0)
    pc = prior_costs(p, np.array([[True, False] + [True] * 18]))
    assert np.isnan(pc[0, 1]) and np.all(pc[0, [0, 2]] > 0)


def test_a_job_without_a_model_can_raise_its_tenants_costs_but_never_lower_them():
    """A failed job's span (or a stopped one's limit) is a lower bound on the model's cost: a
    crash 0.3 s into a model predicted at 20 s took the tenant's every prediction, and the time
    limits made from them, down 20-fold; a bound above the prediction still raises it."""
    cp = CostPrior(np.log([20.0, 20.0, 5.0, 5.0]), 0.0, 0.0, tenant_var=1.0, noise_var=0.5)
    avail = np.ones((1, 4), dtype=bool)
    prior = ArmPrior.create(np.full(4, 0.5), np.eye(4) * 0.05, 1e-4)
    problem = Problem.create(
        ["t0"], ["m0", "m1", "m2", "m3"], avail, prior_costs(cp, avail), prior=prior, cost_prior=cp
    )
    loop = SchedulerLoop(problem, make_policy("rate"))
    before = [loop.time_limit(Assignment(0, k)) for k in range(4)]
    loop.finished([Observation(0, 0, 0.0, 0.3, 1.0, completed=False)])
    assert [loop.time_limit(Assignment(0, k)) for k in range(4)] == before
    book = TenantBook(problem)  # the policy's own estimate: the same rule
    book.sync(History((Observation(0, 0, 0.0, 0.3, 1.0, completed=False),)))
    np.testing.assert_allclose(book.costs[0], TenantBook(problem).costs[0])
    est = CostEstimator(cp, [np.arange(4)])
    was = est.expected(0).copy()
    assert not est.observe_bound(0, 0, 0.3)
    np.testing.assert_array_equal(est.expected(0), was)
    assert est.observe_bound(0, 0, 400.0)  # ran 400 s and still had no model: dearer
    assert np.all(est.expected(0) > was)


def test_cost_prior_rejects_empty_input():
    with pytest.raises(ValueError, match="no finite positive training cost"):
        fit_cost_prior(np.full((3, 4), np.nan))
    with pytest.raises(ValueError, match="tenants, models"):
        fit_cost_prior(np.ones(5))


def test_predicted_costs_are_refined_only_for_the_observed_tenant():
    c, _, _ = _log_additive(40, 5, 4)
    prior_c = fit_cost_prior(c[:30])
    avail = np.ones((3, 5), dtype=bool)
    base = _problem(n=3)
    problem = Problem.create(
        base.tenants,
        base.models,
        avail,
        prior_costs(prior_c, avail),
        prior=base.prior,
        cost_prior=prior_c,
    )
    pol = RatePolicy()
    book = pol.book(Snapshot(problem, History()))
    c0 = [x.copy() for x in book.costs]
    pol.book(Snapshot(problem, History((Observation(1, 0, 0.7, float(c[31, 0]) * 5.0),))))
    np.testing.assert_array_equal(book.costs[0], c0[0])
    np.testing.assert_array_equal(book.costs[2], c0[2])
    assert np.all(book.costs[1] > c0[1])  # a job 5x dearer than predicted raises the rest


def test_cost_prior_with_some_sizes_unknown_uses_the_mean_scale():
    rng = np.random.default_rng(5)
    sizes = np.exp(rng.uniform(5, 12, 60))
    c = np.exp(np.log(sizes)[:, None] + rng.normal(0, 1, 8)[None, :] + rng.normal(0, 0.1, (60, 8)))
    sizes[::4] = np.nan
    p = fit_cost_prior(c, sizes)
    assert p.size_slope == pytest.approx(1.0, abs=0.1)
    a0 = p.tenant_prior_mean(np.array([np.nan, np.exp(p.mean_log_size)]), 2)
    assert a0[0] == pytest.approx(a0[1])


def test_bench_reads_tenant_sizes(tmp_path):
    from tenantml.bench.datasets import BenchInputError, load_dataset, read_tenant_sizes

    t = load_dataset("lcdb")  # rows, features and classes: three covariates per tenant
    assert t.sizes is not None and t.sizes.shape == (len(t.tenants), 3)
    assert np.isfinite(t.sizes).all(axis=1).sum() > 150  # the rest lack classes, or features
    assert np.isfinite(t.sizes[:, 0]).all()  # every data set's rows are known
    i = t.tenants.index("openml-3")  # kr-vs-kp: 2,588 training rows, 74 binarised features
    np.testing.assert_array_equal(t.sizes[i], [2588, 74, 2])
    oboe = load_dataset("oboe")  # instances and features, no classes
    assert oboe.sizes is not None and oboe.sizes.shape == (len(oboe.tenants), 2)
    np.testing.assert_array_equal(oboe.sizes[oboe.tenants.index("openml-3")], [3196, 74])
    bad = tmp_path / "s.csv"
    bad.write_text("tenant,size\nopenml-3,-4\n")
    with pytest.raises(BenchInputError, match="line 2: size -4.0; must be finite and > 0"):
        read_tenant_sizes(bad, t.tenants)
    bad.write_text("name,weight\n")
    with pytest.raises(BenchInputError, match="expected tenant,size"):
        read_tenant_sizes(bad, t.tenants)
    two = tmp_path / "two.csv"  # covariates win over size; an unlisted tenant is unknown
    two.write_text("tenant,size,features,rows\nopenml-3,9,10,500\n")
    got = read_tenant_sizes(two, t.tenants)
    assert got.shape == (len(t.tenants), 2)
    np.testing.assert_array_equal(got[i], [500, 10])  # in SIZE_COVARIATES' order
    assert np.isnan(got[t.tenants.index("openml-6")]).all()
    two.write_text("tenant,rows,features\nopenml-3,500,0\n")
    with pytest.raises(BenchInputError, match="line 2: features 0.0; must be finite and > 0"):
        read_tenant_sizes(two, t.tenants)
    two.write_text("tenant,rows,features\nopenml-3,500,\nopenml-6,90,4\n")  # empty: not known
    np.testing.assert_array_equal(read_tenant_sizes(two, t.tenants)[i], [500, np.nan])
    two.write_text("tenant,rows,classes\nopenml-3,500,\n")  # a column no tenant has: left out
    got = read_tenant_sizes(two, t.tenants)
    assert got.shape == (len(t.tenants), 1) and got[i, 0] == 500
    two.write_text("tenant,Rows\nopenml-3,500\n")  # the covariates are named in the error
    with pytest.raises(BenchInputError, match="expected tenant,size or tenant with any of rows"):
        read_tenant_sizes(two, t.tenants)
    two.write_text("tenant,rows,features\nopenml-3,500\n")  # a short row: refused, not NaN
    with pytest.raises(BenchInputError, match="line 2 has 2 cell.s.; the header has 3"):
        read_tenant_sizes(two, t.tenants)


def test_ablation_variants_are_built_by_name_but_not_run_by_default():
    from policy import DEFAULT_POLICY, POLICY_NAMES
    from policy.policies import ABLATION_NAMES
    from tenantml.bench.datasets import load_dataset
    from tenantml.bench.runner import all_policy_names, check_policies

    assert DEFAULT_POLICY == "rate" and DEFAULT_POLICY in POLICY_NAMES
    unc = make_policy("rate-uncalibrated")
    pred = make_policy("rate-predictive")
    assert isinstance(unc, RatePolicy) and unc.calibration == 0 and unc.name == "rate-uncalibrated"
    assert isinstance(pred, RatePolicy) and pred.predictive
    table = load_dataset("easeml-dl")
    assert check_policies(list(ABLATION_NAMES), table, 1) == ABLATION_NAMES
    assert not set(ABLATION_NAMES) & set(all_policy_names(table))
    with pytest.raises(ValueError, match="valid: rate, hybrid"):
        make_policy("rate-fast")


def _predicted_problem(true_cost):
    n, m = true_cost.shape
    rng = np.random.default_rng(9)
    train_c = np.exp(rng.normal(0, 0.1, (30, m)))  # every model costs about 1 on training data
    cp = fit_cost_prior(train_c)
    avail = np.ones((n, m), dtype=bool)
    base = _problem(n=n, m=m)
    return Problem.create(
        base.tenants, base.models, avail, prior_costs(cp, avail), prior=base.prior, cost_prior=cp
    )


def test_a_job_far_dearer_than_predicted_is_stopped_at_its_time_limit():
    c = np.ones((2, 5))
    c[0, :] = 1000.0  # tenant 0: every job 1000x its prediction
    q = np.full((2, 5), 0.8)
    problem = _predicted_problem(c)
    res = replay(problem, q, c, make_policy("rate"), horizon=60.0)
    stopped = [o for o in res.trace if not o.completed]
    assert stopped and all(o.tenant == 0 for o in stopped)
    assert all(o.cost < 1000.0 and o.quality == 0.0 for o in stopped)
    # the loop learnt tenant 0 is dear: its limit grew after the first stop
    assert stopped[-1].cost > stopped[0].cost
    # tenant 1's cheap jobs all completed; no arm ran twice
    assert all(o.completed for o in res.trace if o.tenant == 1)
    pairs = [(o.tenant, o.arm) for o in res.trace]
    assert len(pairs) == len(set(pairs))
    # the stopped jobs delivered no model (quality 0 is no improvement): tenant 0 stays at a*
    assert not any(o.completed for o in res.trace if o.tenant == 0)
    lc = loss_curves(res.trace, np.array([0.8, 0.8]), np.array([59.0]))
    assert lc.worst_loss[0] == pytest.approx(0.8) and lc.avg_loss[0] == pytest.approx(0.4)
    # the oracle (knows costs) and given-cost problems are never stopped
    oracle = replay(problem, q, c, make_policy("rate"), horizon=60.0, time_limits=False)
    assert all(o.completed for o in oracle.trace)
    given = Problem.create(
        problem.tenants, problem.models, problem.available, c, prior=problem.prior
    )
    assert all(o.completed for o in replay(given, q, c, make_policy("rate"), horizon=60.0).trace)


def test_expected_improvement_of_a_bounded_quality_matches_monte_carlo():
    """EI of ``min(y, 1)``: ``EI(best) - EI(1)`` against a Monte Carlo mean; unbounded as
    before; zero at the bound."""
    rng = np.random.default_rng(0)
    mu, sd = np.array([0.97, 0.9, 0.5, 1.2]), np.array([0.1, 0.05, 0.3, 0.2])
    for best in (0.0, 0.88, 0.985):
        y = rng.normal(mu, sd, size=(400_000, 4))
        mc = np.maximum(0.0, np.minimum(y, 1.0) - best).mean(axis=0)
        got = expected_improvement(mu, sd, best, upper=1.0)
        assert got == pytest.approx(mc, abs=2e-3)
        unbounded = np.maximum(0.0, y - best).mean(axis=0)
        assert expected_improvement(mu, sd, best) == pytest.approx(unbounded, abs=2e-3)
    assert np.all(expected_improvement(mu, sd, 1.0, upper=1.0) == 0.0)


def test_a_tenant_near_perfect_gains_at_most_its_headroom():
    """A tenant at 0.985 with a wide posterior (mean 0.97, sd 0.1) against one at 0.88 (0.9,
    0.05): unbounded, the first looks the more promising; bounded at 1 it can gain at most
    0.015 and the second is (the bench-live case of digits' LeNet variants against MNIST)."""
    mu, sd = np.array([0.97, 0.9]), np.array([0.1, 0.05])
    near, far = (
        expected_improvement(mu[:1], sd[:1], 0.985),
        expected_improvement(mu[1:], sd[1:], 0.88),
    )
    assert near[0] > far[0]
    near_b = expected_improvement(mu[:1], sd[:1], 0.985, upper=1.0)
    far_b = expected_improvement(mu[1:], sd[1:], 0.88, upper=1.0)
    assert near_b[0] <= 0.015 < far_b[0]


def _growing(n, m, seed, s=0.05, ls=None):
    """log c_ik = 0.8 log(size_i) + b_k + g_k (log size_i - mean) + eps: models whose costs grow
    with the data at their own rates (g centred), as an SVM's and a linear model's do."""
    rng = np.random.default_rng(seed)
    ls = rng.uniform(5, 12, n) if ls is None else ls
    b = rng.normal(0, 1, m)
    g = np.linspace(-0.6, 0.6, m)
    x = ls - ls.mean()
    log_c = 0.8 * ls[:, None] + b[None, :] + g[None, :] * x[:, None] + rng.normal(0, s, (n, m))
    return np.exp(log_c), np.exp(ls), g


def test_cost_prior_learns_how_fast_each_models_cost_grows_with_size():
    c, sizes, g = _growing(200, 8, 7)
    p = fit_cost_prior(c[:150], sizes[:150])
    assert p.model_slope is not None
    np.testing.assert_allclose(p.model_slope, g, atol=0.05)
    assert p.size_slope == pytest.approx(0.8, abs=0.05)
    assert np.all(np.asarray(p.slope_var) < 1e-3)
    # a new tenant's costs before any job: within the noise, where one scale per tenant is not
    new = np.log(prior_costs(p, np.ones((50, 8), bool), sizes[150:]) / c[150:])
    flat = replace(p, model_slope=None)
    old = np.log(prior_costs(flat, np.ones((50, 8), bool), sizes[150:]) / c[150:])
    assert np.sqrt(np.mean(new**2)) < 0.2 < np.sqrt(np.mean(old**2))
    # and after one job, the estimator keeps each model's growth
    est = CostEstimator(p, [np.arange(8)] * 50, sizes[150:])
    for i in range(50):
        est.observe(i, 0, float(c[150 + i, 0]))
    after = np.log(np.vstack([np.exp(est.log_median(i)) for i in range(50)]) / c[150:])
    assert np.sqrt(np.mean(after**2)) < 0.15
    # without sizes there is nothing to grow with: one scale per tenant, as before
    assert fit_cost_prior(c[:150]).model_slope is None


def _covariate_costs(n, seed, s=0.05):
    """Three models over tenants of d = 2 covariates (rows, features): model 0's cost grows
    with the rows, model 1's with the rows squared, model 2's with the features too:
    log c_ik = b_k + h_k . log(size_i) + eps. Returns (costs (n, 3), sizes (n, 2), h (3, 2))."""
    rng = np.random.default_rng(seed)
    ls = np.column_stack([rng.uniform(5, 10, n), rng.uniform(1, 5, n)])
    h = np.array([[1.0, 0.0], [2.0, 0.0], [1.0, 1.0]])
    b = np.array([-6.0, -9.0, -7.0])
    log_c = b[None, :] + ls @ h.T + rng.normal(0, s, (n, 3))
    return np.exp(log_c), np.exp(ls), h


def test_each_model_grows_with_each_size_covariate_at_its_own_rate():
    """With rows and features as two covariates (LCDB's tenants carry rows, features and
    classes), the fit learns each model's growth in each, ``g`` (M, d) about the typical
    ``size_slope`` (d,), and predicts a new tenant's costs before any job within the noise;
    one size (rows x features) cannot: model 2 grows with the features, model 1 does not."""
    c, sizes, h = _covariate_costs(200, 4)
    p = fit_cost_prior(c[:150], sizes[:150])
    assert p.dims == 2 and p.model_slope is not None and p.model_slope.shape == (3, 2)
    np.testing.assert_allclose(p.size_slope, h.mean(axis=0), atol=0.05)
    np.testing.assert_allclose(p.model_slope, h - h.mean(axis=0), atol=0.05)
    assert np.asarray(p.slope_var).shape == (3, 2) and np.all(np.asarray(p.slope_var) < 1e-3)
    avail = np.ones((50, 3), bool)
    err = np.log(prior_costs(p, avail, sizes[150:]) / c[150:])
    one = sizes.prod(axis=1)
    p1 = fit_cost_prior(c[:150], one[:150])
    err1 = np.log(prior_costs(p1, avail, one[150:]) / c[150:])
    assert np.sqrt(np.mean(err**2)) < 0.1 < 0.3 < np.sqrt(np.mean(err1**2))
    # the estimator and a refit take the same covariates; another count is refused by name
    est = CostEstimator(p, [np.arange(3)] * 50, sizes[150:])
    median = np.vstack([est.log_median(i) for i in range(50)])
    assert np.sqrt(np.mean((median - np.log(c[150:])) ** 2)) < 0.1
    with pytest.raises(ValueError, match="1 covariate.*fitted on 2"):
        CostEstimator(p, [np.arange(3)] * 50, one[150:])
    # a hand-built prior of two covariates with one growth per model: which covariate?
    with pytest.raises(ValueError, match=r"one growth per model.*give \(3, 2\)"):
        prior_costs(replace(p, model_slope=np.zeros(3)), avail, sizes[150:])
    # a covariate not known is taken at the training tenants' mean; the others still count
    part = sizes[150:].copy()
    part[:, 1] = np.nan
    at_mean = sizes[150:].copy()
    at_mean[:, 1] = np.exp(np.asarray(p.mean_log_size)[1])
    np.testing.assert_allclose(
        prior_costs(p, avail, part), prior_costs(p, avail, at_mean), rtol=1e-9
    )
    assert not np.allclose(prior_costs(p, avail, part)[0], prior_costs(p, avail, part)[1])
    # a covariate that does not vary tells nothing (float rounding must not make it vary)
    flat = sizes[:150].copy()
    flat[:, 1] = 3.0
    r = fit_cost_prior(c[:150], flat)
    assert r.model_slope is None and np.all(np.asarray(r.size_slope) == 0.0)
    # training tenants with a covariate unknown: the growths are learnt from the others
    train = sizes[:150].copy()
    train[:30, 1] = np.nan
    q = fit_cost_prior(c[:150], train)
    assert q.model_slope is not None
    np.testing.assert_allclose(q.model_slope, h - h.mean(axis=0), atol=0.05)
    # a base that lets the growths move learns them from its own tenants' jobs
    base = replace(p, model_slope=None, slope_var=0.25, tenants=0)
    refit = refit_cost_prior(base, c[150:], sizes[150:])
    assert refit.model_slope is not None and refit.model_slope.shape == (3, 2)
    np.testing.assert_allclose(refit.model_slope, h - h.mean(axis=0), atol=0.1)
    assert np.asarray(refit.slope_var).shape == (3, 2)
    assert np.all(np.asarray(refit.slope_var) < 0.25)
    pinned = refit_cost_prior(replace(base, slope_var=np.array([[0.25, 0.0]] * 3)), c, sizes)
    assert pinned.model_slope is not None and np.all(pinned.model_slope[:, 1] == 0.0)


def test_a_growth_the_sizes_cannot_tell_stays_the_typical_one_and_says_so():
    """A model one tenant of known size ran (its b_k takes that one cost whatever g_k is), and
    one that tenants of a single size ran: g_k = 0 with the wide UNSEEN_SLOPE_VAR, not a
    confident number that a refit's ridge would then pin; the others' g are still learnt."""
    from policy.costs import UNSEEN_SLOPE_VAR

    ls = np.random.default_rng(9).uniform(5, 12, 60)
    ls[:10] = 7.0  # ten tenants of one size
    c, sizes, g = _growing(60, 6, 9, ls=ls)
    c[1:, 0] = np.nan  # model 0: one tenant
    c[10:, 1] = np.nan  # model 1: the ten of one size
    p = fit_cost_prior(c, sizes)
    assert p.model_slope is not None
    assert p.model_slope[0] == 0.0 and p.slope_var[0] == UNSEEN_SLOPE_VAR
    assert p.model_slope[1] == 0.0 and p.slope_var[1] == UNSEEN_SLOPE_VAR
    told = g[2:] - g[2:].mean()  # centred over the models the sizes tell
    np.testing.assert_allclose(p.model_slope[2:], told, atol=0.05)
    assert np.all(np.asarray(p.slope_var)[2:] < 1e-3)


def test_a_refit_learns_a_models_growth_only_where_the_base_lets_it():
    """The hand-set base (``slope_var`` 0, the live service's) keeps ``g = 0``; one that allows
    it learns from tenants of several sizes that model 1 grows faster than model 0."""
    c, sizes, _ = _growing(12, 2, 8)
    c[:, 1] = c[:, 0] * (sizes / np.exp(np.log(sizes).mean())) ** 0.5  # 0.5 faster
    base = CostPrior(np.zeros(2), 0.0, 0.8, 1.0, 0.5, mean_log_size=float(np.log(sizes).mean()))
    assert refit_cost_prior(base, c, sizes).model_slope is None
    open_base = replace(base, slope_var=0.25)
    refit = refit_cost_prior(open_base, c, sizes)
    assert refit.model_slope is not None
    assert refit.model_slope[1] - refit.model_slope[0] == pytest.approx(0.5, abs=0.1)
    assert np.all(np.asarray(refit.slope_var) < 0.25)
    assert refit_cost_prior(open_base, c).model_slope is None  # no sizes: nothing to learn


def test_a_models_growth_is_taken_from_the_growth_sizes_where_they_differ():
    """The live service's sizes count a cross-validated job's folds (6.25 times its examples,
    the work) where a fit sees the examples: ``growth_sizes``. Model 1 grows 0.5 faster than
    model 0 in the examples; half the tenants are cross-validated. The prior's costs, the
    estimator's and a refit take ``x_i`` from the growth sizes; a refit that took it from the
    work sizes would learn another growth."""
    rng = np.random.default_rng(3)
    examples = np.exp(rng.uniform(5, 9, 16))
    work = examples * np.where(np.arange(16) % 2 == 0, 6.25, 1.0)
    mean = float(np.log(examples).mean())
    c = np.column_stack([work / 1000, work / 1000 * (examples / np.exp(mean)) ** 0.5])
    base = CostPrior(np.zeros(2), 0.0, 1.0, 1.0, 0.5, mean_log_size=mean, slope_var=0.25)
    refit = refit_cost_prior(base, c, work, growth_sizes=examples)
    assert refit.model_slope is not None
    assert refit.model_slope[1] - refit.model_slope[0] == pytest.approx(0.5, abs=0.1)  # ridge
    wrong = refit_cost_prior(base, c, work)
    assert wrong.model_slope is not None
    assert wrong.model_slope[1] - wrong.model_slope[0] < 0.35
    grown = replace(base, model_slope=np.array([0.0, 0.5]), slope_var=0.0)
    avail = np.ones((16, 2), bool)
    want = np.exp(
        grown.tenant_prior_mean(work, 16)[:, None]
        + np.outer(np.log(examples) - mean, [0.0, 0.5])
        + 0.5 * grown.variances()[None, :]
    )
    np.testing.assert_allclose(prior_costs(grown, avail, work, examples), want, rtol=1e-9)
    est = CostEstimator(grown, [np.arange(2)] * 16, work, examples)
    np.testing.assert_allclose(np.vstack([est.expected(i) for i in range(16)]), want, rtol=1e-9)
    # without growth sizes the work sizes serve both, as before
    same = CostEstimator(grown, [np.arange(2)] * 16, work)
    np.testing.assert_allclose(same.expected(0), prior_costs(grown, avail, work)[0], rtol=1e-9)


def test_sizes_of_another_length_than_the_tenants_are_refused():
    """One size for two tenants would broadcast to both in `prior_costs`: refused by name."""
    from policy import validate_problem

    avail = np.ones((2, 2), bool)
    base = dict(tenants=["a", "b"], models=["m0", "m1"], available=avail, cost=np.ones((2, 2)))
    validate_problem(Problem.create(**base, sizes=[100.0, np.nan], growth_sizes=[10.0, 20.0]))
    for name in ("sizes", "growth_sizes"):
        with pytest.raises(ValueError, match=rf"{name} has shape \(1,\); expected \(2,\)"):
            validate_problem(Problem.create(**base, **{name: [100.0]}))
    # or d covariates per tenant (rows, features, classes), one row each
    validate_problem(Problem.create(**base, sizes=[[100.0, 5.0, 2.0], [np.nan] * 3]))
    for bad in ([[100.0, 5.0, 2.0]], [[[100.0]], [[50.0]]]):
        shape = re.escape(str(np.shape(bad)))
        with pytest.raises(ValueError, match=rf"sizes has shape {shape}; expected \(2,\) or"):
            validate_problem(Problem.create(**base, sizes=bad))
