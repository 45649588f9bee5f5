"""Data for training and inference: the validation split and schema-checked inference inputs."""

from __future__ import annotations

from typing import Any

import numpy as np
from numpy.typing import NDArray
from sklearn.model_selection import train_test_split

from store import Dataset
from store._codec import encode_inputs
from store.schema import Schema

__all__ = ["encode_for_inference", "pad", "split"]


def split(
    ds: Dataset, val_fraction: float, seed: int, stratify: bool
) -> tuple[NDArray[np.int64], NDArray[np.int64]]:
    """Seeded train/validation indices; stratified by class when every class has 2+ examples."""
    n = len(ds)
    if n < 2:
        raise ValueError(
            f"snapshot {ds.version} has {n} enabled examples; training needs 2 or more"
        )
    idx = np.arange(n)
    labels = None
    if stratify:
        _, counts = np.unique(ds.y, return_counts=True)
        n_val = max(1, round(val_fraction * n))
        if counts.min() >= 2 and len(counts) <= n_val and len(counts) <= n - n_val:
            labels = ds.y
    tr, va = train_test_split(idx, test_size=val_fraction, random_state=seed, stratify=labels)
    return np.sort(tr), np.sort(va)


def pad(values: NDArray[Any], lengths: NDArray[np.int64]) -> NDArray[Any]:
    """``(sum T_i, *S)`` + ``lengths (n,)`` -> zero-padded ``(n, T_max, *S)``."""
    out = np.zeros((len(lengths), int(lengths.max()), *values.shape[1:]), dtype=values.dtype)
    for i, part in enumerate(np.split(values, np.cumsum(lengths)[:-1])):
        out[i, : len(part)] = part
    return out


def encode_for_inference(
    schema: Schema, inputs: Any
) -> tuple[NDArray[Any], NDArray[np.int64] | None]:
    """The same checks `feed` applies (shape, finite values), then the training layout."""
    enc = encode_inputs(schema, inputs)
    if enc.lengths is None:
        return enc.values, None
    return pad(enc.values, enc.lengths), enc.lengths
