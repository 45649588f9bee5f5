"""Benchmark outputs: ``curves.csv``, ``summary.json``, PNG plots, a rich table, MLflow runs.

Definitions (costs are fractions of the budget axis, in [0, 1]):
- ``avg_loss`` of a repeat = the tenants' (weighted) mean accuracy loss (App. A Eq. 3);
  ``worst_loss`` of a repeat = its worst tenant's loss; ``rel_accuracy`` = mean best / a*.
- Summary curves: the mean over repeats of ``avg_loss`` ("average accuracy loss", Fig. 9-11
  left) and the maximum over repeats of ``avg_loss`` ("worst-case accuracy loss across all
  runs", Fig. 9-11 right). ``auc_*`` integrate them over the cost axis (trapezoid rule).
- ``cost_to_avg_loss[level]``: the first cost at which the mean curve is <= level (null if never).
- ``speedups[p][level]`` = cost_to(p) / cost_to(hybrid): how many times longer p needs;
  ``over_oracle[p][level]`` = cost_to(p) / cost_to(oracle).
- ``auc_worst_tenant_loss``: AUC of the worst tenant's loss over all tenants *and* repeats
  (does a policy buy its average by starving a tenant?).
"""

from __future__ import annotations

import csv
import json
import time
from pathlib import Path
from typing import Any

import numpy as np

from policy import FloatArray
from tenantml.bench.runner import LOSS_LEVELS, Protocol, RepeatResult

__all__ = ["summarize", "write_outputs"]


def _cost_to(x: FloatArray, curve: FloatArray, level: float) -> float | None:
    hit = np.flatnonzero(curve <= level + 1e-12)
    return float(x[hit[0]]) if hit.size else None


def summarize(
    dataset: str, proto: Protocol, results: list[RepeatResult]
) -> tuple[dict[str, Any], dict[str, dict[str, FloatArray]]]:
    """``summary.json`` content and the aggregated curves per policy."""
    x = np.linspace(0.0, 1.0, proto.grid_points)
    agg: dict[str, dict[str, FloatArray]] = {}
    policies: dict[str, Any] = {}
    for name in proto.policies:
        avg = np.stack([r.curves[name]["avg_loss"] for r in results])
        rel = np.stack([r.curves[name]["rel_accuracy"] for r in results])
        tenant_worst = np.stack([r.curves[name]["worst_loss"] for r in results]).max(0)
        mean_curve, worst_curve = avg.mean(0), avg.max(0)
        agg[name] = {"avg": mean_curve, "worst": worst_curve, "rel": rel.mean(0)}
        regret = np.array([r.regret[name] for r in results])
        policies[name] = {
            "auc_avg_loss": float(np.trapezoid(mean_curve, x)),
            "auc_worst_loss": float(np.trapezoid(worst_curve, x)),
            "auc_worst_tenant_loss": float(np.trapezoid(tenant_worst, x)),
            "final_worst_tenant_loss": float(tenant_worst[-1]),
            "cost_to_avg_loss": {f"{lv:g}": _cost_to(x, mean_curve, lv) for lv in LOSS_LEVELS},
            "final_avg_loss": float(mean_curve[-1]),
            "final_worst_loss": float(worst_curve[-1]),
            "final_rel_accuracy": float(rel.mean(0)[-1]),
            "regret_R": float(regret[:, 0].mean()),
            "regret_R_prime": float(regret[:, 1].mean()),
            "jobs_mean": float(np.mean([r.jobs[name] for r in results])),
        }
        if all(name in r.calibration for r in results):
            pred = np.concatenate([r.calibration[name][0] for r in results])
            real = np.concatenate([r.calibration[name][1] for r in results])
            # The service's "loss estimate" at the end of the run against the loss that was
            # left (best of the tenant's models minus the best found), over tenants x repeats.
            policies[name]["loss_estimate"] = {
                "predicted_mean": float(pred.mean()),
                "realised_mean": float(real.mean()),
                "mean_abs_error": float(np.abs(pred - real).mean()),
                "predicted_zero_share": float((pred == 0).mean()),
            }
    speedups: dict[str, dict[str, float | None]] = {}
    ref = policies.get("hybrid")
    if ref is not None:
        for name, s in policies.items():
            speedups[name] = {}
            for lv in LOSS_LEVELS:
                key = f"{lv:g}"
                a, b = s["cost_to_avg_loss"][key], ref["cost_to_avg_loss"][key]
                speedups[name][key] = (a / b) if (a is not None and b) else None
    summary: dict[str, Any] = {
        "dataset": dataset,
        "protocol": {
            "test_users": proto.test_users,
            "repeats": proto.repeats,
            "budget": proto.budget,
            "cost_oblivious": proto.cost_oblivious,
            "gpus": proto.gpus,
            "lambda_exp": proto.lambda_exp,
            "seed": proto.seed,
            "beta_rule": proto.beta_rule,
            "delta": proto.delta,
            "hybrid_s": proto.hybrid_s,
            "cost_scale": proto.cost_scale,
            "kernel": proto.kernel,
            "costs": proto.costs,
            "time_limit_factor": proto.limit_factor,
        },
        "policies": policies,
        "speedups": speedups,
    }
    if ref is not None and "oracle" in policies and policies["oracle"]["auc_avg_loss"] > 0:
        summary["hybrid_auc_over_oracle"] = ref["auc_avg_loss"] / policies["oracle"]["auc_avg_loss"]
    if "oracle" in policies:  # how many times the oracle's cost each policy needs
        o = policies["oracle"]["cost_to_avg_loss"]
        summary["over_oracle"] = {
            name: {
                k: (v / o[k] if (v is not None and o[k]) else None)
                for k, v in s["cost_to_avg_loss"].items()
            }
            for name, s in policies.items()
        }
    return summary, agg


def _plot(
    path: Path, x: FloatArray, curves: dict[str, FloatArray], title: str, ylabel: str
) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, ax = plt.subplots(figsize=(6.4, 4.2), dpi=120)
    for name, y in curves.items():
        ax.plot(
            x,
            y,
            label=name,
            lw=2.2 if name.startswith("hybrid") else 1.3,
            ls="--" if name == "oracle" else "-",
        )
    ax.set_xlabel("cost (fraction of the budget)")
    ax.set_ylabel(ylabel)
    ax.set_title(title)
    # Zoom to the informative range (as the paper's Fig. 9-11 do): twice the reference
    # policy's loss at 5% of the budget; curves above it leave the plot at the top.
    ref = curves.get("hybrid", next(iter(curves.values()))) if curves else np.ones(1)
    top = max(0.02, 2.0 * float(ref[len(ref) // 20]))
    ax.set_ylim(0, top)
    ax.grid(alpha=0.3)
    ax.legend(fontsize=8)
    fig.tight_layout()
    fig.savefig(path)
    plt.close(fig)


def write_outputs(
    out: Path, dataset: str, proto: Protocol, results: list[RepeatResult]
) -> dict[str, Any]:
    out.mkdir(parents=True, exist_ok=True)
    x = np.linspace(0.0, 1.0, proto.grid_points)
    with open(out / "curves.csv", "w", newline="") as fh:
        w = csv.writer(fh)
        w.writerow(["policy", "repeat", "cost", "avg_loss", "worst_loss", "rel_accuracy"])
        for r in results:
            for name in proto.policies:
                c = r.curves[name]
                for j in range(len(x)):
                    w.writerow(
                        [
                            name,
                            r.repeat,
                            f"{x[j]:.4f}",
                            f"{c['avg_loss'][j]:.6g}",
                            f"{c['worst_loss'][j]:.6g}",
                            f"{c['rel_accuracy'][j]:.6g}",
                        ]
                    )
    summary, agg = summarize(dataset, proto, results)
    (out / "summary.json").write_text(json.dumps(summary, indent=2) + "\n")
    mode = "cost-oblivious" if proto.cost_oblivious else "cost-aware"
    gpus = f", {proto.gpus} GPUs" if proto.gpus > 1 else ""
    _plot(
        out / "avg_loss.png",
        x,
        {k: v["avg"] for k, v in agg.items()},
        f"{dataset}: average accuracy loss ({mode}{gpus})",
        "average accuracy loss",
    )
    _plot(
        out / "worst_loss.png",
        x,
        {k: v["worst"] for k, v in agg.items()},
        f"{dataset}: worst-case accuracy loss ({mode}{gpus})",
        "worst accuracy loss",
    )
    return summary


def log_to_mlflow(
    summary: dict[str, Any], out: Path, proto: Protocol, results: list[RepeatResult]
) -> None:
    """One MLflow run per policy: protocol params, the mean curve as step metrics, plots."""
    try:
        import mlflow
    except ImportError as e:  # pragma: no cover - depends on the install
        raise RuntimeError("--mlflow needs mlflow: pip install 'tenantml[service]'") from e
    from mlflow.entities import Metric

    from mlflow_plugin.tracking import ensure_experiment

    _, agg = summarize(summary["dataset"], proto, results)
    client = mlflow.MlflowClient()
    # An explicit experiment, not `mlflow.set_experiment`: that one is process-wide and would
    # steer the next `start_run` of this process (a scheduler's, a job's) to this experiment.
    experiment = f"bench-{summary['dataset']}"
    exp_id = ensure_experiment(client, experiment)
    for name, stats in summary["policies"].items():
        with mlflow.start_run(run_name=name, experiment_id=exp_id) as run:
            mlflow.log_params(
                {**summary["protocol"], "policy": name, "dataset": summary["dataset"]}
            )
            mlflow.log_metrics({k: v for k, v in stats.items() if isinstance(v, float)})
            now = int(time.time() * 1000)
            curve = [
                Metric(f"{key}_loss", float(v), now, step)
                for key in ("avg", "worst")
                for step, v in enumerate(agg[name][key])
            ]
            for k in range(0, len(curve), 1000):  # MLflow's batch limit is 1000 metrics
                client.log_batch(run.info.run_id, metrics=curve[k : k + 1000])
            for png in ("avg_loss.png", "worst_loss.png", "summary.json"):
                mlflow.log_artifact(str(out / png))
