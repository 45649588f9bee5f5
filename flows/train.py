"""The `train` flow: one (tenant, model) job on one GPU slot, recorded as an MLflow run, or a
chain of short ones (`tasks.JobSpec.then`) trained in turn on the same slot.

Retries re-run the same job id: the MLflow run is reused and the trainer resumes from the job's
last checkpoint in the store, so a retry loses at most one epoch and is never counted twice. A
run sent again (a retry, a crashed run sent anew) skips its jobs already FINISHED, recording them
if it had not. A job that ends FINISHED leaves no checkpoint (its model is in MLflow); a FAILED
one keeps them for its next attempt.

The job moves its tenant's `best` itself when it beats it (`record`, idempotent): a job the
pool starts after every scheduler has stopped (dispatched, then the scheduler killed before the
job's MLflow run existed) is seen by no scheduler, and its model would otherwise never become
`best` (found by the bounded chaos run). The scheduler records every job it sees as well.

One trainer per job: a job whose latest attempt's process still runs on this machine is left
to it. The scheduler sends a job again when its flow run is marked crashed, and the heartbeat
rule marks a live run crashed after 120 s without a beat (a Prefect outage that long): before,
two processes then trained the same job into the same checkpoints. A SEER job is also trained
under its request's lock (`tasks.request_lock`), so that a job of `tenantml seer run` a scheduler
sends again (its process had ended) is left to a `seer run` of the request started before this
run recorded its process, and that `seer run` is refused while this one trains.
"""

from __future__ import annotations

import os
from contextlib import AbstractContextManager, nullcontext
from pathlib import Path
from typing import Any

from prefect import flow, runtime

from tasks.settings import Settings

__all__ = ["train"]


@flow(name="train", retries=2, retry_delay_seconds=2, log_prints=True)
def train(spec: dict[str, Any]) -> list[dict[str, Any]]:
    """Train the job `spec` (a `tasks.JobSpec` as a dict) and the jobs chained after it; returns
    their MLflow records (run_id, status, accuracy, cost_s), and ``{"job_id", "left": why}`` for
    a job left to another live process that trains it. A chained job that fails does not stop
    the ones after it; the run then fails with the first error, once all had their turn."""
    from mlflow.tracking import MlflowClient

    from mlflow_plugin.tracking import (
        JobBusyError,
        ensure_tenant_experiment,
        job_record,
        trained_elsewhere,
    )
    from store import ExampleStore
    from tasks import BY_HAND, JobSpec, SlotHold, drop_checkpoints, record, train_task
    from tasks.outage import patient, serve_patiently
    from tasks.streams import outlive_lost_output

    if os.environ.get("PREFECT__FLOW_RUN_ID"):  # a process a worker started for this run (not
        # the embedded scheduler's, whose streams and settings are its user's)
        outlive_lost_output()  # a killed worker's dead pipes must not fail the job (a warm
        # run's child did this before the engine started; a cold one has logged lines already)
        # MLflow prints each run's URL (and reads the run back to) when it ends it
        os.environ.setdefault("MLFLOW_SUPPRESS_PRINTING_URL_TO_STDOUT", "true")
    settings = Settings.load().apply()
    serve_patiently()  # a slow answer (a big upload) is waited for, not failed
    head = JobSpec(**spec)
    jobs = head.chain()
    # The job waits out a server outage (bounded backoff, a log line per attempt).
    client = patient(MlflowClient(settings.tracking_uri), settings)
    store = ExampleStore(patient(settings.store().blobs, settings))
    # The run's jobs train in turn with the slot held between them (`tasks.SlotHold`).
    slot = SlotHold.of(head)
    try:
        experiments: dict[str, str] = {}
        out: list[dict[str, Any]] = []
        error: BaseException | None = None
        for job in jobs:
            try:
                if job.tenant not in experiments:
                    schema = store.schema(job.tenant)
                    experiments[job.tenant] = ensure_tenant_experiment(
                        client, job.tenant, str(schema), [], settings.artifact_location
                    )
                exp_id = experiments[job.tenant]
                with _request_lock(settings.home, job):
                    rec = job_record(client, exp_id, job.job_id)
                    earlier = rec is not None and rec.status == "FINISHED"  # an earlier attempt
                    if not earlier:
                        if rec is not None and (pid := trained_elsewhere(rec)) is not None:
                            who = "its `seer run`" if rec.policy == BY_HAND else _EARLIER_ATTEMPT
                            raise JobBusyError.training(job.job_id, pid, who)
                        rec = train_task(
                            job, client, store, exp_id, str(runtime.flow_run.id or ""), slot
                        )
            except JobBusyError as e:  # another live process trains it: left to that process
                print(f"left {job.tenant}/{job.job_id} to another process: {e}")
                out.append({"job_id": job.job_id, "left": str(e)})
                continue
            except Exception as e:  # the chain goes on; the run fails at the end
                if len(jobs) == 1:
                    raise
                error = error or e
                continue
            finally:  # trained, left, failed (before training too) or done before: the slot
                # needs it no more, so it is let go after the run's last job, not at its end
                slot.job_done(f"{job.tenant}/{job.job_id}")
            assert rec is not None  # FINISHED: trained now, or by an earlier attempt
            record(client, rec)  # (an earlier attempt: if it ended before its `record`)
            drop_checkpoints(store, rec)  # its model is in MLflow now
            out.append(_summary(rec))
    finally:
        slot.release()
    if error is not None:
        raise error
    return out


#: who trains a job sent again while its earlier attempt's process still runs (its flow run was
#: marked crashed while it trained: no heartbeat for 120 s, e.g. through a Prefect outage)
_EARLIER_ATTEMPT = "an earlier attempt of the job, still running"


def _request_lock(home: Path, job: Any) -> AbstractContextManager[None]:
    """A SEER job is trained under its request's lock (`tasks.request_lock`), which a `tenantml
    seer run` of the same job holds while it checks and trains: a job of that command sent again
    by a scheduler (its process had ended) was trained twice when the user ran the request
    again before this run had recorded its process."""
    from tasks import RESUMED_BY_SCHEDULER, request_lock

    if job.seer is None:
        return nullcontext()
    return request_lock(home, job.tenant, job.job_id, RESUMED_BY_SCHEDULER)


def _summary(done: Any) -> dict[str, Any]:
    return {
        "run_id": done.run_id,
        "status": done.status,
        "accuracy": done.accuracy,
        "cost_s": done.cost_s,
    }
