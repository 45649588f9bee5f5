"""The scheduler loop shared by the live service and the replay benchmark (principle 4).

:class:`SchedulerLoop` holds the history, the pending jobs and the policy state, and turns
"these jobs finished" into "start these jobs". It never runs anything itself: the live service
dispatches the returned assignments to the GPU work pool, the replay simulator to a simulated
trainer on a :class:`SimClock`. Both therefore exercise the very same decision code.
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass, field, replace
from typing import Any, Protocol

import numpy as np

from policy._types import Assignment, Decision, History, Observation, Problem, Snapshot
from policy.costs import CostEstimator, CostPrior, OnlineCostPrior, prior_costs
from policy.policies import Policy
from policy.prior import OnlinePrior

__all__ = ["DEFAULT_LIMIT_FACTOR", "Clock", "SchedulerLoop", "SimClock"]

#: a job is stopped after this many times its expected cost (costs predicted; see SchedulerLoop)
DEFAULT_LIMIT_FACTOR = 16.0


class Clock(Protocol):
    def now(self) -> float: ...


@dataclass
class SimClock:
    """Simulated time in the cost unit of the quality/cost table (seconds, GPU-seconds, runs)."""

    t: float = 0.0

    def now(self) -> float:
        return self.t

    def advance_to(self, t: float) -> None:
        if t < self.t:
            raise ValueError(f"simulated time cannot go back from {self.t} to {t}")
        self.t = t


@dataclass
class SchedulerLoop:
    """State of one scheduler: feed it finished observations, ask it what to start next.

    Time limits: when costs are predicted (``problem.cost_prior``), a job is stopped once it
    has run ``limit_factor`` (default 16; README: 8 is best on lcdb, costs oboe 20%) times its
    expected cost under the loop's own cost estimate (the same model the policies use, refined
    from every finished job). Without a limit one job whose cost the model underestimates by orders
    of magnitude (heavy tails, measured on lcdb) would hold its device for the whole budget.
    With known costs there is no limit.

    ``online_prior``: when set, every finished job is also a result for the GP prior, and once
    it says a refit is due, :meth:`fill` swaps ``problem.prior`` for the refitted one before
    deciding (the policies rebuild their per-tenant posteriors from the history on a new
    problem). The live service and the replay's ``--prior online`` both run this.
    ``online_costs``: the same for the cost model (:class:`policy.costs.OnlineCostPrior`): every
    finished job's cost refines ``problem.cost_prior`` (and the predictions ``problem.cost``
    of tenants that have not reported yet), from the start when the history has jobs.
    """

    problem: Problem
    policy: Policy
    slots: int = 1
    rng: np.random.Generator = field(default_factory=lambda: np.random.default_rng(0))
    history: History = field(default_factory=History)
    pending: tuple[Assignment, ...] = ()
    state: Any = None
    last_decision: Decision | None = None
    limit_factor: float = DEFAULT_LIMIT_FACTOR
    online_prior: OnlinePrior | None = None
    refits: int = 0
    online_costs: OnlineCostPrior | None = None
    _costs: CostEstimator | None = field(default=None, init=False, repr=False)

    def __post_init__(self) -> None:
        if self.online_costs is not None:
            self.online_costs.observe(self.history.log, count=False)
            if self.online_costs.seen:
                self.problem = self._with_cost_prior(self.online_costs.fit())
        self._cost_estimator()
        if self.online_prior is not None:  # ``problem.prior`` already stands for the history
            self.online_prior.observe(self.history.log, count=False)

    def _with_cost_prior(self, prior: CostPrior) -> Problem:
        p = self.problem
        cost = prior_costs(prior, p.available, p.sizes, p.growth_sizes)
        return replace(p, cost_prior=prior, cost=cost)

    def _cost_estimator(self) -> None:
        """The loop's own cost estimate (expected costs, time limits) from the history."""
        p = self.problem
        if p.cost_prior is not None:
            arms = [np.arange(p.n_models)] * p.n_tenants
            self._costs = CostEstimator(p.cost_prior, arms, p.sizes, p.growth_sizes)
            for obs in self.history.log:
                self._observe_cost(obs)

    def _observe_cost(self, obs: Observation) -> None:
        # a stale job's cost was paid on another amount of data than `Problem.sizes` says
        if self._costs is not None and not obs.stale and np.isfinite(obs.cost) and obs.cost > 0:
            if obs.completed:
                self._costs.observe(obs.tenant, obs.arm, obs.cost)
            else:  # what a job without a model ran is a lower bound on its cost
                self._costs.observe_bound(obs.tenant, obs.arm, obs.cost)

    def expected_cost(self, job: Assignment) -> float:
        """Device-time ``job`` is expected to take: the refined prediction when costs are
        predicted, else the problem's cost."""
        if self._costs is None:
            return float(self.problem.cost[job.tenant, job.arm])
        return float(self._costs.expected(job.tenant)[job.arm])

    def time_limit(self, job: Assignment) -> float:
        """Device-time after which ``job`` is stopped (inf when costs are known)."""
        if self._costs is None:
            return float("inf")
        return self.limit_factor * float(self._costs.expected(job.tenant)[job.arm])

    def finished(self, observations: Iterable[Observation]) -> None:
        """Record finished jobs (each must match one pending assignment, if any is pending)."""
        observations = list(observations)
        if self.online_prior is not None:
            self.online_prior.observe(observations)
        if self.online_costs is not None:
            self.online_costs.observe(observations)
        for obs in observations:
            self._observe_cost(obs)
            key = Assignment(obs.tenant, obs.arm)
            if key in self.pending:
                idx = self.pending.index(key)
                self.pending = self.pending[:idx] + self.pending[idx + 1 :]
            self.history = self.history.append(obs)

    def fill(self) -> tuple[Assignment, ...]:
        """Ask the policy for jobs for every free slot; they become pending."""
        free = self.slots - len(self.pending)
        if free <= 0:
            return ()
        if self.online_prior is not None and self.online_prior.due():
            self.problem = replace(self.problem, prior=self.online_prior.fit())
            self.refits += 1
        if self.online_costs is not None and self.online_costs.due():
            self.problem = self._with_cost_prior(self.online_costs.fit())
            self._cost_estimator()
        snap = Snapshot(self.problem, self.history, self.pending, free)
        decision = self.policy.decide(snap, self.state, self.rng)
        self.state = decision.state
        self.last_decision = decision
        self.pending = self.pending + decision.assignments
        return decision.assignments
