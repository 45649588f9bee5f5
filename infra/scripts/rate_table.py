"""Print the README's "Beyond Hybrid" tables from run_rate_benchmarks.sh output."""

from __future__ import annotations

import json
import sys
from pathlib import Path

root = Path(sys.argv[1] if len(sys.argv) > 1 else "results/rate")
SETS = ("easeml-dl", "delgado179", "oboe", "lcdb")
POL = ("rate", "hybrid", "roundrobin", "spearmint", "oracle")


def load(name: str) -> dict | None:
    p = root / name / "summary.json"
    return json.loads(p.read_text()) if p.exists() else None


def f(v: float | None, spec: str = ".3f") -> str:
    return "-" if v is None else format(v, spec)


def ratio(a: float | None, b: float | None) -> str:
    return "-" if a is None or not b else f"{a / b:.2f}x"


print("Given costs: AUC of the average loss (worst tenant over all repeats in brackets)\n")
print("| data set | " + " | ".join(POL) + " | cost to 0.02: rate / oracle | rate over oracle |")
print("|---" * (len(POL) + 3) + "|")
for ds in SETS:
    s = load(ds)
    if s is None:
        continue
    p = s["policies"]
    cells = [f"{p[k]['auc_avg_loss']:.4f} ({p[k]['auc_worst_tenant_loss']:.3f})" for k in POL]
    r, o = p["rate"]["cost_to_avg_loss"]["0.02"], p["oracle"]["cost_to_avg_loss"]["0.02"]
    print(f"| {ds} | " + " | ".join(cells) + f" | {f(r)} / {f(o)} | {ratio(r, o)} |")

print(
    "\nPredicted costs (policies see the cost model's predictions; the clock charges true costs)\n"
)
print(
    "| data set | rate AUC (predicted) | hybrid AUC (predicted) | hybrid AUC (given) | "
    "cost to 0.02: rate predicted / hybrid given |"
)
print("|---|---|---|---|---|")
for ds in SETS:
    s, g = load(f"{ds}-predicted"), load(ds)
    if s is None or g is None:
        continue
    p, pg = s["policies"], g["policies"]
    r = p["rate"]["cost_to_avg_loss"]["0.02"]
    h = pg["hybrid"]["cost_to_avg_loss"]["0.02"]
    print(
        f"| {ds} | {p['rate']['auc_avg_loss']:.4f} | {p['hybrid']['auc_avg_loss']:.4f} | "
        f"{pg['hybrid']['auc_avg_loss']:.4f} | {f(r)} / {f(h)} ({ratio(h, r)} faster) |"
    )

print(
    "\nG = 8 devices, lambda(8) = 8^0.8 = 5.28 for the pooled single device (axis = wall clock)\n"
)
print(
    "| data set | wall clock to 0.02: rate (8 slots) | hybrid (8 slots) | hybrid-pooled | "
    "pooled / rate | AUC rate / hybrid-pooled |"
)
print("|---|---|---|---|---|---|")
for ds in SETS:
    s = load(f"{ds}-g8")
    if s is None:
        continue
    p = s["policies"]
    c = {k: p[k]["cost_to_avg_loss"]["0.02"] for k in ("rate", "hybrid", "hybrid-pooled")}
    print(
        f"| {ds} | {f(c['rate'])} | {f(c['hybrid'])} | {f(c['hybrid-pooled'])} | "
        f"{ratio(c['hybrid-pooled'], c['rate'])} | {p['rate']['auc_avg_loss']:.4f} / "
        f"{p['hybrid-pooled']['auc_avg_loss']:.4f} |"
    )
for ds in ("lcdb", "oboe"):
    sweep = []
    for f in ("4", "8", "16", "32", "1000000"):
        s = load(f"{ds}-predicted" + ("" if f == "16" else f"-limit{f}"))
        if s is not None:
            label = "no limit" if f == "1000000" else f"{f}x"
            sweep.append(f"{label}: {s['policies']['rate']['auc_avg_loss']:.4f}")
    if sweep:
        print(f"\n{ds}, predicted costs, rate AUC by time-limit factor: " + ", ".join(sweep))
ov = root / "overhead" / "overhead.json"
if ov.exists():
    o = json.loads(ov.read_text())
    sp = o["speed"]
    print(
        f"\nDecision overhead ({o.get('policy')}): {sp['n_tenants']} x {sp['n_models']}, "
        f"median {sp['decision_ms_median']:.2f} ms, p95 {sp['decision_ms_p95']:.2f} ms"
        + (
            f"; {o['memory']['n_tenants']} tenants peak {o['memory']['peak_mib']:.0f} MiB"
            if "memory" in o
            else ""
        )
    )
