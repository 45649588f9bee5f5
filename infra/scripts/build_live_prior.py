"""Rebuild ``trainers/zoo_prior.csv.gz`` and ``trainers/tabular_portfolio.json``: the live
catalogue's tabular configurations, chosen from real data, and its qualities on real data sets.

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
* tabular portfolios (``oboe.csv.gz``, Oboe's error matrix, BSD-3-Clause): 418 OpenML data
  sets x 219 scikit-learn configurations, 1 - 5-fold CV balanced error. Per family, starting from
  the family's default settings, configurations are added greedily (auto-sklearn 2.0's portfolio
  construction, Feurer et al., JMLR 2022, Sec. 4.1, Alg. 1: the one that most raises the mean
  over data sets of the portfolio's best quality), while the gain is at least ``MIN_GAIN``, up to
  ``PORTFOLIO_SIZE`` members. Each member becomes an arm of its own (the policy decides how much
  search a tenant gets), and its Oboe cells (defaults included) join the prior, so that the arms
  of a family are one block with LCDB's defaults. Oboe's GBT (classic gradient boosting) is
  mapped to the live arm, scikit-learn's histogram gradient boosting, by learning rate and depth
  (its ``max_features='log2'`` variants are left out: the histogram learner has no equivalent).
* images (``easeml-dl.csv.gz``, the ease.ml authors' CNN matrix, 18 data sets): m1..m9 as in
  ``easeml-dl.models.csv`` (identities inferred there); m8 (unknown) is dropped and LeNet and
  the ``+fk`` input-normalisation variants have no cells (the prior leaves them wide).
* pixel arms (``pixels-<arm>``: a tabular arm on an image task's flattened pixels): the
  tabular cells above on the OpenML data sets whose features are an image's pixels
  (`PIXEL_SETS`: MNIST, Fashion-MNIST, optdigits, semeion, mfeat-pixel), copied to the pixel
  arm of the same name, in a column of their own (``openml-554:pixels``). Those measurements
  are exactly a pixel arm's job; without them the pixel arms had no cells and the prior's
  N(0.5, 0.05), so an image tenant whose k-NN was already at 0.88 saw almost nothing to gain
  from its forests (0.92; docs/live.md).

Run from the repository root: ``python infra/scripts/build_live_prior.py``. The outputs are
byte-for-byte reproducible (sorted rows, gzip without a timestamp, sorted JSON keys).
"""

from __future__ import annotations

import ast
import csv
import gzip
import io
import json
from collections import defaultdict
from pathlib import Path
from typing import Any

import numpy as np

ROOT = Path(__file__).resolve().parents[2]
DATA = ROOT / "tenantml" / "data"
OUT = ROOT / "trainers" / "zoo_prior.csv.gz"
PORTFOLIO_OUT = ROOT / "trainers" / "tabular_portfolio.json"

#: members per family (the default included) and the least gain in mean best quality for one more
PORTFOLIO_SIZE = 3
MIN_GAIN = 0.002

LCDB = {
    "sklearn.linear_model.LogisticRegression": "logistic_regression",
    "sklearn.ensemble.RandomForestClassifier": "random_forest",
    "sklearn.ensemble.ExtraTreesClassifier": "extra_trees",
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


#: Oboe algorithm -> live family, and the family's default settings as an Oboe configuration
#: (the arm named after the family, trained with scikit-learn's defaults; see
#: ``trainers/sklearn_trainer.py``)
OBOE_FAMILIES: dict[str, tuple[str, dict[str, Any]]] = {
    "Logit": ("logistic_regression", {"C": 1, "solver": "liblinear", "penalty": "l2"}),
    "RF": ("random_forest", {"min_samples_split": 2, "criterion": "gini"}),
    "ExtraTrees": ("extra_trees", {"min_samples_split": 2, "criterion": "gini"}),
    "GBT": ("gradient_boosting", {"learning_rate": 0.1, "max_depth": 6, "max_features": None}),
    "kSVM": ("svm", {"C": 1, "kernel": "rbf", "coef0": 0}),
    "KNN": ("knn", {"n_neighbors": 5, "p": 2}),
    "MLP": (
        "mlp",
        {
            "learning_rate_init": 0.001,
            "learning_rate": "adaptive",
            "solver": "adam",
            "alpha": 0.0001,
        },
    ),
}


def _live_params(algorithm: str, hp: dict[str, Any]) -> dict[str, Any] | None:
    """Oboe's hyperparameters as the live estimator's (None: no equivalent)."""
    if algorithm == "Logit":  # the solver is an implementation detail; l1 needs saga
        l1 = hp["penalty"] == "l1"
        return {"C": hp["C"], "l1_ratio": 1.0 if l1 else 0.0, "solver": "saga" if l1 else "lbfgs"}
    if algorithm == "GBT":
        if hp["max_features"] is not None:
            return None
        return {"learning_rate": hp["learning_rate"], "max_depth": hp["max_depth"]}
    if algorithm == "MLP":
        return {k: hp[k] for k in ("solver", "learning_rate_init", "alpha", "learning_rate")}
    return dict(hp)


def _member_name(family: str, params: dict[str, Any]) -> str:
    """A readable arm name, e.g. ``svm-poly-c4-r10`` or ``knn-k15-p1``."""
    p = params
    parts = {
        "logistic_regression": lambda: ["l1" if p["l1_ratio"] else "l2", f"c{p['C']:g}"],
        "random_forest": lambda: [p["criterion"], f"s{p['min_samples_split']:g}"],
        "extra_trees": lambda: [p["criterion"], f"s{p['min_samples_split']:g}"],
        "gradient_boosting": lambda: [f"lr{p['learning_rate']:g}", f"d{p['max_depth']}"],
        "svm": lambda: [p["kernel"], f"c{p['C']:g}", f"r{p['coef0']:g}"],
        "knn": lambda: [f"k{p['n_neighbors']}", f"p{p['p']}"],
        "mlp": lambda: [p["solver"], f"lr{p['learning_rate_init']:g}", f"a{p['alpha']:g}"],
    }[family]()
    return "-".join([family, *parts])


def _oboe_configs() -> tuple[dict[str, dict[str, Any]], dict[str, dict[str, float]]]:
    """Oboe's configurations by column, and quality by (column, data set)."""
    configs: dict[str, dict[str, Any]] = {}
    quality: dict[str, dict[str, float]] = defaultdict(dict)
    for r in _rows("oboe.csv.gz"):
        if r["model"] not in configs:
            configs[r["model"]] = ast.literal_eval(r["model"])
        quality[r["model"]][r["tenant"]] = float(r["quality"])
    return configs, quality


def _greedy(columns: list[str], q: np.ndarray, first: int) -> list[int]:
    """auto-sklearn 2.0's greedy portfolio (JMLR 2022, Alg. 1) over ``q`` (configs, data sets),
    starting from configuration ``first``; ties go to the earlier column."""
    chosen = [first]
    best = q[first].copy()
    while len(chosen) < PORTFOLIO_SIZE:
        gains = np.maximum(q, best).mean(axis=1) - best.mean()
        gains[chosen] = -np.inf
        k = int(np.argmax(gains))
        if gains[k] < MIN_GAIN:
            break
        chosen.append(k)
        best = np.maximum(best, q[k])
    return chosen


def portfolio() -> tuple[list[dict[str, Any]], list[tuple[str, str, str, str]]]:
    """The tabular portfolio (one entry per arm, defaults first) and its Oboe prior cells."""
    configs, quality = _oboe_configs()
    members: list[dict[str, Any]] = []
    cells: list[tuple[str, str, str, str]] = []
    for algorithm, (family, default) in OBOE_FAMILIES.items():
        columns = [
            c for c, cfg in configs.items()
            if cfg["algorithm"] == algorithm and _live_params(algorithm, cfg["hyperparameters"])
            is not None
        ]  # fmt: skip
        datasets = sorted(set.intersection(*(set(quality[c]) for c in columns)))
        q = np.array([[quality[c][d] for d in datasets] for c in columns])
        first = next(k for k, c in enumerate(columns) if configs[c]["hyperparameters"] == default)
        chosen = _greedy(columns, q, first)
        for rank, k in enumerate(chosen):
            params = _live_params(algorithm, configs[columns[k]]["hyperparameters"])
            assert params is not None
            name = family if rank == 0 else _member_name(family, params)
            members.append({
                "name": name,
                "family": family,
                "params": {} if rank == 0 else params,
                "oboe": configs[columns[k]],
                "mean_quality": round(float(q[k].mean()), 4),
                "portfolio_mean_best": round(float(q[chosen[: rank + 1]].max(axis=0).mean()), 4),
            })  # fmt: skip
            for d, value in zip(datasets, q[k], strict=True):
                cells.append(("oboe", d, name, f"{value:g}"))
    return members, cells


def _rows(name: str) -> list[dict[str, str]]:
    with gzip.open(DATA / name, "rt", newline="") as f:
        return list(csv.DictReader(f))


#: OpenML data sets whose features are an image's pixels (id: name, image size)
PIXEL_SETS = {
    "openml-554": "mnist_784, 28x28",
    "openml-40996": "Fashion-MNIST, 28x28",
    "openml-28": "optdigits, 8x8 counts",
    "openml-1501": "semeion, 16x16 binary",
    "openml-20": "mfeat-pixel, 15x16",
}


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
    out += portfolio()[1]
    # The pixel arms: tabular arms measured on pixels, in columns of their own (`d:pixels`): a
    # live tenant measures either tabular arms or pixel arms, never both, so the prior keeps
    # them apart (`policy.prior`'s blocks). Arms the catalogue has no pixel variant of
    # (boosting, saga's L1) get cells no candidate reads (`trainers.zoo.prior_quality`).
    out += [(src, f"{d}:pixels", f"pixels-{c}", q) for src, d, c, q in out if d in PIXEL_SETS]
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
    members = portfolio()[0]
    PORTFOLIO_OUT.write_text(json.dumps(members, indent=1, sort_keys=True) + "\n")
    print(f"wrote {PORTFOLIO_OUT.relative_to(ROOT)}: {len(members)} tabular arms")


if __name__ == "__main__":
    main()
