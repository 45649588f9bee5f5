"""BOHB's model-based sampler over a recorded curve set, with Optuna's TPE as the density model.

BOHB (Falkner et al. 2018, Sec. 3.1): a fraction ``rho`` of configurations is drawn at random;
the rest come from a TPE model fitted on the observations of the **largest budget that has at
least d + 2 of them** (d = number of hyperparameters; with fewer, at random). A recorded curve set
is a finite space, so a TPE proposal is mapped to the nearest configuration not yet used
(hyperparameters scaled to [0, 1], log scale for positive ones spanning more than 20x). A set
without ``hp_*`` columns is searched as one categorical choice over its curves.

Lives outside ``policy/`` because it imports optuna.
"""

from __future__ import annotations

from collections import defaultdict
from typing import Any

import numpy as np

from policy.seer.tuning import ConfigSampler, Curves, UniformSampler

__all__ = ["TPESampler", "tpe_sampler"]


class TPESampler:
    """:class:`policy.seer.tuning.ConfigSampler` for BOHB."""

    def __init__(self, curves: Curves, rng: np.random.Generator, rho: float = 1 / 3) -> None:
        import optuna

        optuna.logging.set_verbosity(optuna.logging.WARNING)
        self._optuna = optuna
        self._curves, self._rng, self._rho = curves, rng, rho
        self._uniform = UniformSampler(len(curves), rng)
        self._used: set[int] = set()
        self._latest: dict[int, tuple[int, float]] = {}  # config -> (evals, value)
        self._x = curves.unit_hps

    @property
    def exhausted(self) -> bool:
        return len(self._used) >= len(self._curves)

    def _distributions(self) -> dict[str, Any]:
        dist = self._optuna.distributions
        if self._x.shape[1]:
            return {f"x{j}": dist.FloatDistribution(0.0, 1.0) for j in range(self._x.shape[1])}
        return {"config": dist.CategoricalDistribution(list(range(len(self._curves))))}

    def _params(self, config: int) -> dict[str, Any]:
        if self._x.shape[1]:
            return {f"x{j}": float(v) for j, v in enumerate(self._x[config])}
        return {"config": config}

    def _nearest_unused(self, params: dict[str, Any]) -> int:
        if not self._x.shape[1]:
            proposal = int(params["config"])
            return proposal if proposal not in self._used else self._uniform.sample()
        target = np.array([params[f"x{j}"] for j in range(self._x.shape[1])])
        return self._curves.nearest_untried(target, self._used)

    def sample(self) -> int:
        by_budget: dict[int, list[tuple[int, float]]] = defaultdict(list)
        for config, (evals, value) in self._latest.items():
            by_budget[evals].append((config, value))
        need = max(1, self._x.shape[1]) + 2
        budgets = [b for b, obs in by_budget.items() if len(obs) >= need]
        if not budgets or self._rng.random() < self._rho:
            choice = self._uniform.sample()
        else:
            dists = self._distributions()
            seed = int(self._rng.integers(2**31))
            study = self._optuna.create_study(
                direction="maximize", sampler=self._optuna.samplers.TPESampler(seed=seed)
            )
            for config, value in by_budget[max(budgets)]:
                study.add_trial(
                    self._optuna.trial.create_trial(
                        params=self._params(config), distributions=dists, value=value
                    )
                )
            trial = study.ask(dists)
            choice = self._nearest_unused(trial.params)
        self._used.add(choice)
        return choice

    def tell(self, config: int, value: float, evals: int) -> None:
        self._latest[config] = (evals, value)


def tpe_sampler(curves: Curves, rng: np.random.Generator) -> ConfigSampler:
    """:data:`policy.seer.tuning.SamplerFactory` for ``TuningSettings.bohb_sampler``."""
    return TPESampler(curves, rng)
