"""Elastic hyperparameter-tuning simulator on recorded learning curves (papers/003, Sec. 6).

A tuning problem is a :class:`Curves` set: each curve is one configuration, with the metric
(higher is better) measured after ``times[c][j]`` units of training on **one** resource. A trial
trained with ``p`` resources for wall time ``t`` advances ``lambda(p) * t`` along its curve
(the paper's Sec. 4 model ``l(x, lambda(p) t)``); its metric is the last evaluation reached, or
``Curves.untrained`` before the first. A curve that ends (its run finished) stops improving and
frees its resources.

Methods, all on this simulator, with deadline ``T`` and budget ``B`` (resource-time):

- ``seer``: :func:`policy.seer.plan` executed stage by stage (Alg. 1);
- ``seer-fill``: the same with :func:`policy.seer.fill`'s plan, which spends what Alg. 1's
  floors leave of ``B`` (issue 19, item 2);
- ``random``: one configuration for all of ``T`` on ``floor(B/T)`` resources;
- ``asha``: asynchronous successive halving (Li et al. 2020, Alg. 2) on a fixed cluster of
  ``n = floor(B/T)`` workers, rungs in evaluations (epochs);
- ``hypersched``: ASHA until a new trial could no longer reach the leaders' rung by the deadline,
  then every freed worker joins the best trial, which speeds up by ``lambda`` (Liaw et al. 2019's
  deadline-aware exploit phase, as we implement it);
- ``bohb``: Hyperband brackets one after another on the fixed cluster, synchronous SH inside a
  bracket, configurations proposed by a model-based sampler (TPE from ``tenantml.bench``; uniform
  when none is given, which is plain Hyperband);
- ``e-hyperband``: every Hyperband bracket at once with one resource per trial, ``R`` the largest
  maximum resource (time) that fits the deadline and the budget (Sec. 6.3);
- ``e-grid``: ``T/2`` exploring with ``p_min`` per trial, ``T/2`` training the best with ``p_max``
  (Sec. 6.3);
- ``replan``: SEER-fill's plan, re-planned after every stage from the partial curves observed
  (:mod:`policy.seer.replan`, issue 19 item 3).

The result of a run is the metric of the model the method returns at the deadline.
"""

from __future__ import annotations

import heapq
import math
from collections.abc import Callable
from dataclasses import dataclass, field

import numpy as np

from policy.seer._plan import eliminate, fill, plan
from policy.seer._sim import (
    ConfigSampler,
    Curves,
    Outcome,
    PowerScaling,
    SamplerFactory,
    Trials,
    TuningSettings,
    UniformSampler,
    power_scaling,
    train_stage,
)
from policy.seer.replan import e_grid_split, replan

__all__ = [
    "METHODS",
    "ConfigSampler",
    "Curves",
    "Outcome",
    "SamplerFactory",
    "TuningSettings",
    "PowerScaling",
    "UniformSampler",
    "max_resource",
    "power_scaling",
    "run_method",
]


def _seer(
    c: Curves,
    T: float,
    B: float,
    rng: np.random.Generator,
    s: TuningSettings,
    *,
    filled: bool = False,
) -> Outcome:
    """SEER's plan executed stage by stage; ``filled``: :func:`policy.seer.fill`'s plan, whose
    survivors are the stage's best trials over all brackets (line 9 keeps them per bracket)."""
    t_min = s.t_min or c.epoch_time
    p = plan(T, B, eta=s.eta, v=s.v, p_min=s.p_min, p_max=s.p_max, t_min=t_min)
    if filled:
        p = fill(p)
    tr = Trials(c, s.scaling)
    sampler = UniformSampler(len(c), rng)
    ids = [str(tr.new(sampler.sample())) for _ in range(p.sampled_trials)]
    alive = ids
    final: list[str] = []
    for k, stage in enumerate(p.stages):
        groups = train_stage(tr, stage, alive)
        losses = {t: -tr.value(int(t)) for g in groups for t in g}
        final = [t for g in groups for t in g]
        if k + 1 < len(p.stages):
            if filled:  # assign_stage keeps the next stage's best over all brackets
                alive = final
            else:
                nxt = {b.bracket: b.trials for b in p.stages[k + 1].brackets}
                keep = [nxt.get(b.bracket, 0) for b in stage.brackets]
                alive = eliminate(groups, losses, keep)
    best = tr.best([int(t) for t in final])
    return Outcome("seer-fill" if filled else "seer", tr.value(best), len(ids), tr.paid)


def _random(c: Curves, T: float, B: float, rng: np.random.Generator, s: TuningSettings) -> Outcome:
    p = max(1, int(B // T))
    tr = Trials(c, s.scaling)
    t = tr.new(UniformSampler(len(c), rng).sample())
    tr.train(t, min(T, B / p), p)
    return Outcome("random", tr.value(t), 1, tr.paid)


def max_resource(c: Curves, T: float, s: TuningSettings) -> int:
    """Largest evaluation count one worker reaches by the deadline on a median curve: the
    maximum resource R of ASHA, HyperSched and BOHB (their papers set R per experiment; a
    longer R is never reached before ``T``)."""
    return int(min(c.max_evals, max(1, T * s.scaling(1) // c.epoch_time)))


def _rungs(top: int, eta: float) -> list[int]:
    """Rung sizes in evaluations: 1, eta, eta^2, ... up to ``top``."""
    out, r = [], 1.0
    while r < top:
        out.append(max(1, int(round(r))))
        r *= eta
    out.append(top)
    return sorted(set(out))


def _asha(
    c: Curves,
    T: float,
    B: float,
    rng: np.random.Generator,
    s: TuningSettings,
    *,
    deadline_aware: bool,
) -> Outcome:
    """ASHA (Li et al., Alg. 2) on ``n = floor(B/T)`` one-resource workers; ``deadline_aware``
    adds HyperSched's exploit phase."""
    n = max(1, int(B // T))
    tr = Trials(c, s.scaling)
    sampler = UniformSampler(len(c), rng)
    rungs = _rungs(max_resource(c, T, s), s.eta)
    members: list[list[int]] = [[] for _ in rungs]  # trials recorded at each rung
    promoted: list[set[int]] = [set() for _ in rungs]
    started: dict[int, tuple[float, int]] = {}  # trial -> (start time, target rung)
    events: list[tuple[float, int, int]] = []  # (end time, trial, rung)
    # median single-worker time to reach each rung: a new trial started now competes with the
    # leaders only if it can reach their rung before the deadline
    rung_time = [
        float(np.median([c.time_of_eval(i, r) for i in range(len(c))])) / s.scaling(1)
        for r in rungs
    ]
    exploit: int | None = None
    exploit_p, exploit_since = 0, 0.0
    jobs: list[tuple[float, int, int]] = []

    idle = 0  # workers with nothing to do: no promotion and every configuration tried

    def start(now: float) -> None:
        nonlocal idle
        for k in range(len(rungs) - 2, -1, -1):
            ranked = sorted(members[k], key=tr.value, reverse=True)
            for t in ranked[: int(len(members[k]) // s.eta)]:
                if t not in promoted[k] and not tr.done(t):
                    promoted[k].add(t)
                    schedule(t, k + 1, now)
                    return
        if sampler.exhausted:  # a finite recorded space: ASHA has nothing new to try
            idle += 1
            return
        schedule(tr.new(sampler.sample()), 0, now)

    def schedule(t: int, k: int, now: float) -> None:
        target = c.time_of_eval(tr.config[t], rungs[k])
        duration = max(0.0, target - tr.progress[t]) / s.scaling(1)
        started[t] = (now, k)
        jobs.append((now, tr.config[t], k))
        heapq.heappush(events, (now + duration, t, k))

    def join_exploit(now: float) -> None:
        nonlocal exploit, exploit_p, exploit_since
        if exploit is None:
            exploit = tr.best()
            exploit_since = now
            if exploit in started:  # its running rung job merges into the exploit phase
                since, _ = started.pop(exploit)
                tr.train(exploit, now - since, 1)
                exploit_p = 1
        else:
            tr.train(exploit, now - exploit_since, exploit_p)
            exploit_since = now
        exploit_p += 1

    for _ in range(n):
        start(0.0)
    while events:
        end, t, k = heapq.heappop(events)
        if end > T:
            heapq.heappush(events, (end, t, k))
            break
        if t not in started:  # merged into the exploit phase
            continue
        since, _ = started.pop(t)
        tr.train(t, end - since, 1)
        members[k].append(t)
        leaders = max(k for k in range(len(rungs)) if members[k] or k == 0)
        waiting, idle = idle + 1, 0
        for _ in range(waiting):  # this worker, and any idle one: a promotion may exist now
            if deadline_aware and (exploit is not None or T - end < rung_time[leaders]):
                join_exploit(end)
            else:
                start(end)
    for t, (since, _) in list(started.items()):
        tr.train(t, T - since, 1)
    if exploit is not None:
        tr.train(exploit, T - exploit_since, exploit_p)
    name = "hypersched" if deadline_aware else "asha"
    return Outcome(name, tr.value(tr.best()), len(tr.config), n * T, tuple(jobs))


def _hyperband_brackets(max_r: float, min_r: float, eta: float) -> list[list[tuple[int, float]]]:
    """Hyperband's brackets (Li et al. 2018, Alg. 1): per bracket, rounds of (trials, resource)."""
    s_max = max(0, int(math.floor(math.log(max(max_r / min_r, 1.0), eta) + 1e-9)))
    out = []
    for s in range(s_max, -1, -1):
        n = int(math.ceil((s_max + 1) / (s + 1) * eta**s))
        r = max_r * eta ** (-s)
        out.append([(int(math.floor(n * eta ** (-i))), r * eta**i) for i in range(s + 1)])
    return out


@dataclass
class _Bracket:
    """A running Hyperband bracket: ``rounds`` of (trials kept, resource), the current round,
    its trials waiting for a worker, how many run, and those finished this round."""

    rounds: list[tuple[int, float]]
    round: int = 0
    waiting: list[int] = field(default_factory=list)
    running: int = 0
    finished: list[int] = field(default_factory=list)


def _bohb(c: Curves, T: float, B: float, rng: np.random.Generator, s: TuningSettings) -> Outcome:
    """Hyperband brackets on ``n = floor(B/T)`` one-resource workers, resources in evaluations.

    Synchronous SH inside a bracket (a round's survivors are chosen when its last job ends); an
    idle worker takes the next job of the oldest bracket with one waiting, else opens the next
    bracket of the Hyperband cycle, as parallel BOHB does (Falkner et al. 2018, Sec. 4.2).
    Configurations come from ``settings.bohb_sampler`` (TPE) and every result is told to it.
    """
    n = max(1, int(B // T))
    tr = Trials(c, s.scaling)
    sampler: ConfigSampler = (
        s.bohb_sampler(c, rng) if s.bohb_sampler else UniformSampler(len(c), rng)
    )
    cycle = _hyperband_brackets(float(max_resource(c, T, s)), 1.0, s.eta)
    brackets: list[_Bracket] = []
    events: list[tuple[float, int, int, float]] = []  # (end, trial, bracket, start)

    def dispatch(now: float) -> None:
        for _ in range(2):  # a waiting job, else a new bracket's first job
            for b, br in enumerate(brackets):
                if br.waiting:
                    t = br.waiting.pop(0)
                    target = c.time_of_eval(tr.config[t], max(1, round(br.rounds[br.round][1])))
                    need = max(0.0, target - tr.progress[t]) / s.scaling(1)
                    br.running += 1
                    heapq.heappush(events, (now + need, t, b, now))
                    return
            if sampler.exhausted:  # a finite recorded space: nothing new to bracket
                return
            rounds = cycle[len(brackets) % len(cycle)]
            first = [tr.new(sampler.sample()) for _ in range(max(1, rounds[0][0]))]
            brackets.append(_Bracket(rounds, waiting=first))

    for _ in range(n):
        dispatch(0.0)
    while events:
        end, t, b, since = heapq.heappop(events)
        tr.train(t, min(end, T) - since, 1)
        if end > T:
            continue
        sampler.tell(tr.config[t], tr.value(t), c.evals(tr.config[t], tr.progress[t]))
        br = brackets[b]
        br.running -= 1
        br.finished.append(t)
        if br.running == 0 and not br.waiting and br.round + 1 < len(br.rounds):
            ranked = sorted(br.finished, key=tr.value, reverse=True)
            br.round += 1
            br.waiting, br.finished = ranked[: max(1, br.rounds[br.round][0])], []
        dispatch(end)
    return Outcome("bohb", tr.value(tr.best()), len(tr.config), n * T)


def _e_hyperband(
    c: Curves, T: float, B: float, rng: np.random.Generator, s: TuningSettings
) -> Outcome:
    """All Hyperband brackets in parallel, ``p_min`` resources per trial, resource = time:
    ``R`` is the largest maximum time per trial with every bracket done by ``T`` (with resume a
    bracket lasts ``R / lambda(p_min)``) and total cost within ``B``."""
    t_min = s.t_min or c.epoch_time
    speed = s.scaling(s.p_min)

    def cost(max_r: float) -> float:
        total = 0.0
        for bracket in _hyperband_brackets(max_r, t_min, s.eta):
            prev = 0.0
            for m, r in bracket:
                total += m * (r - prev) / speed * s.p_min
                prev = r
        return total

    grid = np.geomspace(min(t_min, T * speed), T * speed, 256)
    feasible = [r for r in grid if cost(float(r)) <= B]
    max_r = float(feasible[-1]) if feasible else float(grid[0])
    tr = Trials(c, s.scaling)
    sampler = UniformSampler(len(c), rng)
    finals: list[int] = []
    for bracket in _hyperband_brackets(max_r, t_min, s.eta):
        alive = [tr.new(sampler.sample()) for _ in range(max(1, bracket[0][0]))]
        prev = 0.0
        for i, (m, r) in enumerate(bracket):
            alive = sorted(alive, key=tr.value, reverse=True)[: max(1, m)] if i else alive
            for t in alive:
                tr.train(t, (r - prev) / speed, s.p_min)
            prev = r
        finals.extend(alive)
    best = tr.best(finals)
    return Outcome("e-hyperband", tr.value(best), len(tr.config), tr.paid)


def _e_grid(c: Curves, T: float, B: float, rng: np.random.Generator, s: TuningSettings) -> Outcome:
    """``T/2`` exploring with ``p_min`` per trial, then ``T/2`` for the best with ``p_max``
    (lowered until at least one exploring trial fits the budget)."""
    half = T / 2
    p_top, n = e_grid_split(T, B, s.p_min, s.p_max)
    tr = Trials(c, s.scaling)
    sampler = UniformSampler(len(c), rng)
    explored = [tr.new(sampler.sample()) for _ in range(n)]
    for t in explored:
        tr.train(t, half, s.p_min)
    best = tr.best(explored)
    tr.train(best, half, p_top)
    return Outcome("e-grid", tr.value(best), n, tr.paid)


_Method = Callable[[Curves, float, float, np.random.Generator, TuningSettings], Outcome]

METHODS: dict[str, _Method] = {
    "seer": _seer,
    "seer-fill": lambda c, T, B, r, s: _seer(c, T, B, r, s, filled=True),
    "random": _random,
    "asha": lambda c, T, B, r, s: _asha(c, T, B, r, s, deadline_aware=False),
    "hypersched": lambda c, T, B, r, s: _asha(c, T, B, r, s, deadline_aware=True),
    "bohb": _bohb,
    "e-hyperband": _e_hyperband,
    "e-grid": _e_grid,
    "replan": replan,
}


def run_method(
    method: str,
    curves: Curves,
    deadline: float,
    budget: float,
    seed: int,
    settings: TuningSettings | None = None,
) -> Outcome:
    """One simulated tuning run of ``method`` (a key of :data:`METHODS`) with its own seed."""
    if method not in METHODS:
        raise ValueError(f"unknown method {method!r}; valid: {', '.join(METHODS)}")
    rng = np.random.default_rng(seed)
    s = settings or TuningSettings()
    # ASHA, HyperSched and BOHB keep floor(B/T) >= 1 workers busy until T, and E-Grid at least
    # p_min GPUs: with a budget below that they spent up to 3.3x B. They stop when it is spent.
    least = {"asha": 1, "hypersched": 1, "bohb": 1, "e-grid": s.p_min}.get(method)
    if least is not None and budget < least * deadline:
        deadline = budget / least
    return METHODS[method](curves, deadline, budget, rng, s)
