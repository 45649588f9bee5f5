"""Learning-curve sets for the tuning simulators (``tenantml seer simulate``, ``spot earlycurve``).

Long CSV ``group,curve_id,step,metric[,seconds][,hp_*]``: one group is one tuning problem and its
curves are the configurations tried; ``seconds`` is the cumulative training time at which the
metric was measured (without it one step is one time unit); ``hp_*`` columns are the
configuration's hyperparameters. Built-in sets live in ``tenantml/data/curves`` (sources and
licenses in ``tenantml/data/README.md``).
"""

from __future__ import annotations

from importlib import resources
from pathlib import Path

import numpy as np
import pandas as pd

from policy.seer.tuning import Curves

__all__ = ["BUILTIN_CURVES", "CurveFormatError", "load_curves"]

BUILTIN_CURVES = (
    "opda-alexnet",
    "opda-convnext",
    "opda-deberta",
    "lcdb",
    "steplr-digits",
    "steplr-digits-train",
)
REQUIRED = ("group", "curve_id", "step", "metric")


class CurveFormatError(ValueError):
    """A curve file that cannot be read; the message names the row or column and what is valid."""


def _read(name_or_path: str) -> tuple[pd.DataFrame, str]:
    if name_or_path in BUILTIN_CURVES:
        ref = resources.files("tenantml") / "data" / "curves" / f"{name_or_path}.csv.gz"
        with resources.as_file(ref) as p:
            return pd.read_csv(p, dtype={"group": str, "curve_id": str}), name_or_path
    path = Path(name_or_path)
    if not path.is_file():
        raise CurveFormatError(
            f"no curve set {name_or_path!r}: give a built-in name "
            f"({', '.join(BUILTIN_CURVES)}) or an existing CSV file"
        )
    try:
        df = pd.read_csv(path, dtype={"group": str, "curve_id": str})
    except (pd.errors.ParserError, UnicodeDecodeError, pd.errors.EmptyDataError) as e:
        raise CurveFormatError(f"{path}: not a readable CSV ({e})") from None
    return df, path.stem


def load_curves(name_or_path: str, minimize: bool = False) -> dict[str, Curves]:
    """Curve sets by group. Times are minutes when ``seconds`` is given, else steps.

    ``minimize``: the metric is a loss; it is negated so that every simulator maximises (callers
    negate results back for display); when no recorded value is negative, ``Curves.upper`` is 0
    (a loss cannot fall below 0, a bound the re-planning tuner's curve predictor respects).

    Raises:
        CurveFormatError: missing columns, non-numeric or non-finite values, repeated steps,
            time that does not increase along a curve.
    """
    df, _ = _read(name_or_path)
    missing = [c for c in REQUIRED if c not in df.columns]
    if missing:
        raise CurveFormatError(
            f"missing column(s) {', '.join(missing)}; a curve CSV has columns "
            "group,curve_id,step,metric[,seconds][,hp_*]"
        )
    if df.empty:
        raise CurveFormatError("the curve file has no rows")
    has_seconds = "seconds" in df.columns and df["seconds"].notna().any()
    numeric = ["step", "metric"] + (["seconds"] if has_seconds else [])
    for col in numeric:
        column = pd.to_numeric(df[col], errors="coerce")
        bad = ~np.isfinite(column.to_numpy(dtype=float))
        if bad.any():
            row = int(np.flatnonzero(bad)[0])
            raise CurveFormatError(
                f"row {row + 2}: {col}={df[col].iloc[row]!r} is not a finite number"
            )
        df[col] = column
    dup = df.duplicated(["group", "curve_id", "step"])
    if dup.any():
        row = int(np.flatnonzero(dup.to_numpy())[0])
        raise CurveFormatError(
            f"row {row + 2}: step {df.step.iloc[row]} of curve {df.curve_id.iloc[row]!r} "
            f"in group {df.group.iloc[row]!r} appears twice"
        )
    hp_cols = [c for c in df.columns if c.startswith("hp_")]
    sign = -1.0 if minimize else 1.0
    # a loss recorded >= 0 everywhere (cross-entropy, error) is bounded: its negation by 0
    upper = 0.0 if minimize and bool((df["metric"] >= 0).all()) else np.inf
    out: dict[str, Curves] = {}
    for group, g in df.sort_values(["group", "curve_id", "step"]).groupby("group", sort=True):
        ids: list[str] = []
        times: list[np.ndarray] = []
        values: list[np.ndarray] = []
        hps: list[np.ndarray] = []
        for cid, cg in g.groupby("curve_id", sort=False):
            t = cg["seconds"].to_numpy(float) / 60.0 if has_seconds else cg["step"].to_numpy(float)
            if np.any(np.diff(t) <= 0) or t[0] <= 0:
                raise CurveFormatError(
                    f"curve {cid!r} of group {group!r}: "
                    f"{'seconds' if has_seconds else 'step'} must be > 0 and increase with step"
                )
            ids.append(str(cid))
            times.append(t)
            values.append(sign * cg["metric"].to_numpy(float))
            if hp_cols:
                hps.append(pd.to_numeric(cg[hp_cols].iloc[0], errors="coerce").to_numpy(float))
        hp = np.vstack(hps) if hp_cols else None
        out[str(group)] = Curves(
            str(group),
            tuple(ids),
            tuple(times),
            tuple(values),
            hp,
            tuple(c.removeprefix("hp_") for c in hp_cols),
            upper=upper,
        )
    return out
