"""Derive the built-in replay data sets of `tenantml bench` from ``shared/data``.

Run once by a developer (``python infra/scripts/import_data.py ../shared/data``); the outputs are
committed under ``tenantml/data/`` so the project runs on a machine without ``shared/``.
Every output is a gzip'd long-format CSV with columns ``tenant,model,quality,cost`` (cost empty
where the source has none); ``tenantml/data/README.md`` states source, license and units.

Derivations (values are copied, only reshaped):
- ``easeml-dl``: ``easeml_gpucb/accuracy_18x9.csv`` rows 1-10 (TS-MS/prior.txt, quality only,
  kernel-only tenants ``prior-01..10``) and ``paired_8users_long.csv`` (quality + time, tenants
  ``user-1..8``).
- ``delgado179``: ``delgado179/delgado_accuracy_wide.csv`` / 100 (percent -> [0, 1]); no cost
  (the benchmark draws seeded U(0, 1) costs as ease.ml Sec. 5.1 does).
- ``oboe``: quality = 1 - balanced error (``error_matrix.csv``), cost = CV wall-clock seconds
  (``runtime_matrix.csv``); model names are the pipeline dict literals.
- ``lcdb``: ``lcdb_accuracy_final_long.csv``, the row of the largest training size per
  (data set, learner): quality = ``score_test_mean``, cost = ``traintime_mean`` seconds;
  ``lcdb.tenants.csv``, for the predicted-cost model: ``rows`` = largest ``size_train`` (every
  data set), ``features`` = ``NumberOfFeaturesAfterBinarization``, ``classes`` =
  ``NumberOfClasses`` (``lcdb_datasets_meta.csv``; where it lacks the data set, the features
  from Oboe's ``dataset_sizes.csv``, then the classes, and the features where all are numeric,
  from LCDB's printed table ``tenantml/data/lcdb.datasets.csv``, written by
  ``extract_lcdb_datasets.py``), ``size`` = rows x features; empty where not known.
- ``oboe.tenants.csv``: ``rows``, ``features`` from ``oboe_openml/dataset_sizes.csv``.
"""

from __future__ import annotations

import sys
from pathlib import Path

import pandas as pd

OUT = Path(__file__).resolve().parents[2] / "tenantml" / "data"


def _write(df: pd.DataFrame, name: str) -> None:
    df = df[["tenant", "model", "quality", "cost"]]
    path = OUT / f"{name}.csv.gz"
    df.to_csv(path, index=False, float_format="%.6g", compression={"method": "gzip", "mtime": 0})
    print(
        f"{path.name}: {len(df)} rows, {df.tenant.nunique()} tenants, {df.model.nunique()} models"
    )


def easeml(src: Path) -> None:
    acc = pd.read_csv(src / "easeml_gpucb" / "accuracy_18x9.csv")
    prior = acc[acc.source_file.str.contains("prior")].copy()
    prior["tenant"] = [f"prior-{int(r):02d}" for r in prior.source_row]
    long_prior = prior.melt(
        id_vars=["tenant"],
        value_vars=[f"m{i}" for i in range(1, 10)],
        var_name="model",
        value_name="quality",
    )
    long_prior["cost"] = float("nan")
    pairs = pd.read_csv(src / "easeml_gpucb" / "paired_8users_long.csv")
    pairs = pairs.rename(columns={"accuracy": "quality", "time": "cost"})
    pairs["tenant"] = [f"user-{u}" for u in pairs.user]
    _write(pd.concat([long_prior, pairs], ignore_index=True), "easeml-dl")


def delgado(src: Path) -> None:
    wide = pd.read_csv(src / "delgado179" / "delgado_accuracy_wide.csv")
    long = wide.melt(id_vars=["dataset"], var_name="model", value_name="quality").dropna()
    long = long.rename(columns={"dataset": "tenant"})
    long["quality"] = long.quality / 100.0
    long["cost"] = float("nan")
    _write(long, "delgado179")


def oboe(src: Path) -> None:
    err = pd.read_csv(src / "oboe_openml" / "error_matrix.csv", index_col=0)
    rt = pd.read_csv(src / "oboe_openml" / "runtime_matrix.csv", index_col=0)
    q = pd.Series((1.0 - err).stack(), name="quality")
    c = pd.Series(rt.stack(), name="cost")
    long = pd.concat([q, c], axis=1).reset_index()
    long.columns = ["tenant", "model", "quality", "cost"]
    long["tenant"] = [f"openml-{t}" for t in long.tenant]
    _write(long, "oboe")


def lcdb(src: Path) -> None:
    fin = pd.read_csv(src / "lcdb" / "lcdb_accuracy_final_long.csv")
    long = fin.rename(
        columns={"learner": "model", "score_test_mean": "quality", "traintime_mean": "cost"}
    )
    long["tenant"] = [f"openml-{t}" for t in long.openmlid]
    _write(long.dropna(subset=["quality"]), "lcdb")
    # tenant sizes for the cost model: training examples (every data set), features after
    # binarisation and classes from LCDB's meta (197 data sets), else the features from Oboe's
    # sizes (21 more), else from LCDB's printed table (lcdb.datasets.csv): its classes (31
    # more), and its features where all are numeric, which binarising leaves as they are (on
    # the 134 such data sets the meta has, within 19%; 13 more); a covariate not known stays
    # empty
    meta = pd.read_csv(src / "lcdb" / "lcdb_datasets_meta.csv").set_index("openmlid")
    table = pd.read_csv(OUT / "lcdb.datasets.csv").set_index("openmlid")
    n_train = fin.groupby("openmlid").size_train.max()
    features = meta.NumberOfFeaturesAfterBinarization.reindex(n_train.index)
    features = features.fillna(_oboe_sizes(src).features.reindex(n_train.index))
    all_numeric = table.features.where(table.numeric_features >= table.features)
    features = features.fillna(all_numeric.reindex(n_train.index))
    classes = meta.NumberOfClasses.reindex(n_train.index)
    # classes 0: OpenML's target is numeric (LCDB discretised it), so the count is not known
    classes = classes.fillna(table.classes.where(table.classes > 0).reindex(n_train.index))
    sizes = pd.DataFrame({"rows": n_train, "features": features, "classes": classes})
    _write_sizes(sizes, "lcdb")


def _oboe_sizes(src: Path) -> pd.DataFrame:
    """Oboe's ``dataset_sizes.csv``: index OpenML id, ``rows`` (instances) and ``features``
    (after one-hot encoding: 74 for kr-vs-kp, as LCDB's binarised count)."""
    raw = pd.read_csv(src / "oboe_openml" / "dataset_sizes.csv", index_col=0)
    return raw.set_axis(["rows", "features"], axis=1)


def _write_sizes(sizes: pd.DataFrame, name: str) -> None:
    """``<name>.tenants.csv``: ``tenant,size,rows,features[,classes]`` (index: OpenML ids),
    ``size`` = rows x features where both are known (what a one-size file gives); empty = not
    known."""
    out = sizes.copy()
    out.insert(0, "size", out.rows * out.features)
    out.insert(0, "tenant", [f"openml-{t}" for t in out.index])
    out.to_csv(OUT / f"{name}.tenants.csv", index=False, float_format="%.0f")
    known = out.drop(columns=["tenant", "size"]).notna().sum().to_dict()
    print(f"{name}.tenants.csv: {len(out)} tenants, covariates known: {known}")


def oboe_sizes(src: Path) -> None:
    """``oboe.tenants.csv``: rows (instances, each CV's data) and features from Oboe's sizes.
    No classes: LCDB's meta has them for 96 of the 418 data sets, and the cost model's
    regressions use only tenants with every covariate known (``cost_prediction.py oboe``,
    empirical kernel, after 1 / 3 / 5 jobs: 0.78 / 0.64 / 0.55 with rows and features, 0.79 /
    0.65 / 0.56 with those classes too)."""
    _write_sizes(_oboe_sizes(src), "oboe")


if __name__ == "__main__":
    source = Path(sys.argv[1] if len(sys.argv) > 1 else "../shared/data")
    OUT.mkdir(parents=True, exist_ok=True)
    for fn in (easeml, delgado, oboe, oboe_sizes, lcdb):
        fn(source)
