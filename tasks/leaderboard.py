"""A tenant's leaderboard, and the copy of it the service keeps in the store for fast reads.

MLflow is the truth: every job is a run of the tenant's experiment, and the registry alias
``best`` names the served model. Asking it takes an ``import mlflow`` (about 1 s) and three or
four requests, too slow for `tenantml status` in a shell loop. So the service publishes each
tenant's leaderboard as ``blobs/leaderboard.json`` in the tenant's store prefix whenever it
changes (the scheduler, at each refresh and after recording jobs; `submit` and `weight`), and
`status` reads that copy with the store alone (`read`), saying how old it is; ``status --fresh``
asks MLflow instead, and so does a tenant's identity (``TENANTML_USER``): MLflow checks its
password, while the store's copy is confined by the SDK only (`store.TenantScopedStore`). A
copy can lag MLflow by one scheduler pass, or until the next scheduler runs when jobs end with
none running (a job started by the pool after its scheduler died).

This module imports neither MLflow nor Prefect at load time: `read` is the fast path.
"""

from __future__ import annotations

import json
import time
from collections.abc import Iterable
from dataclasses import asdict, dataclass
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from mlflow.tracking import MlflowClient

    from mlflow_plugin.registry import BestModel
    from mlflow_plugin.tracking import JobRecord
    from store import ExampleStore

__all__ = [
    "SNAPSHOT_KEY",
    "Leaderboard",
    "LeaderboardRow",
    "Snapshot",
    "fingerprint",
    "publish",
    "read",
    "rows",
    "snapshot_from_mlflow",
]

SNAPSHOT_KEY = "leaderboard.json"  # in the tenant's blobs/ (`ExampleStore.put_blob`)
_FORMAT = 1


@dataclass(frozen=True)
class LeaderboardRow:
    candidate: str
    status: str
    accuracy: float | None
    cost_s: float | None
    finished_at: float | None
    best: bool
    #: the tenant's data snapshot the job trained on (None: in a copy published before the field)
    snapshot: int | None = None


@dataclass(frozen=True)
class Leaderboard:
    """What `status` shows: the store's counts (live), the jobs' rows best first, and `as_of`,
    when the rows were read from MLflow (epoch seconds; None: just now, by this call)."""

    tenant: str
    schema: str
    n_examples: int
    n_enabled: int
    snapshot: int
    n_candidates: int
    rows: tuple[LeaderboardRow, ...]
    best_version: str | None
    weight: float | None = None  # w_i, how much its regret counts; None: not the operator's view
    as_of: float | None = None

    @property
    def best(self) -> LeaderboardRow | None:
        return next((r for r in self.rows if r.best), None)


@dataclass(frozen=True)
class Snapshot:
    """The MLflow half of a leaderboard as last published: rows (best first), the version under
    ``best``, the tenant's weight, `as_of` (epoch seconds), and ``n_candidates``: how many
    models a tenant restricted by `submit --models` has in play (those it may train and those it
    ran); None when it is not restricted (every candidate of its schema)."""

    rows: tuple[LeaderboardRow, ...]
    best_version: str | None
    weight: float
    as_of: float
    n_candidates: int | None = None

    def to_json(self) -> bytes:
        body = {"format": _FORMAT, **asdict(self), "rows": [asdict(r) for r in self.rows]}
        return json.dumps(body, sort_keys=True).encode()

    @staticmethod
    def from_json(data: bytes) -> Snapshot:
        body = json.loads(data)
        if body.get("format") != _FORMAT:
            raise ValueError(f"leaderboard snapshot format {body.get('format')!r} is not {_FORMAT}")
        return Snapshot(
            tuple(LeaderboardRow(**r) for r in body["rows"]),
            body["best_version"],
            float(body["weight"]),
            float(body["as_of"]),
            body.get("n_candidates"),  # absent from snapshots published before the field
        )


def rows(records: Iterable[JobRecord], best: BestModel | None) -> tuple[LeaderboardRow, ...]:
    """One row per job record, the newest data snapshot's first (``best`` is one of them once
    it has a model), and on each snapshot best accuracy first (jobs without one last)."""
    return tuple(
        LeaderboardRow(
            r.candidate,
            r.status,
            r.accuracy,
            r.cost_s,
            r.end_time,
            best is not None and r.run_id == best.run_id,
            r.snapshot,
        )
        for r in sorted(records, key=lambda r: (-(r.snapshot or 0), -(r.accuracy or -1.0)))
    )


def snapshot_from_mlflow(
    client: MlflowClient,
    name: str,
    *,
    records: list[JobRecord] | None = None,
    weight: float | None = None,
    n_candidates: int | None = None,
) -> Snapshot:
    """Tenant `name`'s snapshot as MLflow holds it now; `records`, `weight` and `n_candidates`
    (restricted tenants: `Snapshot.n_candidates`; 0: not restricted): what the caller read
    already (the scheduler's state), saving those requests."""
    from mlflow_plugin.registry import best_model
    from mlflow_plugin.tracking import (
        DEFAULT_WEIGHT,
        experiment_name,
        job_records,
        tenant_models,
        tenant_weights,
    )

    as_of = time.time()
    if records is None or n_candidates is None:
        exp = client.get_experiment_by_name(experiment_name(name))
        if records is None:
            records = job_records(client, [exp.experiment_id]) if exp else []
        if n_candidates is None:
            allowed = tenant_models([exp] if exp else []).get(name)
            n_candidates = len(set(allowed) | {r.candidate for r in records}) if allowed else 0
    if weight is None:
        weight = tenant_weights(client).get(name, DEFAULT_WEIGHT)
    best = best_model(client, name)
    return Snapshot(
        rows(records, best), best.version if best else None, weight, as_of, n_candidates or None
    )


def publish(store: ExampleStore, name: str, snapshot: Snapshot) -> None:
    """Write tenant `name`'s snapshot to the store (one atomic put; the last writer wins)."""
    store.put_blob(name, SNAPSHOT_KEY, snapshot.to_json())


def read(store: ExampleStore, name: str) -> Snapshot | None:
    """Tenant `name`'s last published snapshot; None if none was published, or if it cannot be
    read (another version's format, a damaged file): the caller then asks MLflow."""
    try:
        data = store.get_blob(name, SNAPSHOT_KEY)
    except KeyError:
        return None
    try:
        return Snapshot.from_json(data)
    except (ValueError, TypeError, KeyError) as err:  # not ours to repair: MLflow is the truth
        _warn(f"the leaderboard snapshot of {name!r} is not readable ({err}); asking MLflow")
        return None


def _warn(message: str) -> None:
    import logging

    logging.getLogger(__name__).warning(message)


def fingerprint(
    records: Iterable[JobRecord], weight: float, n_candidates: int = 0
) -> tuple[Any, ...]:
    """What a snapshot shows of `records`, `weight` and `n_candidates`, to tell whether it
    changed."""
    return (
        weight,
        n_candidates,
        tuple(sorted((r.run_id, r.status, r.accuracy, r.cost_s, r.end_time) for r in records)),
    )
