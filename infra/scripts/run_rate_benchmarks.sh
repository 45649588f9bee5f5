#!/usr/bin/env bash
# Reproduces the README's "Beyond Hybrid: the rate policy" numbers (50 repeats, seed 0):
# given costs, predicted costs, and G = 8 devices, on the four built-in real data sets.
# Usage: infra/scripts/run_rate_benchmarks.sh [OUT_DIR]   (about 25 min on 2 cores)
# Then:  .venv/bin/python infra/scripts/rate_table.py OUT_DIR
set -euo pipefail
out=${1:-results/rate}
tm=${TENANTML:-.venv/bin/tenantml}
pol=rate,hybrid,roundrobin,spearmint,oracle
mkdir -p "$out"
for ds in easeml-dl delgado179 oboe lcdb; do
  "$tm" bench "$ds" --policies "$pol" --out "$out/$ds" > "$out/$ds.log" 2>&1
  "$tm" bench "$ds" --policies "$pol" --costs predicted --out "$out/$ds-predicted" \
    > "$out/$ds-predicted.log" 2>&1
  "$tm" bench "$ds" --policies rate,hybrid,oracle --gpus 8 --out "$out/$ds-g8" > "$out/$ds-g8.log" 2>&1
  echo "$ds done"
done
for f in 4 8 32 1000000; do  # the default time limit is 16x the predicted cost (above)
  for ds in lcdb oboe; do
    "$tm" bench "$ds" --policies rate --costs predicted --time-limit-factor "$f" \
      --out "$out/$ds-predicted-limit$f" > /dev/null 2>&1
  done
done
"$tm" bench-overhead --policy rate --out "$out/overhead"
