"""What the live service shows per tick: each tenant's estimated accuracy loss.

For tenant ``i`` with best observed accuracy ``b_i`` and the joint GP posterior
``f ~ N(mu, Sigma_t)`` over its untried models (``TenantPosterior.cov``), the estimate is the
*posterior expected loss* ``E[max(0, min(1, max_k f_k) - b_i)]``: how much accuracy the tenant
should expect to gain over its best model if every remaining model were trained. Accuracy is at
most 1, and the Gaussian posterior is not: without the ``min(1, .)``, a tenant at 0.96 with
thirty untried models of the wide prior (sd 0.22) was estimated to gain 0.165, more than the
0.04 there is to gain (bench-live, digits, 2026-11). It is a Monte Carlo
mean over ``samples`` joint draws (fixed seed: the same state gives the same number) and 0 once
every model was tried. Before any observation ``b_i = 0``, so it is about the prior mean of
the best model (after the tenant's data changed, until a model is measured on them, ``b_i`` is
a conservative guess of its served model's accuracy there, `policy._book.STALE_FLOOR`). The
total regret estimate is ``sum_i w_i * loss_i``.

Calibration (as `policy.rate.RatePolicy` does for its decisions): tenant ``i``'s posterior
covariance is scaled by ``kappa_i = (nu + sum z^2) / (nu + n_i)`` over the ``n_i`` standardised
surprises ``z = (y - mu) / sd`` of its own measured results, ``nu = calibration``
pseudo-observations at 1; a tenant the shared kernel predicts better than it claims gets a narrower
posterior.

(Until 2026-11 this was ``max_k E[max(0, f_k - b_i)]``, the best single model's expected
improvement: a lower bound that ignores that several models may beat ``b_i``.)
"""

from __future__ import annotations

import numpy as np

from policy._book import TenantBook
from policy._types import FloatArray, History, Problem

__all__ = ["CALIBRATION", "SAMPLES", "expected_loss", "loss_estimates"]

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
    if len(mu) == 0:
        return 0.0
    w, u = np.linalg.eigh(cov)  # robust square root of a PSD matrix near singular
    root = u * np.sqrt(np.clip(w, 0.0, None))
    draws = mu + rng.standard_normal((samples, len(mu))) @ root.T
    return float(np.maximum(np.minimum(draws.max(axis=1), ceiling) - best, 0.0).mean())


def loss_estimates(
    problem: Problem, history: History, *, seed: int = 0, calibration: float = CALIBRATION
) -> FloatArray:
    """``(n,)`` estimated accuracy loss of every tenant (see the module docstring;
    ``calibration=0``: the posterior as it is)."""
    if problem.prior is None:
        raise ValueError("loss estimates need a GP prior (Problem.prior)")
    book = TenantBook(problem, cost_aware=False)
    book.sync(history)
    out = np.zeros(problem.n_tenants)
    for i in range(problem.n_tenants):
        untried = book.candidates(i)
        if not untried.any():
            continue
        post = book.posterior(i)
        rng = np.random.default_rng([seed, i])
        cov = post.cov()[np.ix_(untried, untried)]
        if calibration > 0:
            cov = cov * (calibration + book.sum_z2[i]) / (calibration + book.n_z2[i])
        out[i] = expected_loss(post.mu[untried], cov, float(book.best[i]), rng)
    return out
