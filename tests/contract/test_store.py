"""One contract suite over every example store: a local directory, S3 (a real server on
loopback), and a tenant's scoped view (`TenantScopedStore`, the SDK's store under a tenant's
identity) over a local directory, whose one tenant is ``t``."""

from __future__ import annotations

import threading
import uuid
from collections.abc import Iterator
from pathlib import Path

import boto3
import numpy as np
import pytest

from store import (
    BadExampleError,
    BlobStore,
    ConcurrentUpdateError,
    ExampleStore,
    LocalBlobStore,
    S3BlobStore,
    TenantAccessError,
    TenantExistsError,
    TenantScopedStore,
    UnknownTenantError,
)
from store.schema import DataType, Schema, Tensor
from tests.servers import S3Server

IMAGES = Schema(input=Tensor(4, 4, 1), output=Tensor(3))
SERIES = Schema(input=DataType([Tensor(2)], ["next"]), output=Tensor(2))
RECOVERY = Schema(input=Tensor(4, 4, 1), output=Tensor(4, 4, 1))


@pytest.fixture(params=["local", "s3", "scoped"])
def store(request: pytest.FixtureRequest, tmp_path: Path) -> Iterator[ExampleStore]:
    if request.param == "local":
        yield ExampleStore(LocalBlobStore(tmp_path / "store"))
        return
    if request.param == "scoped":  # duck-typed: every per-tenant call of ExampleStore
        yield TenantScopedStore(ExampleStore(LocalBlobStore(tmp_path / "store")), "t")  # type: ignore[misc]
        return
    server: S3Server = request.getfixturevalue("s3")
    client = boto3.client("s3", endpoint_url=server.endpoint_url)
    bucket = f"t-{uuid.uuid4().hex[:12]}"
    client.create_bucket(Bucket=bucket)
    yield ExampleStore(S3BlobStore(bucket, "tenantml", client=client))


def _images(n: int, seed: int = 0) -> tuple[np.ndarray, np.ndarray]:
    rng = np.random.default_rng(seed)
    return rng.random((n, 4, 4, 1), dtype=np.float32), rng.integers(0, 3, n)


def _blobs(store: ExampleStore) -> BlobStore:
    """The stored objects behind a store (for checking what is stored; a tenant's scoped view
    refuses its own ``blobs``, so look behind it)."""
    inner = store._store if isinstance(store, TenantScopedStore) else store
    return inner.blobs


def _state(store: ExampleStore, name: str) -> tuple[list[int], list[str]]:
    return store.versions(name), _blobs(store).list(f"tenants/{name}/")


def test_create_and_list_tenants(store: ExampleStore) -> None:
    if isinstance(store, TenantScopedStore):
        store.create_tenant("t", IMAGES)
        assert store.tenants() == ["t"] and store.schema("t") == IMAGES
        with pytest.raises(TenantAccessError, match="may not access tenant 'a'"):
            store.create_tenant("a", IMAGES)
        with pytest.raises(TenantAccessError, match="raw blob store"):
            store.blobs  # noqa: B018
        with pytest.raises(TenantAccessError, match="_publish"):  # it took any tenant's name
            store._publish  # noqa: B018
        assert not hasattr(store, "__deepcopy__")  # a dunder is still an AttributeError
        return
    assert store.tenants() == []
    store.create_tenant("a", IMAGES)
    store.create_tenant("b", SERIES)
    store.create_tenant("a", IMAGES)  # idempotent with the same schema
    assert store.tenants() == ["a", "b"]
    assert store.schema("b") == SERIES
    with pytest.raises(TenantExistsError, match="already exists"):
        store.create_tenant("a", SERIES)
    with pytest.raises(UnknownTenantError, match="unknown tenant 'zz'.*known tenants"):
        store.schema("zz")


@pytest.mark.parametrize("name", ["../x", "a/b", "A", "", "s3://x", "a.b", "x" * 64, "-a"])
def test_tenant_names_cannot_escape(store: ExampleStore, name: str) -> None:
    with pytest.raises(ValueError, match="tenant name"):
        store.create_tenant(name, IMAGES)
    assert _blobs(store).list("") == []


def test_feed_snapshots_and_load(store: ExampleStore) -> None:
    store.create_tenant("t", IMAGES)
    x, y = _images(10)
    m1, ids1 = store.feed("t", x, y, chunk=4)
    assert (m1.version, list(ids1), len(m1.batches)) == (1, list(range(10)), 3)
    m2, ids2 = store.feed("t", [x[0]], ["2"])  # a CSV's label: the index 2
    assert list(ids2) == [10] and m2.classes == () and m2.version == 2
    d1 = store.load("t", 1)
    np.testing.assert_array_equal(d1.x, x)
    np.testing.assert_array_equal(d1.y, y)
    assert len(store.load("t")) == 11 and store.load("t").y[-1] == 2


def test_refine_switches_examples_and_keeps_old_snapshots(store: ExampleStore) -> None:
    store.create_tenant("t", IMAGES)
    x, y = _images(6)
    store.feed("t", x, y)
    m = store.refine("t", disable=[1, 4])
    d = store.load("t")
    assert list(d.ids) == [0, 2, 3, 5]
    np.testing.assert_array_equal(d.x, x[[0, 2, 3, 5]])
    assert len(store.load("t", m.version - 1)) == 6  # the snapshot a past run saw is unchanged
    store.refine("t", enable=[4])
    assert list(store.load("t").ids) == [0, 2, 3, 4, 5]
    flags = {r.id: r.enabled for r in store.examples("t")}
    assert flags == {0: True, 1: False, 2: True, 3: True, 4: True, 5: True}
    before = _state(store, "t")
    with pytest.raises(KeyError, match=r"no example ids \[99\]"):
        store.refine("t", disable=[99])
    assert _state(store, "t") == before
    # a refine that changes nothing publishes nothing (a snapshot retrains the tenant)
    latest = store.manifest("t").version
    for same in ({}, {"disable": [1]}, {"enable": [0, 4]}):
        assert store.refine("t", **same).version == latest
    # ids that are no integers: a string's characters were ids ("12" disabled 1 and 2), a
    # float was cut (1.9 enabled 1)
    for bad in ({"disable": "12"}, {"enable": [1.9]}, {"disable": [True]}):
        with pytest.raises(TypeError, match="is not an integer|not the string"):
            store.refine("t", **bad)
    assert _state(store, "t") == before
    assert store.refine("t", disable=[np.int64(2)]).version == latest + 1
    for bad in ("1", 1.5, True):  # a snapshot that is no integer: a format error from inside
        with pytest.raises(TypeError, match=f"snapshot {bad!r} is not an integer"):
            store.manifest("t", bad)  # type: ignore[arg-type]
    assert store.manifest("t", np.int64(1)).version == 1


def test_sequences_round_trip(store: ExampleStore) -> None:
    store.create_tenant("t", SERIES)
    seqs = [np.ones((3, 2)), np.full((1, 2), 2.0), np.zeros((5, 2))]
    store.feed("t", seqs, [0, 1, 1])
    d = store.load("t")
    assert d.x.shape == (3, 5, 2) and list(d.lengths) == [3, 1, 5]
    np.testing.assert_array_equal(d.x[1, :1], seqs[1])
    assert (d.x[1, 1:] == 0).all()


def test_tensor_outputs_round_trip(store: ExampleStore) -> None:
    store.create_tenant("t", RECOVERY)
    x, _ = _images(3)
    store.feed("t", x, x * 2)
    np.testing.assert_allclose(store.load("t").y, x * 2)


def _bad_feeds() -> list[tuple[str, object, object, str]]:
    x, y = _images(5)
    nan = x.copy()
    nan[3, 0, 0, 0] = np.nan
    return [
        ("wrong shape", [x[0], x[1], np.zeros((4, 4, 3))], [0, 1, 2], "example 2.*shape"),
        ("NaN", nan, y, "example 3.*NaN"),
        ("inf", [x[0], np.full((4, 4, 1), np.inf)], [0, 1], "example 1.*NaN or inf"),
        ("label range", x, [0, 1, 2, 3, 0], "example 3.*outside the output space"),
        ("a name, indices fed", x, [0, 1, "cat", 2, 0], "example 2.*tenant's labels are class"),
        ("bool label", x[:2], [True, False], "example 0.*not a class index"),
        ("strings", [x[0], "hello"], [0, 1], "example 1.*not numbers"),
        ("count", x, y[:4], "inputs but 4 outputs|more inputs than outputs"),
        ("empty", np.zeros((0, 4, 4, 1)), np.zeros(0), "empty"),
    ]


@pytest.mark.parametrize(("case", "inputs", "outputs", "message"), _bad_feeds())
def test_bad_batches_are_rejected_whole(
    store: ExampleStore, case: str, inputs: object, outputs: object, message: str
) -> None:
    store.create_tenant("t", IMAGES)
    x, y = _images(4, seed=1)
    store.feed("t", x, y)
    before = _state(store, "t")
    with pytest.raises(ValueError, match=message):
        store.feed("t", inputs, outputs, chunk=2)  # type: ignore[arg-type]
    assert _state(store, "t") == before, case
    np.testing.assert_array_equal(store.load("t").x, x)


def test_a_class_name_has_a_visible_character_and_no_control_one(store: ExampleStore) -> None:
    """An empty name (`--label "$UNSET"`) took one of the tenant's classes for good, and a tab
    or newline broke the tab-separated lines of `examples`."""
    store.create_tenant("t", IMAGES)
    x, _ = _images(2)
    store.feed("t", x[:1], ["cat"])
    before = _state(store, "t")
    for bad in ("", "   ", "a\tb", "new\nline", "bell\x07"):
        with pytest.raises(BadExampleError, match="example 1 rejected.*is no class name"):
            store.feed("t", x, ["cat", bad])
    assert _state(store, "t") == before
    for bad in ("line\u2028sep", "row\x1e"):
        with pytest.raises(BadExampleError, match="is no class name"):
            store.feed("t", x, ["cat", bad])
    m, _ = store.feed("t", x, ["cat", "New\xa0York"])  # a no-break space (scraped CSVs)
    assert m.classes == ("cat", "New\xa0York")


def test_a_tenants_labels_are_class_names_or_indices_never_both(store: ExampleStore) -> None:
    """Before, names took indices 0, 1, ... in order of appearance while integers were used
    as indices: an int 0 fed after the names "7", "3" was stored as class "7". Names: a number
    is read as its name; too many names are refused."""
    store.create_tenant("t", IMAGES)
    x, _ = _images(5)
    store.feed("t", x[:2], ["7", "3"])
    m, _ = store.feed("t", x[2:4], np.array([7, 3]))
    assert m.classes == ("7", "3") and store.load("t").y.tolist() == [0, 1, 0, 1]
    before = _state(store, "t")
    with pytest.raises(BadExampleError, match="example 1.*has 3 classes"):
        store.feed("t", x[:2], ["5", "6"])  # "5" would be the third class, "6" a fourth
    assert _state(store, "t") == before


def test_two_first_feeds_of_names_and_indices_do_not_mix(
    store: ExampleStore, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Each feed took its label kind from the snapshot it read: an index feed landed on
    names (its 0 and 1 read as "cat" and "dog"), or names on indices. The second is refused
    (nothing stored) and feeding it again is refused in one line as the wrong kind."""
    store.create_tenant("t", IMAGES)
    _meanwhile(store, monkeypatch, ["cat"])
    with pytest.raises(ConcurrentUpdateError, match="as class names meanwhile"):
        store.feed("t", _images(2)[0], [0, 1])
    monkeypatch.undo()
    assert store.load("t").y.tolist() == [0] and store.manifest("t").classes == ("cat",)
    assert set(_blobs(store).list("tenants/t/batches/")) == {
        b.key for b in store.manifest("t").batches
    }
    with pytest.raises(BadExampleError, match="has 3 classes"):  # 0, 1 read as names now
        store.feed("t", _images(3)[0], ["a", 0, 1])
    if not isinstance(store, TenantScopedStore):  # a second tenant (the scoped view has one)
        store.create_tenant("u", IMAGES)
        store.feed("u", _images(1)[0], [2])
        with pytest.raises(BadExampleError, match="example 0.*not a class index"):
            store.feed("u", _images(1)[0], ["\u00b3"])  # a superscript 3: a digit, no index


def test_a_tenants_input_dtype_is_fixed_by_its_first_feed(store: ExampleStore) -> None:
    """A tenant of uint8 pixels (the trainer scales them by 1/255) takes float inputs that are
    integers in 0-255, stored as uint8, and refuses others; before, one float batch turned the
    whole tenant float (unscaled), and a sequence tenant's floats were cast to uint8 (wrapped)."""
    store.create_tenant("t", SERIES)
    store.feed("t", [np.array([[10, 20]], np.uint8)], [0])
    store.feed("t", [np.array([[3.0, 255.0], [0.0, 7.0]])], [1])
    d = store.load("t")
    assert d.x.dtype == np.uint8 and d.x[1].tolist() == [[3, 255], [0, 7]]
    before = _state(store, "t")
    bad = [np.ones((2, 2)), np.array([[0.5, 1.0]]), np.array([[300.0, 2.0]])]
    with pytest.raises(BadExampleError, match="example 1.*not an integer in 0-255"):
        store.feed("t", bad, [0, 1, 1])
    assert _state(store, "t") == before


def test_a_float_tenant_refuses_uint8_inputs(store: ExampleStore) -> None:
    store.create_tenant("t", IMAGES)
    x, y = _images(3)
    store.feed("t", x, y)
    before = _state(store, "t")
    with pytest.raises(BadExampleError, match="inputs are uint8 but the tenant's are float32"):
        store.feed("t", (x * 255).astype(np.uint8), y)
    assert _state(store, "t") == before and store.load("t").x.dtype == np.float32


def test_a_submit_cut_short_before_snapshot_0_is_repaired(store: ExampleStore) -> None:
    """The schema is written first, snapshot 0 after it: a submit killed between them left a
    tenant whose every feed failed (IndexError); now it has no examples, and submitting it
    again writes snapshot 0."""
    _blobs(store).put_new("tenants/t/schema.txt", str(IMAGES).encode())
    assert store.manifest("t").n_examples == 0 and store.versions("t") == []
    store.create_tenant("t", IMAGES)
    assert store.versions("t") == [0]
    m, ids = store.feed("t", *_images(2))
    assert m.version == 1 and list(ids) == [0, 1]


def _meanwhile(store: ExampleStore, monkeypatch: pytest.MonkeyPatch, labels: list[str]) -> None:
    """Another feed of `labels` publishes just before this one's first manifest write."""
    blobs = _blobs(store)
    real_put_new = blobs.put_new
    done = []

    def put_new(key: str, data: bytes) -> bool:
        if "/manifests/" in key and not done:
            done.append(key)
            store.feed("t", _images(len(labels), seed=9)[0], labels)
        return real_put_new(key, data)

    monkeypatch.setattr(blobs, "put_new", put_new)


def test_a_feed_keeps_class_names_another_feed_added_meanwhile(
    store: ExampleStore, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Before, any names added by another feed failed this one, though it used only known
    names; now only names both feeds added clash, and nothing of the failed one is stored."""
    store.create_tenant("t", IMAGES)
    x, _ = _images(2)
    store.feed("t", x, ["cat", "cat"])
    _meanwhile(store, monkeypatch, ["dog"])
    m, _ = store.feed("t", x, ["cat", "cat"])
    assert m.classes == ("cat", "dog") and store.load("t").y.tolist() == [0, 0, 1, 0, 0]
    monkeypatch.undo()
    before = _state(store, "t")
    _meanwhile(store, monkeypatch, ["owl"])
    with pytest.raises(ConcurrentUpdateError, match="added class names"):
        store.feed("t", x, ["cat", "emu"])
    monkeypatch.undo()
    assert store.manifest("t").classes == ("cat", "dog", "owl")
    kept = {b.key for b in store.manifest("t").batches}
    assert set(_blobs(store).list("tenants/t/batches/")) == kept  # none of the failed feed
    assert before[0] != store.versions("t")  # the other feed's snapshot only


def test_a_manifest_write_whose_answer_was_lost_is_not_published_twice(
    store: ExampleStore, monkeypatch: pytest.MonkeyPatch
) -> None:
    """On S3 a conditional write can go through and its answer be lost: the retry then finds
    the key taken. Before, the feed published its batches again (examples twice); and when
    the write raised, it deleted the batches the snapshot now names."""
    store.create_tenant("t", IMAGES)
    blobs = _blobs(store)
    real_put_new = blobs.put_new

    def lost(key: str, data: bytes) -> bool:
        real_put_new(key, data)
        return False  # written, answered as if another writer had won

    monkeypatch.setattr(blobs, "put_new", lost)
    m, ids = store.feed("t", *_images(2))
    assert (m.version, m.n_examples, list(ids)) == (1, 2, [0, 1])
    assert store.versions("t") == [0, 1]
    # lost, and another feed published before the retry read: the ids are still this feed's
    once = []

    def lost_then_other(key: str, data: bytes) -> bool:
        real_put_new(key, data)
        if not once:
            once.append(key)
            monkeypatch.setattr(blobs, "put_new", real_put_new)
            store.feed("t", *_images(3, seed=2))  # ids 4-6, published as snapshot 3
        return False

    monkeypatch.setattr(blobs, "put_new", lost_then_other)
    m, ids = store.feed("t", *_images(2, seed=3))
    assert (m.version, list(ids)) == (3, [2, 3]) and store.manifest("t").n_examples == 7
    monkeypatch.setattr(blobs, "put_new", real_put_new)

    def timed_out(key: str, data: bytes) -> bool:
        real_put_new(key, data)
        raise TimeoutError("no answer")

    monkeypatch.setattr(blobs, "put_new", timed_out)
    with pytest.raises(TimeoutError):
        store.feed("t", *_images(3, seed=1))
    monkeypatch.undo()
    assert store.manifest("t").n_examples == 10 and len(store.load("t")) == 10


def test_bad_sequence_rejected(store: ExampleStore) -> None:
    store.create_tenant("t", SERIES)
    with pytest.raises(BadExampleError, match="example 1.*T >= 1"):
        store.feed("t", [np.ones((2, 2)), np.ones((0, 2))], [0, 1])
    assert store.versions("t") == [0] and _blobs(store).list("tenants/t/batches/") == []


def test_crash_between_batch_write_and_manifest_keeps_previous_state(
    store: ExampleStore, monkeypatch: pytest.MonkeyPatch
) -> None:
    store.create_tenant("t", IMAGES)
    x, y = _images(4)
    store.feed("t", x, y)
    before = store.manifest("t")
    blobs = _blobs(store)
    real_put_new = blobs.put_new

    def crash(key: str, data: bytes) -> bool:
        if "/manifests/" in key:
            raise SystemExit("killed before the manifest was written")
        return real_put_new(key, data)

    monkeypatch.setattr(blobs, "put_new", crash)
    # A process killed here runs no cleanup: write the batch, then die at the manifest.
    monkeypatch.setattr(blobs, "delete", lambda key: None)
    with pytest.raises(SystemExit):
        store.feed("t", *_images(3, seed=5))
    monkeypatch.undo()
    assert store.manifest("t") == before
    np.testing.assert_array_equal(store.load("t").x, x)
    assert len(store.gc("t")) == 1  # the orphan batch, and only it
    assert store.manifest("t") == before and len(store.load("t")) == 4


def test_concurrent_feeds_lose_nothing(store: ExampleStore) -> None:
    store.create_tenant("t", IMAGES)
    errors: list[BaseException] = []

    def feed(seed: int) -> None:
        try:
            for k in range(3):
                store.feed("t", *_images(2, seed=seed * 10 + k))
        except BaseException as e:  # noqa: BLE001
            errors.append(e)

    threads = [threading.Thread(target=feed, args=(s,)) for s in range(4)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert errors == []
    m = store.manifest("t")
    assert m.next_id == 24 and m.version == 12
    assert sorted(r.first_id for r in m.batches) == list(range(0, 24, 2))


def test_checkpoints_and_blobs(store: ExampleStore) -> None:
    store.create_tenant("t", IMAGES)
    assert store.get_checkpoint("t", "job-1") is None
    store.put_checkpoint("t", "job-1", b"one")
    store.put_checkpoint("t", "job-1", b"two")
    assert store.get_checkpoint("t", "job-1") == b"two"
    store.delete_checkpoint("t", "job-1")
    assert store.get_checkpoint("t", "job-1") is None
    theirs = ("lenet-s10", "lenet-s1x", "svm-s1", "lenet-s1-1d2c0d8e2ab2",  # an SDK job's id
              "lenet-s1-seer-x", "lenet-s1-trial-7b", "lenet-s1-trial-003-bestx")  # fmt: skip
    mine = ("lenet-s1", "lenet-s1-seer", "lenet-s1-trial-003", "lenet-s1-trial-003-best")
    for key in (*mine, *theirs):
        store.put_checkpoint("t", key, key.encode())
    gone = store.delete_job_checkpoints("t", "lenet-s1")  # the job's own and its SEER parts'
    assert sorted(k.rsplit("/", 1)[-1] for k in gone) == [
        "lenet-s1-seer.pt", "lenet-s1-trial-003-best.pt", "lenet-s1-trial-003.pt", "lenet-s1.pt"
    ]  # fmt: skip
    for key in mine:
        assert store.get_checkpoint("t", key) is None, key
    for key in theirs:
        assert store.get_checkpoint("t", key) == key.encode(), key
    assert store.delete_job_checkpoints("t", "lenet-s1") == []
    store.put_blob("t", "result.json", b"{}")
    assert store.get_blob("t", "result.json") == b"{}"
    with pytest.raises(ValueError, match="not valid"):
        store.put_checkpoint("t", "../../escape", b"x")
