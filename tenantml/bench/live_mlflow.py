"""bench-live's results as MLflow runs (``tenantml bench-live --mlflow``), issue 16 item 5.

One run per system in the experiment ``bench-live`` of the *user's* tracking server (the URI
MLflow resolves where the command starts: ``MLFLOW_TRACKING_URI`` or MLflow's default), never
of the fresh homes the compared services ran on: a home's client points this process's
``MLFLOW_TRACKING_URI`` at itself, so the user's URI is resolved before any system runs
(:func:`user_tracking_uri`) and every call here names it.

What a run holds, for one split or the mean over splits (``<name>_se`` its standard error):
- params: ``system``, ``budget_s``, ``slots``, ``test_fraction``, ``seeds``, ``n_tenants``,
  ``reference`` (the first system, the one differences are taken to), ``out``, and
  ``tenant_set`` where known;
- metrics: ``test_accuracy_q25 .. q100`` (mean served test accuracy at each quarter),
  ``test_regret_auc``, ``test_regret_from_first_job``, ``auc_minus_reference`` and
  ``from_first_job_minus_reference`` (paired by split, with ``splits_reference_smaller``),
  ``loss_estimate_abs_error``, ``jobs``; and the curves ``mean_test_accuracy`` and
  ``mean_test_regret`` at step ``j`` = time ``j / (points - 1)`` of the budget;
- artifacts: ``summary.json``, ``curves.csv``, ``accuracy.png``.
"""

from __future__ import annotations

import time
from collections.abc import Mapping
from pathlib import Path
from typing import Any

__all__ = ["EXPERIMENT", "check_reachable", "log_live_to_mlflow", "user_tracking_uri"]

EXPERIMENT = "bench-live"
OUTPUTS = ("summary.json", "curves.csv", "accuracy.png")


def user_tracking_uri() -> str:
    """The tracking URI MLflow resolves now (call before any home's client is made)."""
    import mlflow

    return str(mlflow.get_tracking_uri())


def check_reachable(tracking_uri: str) -> None:
    """Fail before a long benchmark, not after it: ValueError naming the URI if its tracking
    store cannot be read."""
    from mlflow.tracking import MlflowClient

    from tasks.settings import mlflow_client_defaults

    # as the service's own clients: a server that is down is named in seconds, not after
    # MLflow's default minutes of retries
    mlflow_client_defaults()
    try:
        MlflowClient(tracking_uri).search_experiments(max_results=1)
    except Exception as e:  # any store error: unreachable server, unreadable file, bad scheme
        first = str(e).strip().splitlines()[0] if str(e).strip() else type(e).__name__
        raise ValueError(
            f"--mlflow: the tracking store at {tracking_uri} cannot be read ({first}); set "
            "MLFLOW_TRACKING_URI to a running server or a local store, or leave --mlflow out"
        ) from None


def _scalars(key: str, value: Any, ref: str) -> dict[str, float]:
    """A summary value as metrics: a number as itself; a ``{"mean", "se", ...}`` dict as
    ``key`` and ``key_se``, and its split counts (``splits_<ref>_smaller``) as
    ``splits_reference_smaller``."""
    if isinstance(value, bool) or value is None:
        return {}
    if isinstance(value, int | float):
        return {key: float(value)}
    out: dict[str, float] = {}
    if isinstance(value, Mapping) and "mean" in value:
        out = {key: float(value["mean"]), f"{key}_se": float(value["se"])}
        for k, v in value.items():
            if k.startswith(f"splits_{ref}_"):
                out[f"{key}_splits_reference_{k.removeprefix(f'splits_{ref}_')}"] = float(v)
    return out


def _metrics(entry: Mapping[str, Any], ref: str, system: str) -> dict[str, float]:
    """One system's summary entry (one split's or the combination's) as metrics."""
    out: dict[str, float] = {}
    for q, v in entry["mean_test_accuracy"].items():
        out |= _scalars(f"test_accuracy_{q}", v, ref)
    for key in ("test_regret_auc", "test_regret_from_first_job"):
        out |= _scalars(key, entry.get(key), ref)
    if system != "flaml":  # a per-tenant tool runs no service jobs
        out |= _scalars("jobs", entry.get("jobs"), ref)
    for name in ("auc_minus", "from_first_job_minus"):  # paired with the reference's
        out |= _scalars(f"{name}_reference", entry.get(f"{name}_{ref}"), ref)
    if "loss_estimate" in entry:  # one split
        out |= _scalars("loss_estimate_abs_error", entry["loss_estimate"]["mean_abs_error"], ref)
    out |= _scalars("loss_estimate_abs_error", entry.get("loss_estimate_mean_abs_error"), ref)
    return out


def log_live_to_mlflow(
    summary: Mapping[str, Any], out: Path, tracking_uri: str, tenant_set: str | None = None
) -> list[str]:
    """One MLflow run per system of a bench-live `summary` whose outputs are in `out`, in the
    experiment ``bench-live`` at `tracking_uri`; returns the run ids."""
    from mlflow.entities import Metric, Param, RunTag
    from mlflow.tracking import MlflowClient

    from mlflow_plugin.tracking import ensure_experiment
    from tenantml.bench.live_repeats import read_curves

    client = MlflowClient(tracking_uri)
    exp_id = ensure_experiment(client, EXPERIMENT)
    systems = list(summary["systems"])
    ref = summary.get("reference", systems[0])
    seeds = summary.get("seeds", [summary.get("seed")])
    common = {
        "budget_s": summary["budget_s"],
        "slots": summary["slots"],
        "test_fraction": summary["test_fraction"],
        "seeds": ",".join(str(k) for k in seeds),
        "n_tenants": len(summary["tenants"]),
        "reference": ref,
        "systems": ",".join(systems),
        "out": str(out),
        **({"tenant_set": tenant_set} if tenant_set else {}),
    }
    rows = read_curves(out)
    now = int(time.time() * 1000)
    ids = []
    for system, entry in summary["systems"].items():
        run = client.create_run(exp_id, run_name=system)
        rid = run.info.run_id
        curve = [r for r in rows if r["system"] == system]
        metrics = [Metric(k, v, now, 0) for k, v in _metrics(entry, ref, system).items()]
        metrics += [
            Metric(name, float(r[name]), now, j)
            for name in ("mean_test_accuracy", "mean_test_regret")
            for j, r in enumerate(curve)
        ]
        params = [Param(k, str(v)) for k, v in {**common, "system": system}.items()]
        client.log_batch(rid, params=params, tags=[RunTag("tenantml.bench", "bench-live")])
        for k in range(0, len(metrics), 1000):  # MLflow's batch limit: 1000 metrics
            client.log_batch(rid, metrics=metrics[k : k + 1000])
        for name in OUTPUTS:
            client.log_artifact(rid, str(out / name))
        client.set_terminated(rid)
        ids.append(rid)
    return ids
