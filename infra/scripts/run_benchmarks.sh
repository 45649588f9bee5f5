#!/usr/bin/env bash
# Reproduces every number in the README's "Measured" section (50 repeats, seed 0).
# Usage: infra/scripts/run_benchmarks.sh [OUT_DIR]   (oboe's 50 repeats of every policy
# alone took 567 s on 2 cores on 2026-11-29, the `live` column's online refits included; not
# timed in all since the `live` column joined the default policies)
set -euo pipefail
out=${1:-results}
tm=${TENANTML:-.venv/bin/tenantml}
for ds in easeml-dl delgado179 oboe lcdb syn-0.01-0.1 syn-0.01-1.0 syn-0.5-0.1 syn-0.5-1.0; do
  /usr/bin/time -f "$ds cost-aware: %e s" "$tm" bench "$ds" --out "$out/$ds" > "$out.$ds.log" 2>&1 || true
  tail -n 1 "$out.$ds.log"
done
"$tm" bench delgado179 --cost-oblivious --out "$out/delgado179-oblivious" > /dev/null
"$tm" bench easeml-dl --cost-oblivious --out "$out/easeml-dl-oblivious" > /dev/null
for ds in easeml-dl delgado179 oboe lcdb; do
  "$tm" bench "$ds" --gpus 8 --policies rate,hybrid,roundrobin,spearmint --out "$out/$ds-g8" > /dev/null
done
"$tm" bench-overhead --out "$out/overhead"
