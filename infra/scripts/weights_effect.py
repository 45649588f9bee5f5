"""What tenant weights change in what the service serves: bench-live runs with and without them.

``DIR`` holds one-split bench-live runs of one system (``live`` by default) in pairs on the same
seeds: ``w-<seed>/`` run with ``--weights``, ``u-<seed>/`` without. For each tenant, the paired
difference (weighted run minus unweighted) of its time-mean served test accuracy over the
budget, ``A_i = int_0^1 a_i(t) dt`` (its best served accuracy less its own test-regret AUC, from
each run's ``summary.json``), with the standard error over the seeds and on how many the
weighted run was ahead; then the same for the weighted tenants together, the others, and the
weighted mean ``sum_i w_i A_i / sum_i w_i`` with the weighted run's weights, the total `rate`
is asked to raise.

Runs, alternating which goes first so that neither always starts on a cold machine::

    for s in 310 311 ...; do
      tenantml bench-live real --systems live --budget-s 30 --seed $s \
        --weights mnist=5,glass=5 --out DIR/w-$s
      tenantml bench-live real --systems live --budget-s 30 --seed $s --out DIR/u-$s
    done

Usage: .venv/bin/python infra/scripts/weights_effect.py DIR [SYSTEM]
"""

from __future__ import annotations

import json
import math
import re
import statistics
import sys
from pathlib import Path
from typing import Any

from tenantml.bench.live_repeats import mean_se


def time_mean_accuracy(entry: dict[str, Any], tenant: str) -> float:
    """``A_i``: the tenant's best served test accuracy less its own regret AUC (NaN if never
    served: its chance share is not in the summary)."""
    served = [acc for _, acc in entry["served"][tenant]]
    if not served:
        return math.nan
    return float(max(served) - entry["test_regret_auc_by_tenant"][tenant])


Entry = dict[str, Any]  # one system's entry in a bench-live summary.json


def read_pairs(directory: Path, system: str) -> tuple[list[tuple[Entry, Entry]], dict[str, float]]:
    """The (weighted, unweighted) entries of `system` per seed found in both, and the weighted
    runs' weights (the same in every pair)."""
    seeds = sorted(
        int(m.group(1))
        for p in directory.glob("w-*/summary.json")
        if (m := re.fullmatch(r"w-(\d+)", p.parent.name))
        and (directory / f"u-{m.group(1)}" / "summary.json").exists()
    )
    if not seeds:
        raise SystemExit(f"no w-<seed>/ and u-<seed>/ bench-live runs in {directory}")
    pairs: list[tuple[Entry, Entry]] = []
    weights: dict[str, float] | None = None
    for seed in seeds:
        w, u = (json.loads((directory / f"{c}-{seed}" / "summary.json").read_text()) for c in "wu")
        if weights is not None and w["weights"] != weights:
            raise SystemExit(f"w-{seed} ran with other weights than the first pair's")
        weights = w["weights"]
        pairs.append((w["systems"][system], u["systems"][system]))
    return pairs, weights or {}


def paired(diffs: list[float]) -> str:
    """Mean ± standard error of the differences (`mean_se`, as bench-live combines splits), and
    on how many the weighted run was ahead."""
    d = [x for x in diffs if not math.isnan(x)]
    m = mean_se(d)
    ahead = sum(x > 0 for x in d)
    return f"{m['mean']:+.4f} ± {m['se']:.4f} (weighted ahead on {ahead} of {len(d)})"


def report(directory: Path, system: str = "live") -> list[str]:
    pairs, weights = read_pairs(directory, system)
    tenants = list(weights)
    a = [
        {t: (time_mean_accuracy(w, t), time_mean_accuracy(u, t)) for t in tenants} for w, u in pairs
    ]
    heavy = [t for t in tenants if weights[t] != 1.0]
    light = [t for t in tenants if weights[t] == 1.0]
    lines = [f"{len(pairs)} seeds; weights {', '.join(f'{t}={weights[t]:g}' for t in heavy)}"]
    lines += [f"{t:<16} {paired([x[t][0] - x[t][1] for x in a])}" for t in tenants]
    for name, group in (("weighted ones", heavy), ("the others", light)):
        if group:
            lines.append(
                f"{name:<16} "
                + paired([statistics.fmean(x[t][0] - x[t][1] for t in group) for x in a])
            )
    total = sum(weights.values())
    lines.append(
        f"{'weighted mean':<16} "
        + paired([sum(weights[t] * (x[t][0] - x[t][1]) for t in tenants) / total for x in a])
    )
    return lines


def main(argv: list[str]) -> None:
    if not 1 <= len(argv) <= 2:
        raise SystemExit(__doc__)
    print("time-mean served test accuracy, run with the weights minus without:")
    for line in report(Path(argv[0]), *argv[1:]):
        print(" ", line)


if __name__ == "__main__":
    main(sys.argv[1:])
