"""SpotTune's workflow (shared/papers/004, Alg. 1) replayed on real spot price traces, and the
baselines of Sec. IV-A4 (one spot instance that is never revoked, cheapest or fastest) plus
on-demand.

Clock: the markets' 1-minute grid. Every hyperparameter setting ``hp`` is a trial with a recorded
metric curve (one value per step) and a true speed per instance type (seconds per step). SpotTune
runs every trial on its own instance, chosen by GETBESTINST (:func:`policy.spot.best_instance`)
with the speed matrix ``M`` it has *measured so far* (initialised ``C0 / CPUs``, updated from the
runs, Alg. 1 line 12 and 36). Each minute (Alg. 1 lines 20-37, the paper polls every 10 s):

- a revocation notice arrives 2 minutes before the price exceeds the trial's maximum price: the
  trial checkpoints and waits for a new instance; AWS revokes the instance and, within its first
  hour, refunds it;
- a trial at ``theta * max_trial_steps`` checkpoints, shuts down and is finished;
- a trial on the same instance for an hour checkpoints, shuts down and is re-deployed (so the
  next hour is chosen again, and a revocation there would again be free).

A new instance starts training after ``restore_min`` minutes (boot, restore from S3). When every
trial is finished, EarlyCurve predicts each final metric and the top ``mcnt`` continue to
``max_trial_steps`` the same way (Alg. 1 lines 48-53).
"""

from __future__ import annotations

import math
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field

import numpy as np

from policy._types import FloatArray
from policy.spot._market import Market, best_instance, instance_cost
from policy.spot.earlycurve import predict_final, select_top

__all__ = ["Trial", "TuneOutcome", "single_instance", "spottune"]

Revocation = Callable[[Market, int, float], float]

NOTICE_MIN = 2


@dataclass(frozen=True)
class Trial:
    """One hyperparameter setting: ``curve`` (max_trial_steps,) metric per step (lower is
    better); ``seconds_per_step[j]``: its true speed on market ``j``'s instance type."""

    name: str
    curve: FloatArray
    seconds_per_step: tuple[float, ...]

    @property
    def max_trial_steps(self) -> int:
        return len(self.curve)


@dataclass
class TuneOutcome:
    """``cost`` USD, ``jct_h`` hours from submission to the selected model(s), ``selected``
    trial indices, ``best_true``: whether the truly best trial is among them; ``free_steps``:
    share of steps run on instances AWS refunded; ``checkpoints``: checkpoint/restores done;
    ``revocations``: notices received."""

    method: str
    cost: float
    jct_h: float
    selected: list[int]
    best_true: bool
    steps: float = 0.0
    free_steps: float = 0.0
    checkpoints: int = 0
    revocations: int = 0
    instance_hours: float = 0.0
    log: list[tuple[int, str, str]] = field(default_factory=list)


@dataclass
class _Run:
    market: int
    max_price: float
    start: int
    ready: int
    steps_here: float = 0.0


def _run_phase(
    trials: Sequence[Trial],
    active: Sequence[int],
    progress: list[float],
    target: Callable[[int], float],
    markets: Sequence[Market],
    t0: int,
    revocation: Revocation,
    rng: np.random.Generator,
    speed: list[list[float]],
    out: TuneOutcome,
    restore_min: int,
) -> int:
    """Alg. 1 lines 15-46 for the trials in ``active``; returns the minute all are done."""
    horizon = min(len(m.prices) for m in markets)
    runs: dict[int, _Run] = {}
    waiting = [i for i in active if progress[i] < target(i)]
    t = t0
    while waiting or runs:
        if t >= horizon - NOTICE_MIN - 1:
            raise ValueError(
                f"the price traces end before the tuning job does (minute {t}); start earlier "
                "or use fewer steps"
            )
        for i, run in list(runs.items()):
            m = markets[run.market]
            if t >= run.ready:  # one minute of training
                sps = trials[i].seconds_per_step[run.market]
                gain = min(60.0 / sps, target(i) - progress[i])
                progress[i] += gain
                run.steps_here += gain
                speed[i][run.market] = sps  # UPDATEMETRICS (line 36): measured s/step
            notice = bool(np.any(m.prices[t + 1 : t + 1 + NOTICE_MIN] > run.max_price))
            done = progress[i] >= target(i) - 1e-9
            hour = t + 1 - run.start >= 60
            if notice or done or hour:
                end = t + 1 + (NOTICE_MIN if notice and not done else 0)
                revoked = notice and not done
                paid = instance_cost(m.prices, run.start, end, revoked)
                out.cost += paid
                out.instance_hours += (end - run.start) / 60.0
                if paid == 0.0:
                    out.free_steps += run.steps_here
                out.steps += run.steps_here
                out.checkpoints += 1
                out.revocations += int(revoked)
                del runs[i]
                if not done:
                    waiting.append(i)
                    out.log.append((t, trials[i].name, "revoked" if revoked else "hourly"))
        for i in waiting:  # lines 38-44
            j, max_price, _ = best_instance(markets, t + 1, speed[i], revocation, rng)
            runs[i] = _Run(j, max_price, t + 1, t + 1 + restore_min)
        waiting = []
        t += 1
    return t


def spottune(
    trials: Sequence[Trial],
    markets: Sequence[Market],
    start: int,
    revocation: Revocation,
    *,
    theta: float = 0.7,
    mcnt: int = 1,
    c0: float = 1.0,
    restore_min: int = 1,
    seed: int = 0,
) -> TuneOutcome:
    """Alg. 1 from minute ``start``; ``revocation(market, t, max_price)`` is RevPred (or a peer)."""
    if not 0 < theta <= 1:
        raise ValueError(f"theta {theta} is not valid: use (0, 1]")
    rng = np.random.default_rng(seed)
    out = TuneOutcome(f"spottune-{theta:g}", 0.0, 0.0, [], False)
    speed = [[c0 / max(1, m.cpus) for m in markets] for _ in trials]  # line 12
    progress = [0.0] * len(trials)
    stop = [max(1.0, math.floor(theta * t.max_trial_steps)) for t in trials]
    end = _run_phase(
        trials,
        range(len(trials)),
        progress,
        lambda i: stop[i],
        markets,
        start,
        revocation,
        rng,
        speed,
        out,
        restore_min,
    )
    predictions = [
        predict_final(t.curve[: int(progress[i])], t.max_trial_steps) for i, t in enumerate(trials)
    ]
    chosen = (
        select_top(predictions, mcnt)
        if theta < 1
        else select_top([float(t.curve[-1]) for t in trials], mcnt)
    )
    end = _run_phase(
        trials,
        chosen,
        progress,
        lambda i: float(trials[i].max_trial_steps),
        markets,
        end,
        revocation,
        rng,
        speed,
        out,
        restore_min,
    )
    out.jct_h = (end - start) / 60.0
    out.selected = chosen
    out.best_true = int(np.argmin([t.curve[-1] for t in trials])) in chosen
    return out


def single_instance(
    trials: Sequence[Trial],
    market: Market,
    market_index: int,
    start: int,
    *,
    on_demand: bool = False,
    label: str = "single-spot",
) -> TuneOutcome:
    """Every trial to ``max_trial_steps`` one after another on one instance that is never
    revoked (Sec. IV-A4: a maximum price far above the market), paying the market price per
    minute, or the on-demand price."""
    minutes = sum(t.max_trial_steps * t.seconds_per_step[market_index] / 60.0 for t in trials)
    end = start + int(math.ceil(minutes))
    if end >= len(market.prices):
        raise ValueError("the price trace ends before the single-instance run does")
    cost = (
        market.on_demand * minutes / 60.0
        if on_demand
        else float(market.prices[start:end].sum()) / 60.0
    )
    best = int(np.argmin([t.curve[-1] for t in trials]))
    return TuneOutcome(
        label,
        cost,
        minutes / 60.0,
        [best],
        True,
        steps=float(sum(t.max_trial_steps for t in trials)),
        instance_hours=minutes / 60.0,
    )
