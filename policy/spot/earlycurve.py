"""EarlyCurve: predict a trial's final metric from the start of its curve (shared/papers/004,
Sec. III-C), and the single-stage fit it is compared with (SLAQ-style).

Notation: ``L_k`` the metric (lower is better, e.g. validation loss) after step k = 1, 2, ...;
a curve is split into stages ``[l_i, r_i]`` (Eq. 5-6) and each stage is fitted by Eq. 4,

    L^_k = 1 / (a_i0 k'^2 + a_i1 k' + a_i2) + a_i3,   a_i >= 0,

with a bounded (non-negative) least-squares solver (scipy's ``least_squares``). ``k'`` is the step
within the stage (``k - l_i + 1``): after a learning-rate step the loss starts a fresh decay, which
the absolute k of the print cannot express with one positive decreasing term. A new stage starts
at step i when (Eq. 7) its change rate ``zeta_i = |L_i - L_{i-1}| / L_{i-1} > xi`` (0.5) after five
steady steps ``zeta_j < epsilon`` (0.01), j = i-1..i-5. The prediction of the final metric at
``max_trial_steps`` extrapolates the last stage. A curve whose last five change rates are all
below epsilon has converged (a plateau): its prediction is its current value.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np
from scipy.optimize import least_squares

from policy._types import FloatArray

__all__ = [
    "StageFit",
    "fit_stage",
    "plateaued",
    "predict_final",
    "select_top",
    "split_stages",
]

XI = 0.5
EPSILON = 0.01


def _rates(y: FloatArray) -> FloatArray:
    """``zeta_i`` for i = 1..n-1 (index i of the result is step i+1's rate)."""
    prev = np.abs(y[:-1])
    return np.asarray(np.abs(np.diff(y)) / np.where(prev > 0, prev, np.finfo(float).tiny), float)


def split_stages(
    y: Sequence[float] | FloatArray, xi: float = XI, epsilon: float = EPSILON
) -> list[int]:
    """0-based start indices of the stages of ``y`` (Eq. 7); always starts with 0."""
    arr = np.asarray(y, float)
    zeta = _rates(arr)  # zeta[i - 1] is the rate at index i
    starts = [0]
    for i in range(6, len(arr)):
        steady = np.all(zeta[i - 6 : i - 1] < epsilon)  # rates at i-5 .. i-1
        if zeta[i - 1] > xi and steady and i - starts[-1] >= 2:
            starts.append(i)
    return starts


def plateaued(y: Sequence[float] | FloatArray, epsilon: float = EPSILON, window: int = 5) -> bool:
    """The last ``window`` change rates are all below ``epsilon`` (converged)."""
    arr = np.asarray(y, float)
    return len(arr) > window and bool(np.all(_rates(arr)[-window:] < epsilon))


@dataclass(frozen=True)
class StageFit:
    """Eq. 4 coefficients ``(a0, a1, a2, a3)`` of one stage starting at step ``start`` (1-based)."""

    start: int
    coef: tuple[float, float, float, float]

    def __call__(self, k: FloatArray | float) -> FloatArray:
        a0, a1, a2, a3 = self.coef
        kk = np.asarray(k, float) - self.start + 1
        out: Any = 1.0 / np.maximum(a0 * kk**2 + a1 * kk + a2, 1e-12) + a3
        return np.asarray(out, float)


def fit_stage(steps: FloatArray, y: FloatArray) -> StageFit:
    """Non-negative least squares fit of Eq. 4 to one stage (``steps`` 1-based, absolute)."""
    start = int(steps[0])
    kk = steps - start + 1
    y_end = float(np.min(y))
    a3 = max(0.0, y_end * 0.9)
    head = max(float(y[0]) - a3, 1e-6)
    x0 = np.array([1e-3 / head, 0.5 / head, 1.0 / head, a3])

    def residual(a: FloatArray) -> FloatArray:
        return np.asarray(1.0 / np.maximum(a[0] * kk**2 + a[1] * kk + a[2], 1e-12) + a[3] - y)

    if len(y) < 2:
        return StageFit(start, (0.0, 0.0, 1e12, float(y[0])))
    sol = least_squares(residual, x0, bounds=(0.0, np.inf), method="trf", max_nfev=2000)
    a = sol.x
    return StageFit(start, (float(a[0]), float(a[1]), float(a[2]), float(a[3])))


def predict_final(
    y: Sequence[float] | FloatArray,
    max_trial_steps: int,
    *,
    staged: bool = True,
    xi: float = XI,
    epsilon: float = EPSILON,
) -> float:
    """Predicted metric at ``max_trial_steps`` from the observed ``y`` (steps 1..len(y)).

    ``staged``: EarlyCurve (fit the last stage of Eq. 7's split); False: one stage over all
    points (the SLAQ-style single fit). A plateaued curve predicts its last value.
    """
    arr = np.asarray(y, float)
    if len(arr) == 0:
        raise ValueError("no observed points to predict from")
    if not np.all(np.isfinite(arr)):
        return float("inf")  # a diverged trial: worst possible
    if plateaued(arr, epsilon) or len(arr) >= max_trial_steps:
        return float(arr[-1])
    start = split_stages(arr, xi, epsilon)[-1] if staged else 0
    steps = np.arange(start + 1, len(arr) + 1, dtype=float)
    fit = fit_stage(steps, arr[start:])
    return float(fit(float(max_trial_steps)))


def select_top(predictions: Sequence[float], mcnt: int) -> list[int]:
    """Indices of the ``mcnt`` trials with the lowest predicted final metric (Alg. 1 l. 52-53)."""
    order = np.argsort(np.asarray(predictions, float), kind="stable")
    return [int(i) for i in order[:mcnt]]
