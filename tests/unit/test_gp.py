"""GP posterior: equals scikit-learn's GaussianProcessRegressor; variance never grows."""

import numpy as np
from hypothesis import given, settings
from hypothesis import strategies as st
from sklearn.gaussian_process import GaussianProcessRegressor
from sklearn.gaussian_process.kernels import RBF, ConstantKernel

from policy import ArmPrior, TenantPosterior, fit_arm_prior


def _setup(seed: int, k: int = 7):
    rng = np.random.default_rng(seed)
    x = rng.uniform(0, 1, (k, 3))
    kernel = ConstantKernel(0.3, "fixed") * RBF(0.7, "fixed")
    mean = rng.uniform(0.3, 0.7, k)
    noise = 0.01
    return x, kernel, ArmPrior.create(mean, kernel(x), noise), rng


def test_posterior_equals_sklearn_on_small_cases() -> None:
    for seed in range(5):
        x, kernel, prior, rng = _setup(seed)
        arms = np.arange(len(x))
        post = TenantPosterior(prior, arms)
        obs = rng.integers(0, len(x), 5)  # includes repeated arms
        ys = rng.uniform(0, 1, 5)
        for a, y in zip(obs, ys, strict=True):
            post.update(int(a), float(y))
        gpr = GaussianProcessRegressor(kernel, alpha=prior.noise, optimizer=None)
        gpr.fit(x[obs], ys - prior.mean[obs])
        mu, std = gpr.predict(x, return_std=True)
        np.testing.assert_allclose(post.mu, mu + prior.mean, atol=1e-9)
        np.testing.assert_allclose(post.sigma, std, atol=1e-7)


def test_per_observation_noise_equals_sklearn_with_a_noise_per_sample() -> None:
    """``update(a, y, extra)`` conditions on y with noise ``sigma^2 + extra`` for that row alone:
    the posterior is scikit-learn's with ``alpha`` a vector (a noise per training sample)."""
    for seed in range(5):
        x, kernel, prior, rng = _setup(seed)
        post = TenantPosterior(prior, np.arange(len(x)))
        obs = rng.integers(0, len(x), 6)
        ys = rng.uniform(0, 1, 6)
        extra = rng.choice([0.0, 0.002, 0.05], 6)
        for a, y, e in zip(obs, ys, extra, strict=True):
            post.update(int(a), float(y), float(e))
        gpr = GaussianProcessRegressor(kernel, alpha=prior.noise + extra, optimizer=None)
        gpr.fit(x[obs], ys - prior.mean[obs])
        mu, std = gpr.predict(x, return_std=True)
        np.testing.assert_allclose(post.mu, mu + prior.mean, atol=1e-9)
        np.testing.assert_allclose(post.sigma, std, atol=1e-7)


def test_hallucinated_observation_keeps_mean_and_shrinks_variance() -> None:
    _, _, prior, _ = _setup(1)
    post = TenantPosterior(prior, np.arange(7))
    post.update(2, 0.9)
    before_mu, before_var = post.mu.copy(), post.var.copy()
    branch = post.copy()
    branch.update(4, None)
    np.testing.assert_allclose(branch.mu, before_mu, atol=1e-12)
    assert np.all(branch.var <= before_var + 1e-12) and branch.var[4] < before_var[4]
    np.testing.assert_array_equal(post.mu, before_mu)  # the original is untouched


@settings(max_examples=40, deadline=None)
@given(
    seed=st.integers(0, 10_000),
    arms=st.lists(st.integers(0, 6), min_size=1, max_size=12),
)
def test_posterior_variance_never_grows_with_data(seed: int, arms: list[int]) -> None:
    _, _, prior, rng = _setup(seed)
    post = TenantPosterior(prior, np.arange(7))
    var = post.var.copy()
    for a in arms:
        post.update(a, float(rng.uniform()))
        assert np.all(post.var <= var + 1e-12)
        var = post.var.copy()


def test_fit_arm_prior_learns_correlated_models() -> None:
    """Two groups of models that move together across tenants get positive within-group
    correlation and a well-posed noise level."""
    rng = np.random.default_rng(0)
    n_train = 40
    base = rng.uniform(0.3, 0.9, n_train)
    group_a = base + rng.normal(0, 0.01, (4, n_train))
    group_b = 1.2 - base + rng.normal(0, 0.01, (4, n_train))
    prior = fit_arm_prior(np.clip(np.vstack([group_a, group_b]), 0, 1))
    corr = prior.cov / np.sqrt(np.outer(np.diag(prior.cov), np.diag(prior.cov)))
    assert corr[0, 1] > 0.5 and corr[4, 5] > 0.5
    assert corr[0, 1] > corr[0, 5]
    assert 1e-6 <= prior.noise < np.diag(prior.cov).mean()
    np.testing.assert_allclose(prior.mean[:4], group_a.mean(1), atol=1e-9)


def test_fit_arm_prior_handles_missing_cells_and_few_tenants() -> None:
    q = np.array([[0.5, np.nan, 0.7], [0.6, 0.8, np.nan]])
    prior = fit_arm_prior(q)  # 3 training tenants: falls back to independent arms
    assert prior.cov.shape == (2, 2) and np.all(np.isfinite(prior.mean))


@settings(max_examples=15, deadline=None)
@given(seed=st.integers(0, 10_000), n_targets=st.integers(1, 12), restarts=st.integers(0, 2))
def test_kernel_fit_equals_sklearns(seed: int, n_targets: int, restarts: int) -> None:
    """`_fit_kernel` computes the likelihood's gradient its own way (one (M, M) product); its
    objective, gradient and optimum are scikit-learn's GaussianProcessRegressor's, from the same
    start and the same random restarts."""
    import warnings

    from sklearn.exceptions import ConvergenceWarning

    from policy.gp import _fit_kernel, _initial_kernel, _neg_lml

    rng = np.random.default_rng(seed)
    x = rng.uniform(0, 1, (15, 4))
    y = rng.normal(0, 0.1, (15, n_targets)) + np.sin(3 * x[:, :1])
    ours = _fit_kernel(x, y, restarts, seed)
    start = _initial_kernel(x, y)
    gpr = GaussianProcessRegressor(start, n_restarts_optimizer=restarts, random_state=seed)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", ConvergenceWarning)
        gpr.fit(x, y)
    for theta in (start.theta, ours.theta, gpr.kernel_.theta):
        lml, grad = gpr.log_marginal_likelihood(theta, eval_gradient=True)
        value, our_grad = _neg_lml(theta, start, x, y)
        np.testing.assert_allclose(-value, lml, rtol=1e-9)
        np.testing.assert_allclose(-our_grad, grad, rtol=1e-6, atol=1e-8)
    # the same optimum: its likelihood and its covariance (where the length scale sits at its
    # bound, C and the noise trade freely, and restarts tied to the last digit may pick either)
    np.testing.assert_allclose(-_neg_lml(ours.theta, start, x, y)[0],
                               gpr.log_marginal_likelihood_value_, rtol=1e-9)  # fmt: skip
    np.testing.assert_allclose(ours(x), gpr.kernel_(x), rtol=1e-5, atol=1e-8)
