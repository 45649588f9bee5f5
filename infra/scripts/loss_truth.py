"""The loss estimates at the end of `bench-live` runs against the truth: every scikit-learn
candidate a tabular tenant had left, trained as the service would train it.

`loss_realised.py` lets the service itself train what is left, and its policy abandons the arms
it expects least from, so a tenant is rarely complete. Here each tabular tenant's untried
candidates are trained in this process (`trainers.train`, the job the service would send: the
tenant's current snapshot, seed 0), without touching the home, and the realised loss is
``max(b_i, best untried) - b_i``: the estimate's own quantity (`policy.estimates`), in
validation accuracy as ``b_i`` is. (Not quite exact: the estimate is over the models'
accuracies, the realised value a maximum of ~18 noisy validation scores, biased up a little.)
The accuracies trained here are cached per home, tenant and data snapshot (``--cache``,
default ``OUT.cache.json``; written after each tenant), so that a rerun only analyses.

Printed per home and over all: the mean realised loss; per estimate of `ESTIMATES` its mean and
its mean absolute error; two floors set by the realised losses' own spread, chosen in hindsight
(the error of one constant for all, their median, and of one per tenant, its median over the
homes); and the standardised surprises ``z = (y - mu) / sd`` of the untried arms' truths under
the final posterior (mean / mean square), beside those of the tenants' own measured results
(`policy._book.TenantBook`).

Usage: ``python infra/scripts/loss_truth.py HOME [HOME ...] --out FILE.json``, e.g. the live
homes of a `bench-live --repeats` run: ``results/bl-h30-s200/seed-2*/homes/live``.
"""

from __future__ import annotations

import argparse
import json
from collections.abc import Callable
from pathlib import Path
from typing import Any

import numpy as np
from calibration_recompute import scaled_estimates  # this script's folder (run as a script)

from policy import History, Problem, loss_estimates
from policy._book import TenantBook
from policy.estimates import calibration_scales
from tasks import load_state
from tenantml.client import Client
from trainers import TrainJob, train
from trainers.templates import Candidate


def tabular(candidates: tuple[str, ...]) -> bool:
    return all(Candidate.parse(c).spec.family == "sklearn" for c in candidates)


def truths(
    home: Path, cache: dict[str, Any], save: Callable[[], None]
) -> dict[str, dict[str, float]]:
    """Per tabular tenant of `home`: every candidate's validation accuracy on its current
    snapshot, measured ones as the home has them and the rest trained here (`cache` keeps
    them, keyed by home and ``tenant@snapshot``; `save` is called after each tenant)."""
    c = Client(home)
    state = load_state(c.mlflow, c.store)
    known = cache.setdefault(str(home), {})
    out: dict[str, dict[str, float]] = {}
    for t in state.tenants:
        if not tabular(t.candidates):
            continue
        done = {
            r.candidate: float(r.accuracy)
            for r in state.records
            if r.tenant == t.name and r.status == "FINISHED" and r.snapshot == t.snapshot
            and r.accuracy is not None and np.isfinite(r.accuracy)
        }  # fmt: skip
        trained = known.setdefault(f"{t.name}@{t.snapshot}", {})
        for cand in t.candidates:
            if cand not in done and cand not in trained:
                res = train(TrainJob(t.name, cand, t.snapshot), c.store)
                trained[cand] = res.accuracy
                print(f"  {home.parent.parent.name} {t.name} {cand}: {res.accuracy:.4f}",
                      flush=True)  # fmt: skip
        save()
        out[t.name] = {**trained, **done}
    return out


def rows(home: Path, truth: dict[str, dict[str, float]]) -> list[dict[str, Any]]:
    """Per tabular tenant of `home`: ``b``, the realised loss, the estimates of `ESTIMATES`,
    and the standardised surprises ``z_untried`` of its untried arms' truths under its final
    posterior (the uncalibrated one: what `TenantBook` standardises its own results by)."""
    c = Client(home)
    state = load_state(c.mlflow, c.store)
    history = state.history()
    book = TenantBook(state.problem, cost_aware=False)
    book.sync(history)
    made = {name: make(state.problem, history, book) for name, make in ESTIMATES.items()}
    out = []
    for i, t in enumerate(state.tenants):
        if t.name not in truth:
            continue
        untried = book.candidates(i)
        post = book.posterior(i)
        b = float(book.best[i])
        ys = np.array([truth[t.name][state.catalogue[a]] for a in book.local_arms[i][untried]])
        noise = np.array([book.measurement_noise(i, y) for y in ys])
        sd = np.sqrt(post.var[untried] + post.noise + noise)
        row = {"home": str(home), "tenant": t.name, "b": b, "untried": int(untried.sum()),
               "realised": max(0.0, float(ys.max()) - b) if len(ys) else 0.0,
               "n": int(book.n_z2[i]), "sum_z": float(book.sum_z[i]),
               "sum_z2": float(book.sum_z2[i]),
               "z_untried": ((ys - post.mu[untried]) / sd).tolist()}  # fmt: skip
        out.append(row | {name: float(v[i]) for name, v in made.items()})
    return out


Estimate = Callable[[Problem, History, TenantBook], np.ndarray]

#: the estimates compared: as the service makes them (``nu = 3``), with ``nu`` 1 and 10, as
#: they were until 2026-11-28 (scaled, not moved), and uncalibrated
ESTIMATES: dict[str, Estimate] = {
    "now": lambda p, h, _: loss_estimates(p, h),
    "nu1": lambda p, h, _: loss_estimates(p, h, calibration=1.0),
    "nu10": lambda p, h, _: loss_estimates(p, h, calibration=10.0),
    "scaled": lambda _p, _h, b: scaled_estimates(b, calibration_scales(b.sum_z2, b.n_z2)),
    "raw": lambda p, h, _: loss_estimates(p, h, calibration=0.0),
}


def _report(label: str, rs: list[dict[str, Any]]) -> None:
    real = np.array([r["realised"] for r in rs])
    parts = [f"{label:10s} {len(rs):3d} tenants  realised {real.mean():.4f}"]
    for name in ESTIMATES:
        est = np.array([r[name] for r in rs])
        parts.append(f"{name} {est.mean():.4f}/{np.abs(est - real).mean():.4f}")
    # floors set by the realised losses' own spread, chosen in hindsight: one constant for all
    # (their median), and one per tenant (its median over the homes)
    parts.append(f"const {np.abs(real - np.median(real)).mean():.4f}")
    by: dict[str, list[float]] = {}
    for r in rs:
        by.setdefault(r["tenant"], []).append(r["realised"])
    own = [abs(r["realised"] - float(np.median(by[r["tenant"]]))) for r in rs]
    parts.append(f"own {np.mean(own):.4f}")
    z = np.concatenate([r["z_untried"] for r in rs]) if rs else np.zeros(0)
    n = sum(r["n"] for r in rs)
    zt = sum(r["sum_z"] for r in rs) / max(n, 1)
    z2t = sum(r["sum_z2"] for r in rs) / max(n, 1)
    parts.append(f"z untried {z.mean():+.2f}/{(z**2).mean():.2f} tried {zt:+.2f}/{z2t:.2f}")
    print("  ".join(parts), flush=True)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("homes", type=Path, nargs="+")
    ap.add_argument("--out", type=Path, required=True, help="the rows, as JSON")
    ap.add_argument("--cache", type=Path, help="accuracies trained here (default OUT.cache.json)")
    args = ap.parse_args()
    cache_path = args.cache or args.out.with_suffix(".cache.json")
    if cache_path.resolve() == args.out.resolve():
        raise SystemExit(f"--cache {cache_path} is --out: give another file")
    cache = json.loads(cache_path.read_text()) if cache_path.exists() else {}

    def save() -> None:
        cache_path.write_text(json.dumps(cache, indent=1, sort_keys=True))

    everything = []
    for home in args.homes:
        truth = truths(home, cache, save)
        rs = rows(home, truth)
        _report(home.parent.parent.name, rs)
        everything += rs
    _report("all", everything)
    args.out.write_text(json.dumps(everything, indent=1))


if __name__ == "__main__":
    main()
