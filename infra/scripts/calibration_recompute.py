"""Loss estimates recomputed at the end of `bench-live` runs, with the calibration scale of
each tenant alone (``nu`` pseudo-observations at 1: the estimates until 2026-11-27, and `rate`'s
decisions still), learnt across tenants (`policy.estimates.calibration_scales`: the estimates
until 2026-11-28), and as the service makes them now (`policy.loss_estimates`: moved by the
mean surprise as well), against the realised loss; and what a constant 0 would score.

Each split's home (``seed-K/homes/live``) is read as the service would read it (`load_state`);
the estimate is the one made from that final state (not the last estimate the service logged,
which `bench-live` reports). A home that `loss_realised.py` trained on in place (its
``loss_realised.log``) no longer holds the run's final state and is left out. Realised: the
best test accuracy any system of the run served the tenant, less what the service served at the
end (never negative;
so a constant 0 errs by the mean realised loss).

Since 2026-11-29 the service's estimates share one set of normal draws across tenants and
`expected_loss` lays its draws out a row per arm (`policy.estimates`): the "now" column and the
two older ones no longer use the same draws, and figures made before reproduce within Monte
Carlo error (a standard error below 0.003 a tenant), not to the digit.

Usage: ``python infra/scripts/calibration_recompute.py RUN [RUN ...]`` (`bench-live --repeats`
outputs, e.g. ``results/bl-h60-s20``).
"""

from __future__ import annotations

import argparse
import json
from pathlib import Path

import numpy as np
from scipy.stats import spearmanr

from policy import loss_estimates
from policy._book import TenantBook
from policy.estimates import CALIBRATION, calibration_scales, expected_loss
from tasks import load_state
from tenantml.client import Client


def estimates(home: Path) -> dict[str, tuple[float, float, float]]:
    """Per tenant: the estimates with each tenant's own scale, with the pooled scale, and as
    the service makes them now."""
    c = Client(home)
    state = load_state(c.mlflow, c.store)
    history = state.history()
    book = TenantBook(state.problem, cost_aware=False)
    book.sync(history)
    now = loss_estimates(state.problem, history)
    alone = scaled_estimates(book, (CALIBRATION + book.sum_z2) / (CALIBRATION + book.n_z2))
    pooled = scaled_estimates(book, calibration_scales(book.sum_z2, book.n_z2))
    return {
        t.name: (float(alone[i]), float(pooled[i]), float(now[i]))
        for i, t in enumerate(state.tenants)
    }


def scaled_estimates(book: TenantBook, scales: np.ndarray) -> np.ndarray:
    """``(n,)`` the loss estimates with each tenant's posterior covariance scaled by
    ``scales[i]`` and not moved (the estimates until 2026-11-28, with the pooled scale)."""
    out = np.zeros(book.problem.n_tenants)
    for i in range(book.problem.n_tenants):
        untried = book.candidates(i)
        if untried.any():
            post = book.posterior(i)
            cov = post.cov()[np.ix_(untried, untried)] * scales[i]
            rng = np.random.default_rng([0, i])
            out[i] = expected_loss(post.mu[untried], cov, float(book.best[i]), rng)
    return out


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("runs", type=Path, nargs="+")
    args = ap.parse_args()
    print(f"{'run':24s} {'n':>4s} {'realised':>8s} {'alone':>7s} {'pooled':>7s} {'now':>7s} "
          f"{'zero':>7s} {'rho':>5s}   (mean |estimate - realised|, then the mean estimate; rho:"
          " Spearman's, the estimate now against realised, over tenants x splits)")  # fmt: skip
    for run in args.runs:
        rows = []
        for split in sorted(run.glob("seed-*")):
            home = split / "homes" / "live"
            if not home.exists():
                continue
            if (home / "loss_realised.log").exists():
                print(f"{split}: left out (trained on in place by loss_realised.py)")
                continue
            summary = json.loads((split / "summary.json").read_text())
            best: dict[str, float] = {}
            for entry in summary["systems"].values():
                for tenant, points in entry.get("served", {}).items():
                    for _, acc in points:
                        best[tenant] = max(best.get(tenant, 0.0), float(acc))
            final = summary["systems"]["live"]["final_accuracy"]
            for tenant, estimate in estimates(home).items():
                rows.append((best[tenant] - final[tenant], *estimate))
        a = np.array(rows)
        real = a[:, 0]
        err = [f"{np.abs(a[:, k] - real).mean():7.4f}" for k in (1, 2, 3)]
        mean = [f"{a[:, k].mean():7.4f}" for k in (1, 2, 3)]
        print(f"{run.name:24s} {len(a):4d} {real.mean():8.4f} {' '.join(err)} "
              f"{real.mean():7.4f} {spearmanr(a[:, 3], real).statistic:5.2f}")  # fmt: skip
        print(f"{'':24s} {'':4s} {'':8s} {' '.join(mean)}")


if __name__ == "__main__":
    main()
