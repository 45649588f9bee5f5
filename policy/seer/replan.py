"""``replan``: an elastic tuner that re-plans the rest of its deadline and budget after every
stage from the partial learning curves it has observed (issue 19, item 3). ``seer`` stays the
paper's Alg. 1; this method starts from :func:`starting_plan`: SEER-fill's plan, or E-Grid's
(Sec. 6.3: ``T/2`` exploring on ``p_min``, then the best on up to ``p_max``) when SEER's plan
bets on a single finalist chosen after one short stage (see there).

Notation as in :mod:`policy.seer._plan`: deadline ``T``, budget ``B`` (resource-time), ``p_min``/
``p_max`` resources per trial, ``lambda(p)`` the speed-up on ``p`` resources. At the end of stage
``k`` (time ``t_k``) the tuner has ``T_r = T - t_k`` and ``B_r = B - paid`` left, and compares:

- ``continue``: the rest of the filled SEER plan (:func:`policy.seer.fill`; Alg. 1 lines 6-11,
  survivors the best over all brackets);
- ``exploit-k`` (k = 1, 2, 4): the k trials with the best predicted outcome each train on
  ``g_k = min(p_max, floor(B_r / (k T_r)))`` resources until ``T`` (the exploit half of E-Grid,
  Sec. 6.3, at any point of the run and with what is really left of ``B``).

Each is scored by its *predicted* outcome: the best predicted metric among the trials it trains
to the end. A trial's metric after more training is extrapolated from its own curve so far with
EarlyCurve's fit (papers/004, Eq. 4, on the metric turned into a positive loss, last stage of
Eq. 7's split) at the evaluation count it would reach, from the spacing of its evaluations so
far; a trial with fewer than ``MIN_POINTS`` evaluations is predicted to stay where it is. The
rest of the SEER plan is scored by running its stages on those predictions (elimination by
predicted metric). An ``exploit-k`` must be predicted ``MARGIN`` (relative) better than the
plan, since it gives up the plan's other trials; so with nothing to extrapolate from the tuner
is SEER-fill. An ``exploit-k`` choice is final: it trains its trials to the deadline. What the
simulated curves left unpaid of ``B`` goes to the rest of the plan at each re-plan
(:func:`policy.seer.fill` with stage 1 capped at the trials alive).

Where trials' recipes end before their stage does (a simulated curve ends; its GPUs are free
from then on), a new plan (:func:`starting_plan` on what is left of ``T`` and ``B``) starts as
soon as the first of the last stage's trials has ended, while the others finish; so it does
with the budget an ``exploit-k`` cannot use (``p_max`` caps its trials' resources), from the
decision on. The new plan is on new configurations; on the eliminated trials that have not
finished their recipe, resumed from their checkpoints, the best first, once a finite space (a
recorded curve set) has been tried, or when a new configuration would get less than
``RESUME_FACTOR`` times the training the best of them already has (the new plan's finalist,
on its largest brackets: near the deadline a new configuration cannot catch up); again until
the deadline, the budget or the trials run out. With too little left for any plan, the best
of them trains on what is left (``min(p_max, B_r / T_r)`` resources) to the deadline.

A trial that trains to the end of a plan (its last stage, or an exploit) is stopped at the
evaluation where it *diverges* (:func:`diverged_at`: back at or below its first evaluation
after having risen ``DIVERGED_GAIN`` of the way to the ceiling; a learning rate that blew up),
its GPUs going to a new plan as above, and it is never resumed. On the step-LR curves at 4x and
0.25x, E-Grid's finalist, a high learning rate that leads after 3.75 epochs, ends at chance in
8 of 20 runs on one group; stopped, the eliminated trials resume in its place.
This is how it spends what it is given (issue 19, item 2) where the plan's own trials cannot
use it. No configuration is trained twice: a plan that samples more trials than are untried
is cut to them (:func:`at_most`, the excess dropped from the fewest resources per trial) and
filled again.

It returns the best trial of the whole run, each at its last evaluation, where Alg. 1 returns
the best of its last stage: an eliminated trial's checkpoint is still there, and a finalist
chosen on a short first stage can diverge afterwards (on ``steplr-digits`` at 4x and 0.25x a
high-learning-rate finalist ended at chance, loss 2.3, in 3 of 6 seeds).

Neither choice passes ``T`` or ``B`` (Fact 1): ``g_k k T_r <= B_r`` and the plan's own stages
fit what is left (the simulated trial pays only while its curve lasts, so ``paid`` is at most
the plan's cost); a new plan is made for ``T - now`` and ``B - paid``, Fact 1 of
:func:`starting_plan`. A metric with a known bound (``Curves.upper``: 0 for a negated loss)
caps the predictor's ceiling, so a trial that diverges cannot stretch it.
"""

from __future__ import annotations

from collections.abc import Hashable, Sequence
from dataclasses import dataclass, replace
from functools import cached_property
from typing import Generic, TypeVar

import numpy as np

from policy.seer._plan import Plan, PlanError, Stage, StageBracket, fill, plan
from policy.seer._sim import (
    Curves,
    Outcome,
    Trials,
    TuningSettings,
    UniformSampler,
    train_stage,
)
from policy.spot.earlycurve import StageFit, fit_stage, split_stages

__all__ = [
    "MIN_POINTS",
    "Choice",
    "CurvePredictor",
    "at_most",
    "ceiling_of",
    "choose",
    "diverged_at",
    "e_grid_split",
    "replan",
    "starting_plan",
]

#: a trial's id: an index in the simulator, a name (``trial-003``) in the live runner
K = TypeVar("K", bound=Hashable)

MIN_POINTS = 3  # evaluations a trial needs before its curve is extrapolated
HORIZON = 4  # extrapolate to at most this many times the evaluations seen (then hold)
MARGIN = 0.05  # exploiting must be predicted this share better than the plan (its bet is final)
HEADROOM = 0.1  # the metric's ceiling: the best seen + this share of the range seen
DIVERGED_GAIN = 0.1  # a trial that rose this share of the way to the ceiling and lost it all
EXPLOIT_WIDTHS = (1, 2, 4)
RESUME_FACTOR = 2.0  # a new configuration must get this times the best resumable's training


@dataclass(frozen=True)
class CurvePredictor:
    """Predicted metric of one trial after more training, from its evaluations so far.

    ``times``/``values``: (m,) its observed evaluations (single-resource time, metric, higher
    is better); ``length``: evaluations its recipe has (a trial stops improving at its end);
    ``ceiling``: an upper bound of the metric, turning it into the positive loss
    ``ceiling - value`` that Eq. 4 fits.
    """

    times: np.ndarray
    values: np.ndarray
    length: int
    ceiling: float

    @cached_property
    def _fit(self) -> StageFit | None:
        """Eq. 4 on the last stage of the loss ``ceiling - value``, fitted once (a plan's
        prediction asks each trial many times); None with too few points to extrapolate."""
        m = len(self.values)
        if m < MIN_POINTS:
            return None
        loss = self.ceiling - self.values
        start = split_stages(loss)[-1]
        if m - start < MIN_POINTS:
            return None
        return fit_stage(np.arange(start + 1, m + 1, dtype=float), loss[start:])

    def __call__(self, progress: float) -> float:
        """Metric after ``progress`` single-resource time (>= the observed part)."""
        m = len(self.values)
        if m == 0:
            return float("-inf")
        if progress <= self.times[-1] or self._fit is None:
            return float(self.values[-1])
        spacing = (self.times[-1] - self.times[0]) / (m - 1)
        step = min(float(self.length), HORIZON * m, m + (progress - self.times[-1]) / spacing)
        return float(self.ceiling - float(self._fit(step)))


def ceiling_of(observed: Sequence[np.ndarray], upper: float = np.inf) -> float:
    """The metric's ceiling for `CurvePredictor`: the best of the trials' ``observed`` values
    plus ``HEADROOM`` of their range, at most ``upper`` (accuracy: 1); 1 with nothing seen."""
    if not any(len(v) for v in observed):
        return min(1.0, upper)
    pooled = np.concatenate([np.asarray(v, dtype=float) for v in observed])
    return float(min(upper, pooled.max() + HEADROOM * max(float(np.ptp(pooled)), 1e-3)))


def diverged_at(values: np.ndarray, ceiling: float, since: int = 1) -> int | None:
    """The first evaluation ``j >= since`` (0-based) at which a trial has *diverged*: its value
    is back at or below its first evaluation's, after it had risen ``DIVERGED_GAIN`` or more of
    the way from there to ``ceiling``; None if it never does. ``values``: (m,) its metric
    (higher is better). A trial still flat at its start (a warm-up) has not diverged; one whose
    learning rate blew up (a loss back at chance, or NaN read as -inf) has. On the 48 step-LR
    LeNet curves, whole and with their set's ceiling, it flags 9: 6 stay at chance to their
    end, 3 noisy ones (learning rate 0.1) come back later, to losses of 0.27-1.12."""
    v = np.nan_to_num(np.asarray(values, dtype=float), nan=-np.inf)
    if len(v) < 3:
        return None
    risen = np.maximum.accumulate(v)[:-1] >= v[0] + DIVERGED_GAIN * (ceiling - v[0])
    hits = np.flatnonzero(risen & (v[1:] <= v[0])) + 1
    hits = hits[hits >= since]
    return int(hits[0]) if len(hits) else None


@dataclass
class _Watcher:
    """``Trials.train`` for trials that train to the end of a plan (its last stage, or an
    exploit): a trial is stopped at the evaluation where it diverges (:func:`diverged_at` with
    ``ceiling``, checked at every evaluation as it arrives), and its GPUs are free from then on
    (the run's new plan takes them). Stopped trials join ``stopped`` (never resumed), with a
    line in ``decisions`` (times from ``start``)."""

    tr: Trials
    ceiling: float
    start: float
    stopped: set[int]
    decisions: list[str]

    def __call__(self, t: int, wall: float, p: int) -> float:
        """Train ``t`` on ``p`` resources for at most ``wall``; returns the wall time used."""
        tr, c = self.tr, self.tr.curves
        times, values = c.times[tr.config[t]], c.values[tr.config[t]]
        j = diverged_at(values, self.ceiling, since=c.evals(tr.config[t], tr.progress[t]))
        reach = tr.progress[t] + tr.scaling(p) * wall
        if j is None or times[j] > reach * (1 + 1e-12):
            return tr.train(t, wall, p)
        used = tr.train(t, (times[j] - tr.progress[t]) / tr.scaling(p), p)
        self.stopped.add(t)
        self.decisions.append(
            f"t={self.start + used:.4g}: trial {t} diverged ({tr.value(t):.4g}), stopped"
        )
        return used


def _ceiling(c: Curves, tr: Trials, ids: Sequence[int]) -> float:
    """:func:`ceiling_of` the evaluations trials ``ids`` have made so far."""
    seen = [c.values[tr.config[t]][: c.evals(tr.config[t], tr.progress[t])] for t in ids]
    return ceiling_of(seen, c.upper)


def _predictors(c: Curves, tr: Trials, ids: Sequence[int]) -> dict[int, CurvePredictor]:
    seen = {t: c.evals(tr.config[t], tr.progress[t]) for t in ids}
    ceiling = _ceiling(c, tr, ids)
    return {
        t: CurvePredictor(
            c.times[tr.config[t]][: seen[t]],
            c.values[tr.config[t]][: seen[t]],
            len(c.times[tr.config[t]]),
            ceiling,
        )
        for t in ids
    }


def _predict_plan(
    stages: Sequence[Stage],
    alive: Sequence[K],
    progress: dict[K, float],
    predict: dict[K, CurvePredictor],
    s: TuningSettings,
) -> float:
    """Predicted outcome of running ``stages`` on ``alive``: each stage keeps its capacity of
    trials with the best predicted metric, the best in the last bracket (Alg. 1 line 11)."""
    x = dict(progress)
    final = list(alive)
    for stage in stages:
        ranked = sorted(final, key=lambda t: predict[t](x[t]))
        ranked = ranked[max(0, len(ranked) - stage.trials) :]
        i = 0
        final = []
        for b in stage.brackets:
            for t in ranked[i : i + b.trials]:
                x[t] += s.scaling(b.gpus_per_trial) * (stage.end - stage.start)
                final.append(t)
            i += b.trials
    return max((predict[t](x[t]) for t in final), default=float("-inf"))


@dataclass(frozen=True)
class Choice(Generic[K]):
    """A re-planning decision: ``name`` ``continue`` or ``exploit-k``; ``predicted`` its
    predicted outcome, ``plan`` the plan's; ``trials`` and ``gpus`` (each) of an exploit."""

    name: str
    predicted: float
    plan: float
    trials: tuple[K, ...] = ()
    gpus: int = 0


def choose(
    stages: Sequence[Stage],
    progress: dict[K, float],
    predict: dict[K, CurvePredictor],
    left_t: float,
    left_b: float,
    s: TuningSettings,
) -> Choice[K]:
    """The continuation with the best predicted outcome for the trials alive (``progress``'s
    keys, with their single-resource progress), ``left_t`` time and ``left_b`` budget left:
    the rest of the plan (``stages``) or ``exploit-k`` (see the module docstring)."""
    alive = list(progress)
    keep = _predict_plan(stages, alive, progress, predict, s)
    best: Choice[K] = Choice("continue", keep, keep)
    for width in EXPLOIT_WIDTHS:
        g = int(min(s.p_max, left_b // (width * left_t)))
        if width > len(alive) or g < s.p_min:
            continue
        reach = {t: predict[t](progress[t] + s.scaling(g) * left_t) for t in alive}
        top = sorted(alive, key=lambda t: reach[t], reverse=True)[:width]
        value = max(reach[t] for t in top)
        if value > best.predicted + MARGIN * abs(best.predicted):
            best = Choice(f"exploit-{width}", value, keep, tuple(top), g)
    return best


def e_grid_split(T: float, B: float, p_min: int, p_max: float) -> tuple[int, int]:
    """E-Grid's plan (Sec. 6.3) for deadline ``T`` and budget ``B``: ``(p_top, n)``, ``n``
    trials exploring on ``p_min`` for ``T/2``, then the best on ``p_top`` for ``T/2``;
    ``p_top`` is ``p_max`` lowered until at least one exploring trial fits the budget."""
    half = T / 2
    p_top = int(min(p_max, max(p_min, B // half)))
    while p_top > p_min and B - p_top * half < p_min * half:
        p_top -= 1
    n = max(1, int((B - p_top * half) // (p_min * half)))
    return p_top, n


def starting_plan(
    T: float, B: float, *, eta: float, v: float, p_min: int, p_max: float, t_min: float
) -> Plan:
    """The plan the re-planning tuner starts from: SEER-fill's (Alg. 1-3 and
    :func:`policy.seer.fill`), unless that plan makes a single bet on the least information:
    one stage (no decision point at all: a random search of its stage-1 trials), or two whose
    last trains one trial chosen after a first stage shorter than ``MIN_POINTS * t_min`` (fewer
    minimum stage lengths than the curve predictor needs to extrapolate: in the simulator one
    evaluation per epoch; the live runner scores 4 times a stage, but such a stage is still a
    few epochs of training). Then it is E-Grid's plan (:func:`e_grid_split`) as two stages,
    whose decision point at ``T/2`` the tuner re-plans like any other (``origin`` ``e-grid``),
    if that plan is one: its halves at least ``t_min``, at least two configurations explored
    (with ``p_max = inf`` E-Grid explores one and exploits it: no choice), and its cost within
    ``B`` (Fact 1; E-Grid always explores one trial, even when ``B < p_min T``).

    Measured on the simulator (20 seeds, docs/seer.md): at the 0.25x deadline with a 4x budget
    SEER's finalist is chosen after 1.3-2.4 epochs, where the learning-rate-decay curves rank
    configurations poorly, and E-Grid's later choice wins (OPDA AlexNet, ConvNeXt, DeBERTa,
    step-LR LeNet); LCDB's 0.25x plans have one stage. With a first stage of 3.2 epochs (LCDB at
    4x and 1x, ConvNeXt at 4x and 0.5x) SEER's plan did as well or better, so it is kept.
    """
    p = plan(T, B, eta=eta, v=v, p_min=p_min, p_max=p_max, t_min=t_min)
    filled = fill(p)
    stages = filled.stages
    short = stages[0].end < MIN_POINTS * t_min * (1 - 1e-9) if stages else False
    bets_early = len(stages) == 1 or (len(stages) == 2 and stages[-1].trials == 1 and short)
    if not bets_early or T / 2 < t_min:
        return filled
    p_top, n = e_grid_split(T, B, p_min, p_max)
    if n < 2 or (n * p_min + p_top) * T / 2 > B * (1 + 1e-12):
        return filled
    explore = Stage(1, 0.0, T / 2, (StageBracket(p_min, n, 0),))
    exploit = Stage(2, T / 2, T, (StageBracket(p_top, 1, 1),))
    return replace(p, stages=(explore, exploit), origin="e-grid")


def at_most(p: Plan, n: int) -> Plan:
    """``p`` with at most ``n`` trials in its first stage: the excess is dropped from the
    brackets with the fewest resources per trial first (the best trials are placed in the
    others, Alg. 1 line 11); a later stage keeps no more trials than the one before it."""
    stages: list[Stage] = []
    cap = n
    for st in p.stages:
        kept: list[StageBracket] = []
        left = cap
        for b in sorted(st.brackets, key=lambda b: -b.gpus_per_trial):
            if left > 0:
                kept.append(replace(b, trials=min(b.trials, left)))
                left -= kept[-1].trials
        kept.sort(key=lambda b: b.bracket)
        if kept:
            stages.append(replace(st, brackets=tuple(kept)))
        cap = sum(b.trials for b in kept)
    return replace(p, stages=tuple(stages))


def _run_plan(
    c: Curves,
    tr: Trials,
    alive: list[int],
    p: Plan,
    s: TuningSettings,
    offset: float,
    decisions: list[str],
    stopped: set[int],
) -> tuple[float, list[int]]:
    """Run plan ``p`` (its times relative to ``offset``, the run's time when it starts) on the
    trials ``alive`` (``p``'s stage-1 trials, new or resumed), re-planning after every stage;
    appends each decision to ``decisions`` and each trial stopped because it diverged (in an
    exploit or the last stage) to ``stopped``. Returns when (relative) the first of its last
    trials was done, the end of the plan where none ended before it, and the trials still
    training until then (busy to the plan's end)."""
    T, B0 = p.T, tr.paid
    if p.origin != "seer":
        decisions.append(f"t={offset:.4g}: {p.origin}'s plan")
    stages = list(p.stages)
    for k in range(len(stages)):
        if k > 0:
            left_t, left_b = T - stages[k].start, p.B - (tr.paid - B0)
            # what the curves left unpaid goes to the rest of the plan (fill, capped at the
            # trials still alive: no new configuration joins after stage 1)
            rest = replace(p, B=left_b, stages=tuple(stages[k:]))
            stages[k:] = fill(rest, first_cap=len(alive)).stages
            progress = {t: tr.progress[t] for t in alive}
            predict = _predictors(c, tr, alive)
            choice = choose(stages[k:], progress, predict, left_t, left_b, s)
            now = offset + stages[k].start
            decisions.append(
                f"t={now:.4g} left T={left_t:.4g} B={left_b:.4g}: "
                f"{choice.name} (predicted {choice.predicted:.4g}; plan {choice.plan:.4g})"
            )
            if choice.trials:
                paid = tr.paid
                watch = _Watcher(tr, predict[choice.trials[0]].ceiling, now, stopped, decisions)
                used = [watch(t, left_t, choice.gpus) for t in choice.trials]
                busy = [t for t in choice.trials if not tr.done(t) and t not in stopped]
                if left_b - (tr.paid - paid) >= s.p_min * left_t:
                    # p_max caps the exploited trials' GPUs: the rest of B is free from now
                    return stages[k].start, busy
                return stages[k].start + min(used), busy
        before = {t: tr.progress[t] for t in alive}
        to_end: _Watcher | None = None
        if k == len(stages) - 1:  # its trials train to the plan's end: stop one that diverges
            start = offset + stages[k].start
            to_end = _Watcher(tr, _ceiling(c, tr, alive), start, stopped, decisions)
        groups = train_stage(tr, stages[k], [str(t) for t in alive], to_end)
        # filled plan: the next stage keeps the best over all brackets
        alive = [int(tid) for g in groups for tid in g]
    last = stages[-1]
    ran = zip(last.brackets, groups, strict=True)
    used = [
        (tr.progress[int(t)] - before[int(t)]) / s.scaling(b.gpus_per_trial)
        for b, g in ran
        for t in g
    ]
    busy = [t for t in alive if not tr.done(t) and t not in stopped]
    return last.start + min(used, default=last.end - last.start), busy


def _finalist_progress(p: Plan, s: TuningSettings) -> float:
    """Single-resource training a trial that survives every stage of ``p`` gets."""
    return sum(
        s.scaling(max(b.gpus_per_trial for b in st.brackets)) * (st.end - st.start)
        for st in p.stages
    )


def replan(c: Curves, T: float, B: float, rng: np.random.Generator, s: TuningSettings) -> Outcome:
    """One run of the re-planning tuner on the simulator (see the module docstring)."""
    t_min = s.t_min or c.epoch_time
    tr = Trials(c, s.scaling)
    sampler = UniformSampler(len(c), rng)
    decisions: list[str] = []
    busy: set[int] = set()  # trials that train until the end of the run
    stopped: set[int] = set()  # exploited trials that diverged: never resumed
    now = 0.0
    while now < T * (1 - 1e-9):
        left_t, left_b = T - now, B - tr.paid
        # new configurations while there are any; then eliminated trials that have not
        # finished their recipe, resumed from their checkpoints (the best first)
        resumable = sorted(
            (t for t in range(len(tr.config)) if t not in busy | stopped and not tr.done(t)),
            key=tr.value,
            reverse=True,
        )
        try:
            p = starting_plan(
                left_t, left_b, eta=s.eta, v=s.v, p_min=s.p_min, p_max=s.p_max, t_min=t_min
            )
        except PlanError:  # too little left for another plan: the best trial to the end
            g = int(min(s.p_max, left_b // left_t))
            if not resumable or g < s.p_min:
                break
            t = resumable[0]
            decisions.append(
                f"t={now:.4g} left T={left_t:.4g} B={left_b:.4g}: too little for a plan, "
                f"trial {t} resumed on {g}"
            )
            watch = _Watcher(tr, _ceiling(c, tr, range(len(tr.config))), now, stopped, decisions)
            used = watch(t, left_t, g)
            if t not in stopped:
                break
            now += used
            continue
        fresh = sampler.untried > 0 and (
            not resumable or _finalist_progress(p, s) >= RESUME_FACTOR * tr.progress[resumable[0]]
        )
        n = min(p.sampled_trials, sampler.untried if fresh else len(resumable))
        if n == 0:
            break
        if n < p.sampled_trials:  # a finite space: never train a configuration twice
            p = fill(at_most(p, n), first_cap=n)
        if fresh:
            alive, what = [tr.new(sampler.sample()) for _ in range(n)], "new configurations"
        else:
            alive, what = resumable[:n], "eliminated trials, resumed"
        if now > 0:
            decisions.append(
                f"t={now:.4g} left T={left_t:.4g} B={left_b:.4g}: unused budget, "
                f"a new plan on {n} {what}"
            )
        free_at, still = _run_plan(c, tr, alive, p, s, now, decisions, stopped)
        busy.update(still)
        if free_at <= 0:
            break
        now += free_at
    best = tr.best()  # of the whole run, not only of the last stage (module docstring)
    return Outcome("replan", tr.value(best), len(tr.config), tr.paid, decisions=tuple(decisions))
