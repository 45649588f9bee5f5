"""Data for training and inference: the validation split and schema-checked inference inputs.

Inference inputs are encoded once (`encode_batch`): the checks `feed` applies, then the layout the
networks were trained on, as an `InferenceBatch`. Encoding a batch again is free: an
`InferenceBatch` passes through, and padded sequences already in that layout are only checked.
"""

from __future__ import annotations

import operator
from dataclasses import dataclass
from typing import Any

import numpy as np
from numpy.typing import NDArray

from store import BadExampleError, Dataset, encode_inputs
from store.schema import Schema

__all__ = ["InferenceBatch", "encode_batch", "encode_for_inference", "pad", "split"]


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
    from sklearn.model_selection import train_test_split

    tr, va = train_test_split(idx, test_size=val_fraction, random_state=seed, stratify=labels)
    return np.sort(tr), np.sort(va)


def pad(values: NDArray[Any], lengths: NDArray[np.int64]) -> NDArray[Any]:
    """``(sum T_i, *S)`` + ``lengths (n,)`` -> zero-padded ``(n, T_max, *S)``."""
    out = np.zeros((len(lengths), int(lengths.max()), *values.shape[1:]), dtype=values.dtype)
    for i, part in enumerate(np.split(values, np.cumsum(lengths)[:-1])):
        out[i, : len(part)] = part
    return out


@dataclass(frozen=True)
class InferenceBatch:
    """Inputs checked and laid out for a network: `x` ``(n, *S)``, or for sequences zero-padded
    ``(n, T_max, *S)`` with `lengths` ``(n,)`` (``T_max = max(lengths)``); uint8 or float32."""

    x: NDArray[Any]
    lengths: NDArray[np.int64] | None


def encode_batch(schema: Schema, inputs: Any, lengths: Any = None) -> InferenceBatch:
    """`inputs` with the checks `feed` applies (shape, finite values; errors name the example),
    in the training layout. Sequences come as a list of ``(T_i, *S)`` arrays, or padded
    ``(n, T_max, *S)`` with `lengths` ``(n,)`` (each row cut to its length first).

    An `InferenceBatch` is returned as it is, and padded float32 sequences already in the
    layout (finite, zeros past each length, no longer than the longest) are only checked."""
    if isinstance(inputs, InferenceBatch):
        return inputs
    try:
        return _encode_batch(schema, inputs, lengths)
    except BadExampleError as e:  # its message said "nothing was stored", which is a feed's
        raise e.for_inference() from None


def _encode_batch(schema: Schema, inputs: Any, lengths: Any) -> InferenceBatch:
    if lengths is not None:
        _check_lengths(inputs, lengths)
        laid_out = _padded_batch(schema, inputs, lengths)
        if laid_out is not None:
            return laid_out
        inputs = [np.asarray(row)[: int(t)] for row, t in zip(inputs, lengths, strict=True)]
    enc = encode_inputs(schema, inputs)
    if enc.lengths is None:
        return InferenceBatch(enc.values, None)
    return InferenceBatch(pad(enc.values, enc.lengths), enc.lengths)


def _check_lengths(inputs: Any, lengths: Any) -> None:
    """Padded sequences' `lengths`: one per row, each an integer in 1..the row's steps (a
    negative or too large one was cut Python-style: ``-1`` kept all but the last step)."""
    if len(lengths) != len(inputs):
        raise ValueError(f"{len(lengths)} lengths for {len(inputs)} inputs: give one per input")
    for i, (row, t) in enumerate(zip(inputs, lengths, strict=True)):
        steps = len(np.asarray(row))
        try:  # an integer of any kind (a numpy or torch one too), or a float that is whole
            n = operator.index(t) if not isinstance(t, float | np.floating) else int(t)
            whole = not isinstance(t, bool | np.bool_) and (n == t)
        except (TypeError, ValueError, OverflowError):
            whole = False
        if not whole or not 1 <= n <= steps:
            raise BadExampleError(
                i, f"length {t!r} is not an integer in 1..{steps} (its row's steps)", "input"
            )


def encode_for_inference(
    schema: Schema, inputs: Any
) -> tuple[NDArray[Any], NDArray[np.int64] | None]:
    """`encode_batch` as ``(x, lengths)``."""
    batch = encode_batch(schema, inputs)
    return batch.x, batch.lengths


def _padded_batch(schema: Schema, x: Any, lengths: Any) -> InferenceBatch | None:
    """`x` and `lengths` as they are (a view) when they are exactly what `encode_batch` would
    make of them; None otherwise (then the rows are cut and encoded as usual)."""
    field = schema.input.single
    if field is None or not schema.input.is_sequence:
        return None
    if not isinstance(x, np.ndarray) or x.dtype != np.float32 or len(x) == 0:
        return None
    if x.ndim != len(field.shape) + 2 or x.shape[2:] != field.shape:
        return None
    lens = np.asarray(lengths)
    if lens.dtype.kind not in "iu" or lens.shape != (len(x),):
        return None
    if lens.min() < 1 or lens.max() > x.shape[1] or not np.isfinite(x).all():
        return None
    if any(row[t:].any() for row, t in zip(x, lens, strict=True)):
        return None  # something past a length: cut and zero-padded again
    t_max = int(lens.max())
    if t_max < x.shape[1]:  # padded wider than needed: cut to the longest (a copy)
        x = np.ascontiguousarray(x[:, :t_max])
    return InferenceBatch(x, lens.astype(np.int64, copy=False))
