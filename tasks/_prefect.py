"""The Prefect tasks of the service: thin, typed wrappers over `tasks._service` with retries on
the decorator and no logic of their own (ARCHITECTURE principle 10)."""

from __future__ import annotations

from collections.abc import Sequence

from mlflow.tracking import MlflowClient
from prefect import task
from prefect.cache_policies import NO_CACHE

from mlflow_plugin.registry import BestModel
from mlflow_plugin.tracking import JobRecord
from store import ExampleStore
from tasks._service import (
    JobSpec,
    Planner,
    ServiceState,
    SlotHold,
    load_state,
    record_finished,
    run_job,
)

__all__ = ["decide", "record", "refresh", "train_task"]


@task(name="refresh", retries=2, retry_delay_seconds=1, cache_policy=NO_CACHE)
def refresh(
    client: MlflowClient,
    store: ExampleStore,
    capacity_prices: str | None = None,
    prior: str = "learnt",
) -> ServiceState:
    """Tenants from the store, jobs from MLflow: the scheduler's whole state. `capacity_prices`:
    `Settings.capacity_prices` (costs in expected dollars on spot capacity; None: seconds);
    `prior`: `tasks.options.PRIORS`."""
    return load_state(client, store, capacity_prices, prior)


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
    chain_s: float | None = None,
    sleep_s: float | None = None,
    seer_tuner: str = "replan",
    elsewhere: Sequence[JobSpec] = (),
) -> list[JobSpec]:
    """The policy (policy/) picks (tenant, model) for every free slot (`Planner.decide`)."""
    return planner.decide(
        state,
        in_flight=in_flight,
        elsewhere=elsewhere,
        tick=tick,
        max_epochs=max_epochs,
        job_budget_s=job_budget_s,
        seer_budget_x=seer_budget_x,
        seer_tuner=seer_tuner,
        chain_s=chain_s,
        sleep_s=sleep_s,
    )


@task(name="train", cache_policy=NO_CACHE)
def train_task(
    spec: JobSpec,
    client: MlflowClient,
    store: ExampleStore,
    experiment_id: str,
    flow_run_id: str | None,
    slot: SlotHold | None = None,
) -> JobRecord:
    return run_job(spec, client, store, experiment_id, flow_run_id=flow_run_id, slot=slot)


@task(name="record", retries=2, retry_delay_seconds=1, cache_policy=NO_CACHE)
def record(client: MlflowClient, job: JobRecord) -> BestModel | None:
    """Promote the job's model to `best` if it beats the tenant's current best."""
    return record_finished(client, job)
