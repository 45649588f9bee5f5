"""Quality/cost tables for the replay benchmark: built-in real data sets, SYN, and user CSVs.

A :class:`QualityTable` holds ``quality`` (n, M) in [0, 1] with NaN where an arm does not exist
for a tenant, ``cost`` (n, M) positive or NaN (no cost known: the protocol draws U(0, 1) costs
as ease.ml Sec. 5.1 does for 179CLASSIFIER), and ``kernel_only`` (n,) marking tenants that may
only help build the GP kernel (they have no cost, e.g. easeml-dl's prior rows).
"""

from __future__ import annotations

import csv
import gzip
import io
import math
from collections.abc import Iterator
from dataclasses import dataclass, replace
from importlib import resources
from pathlib import Path

import numpy as np

from policy import BoolArray, FloatArray, ModelMeta, syn

__all__ = [
    "BUILTIN",
    "BenchInputError",
    "QualityTable",
    "load_dataset",
    "read_models_meta",
    "read_quality_csv",
    "read_tenant_sizes",
    "read_tenant_weights",
]

SYN_SETS = {
    "syn-0.01-0.1": (0.01, 0.1),
    "syn-0.01-1.0": (0.01, 1.0),
    "syn-0.5-0.1": (0.5, 0.1),
    "syn-0.5-1.0": (0.5, 1.0),
}
REAL_SETS = ("easeml-dl", "delgado179", "oboe", "lcdb")
BUILTIN = REAL_SETS + tuple(SYN_SETS)


class BenchInputError(ValueError):
    """Bad benchmark input; the message names the row or value and what would be valid."""


@dataclass(frozen=True)
class QualityTable:
    name: str
    tenants: tuple[str, ...]
    models: tuple[str, ...]
    quality: FloatArray
    cost: FloatArray
    kernel_only: BoolArray
    meta: ModelMeta | None = None
    sizes: FloatArray | None = None  # (n,) or (n, d) tenant sizes for the cost model; NaN = unknown
    weights: FloatArray | None = None  # (n,) tenant weights w_i (None: all 1)

    @property
    def has_cost(self) -> bool:
        return bool(np.isfinite(self.cost[~self.kernel_only]).any())


def _parse_float(text: str, what: str, where: str) -> float:
    try:
        return float(text)
    except ValueError:
        raise BenchInputError(f"{where}: {what} {text!r} is not a number") from None


def read_quality_csv(source: str | Path | io.TextIOBase, name: str | None = None) -> QualityTable:
    """Read the long format ``tenant,model,quality,cost`` (cost may be empty).

    Rejects: missing columns, a wrong field count, non-numeric values, duplicate
    (tenant, model) rows, quality outside [0, 1], non-positive or non-finite cost.
    """
    label = name or (Path(source).stem if isinstance(source, str | Path) else "data")
    if isinstance(source, str | Path):
        path = Path(source)
        if not path.exists():
            raise BenchInputError(f"{path}: no such file")
        opener = gzip.open if path.suffix == ".gz" else open
        with opener(path, "rt", newline="") as fh:
            return _read_rows(fh, label, str(path))
    return _read_rows(source, label, label)


def _read_rows(fh: io.TextIOBase | io.TextIOWrapper, label: str, where: str) -> QualityTable:
    reader = csv.reader(fh)
    try:
        header = [h.strip() for h in next(reader)]
    except StopIteration:
        raise BenchInputError(
            f"{where}: empty file; expected header tenant,model,quality,cost"
        ) from None
    except csv.Error as e:
        raise BenchInputError(f"{where}: line 1: malformed CSV ({e})") from None
    need = ["tenant", "model", "quality"]
    missing = [c for c in need if c not in header]
    if missing:
        raise BenchInputError(
            f"{where}: header {','.join(header)!r} lacks {','.join(missing)}; "
            "expected columns tenant,model,quality[,cost]"
        )
    col = {c: header.index(c) for c in header}
    tenants: dict[str, int] = {}
    models: dict[str, int] = {}
    cells: dict[tuple[int, int], tuple[float, float, int]] = {}
    line = 1
    try:
        for line, row in enumerate(reader, start=2):
            if not row or all(not f.strip() for f in row):
                continue
            if len(row) != len(header):
                raise BenchInputError(
                    f"{where}: line {line}: {len(row)} fields, expected {len(header)} "
                    f"({','.join(header)})"
                )
            t, m = row[col["tenant"]].strip(), row[col["model"]].strip()
            if not t or not m:
                raise BenchInputError(f"{where}: line {line}: empty tenant or model name")
            q = _parse_float(row[col["quality"]], "quality", f"{where}: line {line}")
            if not 0.0 <= q <= 1.0:
                raise BenchInputError(
                    f"{where}: line {line}: quality {q!r} outside [0, 1] (use accuracy, not %)"
                )
            c = math.nan
            if "cost" in col and row[col["cost"]].strip():
                c = _parse_float(row[col["cost"]], "cost", f"{where}: line {line}")
                if not (math.isfinite(c) and c > 0):
                    raise BenchInputError(
                        f"{where}: line {line}: cost {c!r} must be a finite number > 0"
                    )
            i = tenants.setdefault(t, len(tenants))
            k = models.setdefault(m, len(models))
            if (i, k) in cells:
                raise BenchInputError(
                    f"{where}: line {line}: duplicate row for tenant {t!r}, model {m!r} "
                    f"(first at line {cells[(i, k)][2]}); each pair must appear once"
                )
            cells[(i, k)] = (q, c, line)
    except csv.Error as e:
        raise BenchInputError(f"{where}: line {line}: malformed CSV ({e})") from None
    if not cells:
        raise BenchInputError(f"{where}: no data rows")
    quality = np.full((len(tenants), len(models)), np.nan)
    cost = np.full_like(quality, np.nan)
    for (i, k), (q, c, _) in cells.items():
        quality[i, k] = q
        cost[i, k] = c
    has_cost = np.asarray(np.isfinite(cost).any(axis=1), dtype=bool)
    kernel_only: BoolArray = ~has_cost if has_cost.any() else np.zeros(len(tenants), dtype=bool)
    return QualityTable(label, tuple(tenants), tuple(models), quality, cost, kernel_only)


def _keyed_rows(
    path: str | Path,
    key: str,
    columns: tuple[str, ...],
    names: tuple[str, ...],
    strict: bool = False,
) -> Iterator[tuple[int, str, dict[str, str]]]:
    """Rows of a side CSV keyed by ``key`` (a tenant or model name): ``(index into names,
    'PATH: line N', row)``; rows naming something not in ``names`` are skipped, or with
    `strict` refused. Checks that the file exists and the header has ``key`` and ``columns``
    (extra columns are ignored)."""
    p = Path(path)
    if not p.exists():
        raise BenchInputError(f"{p}: no such file")
    index = {n: i for i, n in enumerate(names)}
    with open(p, newline="") as fh:
        reader = csv.DictReader(fh)
        if not {key, *columns} <= set(reader.fieldnames or ()):
            raise BenchInputError(
                f"{p}: header {','.join(reader.fieldnames or [])!r}; "
                f"expected {','.join((key, *columns))}"
            )
        for line, row in enumerate(reader, start=2):
            if None in row.values():  # csv's filler for the cells a short row lacks
                cells = sum(v is not None for k, v in row.items() if k is not None)
                raise BenchInputError(
                    f"{p}: line {line} has {cells} cell(s); the header has "
                    f"{len(reader.fieldnames or ())} (leave a cell empty, not out)"
                )
            name = (row[key] or "").strip()
            i = index.get(name)
            if i is not None:
                yield i, f"{p}: line {line}", row
            elif strict:
                shown = ", ".join(names[:5]) + (
                    f", ... ({len(names)} in all)" if len(names) > 5 else ""
                )
                raise BenchInputError(f"{p}: line {line}: no {key} {name!r} here; valid: {shown}")


def read_models_meta(path: str | Path, models: tuple[str, ...]) -> ModelMeta:
    """Read ``model,year,citations`` (extra columns ignored); unknown models stay NaN."""
    year = np.full(len(models), np.nan)
    cites = np.full(len(models), np.nan)
    for k, where, row in _keyed_rows(path, "model", ("year", "citations"), models):
        for arr, key in ((year, "year"), (cites, "citations")):
            text = (row[key] or "").strip()
            if text:
                arr[k] = _parse_float(text, key, where)
    return ModelMeta(year, cites)


def _tenant_values(
    path: str | Path,
    tenants: tuple[str, ...],
    column: str,
    unlisted: float,
    strict: bool,
    blank_unknown: bool = False,
) -> FloatArray:
    """``tenant,<column>`` with finite values > 0; tenants not listed get ``unlisted``; with
    `strict` a row naming no tenant of `tenants` is refused (`_keyed_rows`); with
    `blank_unknown` an empty cell is NaN (not known), else refused."""
    values = np.full(len(tenants), unlisted)
    for i, where, row in _keyed_rows(path, "tenant", (column,), tenants, strict):
        text = (row[column] or "").strip()
        if blank_unknown and not text:
            values[i] = np.nan
            continue
        v = _parse_float(text, column, where)
        if not (np.isfinite(v) and v > 0):
            raise BenchInputError(f"{where}: {column} {v!r}; must be finite and > 0")
        values[i] = v
    return values


#: the size covariates a tenant sizes file may give, in this order: each model's cost grows with
#: each at its own rate (`policy.costs`; `infra/scripts/cost_prediction.py lcdb`, empirical
#: kernel: log-RMSE after one job 1.45 with one size, 1.14 with all three; docs/replay.md)
SIZE_COVARIATES = ("rows", "features", "classes")


def read_tenant_sizes(path: str | Path, tenants: tuple[str, ...]) -> FloatArray:
    """Read a tenant's size for the cost model: ``tenant,size`` (size > 0: how much data, e.g.
    examples x features), (n,); or, where the header has any of :data:`SIZE_COVARIATES`
    (``rows``, ``features``, ``classes``), those columns, (n, d), and ``size`` is ignored; an
    empty covariate cell is not known (the cost model takes the tenants' mean there), and a
    covariate column empty for every tenant of `tenants` is left out.
    Tenants not listed stay NaN (unknown); rows of other tenants are skipped (one file may serve
    several data sets). Extra columns are ignored."""
    p = Path(path)
    header: list[str] = []
    if p.exists():
        with open(p, newline="") as fh:
            header = next(csv.reader(fh), [])
    covariates = [c for c in SIZE_COVARIATES if c in header]
    if p.exists() and not covariates and not {"tenant", "size"} <= set(header):
        raise BenchInputError(
            f"{p}: header {','.join(header)!r}; expected tenant,size or tenant with any of "
            f"{','.join(SIZE_COVARIATES)} (lower case)"
        )
    if not covariates:
        return _tenant_values(path, tenants, "size", np.nan, strict=False)
    columns = [
        _tenant_values(path, tenants, c, np.nan, False, blank_unknown=True) for c in covariates
    ]
    # a covariate no listed tenant has (a regression table's empty `classes`) is left out: the
    # cost model regresses on the tenants with every covariate known, and would have none
    kept = [col for col in columns if np.isfinite(col).any()]
    out: FloatArray = np.column_stack(kept) if kept else np.full(len(tenants), np.nan)
    return out


def read_tenant_weights(path: str | Path, tenants: tuple[str, ...]) -> FloatArray:
    """Read ``tenant,weight`` (weight > 0: w_i, how much the tenant's regret counts, as the
    service's `tenantml weight` sets it); tenants not listed weigh 1. A row naming a tenant
    that is not in `tenants` is refused: a misspelt name would weigh 1 without a word. Extra
    columns are ignored."""
    return _tenant_values(path, tenants, "weight", 1.0, strict=True)


def _builtin_path(name: str) -> Path:
    return Path(str(resources.files("tenantml") / "data" / name))


def load_dataset(name: str, seed: int = 0) -> QualityTable:
    """A built-in data set by name (see :data:`BUILTIN`). SYN sets are generated from ``seed``."""
    if name in SYN_SETS:
        sigma_m, alpha = SYN_SETS[name]
        q, c = syn(sigma_m, alpha, np.random.default_rng([seed, 7919]))
        n, m = q.shape
        return QualityTable(
            name,
            tuple(f"user-{i}" for i in range(n)),
            tuple(f"model-{k}" for k in range(m)),
            q,
            c,
            np.zeros(n, dtype=bool),
        )
    if name not in REAL_SETS:
        raise BenchInputError(f"unknown data set {name!r}; valid: {', '.join(BUILTIN)}")
    table = read_quality_csv(_builtin_path(f"{name}.csv.gz"), name)
    meta_path = _builtin_path(f"{name}.models.csv")
    if meta_path.exists():
        table = QualityTable(
            table.name,
            table.tenants,
            table.models,
            table.quality,
            table.cost,
            table.kernel_only,
            read_models_meta(meta_path, table.models),
        )
    sizes_path = _builtin_path(f"{name}.tenants.csv")
    if sizes_path.exists():
        table = replace(table, sizes=read_tenant_sizes(sizes_path, table.tenants))
    return table
