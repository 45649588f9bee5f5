"""The loss estimates of a service's home against the loss it realises once every candidate left
is trained: the estimates' calibration in their own terms.

A tenant's loss estimate (`policy.estimates`) is the posterior expected gain over its best
measured accuracy ``b_i`` if every remaining model were trained. `bench-live` scores it against
the best *test* accuracy any of its systems served within the budget; at a short budget neither
system trains most of the catalogue, so that realised loss is a lower bound. This script
measures the estimate's own quantity instead: it reads the home's last logged estimates and each
tenant's ``b_i`` (as the service takes it: the best accuracy of its FINISHED jobs on its current
data snapshot), runs ``tenantml run`` until the policy has nothing left to train (or until
every tenant measured has had each candidate measured, or `--timeout-s` passes: then a SIGINT
stops it, as a user would), and prints per tenant the estimate against ``best after - b_i``,
with how many of its candidates were then measured; then the means and Spearman's rho, over
all tenants and over those with every candidate measured. The realised side is a maximum of
noisy validation scores, the estimate one over the posterior of those scores: on a small
tenant one score's noise is a few points.

``--only digits,glass``: the other tenants get the least weight in the copy (1e-6, the low
end of `WEIGHT_RANGE`), so that `rate` trains them last, and the means are over the named
tenants; e.g. the tabular tenants of a `bench-live real` home, whose image tenants' CNNs
would otherwise take the time.

By default it trains in a copy of the home (its MLflow artifact locations moved with it), so
that the home, e.g. a `bench-live` split's ``OUT/seed-S/homes/live``, keeps the state the
other scripts read; ``--in-place`` trains in the home itself. Image tenants' torch candidates
take minutes each on CPU.

Usage: ``python infra/scripts/loss_realised.py HOME [--timeout-s S] [--only NAMES]
[--copy DIR | --in-place] [--json FILE]``
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import sqlite3
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable
from contextlib import closing
from pathlib import Path
from typing import Any

import numpy as np

from mlflow_plugin.tracking import WEIGHT_RANGE
from tasks import load_state
from tenantml.bench.live import _last_loss_estimates, _rank_correlation, stop_as_a_user
from tenantml.client import Client

#: MLflow's columns that hold absolute artifact locations (sqlite backend)
_ARTIFACT_COLUMNS = (
    ("experiments", "artifact_location"),
    ("runs", "artifact_uri"),
    ("logged_models", "artifact_location"),
    ("model_versions", "source"),
    ("model_versions", "storage_location"),
)


def copy_home(home: Path, dest: Path) -> Path:
    """A copy of `home` at `dest` whose MLflow artifact locations point into the copy (MLflow
    keeps them absolute: new runs of the copy would write into the original)."""
    shutil.copytree(home, dest)
    old, new = home.resolve().as_uri(), dest.resolve().as_uri()
    with closing(sqlite3.connect(dest / "mlflow.db")) as db, db:
        for table, column in _ARTIFACT_COLUMNS:
            db.execute(f"UPDATE {table} SET {column} = replace({column}, ?, ?)", (old, new))
    return dest


def measured(home: Path) -> dict[str, tuple[float, int, int]]:
    """Per tenant, as the service counts them: (best accuracy of its FINISHED jobs on its
    current snapshot, candidates measured there, candidates in all)."""
    c = Client(home)
    state = load_state(c.mlflow, c.store)
    out = {}
    for ten in state.tenants:
        done = [
            r
            for r in state.records
            if r.tenant == ten.name and r.status == "FINISHED" and r.snapshot == ten.snapshot
            and r.accuracy is not None and np.isfinite(r.accuracy)
        ]  # fmt: skip
        best = max((float(r.accuracy or 0.0) for r in done), default=0.0)
        out[ten.name] = (best, len({r.candidate for r in done}), len(ten.candidates))
    return out


def train_the_rest(
    home: Path, timeout_s: float, done: Callable[[], bool], check_s: float = 30.0
) -> bool:
    """``tenantml run`` on `home` until nothing is left to train or `done()` (asked every
    `check_s`; then stopped as a user stops it): True; False when `timeout_s` ran out first
    (stopped the same way); raises if the run failed."""
    env = {**os.environ, "TENANTML_HOME": str(home)}
    cmd = [sys.executable, "-m", "tenantml.cli", "run", "--ticks", "1000000"]
    log_path = home / "loss_realised.log"
    deadline = time.monotonic() + timeout_s
    with open(log_path, "a") as log:
        proc = subprocess.Popen(cmd, env=env, stdout=log, stderr=subprocess.STDOUT,
                                start_new_session=True)  # fmt: skip
        try:
            while proc.poll() is None:
                try:
                    proc.wait(timeout=max(0.0, min(check_s, deadline - time.monotonic())))
                except subprocess.TimeoutExpired:
                    finished = done()
                    if finished or time.monotonic() >= deadline:
                        stop_as_a_user(proc)
                        return finished
        except BaseException:
            stop_as_a_user(proc)
            raise
    if proc.returncode != 0:
        tail = log_path.read_text()[-2000:]
        raise RuntimeError(f"tenantml run exited {proc.returncode}:\n{tail}")
    return True


def _summary(rows: dict[str, dict[str, Any]]) -> str:
    """Means, mean absolute error and Spearman's rho of (estimate, realised) over `rows`."""
    est = np.array([r["estimate"] for r in rows.values()])
    real = np.array([r["realised"] for r in rows.values()])
    if not len(est):
        return "none"
    rho = _rank_correlation(list(zip(est, real, strict=True)))
    return (
        f"{len(est)} tenants: estimate {est.mean():.4f}, realised {real.mean():.4f}, "
        f"mean |estimate - realised| {np.abs(est - real).mean():.4f}, Spearman "
        + ("-" if rho is None else f"{rho:.2f}")
    )


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("home", type=Path)
    ap.add_argument("--timeout-s", type=float, default=3600.0)
    where = ap.add_mutually_exclusive_group()
    where.add_argument("--copy", type=Path, help="train in a copy kept here (default: a temp)")
    where.add_argument("--in-place", action="store_true", help="train in HOME itself")
    ap.add_argument("--only", help="comma list: the tenants measured (the others trained last)")
    ap.add_argument("--json", type=Path, help="also write the rows here")
    args = ap.parse_args()
    predicted = _last_loss_estimates(args.home)
    if not predicted:
        raise SystemExit(f"{args.home}: no loss estimate logged (has `tenantml run` run there?)")
    only = [n.strip() for n in args.only.split(",") if n.strip()] if args.only else list(predicted)
    if unknown := sorted(set(only) - set(predicted)):
        raise SystemExit(f"--only {', '.join(unknown)}: not a tenant of {args.home}")
    if args.in_place and args.only:
        raise SystemExit("--only sets the other tenants' weights: give it with a copy")
    predicted = {n: predicted[n] for n in only}
    before = measured(args.home)
    temp = None if args.in_place or args.copy else Path(tempfile.mkdtemp(prefix="tml-loss-"))
    try:
        if args.in_place:
            home = args.home
        else:
            home = copy_home(args.home, args.copy if temp is None else temp / "home")
            for name in set(before) - set(only):
                Client(home).set_weight(name, WEIGHT_RANGE[0])

        def named_done() -> bool:
            now = measured(home)
            return all(now[n][1] == now[n][2] for n in only if n in now)

        complete = train_the_rest(home, args.timeout_s, named_done)
        after = measured(home)
    finally:
        if temp is not None:
            shutil.rmtree(temp, ignore_errors=True)
    rows = {}
    for name, estimate in sorted(predicted.items()):
        b, tried, _ = before.get(name, (0.0, 0, 0))
        best, now, every = after.get(name, (b, tried, tried))
        rows[name] = {"estimate": estimate, "realised": best - b, "b": b, "best": best,
                      "tried_before": tried, "tried_after": now, "candidates": every}  # fmt: skip
    for name, r in rows.items():
        print(f"{name:16s} estimate {r['estimate']:.4f}  realised {r['realised']:.4f}  "
              f"(best {r['b']:.4f} -> {r['best']:.4f}; {r['tried_before']} -> "
              f"{r['tried_after']} of {r['candidates']} candidates)")  # fmt: skip
    whole = {k: r for k, r in rows.items() if r["tried_after"] == r["candidates"]}
    print("all " + _summary(rows) + ("" if complete else f" (stopped after {args.timeout_s:g} s)"))
    print("every candidate measured, " + _summary(whole))
    if args.json:
        args.json.write_text(
            json.dumps({"home": str(args.home), "complete": complete, "rows": rows}, indent=1)
        )


if __name__ == "__main__":
    main()
