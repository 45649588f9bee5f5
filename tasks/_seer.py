"""SEER jobs in the service: options, the deadline/budget the scheduler derives, MLflow records.

A SEER job is an ordinary job run (``tenantml.kind = job``, so the scheduler, `record` and the
registry treat it like any other) whose trainer is :func:`trainers.seer_runner.run_seer`. Each
trial is a nested MLflow run (``tenantml.kind = seer-trial``, parent = the job run) with its
hyperparameters as params, per stage ``val_accuracy``/``gpus``/``steps`` (step = stage) and a
``seer.stage<k>`` tag saying whether it was promoted, kept, demoted, eliminated or final; the job
run gets the plan as ``seer_plan.json`` and per-stage ``seer.gpus``/``seer.best_accuracy``.
"""

from __future__ import annotations

import json
import math
from dataclasses import asdict, dataclass
from typing import Any

import mlflow
from mlflow.tracking import MlflowClient

from store import ExampleStore
from trainers._job import TrainResult

__all__ = ["SeerOptions", "derive_seer", "seer_options_from_params", "train_seer"]

TRIAL_KIND = "seer-trial"


@dataclass(frozen=True)
class SeerOptions:
    """JSON-able SEER settings carried by a `JobSpec` (``p_max=None`` is infinity)."""

    deadline_min: float
    budget_gpu_min: float
    eta: float = 4
    v: float = 2
    p_min: int = 1
    p_max: int | None = None
    t_min: float = 1.0
    global_batch: int = 128
    seed: int = 0

    def as_dict(self) -> dict[str, Any]:
        return asdict(self)


def seer_options_from_params(params: dict[str, str]) -> dict[str, Any] | None:
    """The SEER options of a job run from its ``seer.*`` params (None for a plain job), so a
    restarted scheduler re-sends an orphaned SEER job as one."""
    raw = {k.removeprefix("seer."): v for k, v in params.items() if k.startswith("seer.")}
    if not raw:
        return None
    types = {f: t for f, t in SeerOptions.__annotations__.items()}
    out: dict[str, Any] = {}
    for name, text in raw.items():
        if name not in types:
            continue
        if text in ("None", ""):
            out[name] = None
        else:
            out[name] = int(float(text)) if types[name].startswith("int") else float(text)
    return SeerOptions(**out).as_dict()


def derive_seer(
    expected_cost_s: float, *, budget_x: float, t_min: float = 1.0, p_max: int | None = None
) -> SeerOptions:
    """The SEER job the scheduler hands a chosen (tenant, model): the deadline is the time the
    policy expects the model's plain job to take (its cost estimate, at least ``t_min``), the
    budget ``budget_x`` times that in GPU-minutes (Table 2 uses 4x and 16x)."""
    deadline = max(t_min, expected_cost_s / 60.0)
    return SeerOptions(deadline, budget_x * deadline, t_min=t_min, p_max=p_max)


def _trial_run(
    client: MlflowClient,
    experiment_id: str,
    parent: str,
    job_id: str,
    trial: str,
    params: dict[str, float],
) -> str:
    """The trial's nested run, found again on a retry (never duplicated)."""
    found = client.search_runs(
        [experiment_id],
        filter_string=f"tags.`tenantml.seer_trial` = '{job_id}/{trial}'",
        max_results=1,
    )
    if found:
        return str(found[0].info.run_id)
    run = client.create_run(
        experiment_id,
        run_name=f"{job_id}/{trial}",
        tags={
            "mlflow.parentRunId": parent,
            "tenantml.kind": TRIAL_KIND,
            "tenantml.seer_trial": f"{job_id}/{trial}",
            "tenantml.job_id": job_id,
        },
    )
    for k, v in params.items():
        client.log_param(run.info.run_id, k, v)
    return str(run.info.run_id)


def train_seer(
    spec: Any, client: MlflowClient, store: ExampleStore, run_id: str, experiment_id: str
) -> TrainResult:
    """Run the SEER job of ``spec`` (a `tasks.JobSpec` with ``seer``), logging to MLflow."""
    from trainers.seer_runner import SeerJob, StageEvent, run_seer

    opts = SeerOptions(**spec.seer)
    job = SeerJob(
        spec.tenant,
        spec.candidate,
        spec.snapshot,
        spec.job_id,
        opts.deadline_min,
        opts.budget_gpu_min,
        opts.eta,
        opts.v,
        opts.p_min,
        math.inf if opts.p_max is None else float(opts.p_max),
        opts.t_min,
        global_batch=opts.global_batch,
        seed=opts.seed,
    )
    mlflow.log_text(json.dumps(job.plan().to_dict(), indent=2), "seer_plan.json")

    def on_stage(events: list[StageEvent]) -> None:
        k = events[0].stage
        for e in events:
            trial = _trial_run(
                client, experiment_id, run_id, spec.job_id, e.trial, e.hyperparameters
            )
            r = e.result
            for name, value in {
                "val_accuracy": r.accuracy,
                "gpus": e.gpus,
                "steps": r.steps,
                "train_loss": r.train_loss,
                "start_s": r.start_s,
                "checkpoint_s": r.checkpoint_s,
            }.items():
                client.log_metric(trial, name, float(value), step=k)
            client.set_tag(trial, f"seer.stage{k}", e.outcome)
            if e.outcome in ("eliminated", "final"):
                client.set_terminated(trial, "FINISHED")
        mlflow.log_metrics(
            {
                "seer.gpus": sum(e.gpus for e in events),
                "seer.best_accuracy": max(e.result.accuracy for e in events),
                "seer.trials": len(events),
            },
            step=k,
        )

    return run_seer(job, store, on_stage)
