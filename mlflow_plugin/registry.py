"""The model registry side: each tenant's registered model (named after the tenant) and its
alias ``best``, moved only when a job beats the current best. Versions carry lineage tags (run,
job, candidate, snapshot, accuracy), so the leaderboard and `infer` need nothing else."""

from __future__ import annotations

import math
from dataclasses import dataclass

from mlflow.exceptions import MlflowException
from mlflow.tracking import MlflowClient

__all__ = ["BEST", "BestModel", "beats", "best_model", "promote_if_better", "settle_best"]

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
    Returns the best after the move (`settle_best`: this job's version, or a more accurate one
    that another job registered meanwhile), or None when the job did not beat the best it read.
    """
    current = best_model(client, tenant)
    if not beats(accuracy, current):
        return None
    _register(client, tenant, model_uri, run_id, accuracy, candidate, job_id, snapshot, current)
    return settle_best(client, tenant)


def _register(
    client: MlflowClient,
    tenant: str,
    model_uri: str,
    run_id: str,
    accuracy: float,
    candidate: str,
    job_id: str,
    snapshot: int,
    current: BestModel | None,
) -> str:
    """The version of `run_id`'s model in `tenant`'s registered model (created if missing),
    tagged with its lineage and accuracy; an existing one is reused."""
    try:
        client.get_registered_model(tenant)
    except MlflowException:
        client.create_registered_model(tenant, tags={"tenantml.tenant": tenant})
    existing = client.search_model_versions(f"name = '{tenant}' and run_id = '{run_id}'")
    if existing:
        return str(existing[0].version)
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
    mv = client.create_model_version(tenant, model_uri, run_id=run_id, tags=tags, model_id=model_id)
    return str(mv.version)


#: rounds of `settle_best`'s move-and-check; each round is needed only when another job moved
#: ``best`` between this one's read and move
SETTLE_ROUNDS = 4


def _accuracy(tags: dict[str, str]) -> float:
    try:
        return float(tags.get("tenantml.accuracy", "nan"))
    except ValueError:
        return math.nan


def settle_best(client: MlflowClient, tenant: str) -> BestModel | None:
    """Point ``best`` at the most accurate registered version of `tenant`'s model and return it.

    A version is registered only when its job beat the best it read, and MLflow has no
    compare-and-set for an alias, so two jobs of one tenant finishing together (two slots, or
    the scheduler's check beside a flow) could both read the old best and the less accurate one
    move ``best`` last. Here each mover lists the versions *after* registering its own and moves
    ``best`` to the most accurate (strictly, `beats`: on a tie the current best stays, else the
    earliest version), then reads again until the alias and the list agree: the last mover sees
    every version registered before its check. ``best`` still never moves down, and a best of
    unknown accuracy (NaN) is kept.
    """
    for _ in range(SETTLE_ROUNDS):
        current = best_model(client, tenant)
        if current is not None and math.isnan(current.accuracy):
            return current
        top: tuple[float, int] | None = None
        for mv in client.search_model_versions(f"name = '{tenant}'"):
            acc = _accuracy(mv.tags)
            key = (acc, -int(mv.version))
            if not math.isnan(acc) and (top is None or key > top):
                top = key
        if top is None or not beats(top[0], current):
            return current
        client.set_registered_model_alias(tenant, BEST, str(-top[1]))
    return best_model(client, tenant)
