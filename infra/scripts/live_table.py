"""Markdown table of `run_live_benchmarks.sh` results: AUC of the mean average-loss curve, how
much smaller `live`'s is than round robin's (issue 16's replay target: >= 10%), the final loss,
and the loss estimate the service would show at the end (summary.json).

Usage: python infra/scripts/live_table.py OUT_DIR
"""

from __future__ import annotations

import json
import sys
from pathlib import Path

SETS = ("easeml-dl", "delgado179", "oboe", "lcdb")
POLICIES = ("live", "rate", "hybrid", "roundrobin")


def main(out: Path) -> None:
    print("| data set | repeats | " + " | ".join(f"{p} AUC" for p in POLICIES) + " | live below "
          "round robin | live final loss | live loss estimate (mean abs. error) |")  # fmt: skip
    print("|---" * (len(POLICIES) + 5) + "|")
    for ds in SETS:
        path = out / ds / "summary.json"
        if not path.exists():
            continue
        summary = json.loads(path.read_text())
        pol = summary["policies"]
        aucs = [pol[p]["auc_avg_loss"] for p in POLICIES]
        best = min(aucs)
        cells = [f"**{a:.4f}**" if a == best else f"{a:.4f}" for a in aucs]
        live = pol["live"]
        below = 1 - live["auc_avg_loss"] / pol["roundrobin"]["auc_avg_loss"]
        est = live["loss_estimate"]
        print(
            f"| {ds} | {summary['protocol']['repeats']} | " + " | ".join(cells) + f" | {below:.0%} "
            f"| {live['final_avg_loss']:.4f} | "
            f"{est['predicted_mean']:.4f} ({est['mean_abs_error']:.4f}) |"
        )


if __name__ == "__main__":
    main(Path(sys.argv[1] if len(sys.argv) > 1 else "results/live"))
