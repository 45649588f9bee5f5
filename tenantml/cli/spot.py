"""``tenantml spot``: transient capacity (SpotTune, shared/papers/004).

- ``spot earlycurve``: EarlyCurve vs a single-stage fit on recorded learning curves;
- ``spot revpred``: revocation predictors trained and evaluated on real spot price traces;
- ``spot simulate``: SpotTune vs single spot instances and on-demand on real price traces.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Annotated

import typer
from rich.console import Console
from rich.table import Table

from tenantml.cli._out import fail as _fail
from tenantml.cli._out import save_json

__all__ = ["register"]

console = Console(soft_wrap=True)
err_console = Console(stderr=True, soft_wrap=True)

spot_app = typer.Typer(
    name="spot",
    help="Transient (spot) capacity: EarlyCurve, revocation prediction, cost simulation.",
    no_args_is_help=True,
)


def _require(*checks: tuple[bool, str, object, str]) -> None:
    """Each ``(ok, option, value, valid)``: the first not ok is one line naming the option, its
    value and what is valid (before anything runs; they raised ZeroDivisionError, KeyError or
    IndexError, or ran to a meaningless answer)."""
    for ok, option, value, valid in checks:
        if not ok:
            raise _fail(f"{option} {value!r} is not valid: {valid}")


def _floats(text: str, name: str) -> list[float]:
    try:
        return [float(x) for x in text.split(",") if x.strip()]
    except ValueError:
        raise _fail(f"{name} {text!r} is not a comma list of numbers") from None


@spot_app.command("earlycurve")
def earlycurve_cmd(
    curves: Annotated[
        str, typer.Option(help="built-in set (steplr-digits, opda-alexnet, lcdb, ...) or CSV")
    ] = "steplr-digits",
    theta: Annotated[
        str, typer.Option(help="comma list of theta in (0, 1]")
    ] = "0.1,0.2,0.3,0.4,0.5,0.6,0.7,0.8,0.9,1.0",
    maximize: Annotated[bool, typer.Option(help="the metric is higher-better (accuracy)")] = False,
    groups: Annotated[int | None, typer.Option(help="use only the first N groups")] = None,
    draws: Annotated[int, typer.Option(help="16-curve problems drawn per large group")] = 200,
    as_json: Annotated[bool, typer.Option("--json", help="print JSON")] = False,
    out: Annotated[Path | None, typer.Option(help="directory for earlycurve.json")] = None,
    jobs: Annotated[int | None, typer.Option(help="processes (default: all cores)")] = None,
    xi: Annotated[float, typer.Option(help="Eq. 7: change rate that starts a stage")] = 0.5,
    epsilon: Annotated[float, typer.Option(help="Eq. 7: steady change rate before it")] = 0.01,
) -> None:
    """Mean relative error of the predicted final metric and top-1/top-3 selection accuracy."""
    from tenantml.bench.curves import CurveFormatError, load_curves
    from tenantml.bench.earlycurve import evaluate
    from tenantml.cli._progress import progress_bar

    thetas = _floats(theta, "--theta")
    _require(
        (bool(thetas), "--theta", theta, "give a comma list of theta in (0, 1]"),
        (draws >= 1, "--draws", draws, "use 1 or more"),
        (groups is None or groups >= 1, "--groups", groups, "use 1 or more"),
    )
    try:
        sets = load_curves(curves)
        if groups is not None:
            sets = dict(list(sets.items())[: max(1, groups)])
        total = len(sets) * len(thetas)
        with progress_bar("group x theta", total, console=err_console) as advance:
            result = evaluate(
                sets,
                thetas,
                maximize=maximize,
                draws=draws,
                jobs=jobs,
                xi=xi,
                epsilon=epsilon,
                on_step=advance,
            )
    except (CurveFormatError, ValueError) as e:
        raise _fail(str(e)) from None
    result["curve_set"] = curves
    save_json(out, "earlycurve.json", result)
    if as_json:
        console.print_json(json.dumps(result))
        return
    table = Table("theta", "EarlyCurve MRE", "top-1", "top-3", "single-stage MRE", "top-1", "top-3")
    rows = result["theta"]
    assert isinstance(rows, dict)
    for t, r in rows.items():
        ec, ss = r["earlycurve"], r["single_stage"]
        table.add_row(
            t,
            f"{ec['mre']:.4f}",
            f"{ec['top1']:.3f}",
            f"{ec['top3']:.3f}",
            f"{ss['mre']:.4f}",
            f"{ss['top1']:.3f}",
            f"{ss['top3']:.3f}",
        )
    console.print(table)
    console.print(
        f"{result['curves']} curves, {result['problems']} tuning problems ({curves})",
        markup=False,
    )


def _window(start: str, days: float) -> tuple[str, str]:
    import pandas as pd

    try:
        t0 = pd.Timestamp(start)
    except ValueError:
        raise _fail(f"--start {start!r} is not a date (YYYY-MM-DD)") from None
    lo, hi = pd.Timestamp("2015-03-12"), pd.Timestamp("2015-08-31")
    t1 = t0 + pd.Timedelta(days=days)
    if t0 < lo or t1 > hi:
        raise _fail(
            f"the window {t0.date()} + {days:g} days is outside the price traces "
            f"({lo.date()} .. {hi.date()})"
        )
    return str(t0.date()), str(t1.date())


@spot_app.command("revpred")
def revpred_cmd(
    start: Annotated[str, typer.Option(help="first day of the training window (2015)")] = (
        "2015-08-01"
    ),
    train_days: Annotated[float, typer.Option(help="days to train on (Sec. IV-D: 9)")] = 9,
    test_days: Annotated[float, typer.Option(help="days to test on, right after (3)")] = 3,
    stride: Annotated[int, typer.Option(help="minutes between samples")] = 5,
    epochs: Annotated[int, typer.Option(help="training epochs per model")] = 8,
    types: Annotated[str | None, typer.Option(help="comma list of instance types")] = None,
    as_json: Annotated[bool, typer.Option("--json", help="print JSON")] = False,
    out: Annotated[Path | None, typer.Option(help="directory for revpred.json")] = None,
) -> None:
    """RevPred vs Tributary-style vs logistic regression: accuracy and F1 per market."""
    from tenantml.bench.revpred import run_revpred
    from tenantml.bench.spot_data import INSTANCE_TYPES, load_markets
    from tenantml.cli._progress import progress_bar

    _require(
        (train_days > 0, "--train-days", train_days, "use a positive number of days"),
        (test_days > 0, "--test-days", test_days, "use a positive number of days"),
        (stride >= 1, "--stride", stride, "use 1 or more minutes"),
        (epochs >= 1, "--epochs", epochs, "use 1 or more"),
    )
    kinds = tuple(t.strip() for t in types.split(",")) if types else None
    if kinds and (bad := [k for k in kinds if k not in INSTANCE_TYPES]):
        raise _fail(f"unknown instance type(s) {bad}; valid: {', '.join(INSTANCE_TYPES)}")
    lo, hi = _window(start, train_days + test_days + 0.1)
    markets = load_markets(lo, hi, kinds)
    with progress_bar("markets", len(markets), console=err_console) as advance:
        report, _ = run_revpred(
            markets,
            train_days=train_days,
            test_days=test_days,
            stride=stride,
            epochs=epochs,
            on_step=advance,
        )
    save_json(out, "revpred.json", report)
    if as_json:
        console.print_json(json.dumps(report))
        return
    table = Table(
        "market", "positives", "RevPred acc", "F1", "Tributary acc", "F1", "logistic acc", "F1"
    )
    for r in report["markets"]:  # type: ignore[attr-defined]
        table.add_row(
            r["market"],
            f"{r['test_positive_share']:.3f}",
            *(
                f"{r[k][s]:.3f}"
                for k in ("revpred", "tributary", "logistic")
                for s in ("accuracy", "f1")
            ),
        )
    pooled = report["pooled"]
    assert isinstance(pooled, dict)
    table.add_row(
        "all (pooled)",
        "",
        *(
            f"{pooled[k][s]:.3f}"
            for k in ("revpred", "tributary", "logistic")
            for s in ("accuracy", "f1")
        ),
    )
    console.print(table)


@spot_app.command("simulate")
def simulate_cmd(
    curves: Annotated[str, typer.Option(help="curve set whose first group is the workload")] = (
        "steplr-digits"
    ),
    start: Annotated[str, typer.Option(help="first day: RevPred trains 9 days from here")] = (
        "2015-08-01"
    ),
    runs: Annotated[int, typer.Option(help="jobs started at seeded times after training")] = 5,
    step_scale: Annotated[float, typer.Option(help="work per step x the measured one")] = 1000,
    parallel_fraction: Annotated[
        float | None, typer.Option(help="Amdahl f (default: measured here)")
    ] = None,
    predictor: Annotated[str, typer.Option(help="revpred | tributary | logistic | none")] = (
        "revpred"
    ),
    mcnt: Annotated[int, typer.Option(help="trials trained to the end after EarlyCurve")] = 1,
    restore_min: Annotated[int, typer.Option(help="minutes to boot and restore")] = 1,
    out: Annotated[Path, typer.Option(help="output directory")] = Path("results/spot"),
) -> None:
    """Cost, job completion time and performance-cost rate of SpotTune and the baselines."""
    import numpy as np

    from tenantml.bench.curves import CurveFormatError, load_curves
    from tenantml.bench.revpred import revocation_function, run_revpred
    from tenantml.bench.spot_data import load_markets
    from tenantml.bench.spot_sim import (
        parallel_fraction as measured_f,
    )
    from tenantml.bench.spot_sim import (
        run_simulation,
        workload,
        write_plots,
    )
    from tenantml.cli._progress import progress_bar

    if predictor not in ("revpred", "tributary", "logistic", "none"):
        raise _fail(f"--predictor {predictor!r} is not valid: revpred, tributary, logistic, none")
    _require(
        (runs >= 1, "--runs", runs, "use 1 or more"),
        (step_scale > 0, "--step-scale", step_scale, "use a positive number"),
        (mcnt >= 1, "--mcnt", mcnt, "use 1 or more trials"),
        (restore_min >= 0, "--restore-min", restore_min, "use 0 or more minutes"),
        (
            parallel_fraction is None or 0 <= parallel_fraction <= 1,
            "--parallel-fraction",
            parallel_fraction,
            "use a fraction in [0, 1]",
        ),
    )
    try:
        group = next(iter(load_curves(curves).values()))
    except CurveFormatError as e:
        raise _fail(str(e)) from None
    lo, hi = _window(start, 30)
    markets = load_markets(lo, hi)
    f = measured_f() if parallel_fraction is None else parallel_fraction
    trials = workload(group, markets, step_scale=step_scale, f=f)
    train_end = 59 + 9 * 1440
    if predictor == "none":
        revocation: object = lambda m, t, b: 0.0  # noqa: E731
        report: dict[str, object] = {}
    else:
        with progress_bar("RevPred markets", len(markets), console=err_console) as advance:
            report, trained = run_revpred(markets, train_days=9, test_days=3, on_step=advance)
        revocation = revocation_function(trained, predictor)
    rng = np.random.default_rng(0)
    starts = sorted(int(x) for x in rng.integers(train_end, train_end + 3 * 1440, runs))
    with progress_bar("runs", len(starts), console=err_console) as advance:
        try:
            result = run_simulation(
                trials,
                markets,
                starts,
                revocation,
                mcnt=mcnt,
                restore_min=restore_min,
                on_step=advance,
            )
        except ValueError as e:  # the work outlasts the price traces (a large --step-scale)
            raise _fail(f"{e}: use a smaller --step-scale (now {step_scale:g})") from None
    result.update(
        {
            "workload": curves,
            "parallel_fraction": f,
            "step_scale": step_scale,
            "predictor": predictor,
            "revpred": report.get("pooled"),
        }
    )
    save_json(out, "summary.json", result, default=float)
    write_plots(result, out)
    table = Table(
        "method",
        "cost (USD)",
        "JCT (h)",
        "PCR",
        "saving vs cheapest spot",
        "best selected",
        "free steps",
        "revocations",
    )
    methods = result["methods"]
    assert isinstance(methods, dict)
    for name, s in methods.items():
        table.add_row(
            name,
            f"{s['cost_usd']:.3f}",
            f"{s['jct_h']:.2f}",
            f"{s['pcr']:.2f}",
            f"{s['saving_vs_cheapest_spot']:.1%}",
            f"{s['best_selected']:.2f}",
            f"{s['free_step_share']:.1%}",
            f"{s['revocations']:.1f}",
        )
    console.print(table)
    console.print(
        f"{len(trials)} trials, {runs} runs, f = {f:.2f}; wrote {out}/summary.json", markup=False
    )


@spot_app.command("revoke-bench")
def revoke_bench_cmd(
    revocations: Annotated[int, typer.Option(help="notices to deliver at least")] = 20,
    jobs: Annotated[int, typer.Option(help="jobs per round")] = 4,
    epochs: Annotated[int, typer.Option(help="epochs per job (25 steps each)")] = 20,
    seconds_per_minute: Annotated[float, typer.Option(help="real seconds per trace minute")] = 3.0,
    delta: Annotated[float, typer.Option(help="maximum price above the market (USD/h)")] = 1e-5,
    out: Annotated[Path | None, typer.Option(help="directory for revoke.json")] = None,
) -> None:
    """Revoke workers on a replayed price trace; every job must finish, losing nothing."""
    from tenantml.bench.revoke import revoke_bench
    from tenantml.cli._progress import progress_bar

    _require(
        (revocations >= 1, "--revocations", revocations, "use 1 or more"),
        (jobs >= 1, "--jobs", jobs, "use 1 or more"),
        (epochs >= 1, "--epochs", epochs, "use 1 or more"),
        (seconds_per_minute > 0, "--seconds-per-minute", seconds_per_minute, "use > 0"),
    )
    with progress_bar("notices", revocations, console=err_console) as advance:
        result = revoke_bench(
            revocations=revocations,
            jobs=jobs,
            epochs=epochs,
            seconds_per_minute=seconds_per_minute,
            delta=delta,
            on_step=advance,
        )
    save_json(out, "revoke.json", result)
    console.print_json(json.dumps(result))


def register(app: typer.Typer) -> None:
    app.add_typer(spot_app)
