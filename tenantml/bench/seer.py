"""``tenantml seer simulate``: SEER and its Sec. 6.3 baselines on recorded learning curves.

For every group (tuning problem) and seed, every method runs once on :mod:`policy.seer.tuning`'s
simulator with the same seed (common random numbers). Deadlines and budgets are absolute (curve
time units: minutes, or steps) or relative: ``--deadline 0.25x`` is a quarter of the group's
median time to train one configuration to its end, ``--budget 16x`` is 16 x the deadline
(Table 2's "16 x 60").
"""

from __future__ import annotations

import itertools
import json
import math
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field, replace
from pathlib import Path

import numpy as np

from policy.seer import PlanError, plan
from policy.seer.tuning import METHODS, Curves, TuningSettings, run_method
from tenantml.bench._pool import in_order
from tenantml.bench.synetune_peer import (
    PEER,
    PEER_METHODS,
    check_available,
    peer_column,
    run_peer,
)

__all__ = ["PLAN_GRID", "SimulationResult", "parse_amount", "simulate", "time_planner"]

# ``seer bench-plan``'s inputs: (deadline, budget / deadline, eta, v, p_max), deadline 1 min..1
# week, budget 1x..1000x, eta 2..8, v 1.5..4, p_max 4..inf.
PLAN_GRID: tuple[tuple[float, float, float, float, float], ...] = tuple(
    itertools.product(
        [1, 10, 60, 600, 10_080],
        [1, 4, 16, 64, 1000],
        [2, 3, 4, 8],
        [1.5, 2, 4],
        [4.0, 64.0, math.inf],
    )
)


def parse_amount(spec: str, what: str) -> tuple[float, bool]:
    """``"0.25x"`` -> (0.25, relative), ``"60"`` -> (60, absolute); positive finite only."""
    text = spec.strip().lower()
    relative = text.endswith("x")
    try:
        value = float(text[:-1] if relative else text)
    except ValueError:
        value = math.nan
    if not (math.isfinite(value) and value > 0):
        raise ValueError(
            f"{what} {spec!r} is not valid: give a positive number (time units) or a "
            f"multiple such as 0.25x"
        )
    return value, relative


@dataclass(frozen=True)
class SimulationResult:
    """``values[group][method]``: final metric per seed (original sign); ``spent[group][method]``:
    the fraction of the budget B each run paid for, per seed."""

    curves: str
    deadlines: dict[str, float]
    budgets: dict[str, float]
    t_min: dict[str, float]
    values: dict[str, dict[str, list[float]]]
    seconds: float
    skipped: dict[str, str]
    spent: dict[str, dict[str, list[float]]] = field(default_factory=dict)
    minimize: bool = False  # the metric is a loss: lower is better

    def summary(self) -> dict[str, object]:
        def stats(v: Sequence[float]) -> dict[str, float]:
            a = np.asarray(v, float)
            se = float(a.std(ddof=1) / math.sqrt(len(a))) if len(a) > 1 else 0.0
            return {"mean": float(a.mean()), "se": se}

        methods = list(next(iter(self.values.values())))
        overall = {m: stats([x for g in self.values.values() for x in g[m]]) for m in methods}
        spent = {
            m: float(np.mean([x for g in self.spent.values() for x in g[m]]))
            for m in methods
            if self.spent
        }
        return {
            "curves": self.curves,
            "minimize": self.minimize,
            "groups": {g: {m: stats(v) for m, v in ms.items()} for g, ms in self.values.items()},
            "overall": overall,
            "spent": spent,
            "deadline": self.deadlines,
            "budget": self.budgets,
            "t_min": self.t_min,
            "seconds": self.seconds,
            "skipped": self.skipped,
        }


def _one_seed(
    args: tuple[Curves, Sequence[str], float, float, int, TuningSettings, float],
) -> dict[str, tuple[float, float]]:
    """Every method once on one group with one seed: method -> (final metric, fraction of the
    budget paid for)."""
    curves, methods, T, B, seed, settings, sign = args
    if "bohb" in methods and settings.bohb_sampler is None:
        from tenantml.bench.tpe import tpe_sampler

        settings = replace(settings, bohb_sampler=tpe_sampler)
    out: dict[str, tuple[float, float]] = {}
    for m in methods:
        if m.startswith(f"{PEER}:"):
            value, paid = run_peer(m.split(":", 1)[1], curves, T, B, seed, settings)
        else:
            outcome = run_method(m, curves, T, B, seed, settings)
            value, paid = outcome.value, outcome.resource_time
        out[m] = (sign * value, paid / B)
    return out


def simulate(
    curve_sets: dict[str, Curves],
    *,
    name: str,
    methods: Sequence[str],
    deadline: str,
    budget: str,
    seeds: int,
    settings: TuningSettings,
    minimize: bool = False,
    jobs: int | None = None,
    on_step: Callable[[], None] | None = None,
    peer: str | None = None,
) -> SimulationResult:
    """Run ``methods`` x ``seeds`` on every group; the (group, seed) runs are spread over
    ``jobs`` processes (default: all cores).

    ``on_step``: called once per (group, seed): as its runs (every method once) finish, in
    order, or at the start for each seed of a group left out (no plan): ``len(curve_sets) x
    seeds`` times in all.

    ``peer="synetune"``: Syne Tune's implementation of each of ``asha``/``bohb`` among
    ``methods`` runs beside ours on the same problems, as column ``synetune:asha`` /
    ``synetune:bohb`` (:mod:`tenantml.bench.synetune_peer`).

    Raises:
        ValueError: an unknown method or peer, or a peer with none of its methods chosen.
        PeerUnavailable: the peer's library is not installed."""
    unknown = [m for m in methods if m not in METHODS]
    if unknown:
        raise ValueError(f"unknown method(s) {', '.join(unknown)}; valid: {', '.join(METHODS)}")
    if peer is not None:
        if peer != PEER:
            raise ValueError(f"unknown peer {peer!r}; valid: {PEER}")
        compared = [m for m in methods if m in PEER_METHODS]
        if not compared:
            raise ValueError(
                f"--peer {PEER} runs {', '.join(PEER_METHODS)}: add one of them to the methods"
            )
        check_available()
        methods = [*methods, *(peer_column(m) for m in compared)]
    d_value, d_rel = parse_amount(deadline, "deadline")
    b_value, b_rel = parse_amount(budget, "budget")
    deadlines, budgets, t_mins, skipped = {}, {}, {}, {}
    for g, c in curve_sets.items():
        T = d_value * c.full_time if d_rel else d_value
        B = b_value * T if b_rel else b_value
        t_min = settings.t_min or c.epoch_time
        try:  # a group whose deadline is below one epoch has no plan: left out, with the reason
            plan(T, B, settings.eta, settings.v, settings.p_min, settings.p_max, t_min)
        except PlanError as e:
            skipped[g] = str(e)
            continue
        deadlines[g], budgets[g], t_mins[g] = T, B, t_min
    if not deadlines:
        raise PlanError(f"no group has a plan; first reason: {next(iter(skipped.values()))}")
    step = on_step or (lambda: None)
    for _ in range(len(skipped) * seeds):
        step()
    sign = -1.0 if minimize else 1.0
    runs = [(g, seed) for g in deadlines for seed in range(seeds)]
    work = [
        (curve_sets[g], list(methods), deadlines[g], budgets[g], seed, settings, sign)
        for g, seed in runs
    ]
    started = time.perf_counter()
    values: dict[str, dict[str, list[float]]] = {g: {m: [] for m in methods} for g in deadlines}
    spent: dict[str, dict[str, list[float]]] = {g: {m: [] for m in methods} for g in deadlines}
    for (group, _), finals in zip(runs, in_order(_one_seed, work, jobs), strict=True):
        for m, v in finals.items():
            values[group][m].append(v[0])
            spent[group][m].append(v[1])
        step()
    return SimulationResult(
        name,
        deadlines,
        budgets,
        t_mins,
        values,
        time.perf_counter() - started,
        skipped,
        spent,
        minimize,
    )


def time_planner(*, on_step: Callable[[], None] | None = None) -> dict[str, object]:
    """Milliseconds `policy.seer.plan` takes on each input of `PLAN_GRID`: median, p99, max,
    and the slowest input (the target is < 10 ms for any input).

    ``on_step``: called after each input's call (outside its timing): ``len(PLAN_GRID)`` times
    in all."""
    times, worst = [], (0.0, "")
    for T, ratio, eta, v, p_max in PLAN_GRID:
        start = time.perf_counter()
        plan(T, T * ratio, eta=eta, v=v, p_max=p_max)
        dt = (time.perf_counter() - start) * 1e3
        times.append(dt)
        if dt > worst[0]:
            worst = (dt, f"T={T} B={T * ratio} eta={eta} v={v} p_max={p_max}")
        if on_step is not None:
            on_step()
    a = np.array(times)
    return {
        "inputs": len(a),
        "median_ms": float(np.median(a)),
        "p99_ms": float(np.percentile(a, 99)),
        "max_ms": float(a.max()),
        "worst_input": worst[1],
    }


def write_outputs(result: SimulationResult, out: Path, settings: TuningSettings) -> Path:
    """``summary.json``, ``results.csv`` (one row per group, method, seed) and PNG plots."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    out.mkdir(parents=True, exist_ok=True)
    summary = result.summary()
    (out / "summary.json").write_text(json.dumps(summary, indent=2) + "\n")
    with (out / "results.csv").open("w") as f:
        f.write("group,method,seed,metric\n")
        for g, ms in result.values.items():
            for m, vs in ms.items():
                for seed, v in enumerate(vs):
                    f.write(f"{g},{m},{seed},{v:.6g}\n")
    overall = summary["overall"]
    assert isinstance(overall, dict)
    methods = list(overall)
    fig, ax = plt.subplots(figsize=(7, 3.5))
    ax.bar(
        methods,
        [overall[m]["mean"] for m in methods],
        yerr=[overall[m]["se"] for m in methods],
        color=["tab:red" if m == "seer" else "tab:gray" for m in methods],
    )
    ax.set_ylabel("final metric (mean ± s.e.)")
    ax.set_title(f"{result.curves}: {len(result.values)} group(s)")
    fig.tight_layout()
    fig.savefig(out / "methods.png", dpi=120)
    plt.close(fig)
    g0 = next(iter(result.deadlines))
    p = plan(
        result.deadlines[g0],
        result.budgets[g0],
        settings.eta,
        settings.v,
        settings.p_min,
        settings.p_max,
        result.t_min[g0],
    )
    fig, ax = plt.subplots(figsize=(7, 3.5))
    for s in p.stages:
        base = 0
        for b in s.brackets:
            h = b.trials * b.gpus_per_trial
            ax.bar(
                s.start,
                h,
                width=s.end - s.start,
                bottom=base,
                align="edge",
                color=plt.cm.viridis(b.bracket / max(1, len(p.N) - 1)),
                edgecolor="white",
            )
            base += h
    ax.set_xlabel("time")
    ax.set_ylabel("GPUs in use")
    ax.set_title(f"SEER plan for {g0} (colour = bracket, as Fig. 1c)")
    fig.tight_layout()
    fig.savefig(out / "seer_plan.png", dpi=120)
    plt.close(fig)
    return out / "summary.json"
