"""Markdown table of ``run_seer_benchmarks.sh`` results: overall mean ± s.e. per method."""

from __future__ import annotations

import json
import sys
from pathlib import Path


def main(root: Path) -> None:
    runs = sorted(p for p in root.glob("*/summary.json"))
    methods: list[str] = []
    rows = []
    for path in runs:
        s = json.loads(path.read_text())
        overall = s["overall"]
        methods = methods or list(overall)
        best_other = max(v["mean"] for m, v in overall.items() if m != "seer")
        cells = [f"{overall[m]['mean']:.3f} ± {overall[m]['se']:.3f}" for m in methods]
        verdict = "yes" if overall["seer"]["mean"] >= best_other else "no"
        rows.append(
            f"| {path.parent.name} | {len(s['groups'])} | "
            + " | ".join(cells)
            + f" | {verdict} | {s['seconds']:.1f} |"
        )
    print("| run | groups | " + " | ".join(methods) + " | SEER >= all | seconds |")
    print("|---|---|" + "---|" * len(methods) + "---|---|")
    print("\n".join(rows))


if __name__ == "__main__":
    main(Path(sys.argv[1] if len(sys.argv) > 1 else "results/seer"))
