"""What a training job is given and what it returns, for every trainer family."""

from __future__ import annotations

import hashlib
import json
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

__all__ = ["LR_GRID", "EpochReport", "TrainJob", "TrainResult"]

#: learning-rate grid of shared/papers/000 Sec. 5.1, searched when a job gives no ``lr``
LR_GRID: tuple[float, ...] = (0.1, 0.01, 0.001, 0.0001)

HyperValue = float | int | str | bool


#: the share of a tenant's examples every job validates on (a seeded, stratified split); the
#: policy knows a validation accuracy's noise from it (``policy.Problem.val_sizes``)
VAL_FRACTION = 0.2


@dataclass(frozen=True)
class TrainJob:
    """Train `candidate` (a `trainers.templates.Candidate` name) for `tenant` on `snapshot`.

    `hyperparameters`: torch families take ``lr`` (else the grid {0.1, 0.01, 0.001, 0.0001} of
    Sec. 5.1 is searched), ``batch_size``, ``optimizer`` (``sgd`` | ``adam`` | ``adamw``; default
    AdamW for image classifiers, Adam otherwise), ``weight_decay``, ``augment`` (image
    classifiers: random shifts, default on; `trainers.torch_trainer`); scikit-learn families
    take the estimator's own parameters (a tabular portfolio member's settings first).
    `time_budget_s` stops training early (the best model so far is returned); `max_epochs`
    caps each learning rate's run.
    `job_id` names the checkpoint: starting a job with the same id again resumes it.
    """

    tenant: str
    candidate: str
    snapshot: int | None = None
    hyperparameters: Mapping[str, HyperValue] = field(default_factory=dict)
    time_budget_s: float | None = None
    max_epochs: int = 10
    seed: int = 0
    val_fraction: float = VAL_FRACTION
    job_id: str | None = None
    device: str | None = None

    def validate(self) -> None:
        if self.max_epochs < 1:
            raise ValueError(f"max_epochs={self.max_epochs} is not valid: use 1 or more")
        if not 0.0 < self.val_fraction < 1.0:
            raise ValueError(f"val_fraction={self.val_fraction} is not valid: use (0, 1)")
        if self.time_budget_s is not None and self.time_budget_s <= 0:
            raise ValueError(f"time_budget_s={self.time_budget_s} is not valid: use > 0 or None")

    def resolved_id(self, snapshot: int) -> str:
        """`job_id`, or one derived from everything that defines the job's outcome."""
        if self.job_id is not None:
            return self.job_id
        spec = json.dumps(
            [
                self.candidate,
                snapshot,
                dict(sorted(self.hyperparameters.items())),
                self.max_epochs,
                self.seed,
                self.val_fraction,
                self.time_budget_s,
            ],
            default=str,
        )
        digest = hashlib.sha256(spec.encode()).hexdigest()[:12]
        return f"{self.candidate.replace('+', '_')}-s{snapshot}-{digest}"


@dataclass(frozen=True)
class EpochReport:
    """Sent to `on_epoch` after each epoch (and stored in the result's `curve`)."""

    lr: float
    epoch: int
    train_loss: float
    val_accuracy: float
    elapsed_s: float


@dataclass
class TrainResult:
    """`accuracy`: validation accuracy (R^2 clipped at 0 for tensor outputs) of the best model;
    `cost_s`: device-seconds spent, over every start of the job; `epochs`: epochs run in total."""

    job_id: str
    tenant: str
    candidate: str
    snapshot: int
    accuracy: float
    cost_s: float
    epochs: int
    hyperparameters: dict[str, HyperValue]
    model: Any  # trainers.TrainedModel
    curve: list[EpochReport] = field(default_factory=list)
    device: str = "cpu"
    resumed_from_epoch: int = 0
    n_train: int = 0
    n_val: int = 0
    steps: int = 0  # optimizer steps over every start of the job
