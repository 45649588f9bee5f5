"""The loss estimates of a service's home against the loss it realises once every candidate left
is trained: the estimates' calibration in their own terms.

A tenant's loss estimate (`policy.estimates`) is the posterior expected gain over its best
measured accuracy ``b_i`` if every remaining model were trained. `bench-live` scores it against
the best *test* accuracy any of its systems served within the budget; at a short budget neither
system trains most of the catalogue, so that realised loss is a lower bound. This script
measures the estimate's own quantity instead: it reads the home's last logged estimates and each
tenant's ``b_i`` (the best accuracy of its job runs), runs ``tenantml run`` on the home until
the policy has nothing left to train (or `--timeout-s` passes: then a SIGINT stops it, as a
user would, and the tenants with candidates left are flagged), and prints per tenant the
estimate against ``max accuracy after - b_i``, and their means.

It trains in the home it is given: a `bench-live` home (``OUT/seed-S/homes/live``) gains runs
after its budget, which `bench-live`'s scoring of that split leaves out (it keeps the models
registered within the budget). Image tenants' torch candidates take minutes each on CPU.

Usage: ``python infra/scripts/loss_realised.py HOME [--timeout-s S] [--json FILE]``
"""

from __future__ import annotations

import argparse
import json
import os
import signal
import subprocess
import sys
from pathlib import Path

import numpy as np

from mlflow_plugin.tracking import job_records, tenant_experiments
from tenantml.bench.live import _last_loss_estimates
from tenantml.client import Client


def measured(home: Path) -> dict[str, tuple[float, set[str]]]:
    """Per tenant: the best accuracy of its job runs, and the candidates that have one."""
    c = Client(home)
    out: dict[str, tuple[float, set[str]]] = {}
    for r in job_records(c.mlflow, tenant_experiments(c.mlflow).values()):
        if r.accuracy is None or not np.isfinite(r.accuracy):
            continue
        best, tried = out.get(r.tenant, (0.0, set()))
        out[r.tenant] = (max(best, r.accuracy), tried | {r.candidate})
    return out


def train_the_rest(home: Path, timeout_s: float) -> bool:
    """``tenantml run`` on `home` until nothing is left to train; False if `timeout_s` ran out
    first (stopped with SIGINT)."""
    env = {**os.environ, "TENANTML_HOME": str(home)}
    cmd = [sys.executable, "-m", "tenantml.cli", "run", "--ticks", "1000000"]
    with open(home / "loss_realised.log", "a") as log:
        proc = subprocess.Popen(cmd, env=env, stdout=log, stderr=subprocess.STDOUT,
                                start_new_session=True)  # fmt: skip
        try:
            proc.wait(timeout=timeout_s)
            return proc.returncode == 0
        except subprocess.TimeoutExpired:
            os.killpg(proc.pid, signal.SIGINT)
            proc.wait(timeout=120)
            return False
        except BaseException:
            os.killpg(proc.pid, signal.SIGINT)
            raise


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("home", type=Path)
    ap.add_argument("--timeout-s", type=float, default=3600.0)
    ap.add_argument("--json", type=Path, help="also write the rows here")
    args = ap.parse_args()
    predicted = _last_loss_estimates(args.home)
    if not predicted:
        raise SystemExit(f"{args.home}: no loss estimate logged (has `tenantml run` run there?)")
    before = measured(args.home)
    done = train_the_rest(args.home, args.timeout_s)
    after = measured(args.home)
    rows = {}
    for name, estimate in sorted(predicted.items()):
        b, tried = before.get(name, (0.0, set()))
        best, now = after.get(name, (b, tried))
        rows[name] = {"estimate": estimate, "realised": best - b, "b": b, "best": best,
                      "tried_before": len(tried), "tried_after": len(now)}  # fmt: skip
    est = np.array([r["estimate"] for r in rows.values()])
    real = np.array([r["realised"] for r in rows.values()])
    for name, r in rows.items():
        print(f"{name:16s} estimate {r['estimate']:.4f}  realised {r['realised']:.4f}  "
              f"(best {r['b']:.4f} -> {r['best']:.4f}, {r['tried_before']} -> "
              f"{r['tried_after']} candidates)")  # fmt: skip
    print(
        f"mean estimate {est.mean():.4f}, realised {real.mean():.4f}, "
        f"mean |estimate - realised| {np.abs(est - real).mean():.4f}"
        + ("" if done else f" (stopped after {args.timeout_s:g} s: candidates were left)")
    )
    if args.json:
        args.json.write_text(json.dumps({"home": str(args.home), "complete": done, "rows": rows},
                                        indent=1))  # fmt: skip


if __name__ == "__main__":
    main()
