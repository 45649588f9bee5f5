"""Declarative checks of a :class:`Problem` (principle 6: errors quote the bad value)."""

from __future__ import annotations

import math

import numpy as np

from policy._types import Problem

__all__ = ["validate_problem"]


def validate_problem(problem: Problem) -> Problem:
    """Raise ``ValueError`` naming the first inconsistency; return the problem unchanged."""
    n, m = problem.n_tenants, problem.n_models
    if n == 0 or m == 0:
        raise ValueError(f"a problem needs at least one tenant and one model, got {n} x {m}")
    for name, arr, shape in (
        ("available", problem.available, (n, m)),
        ("cost", problem.cost, (n, m)),
        ("weights", problem.weights, (n,)),
    ):
        if arr.shape != shape:
            raise ValueError(f"{name} has shape {arr.shape}; expected {shape} (tenants x models)")
    empty = np.flatnonzero(~problem.available.any(axis=1))
    if empty.size:
        raise ValueError(f"tenant {problem.tenants[empty[0]]!r} has no model; each needs >= 1")
    c = problem.cost[problem.available]
    if not np.all(np.isfinite(c) & (c > 0)):
        i, k = np.argwhere(problem.available & ~(np.nan_to_num(problem.cost, nan=-1.0) > 0))[0]
        raise ValueError(
            f"cost of model {problem.models[k]!r} for tenant {problem.tenants[i]!r} is "
            f"{problem.cost[i, k]!r}; costs must be finite and > 0"
        )
    if not (math.isfinite(problem.job_overhead) and problem.job_overhead >= 0):
        raise ValueError(
            f"job overhead {problem.job_overhead!r} is invalid; it must be finite and >= 0 "
            "(the cost every job pays beyond its training)"
        )
    if not np.all(np.isfinite(problem.weights) & (problem.weights >= 0)):
        bad = problem.weights[~(np.isfinite(problem.weights) & (problem.weights >= 0))][0]
        raise ValueError(f"tenant weight {bad!r} is invalid; weights must be finite and >= 0")
    for name, sizes in (("sizes", problem.sizes), ("growth_sizes", problem.growth_sizes)):
        if sizes is not None and (sizes.ndim not in (1, 2) or sizes.shape[0] != n):  # NaN: unknown
            raise ValueError(
                f"{name} has shape {sizes.shape}; expected ({n},) or ({n}, d): one size, or d "
                "size covariates (rows, features, ...), per tenant"
            )
    if problem.val_sizes is not None:
        v = problem.val_sizes
        if v.shape != (n,):
            raise ValueError(f"val_sizes has shape {v.shape}; expected ({n},) (one per tenant)")
        if not np.all(v >= 1):  # NaN fails too; inf (measured exactly) passes
            i = int(np.flatnonzero(~(v >= 1))[0])
            raise ValueError(
                f"validation size {float(v[i])!r} of tenant {problem.tenants[i]!r} is invalid; it "
                "must be >= 1 examples (inf: qualities measured exactly)"
            )
    if problem.prior is not None:
        if problem.prior.mean.shape != (m,) or problem.prior.cov.shape != (m, m):
            raise ValueError(
                f"prior has mean {problem.prior.mean.shape} and cov {problem.prior.cov.shape}; "
                f"expected ({m},) and ({m}, {m})"
            )
    return problem
