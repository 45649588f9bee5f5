"""SEER jobs in the service: options, the deadline/budget the scheduler derives, MLflow records.

A SEER job is an ordinary job run (``tenantml.kind = job``, so the scheduler, `record` and the
registry treat it like any other) whose trainer is :func:`trainers.seer_runner.run_seer`. Each
trial is a nested MLflow run (``tenantml.kind = seer-trial``, parent = the job run) with its
hyperparameters as params, per stage ``val_accuracy``/``gpus``/``steps`` (step = stage) and a
``seer.stage<k>`` tag saying whether it was promoted, kept, demoted, eliminated or final; the job
run gets the plan it starts from as ``seer_plan.json``, per-stage ``seer.gpus``/
``seer.best_accuracy``, and with the ``replan`` tuner (the default; ``tuner="seer"`` runs the
paper's Alg. 1) its re-planning decisions as ``seer_decisions.json``.

`SeerOptions` is the one shape of a job's SEER settings and the one place of their defaults
(the `seer` flow's parameters default to them); it travels as `SeerOptions.as_dict` in a
`JobSpec` (JSON) and as `SeerOptions.to_params` in the job's MLflow params (``seer.*``), read back
by `SeerOptions.from_params` when a restarted scheduler re-sends an orphaned job.
"""

from __future__ import annotations

import hashlib
import json
import math
from collections.abc import Callable, Mapping
from contextlib import AbstractContextManager
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any

from mlflow_plugin.jobrun import JobRun
from mlflow_plugin.tracking import JobBusyError
from store import ExampleStore
from tasks._locks import home_lock
from trainers import TrainResult

if TYPE_CHECKING:
    from trainers.seer_runner import SeerJob

__all__ = [
    "BY_HAND",
    "RESUMED_BY_SCHEDULER",
    "SEER_RUN",
    "SeerOptions",
    "derive_seer",
    "request_lock",
    "seer_job_id",
    "seer_options_from_params",
    "train_seer",
]

#: the policy a SEER job started by hand (`flows.seer`: ``tenantml seer run``, the UI's
#: deployment) is recorded under; its command resumes it, a scheduler leaves it alone
BY_HAND = "seer"

PARAM_PREFIX = "seer."


#: what holds a request's lock (`request_lock`), as its refusal names it
SEER_RUN = "another `tenantml seer run` of the same request"
RESUMED_BY_SCHEDULER = "a scheduler's `train` run of the job"


def request_lock(
    home: Path, tenant: str, job_id: str, holder: str = SEER_RUN
) -> AbstractContextManager[None]:
    """Hold the lock of tenant `tenant`'s job `job_id` (`tasks._locks.home_lock`; job ids repeat
    across tenants) while a process checks whether another trains the job, and trains it: a
    `seer run` of the request, or a scheduler's `train` run of a SEER job. Two started together
    both passed the check of the job's process (neither had recorded one yet) and trained the
    same trials. `holder`: what this process is, for the refusal.

    Raises:
        mlflow_plugin.tracking.JobBusyError: another process holds it.
    """

    def refuse(pid: str, who: str) -> Exception:
        return JobBusyError.training(job_id, pid, who or SEER_RUN)

    return home_lock(home, f"{tenant}.{job_id}", holder, refuse)  # names: [a-z][a-z0-9_-]*


def _int(text: str) -> int:
    return int(float(text))


def _int_or_none(text: str) -> int | None:
    return None if text in ("None", "") else _int(text)


@dataclass(frozen=True)
class SeerOptions:
    """JSON-able SEER settings carried by a `JobSpec` (``p_max=None`` is infinity): deadline
    (minutes), budget (GPU-minutes), and the planner's knobs (`policy.seer.plan`), the fixed
    global batch and the seed of the sampled configurations."""

    deadline_min: float
    budget_gpu_min: float
    eta: float = 4
    v: float = 2
    p_min: int = 1
    p_max: int | None = None
    t_min: float = 1.0
    global_batch: int = 128
    seed: int = 0
    tuner: str = "replan"

    def __post_init__(self) -> None:
        """The options a job would otherwise fail on only once used (after a stage's other
        trials had trained, a FAILED run stored): the tuner, the seed and the global batch. The
        plan's own knobs are `policy.seer.plan`'s to check (`PlanError`)."""
        from policy.seer import check_tuner

        check_tuner(self.tuner)
        seed, batch, p_min = self.seed, self.global_batch, self.p_min
        if isinstance(seed, bool) or not isinstance(seed, int) or seed < 0:
            raise ValueError(f"seed {seed!r} is not valid: give an integer >= 0")
        if isinstance(batch, bool) or not isinstance(batch, int) or batch < 1:
            raise ValueError(f"global_batch {batch!r} is not valid: give an integer >= 1")
        if isinstance(p_min, int) and batch < p_min:
            # a trial's processes split the global batch, one example a step each at least
            raise ValueError(
                f"global_batch {batch} is smaller than p_min {p_min}, the GPUs every trial gets: "
                f"give global_batch >= {p_min}"
            )

    def as_dict(self) -> dict[str, Any]:
        return asdict(self)

    @classmethod
    def from_dict(cls, options: Mapping[str, Any]) -> SeerOptions:
        return cls(**options)

    def to_params(self) -> dict[str, Any]:
        """MLflow params ``seer.<option>`` (MLflow stores them as text)."""
        return {f"{PARAM_PREFIX}{k}": v for k, v in self.as_dict().items()}

    @classmethod
    def from_params(cls, params: Mapping[str, str]) -> SeerOptions | None:
        """The options `to_params` logged (unknown ``seer.*`` names ignored), or None when
        there are none (a plain job)."""
        prefix = PARAM_PREFIX
        raw = {k.removeprefix(prefix): v for k, v in params.items() if k.startswith(prefix)}
        if not raw:
            return None
        return cls(**{name: parse(raw[name]) for name, parse in _PARSE.items() if name in raw})

    def job(self, tenant: str, candidate: str, snapshot: int, job_id: str) -> SeerJob:
        """The trainers' SEER job of (`tenant`, `candidate`) on `snapshot` with these options."""
        from trainers.seer_runner import SeerJob

        return SeerJob(
            tenant,
            candidate,
            snapshot,
            job_id,
            self.deadline_min,
            self.budget_gpu_min,
            self.eta,
            self.v,
            self.p_min,
            math.inf if self.p_max is None else self.p_max,  # as given: errors name it so
            self.t_min,
            self.global_batch,
            self.seed,
            tuner="replan" if self.tuner == "replan" else "seer",
        )


# How each option reads back from its MLflow param text (`SeerOptions.from_params`).
_PARSE: dict[str, Callable[[str], Any]] = {
    "deadline_min": float,
    "budget_gpu_min": float,
    "eta": float,
    "v": float,
    "p_min": _int,
    "p_max": _int_or_none,
    "t_min": float,
    "global_batch": _int,
    "seed": _int,
    "tuner": str,
}


def seer_options_from_params(params: Mapping[str, str]) -> dict[str, Any] | None:
    """The SEER options of a job run from its ``seer.*`` params as `JobSpec.seer` holds them
    (None for a plain job), so a restarted scheduler re-sends an orphaned SEER job as one."""
    options = SeerOptions.from_params(params)
    return None if options is None else options.as_dict()


def derive_seer(
    expected_cost_s: float,
    *,
    budget_x: float,
    t_min: float = 1.0,
    p_max: int | None = None,
    tuner: str = "replan",
) -> SeerOptions:
    """The SEER job the scheduler hands a chosen (tenant, model): the deadline is the time the
    policy expects the model's plain job to take (its cost estimate, at least ``t_min``), the
    budget ``budget_x`` times that in GPU-minutes (Table 2 uses 4x and 16x)."""
    deadline = max(t_min, expected_cost_s / 60.0)
    return SeerOptions(deadline, budget_x * deadline, t_min=t_min, p_max=p_max, tuner=tuner)


def train_seer(spec: Any, store: ExampleStore, run: JobRun) -> TrainResult:
    """Run the SEER job of ``spec`` (a `tasks.JobSpec` with ``seer``), logging to its `run`."""
    from trainers.seer_runner import StageEvent, run_seer

    job = SeerOptions.from_dict(spec.seer).job(
        spec.tenant, spec.candidate, spec.snapshot, spec.job_id
    )
    run.log_text(json.dumps(job.plan().to_dict(), indent=2), "seer_plan.json")

    def on_stage(events: list[StageEvent]) -> None:
        k = events[0].stage
        for e in events:
            trial = run.start_trial(e.trial, e.hyperparameters)
            r = e.result
            trial.log_epoch(
                {
                    "val_accuracy": r.accuracy,
                    "gpus": e.gpus,
                    "steps": r.steps,
                    "train_loss": r.train_loss,
                    "start_s": r.start_s,
                    "checkpoint_s": r.checkpoint_s,
                },
                step=k,
            )
            for step, score in r.curve:  # within the stage (replan scores several times)
                trial.log_epoch({"curve_accuracy": score}, step=int(step))
            trial.set_tags({f"seer.stage{k}": e.outcome})
            if e.outcome in ("eliminated", "final"):
                trial.end(ok=True)
        run.log_epoch(
            {
                "seer.gpus": sum(e.gpus for e in events),
                "seer.best_accuracy": max(e.result.accuracy for e in events),
                "seer.trials": len(events),
            },
            step=k,
        )

    def on_decision(decisions: list[dict[str, Any]]) -> None:
        run.log_text(json.dumps(decisions, indent=2), "seer_decisions.json")

    return run_seer(job, store, on_stage, on_decision)


def seer_job_id(model: str, snapshot: int, opts: SeerOptions, deadline_at: str | None) -> str:
    """A `seer run` request's job id: its model, the snapshot and a digest of its options, the
    same each time the request is run again (so it resumes). A deadline given as a clock time
    (`deadline_at`, ISO) stands in the digest for the minutes left, which differ each time."""
    request: dict[str, Any] = opts.as_dict()
    if deadline_at is not None:
        request["deadline_min"] = deadline_at
    digest = hashlib.sha256(json.dumps(request, sort_keys=True).encode()).hexdigest()[:8]
    return f"seer-{model.replace('+', '_')}-s{snapshot}-{digest}"
