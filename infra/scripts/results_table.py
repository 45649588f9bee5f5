"""Print the README's result tables from results/*/summary.json (run_benchmarks.sh output)."""

from __future__ import annotations

import json
import sys
from pathlib import Path

root = Path(sys.argv[1] if len(sys.argv) > 1 else "results")
BASE = (
    "rate",
    "roundrobin",
    "random",
    "spearmint",
    "optuna",
    "mostcited",
    "mostrecent",
    "fcfs",
    "greedy",
)


def fmt(v: float | None, spec: str = ".3f") -> str:
    return "-" if v is None else format(v, spec)


print(
    "| data set | hybrid AUC | "
    + " | ".join(f"{b} AUC" for b in BASE)
    + " | hybrid/oracle AUC | cost to 0.02: hybrid | speedup @0.02 vs RR / SPEARMINT* / MostCited |"
)
print("|---" * (len(BASE) + 5) + "|")
for d in sorted(root.glob("*/summary.json")):
    s = json.loads(d.read_text())
    if s["protocol"]["gpus"] > 1 or s["protocol"]["cost_oblivious"]:
        continue
    p, sp = s["policies"], s["speedups"]
    row = [s["dataset"], fmt(p["hybrid"]["auc_avg_loss"], ".4f")]
    row += [fmt(p[b]["auc_avg_loss"], ".4f") if b in p else "n/a" for b in BASE]
    row.append(fmt(s.get("hybrid_auc_over_oracle"), ".2f"))
    row.append(fmt(p["hybrid"]["cost_to_avg_loss"]["0.02"]))
    row.append(
        " / ".join(
            fmt(sp.get(b, {}).get("0.02"), ".2f") for b in ("roundrobin", "spearmint", "mostcited")
        )
    )
    print("| " + " | ".join(row) + " |")

print("\nCost-oblivious (budget 0.5 of the runs):\n")
for d in sorted(root.glob("*-oblivious/summary.json")):
    s = json.loads(d.read_text())
    p, sp = s["policies"], s["speedups"]
    print(
        f"- {s['dataset']}: AUC hybrid {p['hybrid']['auc_avg_loss']:.4f}, roundrobin "
        f"{p['roundrobin']['auc_avg_loss']:.4f}, random {p['random']['auc_avg_loss']:.4f}; "
        f"cost to 0.02 hybrid {fmt(p['hybrid']['cost_to_avg_loss']['0.02'])}, "
        f"RR/hybrid {fmt(sp['roundrobin']['0.02'], '.2f')}, "
        f"random/hybrid {fmt(sp['random']['0.02'], '.2f')}"
    )

print("\nMulti-device, G = 8, lambda(G) = 8^0.8 = 5.28 (cost axis = wall clock):\n")
for d in sorted(root.glob("*-g8/summary.json")):
    s = json.loads(d.read_text())
    p, sp = s["policies"], s["speedups"]
    print(
        f"- {s['dataset']}: wall clock to 0.02 hybrid (8 slots) "
        f"{fmt(p['hybrid']['cost_to_avg_loss']['0.02'])} vs hybrid-pooled "
        f"{fmt(p['hybrid-pooled']['cost_to_avg_loss']['0.02'])}: pooled/multi = "
        f"{fmt(sp['hybrid-pooled']['0.02'], '.2f')}x; AUC {p['hybrid']['auc_avg_loss']:.4f} vs "
        f"{p['hybrid-pooled']['auc_avg_loss']:.4f}"
    )
