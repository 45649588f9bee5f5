"""Markdown tables of ``run_seer_benchmarks.sh`` results.

1. Every method's final metric (overall mean ± s.e.), whether SEER and SEER with its plan
   filled reach the best baseline within one standard error, and the budget each spent.
2. Where ``peer/`` exists: our ASHA and BOHB beside Syne Tune's on the same problems, with
   whether they agree within two standard errors.
"""

from __future__ import annotations

import json
import math
import sys
from pathlib import Path

OURS = ("seer", "seer-fill")


def _cell(v: dict[str, float]) -> str:
    return f"{v['mean']:.3f} ± {v['se']:.3f}"


def methods_table(root: Path) -> list[str]:
    runs = sorted(root.glob("*/summary.json"))
    methods: list[str] = []
    rows = []
    for path in runs:
        s = json.loads(path.read_text())
        overall, spent = s["overall"], s.get("spent", {})
        methods = methods or list(overall)
        baselines = [m for m in overall if m not in OURS]
        best = max(baselines, key=lambda m: overall[m]["mean"])
        verdicts = []
        for m in (m for m in OURS if m in overall):
            reach = overall[m]["mean"] + overall[m]["se"] >= overall[best]["mean"]
            verdicts.append("yes" if reach else "no")
        spend = " / ".join(f"{spent[m]:.0%}" for m in OURS if m in spent)
        rows.append(
            f"| {path.parent.name} | {len(s['groups'])} | "
            + " | ".join(_cell(overall[m]) for m in methods)
            + f" | {' / '.join(verdicts)} | {spend} | {spent.get(best, math.nan):.0%} |"
        )
    head = "| run | groups | " + " | ".join(methods)
    head += " | >= best baseline (1 s.e.): seer / seer-fill | B spent: seer / seer-fill"
    head += " | B spent: best baseline |"
    return [head, "|---|---|" + "---|" * len(methods) + "---|---|---|", *rows]


def peer_table(root: Path) -> list[str]:
    rows = []
    for path in sorted((root / "peer").glob("*/summary.json")):
        s = json.loads(path.read_text())
        overall = s["overall"]
        for m in ("asha", "bohb"):
            theirs = overall.get(f"synetune:{m}")
            if theirs is None:
                continue
            ours = overall[m]
            se = math.hypot(ours["se"], theirs["se"])
            agree = abs(ours["mean"] - theirs["mean"]) <= 2 * se
            rows.append(
                f"| {path.parent.name} | {len(s['groups'])} | {m} | {_cell(ours)} | "
                f"{_cell(theirs)} | {'yes' if agree else 'no'} |"
            )
    if not rows:
        return []
    head = "| run | groups | method | ours | Syne Tune 0.16 | within 2 s.e. |"
    return [head, "|---|---|---|---|---|---|", *rows]


def main(root: Path) -> None:
    print("\n".join(methods_table(root)))
    peers = peer_table(root)
    if peers:
        print()
        print("\n".join(peers))


if __name__ == "__main__":
    main(Path(sys.argv[1] if len(sys.argv) > 1 else "results/seer"))
