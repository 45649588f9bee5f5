"""The model registry side: each tenant's registered model (named after the tenant) and its
alias ``best``, moved only when a job beats the current best. Versions carry lineage tags (run,
job, candidate, snapshot, accuracy), so the leaderboard and `infer` need nothing else."""

from __future__ import annotations

import logging
import math
from collections.abc import Iterable
from dataclasses import dataclass
from typing import Any

from mlflow.exceptions import MlflowException
from mlflow.tracking import MlflowClient

__all__ = [
    "BEST",
    "BestModel",
    "beats",
    "best_model",
    "model_versions",
    "promote_if_better",
    "serving_key",
    "settle_best",
]

BEST = "best"


@dataclass(frozen=True)
class BestModel:
    version: str
    accuracy: float
    run_id: str
    candidate: str
    job_id: str
    #: the tenant's data snapshot the model was trained and measured on (0: not recorded)
    snapshot: int = 0


def _snapshot(tags: dict[str, str]) -> int:
    """A version's ``tenantml.snapshot`` tag; 0 when missing or not a number."""
    text = tags.get("tenantml.snapshot", "")
    return int(text) if text.isdigit() else 0


def _accuracy(tags: dict[str, str]) -> float:
    """A version's ``tenantml.accuracy`` tag; NaN when missing or not a number."""
    try:
        return float(tags.get("tenantml.accuracy", "nan"))
    except ValueError:
        return math.nan


def best_model(client: MlflowClient, tenant: str) -> BestModel | None:
    """The version under alias ``best`` of `tenant`'s registered model, if any."""
    try:
        mv = client.get_model_version_by_alias(tenant, BEST)
    except MlflowException:
        return None
    t = mv.tags
    return BestModel(
        str(mv.version),
        _accuracy(t),
        str(mv.run_id),
        t.get("tenantml.candidate", ""),
        t.get("tenantml.job_id", ""),
        _snapshot(t),
    )


def serving_key(snapshot: int | None, accuracy: float | None) -> tuple[int, float]:
    """The order ``best`` follows (`beats`): newer data first, then accuracy (None: 0)."""
    return (snapshot or 0, 0.0 if accuracy is None else accuracy)


def beats(accuracy: float, current: BestModel | None, *, snapshot: int) -> bool:
    """Whether a model of `accuracy`, trained on the tenant's data `snapshot`, would become the
    best over `current` (None: no best yet). On the same snapshot: strictly more accurate, so
    ``best`` only moves up there (a best of unknown accuracy, NaN, is never replaced). A model
    of a newer snapshot (the tenant fed or refined its data since) replaces an older one's
    whatever the two accuracies, which were measured on different data (the most accurate of
    many measurements on a smaller validation split is the one most likely to overstate); an
    older snapshot's model never replaces a newer one's. So ``best`` is the most accurate model
    on the newest snapshot that has one. (The policy makes that first model on new data one
    expected to be close to the served one: `policy._book.TenantBook`'s floor after a feed.)
    The one rule `promote_if_better` moves ``best`` by."""
    if current is None:
        return True
    if snapshot != current.snapshot:
        return snapshot > current.snapshot
    return accuracy > current.accuracy


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
    Returns the new best when it is this job's model; None when the job did not beat the best
    it read, or when another job's more accurate model, registered meanwhile, is the best once
    ``best`` has settled (`settle_best`).
    """
    current = best_model(client, tenant)
    if not beats(accuracy, current, snapshot=snapshot):
        return None
    try:
        client.get_registered_model(tenant)
    except MlflowException:
        client.create_registered_model(tenant, tags={"tenantml.tenant": tenant})
    if not client.search_model_versions(f"name = '{tenant}' and run_id = '{run_id}'"):
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
        client.create_model_version(tenant, model_uri, run_id=run_id, tags=tags, model_id=model_id)
    best = settle_best(client, tenant)
    return best if best is not None and best.run_id == run_id else None


#: a bound on `settle_best`'s rounds, never reached in practice: a round moves ``best`` again
#: only when another job registered or moved it since this one's last list, and once jobs stop
#: registering, each mover has at most one stale move left (with a cap of 4, four jobs ending
#: together could still leave ``best`` on the less accurate of two)
SETTLE_ROUNDS = 32

_log = logging.getLogger(__name__)


def model_versions(client: MlflowClient, tenant: str, *, page_size: int = 10_000) -> list[Any]:
    """Every registered version of `tenant`'s model (MLflow ``ModelVersion``), read page by page:
    one search returns at most `page_size` (MLflow's most, 10,000)."""
    out: list[Any] = []
    token: str | None = None
    while True:
        page = client.search_model_versions(
            f"name = '{tenant}'", max_results=page_size, page_token=token
        )
        out.extend(page)
        token = page.token
        if not token:
            return out


def served_versions(versions: Iterable[Any]) -> list[Any]:
    """The versions ``best`` pointed at, in the order they were registered (MLflow
    ``ModelVersion``s of one tenant): each registration moves ``best`` when it `beats` the one
    before, as `settle_best` settles it (a tie keeps the earlier; a version of unknown accuracy,
    NaN, is never pointed at). A version registered beside a better one (two jobs that read
    the same old best) was never served."""
    out: list[Any] = []
    current: BestModel | None = None
    for mv in sorted(versions, key=lambda v: (v.creation_timestamp, int(v.version))):
        accuracy, snapshot = _accuracy(mv.tags), _snapshot(mv.tags)
        if math.isnan(accuracy):  # `settle_best` never points `best` at one
            continue
        if beats(accuracy, current, snapshot=snapshot):
            current = BestModel(str(mv.version), accuracy, mv.run_id or "", "", "", snapshot)
            out.append(mv)
    return out


def settle_best(client: MlflowClient, tenant: str) -> BestModel | None:
    """Point ``best`` at the most accurate registered version of `tenant`'s model on the newest
    data snapshot that has one (`beats`) and return it.

    A version is registered only when its job beat the best it read, and MLflow has no
    compare-and-set for an alias, so two jobs of one tenant finishing together (two slots, or
    the scheduler's check beside a flow) could both read the old best and the less accurate one
    move ``best`` last. Here each mover lists the versions *after* registering its own and moves
    ``best`` to the most accurate (strictly, `beats`: on a tie the current best stays, else the
    earliest version), then reads again until the alias and the list agree: the last mover sees
    every version registered before its check. ``best`` ends on that version (a stale move can
    lower it for a moment; its mover's next round repairs it), and a best of unknown accuracy
    (NaN) is kept until a newer snapshot has a model. An operator who moves ``best`` back by
    hand is overruled by the next settle: to retire a version, delete it.
    """
    for _ in range(SETTLE_ROUNDS):
        current = best_model(client, tenant)
        top: tuple[tuple[int, float], int] | None = None  # (serving_key, -version)
        for mv in model_versions(client, tenant):
            acc = _accuracy(mv.tags)
            key = (serving_key(_snapshot(mv.tags), acc), -int(mv.version))
            if not math.isnan(acc) and (top is None or key > top):
                top = key
        if top is None or not beats(top[0][1], current, snapshot=top[0][0]):
            return current
        client.set_registered_model_alias(tenant, BEST, str(-top[1]))
    _log.warning("best of %s still moving after %d rounds; left as it is", tenant, SETTLE_ROUNDS)
    return best_model(client, tenant)
