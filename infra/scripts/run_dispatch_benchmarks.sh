#!/usr/bin/env bash
# Small jobs through the pool (docs/live.md, "Warm flow runs"): sleep-based jobs of 1 s and
# 10 s on 2 slots, flow runs forked from the warm process or started as new processes, side by
# side in one run. Usage: infra/scripts/run_dispatch_benchmarks.sh [OUT_DIR]  (about 10 min)
set -euo pipefail
out=${1:-results}
tm=${TENANTML:-.venv/bin/tenantml}
for mode in warm cold; do
  "$tm" bench-dispatch --jobs 24 --job-seconds 1 --slots 2 --prefetch 3 --"$mode" --out "$out/dispatch-1s-$mode"
  "$tm" bench-dispatch --jobs 12 --job-seconds 10 --slots 2 --prefetch 1 --"$mode" --out "$out/dispatch-10s-$mode"
done
