#!/usr/bin/env bash
# The replay's `live` column (the live service's configuration: default policy, predicted costs,
# the GP prior of policy.prior refitted online) beside `rate` on the same predicted costs with
# ease.ml's static App. A prior, and Hybrid; 50 repeats, seed 0, the four built-in real sets.
# Usage: infra/scripts/run_live_benchmarks.sh [OUT_DIR]
# Then:  .venv/bin/python infra/scripts/live_table.py OUT_DIR
set -euo pipefail
out=${1:-results/live}
tm=${TENANTML:-.venv/bin/tenantml}
export COLUMNS=160  # the logs keep the whole table
mkdir -p "$out"
for ds in easeml-dl delgado179 oboe lcdb; do
  "$tm" bench "$ds" --policies live,rate,hybrid --costs predicted --out "$out/$ds" \
    > "$out/$ds.log" 2>&1
  echo "$ds done"
done
