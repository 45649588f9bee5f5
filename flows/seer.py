"""The `seer` flow: tune one (tenant, model) with SEER under a deadline and a GPU budget.

Started by hand (``tenantml seer run``, or the Prefect UI's `seer/seer` deployment): one job run
in the tenant's MLflow experiment, one nested run per trial, the plan as an artifact, and the best
trial registered and moved to ``best`` if it beats the tenant's current best. The scheduler hands
out the same jobs itself with ``scheduler(seer_budget_x=...)``. Retries resume at the next stage.
"""

from __future__ import annotations

from typing import Any

from prefect import flow, runtime

from tasks import BY_HAND, SeerOptions, seer_job_id
from tasks.settings import Settings

__all__ = ["seer"]


@flow(name="seer", retries=1, retry_delay_seconds=2, log_prints=True)
def seer(
    tenant: str,
    model: str,
    deadline_min: float,
    budget_gpu_min: float,
    eta: float = SeerOptions.eta,
    v: float = SeerOptions.v,
    p_min: int = SeerOptions.p_min,
    p_max: int | None = SeerOptions.p_max,
    t_min: float = SeerOptions.t_min,
    global_batch: int = SeerOptions.global_batch,
    seed: int = SeerOptions.seed,
    tuner: str = SeerOptions.tuner,
    deadline_at: str | None = None,
) -> dict[str, Any]:
    """Run SEER for `model` of `tenant` on its latest snapshot; returns the job's record. The
    options and their defaults: `tasks._seer.SeerOptions`. The same options on the same
    snapshot are one job: run again once it FINISHED, it returns that job's record with
    ``reused`` True (its checkpoints are gone; its model is in MLflow); while another process
    trains it, ``{"job_id", "busy": why}`` and nothing runs. `deadline_at`: the moment the
    deadline was given as (a clock time, ISO), which identifies the request in place of
    `deadline_min`, the minutes left, which differ each time it is run again."""
    from mlflow.tracking import MlflowClient

    from mlflow_plugin.registry import best_model
    from mlflow_plugin.tracking import (
        JobBusyError,
        ensure_tenant_experiment,
        job_record,
        trained_elsewhere,
    )
    from tasks import JobSpec, drop_checkpoints, record, request_lock, train_task

    settings = Settings.load().apply()
    client = MlflowClient(settings.tracking_uri)
    store = settings.store()
    schema = store.schema(tenant)
    snapshot = store.manifest(tenant).version
    opts = SeerOptions(
        deadline_min, budget_gpu_min, eta, v, p_min, p_max, t_min, global_batch, seed, tuner
    )
    job_id = seer_job_id(model, snapshot, opts, deadline_at)
    spec = JobSpec(tenant, model, snapshot, job_id, tick=0, policy=BY_HAND, seer=opts.as_dict())
    experiment_id = ensure_tenant_experiment(
        client, tenant, str(schema), [], settings.artifact_location
    )
    try:
        with request_lock(settings.home, tenant, job_id):
            rec = job_record(client, experiment_id, job_id)
            if rec is not None and (pid := trained_elsewhere(rec)) is not None:
                raise JobBusyError.training(
                    job_id,
                    pid,
                    "an earlier `tenantml seer run` of the same request, or a "
                    "scheduler that took it over",
                )
            reused = rec is not None and rec.status == "FINISHED"  # same options, same data
            if not reused:
                rec = train_task(spec, client, store, experiment_id, str(runtime.flow_run.id or ""))
    except JobBusyError as e:  # an answer, not a failure: no retry, no traceback
        return {"job_id": job_id, "busy": str(e)}
    assert rec is not None
    best = record(client, rec)
    if best is None and (served := best_model(client, tenant)) and served.run_id == rec.run_id:
        best = served  # already the best (a request made before)
    drop_checkpoints(store, rec)  # its model is in MLflow now
    return {
        "run_id": rec.run_id,
        "job_id": job_id,
        "accuracy": rec.accuracy,
        "gpu_s": rec.cost_s,
        "best_version": best.version if best else None,
        "reused": reused,
    }
