"""What a tenant's loss estimate is made of, read from a service's home at the end of a run.

For each tenant (or those named): its best observed accuracy ``b``; ``n`` results and the sum of
their squared surprises ``z^2`` (`policy.estimates`' calibration), their pooled mean square
``kappa`` (`policy.estimates.calibration_scales`: ``nu`` pseudo-observations at the other
tenants'), and ``kappa 1``, the scale of ``nu`` pseudo-observations at 1 (`rate`'s decisions);
how many arms are untried, their mean posterior sd before and after the scale the estimate uses
(``v``, the mean square about ``m``: `policy.estimates.calibration_spreads`), the mean surprise
``m`` that moves them (`policy.estimates.calibration_shifts`), the highest untried posterior
mean against ``b`` (not moved), and the loss estimate ``E[max(0, min(1, max_k f_k) - b)]``
(`policy.loss_estimates`).

Usage: ``python infra/scripts/loss_estimate_parts.py HOME [TENANT ...]``, e.g. a `bench-live`
home: ``results/bl-h30-told/seed-0/homes/live``.
"""

from __future__ import annotations

import argparse
from pathlib import Path

import numpy as np

from policy import loss_estimates
from policy._book import TenantBook
from policy.estimates import (
    CALIBRATION,
    calibration_scales,
    calibration_shifts,
    calibration_spreads,
)
from tasks import load_state
from tenantml.client import Client


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("home", type=Path)
    ap.add_argument("tenants", nargs="*")
    args = ap.parse_args()
    c = Client(args.home)
    state = load_state(c.mlflow, c.store)
    history = state.history()
    book = TenantBook(state.problem, cost_aware=False)
    book.sync(history)
    loss = loss_estimates(state.problem, history)
    scales = calibration_scales(book.sum_z2, book.n_z2)
    shifts = calibration_shifts(book.sum_z, book.n_z2)
    spreads = calibration_spreads(book.sum_z, book.sum_z2, book.n_z2)
    print(f"{'tenant':14s} {'best':>6s} {'n':>3s} {'sum z2':>6s} {'kappa':>5s} {'kappa 1':>7s} "
          f"{'untried':>7s} {'sd':>6s} {'sd*v':>6s} {'m':>6s} {'top mu-b':>8s} "
          f"{'loss':>7s}")  # fmt: skip
    for i, tenant in enumerate(state.tenants):
        if args.tenants and tenant.name not in args.tenants:
            continue
        untried = book.candidates(i)
        kappa = float(scales[i])
        alone = (CALIBRATION + book.sum_z2[i]) / (CALIBRATION + book.n_z2[i])
        post = book.posterior(i)
        sd = np.sqrt(np.diag(post.cov()))[untried]
        top = post.mu[untried].max() - book.best[i] if untried.any() else float("nan")
        mean_sd = float(sd.mean()) if sd.size else 0.0
        print(f"{tenant.name:14s} {book.best[i]:6.3f} {book.n_z2[i]:3.0f} {book.sum_z2[i]:6.2f} "
              f"{kappa:5.2f} {alone:7.2f} {int(untried.sum()):7d} {mean_sd:6.3f} "
              f"{mean_sd * np.sqrt(spreads[i]):6.3f} {shifts[i]:+6.2f} {top:8.3f} "
              f"{loss[i]:7.4f}")  # fmt: skip


if __name__ == "__main__":
    main()
