"""Multi-tenant policies: a tenant picker composed with a per-tenant model picker.

``policy.decide(snapshot, state, rng) -> Decision`` fills ``snapshot.free_slots`` devices. With
G > 1 slots it serves distinct tenants first and, when a tenant must get a second concurrent job,
hallucinates its pending arms at their posterior mean (GP-BUCB) so the next pick differs.
Arms a tenant has already trained or has pending are never picked again (training is
deterministic given the data snapshot; a repeat would only spend cost).

Model pickers:
- ``ucb``: cost-aware GP-UCB, Alg. 1 line 4 with the ``sqrt(beta_t / c_k)`` twist (Sec. 3.2);
  ``cost_aware=False`` is the cost-oblivious variant (c = 1).
- ``ei``: GP-EI per unit cost (SPEARMINT*, paper 001 Sec. 6).
- ``StaticOrder``: a fixed order by model metadata (MostCited / MostRecent, Sec. 5.2).

:class:`Oracle` knows the true qualities and costs; it is only a reference for reports.
"""

from __future__ import annotations

from collections import defaultdict
from dataclasses import dataclass, field
from typing import Any, Literal, Protocol

import numpy as np

from policy._book import CostScale, TenantBook
from policy._types import Assignment, Decision, FloatArray, Problem, Snapshot
from policy.acquisition import BetaRule
from policy.pickers import (
    FCFS,
    Greedy,
    Hybrid,
    HybridState,
    RandomPicker,
    RoundRobin,
    TenantPicker,
    regret_estimate,
)
from policy.rate import RatePolicy

__all__ = [
    "Oracle",
    "Policy",
    "StaticOrder",
    "TwoPhasePolicy",
    "make_policy",
    "ABLATION_NAMES",
    "DEFAULT_POLICY",
    "POLICY_NAMES",
]


class Policy(Protocol):
    name: str

    def decide(self, snapshot: Snapshot, state: Any, rng: np.random.Generator) -> Decision: ...


@dataclass(frozen=True, slots=True)
class StaticOrder:
    """Per-tenant fixed model order by metadata: 'citations' (MostCited) or 'year' (MostRecent).
    Unknown metadata sorts last; ties keep catalogue order."""

    key: Literal["citations", "year"]

    def order(self, problem: Problem) -> np.ndarray:
        if problem.meta is None:
            raise ValueError(
                f"the {'mostcited' if self.key == 'citations' else 'mostrecent'} baseline needs "
                "model metadata (year, citations); pass --models-meta FILE.csv"
            )
        primary = problem.meta.citations if self.key == "citations" else problem.meta.year
        secondary = problem.meta.year if self.key == "citations" else problem.meta.citations
        p = np.where(np.isnan(primary), -np.inf, primary)
        s = np.where(np.isnan(secondary), -np.inf, secondary)
        order: np.ndarray = np.lexsort((np.arange(len(p)), -s, -p))
        return order


@dataclass
class TwoPhasePolicy:
    """ease.ml's two-phase scheme: pick a tenant (Alg. 2 lines 6-8), then its model (lines 9-12)."""

    name: str
    tenant_picker: TenantPicker
    model_picker: Literal["ucb", "ei"] | StaticOrder = "ucb"
    cost_aware: bool = True
    beta_rule: BetaRule = "simple"
    delta: float = 0.1
    cost_scale: CostScale = "mean"
    _book: TenantBook | None = field(default=None, init=False, repr=False)
    _order: np.ndarray | None = field(default=None, init=False, repr=False)

    def book(self, problem: Problem) -> TenantBook:
        """The incremental per-tenant state, rebuilt when the problem changes (a cache only:
        decisions depend on the snapshot and state alone)."""
        if self._book is None or self._book.problem is not problem:
            self._book = TenantBook(
                problem,
                beta_rule=self.beta_rule,
                delta=self.delta,
                cost_aware=self.cost_aware,
                cost_scale=self.cost_scale,
                use_gp=not isinstance(self.model_picker, StaticOrder),
            )
            if isinstance(self.model_picker, StaticOrder):
                self._order = self.model_picker.order(problem)
        return self._book

    def _pick_arm(self, book: TenantBook, i: int, pending: list[int]) -> int:
        cand = book.candidates(i, pending)
        if isinstance(self.model_picker, StaticOrder):
            assert self._order is not None
            local = book.local_index[i, self._order]
            local = local[local >= 0]
            return int(local[cand[local]][0])
        if self.model_picker == "ucb":
            scores = book.ucb_scores(i, pending)  # Alg. 1 line 4 with sqrt(beta_t / c_k)
        else:
            scores = book.ei_scores(i, pending)
        scores = np.where(cand, scores, -np.inf)
        return int(np.argmax(scores))

    def decide(self, snapshot: Snapshot, state: Any, rng: np.random.Generator) -> Decision:
        book = self.book(snapshot.problem)
        book.sync(snapshot.history)
        pending: defaultdict[int, list[int]] = defaultdict(list)
        for a in snapshot.pending:
            pending[a.tenant].append(int(book.local_index[a.tenant, a.arm]))
        out: list[Assignment] = []
        for _ in range(max(snapshot.free_slots, 0)):
            view = book.view(pending, need_gap=self.tenant_picker.needs_gap)
            if not view.eligible.any():
                break
            tenant, state = self.tenant_picker.pick(view, state, rng)
            local = self._pick_arm(book, tenant, pending[tenant])
            pending[tenant].append(local)
            out.append(Assignment(tenant, int(book.local_arms[tenant][local])))
        info: dict[str, float] = {}
        if book.use_gp:
            info["regret_estimate"] = regret_estimate(book.view({}, need_gap=False))
        if isinstance(state, HybridState):
            info["hybrid_roundrobin"] = float(state.mode == "roundrobin")
        return Decision(tuple(out), state, info)


@dataclass
class Oracle:
    """Reference that knows ``quality`` and ``cost`` (n, M): Smith's rule generalised to every
    arm, i.e. always run the (tenant, model) with the largest true loss reduction per unit cost
    ``w_i (q_ik - best_i)^+ / c_ik``. Used only to report how close each policy gets."""

    quality: FloatArray
    cost: FloatArray
    name: str = "oracle"

    def decide(self, snapshot: Snapshot, state: Any, rng: np.random.Generator) -> Decision:
        problem = snapshot.problem
        n = problem.n_tenants
        best = np.zeros(n)
        tried = np.zeros(problem.available.shape, dtype=bool)
        for obs in snapshot.history.log:
            best[obs.tenant] = max(best[obs.tenant], obs.quality)
            tried[obs.tenant, obs.arm] = True  # also a job stopped at its time limit
        q = np.where(problem.available & ~tried, self.quality, -np.inf)
        for a in snapshot.pending:  # a pending job counts as already delivered
            best[a.tenant] = max(best[a.tenant], float(q[a.tenant, a.arm]))
        out = []
        for _ in range(max(snapshot.free_slots, 0)):
            gain = problem.weights[:, None] * (q - best[:, None]) / self.cost
            gain[~(gain > 0)] = -np.inf
            i, k = np.unravel_index(int(np.argmax(gain)), gain.shape)
            if not np.isfinite(gain[i, k]):
                break
            out.append(Assignment(int(i), int(k)))
            best[i] = q[i, k]
        return Decision(tuple(out), state)


#: the live service's policy: ``rate`` has the smallest average-loss AUC of the learning
#: policies on every built-in real data set (README, "Beyond Hybrid"); ``hybrid`` stays for
#: reproducing ease.ml.
DEFAULT_POLICY = "rate"

POLICY_NAMES = (
    "rate",
    "hybrid",
    "greedy",
    "roundrobin",
    "random",
    "fcfs",
    "mostcited",
    "mostrecent",
    "spearmint",
)


#: variants of ``rate`` for the README's ablation (accepted by name, not run by default)
ABLATION_NAMES = ("rate-uncalibrated", "rate-predictive")


def make_policy(
    name: str,
    *,
    cost_aware: bool = True,
    beta_rule: BetaRule = "simple",
    delta: float = 0.1,
    hybrid_s: int = 10,
    cost_scale: CostScale = "mean",
) -> Policy:
    """Build a policy by name: rate (joint, :mod:`policy.rate`), hybrid (ease.ml's), greedy,
    roundrobin, random, fcfs, mostcited, mostrecent, spearmint (the oracle and the Optuna peer
    need more than a name)."""
    pickers: dict[str, TenantPicker] = {
        "hybrid": Hybrid(s=hybrid_s),
        "greedy": Greedy(),
        "roundrobin": RoundRobin(),
        "random": RandomPicker(),
        "fcfs": FCFS(),
    }
    kw: dict[str, Any] = {
        "cost_aware": cost_aware,
        "beta_rule": beta_rule,
        "delta": delta,
        "cost_scale": cost_scale,
    }
    if name == "rate":
        return RatePolicy(cost_aware=cost_aware, cost_scale=cost_scale)
    if name == "rate-uncalibrated":
        return RatePolicy(name, cost_aware=cost_aware, cost_scale=cost_scale, calibration=0.0)
    if name == "rate-predictive":
        return RatePolicy(name, cost_aware=cost_aware, cost_scale=cost_scale, predictive=True)
    if name in pickers:
        return TwoPhasePolicy(name, pickers[name], "ucb", **kw)
    if name == "mostcited":
        return TwoPhasePolicy(name, RoundRobin(), StaticOrder("citations"), **kw)
    if name == "mostrecent":
        return TwoPhasePolicy(name, RoundRobin(), StaticOrder("year"), **kw)
    if name == "spearmint":
        return TwoPhasePolicy(name, RoundRobin(), "ei", **kw)
    valid = ", ".join((*POLICY_NAMES, *ABLATION_NAMES))
    raise ValueError(f"unknown policy {name!r}; valid: {valid}")
