#!/usr/bin/env bash
# SEER vs the Sec. 6.3 baselines on every built-in curve set at the paper's budget ratios
# (budget = 4x and 16x the deadline in GPU-minutes), deadline = a quarter of a median full run.
# Usage: infra/scripts/run_seer_benchmarks.sh [OUT_DIR]   (about 10 min on 2 cores)
set -euo pipefail
out=${1:-results/seer}
tenantml=${TENANTML:-.venv/bin/tenantml}
$tenantml seer bench-plan --out "$out"
for curves in opda-alexnet opda-convnext opda-deberta lcdb; do
  for budget in 4x 16x; do
    $tenantml seer simulate --curves "$curves" --deadline 0.25x --budget "$budget" \
      --seeds 20 --out "$out/$curves-$budget"
  done
done
python3 infra/scripts/seer_table.py "$out"
