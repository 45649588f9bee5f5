"""The scikit-learn trainer for tabular classification (and image classification on the flattened
pixels, `trainers.templates.PIXEL_MODELS`): fit on the training split, score on the
validation split; same `TrainJob` / `TrainResult` as the torch trainer (one "epoch").

On a small tabular tenant (`trainers.cross_validates`: at most `CV_MAX_EXAMPLES` examples,
each class in every fold) a job is scored by stratified `CV_FOLDS`-fold cross-validation
instead, its accuracy the out-of-fold accuracy on every example, and the model it returns is
refitted on all of them (as FLAML and auto-sklearn do on small data). The 20 % split of a
200-row tenant measures a model on 40 rows, where a 0.05 difference is a coin toss: the
service then serves whichever model was luckiest, trained on 80 % of the rows.

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

import numpy as np
from sklearn.base import ClassifierMixin, clone
from sklearn.ensemble import (
    ExtraTreesClassifier,
    HistGradientBoostingClassifier,
    RandomForestClassifier,
)
from sklearn.linear_model import LogisticRegression
from sklearn.model_selection import StratifiedKFold, cross_val_predict
from sklearn.neighbors import KNeighborsClassifier
from sklearn.neural_network import MLPClassifier
from sklearn.pipeline import Pipeline
from sklearn.preprocessing import StandardScaler
from sklearn.svm import SVC

from store import ExampleStore, is_class_output
from trainers._data import split
from trainers._job import CV_FOLDS, EpochReport, TrainJob, TrainResult, cross_validates
from trainers._model import TrainedModel
from trainers.templates import Candidate, torch_candidates
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
    _, counts = np.unique(ds.y, return_counts=True)
    # a tenant with networks among its arms (an image tenant's pixel arms) keeps the holdout
    # they validate on: one noise level per tenant, as `tasks._service.build_problem` tells
    # the policy (`trainers.validation_size`)
    if not torch_candidates(schema) and cross_validates(len(ds), int(counts.min())):
        folds = StratifiedKFold(CV_FOLDS, shuffle=True, random_state=job.seed)
        out_of_fold = cross_val_predict(clone(est), x, ds.y, cv=folds)
        acc = float((out_of_fold == ds.y).mean())
        est.fit(x, ds.y)
        n_train = n_val = len(ds)
    else:
        tr, va = split(ds, job.val_fraction, job.seed, stratify=True)
        est.fit(x[tr], ds.y[tr])
        acc = float((est.predict(x[va]) == ds.y[va]).mean())
        n_train, n_val = len(tr), len(va)
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
        n_train=n_train,
        n_val=n_val,
    )
