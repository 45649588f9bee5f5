"""Replay simulator: the scheduler loop against a quality/cost table and a simulated clock.

A simulated trainer returns the table's quality ``q[i, k]`` for a job after advancing the clock
by its duration ``c[i, k] / speed`` (``speed = lambda(G)`` when the whole pool of G GPUs trains
one model, ease.ml's single-device choice; 1 for one GPU per job). A job longer than the loop's
time limit (only when costs are predicted, :class:`~policy.loop.SchedulerLoop`) is stopped at
the limit, charged it, and reports no model (``completed=False``). Jobs start only while
``now < horizon``; each completion is one :class:`~policy._types.Observation` in the trace.
"""

from __future__ import annotations

import heapq
from dataclasses import dataclass

import numpy as np

from policy._types import FloatArray, Observation, Problem
from policy.costs import OnlineCostPrior
from policy.loop import SchedulerLoop, SimClock
from policy.policies import Policy
from policy.prior import OnlinePrior

__all__ = ["ReplayResult", "replay", "sublinear_speedup"]


def sublinear_speedup(gpus: int, exponent: float = 0.8) -> float:
    """``lambda(G) = G^exponent``: the speed-up of training one model on G GPUs."""
    return float(float(gpus) ** exponent)


@dataclass(frozen=True)
class ReplayResult:
    """``trace``: observations in completion order (``finished_at`` = simulated wall clock).
    ``busy``: device-time spent by jobs that started before the horizon. ``problem``: the
    loop's problem at the end (its prior refitted, with ``online_prior``)."""

    trace: tuple[Observation, ...]
    horizon: float
    busy: float
    problem: Problem


def replay(
    problem: Problem,
    quality: FloatArray,
    cost: FloatArray,
    policy: Policy,
    *,
    horizon: float,
    slots: int = 1,
    speed: float = 1.0,
    rng: np.random.Generator | None = None,
    time_limits: bool = True,
    limit_factor: float = 16.0,
    online_prior: OnlinePrior | None = None,
    online_costs: OnlineCostPrior | None = None,
) -> ReplayResult:
    """Run ``policy`` on ``problem`` until ``horizon`` (simulated wall clock).

    ``quality``/``cost`` (n, M): the truth the simulated trainer reports (``cost`` in device-time
    at speed 1). The policy sees only ``problem`` (its expected costs) and the observations.
    ``online_prior``, ``online_costs``: refit the GP prior and the cost model from the results
    as they come (the live service's way, :class:`~policy.loop.SchedulerLoop`).
    """
    clock = SimClock()
    loop = SchedulerLoop(
        problem,
        policy,
        slots,
        rng or np.random.default_rng(0),
        online_prior=online_prior,
        online_costs=online_costs,
    )
    loop.limit_factor = limit_factor if time_limits else float("inf")
    # (finish, seq, tenant, arm, device-time charged, completed)
    running: list[tuple[float, int, int, int, float, bool]] = []
    seq = 0
    busy = 0.0
    trace: list[Observation] = []
    while True:
        if clock.now() < horizon:
            for a in loop.fill():
                c = float(cost[a.tenant, a.arm])
                limit = loop.time_limit(a)
                done = c <= limit
                c = c if done else limit  # stopped at its time limit: charged the limit
                heapq.heappush(running, (clock.now() + c / speed, seq, a.tenant, a.arm, c, done))
                seq += 1
                busy += c
        if not running:
            break
        finish, _, i, k, charged, done = heapq.heappop(running)
        clock.advance_to(finish)
        obs = Observation(i, k, float(quality[i, k]) if done else 0.0, charged, finish, done)
        trace.append(obs)
        loop.finished([obs])
    return ReplayResult(tuple(trace), horizon, busy, loop.problem)
