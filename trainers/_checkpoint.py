"""Typed checkpoints of the torch trainers: `JobCheckpoint` (one `TrainJob`) and `TrialCheckpoint`
(one SEER trial, across its stages).

In code a checkpoint is a frozen dataclass, advanced with `dataclasses.replace`; in the store it
is ``torch.save`` of a flat ``dict`` of tensors, numbers, strings and lists, the only things
``torch.load(..., weights_only=True)`` will read back. The dict keeps the keys of format 1, so
readers that look at a single key (``epochs_total``, ``steps_total``, ``model``) keep working and
a checkpoint written before these types existed loads as it is.

Torch is imported only when a checkpoint is written or read, so `trainers.elastic` can import
this module in a parent process that never trains.
"""

from __future__ import annotations

import io
from dataclasses import asdict, dataclass
from typing import Any

from trainers._job import EpochReport

__all__ = [
    "CHECKPOINT_FORMAT",
    "EPOCH_START",
    "EpochPosition",
    "JobCheckpoint",
    "TrialCheckpoint",
]

#: the ``"format"`` key of every checkpoint this module writes; another value is refused
CHECKPOINT_FORMAT = 1

#: ``nn.Module.state_dict()`` / ``Optimizer.state_dict()``: names -> tensors (and plain values)
StateDict = dict[str, Any]


def _save(payload: dict[str, Any]) -> bytes:
    import torch

    buf = io.BytesIO()
    torch.save(payload, buf)
    return buf.getvalue()


def _load(blob: bytes, source: str, required: tuple[str, ...]) -> dict[str, Any]:
    """The dict in ``blob`` (tensors on the CPU), after checking its format and that it has the
    ``required`` keys; ``source`` names the checkpoint in the error."""
    import torch

    saved = torch.load(io.BytesIO(blob), weights_only=True, map_location="cpu")
    found = saved.get("format") if isinstance(saved, dict) else type(saved).__name__
    if found != CHECKPOINT_FORMAT:
        raise ValueError(
            f"{source} has format {found!r}; this trainer reads format {CHECKPOINT_FORMAT}"
        )
    missing = [k for k in required if k not in saved]
    if missing:
        raise ValueError(f"{source} lacks {missing}: it is not a checkpoint of this kind")
    return dict(saved)


@dataclass(frozen=True)
class EpochPosition:
    """How far the current epoch got before a revocation notice stopped it.

    ``next_batch``: index of the first batch still to run in the epoch's seeded order;
    ``loss_sum`` and ``batches``: the summed loss and the number of batches already run, so the
    resumed epoch reports the same mean loss an uninterrupted one would. ``EpochPosition()`` is
    the start of an epoch.
    """

    next_batch: int = 0
    loss_sum: float = 0.0
    batches: int = 0


#: the start of an epoch (nothing run yet)
EPOCH_START = EpochPosition()


#: keys every job checkpoint of format 1 has had (the others came later and have defaults)
_JOB_KEYS = (
    "job_id",
    "snapshot",
    "lr_index",
    "epoch",
    "model",
    "opt",
    "best_acc",
    "best_lr",
    "best_model",
    "curve",
    "cost_s",
    "epochs_total",
    "done",
)


@dataclass(frozen=True, eq=False)  # eq=False: comparing would compare tensors element-wise
class JobCheckpoint:
    """Everything `train_torch` needs to continue a job where it stopped.

    ``lr_index``: position in the job's learning-rate grid of the rate being trained;
    ``epoch``: epochs finished at that rate; ``model`` / ``opt``: its net's and optimizer's state
    (``None`` before the rate's first epoch); ``best_*``: the best validation score over all
    rates and epochs, its rate and its weights (on the CPU); ``curve``: one report per finished
    epoch; ``cost_s``: device-seconds over every start of the job; ``epochs_total`` /
    ``steps_total``: epochs finished and optimizer steps taken, all rates together; ``done``:
    nothing is left to train; ``position``: how far the unfinished epoch got (mid-epoch
    checkpoints, written on a revocation notice, only).
    """

    job_id: str
    snapshot: int
    best_lr: float
    lr_index: int = 0
    epoch: int = 0
    model: StateDict | None = None
    opt: StateDict | None = None
    best_acc: float = -1.0
    best_model: StateDict | None = None
    curve: tuple[EpochReport, ...] = ()
    cost_s: float = 0.0
    epochs_total: int = 0
    steps_total: int = 0
    done: bool = False
    position: EpochPosition = EPOCH_START

    def to_bytes(self) -> bytes:
        """``torch.save`` of the format-1 dict (flat keys, the curve as a list of dicts)."""
        return _save(
            {
                "format": CHECKPOINT_FORMAT,
                "job_id": self.job_id,
                "snapshot": self.snapshot,
                "lr_index": self.lr_index,
                "epoch": self.epoch,
                "model": self.model,
                "opt": self.opt,
                "best_acc": self.best_acc,
                "best_lr": self.best_lr,
                "best_model": self.best_model,
                "curve": [asdict(report) for report in self.curve],
                "cost_s": self.cost_s,
                "epochs_total": self.epochs_total,
                "done": self.done,
                "batch": self.position.next_batch,
                "partial_loss": self.position.loss_sum,
                "partial_batches": self.position.batches,
                "steps_total": self.steps_total,
            }
        )

    @classmethod
    def from_bytes(cls, blob: bytes, source: str = "job checkpoint") -> JobCheckpoint:
        """The checkpoint `to_bytes` wrote. Keys added after format 1 began (the mid-epoch
        position, ``steps_total``) default to "none yet", as the format-1 reader did.

        Raises:
            ValueError: ``blob`` is not a format-1 checkpoint.
        """
        d = _load(blob, source, _JOB_KEYS)
        return cls(
            job_id=str(d["job_id"]),
            snapshot=int(d["snapshot"]),
            lr_index=int(d["lr_index"]),
            epoch=int(d["epoch"]),
            model=d["model"],
            opt=d["opt"],
            best_acc=float(d["best_acc"]),
            best_lr=float(d["best_lr"]),
            best_model=d["best_model"],
            curve=tuple(EpochReport(**c) for c in d["curve"]),
            cost_s=float(d["cost_s"]),
            epochs_total=int(d["epochs_total"]),
            steps_total=int(d.get("steps_total", 0)),
            done=bool(d["done"]),
            position=EpochPosition(
                next_batch=int(d.get("batch", 0)),
                loss_sum=float(d.get("partial_loss", 0.0)),
                batches=int(d.get("partial_batches", 0)),
            ),
        )


@dataclass(frozen=True, eq=False)  # eq=False: comparing would compare tensors element-wise
class TrialCheckpoint:
    """A SEER trial after a stage: its net's and optimizer's state, the global ``step`` count
    (all stages; it fixes the data order, see `trainers.elastic`) and the seconds spent
    training (``train_s``, all stages). Written by rank 0, read by every rank of the next stage.

    ``best``: the trial's best stage end so far, ``(validation score, step)``: this state
    when the step is ``step``, else the copy kept under ``BEST_SUFFIX``
    (`trainers.elastic.kept_best`). None in checkpoints written before it was kept."""

    model: StateDict
    opt: StateDict
    step: int
    train_s: float
    best: tuple[float, int] | None = None

    def to_bytes(self) -> bytes:
        d: dict[str, Any] = {
            "format": CHECKPOINT_FORMAT,
            "model": self.model,
            "opt": self.opt,
            "step": self.step,
            "train_s": self.train_s,
        }
        if self.best is not None:
            d["best_score"], d["best_step"] = float(self.best[0]), int(self.best[1])
        return _save(d)

    @classmethod
    def from_bytes(cls, blob: bytes, source: str = "trial checkpoint") -> TrialCheckpoint:
        """Raises ValueError when ``blob`` is not a format-1 trial checkpoint."""
        d = _load(blob, source, ("model", "opt", "step", "train_s"))
        best = (float(d["best_score"]), int(d["best_step"])) if "best_score" in d else None
        return cls(model=d["model"], opt=d["opt"], step=int(d["step"]),
                   train_s=float(d["train_s"]), best=best)  # fmt: skip
