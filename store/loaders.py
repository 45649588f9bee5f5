"""Inputs from files, decoded exactly as `feed` and `infer` both need them.

* images (JPEG, PNG, ...) for an input ``Tensor[A, B, C]`` with C in {1, 3}: decoded
  (Pillow) to ``C`` channels, resized (torchvision, antialiased bilinear) to ``A x B``, as uint8
  ``(A, B, C)``;
* CSV files for a flat input ``Tensor[A]``: one example per row, ``A`` numeric columns, plus a
  label column when `label_column` is given (by header name or 0-based index);
* sequence files for ``{[Tensor[A]], [next]}``: one file per sequence, ``T`` rows of ``A`` numbers
  (CSV or ``.npy``).

A file that cannot be read raises `BadExampleError` with the example's index and the path, so a
batch fed from files is rejected whole like any other. A file whose header claims more than
`store.limits` allows (a decompression-bomb image, a forged ``.npy`` shape) is refused before
it is decoded.
"""

from __future__ import annotations

import csv
from collections.abc import Iterable, Iterator
from pathlib import Path
from typing import Any

import numpy as np
from numpy.typing import NDArray

from store import BadExampleError, ExampleStore, Manifest
from store.limits import check_image_size, load_npy, max_input_bytes
from store.schema import Schema

__all__ = ["feed_files", "iter_file_inputs", "load_image", "load_sequence", "read_csv_rows"]

IMAGE_SUFFIXES = {".jpg", ".jpeg", ".png", ".gif", ".bmp", ".webp"}


def load_image(path: str | Path, shape: tuple[int, ...]) -> NDArray[np.uint8]:
    """Decode an image file into uint8 ``(A, B, C)`` for ``Tensor[A, B, C]``.

    Pillow decodes and resizes (bilinear with antialiasing, which is what torchvision's
    ``resize(antialias=True)`` reproduces), so the data layer loads no framework.
    """
    from PIL import Image

    a, b, c = shape
    if c not in (1, 3):
        raise ValueError(f"images load into Tensor[A, B, 1] or Tensor[A, B, 3], not {shape}")
    try:
        im = Image.open(path)  # lazy: only the header is read so far
    except Image.DecompressionBombError as e:  # over twice Pillow's own limit: refused too
        raise ValueError(f"over the pixel limit per image, refused before decoding ({e})") from None
    with im:
        check_image_size(str(path), *im.size)
        resized = im.convert("RGB" if c == 3 else "L").resize((b, a), Image.Resampling.BILINEAR)
    pixels = np.asarray(resized, dtype=np.uint8)
    out: NDArray[np.uint8] = np.ascontiguousarray(pixels.reshape(a, b, c))
    return out


def load_sequence(path: str | Path) -> NDArray[np.float32]:
    """``T x A`` numbers from a CSV (no header) or ``.npy`` file."""
    p = Path(path)
    if p.suffix == ".npy":
        arr: NDArray[np.float32] = load_npy(p).astype(np.float32)
        return arr
    if p.stat().st_size > max_input_bytes():
        raise ValueError(
            f"{p}: {p.stat().st_size:,} bytes is over the input-file limit "
            "(TENANTML_MAX_INPUT_BYTES)"
        )
    return np.loadtxt(p, delimiter=",", dtype=np.float32, ndmin=2)


def takes_files(schema: Schema) -> bool:
    """Whether the schema's inputs come as files (`iter_file_inputs`): images or sequences."""
    field = schema.input.single
    return field is not None and (schema.input.is_sequence or len(field.shape) == 3)


def iter_file_inputs(schema: Schema, paths: Iterable[str | Path]) -> Iterator[NDArray[Any]]:
    """One decoded input per path (images or sequence files), lazily, so feeds can stream."""
    field = schema.input.single
    if field is None:
        raise ValueError(f"input {schema.input} has several tensor fields; feed arrays instead")
    if not takes_files(schema):
        raise ValueError(
            f"input {schema.input} is not an image or a sequence: feed flat tensors "
            "as CSV rows (read_csv_rows) or arrays"
        )
    for i, path in enumerate(paths):
        try:
            yield load_sequence(path) if schema.input.is_sequence else load_image(path, field.shape)
        except (OSError, RuntimeError, ValueError, SyntaxError) as e:
            raise BadExampleError(i, f"cannot read {str(path)!r}: {e}") from None


def read_csv_rows(
    path: str | Path, n_features: int, label_column: str | int | None = None
) -> tuple[NDArray[np.float32], list[str] | None]:
    """Rows of a CSV with a header line: ``(n, n_features)`` inputs and optional labels."""
    size = Path(path).stat().st_size
    if size > max_input_bytes():
        raise ValueError(
            f"{path}: {size:,} bytes is over the input-file limit "
            "(TENANTML_MAX_INPUT_BYTES); split it"
        )
    with open(path, newline="", errors="strict") as f:
        reader = csv.reader(f)
        try:
            rows = list(reader)
        except (csv.Error, UnicodeDecodeError) as e:
            raise ValueError(f"{path}: line {reader.line_num + 1}: malformed CSV ({e})") from None
    if not rows:
        raise ValueError(f"{path}: empty CSV file")
    header, body = rows[0], rows[1:]
    label_at: int | None = None
    if label_column is not None:
        if isinstance(label_column, int):
            label_at = label_column
        elif label_column in header:
            label_at = header.index(label_column)
        else:
            raise ValueError(f"{path}: no label column {label_column!r}; columns: {header}")
    xs = np.empty((len(body), n_features), dtype=np.float32)
    labels: list[str] = []
    for i, row in enumerate(body):
        values = [v for j, v in enumerate(row) if j != label_at]
        if len(values) != n_features:
            raise BadExampleError(
                i, f"row {i + 2} of {path} has {len(values)} features, not {n_features}"
            )
        try:
            xs[i] = [float(v) for v in values]
        except ValueError as e:
            raise BadExampleError(i, f"row {i + 2} of {path}: {e}") from None
        if label_at is not None:
            labels.append(row[label_at])
    return xs, (labels if label_at is not None else None)


def feed_files(
    store: ExampleStore, tenant: str, paths: Iterable[str | Path], labels: Iterable[Any]
) -> tuple[Manifest, range]:
    """Feed one example per file (images or sequences), decoded lazily and streamed to `store`.

    A file that cannot be read rejects the whole call, like any other bad example.
    """
    return store.feed(tenant, iter_file_inputs(store.schema(tenant), paths), labels)
