"""Markdown tables of ``run_seer_benchmarks.sh`` results.

1. Every method's final metric (overall mean ± s.e.), the best baseline (Syne Tune's ASHA and
   BOHB count where they ran on the same groups), whether SEER, SEER with its plan filled and
   the re-planning tuner reach it within one standard error, and the budget each spent.
2. Where ``peer/`` exists: our ASHA and BOHB beside Syne Tune's on the same problems, with
   whether they agree within two standard errors.
"""

from __future__ import annotations

import json
import math
import sys
from pathlib import Path

OURS = ("seer", "seer-fill", "replan")


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
        # Syne Tune's ASHA/BOHB count as baselines where the peer ran on the same problems
        # (for LCDB on its first groups only: left out there, the groups differ)
        peer = root / "peer" / path.parent.name / "summary.json"
        baselines = {m: v for m, v in overall.items() if m not in OURS}
        if peer.exists():
            p = json.loads(peer.read_text())
            if set(p["groups"]) == set(s["groups"]):
                baselines |= {m: v for m, v in p["overall"].items() if m.startswith("synetune:")}
                spent |= {m: v for m, v in p.get("spent", {}).items() if m.startswith("synetune:")}
        # a loss (steplr's validation loss): lower is better
        sign = -1.0 if s.get("minimize") else 1.0
        best = max(baselines, key=lambda m: sign * baselines[m]["mean"])
        verdicts = []
        for m in (m for m in OURS if m in overall):
            ours = sign * overall[m]["mean"] + overall[m]["se"]
            verdicts.append("yes" if ours >= sign * baselines[best]["mean"] else "no")
        spend = " / ".join(f"{spent[m]:.0%}" for m in OURS if m in spent)
        rows.append(
            f"| {path.parent.name} | {len(s['groups'])} | "
            + " | ".join(_cell(overall[m]) for m in methods)
            + f" | {best} {_cell(baselines[best])} | {' / '.join(verdicts)} | {spend}"
            + f" | {spent.get(best, math.nan):.0%} |"
        )
    head = "| run | groups | " + " | ".join(methods)
    ours = " / ".join(m for m in OURS if m in methods)
    head += f" | best baseline (with Syne Tune's where it ran) | >= it within 1 s.e.: {ours}"
    head += f" | B spent: {ours} | B spent: best baseline |"
    return [head, "|---|---|" + "---|" * len(methods) + "---|---|---|---|", *rows]


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
