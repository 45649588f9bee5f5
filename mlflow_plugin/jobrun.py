"""`JobRun`: the one writer of a job's MLflow run, for every kind of job.

* A training job (plain, SEER, or the sleep stand-in of dispatch benchmarks): `JobRun.start`
  finds the run of its job id (a retry or a resume: RUNNING again, with this attempt's tags) or
  creates it, named after the job id; then `log_metrics` (``started_at``, ``dispatch_latency_s``),
  `log_epoch` per epoch (``val_accuracy``, ``train_loss``; step = epoch) or per SEER stage
  (step = stage), `log_text` (``seer_plan.json``), `log_result` (the model, its hyperparameters,
  then ``accuracy``, ``cost_s``, ``epochs``, ``ended_at``) and `end` (FINISHED or FAILED). As a
  context manager it ends FAILED when the block raises, FINISHED otherwise.
* A SEER trial: `JobRun.start_trial` gives the nested run of one trial of the job (found again on
  a retry, never duplicated), written the same way.

Every tag of a job's runs is set here, once (the names are `mlflow_plugin.tracking`'s):

* a job's run: ``tenantml.kind = job``, ``tenantml.job_id``, ``tenantml.tenant``; this
  attempt's ``tenantml.tick``, ``tenantml.policy``, ``tenantml.slot`` and
  ``tenantml.flow_run_id`` (when there is a Prefect flow run), ``tenantml.node`` (the host
  name of the machine it runs on) and ``tenantml.gpu`` (its ``CUDA_VISIBLE_DEVICES``, where
  set); ``tenantml.model_uri`` once the
  model is logged, or ``tenantml.model_skipped`` (why not) when the caller keeps it unlogged.
  MLflow's logged model gets the tenant, policy and tick.
* a trial's run: ``mlflow.parentRunId`` (the job's run), ``tenantml.kind = seer-trial``,
  ``tenantml.seer_trial = <job id>/<trial>``, ``tenantml.job_id``; the caller's per-stage tags.

Params: ``model``, ``snapshot``, ``policy`` and what the caller adds (``max_epochs``,
``time_budget_s``, ``seer.*``), then the trained model's ``hp.*``; a trial's hyperparameters.

Writes go through the given client (the service gives a patient one, `tasks.outage.patient`).
MLflow's own calls, which use a client of MLflow's, go through `retry`: making the job's run the
thread's active run (MLflow logs a model into the active run) and logging the model.
"""

from __future__ import annotations

import contextlib
import math
import os
import socket
import time
from collections.abc import Callable, Mapping
from types import TracebackType
from typing import Any, Protocol, TypeVar

import mlflow
from mlflow.entities import Metric, Param, RunStatus, RunTag
from mlflow.tracking import MlflowClient
from mlflow.utils.mlflow_tags import MLFLOW_PARENT_RUN_ID

from mlflow_plugin.pyfunc import log_trained_model
from mlflow_plugin.tracking import (
    FLOW_RUN_ID,
    GPU,
    JOB_ID,
    KIND,
    MODEL_SKIPPED,
    MODEL_URI,
    NODE,
    POLICY,
    PROCESS,
    SEER_TRIAL,
    SLOT,
    TENANT,
    TICK,
    TRIAL_KIND,
    JobRecord,
    end_job_run,
    process_tag,
    start_job_run,
)
from trainers import EpochReport, TrainResult

__all__ = ["JobRun", "Retry"]

T = TypeVar("T")


class Retry(Protocol):
    """Calls ``fn`` (e.g. waiting out a server outage: `tasks.outage.ride_out`)."""

    def __call__(self, fn: Callable[[], T], /) -> T: ...


def _once(fn: Callable[[], T], /) -> T:
    return fn()


class JobRun:
    """One job's MLflow run (see the module docstring); `start` or `start_trial` make one."""

    def __init__(
        self,
        client: MlflowClient,
        experiment_id: str,
        run_id: str,
        job_id: str,
        *,
        model_tags: Mapping[str, str] | None = None,
        retry: Retry = _once,
    ) -> None:
        self.client = client
        self.experiment_id = experiment_id
        self.run_id = run_id
        self.job_id = job_id
        self.model_tags = dict(model_tags or {})
        self.retry = retry
        self._epoch = 0  # the step of the next `log_epoch` without one
        self._active = False  # this thread's active MLflow run (`start` makes it so)
        self._trials: dict[str, JobRun] = {}

    @classmethod
    def start(
        cls,
        client: MlflowClient,
        experiment_id: str,
        *,
        tenant: str,
        job_id: str,
        candidate: str,
        snapshot: int,
        policy: str,
        tick: int,
        slot: int = 0,
        flow_run_id: str | None = None,
        params: Mapping[str, Any] | None = None,
        retry: Retry = _once,
    ) -> JobRun:
        """The run of training job `job_id`, RUNNING and this thread's active MLflow run until
        `end`: the run of an earlier attempt (its checkpoint is what the trainer resumes from),
        else a new one. `params`: more params than ``model``, ``snapshot``, ``policy``."""
        tags = {TICK: str(tick), POLICY: policy, SLOT: str(slot), NODE: socket.gethostname(),
                PROCESS: process_tag()}  # fmt: skip
        if gpu := os.environ.get("CUDA_VISIBLE_DEVICES"):  # a worker's process: one GPU, pinned
            tags[GPU] = gpu
        if flow_run_id:
            tags[FLOW_RUN_ID] = flow_run_id
        all_params = {"model": candidate, "snapshot": snapshot, "policy": policy, **(params or {})}
        run_id = start_job_run(
            client, experiment_id, tenant=tenant, job_id=job_id, params=all_params, tags=tags
        )
        model_tags = {TENANT: tenant, POLICY: policy, TICK: str(tick)}
        run = cls(client, experiment_id, run_id, job_id, model_tags=model_tags, retry=retry)
        try:
            retry(lambda: mlflow.start_run(run_id=run_id))
        except BaseException:
            end_job_run(client, run_id, ok=False)
            raise
        run._active = True
        return run

    def start_trial(self, trial: str, params: Mapping[str, float]) -> JobRun:
        """The nested run of SEER trial `trial` of this job, with its hyperparameters `params`:
        found again if an earlier attempt made it (its status as it was), else created."""
        key = f"{self.job_id}/{trial}"
        if key in self._trials:
            return self._trials[key]
        found = self.client.search_runs(
            [self.experiment_id], filter_string=f"tags.`{SEER_TRIAL}` = '{key}'", max_results=1
        )
        if found:
            run_id = str(found[0].info.run_id)
        else:
            tags = {
                MLFLOW_PARENT_RUN_ID: self.run_id,
                KIND: TRIAL_KIND,
                SEER_TRIAL: key,
                JOB_ID: self.job_id,
            }
            created = self.client.create_run(self.experiment_id, tags=tags, run_name=key)
            run_id = str(created.info.run_id)
            if params:
                self.client.log_batch(run_id, params=[Param(k, str(v)) for k, v in params.items()])
        run = JobRun(self.client, self.experiment_id, run_id, self.job_id, retry=self.retry)
        self._trials[key] = run
        return run

    def log_metrics(self, metrics: Mapping[str, float], step: int = 0) -> None:
        now = int(time.time() * 1000)
        batch = [Metric(k, float(v), now, step) for k, v in metrics.items()]
        self.client.log_batch(self.run_id, metrics=batch)

    def log_epoch(self, epoch: EpochReport | Mapping[str, float], step: int | None = None) -> None:
        """An epoch's `EpochReport` (``val_accuracy``, ``train_loss``, logged -1 when not
        finite) or a stage's named metrics; `step`: the stage, default the next epoch (0, 1...)."""
        if isinstance(epoch, EpochReport):
            loss = epoch.train_loss if math.isfinite(epoch.train_loss) else -1.0
            metrics: Mapping[str, float] = {"val_accuracy": epoch.val_accuracy, "train_loss": loss}
        else:
            metrics = epoch
        if step is None:
            step, self._epoch = self._epoch, self._epoch + 1
        self.log_metrics(metrics, step)

    def set_tags(self, tags: Mapping[str, str]) -> None:
        self.client.log_batch(self.run_id, tags=[RunTag(k, v) for k, v in tags.items()])

    def log_text(self, text: str, path: str) -> None:
        self.client.log_text(self.run_id, text, path)

    def log_result(
        self,
        accuracy: float,
        cost_s: float,
        epochs: int,
        *,
        ended_at: float,
        trained: TrainResult | None = None,
        skip_model: str | None = None,
    ) -> None:
        """The job's outcome: `trained`'s model as a pyfunc (its URI in ``tenantml.model_uri``;
        not logged when `skip_model` says why, in ``tenantml.model_skipped``), hyperparameters
        (``hp.*``) and ``resumed_from_epoch`` when the job trained one; then ``accuracy``,
        ``cost_s``, ``epochs`` and ``ended_at`` (wall clock)."""
        if trained is not None:
            if skip_model is None:
                model, model_tags = trained.model, self.model_tags
                uri = self.retry(lambda: log_trained_model(model, tags=model_tags))
                tags = [RunTag(MODEL_URI, uri)]
            else:
                tags = [RunTag(MODEL_SKIPPED, skip_model)]
            resumed = float(trained.resumed_from_epoch)
            self.client.log_batch(
                self.run_id,
                metrics=[Metric("resumed_from_epoch", resumed, int(time.time() * 1000), 0)],
                params=[Param(f"hp.{k}", str(v)) for k, v in trained.hyperparameters.items()],
                tags=tags,
            )
        final = {"accuracy": accuracy, "cost_s": cost_s, "epochs": epochs, "ended_at": ended_at}
        self.log_metrics(final)

    def end(self, ok: bool) -> None:
        """FINISHED (`ok`) or FAILED; a job's run stops being this thread's active run."""
        status = RunStatus.to_string(RunStatus.FINISHED if ok else RunStatus.FAILED)
        try:
            if self._active:
                self._active = False
                # This ends the thread's active run; the status is `end_job_run`'s, below, with
                # the job's (patient) client. The fluent call reads the run back and prints its
                # URL before it sets the status, and that failed jobs which had trained to the
                # end: an MLflow outage (runs/get refused), a killed worker's pipe
                # (BrokenPipeError). The run is off the active stack by then, whatever failed.
                with contextlib.suppress(Exception):
                    mlflow.end_run(status)
        finally:
            end_job_run(self.client, self.run_id, ok)

    def record(self) -> JobRecord:
        return JobRecord.from_run(self.client.get_run(self.run_id))

    def __enter__(self) -> JobRun:
        return self

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        self.end(ok=exc_type is None)
