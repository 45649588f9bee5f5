"""The scheduler loop shared by the live service and the replay benchmark (principle 4).

:class:`SchedulerLoop` holds the history, the pending jobs and the policy state, and turns
"these jobs finished" into "start these jobs". It never runs anything itself: the live service
dispatches the returned assignments to the GPU work pool, the replay simulator to a simulated
trainer on a :class:`SimClock`. Both therefore exercise the very same decision code.
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass, field
from typing import Any, Protocol

import numpy as np

from policy._types import Assignment, Decision, History, Observation, Problem, Snapshot
from policy.policies import Policy

__all__ = ["Clock", "SchedulerLoop", "SimClock"]


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
    """State of one scheduler: feed it finished observations, ask it what to start next."""

    problem: Problem
    policy: Policy
    slots: int = 1
    rng: np.random.Generator = field(default_factory=lambda: np.random.default_rng(0))
    history: History = field(default_factory=History)
    pending: tuple[Assignment, ...] = ()
    state: Any = None
    last_decision: Decision | None = None

    def finished(self, observations: Iterable[Observation]) -> None:
        """Record finished jobs (each must match one pending assignment, if any is pending)."""
        for obs in observations:
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
        snap = Snapshot(self.problem, self.history, self.pending, free)
        decision = self.policy.decide(snap, self.state, self.rng)
        self.state = decision.state
        self.last_decision = decision
        self.pending = self.pending + decision.assignments
        return decision.assignments
