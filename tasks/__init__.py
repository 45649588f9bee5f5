"""Thin Prefect tasks over `tasks._service` (ARCHITECTURE principle 10): typed, small, retries on
the decorator, no logic of their own."""

from __future__ import annotations

import numpy as np
from mlflow.tracking import MlflowClient
from prefect import task

from mlflow_plugin.registry import BestModel
from mlflow_plugin.tracking import JobRecord
from tasks._service import (
    JobSpec,
    ServiceState,
    TenantInfo,
    build_problem,
    load_state,
    record_finished,
    register_tenant,
    run_job,
    tick_metrics,
)
from tasks._service import decide as _decide
from tenantml.store import ExampleStore

__all__ = [
    "JobSpec",
    "ServiceState",
    "TenantInfo",
    "build_problem",
    "decide",
    "load_state",
    "record",
    "refresh",
    "register_tenant",
    "run_job",
    "tick_metrics",
    "train_task",
]


@task(name="refresh", retries=2, retry_delay_seconds=1)
def refresh(client: MlflowClient, store: ExampleStore) -> ServiceState:
    """Tenants from the store, jobs from MLflow: the scheduler's whole state."""
    return load_state(client, store)


@task(name="decide")
def decide(
    state: ServiceState,
    *,
    policy: str,
    slots: int,
    in_flight: list[JobSpec],
    tick: int,
    seed: int,
    max_epochs: int,
    job_budget_s: float | None,
) -> list[JobSpec]:
    """The policy (policy/) picks (tenant, model) for every free slot."""
    rng = np.random.default_rng([seed, tick])
    return _decide(state, policy=policy, slots=slots, in_flight=in_flight, tick=tick, rng=rng,
                   max_epochs=max_epochs, job_budget_s=job_budget_s)  # fmt: skip


@task(name="train")
def train_task(
    spec: JobSpec, client: MlflowClient, store: ExampleStore, experiment_id: str,
    flow_run_id: str | None,
) -> JobRecord:  # fmt: skip
    return run_job(spec, client, store, experiment_id, flow_run_id=flow_run_id)


@task(name="record", retries=2, retry_delay_seconds=1)
def record(client: MlflowClient, job: JobRecord) -> BestModel | None:
    """Promote the job's model to `best` if it beats the tenant's current best."""
    return record_finished(client, job)
