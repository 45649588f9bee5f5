#!/usr/bin/env bash
# The README's rate ablation: per-tenant calibration and latent vs predictive variance in EI,
# plus the empirical (Ledoit-Wolf) kernel. About 5 min on 2 cores.
# Usage: infra/scripts/run_rate_ablation.sh [OUT_DIR]
set -euo pipefail
out=${1:-results/rate-ablation}
tm=${TENANTML:-.venv/bin/tenantml}
pol=rate,rate-uncalibrated,rate-predictive,hybrid
mkdir -p "$out"
for spec in "easeml-dl 50" "delgado179 20" "lcdb 20" "oboe 10"; do
  set -- $spec
  "$tm" bench "$1" --repeats "$2" --policies "$pol" --out "$out/$1" > "$out/$1.log" 2>&1
  "$tm" bench "$1" --repeats "$2" --policies rate,hybrid --kernel empirical \
    --out "$out/$1-empirical" > "$out/$1-empirical.log" 2>&1
  echo "$1 done"
done
for d in "$out"/*/summary.json; do
  python3 - "$d" <<'PY'
import json, sys
s = json.load(open(sys.argv[1]))
cells = ", ".join(
    f"{k} {v['auc_avg_loss']:.4f} (0.02 at {v['cost_to_avg_loss']['0.02']})"
    for k, v in s["policies"].items()
)
print(f"{s['dataset']} kernel={s['protocol']['kernel']}: {cells}")
PY
done
