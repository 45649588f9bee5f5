"""The synthetic quality/cost generator SYN(sigma_M, alpha) of ease.ml Sec. 5.1 and App. B.

``x_{i,j} = b_i + alpha * m_{i,j}``, clipped to [0, 1] (App. B, "by convention"):
- user baseline ``b_i ~ N(mu_b, sigma_b^2)`` with two baseline groups ``mu_b in {0.75, 0.25}``
  (App. B.2 ``B = {(0.75, sigma_B), (0.25, sigma_B)}``), half of the users in each.
  The paper does not print ``sigma_B``; we use ``sigma_b = 0.1`` (documented default).
- model fluctuation: hidden feature ``f(j) ~ U(0, 1)`` per model,
  ``Sigma_M[j, j'] = exp(-(f(j) - f(j'))^2 / sigma_M^2)`` and, for each user,
  ``[m_1..m_K] ~ N(0, Sigma_M)`` (Sec. 5.1).
- costs ``c_{i,j} ~ U(0, 1)`` (Sec. 5.1: "we generate costs randomly").
Figure 8's data sets have 200 users and 100 models.
"""

from __future__ import annotations

import numpy as np

from policy._types import FloatArray

__all__ = ["syn"]


def syn(
    sigma_m: float,
    alpha: float,
    rng: np.random.Generator,
    *,
    n_users: int = 200,
    n_models: int = 100,
    baselines: tuple[float, ...] = (0.75, 0.25),
    sigma_b: float = 0.1,
) -> tuple[FloatArray, FloatArray]:
    """Return ``(quality, cost)``, both (n_users, n_models); seeded by ``rng``."""
    if sigma_m <= 0 or alpha < 0:
        raise ValueError(f"need sigma_m > 0 and alpha >= 0, got sigma_m={sigma_m}, alpha={alpha}")
    f = rng.uniform(0.0, 1.0, n_models)
    cov = np.exp(-((f[:, None] - f[None, :]) ** 2) / sigma_m**2)
    # A tiny jitter keeps the Cholesky factor real when features nearly coincide (sigma_M = 0.5).
    chol = np.linalg.cholesky(cov + 1e-8 * np.eye(n_models))
    group = np.arange(n_users) % len(baselines)
    b = rng.normal(np.asarray(baselines)[group], sigma_b)
    m = rng.standard_normal((n_users, n_models)) @ chol.T
    quality = np.clip(b[:, None] + alpha * m, 0.0, 1.0)
    cost = rng.uniform(0.0, 1.0, (n_users, n_models))
    return quality, np.maximum(cost, 1e-6)
