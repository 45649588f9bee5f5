"""Feeding from files: images decoded and resized, sequences, CSV rows; unreadable files reject
the whole batch and leave the store as it was."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest
from PIL import Image

from store import BadExampleError, ExampleStore, LocalBlobStore
from store.loaders import feed_files, iter_file_inputs, read_csv_rows
from store.schema import DataType, Schema, Tensor


def _image(path: Path, size: tuple[int, int], color: tuple[int, int, int]) -> Path:
    Image.new("RGB", size, color).save(path)
    return path


def test_images_decode_to_the_schema_shape(tmp_path: Path) -> None:
    red = _image(tmp_path / "red.jpg", (40, 30), (255, 0, 0))
    blue = _image(tmp_path / "blue.png", (8, 8), (0, 0, 255))
    rgb = list(iter_file_inputs(Schema(input=Tensor(16, 16, 3), output=Tensor(2)), [red, blue]))
    assert [a.shape for a in rgb] == [(16, 16, 3), (16, 16, 3)]
    assert rgb[0].dtype == np.uint8 and rgb[0][..., 0].mean() > 240 and rgb[1][..., 2].mean() > 240
    grey = next(iter_file_inputs(Schema(input=Tensor(4, 4, 1), output=Tensor(2)), [red]))
    assert grey.shape == (4, 4, 1)
    # flat inputs come as rows, not files: refused by name, not as an unreadable file
    with pytest.raises(ValueError, match="not an image or a sequence: feed flat tensors"):
        next(iter_file_inputs(Schema(input=Tensor(4), output=Tensor(2)), [red]))


def test_feed_files_streams_and_rejects_unreadable_files_whole(tmp_path: Path) -> None:
    store = ExampleStore(LocalBlobStore(tmp_path / "store"))
    store.create_tenant("pets", Schema(input=Tensor(16, 16, 3), output=Tensor(2)))
    cats = [_image(tmp_path / f"cat{i}.jpg", (20, 20), (200, 100, i)) for i in range(3)]
    feed_files(store, "pets", cats, ["cat"] * 3)
    before = (store.versions("pets"), store.blobs.list("tenants/pets/"))
    broken = tmp_path / "broken.jpg"
    broken.write_bytes(b"not a jpeg")
    with pytest.raises(BadExampleError, match=r"example 1.*cannot read .*broken\.jpg"):
        feed_files(store, "pets", [cats[0], broken, cats[1]], ["dog"] * 3)
    with pytest.raises(BadExampleError, match="example 0.*cannot read"):
        feed_files(store, "pets", [tmp_path / "missing.png"], ["dog"])
    assert (store.versions("pets"), store.blobs.list("tenants/pets/")) == before
    d = store.load("pets")
    assert d.x.shape == (3, 16, 16, 3) and d.x.dtype == np.uint8 and d.classes == ("cat",)


def test_sequence_files(tmp_path: Path) -> None:
    store = ExampleStore(LocalBlobStore(tmp_path / "store"))
    store.create_tenant("ts", Schema(input=DataType([Tensor(3)], ["next"]), output=Tensor(2)))
    a = tmp_path / "a.csv"
    a.write_text("1,2,3\n4,5,6\n")
    b = tmp_path / "b.npy"
    np.save(b, np.ones((4, 3)))
    feed_files(store, "ts", [a, b], ["up", "flat"])
    d = store.load("ts")
    assert list(d.lengths) == [2, 4] and d.x[0, 1].tolist() == [4, 5, 6]
    bad = tmp_path / "bad.csv"
    bad.write_text("1,2\n3,4\n")
    with pytest.raises(BadExampleError, match=r"example 0.*shape \(2, 2\) is not \(T, 3\)"):
        feed_files(store, "ts", [bad], ["up"])


def test_csv_rows(tmp_path: Path) -> None:
    f = tmp_path / "rows.csv"
    f.write_text("a,b,label\n1,2,x\n3,4,y\n")
    x, labels = read_csv_rows(f, 2, "label")
    assert x.tolist() == [[1, 2], [3, 4]] and labels == ["x", "y"]
    with pytest.raises(ValueError, match="no label column 'lbl'"):
        read_csv_rows(f, 2, "lbl")
    f.write_text("a,b,label\n1,2,x\n3,oops,y\n")
    with pytest.raises(BadExampleError, match="example 1.*row 3"):
        read_csv_rows(f, 2, "label")
