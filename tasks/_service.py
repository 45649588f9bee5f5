"""The service's logic between the world (store, MLflow) and `policy/` / `trainers/`, free of
Prefect so it is tested directly; `tasks` wraps these functions as Prefect tasks.

Notation: tenants ``i`` in submission order, the catalogue = the union of their candidates
(`trainers.candidates`) in order of first appearance, so indices are stable across restarts.
A job is (tenant, candidate) on the tenant's latest snapshot; its id ``<candidate>-s<snapshot>``
names its MLflow run and its checkpoint, which is what makes retries and restarts resume instead
of starting over or counting twice.
"""

from __future__ import annotations

import math
import os
import time
from collections.abc import Callable, Iterable, Iterator, Sequence
from contextlib import contextmanager
from dataclasses import asdict, dataclass, field, replace
from pathlib import Path
from typing import Any, TypeVar

import numpy as np
from mlflow.tracking import MlflowClient

from mlflow_plugin.jobrun import JobRun
from mlflow_plugin.registry import BestModel, beats, best_model, promote_if_better
from mlflow_plugin.tracking import (
    DEFAULT_WEIGHT,
    MODEL_URI,
    JobRecord,
    all_experiments,
    ensure_tenant_experiment,
    job_records,
    set_tenant_models,
    tenant_experiments,
    tenant_models,
    tenant_weights,
)
from policy import (
    ArmPrior,
    Assignment,
    History,
    ModelMeta,
    Observation,
    Problem,
    SchedulerLoop,
    independent_prior,
    loss_estimates,
    make_policy,
)
from policy.costs import CostPrior, OnlineCostPrior, prior_costs
from policy.prior import REFIT_EVERY, OnlinePrior
from store import ExampleStore
from store.schema import Schema
from tasks._prior_cache import fit_shipped
from tasks._seer import SeerOptions, derive_seer, train_seer
from tasks.options import PRIORS
from tasks.settings import GPU_LOCK_ENV
from trainers import (
    LR_GRID,
    ZOO,
    Candidate,
    TrainJob,
    TrainResult,
    candidates,
    cost_size,
    torch_candidates,
    train,
    validation_size,
)
from trainers.zoo import (
    COST_GROWTH,
    GROWTH_MEASURED_UP_TO,
    RELATIVE_COST,
    UNMEASURED_GROWTH,
    prior_quality,
)

T = TypeVar("T")

__all__ = [
    "JobSpec",
    "ServiceState",
    "SlotHold",
    "TenantInfo",
    "build_problem",
    "capacity_prices",
    "Planner",
    "load_state",
    "record_finished",
    "register_tenant",
    "run_job",
    "state_of",
    "valid_models",
]


MIN_EXAMPLES = 10  # a tenant with fewer examples is not trained (too few to hold some out)


@dataclass(frozen=True)
class TenantInfo:
    name: str
    schema: Schema
    candidates: tuple[str, ...]
    n_examples: int
    snapshot: int
    experiment_id: str
    weight: float = 1.0  # w_i: how much the tenant's regret counts (`set_tenant_weight`)
    restricted: bool = False  # `submit --models`: `candidates` is a subset of its schema's


@dataclass(frozen=True)
class JobSpec:
    """One training job as the scheduler dispatches it (JSON-able for `run_deployment`)."""

    tenant: str
    candidate: str
    snapshot: int
    job_id: str
    tick: int
    policy: str
    time_budget_s: float | None = None
    max_epochs: int = 10
    slot: int = 0
    sleep_s: float | None = None  # a sleep-based stand-in trainer (dispatch benchmarks)
    dispatched_at: float | None = None  # wall clock (time.time) when the scheduler sent it
    slot_lock: str | None = None  # a lock file per slot: a prefetched job waits on it, warm
    # The run's turn on its slot, and the turn of the run sent before it there (`SlotHold`):
    # it takes the slot after that one, so a slot trains its runs in the order they were sent.
    turn: int | None = None
    after: int | None = None
    # A SEER job (`tasks._seer.SeerOptions.as_dict`): tune the model's hyperparameters under a
    # deadline and a GPU budget instead of the fixed learning-rate grid.
    seer: dict[str, Any] | None = None
    # Short jobs sent in one flow run after this one, on the same slot (`Planner.decide`'s
    # ``chain_s``): the run trains them in turn, so a slot's per-run overhead is paid once.
    then: tuple[JobSpec, ...] = ()

    def __post_init__(self) -> None:
        # From JSON (`params`, a flow run's parameters) the chained jobs come back as dicts.
        if not isinstance(self.then, tuple) or any(isinstance(j, dict) for j in self.then):
            then = tuple(j if isinstance(j, JobSpec) else JobSpec(**j) for j in self.then)
            object.__setattr__(self, "then", then)

    def params(self) -> dict[str, Any]:
        return asdict(self)

    def chain(self) -> tuple[JobSpec, ...]:
        """The jobs this spec sends, in the order they train: itself, then `then`."""
        if not self.then:
            return (self,)
        return (replace(self, then=()), *self.then)


def slot_loads(in_flight: Iterable[JobSpec], slots: int) -> list[int]:
    """The runs of `in_flight` on each of the slots ``0 .. slots - 1`` (running + waiting)."""
    load = [0] * slots
    for run in in_flight:
        load[run.slot % slots] += 1
    return load


def least_loaded(load: Sequence[int]) -> int:
    """The slot with the fewest runs in `load` (`slot_loads`), the lowest of equals: where a
    run sent now trains soonest (a slot's runs train in turn)."""
    return min(range(len(load)), key=lambda s: (load[s], s))


def least_loaded_slot(in_flight: Iterable[JobSpec], slots: int) -> int:
    """`least_loaded` of `in_flight`'s `slot_loads`."""
    return least_loaded(slot_loads(in_flight, slots))


def count_jobs(specs: Iterable[JobSpec]) -> int:
    """Jobs in these specs, chained ones included (`JobSpec.chain`)."""
    return sum(1 + len(s.then) for s in specs)


@dataclass
class ServiceState:
    tenants: list[TenantInfo]
    records: list[JobRecord]
    problem: Problem
    catalogue: tuple[str, ...] = field(default=())
    # USD per device-second of each catalogue arm's instance when the pool is spot capacity
    # (`capacity_prices`); costs are then expected dollars, not seconds. None: seconds.
    usd_per_s: tuple[float, ...] | None = None

    def index(self) -> tuple[dict[str, int], dict[str, int]]:
        return (
            {t.name: i for i, t in enumerate(self.tenants)},
            {m: k for k, m in enumerate(self.catalogue)},
        )

    def history(self) -> History:
        """FINISHED jobs are observations; FAILED ones count as tried with no model. A job of a
        model outside the tenant's candidates (`load_state` keeps those it ran; a state built
        otherwise may not) is left out rather than refused by the policy. A job on an earlier
        snapshot of its tenant (fed or refined since) is `Observation.stale`: what the model
        did there informs the policy, but the model may be trained again on the data as they
        are now, and its accuracy there is not the tenant's best on them. Of a model's jobs on
        earlier snapshots only the newest is kept, and none once the model has a job on the
        current one: one shift of the data, not one per snapshot (`policy._book.STALE_VAR`)."""
        ti, mi = self.index()
        current = {t.name: t.snapshot for t in self.tenants}
        available = self.problem.available
        ended = [r for r in self.records if r.status in ("FINISHED", "FAILED")]
        newest = _newest_jobs(ended, current)
        log = []
        for r in ended:
            if (
                r.tenant not in ti
                or r.candidate not in mi
                or not available[ti[r.tenant], mi[r.candidate]]
                or r.run_id not in newest
            ):
                continue
            # an accuracy of NaN (a run written outside the trainers, which clamp) is no model
            ok = r.status == "FINISHED" and r.accuracy is not None and math.isfinite(r.accuracy)
            quality = float(r.accuracy or 0.0) if ok else 0.0
            # the training seconds: what the rest of a job's span costs (MLflow's run, the
            # model's logging, the registry) is about the same for every job, and the policy
            # adds it as `Problem.job_overhead` (`job_overhead`), which a cost model
            # exp(a_i + b_k) fitted on spans cannot hold (see `state_of`)
            cost = float(r.cost_s or 1e-3)
            if r.cost_s is None and r.end_time is not None:
                cost = max(cost, r.end_time - r.start_time)  # an older record: its span
            if self.usd_per_s is not None:
                cost *= self.usd_per_s[mi[r.candidate]]
            stale = r.snapshot is not None and r.snapshot < current[r.tenant]
            log.append(
                Observation(
                    ti[r.tenant], mi[r.candidate], quality, cost, r.end_time or 0.0, ok, stale
                )
            )
        return History(tuple(log))

    def running(self) -> list[JobRecord]:
        return [r for r in self.records if r.status == "RUNNING"]

    def online_prior(self) -> OnlinePrior:
        """The GP prior's data: the shipped matrix over this catalogue (`trainers.zoo`) and every
        tenant's finished jobs (`policy.prior`); the same construction as the replay's `live`."""
        source = OnlinePrior(prior_quality(self.catalogue), len(self.tenants))
        source.observe(self.history().log, count=False)
        return source

    def with_learnt_prior(self) -> ServiceState:
        """This state with `problem.prior` learnt from `online_prior`. Refitted, as the planner's
        loop does, once `policy.prior.REFIT_EVERY` results have arrived since the last fit for
        the same tenants and catalogue (a scheduler refreshes its state every few seconds)."""
        key = (tuple(t.name for t in self.tenants), self.catalogue)
        n_results = sum(o.completed for o in self.history().log)
        cached = _FITS.get(key)
        if cached is None or not 0 <= n_results - cached[0] < REFIT_EVERY:
            source = self.online_prior()
            # no results yet: the shipped matrix's fit, kept per machine (`tasks._prior_cache`)
            prior = fit_shipped(source) if n_results == 0 else source.fit()
            cached = _FITS[key] = (n_results, prior)
            while len(_FITS) > 8:
                del _FITS[next(iter(_FITS))]
        return replace(self, problem=replace(self.problem, prior=cached[1]))


def _newest_jobs(records: Sequence[JobRecord], snapshots: dict[str, int]) -> set[str]:
    """Run ids of the ended jobs `ServiceState.history` keeps: every job on its tenant's current
    snapshot (`snapshots`; a record without one counts as current), and of a model without any
    there, its jobs on the newest earlier snapshot it has."""

    def snap(r: JobRecord) -> int:
        return snapshots.get(r.tenant, 0) if r.snapshot is None else r.snapshot

    top: dict[tuple[str, str], int] = {}
    for r in records:
        key = (r.tenant, r.candidate)
        top[key] = max(top.get(key, -1), min(snap(r), snapshots.get(r.tenant, 0)))
    return {r.run_id for r in records if snap(r) >= top[(r.tenant, r.candidate)]}


#: the last fits: (tenant names, catalogue) -> (results they saw, prior)
_FITS: dict[tuple[tuple[str, ...], tuple[str, ...]], tuple[int, ArmPrior]] = {}


def register_tenant(
    client: MlflowClient,
    store: ExampleStore,
    name: str,
    schema: Schema,
    artifact_location: str | None = None,
    models: Sequence[str] | None = None,
) -> str:
    """Create the tenant in the store and its MLflow experiment (idempotent for one schema).
    ``models``: restrict the tenant to these candidates of its schema (checked before anything
    is stored; ``["all"]`` lifts a restriction); None keeps what was set before."""
    cands = [c.name for c in candidates(schema)]  # raises NoCandidatesError first
    chosen = None if models is None else valid_models(models, cands)
    store.create_tenant(name, schema)
    exp_id = ensure_tenant_experiment(client, name, str(schema), cands, artifact_location)
    if chosen is not None:
        set_tenant_models(client, exp_id, () if chosen == tuple(cands) else chosen)
    return exp_id


def valid_models(models: Sequence[str], candidates: Sequence[str]) -> tuple[str, ...]:
    """``models`` in the catalogue's order, ``["all"]`` for every one, or ValueError naming the
    models that are not among ``candidates`` and the valid ones."""
    if list(models) == ["all"]:
        return tuple(candidates)
    unknown = [m for m in models if m not in candidates]
    if unknown or not models:
        raise ValueError(
            f"models {', '.join(unknown) or '(none)'} are not candidates of this schema; give "
            f"'all' or some of: {', '.join(candidates)}"
        )
    return tuple(c for c in candidates if c in set(models))


def capacity_prices(spec: str | None, catalogue: Sequence[str]) -> tuple[float, ...] | None:
    """USD per second of each arm from ``TENANTML_CAPACITY_PRICES`` (`Settings.capacity_prices`,
    ``"gpu=0.65,cpu=0.21"``: expected USD per hour of the capacity torch models (gpu) and
    scikit-learn models (cpu) run on, e.g. SpotTune's Eq. 1 ``(1 - p) * price-bar`` of the pool's
    market). None when unset."""
    if not spec:
        return None
    prices: dict[str, float] = {}
    for part in spec.split(","):
        key, _, value = part.partition("=")
        try:
            prices[key.strip()] = float(value)
        except ValueError:
            raise ValueError(
                f"TENANTML_CAPACITY_PRICES {spec!r} is not valid: use gpu=USD_PER_HOUR,"
                "cpu=USD_PER_HOUR"
            ) from None
    missing = {"gpu", "cpu"} - set(prices)
    if missing or any(not v > 0 for v in prices.values()):
        raise ValueError(
            f"TENANTML_CAPACITY_PRICES {spec!r} needs positive gpu= and cpu= prices (USD/hour)"
        )
    return tuple(
        prices["cpu" if Candidate.parse(c).spec.family == "sklearn" else "gpu"] / 3600.0
        for c in catalogue
    )


#: the planner hands the policy a new ``job_overhead`` when it moved by this share (a new
#: problem rebuilds the policy's per-tenant book from the history)
OVERHEAD_CHANGE = 0.25


def load_state(
    client: MlflowClient,
    store: ExampleStore,
    capacity_prices_spec: str | None = None,
    prior: str = "learnt",
) -> ServiceState:
    """Tenants from the store, jobs from MLflow. `capacity_prices_spec`:
    `Settings.capacity_prices` (costs in expected dollars; None: seconds); `prior`: one of
    `PRIORS`."""
    experiments = all_experiments(client)  # one read for the tenants, order, weights
    exps = tenant_experiments(client, experiments)
    weights = tenant_weights(client, experiments)
    restricted = tenant_models(experiments)
    known = set(store.tenants())
    created = {e.experiment_id: e.creation_time for e in experiments}
    tenants = []
    for name, exp_id in sorted(exps.items(), key=lambda kv: (created.get(kv[1], 0), kv[0])):
        if name not in known:
            continue
        schema = store.schema(name)
        m = store.manifest(name)
        cands = tuple(c.name for c in candidates(schema))
        weight = weights.get(name, DEFAULT_WEIGHT)
        tenants.append(TenantInfo(name, schema, cands, m.n_enabled, m.version, exp_id, weight))
    records = job_records(client, [t.experiment_id for t in tenants])
    tenants = [_restrict(t, restricted.get(t.name), records) for t in tenants]
    catalogue = tuple(dict.fromkeys(c for t in tenants for c in t.candidates))
    usd = capacity_prices(capacity_prices_spec, catalogue)
    return state_of(tenants, records, usd, prior)


def _restrict(
    tenant: TenantInfo, allowed: Sequence[str] | None, records: Sequence[JobRecord]
) -> TenantInfo:
    """``tenant`` with the candidates it may train (`submit --models`), plus those it has jobs
    of on its current data or running: a restriction set later keeps the model it serves and
    its running jobs in the policy's view (tried models are never chosen again), and only stops
    new ones; after a feed, a model it excludes is not trained again."""
    if not allowed:
        return tenant
    ran = {  # on its current data: what it ran before may be trained again (`history`)
        r.candidate
        for r in records
        if r.tenant == tenant.name
        and (r.status == "RUNNING" or r.snapshot in (None, tenant.snapshot))
    }
    keep = set(allowed) | ran
    kept = tuple(c for c in tenant.candidates if c in keep)
    return replace(tenant, candidates=kept, restricted=True)


#: seconds a job is believed to cost beyond its training before any has finished (the
#: median over `bench-live real`'s first 154 jobs embedded, seed 0: 0.16 s; quartiles 0.13 and
#: 0.29). With 0 there, the first tick priced a 0.005-s k-NN fit at 1/40 of a 0.2-s boosting
#: fit, where both cost about 0.16 s more, and `rate` sent every tenant's three k-NN variants
#: first (the first 32 jobs of `bench-live real`, seed 0, before any job had reported).
JOB_OVERHEAD_PRIOR_S = 0.15


def _overheads(records: Sequence[JobRecord]) -> Iterator[float]:
    """Each finished job's MLflow run span less its training seconds (``cost_s``)."""
    return (
        r.end_time - r.start_time - r.cost_s
        for r in records
        if r.status == "FINISHED" and r.end_time is not None and r.cost_s is not None
    )


def job_overhead(records: Sequence[JobRecord]) -> float:
    """Seconds a job costs beyond its training (``Problem.job_overhead``): the median over
    finished jobs of their MLflow run's span less their training seconds (``cost_s``);
    `JOB_OVERHEAD_PRIOR_S` with none. Measured on bench-live (120 s, 12 tenants): 0.1-0.3 s,
    where a tabular job trains 0.003-0.05 s. Before, spans were the costs, so the tenant scale
    of ``log c = a_i + b_k`` absorbed the overhead and predicted every heavier model dearer by
    the same factor (a 0.005-s k-NN fit seen at 0.25 s made a 1-s forest look like 50 s)."""
    spans = list(_overheads(records))
    return max(0.0, float(np.median(spans))) if spans else JOB_OVERHEAD_PRIOR_S


def overhead_measured(records: Sequence[JobRecord]) -> bool:
    """Whether some finished job has measured the overhead `job_overhead` returns (otherwise it
    is `JOB_OVERHEAD_PRIOR_S`, the embedded service's: a server home with MLflow's
    authentication app measured 8 s a job, 50 times that)."""
    return next(_overheads(records), None) is not None


def state_of(
    tenants: list[TenantInfo],
    records: list[JobRecord],
    usd_per_s: Sequence[float] | None = None,
    prior: str = "learnt",
) -> ServiceState:
    """The service's state from its tenants and job records: the problem (`build_problem`) with
    the prior learnt across tenants (`ServiceState.with_learnt_prior`), or with ``prior=
    "independent"`` the independent arms `build_problem` starts from."""
    if prior not in PRIORS:
        raise ValueError(f"prior {prior!r} is not valid: use one of {', '.join(PRIORS)}")
    problem, catalogue = build_problem(tenants, usd_per_s)
    if usd_per_s is None:  # costs in seconds (in dollars the overhead's price is unknown)
        problem = replace(problem, job_overhead=job_overhead(records))
    usd = None if usd_per_s is None else tuple(usd_per_s)
    state = ServiceState(tenants, records, problem, catalogue, usd)
    return state.with_learnt_prior() if prior == "learnt" else state


def build_problem(
    tenants: Sequence[TenantInfo], usd_per_s: Sequence[float] | None = None
) -> tuple[Problem, tuple[str, ...]]:
    """The policy's view: availability, predicted costs (prior from `RELATIVE_COST`, refined by
    `policy.costs.CostEstimator` from finished jobs), model metadata, and an independent GP
    prior that `ServiceState.with_learnt_prior` replaces with the one learnt across tenants."""
    catalogue = tuple(dict.fromkeys(c for t in tenants for c in t.candidates))
    n, m = len(tenants), len(catalogue)
    available = np.zeros((n, m), dtype=bool)
    for i, t in enumerate(tenants):
        available[i, [catalogue.index(c) for c in t.candidates]] = True
    parsed = [Candidate.parse(c) for c in catalogue]
    models = [c.model for c in parsed]
    # log c_ik = a_i + b_k (+ g_k x_i, below): a_i = log(n_i / 1000 * epochs * |lr grid|) a
    # priori, learnt per tenant from its jobs (tau^2 = 1: a factor e); b_k = log(seconds per
    # 1,000 examples per epoch) for a torch model, which trains every learning rate of the grid
    # for the epochs; a scikit-learn model is one fit, so its b_k is log(seconds per fit of
    # 1,000 examples) less log(epochs * |lr grid|). Without that the tenant scale learnt from
    # its (mostly scikit-learn) jobs predicted its first CNN 30x too cheap: on digits LeNet as
    # costly as an MLP (0.6 s), where it took 23 s.
    epochs_grid = 10 * len(LR_GRID)
    one_fit = np.array([c.spec.family == "sklearn" for c in parsed], dtype=bool)
    log_base = np.log([RELATIVE_COST[k] for k in models]) if m else np.zeros(0)
    log_base = log_base - np.where(one_fit, math.log(epochs_grid), 0.0)
    if usd_per_s is not None and m:  # costs in expected dollars: seconds x USD per second
        log_base = log_base + np.log(np.asarray(usd_per_s, float))
    # a model's cost grows like examples^e (`COST_GROWTH`: measured for the scikit-learn arms,
    # 1 for a network's epoch), not like the examples: g_k = e_k - 1 on top of a_i's slope 1,
    # about the size RELATIVE_COST holds at (b_k moved there from mean_log_size's 1,000). Its
    # x_i is a fit's examples (`growth_sizes`), where a_i's size counts a cross-validated job's
    # folds: a fold's fit sees the tenant's examples, not 6.25 times them (bench-live's jobs,
    # `time_sklearn_arms.py --check-growth`: with the folds counted the growths predicted worse
    # than none); past the sizes the growths were measured at, like the examples (a power law
    # fitted on 1,500-12,000 rows is not trusted at 100,000: boosting's would price it at a
    # tenth of the linear, and its time limit with it)
    growth = np.array([COST_GROWTH.get(k, UNMEASURED_GROWTH) for k in models], float).reshape(m, 2)
    slope = growth[:, 0] - 1.0
    log_base = log_base - slope * (np.log(growth[:, 1]) - math.log(1000.0))
    cost_prior = CostPrior(
        log_base=log_base,
        intercept=math.log(epochs_grid / 1000.0),
        size_slope=1.0,
        tenant_var=1.0,
        noise_var=0.5,
        mean_log_size=math.log(1000.0),
        model_slope=slope if slope.any() else None,
        # how far a model's true weight may be from RELATIVE_COST's: against `bench-live
        # real`'s jobs (3,384 in 30 service runs) the arms' mean log errors have an RMS of 0.60 over
        # the tabular arms, 0.42 over the pixel arms, since they are measured
        # (`trainers.zoo.SKLEARN_COST_FILE`; 0.99 and 0.63 with the hand-set ratios before);
        # the networks' are still rough. Every tenant's jobs correct it
        # (`policy.costs.refit_cost_prior`, in the planner's loop)
        base_var=1.0,
    )
    examples = [max(t.n_examples, 1) for t in tenants]
    # tabular: no network among the schema's arms, the trainer's own test (`train_sklearn`)
    tabular = [not torch_candidates(t.schema) for t in tenants]
    # how many examples a tenant's jobs are scored on: the noise of what they measure
    # (`policy.rate`: a better model is served only when it measures better); all of them for
    # a small tabular tenant (cross-validated), else the validation share
    val_sizes = np.array(list(map(validation_size, examples, tabular)), dtype=float)
    # the cost model's size: the examples, times the folds' extra fits when cross-validated
    sizes = np.array(list(map(cost_size, examples, tabular)), dtype=float)
    growth_sizes = np.minimum(np.array(examples, dtype=float), GROWTH_MEASURED_UP_TO)
    cost = prior_costs(cost_prior, available, sizes, growth_sizes) if n and m else np.zeros((n, m))
    meta = ModelMeta(
        np.array([ZOO[k].year for k in models], float),
        np.array([ZOO[k].citations for k in models], float),
    )
    problem = Problem.create(
        [t.name for t in tenants],
        list(catalogue),
        available,
        cost,
        prior=independent_prior(np.full(m, 0.5)),
        meta=meta,
        cost_prior=cost_prior,
        sizes=sizes,
        growth_sizes=growth_sizes,
        weights=np.array([t.weight for t in tenants], float),
        val_sizes=val_sizes,
    )
    return problem, catalogue


class Planner:
    """The policy's state across scheduler passes: one `SchedulerLoop`, rebuilt only when the
    tenants or the catalogue change (a picker's turn, e.g. RoundRobin's, survives the passes).

    `prefetch`: jobs decided and sent beyond the `slots` running ones; each waits, started and
    warm, on its slot's lock in `lock_dir` (see `SlotHold`) and trains as soon as the slot frees.
    `worker_locks`: on several nodes the lock is instead the GPU's of the worker that takes the
    run (`GPU_LOCK_ENV`, on its node), so no lock goes with a job and `lock_dir` is None.
    """

    def __init__(
        self,
        policy: str,
        slots: int,
        seed: int = 0,
        *,
        prefetch: int = 0,
        lock_dir: str | None = None,
        worker_locks: bool = False,
        overhead_known: bool = False,
    ) -> None:
        if prefetch and lock_dir is None and not worker_locks:
            raise ValueError("prefetching needs slot locks: give lock_dir, or worker_locks")
        if worker_locks and lock_dir is not None:
            raise ValueError("give worker_locks or lock_dir, not both: a job waits on one lock")
        self.policy = policy
        self.slots = slots
        self.capacity = slots + prefetch
        self.overhead_known = overhead_known
        self.lock_dir = lock_dir
        # Turns on the slots (`JobSpec.turn`): microseconds at the start, so that a later
        # scheduler's are larger; each slot's last turn sent.
        self._next_turn = time.time_ns() // 1000
        self._last_turn: dict[int, int] = {}
        self.rng = np.random.default_rng(seed)
        self.loop: SchedulerLoop | None = None
        self._key: tuple[object, ...] = ()
        self._fed: set[tuple[str, str]] = set()  # (run id, status) of the results it holds
        # (run id, status) of the ended jobs taken: a FAILED job that a retry of its run then
        # finishes (the same MLflow run, `tasks._dispatch`) is taken again, as FINISHED
        self._seen: set[tuple[str, str]] = set()

    def _sync(self, state: ServiceState, pending: tuple[Assignment, ...]) -> SchedulerLoop:
        # a tenant's models (`submit --models`), weight or snapshot (fed or refined: its jobs
        # so far become stale) changed: a new loop, from the history
        p = state.problem
        key = (
            tuple((t.name, t.snapshot) for t in state.tenants),
            state.catalogue,
            p.available.tobytes(),
            None if p.weights is None else np.asarray(p.weights).tobytes(),
        )
        done = [r for r in state.records if r.status in ("FINISHED", "FAILED")]
        kept = _newest_jobs(done, {t.name: t.snapshot for t in state.tenants})
        now = {(r.run_id, r.status) for r in done if r.run_id in kept}
        # a result the loop holds was superseded (a model retrained on new data, a newer stale
        # one, a failed run that a retry finished): rebuild, so that it holds what `history`
        # keeps
        superseded = bool(self._fed - now)
        if self.loop is None or key != self._key or superseded:
            # The loop refits the prior every `policy.prior.REFIT_EVERY` new results, as the
            # replay's `live` column does; it starts from the state's (fitted on this history).
            # The cost model too: `build_problem`'s, refined by every tenant's jobs.
            costs = None
            if p.cost_prior is not None:
                costs = OnlineCostPrior(
                    p.cost_prior, len(state.tenants), p.sizes, growth_sizes=p.growth_sizes
                )
            carried = None  # the policy's own state survives a rebuild for the same problem;
            if self.loop is not None and self.loop.problem.tenants == p.tenants:  # a feed
                same = key == self._key  # keeps a round-robin turn (an int), not Hybrid's
                if same or (key[1:] == self._key[1:] and isinstance(self.loop.state, int)):
                    carried = self.loop.state  # mode: greedy again serves the fed one first
            self.loop = SchedulerLoop(
                state.problem,
                make_policy(self.policy),
                slots=self.capacity,
                rng=self.rng,
                history=state.history(),
                online_prior=state.online_prior(),
                online_costs=costs,
                state=carried,
            )
            self._key, self._seen = key, {(r.run_id, r.status) for r in done}
            self._fed = now
        else:
            new = [r for r in done if (r.run_id, r.status) not in self._seen and r.run_id in kept]
            # costs as the rebuild's history has them (dollars on a spot pool: `usd_per_s`)
            self.loop.finished(replace(state, records=new).history().log)
            self._seen |= {(r.run_id, r.status) for r in done}
            self._fed |= {(r.run_id, r.status) for r in new}
            o, was = state.problem.job_overhead, self.loop.problem.job_overhead
            if abs(o - was) > OVERHEAD_CHANGE * max(was, 1e-3):  # the policy rebuilds its book
                self.loop.problem = replace(self.loop.problem, job_overhead=o)
        self.loop.pending = pending  # what is really in flight (resumed jobs included)
        return self.loop

    def decide(
        self,
        state: ServiceState,
        *,
        in_flight: Sequence[JobSpec],
        tick: int,
        max_epochs: int = 10,
        job_budget_s: float | None = None,
        seer_budget_x: float | None = None,
        seer_tuner: str = "replan",
        chain_s: float | None = None,
        sleep_s: float | None = None,
        elsewhere: Sequence[JobSpec] = (),
    ) -> list[JobSpec]:
        """New jobs for the free slots: the policy's picks on the tenants' latest snapshots.

        `in_flight`: the runs sent and not ended, one spec each (with its chained jobs); at most
        `capacity` runs are in flight, and every job in them is pending for the policy until
        `state` holds it FINISHED (a chain's earlier jobs, or a job whose flow run is still
        recording): then it is a result. `elsewhere`: jobs another process trains (a `tenantml
        seer run`, an attempt crashed alive: `tasks._loop.Progress.left`), pending too, on no
        slot of this scheduler's: without them the policy picked such a job again at once.

        ``seer_budget_x``: torch models get a SEER job instead of the learning-rate grid, with
        the policy's cost estimate as deadline and ``seer_budget_x`` x that in GPU-minutes
        (`tasks._seer.derive_seer`), so hyperparameter tuning happens inside model selection;
        ``seer_tuner`` is their tuner (``replan``, or ``seer``: the paper's).

        ``chain_s``: a run whose job is expected to take less than this many seconds gets more
        of the policy's picks chained after it (`JobSpec.then`, at most `MAX_CHAIN` jobs), until
        their expected seconds add up to ``chain_s``: the per-run overhead (a flow run, a
        process, the hand-off) is then paid once for them all. A pick expected to take longer
        than what is left is not chained; it goes back to the policy. Costs in dollars
        (`ServiceState.usd_per_s`) and SEER jobs (``seer_budget_x``) are not chained, nor is
        any job before one has finished and measured the per-job overhead (`overhead_measured`)
        unless the planner was built with ``overhead_known`` (jobs trained in the scheduler's
        own process, as embedded, where `JOB_OVERHEAD_PRIOR_S` was measured): expected seconds
        from that 0.15 s chained 16 jobs of 8 s each into one run on a server home with
        authentication.
        ``sleep_s``: every job is a sleep-based stand-in of that length (dispatch benchmarks),
        which is also its expected length.
        """
        if not state.tenants or len(in_flight) >= self.capacity:
            return []
        ti, mi = state.index()
        # a job MLflow shows FINISHED is a result in `state` already, not pending too
        known = {(r.tenant, r.job_id) for r in state.records if r.status == "FINISHED"}
        pending = tuple(
            Assignment(ti[j.tenant], mi[j.candidate])
            for run in in_flight
            for j in run.chain()
            if j.tenant in ti and j.candidate in mi and (j.tenant, j.job_id) not in known
        )
        # another process's jobs: only those on a tenant's current data, of a model it has
        snapshot = {t.name: t.snapshot for t in state.tenants}
        pending += tuple(
            Assignment(ti[j.tenant], mi[j.candidate])
            for j in elsewhere
            if j.tenant in ti
            and j.candidate in mi
            and j.snapshot == snapshot[j.tenant]
            and state.problem.available[ti[j.tenant], mi[j.candidate]]
            and (j.tenant, j.job_id) not in known
        )
        loop = self._sync(state, pending)
        # Tenants with too few examples to train cannot be scheduled yet.
        ready = {i for i, t in enumerate(state.tenants) if t.n_examples >= MIN_EXAMPLES}
        load = slot_loads(in_flight, self.slots)
        # Not chained: costs in dollars, SEER jobs (they take seer_budget_x times the cost), and
        # any job before a job's overhead has been measured, unless the prior is this kind of
        # service's (`overhead_known`) or the jobs are stand-ins of known length (sleep_s).
        chaining = (
            bool(chain_s)
            and state.usd_per_s is None
            and seer_budget_x is None
            and (sleep_s is not None or self.overhead_known or overhead_measured(state.records))
        )

        def per_s(a: Assignment) -> float:
            # the policy's costs and limits are in dollars on a spot pool: a job's limit, a
            # SEER deadline and a slot's queue are seconds of its instance, at the arm's price
            return 1.0 if state.usd_per_s is None else state.usd_per_s[a.arm]

        def spec(a: Assignment, slot: int) -> JobSpec:
            t = state.tenants[a.tenant]
            cand = state.catalogue[a.arm]
            budget = min(loop.time_limit(a) / per_s(a), job_budget_s or math.inf)
            lock = None if self.lock_dir is None else f"{self.lock_dir}/slot-{slot}.lock"
            job_id = f"{cand.replace('+', '_')}-s{t.snapshot}"
            seer = None
            if seer_budget_x is not None and Candidate.parse(cand).spec.family != "sklearn":
                seer = derive_seer(
                    loop.expected_cost(a) / per_s(a), budget_x=seer_budget_x, tuner=seer_tuner
                ).as_dict()
                job_id = f"seer-{job_id}"
            return JobSpec(
                t.name,
                cand,
                t.snapshot,
                job_id,
                tick,
                self.policy,
                None if math.isinf(budget) else float(budget),
                max_epochs,
                slot,
                sleep_s=sleep_s,
                slot_lock=lock,
                seer=seer,
            )

        def seconds(a: Assignment) -> float:
            return sleep_s if sleep_s is not None else loop.expected_cost(a) / per_s(a)

        # The free runs, each on the least loaded slot; a slot's runs train in turn.
        run_slots = []
        for _ in range(self.capacity - len(in_flight)):
            slot = least_loaded(load)
            load[slot] += 1
            run_slots.append(slot)
        runs = self._fill(loop, run_slots, chaining, chain_s or 0.0, ready, spec, seconds)
        out = []
        for run, slot in zip(runs, run_slots, strict=True):
            if not run:
                continue
            head = replace(spec(run[0], slot), then=tuple(spec(a, slot) for a in run[1:]))
            if self.lock_dir is not None:  # one machine: the slot's runs take it in turn
                head = replace(head, turn=self._next_turn, after=self._last_turn.get(slot))
                self._last_turn[slot], self._next_turn = self._next_turn, self._next_turn + 1
            out.append(head)
        return out

    def unsent(self, runs: Sequence[JobSpec]) -> None:
        """Take back the slot turns of `runs` (decided, in order, and not sent): a run sent
        after them on their slot waits for the turn before theirs, not for theirs."""
        for run in reversed(runs):
            if run.turn is not None and self._last_turn.get(run.slot) == run.turn:
                if run.after is None:
                    del self._last_turn[run.slot]
                else:
                    self._last_turn[run.slot] = run.after

    def _fill(
        self,
        loop: SchedulerLoop,
        run_slots: list[int],
        chaining: bool,
        chain_s: float,
        ready: set[int],
        spec: Callable[[Assignment, int], JobSpec],
        seconds: Callable[[Assignment], float],
    ) -> list[list[Assignment]]:
        """The policy's picks, one at a time and in its order, put into the free runs (one per
        entry of ``run_slots``, the run's slot) so that the slots train them in that order: each
        pick goes to the run that its slot reaches first (the slot with the fewest expected
        seconds sent so far; on a slot, its first run not yet full). A run is full when the pick
        is not chained onto it (``chaining`` off, or it would pass ``chain_s`` seconds or
        `MAX_CHAIN` jobs); that pick goes to the next run. A pick no run takes goes back to the
        policy, as if never picked. Picks of tenants not ``ready`` are not sent."""
        runs: list[list[Assignment]] = [[] for _ in run_slots]
        full = [False] * len(run_slots)
        sent = [0.0] * len(run_slots)  # expected seconds per run
        queued = dict.fromkeys(run_slots, 0.0)  # expected seconds per slot
        used: set[tuple[str, str]] = set()
        for _ in range(len(run_slots) * MAX_CHAIN + len(ready) + 1):  # bounded: see `ready`
            if all(full):
                break
            turn = loop.state  # the picker's state (a round robin's turn) before this pick
            slots, loop.slots = loop.slots, len(loop.pending) + 1  # room for one more pick
            try:
                picked = loop.fill()
            finally:
                loop.slots = slots
            if not picked:
                break
            (a,) = picked
            if a.tenant not in ready:
                continue  # stays pending this pass, so the policy moves on
            job = spec(a, 0)
            key, cost = (job.tenant, job.job_id), seconds(a)
            target = None
            if key not in used:
                while target is None:
                    # on each slot its first run not full; of those, the slot reached first
                    heads = {}
                    for i, slot in enumerate(run_slots):
                        if not full[i] and slot not in heads:
                            heads[slot] = i
                    if not heads:
                        break
                    i = min(heads.values(), key=lambda i: (queued[run_slots[i]], i))
                    run = runs[i]
                    fits = not run or (
                        chaining and sent[i] + cost <= chain_s and len(run) < MAX_CHAIN
                    )
                    if fits:
                        target = i
                    else:
                        full[i] = True
            if target is None:
                loop.pending, loop.state = loop.pending[:-1], turn  # back to the policy
                break
            runs[target].append(a)
            used.add(key)
            sent[target] += cost
            queued[run_slots[target]] += cost
            if not chaining or sent[target] >= chain_s or len(runs[target]) >= MAX_CHAIN:
                full[target] = True
        return runs


MAX_CHAIN = 16  # jobs in one run at most (`Planner.decide`'s ``chain_s``)


def run_job(
    spec: JobSpec,
    client: MlflowClient,
    store: ExampleStore,
    experiment_id: str,
    *,
    flow_run_id: str | None = None,
    slot: SlotHold | None = None,
) -> JobRecord:
    """Train one job and record it as an MLflow run (`mlflow_plugin.jobrun.JobRun`; the run of an
    earlier attempt is reused, and the trainer resumes from its checkpoint). Ends the run
    FINISHED, or FAILED and re-raises. ``slot``: the hold of the run this job is part of
    (default: the job's own, let go after its training)."""
    # `limit_unit`: the limit is in seconds (before it, a spot pool's went out in dollars; a
    # restarted scheduler reads back only a limit so marked: `tasks._loop._orphan_spec`)
    params: dict[str, Any] = {
        "max_epochs": spec.max_epochs,
        "time_budget_s": spec.time_budget_s,
        "limit_unit": "s",
    }
    if spec.seer is not None:
        params.update(SeerOptions.from_dict(spec.seer).to_params())
    # No environment variables here: jobs may run in threads (embedded), which share os.environ.
    with JobRun.start(
        client,
        experiment_id,
        tenant=spec.tenant,
        job_id=spec.job_id,
        candidate=spec.candidate,
        snapshot=spec.snapshot,
        policy=spec.policy,
        tick=spec.tick,
        slot=spec.slot,
        flow_run_id=flow_run_id,
        params=params,
        retry=_patiently,
    ) as run:
        result: TrainResult | None = None
        hold = slot or SlotHold.of(replace(spec, then=()))
        # the slot is held while training (and between a chain's jobs)
        with hold.training(f"{spec.tenant}/{spec.job_id}"):
            started = time.time()  # the trainer's first step follows at once
            timing = {"started_at": started}
            if spec.dispatched_at is not None:
                timing["dispatch_latency_s"] = started - spec.dispatched_at
            run.log_metrics(timing)
            if spec.sleep_s is not None:
                accuracy, cost, epochs = _sleep_job(spec.sleep_s)
            elif spec.seer is not None:
                result = train_seer(spec, store, run)
                accuracy, cost, epochs = result.accuracy, result.cost_s, result.epochs
            else:
                job = TrainJob(
                    spec.tenant,
                    spec.candidate,
                    spec.snapshot,
                    time_budget_s=spec.time_budget_s,
                    max_epochs=spec.max_epochs,
                    job_id=spec.job_id,
                )
                result = train(job, store, on_epoch=run.log_epoch)
                accuracy, cost, epochs = result.accuracy, result.cost_s, result.epochs
            ended = time.time()
        # The next job on this slot trains already while this one logs its model.
        skip = None if result is None else _unservable(client, spec, accuracy)
        run.log_result(accuracy, cost, epochs, ended_at=ended, trained=result, skip_model=skip)
    return run.record()


def _unservable(client: MlflowClient, spec: JobSpec, accuracy: float) -> str | None:
    """Why the model of job `spec`, of `accuracy`, will never be its tenant's ``best`` (None: it
    may be): it does not beat the current best, and on one snapshot ``best`` only moves up
    (`mlflow_plugin.registry.beats`, the rule `promote_if_better` moves it by). Such a model
    is not logged: logging one (MLflow 3 saves it, loads it again to check its input example,
    and links the run's metrics to it) took 0.4 s per second of training in a `bench-live
    real` run's profile, and 68% of its jobs (738 of 1,080) did not improve their tenant."""
    best = _patiently(lambda: best_model(client, spec.tenant))
    if beats(accuracy, best, snapshot=spec.snapshot):
        return None
    assert best is not None
    if spec.snapshot < best.snapshot:
        return f"snapshot {spec.snapshot} is older than best v{best.version}'s ({best.snapshot})"
    return f"accuracy {accuracy:.4f} does not beat best v{best.version} ({best.accuracy:.4f})"


def _patiently(fn: Callable[[], T]) -> T:
    """A job's MLflow call outside its (patient) client, waiting out a server outage
    (`tasks.outage`)."""
    from tasks.outage import ride_out

    return ride_out(fn, what="train job")


#: how long a run waits for the run sent before it on its slot to take the slot first
#: (`SlotHold`); past it, that run is taken for dead (killed before it trained) and skipped.
TURN_PATIENCE_S = 30.0


class SlotHold:
    """A run's hold on its GPU slot (an exclusive lock on a file) across the jobs it trains.

    This is what makes prefetching pay: the scheduler sends the next run for a slot while the
    current one runs, its process starts and imports everything, then waits here, warm, and
    starts training the moment the slot is free (shared/ARCHITECTURE: ticks never block).

    A slot trains the policy's picks in the order they were made (`Planner.decide` fills a
    slot's runs in that order):
    - the hold is taken when the run's first job starts training and kept between its jobs, so
      no other run (the prefetched one) trains between the jobs of a chain (`JobSpec.then`). It
      is let go once the last job has trained, so the next run trains while that job logs its
      model, or at `release`, which the run calls at its end whatever happened.
    - runs take the slot in the order they were sent: a run with ``after`` (the turn of the run
      sent before it on the slot) waits until a run of that turn or later has taken the slot
      (the lock file holds the latest turn that took it), for at most `TURN_PATIENCE_S`. Two
      runs sent at once (the scheduler's first tick) would otherwise race for the lock.

    ``lock``: the file; one machine: the slot's, sent by the scheduler (`JobSpec.slot_lock`);
    other nodes: the lock of the GPU whose worker started this run, on that node
    (`GPU_LOCK_ENV`; set by `tenantml worker`, never in the embedded mode's threads; no turns
    there: any run of the pool may reach a worker); None: nothing waits. ``jobs``: how many
    jobs the run trains.
    """

    def __init__(
        self, lock: str | None, jobs: int = 1, turn: int | None = None, after: int | None = None
    ) -> None:
        self.lock = lock
        self.left = jobs
        self.turn, self.after = turn, after
        self._file: Any = None
        self._done: set[str] = set()  # the jobs counted by `job_done`

    @classmethod
    def of(cls, spec: JobSpec) -> SlotHold:
        """The hold for the run `spec` heads (all its chained jobs)."""
        if spec.slot_lock:
            return cls(spec.slot_lock, len(spec.chain()), spec.turn, spec.after)
        return cls(os.environ.get(GPU_LOCK_ENV), len(spec.chain()))

    @contextmanager
    def training(self, job: str = "") -> Iterator[None]:
        """Hold the slot while `job` (``tenant/job_id``: job ids repeat across tenants, and a
        chain may mix tenants) trains (taking it if not held yet)."""
        if self.lock and self._file is None:
            self._take(self.lock)
        try:
            yield
        finally:
            self.job_done(job)

    def job_done(self, job: str = "") -> None:
        """Job `job` of the run needs the slot no more (it trained, or it will not: an earlier
        attempt finished it, another process trains it, it failed before training); after
        the last, the slot is let go. Counted once per named job (the run's flow says so of
        every job whatever happened; `training` may have said it first)."""
        if job:
            if job in self._done:
                return
            self._done.add(job)
        self.left -= 1
        if self.left <= 0:
            self.release()

    def release(self) -> None:
        """Let the slot go (idempotent). A run that never took it still passes its turn, so the
        run sent after it does not wait for it."""
        import fcntl

        f, self._file = self._file, None
        if f is None and self.lock and self.turn is not None:
            Path(self.lock).parent.mkdir(parents=True, exist_ok=True)
            with open(self.lock, "a+") as g:
                fcntl.flock(g, fcntl.LOCK_EX)
                self._pass_turn(g)
                self.turn = None
        elif f is not None:
            fcntl.flock(f, fcntl.LOCK_UN)
            f.close()

    def _take(self, lock: str) -> None:
        import fcntl

        Path(lock).parent.mkdir(parents=True, exist_ok=True)
        f = open(lock, "a+")  # noqa: SIM115 (held across jobs, closed by `release`)
        give_up = time.monotonic() + TURN_PATIENCE_S
        while True:
            fcntl.flock(f, fcntl.LOCK_EX)
            if self.after is None or _turn_taken(f) >= self.after or time.monotonic() > give_up:
                break
            fcntl.flock(f, fcntl.LOCK_UN)  # the run before this one has not trained yet
            time.sleep(0.02)
        self._pass_turn(f)
        self.turn = None
        self._file = f

    def _pass_turn(self, f: Any) -> None:
        if self.turn is not None and self.turn > _turn_taken(f):
            f.seek(0)
            f.truncate()
            f.write(str(self.turn))
            f.flush()


def _turn_taken(f: Any) -> int:
    """The latest turn that took the slot, from its (locked) lock file; -1 if none."""
    f.seek(0)
    text = f.read().strip()
    return int(text) if text.isdigit() else -1


def _sleep_job(seconds: float) -> tuple[float, float, int]:
    """A stand-in trainer for dispatch benchmarks: holds its slot `seconds`, reports accuracy 0."""
    start = time.perf_counter()
    time.sleep(seconds)
    return 0.0, time.perf_counter() - start, 1


def record_finished(client: MlflowClient, record: JobRecord) -> BestModel | None:
    """After a job: move the tenant's ``best`` alias to it if it beats the current best."""
    if record.status != "FINISHED" or record.accuracy is None:
        return None
    uri = client.get_run(record.run_id).data.tags.get(MODEL_URI)
    if not uri:
        return None  # a sleep-trainer job has no model
    return promote_if_better(
        client,
        record.tenant,
        model_uri=uri,
        run_id=record.run_id,
        accuracy=record.accuracy,
        candidate=record.candidate,
        job_id=record.job_id,
        snapshot=record.snapshot or 0,
    )


def drop_checkpoints(store: ExampleStore, record: JobRecord) -> None:
    """After job `record` ended FINISHED (its model, if it logged one, is in MLflow): delete its
    checkpoints (`ExampleStore.delete_job_checkpoints`). A FAILED job keeps them: sent again
    under its job id, it resumes from them. A store that fails here leaves them, said in one
    line: the job's result stands, they only take space."""
    if record.status != "FINISHED":
        return
    try:
        store.delete_job_checkpoints(record.tenant, record.job_id)
    except Exception as e:  # noqa: BLE001 - a cleanup; the job is done
        print(f"{record.tenant}/{record.job_id}: checkpoints left in the store ({e!r})")


def tick_metrics(state: ServiceState) -> dict[str, float]:
    """Per-tick scheduler metrics: each tenant's loss estimate and the total regret estimate."""
    loss = loss_estimates(state.problem, state.history()) if state.tenants else np.zeros(0)
    out = {f"loss_estimate.{t.name}": float(x) for t, x in zip(state.tenants, loss, strict=True)}
    out["regret_estimate"] = float(loss.sum())
    best: dict[str, float] = {}
    current = {t.name: t.snapshot for t in state.tenants}
    for r in state.records:
        on_current = r.snapshot is None or r.snapshot == current.get(r.tenant, r.snapshot)
        if r.status == "FINISHED" and r.accuracy is not None and on_current:
            best[r.tenant] = max(best.get(r.tenant, 0.0), r.accuracy)
    for name, acc in best.items():
        out[f"best_accuracy.{name}"] = acc
    return out
