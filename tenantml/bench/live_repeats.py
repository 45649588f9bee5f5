"""bench-live over several train/test splits: the spread of one comparison (issue 16).

One bench-live run compares systems on one seeded split of each tenant; with small test parts
(50 rows for crabs) one tenant's served model can move a system's mean by half a point. A run
with ``--repeats R`` runs the comparison on the splits of seeds ``seed .. seed + R - 1`` (each
in its own directory ``seed-<k>``, with the order of the systems rotated so that none is
always first on a fresh machine), then combines the per-split summaries here.

Notation: for system s and split k, ``q_s^k`` its mean served test accuracy at a quarter,
``a_s^k`` its test-regret AUC (regret against the best any system reached on that split). The
combined summary gives their mean and standard error over k, and for each system its AUC
difference to the reference system (the first one asked for, ``live`` by default), paired by
split: ``d_s^k = a_s^k - a_ref^k``, mean, standard error, and on how many splits the reference
had the smaller AUC; the same for the regret from each service's first job
(``test_regret_from_first_job``, :func:`tenantml.bench.live.summarize`), where both have it,
and per tenant (``auc_minus_<ref>_by_tenant``: ``d_{s,i}^k = a_{s,i}^k - a_{ref,i}^k`` of each
tenant's own AUC), which says where a difference comes from: a system may lead on the tenants
whose catalogue is costly and tie on those it can try whole. When each tenant's served accuracy
at the quarters is known, also the reference's lead in it (``accuracy_lead_of_<ref>_by_tenant``:
``q_{ref,i}^k - q_{s,i}^k`` per quarter, and on how many splits it was ahead and behind), which
says when: early, before the cheap catalogue is tried, or at the end.

Splits combine only if they ran one comparison (same tenants, budget, slots and test part) on
different seeds; runs made apart (``--seed 0 --repeats 6``, then ``--seed 6 ...``) combine with
``tenantml bench-live-combine``.
"""

from __future__ import annotations

import csv
import json
import re
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import numpy as np

__all__ = ["combine_repeats", "mean_se", "read_curves", "read_splits", "rotated"]


def mean_se(values: Sequence[float]) -> dict[str, float]:
    """``{"mean", "se"}`` of ``values`` (se 0 for a single value)."""
    a = np.asarray(values, dtype=float)
    se = float(a.std(ddof=1) / np.sqrt(len(a))) if len(a) > 1 else 0.0
    return {"mean": float(a.mean()), "se": se}


def _paired(diffs: Sequence[float], ref: str) -> dict[str, float]:
    """Mean and s.e. of per-split differences (a system's minus `ref`'s), and on how many
    splits `ref` had the smaller value."""
    return {**mean_se(diffs), f"splits_{ref}_smaller": int(sum(d > 0 for d in diffs))}


def _lead(leads: Sequence[float], ref: str) -> dict[str, float]:
    """Mean and s.e. of `ref`'s per-split lead (its value minus a system's), and on how many
    splits it was ahead and behind (the rest: level, the same model or as good)."""
    return {
        **mean_se(leads),
        f"splits_{ref}_ahead": int(sum(d > 0 for d in leads)),
        f"splits_{ref}_behind": int(sum(d < 0 for d in leads)),
    }


def _check_comparable(summaries: Sequence[dict[str, Any]]) -> None:
    """Splits combine only if they ran the same comparison on different splits."""
    first = summaries[0]
    names = list(first["systems"])
    for s in summaries[1:]:
        if sorted(s["systems"]) != sorted(names):
            raise ValueError(f"splits ran different systems: {sorted(s['systems'])} vs {names}")
    for key in ("tenants", "budget_s", "slots", "test_fraction"):
        for s in summaries[1:]:
            if s[key] != first[key]:
                raise ValueError(
                    f"splits differ in {key}: {s[key]!r} (seed {s['seed']}) against "
                    f"{first[key]!r} (seed {first['seed']}); combine runs of one comparison"
                )
    # the regret is weighted, and the service's options (`--max-epochs`) shape what it serves;
    # a split written before `service_args` was recorded is not checked on it
    for key in ("weights", "service_args"):
        for s in summaries[1:]:
            if key in s and key in first and s[key] != first[key]:
                raise ValueError(
                    f"splits differ in {key}: {s[key]!r} (seed {s['seed']}) against "
                    f"{first[key]!r} (seed {first['seed']}); combine runs of one comparison"
                )
    seeds = [s["seed"] for s in summaries]
    twice = sorted({k for k in seeds if seeds.count(k) > 1})
    if twice:
        raise ValueError(f"seed {twice[0]} is given more than once; each split counts once")


def rotated(systems: Sequence[str], k: int) -> list[str]:
    """``systems`` rotated left by ``k`` (the order of split ``k``)."""
    if not systems:
        return []
    k %= len(systems)
    return [*systems[k:], *systems[:k]]


def combine_repeats(
    summaries: Sequence[dict[str, Any]], curves: Sequence[Sequence[dict[str, Any]]]
) -> tuple[dict[str, Any], list[dict[str, Any]]]:
    """(combined summary, mean curve rows) of per-split ``summaries`` (each bench-live's
    ``summary.json``, same tenants and systems) and their ``curves`` rows (``system, t,
    mean_test_accuracy, mean_test_regret``). The reference system is the first of the first
    summary's systems."""
    if not summaries:
        raise ValueError("no bench-live runs to combine")
    _check_comparable(summaries)
    names = list(summaries[0]["systems"])
    ref = names[0]
    systems: dict[str, Any] = {}
    for name in names:
        runs = [s["systems"][name] for s in summaries]
        quarters = list(runs[0]["mean_test_accuracy"])
        entry: dict[str, Any] = {
            "mean_test_accuracy": {
                q: mean_se([r["mean_test_accuracy"][q] for r in runs]) for q in quarters
            },
            "test_regret_auc": mean_se([r["test_regret_auc"] for r in runs]),
            "jobs": mean_se([r["jobs"] for r in runs]),
        }
        estimated = [r["loss_estimate"] for r in runs if "loss_estimate" in r]
        if estimated:
            # over the splits whose run left estimates (`splits`: how many)
            entry["loss_estimate_mean_abs_error"] = {
                **mean_se([e["mean_abs_error"] for e in estimated]),
                "splits": len(estimated),
            }
            # a constant 0's error (`summarize`), and the estimates' rank correlation where
            # a split defines one
            entry["loss_realised_mean"] = mean_se([e["realised_mean"] for e in estimated])
            rhos = [e.get("rank_correlation") for e in estimated]
            rhos = [r for r in rhos if r is not None]
            if rhos:  # and over how many splits (undefined where all realised losses were 0)
                entry["loss_estimate_rank_correlation"] = {**mean_se(rhos), "splits": len(rhos)}
        for key, out_key in (
            ("test_regret_auc", f"auc_minus_{ref}"),
            ("test_regret_from_first_job", f"from_first_job_minus_{ref}"),
        ):
            if key == "test_regret_from_first_job":
                if not all(key in r for r in runs):
                    continue
                entry[key] = mean_se([r[key] for r in runs])
            if name == ref or not all(key in s["systems"][ref] for s in summaries):
                continue
            diffs = [s["systems"][name][key] - s["systems"][ref][key] for s in summaries]
            entry[out_key] = _paired(diffs, ref)
        by_tenant = "test_regret_auc_by_tenant"
        pairs = [(s["systems"][name], s["systems"][ref]) for s in summaries]
        if name != ref and all(by_tenant in x and by_tenant in y for x, y in pairs):
            entry[f"auc_minus_{ref}_by_tenant"] = {
                t: _paired([x[by_tenant][t] - y[by_tenant][t] for x, y in pairs], ref)
                for t in summaries[0]["tenants"]
            }
        served = "test_accuracy_by_tenant"
        if name != ref and all(served in x and served in y for x, y in pairs):
            entry[f"accuracy_lead_of_{ref}_by_tenant"] = {
                t: {
                    q: _lead([y[served][t][q] - x[served][t][q] for x, y in pairs], ref)
                    for q in pairs[0][0][served][t]
                }
                for t in summaries[0]["tenants"]
            }
        systems[name] = entry
    first = summaries[0]
    combined = {
        "tenants": first["tenants"],
        "weights": first.get("weights", {}),
        "seeds": [s["seed"] for s in summaries],
        "reference": ref,
        "budget_s": first["budget_s"],
        "slots": first["slots"],
        "test_fraction": first["test_fraction"],
        "service_args": first.get("service_args"),
        "systems": systems,
    }
    by_key: dict[tuple[str, float], list[dict[str, Any]]] = {}
    for rows in curves:
        for row in rows:
            by_key.setdefault((row["system"], float(row["t"])), []).append(row)
    mean_rows = [
        {
            "system": system,
            "t": t,
            "mean_test_accuracy": float(np.mean([r["mean_test_accuracy"] for r in rows])),
            "mean_test_regret": float(np.mean([r["mean_test_regret"] for r in rows])),
        }
        for (system, t), rows in by_key.items()
    ]
    return combined, mean_rows


# what one split's summary.json holds besides its systems' entries (bench-live's summarize)
_SPLIT_KEYS = ("systems", "seed", "tenants", "budget_s", "slots", "test_fraction")


def _split_files(run: Path) -> list[Path]:
    """The per-split ``summary.json`` files of one bench-live output directory: ``seed-<k>/``
    of a run with ``--repeats`` (in seed order), or the run's own of a one-split run."""
    found = [p for p in run.glob("seed-*/summary.json") if re.fullmatch(r"seed-\d+", p.parent.name)]
    if found:
        return sorted(found, key=lambda p: int(p.parent.name.removeprefix("seed-")))
    own = run / "summary.json"
    return [own] if own.is_file() else []


def read_splits(runs: Sequence[Path]) -> tuple[list[dict[str, Any]], list[list[dict[str, Any]]]]:
    """(per-split summaries, their curve rows) of bench-live output directories, for
    :func:`combine_repeats`; a directory with no split in it, or a file that cannot be read,
    is named."""
    summaries: list[dict[str, Any]] = []
    curves: list[list[dict[str, Any]]] = []
    for run in runs:
        files = _split_files(run) if run.is_dir() else []
        if not files:
            raise ValueError(
                f"{run}: no bench-live split in it; give a bench-live --out directory "
                "(seed-<k>/summary.json of a run with --repeats, or a one-split summary.json)"
            )
        for path in files:
            summaries.append(_read_summary(path))
            curves.append(read_curves(path.parent))
    return summaries, curves


def _read_summary(path: Path) -> dict[str, Any]:
    """One split's summary.json, checked to be one (not a combination, not something else)."""
    try:
        summary = json.loads(path.read_text())
    except (OSError, ValueError) as e:
        raise ValueError(f"{path.parent}: not a readable bench-live split: {e}") from None
    if isinstance(summary, dict) and "seeds" in summary:
        raise ValueError(
            f"{path} combines splits whose own summaries are gone: give the runs with their "
            "seed-<k> directories"
        )
    missing = [k for k in _SPLIT_KEYS if not isinstance(summary, dict) or k not in summary]
    if missing:
        raise ValueError(f"{path}: not a bench-live split's summary (no {', '.join(missing)})")
    return dict(summary)


def read_curves(where: Path) -> list[dict[str, Any]]:
    """One split's curves.csv rows, numbers as floats."""
    numbers = ("t", "mean_test_accuracy", "mean_test_regret")
    try:
        with open(where / "curves.csv", newline="") as f:
            return [{**r, **{k: float(r[k]) for k in numbers}} for r in csv.DictReader(f)]
    except (OSError, ValueError, KeyError) as e:
        raise ValueError(f"{where}: not a readable bench-live split: {e}") from None
