"""Bounds on what one input file may make us allocate, checked *before* decoding.

A file's header can claim more than the file holds: a 1 KiB ``.npy`` whose header says
``(100000, 100000, 100)`` float64 (8 TB), an ``.npz`` member that inflates 1000x, a 2 KiB PNG of
40,000 x 40,000 pixels. Decoding such a file first and checking afterwards allocates what it
claims. Here the claim is read from the header and refused when it is larger than the file can
hold or than the limit, so memory stays bounded whatever a tenant sends.

Limits (environment variables, for operators with bigger inputs):

* ``TENANTML_MAX_INPUT_BYTES``: one array file's decoded size, default 1 GiB;
* ``TENANTML_MAX_IMAGE_PIXELS``: one image's width x height, default 40,000,000 (40 MP).

Every refusal is a `ValueError` naming the file, what its header claims and the limit.
"""

from __future__ import annotations

import os
import zipfile
from pathlib import Path
from typing import IO, Any

import numpy as np
from numpy.typing import NDArray

__all__ = [
    "check_image_size",
    "load_npy",
    "load_npz",
    "max_image_pixels",
    "max_input_bytes",
]

_NPY: Any = np.lib.format  # numpy's .npy reader (untyped in its stubs)
DEFAULT_MAX_INPUT_BYTES = 1 << 30
DEFAULT_MAX_IMAGE_PIXELS = 40_000_000


def _env_int(name: str, default: int) -> int:
    text = os.environ.get(name)
    if not text:
        return default
    try:
        value = int(text)
    except ValueError:
        value = 0
    if value < 1:
        raise ValueError(f"{name}={text!r} is not valid: use a positive integer")
    return value


def max_input_bytes() -> int:
    return _env_int("TENANTML_MAX_INPUT_BYTES", DEFAULT_MAX_INPUT_BYTES)


def max_image_pixels() -> int:
    return _env_int("TENANTML_MAX_IMAGE_PIXELS", DEFAULT_MAX_IMAGE_PIXELS)


def _human(n: float) -> str:
    for unit in ("B", "KiB", "MiB", "GiB", "TiB"):
        if n < 1024 or unit == "TiB":
            return f"{n:.0f} {unit}" if unit == "B" else f"{n:.1f} {unit}"
        n /= 1024
    raise AssertionError("unreachable")


def _read_header(f: IO[bytes], where: str) -> tuple[tuple[int, ...], np.dtype[Any], int]:
    """(shape, dtype, claimed bytes) from an ``.npy`` header; nothing else is read."""

    try:
        version = _NPY.read_magic(f)
        if version == (1, 0):
            shape, _, dtype = _NPY.read_array_header_1_0(f)
        elif version in ((2, 0), (3, 0)):
            shape, _, dtype = _NPY.read_array_header_2_0(f)
        else:
            raise ValueError(f"unsupported .npy version {version}")
    except (ValueError, OSError, SyntaxError, EOFError) as e:
        raise ValueError(f"{where}: not a readable .npy array ({e})") from None
    if dtype.hasobject:
        raise ValueError(f"{where}: holds Python objects (dtype {dtype}); numeric arrays only")
    claimed = int(np.prod(shape, dtype=np.float64) * dtype.itemsize)
    return tuple(int(d) for d in shape), dtype, claimed


def _check_claim(where: str, shape: tuple[int, ...], claimed: int, available: int) -> None:
    limit = max_input_bytes()
    if claimed > limit:
        raise ValueError(
            f"{where}: its header claims shape {shape} ({_human(claimed)}), over the "
            f"{_human(limit)} limit per input file (TENANTML_MAX_INPUT_BYTES); nothing was read"
        )
    if claimed > available:
        raise ValueError(
            f"{where}: its header claims shape {shape} ({_human(claimed)}) but the file holds "
            f"only {_human(available)} of data; the file is truncated or forged"
        )


def load_npy(path: str | Path) -> NDArray[Any]:
    """An ``.npy`` array whose claimed size was checked against the file and the limit."""
    p = Path(path)
    with open(p, "rb") as f:
        shape, _, claimed = _read_header(f, str(p))
        _check_claim(str(p), shape, claimed, p.stat().st_size - f.tell())
    try:
        out: NDArray[Any] = np.load(p, allow_pickle=False)
    except (OSError, EOFError) as e:
        raise ValueError(f"{p}: cannot be read ({e})") from None
    return out


def load_npz(path: str | Path, names: tuple[str, ...]) -> dict[str, NDArray[Any]]:
    """The arrays `names` of an ``.npz``; each member's claimed and inflated sizes are checked
    before it is read (a zip member that inflates past its stated size is refused by zipfile)."""
    p = Path(path)
    try:
        archive = zipfile.ZipFile(p)
    except (zipfile.BadZipFile, OSError) as e:
        raise ValueError(f"{p}: not a readable .npz archive ({e})") from None
    out: dict[str, NDArray[Any]] = {}
    with archive:
        members = {info.filename.removesuffix(".npy"): info for info in archive.infolist()}
        missing = [n for n in names if n not in members]
        if missing:
            held = ", ".join(sorted(members)) or "none"
            raise ValueError(
                f"{p}: no array {', '.join(missing)}; it holds {held}"
                f" (an .npz fed needs arrays {' and '.join(names)})"
            )
        total = 0
        for name in names:
            info, where = members[name], f"{p}[{name}]"
            total += info.file_size
            if info.file_size > max_input_bytes() or total > max_input_bytes():
                raise ValueError(
                    f"{where}: inflates to {_human(total)}, over the {_human(max_input_bytes())} "
                    "limit per input file (TENANTML_MAX_INPUT_BYTES); nothing was read"
                )
            try:
                with archive.open(info) as f:
                    shape, _, claimed = _read_header(f, where)
                    _check_claim(where, shape, claimed, info.file_size - f.tell())
                with archive.open(info) as f:  # checked: now read it (read_array re-reads
                    out[name] = _NPY.read_array(f, allow_pickle=False)  # the header)
            except (zipfile.BadZipFile, OSError, EOFError) as e:
                raise ValueError(f"{where}: cannot be read ({e})") from None
    return out


def check_image_size(where: str, width: int, height: int) -> None:
    """Refuse an image whose header claims more pixels than the limit, before decoding it."""
    limit = max_image_pixels()
    if width * height > limit:
        raise ValueError(
            f"{where}: {width} x {height} pixels is over the {limit:,}-pixel limit per image "
            "(TENANTML_MAX_IMAGE_PIXELS); resize it first"
        )
