"""How well the live service predicted what its jobs cost, from the homes of ``tenantml
bench-live`` runs (or any service home).

Every job the scheduler dispatches carries its time limit, ``time_budget_s`` (a param of its
MLflow run, ``limit_unit`` ``s``): ``policy.loop.DEFAULT_LIMIT_FACTOR`` times the cost it
expected (`policy.loop.SchedulerLoop.time_limit`; the expected cost, the log-normal mean, not
the median), so each finished job's log error is ``log(cost_s / (time_budget_s / factor))``.
Per directory: the jobs, the mean absolute log error, its RMS, and the mean (below 0: the jobs
took less than expected). Only for services run without ``--job-budget-s``, which caps the
limit (``bench-live`` sets none).

Usage: ``.venv/bin/python infra/scripts/cost_errors.py DIR ...`` (each DIR searched for
``homes/*/mlflow.db`` at any depth).
"""

from __future__ import annotations

import argparse
import math
import statistics
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path

from policy.loop import DEFAULT_LIMIT_FACTOR


@dataclass(frozen=True)
class CostErrors:
    """The log errors of ``jobs`` finished jobs' costs against their predictions."""

    jobs: int
    mean_abs: float
    rms: float
    mean: float


def log_errors(db: Path, factor: float = DEFAULT_LIMIT_FACTOR) -> list[float]:
    """``log(cost_s / (time_budget_s / factor))`` of every finished job in a home's MLflow."""
    from mlflow.tracking import MlflowClient

    from mlflow_plugin.tracking import tenant_experiments

    client = MlflowClient(f"sqlite:///{db}")
    experiments = list(tenant_experiments(client).values())
    out = []
    for run in client.search_runs(experiments, "attributes.status = 'FINISHED'", max_results=50000):
        params, metrics = run.data.params, run.data.metrics
        if params.get("limit_unit") != "s" or params.get("time_budget_s") in (None, "", "None"):
            continue
        cost, limit = metrics.get("cost_s"), float(params["time_budget_s"])
        if cost is None or not (cost > 0 and math.isfinite(limit) and limit > 0):
            continue
        out.append(math.log(cost / (limit / factor)))
    return out


def summarise(errors: Sequence[float]) -> CostErrors:
    if not errors:
        raise ValueError("no finished job with a time limit in seconds")
    return CostErrors(
        len(errors),
        statistics.fmean(abs(e) for e in errors),
        math.sqrt(statistics.fmean(e * e for e in errors)),
        statistics.fmean(errors),
    )


def main(argv: Sequence[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("dirs", nargs="+", type=Path, help="bench-live output directories")
    args = parser.parse_args(argv)
    for d in args.dirs:
        dbs = sorted(d.glob("**/homes/*/mlflow.db"))
        if not dbs:
            parser.error(f"no service home (homes/*/mlflow.db) under {d}")
        try:
            e = summarise([x for db in dbs for x in log_errors(db)])
        except ValueError as err:
            parser.error(f"{d}: {err}")
        print(f"{d}: {e.jobs} jobs, mean |log error| {e.mean_abs:.3f}, RMS {e.rms:.3f}, "
              f"mean {e.mean:+.3f}")  # fmt: skip


if __name__ == "__main__":
    main()
