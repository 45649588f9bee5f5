"""The model zoo: every candidate model with the metadata the MostRecent/MostCited baselines use.

Years are first publication. Citation counts are approximate orders of magnitude (Google
Scholar, rounded; for the networks in ease.ml's DL data set, the values of
``tenantml/data/easeml-dl.models.csv``).
They only order the MostCited baseline, so their precision does not matter.
"""

from __future__ import annotations

import csv
import gzip
import json
import math
from collections.abc import Sequence
from dataclasses import dataclass, replace
from functools import cache
from importlib import resources
from typing import Any, Literal

import numpy as np
from numpy.typing import NDArray

__all__ = [
    "PIXEL_MODELS",
    "RELATIVE_COST",
    "SKLEARN_COST_FILE",
    "TABULAR_MODELS",
    "ZOO",
    "ModelSpec",
    "prior_quality",
]

Family = Literal["cnn", "autoencoder", "rnn", "sklearn"]


@dataclass(frozen=True)
class ModelSpec:
    """One catalogue model. A tabular portfolio member (see `TABULAR_MODELS`) names the
    scikit-learn ``estimator`` it configures and the settings ``params`` it fixes; a model
    trained with its estimator's defaults has ``estimator == name`` and no params."""

    name: str
    title: str
    family: Family
    year: int
    citations: int
    reference: str
    estimator: str = ""
    params: tuple[tuple[str, Any], ...] = ()


ZOO: dict[str, ModelSpec] = {
    s.name: s
    for s in [
        ModelSpec("alexnet", "AlexNet", "cnn", 2012, 170000, "Krizhevsky et al., NeurIPS 2012"),
        ModelSpec("bn_alexnet", "BN-AlexNet", "cnn", 2015, 55000, "Ioffe & Szegedy, ICML 2015"),
        ModelSpec("resnet18", "ResNet-18", "cnn", 2015, 250000, "He et al., CVPR 2016"),
        ModelSpec("resnet50", "ResNet-50", "cnn", 2015, 250000, "He et al., CVPR 2016"),
        ModelSpec("googlenet", "GoogLeNet", "cnn", 2014, 60000, "Szegedy et al., CVPR 2015"),
        ModelSpec("squeezenet", "SqueezeNet", "cnn", 2016, 9000, "Iandola et al., 2016"),
        ModelSpec("vgg16", "VGG-16", "cnn", 2014, 130000, "Simonyan & Zisserman, ICLR 2015"),
        ModelSpec("nin", "NIN", "cnn", 2013, 9000, "Lin, Chen & Yan, ICLR 2014"),
        ModelSpec("lenet", "LeNet-5", "cnn", 1998, 60000, "LeCun et al., Proc. IEEE 1998"),
        ModelSpec(
            "conv_autoencoder",
            "Conv. auto-encoder",
            "autoencoder",
            2011,
            3000,
            "Masci et al., ICANN 2011",
        ),
        ModelSpec("rnn", "RNN", "rnn", 1990, 15000, "Elman, Cognitive Science 1990"),
        ModelSpec("lstm", "LSTM", "rnn", 1997, 100000, "Hochreiter & Schmidhuber 1997"),
        ModelSpec("bilstm", "bi-LSTM", "rnn", 2005, 6000, "Graves & Schmidhuber 2005"),
        ModelSpec("gru", "GRU", "rnn", 2014, 30000, "Cho et al., EMNLP 2014"),
    ]
}

#: the tabular families, each trained with scikit-learn's defaults under its own name
_TABULAR_FAMILIES = [
    ModelSpec("logistic_regression", "Logistic regression", "sklearn", 1958, 10000, "Cox 1958"),
    ModelSpec("random_forest", "Random forest", "sklearn", 2001, 120000, "Breiman 2001"),
    ModelSpec("extra_trees", "Extra trees", "sklearn", 2006, 8000, "Geurts et al. 2006"),
    ModelSpec(
        "gradient_boosting",
        "Histogram gradient boosting",
        "sklearn",
        2017,
        15000,
        "Friedman 2001; Ke et al. (LightGBM), NeurIPS 2017",
    ),
    ModelSpec("svm", "SVM", "sklearn", 1995, 60000, "Cortes & Vapnik 1995"),
    ModelSpec("knn", "k-NN", "sklearn", 1967, 20000, "Cover & Hart 1967"),
    ModelSpec("mlp", "MLP", "sklearn", 1986, 40000, "Rumelhart et al. 1986"),
]

#: The tabular portfolio: per family its defaults and the configurations chosen greedily from
#: real data (Oboe's 418 OpenML data sets; auto-sklearn 2.0's portfolio construction), each an
#: arm of its own. Built by ``infra/scripts/build_live_prior.py``.
PORTFOLIO_FILE = "tabular_portfolio.json"


@cache
def _portfolio() -> list[dict[str, Any]]:
    text = resources.files("trainers").joinpath(PORTFOLIO_FILE).read_text()
    members: list[dict[str, Any]] = json.loads(text)
    return members


def _member(entry: dict[str, Any], base: ModelSpec) -> ModelSpec:
    params = tuple(sorted(entry["params"].items()))
    shown = ", ".join(f"{k}={v}" for k, v in params if k != "solver")
    title = base.title if not params else f"{base.title} ({shown})"
    return replace(base, name=entry["name"], title=title, estimator=base.name, params=params)


_FAMILY = {s.name: replace(s, estimator=s.name) for s in _TABULAR_FAMILIES}
#: every tabular arm, in the portfolio's order (family by family, defaults first)
TABULAR_MODELS: tuple[str, ...] = tuple(e["name"] for e in _portfolio())
ZOO.update({e["name"]: _member(e, _FAMILY[e["family"]]) for e in _portfolio()})

#: Tabular arms on an image task's flattened pixels (`trainers.templates`), as arms of their own
#: (``pixels-<arm>``): the same estimator and settings, but a model on pixels is not the model
#: on a tabular data set, so the learnt prior keeps them apart (the shipped matrix measures the
#: tabular arms on tabular data only; a pixel arm's prior is learnt from image tenants). Left out:
#: the gradient-boosting members and the L1 (saga) logistic regressions, whose cost grows with
#: hundreds of features and ten classes in a way the cost prior cannot foresee (see
#: `trainers.templates`).
PIXEL_MODELS: tuple[str, ...] = tuple(
    f"pixels-{m}"
    for m in TABULAR_MODELS
    if ZOO[m].estimator != "gradient_boosting" and dict(ZOO[m].params).get("solver") != "saga"
)
ZOO.update(
    {p: replace(ZOO[p[7:]], name=p, title=f"{ZOO[p[7:]].title} on pixels") for p in PIXEL_MODELS}
)


#: Measured seconds per 1,000 examples of a holdout job for every scikit-learn arm, tabular and
#: pixel (`trainers.cost_size`: a cross-validated job counts `CV_WORK` times its examples), on
#: tasks that are not bench-live's tenants; written by ``infra/scripts/time_sklearn_arms.py``.
SKLEARN_COST_FILE = "sklearn_costs.json"


@cache
def _sklearn_costs() -> dict[str, Any]:
    text = resources.files("trainers").joinpath(SKLEARN_COST_FILE).read_text()
    doc: dict[str, Any] = json.loads(text)
    return doc


#: Training cost in seconds on one device for 1,000 examples: of one epoch for a torch model
#: (rough, orders of magnitude for small inputs on a CPU core), of one holdout job for a
#: scikit-learn model (measured: `SKLEARN_COST_FILE`); `tasks._service.build_problem` scales
#: them apart. Only the *prior* of the live service's cost model (`policy.costs.CostPrior`):
#: each tenant's scale is learnt from its finished jobs, so the ratios between models are what
#: matters, until the models' own jobs report.
RELATIVE_COST: dict[str, float] = {
    "lenet": 0.5,
    "nin": 8.0,
    "squeezenet": 3.0,
    "resnet18": 15.0,
    "googlenet": 20.0,
    "alexnet": 25.0,
    "bn_alexnet": 25.0,
    "resnet50": 40.0,
    "vgg16": 100.0,
    "conv_autoencoder": 1.0,
    "rnn": 0.5,
    "lstm": 1.0,
    "bilstm": 2.0,
    "gru": 1.0,
}
RELATIVE_COST.update(
    {k: _sklearn_costs()["seconds_per_1000"][k] for k in (*TABULAR_MODELS, *PIXEL_MODELS)}
)

#: How a model's training cost grows with the examples, ``(e, size)``: a fit's cost like
#: ``examples^e``, ``RELATIVE_COST`` holding at ``size`` examples (a fit's, where
#: `trainers.cost_size` counts a cross-validated job's folds). Measured for the
#: scikit-learn arms (`SKLEARN_COST_FILE`'s ``size_exponent`` and ``reference_size``: a
#: polynomial SVM's ``e`` is about 2, histogram boosting's far below 1); a torch model's epoch
#: costs what its examples do, ``e = 1``, and so does an arm the file has not timed yet
#: (`UNMEASURED_GROWTH`).
UNMEASURED_GROWTH: tuple[float, float] = (1.0, 1000.0)
COST_GROWTH: dict[str, tuple[float, float]] = {
    k: (
        _sklearn_costs().get("size_exponent", {}).get(k, UNMEASURED_GROWTH[0]),
        _sklearn_costs()
        .get("reference_size", {})
        .get("pixels" if k in PIXEL_MODELS else "tabular", UNMEASURED_GROWTH[1]),
    )
    for k in (*TABULAR_MODELS, *PIXEL_MODELS)
}

#: The most examples `COST_GROWTH` was measured at: past them a tenant's costs grow like its
#: examples (`tasks._service.build_problem`), not by a power law fitted below them.
GROWTH_MEASURED_UP_TO: float = float(
    max(_sklearn_costs()["measured_on"].get("growth", {}).get("rows", [math.inf]))
)


#: The catalogue's qualities on real data sets, the live GP prior's starting point: LCDB (248
#: OpenML data sets) for the tabular arms, the ease.ml authors' CNN matrix (18 data sets) for the
#: image arms. Rebuilt by ``infra/scripts/build_live_prior.py``; sources and licenses in
#: ``tenantml/data/README.md``.
PRIOR_FILE = "zoo_prior.csv.gz"


@cache
def _prior_cells() -> tuple[tuple[str, str, float], ...]:
    with resources.files("trainers").joinpath(PRIOR_FILE).open("rb") as raw:
        with gzip.open(raw, "rt", newline="") as f:
            return tuple(
                (f"{r['source']}/{r['dataset']}", r["candidate"], float(r["quality"]))
                for r in csv.DictReader(f)
            )


def prior_quality(candidates: Sequence[str]) -> NDArray[np.float64]:
    """(M, n0) quality of each candidate (``model`` or ``model+fk``) on each shipped data set
    that measured at least one of them; NaN where not measured (``+fk`` variants: never)."""
    row = {c: k for k, c in enumerate(candidates)}
    cells = [(d, row[c], q) for d, c, q in _prior_cells() if c in row]
    datasets = sorted({d for d, _, _ in cells})
    col = {d: j for j, d in enumerate(datasets)}
    out = np.full((len(candidates), len(datasets)), np.nan)
    for d, k, q in cells:
        out[k, col[d]] = q
    return out
