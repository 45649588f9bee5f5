"""The tenant data store: immutable example batches, versioned manifests, checkpoints.

Layout under a blob backend, per tenant ``<name>``::

    tenants/<name>/schema.txt                     the schema, Fig. 2 syntax (written once)
    tenants/<name>/batches/<uuid>.npz             immutable example batches (x, y[, lengths])
    tenants/<name>/manifests/<version:010d>.json  snapshot `version`: batches, ids, enabled flags
    tenants/<name>/checkpoints/<job>.pt           a training job's last checkpoint
    tenants/<name>/blobs/<key>                    anything else a job stores (results, models)

A snapshot (manifest version) is immutable; `feed` and `refine` publish version ``v + 1`` with a
create-only write, last, after every batch it names is stored. So a crash at any point leaves the
latest published snapshot intact (at worst an unreferenced batch, which `gc` removes), a training
run that records its snapshot version can always reload exactly the examples it saw, and two
writers racing for version ``v + 1`` cannot both win (the loser re-reads and retries).

Example ids are integers ``first_id + j`` for the ``j``-th example of a batch, unique per tenant.
"""

from __future__ import annotations

import io
import json
import math
import operator
import re
import uuid
from collections.abc import Callable, Iterable, Iterator, Sequence
from dataclasses import dataclass, field, replace
from typing import Any

import numpy as np
from numpy.typing import NDArray

from store._blobs import BlobStore
from store._codec import (
    BadExampleError,
    Encoded,
    conform_inputs,
    encode_inputs,
    encode_labels,
    encode_values,
    is_class_output,
    require_batch,
)
from store.limits import max_input_bytes
from store.schema import Schema

__all__ = [
    "ConcurrentUpdateError",
    "Dataset",
    "ExampleRecord",
    "ExampleStore",
    "Manifest",
    "TenantExistsError",
    "UnknownTenantError",
    "validate_tenant_name",
]

TENANT_NAME = re.compile(r"[a-z][a-z0-9_-]{0,62}\Z")
#: names a tenant cannot take: ``scheduler`` is the service's own MLflow experiment
#: (``tenantml/scheduler``, beside each tenant's ``tenantml/<name>``); a tenant of that name was
#: stored and fed, and never trained or shown
RESERVED_TENANT_NAMES = frozenset({"scheduler"})
FEED_CHUNK = 4096  # examples per stored batch object when a feed streams


class UnknownTenantError(KeyError):
    def __str__(self) -> str:
        return str(self.args[0])


class TenantExistsError(ValueError):
    pass


class ConcurrentUpdateError(RuntimeError):
    pass


def validate_tenant_name(name: str) -> str:
    """Tenant names become storage keys and URIs: only ``[a-z][a-z0-9_-]{0,62}``."""
    if not isinstance(name, str) or not TENANT_NAME.match(name):
        raise ValueError(
            f"tenant name {name!r} is not valid: use 1-63 characters of lowercase letters, "
            "digits, '_' or '-', starting with a letter (no '/', '.', ':' or spaces)"
        )
    if name in RESERVED_TENANT_NAMES:
        raise ValueError(
            f"tenant name {name!r} is reserved (the service's own MLflow experiment): "
            "choose another"
        )
    return name


def _check_example_size(schema: Schema) -> None:
    """Refuse a schema whose one example (a sequence's one step) would hold more float32 values
    than `store.limits.max_input_bytes` allows: a tiny feed to ``Tensor[60000, 60000, 3]``
    allocated 43 GB, one to ``Tensor[99999999999]`` 22 TiB."""
    limit = max_input_bytes()
    for side, dtype in (("input", schema.input), ("output", schema.output)):
        for t in dtype.fields:
            size = math.prod(t.shape) * 4
            if size > limit:
                raise ValueError(
                    f"schema {side} {t} takes {size:,} bytes an example as float32, over the "
                    f"limit of {limit:,} (TENANTML_MAX_INPUT_BYTES): declare smaller tensors"
                )


def _integer(value: object, what: str) -> int:
    """`value` as an int when it is an integer of any kind (a numpy one too), else TypeError
    naming `what` ("1", 1.5 and True are none: they were read as 1)."""
    if not isinstance(value, bool):
        try:
            return operator.index(value)  # type: ignore[arg-type]
        except TypeError:
            pass
    raise TypeError(f"{what} {value!r} is not an integer")


def _example_ids(ids: Iterable[int], what: str) -> set[int]:
    """`ids` as a set of ints; a string (whose characters were read as ids: "12" as 1 and 2)
    or a value that is not a whole number (1.9 was read as 1) is refused, naming `what`."""
    if isinstance(ids, str | bytes):
        raise TypeError(f"{what}: give example ids as integers, not the string {ids!r}")
    return {_integer(i, f"{what}: example id") for i in ids}


@dataclass(frozen=True)
class BatchRef:
    key: str
    first_id: int
    count: int


@dataclass(frozen=True)
class Manifest:
    """Snapshot `version` of one tenant: which batches, which ids are switched off, class names."""

    version: int
    batches: tuple[BatchRef, ...] = ()
    disabled: frozenset[int] = frozenset()
    classes: tuple[str, ...] = ()
    next_id: int = 0
    #: the dtype of the tenant's inputs (``uint8``: 0-255 pixels, scaled by the trainer; else
    #: ``float32``), fixed by its first feed; None on a tenant fed before it was recorded
    input_dtype: str | None = None

    @property
    def n_examples(self) -> int:
        return self.next_id

    @property
    def n_enabled(self) -> int:
        return self.next_id - len(self.disabled)

    def to_json(self) -> bytes:
        return json.dumps(
            {
                "version": self.version,
                "batches": [[b.key, b.first_id, b.count] for b in self.batches],
                "disabled": sorted(self.disabled),
                "classes": list(self.classes),
                "next_id": self.next_id,
                **({"input_dtype": self.input_dtype} if self.input_dtype else {}),
            }
        ).encode()

    @classmethod
    def from_json(cls, data: bytes) -> Manifest:
        d = json.loads(data)
        return cls(
            version=d["version"],
            batches=tuple(BatchRef(k, f, c) for k, f, c in d["batches"]),
            disabled=frozenset(d["disabled"]),
            classes=tuple(d["classes"]),
            next_id=d["next_id"],
            input_dtype=d.get("input_dtype"),
        )


@dataclass(frozen=True)
class ExampleRecord:
    """One fed example as `refine` lists it."""

    id: int
    enabled: bool
    label: str | int | None


@dataclass
class Dataset:
    """Examples of one snapshot. `x` ``(n, *S)`` (sequences zero-padded to ``(n, T_max, *S)``
    with `lengths` ``(n,)``), `y` ``(n,)`` class indices or ``(n, *S_out)``, `ids` ``(n,)``."""

    x: NDArray[Any]
    y: NDArray[Any]
    ids: NDArray[np.int64]
    lengths: NDArray[np.int64] | None = None
    classes: tuple[str, ...] = ()
    version: int = 0
    extra: dict[str, Any] = field(default_factory=dict)

    def __len__(self) -> int:
        return len(self.ids)


def _pack(x: Encoded, y: NDArray[Any] | Encoded) -> bytes:
    arrays: dict[str, NDArray[Any]] = {"x": x.values}
    if x.lengths is not None:
        arrays["x_lengths"] = x.lengths
    if isinstance(y, Encoded):
        arrays["y"] = y.values
        if y.lengths is not None:
            arrays["y_lengths"] = y.lengths
    else:
        arrays["y"] = y
    buf = io.BytesIO()
    np.savez(buf, allow_pickle=False, **arrays)
    return buf.getvalue()


def _unpack(data: bytes) -> dict[str, NDArray[Any]]:
    with np.load(io.BytesIO(data), allow_pickle=False) as z:
        return {k: z[k] for k in z.files}


def _split(values: NDArray[Any], lengths: NDArray[np.int64] | None) -> list[NDArray[Any]]:
    if lengths is None:
        return list(values)
    return np.split(values, np.cumsum(lengths)[:-1])


class ExampleStore:
    """feed / refine / snapshots / checkpoints for every tenant, over one `BlobStore`."""

    def __init__(self, blobs: BlobStore) -> None:
        self.blobs = blobs

    # -- tenants -------------------------------------------------------------------------------
    def _t(self, name: str) -> str:
        return f"tenants/{validate_tenant_name(name)}/"

    def create_tenant(self, name: str, schema: Schema) -> None:
        """Register `name` with `schema`; an existing tenant with a different schema is an error,
        and so is a schema one example of which would take more than `max_input_bytes`."""
        key = self._t(name) + "schema.txt"
        _check_example_size(schema)
        text = str(schema)
        if not self.blobs.put_new(key, text.encode()):
            old = self.blobs.get(key).decode()
            if old != text:
                raise TenantExistsError(
                    f"tenant {name!r} already exists with schema {old}; "
                    "choose another name to declare a different task"
                )
        # also when the schema was there: a submit cut short between the two writes left no
        # snapshot 0, and submitting again repairs it (a no-op when it exists)
        self.blobs.put_new(self._manifest_key(name, 0), Manifest(0).to_json())

    def tenants(self) -> list[str]:
        return sorted(
            k.split("/")[1] for k in self.blobs.list("tenants/") if k.endswith("/schema.txt")
        )

    def schema(self, name: str) -> Schema:
        try:
            return Schema.parse(self.blobs.get(self._t(name) + "schema.txt").decode())
        except KeyError:
            raise UnknownTenantError(
                f"unknown tenant {name!r} in {self.blobs.describe()}; "
                f"known tenants: {self.tenants() or 'none yet'}"
            ) from None

    # -- manifests -----------------------------------------------------------------------------
    def _manifest_key(self, name: str, version: int) -> str:
        return f"{self._t(name)}manifests/{version:010d}.json"

    def versions(self, name: str) -> list[int]:
        keys = self.blobs.list(self._t(name) + "manifests/")
        return [int(k.rsplit("/", 1)[1].split(".")[0]) for k in keys if k.endswith(".json")]

    def manifest(self, name: str, version: int | None = None) -> Manifest:
        """Snapshot `version` (default: the latest)."""
        self.schema(name)  # unknown tenant -> a clear error
        if version is not None:  # "1" or 1.5 gave a format error from deep inside
            version = _integer(version, "snapshot")
        if version is None:
            versions = self.versions(name)
            if not versions:  # a submit cut short before snapshot 0: no examples yet
                return Manifest(0)
            version = versions[-1]
        try:
            return Manifest.from_json(self.blobs.get(self._manifest_key(name, version)))
        except KeyError:
            raise KeyError(
                f"tenant {name!r} has no snapshot {version}; snapshots: {self.versions(name)}"
            ) from None

    def _publish(
        self, name: str, make: Callable[[Manifest], Manifest], retries: int = 20
    ) -> Manifest:
        """Publish ``make(latest) -> new`` as version latest+1, retrying if another writer won."""
        for _ in range(retries):
            latest = self.manifest(name)
            made = make(latest)
            if made is latest:  # nothing to publish (`make` found its change there already)
                return latest
            new = replace(made, version=latest.version + 1)
            if self.blobs.put_new(self._manifest_key(name, new.version), new.to_json()):
                return new
        raise ConcurrentUpdateError(
            f"tenant {name!r}: gave up after {retries} concurrent updates; nothing was changed: "
            "try again"
        )

    # -- feed ----------------------------------------------------------------------------------
    def feed(
        self,
        name: str,
        inputs: Iterable[Any] | NDArray[Any],
        outputs: Iterable[Any] | NDArray[Any],
        *,
        chunk: int = FEED_CHUNK,
    ) -> tuple[Manifest, range]:
        """Validate and store examples; returns the new snapshot and the ids given.

        `inputs` and `outputs` are arrays or iterables (streamed `chunk` examples at a time, so
        memory stays bounded). Any bad example rejects the whole call: the batches already
        written are deleted and no snapshot is published. Raises `BadExampleError`.
        """
        schema = self.schema(name)
        latest = self.manifest(name)
        classes = list(latest.classes)
        class_out = is_class_output(schema)
        # a tenant's labels are class names or class indices, as its first labelled feed
        # gave them (None: not yet known); its inputs' dtype is fixed by its first feed too
        by_index = None if not latest.next_id else not latest.classes
        dtype = latest.input_dtype
        fixed = dtype is not None or latest.next_id == 0  # None on an older tenant: unchecked
        written: list[tuple[str, int]] = []
        offset = 0
        try:
            for xs, ys in _chunks(inputs, outputs, chunk):
                try:
                    x = encode_inputs(schema, xs)
                    if fixed:
                        dtype = dtype or str(x.values.dtype)
                        x = conform_inputs(x, dtype)
                    y: NDArray[Any] | Encoded
                    if class_out:
                        if by_index is None:  # names if any label is one
                            by_index = not classes and not any(isinstance(v, str) for v in ys)
                        y = encode_labels(schema, ys, classes, by_index=by_index)
                    else:
                        y = encode_values(schema.output, ys, "output")
                except BadExampleError as e:
                    raise BadExampleError(offset + e.index, e.reason, e.side) from None
                if len(y) != len(x):
                    raise ValueError(f"{len(x)} inputs but {len(y)} outputs: give one per input")
                key = f"{self._t(name)}batches/{uuid.uuid4().hex}.npz"
                self.blobs.put(key, _pack(x, y))
                written.append((key, len(x)))
                offset += len(x)
            if not written:
                raise ValueError("the batch is empty: give at least one example")

            def add(m: Manifest) -> Manifest:
                if written[0][0] in {b.key for b in m.batches}:
                    return m  # published already (a write whose answer was lost, retried)
                # names another feed added meanwhile are kept; only names both added clash
                theirs = list(m.classes)
                if theirs[: len(classes)] == classes:
                    names = theirs
                elif classes[: len(theirs)] == theirs:
                    names = classes
                else:
                    raise ConcurrentUpdateError(
                        f"tenant {name!r}: another feed added class names {theirs} while this "
                        f"one added {classes}; nothing of this feed was stored: feed it again"
                    )
                # two first feeds, one of indices, one of names: the one that lost would mix
                if class_out and m.next_id and by_index is not None and by_index != (not m.classes):
                    kind = "class names" if m.classes else "class indices"
                    raise ConcurrentUpdateError(
                        f"tenant {name!r}: another feed gave its labels as {kind} meanwhile; "
                        "nothing of this feed was stored: feed it again"
                    )
                if m.input_dtype not in (None, dtype) and fixed:
                    raise ConcurrentUpdateError(
                        f"tenant {name!r}: another feed fixed its inputs as {m.input_dtype} "
                        "meanwhile; nothing of this feed was stored: feed it again"
                    )
                refs, nid = list(m.batches), m.next_id
                for key, count in written:
                    refs.append(BatchRef(key, nid, count))
                    nid += count
                return replace(m, batches=tuple(refs), classes=tuple(names), next_id=nid,
                               input_dtype=m.input_dtype or (dtype if fixed else None))  # fmt: skip

            new = self._publish(name, add)
        except BaseException:
            self._discard_unpublished(name, [key for key, _ in written])
            raise
        # the ids of this feed's own batches (after a lost answer, a later snapshot's may follow)
        first = next(b.first_id for b in new.batches if b.key == written[0][0])
        return new, range(first, first + offset)

    def _discard_unpublished(self, name: str, keys: list[str]) -> None:
        """Delete a failed feed's batches, unless the latest snapshot names them (the manifest's
        write went through and only its answer was lost); when the snapshot cannot be read,
        keep them: unreferenced batches waste space, deleting referenced ones breaks a
        snapshot."""
        if not keys:
            return
        try:
            published = {b.key for b in self.manifest(name).batches}
        except Exception:
            return
        for key in keys:
            if key not in published:
                self.blobs.delete(key)

    # -- refine --------------------------------------------------------------------------------
    def refine(
        self, name: str, *, enable: Iterable[int] = (), disable: Iterable[int] = ()
    ) -> Manifest:
        """Switch examples on/off by id (the paper's refine); publishes a new snapshot when that
        changes which examples are enabled, else returns the latest one (a new snapshot makes the
        service train the tenant's models again)."""
        on, off = _example_ids(enable, "enable"), _example_ids(disable, "disable")
        if on & off:
            raise ValueError(f"ids {sorted(on & off)[:10]} are both enabled and disabled")

        def change(m: Manifest) -> Manifest:
            unknown = sorted(i for i in on | off if not 0 <= i < m.next_id)
            if unknown:
                raise KeyError(
                    f"tenant {name!r} has no example ids {unknown[:10]}; ids are 0..{m.next_id - 1}"
                )
            disabled = frozenset((m.disabled - on) | off)
            return m if disabled == m.disabled else replace(m, disabled=disabled)

        return self._publish(name, change)

    def examples(self, name: str, version: int | None = None) -> Iterator[ExampleRecord]:
        """Every example of a snapshot with its enabled flag and label (class name if known)."""
        m = self.manifest(name, version)
        for ref in m.batches:
            y = _unpack(self.blobs.get(ref.key))["y"]
            for j in range(ref.count):
                i = ref.first_id + j
                label: str | int | None = None
                if y.ndim == 1:
                    k = int(y[j])
                    label = m.classes[k] if k < len(m.classes) else k
                yield ExampleRecord(i, i not in m.disabled, label)

    # -- training side -------------------------------------------------------------------------
    def load(self, name: str, version: int | None = None, *, enabled_only: bool = True) -> Dataset:
        """The (enabled) examples of snapshot `version`, in id order."""
        schema = self.schema(name)
        m = self.manifest(name, version)
        xs: list[NDArray[Any]] = []
        ys: list[NDArray[Any]] = []
        ids: list[NDArray[np.int64]] = []
        seq = schema.input.is_sequence
        for ref in m.batches:
            z = _unpack(self.blobs.get(ref.key))
            bid = np.arange(ref.first_id, ref.first_id + ref.count, dtype=np.int64)
            keep = (
                ~np.isin(bid, np.fromiter(m.disabled, dtype=np.int64))
                if enabled_only and m.disabled
                else np.ones(ref.count, dtype=bool)
            )
            x_items = _split(z["x"], z.get("x_lengths"))
            y_items = _split(z["y"], z.get("y_lengths")) if "y_lengths" in z else list(z["y"])
            xs.extend(x for x, k in zip(x_items, keep, strict=True) if k)
            ys.extend(y for y, k in zip(y_items, keep, strict=True) if k)
            ids.append(bid[keep])
        id_arr = np.concatenate(ids) if ids else np.zeros(0, dtype=np.int64)
        lengths = None
        shape = schema.input.single.shape if schema.input.single else ()
        if seq:
            lengths = np.asarray([len(x) for x in xs], dtype=np.int64)
            t_max = int(lengths.max()) if len(lengths) else 0
            # one dtype for all (a tenant fed before `Manifest.input_dtype` may mix them)
            dtype = np.result_type(*(x.dtype for x in xs)) if xs else np.float32
            x = np.zeros((len(xs), t_max, *shape), dtype=dtype)
            for i, item in enumerate(xs):
                x[i, : len(item)] = item
        else:
            x = np.stack(xs) if xs else np.zeros((0, *shape), dtype=np.float32)
        y = np.stack(ys) if ys else np.zeros(0, dtype=np.int64)
        return Dataset(x, y, id_arr, lengths, m.classes, m.version)

    def put_checkpoint(self, name: str, job_id: str, data: bytes) -> None:
        self.blobs.put(f"{self._t(name)}checkpoints/{_safe_key(job_id)}.pt", data)

    def get_checkpoint(self, name: str, job_id: str) -> bytes | None:
        try:
            return self.blobs.get(f"{self._t(name)}checkpoints/{_safe_key(job_id)}.pt")
        except KeyError:
            return None

    def delete_checkpoint(self, name: str, job_id: str) -> None:
        self.blobs.delete(f"{self._t(name)}checkpoints/{_safe_key(job_id)}.pt")

    def delete_job_checkpoints(self, name: str, job_id: str) -> list[str]:
        """Delete the checkpoints of training job `job_id`: its own (``job_id``) and a SEER
        job's state (``job_id-seer``) and trials (``job_id-trial-NNN``, and a trial's best state
        ``job_id-trial-NNN-best``); returns their keys.
        Other ids that start with `job_id` are other jobs' (an SDK job's ``job_id-<hex>``). A
        finished job's model is in MLflow, and its checkpoints (a ResNet-18's 45 MB, a VGG-16's
        540 MB with its optimizer) would otherwise stay for ever."""
        key = _safe_key(job_id)
        folder = f"{self._t(name)}checkpoints/"
        own = re.compile(re.escape(folder + key) + r"(-seer|-trial-\d+(-best)?)?\.pt")
        mine = [k for k in self.blobs.list(folder + key) if own.fullmatch(k)]
        for k in mine:
            self.blobs.delete(k)
        return mine

    def put_blob(self, name: str, key: str, data: bytes) -> None:
        self.blobs.put(f"{self._t(name)}blobs/{_safe_key(key)}", data)

    def get_blob(self, name: str, key: str) -> bytes:
        return self.blobs.get(f"{self._t(name)}blobs/{_safe_key(key)}")

    def gc(self, name: str) -> list[str]:
        """Delete batches no snapshot refers to (left by a crash mid-feed); returns their keys."""
        used = {ref.key for v in self.versions(name) for ref in self.manifest(name, v).batches}
        orphans = [k for k in self.blobs.list(self._t(name) + "batches/") if k not in used]
        for k in orphans:
            self.blobs.delete(k)
        return orphans


_SAFE = re.compile(r"[A-Za-z0-9][A-Za-z0-9_.=-]{0,199}\Z")


def _safe_key(key: str) -> str:
    if not _SAFE.match(key) or ".." in key:
        raise ValueError(f"key {key!r} is not valid: use [A-Za-z0-9_.=-], no '..' or '/'")
    return key


def _chunks(
    inputs: Iterable[Any] | NDArray[Any], outputs: Iterable[Any] | NDArray[Any], size: int
) -> Iterator[tuple[Sequence[Any] | NDArray[Any], Sequence[Any] | NDArray[Any]]]:
    """Pair inputs with outputs, `size` at a time; arrays are sliced without copying."""
    require_batch(inputs, "input")
    require_batch(outputs, "output")
    if isinstance(inputs, np.ndarray) and isinstance(outputs, np.ndarray):
        if len(inputs) != len(outputs):
            raise ValueError(
                f"{len(inputs)} inputs but {len(outputs)} outputs: give one output per input"
            )
        for s in range(0, len(inputs), size):
            yield inputs[s : s + size], outputs[s : s + size]
        return
    it_x, it_y = iter(inputs), iter(outputs)
    while True:
        xs: list[Any] = []
        ys: list[Any] = []
        for x in it_x:
            xs.append(x)
            try:
                ys.append(next(it_y))
            except StopIteration:
                raise ValueError("more inputs than outputs: give one output per input") from None
            if len(xs) == size:
                break
        if not xs:
            if next(it_y, None) is not None:
                raise ValueError("more outputs than inputs: give one output per input")
            return
        yield xs, ys
