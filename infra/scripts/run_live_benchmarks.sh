#!/usr/bin/env bash
# The replay's `live` column (the live service's configuration: default policy, predicted costs,
# the GP prior of policy.prior refitted online) beside `rate` on the same predicted costs with
# ease.ml's static App. A prior, Hybrid and round robin; seed 0, the four built-in real sets.
# Issue 16's replay target: `live` no worse than `rate`, and >= 10% below round robin in AUC.
# Usage: infra/scripts/run_live_benchmarks.sh [OUT_DIR]
#   REPEATS (default 50); oboe (418 tenants) runs OBOE_REPEATS (default 10).
# Then:  .venv/bin/python infra/scripts/live_table.py OUT_DIR
set -euo pipefail
out=${1:-results/live}
tm=${TENANTML:-.venv/bin/tenantml}
export COLUMNS=160  # the logs keep the whole table
mkdir -p "$out"
for ds in easeml-dl delgado179 oboe lcdb; do
  repeats=${REPEATS:-50}
  [ "$ds" = oboe ] && repeats=${OBOE_REPEATS:-10}
  "$tm" bench "$ds" --policies live,rate,hybrid,roundrobin --costs predicted \
    --repeats "$repeats" --out "$out/$ds" > "$out/$ds.log" 2>&1
  echo "$ds done ($repeats repeats)"
done
