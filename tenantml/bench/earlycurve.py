"""``tenantml spot earlycurve``: EarlyCurve vs a single-stage fit on recorded learning curves.

For every curve of length L (its ``max_trial_steps``) and every theta, both predictors see the
first ``max(2, floor(theta L))`` points and predict the metric at step L. Reported per theta:

- ``mre``: mean over curves of ``|predicted - final| / |final|`` (original metric units);
- ``top1`` / ``top3``: over tuning problems, how often the configuration with the best final
  metric is the predicted best / among the predicted best three (SpotTune's Fig. 8c). A group
  with more than 16 curves (Table II has 16 configurations per algorithm) is sampled as
  ``draws`` seeded problems of 16 of its curves.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Sequence

import numpy as np

from policy.seer.tuning import Curves
from policy.spot.earlycurve import predict_final
from tenantml.bench._pool import in_order

__all__ = ["DEFAULT_THETAS", "evaluate"]

DEFAULT_THETAS = tuple(round(0.1 * i, 1) for i in range(1, 11))
PROBLEM_SIZE = 16


def _loss_form(values: Sequence[np.ndarray], maximize: bool) -> tuple[list[np.ndarray], float]:
    """Curves as positive 'lower is better' series: the metric, or ``c - metric``."""
    if not maximize:
        return [np.asarray(v, float) for v in values], 0.0
    top = max(float(np.max(v)) for v in values)
    c = 1.0 if top <= 1.0 else top * 1.01
    return [c - np.asarray(v, float) for v in values], c


_METHODS = {"earlycurve": True, "single_stage": False}  # name -> staged


def _predict_theta(args: tuple[Curves, float, bool, float, float]) -> dict[str, np.ndarray]:
    """Predictions (n_curves,) of both methods at one theta, in loss form."""
    curves, theta, maximize, xi, epsilon = args
    ys, _ = _loss_form(curves.values, maximize)
    out = {}
    for name, staged in _METHODS.items():
        pred = np.empty(len(ys))
        for b, y in enumerate(ys):
            n = min(len(y), max(2, int(math.floor(theta * len(y) + 1e-9))))
            pred[b] = predict_final(y[:n], len(y), staged=staged, xi=xi, epsilon=epsilon)
        out[name] = pred
    return out


def _predict_groups(
    sets: dict[str, Curves],
    thetas: Sequence[float],
    maximize: bool,
    xi: float,
    epsilon: float,
    jobs: int | None,
    on_step: Callable[[], None],
) -> list[dict[str, np.ndarray]]:
    """Per group: predictions (n_theta, n_curves) of both methods, plus the true finals, in
    loss form. One (group, theta) per task; ``on_step`` after each."""
    out = []
    for c in sets.values():
        ys, _ = _loss_form(c.values, maximize)
        group = {"final": np.array([y[-1] for y in ys])}
        out.append(group | {name: np.empty((len(thetas), len(ys))) for name in _METHODS})
    keys = [(g, a) for g in range(len(sets)) for a in range(len(thetas))]
    work = [(c, theta, maximize, xi, epsilon) for c in sets.values() for theta in thetas]
    for (g, a), row in zip(keys, in_order(_predict_theta, work, jobs), strict=True):
        for name in _METHODS:
            out[g][name][a] = row[name]
        on_step()
    return out


def evaluate(
    sets: dict[str, Curves],
    thetas: Sequence[float] = DEFAULT_THETAS,
    *,
    maximize: bool = False,
    draws: int = 200,
    seed: int = 0,
    jobs: int | None = None,
    xi: float = 0.5,
    epsilon: float = 0.01,
    on_step: Callable[[], None] | None = None,
) -> dict[str, object]:
    """``{"theta": {"0.7": {"earlycurve": {"mre", "top1", "top3"}, "single_stage": {...}}}}``.

    The predictions run in ``jobs`` processes (default: all cores), one (group, theta) each.
    ``on_step``: called as each (group, theta)'s predictions (both methods, every curve of
    the group) arrive, in order: ``len(sets) x len(thetas)`` times in all; the scoring after
    them is quick and not a step."""
    for t in thetas:
        if not 0 < t <= 1:
            raise ValueError(f"theta {t} is not valid: use values in (0, 1]")
    preds = _predict_groups(sets, thetas, maximize, xi, epsilon, jobs, on_step or (lambda: None))
    rng = np.random.default_rng(seed)
    problems: list[tuple[int, np.ndarray]] = []  # (group index, curve indices)
    for g, c in enumerate(sets.values()):
        if len(c) <= PROBLEM_SIZE:
            problems.append((g, np.arange(len(c))))
        else:
            problems += [(g, rng.choice(len(c), PROBLEM_SIZE, replace=False)) for _ in range(draws)]
    result: dict[str, dict[str, dict[str, float]]] = {}
    for a, theta in enumerate(thetas):
        row: dict[str, dict[str, float]] = {}
        for method in _METHODS:
            errors = []
            for c, pr in zip(sets.values(), preds, strict=True):
                _, shift = _loss_form(c.values, maximize)
                true = np.array([v[-1] for v in c.values], float)
                guess = shift - pr[method][a] if maximize else pr[method][a]
                denom = np.where(np.abs(true) > 0, np.abs(true), np.nan)
                errors.append(np.abs(guess - true) / denom)
            err = np.concatenate(errors)
            err = err[np.isfinite(err)]
            hits1 = hits3 = 0
            for g, idx in problems:
                final = preds[g]["final"][idx]
                pred = preds[g][method][a][idx]
                best = int(np.argmin(final))
                ranked = np.argsort(pred, kind="stable")
                hits1 += int(ranked[0] == best)
                hits3 += int(best in ranked[:3])
            row[method] = {
                "mre": float(np.mean(err)) if len(err) else math.nan,
                "top1": hits1 / len(problems),
                "top3": hits3 / len(problems),
            }
        result[f"{theta:g}"] = row
    return {
        "theta": result,
        "problems": len(problems),
        "curves": sum(len(c) for c in sets.values()),
    }
