"""Derive the built-in learning-curve sets (``tenantml seer simulate --curves NAME``) from
``shared/data``.

Run once by a developer (``python infra/scripts/import_curves.py ../shared/data``); the outputs
are committed under ``tenantml/data/curves/`` so the project runs without ``shared/``.

Every output is a gzip'd long CSV ``group,curve_id,step,metric,seconds[,hp_*]``: one group is one
tuning problem, its curves are the configurations tried, ``seconds`` is the cumulative training
time (single accelerator) at which ``metric`` (higher is better) was measured, and ``hp_*`` columns
carry each configuration's hyperparameters (constant per curve). Values are copied; only reshaped.

- ``opda-alexnet`` / ``opda-convnext``: OPDA ImageNet random searches, one group each; step =
  epoch + 1, metric = validation top-1, seconds = the run's ``time``. Runs with no curve point are
  left out (49 / 71 runs); diverged runs (NaN training loss) are kept, as a tuner meets them.
- ``opda-deberta``: OPDA MultiNLI runs of deberta-base and deberta-v3-base (one group each),
  metric = matched accuracy, step = optimisation steps; no wall clock exists, so ``seconds`` is
  empty (the simulator then counts one step as one time unit).
- ``lcdb``: LCDB mean curves, group = OpenML data set, curve = learner, step = anchor index,
  metric = mean validation accuracy, seconds = cumulative mean fit time over the anchors (training
  anew at each anchor, as a successive-halving run over training-set size does).
"""

from __future__ import annotations

import gzip
import json
import sys
from pathlib import Path

import pandas as pd

OUT = Path(__file__).resolve().parents[2] / "tenantml" / "data" / "curves"
HP_IMAGENET = [
    "lr",
    "momentum",
    "weight_decay",
    "label_smoothing",
    "batch_size",
    "epochs",
    "lr_peak_epoch",
]
HP_DEBERTA = [
    "learning_rate",
    "num_train_epochs",
    "train_batch_size",
    "warmup_steps",
    "cls_drop_out",
]


def _write(df: pd.DataFrame, name: str) -> None:
    OUT.mkdir(parents=True, exist_ok=True)
    path = OUT / f"{name}.csv.gz"
    df.to_csv(path, index=False, float_format="%.6g", compression={"method": "gzip", "mtime": 0})
    print(f"{path.name}: {len(df)} rows, {df.group.nunique()} groups, {df.curve_id.nunique()} ids")


def _jsonl(path: Path) -> list[dict[str, object]]:
    with gzip.open(path, "rt") as f:
        return [json.loads(line) for line in f]


def imagenet(shared: Path, model: str) -> pd.DataFrame:
    rows = []
    for run in _jsonl(shared / "opda_curves" / f"{model}_tuning.results.jsonl.gz"):
        hps = {f"hp_{k}": run[k] for k in HP_IMAGENET}
        for point in run["learning_curve"]:  # type: ignore[attr-defined]
            rows.append(
                {
                    "group": f"{model}-imagenet",
                    "curve_id": run["iteration"],
                    "step": point["epoch"] + 1,
                    "metric": point["top_1"],
                    "seconds": point["time"],
                    **hps,
                }
            )
    return pd.DataFrame(rows)


def deberta(shared: Path) -> pd.DataFrame:
    rows = []
    for model in ("deberta-base", "deberta-v3-base"):
        for run in _jsonl(shared / "opda_curves" / f"{model}_tuning.results.jsonl.gz"):
            hps = {f"hp_{k}": run[k] for k in HP_DEBERTA}
            for step, acc in run["learning_curves"]["matched"]:  # type: ignore[index]
                rows.append(
                    {
                        "group": f"{model}-mnli",
                        "curve_id": run["iteration"],
                        "step": step,
                        "metric": acc,
                        "seconds": None,
                        **hps,
                    }
                )
    return pd.DataFrame(rows)


def lcdb(shared: Path) -> pd.DataFrame:
    df = pd.read_csv(shared / "lcdb" / "lcdb_accuracy_curves_mean.csv.gz")
    df = df.sort_values(["openmlid", "learner", "size_train"])
    df["seconds"] = df.groupby(["openmlid", "learner"])["traintime_mean"].cumsum()
    df["step"] = df.groupby(["openmlid", "learner"]).cumcount() + 1
    return pd.DataFrame(
        {
            "group": "openml-" + df.openmlid.astype(str),
            "curve_id": df.learner,
            "step": df.step,
            "metric": df.score_valid_mean,
            "seconds": df.seconds,
        }
    )


def main(shared: Path) -> None:
    _write(imagenet(shared, "alexnet"), "opda-alexnet")
    _write(imagenet(shared, "convnext-tiny").assign(group="convnext-imagenet"), "opda-convnext")
    _write(deberta(shared), "opda-deberta")
    _write(lcdb(shared), "lcdb")


if __name__ == "__main__":
    main(Path(sys.argv[1]) if len(sys.argv) > 1 else Path("../shared/data"))
