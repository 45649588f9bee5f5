"""Predicted training costs: a log-additive model learnt from other tenants, refined online.

ease.ml assumes the cost ``c_ik`` of every (tenant, model) job is known before it runs
(paper 002 Sec. 3.2). A live service does not know it; it has the costs other tenants' jobs took
and, for tenant ``i``, the costs of its own finished jobs. We model

    ``log c_ik = a_i + b_k + g_k x_i + eps``,  ``eps ~ N(0, s^2)``,  ``a_i ~ N(a0_i, tau^2)``

- ``b_k`` (M,): model ``k``'s log cost on a typical tenant (how heavy the model is);
- ``g_k`` (M,): how much faster than the typical model model ``k``'s log cost grows with the
  tenant's log data size, ``x_i = log(size_i) - mean log size`` (0 where unknown); centred over
  the models, so the typical growth stays in ``a0``'s slope. An SVM's cost grows with the square
  of the rows, a linear model's with the rows: one scale per tenant cannot say both. A size may
  be ``d`` covariates (rows, features, classes), ``x_i`` (d,) and ``g_k`` (d,), ``g_k . x_i``:
  a forest's cost grows with the features, k-NN's training does not, boosting's with the
  classes; one number (rows x features) cannot say that either;
- ``a_i``: tenant ``i``'s log scale (data size, input shape); ``a0_i`` is its prior mean, from
  a linear fit on ``log(size)`` where tenant sizes are known, else the training tenants' mean;
- ``tau^2``: spread of ``a`` between tenants; ``s^2``: residual variance.

(The covariates joined in stop 65, LCDB's rows, features and classes and Oboe's rows and
features (``tenantml/data/*.tenants.csv``); ``infra/scripts/cost_prediction.py``, empirical
kernel, after 1 / 3 / 5 jobs: lcdb 1.45 / 1.19 / 1.07 -> 1.14 / 1.01 / 0.95 (with rows for all
its data sets; 51 had no size before), oboe 1.07 / 0.77 / 0.64 -> 0.78 / 0.64 / 0.55 (no sizes
before); a covariate not known is taken at the mean. (Tried and left: widening such a tenant's
kernel by what its lacking covariates leave open, ``L diag(var) L^T`` with each model's
loading ``L`` on them, so that its first jobs tell its features; the held-out LCDB tenants
lacking one predicted worse, 1.82 / 1.59 -> 1.85 / 1.67 after 1 / 3 jobs. Those data sets are
harder to predict whatever is known: 1.82 against 0.95 after one job.) The live service gives
one covariate, a fit's examples. Its arms' growths in features and classes are measured (stop
66, ``time_sklearn_arms.py --growth``) and left out: with them its jobs' costs were predicted
better (mean absolute log error 0.754 -> 0.657 over 20 bench-live splits) but its test-regret
AUC was worse (+0.0049 +- 0.0023), mostly on MNIST, served later (docs/live.md).
``g`` joined in stop 63; before, ``g = 0``. ``infra/scripts/cost_prediction.py lcdb``, then
the only built-in table with sizes (one per data set), before and after, additive / empirical
kernel: 1.71 / 1.52 ->
1.65 / 1.45 after 1 job, 1.51 / 1.23 -> 1.44 / 1.19 after 3, 1.44 / 1.08 -> 1.38 / 1.07 after
5. The live service's hand-set base, `tasks._service.build_problem`, has had measured ``g``
since stop 64: each scikit-learn arm timed at four sizes, ``infra/scripts/time_sklearn_arms.py
--growth``; its ``x_i`` is a fit's examples, ``growth_sizes``, where its ``sizes`` count a
cross-validated job's folds. On bench-live's jobs the RMS of their log errors about their
tenant's level fell from 0.581 to 0.450. ``slope_var = 0`` keeps its refits from moving ``g``:
a service's tenants span few sizes.)

:func:`fit_cost_prior` estimates ``b, tau^2, s^2`` (and the size regression) from a training
cost matrix by alternating least squares over the observed cells (two-way additive model with
missing values). :class:`CostEstimator` keeps, per tenant, the conjugate normal posterior of
``a_i`` given the residuals ``r = log c - b_k`` of its observed jobs:

    ``prec_i = 1/tau^2 + n_i/s^2``,  ``m_i = (a0_i/tau^2 + sum r / s^2) / prec_i``

and predicts the *expected* cost ``E[c_ik] = exp(m_i + b_k + (1/prec_i + s^2) / 2)``
(log-normal mean), the quantity a cost rate ``gain / E[cost]`` needs.

The additive model is a Gaussian process over a tenant's log costs with mean ``a0_i + b_k`` and
covariance ``tau^2 J + s^2 I``: one job tells the tenant's scale and nothing else. Real costs
interact (an SVM scales with the square of the rows, a forest with the features, one library
spends its time on another machine's bottleneck), so ``kernel="empirical"`` learns the whole
covariance ``Sigma`` (M, M) of the residuals ``log c_jk - a0_j - b_k`` across the training
tenants, shrunk towards the additive model's ``tau^2 J + s^2 I`` (:func:`shrunk_cov`: few
training tenants give the additive model back; Snoek et al. 2012 model log durations with a GP
for EI per second) and conditions each tenant on its jobs with :class:`policy.gp.TenantPosterior`:
``E[c_ik] = exp(a0_i + mu_ik + (sigma_ik^2 + s_t^2) / 2)``, ``s_t^2 = TIMING_VAR``.
Measured by ``infra/scripts/cost_prediction.py`` (20% of a table's tenants held out, k of a
held-out tenant's jobs seen, the others predicted; RMS error of the log median prediction):
Oboe's runtimes (418 data sets x 219 configurations) 1.20 additive / 0.77 empirical after 3
jobs, 1.15 / 0.64 after 5 without sizes, 0.78 / 0.64 and 0.75 / 0.55 with their rows and
features; LCDB's fit times 1.44 / 1.19 and 1.38 / 1.07 with one size, 1.12 / 1.01 and 1.11 /
0.95 with rows, features and classes; the ease.ml matrix (8 tenants: too few to learn from) the
same with both. The standardised errors' s.d. is 0.88-0.98 with the empirical kernel.

Learning across tenants, online (:func:`refit_cost_prior`, :class:`OnlineCostPrior`): a
scheduler starts from a base prior (the live service's hand-set one over its catalogue, the
replay's fitted on the training tenants) and refits it from its own tenants' jobs every
``REFIT_EVERY`` costs: the models' weights ``b_k`` (and growths ``g_k``, where the base lets
them move) by ridge regression towards the base's, the kernel pooled with the base's by their
tenants. The live service and the replay's ``live``
column run this in the same :class:`policy.loop.SchedulerLoop`.
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass, field, replace
from typing import Literal

import numpy as np

from policy._types import ArmPrior, FloatArray, Observation
from policy.gp import TenantPosterior
from policy.prior import REFIT_EVERY

__all__ = [
    "LIVE_COST_KERNEL",
    "CostEstimator",
    "CostKernel",
    "CostPrior",
    "OnlineCostPrior",
    "fit_cost_prior",
    "refit_cost_prior",
    "prior_costs",
    "shrunk_cov",
]

#: variance floor (log units): keeps the posterior proper when training costs are exact.
VAR_FLOOR = 1e-4
#: variance (log units) of a job's measured cost about what the same job would take again: its
#: timing jitter on a shared machine (about 10%), the observation noise of the empirical kernel.
TIMING_VAR = 0.01

#: the covariance of a tenant's log costs: ``additive`` (``tau^2 J + s^2 I``: one shared scale)
#: or ``empirical`` (learnt across tenants, see the module docstring)
CostKernel = Literal["additive", "empirical"]
#: the kernel the live service learns its tenants' costs with (:func:`refit_cost_prior` from
#: its own jobs), and so the one the replay's ``live`` column fits on the training tenants
LIVE_COST_KERNEL: CostKernel = "empirical"
#: the least training tenants the empirical kernel is estimated from (the learnt quality prior's
#: ``min_tenants``, :func:`policy.prior.learn_prior`); fewer give the additive model
MIN_KERNEL_TENANTS = 4
#: the least tenants of known size that ran a model for :func:`fit_cost_prior` to learn its ``g_k``
#: (with ``d`` size covariates, ``MIN_SLOPE_TENANTS + d - 1``)
MIN_SLOPE_TENANTS = 3
#: prior variance of a model's extra growth with log size ``g_k`` when no tenant of known size
#: ran it: the typical model's cost grows like the rows, an SVM's like their square (+-0.5)
UNSEEN_SLOPE_VAR = 0.25
#: the ridge (in units of s^2) that holds a growth :func:`refit_cost_prior` does not learn at 0
_PINNED = 1e12


def _size_columns(sizes: FloatArray) -> FloatArray:
    """``sizes`` as (n, d): a (n,) vector is one covariate, ``d = 1``."""
    s = np.asarray(sizes, dtype=float)
    if s.ndim not in (1, 2):
        raise ValueError(f"tenant sizes must be (tenants,) or (tenants, covariates), got {s.shape}")
    out: FloatArray = s[:, None] if s.ndim == 1 else s
    return out


def _log_sizes(sizes: FloatArray) -> tuple[np.ndarray, FloatArray]:
    """(``known`` (n, d) bool: a covariate finite and > 0, ``log(size)`` (n, d), 0 where
    unknown). ``sizes`` (n,) or (n, d): one column per covariate (rows, features...)."""
    s = _size_columns(sizes)
    known: np.ndarray = np.asarray(np.isfinite(s) & (np.nan_to_num(s) > 0))
    return known, np.log(np.where(known, s, 1.0))


def _centred_log_sizes(sizes: FloatArray, mean_log_size: FloatArray | float) -> FloatArray:
    """``x_i = log(size_i) - mean_log_size`` (n, d), 0 where a covariate is unknown (a tenant
    whose features are not known is taken at the mean features, its rows still count)."""
    known, ls = _log_sizes(sizes)
    mean = np.atleast_1d(np.asarray(mean_log_size, dtype=float))
    if ls.shape[1] != len(mean):
        raise ValueError(
            f"tenant sizes have {ls.shape[1]} covariate(s) per tenant; the cost prior was "
            f"fitted on {len(mean)}"
        )
    out: FloatArray = np.where(known, ls - mean, 0.0)
    return out


def _model_columns(values: FloatArray | float, m: int, d: int) -> FloatArray:
    """A per-model quantity (scalar, (M,) or (M, d)) as (M, d)."""
    v = np.asarray(values, dtype=float)
    if v.ndim == 1:
        v = v[:, None]
    out: FloatArray = np.broadcast_to(v, (m, d)).astype(float)
    return out


@dataclass(frozen=True, slots=True)
class CostPrior:
    """Fitted log-additive cost model (see module docstring).

    ``log_base`` (M,): ``b_k``, NaN for models no training tenant ran (then ``b`` falls back
    to the mean of the known ``b``). ``intercept``, ``size_slope``: ``a0 = intercept +
    size_slope . log(size)`` (slope 0 without sizes); a tenant of unknown size gets
    ``log(size) = mean_log_size``, the training tenants' mean, i.e. ``a0 = mean(a)``. A size is
    one number per tenant (``size_slope``, ``mean_log_size`` scalars) or ``d`` covariates (rows,
    features, classes: each a (d,) vector, and ``model_slope`` (M, d)): one model's cost grows
    with the rows, another's with the features too.
    ``tenant_var``: ``tau^2``; ``noise_var``: ``s^2``. ``cov`` (M, M): the empirical kernel's
    covariance of a tenant's log-cost residuals about ``a0_i + b_k`` (None: the additive model).
    ``base_var``: how far the true ``b_k`` may be from ``log_base`` (variance, log units; a
    scalar or (M,)), what :func:`refit_cost_prior` weighs new tenants' jobs against;
    ``tenants``: how many tenants ``cov`` was learnt from, its weight against new ones.
    ``model_slope`` (M,) or (M, d): ``g_k`` (None: 0, one scale per tenant); ``slope_var``
    (scalar, (M,) or (M, d)): how far the true ``g_k`` may be from it, what
    :func:`refit_cost_prior` weighs new tenants' jobs against (0: ``g`` is not refitted).
    """

    log_base: FloatArray
    intercept: float
    size_slope: float | FloatArray
    tenant_var: float
    noise_var: float
    mean_log_size: float | FloatArray = 0.0
    cov: FloatArray | None = None
    base_var: float | FloatArray = 1.0
    tenants: int = 0
    model_slope: FloatArray | None = None
    slope_var: float | FloatArray = 0.0

    def __post_init__(self) -> None:
        # (M,) on a prior of several covariates would be broadcast to each: a growth in the
        # features and classes too, that nobody gave
        m, d = len(self.log_base), self.dims
        allowed = [(m, d), (m,)] if d == 1 else [(m, d)]
        if self.model_slope is not None and np.shape(self.model_slope) not in allowed:
            raise ValueError(
                f"model_slope has shape {np.shape(self.model_slope)}: one growth per model and "
                f"size covariate; give {' or '.join(map(str, allowed))}"
            )

    def covariance(self) -> FloatArray:
        """(M, M) latent covariance of a new tenant's log costs about ``a0_i + b_k + g_k x_i``:
        ``cov``, or the additive model's ``tau^2 J + s^2 I``."""
        if self.cov is not None:
            return self.cov
        m = len(self.log_base)
        out: FloatArray = self.tenant_var * np.ones((m, m)) + self.noise_var * np.eye(m)
        return out

    def variances(self) -> FloatArray:
        """(M,) prior variance of a new tenant's log cost of each model, noise included."""
        if self.cov is None:
            return np.full(len(self.log_base), self.tenant_var + self.noise_var)
        out: FloatArray = np.diag(self.cov) + TIMING_VAR
        return out

    @property
    def dims(self) -> int:
        """``d``: the covariates a tenant's size has (1: one size; e.g. 3: rows, features and
        classes, each with its own growth per model)."""
        return int(np.size(self.mean_log_size))

    def slopes(self) -> FloatArray:
        """``g`` as (M, d) (zeros without slopes)."""
        m = len(self.log_base)
        if self.model_slope is None:
            return np.zeros((m, self.dims))
        return _model_columns(self.model_slope, m, self.dims)

    def size_offsets(self, sizes: FloatArray | None, n: int) -> FloatArray:
        """``g_k . x_i`` (n, M) for tenants with the given data sizes ((n,) or (n, d); None or
        NaN: 0)."""
        m = len(self.log_base)
        if self.model_slope is None or sizes is None:
            return np.zeros((n, m))
        out: FloatArray = _centred_log_sizes(sizes, self.mean_log_size) @ self.slopes().T
        return out

    def tenant_prior_mean(self, sizes: FloatArray | None, n: int) -> FloatArray:
        """``a0`` (n,) for new tenants with the given data sizes ((n,) or (n, d); None or NaN:
        unknown, the training tenants' mean)."""
        x = (
            np.zeros((n, self.dims))
            if sizes is None
            else _centred_log_sizes(sizes, self.mean_log_size)
        )
        mean = np.atleast_1d(np.asarray(self.mean_log_size, dtype=float))
        slope = np.broadcast_to(np.atleast_1d(np.asarray(self.size_slope, dtype=float)), mean.shape)
        out: FloatArray = self.intercept + float(slope @ mean) + x @ slope
        return out

    def base(self) -> FloatArray:
        """``b`` with unknown models at the mean known value (0 if none is known)."""
        b = self.log_base
        known = np.isfinite(b)
        fill = float(b[known].mean()) if known.any() else 0.0
        return np.where(known, b, fill)


def fit_cost_prior(
    train_cost: FloatArray,
    train_sizes: FloatArray | None = None,
    *,
    sweeps: int = 50,
    kernel: CostKernel = "additive",
) -> CostPrior:
    """Fit ``log c_jk = a_j + b_k + g_k x_j + eps`` on ``train_cost`` (n_train, M); NaN = not
    observed.

    ``train_sizes`` (n_train,) or (n_train, d): optional data sizes, or ``d`` size covariates
    per tenant (rows, features, classes; NaN = unknown); ``a_j`` is then regressed on their
    logs over the tenants whose size is known, and ``g`` ((M,), or (M, d)) learnt with the rest
    by alternating least squares (with fewer than ``d + 2`` known sizes, or one covariate
    constant: ``g = 0``, one scale per tenant). ``kernel="empirical"`` also learns the
    covariance of the residuals about ``a0_j + b_k + g_k . x_j`` (module docstring); a missing
    cell's residual is imputed with its tenant's mean residual, ``a_j - a0_j``.
    Raises ``ValueError`` if no finite positive cost is given.
    """
    if kernel not in ("additive", "empirical"):
        raise ValueError(f"unknown cost kernel {kernel!r}; valid: additive, empirical")
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
    sizes_kept = None if train_sizes is None else np.asarray(train_sizes, dtype=float)[rows]
    vector = sizes_kept is not None and sizes_kept.ndim == 2  # d covariates, not one size
    known_at, ls = np.zeros((len(c), 1), dtype=bool), np.zeros((len(c), 1))
    if sizes_kept is not None:
        known_at, ls = _log_sizes(sizes_kept)
    known: np.ndarray = np.asarray(known_at.all(axis=1))  # every covariate known: regressed
    d = ls.shape[1]
    with_sizes = known.sum() >= d + 2 and bool((np.var(ls[known], axis=0) > 1e-12).all())
    mean_ls = ls[known].mean(axis=0) if with_sizes else np.zeros(d)
    x = np.where(known_at, ls - mean_ls, 0.0) if with_sizes else np.zeros((len(c), d))
    # g_k (d,) is told by the tenants of known size that ran model k, through the spread of
    # their sizes about their mean (b_k takes the level): fewer than MIN_SLOPE_TENANTS + d - 1,
    # or sizes that do not span the d covariates among them, and g_k stays 0 (the typical growth)
    told = obs & known[:, None]
    n_told = told.sum(axis=0)
    x_bar = np.einsum("jk,jd->kd", told, x) / np.maximum(n_told, 1)[:, None]  # (M, d)
    dx = np.where(told[:, :, None], x[:, None, :] - x_bar[None], 0.0)  # (n, M, d)
    sxx = np.einsum("jkd,jke->kde", dx, dx)  # (M, d, d)
    spans = np.linalg.eigvalsh(sxx).min(axis=1) > 1e-9
    slope_known = with_sizes & (n_told >= MIN_SLOPE_TENANTS + d - 1) & spans
    sxx_safe = np.where(slope_known[:, None, None], sxx, np.eye(d))
    a = np.zeros(len(c))
    b = np.zeros(c.shape[1])
    g = np.zeros((c.shape[1], d))
    for _ in range(sweeps):  # alternating least squares over the observed cells
        y_g = y - x @ g.T if slope_known.any() else y
        b = np.where(n_obs_col > 0, ((y_g - a[:, None]) * obs).sum(0) / np.maximum(n_obs_col, 1), 0)
        a = ((y_g - b[None, :]) * obs).sum(1) / n_obs_row
        shift = float(a.mean())  # identifiability: centre a, move the level into b
        a -= shift
        b = b + shift
        if slope_known.any():
            # each model's regression of y - a on x; centred: the typical growth is in a0
            sxy = np.einsum("jkd,jk->kd", dx, y - a[:, None])
            g = np.where(slope_known[:, None], np.linalg.solve(sxx_safe, sxy[..., None])[..., 0], 0)
            g = np.where(slope_known[:, None], g - g[slope_known].mean(axis=0), 0.0)
    resid = (y - a[:, None] - b[None, :] - x @ g.T)[obs]
    # free parameters: a, b, the known g, less the level of a and the common shift of g (which
    # a's own size trend takes)
    n_g = int(slope_known.sum())
    n_fit = len(a) + int((n_obs_col > 0).sum()) - 1 + d * max(n_g - 1, 0)
    dof = max(int(obs.sum()) - n_fit, 1)
    noise_var = max(float(resid @ resid) / dof, VAR_FLOOR)
    intercept, slope = 0.0, np.zeros(d)
    a_res: FloatArray = a
    if with_sizes:  # a0 = intercept + slope . log(size), least squares over the known tenants
        design = np.column_stack([np.ones(int(known.sum())), ls[known]])
        coef = np.linalg.lstsq(design, a[known], rcond=None)[0]
        intercept, slope = float(coef[0]), coef[1:]
        a_res = a[known] - design @ coef
    # between-tenant spread, less the estimation noise of each a_j (method of moments)
    tenant_var = float(np.var(a_res)) - float(np.mean(noise_var / n_obs_row))
    tenant_var = max(tenant_var, VAR_FLOOR)
    log_base = np.where(n_obs_col > 0, b, np.nan)
    # b_k's estimation variance; a model no tenant ran takes the spread of the known b around it
    spread = float(np.var(b[n_obs_col > 0])) if (n_obs_col > 0).any() else 1.0
    base_var = np.where(n_obs_col > 0, noise_var / np.maximum(n_obs_col, 1), max(spread, 1.0))
    prior = CostPrior(
        log_base,
        intercept,
        slope if vector else float(slope[0]),
        tenant_var,
        noise_var,
        mean_ls if vector else float(mean_ls[0]),
        None,
        base_var,
    )
    if slope_known.any():  # g_k's estimation variance; one the sizes do not tell: UNSEEN_SLOPE_VAR
        inv_diag = np.diagonal(np.linalg.inv(sxx_safe), axis1=1, axis2=2)  # (M, d)
        slope_var = np.where(slope_known[:, None], noise_var * inv_diag, UNSEEN_SLOPE_VAR)
        prior = replace(
            prior,
            model_slope=g if vector else g[:, 0],
            slope_var=slope_var if vector else slope_var[:, 0],
        )
    if kernel == "additive":
        return prior
    a0 = prior.tenant_prior_mean(sizes_kept, len(a))  # what a new tenant's scale is believed
    row = (a - a0)[:, None]  # a missing cell's residual: its tenant's mean residual
    resid = np.where(
        obs, y - a0[:, None] - b[None, :] - prior.size_offsets(sizes_kept, len(a)), row
    )
    cov = shrunk_cov(resid, prior.covariance())  # towards the additive model's
    return replace(prior, cov=cov, tenants=len(resid))


def refit_cost_prior(
    base: CostPrior,
    cost: FloatArray,
    sizes: FloatArray | None = None,
    *,
    growth_sizes: FloatArray | None = None,
    sweeps: int = 20,
) -> CostPrior:
    """`base` refined by the jobs of a scheduler's own tenants: ``cost`` (n, M), NaN where not
    run; ``sizes`` (n,) or (n, d) their data sizes (the base's ``d`` covariates);
    ``growth_sizes`` (like ``sizes``) the sizes ``x_i`` is taken from
    (None: ``sizes``; the live service's: a fit's examples, where ``sizes`` counts a
    cross-validated job's folds, `tasks._service.build_problem`). The costs the other tenants
    paid teach what one tenant's first jobs cannot: a model's own weight (``b_k``), its growth
    with size (``g_k``) and how models' costs move together (``cov``).

    Residuals ``r_ik = log c_ik - a0_i - b0_k - g0_k x_i`` about the base (``a0`` from the
    tenant's size, ``b0 = base.base()``, ``g0 = base.model_slope``) follow ``r_ik = da_i + db_k +
    dg_k x_i + e_ik`` with ``da_i ~ N(0, tau^2)``, ``db_k ~ N(0, base_var_k)``, ``dg_k ~ N(0,
    slope_var_k)`` (``slope_var = 0``: ``dg = 0``), ``e ~ N(0, s^2)``; the mode of ``(da, db,
    dg)`` by alternating ridge regressions gives ``b = b0 + db`` and ``g = g0 + dg`` (their
    variances: ``1 / (1/base_var + n_k/s^2)``, and where ``g`` is learnt the marginals of the
    (1 + d) x (1 + d) posterior precision of ``(db_k, dg_k)``), and the tenants' deviations
    ``r_ik - db_k - dg_k x_i`` (a missing cell: ``da_i``) a covariance ``S``,
    shrunk towards the base's ``C0`` (:func:`shrunk_cov`: with few tenants, ``C0``), then
    pooled with it by their tenants: ``(n0 C0 + n S) / (n0 + n)``, ``n0 = base.tenants`` (the
    posterior mean of an inverse-Wishart prior with ``n0`` degrees of freedom). A base fitted
    on many other tenants (the replay's training tenants) moves little; the service's hand-set
    one (``tasks._service.build_problem``, ``n0 = 0``) follows its tenants' jobs.
    """
    c = np.asarray(cost, dtype=float)
    m = len(base.log_base)
    if c.ndim != 2 or c.shape[1] != m:
        raise ValueError(f"cost must be (tenants, {m} models), got shape {c.shape}")
    obs = np.isfinite(c) & (c > 0)
    rows = obs.any(axis=1)
    if not rows.any():
        return base
    obs = obs[rows]
    own_sizes = None if sizes is None else np.asarray(sizes, float)[rows]
    growth = sizes if growth_sizes is None else growth_sizes
    own_growth = None if growth is None else np.asarray(growth, float)[rows]
    a0 = base.tenant_prior_mean(own_sizes, len(obs))
    b0 = base.base()
    off = base.size_offsets(own_growth, len(obs))
    r = np.where(obs, np.log(np.where(obs, c[rows], 1.0)) - a0[:, None] - b0[None, :] - off, 0.0)
    s2 = base.noise_var
    ridge_a = s2 / base.tenant_var
    ridge_b = s2 / np.broadcast_to(np.asarray(base.base_var, float), (m,))
    d = base.dims
    slope_var = _model_columns(base.slope_var, m, d)  # (M, d)
    learn = slope_var > 0
    learn_g = own_growth is not None and bool(learn.any())
    x = np.zeros((len(obs), d))
    if own_growth is not None and learn_g:
        x = _centred_log_sizes(own_growth, base.mean_log_size)
    xtx = np.einsum("jk,jd,je->kde", obs, x, x)  # (M, d, d) over each model's observed tenants
    x1_col = np.einsum("jk,jd->kd", obs, x)  # (M, d)
    n_row, n_col = obs.sum(axis=1), obs.sum(axis=0)
    # dg_k's ridge s^2 / slope_var_kd; a covariate not learnt (slope_var 0) is pinned at 0
    ridge_g = np.where(learn, s2 / np.where(learn, slope_var, 1.0), _PINNED)
    eye = np.eye(d)
    da, db, dg = np.zeros(len(obs)), np.zeros(m), np.zeros((m, d))
    for _ in range(sweeps):
        r_g = r - x @ dg.T if learn_g else r
        da = ((r_g - db[None, :]) * obs).sum(axis=1) / (n_row + ridge_a)
        db = ((r_g - da[:, None]) * obs).sum(axis=0) / (n_col + ridge_b)
        if learn_g:
            e = (r - da[:, None] - db[None, :]) * obs
            rhs = np.einsum("jk,jd->kd", e, x)
            dg = np.linalg.solve(xtx + ridge_g[:, :, None] * eye, rhs[..., None])[..., 0]
            dg = np.where(learn, dg, 0.0)
    deviation = np.where(obs, r - db[None, :] - x @ dg.T, da[:, None])
    c0, n0, n = base.covariance(), base.tenants, len(obs)
    cov = (n0 * c0 + n * shrunk_cov(deviation, c0)) / (n0 + n)
    prec_b = 1.0 / np.broadcast_to(np.asarray(base.base_var, float), (m,)) + n_col / s2
    base_var = 1.0 / prec_b
    out = replace(base, log_base=b0 + db, cov=cov, base_var=base_var, tenants=n0 + n)
    if learn_g:  # the marginals of (db_k, dg_k)'s (1 + d) x (1 + d) posterior precision
        prec = np.zeros((m, d + 1, d + 1))
        prec[:, 0, 0] = prec_b
        prec[:, 0, 1:] = prec[:, 1:, 0] = x1_col / s2
        prec[:, 1:, 1:] = xtx / s2 + (ridge_g / s2)[:, :, None] * eye
        marginal = np.diagonal(np.linalg.inv(prec), axis1=1, axis2=2)  # (M, 1 + d)
        var_b = np.where(learn.any(axis=1), marginal[:, 0], base_var)
        var_g = np.where(learn, marginal[:, 1:], 0.0)
        g = base.slopes() + dg
        one = np.ndim(base.mean_log_size) == 0  # the base's shapes: (M,) for one size
        out = replace(
            out,
            model_slope=g[:, 0] if one else g,
            slope_var=var_g[:, 0] if one else var_g,
            base_var=var_b,
        )
    return out


@dataclass
class OnlineCostPrior:
    """The cost prior of one scheduler, kept current (:func:`refit_cost_prior`), as
    :class:`policy.prior.OnlinePrior` keeps the GP prior: ``base`` refined by every finished job
    of its ``n_tenants`` tenants over ``n_models`` models (``sizes``, ``growth_sizes``: their data
    sizes, as :func:`refit_cost_prior` takes them), refitted once ``refit_every`` new costs have
    arrived. A job stopped at its time limit is left out: its
    cost is a lower bound."""

    base: CostPrior
    n_tenants: int
    sizes: FloatArray | None = None
    refit_every: int = REFIT_EVERY
    growth_sizes: FloatArray | None = None
    _own: FloatArray = field(init=False, repr=False)
    _new: int = field(default=0, init=False)

    def __post_init__(self) -> None:
        if self.refit_every < 1:
            raise ValueError(f"refit_every must be >= 1, got {self.refit_every}")
        self._own = np.full((self.n_tenants, len(self.base.log_base)), np.nan)

    def observe(self, observations: Iterable[Observation], *, count: bool = True) -> None:
        """Record finished jobs' costs; ``count=False``: ones a fit already saw."""
        for obs in observations:  # a stale job's cost was paid on another amount of data
            if obs.completed and not obs.stale and np.isfinite(obs.cost) and obs.cost > 0:
                self._own[obs.tenant, obs.arm] = obs.cost
                self._new += count

    @property
    def seen(self) -> int:
        """Costs recorded (cells of the scheduler's own matrix)."""
        return int(np.isfinite(self._own).sum())

    def due(self) -> bool:
        return self._new >= self.refit_every

    def fit(self) -> CostPrior:
        self._new = 0
        return refit_cost_prior(self.base, self._own, self.sizes, growth_sizes=self.growth_sizes)


def shrunk_cov(x: FloatArray, target: FloatArray) -> FloatArray:
    """Covariance of the rows of ``x`` (n, M), taken as centred, shrunk towards ``target``
    (M, M): ``lam T + (1 - lam) S``, ``S = x^T x / (n - 1)``, with the intensity that minimises
    the expected squared error (Schaefer & Strimmer 2005, Eq. (3) with their unbiased
    ``Var(s_jk) = n / (n - 1)^3 sum_i (w_ijk - mean_i w_ijk)^2``, ``w_ijk = x_ij x_ik``):
    ``lam = sum_jk Var(s_jk) / sum_jk (s_jk - t_jk)^2``, clipped to [0, 1]. Few rows give
    ``lam`` near 1: the target (the additive model, or a base's kernel) until the data can say
    otherwise; under ``MIN_KERNEL_TENANTS`` rows, the target (two tenants' residuals about
    their two-way fit are each other's negatives: the products do not vary, and the estimate
    says, wrongly, ``lam = 0``)."""
    x = np.asarray(x, dtype=float)
    n = x.shape[0]
    if n < MIN_KERNEL_TENANTS:  # too few rows to estimate the products' variance
        return np.asarray(target, dtype=float).copy()
    w_bar = x.T @ x / n  # mean of the rows' products w_kjl = x_kj x_kl
    s = w_bar * n / (n - 1)
    x2 = x * x
    var_s = np.maximum(x2.T @ x2 - n * w_bar * w_bar, 0.0) * n / (n - 1) ** 3
    gap = float(((s - target) ** 2).sum())
    lam = 1.0 if gap <= 0 else float(np.clip(var_s.sum() / gap, 0.0, 1.0))
    out: FloatArray = lam * target + (1.0 - lam) * s
    return (out + out.T) / 2.0


class CostEstimator:
    """Online per-tenant cost predictions from a :class:`CostPrior` (see module docstring).

    ``arms[i]`` (K_i,): the model indices of tenant ``i``; :meth:`expected` returns the (K_i,)
    expected costs of those models. :meth:`observe` adds one finished job's measured cost and
    updates only that tenant. With an empirical kernel (``prior.cov``) each tenant's log costs
    have a GP posterior (:class:`policy.gp.TenantPosterior`, O(t K_i) per job), tenants with the
    same arms sharing one copy of the prior's restriction to them.
    """

    def __init__(
        self,
        prior: CostPrior,
        arms: list[np.ndarray],
        sizes: FloatArray | None = None,
        growth_sizes: FloatArray | None = None,
    ) -> None:
        self.prior = prior
        self.arms = arms
        self._b = prior.base()
        n = len(arms)
        self._a0 = prior.tenant_prior_mean(sizes, n)
        # g_k x_i, (n, M) and per tenant over its arms (K_i,), x_i from `growth_sizes` (None:
        # `sizes`, as `refit_cost_prior`); None without slopes: `expected` runs per tick, so
        # nothing is indexed there
        growth = sizes if growth_sizes is None else growth_sizes
        self._off = None if prior.model_slope is None else prior.size_offsets(growth, n)
        self._off_arms = (
            None if self._off is None else [o[a] for o, a in zip(self._off, arms, strict=True)]
        )
        self._b_arms = [self._b[a] for a in arms]  # (K_i,) per tenant, likewise
        self._sum_r = np.zeros(n)
        self._count = np.zeros(n, dtype=np.intp)
        self._gp: ArmPrior | None = None
        if prior.cov is not None:
            self._gp = ArmPrior.create(self._b, prior.cov, TIMING_VAR)
        self._posts: list[TenantPosterior | None] = [None] * n
        self._shared: dict[bytes, tuple[FloatArray, FloatArray]] = {}
        self._local: dict[bytes, dict[int, int]] = {}

    def reset(self) -> None:
        self._sum_r[:] = 0.0
        self._count[:] = 0
        self._posts = [None] * len(self.arms)

    def _posterior(self, tenant: int) -> TenantPosterior:
        post = self._posts[tenant]
        if post is None:
            assert self._gp is not None
            arms = np.asarray(self.arms[tenant], dtype=np.intp)
            key = arms.tobytes()
            if key not in self._shared:
                self._shared[key] = (self._gp.cov[np.ix_(arms, arms)], self._gp.mean[arms])
                self._local[key] = {int(k): j for j, k in enumerate(arms)}
            post = self._posts[tenant] = TenantPosterior(self._gp, arms, shared=self._shared[key])
        return post

    def observe(self, tenant: int, model: int, cost: float) -> None:
        if not (np.isfinite(cost) and cost > 0):
            raise ValueError(f"observed cost {cost!r} for tenant {tenant}; must be finite and > 0")
        log_c = float(np.log(cost))
        if self._off is not None:
            log_c -= float(self._off[tenant, model])
        self._sum_r[tenant] += log_c - float(self._b[model])
        self._count[tenant] += 1
        if self._gp is not None:
            post = self._posterior(tenant)
            local = self._local[np.asarray(self.arms[tenant], dtype=np.intp).tobytes()].get(model)
            if local is not None:
                post.update(local, log_c - float(self._a0[tenant]))

    def observe_bound(self, tenant: int, model: int, cost: float) -> bool:
        """A job that ended without a model (failed, or stopped at its time limit) ran for
        `cost`: a lower bound on what the model costs, not a measurement. It is taken as one
        only when above the current median prediction, so a censored cost pulls the estimate
        up, never down (a crash 0.3 s into a 20-s model took every prediction of its tenant
        down 20-fold, and the time limits with them). Returns whether it was taken."""
        if not (np.isfinite(cost) and cost > 0):
            return False
        local = np.flatnonzero(np.asarray(self.arms[tenant]) == model)
        if not len(local) or np.log(cost) <= self.log_median(tenant)[int(local[0])]:
            return False
        self.observe(tenant, model, cost)
        return True

    def log_scale(self, tenant: int) -> tuple[float, float]:
        """Posterior mean and variance of ``a_i``."""
        p = self.prior
        prec = 1.0 / p.tenant_var + self._count[tenant] / p.noise_var
        mean = (self._a0[tenant] / p.tenant_var + self._sum_r[tenant] / p.noise_var) / prec
        return float(mean), float(1.0 / prec)

    def _offsets(self, tenant: int) -> FloatArray | float:
        """``g_k x_i`` over the tenant's arms (K_i,), or 0.0 without slopes."""
        return 0.0 if self._off_arms is None else self._off_arms[tenant]

    def log_median(self, tenant: int) -> FloatArray:
        """The posterior mean of ``log c_ik`` (K_i,), the log of the median prediction."""
        off = self._offsets(tenant)
        if self._gp is not None:
            out: FloatArray = self._a0[tenant] + off + self._posterior(tenant).mu
            return out
        mean, _ = self.log_scale(tenant)
        additive: FloatArray = mean + off + self._b_arms[tenant]
        return additive

    def expected(self, tenant: int) -> FloatArray:
        """``E[c_ik]`` (K_i,) for the tenant's models under the current posterior."""
        off = self._offsets(tenant)
        if self._gp is not None:
            post = self._posterior(tenant)
            gp: FloatArray = np.exp(
                self._a0[tenant] + off + post.mu + 0.5 * (post.var + post.noise)
            )
            return gp
        mean, var = self.log_scale(tenant)
        out: FloatArray = np.exp(
            mean + off + self._b_arms[tenant] + 0.5 * (var + self.prior.noise_var)
        )
        return out


def prior_costs(
    prior: CostPrior,
    available: np.ndarray,
    sizes: FloatArray | None = None,
    growth_sizes: FloatArray | None = None,
) -> FloatArray:
    """Expected costs (n, M) before any job ran: ``exp(a0_i + b_k + g_k x_i + v_k / 2)``,
    ``v_k`` the prior variance (:meth:`CostPrior.variances`), where available, NaN elsewhere
    (what ``Problem.cost`` holds when costs are predicted); ``x_i`` from ``growth_sizes``
    (None: ``sizes``, as :func:`refit_cost_prior`)."""
    avail = np.asarray(available, dtype=bool)
    a0 = prior.tenant_prior_mean(sizes, avail.shape[0])
    growth = sizes if growth_sizes is None else growth_sizes
    off = prior.size_offsets(growth, avail.shape[0])
    c = np.exp(a0[:, None] + prior.base()[None, :] + off + 0.5 * prior.variances()[None, :])
    out: FloatArray = np.where(avail, c, np.nan)
    return out
