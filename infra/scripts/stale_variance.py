"""How far a model's accuracy moves when its training data double: the numbers behind
``policy._book.STALE_VAR`` and ``STALE_FLOOR`` (a tenant's results on an earlier snapshot of its
data, after it fed or refined them).

Reads the carried LCDB learning curves (``tenantml/data/curves/lcdb.csv.gz``; anchors grow by
sqrt(2) per step, step 6 = 91 training examples) and prints, over every curve and every anchor
from ``--from-step`` on, the change of accuracy two steps later (the data doubled): how many
pairs, the mean change and its RMS.

Run from the repository root: ``python infra/scripts/stale_variance.py``.
"""

from __future__ import annotations

import argparse
from pathlib import Path

import numpy as np
import pandas as pd

CURVES = Path(__file__).resolve().parents[2] / "tenantml" / "data" / "curves" / "lcdb.csv.gz"


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--from-step", type=int, default=6, help="first anchor (6: 91 examples)")
    args = ap.parse_args()
    curves = pd.read_csv(CURVES)
    # the metric two steps later on the same curve, where that anchor exists
    later = curves.assign(step=curves["step"] - 2)[["group", "curve_id", "step", "metric"]]
    pairs = curves.merge(later, on=["group", "curve_id", "step"], suffixes=("", "_doubled"))
    pairs = pairs[pairs["step"] >= args.from_step]
    change = (pairs["metric_doubled"] - pairs["metric"]).to_numpy()
    rms = float(np.sqrt(np.mean(change**2)))
    print(f"pairs {len(change)}  mean change {change.mean():+.4f}  RMS {rms:.4f}")


if __name__ == "__main__":
    main()
