"""The ``tenantml`` command line.

``tenantml bench`` replays a quality/cost table through the scheduler loop (policy/), and
``tenantml bench-overhead`` measures decision time and memory at cluster scale;
``tenantml bench-demo`` is a short benchmark on built-in real data; ``tenantml bench-startup``
times the everyday commands as a user runs them. The service commands (submit,
feed, refine, examples, infer, status, tenants, run, demo) are in `tenantml.cli.service`.

The app's callback routes warnings and the libraries' logs to ``TENANTML_HOME/logs/tenantml.log``
for the command's duration (`tenantml.cli._logs`); ``tenantml -v COMMAND`` shows them here too.
"""

from __future__ import annotations

import dataclasses
import sys
import time
from collections.abc import Mapping
from pathlib import Path
from typing import TYPE_CHECKING, Annotated, Any

import typer
from rich.console import Console
from rich.table import Table

from tenantml.cli import _logs
from tenantml.cli import chaos as _chaos
from tenantml.cli import seer as _seer
from tenantml.cli import service as _service
from tenantml.cli import spot as _spot
from tenantml.cli._out import fail as _fail
from tenantml.cli._out import save_json, stdout_console

if TYPE_CHECKING:
    from tenantml.bench.datasets import QualityTable
    from tenantml.bench.runner import Protocol, RepeatResult

__all__ = ["app", "main"]

app = typer.Typer(
    name="tenantml",
    help="Multi-tenant, cost-aware model selection for a shared GPU pool.",
    no_args_is_help=True,
    add_completion=False,
)
console = stdout_console()
err_console = Console(stderr=True)


def _save_json(out: Path | None, name: str, data: object) -> None:
    """Write a benchmark's numbers to OUT/NAME (when --out is given) and say so."""
    if save_json(out, name, data) is not None:
        console.print(f"wrote {out}/{name}")


def _fmt(v: float | None, pct: bool = False) -> str:
    if v is None:
        return "-"
    return f"{v:.3f}" if not pct else f"{v:.2f}x"


def _print_summary(summary: dict[str, object], elapsed: float) -> None:
    policies = summary["policies"]
    speedups = summary.get("speedups", {})
    assert isinstance(policies, dict) and isinstance(speedups, dict)
    proto = summary["protocol"]
    assert isinstance(proto, dict)
    mode = "cost-oblivious" if proto["cost_oblivious"] else "cost-aware"
    gpus = f", {proto['gpus']} GPUs" if proto["gpus"] > 1 else ""
    title = (
        f"{summary['dataset']}: {proto['repeats']} repeats, {proto['test_users']} test users, "
        f"budget {proto['budget']:g} ({mode}{gpus})"
    )
    table = Table(title=title)
    columns: tuple[str, ...] = (
        "policy",
        "AUC avg loss",
        "AUC worst",
        "cost to 0.05",
        "cost to 0.02",
        "cost to 0.01",
        "final avg loss",
        "est. loss",
        "vs hybrid @0.02",
    )
    if not speedups:  # no hybrid to compare with: the column would be dashes
        columns = columns[:-1]
    for col in columns:
        if col == "policy":  # names are what --policies takes, values 6 wide: never cut
            table.add_column(col, min_width=max(map(len, policies)))
        else:
            table.add_column(col, justify="right", min_width=6)
    order = sorted(policies, key=lambda p: policies[p]["auc_avg_loss"])
    for name in order:
        s = policies[name]
        ct = s["cost_to_avg_loss"]
        row = (
            name,
            f"{s['auc_avg_loss']:.4f}",
            f"{s['auc_worst_loss']:.4f}",
            _fmt(ct["0.05"]),
            _fmt(ct["0.02"]),
            _fmt(ct["0.01"]),
            f"{s['final_avg_loss']:.4f}",
            f"{s['loss_estimate']['predicted_mean']:.4f}" if "loss_estimate" in s else "-",
            _fmt(speedups.get(name, {}).get("0.02"), pct=True),
        )
        table.add_row(*row[: len(columns)])
    console.print(table)
    if "live" in policies:
        console.print(
            "live = the live service's configuration (default policy, predicted costs, the GP "
            "prior refitted online, policy.prior); est. loss = the loss the service shows"
        )
    if "live-prior" in policies:
        console.print(
            "live-prior = the live service's learnt prior and default policy on the protocol's "
            f"costs ({proto['costs']})"
        )
    if "hybrid_auc_over_oracle" in summary:
        console.print(f"hybrid AUC / oracle AUC = {summary['hybrid_auc_over_oracle']:.2f}")
    console.print(f"[dim]{elapsed:.1f} s[/]")


@app.command()
def bench(
    data_set: Annotated[str | None, typer.Argument(help="built-in data set name")] = None,
    data: Annotated[Path | None, typer.Option(help="long CSV: tenant,model,quality,cost")] = None,
    models_meta: Annotated[Path | None, typer.Option(help="CSV: model,year,citations")] = None,
    tenant_sizes: Annotated[
        Path | None,
        typer.Option(
            help="CSV: tenant,size or tenant,rows[,features][,classes] "
            "(data sizes for --costs predicted)"
        ),
    ] = None,
    tenant_weights: Annotated[
        Path | None,
        typer.Option(help="CSV: tenant,weight (w_i in the weighted regret; unlisted: 1)"),
    ] = None,
    test_users: Annotated[int | None, typer.Option(help="test tenants per repeat")] = None,
    repeats: Annotated[int, typer.Option()] = 50,
    budget: Annotated[
        float | None, typer.Option(help="fraction of total cost (default 0.1; 0.5 oblivious)")
    ] = None,
    cost_oblivious: Annotated[bool, typer.Option("--cost-oblivious")] = False,
    gpus: Annotated[int, typer.Option(help="GPU slots G")] = 1,
    lambda_exp: Annotated[float, typer.Option(help="lambda(G) = G^x for the pooled device")] = 0.8,
    seed: Annotated[int, typer.Option()] = 0,
    policies: Annotated[
        str | None,
        typer.Option(
            help="comma list (default: all that apply; by name only: live-prior, "
            "rate-uncalibrated, rate-predictive)"
        ),
    ] = None,
    out: Annotated[Path, typer.Option(help="output directory")] = Path("results/bench"),
    jobs: Annotated[int | None, typer.Option(help="worker processes (default: all cores)")] = None,
    beta: Annotated[str, typer.Option(help="beta_t rule: simple | theorem")] = "simple",
    delta: Annotated[float, typer.Option()] = 0.1,
    hybrid_s: Annotated[int, typer.Option(help="Hybrid's stagnation steps s")] = 10,
    kernel: Annotated[
        str, typer.Option(help="GP prior: app-a (ease.ml App. A) | empirical (Ledoit-Wolf)")
    ] = "app-a",
    costs: Annotated[
        str, typer.Option(help="given (the table's, ease.ml) | predicted (policy.costs)")
    ] = "given",
    cost_scale: Annotated[str, typer.Option(help="mean | tenant-mean | max")] = "mean",
    cost_kernel: Annotated[
        str,
        typer.Option(
            help="with --costs predicted: a tenant's log costs are additive (one scale per "
            "tenant) | empirical (their covariance learnt across tenants)"
        ),
    ] = "additive",
    time_limit_factor: Annotated[
        float, typer.Option(help="with --costs predicted: stop a job at this x its prediction")
    ] = 16.0,
    mlflow: Annotated[
        bool, typer.Option("--mlflow", help="log each policy as an MLflow run")
    ] = False,
) -> None:
    """Replay a quality/cost table through every policy (ease.ml App. A protocol)."""
    from tenantml.bench.datasets import BenchInputError

    try:
        table = _bench_table(data_set, data, models_meta, tenant_sizes, seed, tenant_weights)
        proto = _bench_protocol(
            table,
            policies,
            test_users=test_users,
            budget=budget,
            repeats=repeats,
            cost_oblivious=cost_oblivious,
            gpus=gpus,
            lambda_exp=lambda_exp,
            seed=seed,
            beta_rule=beta,
            delta=delta,
            hybrid_s=hybrid_s,
            cost_scale=cost_scale,
            kernel=kernel,
            costs=costs,
            cost_kernel=cost_kernel,
            limit_factor=time_limit_factor,
        )
        results, elapsed = _run_with_progress(table, proto, jobs)
    except BenchInputError as e:  # a ValueError that quotes the bad value and the valid ones
        raise _fail(str(e)) from None
    _report_bench(out, table.name, proto, results, elapsed, mlflow=mlflow)


def _bench_table(
    data_set: str | None,
    data: Path | None,
    models_meta: Path | None,
    tenant_sizes: Path | None,
    seed: int,
    tenant_weights: Path | None = None,
) -> QualityTable:
    """The built-in data set or the CSV given (exactly one), with --models-meta,
    --tenant-sizes and --tenant-weights attached."""
    from tenantml.bench.datasets import (
        BUILTIN,
        BenchInputError,
        load_dataset,
        read_models_meta,
        read_quality_csv,
        read_tenant_sizes,
        read_tenant_weights,
    )

    if data_set is not None and data is None:
        table = load_dataset(data_set, seed)
    elif data is not None and data_set is None:
        table = read_quality_csv(data)
    else:
        raise BenchInputError(
            f"give a built-in data set ({', '.join(BUILTIN)}) or --data FILE.csv, not "
            + ("both" if data_set else "neither")
        )
    if models_meta is not None:
        table = dataclasses.replace(table, meta=read_models_meta(models_meta, table.models))
    if tenant_sizes is not None:
        table = dataclasses.replace(table, sizes=read_tenant_sizes(tenant_sizes, table.tenants))
    if tenant_weights is not None:
        weights = read_tenant_weights(tenant_weights, table.tenants)
        table = dataclasses.replace(table, weights=weights)
    return table


def _bench_protocol(
    table: QualityTable,
    policies: str | None,
    *,
    test_users: int | None,
    budget: float | None,
    **fields: Any,
) -> Protocol:
    """The options as a validated `Protocol`; the defaults that depend on the table or mode
    are filled in here: every policy that applies (with ``hybrid-pooled`` beside ``hybrid`` on
    several GPUs), `default_test_users`, and a budget of 0.1 (0.5 cost-oblivious)."""
    from tenantml.bench.runner import Protocol, all_policy_names, default_test_users

    gpus = fields["gpus"]
    names = (
        tuple(p.strip() for p in policies.split(",") if p.strip())
        if policies
        else all_policy_names(table, gpus)
    )
    if gpus > 1 and "hybrid" in names and "hybrid-pooled" not in names:
        names = (*names, "hybrid-pooled")
    if test_users is None:
        test_users = default_test_users(int((~table.kernel_only).sum()))
    if budget is None:
        budget = 0.5 if fields["cost_oblivious"] else 0.1
    return Protocol(policies=names, test_users=test_users, budget=budget, **fields).validate(table)


def _run_with_progress(
    table: QualityTable, proto: Protocol, jobs: int | None
) -> tuple[list[RepeatResult], float]:
    """Every repeat, with a progress bar on stderr (one step per repeat); the results and the
    wall-clock seconds."""
    from tenantml.bench.runner import run_protocol
    from tenantml.cli._progress import progress_bar

    t0 = time.perf_counter()
    with progress_bar(table.name, proto.repeats, console=err_console) as advance:
        results = run_protocol(table, proto, jobs=jobs, on_repeat=lambda _: advance())
    return results, time.perf_counter() - t0


def _report_bench(
    out: Path,
    dataset: str,
    proto: Protocol,
    results: list[RepeatResult],
    elapsed: float,
    *,
    mlflow: bool,
) -> None:
    """Write curves.csv, summary.json and the plots to OUT, print the table, log to MLflow."""
    from tenantml.bench.report import log_to_mlflow, write_outputs

    summary = write_outputs(out, dataset, proto, results)
    summary["elapsed_s"] = elapsed
    save_json(out, "summary.json", summary)
    _print_summary(summary, elapsed)
    console.print(f"wrote {out}/curves.csv, summary.json, avg_loss.png, worst_loss.png")
    if mlflow:
        try:
            log_to_mlflow(summary, out, proto, results)
        except RuntimeError as e:
            raise _fail(str(e)) from None


# Decisions timed in bench-overhead's memory run (its figure is the peak, not the time).
_MEMORY_DECISIONS = 20


@app.command("bench-overhead")
def bench_overhead(
    tenants: Annotated[int, typer.Option()] = 1000,
    models: Annotated[int, typer.Option()] = 200,
    obs: Annotated[int, typer.Option(help="observations per tenant")] = 20,
    decisions: Annotated[int, typer.Option()] = 200,
    memory_tenants: Annotated[int, typer.Option(help="tenants for the memory figure")] = 10000,
    out: Annotated[Path | None, typer.Option(help="directory for overhead.json")] = None,
    policy: Annotated[str, typer.Option(help="policy to time (any of tenantml bench's)")] = (
        "hybrid"
    ),
) -> None:
    """Median decision time (n x K, one new observation each) and peak memory at 10x scale."""
    from policy import POLICY_NAMES
    from tenantml.bench.overhead import measure_overhead
    from tenantml.cli._progress import progress_bar

    if policy not in POLICY_NAMES:
        raise _fail(f"--policy {policy!r}; valid: {', '.join(POLICY_NAMES)}")
    console.print(f"policy: {policy}")
    # No background redraw: it would run inside the timed build and decisions.
    with progress_bar("decisions", decisions, background_refresh=False) as advance:
        speed = measure_overhead(tenants, models, obs, decisions, policy=policy, on_step=advance)
    console.print(
        f"decision, {tenants} tenants x {models} models, {obs} obs each: median "
        f"{speed.decision_ms_median:.2f} ms, p95 {speed.decision_ms_p95:.2f} ms "
        f"(target <= 20 ms); build {speed.build_s:.1f} s"
    )
    result: dict[str, object] = {"policy": policy, "speed": speed.__dict__}
    if memory_tenants > 0:
        # Background redraw on: its few transient allocations are nothing beside the peak.
        with progress_bar("memory", _MEMORY_DECISIONS) as advance:
            mem = measure_overhead(
                memory_tenants,
                models,
                obs,
                decisions=_MEMORY_DECISIONS,
                policy=policy,
                on_step=advance,
            )
        console.print(
            f"memory, {memory_tenants} tenants x {models} models: peak {mem.peak_mib:.0f} MiB "
            f"(target <= 2048 MiB); median decision {mem.decision_ms_median:.2f} ms"
        )
        result["memory"] = mem.__dict__
    _save_json(out, "overhead.json", result)


@app.command("bench-trainer")
def bench_trainer(
    image_size: Annotated[int | None, typer.Option(help="default: 224 on CUDA, 64 on CPU")] = None,
    batch_size: Annotated[int | None, typer.Option(help="default: 128 on CUDA, 32 on CPU")] = None,
    steps: Annotated[
        int | None, typer.Option(help="steps per round; default 30 CUDA, 5 CPU")
    ] = None,
    rounds: Annotated[int, typer.Option(help="alternating rounds; medians are compared")] = 3,
    device: Annotated[str | None, typer.Option(help="cuda, cuda:1, cpu; default: auto")] = None,
    out: Annotated[Path | None, typer.Option(help="directory for trainer.json")] = None,
) -> None:
    """ResNet-18 images/s: our trainer's step vs a plain PyTorch loop, same batch, one run."""
    from tenantml.bench.trainer import measure_trainer
    from tenantml.cli._progress import progress_bar
    from trainers.torch_trainer import pick_device

    gpu = pick_device(device).type == "cuda"
    for name, value in (("image-size", image_size), ("batch-size", batch_size), ("steps", steps)):
        if value is not None and value < 1:
            raise _fail(f"--{name} {value} is not valid: use 1 or more")
    if rounds < 1:
        raise _fail(f"--rounds {rounds} is not valid: use 1 or more")
    with progress_bar("rounds", rounds, background_refresh=False) as advance:
        r = measure_trainer(
            device=device,
            rounds=rounds,
            image_size=image_size or (224 if gpu else 64),
            batch_size=batch_size or (128 if gpu else 32),
            steps=steps or (30 if gpu else 5),
            on_step=advance,
        )
    console.print(
        f"ResNet-18 on {r.device}, {r.image_size}x{r.image_size}x3, batch {r.batch_size}, "
        f"{r.steps} steps x {r.rounds} rounds:\n"
        f"  plain PyTorch loop {r.plain_images_per_s:9.1f} images/s\n"
        f"  tenantml trainer   {r.ours_images_per_s:9.1f} images/s\n"
        f"  ratio ours/plain   {r.ratio:9.3f}  (target >= 0.90)"
    )
    _save_json(out, "trainer.json", r.to_json())


@app.command("bench-feed")
def bench_feed(
    examples: Annotated[int, typer.Option(help="examples to feed")] = 100_000,
    shape: Annotated[str, typer.Option(help="input tensor shape, comma-separated")] = "32,32,3",
    out: Annotated[Path | None, typer.Option(help="directory for feed.json")] = None,
) -> None:
    """Peak RSS of streaming many small examples into a fresh local store (target < 1 GiB)."""
    import tempfile

    from tenantml.bench.feed import FEED_STEP, feed_steps, measure_feed
    from tenantml.cli._progress import progress_bar

    try:
        dims = tuple(int(d) for d in shape.split(","))
        if not dims or min(dims) < 1:
            raise ValueError
    except ValueError:
        raise _fail(f"--shape {shape!r} is not valid: use positive integers like 32,32,3") from None
    if examples < 1:
        raise _fail(f"--examples {examples} is not valid: use 1 or more")
    with (
        tempfile.TemporaryDirectory(prefix="tenantml-feed-") as tmp,
        progress_bar(f"examples (x{FEED_STEP:,})", feed_steps(examples)) as advance,
    ):
        r = measure_feed(Path(tmp), examples, dims, on_step=advance)
    console.print(
        f"fed {r['examples']:,} examples of Tensor[{shape}] ({r['raw_mib']:.0f} MiB raw) in "
        f"{r['seconds']:.1f} s ({r['examples_per_s']:,.0f}/s), {r['batches']} batches; "
        f"peak RSS {r['peak_rss_mib']:.0f} MiB (after imports {r['rss_after_imports_mib']:.0f} "
        "MiB; target < 1024 MiB)"
    )
    _save_json(out, "feed.json", r)


@app.command("bench-service")
def bench_service(
    tenants: Annotated[int, typer.Option()] = 200,
    models: Annotated[int, typer.Option(help="candidates per tenant")] = 20,
    obs: Annotated[int, typer.Option(help="finished jobs per tenant")] = 10,
    slots: Annotated[int, typer.Option()] = 8,
    policy: Annotated[str, typer.Option()] = "rate",
    out: Annotated[Path | None, typer.Option(help="directory for service.json")] = None,
) -> None:
    """CPU seconds of one scheduler pass (problem, decide, tick metrics) at scale, no I/O."""
    from policy import POLICY_NAMES
    from tenantml.bench.service import TICK_PASSES, measure_tick_cpu
    from tenantml.cli._progress import progress_bar

    if policy not in POLICY_NAMES:
        raise _fail(f"--policy {policy!r}; valid: {', '.join(POLICY_NAMES)}")
    for name, v in (("tenants", tenants), ("slots", slots)):
        if v < 1:
            raise _fail(f"--{name} {v} is not valid: use 1 or more")
    try:
        # No background redraw: its thread's CPU would count in the passes' process time.
        with progress_bar("passes", TICK_PASSES, background_refresh=False) as advance:
            r = measure_tick_cpu(tenants, models, obs, slots, policy=policy, on_step=advance)
    except ValueError as e:
        raise _fail(str(e)) from None
    med, first = r["cpu_s_median"], r["cpu_s_first_pass"]
    console.print(
        f"{tenants} tenants x {models} models, {obs} finished jobs each, {slots} slots, {policy}: "
        f"CPU per pass median {r['tick_cpu_s_median'] * 1000:.0f} ms (problem "
        f"{med['build'] * 1000:.1f}, decide {med['decide'] * 1000:.1f}, metrics "
        f"{med['metrics'] * 1000:.1f}); first pass decide {first['decide'] * 1000:.0f} ms; "
        f"slowest later pass {r['tick_cpu_s_max_later'] * 1000:.0f} ms; the planner refitted "
        "the GP prior "
        f"{r['prior_refits']} times (target: tick < 1 s)"
    )
    _save_json(out, "service.json", r)


def _weights(spec: str | None) -> dict[str, float] | None:
    """``"digits=2,wine=0.5"`` -> {"digits": "2", ...} as floats; the values are checked by
    `mlflow_plugin.tracking.valid_weight` where they are used."""
    if not spec:
        return None
    out: dict[str, float] = {}
    for part in (p.strip() for p in spec.split(",") if p.strip()):
        name, sep, value = part.partition("=")
        if not sep or not name.strip():
            raise _fail(f"--weights {part!r} is not NAME=WEIGHT (e.g. digits=2,wine=0.5)")
        try:
            out[name.strip()] = float(value)
        except ValueError:
            raise _fail(
                f"--weights {part!r}: weight {value!r} is not valid: give a number"
            ) from None
    return out


@app.command("bench-live")
def bench_live(
    directory: Annotated[
        Path,
        typer.Argument(
            help="NAME.csv files and/or NAME/<label>/*.png folders; demo: three of the demo's "
            "tenants (wine, breast-cancer, digits); real: the project's 12 real tenant sets (10 "
            "tabular, digits, MNIST; tenantml/data/README.md); images: its two image tenants "
            "(digits, MNIST)"
        ),
    ],
    budget_s: Annotated[float, typer.Option(help="wall clock per system (s)")] = 240.0,
    slots: Annotated[int, typer.Option(help="GPU slots of the service")] = 1,
    systems: Annotated[
        str,
        typer.Option(
            help="comma-separated: live (the default policy), live-independent (the same with "
            "independent arms, the ablation), live-unchained (one job per flow run, the "
            "ablation of chaining short jobs), any policy, flaml"
        ),
    ] = "live,live-independent,hybrid,roundrobin,flaml",
    seed: Annotated[int, typer.Option(help="the train/test split's seed")] = 0,
    repeats: Annotated[
        int,
        typer.Option(
            help="splits to compare on (seeds seed, seed+1, ...): mean and standard error per "
            "system, AUC differences to the first system paired by split"
        ),
    ] = 1,
    test_fraction: Annotated[float, typer.Option(help="held-out part of each tenant")] = 0.25,
    label_column: Annotated[
        str | None, typer.Option(help="the CSVs' label column (default: the last)")
    ] = None,
    max_epochs: Annotated[int, typer.Option(help="epochs per learning rate of torch jobs")] = 10,
    weights: Annotated[
        str | None,
        typer.Option(
            help="tenant weights, e.g. digits=2,wine=0.5 (others 1): set at submission and "
            "weighting the regret"
        ),
    ] = None,
    out: Annotated[Path, typer.Option(help="directory for the results")] = Path(
        "results/bench-live"
    ),
    mlflow: Annotated[
        bool,
        typer.Option(
            "--mlflow",
            help="log each system as a run of the experiment bench-live at "
            "MLFLOW_TRACKING_URI (or MLflow's default), not in the compared services' homes",
        ),
    ] = False,
) -> None:
    """The service end to end (`tenantml run`, embedded) against FLAML per tenant on an equal
    share of the same wall clock: served test accuracy on held-out rows over time."""

    from tenantml.bench.live import MachineNotReady, run_bench_live

    tracking = _bench_live_tracking() if mlflow else None
    try:
        summary = run_bench_live(
            directory,
            out,
            weights=_weights(weights),
            systems=[s.strip() for s in systems.split(",") if s.strip()],
            budget_s=budget_s,
            slots=slots,
            seed=seed,
            repeats=repeats,
            test_fraction=test_fraction,
            label_column=label_column,
            extra_args=("--max-epochs", str(max_epochs)),
            say=console.print,
        )
    except ValueError as e:
        raise _fail(str(e)) from None
    except MachineNotReady as e:  # this machine's fault, not the input's
        raise _fail(str(e), code=1) from None
    if tracking is not None:
        _log_bench_live(summary, out, tracking, directory.name)
    if repeats > 1:
        _print_repeats(summary, out)
        return
    table = Table("system", "q25", "q50", "q75", "end", "regret AUC", "first model", "jobs",
                  "|est - real| (0's)", "est. rank rho")  # fmt: skip
    for name, entry in summary["systems"].items():
        acc = entry["mean_test_accuracy"]
        cal = entry.get("loss_estimate")
        table.add_row(
            name,
            *(f"{acc[q]:.3f}" for q in ("q25", "q50", "q75", "q100")),
            f"{entry['test_regret_auc']:.4f}",
            first_model_cell(entry["first_model_t"], budget_s),
            str(entry["jobs"]) if name != "flaml" else "-",
            f"{cal['mean_abs_error']:.3f} ({cal['realised_mean']:.3f})" if cal else "-",
            _rho(cal.get("rank_correlation") if cal else None),
        )
    console.print(table)
    console.print(f"{_accuracy_mean(summary)} over {len(summary['tenants'])} tenants; in {out}")
    console.print(_ESTIMATE_LEGEND)


def _accuracy_mean(summary: Mapping[str, Any]) -> str:
    """What bench-live's quarter columns are: the tenants' mean, weighted with --weights."""
    weights = set(summary.get("weights", {}).values())
    if len(weights) > 1:
        return "weighted mean served test accuracy (--weights)"
    return "mean served test accuracy"


#: under bench-live's tables: what the loss-estimate columns say
_ESTIMATE_LEGEND = (
    "|est - real|: the loss estimates at the end against the realised test loss (0's: a "
    "constant 0 estimate's error); rho: Spearman's, estimates against realised losses"
)


def first_model_cell(first_model_t: Mapping[str, float | None], budget_s: float) -> str:
    """bench-live's "first model" column: the mean of when the tenants were first served, in
    seconds, and how many never were (they cannot be in the mean, and a system that left one
    unserved must not read as the quicker)."""
    firsts = [t * budget_s for t in first_model_t.values() if t is not None]
    never = len(first_model_t) - len(firsts)
    if not firsts:
        return "none"
    return f"{sum(firsts) / len(firsts):.0f} s" + (f", {never} never" if never else "")


def _rho(value: float | dict[str, float] | None) -> str:
    if value is None:
        return "-"
    if isinstance(value, dict):
        splits = f" ({value['splits']} splits)" if "splits" in value else ""
        return f"{value['mean']:.2f} ± {value['se']:.2f}{splits}"
    return f"{value:.2f}"


def _bench_live_tracking() -> str:
    """The user's tracking URI for `--mlflow`, resolved and checked before any system runs
    (a compared service's home points this process's MLFLOW_TRACKING_URI at itself)."""
    from tenantml.bench.live_mlflow import check_reachable, user_tracking_uri

    uri = user_tracking_uri()
    try:
        check_reachable(uri)
    except ValueError as e:
        raise _fail(str(e)) from None
    return uri


def _log_bench_live(
    summary: dict[str, Any], out: Path, tracking: str, tenant_set: str | None = None
) -> None:
    from tenantml.bench.live_mlflow import EXPERIMENT, log_live_to_mlflow

    ids = log_live_to_mlflow(summary, out, tracking, tenant_set)
    console.print(  # one line, whatever the terminal's width: the URI is copied from it
        f"logged {len(ids)} runs to the MLflow experiment {EXPERIMENT} at {tracking}",
        soft_wrap=True,
    )


def _mean_se_cell(x: Mapping[str, float], digits: int = 3) -> str:
    """A ``{"mean", "se"}`` over splits (`tenantml.bench.live_repeats.mean_se`) as a cell."""
    return f"{x['mean']:.{digits}f} ± {x['se']:.{digits}f}"


def _estimate_cell(error: dict[str, Any], zeros: dict[str, float], splits: int) -> str:
    """The loss estimates' mean absolute error and a constant 0's, over the splits that left
    estimates (said when not all did)."""
    text = f"{_mean_se_cell(error)} ({_mean_se_cell(zeros)})"
    had = int(error.get("splits", splits))
    return text if had >= splits else f"{text}, {had} of {splits} splits"


def _print_repeats(summary: dict[str, Any], out: Path) -> None:
    """bench-live's table over splits: mean ± standard error per system."""
    cell = _mean_se_cell
    ref = summary["reference"]
    table = Table("system", "q25", "q50", "q75", "end", "regret AUC", f"AUC - {ref}",
                  f"from 1st job - {ref}", "jobs", "|est - real| (0's)",
                  "est. rank rho")  # fmt: skip

    def paired(diff: dict[str, Any] | None) -> str:
        return (
            f"{cell(diff, 4)} ({ref} smaller on {diff[f'splits_{ref}_smaller']})" if diff else "-"
        )

    for name, entry in summary["systems"].items():
        acc = entry["mean_test_accuracy"]
        cal = entry.get("loss_estimate_mean_abs_error")
        table.add_row(
            name,
            *(cell(acc[q]) for q in ("q25", "q50", "q75", "q100")),
            cell(entry["test_regret_auc"], 4),
            paired(entry.get(f"auc_minus_{ref}")),
            paired(entry.get(f"from_first_job_minus_{ref}")),
            f"{entry['jobs']['mean']:.0f}" if name != "flaml" else "-",
            _estimate_cell(cal, entry["loss_realised_mean"], len(summary["seeds"]))
            if cal
            else "-",
            _rho(entry.get("loss_estimate_rank_correlation")),
        )  # fmt: skip
    console.print(table)
    others = [n for n, e in summary["systems"].items() if f"auc_minus_{ref}_by_tenant" in e]
    if others:  # where the differences come from
        by_tenant = Table("tenant", *(f"{n}: AUC - {ref}" for n in others))
        for tenant in summary["tenants"]:
            by_tenant.add_row(
                tenant,
                *(paired(summary["systems"][n][f"auc_minus_{ref}_by_tenant"][tenant])
                  for n in others),
            )  # fmt: skip
        console.print(by_tenant)
    for n, entry in summary["systems"].items():  # when: early, or at the end
        lead = entry.get(f"accuracy_lead_of_{ref}_by_tenant")
        if not lead:
            continue
        quarters = Table("tenant", "q25", "q50", "q75", "end",
                         title=f"served test accuracy, {ref} minus {n} (splits {ref} "
                               "ahead:behind)")  # fmt: skip
        for tenant in summary["tenants"]:
            quarters.add_row(tenant, *(
                f"{cell(x, 3)} ({x[f'splits_{ref}_ahead']}:{x[f'splits_{ref}_behind']})"
                for x in (lead[tenant][q] for q in ("q25", "q50", "q75", "q100"))
            ))  # fmt: skip
        console.print(quarters)
    console.print(
        f"{_accuracy_mean(summary)} over {len(summary['tenants'])} tenants, mean ± s.e. over "
        f"{len(summary['seeds'])} splits (seeds {', '.join(map(str, summary['seeds']))}); "
        "'from 1st job': the mean test regret over the same time from each service's first job "
        f"(its start-up left out); in {out}"
    )
    console.print(_ESTIMATE_LEGEND)


@app.command("bench-live-combine")
def bench_live_combine(
    runs: Annotated[
        list[Path],
        typer.Argument(help="bench-live --out directories of one comparison on other seeds"),
    ],
    out: Annotated[Path, typer.Option(help="directory for the combined results")] = Path(
        "results/bench-live-combined"
    ),
    mlflow: Annotated[
        bool,
        typer.Option("--mlflow", help="log each system's combination as in bench-live --mlflow"),
    ] = False,
) -> None:
    """bench-live runs made apart (`--seed 0 --repeats 6`, then `--seed 6 --repeats 6`)
    combined as one run over all their splits: the same table and files as `--repeats`."""
    from tenantml.bench.live import combine_runs

    tracking = _bench_live_tracking() if mlflow else None
    try:
        summary = combine_runs(runs, out)
    except ValueError as e:
        raise _fail(str(e)) from None
    if tracking is not None:
        _log_bench_live(summary, out, tracking)
    _print_repeats(summary, out)


@app.command("bench-dispatch")
def bench_dispatch(
    jobs: Annotated[int, typer.Option()] = 20,
    job_seconds: Annotated[float, typer.Option(help="each job sleeps this long")] = 120.0,
    slots: Annotated[int, typer.Option()] = 2,
    postgres: Annotated[bool, typer.Option(help="servers on PostgreSQL")] = False,
    warm: Annotated[
        bool | None,
        typer.Option(
            "--warm/--cold",
            help="flow runs fork from a warm process, or start anew (default: as `up`: warm "
            "with one node, cold with two)",
            show_default=False,
        ),
    ] = None,
    prefetch: Annotated[int, typer.Option(help="jobs sent per slot beyond the running one")] = 1,
    nodes: Annotated[
        int, typer.Option(help="2: half the slots on a second node (a network namespace; root)")
    ] = 1,
    chain_s: Annotated[
        float, typer.Option(help="the scheduler's --chain-s: jobs chained to a run (0: one)")
    ] = 0.0,
    out: Annotated[Path | None, typer.Option(help="directory for dispatch.json")] = None,
) -> None:
    """Dispatch latency and GPU-slot idle fraction through real servers (started here)."""
    from tenantml.bench.service import measure_dispatch

    if jobs < 1 or slots < 1 or job_seconds <= 0 or prefetch < 0 or chain_s < 0:
        raise _fail(
            "--jobs, --slots and --job-seconds must be positive, --prefetch and --chain-s 0 or more"
        )
    try:
        r = measure_dispatch(jobs, job_seconds, slots, postgres, warm, prefetch, nodes, chain_s)
    except ValueError as e:
        raise _fail(str(e)) from None
    console.print(
        f"{r['jobs']} jobs of {job_seconds:g} s on {slots} slots: dispatch-to-first-step "
        f"latency median {r['latency_s_median']:.2f} s (max {r['latency_s_max']:.2f}); slot "
        f"hand-off gap median {r['handoff_gap_s_median'] or 0:.2f} s; makespan "
        f"{r['makespan_s']:.0f} s vs ideal {r['ideal_makespan_s']:.0f} s; slot idle "
        f"{r['idle_fraction']:.1%} (target <= 5%); busy from each slot's first job on "
        f"{r['busy_fraction_steady']:.1%} ({'warm' if r['warm'] else 'cold'} flow-run processes, "
        f"{r['jobs_per_run']} job{'s' if r['jobs_per_run'] > 1 else ''} per run"
        f"{'; jobs by node ' + str(r['jobs_by_node']) if nodes > 1 else ''})"
    )
    _save_json(out, "dispatch.json", r)


@app.command("bench-demo")
def bench_demo(
    out: Annotated[Path, typer.Option(help="output directory")] = Path("results/demo"),
    repeats: Annotated[int, typer.Option()] = 10,
) -> None:
    """Short replay benchmark on built-in real data (easeml-dl), printing the table."""
    bench(
        data_set="easeml-dl",
        data=None,
        models_meta=None,
        tenant_sizes=None,
        tenant_weights=None,
        test_users=None,
        repeats=repeats,
        budget=None,
        cost_oblivious=False,
        gpus=1,
        lambda_exp=0.8,
        seed=0,
        policies=None,
        out=out,
        jobs=None,
        beta="simple",
        delta=0.1,
        hybrid_s=10,
        mlflow=False,
    )


@app.command("bench-startup")
def bench_startup(
    tenants: Annotated[int, typer.Option(help="tenants in the home timed")] = 20,
    examples: Annotated[int, typer.Option(help="examples per tenant (3 or more)")] = 6,
    repeats: Annotated[int, typer.Option(help="runs per command; the median is kept")] = 3,
    commands: Annotated[str | None, typer.Option(help="comma list (default: all of them)")] = None,
    home: Annotated[
        Path | None, typer.Option("--home", help="build the home here (default: a temporary one)")
    ] = None,
    out: Annotated[Path | None, typer.Option(help="directory for startup.json")] = None,
    run: Annotated[
        bool,
        typer.Option(
            "--run/--no-run",
            help="also time `tenantml run` on a new home to its first job (with and without "
            "Prefect's template database)",
        ),
    ] = True,
) -> None:
    """Seconds the everyday commands take to answer, each in its own process.

    On a home with N tenants; each command's median and its ratio to `python -c pass` timed in
    the same run (targets: tenants, examples, status < 1 s; feed, infer < 2 s). With --run,
    also the seconds `tenantml run` takes on a new home to dispatch its first job."""
    import tempfile

    from tenantml.bench.startup import (
        COMMANDS,
        FirstDispatch,
        measure_first_dispatch,
        measure_startup,
        startup_runs,
        to_json,
    )
    from tenantml.cli._progress import progress_bar

    names = [c.strip() for c in commands.split(",") if c.strip()] if commands else list(COMMANDS)
    total = startup_runs(len(names), repeats)
    first: FirstDispatch | None = None
    with tempfile.TemporaryDirectory(prefix="tenantml-startup-") as tmp:
        try:
            with progress_bar("command runs", total, background_refresh=False) as advance:
                python_s, times = measure_startup(
                    home or Path(tmp) / "home",
                    n_tenants=tenants,
                    n_examples=examples,
                    repeats=repeats,
                    commands=names,
                    on_step=advance,
                )
            if run:
                with progress_bar("new homes run", 2 * repeats) as advance:
                    first = measure_first_dispatch(
                        Path(tmp) / "runs",
                        n_tenants=tenants,
                        n_examples=examples,
                        repeats=repeats,
                        on_step=advance,
                    )
        except ValueError as e:
            raise _fail(str(e)) from None
    table = Table(title=f"startup, {tenants} tenants, median of {repeats}")
    for col in ("command", "seconds", "x python -c pass", "exit", "loads"):
        table.add_column(col, justify="left" if col in ("command", "loads") else "right")
    table.add_row("python -c pass", f"{python_s:.3f}", "1.0", "0", "")
    for t in times:
        code = str(t.exit_code) if t.exit_code == t.expected_exit_code else f"{t.exit_code}!"
        table.add_row(
            t.command, f"{t.seconds:.3f}", f"{t.ratio:.1f}", code, ", ".join(t.frameworks) or "-"
        )
    console.print(table)
    bad = [t.command for t in times if t.exit_code != t.expected_exit_code]
    if bad:
        err_console.print(f"[yellow]unexpected exit status:[/] {', '.join(bad)} (marked !)")
    if first is not None:
        console.print(
            f"tenantml run on a new home, first job dispatched after (median of {repeats}): "
            f"{first.cold_s:.1f} s with no template (Prefect migrates), "
            f"{first.template_s:.1f} s from the template"
        )
    _save_json(out, "startup.json", to_json(python_s, times, tenants, repeats, first))


_service.register(app)
_seer.register(app)
_spot.register(app)
_chaos.register(app)


@app.callback()
def _quiet(
    ctx: typer.Context,
    verbose: Annotated[
        bool,
        typer.Option(
            "--verbose",
            "-v",
            help="show the libraries' warnings and logs here too (always in "
            "TENANTML_HOME/logs/tenantml.log)",
        ),
    ] = False,
) -> None:
    """Multi-tenant, cost-aware model selection for a shared GPU pool."""
    # Before any command imports MLflow or Prefect, so they log through the root logger.
    routing = _logs.route(verbose)

    def close() -> None:
        line = routing.summary()
        routing.close()
        if line:
            err_console.print(line, style="dim", markup=False, highlight=False, soft_wrap=True)

    ctx.call_on_close(close)


def main() -> None:
    """The ``tenantml`` entry point: the app, with warnings and library logs routed to the
    home's log file by its callback (`tenantml.cli._logs`; ``-v`` shows them here too)."""
    import signal

    from tenantml import _signals

    # Ctrl-C and SIGTERM end any command with one line and exit 130, as `run`'s own handlers
    # do (they replace these): Typer turned the interrupt into a silent exit 130, and SIGTERM
    # killed the command with 143. A command that prints its own line says so (`announce`).
    _signals.reset()
    for sig in (signal.SIGINT, signal.SIGTERM):
        signal.signal(sig, _signals.interrupt)
    try:
        app()
    except KeyboardInterrupt:  # a signal before Typer took over
        pass
    except SystemExit as e:  # Typer's silent exit 130 after a signal (or any other exit)
        if e.code != 130 or not _signals.received:
            raise
    else:
        return
    if not _signals.announced():
        name = _signals.received[-1] if _signals.received else "SIGINT"
        err_console.print(f"stopped by {name}", highlight=False)
    sys.exit(130)


if __name__ == "__main__":
    main()
