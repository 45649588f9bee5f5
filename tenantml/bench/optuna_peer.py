"""The peer users would actually pick: one Optuna study per tenant, tenants round robin.

Each tenant's study samples the categorical model choice with TPE (seeded). A suggestion the
tenant already trained is answered from the user's own cache (no cost) and the study asked again,
as a careful user would do; after 20 repeats in a row a random untried model is taken.
Lives outside ``policy/`` because it imports optuna (an optional benchmark dependency).
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

import numpy as np

from policy import Assignment, Decision, Snapshot

__all__ = ["OptunaPeer"]

MAX_REPEATS = 20


@dataclass
class OptunaPeer:
    name: str = "optuna"
    _studies: dict[int, Any] = field(default_factory=dict, repr=False)
    _asked: dict[tuple[int, int], Any] = field(default_factory=dict, repr=False)
    _seen: int = 0
    _rr: int = 0

    def _study(self, tenant: int, rng: np.random.Generator) -> Any:
        import optuna

        study = self._studies.get(tenant)
        if study is None:
            optuna.logging.set_verbosity(optuna.logging.WARNING)
            sampler = optuna.samplers.TPESampler(seed=int(rng.integers(2**31)))
            study = self._studies[tenant] = optuna.create_study(
                direction="maximize", sampler=sampler
            )
        return study

    def decide(self, snapshot: Snapshot, state: Any, rng: np.random.Generator) -> Decision:
        problem = snapshot.problem
        log = snapshot.history.log
        for obs in log[self._seen :]:  # report finished trials to their studies
            trial = self._asked.pop((obs.tenant, obs.arm), None)
            if trial is not None:
                if obs.completed:
                    self._studies[obs.tenant].tell(trial, obs.quality)
                else:  # stopped at its time limit: no model
                    self._studies[obs.tenant].tell(trial, state=_failed())
        self._seen = len(log)
        tried: dict[int, dict[int, float]] = {}
        for obs in log:
            tried.setdefault(obs.tenant, {})[obs.arm] = obs.quality if obs.completed else 0.0
        busy = {a.tenant for a in snapshot.pending} | {t for t, _ in self._asked}
        pending_arms = {(a.tenant, a.arm) for a in snapshot.pending}
        n = problem.n_tenants
        out: list[Assignment] = []
        for _ in range(snapshot.free_slots):
            choice = None
            for step in range(n):
                i = (self._rr + step) % n
                arms = np.flatnonzero(problem.available[i])
                left = [
                    int(k)
                    for k in arms
                    if int(k) not in tried.get(i, {}) and (i, int(k)) not in pending_arms
                ]
                if left and (i not in busy or len(busy) >= n):
                    choice = (i, arms, left)
                    break
            if choice is None:
                break
            i, arms, left = choice
            self._rr = i + 1
            arm = self._ask(i, arms, left, tried.get(i, {}), rng)
            out.append(Assignment(i, arm))
            busy.add(i)
            pending_arms.add((i, arm))
        return Decision(tuple(out), state)

    def _ask(
        self,
        i: int,
        arms: np.ndarray,
        left: list[int],
        seen: dict[int, float],
        rng: np.random.Generator,
    ) -> int:
        study = self._study(i, rng)
        choices = [int(k) for k in arms]
        for _ in range(MAX_REPEATS):
            trial = study.ask()
            arm = int(trial.suggest_categorical("model", choices))
            if arm in left:
                self._asked[(i, arm)] = trial
                return arm
            if arm in seen:
                study.tell(trial, seen[arm])  # the user's cache answers a repeat for free
            else:
                study.tell(trial, state=_pruned())  # pending elsewhere: skip
        study.enqueue_trial({"model": int(rng.choice(left))})  # TPE stuck on tried models
        trial = study.ask()
        arm = int(trial.suggest_categorical("model", choices))
        self._asked[(i, arm)] = trial
        return arm


def _failed() -> Any:
    import optuna

    return optuna.trial.TrialState.FAIL


def _pruned() -> Any:
    import optuna

    return optuna.trial.TrialState.PRUNED
