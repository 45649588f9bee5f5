"""Schema-checked encoding of examples into arrays, and the errors bad input gets.

Notation: a batch has ``n`` examples. For a data type whose one tensor field has shape ``S``:

* non-recursive: the batch encodes as one array ``(n, *S)``;
* a sequence (one recursive field, e.g. ``next``): example ``i`` is an array ``(T_i, *S)``,
  ``T_i >= 1``; the batch encodes as the concatenation ``(sum T_i, *S)`` plus ``lengths (n,)``.

Class outputs (a single 1-D ``Tensor[D]`` with no recursive fields, Fig. 4 rows 1, 3, 5) are
labels: an int in ``[0, D)`` or a class name; names are given indices in order of first appearance
and kept in the tenant's manifest, so at most ``D`` distinct names are accepted.

Every check names the example index and the reason; one bad example rejects the whole batch.
"""

from __future__ import annotations

import unicodedata
from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np
from numpy.typing import NDArray

from store.schema import DataType, Schema

__all__ = [
    "BadExampleError",
    "Encoded",
    "conform_inputs",
    "encode_inputs",
    "encode_labels",
    "is_class_output",
]


def _breaks_lines(text: str) -> bool:
    """Whether `text` holds a control character or a line or paragraph separator (what breaks
    a tab-separated line); a no-break space, an ideographic space or a joiner does not."""
    return any(unicodedata.category(ch) in ("Cc", "Zl", "Zp") for ch in text)


class BadExampleError(ValueError):
    """A batch was rejected; `index` is the first bad example (0-based), `reason` says why, and
    `outcome` what became of the batch (a feed stores nothing; `for_inference`: a prediction
    predicts nothing)."""

    def __init__(
        self, index: int, reason: str, side: str = "input", outcome: str = "nothing was stored"
    ) -> None:
        self.index = index
        self.reason = reason
        self.side = side
        self.outcome = outcome
        super().__init__(f"example {index} rejected ({side}): {reason}; {outcome}")

    def for_inference(self) -> BadExampleError:
        """The same rejection of an inference batch, of which nothing was predicted."""
        return BadExampleError(self.index, self.reason, self.side, "nothing was predicted")


@dataclass(frozen=True)
class Encoded:
    """`values` ``(n, *S)`` or ``(sum T_i, *S)``; `lengths` ``(n,)`` for sequences else None."""

    values: NDArray[Any]
    lengths: NDArray[np.int64] | None

    def __len__(self) -> int:
        return len(self.lengths) if self.lengths is not None else len(self.values)


def is_class_output(schema: Schema) -> bool:
    """Whether outputs are class labels: one 1-D tensor field and no recursive fields."""
    out = schema.output
    return out.single is not None and len(out.single.shape) == 1 and not out.recursive


def _field_shape(dt: DataType, side: str) -> tuple[int, ...]:
    if dt.single is None:
        raise ValueError(
            f"the {side} data type {dt} has {len(dt.fields)} tensor fields; the store holds data "
            "types with exactly one tensor field (plus recursive fields) for now"
        )
    if len(dt.recursive) > 1:
        raise ValueError(
            f"the {side} data type {dt} is a tree ({len(dt.recursive)} recursive fields); "
            "feeding trees is not supported yet: use one recursive field (a sequence) or none"
        )
    return dt.single.shape


def _as_float(item: Any, index: int, side: str, check_finite: bool = True) -> NDArray[Any]:
    try:
        arr = np.asarray(item)
    except (ValueError, TypeError) as e:
        raise BadExampleError(index, f"not an array ({e})", side) from None
    if arr.dtype == np.uint8:
        return arr
    if arr.dtype.kind not in "biuf":
        raise BadExampleError(index, f"values of dtype {arr.dtype} are not numbers", side)
    with np.errstate(over="ignore"):  # beyond float32's range becomes inf, rejected below
        arr = arr.astype(np.float32, copy=False)
    if check_finite and not np.isfinite(arr).all():
        raise BadExampleError(index, "contains NaN or inf (or a value beyond float32)", side)
    return arr


def require_batch(value: Any, side: str) -> None:
    """`value` must hold one entry per example (a sequence, iterator or array of rank >= 1)."""
    scalar = isinstance(value, np.ndarray) and value.ndim == 0
    if scalar or isinstance(value, str | bytes) or not isinstance(value, Iterable):
        raise ValueError(
            f"{side}s must be a sequence or array with one entry per example, "
            f"not {type(value).__name__} {str(value)[:40]!r}"
        )


def encode_values(dt: DataType, items: Any, side: str = "input") -> Encoded:
    """Check each example against `dt` and encode the batch (see the module docstring)."""
    shape = _field_shape(dt, side)
    require_batch(items, side)
    if dt.is_sequence:
        parts, lengths = [], []
        for i, item in enumerate(items):
            arr = _as_float(item, i, side)
            if arr.ndim != len(shape) + 1 or arr.shape[1:] != shape or arr.shape[0] < 1:
                raise BadExampleError(
                    i,
                    f"shape {arr.shape} is not (T, {', '.join(map(str, shape))}) with T >= 1",
                    side,
                )
            parts.append(arr)
            lengths.append(arr.shape[0])
        if not parts:
            raise ValueError("the batch is empty: give at least one example")
        dtype = np.uint8 if all(p.dtype == np.uint8 for p in parts) else np.float32
        values = np.concatenate([p.astype(dtype, copy=False) for p in parts])
        return Encoded(values, np.asarray(lengths, dtype=np.int64))
    if isinstance(items, np.ndarray) and items.dtype.kind in "biuf":
        if items.ndim != len(shape) + 1 or items.shape[1:] != shape:
            raise BadExampleError(
                0, f"batch shape {items.shape} is not (n, {', '.join(map(str, shape))})", side
            )
        if len(items) == 0:  # before the checks: an empty batch is that, not a shape error
            raise ValueError("the batch is empty: give at least one example")
        arr = _as_float(items, 0, side, check_finite=False)
        if arr.dtype != np.uint8:
            bad = ~np.isfinite(arr.reshape(len(arr), -1)).all(axis=1)
            if bad.any():
                raise BadExampleError(int(np.argmax(bad)), "contains NaN or inf", side)
        return Encoded(arr, None)
    rows = []
    for i, item in enumerate(items):
        arr = _as_float(item, i, side)
        if arr.shape != shape:
            raise BadExampleError(
                i, f"shape {arr.shape} is not ({', '.join(map(str, shape))})", side
            )
        rows.append(arr)
    if not rows:
        raise ValueError("the batch is empty: give at least one example")
    dtype = np.uint8 if all(r.dtype == np.uint8 for r in rows) else np.float32
    return Encoded(np.stack([r.astype(dtype, copy=False) for r in rows]), None)


def encode_inputs(schema: Schema, items: Any) -> Encoded:
    return encode_values(schema.input, items, "input")


def conform_inputs(x: Encoded, dtype: str) -> Encoded:
    """`x` in the tenant's input dtype (`Manifest.input_dtype`): a ``uint8`` tenant (0-255
    pixels, which the trainer scales by 1/255) takes float values that are integers in 0-255,
    cast; a ``float32`` tenant refuses ``uint8`` inputs (their scale may not be the earlier
    inputs'). Raises `BadExampleError` naming the first example that does not fit."""
    have = str(x.values.dtype)
    if have == dtype:
        return x
    if dtype != "uint8":
        raise BadExampleError(
            0,
            f"inputs are {have} but the tenant's are {dtype} (since its first feed): give "
            f"{dtype} values on the earlier inputs' scale (e.g. x.astype('float32'), / 255 if "
            "those were scaled)",
            "input",
        )
    values = x.values.reshape(len(x.values), -1)
    ok = ((values >= 0) & (values <= 255) & (values == np.round(values))).all(axis=1)
    if not ok.all():
        row = int(np.argmin(ok))
        # a sequence's values are its examples' steps, one after another
        i = row if x.lengths is None else int(np.searchsorted(np.cumsum(x.lengths), row, "right"))
        raise BadExampleError(
            i,
            "holds a value that is not an integer in 0-255, but the tenant's inputs are uint8 "
            "(0-255 pixels, since its first feed): give such values, or declare another tenant "
            "for these inputs",
            "input",
        )
    return Encoded(x.values.astype(np.uint8), x.lengths)


def encode_labels(
    schema: Schema,
    labels: Sequence[Any] | NDArray[Any],
    classes: list[str],
    *,
    by_index: bool = False,
) -> NDArray[np.int64]:
    """Class indices ``(n,)``. A tenant's labels are class names or class indices, as its first
    labelled feed gave them, never both (the same index would mean two classes):
    * names (``by_index=False``): new names are appended to `classes` (in place); a number is
      read as a name (``7`` as ``"7"``, as a CSV gives it);
    * indices (``by_index=True``): integers in ``[0, n_classes)``; a string of digits is read
      as one (a CSV's ``"3"``), any other string is refused."""
    single = schema.output.single
    assert single is not None
    n_classes = single.shape[0]
    known = {c: k for k, c in enumerate(classes)}
    out = np.empty(len(labels), dtype=np.int64)
    for i, label in enumerate(labels):
        if isinstance(label, np.generic):
            label = label.item()
        if isinstance(label, float) and label.is_integer():
            label = int(label)
        if by_index and isinstance(label, str):
            if not (label.strip().isascii() and label.strip().isdigit()):
                raise BadExampleError(
                    i,
                    f"label {label!r} is not a class index in [0, {n_classes}), and the "
                    "tenant's labels are class indices (its earlier examples gave them): give "
                    "an index, or declare another tenant to use class names",
                    "output",
                )
            label = int(label)
        elif not by_index and isinstance(label, int) and not isinstance(label, bool):
            label = str(label)
        if isinstance(label, str):
            if label not in known and (not label.strip() or _breaks_lines(label)):
                # an unset shell variable (`--label "$X"`) took a class for good, and a tab or
                # a newline broke `examples`' tab-separated lines
                raise BadExampleError(
                    i,
                    f"label {label!r} is no class name: give one with a visible character "
                    "and no tab, newline or other control character",
                    "output",
                )
            if label not in known:
                if len(classes) >= n_classes:
                    raise BadExampleError(
                        i,
                        f"label {label!r} would be class {len(classes) + 1} but the output space "
                        f"Tensor[{n_classes}] has {n_classes} classes: {classes}",
                        "output",
                    )
                known[label] = len(classes)
                classes.append(label)
            out[i] = known[label]
        elif isinstance(label, int) and not isinstance(label, bool):
            if not 0 <= label < n_classes:
                raise BadExampleError(
                    i, f"label {label} is outside the output space [0, {n_classes})", "output"
                )
            out[i] = label
        else:
            raise BadExampleError(
                i,
                f"label {label!r} is not a class index in [0, {n_classes}) or a class name",
                "output",
            )
    return out
