"""Measure how much two tabular arms' validation accuracies share their noise, for
``policy.acquisition.ERROR_CORRELATION``.

A live tenant serves the model whose *validation* accuracy is best, and the policy discounts a
job's expected gain by the noise of comparing two such measurements (``policy.rate``,
``policy.acquisition.selected_improvement``). Both models are measured on the same examples
(the same cross-validation folds, or the same holdout), and they tend to fail on the same hard
examples, so the difference of their accuracies varies far less than two independent binomial
measurements would: ``Var(acc_a - acc_b) = (1 - r) (Var(acc_a) + Var(acc_b))``, with ``r`` the
share of the noise the two measurements have in common.

Each of the seven scikit-learn families (``trainers.sklearn_trainer.ESTIMATORS``, defaults,
in the trainer's pipeline with its standard scaling) is cross-validated as the service does it
(``CV_FOLDS`` stratified folds, out-of-fold predictions on every example) on tasks that are not
among ``bench-live``'s tenants: scikit-learn's bundled iris, wine, breast-cancer and digits (as
64 features), and two seeded ``make_classification`` sets. For every pair of families on
every task, with ``c_a`` and ``c_b`` their 0/1 correct-or-not vectors over the ``n``
examples, it computes ``1 - Var(c_a - c_b) / (Var(c_a) + Var(c_b))`` and prints the
per-task medians and the median over all pairs and tasks (the value to use).

Usage: ``.venv/bin/python infra/scripts/measure_error_correlation.py`` (under a minute here).
"""

from __future__ import annotations

import itertools
import statistics
import warnings

import numpy as np
from numpy.typing import NDArray
from sklearn.datasets import (
    load_breast_cancer,
    load_digits,
    load_iris,
    load_wine,
    make_classification,
)
from sklearn.model_selection import StratifiedKFold, cross_val_predict
from sklearn.pipeline import Pipeline
from sklearn.preprocessing import StandardScaler

from trainers._job import CV_FOLDS
from trainers.sklearn_trainer import ESTIMATORS


def _tasks() -> dict[str, tuple[NDArray[np.float64], NDArray[np.int64]]]:
    synthetic = {
        "synthetic-600x20-k2": make_classification(
            600, 20, n_informative=6, flip_y=0.1, random_state=0
        ),
        "synthetic-900x12-k4": make_classification(
            900, 12, n_informative=5, n_classes=4, flip_y=0.1, random_state=1
        ),
    }
    bundled = {
        name: loader(return_X_y=True)
        for name, loader in (
            ("iris", load_iris),
            ("wine", load_wine),
            ("breast-cancer", load_breast_cancer),
            ("digits", load_digits),
        )
    }
    return {**bundled, **synthetic}


def shared_noise(correct_a: NDArray[np.float64], correct_b: NDArray[np.float64]) -> float:
    """``1 - Var(c_a - c_b) / (Var(c_a) + Var(c_b))`` of two 0/1 correctness vectors (0 where
    both are constant)."""
    independent = float(correct_a.var() + correct_b.var())
    if independent == 0:
        return 0.0
    return 1.0 - float((correct_a - correct_b).var()) / independent


def main() -> None:
    warnings.filterwarnings("ignore")  # convergence warnings of the defaults on small sets
    shares: list[float] = []
    for name, (x, y) in _tasks().items():
        folds = StratifiedKFold(CV_FOLDS, shuffle=True, random_state=0)
        correct = {}
        for family, make in ESTIMATORS.items():
            est = Pipeline([("scale", StandardScaler()), ("model", make(0))])
            correct[family] = (cross_val_predict(est, x, y, cv=folds) == y).astype(float)
        here = [shared_noise(correct[a], correct[b]) for a, b in itertools.combinations(correct, 2)]
        shares += here
        accuracies = " ".join(f"{f}={c.mean():.2f}" for f, c in correct.items())
        print(f"{name:22s} n={len(y):5d} median {statistics.median(here):.2f}  ({accuracies})")
    print(
        f"all {len(shares)} pairs: median {statistics.median(shares):.2f}, "
        f"mean {statistics.fmean(shares):.2f}"
    )


if __name__ == "__main__":
    main()
