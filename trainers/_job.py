"""What a training job is given and what it returns, for every trainer family."""

from __future__ import annotations

import hashlib
import json
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

__all__ = [
    "CV_FOLDS",
    "CV_MAX_EXAMPLES",
    "CV_WORK",
    "LR_GRID",
    "VAL_FRACTION",
    "EpochReport",
    "TrainJob",
    "TrainResult",
    "cost_size",
    "cross_validates",
    "validation_size",
]

#: learning-rate grid of shared/papers/000 Sec. 5.1, searched when a job gives no ``lr``
LR_GRID: tuple[float, ...] = (0.1, 0.01, 0.001, 0.0001)

HyperValue = float | int | str | bool


#: the share of a tenant's examples every job validates on (a seeded, stratified split); the
#: policy knows a validation accuracy's noise from it (``policy.Problem.val_sizes``)
VAL_FRACTION = 0.2

#: a scikit-learn job on at most this many examples is scored by `CV_FOLDS`-fold stratified
#: cross-validation (its out-of-fold accuracy on every example) and its model refitted on all
#: of them: a small tenant's 20 % (32 rows on crabs) is a noisy judge, and 25 % more rows is a
#: better model (`trainers.sklearn_trainer`); above it, the fits cost more than the noise does
CV_MAX_EXAMPLES = 1000
#: the folds of that cross-validation: each fold's model trains on 80 %, as a holdout job's does
CV_FOLDS = 5


def cross_validates(n_examples: int, min_class_count: int | None = None) -> bool:
    """Whether a scikit-learn job on `n_examples` (its smallest class `min_class_count`, if
    known) is cross-validated: at most `CV_MAX_EXAMPLES`, and every class in every fold."""
    small = 2 * CV_FOLDS <= n_examples <= CV_MAX_EXAMPLES
    return small and (min_class_count is None or min_class_count >= CV_FOLDS)


#: a cross-validated job's fits, in examples, over a holdout job's: `CV_FOLDS` fits on
#: ``(1 - 1/CV_FOLDS) n`` and one on ``n``, against one on ``(1 - VAL_FRACTION) n`` (6.25)
CV_WORK = (CV_FOLDS * (1 - 1 / CV_FOLDS) + 1) / (1 - VAL_FRACTION)


def cost_size(n_examples: int, tabular: bool) -> float:
    """The size a job's cost scales with, in examples of a holdout job: `CV_WORK` times the
    examples when the job is cross-validated (a small tabular tenant, `cross_validates`), else
    the examples (`tasks._service.build_problem`'s cost model; `trainers.zoo.RELATIVE_COST`
    is in seconds per 1,000 of them)."""
    return n_examples * (CV_WORK if tabular and cross_validates(n_examples) else 1.0)


def validation_size(n_examples: int, tabular: bool) -> int:
    """How many examples a tenant's validation accuracy is measured on: all of them for a
    tabular tenant's cross-validated jobs (`cross_validates`), else its `VAL_FRACTION` (at
    least 1)."""
    if tabular and cross_validates(n_examples):
        return n_examples
    return max(1, round(VAL_FRACTION * n_examples))


@dataclass(frozen=True)
class TrainJob:
    """Train `candidate` (a `trainers.templates.Candidate` name) for `tenant` on `snapshot`.

    `hyperparameters`: torch families take ``lr`` (else the grid {0.1, 0.01, 0.001, 0.0001} of
    Sec. 5.1 is searched), ``batch_size``, ``optimizer`` (``sgd`` | ``adam`` | ``adamw``; default
    AdamW for image classifiers, Adam otherwise), ``weight_decay``, ``augment`` (image
    classifiers: random shifts, default on; `trainers.torch_trainer`); scikit-learn families
    take the estimator's own parameters (a tabular portfolio member's settings first).
    `val_fraction`: the validation share (a scikit-learn job on a small tenant is
    cross-validated instead: `cross_validates`).
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
    """`accuracy`: validation accuracy (R^2 clipped at 0 for tensor outputs) of the best model,
    out-of-fold on all `n_val` examples for a cross-validated job (`cross_validates`);
    `cost_s`: device-seconds spent, over every start of the job; `epochs`: epochs run in total;
    `n_train`: examples the returned model was fitted on."""

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
