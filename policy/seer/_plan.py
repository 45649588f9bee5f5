"""SEER planner: sequential elimination with elastic resources (shared/papers/003, Alg. 1-3).

Notation (paper, Sec. 3):

- ``T`` deadline (minutes), ``B`` budget (resource-minutes, e.g. GPU-minutes);
- ``eta`` elimination rate (> 1), ``v`` parallelism growth (>= 1), ``p_min``/``p_max`` integral
  resources per trial, ``t_min`` minimum time of a round (minutes);
- ``K`` rounds (stages) shared by every bracket, ``t1`` duration of round 1, round k lasts
  ``t1 * eta**(k-1)``;
- ``N[i]``/``P[i]`` trials launched in / resources per trial of bracket i.

A :class:`Plan` is static: which brackets exist, how many trials each runs in each stage and when
the stages start and end. Which trial sits in which bracket is decided at run time by
:func:`assign_stage` from the losses observed at the end of the previous stage (Alg. 1 l. 6-11).
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, replace
from typing import Literal

__all__ = [
    "BracketParameters",
    "Plan",
    "PlanError",
    "Stage",
    "StageBracket",
    "assign_stage",
    "compute_bracket_budgets",
    "compute_bracket_parameters",
    "eliminate",
    "fill",
    "plan",
]

# Floors of ratios that are integral in exact arithmetic (Sec. 3.4: 34.28 / 4.285 = 8) must not
# drop to 7 through rounding; a relative slack far below any meaningful resource-minute.
_EPS = 1e-9


class PlanError(ValueError):
    """Inputs for which no SEER plan exists (the message names the input and the valid range)."""


@dataclass(frozen=True)
class BracketParameters:
    """Output of COMPUTE-BRACKET-PARAMETERS (Alg. 2) with its intermediate quantities.

    ``budgets``/``parallelism`` are Alg. 3's B and P before empty brackets are dropped;
    ``trials``/``gpus`` are N and P of the brackets that launch at least one trial.
    """

    r_star: float
    K: int
    t1: float
    B0: float
    q_star: int
    budgets: tuple[float, ...]
    parallelism: tuple[int, ...]
    trials: tuple[int, ...]
    gpus: tuple[int, ...]


@dataclass(frozen=True, slots=True)
class StageBracket:
    """Bracket ``bracket`` (0-based index into N/P) in one stage: ``trials`` trials with
    ``gpus_per_trial`` resources each."""

    gpus_per_trial: int
    trials: int
    bracket: int = 0


@dataclass(frozen=True)
class Stage:
    """Stage k (1-based): round k of successive halving in every bracket, ``[start, end)``."""

    index: int
    start: float
    end: float
    brackets: tuple[StageBracket, ...]

    @property
    def trials(self) -> int:
        return sum(b.trials for b in self.brackets)

    @property
    def gpus(self) -> int:
        return sum(b.trials * b.gpus_per_trial for b in self.brackets)

    @property
    def resource_time(self) -> float:
        return self.gpus * (self.end - self.start)


@dataclass(frozen=True)
class Plan:
    """A SEER plan for deadline ``T`` and budget ``B`` (units: minutes, resource-minutes)."""

    T: float
    B: float
    eta: float
    v: float
    p_min: int
    p_max: float
    t_min: float
    params: BracketParameters
    stages: tuple[Stage, ...]
    #: whose stages these are: ``seer`` (Alg. 1, maybe filled) or ``e-grid`` (the re-planning
    #: tuner's start on plans that bet on one finalist early, `policy.seer.replan.starting_plan`;
    #: ``params`` (K, t1, N, P) stay Alg. 2's, what SEER would have run)
    origin: Literal["seer", "e-grid"] = "seer"

    @property
    def K(self) -> int:
        return self.params.K

    @property
    def t1(self) -> float:
        return self.params.t1

    @property
    def N(self) -> tuple[int, ...]:
        return self.params.trials

    @property
    def P(self) -> tuple[int, ...]:
        return self.params.gpus

    @property
    def sampled_trials(self) -> int:
        """Configurations sampled at the start: stage 1's trials, ``sum(N)`` (Alg. 1 line 2)
        unless :func:`fill` added some."""
        return self.stages[0].trials if self.stages else 0

    @property
    def resource_time(self) -> float:
        return sum(s.resource_time for s in self.stages)

    @property
    def end(self) -> float:
        return self.stages[-1].end if self.stages else 0.0

    @property
    def peak_gpus(self) -> int:
        return max((s.gpus for s in self.stages), default=0)

    def to_dict(self) -> dict[str, object]:
        """JSON form: ``K, t1, N, P, stages`` (+ inputs and totals)."""
        return {
            "T": self.T,
            "B": self.B,
            "eta": self.eta,
            "v": self.v,
            "p_min": self.p_min,
            "p_max": None if math.isinf(self.p_max) else self.p_max,
            "t_min": self.t_min,
            "K": self.K,
            "t1": self.t1,
            "B0": self.params.B0,
            "q_star": self.params.q_star,
            "R_star": self.params.r_star,
            "N": list(self.N),
            "P": list(self.P),
            "sampled_trials": self.sampled_trials,
            "resource_time": self.resource_time,
            "peak_gpus": self.peak_gpus,
            "origin": self.origin,
            "stages": [
                {
                    "start": s.start,
                    "end": s.end,
                    "brackets": [
                        {"gpus_per_trial": b.gpus_per_trial, "trials": b.trials} for b in s.brackets
                    ],
                }
                for s in self.stages
            ],
        }


def _validate(
    T: float, B: float, eta: float, v: float, p_min: int, p_max: float, t_min: float
) -> None:
    def finite_positive(name: str, x: float) -> None:
        if not (isinstance(x, int | float) and math.isfinite(x) and x > 0):
            raise PlanError(f"{name} must be a positive finite number, got {x!r}")

    finite_positive("deadline T", T)
    finite_positive("budget B", B)
    finite_positive("t_min", t_min)
    if not (math.isfinite(eta) and eta > 1):
        raise PlanError(f"eta must be > 1 (elimination rate), got {eta!r}")
    if not (math.isfinite(v) and v >= 1):
        raise PlanError(f"v must be >= 1 (parallelism growth), got {v!r}")
    if isinstance(p_min, bool) or not isinstance(p_min, int) or p_min < 1:
        raise PlanError(f"p_min must be an integer >= 1 (resources are integral), got {p_min!r}")
    if not (math.isinf(p_max) and p_max > 0) and not (float(p_max).is_integer() and p_max >= p_min):
        raise PlanError(f"p_max must be an integer >= p_min={p_min} or infinity, got {p_max!r}")
    if T < t_min:
        raise PlanError(
            f"deadline T={T:g} min is shorter than one round t_min={t_min:g} min; "
            f"give T >= {t_min:g} or a smaller t_min"
        )
    if B < p_min * t_min:
        raise PlanError(
            f"budget B={B:g} resource-min is below one trial-round (p_min * t_min = "
            f"{p_min * t_min:g}); give B >= {p_min * t_min:g}"
        )


def _rounds(R: float, eta: float) -> int:
    """``ceil(log_eta R)``, at least 1 (R = 1 is one round of ``t_min``)."""
    k = math.ceil(math.log(R, eta) - _EPS) if R > 1 else 1
    return max(1, k)


def _r_star(T: float, B: float, eta: float, p_min: int, t_min: float) -> float:
    """Largest R satisfying both conditions of Alg. 2 line 3.

    For R in (eta^(K-1), eta^K] the ceiling is the constant K, so the deadline condition reads
    ``R * c_K <= T/t_min`` with ``c_K = eta/(eta-1) * (1 - eta^-K)`` and the budget condition
    ``R <= B / (t_min p_min K)``. The paper finds R* by binary search; solving each interval in
    closed form gives the same largest R exactly.
    """
    best = 0.0
    k = 1
    while True:
        lo = 1.0 if k == 1 else eta ** (k - 1)
        if lo > T / t_min:  # c_K >= 1, so no larger interval can satisfy the deadline
            break
        c_k = eta / (eta - 1) * (1 - eta ** (-k))
        r = min(eta**k, T / t_min / c_k, B / (t_min * p_min * k))
        if r >= lo - _EPS * lo and r > best:
            best = max(r, lo)
        k += 1
    return best


def compute_bracket_budgets(
    B: float, B0: float, v: float, p_min: int, p_max: float
) -> tuple[int, tuple[float, ...], tuple[int, ...]]:
    """COMPUTE-BRACKET-BUDGETS (Alg. 3): ``(q_star, B, P)``.

    P is made integral by flooring ``p_min * v**j`` (the paper assumes integral resources; with the
    default v = 2 nothing changes).
    """
    ratio = B / B0
    q_star = 1
    while (q_star + 1) * v**q_star <= ratio * (1 + _EPS):  # Alg. 3 line 2
        q_star += 1
    if p_min * v ** (q_star - 1) < p_max:  # line 3
        last = min(p_max, p_min * v**q_star)
        par = [p_min * v**j for j in range(q_star)] + [last]  # line 4
        budgets = [B0 * v ** (q_star - 1)] * q_star + [B - B0 * q_star * v ** (q_star - 1)]
    else:  # lines 6-8
        q_prime = -1
        while p_min * v ** (q_prime + 1) < p_max:
            q_prime += 1
        par = [p_min * v**j for j in range(q_prime + 1)] + [p_max]
        budgets = [B / len(par)] * len(par)
    return q_star, tuple(max(0.0, b) for b in budgets), tuple(int(math.floor(p)) for p in par)


def compute_bracket_parameters(
    T: float,
    B: float,
    eta: float = 4,
    v: float = 2,
    p_min: int = 1,
    p_max: float = math.inf,
    t_min: float = 1,
) -> BracketParameters:
    """COMPUTE-BRACKET-PARAMETERS (Alg. 2): ``K, t1, N, P`` and the intermediates."""
    _validate(T, B, eta, v, p_min, p_max, t_min)
    r_star = _r_star(T, B, eta, p_min, t_min)
    if r_star < 1:  # pragma: no cover - excluded by _validate
        raise PlanError(f"no R >= 1 fits deadline {T:g} and budget {B:g}")
    K = _rounds(r_star, eta)  # line 4
    t1 = t_min * r_star * eta ** (-(K - 1))  # line 5
    B0 = p_min * t_min * r_star * K  # line 6
    q_star, budgets, par = compute_bracket_budgets(B, B0, v, p_min, p_max)
    trials = [
        int(math.floor(b / (K * t1 * p) * (1 + _EPS))) for b, p in zip(budgets, par, strict=True)
    ]
    kept = [
        (n, p) for n, p in zip(trials, par, strict=True) if n > 0
    ]  # Sec. 3.4: a bracket with N = 0 is
    return BracketParameters(  # not run (P = [1, 2] there)
        r_star=r_star,
        K=K,
        t1=t1,
        B0=B0,
        q_star=q_star,
        budgets=budgets,
        parallelism=par,
        trials=tuple(n for n, _ in kept),
        gpus=tuple(p for _, p in kept),
    )


def plan(
    T: float,
    B: float,
    eta: float = 4,
    v: float = 2,
    p_min: int = 1,
    p_max: float = math.inf,
    t_min: float = 1,
) -> Plan:
    """The SEER plan (Alg. 1 with Alg. 2-3) for deadline ``T`` and budget ``B``.

    Stage k (1-based) runs ``floor(N[i] / eta**(k-1))`` trials in bracket i (Alg. 1 line 6) for
    ``t1 * eta**(k-1)`` minutes. Brackets without a trial in a stage, and stages without any
    trial, are left out.

    Raises:
        PlanError: for inputs with no plan (non-positive numbers, eta <= 1, T < t_min,
            B < p_min * t_min, non-integral p_min/p_max).
    """
    params = compute_bracket_parameters(T, B, eta, v, p_min, p_max, t_min)
    stages: list[Stage] = []
    start = 0.0
    for k in range(1, params.K + 1):
        length = params.t1 * eta ** (k - 1)
        shrink = eta ** (k - 1)
        brackets = tuple(
            StageBracket(gpus_per_trial=p, trials=m, bracket=i)
            for i, (n, p) in enumerate(zip(params.trials, params.gpus, strict=True))
            if (m := int(math.floor(n / shrink + _EPS))) > 0
        )
        if not brackets:
            break
        stages.append(Stage(index=k, start=start, end=start + length, brackets=brackets))
        start += length
    return Plan(T, B, eta, v, p_min, p_max, t_min, params, tuple(stages))


def assign_stage(
    stage: Stage, survivors: Sequence[str], losses: Mapping[str, float]
) -> list[list[str]]:
    """Trials of each bracket in ``stage`` (Alg. 1 lines 6 and 11).

    ``survivors`` are the trials still alive (at stage 1, all sampled trials in sampling order);
    from stage 2 on they are ordered by descending loss (line 11) and sliced bracket by bracket,
    so the lowest-loss trials land in the last bracket, the one with most resources per trial.
    Trials beyond the stage's capacity are not run (they were eliminated, line 9).

    Returns one list of trial ids per bracket of ``stage``.
    """
    if stage.index == 1:
        ordered = list(survivors)
    else:
        missing = [t for t in survivors if t not in losses]
        if missing:
            raise ValueError(f"no loss for surviving trials {missing[:5]}")
        # descending loss; the best trials (lowest loss) go last, ties keep the given order
        ordered = sorted(survivors, key=lambda t: -losses[t])
        ordered = ordered[len(ordered) - stage.trials :] if stage.trials else []
    out: list[list[str]] = []
    s = 0
    for b in stage.brackets:
        out.append(ordered[s : s + b.trials])
        s += b.trials
    return out


def eliminate(
    brackets: Sequence[Sequence[str]], losses: Mapping[str, float], keep: Sequence[int]
) -> list[str]:
    """SH elimination at the end of a stage (Alg. 1 line 9): bracket i keeps its ``keep[i]``
    lowest-loss trials.

    Line 9 as printed removes ``floor(N[i]/eta**k)`` trials; with the example's eta = 2 that
    equals keeping ``floor(N[i]/eta**k)``. For other eta only the latter carries ``1/eta`` of the
    trials forward, as Sec. 3.1 states, so that is what is kept.
    """
    alive: list[str] = []
    for trials, k in zip(brackets, keep, strict=True):
        ranked = sorted(trials, key=lambda t: losses[t])
        alive.extend(ranked[: max(0, k)])
    return alive


def _fits(left: float, cost: float) -> int:
    """How many units of ``cost`` the remainder ``left`` pays for (an exact fit counts)."""
    return max(0, int(math.floor(left / cost + _EPS)))


def fill(p: Plan, first_cap: float = math.inf) -> Plan:
    """``p`` with the budget Alg. 1's floors leave unspent given to trials that can use it.

    Alg. 1 line 6 runs ``floor(N[i] / eta**(k-1))`` trials of bracket i in stage k; with short
    deadlines (T / t_min around 10) the floors drop whole brackets and a third of ``B`` is never
    spent (issue 19). The remainder ``B - p.resource_time`` is handed out stage by stage from the
    last (the best trials) to the first:

    1. the stage's top bracket (most resources per trial, where the lowest-loss trials land)
       gets one more resource per trial, up to ``p_max``, while the stage can pay for it;
    2. then one more trial at a time, top bracket first, while the stage keeps no more trials
       than the stage before it ran (stage 1 samples new configurations).

    Stage times are unchanged, so the plan still ends by ``T`` (Fact 1) and never spends more
    than ``B``; afterwards the remainder is below the cheapest stage-1 trial (``min P x t1``).
    A filled plan runs trials of one stage in more than one bracket than line 9's per-bracket
    elimination can feed: survivors are the lowest-loss trials of the whole stage.

    ``first_cap``: at most this many trials in ``p``'s first stage (default: no cap, as stage 1
    samples new configurations); a re-planner filling the rest of a run caps it at the trials
    still alive.
    """
    left = p.B - p.resource_time
    stages = [list(s.brackets) for s in p.stages]
    lengths = [s.end - s.start for s in p.stages]
    for k in range(len(stages) - 1, -1, -1):
        brackets, length = stages[k], lengths[k]
        if not brackets:
            continue
        top = max(range(len(brackets)), key=lambda i: brackets[i].gpus_per_trial)
        b = brackets[top]
        extra = int(min(p.p_max - b.gpus_per_trial, _fits(left, b.trials * length)))
        if extra > 0:
            brackets[top] = StageBracket(b.gpus_per_trial + extra, b.trials, b.bracket)
            left -= extra * b.trials * length
        cap = sum(x.trials for x in stages[k - 1]) if k > 0 else first_cap
        for i in sorted(range(len(brackets)), key=lambda i: -brackets[i].gpus_per_trial):
            b = brackets[i]
            room = cap - sum(x.trials for x in brackets)
            more = int(min(room, _fits(left, b.gpus_per_trial * length)))
            if more > 0:
                brackets[i] = StageBracket(b.gpus_per_trial, b.trials + more, b.bracket)
                left -= more * b.gpus_per_trial * length
    filled = tuple(
        Stage(s.index, s.start, s.end, tuple(b)) for s, b in zip(p.stages, stages, strict=True)
    )
    return replace(p, stages=filled)
