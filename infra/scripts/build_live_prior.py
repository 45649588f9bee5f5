"""Rebuild ``trainers/zoo_prior.csv.gz``: the live catalogue's qualities on real data sets.

The live service's GP prior (``policy.prior``) starts from this matrix before its own tenants
have results. Both sources are already carried in ``tenantml/data`` (sources, commits and
licenses in ``tenantml/data/README.md``); this script only renames their models to the live
catalogue's candidates and keeps the cells that map:

* tabular (``lcdb.csv.gz``, LCDB 0.1.0, MIT): 248 OpenML data sets, test accuracy at the
  largest training size of scikit-learn learners at their default settings. Mapped learners:
  LogisticRegression -> ``logistic_regression``, RandomForestClassifier -> ``random_forest``,
  GradientBoostingClassifier -> ``gradient_boosting`` (the live arm is scikit-learn's
  histogram variant; LCDB has only the classic one, the closest it measures), SVC_rbf -> ``svm``,
  KNeighborsClassifier -> ``knn``, MLPClassifier -> ``mlp``.
* images (``easeml-dl.csv.gz``, the ease.ml authors' CNN matrix, 18 data sets): m1..m9 as in
  ``easeml-dl.models.csv`` (identities inferred there); m8 (unknown) is dropped and LeNet and
  the ``+fk`` input-normalisation variants have no cells (the prior leaves them wide).

Run from the repository root: ``python infra/scripts/build_live_prior.py``. The output is
byte-for-byte reproducible (sorted rows, gzip without a timestamp).
"""

from __future__ import annotations

import csv
import gzip
import io
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
DATA = ROOT / "tenantml" / "data"
OUT = ROOT / "trainers" / "zoo_prior.csv.gz"

LCDB = {
    "sklearn.linear_model.LogisticRegression": "logistic_regression",
    "sklearn.ensemble.RandomForestClassifier": "random_forest",
    "sklearn.ensemble.GradientBoostingClassifier": "gradient_boosting",
    "SVC_rbf": "svm",
    "sklearn.neighbors.KNeighborsClassifier": "knn",
    "sklearn.neural_network.MLPClassifier": "mlp",
}
EASEML_NAMES = {
    "NIN": "nin",
    "GoogLeNet": "googlenet",
    "ResNet-50": "resnet50",
    "AlexNet": "alexnet",
    "BN-AlexNet": "bn_alexnet",
    "ResNet-18": "resnet18",
    "VGG-16": "vgg16",
    "SqueezeNet": "squeezenet",
}


def _rows(name: str) -> list[dict[str, str]]:
    with gzip.open(DATA / name, "rt", newline="") as f:
        return list(csv.DictReader(f))


def build() -> list[tuple[str, str, str, str]]:
    """(source, data set, candidate, quality) for every mapped cell."""
    out = []
    for r in _rows("lcdb.csv.gz"):
        if r["model"] in LCDB and r["quality"]:
            out.append(("lcdb", r["tenant"], LCDB[r["model"]], r["quality"]))
    with open(DATA / "easeml-dl.models.csv", newline="") as f:
        ids = {r["model"]: EASEML_NAMES.get(r["name"]) for r in csv.DictReader(f)}
    for r in _rows("easeml-dl.csv.gz"):
        cand = ids.get(r["model"])
        if cand and r["quality"]:
            out.append(("easeml-dl", r["tenant"], cand, r["quality"]))
    return sorted(out)


def main() -> None:
    text = io.StringIO()
    w = csv.writer(text, lineterminator="\n")
    w.writerow(["source", "dataset", "candidate", "quality"])
    rows = build()
    w.writerows(rows)
    with open(OUT, "wb") as raw, gzip.GzipFile(fileobj=raw, mode="wb", mtime=0) as gz:
        gz.write(text.getvalue().encode())
    print(f"wrote {OUT.relative_to(ROOT)}: {len(rows)} cells")


if __name__ == "__main__":
    main()
