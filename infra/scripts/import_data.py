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
  ``lcdb.tenants.csv``, for the predicted-cost model: ``rows`` = largest ``size_train``,
  ``features`` = ``NumberOfFeaturesAfterBinarization``, ``classes`` = ``NumberOfClasses``
  (``lcdb_datasets_meta.csv``), and ``size`` = rows x features (the one-number size a file of
  ``tenant,size`` gives).
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
    q = (1.0 - err).stack().rename("quality")
    c = rt.stack().rename("cost")
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
    # tenant sizes for the cost model: training examples, features after binarisation, classes
    meta = pd.read_csv(src / "lcdb" / "lcdb_datasets_meta.csv").set_index("openmlid")
    n_train = fin.groupby("openmlid").size_train.max()
    sizes = pd.DataFrame(
        {
            "rows": n_train,
            "features": meta.NumberOfFeaturesAfterBinarization.reindex(n_train.index),
            "classes": meta.NumberOfClasses.reindex(n_train.index),
        }
    ).dropna()
    sizes.insert(0, "size", sizes.rows * sizes.features)
    sizes.insert(0, "tenant", [f"openml-{t}" for t in sizes.index])
    sizes.to_csv(OUT / "lcdb.tenants.csv", index=False, float_format="%.0f")
    print(f"lcdb.tenants.csv: {len(sizes)} tenant sizes")


if __name__ == "__main__":
    source = Path(sys.argv[1] if len(sys.argv) > 1 else "../shared/data")
    OUT.mkdir(parents=True, exist_ok=True)
    for fn in (easeml, delgado, oboe, lcdb):
        fn(source)
