"""Decision overhead at cluster scale: ``tenantml bench-overhead``.

Builds ``n`` tenants x ``K`` models with ``obs`` observations each (SYN(0.5, 0.1) qualities, the
GP kernel learnt from 100 extra SYN tenants), then times single decisions of a policy (Hybrid by
default), each after one new observation arrives (only that tenant's posterior is recomputed).
Memory is the peak of Python/numpy allocations (tracemalloc) while building and deciding.
"""

from __future__ import annotations

import statistics
import time
import tracemalloc
from collections.abc import Callable
from dataclasses import dataclass

import numpy as np

from policy import History, Observation, Problem, Snapshot, fit_arm_prior, make_policy, syn

__all__ = ["OverheadResult", "measure_overhead"]


@dataclass(frozen=True)
class OverheadResult:
    n_tenants: int
    n_models: int
    obs_per_tenant: int
    build_s: float
    decision_ms_median: float
    decision_ms_p95: float
    peak_mib: float


def measure_overhead(
    n_tenants: int = 1000,
    n_models: int = 200,
    obs_per_tenant: int = 20,
    decisions: int = 200,
    seed: int = 0,
    policy: str = "hybrid",
    *,
    on_step: Callable[[], None] | None = None,
) -> OverheadResult:
    """Build the problem (module docstring), then time ``decisions`` single decisions.

    ``on_step``: called after each timed decision (outside its timing), so ``decisions`` times
    in all; building the problem and the first decision is not a step."""
    rng = np.random.default_rng(seed)
    quality, cost = syn(0.5, 0.1, rng, n_users=n_tenants + 100, n_models=n_models)
    prior = fit_arm_prior(quality[:100].T)
    q, c = quality[100:], cost[100:]
    tracemalloc.start()
    t0 = time.perf_counter()
    problem = Problem.create(
        [f"t{i}" for i in range(n_tenants)],
        [f"m{k}" for k in range(n_models)],
        np.ones((n_tenants, n_models), dtype=bool),
        c,
        prior=prior,
    )
    order = np.argsort(rng.random((n_tenants, n_models)), axis=1)
    log = [
        Observation(i, int(order[i, j]), float(q[i, order[i, j]]), float(c[i, order[i, j]]))
        for j in range(obs_per_tenant)
        for i in range(n_tenants)
    ]
    history = History(tuple(log))
    pol = make_policy(policy)
    state = pol.decide(Snapshot(problem, history), None, rng).state  # builds the book
    build_s = time.perf_counter() - t0
    times = []
    next_arm = np.full(n_tenants, obs_per_tenant)
    for _ in range(decisions):
        i = int(rng.integers(n_tenants))
        k = int(order[i, next_arm[i]])
        next_arm[i] += 1
        history = history.append(Observation(i, k, float(q[i, k]), float(c[i, k])))
        t1 = time.perf_counter()
        state = pol.decide(Snapshot(problem, history), state, rng).state
        times.append((time.perf_counter() - t1) * 1e3)
        if on_step is not None:
            on_step()
    _, peak = tracemalloc.get_traced_memory()
    tracemalloc.stop()
    times.sort()
    return OverheadResult(
        n_tenants,
        n_models,
        obs_per_tenant,
        build_s,
        statistics.median(times),
        times[int(0.95 * (len(times) - 1))],
        peak / 2**20,
    )
