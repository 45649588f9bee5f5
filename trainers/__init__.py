"""Schema -> candidate models (Fig. 4), the model zoo, and one `train(job, store)` per family.

Torch is imported only when a torch model is trained or loaded.
"""

from __future__ import annotations

from collections.abc import Callable

from store import ExampleStore
from trainers._data import InferenceBatch, encode_batch
from trainers._job import (
    CV_FOLDS,
    CV_MAX_EXAMPLES,
    CV_WORK,
    LR_GRID,
    VAL_FRACTION,
    EpochReport,
    TrainJob,
    TrainResult,
    cost_size,
    cross_validates,
    validation_size,
)
from trainers._model import TrainedModel
from trainers.templates import (
    NORMALIZATION_KS,
    PIXEL_MODELS,
    TEMPLATES,
    Candidate,
    NoCandidatesError,
    candidates,
    match,
    torch_candidates,
)
from trainers.zoo import ZOO, ModelSpec

__all__ = [
    "CV_FOLDS",
    "CV_MAX_EXAMPLES",
    "CV_WORK",
    "LR_GRID",
    "NORMALIZATION_KS",
    "PIXEL_MODELS",
    "TEMPLATES",
    "ZOO",
    "Candidate",
    "EpochReport",
    "InferenceBatch",
    "ModelSpec",
    "NoCandidatesError",
    "TrainJob",
    "VAL_FRACTION",
    "TrainResult",
    "TrainedModel",
    "candidates",
    "cost_size",
    "cross_validates",
    "encode_batch",
    "match",
    "torch_candidates",
    "train",
    "validation_size",
]


def train(
    job: TrainJob, store: ExampleStore, on_epoch: Callable[[EpochReport], None] | None = None
) -> TrainResult:
    """Train (or resume) `job` with the trainer of its model's family."""
    if Candidate.parse(job.candidate).spec.family == "sklearn":
        from trainers.sklearn_trainer import train_sklearn

        return train_sklearn(job, store, on_epoch)
    from trainers.torch_trainer import train_torch

    return train_torch(job, store, on_epoch)
