"""Immutable value types shared by every policy, the scheduler loop and the replay simulator.

Notation (ease.ml, shared/papers/002 Sec. 3-4):
- ``n`` tenants (users) ``i``, a catalogue of ``M`` models; tenant ``i`` has the arms
  ``[K_i]`` = the models available to it (``Problem.available[i]``).
- ``c_ik`` = ``Problem.cost[i, k]``: expected cost of training model ``k`` for tenant ``i``
  (device-seconds, dollars, or 1 in the cost-oblivious setting).
- ``w_i`` = ``Problem.weights[i]``: the tenant's weight in the weighted sum of regrets (default 1).
- An observation is ``y`` = the validation quality (accuracy in [0, 1]) of one trained arm.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

import numpy as np
from numpy.typing import NDArray

if TYPE_CHECKING:
    from policy.costs import CostPrior

FloatArray = NDArray[np.float64]
BoolArray = NDArray[np.bool_]

__all__ = [
    "Assignment",
    "ArmPrior",
    "Decision",
    "History",
    "ModelMeta",
    "Observation",
    "Problem",
    "Snapshot",
]


def _frozen(a: NDArray[Any]) -> NDArray[Any]:
    a = np.array(a, copy=True)
    a.setflags(write=False)
    return a


@dataclass(frozen=True, slots=True)
class ArmPrior:
    """GP prior over the ``M`` models of the catalogue (ease.ml App. A).

    ``mean``: (M,) prior mean of each model's quality; ``cov``: (M, M) latent covariance
    ``Sigma``; ``noise``: observation-noise variance ``sigma^2`` added on the diagonal.
    """

    mean: FloatArray
    cov: FloatArray
    noise: float

    @staticmethod
    def create(mean: FloatArray, cov: FloatArray, noise: float) -> ArmPrior:
        return ArmPrior(_frozen(np.asarray(mean, float)), _frozen(np.asarray(cov, float)), noise)


@dataclass(frozen=True, slots=True)
class ModelMeta:
    """Per-model metadata for the MostRecent / MostCited baselines: (M,) arrays, NaN = unknown."""

    year: FloatArray
    citations: FloatArray


@dataclass(frozen=True, slots=True)
class Problem:
    """What the scheduler knows before any training: tenants, arms, expected costs, prior.

    Shapes: ``available`` (n, M) bool; ``cost`` (n, M) float, positive where available;
    ``weights`` (n,). ``prior`` is None for policies that need no GP (static baselines).
    ``cost_prior``: when set, costs are *predicted*: ``cost`` holds the predictions before any
    job ran and policies refine each tenant's costs from its observed ones
    (:class:`policy.costs.CostEstimator`); ``sizes`` (n,) or (n, d): optional tenant data
    sizes for it, one number or ``d`` covariates (rows, features, classes) per tenant;
    ``growth_sizes`` (like ``sizes``): the sizes each model's growth with size is taken from,
    where they differ (None: ``sizes``; `policy.costs.refit_cost_prior`).
    ``job_overhead``: what every job costs beyond its own training (a live service's dispatch,
    process and logging, in the cost unit; 0 in a replay), so a policy weighs a job's cost as
    ``job_overhead + c_ik``: a cost model ``exp(a_i + b_k)`` alone cannot hold a fixed part,
    and learnt from spans that include it, it predicts every heavier model dearer by the same
    factor. ``val_sizes`` (n,): how many examples each tenant's qualities are measured on (a
    live service's validation split), so a quality is a noisy measurement of variance
    ``q (1 - q) / n_val`` (binomial; `policy.acquisition.measurement_var`, the part of it not
    shared between models); None, or inf for a tenant: measured exactly (a replay
    table). Build with :meth:`create`, which copies and freezes the arrays; check with
    :func:`policy.validate_problem`.
    """

    tenants: tuple[str, ...]
    models: tuple[str, ...]
    available: BoolArray
    cost: FloatArray
    weights: FloatArray
    prior: ArmPrior | None = None
    meta: ModelMeta | None = None
    cost_prior: CostPrior | None = None
    sizes: FloatArray | None = None
    job_overhead: float = 0.0
    val_sizes: FloatArray | None = None
    growth_sizes: FloatArray | None = None

    @staticmethod
    def create(
        tenants: tuple[str, ...] | list[str],
        models: tuple[str, ...] | list[str],
        available: BoolArray,
        cost: FloatArray,
        weights: FloatArray | None = None,
        prior: ArmPrior | None = None,
        meta: ModelMeta | None = None,
        cost_prior: CostPrior | None = None,
        sizes: FloatArray | None = None,
        job_overhead: float = 0.0,
        val_sizes: FloatArray | None = None,
        growth_sizes: FloatArray | None = None,
    ) -> Problem:
        n = len(tenants)
        w = np.ones(n) if weights is None else np.asarray(weights, float)
        cost_arr = np.where(np.asarray(available, bool), np.asarray(cost, float), np.nan)
        return Problem(
            tuple(tenants),
            tuple(models),
            _frozen(np.asarray(available, bool)),
            _frozen(cost_arr),
            _frozen(w),
            prior,
            meta,
            cost_prior,
            None if sizes is None else _frozen(np.asarray(sizes, float)),
            float(job_overhead),
            None if val_sizes is None else _frozen(np.asarray(val_sizes, float)),
            None if growth_sizes is None else _frozen(np.asarray(growth_sizes, float)),
        )

    @property
    def n_tenants(self) -> int:
        return len(self.tenants)

    @property
    def n_models(self) -> int:
        return len(self.models)


@dataclass(frozen=True, slots=True)
class Observation:
    """One finished training job: tenant index, model index, quality ``y``, cost, finish time.

    ``completed=False``: the job was stopped at its time limit (costs predicted, not known) and
    produced no model; ``quality`` is then 0 (no improvement for anyone taking a best) and
    ``cost`` is the time it ran, a lower bound of its true cost. The arm counts as tried.

    ``stale=True``: the job trained on an earlier version of the tenant's data (a live tenant
    fed or refined since): evidence about how the model does on the data now, within
    ``policy._book.STALE_VAR``, but the arm is not tried on the current data and the quality
    is not the tenant's best on it (`policy._book.TenantBook`).
    """

    tenant: int
    arm: int
    quality: float
    cost: float
    finished_at: float = 0.0
    completed: bool = True
    stale: bool = False


@dataclass(frozen=True, slots=True)
class Assignment:
    """One job the policy wants run: train model ``arm`` for tenant ``tenant``."""

    tenant: int
    arm: int


@dataclass(frozen=True, slots=True)
class History:
    """Append-only log of observations in completion order (immutable; ``append`` copies)."""

    log: tuple[Observation, ...] = ()

    def append(self, obs: Observation) -> History:
        return History((*self.log, obs))

    def __len__(self) -> int:
        return len(self.log)


@dataclass(frozen=True, slots=True)
class Snapshot:
    """Everything a policy may look at when it decides (ARCHITECTURE principle 1)."""

    problem: Problem
    history: History
    pending: tuple[Assignment, ...] = ()
    free_slots: int = 1


@dataclass(frozen=True, slots=True)
class Decision:
    """A policy's answer: the jobs to start now (at most ``free_slots``), the policy state to pass
    to the next call, and scalar diagnostics (e.g. the total regret estimate) for logging."""

    assignments: tuple[Assignment, ...]
    state: Any = None
    info: Mapping[str, float] = field(default_factory=dict)
