"""A snapshot's training and validation split as torch trains on it; shared by the torch trainer
(`trainers.torch_trainer`) and the ranks of a SEER trial (`trainers._trial_rank`); and the
random shifts by which the torch trainer translates the training images of image classifiers
(`random_shifts`, applied by `trainers.nets.Preprocess`).
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

import numpy as np
import torch
from numpy.typing import NDArray

from store import Dataset
from trainers._data import split
from trainers.nets import TenantNet

__all__ = ["MAX_SHIFT", "RESIDENT_MAX_BYTES", "TrainingData", "random_shifts"]

#: The largest training split (inputs and targets, in bytes) that a job keeps on its GPU from
#: start to end (`TrainingData.keep_on`). Below it, every step indexes the GPU's copy; above it
#: (or on the CPU), every step copies its rows from host memory, and a copy from pageable host
#: memory first waits for the stream's queued work (CUDA runtime API, "API synchronization
#: behavior"): the host cannot queue the next step while the GPU runs this one. On an H100 a
#: LeNet-5 job on MNIST's 1,500 images made 304 steps/s with such copies, against this 2-core
#: CPU's 464 (`infra/scripts/time_torch_jobs.py`, docs/live.md "On a GPU"); what keeping the
#: split on the GPU gains there is not measured yet.
RESIDENT_MAX_BYTES = 1 << 30

#: Largest random translation of a training image, as a fraction of its height and of its width:
#: +-0.5 pixel on the 8x8 digits, +-1.75 pixels at MNIST's 28x28, in the range of the small
#: shifts and distortions that are common practice for handwritten digits (Simard, Steinkraus &
#: Platt, ICDAR 2003). On the digits (LeNet-5, AdamW at 0.01, 10 epochs of two passes, 8 seeds)
#: 1/16 and 1/8 (CIFAR's 4 of 32 pixels) both reached 0.991 mean test accuracy, the lowest
#: 0.987 and 0.984; with one pass per epoch 1/16 did better (4 seeds: 0.987-0.993 against
#: 0.978-0.989).
MAX_SHIFT = 1.0 / 16.0


@dataclass(frozen=True, eq=False)  # eq=False: comparing would compare arrays element-wise
class TrainingData:
    """The seeded train/validation split of one snapshot.

    Shapes (``S``: the schema's input shape; sequences zero-padded to ``(T_max, *S)``):
    ``x_tr`` ``(n_train, *S)``; ``y_tr`` ``(n_train,)`` class indices (``classify``) or
    ``(n_train, *S_out)``; ``len_tr`` ``(n_train,)`` sequence lengths or ``None``. The
    validation split ``x_va``, ``y_va``, ``len_va`` likewise, kept as numpy arrays since they
    only go through `trainers.torch_trainer.infer_batches`.
    """

    classify: bool
    x_tr: torch.Tensor
    y_tr: torch.Tensor
    len_tr: torch.Tensor | None
    x_va: NDArray[Any]
    y_va: NDArray[Any]
    len_va: NDArray[np.int64] | None
    #: ``x_tr``, ``y_tr`` copied to a GPU by `keep_on` (at most one copy: a job has one device)
    _resident: list[tuple[torch.Tensor, torch.Tensor]] = field(default_factory=list, repr=False)

    @classmethod
    def split(cls, ds: Dataset, val_fraction: float, seed: int, classify: bool) -> TrainingData:
        """`trainers._data.split` of ``ds`` (stratified for classes), as tensors for training."""
        tr, va = split(ds, val_fraction, seed, classify)
        return cls(
            classify=classify,
            x_tr=torch.from_numpy(ds.x[tr]),
            y_tr=torch.from_numpy(ds.y[tr]),
            len_tr=None if ds.lengths is None else torch.from_numpy(ds.lengths[tr]),
            x_va=ds.x[va],
            y_va=ds.y[va],
            len_va=None if ds.lengths is None else ds.lengths[va],
        )

    @property
    def n_train(self) -> int:
        return len(self.x_tr)

    @property
    def n_val(self) -> int:
        return len(self.x_va)

    def keep_on(self, device: torch.device, max_bytes: int = RESIDENT_MAX_BYTES) -> torch.device:
        """Copy the training split to `device` once, when it is not the CPU, the split's inputs
        and targets take at most `max_bytes`, and it has no sequence lengths (packing wants
        them on the CPU, so a sequence batch's rows would come back every step); returns where
        `train_batch`'s rows should be: the copy's device (``cuda:0`` for ``cuda``), else the
        CPU."""
        if not self._resident:
            too_big = self.x_tr.nbytes + self.y_tr.nbytes > max_bytes
            if device.type == "cpu" or too_big or self.len_tr is not None:
                return torch.device("cpu")
            self._resident.append((self.x_tr.to(device), self.y_tr.to(device)))
        return self._resident[0][0].device

    def train_batch(
        self, rows: torch.Tensor, device: torch.device
    ) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor | None]:
        """Training rows ``rows`` ``(b,)``: inputs ``(b, *S)`` and targets on ``device``, and
        their lengths ``(b,)`` (on the CPU, where packing wants them) or ``None``. Rows on the
        device that `keep_on` copied the split to index that copy (nothing crosses from the
        host); rows on the CPU are copied from host memory."""
        lengths = None if self.len_tr is None else self.len_tr[rows.cpu()]
        if self._resident and rows.device == self._resident[0][0].device:
            x, y = self._resident[0]
            return x[rows], y[rows], lengths
        xb = self.x_tr[rows].to(device, non_blocking=True)
        yb = self.y_tr[rows].to(device, non_blocking=True)
        return xb, yb, lengths

    def fit_normalisation(self, net: TenantNet) -> None:
        """Fit ``net``'s input preprocessing to the training inputs and, for tensor outputs,
        its target scaling to the training targets' mean and std (the loss is on z-scores)."""
        net.pre.fit(self.x_tr, self.len_tr)
        if not self.classify:
            net.out_mean.fill_(float(self.y_tr.float().mean()))
            net.out_std.fill_(float(self.y_tr.float().std().clamp_min(1e-6)))

    def score(self, pred: NDArray[Any]) -> float:
        """Validation score of ``pred`` (logits ``(n_val, K)``, or tensors in target units):
        accuracy for classes; for tensors R^2 = 1 - SSE/SST, clipped at 0."""
        y = self.y_va
        if self.classify:
            return float((pred.argmax(1) == y).mean())
        sst = float(((y - y.mean()) ** 2).sum())
        return max(0.0, 1.0 - float(((pred - y) ** 2).sum()) / max(sst, 1e-12))


def random_shifts(n: int, max_shift: float, generator: torch.Generator) -> torch.Tensor:
    """``(n, 2)`` translations, uniform in ``[-max_shift, max_shift]``: per image, the shift to
    the right as a fraction of its width and the shift down as a fraction of its height."""
    return (2.0 * torch.rand(n, 2, generator=generator) - 1.0) * max_shift
