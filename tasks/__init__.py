"""The service layer: its settings, its state rebuilt from MLflow, the planner and jobs
(`tasks._service`), the thin Prefect tasks (`tasks._prefect`: refresh, decide, train, record),
the steps of the `scheduler` flow's loop (`tasks._loop`) and the execution back-ends they drive
(`tasks._dispatch`, `tasks.capacity`).

Names are imported on first use (PEP 562), so that ``import tasks.settings`` (every command
needs it) loads neither Prefect nor MLflow: Prefect reads its settings once, when first
imported, and must see what `tasks.settings.Settings.apply` exports.
"""

from __future__ import annotations

import importlib
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from tasks._dispatch import DeploymentDispatcher, Dispatcher, Done, LocalDispatcher
    from tasks._loop import (
        STOP,
        JobDispatched,
        JobFinished,
        JobLeft,
        Progress,
        SchedulerEvent,
        SchedulerOptions,
        Service,
        Stopping,
        StopRequest,
        connect,
        decide_tick,
        dispatch_tick,
        listen,
        log_summary,
        log_tick,
        pause,
        record_finished_jobs,
        redo_promotions,
        refresh_if_stale,
        release_dispatcher,
        resume_orphans,
        scheduler_run,
        should_stop,
        stop_on_signals,
        wait_out_outage,
        wants_tick,
    )
    from tasks._plot import (
        LOSS_PREFIX,
        TOTAL,
        TickHistory,
        add_tick,
        load_tick_history,
        loss_picture,
    )
    from tasks._prefect import decide, record, refresh, train_task
    from tasks._seer import BY_HAND, SeerOptions, request_lock, seer_options_from_params
    from tasks._service import (
        MAX_CHAIN,
        JobSpec,
        Planner,
        ServiceState,
        SlotHold,
        TenantInfo,
        build_problem,
        drop_checkpoints,
        load_state,
        register_tenant,
        run_job,
        state_of,
        tick_metrics,
    )

__all__ = [
    "BY_HAND",
    "loss_picture",
    "load_tick_history",
    "add_tick",
    "TickHistory",
    "TOTAL",
    "LOSS_PREFIX",
    "STOP",
    "DeploymentDispatcher",
    "Dispatcher",
    "Done",
    "JobDispatched",
    "JobLeft",
    "JobFinished",
    "JobSpec",
    "LocalDispatcher",
    "MAX_CHAIN",
    "Planner",
    "Progress",
    "SchedulerEvent",
    "SchedulerOptions",
    "SeerOptions",
    "Service",
    "ServiceState",
    "SlotHold",
    "StopRequest",
    "Stopping",
    "TenantInfo",
    "build_problem",
    "connect",
    "decide",
    "decide_tick",
    "dispatch_tick",
    "drop_checkpoints",
    "listen",
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
    "release_dispatcher",
    "resume_orphans",
    "state_of",
    "run_job",
    "scheduler_run",
    "request_lock",
    "seer_options_from_params",
    "should_stop",
    "stop_on_signals",
    "tick_metrics",
    "train_task",
    "wait_out_outage",
    "wants_tick",
]


_HOME: dict[str, str] = {
    "loss_picture": "tasks._plot",
    "load_tick_history": "tasks._plot",
    "add_tick": "tasks._plot",
    "TickHistory": "tasks._plot",
    "TOTAL": "tasks._plot",
    "LOSS_PREFIX": "tasks._plot",
    "BY_HAND": "tasks._seer",
    "SeerOptions": "tasks._seer",
    "request_lock": "tasks._seer",
    "seer_options_from_params": "tasks._seer",
    "DeploymentDispatcher": "tasks._dispatch",
    "Dispatcher": "tasks._dispatch",
    "Done": "tasks._dispatch",
    "JobDispatched": "tasks._loop",
    "JobLeft": "tasks._loop",
    "JobFinished": "tasks._loop",
    "JobSpec": "tasks._service",
    "MAX_CHAIN": "tasks._service",
    "LocalDispatcher": "tasks._dispatch",
    "Planner": "tasks._service",
    "Progress": "tasks._loop",
    "STOP": "tasks._loop",
    "SchedulerEvent": "tasks._loop",
    "SchedulerOptions": "tasks._loop",
    "Service": "tasks._loop",
    "ServiceState": "tasks._service",
    "SlotHold": "tasks._service",
    "StopRequest": "tasks._loop",
    "Stopping": "tasks._loop",
    "TenantInfo": "tasks._service",
    "build_problem": "tasks._service",
    "connect": "tasks._loop",
    "decide": "tasks._prefect",
    "decide_tick": "tasks._loop",
    "dispatch_tick": "tasks._loop",
    "drop_checkpoints": "tasks._service",
    "listen": "tasks._loop",
    "load_state": "tasks._service",
    "state_of": "tasks._service",
    "log_summary": "tasks._loop",
    "log_tick": "tasks._loop",
    "pause": "tasks._loop",
    "record": "tasks._prefect",
    "record_finished_jobs": "tasks._loop",
    "redo_promotions": "tasks._loop",
    "refresh": "tasks._prefect",
    "refresh_if_stale": "tasks._loop",
    "register_tenant": "tasks._service",
    "release_dispatcher": "tasks._loop",
    "resume_orphans": "tasks._loop",
    "run_job": "tasks._service",
    "scheduler_run": "tasks._loop",
    "should_stop": "tasks._loop",
    "stop_on_signals": "tasks._loop",
    "tick_metrics": "tasks._service",
    "train_task": "tasks._prefect",
    "wait_out_outage": "tasks._loop",
    "wants_tick": "tasks._loop",
}


def __getattr__(name: str) -> Any:
    module = _HOME.get(name)
    if module is None:
        raise AttributeError(f"module 'tasks' has no attribute {name!r}")
    value = getattr(importlib.import_module(module), name)
    globals()[name] = value  # later look-ups skip this function
    return value
