"""The model registry side: each tenant's registered model (named after the tenant) and its
alias ``best``, moved only when a job beats the current best. Versions carry lineage tags (run,
job, candidate, snapshot, accuracy), so the leaderboard and `infer` need nothing else."""

from __future__ import annotations

from dataclasses import dataclass

from mlflow.exceptions import MlflowException
from mlflow.tracking import MlflowClient

__all__ = ["BEST", "BestModel", "beats", "best_model", "promote_if_better"]

BEST = "best"


@dataclass(frozen=True)
class BestModel:
    version: str
    accuracy: float
    run_id: str
    candidate: str
    job_id: str


def best_model(client: MlflowClient, tenant: str) -> BestModel | None:
    """The version under alias ``best`` of `tenant`'s registered model, if any."""
    try:
        mv = client.get_model_version_by_alias(tenant, BEST)
    except MlflowException:
        return None
    t = mv.tags
    return BestModel(
        str(mv.version),
        float(t.get("tenantml.accuracy", "nan")),
        str(mv.run_id),
        t.get("tenantml.candidate", ""),
        t.get("tenantml.job_id", ""),
    )


def beats(accuracy: float, current: BestModel | None) -> bool:
    """Whether a model of `accuracy` would become the best over `current` (None: no best yet):
    strictly more accurate. The one rule `promote_if_better` moves ``best`` by, so ``best``
    only moves up (a best of unknown accuracy, NaN, is never replaced)."""
    return current is None or accuracy > current.accuracy


def promote_if_better(
    client: MlflowClient,
    tenant: str,
    *,
    model_uri: str,
    run_id: str,
    accuracy: float,
    candidate: str,
    job_id: str,
    snapshot: int,
) -> BestModel | None:
    """Register the job's model and move ``best`` to it if it beats the current best.

    Idempotent per job: a version already registered for `job_id` is reused, never duplicated.
    Returns the new best, or None when the current best stays.
    """
    current = best_model(client, tenant)
    if not beats(accuracy, current):
        return None
    try:
        client.get_registered_model(tenant)
    except MlflowException:
        client.create_registered_model(tenant, tags={"tenantml.tenant": tenant})
    existing = client.search_model_versions(f"name = '{tenant}' and run_id = '{run_id}'")
    if existing:
        version = str(existing[0].version)
    else:
        tags = {
            "tenantml.accuracy": repr(float(accuracy)),
            "tenantml.candidate": candidate,
            "tenantml.job_id": job_id,
            "tenantml.snapshot": str(snapshot),
            "tenantml.previous_best": current.version if current else "",
        }
        # MLflow 3 logged models (models:/m-...) register with their model id as well.
        logged = model_uri.startswith("models:/m-")
        model_id = model_uri.removeprefix("models:/") if logged else None
        mv = client.create_model_version(
            tenant, model_uri, run_id=run_id, tags=tags, model_id=model_id
        )
        version = str(mv.version)
    client.set_registered_model_alias(tenant, BEST, version)
    return BestModel(version, accuracy, run_id, candidate, job_id)
