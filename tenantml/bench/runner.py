"""The replay protocol of ease.ml App. A / Sec. 5.2 over a :class:`QualityTable`.

Per repeat ``r`` (seeded by ``(seed, r)``, so results do not depend on the number of workers):
sample ``test_users`` tenants (their sampled order is the arrival order FCFS uses), build the GP
kernel from all other tenants, then replay every policy on the same split until the budget:
``budget`` x the total cost of all test tenants' models (cost-aware), or x their number of models
with every cost set to 1 (``cost_oblivious``). Loss curves are sampled on a grid over the budget
axis, so "cost" below is a fraction of the budget in [0, 1].

With ``costs="predicted"`` the policies do not see the table's costs: they see the predictions
of a log-additive cost model fitted on the training tenants' costs (:mod:`policy.costs`),
refined from each finished job (with the tenants' data sizes where the table has them: the
tenant scale ``a_i`` is then regressed on ``log size``); the simulated clock still charges the
true costs, and, as the live service would, stops a job at ``limit_factor`` (16) x its
predicted cost (the oracle,
which knows every cost, is never stopped).

With ``gpus = G > 1`` every policy fills G slots (one model per GPU), and ``hybrid-pooled`` is
ease.ml's own choice: one job at a time on the whole pool, ``lambda(G) = G^lambda_exp`` times
faster. All run for the same wall-clock horizon ``budget / lambda(G)``, which is the unit of the
cost axis then, so ratios compare wall-clock time on the same cluster.
"""

from __future__ import annotations

import copy
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import Any, Literal, get_args

import numpy as np

from policy import (
    DEFAULT_POLICY,
    POLICY_NAMES,
    ArmPrior,
    CostScale,
    FloatArray,
    History,
    Oracle,
    Policy,
    Problem,
    cumulative_regret,
    fit_arm_prior,
    loss_curves,
    loss_estimates,
    make_policy,
    replay,
    sublinear_speedup,
    validate_problem,
)
from policy.acquisition import BetaRule
from policy.costs import (
    LIVE_COST_KERNEL,
    CostKernel,
    CostPrior,
    OnlineCostPrior,
    fit_cost_prior,
    prior_costs,
)
from policy.gp import KernelMethod
from policy.loop import DEFAULT_LIMIT_FACTOR
from policy.policies import ABLATION_NAMES
from policy.prior import OnlinePrior
from tenantml.bench._pool import in_order
from tenantml.bench.datasets import BenchInputError, QualityTable

__all__ = [
    "RULES",
    "CostSource",
    "Protocol",
    "RepeatResult",
    "all_policy_names",
    "check_policies",
    "default_test_users",
    "run_protocol",
]

LOSS_LEVELS = (0.05, 0.02, 0.01)

#: the replay column that is the live service's configuration (see :func:`run_repeat`)
LIVE = "live"
#: the live service's quality prior (learnt, refitted online) and default policy on the
#: protocol's costs: with ``--costs given``, what ``live`` would do if it knew every cost, so
#: that ``live`` against ``live-prior`` is the price of predicting costs and ``live-prior``
#: against ``rate`` that of the prior
LIVE_PRIOR = "live-prior"

#: where the policies' costs come from: the table's, or :mod:`policy.costs`' predictions
CostSource = Literal["given", "predicted"]


def _one_of(*valid: str) -> tuple[Callable[[Any], bool], str]:
    return (lambda v: v in valid), ", ".join(valid)


#: Every constrained field of :class:`Protocol`: the ``tenantml bench`` option that sets it (the
#: messages name it), the test, and what is valid. The choices are the policy layer's own types.
RULES: dict[str, tuple[str, Callable[[Any], bool], str]] = {
    "beta_rule": ("--beta", *_one_of(*get_args(BetaRule))),
    "kernel": ("--kernel", *_one_of(*get_args(KernelMethod))),
    "costs": ("--costs", *_one_of(*get_args(CostSource))),
    "cost_kernel": ("--cost-kernel", *_one_of(*get_args(CostKernel))),
    "cost_scale": ("--cost-scale", *_one_of(*get_args(CostScale))),
    "repeats": ("--repeats", lambda v: v >= 1, ">= 1"),
    "gpus": ("--gpus", lambda v: v >= 1, ">= 1"),
    "budget": ("--budget", lambda v: 0 < v <= 1, "a fraction in (0, 1]"),
    "limit_factor": ("--time-limit-factor", lambda v: v > 0, "> 0"),
    # ease.ml's confidence delta of beta_t and Hybrid's stagnation steps s (Sec. 4.4): nan,
    # 5 or s = -1 ran and changed Hybrid's numbers
    "delta": ("--delta", lambda v: 0 < v < 1, "a probability in (0, 1)"),
    "hybrid_s": ("--hybrid-s", lambda v: v >= 1, ">= 1"),
    "lambda_exp": ("--lambda-exp", lambda v: 0 <= v <= 1, "an exponent in [0, 1]"),
}


@dataclass(frozen=True)
class Protocol:
    """One replay protocol. Constructing one only stores; :meth:`validate` checks it against a
    table (:func:`run_protocol` calls it first)."""

    policies: tuple[str, ...]
    test_users: int
    repeats: int = 50
    budget: float = 0.1
    cost_oblivious: bool = False
    gpus: int = 1
    lambda_exp: float = 0.8
    seed: int = 0
    grid_points: int = 1001
    beta_rule: str = "simple"  # BetaRule
    delta: float = 0.1
    hybrid_s: int = 10
    cost_scale: str = "mean"  # CostScale
    kernel: str = "app-a"  # KernelMethod
    costs: str = "given"  # CostSource
    cost_kernel: str = "additive"  # CostKernel: the predicted costs' covariance
    limit_factor: float = 16.0

    def validate(self, table: QualityTable) -> Protocol:
        """Raise :class:`BenchInputError` (a ``ValueError``) quoting the first bad value and
        saying what would be valid (:data:`RULES`, then the rules that need ``table``); return
        the protocol unchanged."""
        for name, (option, ok, valid) in RULES.items():
            value = getattr(self, name)
            if not ok(value):
                raise BenchInputError(f"{option} {value!r}; valid: {valid}")
        if self.costs == "predicted" and self.cost_oblivious:
            raise BenchInputError("--costs predicted needs the cost-aware protocol")
        for name in (LIVE, LIVE_PRIOR):
            if name in self.policies and self.cost_oblivious:
                raise BenchInputError(
                    f"policy {name!r} (the live service's) is cost-aware; drop --cost-oblivious"
                )
        if not self.policies:
            raise BenchInputError(
                "--policies names none; valid: a comma list of "
                + ", ".join(all_policy_names(table, self.gpus))
            )
        check_policies(self.policies, table, self.gpus)
        n_eligible = int((~table.kernel_only).sum())
        if self.test_users < 1 or self.test_users > n_eligible:
            raise BenchInputError(
                f"--test-users {self.test_users} but {table.name} has {n_eligible} tenants that "
                f"can be test users; valid: 1..{n_eligible}"
            )
        if len(table.tenants) - self.test_users < 1 and table.kernel_only.sum() == 0:
            raise BenchInputError(
                f"--test-users {self.test_users} leaves no tenant to build the kernel from "
                f"({len(table.tenants)} tenants); valid: 1..{len(table.tenants) - 1}"
            )
        return self


@dataclass
class RepeatResult:
    repeat: int
    curves: dict[str, dict[str, FloatArray]] = field(default_factory=dict)
    regret: dict[str, tuple[float, float]] = field(default_factory=dict)
    jobs: dict[str, int] = field(default_factory=dict)
    # per policy with a GP prior, per test tenant at the horizon: (loss estimate, realised loss)
    calibration: dict[str, tuple[FloatArray, FloatArray]] = field(default_factory=dict)


def default_test_users(n_eligible: int) -> int:
    """10 (the paper's protocol) when at least 20 tenants qualify, else three quarters of them,
    so the kernel always has tenants to learn from (easeml-dl has 8 tenants with costs: 6)."""
    return 10 if n_eligible >= 20 else max(1, (3 * n_eligible) // 4)


def _optuna_available() -> bool:
    try:
        import optuna  # noqa: F401
    except ImportError:
        return False
    return True


def all_policy_names(table: QualityTable, gpus: int = 1) -> tuple[str, ...]:
    """Every policy that applies to ``table`` (the static baselines need model metadata)."""
    names = [
        p for p in POLICY_NAMES if table.meta is not None or p not in ("mostcited", "mostrecent")
    ]
    names.append(LIVE)
    if _optuna_available():
        names.append("optuna")
    names.append("oracle")
    if gpus > 1:
        names.append("hybrid-pooled")
    return tuple(names)


def check_policies(names: Sequence[str], table: QualityTable, gpus: int) -> tuple[str, ...]:
    valid = all_policy_names(table, gpus)
    known = (*POLICY_NAMES, *ABLATION_NAMES, LIVE, LIVE_PRIOR, "optuna", "oracle", "hybrid-pooled")
    valid = (*valid, *ABLATION_NAMES, LIVE_PRIOR)  # asked for by name only
    for name in names:
        if name not in known:
            raise BenchInputError(f"unknown policy {name!r}; valid: {', '.join(valid)}")
        if name not in valid:
            why = {
                "mostcited": "needs model metadata (--models-meta FILE.csv)",
                "mostrecent": "needs model metadata (--models-meta FILE.csv)",
                "optuna": "needs optuna (pip install 'tenantml[bench]')",
                "hybrid-pooled": "compares against multi-device runs; needs --gpus > 1",
            }[name]
            raise BenchInputError(f"policy {name!r} {why}; valid here: {', '.join(valid)}")
    return tuple(names)


def table_costs(table: QualityTable, seed: int) -> FloatArray:
    """The table's costs; U(0, 1) draws seeded by ``seed`` where it has none (Sec. 5.1)."""
    if table.has_cost:
        return table.cost
    rng = np.random.default_rng([seed, 104729])
    return np.maximum(rng.uniform(0.0, 1.0, table.quality.shape), 1e-6)


def _build_policy(name: str, proto: Protocol, quality: FloatArray, cost: FloatArray) -> Policy:
    if name == "oracle":
        return Oracle(quality, cost)
    if name in (LIVE, LIVE_PRIOR):
        return make_policy(DEFAULT_POLICY)
    if name == "optuna":
        from tenantml.bench.optuna_peer import OptunaPeer

        return OptunaPeer()
    base = "hybrid" if name == "hybrid-pooled" else name
    return make_policy(
        base,
        cost_aware=not proto.cost_oblivious,
        beta_rule=proto.beta_rule,  # type: ignore[arg-type]
        delta=proto.delta,
        hybrid_s=proto.hybrid_s,
        cost_scale=proto.cost_scale,  # type: ignore[arg-type]
    )


def run_repeat(table: QualityTable, cost: FloatArray, proto: Protocol, r: int) -> RepeatResult:
    """One repeat of the protocol for every policy (pure function of its arguments)."""
    rng = np.random.default_rng([proto.seed, r])
    eligible = np.flatnonzero(~table.kernel_only)
    test = rng.choice(eligible, size=proto.test_users, replace=False)
    train = np.setdiff1d(np.arange(len(table.tenants)), test)
    q = table.quality[test]
    c = np.ones_like(q) if proto.cost_oblivious else cost[test]
    avail = np.isfinite(q) & np.isfinite(c)
    q0 = np.where(avail, q, 0.0)
    c1 = np.where(avail, c, 1.0)
    prior = fit_arm_prior(
        table.quality[train].T,
        random_state=r,
        method=proto.kernel,  # type: ignore[arg-type]
    )
    sizes = None if table.sizes is None else table.sizes[test]
    train_sizes = None if table.sizes is None else table.sizes[train]
    cost_prior = None
    if proto.costs == "predicted":
        cost_prior = fit_cost_prior(
            cost[train],
            train_sizes,
            kernel=proto.cost_kernel,  # type: ignore[arg-type]
        )

    def problem_of(cost_prior: CostPrior | None, prior: ArmPrior) -> Problem:
        believed = c1
        if cost_prior is not None:
            believed = np.where(avail, prior_costs(cost_prior, avail, sizes), 1.0)
        return validate_problem(
            Problem.create(
                [table.tenants[i] for i in test],
                table.models,
                avail,
                believed,
                prior=prior,
                meta=table.meta,
                cost_prior=cost_prior,
                sizes=sizes if cost_prior is not None else None,
                weights=None if table.weights is None else table.weights[test],
            )
        )

    problem = problem_of(cost_prior, prior)
    # The live service's configuration (tasks._service): its default policy on predicted costs,
    # the prior learnt by policy.prior from the other tenants and refitted online from the test
    # tenants' own results, the cost model learnt from the other tenants' costs with the
    # service's kernel and refitted online from the test tenants' jobs (policy.costs), the
    # scheduler loop's default time limits.
    live_source = OnlinePrior(table.quality[train].T, len(test))
    learnt_prior = live_source.fit() if {LIVE, LIVE_PRIOR} & set(proto.policies) else prior
    live_costs = None
    live_problem = problem
    if LIVE in proto.policies:
        live_costs = OnlineCostPrior(
            fit_cost_prior(cost[train], train_sizes, kernel=LIVE_COST_KERNEL), len(test), sizes
        )
        live_problem = problem_of(live_costs.base, learnt_prior)
    # LIVE_PRIOR: the same learnt prior, refitted online, on the protocol's costs
    prior_problem = (
        problem_of(cost_prior, learnt_prior) if LIVE_PRIOR in proto.policies else problem
    )
    best_possible = np.where(avail, q, -np.inf).max(axis=1)
    budget = proto.budget * float(c1[avail].sum())
    speed = sublinear_speedup(proto.gpus, proto.lambda_exp) if proto.gpus > 1 else 1.0
    horizon = budget / speed
    grid = np.linspace(0.0, horizon, proto.grid_points)
    out = RepeatResult(r)
    for p_idx, name in enumerate(proto.policies):
        policy = _build_policy(name, proto, q0, c1)
        pooled = name == "hybrid-pooled" or proto.gpus == 1
        live = name == LIVE
        learnt = live or name == LIVE_PRIOR
        res = replay(
            live_problem if live else prior_problem if learnt else problem,
            q0,
            c1,
            policy,
            horizon=horizon,
            slots=1 if pooled else proto.gpus,
            speed=speed if pooled else 1.0,
            rng=np.random.default_rng([proto.seed, r, p_idx]),
            time_limits=name != "oracle",
            limit_factor=DEFAULT_LIMIT_FACTOR if learnt else proto.limit_factor,
            online_prior=copy.deepcopy(live_source) if learnt else None,
            online_costs=copy.deepcopy(live_costs) if live else None,
        )
        lc = loss_curves(res.trace, best_possible, grid, problem.weights)
        out.curves[name] = {
            "avg_loss": lc.avg_loss,
            "worst_loss": lc.worst_loss,
            "rel_accuracy": lc.rel_accuracy,
        }
        out.regret[name] = cumulative_regret(
            res.trace, best_possible, problem.weights, horizon=horizon
        )
        out.jobs[name] = sum(1 for o in res.trace if o.finished_at <= horizon)
        if res.problem.prior is not None and name != "oracle":
            seen = History(tuple(o for o in res.trace if o.finished_at <= horizon))
            found = np.zeros(len(test))
            for o in seen.log:
                found[o.tenant] = max(found[o.tenant], o.quality)
            out.calibration[name] = (
                loss_estimates(res.problem, seen, seed=r),
                best_possible - found,
            )
    return out


def _run_repeat_star(args: tuple[QualityTable, FloatArray, Protocol, int]) -> RepeatResult:
    return run_repeat(*args)


def run_protocol(
    table: QualityTable,
    proto: Protocol,
    *,
    jobs: int | None = None,
    on_repeat: Callable[[RepeatResult], Any] | None = None,
) -> list[RepeatResult]:
    """All repeats, in parallel over ``jobs`` processes (default: all cores), after
    :meth:`Protocol.validate`."""
    proto.validate(table)
    cost = table_costs(table, proto.seed)
    args = [(table, cost, proto, r) for r in range(proto.repeats)]
    results: list[RepeatResult] = []
    for res in in_order(_run_repeat_star, args, jobs):
        results.append(res)
        if on_repeat:
            on_repeat(res)
    return results
