"""Bad input, fuzzed: every parser and loader a tenant's bytes reach raises only its documented
error type, every rejection leaves the store exactly as it was, and a file whose header claims
gigabytes is refused before anything is allocated.

Documented error types: `SchemaSyntaxError` / `ValueError` (schema), `BadExampleError` (a
rejected example: a `ValueError` naming the example and the reason), `ValueError` (a bad file or
option), `UnknownTenantError`, `BenchInputError` (the bench CSV reader).
"""

from __future__ import annotations

import io
import os
import struct
import zipfile
import zlib
from pathlib import Path
from typing import Any

import numpy as np
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from store import (
    BadExampleError,
    ExampleStore,
    LocalBlobStore,
    UnknownTenantError,
    validate_tenant_name,
)
from store.loaders import iter_file_inputs, read_csv_rows
from store.schema import DataType, Schema, SchemaSyntaxError, Tensor
from tenantml.bench.datasets import BenchInputError, read_quality_csv
from trainers._data import encode_for_inference

FUZZ = settings(max_examples=int(os.environ.get("TENANTML_FUZZ_EXAMPLES", "300")), deadline=None,
                suppress_health_check=[HealthCheck.function_scoped_fixture])  # fmt: skip
IMAGES = Schema(input=Tensor(4, 4, 1), output=Tensor(3))
SERIES = Schema(input=DataType([Tensor(2)], ["next"]), output=Tensor(2))
FLAT = Schema(input=Tensor(3), output=Tensor(2))


def _snapshot(store: ExampleStore) -> dict[str, bytes]:
    """Every stored object, byte for byte."""
    return {k: store.blobs.get(k) for k in store.blobs.list("")}


@pytest.fixture
def store(tmp_path: Path) -> ExampleStore:
    s = ExampleStore(LocalBlobStore(tmp_path / "store"))
    for name, schema in (("imgs", IMAGES), ("series", SERIES), ("flat", FLAT)):
        s.create_tenant(name, schema)
    rng = np.random.default_rng(0)
    s.feed("imgs", rng.random((6, 4, 4, 1), dtype=np.float32), [0, 1, 2, 0, 1, 2])
    s.feed("flat", rng.random((4, 3), dtype=np.float32), [0, 1, 0, 1])
    return s


# -- the schema language -------------------------------------------------------------------------
SCHEMA_TOKENS = ["Tensor", "next", "left", "a", "1", "0", "99999999999", "-3", "["]
SCHEMA_ALPHABET = st.sampled_from(list("{}[](),: \n") + SCHEMA_TOKENS)


@FUZZ
@given(st.one_of(st.text(max_size=200), st.lists(SCHEMA_ALPHABET, max_size=80).map("".join)))
def test_schema_parser_raises_only_syntax_errors(text: str) -> None:
    try:
        schema = Schema.parse(text)
    except SchemaSyntaxError:
        return
    except ValueError as e:  # a well-formed text with an invalid value (checked by the model)
        assert str(e)
        return
    assert Schema.parse(str(schema)) == schema  # what parses, round-trips


def test_schema_parser_deep_nesting_is_a_syntax_error_not_a_crash() -> None:
    for text in ("[" * 100_000, "{" * 50_000 + "}" * 50_000, "{input: " * 20_000):
        with pytest.raises(SchemaSyntaxError):
            Schema.parse(text)


# -- tenant names ----------------------------------------------------------------------------------
ESCAPES = ["../b", "..", ".", "a/../../b", "a%2F..%2Fb", "%2e%2e", "a\\b", "/abs", "a\x00b",
           "а", "ａ", "dіgits", "digits\u200b", "ᴅigits", "a\n", " a", "A", "a" * 64, "",
           "a:b", "a b", "a.b", "~a", "a?x=1", "a#b", "a//b", "a\u2215b", "a\uff0fb"]  # fmt: skip


@pytest.mark.parametrize("name", ESCAPES)
def test_tenant_names_cannot_escape_their_prefix(store: ExampleStore, name: str) -> None:
    before = _snapshot(store)
    with pytest.raises(ValueError, match="is not valid"):
        validate_tenant_name(name)
    with pytest.raises(ValueError, match="is not valid"):
        store.create_tenant(name, IMAGES)
    with pytest.raises((ValueError, UnknownTenantError)):
        store.feed(name, np.zeros((1, 4, 4, 1), np.float32), [0])
    assert _snapshot(store) == before


def test_the_schedulers_name_is_no_tenants(store: ExampleStore) -> None:
    """A tenant ``scheduler`` shared the service's MLflow experiment (``tenantml/scheduler``): it
    was stored and fed, and never trained nor shown in `status`."""
    before = _snapshot(store)
    with pytest.raises(ValueError, match="'scheduler' is reserved"):
        store.create_tenant("scheduler", IMAGES)
    assert _snapshot(store) == before
    validate_tenant_name("schedulers")  # only the name itself


@pytest.mark.parametrize(
    "text",
    [
        "{input: {[Tensor[60000, 60000, 3]], []}, output: {[Tensor[2]], []}}",
        "{input: {[Tensor[99999999999]], []}, output: {[Tensor[2]], []}}",
        "{input: {[Tensor[4]], []}, output: {[Tensor[999999999999]], []}}",
    ],
)
def test_a_schema_whose_one_example_is_too_big_is_refused(store: ExampleStore, text: str) -> None:
    """Such a tenant was created, and its first 20x20 image asked for 43 GB (a CSV row for
    22 TiB): one tenant could exhaust a shared service's memory."""
    before = _snapshot(store)
    with pytest.raises(ValueError, match="over the limit of 1,073,741,824"):
        store.create_tenant("big", Schema.parse(text))
    assert _snapshot(store) == before


@FUZZ
@given(st.text(max_size=80))
def test_any_accepted_tenant_name_is_a_plain_ascii_key(name: str) -> None:
    try:
        validate_tenant_name(name)
    except ValueError:
        return
    assert name.isascii() and name[0].isalpha() and name == name.lower()
    assert all(c.isalnum() or c in "_-" for c in name), name


# -- feed and infer inputs -------------------------------------------------------------------------
def _junk() -> st.SearchStrategy[Any]:
    scalars = st.one_of(st.none(), st.booleans(), st.integers(-(2**70), 2**70),
                        st.floats(allow_nan=True, allow_infinity=True), st.text(max_size=5),
                        st.binary(max_size=5))  # fmt: skip
    arrays = st.tuples(st.lists(st.integers(0, 5), min_size=0, max_size=4),
                       st.sampled_from(["f4", "f8", "i8", "u1", "U3", "c8", "b1"]),
                       st.integers(0, 2**32 - 1)).map(_array)  # fmt: skip
    return st.recursive(
        st.one_of(scalars, arrays), lambda c: st.lists(c, max_size=4), max_leaves=12
    )


def _array(args: tuple[list[int], str, int]) -> np.ndarray:
    shape, dtype, seed = args
    rng = np.random.default_rng(seed)
    values = rng.normal(size=shape) * 10
    if dtype.startswith("U"):
        return values.astype("U3")
    return values.astype(dtype)


@FUZZ
@given(inputs=_junk(), outputs=_junk(), tenant=st.sampled_from(["imgs", "series", "flat"]))
def test_feed_rejects_junk_and_stores_nothing(
    store: ExampleStore, inputs: Any, outputs: Any, tenant: str
) -> None:
    before = _snapshot(store)
    try:
        store.feed(tenant, inputs, outputs)
    except BadExampleError as e:
        assert e.reason and _snapshot(store) == before
        return
    except ValueError as e:
        assert str(e) and _snapshot(store) == before
        return
    # Junk can be valid by chance (e.g. a list of 4x4x1 arrays and labels in range): then the
    # feed is one whole new snapshot, and the previous one is untouched.
    after = _snapshot(store)
    assert all(after[k] == v for k, v in before.items())


@FUZZ
@given(inputs=_junk(), tenant=st.sampled_from(["imgs", "series", "flat"]))
def test_infer_inputs_are_checked_like_feed(store: ExampleStore, inputs: Any, tenant: str) -> None:
    try:
        x, lengths = encode_for_inference(store.schema(tenant), inputs)
    except ValueError as e:  # BadExampleError included
        assert str(e)
        return
    assert np.isfinite(x).all()
    assert lengths is None or len(lengths) == len(x)


# -- files: images, sequences, CSV, npz ------------------------------------------------------------
def _png(width: int, height: int, body: bytes | None = None) -> bytes:
    """A PNG whose header says width x height (1-bit grey); `body` defaults to all zeros,
    compressed: a 40,000 x 40,000 image is ~30 KB (a decompression bomb)."""

    def chunk(kind: bytes, data: bytes) -> bytes:
        return (
            struct.pack(">I", len(data)) + kind + data + struct.pack(">I", zlib.crc32(kind + data))
        )

    if body is None:
        row = b"\x00" + b"\x00" * ((width + 7) // 8)
        comp = zlib.compressobj(9)
        body = b"".join(comp.compress(row) for _ in range(height)) + comp.flush()
    ihdr = struct.pack(">IIBBBBB", width, height, 1, 0, 0, 0, 0)
    return b"\x89PNG\r\n\x1a\n" + chunk(b"IHDR", ihdr) + chunk(b"IDAT", body) + chunk(b"IEND", b"")


def test_decompression_bomb_image_is_refused_before_decoding(
    store: ExampleStore, tmp_path: Path
) -> None:
    bomb = tmp_path / "bomb.png"
    bomb.write_bytes(_png(40_000, 40_000))  # 1.6 G pixels claimed, ~200 KB on disk
    assert bomb.stat().st_size < 1_000_000
    big = tmp_path / "big.png"
    big.write_bytes(_png(8_000, 6_000))  # 48 MP: over our 40 MP limit, under Pillow's own
    before = _snapshot(store)
    for image in (bomb, big):
        with pytest.raises(BadExampleError, match="pixel limit"):
            store.feed("imgs", iter_file_inputs(IMAGES, [image]), [0])
    assert _snapshot(store) == before


def test_a_real_small_png_still_loads(tmp_path: Path) -> None:
    ok = tmp_path / "ok.png"
    ok.write_bytes(_png(9, 7))
    (img,) = list(iter_file_inputs(IMAGES, [ok]))
    assert img.shape == (4, 4, 1)


@FUZZ
@given(data=st.binary(max_size=400), suffix=st.sampled_from([".png", ".jpg", ".gif", ".bmp"]))
def test_random_bytes_as_images_are_bad_examples(tmp_path: Path, data: bytes, suffix: str) -> None:
    path = tmp_path / f"x{suffix}"
    path.write_bytes(data if data[:1] != b"\x89" else _png(4, 4, data))
    try:
        list(iter_file_inputs(IMAGES, [path]))
    except BadExampleError as e:
        assert str(path) in e.reason


def _npy_header(shape: tuple[int, ...], dtype: str = "<f8") -> bytes:
    buf = io.BytesIO()
    np.lib.format.write_array_header_1_0(buf, {"descr": dtype, "fortran_order": False,
                                               "shape": shape})  # fmt: skip
    return buf.getvalue()


def test_npy_claiming_10_gb_is_refused_early(tmp_path: Path) -> None:
    seq = tmp_path / "forged.npy"
    seq.write_bytes(_npy_header((1_000_000, 1_250)) + b"\x00" * 1024)  # claims 10 GB
    with pytest.raises(BadExampleError, match=r"claims shape \(1000000, 1250\)"):
        list(iter_file_inputs(SERIES, [seq]))
    truncated = tmp_path / "truncated.npy"
    truncated.write_bytes(_npy_header((100, 2)) + b"\x00" * 16)  # 1.6 KB claimed, 16 B held
    with pytest.raises(BadExampleError, match="truncated or forged"):
        list(iter_file_inputs(SERIES, [truncated]))


@FUZZ
@given(data=st.binary(max_size=300))
def test_random_npy_bytes_are_bad_examples(tmp_path: Path, data: bytes) -> None:
    path = tmp_path / "s.npy"
    path.write_bytes(b"\x93NUMPY" + data if data[:1] == b"\x01" else data)
    try:
        for seq in iter_file_inputs(SERIES, [path]):
            assert seq.ndim == 2
    except BadExampleError as e:
        assert str(path) in e.reason


def _npz(path: Path, members: dict[str, bytes]) -> None:
    with zipfile.ZipFile(path, "w", zipfile.ZIP_DEFLATED) as z:
        for name, data in members.items():
            z.writestr(f"{name}.npy", data)


def test_npz_bombs_and_forged_headers_are_refused(tmp_path: Path) -> None:
    from store.limits import load_npz

    forged = tmp_path / "forged.npz"
    _npz(forged, {"x": _npy_header((100_000, 100_000, 100)), "y": _npy_header((3,), "<i8")})
    with pytest.raises(ValueError, match="over the"):
        load_npz(forged, ("x", "y"))
    bomb = tmp_path / "bomb.npz"  # 1.1 GiB of zeros that compress to ~1 MB
    with zipfile.ZipFile(bomb, "w", zipfile.ZIP_DEFLATED) as z:
        with z.open("x.npy", "w", force_zip64=True) as f:
            f.write(_npy_header((1_100_000_000,), "|u1"))
            block = b"\x00" * (1 << 24)
            for _ in range(66):
                f.write(block)
        z.writestr("y.npy", _npy_header((1,), "<i8") + b"\x00" * 8)
    assert bomb.stat().st_size < 5_000_000
    with pytest.raises(ValueError, match="inflates to"):
        load_npz(bomb, ("x", "y"))
    missing = tmp_path / "missing.npz"
    np.savez(missing, a=np.zeros(2))
    with pytest.raises(ValueError, match="no array x, y"):
        load_npz(missing, ("x", "y"))
    ok = tmp_path / "ok.npz"
    np.savez(ok, x=np.ones((2, 3)), y=np.array([0, 1]))
    assert load_npz(ok, ("x", "y"))["x"].shape == (2, 3)


@FUZZ
@given(st.binary(max_size=600))
def test_npz_reader_raises_only_value_errors(tmp_path: Path, data: bytes) -> None:
    from store.limits import load_npz

    path = tmp_path / "f.npz"
    if data[:1] == b"\x00":  # a real archive around random member bytes
        _npz(path, {"x": data[1:], "y": data[1:]})
    else:
        path.write_bytes(data)
    try:
        load_npz(path, ("x", "y"))
    except ValueError as e:
        assert str(path) in str(e)


@FUZZ
@given(st.one_of(st.binary(max_size=400),
                 st.lists(st.lists(st.sampled_from(["1", "2.5", "nan", "x", "", '"', "\x00",
                                                    "a" * 200_000, "-1e309"]),
                                   max_size=5), max_size=6)
                 .map(lambda rows: "\n".join(",".join(r) for r in rows).encode())))  # fmt: skip
def test_csv_reader_raises_only_value_errors(tmp_path: Path, data: bytes) -> None:
    path = tmp_path / "rows.csv"
    path.write_bytes(data)
    for label in (None, 0, "label"):
        try:
            x, labels = read_csv_rows(path, 2, label)
        except ValueError as e:  # BadExampleError included
            assert str(e)
        else:
            assert x.shape[1] == 2 and (labels is None or len(labels) == len(x))


@FUZZ
@given(st.one_of(st.text(max_size=400),
                 st.lists(st.tuples(st.sampled_from(["t1", "t2", "", "t,3", '"q']),
                                    st.sampled_from(["m1", "m2", "m3", ""]),
                                    st.sampled_from(["0.5", "1.5", "-0.1", "nan", "x", "1e400"]),
                                    st.sampled_from(["1", "0", "-2", "inf", "", "3.5"])),
                          max_size=30)
                 .map(lambda rows: "tenant,model,quality,cost\n"
                      + "\n".join(",".join(r) for r in rows))))  # fmt: skip
def test_bench_csv_reader_raises_only_bench_input_errors(data: str) -> None:
    try:
        table = read_quality_csv(io.StringIO(data), name="fuzz")
    except BenchInputError as e:
        assert str(e)
    else:
        assert table.quality.shape == table.cost.shape
