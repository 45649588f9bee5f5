"""Predicted training costs: a log-additive model learnt from other tenants, refined online.

ease.ml assumes the cost ``c_ik`` of every (tenant, model) job is known before it runs
(paper 002 Sec. 3.2). A live service does not know it; it has the costs other tenants' jobs took
and, for tenant ``i``, the costs of its own finished jobs. We model

    ``log c_ik = a_i + b_k + eps``,  ``eps ~ N(0, s^2)``,  ``a_i ~ N(a0_i, tau^2)``

- ``b_k`` (M,): model ``k``'s log cost on a typical tenant (how heavy the model is);
- ``a_i``: tenant ``i``'s log scale (data size, input shape); ``a0_i`` is its prior mean, from
  a linear fit on ``log(size)`` where tenant sizes are known, else the training tenants' mean;
- ``tau^2``: spread of ``a`` between tenants; ``s^2``: residual variance.

:func:`fit_cost_prior` estimates ``b, tau^2, s^2`` (and the size regression) from a training
cost matrix by alternating least squares over the observed cells (two-way additive model with
missing values). :class:`CostEstimator` keeps, per tenant, the conjugate normal posterior of
``a_i`` given the residuals ``r = log c - b_k`` of its observed jobs:

    ``prec_i = 1/tau^2 + n_i/s^2``,  ``m_i = (a0_i/tau^2 + sum r / s^2) / prec_i``

and predicts the *expected* cost ``E[c_ik] = exp(m_i + b_k + (1/prec_i + s^2) / 2)``
(log-normal mean), the quantity a cost rate ``gain / E[cost]`` needs.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from policy._types import FloatArray

__all__ = ["CostEstimator", "CostPrior", "fit_cost_prior", "prior_costs"]

#: variance floor (log units): keeps the posterior proper when training costs are exact.
VAR_FLOOR = 1e-4


@dataclass(frozen=True, slots=True)
class CostPrior:
    """Fitted log-additive cost model (see module docstring).

    ``log_base`` (M,): ``b_k``, NaN for models no training tenant ran (then ``b`` falls back
    to the mean of the known ``b``). ``intercept``, ``size_slope``: ``a0 = intercept +
    size_slope * log(size)`` (slope 0 without sizes); a tenant of unknown size gets
    ``log(size) = mean_log_size``, the training tenants' mean, i.e. ``a0 = mean(a)``.
    ``tenant_var``: ``tau^2``; ``noise_var``: ``s^2``.
    """

    log_base: FloatArray
    intercept: float
    size_slope: float
    tenant_var: float
    noise_var: float
    mean_log_size: float = 0.0

    def tenant_prior_mean(self, sizes: FloatArray | None, n: int) -> FloatArray:
        """``a0`` (n,) for new tenants with the given data sizes (None or NaN: unknown)."""
        if sizes is None:
            ls = np.full(n, self.mean_log_size)
        else:
            s = np.asarray(sizes, dtype=float)
            known = np.isfinite(s) & (np.nan_to_num(s) > 0)
            ls = np.where(known, np.log(np.where(known, s, 1.0)), self.mean_log_size)
        out: FloatArray = self.intercept + self.size_slope * ls
        return out

    def base(self) -> FloatArray:
        """``b`` with unknown models at the mean known value (0 if none is known)."""
        b = self.log_base
        known = np.isfinite(b)
        fill = float(b[known].mean()) if known.any() else 0.0
        return np.where(known, b, fill)


def fit_cost_prior(
    train_cost: FloatArray, train_sizes: FloatArray | None = None, *, sweeps: int = 50
) -> CostPrior:
    """Fit ``log c_jk = a_j + b_k + eps`` on ``train_cost`` (n_train, M); NaN = not observed.

    ``train_sizes`` (n_train,): optional data sizes (NaN = unknown); ``a_j`` is then regressed
    on their log over the tenants whose size is known.
    Raises ``ValueError`` if no finite positive cost is given.
    """
    c = np.asarray(train_cost, dtype=float)
    if c.ndim != 2:
        raise ValueError(f"train_cost must be (tenants, models), got shape {c.shape}")
    obs = np.isfinite(c) & (c > 0)
    if not obs.any():
        raise ValueError("no finite positive training cost to fit the cost model from")
    rows = obs.any(axis=1)
    c, obs = c[rows], obs[rows]
    y = np.where(obs, np.log(np.where(obs, c, 1.0)), 0.0)
    n_obs_row = obs.sum(axis=1)
    n_obs_col = obs.sum(axis=0)
    a = np.zeros(len(c))
    b = np.zeros(c.shape[1])
    for _ in range(sweeps):  # alternating least squares over the observed cells
        b = np.where(n_obs_col > 0, ((y - a[:, None]) * obs).sum(0) / np.maximum(n_obs_col, 1), 0)
        a = ((y - b[None, :]) * obs).sum(1) / n_obs_row
        shift = float(a.mean())  # identifiability: centre a, move the level into b
        a -= shift
        b = b + shift
    resid = (y - a[:, None] - b[None, :])[obs]
    dof = max(int(obs.sum()) - len(a) - int((n_obs_col > 0).sum()) + 1, 1)
    noise_var = max(float(resid @ resid) / dof, VAR_FLOOR)
    intercept, slope, mean_ls = 0.0, 0.0, 0.0
    a_res = a
    if train_sizes is not None:
        sz = np.asarray(train_sizes, dtype=float)[rows]
        known = np.isfinite(sz) & (np.nan_to_num(sz) > 0)
        ls = np.log(np.where(known, sz, 1.0))
        if known.sum() >= 3 and float(np.var(ls[known])) > 0:
            slope, intercept = (float(v) for v in np.polyfit(ls[known], a[known], 1))
            mean_ls = float(ls[known].mean())
            a_res = a[known] - (intercept + slope * ls[known])
    # between-tenant spread, less the estimation noise of each a_j (method of moments)
    tenant_var = float(np.var(a_res)) - float(np.mean(noise_var / n_obs_row))
    tenant_var = max(tenant_var, VAR_FLOOR)
    log_base = np.where(n_obs_col > 0, b, np.nan)
    return CostPrior(log_base, intercept, slope, tenant_var, noise_var, mean_ls)


class CostEstimator:
    """Online per-tenant cost predictions from a :class:`CostPrior` (see module docstring).

    ``arms[i]`` (K_i,): the model indices of tenant ``i``; :meth:`expected` returns the (K_i,)
    expected costs of those models. :meth:`observe` adds one finished job's measured cost (or a
    cost extrapolated from profiling its first steps) and updates only that tenant.
    """

    def __init__(
        self, prior: CostPrior, arms: list[np.ndarray], sizes: FloatArray | None = None
    ) -> None:
        self.prior = prior
        self.arms = arms
        self._b = prior.base()
        n = len(arms)
        self._a0 = prior.tenant_prior_mean(sizes, n)
        self._sum_r = np.zeros(n)
        self._count = np.zeros(n, dtype=np.intp)

    def reset(self) -> None:
        self._sum_r[:] = 0.0
        self._count[:] = 0

    def observe(self, tenant: int, model: int, cost: float) -> None:
        if not (np.isfinite(cost) and cost > 0):
            raise ValueError(f"observed cost {cost!r} for tenant {tenant}; must be finite and > 0")
        self._sum_r[tenant] += float(np.log(cost)) - float(self._b[model])
        self._count[tenant] += 1

    def log_scale(self, tenant: int) -> tuple[float, float]:
        """Posterior mean and variance of ``a_i``."""
        p = self.prior
        prec = 1.0 / p.tenant_var + self._count[tenant] / p.noise_var
        mean = (self._a0[tenant] / p.tenant_var + self._sum_r[tenant] / p.noise_var) / prec
        return float(mean), float(1.0 / prec)

    def expected(self, tenant: int) -> FloatArray:
        """``E[c_ik]`` (K_i,) for the tenant's models under the current posterior."""
        mean, var = self.log_scale(tenant)
        out: FloatArray = np.exp(
            mean + self._b[self.arms[tenant]] + 0.5 * (var + self.prior.noise_var)
        )
        return out


def prior_costs(
    prior: CostPrior, available: np.ndarray, sizes: FloatArray | None = None
) -> FloatArray:
    """Expected costs (n, M) before any job ran: ``exp(a0_i + b_k + (tau^2 + s^2) / 2)`` where
    available, NaN elsewhere (what ``Problem.cost`` holds when costs are predicted)."""
    avail = np.asarray(available, dtype=bool)
    a0 = prior.tenant_prior_mean(sizes, avail.shape[0])
    c = np.exp(a0[:, None] + prior.base()[None, :] + 0.5 * (prior.tenant_var + prior.noise_var))
    out: FloatArray = np.where(avail, c, np.nan)
    return out
