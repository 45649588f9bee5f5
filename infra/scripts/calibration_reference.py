"""How far the live service's loss estimates are from the realised test loss, per tenant, with
two references for "realised".

`tenantml bench-live` measures a tenant's realised loss at the end of a run as ``best - served``:
``best`` the best test accuracy any system of *that run* served the tenant, ``served`` the test
accuracy of the model it serves at the end. A short run (30 s) ends before several tenants'
better models were tried, so that reference is low. Runs of other budgets on the *same split*
(the same ``--seed`` gives the same train/test split) saw more models: this script takes the
best any of them served as a second reference (biased up a little: a maximum of noisy test
accuracies), and prints per tenant the mean predicted loss (the last estimate the service
logged, read from the run's home as `bench-live` reads it), the mean realised loss against
either reference, and the mean absolute error. The last column is a floor set by the noise of
the realised losses: the error of a constant per tenant chosen in hindsight (the median of its
realised losses against the longer reference over the splits); an estimate that errs much more
than it is biased, not just noisy.

Usage: ``python infra/scripts/calibration_reference.py RUN [--also DIR ...] [--system live]``:
``RUN`` a `bench-live --repeats N` output (``seed-K/summary.json`` and ``seed-K/homes/SYSTEM``
per split), ``--also`` other such outputs (default: every ``bl-*`` beside ``RUN``); a split of
``RUN`` uses the ``--also`` outputs that have the same seed and test fraction.
"""

from __future__ import annotations

import argparse
import json
from collections import defaultdict
from collections.abc import Iterable, Iterator
from pathlib import Path
from typing import Any

import numpy as np

from tenantml.bench.live import _last_loss_estimates


def best_served(summary: dict[str, Any]) -> dict[str, float]:
    """Per tenant, the best test accuracy any system of the run served it at any time."""
    best: dict[str, float] = {}
    for entry in summary["systems"].values():
        for tenant, points in entry.get("served", {}).items():
            for _, acc in points:
                best[tenant] = max(best.get(tenant, 0.0), float(acc))
    return best


def same_split(others: Iterable[Path], seed: int, fraction: float) -> Iterator[dict[str, Any]]:
    """The summaries of ``others`` for split ``seed`` with test fraction ``fraction``."""
    for d in others:
        f = d / f"seed-{seed}" / "summary.json"
        if f.exists():
            s = json.loads(f.read_text())
            if s.get("test_fraction", 0.25) == fraction:
                yield s


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("run", type=Path)
    ap.add_argument("--also", type=Path, nargs="*", default=None)
    ap.add_argument("--system", default="live")
    args = ap.parse_args()
    run: Path = args.run
    also = args.also if args.also is not None else sorted(run.parent.glob("bl-*"))
    rows: dict[str, list[tuple[float, float, float]]] = defaultdict(list)
    for split in sorted(run.glob("seed-*"), key=lambda p: int(p.name.split("-")[1])):
        own = json.loads((split / "summary.json").read_text())
        seed = int(split.name.split("-")[1])
        predicted = _last_loss_estimates(split / "homes" / args.system)
        ref_run = best_served(own)
        ref_all = dict(ref_run)
        for other in same_split(also, seed, own.get("test_fraction", 0.25)):
            for tenant, acc in best_served(other).items():
                if tenant in ref_all:
                    ref_all[tenant] = max(ref_all[tenant], acc)
        final = own["systems"][args.system]["final_accuracy"]
        for tenant, p in predicted.items():
            rows[tenant].append(
                (p, ref_run[tenant] - final[tenant], ref_all[tenant] - final[tenant])
            )
    print(
        f"{'tenant':14s} {'predicted':>9s} {'realised':>9s} {'MAE':>7s} "
        f"{'realised*':>9s} {'MAE*':>7s} {'floor*':>7s}   (* against the best of every run of "
        "the split; floor: a constant per tenant, chosen in hindsight)"
    )
    floor = {  # per tenant: |realised* - its median| per split
        name: np.abs(np.array(v)[:, 2] - np.median(np.array(v)[:, 2])) for name, v in rows.items()
    }
    every = [r for v in rows.values() for r in v]
    all_floor = np.concatenate(list(floor.values()))
    for name, v in [*sorted(rows.items()), ("all", every)]:
        a = np.array(v)  # (n, 3): predicted, realised in this run, realised against all runs
        f = floor[name] if name in floor else all_floor
        print(f"{name:14s} {a[:, 0].mean():9.4f} {a[:, 1].mean():9.4f} "
              f"{np.abs(a[:, 0] - a[:, 1]).mean():7.4f} {a[:, 2].mean():9.4f} "
              f"{np.abs(a[:, 0] - a[:, 2]).mean():7.4f} {f.mean():7.4f}")  # fmt: skip


if __name__ == "__main__":
    main()
