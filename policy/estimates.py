"""What the live service shows per tick: each tenant's estimated accuracy loss.

For tenant ``i`` with best observed accuracy ``b_i`` and the joint GP posterior
``f ~ N(mu, Sigma_t)`` over its untried models (``TenantPosterior.cov``), the estimate is the
*posterior expected loss* ``E[max(0, min(1, max_k f_k) - b_i)]``: how much accuracy the tenant
should expect to gain over its best model if every remaining model were trained. Accuracy is at
most 1, and the Gaussian posterior is not: without the ``min(1, .)``, a tenant at 0.96 with
thirty untried models of the wide prior (sd 0.22) was estimated to gain 0.165, more than the
0.04 there is to gain (bench-live, digits, 2026-11). It is a Monte Carlo
mean over ``samples`` joint draws (fixed seed: the same state gives the same number) and 0 once
every model was tried. The tenants share one set of standard normal draws (common random
numbers: tenant ``i`` with ``K`` untried arms uses the first ``K`` rows of one ``K_max x samples``
draw), so a tenant's draws do not depend on the other tenants (its calibration does, below).
Drawing per tenant took most of a 200-tenant tick's estimates (90 of 180 ms). The price: the
tenants' Monte Carlo errors are correlated, so the total's is up to ``n`` times a tenant's
instead of ``sqrt(n)`` times (found in review; 200 tenants of 10 untried arms, 20 seeds: a total
of 18.8 with an s.d. of 0.25, 1.3%, against 0.026 with a draw per tenant), far below the
estimates' own error (the calibration, below).

Before any observation ``b_i = 0``, so the estimate is about the prior mean of the best model
(after the tenant's data changed, until a model is measured on them, ``b_i`` is a conservative
guess of its served model's accuracy there, `policy._book.STALE_FLOOR`). The total regret
estimate is ``sum_i w_i * loss_i``.

Calibration, learnt across tenants (`calibration_scales`, `calibration_shifts`): each measured
result's standardised surprise ``z = (y - mu) / s`` (``s`` its predictive sd: posterior,
prior noise and measurement noise, against the posterior before it) says how far the posterior
was off. Tenant ``i``'s untried arms are moved by the mean surprise, ``mu_k + m s_k``, and their
covariance scaled by its surprises' mean square about it, ``v_i = kappa_i - 2 m zbar_i + m^2``
(`calibration_spreads`), where

* ``kappa_i = (nu kappa_0i + sum_i z^2) / (nu + n_i)`` over the ``n_i`` surprises of its own
  results, with ``nu = calibration`` pseudo-observations at ``kappa_0i = (nu + sum_(j != i) z^2)
  / (nu + sum_(j != i) n_j)``, the same mean square over the other tenants' surprises;
* ``zbar_i = (nu zbar_0i + sum_i z) / (nu + n_i)``, its mean surprise pooled the same way, with
  ``zbar_0i = sum_(j != i) z / (nu + sum_(j != i) n_j)`` (``nu`` pseudo-observations at 0);
* ``m = sum_j z / (nu + sum_j n_j)``, the mean surprise over every tenant's results, shrunk
  towards 0 by ``nu`` pseudo-observations at 0: one bias for all, the shared prior's.

``v_i`` is the mean of ``(z - m)^2`` over the same pooled surprises as ``kappa_i`` (the mean of
``z^2``), so it is never negative, and it is ``kappa_i - m^2`` where the tenant's own mean is
``m``. (A first version scaled by ``kappa_i - m^2`` for every tenant: a tenant predicted well,
``zbar_i`` near 0, beside others predicted too high got a spread near 0, and its estimate a
fixed number; found in review.)

Every tenant is predicted by the same shared kernel and mean, so how well it predicted the
others is evidence about how well it predicts this one (an empirical-Bayes prior for the
scale, as the kernel itself is learnt across tenants): a tenant with few results starts from
the others' scale, and its own surprises move it from there; a lone tenant's is its own. The
shift is not per tenant: the posterior already moves a tenant's untried arms by its own results
(the kernel's correlations), so its own mean surprise would count them twice; measured, it
ranked the tenants worse (below). `policy.rate.RatePolicy`'s decisions scale each tenant by its
own surprises only (``kappa_0i = 1``, no shift), as before: this calibration was measured for
the estimates (docs/live.md), not for the decisions. ``calibration=0``: the posterior as it is.

(Until 2026-11-28 the untried arms were not moved, only scaled by ``kappa_i``. Every untried
scikit-learn candidate of the ten tabular tenants of `bench-live real` was trained after eight
of its 30-s runs (`infra/scripts/loss_truth.py`, splits 201-208): the surprises of the tenants'
measured results had a mean of -0.19 (the shipped prior, learnt on OpenML, rates these tenants'
arms too high), and the untried arms' truths -0.11 under the final posteriors. The estimates
averaged 0.048 against a realised 0.034 (mean error 0.032); moved, 0.033 (0.027), Spearman's
rho 0.43 against 0.41. Moved by each tenant's own mean surprise, pooled as the scale is, they
averaged 0.031 (0.026) but ranked the tenants worse (0.28): cracker and glass, whose first
results fell short and whose untried arms then did well, were moved down.)

(Until 2026-11-27 the estimates scaled as the decisions do, ``kappa_0 = 1``. At the end of the
30-s `bench-live` runs of `results/bl-h30-told` the tenants' surprises had a mean ``z^2`` of
about 0.3, and with 5-8 results each, ``nu`` = 3 pseudo-observations at 1 kept each tenant's
scale at 0.4-0.6: 13-15 untried arms, each too wide, and estimates of 0.024 against a realised
0.007-0.018.)

(Until 2026-11 this was ``max_k E[max(0, f_k - b_i)]``, the best single model's expected
improvement: a lower bound that ignores that several models may beat ``b_i``.)
"""

from __future__ import annotations

import numpy as np

from policy._book import IntArray, TenantBook
from policy._types import FloatArray, History, Problem

__all__ = [
    "CALIBRATION",
    "SAMPLES",
    "calibration_scales",
    "calibration_shifts",
    "calibration_spreads",
    "expected_loss",
    "loss_estimates",
]

#: ``nu`` of the calibration, shared with `policy.rate.RatePolicy`'s decisions
CALIBRATION = 3.0

#: joint posterior draws per tenant: Monte Carlo standard error below 0.003 for losses < 0.1
SAMPLES = 2048


def expected_loss(
    mu: FloatArray,
    cov: FloatArray,
    best: float,
    rng: np.random.Generator,
    samples: int = SAMPLES,
    ceiling: float = 1.0,
) -> float:
    """``E[max(0, min(ceiling, max_k f_k) - best)]`` for ``f ~ N(mu, cov)``; ``mu`` (K,),
    ``cov`` (K, K); ``ceiling``: the largest quality there is (accuracy: 1)."""
    return _expected_loss(mu, cov, best, rng.standard_normal((len(mu), samples)), ceiling)


def _expected_loss(
    mu: FloatArray, cov: FloatArray, best: float, normals: FloatArray, ceiling: float = 1.0
) -> float:
    """`expected_loss` over the draws ``mu + R normals[:K]``, ``R R^T = cov``; ``normals``
    (>= K, samples) standard normal draws, of which the first K rows are used (laid out
    (K, samples), the max over arms is an element-wise maximum of K rows, not a reduction
    along short rows)."""
    mu = np.asarray(mu, dtype=float)
    if len(mu) == 0:
        return 0.0
    w, u = np.linalg.eigh(cov)  # robust square root of a PSD matrix near singular
    root = u * np.sqrt(np.clip(w, 0.0, None))
    draws = mu[:, None] + root @ normals[: len(mu)]  # (K, samples)
    return float(np.maximum(np.minimum(draws.max(axis=0), ceiling) - best, 0.0).mean())


def loss_estimates(
    problem: Problem, history: History, *, seed: int = 0, calibration: float = CALIBRATION
) -> FloatArray:
    """``(n,)`` estimated accuracy loss of every tenant (see the module docstring;
    ``calibration=0``: the posterior as it is)."""
    if problem.prior is None:
        raise ValueError("loss estimates need a GP prior (Problem.prior)")
    book = TenantBook(problem, cost_aware=False)
    book.sync(history)
    shifts = calibration_shifts(book.sum_z, book.n_z2, calibration)
    spreads = calibration_spreads(book.sum_z, book.sum_z2, book.n_z2, calibration)
    out = np.zeros(problem.n_tenants)
    normals = np.random.default_rng(seed).standard_normal((book.k_max, SAMPLES))
    for i in range(problem.n_tenants):
        untried = book.candidates(i)
        if not untried.any():
            continue
        post = book.posterior(i)
        mu = post.mu[untried]
        # each untried arm's predictive sd, as `TenantBook` standardises a surprise (there with
        # the measurement noise at the measured accuracy; here at the predicted one)
        noise = [book.measurement_noise(i, float(q)) for q in mu]
        sd = np.sqrt(post.var[untried] + post.noise + np.asarray(noise))
        cov = post.cov()[np.ix_(untried, untried)] * spreads[i]
        out[i] = _expected_loss(mu + shifts[i] * sd, cov, float(book.best[i]), normals)
    return out


def calibration_scales(sum_z2: FloatArray, n_z2: IntArray, nu: float = CALIBRATION) -> FloatArray:
    """``(n,)`` scales ``kappa_i`` of the tenants' posterior covariances (module docstring):
    ``sum_z2`` ``(n,)`` each tenant's sum of squared surprises, ``n_z2`` ``(n,)`` how many;
    ``nu`` pseudo-observations at the other tenants' scale ``kappa_0i``. ``nu=0``: all 1 (the
    posterior as it is). With no surprise anywhere, all 1."""
    if nu <= 0:
        return np.ones(len(sum_z2))
    return _pooled_means(sum_z2, n_z2, nu, at=1.0)


def _pooled_means(sums: FloatArray, n: IntArray, nu: float, at: float) -> FloatArray:
    """``(n,)`` each tenant's mean of a per-result statistic (``sums`` of it, over ``n``
    results), with ``nu`` pseudo-observations at the other tenants' mean, itself with ``nu``
    pseudo-observations at ``at``: ``kappa_i`` for ``z^2`` at 1, ``zbar_i`` for ``z`` at 0."""
    others = float(np.sum(sums)) - sums  # each tenant's own left out (not counted twice)
    others_n = float(np.sum(n)) - n
    prior = (nu * at + others) / (nu + others_n)
    out: FloatArray = (nu * prior + sums) / (nu + n)
    return out


def calibration_shifts(sum_z: FloatArray, n_z: IntArray, nu: float = CALIBRATION) -> FloatArray:
    """``(n,)`` the mean surprise ``m`` of the shared posterior, one for every tenant (module
    docstring): ``sum_z`` ``(n,)`` each tenant's sum of standardised surprises, ``n_z``
    ``(n,)`` how many; ``nu`` pseudo-observations at 0. ``nu=0``: all 0 (the posterior as it
    is). With no surprise anywhere, all 0."""
    if nu <= 0:
        return np.zeros(len(sum_z))
    return np.full(len(sum_z), float(np.sum(sum_z)) / (nu + float(np.sum(n_z))))


def calibration_spreads(
    sum_z: FloatArray, sum_z2: FloatArray, n_z: IntArray, nu: float = CALIBRATION
) -> FloatArray:
    """``(n,)`` the scales ``v_i = kappa_i - 2 m zbar_i + m^2`` of the tenants' moved posterior
    covariances (module docstring): each tenant's pooled mean square of ``z - m``, with ``m``
    `calibration_shifts`' and ``kappa_i`` `calibration_scales`'. ``nu=0``: all 1."""
    if nu <= 0:
        return np.ones(len(sum_z))
    kappa = calibration_scales(sum_z2, n_z, nu)
    m = calibration_shifts(sum_z, n_z, nu)
    zbar = _pooled_means(sum_z, n_z, nu, at=0.0)
    out: FloatArray = np.maximum(kappa - 2 * m * zbar + m**2, 0.0)  # >= 0 but for rounding
    return out
