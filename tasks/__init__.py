"""Thin Prefect tasks over `tasks._service` (ARCHITECTURE principle 10): typed, small, retries on
the decorator, no logic of their own; and the steps of the `scheduler` flow's loop that compose
them (`tasks._loop`), with the execution back-end interface they drive (`tasks._dispatch`)."""

from __future__ import annotations

from tasks._dispatch import DeploymentDispatcher, Dispatcher, Done, LocalDispatcher
from tasks._loop import (
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
from tasks._prefect import decide, record, refresh, train_task
from tasks._service import (
    JobSpec,
    Planner,
    ServiceState,
    TenantInfo,
    build_problem,
    load_state,
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
