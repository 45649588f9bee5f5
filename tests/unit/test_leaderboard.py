"""The leaderboard copy in the store (`tasks.leaderboard`): what is published reads back the same,
a copy that cannot be read means "ask MLflow" (never a crash, never a wrong board), a tenant's
identity reads only its own, and rows come best first."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest

from mlflow_plugin.registry import BestModel
from mlflow_plugin.tracking import JobRecord
from store import ExampleStore, LocalBlobStore, TenantAccessError, TenantScopedStore
from store.schema import Schema, Tensor
from tasks import leaderboard
from tasks.leaderboard import LeaderboardRow, Snapshot


@pytest.fixture
def store(tmp_path: Path) -> ExampleStore:
    s = ExampleStore(LocalBlobStore(tmp_path))
    for name in ("wine", "iris"):
        s.create_tenant(name, Schema(input=Tensor(4), output=Tensor(3)))
        s.feed(name, np.ones((3, 4), np.float32), ["a", "b", "c"])
    return s


def _snap(accuracy: float = 0.9) -> Snapshot:
    rows = (
        LeaderboardRow("random_forest", "FINISHED", accuracy, 1.5, 1.7e9, True),
        LeaderboardRow("svm", "RUNNING", None, None, None, False),
    )
    return Snapshot(rows, "3", 2.0, 1.7e9 + 5)


def test_a_published_leaderboard_reads_back_the_same(store: ExampleStore) -> None:
    assert leaderboard.read(store, "wine") is None  # none published: the caller asks MLflow
    leaderboard.publish(store, "wine", _snap())
    assert leaderboard.read(store, "wine") == _snap()
    leaderboard.publish(store, "wine", _snap(0.95))  # the last writer wins
    assert leaderboard.read(store, "wine") == _snap(0.95)
    assert leaderboard.read(store, "iris") is None


@pytest.mark.parametrize(
    "data",
    [b"{not json", b'{"format": 99, "rows": []}', b'{"format": 1}', b'{"format": 1, "rows": 3}'],
    ids=["damaged", "other-format", "fields-missing", "wrong-types"],
)
def test_an_unreadable_copy_means_ask_mlflow(store: ExampleStore, data: bytes) -> None:
    store.put_blob("wine", leaderboard.SNAPSHOT_KEY, data)
    assert leaderboard.read(store, "wine") is None


def test_a_tenant_reads_its_own_leaderboard_only(store: ExampleStore) -> None:
    leaderboard.publish(store, "wine", _snap())
    leaderboard.publish(store, "iris", _snap(0.5))
    scoped = TenantScopedStore(store, "wine")
    assert leaderboard.read(scoped, "wine") == _snap()  # type: ignore[arg-type]
    with pytest.raises(TenantAccessError):
        leaderboard.read(scoped, "iris")  # type: ignore[arg-type]


def _record(run_id: str, accuracy: float | None, status: str = "FINISHED") -> JobRecord:
    return JobRecord(run_id, "wine", f"m-{run_id}", run_id, status, accuracy, 1.0, 1, 1, 0.0,
                     None if accuracy is None else 2.0, None)  # fmt: skip


def test_rows_come_best_first_and_mark_the_served_run() -> None:
    records = [_record("a", 0.7), _record("b", None, "RUNNING"), _record("c", 0.9)]
    best = BestModel("2", 0.9, "c", "m-c", "c")
    got = leaderboard.rows(records, best)
    assert [r.candidate for r in got] == ["m-c", "m-a", "m-b"]
    assert [r.best for r in got] == [True, False, False]
    assert all(not r.best for r in leaderboard.rows(records, None))


def test_the_fingerprint_changes_with_what_the_board_shows() -> None:
    base = [_record("a", 0.7)]
    key = leaderboard.fingerprint(base, 1.0)
    assert leaderboard.fingerprint(list(base), 1.0) == key
    assert leaderboard.fingerprint(base, 2.0) != key  # the weight
    assert leaderboard.fingerprint([_record("a", 0.8)], 1.0) != key  # an accuracy
    assert leaderboard.fingerprint([*base, _record("b", None, "RUNNING")], 1.0) != key  # a job
