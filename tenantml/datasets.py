"""Small real data sets that ship offline, for the demo and tests, as (schema, inputs, labels).

* ``digits``: scikit-learn's 1,797 handwritten digits, 8x8 grey images, ``Tensor[8, 8, 1]``,
  pixel values 0-16 (UCI Optical Recognition of Handwritten Digits; CC BY 4.0).
* ``breast_cancer``: 569 tumours, 30 features, malignant/benign (UCI Wisconsin Diagnostic Breast
  Cancer, via scikit-learn; CC BY 4.0).
* ``wine``: 178 wines, 13 chemical features, 3 cultivars (UCI Wine, via scikit-learn; CC BY 4.0).
* ``japanese_vowels``: 640 utterances of 9 speakers, each a sequence of 7-29 frames of 12 LPC
  coefficients, ``{[Tensor[12]], [next]}`` (UCI Japanese Vowels, Kudo et al. 1999; CC BY 4.0),
  bundled with the aeon package (train and test splits joined, train first).
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import numpy as np
from numpy.typing import NDArray

from store.schema import DataType, Schema, Tensor

__all__ = ["DATASETS", "DemoData", "load"]


@dataclass(frozen=True)
class DemoData:
    name: str
    schema: Schema
    inputs: NDArray[Any] | list[NDArray[Any]]
    labels: list[str] | NDArray[np.int64]
    description: str


def _digits() -> DemoData:
    from sklearn.datasets import load_digits

    d = load_digits()
    x = d.images.reshape(-1, 8, 8, 1).astype(np.float32)
    return DemoData(
        "digits",
        Schema(input=Tensor(8, 8, 1), output=Tensor(10)),
        x,
        d.target.astype(np.int64),
        "handwritten digits, 8x8 images",
    )


def _tabular(loader: Callable[..., Any], name: str, what: str) -> DemoData:
    d = loader()
    x = d.data.astype(np.float32)
    labels = [str(d.target_names[t]) for t in d.target]
    schema = Schema(input=Tensor(x.shape[1]), output=Tensor(len(d.target_names)))
    return DemoData(name, schema, x, labels, what)


def _breast_cancer() -> DemoData:
    from sklearn.datasets import load_breast_cancer

    return _tabular(load_breast_cancer, "breast_cancer", "tumours, 30 features")


def _wine() -> DemoData:
    from sklearn.datasets import load_wine

    return _tabular(load_wine, "wine", "wines, 13 chemical features")


def _japanese_vowels() -> DemoData:
    try:
        from aeon.datasets import load_classification
    except ImportError as e:
        raise RuntimeError(
            "japanese_vowels ships with the aeon package: pip install 'tenantml[ml]'"
        ) from e
    xs: list[NDArray[Any]] = []
    ys: list[str] = []
    for part in ("train", "test"):
        x, y = load_classification("JapaneseVowels", split=part)
        xs += [np.asarray(s, dtype=np.float32).T for s in x]  # (12, T) -> (T, 12)
        ys += [f"speaker{v}" for v in y]
    schema = Schema(input=DataType([Tensor(12)], ["next"]), output=Tensor(9))
    return DemoData("japanese_vowels", schema, xs, ys, "speakers, sequences of 12 LPC coefs")


DATASETS: dict[str, Callable[[], DemoData]] = {
    "digits": _digits,
    "breast_cancer": _breast_cancer,
    "wine": _wine,
    "japanese_vowels": _japanese_vowels,
}


def load(name: str) -> DemoData:
    if name not in DATASETS:
        raise KeyError(f"unknown data set {name!r}; offline data sets: {sorted(DATASETS)}")
    return DATASETS[name]()
