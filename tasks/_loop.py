"""The steps of the `scheduler` flow's loop (`flows.scheduler`), each a small typed function.

Notation: ``G`` = `Service.slots` (GPU slots), ``P`` = prefetched jobs (by default one waiting,
warm, per slot), capacity ``G + P`` = the most jobs in flight (`Planner.capacity`).
Passes follow each other ``poll_s`` seconds apart; a *tick* is a pass in which the policy sent
jobs; ``t`` = `Progress.tick`, the number of the last tick (carried on from MLflow at restarts).

Start-up:

* `connect`: load the settings, resolve the options' defaults, open MLflow and the example store
  (both wait out server outages), build the `Planner` (the policy) and the `Dispatcher`;
* `scheduler_run`: the scheduler's own MLflow run (experiment ``tenantml/scheduler``), begun
  before it sends any job, with its process recorded (so a job that takes it down is seen);
* `resume_orphans`: rebuild the state from MLflow, redo the promotions a crash skipped
  (`redo_promotions`, through the `record` task: idempotent), and take over the jobs a previous
  scheduler left going: the flow runs Prefect still holds are adopted (servers; some have no
  MLflow run yet), and jobs left RUNNING in MLflow otherwise are sent again with the same job id
  (they resume from their checkpoints), but one that three schedulers died training alone is
  given up, and those that two died training beside others are held back, to be sent alone
  (`tasks._crashes`);
* `start_clock`: the run's clock and the earlier schedulers' loss history.

Each pass:

1. `record_finished_jobs`: jobs the dispatcher reports as ended go through the `record` task
   (``best`` moves if the job beat it), after one `refresh` so their MLflow records are seen;
   a chained run's jobs are taken one by one as MLflow shows them finished (`finished_in_chains`,
   at most ``refresh_s`` late), not all when the run ends; the estimates they change are logged
   again at the last tick's step (`_log_estimates`);
2. `send_held`: what start-up held back: a job that may kill the process, alone once nothing
   else is in flight; the others together once no such job is left;
   then `wants_tick`: more ticks are wanted, fewer than ``G + P`` jobs are in flight, and no
   job is held back or trains alone;
3. `refresh_if_stale`: the `refresh` task again once the state is ``refresh_s`` seconds old
   (new tenants, new examples), not on every pass;
4. `decide_tick`: the `decide` task (the policy) picks jobs for the free slots, tick ``t + 1``;
5. `dispatch_tick`: if it picked any, that is tick ``t + 1``: each job goes to the dispatcher;
6. `log_tick`: the tick's metrics (`tick_metrics` and ``gpu_busy_fraction``) to MLflow, step t;
7. `should_stop`: the requested ticks are done and their jobs finished, or nothing is left to
   try and nothing runs;
8. `tell_waiting`: a loop that goes on with nothing to train and nothing running says why, once
   (no tenants, too few examples, nothing left to try on the current examples);

then `pause` (``poll_s``, cut short when a run in this process ends). A pass that fails with a
server outage is `wait_out_outage`: one log line naming the server, bounded backoff, and the
pass is done again from MLflow (nothing was lost: a job polled as ended stays in
`Progress.finished` until recorded). At the end,
`log_summary` logs the totals and returns the flow's summary.

``busy`` = (sum of the recorded jobs' own training seconds) / (``G`` x wall seconds), at most 1.

What a person watching sees:

* events, in this process, to the callbacks registered with `listen`: `JobDispatched` (step 5,
  and each orphan resumed), `JobFinished` (step 1: accuracy, cost, the tenant's loss estimate
  after it), `JobLeft` (a job left to another process that trains it: at start-up, or when
  the run sent for it found that process), `Stopping` (a signal);
* ``loss.png`` in the scheduler's run: every tenant's loss estimate and the total over the
  ticks (`tasks._plot`), drawn again at most every `PLOT_EVERY_S` seconds by `log_tick` and
  once at the end;
* stopping: inside `stop_on_signals`, SIGINT or SIGTERM sets the process's `StopRequest`
  (`Service.stop`); no tick starts after it, `pause` wakes at once, the loop ends after the
  pass it interrupted, and `release_dispatcher` leaves the jobs in flight going: they resume
  on the next scheduler (their MLflow runs stay RUNNING; `resume_orphans`).
"""

from __future__ import annotations

import functools
import signal
import tempfile
import threading
import time
from collections.abc import Callable, Iterator, Sequence
from contextlib import contextmanager
from dataclasses import dataclass, field
from pathlib import Path
from types import FrameType
from typing import Any

import mlflow
from mlflow.tracking import MlflowClient

from mlflow_plugin.registry import serving_key
from mlflow_plugin.tracking import (
    GAVE_UP,
    HOME,
    PROCESS,
    RESENT_AT,
    SCHEDULER_EXPERIMENT,
    JobRecord,
    ensure_scheduler_experiment,
    process_state,
    process_tag,
)
from store import ExampleStore
from tasks._crashes import Deaths, count_death, died_scheduler, give_up, mark_stopped
from tasks._dispatch import DeploymentDispatcher, Dispatcher, Done, LocalDispatcher
from tasks._locks import holds_lock
from tasks._plot import TickHistory, add_tick, load_tick_history, loss_picture
from tasks._prefect import decide, record, refresh
from tasks._seer import BY_HAND, seer_options_from_params
from tasks._service import (
    MIN_EXAMPLES,
    JobSpec,
    Planner,
    ServiceState,
    TenantInfo,
    least_loaded_slot,
    tick_metrics,
)
from tasks.options import SchedulerOptions
from tasks.outage import (
    Backoff,
    default_patience_s,
    is_outage,
    patient,
    ride_out,
    serve_patiently,
    wait_for_servers,
    wait_or_give_up,
)
from tasks.settings import Settings
from tasks.tracking_template import keep_template

__all__ = [
    "PLOT_EVERY_S",
    "STOP",
    "JobDispatched",
    "JobLeft",
    "JobFinished",
    "Progress",
    "SchedulerEvent",
    "Service",
    "StopRequest",
    "Stopping",
    "connect",
    "decide_tick",
    "dispatch_tick",
    "finished_in_chains",
    "listen",
    "log_summary",
    "log_tick",
    "pause",
    "record_finished_jobs",
    "redo_promotions",
    "refresh_if_stale",
    "release_dispatcher",
    "resume_orphans",
    "scheduler_run",
    "send_held",
    "should_stop",
    "start_clock",
    "tell_waiting",
    "Waiting",
    "stop_on_signals",
    "untold_jobs",
    "wait_out_outage",
    "wants_tick",
]

#: seconds between two drawings of ``loss.png`` while ticks happen (one more at the end): a
#: drawing takes about 0.2 s of the scheduler's process, where embedded jobs train too; every
#: 5 s, it took 3.3 s of a 60-s `bench-live real` run's scheduler thread (py-spy)
PLOT_EVERY_S = 30.0


# -- what a person watching sees -----------------------------------------------------------------


@dataclass(frozen=True)
class JobDispatched:
    """A job sent to the dispatcher at tick `tick`; `resumed`: one left unfinished, sent again
    (or adopted): by an earlier scheduler (at start-up), or by the process it was left to
    (`release_left`)."""

    tick: int
    tenant: str
    model: str
    job_id: str
    resumed: bool = False


@dataclass(frozen=True)
class JobFinished:
    """A job that ended: `ok`, or failed with the back-end's `detail`; its `accuracy` and
    `cost_s` (its own training seconds) from its MLflow record (None where the record has
    none), and its tenant's loss estimate with it (`tasks._plot`). Told when its run ends and
    the scheduler has recorded it, or for a job of a chained run still going, as MLflow shows
    it finished (`finished_in_chains`; its flow run moves ``best`` itself)."""

    tenant: str
    model: str
    job_id: str
    ok: bool
    accuracy: float | None
    cost_s: float | None
    loss_estimate: float | None
    detail: str = ""


@dataclass(frozen=True)
class Stopping:
    """SIGINT or SIGTERM (`signal`, e.g. ``"SIGINT"``) asked the scheduler to stop, with
    `in_flight` jobs sent and not ended (a chained run's jobs already told as finished left
    out) or held back at start-up (`send_held`), in the scheduler run `run_id` (None before it
    began).
    Sent from the signal handler, in the main thread: a listener may end the process there
    (the embedded CLI does; the jobs' runs stay RUNNING and resume on the next scheduler)."""

    signal: str
    in_flight: int
    run_id: str | None


@dataclass(frozen=True)
class JobLeft:
    """A job this scheduler leaves to the process training it, named by its `process` tag: at
    start-up, a `tenantml seer run`'s (`resume_orphans`); or a job it sent whose `train` run
    found another live process training it (`flows.train`; `seer_run` False: an earlier
    attempt of the job, whose flow run was marked crashed while it trained). That process
    records the job, and moves `best`, when it ends; meanwhile the job is pending for the
    policy (`Progress.left`)."""

    tenant: str
    model: str
    job_id: str
    process: str | None
    node: str | None = None
    seer_run: bool = True


@dataclass(frozen=True)
class Waiting:
    """Nothing to train and nothing running: why, in one line naming what would change it
    (`tell_waiting`); told once, and again when the reason changes."""

    reason: str


SchedulerEvent = JobDispatched | JobFinished | JobLeft | Stopping | Waiting

_listeners: list[Callable[[SchedulerEvent], None]] = []


@contextmanager
def listen(callback: Callable[[SchedulerEvent], None]) -> Iterator[None]:
    """Call `callback` with every `SchedulerEvent` of the schedulers that run in this process
    while the block runs (in the thread that runs the scheduler; `Stopping` in the main one)."""
    _listeners.append(callback)
    try:
        yield
    finally:
        _listeners.remove(callback)


def _emit(event: SchedulerEvent) -> None:
    for callback in list(_listeners):
        callback(event)


class StopRequest:
    """SIGINT or SIGTERM asking the scheduler of this process to stop (one per process, as
    signals are: `STOP`). Armed by `stop_on_signals`; `signal` names the first signal, and the
    dispatcher and MLflow run it watches give `Stopping` its count and run id (less the jobs
    in `told`: the scheduler's `Progress.told`, finished in runs still going; plus the jobs
    `held`: its `Progress.suspects` and `Progress.held`)."""

    def __init__(self) -> None:
        self._event = threading.Event()
        self._wake = threading.Event()  # a stop, or a job that ended (`nudge`)
        self.signal: str | None = None
        self.dispatcher: Dispatcher | None = None
        self.run_id: str | None = None
        self.told: set[tuple[str, str]] = set()
        self.held: tuple[list[JobRecord], ...] = ()  # `Progress.suspects` and `held`
        self.stopped_dir: Path | None = None  # where a stop is marked (`mark_stopped`)

    @property
    def requested(self) -> bool:
        return self._event.is_set()

    def wait(self, seconds: float) -> bool:
        """Sleep `seconds`, or less if a stop is requested or a `nudge` comes meanwhile (or
        came since the last wait); True if a stop was requested."""
        if self.requested:  # a stop is for every wait after it, not only the first
            return True
        self._wake.wait(seconds)
        self._wake.clear()  # a nudge after this is seen by the pass that follows, or the next wait
        return self.requested

    def nudge(self) -> None:
        """Cut the current `wait` short: a job ended (`LocalDispatcher`'s ``on_done``), so the
        next pass records it and fills its slot now rather than up to ``poll_s`` later."""
        self._wake.set()

    def request(self, name: str) -> None:
        """Stop: remember `name` (the first one) and tell the listeners (`Stopping`)."""
        if self.requested:
            return
        self.signal = name
        self._event.set()
        self._wake.set()
        # before a listener may end the process; with no run yet, no job has trained
        if self.stopped_dir is not None and self.run_id is not None:
            try:
                mark_stopped(self.stopped_dir, self.run_id)
            except OSError:  # a full disk: the stop goes on, and may read as a death
                pass
        in_flight = self.dispatcher.in_flight if self.dispatcher is not None else []
        held = sum(len(jobs) for jobs in self.held)
        _emit(Stopping(name, untold_jobs(in_flight, self.told) + held, self.run_id))

    def reset(self) -> None:
        self._event.clear()
        self._wake.clear()
        self.signal, self.dispatcher, self.run_id = None, None, None
        self.told = set()
        self.held = ()
        self.stopped_dir = None


STOP = StopRequest()
_STOP_SIGNALS = (signal.SIGINT, signal.SIGTERM)
_armed = 0  # nesting depth of stop_on_signals (the CLI arms it, the flow again inside)


def _on_stop_signal(signum: int, frame: FrameType | None) -> None:
    if STOP.requested:  # a second signal: the usual interrupt (named after the signal)
        raise KeyboardInterrupt(signal.Signals(signum).name)
    STOP.request(signal.Signals(signum).name)


@contextmanager
def stop_on_signals() -> Iterator[StopRequest]:
    """While the block runs, SIGINT and SIGTERM request `STOP` instead of interrupting (a
    second one raises KeyboardInterrupt); the handlers before are restored after it. Nests
    (the outermost block starts and ends with no request); outside the main thread, where
    Python gives no signals, it only yields `STOP`."""
    global _armed
    if threading.current_thread() is not threading.main_thread():
        yield STOP
        return
    if _armed == 0:
        STOP.reset()
    before = {s: signal.signal(s, _on_stop_signal) for s in _STOP_SIGNALS}
    _armed += 1
    try:
        yield STOP
    finally:
        _armed -= 1
        for s, handler in before.items():
            signal.signal(s, handler if handler is not None else signal.SIG_DFL)
        if _armed == 0:
            STOP.reset()


@dataclass(frozen=True)
class Service:
    """What one scheduler runs with, fixed from `connect` to its end: the options, their
    defaults resolved (`policy`, ``G`` = `slots`, `patience_s`, `lock_dir`: the slot locks, or
    None without prefetching), the clients, planner and dispatcher it drives, and the `stop`
    request it obeys (the process's `STOP`). `sole_home`: the home, where no other scheduler
    writes to its MLflow store now (it holds the home's lock and the store is the home's own
    database: `tasks._crashes`), else None."""

    options: SchedulerOptions
    settings: Settings
    policy: str
    slots: int
    patience_s: float
    lock_dir: str | None
    client: MlflowClient
    store: ExampleStore
    planner: Planner
    dispatcher: Dispatcher
    stop: StopRequest = STOP
    sole_home: Path | None = None
    # Each tenant's leaderboard as last published to the store (`tasks.leaderboard.fingerprint`).
    published: dict[str, tuple[Any, ...]] = field(default_factory=dict)


@dataclass
class Progress:
    """What this scheduler has seen and done; mutated by the steps of each pass.

    `state`: the last `refresh` (at `refreshed`, ``time.monotonic``); `tick`: the last tick's
    number ``t``; `ticks_done`, `jobs_done`: this scheduler's own counts; `train_s`: the
    finished jobs' own training seconds; `finished`: jobs that ended and are not yet told
    (`JobFinished`) or, once their run ended, not yet recorded; `told`: jobs of chained runs
    still going that were taken from MLflow as they finished (`finished_in_chains`: told,
    counted and in the estimates then; recorded when the back-end reports them with their run),
    and jobs of an adopted run that finished before this scheduler; `outage`:
    the backoff of the current outage, if any; `started`: when the scheduler's run began;
    `losses`: the loss metrics per tick (`tasks._plot`), earlier schedulers' first, and
    `plotted`: when ``loss.png`` was last drawn (``time.monotonic``), or the start: the first
    picture comes `PLOT_EVERY_S` into the run, not at its first tick (one tick's picture says
    nothing, and drawing it, matplotlib's import included, held the interpreter for about 1 s
    while the first jobs trained beside it); `log_summary` draws the last one. `left`: the jobs
    left to another process that trains them (`JobLeft`), with when (``time.monotonic``):
    pending for the policy while that process trains them (`still_left`); `awaited`: those of
    them a bounded run that is otherwise done has said it waits for (`should_stop`);
    `waiting`: the reason last said for waiting with nothing to train (`tell_waiting`).
    `suspects`: jobs left by schedulers that died as they trained beside others
    (`tasks._crashes`), each sent alone in turn (`send_held`), and `alone`, the one in flight;
    `held`: the other jobs start-up would have sent again, sent together after them.
    """

    state: ServiceState
    refreshed: float
    tick: int
    outage: Backoff
    ticks_done: int = 0
    jobs_done: int = 0
    train_s: float = 0.0
    finished: list[Done] = field(default_factory=list)
    told: set[tuple[str, str]] = field(default_factory=set)
    started: float = field(default_factory=time.monotonic)
    losses: TickHistory = field(default_factory=dict)
    plotted: float = field(default_factory=time.monotonic)
    left: dict[tuple[str, str], tuple[JobSpec, float]] = field(default_factory=dict)
    awaited: set[tuple[str, str]] = field(default_factory=set)
    waiting: str | None = None
    suspects: list[JobRecord] = field(default_factory=list)
    alone: tuple[str, str] | None = None
    held: list[JobRecord] = field(default_factory=list)

    @property
    def holding(self) -> bool:
        """A suspect is in flight alone, or jobs wait to be sent (`send_held`)."""
        return bool(self.suspects or self.held or self.alone)

    def wants_more_ticks(self, ticks: int | None, budget_s: float | None = None) -> bool:
        """Fewer than `ticks` ticks done (always, for ``ticks=None``), and fewer than
        `budget_s` seconds since `started` (always, for None)."""
        in_time = budget_s is None or self.wall_s() < budget_s
        return in_time and (ticks is None or self.ticks_done < ticks)

    def wall_s(self) -> float:
        """Seconds since `started`."""
        return time.monotonic() - self.started

    def busy_fraction(self, slots: int, wall_s: float) -> float:
        """``busy`` (module docstring) of `slots` GPU slots over `wall_s` seconds."""
        return min(1.0, self.train_s / max(slots * wall_s, 1e-9))


def connect(options: SchedulerOptions, run_train: Callable[[dict[str, Any]], Any]) -> Service:
    """Settings loaded and applied, defaults resolved, MLflow and the store opened (waiting out
    outages), the planner and the dispatcher built. `run_train` runs one job from its
    `JobSpec.params` in this process: the `train` flow, handed in by `flows` (tasks never import
    flows); used only by the local dispatcher."""
    settings = Settings.load().apply()
    serve_patiently()  # a slow answer (a big upload) is waited for, not failed
    policy = options.policy or settings.policy
    slots = options.slots or settings.gpu_slots
    # The scheduler waits out server outages (`tasks.outage`) instead of failing, from its
    # first step on: started while MLflow, Prefect or S3 is down, it waits for them here.
    patience_s = options.outage_patience_s
    if patience_s is None:
        patience_s = default_patience_s()
    wait_for_servers(settings, patience_s, say=print)
    client = patient(MlflowClient(settings.tracking_uri), settings, patience_s)
    keep_template(settings.tracking_uri)  # a new home's database, made: for later new homes
    store = ExampleStore(patient(settings.store().blobs, settings, patience_s))
    dispatch = options.dispatch
    local = dispatch == "local" or (dispatch == "auto" and settings.mode == "embedded")
    # Prefetch: jobs waiting warm on a GPU's lock. One machine (embedded, or `up`): the slot's
    # lock file, named in the job. Several nodes (`up --listen`, a cluster): each node's GPU
    # worker holds its own GPU's lock (`tenantml worker`), and takes 1 + prefetch runs.
    prefetch = options.prefetch
    if prefetch is None:
        prefetch = slots * settings.prefetch_for(local)
    worker_locks = not (local or settings.pin_gpus)
    lock_dir = str(settings.home / "slots") if prefetch and not worker_locks else None
    # Jobs trained in this process cost beyond training what the overhead prior says (it was
    # measured so); a flow run on a worker, perhaps through MLflow's authentication app, is
    # measured before its short jobs are chained (`Planner.decide`).
    planner = Planner(
        policy,
        slots,
        options.seed,
        prefetch=prefetch,
        lock_dir=lock_dir,
        worker_locks=worker_locks,
        overhead_known=local,
    )
    dispatcher: Dispatcher
    if local:
        # Embedded, nothing watches for silent runs: no heartbeats (`LocalDispatcher`).
        dispatcher = LocalDispatcher(
            planner.capacity,
            run_train,
            on_done=STOP.nudge,
            heartbeats=settings.mode == "servers",
        )
    else:
        # No setting of this machine goes with a run: it gets its node's worker's environment
        # (its own TENANTML_HOME), so a run taken by another node's worker works there too.
        dispatcher = DeploymentDispatcher(
            slots, {}, pin_gpus=settings.pin_gpus, command=settings.flow_run_command
        )
    # the scheduler flow took the home's lock before connecting
    sole = settings.tracking_in_home and holds_lock(settings.home, "scheduler")
    svc = Service(
        options, settings, policy, slots, patience_s, lock_dir, client, store, planner,
        dispatcher, sole_home=settings.home if sole else None,
    )  # fmt: skip
    svc.stop.dispatcher = dispatcher  # `Stopping` counts its jobs
    svc.stop.stopped_dir = settings.home / "stopped"  # `tasks._crashes.mark_stopped`
    return svc


def redo_promotions(svc: Service, state: ServiceState) -> None:
    """Each tenant's most accurate FINISHED job on its newest snapshot through the `record`
    task: a crash between a job's end and its promotion may have left ``best`` behind;
    otherwise promoting is a no-op."""
    for tenant in state.tenants:
        ok = [r for r in state.records if r.tenant == tenant.name and r.status == "FINISHED"]
        if ok:
            record(svc.client, max(ok, key=lambda r: serving_key(r.snapshot, r.accuracy)))


def _orphan_spec(svc: Service, job: JobRecord, slot: int, last_tick: int) -> JobSpec:
    """The spec of a job left RUNNING (or FAILED unwatched), rebuilt from its MLflow record and
    params (same job id, so it resumes from its checkpoint; its epochs and time limit as first
    sent; a SEER job stays one), placed on `slot`. A `seer run` job is trained for real, never
    as the sleep stand-in of a dispatch benchmark (``sleep_s``)."""
    params = svc.client.get_run(job.run_id).data.params
    epochs = _logged_number(params, "max_epochs")
    lock = svc.lock_dir and f"{svc.lock_dir}/slot-{slot}.lock"
    return JobSpec(
        job.tenant,
        job.candidate,
        job.snapshot or 0,
        job.job_id,
        job.tick or last_tick,
        svc.policy,
        # a limit logged before `limit_unit` may be a spot pool's dollars: none then
        _logged_number(params, "time_budget_s") if params.get("limit_unit") == "s" else None,
        svc.options.max_epochs if epochs is None else int(epochs),
        slot=slot,
        sleep_s=None if job.policy == BY_HAND else svc.options.sleep_s,
        slot_lock=lock,
        seer=seer_options_from_params(params),
    )


def _logged_number(params: dict[str, str], key: str) -> float | None:
    """Param `key` of a job run (`tasks._service.train_job` logs ``str(value)``) as a number;
    None when not logged (an older run) or logged as None."""
    try:
        return float(params[key])
    except (KeyError, ValueError):
        return None


def resume_orphans(svc: Service) -> Progress:
    """Start-up after any stop or crash: the state from MLflow (`refresh`), `redo_promotions`,
    ``t`` = the highest tick recorded or sent, and every job an earlier scheduler left going
    taken over: first the runs the back-end still holds (`Dispatcher.left_going`: a scheduler
    killed just after sending a job leaves a flow run with no MLflow run yet), adopted as they
    are; then each job left RUNNING in MLflow and not among those, adopted (its flow run is
    still going) or dispatched again, each on the least loaded slot. A job whose latest
    attempt's process still runs here is left to it (`JobLeft`; pending in `Progress.left` while
    it runs), and so is a SEER job started by hand (`BY_HAND`) unless its `tenantml seer run` is
    known to have ended (`process_state`): it may be training it, and its job id is not one the
    planner makes, so nothing else sends it. A job left is pending for the policy while it may
    still train (`still_left`), as one `record_finished_jobs` leaves is. A job left by a
    scheduler that died with it training in its process is weighed (`tasks._crashes`): given up
    after its third death alone; a suspect, held back to be sent alone, after two beside others.
    Last, each job FAILED since the earlier scheduler started that no scheduler gave up on
    (`GAVE_UP`: it failed while none watched it) is sent again, and marked so (`RESENT_AT`:
    should this scheduler die before the job runs, the next counts it failed from then). The
    jobs to send again go now (`send_held`), each on the least loaded slot, unless there are
    suspects: then the first suspect goes alone, and the others wait for them."""
    state = refresh(svc.client, svc.store, svc.settings.capacity_prices, svc.options.prior)
    refreshed = time.monotonic()
    redo_promotions(svc, state)
    last_tick = max((r.tick or 0 for r in state.records), default=0)
    taken: set[tuple[str, str]] = set()
    patience = svc.patience_s
    held = ride_out(svc.dispatcher.left_going, what="scheduler", settings=svc.settings,
                    patience_s=patience)  # fmt: skip
    # jobs of an adopted chained run that finished before this scheduler: recorded when the
    # run ends, never told or counted by this one (the earlier scheduler may have told them)
    told: set[tuple[str, str]] = set()
    left: dict[tuple[str, str], tuple[JobSpec, float]] = {}
    finished = {(r.tenant, r.job_id) for r in state.records if r.status == "FINISHED"}
    for spec, flow_run_id in held:
        jobs = {(j.tenant, j.job_id) for j in spec.chain()}  # a chained run: all its jobs
        if jobs & taken or not svc.dispatcher.adopt(spec, flow_run_id, listed=True):
            continue
        taken |= jobs
        told |= jobs & finished
        last_tick = max(last_tick, spec.tick)
        for chained in spec.chain():
            if (chained.tenant, chained.job_id) not in finished:
                _resumed(chained)
    # the jobs each process held: one alone in a scheduler's that died is its suspect; each
    # process looked up once, not once per job
    by_process: dict[str | None, int] = {}
    for job in state.running():
        by_process[job.process] = by_process.get(job.process, 0) + 1
    died = {p for p in by_process
            if died_scheduler(svc.client, p, svc.stop.stopped_dir, svc.sole_home)}  # fmt: skip
    gave_up = False
    resume: list[JobRecord] = []  # sent now, or held behind the suspects
    suspects: list[tuple[Deaths, JobRecord]] = []  # each to be sent alone (`tasks._crashes`)
    # held only where jobs train in this process (a worker's death cannot take the scheduler
    # down), which adopts nothing
    here = isinstance(svc.dispatcher, LocalDispatcher)

    def to_send(job: JobRecord, deaths: Deaths) -> None:
        """`job` goes alone if it is a suspect (and jobs train here), else with the others."""
        if here and deaths.suspect:
            suspects.append((deaths, job))
        else:
            resume.append(job)

    for job in state.running():
        if (job.tenant, job.job_id) in taken:
            continue
        runs = process_state(job.process, job.node)
        by_hand = job.policy == BY_HAND
        if runs == "running" or (by_hand and runs == "unknown"):
            # a live process here trains it (an attempt whose flow run was marked crashed
            # while it trained; a `seer run`), or a `seer run` may (on another machine or
            # container): sent again, it would train twice into the same checkpoints
            who = "its `tenantml seer run`" if by_hand else "an earlier attempt that trains it"
            print(f"leaving {job.tenant}/{job.job_id} to {who} "
                  f"(process {job.process or 'unknown'})")  # fmt: skip
            _emit(JobLeft(job.tenant, job.candidate, job.job_id, job.process, job.node, by_hand))
            # pending while it trains here, else as long as it may take (`still_left`)
            spec = _orphan_spec(svc, job, 0, last_tick)
            left[(job.tenant, job.job_id)] = (spec, time.monotonic())
            continue
        deaths = Deaths(job.crashes, job.shared_crashes)
        if job.process in died:
            deaths = count_death(svc.client, job, alone=by_process[job.process] == 1)
            if deaths.given_up:
                _give_up(svc, job, deaths)
                gave_up = True
                continue
        if job.flow_run_id and not here:  # still going as that flow run (servers): taken
            spec = _orphan_spec(svc, job, _adopted_slot(svc, job), last_tick)
            if _adopted(svc, spec, job.flow_run_id):
                _resumed(spec)
                continue
        to_send(job, deaths)
    if gave_up:  # the policy sees those jobs FAILED (tried, no model), not pending
        state = refresh(svc.client, svc.store, svc.settings.capacity_prices, svc.options.prior)
    # A job that failed while no scheduler watched it (its run's last attempt failed between
    # the earlier scheduler's death and this start): that scheduler would have sent it again
    # while it had attempts left, so this one does. Only one that ended since the earlier
    # scheduler started (older failures were that one's to see, or no scheduler's: a home of an
    # older version has no `GAVE_UP` tags), not one a scheduler gave up on (`GAVE_UP`), nor a
    # `seer run`'s, nor one whose process still runs here (between the train flow's own
    # retries). (The bounded chaos run lost a job so.) One an earlier start sent so, which was
    # still waiting for its slot when that scheduler died, counts from then (`RESENT_AT`,
    # marked before it is sent: a scheduler that dies between the two leaves it marked).
    failed = [
        job
        for job in state.records
        if job.status == "FAILED"
        and not job.gave_up
        and job.policy != BY_HAND
        and (job.tenant, job.job_id) not in taken
    ]
    since = previous_scheduler_start(svc.client, svc.stop.run_id) if failed else None
    for job in failed:
        if (
            since is None
            or job.failed_at < since
            or process_state(job.process, job.node) == "running"
        ):
            continue
        svc.client.set_tag(job.run_id, RESENT_AT, f"{time.time():.3f}")
        to_send(job, Deaths(job.crashes, job.shared_crashes))  # a suspect's last attempt failed
    progress = Progress(state, refreshed, last_tick, Backoff(svc.patience_s), told=told,
                        left=left)  # fmt: skip
    # fewest deaths alone first: an innocent one ends before the likelier killer's next death
    suspects.sort(key=lambda s: (s[0].alone, s[1].start_time, s[1].job_id))
    progress.suspects, progress.held = [job for _, job in suspects], resume
    for deaths, job in suspects:
        print(f"{job.tenant}/{job.job_id} is resumed alone: {deaths.shared} schedulers died "
              "while it trained beside other jobs")  # fmt: skip
    if suspects and resume:
        print(f"holding {len(resume)} other job{'s' * (len(resume) > 1)} left until then")
    # `Stopping` counts the jobs left going: those in flight, less the ones told finished,
    # and those held back (the queues, as `send_held` empties them)
    svc.stop.told, svc.stop.held = progress.told, (progress.suspects, progress.held)
    send_held(svc, progress)  # with no suspect, all of them now
    if svc.stop.run_id is not None:  # the failures before its start are this one's now
        svc.client.set_tag(svc.stop.run_id, TOOK_OVER, "1")
    return progress


def _give_up(svc: Service, job: JobRecord, deaths: Deaths) -> None:
    """`tasks._crashes.give_up`, said in the log and to the listeners (`JobFinished`)."""
    detail = give_up(svc.client, job, deaths)
    print(f"giving up {job.tenant}/{job.job_id}: {detail}")
    _emit(JobFinished(job.tenant, job.candidate, job.job_id, False, None, None, None, detail))


def send_held(svc: Service, progress: Progress) -> None:
    """Step 2 (and the end of `resume_orphans`): send what start-up held back. A suspect
    (`Progress.suspects`, `tasks._crashes`) goes alone, the next once nothing is in flight;
    once none is left, the other jobs held (`Progress.held`) go together, each on the least
    loaded slot. No tick meanwhile (`wants_tick`): a suspect that kills this process is the only job
    training in it. Each job leaves its queue once sent: an outage on the way (`_orphan_spec`
    reads MLflow) loses none and sends none twice. Nothing after a stop request: the jobs
    held stay RUNNING (or marked sent again) for the next scheduler."""
    if svc.stop.requested:
        return
    busy = bool(svc.dispatcher.in_flight)
    if progress.alone is not None:
        if busy:
            return
        progress.alone = None
    if progress.suspects:
        if not busy:
            job = progress.suspects[0]
            spec = _orphan_spec(svc, job, 0, progress.tick)
            svc.dispatcher.submit(spec)
            progress.suspects.pop(0)
            progress.alone = (job.tenant, job.job_id)
            _sent_again(job, spec)
        return
    while progress.held and not svc.stop.requested:
        job = progress.held[0]
        spec = _orphan_spec(svc, job, _free_slot(svc), progress.tick)
        svc.dispatcher.submit(spec)
        progress.held.pop(0)
        _sent_again(job, spec)


def _free_slot(svc: Service) -> int:
    """The slot a job sent again goes to: the least loaded (`least_loaded_slot`)."""
    return least_loaded_slot(svc.dispatcher.in_flight, svc.slots)


def _adopted_slot(svc: Service, job: JobRecord) -> int:
    """The slot of a job adopted as its flow run goes on: the one it was sent to (`SLOT`), on
    whose GPU (and lock) the run trains or waits, unless this scheduler has fewer slots; else
    the least loaded. Placed by load, two runs of one slot (one training, one sent ahead)
    counted one on each, and the planner filled both alike: one GPU queued runs while the other
    ran out of them."""
    if job.slot is not None and job.slot < svc.slots:
        return job.slot
    return _free_slot(svc)


def _sent_again(job: JobRecord, spec: JobSpec) -> None:
    """Tell that `job` (left RUNNING, or FAILED unwatched) was sent again as `spec`."""
    if job.status == "RUNNING":
        _resumed(spec)
        return
    print(f"sending {job.tenant}/{job.job_id} again: it failed with no scheduler to retry it")
    _emit(JobDispatched(spec.tick, spec.tenant, spec.candidate, spec.job_id, resumed=True))


#: on a scheduler's run once it has taken over what the earlier ones left (`resume_orphans`)
TOOK_OVER = "tenantml.took_over"


def previous_scheduler_start(client: MlflowClient, exclude: str | None = None) -> float | None:
    """When the latest scheduler that took over what the earlier ones left started (seconds
    since the epoch), the run `exclude` (this scheduler's) left out; None if none. One whose
    run begins before its jobs are sent (a `tenantml.process` tag) counts once it got through
    `resume_orphans` (`TOOK_OVER`): one that died or was stopped on the way never sent again
    the jobs that failed unwatched before it, so they are still the next one's to send."""
    exp = client.get_experiment_by_name(SCHEDULER_EXPERIMENT)
    if exp is None:
        return None
    runs = client.search_runs(
        [exp.experiment_id], max_results=50, order_by=["attributes.start_time DESC"]
    )
    for r in runs:
        tags = r.data.tags
        if r.info.run_id != exclude and (TOOK_OVER in tags or PROCESS not in tags):
            return float(r.info.start_time) / 1000.0
    return None


def _adopted(svc: Service, spec: JobSpec, flow_run_id: str) -> bool:
    """`Dispatcher.adopt` of a run MLflow names (checked on Prefect: an outage waited out, as
    `left_going`'s list is)."""
    adopt = functools.partial(svc.dispatcher.adopt, spec, flow_run_id)
    return ride_out(adopt, what="scheduler", settings=svc.settings, patience_s=svc.patience_s)


def _resumed(spec: JobSpec) -> None:
    print(f"resuming {spec.tenant}/{spec.job_id} left running by an earlier scheduler")
    _emit(JobDispatched(spec.tick, spec.tenant, spec.candidate, spec.job_id, resumed=True))


@contextmanager
def scheduler_run(svc: Service) -> Iterator[mlflow.ActiveRun]:
    """The scheduler's MLflow run in the experiment ``tenantml/scheduler`` (created if missing),
    with its parameters and its process (`process_tag`) logged; begun before the scheduler
    sends any job, even one an earlier scheduler left (`resume_orphans`), so that a job that
    takes this process down is found in a run the next scheduler can read
    (`tasks._crashes.died_scheduler`), and a signal at start-up ends it KILLED too. The run
    ends FAILED if the block raises, KILLED if a signal stopped the scheduler."""
    exp_id = ensure_scheduler_experiment(svc.client, svc.settings.artifact_location)
    with mlflow.start_run(experiment_id=exp_id, run_name=f"scheduler-{svc.policy}",
                          tags={PROCESS: process_tag(), HOME: str(svc.settings.home)},
                          ) as run:  # fmt: skip
        svc.stop.run_id = run.info.run_id
        params = {
            "policy": svc.policy,
            "prior": svc.options.prior,
            "slots": svc.slots,
            "ticks": svc.options.ticks,
            "budget_s": svc.options.budget_s,
            "max_epochs": svc.options.max_epochs,
            "mode": svc.settings.mode,
        }
        mlflow.log_params(params)
        yield run
        if svc.stop.requested:
            mlflow.end_run("KILLED")


def start_clock(svc: Service, progress: Progress, started: float) -> None:
    """`progress`'s clock from `started` (`time.monotonic`, as the scheduler's run began: its
    wall clock and ``--budget-s`` count the jobs an earlier scheduler left, taken over), and its
    loss history with the earlier schedulers' (`tasks._plot.load_tick_history`)."""
    progress.losses = load_tick_history(svc.client)
    progress.started = started


def _refresh(svc: Service, progress: Progress, publish: bool = True) -> None:
    """The `refresh` task; then, unless the caller publishes itself, the changed leaderboards."""
    progress.state = refresh(svc.client, svc.store, svc.settings.capacity_prices, svc.options.prior)
    progress.refreshed = time.monotonic()
    if publish:
        publish_leaderboards(svc, progress.state)


def publish_leaderboards(
    svc: Service, state: ServiceState, moved: frozenset[str] = frozenset()
) -> None:
    """Publish the leaderboard (`tasks.leaderboard`) of every tenant whose jobs or weight changed
    since this scheduler last did, and of the tenants in `moved` (their ``best`` may have moved),
    from the state just read: one registry request per tenant published, none otherwise."""
    from tasks import leaderboard

    by_tenant: dict[str, list[JobRecord]] = {t.name: [] for t in state.tenants}
    for r in state.records:
        if r.tenant in by_tenant:
            by_tenant[r.tenant].append(r)
    for t in state.tenants:
        # a tenant restricted by `submit --models` has fewer candidates in play than its schema
        n = len(t.candidates) if t.restricted else 0
        key = leaderboard.fingerprint(by_tenant[t.name], t.weight, n)
        if svc.published.get(t.name) == key and t.name not in moved:
            continue
        snap = leaderboard.snapshot_from_mlflow(
            svc.client, t.name, records=by_tenant[t.name], weight=t.weight, n_candidates=n
        )
        leaderboard.publish(svc.store, t.name, snap)  # an outage: waited out like the refresh
        svc.published[t.name] = key


def _record_of(state: ServiceState, spec: JobSpec) -> JobRecord | None:
    return next(
        (r for r in state.records if r.tenant == spec.tenant and r.job_id == spec.job_id), None
    )


def record_finished_jobs(svc: Service, progress: Progress) -> None:
    """Step 1: poll the dispatcher; if jobs ended, or a chained run is going and the state is
    ``refresh_s`` old, `refresh`, and take the chained jobs that have finished meanwhile
    (`finished_in_chains`); then for each job a log line, the `record` task (moves ``best`` if
    it improved) and a `JobFinished` to the listeners. A job leaves `Progress.finished` only
    once told (and, once its run ended, recorded), so a pass cut short by an outage does it on
    the next one.

    A job taken early is told and counted then, and recorded when its run ends: its flow run
    moves ``best`` itself right after the job (`flows.train`), and the scheduler's `record` (an
    idempotent check) waits, so that it does not register and move ``best`` beside its own
    run's flow. Moves that do meet (runs of two slots finishing together) end on the most
    accurate version (`mlflow_plugin.registry.settle_best`)."""
    progress.finished.extend(svc.dispatcher.poll())
    stale = time.monotonic() - progress.refreshed >= svc.options.refresh_s
    refreshed = bool(progress.finished) or (
        stale and untold_jobs(svc.dispatcher.in_flight, progress.told, chained=True) > 0
    )
    if refreshed:
        _refresh(svc, progress, publish=False)  # published once, below
        progress.finished += finished_in_chains(
            progress.state, svc.dispatcher.in_flight, progress.told
        )
    # the estimates after these results: for the listeners' lines and, once a tick was logged,
    # for its step again (`_log_estimates`); computed once for both, and not for jobs told
    # already (their run's end only records them: the estimates did not change)
    news = not all(_told_before(progress, d) for d in progress.finished)
    losses = tick_metrics(progress.state) if news and (_listeners or progress.ticks_done) else {}
    recorded = {d.spec.tenant for d in progress.finished}
    while progress.finished:
        done = progress.finished[0]
        rec = _record_of(progress.state, done.spec)
        if _told_before(progress, done):  # its run ended: record it now
            if rec is not None:
                record(svc.client, rec)
            progress.told.discard((done.spec.tenant, done.spec.job_id))
            progress.finished.pop(0)
            continue
        if _left(done, rec):  # another live process trains it: not this scheduler's result
            progress.finished.pop(0)
            # the process the record names if it runs; else the holder of the request's lock
            # (a `seer run` that has not recorded its process yet)
            known = rec is not None and process_state(rec.process, rec.node) == "running"
            process, node = (rec.process, rec.node) if rec and known else (None, None)
            seer_run = not known or rec is None or rec.policy == BY_HAND
            progress.left[(done.spec.tenant, done.spec.job_id)] = (done.spec, time.monotonic())
            print(
                f"job {done.spec.tenant}/{done.spec.job_id} left to process {process or 'unknown'}"
            )
            _emit(JobLeft(done.spec.tenant, done.spec.candidate, done.spec.job_id, process, node,
                          seer_run))  # fmt: skip
            continue
        status = "ok" if done.ok else f"failed ({done.detail})"
        print(
            f"job {done.spec.tenant}/{done.spec.job_id} {status} in "
            f"{done.seconds:.1f} s, accuracy {rec.accuracy if rec else None}"
        )
        if rec is not None:
            if not done.early:
                record(svc.client, rec)
            if not done.ok and rec.status == "FAILED":  # its attempts are spent: a restarted
                # scheduler leaves it failed (one RUNNING, its process crashed, it takes over)
                svc.client.set_tag(rec.run_id, GAVE_UP, done.detail[:500] or "failed")
            progress.train_s += rec.cost_s or 0.0
        progress.finished.pop(0)
        progress.jobs_done += 1
        spec = done.spec
        _emit(
            JobFinished(
                spec.tenant,
                spec.candidate,
                spec.job_id,
                done.ok,
                rec.accuracy if rec else None,
                rec.cost_s if rec else None,
                losses.get(f"loss_estimate.{spec.tenant}"),
                done.detail,
            )
        )
    if recorded:  # the changed boards, and those whose `best` `record` may have moved
        publish_leaderboards(svc, progress.state, frozenset(recorded))
        if progress.ticks_done and news:
            _log_estimates(svc, progress, losses)
    elif refreshed:  # what `refresh_if_stale` would have published (a weight changed, ...)
        publish_leaderboards(svc, progress.state)


def _left(done: Done, rec: JobRecord | None) -> bool:
    """`done` ended well, yet its job is not FINISHED: its `train` run left it to another live
    process (`flows.train`). A run that trains a job ends it FINISHED, or fails."""
    return done.ok and not done.early and (rec is None or rec.status != "FINISHED")


#: seconds a job left to another process stays pending whatever its record says: left because
#: a `seer run` held the request's lock, the record may not name that process yet (it does so
#: within seconds of its start)
LEFT_GRACE_S = 60.0


def still_left(
    state: ServiceState, left: dict[tuple[str, str], tuple[JobSpec, float]], now: float
) -> dict[tuple[str, str], tuple[JobSpec, float]]:
    """The jobs of `left` (`Progress.left`) another process still trains, or may: RUNNING in
    `state` (or not recorded yet) and
    * its process runs on this machine (`process_state`); or
    * this machine cannot tell (a worker saw it running elsewhere: another node or container),
      for as long as the job may take (`_may_take_s`: its time limit, a SEER job's deadline);
    * else for `LEFT_GRACE_S` after it was left.
    The others may be picked again (one whose process ended unrecorded is sent again by
    `release_left`): a result now, failed, their process ended, or gone on past what the job
    may take (a record a lost node left RUNNING would otherwise keep the model
    from its tenant for good)."""
    keep = {}
    for key, (spec, since) in left.items():
        rec = _record_of(state, spec)
        if rec is not None and rec.status != "RUNNING":
            continue
        where = "unknown" if rec is None else process_state(rec.process, rec.node)
        grace = LEFT_GRACE_S if where == "ended" else max(LEFT_GRACE_S, _may_take_s(spec))
        if where == "running" or now - since < grace:
            keep[key] = (spec, since)
    return keep


def _may_take_s(spec: JobSpec) -> float:
    """How long job `spec` may train: a SEER job's deadline, else its time limit (0: none)."""
    if spec.seer is not None:
        return 60.0 * float(spec.seer.get("deadline_min") or 0.0)
    return spec.time_budget_s or 0.0


def _told_before(progress: Progress, done: Done) -> bool:
    """`done` is its run's report of a job already told early (`finished_in_chains`)."""
    return not done.early and (done.spec.tenant, done.spec.job_id) in progress.told


def finished_in_chains(
    state: ServiceState, in_flight: list[JobSpec], told: set[tuple[str, str]]
) -> list[Done]:
    """The jobs of chained runs still in flight whose MLflow runs are FINISHED in `state`, each
    once (its ``(tenant, job_id)`` joins `told`), as early `Done`s timed by their MLflow run.

    A chained run reports its jobs together when it ends, up to ``chain_s`` (10 s) after the
    first finished: without this the scheduler's estimates, the tenants' boards and the job
    lines lagged by as much, and a service stopped inside a chain (every short `bench-live`
    run) logged its estimates from before the chain."""
    by_key = {(r.tenant, r.job_id): r for r in state.records}
    out = []
    for run in in_flight:
        if not run.then:
            continue
        for job in run.chain():
            key = (job.tenant, job.job_id)
            rec = by_key.get(key)
            if key in told or rec is None or rec.status != "FINISHED":
                continue
            told.add(key)
            seconds = (rec.end_time or rec.start_time) - rec.start_time
            out.append(Done(job, True, seconds, early=True))
    return out


def untold_jobs(
    in_flight: list[JobSpec], told: set[tuple[str, str]], *, chained: bool = False
) -> int:
    """The jobs of the runs `in_flight` not in `told` (those of chained runs only, with
    `chained`): the jobs still going, for `Stopping` and the summary's ``in_flight``."""
    runs = [run for run in in_flight if run.then or not chained]
    return sum((j.tenant, j.job_id) not in told for run in runs for j in run.chain())


def wants_tick(svc: Service, progress: Progress) -> bool:
    """Step 2: more ticks are wanted (``ticks``, ``budget_s``), a slot (or a prefetch place) is
    free, no stop was requested, and no job left by an earlier scheduler is held back or trains
    alone (`send_held`)."""
    free = len(svc.dispatcher.in_flight) < svc.planner.capacity
    wanted = progress.wants_more_ticks(svc.options.ticks, svc.options.budget_s)
    return wanted and free and not svc.stop.requested and not progress.holding


def refresh_if_stale(svc: Service, progress: Progress) -> None:
    """Step 3: look again for new tenants or examples (one MLflow search) when the state is
    ``refresh_s`` seconds old or older."""
    if time.monotonic() - progress.refreshed >= svc.options.refresh_s:
        _refresh(svc, progress)


def decide_tick(svc: Service, progress: Progress) -> list[JobSpec]:
    """Step 4: the `decide` task's jobs for tick ``t + 1`` (none: no tick, as when a stop was
    requested meanwhile), given what is in flight, short ones chained (``chain_s``); with
    ``sleep_s`` each is a sleep-based stand-in job (dispatch benchmarks)."""
    opts = svc.options
    release_left(svc, progress)
    jobs = decide(
        svc.planner,
        progress.state,
        in_flight=svc.dispatcher.in_flight,
        elsewhere=[spec for spec, _ in progress.left.values()],
        tick=progress.tick + 1,
        max_epochs=opts.max_epochs,
        job_budget_s=opts.job_budget_s,
        seer_budget_x=opts.seer_budget_x,
        seer_tuner=opts.seer_tuner,
        chain_s=opts.chain_s or None,
        sleep_s=opts.sleep_s,
    )
    if svc.stop.requested:
        return []
    return jobs


def dispatch_tick(svc: Service, progress: Progress, jobs: list[JobSpec]) -> list[JobSpec]:
    """Step 5: tick ``t + 1`` happens: send each of its `jobs` (non-empty), each told to the
    listeners (`JobDispatched`); after a stop request, no more of them. The tick is counted
    with its first job sent, and the planner takes back the slot turns of the runs not sent
    (`Planner.unsent`): an outage part-way raised out of here after the tick was counted, so
    ``--ticks 1`` ended with nothing sent, and the next run on the slot waited
    `TURN_PATIENCE_S` for a run that never came. Returns the jobs sent."""
    if not jobs:
        raise ValueError("dispatch_tick needs the tick's jobs; got none (no tick without jobs)")
    sent: list[JobSpec] = []
    try:
        for spec in jobs:
            if svc.stop.requested:
                break
            svc.dispatcher.submit(spec)
            if not sent:
                progress.tick += 1
                progress.ticks_done += 1
            sent.append(spec)
            for job in spec.chain():
                _emit(JobDispatched(progress.tick, job.tenant, job.candidate, job.job_id))
    finally:
        svc.planner.unsent(jobs[len(sent) :])
    return sent


def log_tick(svc: Service, progress: Progress, jobs: list[JobSpec]) -> None:
    """Step 6: the tick's metrics (each tenant's loss estimate, the regret estimate, best
    accuracies, ``gpu_busy_fraction``) to the scheduler's run at step ``t`` (the estimates are
    logged there again as the tick's jobs report: `_log_estimates`), waiting out an
    outage; ``loss.png`` drawn again if it is `PLOT_EVERY_S` old (not after a stop request:
    stopping comes first); one log line naming the tick's jobs."""
    metrics = tick_metrics(progress.state)
    metrics["gpu_busy_fraction"] = progress.busy_fraction(svc.slots, progress.wall_s())
    log = functools.partial(mlflow.log_metrics, metrics, step=progress.tick)
    ride_out(log, what="scheduler", settings=svc.settings, patience_s=svc.patience_s)
    add_tick(progress.losses, progress.tick, metrics)
    if time.monotonic() - progress.plotted >= PLOT_EVERY_S and not svc.stop.requested:
        _log_loss_picture(svc, progress)
    print(f"tick {progress.tick}: " + ", ".join(f"{s.tenant}:{s.candidate}" for s in jobs))


def _log_estimates(svc: Service, progress: Progress, metrics: dict[str, float]) -> None:
    """`tick_metrics` from results recorded since the last tick, logged again at its step
    (waiting out an outage): a tick's estimates are made before its jobs report, so without
    this the history would end at the service's last decision rather than at what it believes
    now; a signal ends an embedded `run` without a summary (`bench-live`'s calibration reads
    the history's last values). The tick history keeps the later value of a step."""
    log = functools.partial(mlflow.log_metrics, metrics, step=progress.tick)
    ride_out(log, what="scheduler", settings=svc.settings, patience_s=svc.patience_s)
    add_tick(progress.losses, progress.tick, metrics)


def _log_loss_picture(svc: Service, progress: Progress) -> None:
    """``loss.png`` of `Progress.losses` to the scheduler's run (replacing the last one),
    waiting out an outage."""
    png = loss_picture(progress.losses)
    with tempfile.TemporaryDirectory(prefix="tenantml-plot-") as tmp:
        path = Path(tmp) / "loss.png"
        path.write_bytes(png)
        log = functools.partial(mlflow.log_artifact, str(path))
        ride_out(log, what="scheduler", settings=svc.settings, patience_s=svc.patience_s)
    progress.plotted = time.monotonic()


def should_stop(svc: Service, progress: Progress, jobs: list[JobSpec]) -> bool:
    """Step 7, after a pass that sent `jobs`: nothing is in flight, and either the requested
    ticks are done (``ticks=0`` only drains) or the ``budget_s`` is spent, or more were wanted
    but the policy sent nothing (nothing left to try) and the loop is bounded (``ticks`` given,
    or ``stop_when_idle``; a ``budget_s`` alone waits for new tenants and examples until it is
    spent). In each case not while a job it sent is left to another process that still trains
    it (so a ``budget_s`` run, like its jobs in flight, may end past its budget), and a left job
    whose process died unfinished is sent again first (`release_left`): before, a drain
    (``ticks=0``) ended with such a job RUNNING. Nor while start-up held jobs back (`send_held`)."""
    if svc.dispatcher.in_flight or progress.holding:
        return False
    ticks, budget_s = svc.options.ticks, svc.options.budget_s
    wants_more = progress.wants_more_ticks(ticks, budget_s)
    bounded = svc.options.stop_when_idle or ticks is not None
    done = (ticks is not None or budget_s is not None) and not wants_more
    idle = not jobs and bounded and wants_more
    if not (done or idle) or not progress.left:
        return done or idle
    refresh_if_stale(svc, progress)
    release_left(svc, progress)
    records = [_record_of(progress.state, spec) for spec, _ in progress.left.values()]
    # a job of a `tenantml seer run` by hand is that command's, not waited for
    waits = [rec for rec in records if rec is not None and rec.policy != BY_HAND]
    for rec in waits:
        if (rec.tenant, rec.job_id) not in progress.awaited:
            progress.awaited.add((rec.tenant, rec.job_id))
            pid = (rec.process or "?").split(":")[0]
            print(f"waiting for {rec.tenant}/{rec.job_id}: process {pid} on {rec.node} trains it")
    return not svc.dispatcher.in_flight and not waits


def tell_waiting(svc: Service, progress: Progress, jobs: list[JobSpec]) -> None:
    """Step 8, in a loop that goes on (`should_stop` said no): a pass that sent nothing, with
    nothing in flight nor left to another process, says why the scheduler waits
    (`waiting_reason`): once, and again only when the reason changes; a job sent forgets it.
    Before, a home whose tenants all had too few examples ran silently forever."""
    if jobs:
        progress.waiting = None
        return
    if svc.dispatcher.in_flight or progress.left or progress.holding:
        return
    reason = waiting_reason(progress.state.tenants)
    if reason != progress.waiting:
        progress.waiting = reason
        print(f"waiting: {reason}")  # the flow's log
        _emit(Waiting(reason))  # `tenantml run`'s terminal


def waiting_reason(tenants: Sequence[TenantInfo]) -> str:
    """Why the policy sends nothing to `tenants`, in one line naming what would change it: no
    tenants, tenants with fewer than `MIN_EXAMPLES` examples (the first five named, with their
    counts), or nothing left to train on the others' current examples."""
    if not tenants:
        return "no tenants yet: declare one with `tenantml submit`"
    few = [t for t in tenants if t.n_examples < MIN_EXAMPLES]
    parts = []
    if few:
        named = ", ".join(f"{t.name} ({t.n_examples})" for t in few[:5])
        more = f" and {len(few) - 5} more" if len(few) > 5 else ""
        verb = "has" if len(few) == 1 else "have"
        parts.append(
            f"{named}{more} {verb} fewer than {MIN_EXAMPLES} examples, the fewest a tenant is "
            f"trained on: feed more with `tenantml feed`"
        )
    if len(few) < len(tenants):
        others = "every other tenant has" if few else "every tenant has"
        parts.append(
            f"{others} nothing left to train on its current examples: feed new ones, or "
            f"declare more tenants"
        )
    return "; ".join(parts)


def release_left(svc: Service, progress: Progress) -> None:
    """Keep in `Progress.left` the jobs `still_left` keeps; of those it drops, send again (same
    job id: it resumes from its checkpoint, as `resume_orphans` does at start-up) each still
    RUNNING whose process ended on this machine without recording it: nothing else would,
    since the policy picks new jobs, and a drain none. (Seen in the node-loss drill: a job's
    process died between logging its model and ending its run, just after its Prefect worker
    was SIGKILLed.) A `seer run` job by hand is left to that command."""
    kept = still_left(progress.state, progress.left, time.monotonic())
    sent = {(j.tenant, j.job_id) for run in svc.dispatcher.in_flight for j in run.chain()}
    for key, (spec, _) in progress.left.items():
        rec = _record_of(progress.state, spec)
        if key in kept or key in sent or rec is None or rec.status != "RUNNING":
            continue
        if rec.policy != BY_HAND and process_state(rec.process, rec.node) == "ended":
            again = _orphan_spec(svc, rec, _free_slot(svc), progress.tick)
            svc.dispatcher.submit(again)
            print(f"sending {spec.tenant}/{spec.job_id} again: the process it was left to ended")
            _emit(
                JobDispatched(again.tick, again.tenant, again.candidate, again.job_id, resumed=True)
            )
    progress.left = kept


def wait_out_outage(svc: Service, progress: Progress, exc: Exception) -> None:
    """After a pass raised `exc`: re-raise it unless it is a server outage (`is_outage`);
    otherwise say which server does not answer and sleep the backoff's next delay, raising
    `ServerUnreachableError` once ``outage_patience_s`` is spent. The caller redoes the pass."""
    if not is_outage(exc):
        raise exc
    wait_or_give_up(progress.outage, exc, "scheduler", svc.settings, print)


def pause(svc: Service, progress: Progress) -> None:
    """After a pass that went through: the outage backoff starts afresh; wait ``poll_s``, or
    less if a stop is requested meanwhile."""
    progress.outage.reset()
    svc.stop.wait(svc.options.poll_s)


def log_summary(svc: Service, progress: Progress, run: mlflow.ActiveRun) -> dict[str, Any]:
    """The totals (``gpu_busy_fraction_total``, ``jobs_done``), the estimates again
    (`_log_estimates`), and the last ``loss.png`` (unless
    a signal stopped the scheduler: it ends at once) to the scheduler's run, and the flow's
    summary: ``ticks`` and ``jobs`` this scheduler ran, ``last_tick`` (``t``), ``wall_s``,
    ``busy_fraction``, the MLflow ``run_id``, and ``interrupted`` (the signal that stopped it,
    or None) with ``in_flight`` (the jobs it left going or held back: they resume on the next
    scheduler)."""
    wall = progress.wall_s()
    busy = progress.busy_fraction(svc.slots, wall)  # the trainers' own time
    totals = {"gpu_busy_fraction_total": busy, "jobs_done": progress.jobs_done}
    log = functools.partial(mlflow.log_metrics, totals)
    ride_out(log, what="scheduler", settings=svc.settings, patience_s=svc.patience_s)
    if progress.ticks_done:
        _log_estimates(svc, progress, tick_metrics(progress.state))
    if progress.ticks_done and not svc.stop.requested:
        _log_loss_picture(svc, progress)
    return {
        "ticks": progress.ticks_done,
        "jobs": progress.jobs_done,
        "last_tick": progress.tick,
        "wall_s": wall,
        "busy_fraction": busy,
        "run_id": run.info.run_id,
        "interrupted": svc.stop.signal,
        "in_flight": untold_jobs(svc.dispatcher.in_flight, progress.told)
        + len(progress.suspects)
        + len(progress.held),
    }


@contextmanager
def release_dispatcher(svc: Service) -> Iterator[None]:
    """At the end of the block, the dispatcher is closed (threads: it waits for their jobs),
    unless a signal stopped the scheduler: then the jobs in flight are left going (in their
    workers, or in this process's threads until it exits) and the next scheduler resumes or
    adopts them (`resume_orphans`)."""
    try:
        yield
    finally:
        if not svc.stop.requested:
            svc.dispatcher.close()
