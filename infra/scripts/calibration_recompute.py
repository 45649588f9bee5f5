"""Loss estimates recomputed at the end of `bench-live` runs, with the calibration scale of
each tenant alone (``nu`` pseudo-observations at 1: the estimates until 2026-11-27, and `rate`'s
decisions still) and learnt across tenants (`policy.estimates.calibration_scales`), against the
realised loss; and what a constant 0 would score.

Each split's home (``seed-K/homes/live``) is read as the service would read it (`load_state`);
the estimate is the one `policy.loss_estimates` makes from that final state (not the last
estimate the service logged, which `bench-live` reports). Realised: the best test accuracy any
system of the run served the tenant, less what the service served at the end (never negative;
so a constant 0 errs by the mean realised loss).

Usage: ``python infra/scripts/calibration_recompute.py RUN [RUN ...]`` (`bench-live --repeats`
outputs, e.g. ``results/bl-h60-s20``).
"""

from __future__ import annotations

import argparse
import json
from pathlib import Path

import numpy as np
from scipy.stats import spearmanr

from policy._book import TenantBook
from policy.estimates import CALIBRATION, calibration_scales, expected_loss
from tasks import load_state
from tenantml.client import Client


def estimates(home: Path) -> dict[str, tuple[float, float]]:
    """Per tenant: (estimate with each tenant's own scale, estimate with the pooled scale)."""
    c = Client(home)
    state = load_state(c.mlflow, c.store)
    book = TenantBook(state.problem, cost_aware=False)
    book.sync(state.history())
    alone = (CALIBRATION + book.sum_z2) / (CALIBRATION + book.n_z2)
    pooled = calibration_scales(book.sum_z2, book.n_z2)
    out = {}
    for i, tenant in enumerate(state.tenants):
        untried = book.candidates(i)
        if not untried.any():
            out[tenant.name] = (0.0, 0.0)
            continue
        post = book.posterior(i)
        cov = post.cov()[np.ix_(untried, untried)]
        best = float(book.best[i])
        out[tenant.name] = tuple(  # type: ignore[assignment]
            expected_loss(post.mu[untried], cov * k, best, np.random.default_rng([0, i]))
            for k in (alone[i], pooled[i])
        )
    return out


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("runs", type=Path, nargs="+")
    args = ap.parse_args()
    print(f"{'run':24s} {'n':>4s} {'realised':>8s} {'alone':>7s} {'pooled':>7s} {'zero':>7s}"
          f" {'rho':>5s}   (mean |estimate - realised|; rho: Spearman's, pooled estimate"
          " against realised, over tenants x splits)")  # fmt: skip
    for run in args.runs:
        rows = []
        for split in sorted(run.glob("seed-*")):
            home = split / "homes" / "live"
            if not home.exists():
                continue
            summary = json.loads((split / "summary.json").read_text())
            best: dict[str, float] = {}
            for entry in summary["systems"].values():
                for tenant, points in entry.get("served", {}).items():
                    for _, acc in points:
                        best[tenant] = max(best.get(tenant, 0.0), float(acc))
            final = summary["systems"]["live"]["final_accuracy"]
            for tenant, (alone, pooled) in estimates(home).items():
                rows.append((best[tenant] - final[tenant], alone, pooled))
        a = np.array(rows)
        real = a[:, 0]
        print(f"{run.name:24s} {len(a):4d} {real.mean():8.4f} "
              f"{np.abs(a[:, 1] - real).mean():7.4f} {np.abs(a[:, 2] - real).mean():7.4f} "
              f"{real.mean():7.4f} {spearmanr(a[:, 2], real).statistic:5.2f}")  # fmt: skip


if __name__ == "__main__":
    main()
