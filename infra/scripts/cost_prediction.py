"""How well the predicted-cost models (policy/costs.py) predict a new tenant's job costs.

For each built-in table with costs: 20% of its tenants held out (5 seeded draws), the cost model
fitted on the rest with each kernel (``additive``, ``empirical``); for every held-out tenant, k
of its jobs (k = 0, 1, 3, 5, drawn at random) are observed and the others predicted. Prints the
RMS of ``log(median prediction) - log(cost)`` over those, and the s.d. of the standardised
errors (1 when the predictive variance is right).

Usage: .venv/bin/python infra/scripts/cost_prediction.py [easeml-dl lcdb oboe]
"""

from __future__ import annotations

import sys

import numpy as np

from policy.costs import CostEstimator, CostKernel, fit_cost_prior
from tenantml.bench.datasets import load_dataset

KS = (0, 1, 3, 5)
KERNELS: tuple[CostKernel, ...] = ("additive", "empirical")


def evaluate(name: str, draws: int = 5, held_out: float = 0.2) -> None:
    table = load_dataset(name)
    cost = np.where(table.kernel_only[:, None], np.nan, table.cost)
    rows = np.isfinite(cost).any(axis=1)
    cost, sizes = cost[rows], None if table.sizes is None else table.sizes[rows]
    n = len(cost)
    rng = np.random.default_rng(0)
    err: dict[tuple[str, int], list[float]] = {}
    z: dict[tuple[str, int], list[float]] = {}
    for _ in range(draws):
        perm = rng.permutation(n)
        test, train = perm[: max(2, int(held_out * n))], perm[max(2, int(held_out * n)) :]
        priors = {
            k: fit_cost_prior(cost[train], None if sizes is None else sizes[train], kernel=k)
            for k in KERNELS
        }
        for i in test:
            arms = np.flatnonzero(np.isfinite(cost[i]))
            if len(arms) < max(KS) + 2:
                continue
            order = rng.permutation(arms)
            for k in KS:
                rest = np.isin(arms, order[k:])
                for kernel, prior in priors.items():
                    est = CostEstimator(prior, [arms], None if sizes is None else sizes[[i]])
                    for a in order[:k]:
                        est.observe(0, int(a), float(cost[i, a]))
                    log_med = est.log_median(0)
                    # the predictive variance from the log-normal mean: log E - log median = v/2
                    var = 2.0 * (np.log(est.expected(0)) - log_med)
                    e = (log_med - np.log(cost[i, arms]))[rest]
                    err.setdefault((kernel, k), []).extend(e.tolist())
                    z.setdefault((kernel, k), []).extend((e / np.sqrt(var[rest])).tolist())
    print(f"{name}: {n} tenants with costs x {cost.shape[1]} models, {draws} draws")
    print("  jobs seen | " + " | ".join(f"{k}: log-RMSE (sd of z)" for k in KERNELS))
    for k in KS:
        cells = [
            f"{np.sqrt(np.mean(np.square(err[(kern, k)]))):.2f} ({np.std(z[(kern, k)]):.2f})"
            for kern in KERNELS
        ]
        print(f"  {k:9d} | " + " | ".join(cells))


if __name__ == "__main__":
    for data_set in sys.argv[1:] or ["easeml-dl", "lcdb", "oboe"]:
        evaluate(data_set)
