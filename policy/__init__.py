"""Scheduling mathematics of tenantml: pure numpy / scipy / scikit-learn, no I/O, no frameworks.

Beyond ease.ml: the joint ``rate`` picker (:mod:`policy.rate`) and predicted costs
(:mod:`policy.costs`).

ease.ml (shared/papers/000-002): GP over arms with a kernel from other tenants, cost-aware GP-UCB,
tenant pickers FCFS / RoundRobin / Random / Greedy / Hybrid, baselines, regret accounting, the
SYN generator and the replay simulator that drives the same :class:`SchedulerLoop` as the live
service.
"""

from policy._book import CostScale
from policy._types import (
    ArmPrior,
    Assignment,
    BoolArray,
    Decision,
    FloatArray,
    History,
    ModelMeta,
    Observation,
    Problem,
    Snapshot,
)
from policy._validate import validate_problem
from policy.acquisition import beta, ei_per_cost, ucb
from policy.estimates import loss_estimates
from policy.gp import TenantPosterior, fit_arm_prior, independent_prior
from policy.loop import SchedulerLoop, SimClock
from policy.pickers import FCFS, Greedy, Hybrid, HybridState, RandomPicker, RoundRobin
from policy.policies import (
    DEFAULT_POLICY,
    POLICY_NAMES,
    Oracle,
    Policy,
    StaticOrder,
    TwoPhasePolicy,
    make_policy,
)
from policy.regret import LossCurves, cumulative_regret, loss_curves
from policy.replay import ReplayResult, replay, sublinear_speedup
from policy.synthetic import syn

__all__ = [
    "BoolArray",
    "CostScale",
    "FloatArray",
    "DEFAULT_POLICY",
    "FCFS",
    "POLICY_NAMES",
    "ArmPrior",
    "Assignment",
    "Decision",
    "Greedy",
    "History",
    "Hybrid",
    "HybridState",
    "LossCurves",
    "ModelMeta",
    "Observation",
    "Oracle",
    "Policy",
    "Problem",
    "RandomPicker",
    "ReplayResult",
    "RoundRobin",
    "SchedulerLoop",
    "SimClock",
    "Snapshot",
    "StaticOrder",
    "TenantPosterior",
    "TwoPhasePolicy",
    "beta",
    "cumulative_regret",
    "ei_per_cost",
    "fit_arm_prior",
    "independent_prior",
    "loss_curves",
    "loss_estimates",
    "make_policy",
    "replay",
    "sublinear_speedup",
    "syn",
    "ucb",
    "validate_problem",
]
