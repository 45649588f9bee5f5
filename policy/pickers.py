"""Tenant pickers: which tenant gets the next free device (ease.ml Sec. 4, "user-picking phase").

Each picker is a pure function ``pick(view, state, rng) -> (tenant, state)`` over a
:class:`~policy._book.TenantView`; ``state`` is an immutable value the caller threads through
successive calls (None at the start).

- FCFS (Sec. 4.1): serve the earliest tenant until GP-UCB sees no potential improvement for it
  (``gap <= 0``) or it runs out of arms.
- RoundRobin (Sec. 4.2): ``i = t mod n`` over eligible tenants.
- Random: uniform over eligible tenants (Sec. 5.3 baseline).
- Greedy (Alg. 2): lines 1-4 serve every tenant once (a tenant whose jobs all failed again,
  at the pace of a round robin weighted by ``w``: `_unserved`); line 7 candidate set
  ``V_t = {i : w_i sigma~_i >= mean_j w_j sigma~_j}`` over the tenants with a measured model (a
  tenant whose jobs all failed has no ``sigma~``); line 8 picks the candidate with the largest
  ``w_i (max_k B_i(k) - best_i)``, the rule ease.ml uses (Sec. 4.3 "Strategy for Line 8").
- Hybrid (Sec. 4.4): Greedy until the candidate set is unchanged and the total regret estimate
  ``R^ = sum_i w_i sigma~_i`` has not dropped below its best value for ``s`` consecutive steps
  (s = 10 in the paper), then RoundRobin. It returns to Greedy when the tenant set changes.
Tenant weights ``w_i`` (default 1) make the objective a weighted sum of regrets.
"""

from __future__ import annotations

from dataclasses import dataclass, replace
from typing import Any, Protocol

import numpy as np

from policy._book import TenantView

__all__ = [
    "FCFS",
    "Greedy",
    "Hybrid",
    "HybridState",
    "RandomPicker",
    "RoundRobin",
    "TenantPicker",
    "greedy_candidates",
    "regret_estimate",
]


class TenantPicker(Protocol):
    @property
    def name(self) -> str: ...

    @property
    def needs_gap(self) -> bool: ...

    def pick(self, view: TenantView, state: Any, rng: np.random.Generator) -> tuple[int, Any]: ...


def _first(mask: np.ndarray) -> int:
    return int(np.flatnonzero(mask)[0])


def _round_robin(view: TenantView, pointer: int) -> int:
    idx = np.flatnonzero(view.eligible)
    after = idx[idx >= pointer]
    return int(after[0] if after.size else idx[0])


def _measured(view: TenantView) -> np.ndarray:
    """Tenants with a model measured on their current data: ``sigma~`` is finite. A tenant
    whose jobs so far all failed has observations but no ``sigma~``; counting it in line 7 made
    the mean NaN, the candidate set empty and Hybrid's regret estimate NaN, so the first
    eligible tenant was served for ever."""
    return np.isfinite(view.sigma_tilde)


def _jobs(view: TenantView) -> np.ndarray:
    """Jobs per tenant: ended, and in flight (several slots filled at once)."""
    return view.n_obs if view.n_pending is None else view.n_obs + view.n_pending


def _fewest_jobs(view: TenantView, mask: np.ndarray) -> int:
    """The tenant in `mask` with the fewest jobs (the first of them on a tie)."""
    idx = np.flatnonzero(mask)
    return int(idx[np.argmin(_jobs(view)[idx])])


def _unserved(view: TenantView) -> np.ndarray:
    """Alg. 2 lines 1-4: the eligible tenants to serve before any greedy step. Those with no job
    yet, and those whose jobs all failed (no model to serve, no ``sigma~``) while they have had
    no more jobs per unit of weight (``n_i / w_i``) than the measured tenants on average: retried
    at the pace a round robin weighted by ``w`` would serve them, so a tenant whose jobs keep
    failing neither takes every turn (as when it counted as unserved until measured) nor waits
    until the others have no model left (as when its one job counted as served), and one of
    weight 0.1 gets a tenth of the retries. Jobs in flight count (one decision may fill several
    slots). Among them, the one with the fewest jobs goes first."""
    measured = _measured(view)
    jobs = _jobs(view).astype(float)
    w = view.weights
    theirs = view.eligible & measured & (w > 0)  # weight 0: jobs that earn no share
    # a weighted round robin's pace: jobs per unit of weight over the measured tenants
    pace = jobs[theirs].sum() / w[theirs].sum() if w[theirs].sum() > 0 else np.inf
    per_weight = np.divide(jobs, w, out=np.full(len(w), np.inf), where=w > 0)
    # a tenant with no job yet is served once whatever its weight; of weight 0, no retry
    due = (jobs == 0) | ((w > 0) & (per_weight <= pace))
    unserved: np.ndarray = view.eligible & ~measured & due
    return unserved


def greedy_candidates(view: TenantView) -> np.ndarray:
    """Alg. 2 line 7: eligible measured tenants whose weighted sigma~ is at least the mean."""
    served = view.eligible & _measured(view)
    idx = np.flatnonzero(served)
    if idx.size == 0:
        return idx
    s = view.weights[idx] * view.sigma_tilde[idx]
    chosen: np.ndarray = idx[s >= s.mean()]
    return chosen


def regret_estimate(view: TenantView) -> float:
    """Total regret estimate ``sum_i w_i sigma~_i`` over measured tenants."""
    served = _measured(view)
    return float(np.sum(view.weights[served] * view.sigma_tilde[served]))


def _greedy_pick(view: TenantView, candidates: np.ndarray) -> int:
    if candidates.size == 0:
        return _first(view.eligible)
    score = view.weights[candidates] * view.gap[candidates]  # Alg. 2 line 8 (ease.ml's rule)
    return int(candidates[int(np.argmax(score))])


@dataclass(frozen=True, slots=True)
class RoundRobin:
    name: str = "roundrobin"
    needs_gap: bool = False

    def pick(self, view: TenantView, state: Any, rng: np.random.Generator) -> tuple[int, Any]:
        i = _round_robin(view, int(state or 0))
        return i, i + 1


@dataclass(frozen=True, slots=True)
class RandomPicker:
    name: str = "random"
    needs_gap: bool = False

    def pick(self, view: TenantView, state: Any, rng: np.random.Generator) -> tuple[int, Any]:
        return int(rng.choice(np.flatnonzero(view.eligible))), state


@dataclass(frozen=True, slots=True)
class FCFS:
    name: str = "fcfs"
    needs_gap: bool = True

    def pick(self, view: TenantView, state: Any, rng: np.random.Generator) -> tuple[int, Any]:
        hopeful = view.eligible & ~(view.gap <= 0.0)
        return _first(hopeful if hopeful.any() else view.eligible), state


@dataclass(frozen=True, slots=True)
class Greedy:
    name: str = "greedy"
    needs_gap: bool = True

    def pick(self, view: TenantView, state: Any, rng: np.random.Generator) -> tuple[int, Any]:
        unserved = _unserved(view)
        if unserved.any():  # Alg. 2 lines 1-4: one GP-UCB step for every tenant first
            return _fewest_jobs(view, unserved), state
        return _greedy_pick(view, greedy_candidates(view)), state


@dataclass(frozen=True, slots=True)
class HybridState:
    """``mode``: 'greedy' or 'roundrobin'; ``stagnant``: consecutive steps with the same
    candidate set and no new low of the regret estimate; ``best_regret``: that low."""

    mode: str = "greedy"
    stagnant: int = 0
    candidates: tuple[int, ...] | None = None
    best_regret: float = float("inf")
    rr_pointer: int = 0
    n_tenants: int = 0


@dataclass(frozen=True, slots=True)
class Hybrid:
    s: int = 10
    name: str = "hybrid"
    needs_gap: bool = True

    def pick(self, view: TenantView, state: Any, rng: np.random.Generator) -> tuple[int, Any]:
        n = len(view.eligible)
        st = state if isinstance(state, HybridState) else HybridState(n_tenants=n)
        if st.n_tenants != n:  # tenants arrived or left: the greedy estimate is informative again
            st = HybridState(n_tenants=n)
        if st.mode == "roundrobin":
            i = _round_robin(view, st.rr_pointer)
            return i, replace(st, rr_pointer=i + 1)
        unserved = _unserved(view)
        if unserved.any():
            return _fewest_jobs(view, unserved), st
        cand = greedy_candidates(view)
        key = tuple(int(c) for c in cand)
        r_hat = regret_estimate(view)
        frozen = st.candidates == key and r_hat >= st.best_regret
        stagnant = st.stagnant + 1 if frozen else 0
        st = replace(st, stagnant=stagnant, candidates=key, best_regret=min(st.best_regret, r_hat))
        if stagnant >= self.s:  # Sec. 4.4: the freezing stage; switch to round robin
            i = _round_robin(view, 0)
            return i, replace(st, mode="roundrobin", rr_pointer=i + 1)
        return _greedy_pick(view, cand), st
