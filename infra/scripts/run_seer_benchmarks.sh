#!/usr/bin/env bash
# SEER, SEER with its plan filled, our replan, and the Sec. 6.3 baselines on every built-in
# curve set (OPDA, LCDB, and the step-LR LeNet curves, a loss) at the
# paper's budget ratios (budget = 4x and 16x the deadline in GPU-minutes), deadlines of a quarter
# of and one median full run. With syne-tune installed (pip install 'tenantml[peers]'), Syne
# Tune's ASHA and BOHB run beside ours on the same problems (LCDB: its first PEER_LCDB_GROUPS
# groups, default 50: the peer costs about 0.1-1 s a run, so all 248 would take hours).
# Usage: infra/scripts/run_seer_benchmarks.sh [OUT_DIR]   (our methods: about 22 min on 2 cores;
# the peer: about 1 h more; DEADLINES="0.25x" for the quarter only, JOBS=N processes)
set -euo pipefail
out=${1:-results/seer}
tenantml=${TENANTML:-.venv/bin/tenantml}
python=${PYTHON:-.venv/bin/python}
jobs=${JOBS:-2}
$tenantml seer bench-plan --out "$out"
peer=0
$python -c "import syne_tune" 2>/dev/null && peer=1
for deadline in ${DEADLINES:-0.25x 1x}; do
  for curves in opda-alexnet opda-convnext opda-deberta lcdb steplr-digits; do
    # steplr-digits records LeNet's validation loss: lower is better
    minimize=()
    [ "$curves" = steplr-digits ] && minimize=(--minimize)
    for budget in 4x 16x; do
      run="$curves-$budget-$deadline"
      $tenantml seer simulate --curves "$curves" --deadline "$deadline" --budget "$budget" \
        --seeds 20 --jobs "$jobs" "${minimize[@]}" --out "$out/$run"
      if [ "$peer" = 1 ]; then
        groups=()
        [ "$curves" = lcdb ] && groups=(--groups "${PEER_LCDB_GROUPS:-50}")
        $tenantml seer simulate --curves "$curves" --deadline "$deadline" --budget "$budget" \
          --seeds 20 --jobs "$jobs" --methods asha,bohb --peer synetune "${groups[@]}" \
          "${minimize[@]}" \
          --out "$out/peer/$run"
      fi
    done
  done
done
$python infra/scripts/seer_table.py "$out"
