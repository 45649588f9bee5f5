"""Acquisition functions: the exploration weight ``beta_t``, cost-aware UCB and EI per cost.

Notation (shared/papers/002 Sec. 3, Thm. 1-3; paper 001 Sec. 6 for SPEARMINT*):
- ``beta_t`` "simple" = ``log(K t^2 / delta)`` (Alg. 1 line 3, Alg. 2 line 9).
- ``beta_t`` "theorem" = ``2 c* log(pi^2 n K t^2 / (6 delta))`` (Thm. 1 with n = 1; Thm. 2-3 for n
  tenants, ``K = K*`` the largest arm count, ``c* = max c`` which is 1 for normalised costs).
- Cost-aware UCB (Sec. 3.2, the "simple twist" of Alg. 1 line 4):
  ``B_t(k) = mu_{t-1}(k) + sqrt(beta_t / c_k) sigma_{t-1}(k)``; cost-oblivious is ``c_k = 1``.
- EI per cost (SPEARMINT*, "EI per second"): ``EI(k) / c_k`` with
  ``EI = (mu - y*) Phi(u) + sigma phi(u)``, ``u = (mu - y*) / sigma``.
- Improvement under noisy selection (ours, :func:`selected_improvement`): a tenant is served the
  model with the best *measured* accuracy, each measured with noise of variance ``v_e / 2``
  (validation on a finite set; the new model's and the incumbent's noise add up to ``v_e``).
  The served model's true quality gains ``D = f - y*`` only when the new model measures
  better, ``D + e > 0``: ``E[D 1{D + e > 0}] = m Phi(m / s) + (sigma^2 / s) phi(m / s)`` with
  ``m = mu - y*``, ``s^2 = sigma^2 + v_e`` (``X = D`` and ``X + e`` jointly normal with
  covariance ``sigma^2``). ``v_e = 0`` gives EI.
"""

from __future__ import annotations

import math
from typing import Literal

import numpy as np
from scipy.special import ndtr

from policy._types import FloatArray

BetaRule = Literal["simple", "theorem"]

__all__ = [
    "ERROR_CORRELATION",
    "BetaRule",
    "beta",
    "ei_per_cost",
    "expected_improvement",
    "measurement_var",
    "selected_improvement",
    "ucb",
]

_INV_SQRT_2PI = 1.0 / math.sqrt(2.0 * math.pi)


def beta(
    t: int,
    n_arms: int,
    delta: float = 0.1,
    rule: BetaRule = "simple",
    *,
    n_tenants: int = 1,
    c_star: float = 1.0,
) -> float:
    """Exploration weight ``beta_t`` at the tenant's step ``t >= 1`` (see module docstring)."""
    t = max(int(t), 1)
    if rule == "simple":
        return math.log(n_arms * t * t / delta)  # Alg. 1 line 3 / Alg. 2 line 9
    if rule == "theorem":
        return 2.0 * c_star * math.log(math.pi**2 * n_tenants * n_arms * t * t / (6.0 * delta))
    raise ValueError(f"unknown beta rule {rule!r}; valid: 'simple', 'theorem'")


def ucb(mu: FloatArray, sigma: FloatArray, beta_t: float, cost: FloatArray | float) -> FloatArray:
    """Cost-aware upper confidence bound ``mu + sqrt(beta_t / c) sigma`` (Sec. 3.2)."""
    return mu + np.sqrt(beta_t / np.asarray(cost, dtype=float)) * sigma


def _gaussian_ei(mu: FloatArray, s: FloatArray, x: float) -> FloatArray:
    """``E[max(0, y - x)]`` for ``y ~ N(mu, s^2)``, ``s > 0`` (module docstring)."""
    u = (mu - x) / s
    out: FloatArray = (mu - x) * ndtr(u) + s * _INV_SQRT_2PI * np.exp(-0.5 * u * u)
    return out


def expected_improvement(
    mu: FloatArray, sigma: FloatArray, best: float, upper: float = math.inf
) -> FloatArray:
    """``E[max(0, min(y, upper) - best)]`` for ``y ~ N(mu, sigma^2)`` (closed form, see module
    docstring). ``upper``: a bound the quality cannot pass (accuracy: 1); for ``best <= upper``
    ``max(0, min(y, U) - b) = max(0, y - b) - max(0, y - U)``, so the bounded EI is
    ``EI(b) - EI(U)``: a tenant at 0.985 can gain at most 0.015, however wide its posterior."""
    s = np.maximum(sigma, 1e-12)
    if best >= upper:
        return np.zeros(np.shape(mu))
    ei = _gaussian_ei(mu, s, best)
    if math.isfinite(upper):
        ei = ei - _gaussian_ei(mu, s, upper)
    out: FloatArray = np.maximum(ei, 0.0)
    return out


#: ``r``: the share of a validation accuracy's binomial noise that two models measured on the
#: same examples have in common (they fail on the same hard examples), so that the difference
#: of their accuracies has variance ``(1 - r) (v_a + v_b)``. Measured with the service's own
#: cross-validation of the seven tabular families on six tasks that are not bench-live's
#: tenants (``infra/scripts/measure_error_correlation.py``): median 0.54 over 126 pairs (0.39
#: to 0.79 per task; 0.57 on bench-live's ten tabular tenants); rounded down, keeping more noise.
ERROR_CORRELATION = 0.5


def measurement_var(q: float, n_val: float) -> float:
    """The variance of an accuracy ``q`` measured on ``n_val`` examples that is the model's own,
    not shared with the tenant's other models measured on the same examples: ``(1 - r) q (1 -
    q) / n_val``, ``r`` = `ERROR_CORRELATION` (binomial noise; ``q`` clipped to [0, 1]; 0 for
    ``n_val`` not finite or not positive). The shared part moves every model's accuracy on the
    tenant alike, so it changes neither which model measures best nor what the GP learns about
    one model against another."""
    if not math.isfinite(n_val) or n_val <= 0:
        return 0.0
    q = min(max(float(q), 0.0), 1.0)
    return (1.0 - ERROR_CORRELATION) * q * (1.0 - q) / float(n_val)


def selected_improvement(
    mu: FloatArray, sigma: FloatArray, best: float, noise_var: float, upper: float = math.inf
) -> FloatArray:
    """Expected gain in the *served* model's true quality from training an arm with quality
    ``f ~ N(mu, sigma^2)``, when the tenant keeps the model that measures best and measurements
    carry noise (``noise_var``: the variance of the new measurement minus the incumbent's; module
    docstring). ``noise_var = 0`` is :func:`expected_improvement`. With ``upper`` (accuracy: 1)
    the part of ``f`` above it, ``EI(upper)`` (noise-free, so at least what it is under noisy
    selection), is taken off: a tenant at 0.985 still gains at most 0.015."""
    if noise_var <= 0:
        return expected_improvement(mu, sigma, best, upper)
    if best >= upper:
        return np.zeros(np.shape(mu))
    sig2 = np.maximum(np.asarray(sigma, dtype=float), 1e-12) ** 2
    s = np.sqrt(sig2 + noise_var)
    m = np.asarray(mu, dtype=float) - best
    u = m / s
    gain = m * ndtr(u) + sig2 / s * _INV_SQRT_2PI * np.exp(-0.5 * u * u)
    if math.isfinite(upper):
        gain = gain - _gaussian_ei(mu, np.sqrt(sig2), upper)
    out: FloatArray = np.maximum(gain, 0.0)
    return out


def ei_per_cost(
    mu: FloatArray, sigma: FloatArray, best: float, cost: FloatArray | float
) -> FloatArray:
    """Expected improvement over ``best`` divided by cost (SPEARMINT*'s EI per second)."""
    out: FloatArray = expected_improvement(mu, sigma, best) / np.asarray(cost, dtype=float)
    return out
