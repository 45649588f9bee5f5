"""``tenantml spot simulate``: SpotTune vs one spot instance and on-demand (SpotTune's Fig. 7-9)
on the carried 2015 us-east-1 price traces.

Workload: the 16 configurations of one group of a curve set (default ``steplr-digits``: LeNet
with step learning-rate schedules, Table II's 2x2x2x2 pattern), with their real validation-loss
curves (max_trial_steps = curve length) and their seconds per step **measured on this machine**
(one CPU thread), multiplied by ``step_scale`` (default 1000: an epoch of 1.4 million examples, so
a trial runs hours as in the paper). Speed on an instance type with c vCPUs follows Amdahl's law,
``s(c) = s(1) ((1 - f) + f / c)``, with the parallel fraction ``f`` measured here from 1 and 2
threads (``--parallel-fraction`` overrides it). SpotTune starts from ``M = C0 / c`` and learns
the true speeds as its trials run.

Methods: SpotTune theta = 0.7 and 1.0 with RevPred (trained on the 9 days before the runs, Sec.
IV-D), one spot instance never revoked (cheapest type, fastest type; in the zone that is
cheapest when the job starts), on-demand (cheapest, fastest type). Metrics: cost (USD), job
completion time (hours), PCR = 1 / (JCT x cost) normalised to SpotTune theta = 0.7.
"""

from __future__ import annotations

import json
import math
from collections.abc import Callable, Sequence
from dataclasses import asdict
from importlib import resources
from pathlib import Path

import numpy as np

from policy.seer.tuning import Curves
from policy.spot import Market
from policy.spot.spottune import Trial, TuneOutcome, single_instance, spottune

__all__ = ["SCALING_FILE", "parallel_fraction", "run_simulation", "workload"]

SCALING_FILE = "steplr-digits.scaling.json"


def parallel_fraction() -> float:
    """Amdahl's ``f`` from the measured seconds per epoch on 1 and 2 threads (t2/t1 = 1 - f/2)."""
    ref = resources.files("tenantml") / "data" / "curves" / SCALING_FILE
    data = json.loads(ref.read_text())
    t1, t2 = float(data["seconds_per_epoch"]["1"]), float(data["seconds_per_epoch"]["2"])
    return float(min(1.0, max(0.0, 2.0 * (1.0 - t2 / t1))))


def workload(
    curves: Curves, markets: Sequence[Market], *, step_scale: float, f: float
) -> list[Trial]:
    """Trials of one curve group with per-market true seconds per step (see module doc)."""
    out = []
    for cid, t, v in zip(curves.ids, curves.times, curves.values, strict=True):
        per_step_s = float(t[-1]) * 60.0 / len(t) * step_scale  # times are minutes
        speeds = tuple(per_step_s * ((1 - f) + f / max(1, m.cpus)) for m in markets)
        out.append(Trial(cid, np.asarray(v, float), speeds))
    return out


def _pick(markets: Sequence[Market], t: int, key: str) -> int:
    if key == "cheapest":
        kind = min(
            {m.instance_type for m in markets},
            key=lambda k: next(m.on_demand for m in markets if m.instance_type == k),
        )
    else:
        kind = max(
            {m.instance_type for m in markets},
            key=lambda k: next(m.cpus for m in markets if m.instance_type == k),
        )
    same = [j for j, m in enumerate(markets) if m.instance_type == kind]
    return min(same, key=lambda j: markets[j].prices[t])


def run_simulation(
    trials: Sequence[Trial],
    markets: Sequence[Market],
    starts: Sequence[int],
    revocation: object,
    *,
    mcnt: int = 1,
    restore_min: int = 1,
    on_step: Callable[[], None] | None = None,
) -> dict[str, object]:
    """Every method from every start minute; means and per-run outcomes.

    ``on_step``: called as every method has run from one start minute: ``len(starts)`` times
    in all."""
    runs: dict[str, list[TuneOutcome]] = {}
    for i, t0 in enumerate(starts):
        for theta in (0.7, 1.0):
            out = spottune(
                trials,
                markets,
                t0,
                revocation,  # type: ignore[arg-type]
                theta=theta,
                mcnt=mcnt,
                restore_min=restore_min,
                seed=i,
            )
            runs.setdefault(out.method, []).append(out)
        for key in ("cheapest", "fastest"):
            j = _pick(markets, t0, key)
            for od in (False, True):
                label = f"{'on-demand' if od else 'single-spot'}-{key}"
                runs.setdefault(label, []).append(
                    single_instance(trials, markets[j], j, t0, on_demand=od, label=label)
                )
        if on_step is not None:
            on_step()
    summary: dict[str, dict[str, float]] = {}
    for name, outs in runs.items():
        cost = float(np.mean([o.cost for o in outs]))
        jct = float(np.mean([o.jct_h for o in outs]))
        steps = sum(o.steps for o in outs)
        summary[name] = {
            "cost_usd": cost,
            "jct_h": jct,
            "pcr_raw": float(np.mean([1.0 / (o.jct_h * max(o.cost, 1e-9)) for o in outs])),
            "best_selected": float(np.mean([o.best_true for o in outs])),
            "free_step_share": sum(o.free_steps for o in outs) / steps if steps else 0.0,
            "revocations": float(np.mean([o.revocations for o in outs])),
            "checkpoints": float(np.mean([o.checkpoints for o in outs])),
            "restore_share": float(
                np.mean(
                    [o.checkpoints * restore_min / 60.0 / max(o.instance_hours, 1e-9) for o in outs]
                )
            ),
        }
    ref = summary["spottune-0.7"]["pcr_raw"]
    for s in summary.values():
        s["pcr"] = s["pcr_raw"] / ref
    cheap = summary["single-spot-cheapest"]["cost_usd"]
    for s in summary.values():
        s["saving_vs_cheapest_spot"] = 1.0 - s["cost_usd"] / cheap if cheap else math.nan
    return {
        "methods": summary,
        "starts": list(starts),
        "runs": {k: [asdict(o) | {"log": o.log[:20]} for o in v] for k, v in runs.items()},
    }


def write_plots(result: dict[str, object], out: Path) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    methods = result["methods"]
    assert isinstance(methods, dict)
    names = list(methods)
    fig, axes = plt.subplots(1, 3, figsize=(12, 3.5))
    for ax, key, label in zip(
        axes,
        ("cost_usd", "jct_h", "pcr"),
        ("cost (USD)", "JCT (hours)", "PCR (SpotTune 0.7 = 1)"),
        strict=True,
    ):
        ax.bar(
            names,
            [methods[n][key] for n in names],
            color=["tab:red" if n.startswith("spottune") else "tab:gray" for n in names],
        )
        ax.set_title(label)
        ax.tick_params(axis="x", rotation=60)
        if key != "jct_h":
            ax.set_yscale("log")
    fig.tight_layout()
    fig.savefig(out / "spot_simulation.png", dpi=120)
    plt.close(fig)
