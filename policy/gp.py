"""Gaussian process over a tenant's arms, its kernel learnt from other tenants (ease.ml App. A).

Notation (shared/papers/002 Alg. 1 and App. A):
- ``x_k`` (n_train,): model ``k``'s *quality vector*, its quality on each "training" tenant.
- Kernel ``Sigma(k, k') = C * exp(-||x_k - x_k'||^2 / (2 l^2))`` (squared exponential) with
  observation noise ``sigma^2``; ``C, l, sigma^2`` maximise the log-marginal likelihood of the
  training tenants' (centred) qualities, exactly as scikit-learn's ``GaussianProcessRegressor``.
- Prior mean ``mu_0(k)`` = mean quality of model ``k`` over the training tenants (the App. A text
  takes ``mu = 0`` "without loss of generality" for centred data; we centre explicitly, so the
  two agree up to that shift). ``prior_mean="zero"`` gives the literal zero mean.
- Posterior after ``t`` observations ``y_[1:t]`` at arms ``a_1..a_t`` (Alg. 1 lines 6-7):
  ``mu_t(k) = mu_0(k) + Sigma_t(k)^T (Sigma_t + sigma^2 I)^-1 (y - mu_0(a))``
  ``sigma_t^2(k) = Sigma(k, k) - Sigma_t(k)^T (Sigma_t + sigma^2 I)^-1 Sigma_t(k)``.

Incremental update: with ``L L^T = Sigma_t + sigma^2 I`` keep ``V = L^-1 Sigma_t(:)`` (t, K) and
``z = L^-1 (y - mu_0(a))`` (t,). A new observation at arm ``a`` appends one Cholesky row
``[l, d]`` with ``l = V[:, a]`` and ``d = sqrt(Sigma(a, a) + sigma^2 - l.l)``, so
``v = (Sigma(a, :) - l^T V) / d``, ``z_new = (y - mu_0(a) - l.z) / d`` and
``mu += v z_new``, ``sigma^2 -= v^2``: O(t K) per observation instead of an O(t^3 + t^2 K) refit.
"""

from __future__ import annotations

from typing import Any, Literal

import numpy as np

from policy._types import ArmPrior, FloatArray

__all__ = ["KernelMethod", "TenantPosterior", "fit_arm_prior", "independent_prior"]

#: noise-variance floor: keeps the incremental Cholesky well conditioned.
NOISE_FLOOR = 1e-6


def _impute(train_quality: FloatArray) -> FloatArray:
    """Fill missing cells of the (M, n_train) matrix with that training tenant's mean quality."""
    x = np.array(train_quality, dtype=float, copy=True)
    col_mean = np.nanmean(np.where(np.isnan(x).all(axis=0, keepdims=True), 0.0, x), axis=0)
    rows, cols = np.nonzero(np.isnan(x))
    x[rows, cols] = col_mean[cols]
    return x


def independent_prior(mean: FloatArray, variance: float = 0.05, noise: float = 1e-4) -> ArmPrior:
    """Prior with independent arms (no training tenants to learn a kernel from)."""
    m = len(mean)
    return ArmPrior.create(np.asarray(mean, float), np.eye(m) * variance, noise)


KernelMethod = Literal["app-a", "empirical"]

#: observation-noise variance of the empirical prior: a validation accuracy measured on a few
#: hundred examples is uncertain by about 0.01 (1e-4 in variance).
EMPIRICAL_NOISE = 1e-4


def fit_arm_prior(
    train_quality: FloatArray,
    *,
    prior_mean: Literal["train", "zero"] = "train",
    n_restarts: int = 0,
    random_state: int | None = 0,
    method: KernelMethod = "app-a",
) -> ArmPrior:
    """Learn the arm kernel from the training tenants (App. A).

    ``method="empirical"`` instead takes the covariance of the models' qualities *across*
    training tenants, shrunk towards a scaled identity by Ledoit-Wolf (scikit-learn): the
    covariance a new tenant drawn from the same population has, with no kernel family assumed.

    ``train_quality``: (M, n_train) quality of each model on each training tenant, NaN where
    missing (imputed with that tenant's mean). Quality vectors are compared by RMS distance
    ``||x_k - x_k'|| / sqrt(n_train)`` so a length scale means the same for any n_train.

    The hyperparameters ``C, l, sigma^2`` maximise the log-marginal likelihood (scikit-learn,
    multi-output: summed over tenants) on a *held-out* split: kernel features from a random half
    of the training tenants, targets from the other half. Fitting targets that are also feature
    columns (the literal reading of App. A) is degenerate: measured on delgado179 it drives
    ``sigma^2`` to its floor and ``C`` to its upper bound, i.e. an interpolating, overconfident GP.
    The returned prior evaluates the fitted kernel on the vectors over *all* training tenants.
    """
    q = np.asarray(train_quality, dtype=float)
    m_models, n_train = q.shape
    if n_train == 0:
        return independent_prior(
            np.full(m_models, 0.5) if prior_mean == "train" else np.zeros(m_models)
        )
    x = _impute(q)
    mean = x.mean(axis=1) if prior_mean == "train" else np.zeros(m_models)
    if n_train < 4:
        return independent_prior(mean)
    if method == "empirical":
        from sklearn.covariance import LedoitWolf

        cov = np.asarray(LedoitWolf().fit(x.T).covariance_, dtype=float)
        return ArmPrior.create(mean, (cov + cov.T) / 2.0, EMPIRICAL_NOISE)
    if method != "app-a":
        raise ValueError(f"unknown kernel method {method!r}; valid: app-a, empirical")
    perm = np.random.default_rng(random_state).permutation(n_train)
    feat, targ = perm[: n_train // 2], perm[n_train // 2 :]
    x_feat = x[:, feat] / np.sqrt(len(feat))
    mean_feat = x[:, feat].mean(axis=1) if prior_mean == "train" else np.zeros(m_models)
    kernel = _fit_kernel(x_feat, x[:, targ] - mean_feat[:, None], n_restarts, random_state)
    x_all = x / np.sqrt(n_train)
    cov = np.asarray(kernel.k1(x_all), dtype=float)  # C * RBF, the latent covariance Sigma
    noise = max(float(kernel.k2.noise_level), NOISE_FLOOR)
    return ArmPrior.create(mean, (cov + cov.T) / 2.0, noise)


def _fit_kernel(x: FloatArray, y: FloatArray, n_restarts: int, random_state: int | None) -> Any:
    """Maximise the LML of ``y`` (M, n_targets) given features ``x`` (M, d) over
    ``C * RBF(l) + White(sigma^2)``; returns the fitted scikit-learn kernel.

    The objective, its gradient, the optimiser (L-BFGS-B on the log-hyperparameters within the
    kernel's bounds, from the initial values, then `n_restarts` random starts) and the jitter on
    the diagonal are scikit-learn's ``GaussianProcessRegressor.fit`` with ``normalize_y=False``.
    Only the gradient is computed another way: scikit-learn builds an (M, M, n_targets) array
    for it, 80 MB and 47 ms a step for oboe's 219 models and 204 target tenants (94% of a
    replay repeat's prior fit); summed over the targets it is ``0.5 tr((A A^T - n K^-1)
    dK/dtheta)`` with ``A = K^-1 y``, an (M, M) product (`_neg_lml`).
    """
    from scipy.optimize import minimize
    from sklearn.utils import check_random_state

    kernel = _initial_kernel(x, y)
    bounds = kernel.bounds  # log space, as `theta`
    rng = check_random_state(random_state)  # scikit-learn's draws of the restarts' starts
    starts = [kernel.theta, *(rng.uniform(bounds[:, 0], bounds[:, 1]) for _ in range(n_restarts))]
    # A hyperparameter at its bound is a legitimate optimum here (e.g. uncorrelated models).
    found = [
        minimize(_neg_lml, s, args=(kernel, x, y), jac=True, method="L-BFGS-B", bounds=bounds)
        for s in starts
    ]
    best = min(found, key=lambda r: float(r.fun))
    return kernel.clone_with_theta(best.x)


def _initial_kernel(x: FloatArray, y: FloatArray) -> Any:
    """``C * RBF(l) + White(sigma^2)`` at its starting values, each within bounds around them:
    ``C`` the targets' variance, ``l`` the median distance between the features (M, d)."""
    from sklearn.gaussian_process.kernels import RBF, ConstantKernel, WhiteKernel

    d2 = ((x[:, None, :] - x[None, :, :]) ** 2).sum(-1)
    med = float(np.sqrt(np.median(d2[d2 > 0]))) if np.any(d2 > 0) else 1.0
    var = float(np.var(y)) or 1e-2
    return ConstantKernel(var, (var * 1e-3, var * 1e2)) * RBF(
        med, (med * 1e-2, med * 1e2)
    ) + WhiteKernel(var * 0.1, (NOISE_FLOOR, max(var * 10, 1e-3)))


#: scikit-learn's ``GaussianProcessRegressor(alpha=1e-10)``: added to the kernel's diagonal.
_JITTER = 1e-10


def _neg_lml(theta: FloatArray, kernel: Any, x: FloatArray, y: FloatArray) -> tuple[float, Any]:
    """Minus the log-marginal likelihood of the targets ``y`` (M, n) summed over its n columns,
    each an independent draw from ``N(0, K)``, ``K = kernel(x)`` with hyperparameters `theta`,
    and its gradient in `theta`:
    ``LML = -tr(y^T K^-1 y) / 2 - n log|K| / 2 - M n log(2 pi) / 2`` and
    ``dLML/dtheta_k = tr((A A^T - n K^-1) dK/dtheta_k) / 2``, ``A = K^-1 y`` (Rasmussen and
    Williams, eq. 5.9, summed over the columns). ``(inf, 0)`` where K is not positive
    definite (scikit-learn's answer there)."""
    from scipy.linalg import cho_solve, cholesky

    m, n = y.shape
    k, k_grad = kernel.clone_with_theta(theta)(x, eval_gradient=True)  # (M, M), (M, M, p)
    k[np.diag_indices_from(k)] += _JITTER
    try:
        chol = cholesky(k, lower=True, check_finite=False)
    except np.linalg.LinAlgError:
        return np.inf, np.zeros_like(theta)
    a = cho_solve((chol, True), y, check_finite=False)
    lml = -0.5 * float(np.sum(y * a)) - n * float(np.log(np.diag(chol)).sum())
    lml -= 0.5 * m * n * np.log(2 * np.pi)
    inner = a @ a.T - n * cho_solve((chol, True), np.eye(m), check_finite=False)
    grad = 0.5 * np.einsum("ij,jik->k", inner, k_grad)
    return -lml, -grad


class TenantPosterior:
    """Incremental GP posterior over one tenant's ``K`` arms (mutable; :meth:`copy` to branch).

    ``arms`` (K,): model indices into the catalogue. ``mu`` (K,), ``var`` (K,): posterior mean
    and latent variance ``sigma_t^2``. ``t``: number of observations conditioned on.
    """

    __slots__ = ("_cov", "_noise", "_prior_mean", "_v", "_z", "arms", "mu", "t", "var")

    def __init__(
        self,
        prior: ArmPrior,
        arms: np.ndarray,
        *,
        shared: tuple[FloatArray, FloatArray] | None = None,
    ) -> None:
        """``shared``: the prior (cov, mean) restricted to ``arms``, to share one read-only copy
        between tenants that have the same arm set (10,000 tenants x 200 arms would otherwise
        hold 10,000 copies of a 200 x 200 matrix)."""
        self.arms = np.asarray(arms, dtype=np.intp)
        if shared is None:
            shared = (prior.cov[np.ix_(self.arms, self.arms)], prior.mean[self.arms])
        self._cov, self._prior_mean = shared
        self._noise = max(prior.noise, NOISE_FLOOR)
        self.mu: FloatArray = self._prior_mean.astype(float, copy=True)
        self.var: FloatArray = np.diag(self._cov).astype(float, copy=True)
        k = len(self.arms)
        self._v = np.empty((4, k))  # rows [0, t) hold V = L^-1 Sigma_t(:)
        self._z = np.empty(4)
        self.t = 0

    def copy(self) -> TenantPosterior:
        other = object.__new__(TenantPosterior)
        other.arms, other._cov, other._noise = self.arms, self._cov, self._noise
        other._prior_mean = self._prior_mean
        other.mu, other.var = self.mu.copy(), self.var.copy()
        other._v, other._z, other.t = self._v[: self.t].copy(), self._z[: self.t].copy(), self.t
        return other

    @property
    def sigma(self) -> FloatArray:
        return np.sqrt(self.var)

    def cov(self) -> FloatArray:
        """(K, K) posterior latent covariance ``Sigma - V^T V`` (Alg. 1 line 7, jointly)."""
        v = self._v[: self.t]
        out = self._cov - v.T @ v
        return (out + out.T) / 2.0

    @property
    def noise(self) -> float:
        """Observation-noise variance ``sigma^2`` (``var + noise``: the variance of a new y)."""
        return self._noise

    def update(self, local_arm: int, y: float | None = None, extra_noise: float = 0.0) -> None:
        """Condition on ``y`` at local arm ``local_arm`` (Alg. 1 lines 6-7), in O(t K).

        ``y=None`` hallucinates the observation at the current posterior mean (GP-BUCB): the
        mean is unchanged and the variance shrinks as if the pending job had reported.
        ``extra_noise``: this observation's own measurement variance, added to the prior's
        ``sigma^2`` on its diagonal entry (heteroscedastic noise: the Cholesky update is the same
        with ``sigma^2 + extra_noise`` for this row).
        """
        a = int(local_arm)
        t = self.t
        v = self._v[:t]
        z = self._z[:t]
        l_vec = v[:, a]
        noise = self._noise + max(float(extra_noise), 0.0)
        d2 = self._cov[a, a] + noise - float(l_vec @ l_vec)
        d = float(np.sqrt(max(d2, noise * 1e-3)))
        v_new = (self._cov[a] - l_vec @ v) / d
        if y is None:
            z_new = 0.0
        else:
            z_new = (float(y) - self._prior_mean[a] - float(l_vec @ z)) / d
        if t == self._v.shape[0]:  # grow the row buffers geometrically
            cap = max(4, 2 * t)
            grown_v = np.empty((cap, self._v.shape[1]))
            grown_v[:t] = v
            grown_z = np.empty(cap)
            grown_z[:t] = z
            self._v, self._z = grown_v, grown_z
        self._v[t] = v_new
        self._z[t] = z_new
        self.t = t + 1
        self.mu += v_new * z_new
        self.var -= v_new * v_new
        np.maximum(self.var, 0.0, out=self.var)
