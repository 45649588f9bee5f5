"""Regret and accuracy-loss accounting (ease.ml Sec. 4.1, App. A Eq. 2-3; paper 001 Fig. 10).

For a trace of observations in completion order with completion times ``tau_1 <= tau_2 <= ...``
(``tau_0 = 0``) and per-tenant best possible quality ``mu*_i``:

- cumulative, multi-tenant, cost-weighted regret (Sec. 4.1)
  ``R_T = sum_t C_t sum_i w_i (mu*_i - X^i_t)``, ``X^i_t`` = quality of the arm tenant i played
  last (0 before its first), ``C_t`` = the cost of round t. With several devices we use
  ``C_t = tau_t - tau_{t-1}``, the wall time between completions, which equals the round's cost
  on one device;
- ease.ml regret ``R'_T``: the same with the best quality so far ``max X^i`` (``R'_T <= R_T``);
- accuracy loss ``l_{i,T} = a*_i - a_{i,T}`` (Eq. 2), its (weighted) average over tenants
  ``l_T`` (Eq. 3) and its worst tenant; relative accuracy ``a_{i,T} / a*_i``.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np

from policy._types import FloatArray, Observation

__all__ = ["LossCurves", "cumulative_regret", "loss_curves"]


def cumulative_regret(
    trace: Sequence[Observation],
    best_possible: FloatArray,
    weights: FloatArray | None = None,
    *,
    horizon: float | None = None,
) -> tuple[float, float]:
    """``(R_T, R'_T)`` of Sec. 4.1 over the trace's rounds; with ``horizon``, over the rounds
    completed by then. Sec. 4.1 charges a round when it completes, at the quality it ends with;
    a round still running at the horizon is not charged (nothing completed by it: 0), so this
    is not the time-average loss up to the horizon: that is `loss_curves`' area."""
    mu_star = np.asarray(best_possible, dtype=float)
    w = np.ones_like(mu_star) if weights is None else np.asarray(weights, dtype=float)
    last = np.zeros_like(mu_star)
    best = np.zeros_like(mu_star)
    r_t = r_prime = 0.0
    prev = 0.0
    for obs in trace:
        if horizon is not None and obs.finished_at > horizon:
            break
        last[obs.tenant] = obs.quality
        best[obs.tenant] = max(best[obs.tenant], obs.quality)
        c_t = obs.finished_at - prev
        prev = obs.finished_at
        r_t += c_t * float(np.sum(w * (mu_star - last)))
        r_prime += c_t * float(np.sum(w * (mu_star - best)))
    return r_t, r_prime


@dataclass(frozen=True)
class LossCurves:
    """Curves on a time grid (g,): weighted average and worst accuracy loss over tenants and the
    average relative accuracy."""

    grid: FloatArray
    avg_loss: FloatArray
    worst_loss: FloatArray
    rel_accuracy: FloatArray


def loss_curves(
    trace: Sequence[Observation],
    best_possible: FloatArray,
    grid: FloatArray,
    weights: FloatArray | None = None,
) -> LossCurves:
    """Accuracy loss (App. A Eq. 2-3) of the best-so-far models at each grid time."""
    mu_star = np.asarray(best_possible, dtype=float)
    n = len(mu_star)
    w = np.ones(n) if weights is None else np.asarray(weights, dtype=float)
    g = np.asarray(grid, dtype=float)
    best_at = np.zeros((n, len(g)))
    if trace:
        times = np.array([o.finished_at for o in trace])
        tenants = np.array([o.tenant for o in trace])
        quals = np.array([o.quality for o in trace])
        for i in range(n):
            sel = tenants == i
            if not sel.any():
                continue
            running = np.maximum.accumulate(quals[sel])
            pos = np.searchsorted(times[sel], g, side="right")
            best_at[i] = np.where(pos > 0, running[np.maximum(pos - 1, 0)], 0.0)
    loss = np.maximum(mu_star[:, None] - best_at, 0.0)
    avg = (w[:, None] * loss).sum(0) / w.sum()
    with np.errstate(divide="ignore", invalid="ignore"):
        rel = np.where(mu_star[:, None] > 0, best_at / mu_star[:, None], 1.0)
    return LossCurves(g, avg, loss.max(0), (w[:, None] * rel).sum(0) / w.sum())
