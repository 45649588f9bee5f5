"""MLflow as the service's memory: one experiment per tenant, one run per training job.

Experiment ``tenantml/<tenant>`` (tags: ``tenantml.kind=tenant``, the schema, the candidates,
``mlflow.experimentKind=custom_model_development`` so MLflow 3's UI opens it as model training,
not GenAI, and the saved runs view `RUNS_VIEW`: `runs_page` links to the runs table with
``accuracy`` and ``cost_s`` as its first columns, best first). A job's run is named after its
job id and tagged ``tenantml.kind=job``, ``tenantml.job_id``; it is created when the job starts
(status RUNNING) and ended FINISHED with its metrics and model, or FAILED
(`mlflow_plugin.jobrun.JobRun` writes it). The scheduler rebuilds its whole state from these runs
at start: FINISHED runs are the observations (one per job id, so none is counted twice), RUNNING
ones the jobs in flight. Scheduler-level per-tick metrics go to the experiment
``tenantml/scheduler``, and so do the tenants' weights (tag ``tenantml.weight.<tenant>``): a
tenant holds MANAGE on its own experiment, none on the scheduler's, so only the operator sets
them.

The names of the tags written on runs and read back by `JobRecord.from_run` are the constants
below.
"""

from __future__ import annotations

import functools
import json
import os
import socket
from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from typing import Any, Literal

from mlflow.entities import Experiment, Param, Run, RunStatus, RunTag
from mlflow.tracking import MlflowClient

__all__ = [
    "SCHEDULER_EXPERIMENT",
    "JobBusyError",
    "JobRecord",
    "all_experiments",
    "end_job_run",
    "ensure_experiment",
    "ensure_scheduler_experiment",
    "ensure_tenant_experiment",
    "experiment_name",
    "job_record",
    "job_records",
    "process_state",
    "process_tag",
    "runs_page",
    "set_tenant_models",
    "set_tenant_weight",
    "start_job_run",
    "tag_count",
    "tenant_experiments",
    "tenant_models",
    "tenant_weights",
    "trained_elsewhere",
    "valid_weight",
]

SCHEDULER_EXPERIMENT = "tenantml/scheduler"
# Tags of tenant experiments and job runs.
KIND, JOB_ID, TENANT = "tenantml.kind", "tenantml.job_id", "tenantml.tenant"
TICK, POLICY, SLOT = "tenantml.tick", "tenantml.policy", "tenantml.slot"
FLOW_RUN_ID, MODEL_URI = "tenantml.flow_run_id", "tenantml.model_uri"
# why a job's model was not logged (it did not beat its tenant's best: it can never be served)
MODEL_SKIPPED = "tenantml.model_skipped"
NODE = "tenantml.node"  # the host name of the machine that runs (ran) the job's latest attempt
GPU = "tenantml.gpu"  # its CUDA_VISIBLE_DEVICES there, where set: with NODE, the GPU it used
# the process that runs the job's latest attempt: ``<pid>:<start time>@<place>`` (`process_tag`)
PROCESS = "tenantml.process"
# on a job that ended failed and that its scheduler will not send again (the back-end's attempts
# are spent): how its last run ended. A FAILED job without it failed while no scheduler watched
# it (between a scheduler's death and the next one's start), and the next one sends it again.
GAVE_UP = "tenantml.gave_up"
# on a FAILED job a starting scheduler sent again: when (epoch seconds). Until its new attempt
# starts the run stays FAILED with its old end; should that scheduler die first, the next one
# counts it failed from this time, and sends it again (else it was lost: failed before the
# last scheduler started, so that one's to see)
RESENT_AT = "tenantml.resent_at"
# on a job run: how many schedulers died (no signal, no end of their run: a SIGKILL, the kernel's
# OOM killer, a crash in native code) while the job trained alone in their own process; at
# `tasks._crashes.MAX_CRASHES` the next one gives it up rather than die on it again
CRASHES = "tenantml.crashes"
# ... and while it trained there beside other jobs: at `tasks._crashes.SHARED_BEFORE_ALONE` the
# next schedulers resume it alone, so that a death then has one suspect
SHARED_CRASHES = "tenantml.shared_crashes"
CRASHED_IN = "tenantml.crashed_in"  # the dead scheduler's process counted last: once each
HOME = "tenantml.home"  # on a scheduler's run: its home (`TENANTML_HOME`, resolved)
SEER_TRIAL = "tenantml.seer_trial"  # ``<job id>/<trial>`` of a SEER trial's nested run
JOB_KIND, TRIAL_KIND = "job", "seer-trial"  # values of KIND on runs
STARTING_KIND = "job-starting"  # KIND of a job's new run until its params are logged
# MLflow 3's UI picks the training view (not the GenAI one) by this experiment tag.
EXPERIMENT_KIND, MODEL_TRAINING = "mlflow.experimentKind", "custom_model_development"
# A runs-table view saved in the experiment, as the UI's "share view" saves one: the tag
# ``mlflow.sharedViewState.<key>`` holds the table's state, `runs_page` opens it by its key.
# Columns are named ``metrics.`<name>```/``params.`<name>``` as the UI names them.
RUNS_VIEW_KEY = "tenantml-jobs"
RUNS_VIEW_TAG = f"mlflow.sharedViewState.{RUNS_VIEW_KEY}"
RUNS_VIEW = json.dumps(
    {
        "orderByKey": "metrics.`accuracy`",
        "orderByAsc": False,
        "selectedColumns": [
            "metrics.`accuracy`",
            "metrics.`cost_s`",
            "metrics.`epochs`",
            "params.`model`",
            "metrics.`val_accuracy`",
        ],
        "runsHiddenMode": "SHOW_ALL",
    }
)


_UI_TAGS = {EXPERIMENT_KIND: MODEL_TRAINING, RUNS_VIEW_TAG: RUNS_VIEW}


def experiment_name(tenant: str) -> str:
    return f"tenantml/{tenant}"


def runs_page(ui_url: str, experiment_id: str) -> str:
    """The address of a tenant's runs table in the MLflow UI at `ui_url`: MLflow 3.17's
    model-training view (``workflowType``; its sidebar switch overrides the experiment's kind) and
    the saved view `RUNS_VIEW` (accuracy, cost, epochs, model; best first)."""
    query = f"viewStateShareKey={RUNS_VIEW_KEY}&workflowType=machine_learning"
    return f"{ui_url.rstrip('/')}/#/experiments/{experiment_id}/runs?{query}"


def ensure_tenant_experiment(
    client: MlflowClient,
    tenant: str,
    schema: str,
    candidates: Iterable[str],
    artifact_location: str | None = None,
) -> str:
    """The tenant's experiment id, created with its tags if missing (an experiment made before
    it was marked as model training is marked now). `artifact_location`: where its artifacts go
    when the tracking store does not decide (SQLite would use ./mlruns)."""
    exp = client.get_experiment_by_name(experiment_name(tenant))
    if exp is not None:
        for key, value in _UI_TAGS.items():
            if exp.tags.get(key) != value:
                client.set_experiment_tag(exp.experiment_id, key, value)
        return str(exp.experiment_id)
    tags = {
        KIND: "tenant",
        TENANT: tenant,
        "store.schema": schema,
        "tenantml.candidates": ",".join(candidates),
        **_UI_TAGS,
    }
    location = None if artifact_location is None else f"{artifact_location}/{tenant}"
    return str(client.create_experiment(experiment_name(tenant), location, tags=tags))


def ensure_experiment(client: MlflowClient, name: str) -> str:
    """The id of the experiment `name`, created (at the store's default location) if missing:
    where the benchmarks log their results."""
    exp = client.get_experiment_by_name(name)
    return str(exp.experiment_id if exp is not None else client.create_experiment(name))


def ensure_scheduler_experiment(client: MlflowClient, artifact_location: str | None = None) -> str:
    """The id of the experiment ``tenantml/scheduler`` (one run per scheduler: per-tick metrics,
    ``loss.png``), created if missing; marked as model training like the tenants'."""
    exp = client.get_experiment_by_name(SCHEDULER_EXPERIMENT)
    if exp is None:
        location = artifact_location and f"{artifact_location}/scheduler"
        tags = {EXPERIMENT_KIND: MODEL_TRAINING}
        return str(client.create_experiment(SCHEDULER_EXPERIMENT, location, tags=tags))
    if exp.tags.get(EXPERIMENT_KIND) != MODEL_TRAINING:
        client.set_experiment_tag(exp.experiment_id, EXPERIMENT_KIND, MODEL_TRAINING)
    return str(exp.experiment_id)


WEIGHT_PREFIX = "tenantml.weight."  # + tenant name, on the scheduler experiment
#: a tenant's weight w_i in the weighted sum of regrets (`policy.Problem.weights`) when unset
DEFAULT_WEIGHT = 1.0


#: the weights a tenant may have: a factor of a million either way of the default is a tenant
#: that alone counts, or never does; beyond, a weighted total of regrets can overflow to inf
WEIGHT_RANGE = (1e-6, 1e6)


def valid_weight(weight: object) -> float:
    """``weight`` as a float, or ValueError naming what is valid: a number in `WEIGHT_RANGE`
    (not a bool: True was taken as 1)."""
    try:
        if isinstance(weight, bool):
            raise TypeError
        w = float(weight)  # type: ignore[arg-type]
    except (TypeError, ValueError):
        w = float("nan")
    lo, hi = WEIGHT_RANGE
    if not (lo <= w <= hi):
        raise ValueError(
            f"weight {weight!r} is not valid: give a number from {lo:g} to {hi:g}, e.g. 2 for "
            f"a tenant whose regret counts twice (default {DEFAULT_WEIGHT:g})"
        )
    return w


def tenant_weights(
    client: MlflowClient, experiments: Iterable[Experiment] | None = None
) -> dict[str, float]:
    """Tenant name -> weight, for the tenants whose weight the operator set (others: 1).
    `experiments`: the result of a `search_experiments` the caller made anyway (saves a
    request); None: ask MLflow."""
    if experiments is None:
        exp = client.get_experiment_by_name(SCHEDULER_EXPERIMENT)
    else:
        exp = next((e for e in experiments if e.name == SCHEDULER_EXPERIMENT), None)
    if exp is None:
        return {}
    out = {}
    lo, hi = WEIGHT_RANGE
    for key, value in exp.tags.items():
        if key.startswith(WEIGHT_PREFIX):
            try:
                w = float(value)
            except ValueError:
                continue  # a tag edited by hand to nonsense counts as unset
            if 0 < w < float("inf"):  # one set before `WEIGHT_RANGE` existed: its nearest
                out[key.removeprefix(WEIGHT_PREFIX)] = min(max(w, lo), hi)
    return out


def set_tenant_weight(
    client: MlflowClient, tenant: str, weight: float, artifact_location: str | None = None
) -> float:
    """Set ``tenant``'s weight (validated first: nothing is written for a bad one)."""
    w = valid_weight(weight)
    exp_id = ensure_scheduler_experiment(client, artifact_location)
    client.set_experiment_tag(exp_id, WEIGHT_PREFIX + tenant, repr(w))
    return w


MODELS = "tenantml.models"  # on a tenant experiment: the candidates it may train, when restricted


def set_tenant_models(client: MlflowClient, experiment_id: str, models: Iterable[str]) -> None:
    """Restrict the tenant of ``experiment_id`` to ``models`` (validated by the caller); none:
    every candidate of its schema again."""
    client.set_experiment_tag(experiment_id, MODELS, ",".join(models))


def tenant_models(experiments: Iterable[Experiment]) -> dict[str, tuple[str, ...]]:
    """Tenant name -> the candidates it is restricted to, for the restricted tenants (from the
    experiments of a `search_experiments`)."""
    return {
        e.tags[TENANT]: tuple(e.tags[MODELS].split(","))
        for e in experiments
        if e.tags.get(KIND) == "tenant" and e.tags.get(MODELS)
    }


#: experiments per search request (MLflow's most: 1,000; a search returns one page)
EXPERIMENTS_PAGE = 1000


def all_experiments(client: MlflowClient, filter_string: str | None = None) -> list[Experiment]:
    """Every active experiment (those matching `filter_string`), read page by page: one search
    returns `EXPERIMENTS_PAGE` at most, newest first, so beyond that the oldest tenants (and the
    scheduler's experiment with the operators' weights) went missing."""
    out: list[Experiment] = []
    token: str | None = None
    while True:
        page = client.search_experiments(
            filter_string=filter_string, max_results=EXPERIMENTS_PAGE, page_token=token
        )
        out += page
        token = page.token
        if not token:
            return out


def tenant_experiments(
    client: MlflowClient, experiments: Iterable[Experiment] | None = None
) -> dict[str, str]:
    """tenant name -> experiment id, for every submitted tenant. `experiments`: as for
    `tenant_weights`."""
    if experiments is None:
        experiments = all_experiments(client, f"tags.`{KIND}` = 'tenant'")
    return {
        e.tags[TENANT]: str(e.experiment_id) for e in experiments if e.tags.get(KIND) == "tenant"
    }


@dataclass(frozen=True)
class JobRecord:
    """One training job as MLflow holds it."""

    run_id: str
    tenant: str
    candidate: str
    job_id: str
    status: str
    accuracy: float | None
    cost_s: float | None
    tick: int | None
    snapshot: int | None
    start_time: float
    end_time: float | None
    flow_run_id: str | None
    node: str | None = None  # NODE: where its latest attempt runs (ran)
    policy: str | None = None  # POLICY: the scheduler's, or `BY_HAND` for a `seer run` job
    process: str | None = None  # PROCESS: the process of its latest attempt
    gave_up: bool = False  # GAVE_UP: a scheduler saw it fail with its attempts spent
    resent_at: float | None = None  # RESENT_AT: when a starting scheduler last sent it again
    crashes: int = 0  # CRASHES: schedulers that died as it trained alone in their process
    shared_crashes: int = 0  # SHARED_CRASHES: ... as it trained there beside other jobs
    slot: int | None = None  # SLOT: the slot its latest attempt was sent to

    @property
    def failed_at(self) -> float:
        """When the job last needed a scheduler: its end, or, if later, when a starting
        scheduler last sent it again (`RESENT_AT`; an attempt that ran since has a later end,
        or is RUNNING or FINISHED)."""
        return max(self.end_time or 0.0, self.resent_at or 0.0)

    @staticmethod
    def from_run(run: Run) -> JobRecord:
        tags, metrics, params = run.data.tags, run.data.metrics, run.data.params
        tick = tags.get(TICK)
        snap = params.get("snapshot")
        return JobRecord(
            run.info.run_id,
            tags.get(TENANT, ""),
            params.get("model", ""),
            tags.get(JOB_ID, ""),
            run.info.status,
            metrics.get("accuracy"),
            metrics.get("cost_s"),
            int(tick) if tick else None,
            int(snap) if snap not in (None, "") else None,
            run.info.start_time / 1000.0,
            None if run.info.end_time is None else run.info.end_time / 1000.0,
            tags.get(FLOW_RUN_ID),
            tags.get(NODE),
            tags.get(POLICY),
            tags.get(PROCESS),
            GAVE_UP in tags,
            _epoch(tags.get(RESENT_AT)),
            tag_count(tags.get(CRASHES)),
            tag_count(tags.get(SHARED_CRASHES)),
            int(slot) if (slot := tags.get(SLOT, "")).isdigit() else None,
        )


def tag_count(text: str | None) -> int:
    """A count tag's value (`CRASHES`, ...); 0 where absent or not a whole number."""
    try:
        return 0 if text is None else int(text)
    except ValueError:
        return 0


def _epoch(text: str | None) -> float | None:
    """A time tag's value (epoch seconds); None where absent or not a number."""
    try:
        return None if text is None else float(text)
    except ValueError:
        return None


def _start_ticks(pid: int) -> str | None:
    """When process ``pid`` started (clock ticks after boot, ``/proc/<pid>/stat`` field 22);
    empty where there is no such process; None where ``/proc`` cannot tell (none here, or it
    hides other users' processes: ``hidepid``)."""
    try:
        with open(f"/proc/{pid}/stat") as f:
            stat = f.read()
    except FileNotFoundError:
        return "" if os.path.isdir("/proc/self") else None
    except OSError:
        return None
    return stat.rsplit(")", 1)[1].split()[19]  # fields 3.. follow the command's ")"


@functools.cache
def _place() -> str:
    """Where process ids mean the same processes: this host, its boot and this process's pid
    namespace (containers that share a host name have their own, and so may their pid 1)."""
    try:
        with open("/proc/sys/kernel/random/boot_id") as f:
            boot = f.read().strip()
        pidns = str(os.stat("/proc/self/ns/pid").st_ino)
    except OSError:
        boot, pidns = "", ""
    return f"{socket.gethostname()}/{boot}/{pidns}"


def process_tag(pid: int | None = None) -> str:
    """``<pid>:<start time>@<place>`` of process ``pid`` (default: this one): a process id may
    be reused once its process has ended, and means another process in another container;
    with its start time and place (`_place`) it names one process."""
    pid = os.getpid() if pid is None else pid
    return f"{pid}:{_start_ticks(pid) or ''}@{_place()}"


def of_this_host(tag: str | None) -> bool:
    """Whether the process `process_tag` named ran on this host (by its name), whatever its
    boot or pid namespace: before a reboot, or in a container this host's runtime restarted
    (which keeps its host name)."""
    place = (tag or "").partition("@")[2]
    return bool(place) and place.split("/")[0] == socket.gethostname()


ProcessState = Literal["running", "ended", "unknown"]


def process_state(tag: str | None, node: str | None = None) -> ProcessState:
    """Whether the process `process_tag` named is ``running`` or has ``ended``; ``unknown``
    when there is no tag or it names a process of another place (host, boot, container: a
    host name and another boot may be this machine before a reboot, or another machine of the
    same name, so it cannot tell). A tag written before places were recorded
    (``<pid>:<start time>``) counts as this place's when ``node``, the run's host, is this
    host."""
    ident, at, place = (tag or "").partition("@")
    pid_text, _, ticks = ident.partition(":")
    here = place == _place() if at else node == socket.gethostname()
    if not pid_text.isdigit() or not here:
        return "unknown"
    pid = int(pid_text)
    now = _start_ticks(pid)
    if ticks and now is not None:
        return "running" if now == ticks else "ended"
    try:  # /proc cannot tell: the id alone
        os.kill(pid, 0)
    except ProcessLookupError:
        return "ended"
    except PermissionError:  # someone else's process
        return "running"
    return "running"


class JobBusyError(ValueError):
    """A job asked for is being trained by another live process (`trained_elsewhere`); a
    ValueError, so a command reports it as one line, as it does a bad request."""

    @classmethod
    def training(cls, job_id: str, pid: object, who: str) -> JobBusyError:
        """The error for job `job_id` that process `pid` (`who`: what it is) trains here."""
        return cls(
            f"job {job_id} is being trained by process {pid} on this machine ({who}); "
            "wait for it to end, or stop that process and run this again to go on"
        )


def trained_elsewhere(job: JobRecord) -> int | None:
    """The id of another live process in this place (`_place`) that runs ``job``'s latest
    attempt (a `seer run`, a scheduler or its worker), else None: sent again, the job would
    train twice into the same checkpoints."""
    if job.status != "RUNNING" or not job.process or job.process == process_tag():
        return None
    if process_state(job.process, job.node) != "running":
        return None
    return int(job.process.partition(":")[0])


def job_records(client: MlflowClient, experiment_ids: Iterable[str]) -> list[JobRecord]:
    """Every job run of these experiments, oldest first (paged through)."""
    ids = list(experiment_ids)
    if not ids:
        return []
    out: list[JobRecord] = []
    token = None
    while True:
        page = client.search_runs(
            ids,
            filter_string=f"tags.`{KIND}` = '{JOB_KIND}'",
            max_results=1000,
            order_by=["attributes.start_time ASC"],
            page_token=token,
        )
        out += [JobRecord.from_run(r) for r in page]
        token = page.token
        if not token:
            return out


def _job_run(client: MlflowClient, experiment_id: str, job_id: str) -> Run | None:
    """The job's own run: a SEER job's trial runs carry its job id too (`JobRun.start_trial`),
    and one of them was found here instead (a resumed SEER job went on in a trial's run)."""
    found = client.search_runs(
        [experiment_id],
        filter_string=f"tags.`{JOB_ID}` = '{job_id}' and tags.`{KIND}` = '{JOB_KIND}'",
        max_results=1,
    )
    return found[0] if found else None


def job_record(client: MlflowClient, experiment_id: str, job_id: str) -> JobRecord | None:
    """The run of job `job_id` in the experiment, if one was started."""
    run = _job_run(client, experiment_id, job_id)
    return None if run is None else JobRecord.from_run(run)


def start_job_run(
    client: MlflowClient,
    experiment_id: str,
    *,
    tenant: str,
    job_id: str,
    params: Mapping[str, Any],
    tags: Mapping[str, str],
) -> str:
    """The job's run id: the existing run for `job_id` (a retry or resume: RUNNING again, `tags`
    set to this attempt's values), or a new one with `tags` and `params`."""
    found = _job_run(client, experiment_id, job_id)
    if found is not None:
        run_id = str(found.info.run_id)
        if found.info.status != "RUNNING":
            client.update_run(run_id, status="RUNNING")
        if tags:
            client.log_batch(run_id, tags=[RunTag(k, v) for k, v in tags.items()])
        return run_id
    # The run becomes the job's (`KIND`) only once its params are logged, in a request of its
    # own after them: a process killed between creating the run and logging its params (the
    # bounded chaos run, 2026-11-29) left a RUNNING job run without its model, which the
    # scheduler resumed as model '' and which then failed for good. A run cut off before that
    # request is no job's (`STARTING_KIND`, left RUNNING): the job's flow run, crashed, is sent
    # again and makes a new one.
    all_tags = {KIND: STARTING_KIND, JOB_ID: job_id, TENANT: tenant, **tags}
    run = client.create_run(experiment_id, tags=all_tags, run_name=job_id)
    if params:
        client.log_batch(run.info.run_id, params=[Param(k, str(v)) for k, v in params.items()])
    client.set_tag(run.info.run_id, KIND, JOB_KIND)
    return str(run.info.run_id)


def end_job_run(client: MlflowClient, run_id: str, ok: bool) -> None:
    client.set_terminated(
        run_id, RunStatus.to_string(RunStatus.FINISHED if ok else RunStatus.FAILED)
    )
