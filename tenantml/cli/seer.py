"""``tenantml seer``: plan, simulate and run elastic hyperparameter tuning (SEER, paper 003).

- ``seer plan``: the plan for a deadline and a GPU-minute budget, before anything is spent;
- ``seer simulate``: SEER against the Sec. 6.3 baselines on recorded learning curves;
- ``seer run``: execute a plan for one tenant's model on this machine's resources.
"""

from __future__ import annotations

import json
import math
from datetime import datetime, timedelta
from pathlib import Path
from typing import Annotated, Any

import typer
from rich.console import Console
from rich.table import Table

from tenantml.cli._out import fail as _fail
from tenantml.cli._out import save_json

__all__ = ["register"]

console = Console(soft_wrap=True)
err_console = Console(stderr=True, soft_wrap=True)

seer_app = typer.Typer(
    name="seer",
    help="Elastic hyperparameter tuning under a deadline and a GPU budget (SEER).",
    no_args_is_help=True,
)

# An option not given is left to the code a command drives, so its default is written in one
# place: the planner's (`policy.seer.plan`) for `plan`, the simulator's
# (`policy.seer.tuning.TuningSettings`) for `simulate`, the service's (`tasks._seer.SeerOptions`)
# for `run`.
_SEER = "(SEER's default when not given)"
Eta = Annotated[float | None, typer.Option(help=f"elimination rate eta > 1 {_SEER}")]
V = Annotated[float | None, typer.Option("--v", help=f"parallelism growth v >= 1 {_SEER}")]
PMin = Annotated[int | None, typer.Option(help=f"minimum GPUs per trial {_SEER}")]
TMin = Annotated[
    float | None, typer.Option(help=f"minimum minutes per stage (about 1-2 epochs) {_SEER}")
]
Deadline = Annotated[
    str, typer.Option("--deadline", help="minutes (90), hours (6h) or a clock time (18:00)")
]
Budget = Annotated[str, typer.Option("--budget", help="GPU-minutes (240) or 40h")]
PMax = Annotated[str, typer.Option(help="maximum GPUs per trial, or inf")]


def _given(**options: Any) -> dict[str, Any]:
    """The options given on the command line (the others keep their code's default)."""
    return {k: v for k, v in options.items() if v is not None}


def parse_deadline(text: str, now: datetime | None = None) -> float:
    """Minutes until the deadline: ``90`` / ``90m`` minutes, ``6h`` hours, or a clock time
    ``18:00`` (today, or tomorrow once it has passed)."""
    now = now or datetime.now()
    at = deadline_at(text, now)
    if at is not None:
        return (at - now).total_seconds() / 60.0
    return _amount(text, "--deadline")


def deadline_at(text: str, now: datetime | None = None) -> datetime | None:
    """The moment a clock-time deadline (``18:00``) names: today, or tomorrow once it has
    passed; None for an amount of time (``90``, ``6h``)."""
    t = text.strip().lower()
    if ":" not in t:
        return None
    now = now or datetime.now()
    try:
        hh, mm = (int(x) for x in t.split(":"))
        at = now.replace(hour=hh, minute=mm, second=0, microsecond=0)
    except ValueError:
        raise _fail(f"--deadline {text!r} is not a clock time HH:MM") from None
    return at + timedelta(days=1) if at <= now else at


def _amount(text: str, name: str) -> float:
    """``90`` or ``90m`` -> 90, ``6h`` -> 360 (minutes, or GPU-minutes for a budget)."""
    t = text.strip().lower()
    scale = 60.0 if t.endswith("h") else 1.0
    try:
        return float(t.rstrip("hm")) * scale
    except ValueError:
        raise _fail(
            f"{name} {text!r} is not valid: give minutes (90 or 90m), hours (6h)"
            + (" or a clock time (18:00)" if name == "--deadline" else "")
        ) from None


def _p_max(text: str) -> float:
    if text.strip().lower() in ("inf", "infinity", "none"):
        return math.inf
    try:
        value = int(text)
    except ValueError:
        raise _fail(f"--p-max {text!r} is not an integer or 'inf'") from None
    return float(value)


@seer_app.command("plan")
def plan_cmd(
    deadline_text: Deadline,
    budget_text: Budget,
    eta: Eta = None,
    v: V = None,
    p_min: PMin = None,
    p_max: PMax = "inf",
    t_min: TMin = None,
    as_json: Annotated[bool, typer.Option("--json", help="print the plan as JSON")] = False,
) -> None:
    """Print the SEER plan: stages, brackets, trials, GPUs, start/end and resource-time."""
    from policy.seer import PlanError, plan

    deadline = parse_deadline(deadline_text)
    budget = _amount(budget_text, "--budget")
    knobs = _given(eta=eta, v=v, p_min=p_min, t_min=t_min)
    try:
        p = plan(deadline, budget, p_max=_p_max(p_max), **knobs)
    except PlanError as e:
        raise _fail(str(e)) from None
    if as_json:
        console.print_json(json.dumps(p.to_dict()))
        return
    console.print(
        f"K = {p.K} stages, t1 = {p.t1:.3f} min, N = {list(p.N)} trials, P = {list(p.P)} "
        f"GPUs/trial; {p.sampled_trials} configurations sampled",
        markup=False,
    )
    table = Table("stage", "start", "end", "brackets (trials x GPUs)", "GPUs", "GPU-min")
    for s in p.stages:
        brackets = " + ".join(f"{b.trials}x{b.gpus_per_trial}" for b in s.brackets)
        table.add_row(
            str(s.index),
            f"{s.start:.2f}",
            f"{s.end:.2f}",
            brackets,
            str(s.gpus),
            f"{s.resource_time:.1f}",
        )
    console.print(table)
    console.print(
        f"ends at {p.end:.2f} of {deadline:g} min; spends {p.resource_time:.1f} of "
        f"{budget:g} GPU-min; at most {p.peak_gpus} GPUs at once",
        markup=False,
    )


@seer_app.command("simulate")
def simulate_cmd(
    curves: Annotated[
        str,
        typer.Option(
            help="built-in set (opda-alexnet, opda-convnext, opda-deberta, lcdb, steplr-digits, "
            "steplr-digits-train; `tenantml.bench.curves.BUILTIN_CURVES`) or CSV"
        ),
    ] = "opda-alexnet",
    deadline: Annotated[
        str, typer.Option(help="minutes (steps without seconds) or a multiple of a full run: 0.25x")
    ] = "0.25x",
    budget: Annotated[
        str, typer.Option(help="GPU-minutes or a multiple of the deadline: 16x")
    ] = "16x",
    methods: Annotated[
        str,
        typer.Option(
            help="comma list of seer,seer-fill,random,asha,hypersched,bohb,e-hyperband,"
            "e-grid,replan"
        ),
    ] = "seer,seer-fill,random,asha,hypersched,bohb,e-hyperband,e-grid,replan",
    seeds: Annotated[int, typer.Option(min=1)] = 20,
    eta: Eta = None,
    v: V = None,
    p_min: PMin = None,
    p_max: Annotated[str, typer.Option(help="max GPUs per trial (Sec. 6.3: 4)")] = "4",
    t_min: Annotated[float | None, typer.Option(help="default: one epoch of the curves")] = None,
    scaling: Annotated[float, typer.Option(help="lambda(p) = p^x, x in (0, 1]")] = 0.8,
    minimize: Annotated[bool, typer.Option(help="the metric is a loss")] = False,
    groups: Annotated[int | None, typer.Option(help="use only the first N groups")] = None,
    jobs: Annotated[int | None, typer.Option(help="processes (default: all cores)")] = None,
    peer: Annotated[
        str | None,
        typer.Option(
            help="synetune: also run Syne Tune's ASHA/BOHB (those chosen in --methods) on the "
            "same problems, as columns synetune:asha, synetune:bohb (pip install "
            "'tenantml\\[peers]')"
        ),
    ] = None,
    out: Annotated[Path, typer.Option(help="output directory")] = Path("results/seer"),
) -> None:
    """Final accuracy (mean and standard error over seeds) per method, like Table 2."""
    from policy.seer import PlanError
    from policy.seer.tuning import TuningSettings, power_scaling
    from tenantml.bench.curves import CurveFormatError, load_curves
    from tenantml.bench.seer import simulate, write_outputs
    from tenantml.bench.synetune_peer import PeerUnavailable
    from tenantml.cli._progress import progress_bar

    chosen = [m.strip() for m in methods.split(",") if m.strip()]
    if not chosen:  # ran and printed an empty table
        raise _fail(f"--methods {methods!r} names none: give a comma list of methods")
    if t_min is not None and not t_min > 0:  # 0 was taken as "one epoch" (`t_min or ...`)
        raise _fail(f"--t-min {t_min!r} is not valid: use a positive number of minutes")
    try:
        sets = load_curves(curves, minimize=minimize)
        if groups is not None:
            sets = dict(list(sets.items())[: max(1, groups)])
        settings = TuningSettings(
            p_max=_p_max(p_max),
            t_min=t_min,
            scaling=power_scaling(scaling),
            **_given(eta=eta, v=v, p_min=p_min),
        )
        with progress_bar("group x seed", len(sets) * seeds, console=err_console) as advance:
            result = simulate(
                sets,
                name=curves,
                methods=chosen,
                deadline=deadline,
                budget=budget,
                seeds=seeds,
                settings=settings,
                minimize=minimize,
                jobs=jobs,
                on_step=advance,
                peer=peer,
            )
    except (CurveFormatError, PlanError, ValueError, PeerUnavailable) as e:
        raise _fail(str(e)) from None
    summary = result.summary()
    overall = summary["overall"]
    per_group = summary["groups"]
    assert isinstance(overall, dict) and isinstance(per_group, dict)
    shown = list(per_group)[:3]
    spent = summary["spent"]
    assert isinstance(spent, dict)
    table = Table("method", *shown, "overall (mean ± s.e.)", "B spent")
    for m, s in overall.items():
        cells = [f"{per_group[g][m]['mean']:.3f}" for g in shown]
        table.add_row(m, *cells, f"{s['mean']:.4f} ± {s['se']:.4f}", f"{spent[m]:.0%}")
    console.print(table)
    path = write_outputs(result, out, settings)
    console.print(
        f"{len(sets)} group(s) x {seeds} seeds in {result.seconds:.1f} s; wrote {path} and plots",
        markup=False,
    )


@seer_app.command("bench-plan")
def bench_plan_cmd(
    out: Annotated[Path | None, typer.Option(help="directory for plan_timing.json")] = None,
) -> None:
    """Time the planner over a grid of inputs (deadline 1 min..1 week, budget 1x..1000x,
    eta 2..8, v 1.5..4, p_max 4..inf); the target is < 10 ms for any input."""
    from tenantml.bench.seer import PLAN_GRID, time_planner
    from tenantml.cli._progress import progress_bar

    # No background redraw: it would land inside the timed calls.
    with progress_bar(
        "inputs", len(PLAN_GRID), background_refresh=False, console=err_console
    ) as advance:
        result = time_planner(on_step=advance)
    console.print_json(json.dumps(result))
    save_json(out, "plan_timing.json", result)


@seer_app.command("run")
def run_cmd(
    tenant: Annotated[str, typer.Argument(help="tenant name")],
    model: Annotated[str, typer.Option(help="one of the tenant's torch candidates")],
    deadline_text: Deadline,
    budget_text: Budget,
    eta: Eta = None,
    v: V = None,
    p_min: PMin = None,
    p_max: PMax = "inf",
    t_min: TMin = None,
    global_batch: Annotated[
        int | None, typer.Option(help=f"fixed global batch (all p) {_SEER}")
    ] = None,
    seed: Annotated[
        int | None, typer.Option(help=f"seed of the sampled configurations {_SEER}")
    ] = None,
    tuner: Annotated[
        str,
        typer.Option(help="replan (re-plans the rest after each stage) or seer (the paper's)"),
    ] = "replan",
    home: Annotated[Path | None, typer.Option("--home", help="TENANTML_HOME")] = None,
) -> None:
    """Run a SEER plan for one tenant's model here; trials and stages go to MLflow and the best
    trial becomes the tenant's `best` model if it beats it."""
    import signal

    from tenantml.cli.service import InThread, _client, _errors, end_now

    now = datetime.now()
    deadline = parse_deadline(deadline_text, now)
    at = deadline_at(deadline_text, now)
    budget = _amount(budget_text, "--budget")
    with _errors():
        cap = _p_max(p_max)
        c = _client(home)

        def stop(signum: int, frame: Any) -> None:
            # Ctrl-C or SIGTERM: end now. The job's trials run in processes and Prefect's
            # temporary server has had the same Ctrl-C: waiting ended in Prefect's tracebacks
            # and a hung process after the job had run to its end anyway.
            end_now(
                c,
                f"stopped by {signal.Signals(signum).name}; the same `tenantml seer run` "
                "resumes the job from its last finished stage",
            )

        job = InThread(
            lambda: c.seer(
                tenant,
                model,
                deadline,
                budget,
                p_max=None if math.isinf(cap) else int(cap),
                tuner=tuner,
                # a clock time is the job's identity, not the minutes left: the same command
                # after a Ctrl-C resumes the job (the minutes made it another job each time)
                deadline_at=None if at is None else at.isoformat(timespec="minutes"),
                **_given(
                    eta=eta, v=v, p_min=p_min, t_min=t_min, global_batch=global_batch, seed=seed
                ),
            )
        )
        # The flow runs in a thread, so that the signals stay with this handler: in the main
        # thread Prefect's flow engine takes SIGTERM for the flow's length, and its handler
        # waited for the stage's trials, then failed the job.
        before = {sig: signal.signal(sig, stop) for sig in (signal.SIGINT, signal.SIGTERM)}
        try:
            job.thread.start()
            while job.thread.is_alive():
                job.thread.join(timeout=0.5)
        finally:
            for sig, handler in before.items():
                signal.signal(sig, handler)
        if job.error is not None:
            raise job.error
        out: dict[str, Any] = job.result
        spent = "spent by the same request before" if out.get("reused") else "spent"
        console.print(
            f"{tuner} job {out['job_id']}: best accuracy {out['accuracy']:.3f}, "
            f"{out['gpu_s'] / 60:.1f} GPU-min {spent}; "
            + (
                f"now best (version {out['best_version']})"
                if out["best_version"]
                else "the tenant's best is another model"
            ),
            markup=False,
        )


def register(app: typer.Typer) -> None:
    app.add_typer(seer_app)
