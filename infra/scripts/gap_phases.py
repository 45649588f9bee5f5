"""When in the budget the live configuration loses to itself given the true costs.

Replays a built-in table with the ``live`` column (predicted costs) and ``live-prior`` given the
table's costs (the same learnt prior and policy, every cost known: `tenantml.bench.runner`),
the same repeats and test tenants for both, and splits the gap between their AUCs of the mean
accuracy loss (paper 001 Eq. 3) by when in the budget it accrues. The windows' contributions
sum to the gap between the two AUCs. A gap that sits in the first window is the order of the
tenants' first jobs; one spread over the budget is each tenant's later choices.

Usage: .venv/bin/python infra/scripts/gap_phases.py DATASET [REPEATS]
"""

from __future__ import annotations

import sys

import numpy as np

from tenantml.bench.datasets import load_dataset
from tenantml.bench.runner import (
    LIVE,
    LIVE_PRIOR,
    Protocol,
    default_test_users,
    run_repeat,
    table_costs,
)

#: the windows of the budget, as fractions of it
WINDOWS = ((0.0, 0.05), (0.05, 0.1), (0.1, 0.2), (0.2, 0.4), (0.4, 0.7), (0.7, 1.0))


def gap_by_window(name: str, repeats: int) -> tuple[float, float, list[tuple[float, float]]]:
    """(``live``'s AUC, ``live-prior``'s given the costs, per window (live's mean loss, its
    contribution to the gap)); the protocol is `tenantml bench`'s defaults, seed 0."""
    table = load_dataset(name)
    proto = Protocol(
        policies=(LIVE, LIVE_PRIOR),
        test_users=default_test_users(int((~table.kernel_only).sum())),
        costs="given",  # `live` predicts its own whatever the protocol's costs
        repeats=repeats,
    ).validate(table)
    cost = table_costs(table, proto.seed)
    live, given = [], []
    for r in range(repeats):
        res = run_repeat(table, cost, proto, r)
        live.append(res.curves[LIVE]["avg_loss"])
        given.append(res.curves[LIVE_PRIOR]["avg_loss"])
    lv, gv = np.array(live), np.array(given)
    g = lv.shape[1]
    windows = []
    for lo, hi in WINDOWS:
        s = slice(int(lo * g), int(hi * g))
        windows.append((float(lv[:, s].mean()), float((lv[:, s] - gv[:, s]).sum(1).mean() / g)))
    return float(lv.mean()), float(gv.mean()), windows


def main(argv: list[str]) -> None:
    if not 1 <= len(argv) <= 2:
        raise SystemExit(__doc__)
    name, repeats = argv[0], int(argv[1]) if len(argv) > 1 else 20
    auc_live, auc_given, windows = gap_by_window(name, repeats)
    print(f"{name}, {repeats} repeats: live {auc_live:.5f}, live-prior given costs {auc_given:.5f}")
    for (lo, hi), (loss, share) in zip(WINDOWS, windows, strict=True):
        print(f"  budget {lo:.2f}-{hi:.2f}: live's mean loss {loss:.5f}, gap {share:+.5f}")


if __name__ == "__main__":
    main(sys.argv[1:])
