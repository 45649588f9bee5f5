"""Markdown table of `run_live_benchmarks.sh` results: AUC of the mean average-loss curve, the
final loss, and the loss estimate the service would show at the end (summary.json).

Usage: python infra/scripts/live_table.py OUT_DIR
"""

from __future__ import annotations

import json
import sys
from pathlib import Path

SETS = ("easeml-dl", "delgado179", "oboe", "lcdb")
POLICIES = ("live", "rate", "hybrid")


def main(out: Path) -> None:
    print("| data set | " + " | ".join(f"{p} AUC" for p in POLICIES) + " | live final loss "
          "| live loss estimate (mean abs. error) | rate loss estimate |")  # fmt: skip
    print("|---" * (len(POLICIES) + 4) + "|")
    for ds in SETS:
        path = out / ds / "summary.json"
        if not path.exists():
            continue
        pol = json.loads(path.read_text())["policies"]
        aucs = [pol[p]["auc_avg_loss"] for p in POLICIES]
        best = min(aucs)
        cells = [f"**{a:.4f}**" if a == best else f"{a:.4f}" for a in aucs]
        live, rate = pol["live"], pol["rate"]
        est, rest = live["loss_estimate"], rate["loss_estimate"]
        print(
            f"| {ds} | " + " | ".join(cells) + f" | {live['final_avg_loss']:.4f} | "
            f"{est['predicted_mean']:.4f} ({est['mean_abs_error']:.4f}) | "
            f"{rest['predicted_mean']:.4f} vs {rest['realised_mean']:.4f} |"
        )


if __name__ == "__main__":
    main(Path(sys.argv[1] if len(sys.argv) > 1 else "results/live"))
