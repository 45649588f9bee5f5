"""The `train` flow: one (tenant, model) job on one GPU slot, recorded as an MLflow run.

Retries re-run the same job id: the MLflow run is reused and the trainer resumes from the job's
last checkpoint in the store, so a retry loses at most one epoch and is never counted twice.

The job moves its tenant's `best` itself when it beats it (`record`, idempotent): a job the
pool starts after every scheduler has stopped (dispatched, then the scheduler killed before the
job's MLflow run existed) is seen by no scheduler, and its model would otherwise never become
`best` (found by the bounded chaos run). The scheduler records every job it sees as well.
"""

from __future__ import annotations

from typing import Any

from prefect import flow, runtime

from tasks.settings import Settings

__all__ = ["train"]


@flow(name="train", retries=2, retry_delay_seconds=2, log_prints=True)
def train(spec: dict[str, Any]) -> dict[str, Any]:
    """Train the job `spec` (a `tasks.JobSpec` as a dict); returns its MLflow record."""
    from mlflow.tracking import MlflowClient

    from mlflow_plugin.tracking import ensure_tenant_experiment
    from store import ExampleStore
    from tasks import JobSpec, record, train_task
    from tasks.outage import patient, serve_patiently

    settings = Settings.load().apply()
    serve_patiently()  # a slow answer (a big upload) is waited for, not failed
    job = JobSpec(**spec)
    # The job waits out a server outage (bounded backoff, a log line per attempt).
    client = patient(MlflowClient(settings.tracking_uri), settings)
    store = ExampleStore(patient(settings.store().blobs, settings))
    schema = store.schema(job.tenant)
    experiment_id = ensure_tenant_experiment(
        client, job.tenant, str(schema), [], settings.artifact_location
    )
    done = train_task(job, client, store, experiment_id, str(runtime.flow_run.id or ""))
    record(client, done)
    return {
        "run_id": done.run_id,
        "status": done.status,
        "accuracy": done.accuracy,
        "cost_s": done.cost_s,
    }
