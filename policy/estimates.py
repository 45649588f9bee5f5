"""What the live service shows per tick: each tenant's estimated accuracy loss.

For tenant ``i`` with best observed accuracy ``b_i`` and GP posterior ``N(mu_k, s_k^2)`` over its
untried models, the estimate is ``max_k EI_k = max_k E[max(0, f_k - b_i)]`` (the expected
improvement of the single most promising model; a lower bound on the expected gap to the best
model, since ``E[max_k X_k] >= max_k E[X_k]``). It is 0 once every model was tried. Before any
observation ``b_i = 0``, so the estimate is close to the prior mean of the best model.
The total regret estimate is ``sum_i w_i * loss_i``.
"""

from __future__ import annotations

import numpy as np

from policy._book import TenantBook
from policy._types import FloatArray, History, Problem
from policy.acquisition import expected_improvement

__all__ = ["loss_estimates"]


def loss_estimates(problem: Problem, history: History) -> FloatArray:
    """``(n,)`` estimated accuracy loss of every tenant (see the module docstring)."""
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
        ei = expected_improvement(post.mu, np.sqrt(post.var), float(book.best[i]))
        out[i] = float(ei[untried].max())
    return out
