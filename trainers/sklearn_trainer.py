"""The scikit-learn trainer for tabular classification (and image classification on the flattened
pixels, `trainers.templates.PIXEL_MODELS`): fit on the training split, score on the
validation split; same `TrainJob` / `TrainResult` as the torch trainer (one "epoch").

A tabular arm is a family's estimator (`ESTIMATORS`) with the settings its portfolio entry fixes
(`trainers.zoo.ModelSpec.params`), then the job's own ``hyperparameters`` on top. Gradient
boosting is scikit-learn's histogram variant, the algorithm of LightGBM (Ke et al. 2017) inside
the library the service already depends on: XGBoost's wheel brings about 200 MB of GPU
libraries, CatBoost's about 100 MB and a slower fit on small data, and LightGBM would be a
second copy of the same algorithm.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from typing import Any

from sklearn.base import ClassifierMixin
from sklearn.ensemble import (
    ExtraTreesClassifier,
    HistGradientBoostingClassifier,
    RandomForestClassifier,
)
from sklearn.linear_model import LogisticRegression
from sklearn.neighbors import KNeighborsClassifier
from sklearn.neural_network import MLPClassifier
from sklearn.pipeline import Pipeline
from sklearn.preprocessing import StandardScaler
from sklearn.svm import SVC

from store import ExampleStore, is_class_output
from trainers._data import split
from trainers._job import EpochReport, TrainJob, TrainResult
from trainers._model import TrainedModel
from trainers.templates import Candidate
from trainers.zoo import ZOO

__all__ = ["ESTIMATORS", "train_sklearn"]

ESTIMATORS: dict[str, Callable[[int], ClassifierMixin]] = {
    "logistic_regression": lambda seed: LogisticRegression(max_iter=2000),
    "random_forest": lambda seed: RandomForestClassifier(n_estimators=200, random_state=seed),
    "extra_trees": lambda seed: ExtraTreesClassifier(n_estimators=200, random_state=seed),
    "gradient_boosting": lambda seed: HistGradientBoostingClassifier(random_state=seed),
    "svm": lambda seed: SVC(C=1.0, gamma="scale"),
    "knn": lambda seed: KNeighborsClassifier(n_neighbors=5),
    "mlp": lambda seed: MLPClassifier((100,), max_iter=1000, random_state=seed),
}


def train_sklearn(
    job: TrainJob, store: ExampleStore, on_epoch: Callable[[EpochReport], None] | None = None
) -> TrainResult:
    job.validate()
    cand = Candidate.parse(job.candidate)
    spec = cand.spec
    if spec.estimator not in ESTIMATORS:
        tabular = [n for n, s in ZOO.items() if s.estimator in ESTIMATORS]
        raise ValueError(f"{job.candidate} is not a scikit-learn model: {tabular}")
    schema = store.schema(job.tenant)
    if not is_class_output(schema):
        raise ValueError(f"{job.candidate} needs class outputs Tensor[D]; got {schema.output}")
    snapshot = job.snapshot if job.snapshot is not None else store.manifest(job.tenant).version
    ds = store.load(job.tenant, snapshot)
    tr, va = split(ds, job.val_fraction, job.seed, stratify=True)
    x = ds.x.reshape(len(ds), -1).astype("float32")
    est = Pipeline([("scale", StandardScaler()), ("model", ESTIMATORS[spec.estimator](job.seed))])
    settings = {**dict(spec.params), **job.hyperparameters}
    params: dict[str, Any] = {f"model__{k}": v for k, v in settings.items()}
    try:
        est.set_params(**params)
    except ValueError as e:
        valid = sorted(est.named_steps["model"].get_params())
        raise ValueError(
            f"hyperparameters {dict(job.hyperparameters)} are not valid for {spec.estimator}: "
            f"{e}; valid names: {valid}"
        ) from None
    start = time.perf_counter()
    est.fit(x[tr], ds.y[tr])
    acc = float((est.predict(x[va]) == ds.y[va]).mean())
    cost = time.perf_counter() - start
    report = EpochReport(0.0, 1, 0.0, acc, cost)
    if on_epoch is not None:
        on_epoch(report)
    return TrainResult(
        job_id=job.resolved_id(snapshot),
        tenant=job.tenant,
        candidate=job.candidate,
        snapshot=snapshot,
        accuracy=acc,
        cost_s=cost,
        epochs=1,
        hyperparameters=dict(job.hyperparameters),
        model=TrainedModel(job.candidate, schema, ds.classes, est),
        curve=[report],
        n_train=len(tr),
        n_val=len(va),
    )
