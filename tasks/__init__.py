"""Thin Prefect tasks over `tasks._service` (ARCHITECTURE principle 10): typed, small, retries on
the decorator, no logic of their own; and the steps of the `scheduler` flow's loop that compose
them (`tasks._loop`), with the execution back-end interface they drive (`tasks._dispatch`)."""

from __future__ import annotations

from mlflow.tracking import MlflowClient
from prefect import task
from prefect.cache_policies import NO_CACHE

from mlflow_plugin.registry import BestModel
from mlflow_plugin.tracking import JobRecord
from store import ExampleStore
from tasks._dispatch import DeploymentDispatcher, Dispatcher, Done, LocalDispatcher
from tasks._service import (
    JobSpec,
    Planner,
    ServiceState,
    TenantInfo,
    build_problem,
    load_state,
    record_finished,
    register_tenant,
    run_job,
    tick_metrics,
)

__all__ = [
    "DeploymentDispatcher",
    "Dispatcher",
    "Done",
    "JobSpec",
    "LocalDispatcher",
    "Planner",
    "Progress",
    "SchedulerOptions",
    "Service",
    "ServiceState",
    "TenantInfo",
    "build_problem",
    "connect",
    "decide",
    "decide_tick",
    "dispatch_tick",
    "load_state",
    "log_summary",
    "log_tick",
    "pause",
    "record",
    "record_finished_jobs",
    "redo_promotions",
    "refresh",
    "refresh_if_stale",
    "register_tenant",
    "resume_orphans",
    "run_job",
    "scheduler_run",
    "should_stop",
    "tick_metrics",
    "train_task",
    "wait_out_outage",
    "wants_tick",
]


@task(name="refresh", retries=2, retry_delay_seconds=1, cache_policy=NO_CACHE)
def refresh(client: MlflowClient, store: ExampleStore) -> ServiceState:
    """Tenants from the store, jobs from MLflow: the scheduler's whole state."""
    return load_state(client, store)


@task(name="decide", cache_policy=NO_CACHE)
def decide(
    planner: Planner,
    state: ServiceState,
    *,
    in_flight: list[JobSpec],
    tick: int,
    max_epochs: int,
    job_budget_s: float | None,
    seer_budget_x: float | None = None,
) -> list[JobSpec]:
    """The policy (policy/) picks (tenant, model) for every free slot."""
    return planner.decide(
        state,
        in_flight=in_flight,
        tick=tick,
        max_epochs=max_epochs,
        job_budget_s=job_budget_s,
        seer_budget_x=seer_budget_x,
    )


@task(name="train", cache_policy=NO_CACHE)
def train_task(
    spec: JobSpec,
    client: MlflowClient,
    store: ExampleStore,
    experiment_id: str,
    flow_run_id: str | None,
) -> JobRecord:
    return run_job(spec, client, store, experiment_id, flow_run_id=flow_run_id)


@task(name="record", retries=2, retry_delay_seconds=1, cache_policy=NO_CACHE)
def record(client: MlflowClient, job: JobRecord) -> BestModel | None:
    """Promote the job's model to `best` if it beats the tenant's current best."""
    return record_finished(client, job)


# The scheduler's loop composes the tasks above (`record`, `refresh`, `decide`), so it is imported
# after them: `tasks._loop` imports them from this package.
from tasks._loop import (  # noqa: E402
    Progress,
    SchedulerOptions,
    Service,
    connect,
    decide_tick,
    dispatch_tick,
    log_summary,
    log_tick,
    pause,
    record_finished_jobs,
    redo_promotions,
    refresh_if_stale,
    resume_orphans,
    scheduler_run,
    should_stop,
    wait_out_outage,
    wants_tick,
)
