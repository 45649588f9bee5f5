"""``tenantml chaos``: fault injection on real servers on loopback, and its report
(see `tenantml.ops.chaos`)."""

from __future__ import annotations

import json
import tempfile
from pathlib import Path
from typing import Annotated

import typer
from rich.console import Console
from rich.table import Table

from tenantml.cli._out import fail, save_json

__all__ = ["register"]

console = Console(markup=False, highlight=False, soft_wrap=True, width=130)


def chaos(
    full: Annotated[
        bool,
        typer.Option(
            help="the full counts: 20 kills of each kind, 30 s outages, 20 tenants x 10 feeds"
        ),
    ] = False,
    kills: Annotated[
        int | None, typer.Option(help="kills of each kind (default 2; --full 20)")
    ] = None,
    outage_s: Annotated[
        float | None, typer.Option(help="seconds each server is down (default 10; --full 30)")
    ] = None,
    tenants: Annotated[int, typer.Option(help="tenants feeding and inferring at once")] = 20,
    batches: Annotated[
        int | None, typer.Option(help="feeds per tenant (default 3; --full 10)")
    ] = None,
    seed: Annotated[int, typer.Option(help="seeds the order and moments of the faults")] = 0,
    postgres: Annotated[bool, typer.Option(help="run MLflow and Prefect on PostgreSQL")] = False,
    nodes: Annotated[
        int,
        typer.Option(
            help="2: a second node (a network namespace, root) whose whole loss is a fault too"
        ),
    ] = 1,
    node_losses: Annotated[
        int | None,
        typer.Option(help="with --nodes 2: losses of node B (default: as many as --kills)"),
    ] = None,
    home: Annotated[
        Path | None, typer.Option(help="a fresh TENANTML_HOME (default: temporary)")
    ] = None,
    out: Annotated[Path | None, typer.Option(help="write chaos.json here")] = None,
    as_json: Annotated[bool, typer.Option("--json", help="print the JSON summary")] = False,
) -> None:
    """Kill the scheduler, workers and training processes, take each server down, feed from
    many tenants at once; then check that nothing was lost or recorded twice."""
    from tenantml.cli._progress import progress_bar
    from tenantml.ops.chaos import chaos_steps, run_chaos

    kills = kills if kills is not None else (20 if full else 2)
    outage_s = outage_s if outage_s is not None else (30.0 if full else 10.0)
    batches = batches if batches is not None else (10 if full else 3)
    root = home or Path(tempfile.mkdtemp(prefix="tenantml-chaos-"))
    if (root / "servers.json").exists():
        raise fail(f"{root} has servers up already; give a fresh --home")
    total = chaos_steps(kills=kills, outage_s=outage_s, tenants=tenants, batches=batches,
                        nodes=nodes, node_losses=node_losses)  # fmt: skip
    try:
        with progress_bar("faults and feeds", total) as advance:
            rep = run_chaos(
                root,
                kills=kills,
                outage_s=outage_s,
                tenants=tenants,
                batches=batches,
                seed=seed,
                postgres=postgres,
                nodes=nodes,
                node_losses=node_losses,
                say=console.print,
                on_step=advance,
            )
    except ValueError as e:
        raise fail(str(e)) from None
    summary = rep.to_json()
    save_json(out, "chaos.json", summary)
    if as_json:
        console.print(json.dumps(summary))
    else:
        table = Table(title=f"chaos (seed {seed}, {rep.jobs} jobs, {rep.wall_s:.0f} s)")
        for col in (
            "fault",
            "injected",
            "recovered",
            "observations lost",
            "duplicates",
            "max epochs lost",
            "CLI fails in",
            "training again in",
        ):
            table.add_column(col)
        for row in rep.table():
            table.add_row(
                row["fault"],
                str(row["injected"]),
                str(row["recovered"]),
                str(row["observations_lost"]),
                str(row["duplicates"]),
                "-" if row["max_epochs_lost"] is None else f"{row['max_epochs_lost']:g}",
                "-" if row["cli_fail_s_max"] is None else f"{row['cli_fail_s_max']:.1f} s",
                "-" if row["back_s_max"] is None else f"{row['back_s_max']:.0f} s (max)",
            )
        console.print(table)
        c = rep.concurrency
        if c:
            console.print(
                f"concurrency: {c['tenants']} tenants fed {c['examples_fed']} examples "
                f"({c['examples_per_s']:.0f}/s, {c['feeds_per_s']:.1f} feeds/s), "
                f"{c['infer_calls']} infer calls; missing {c['examples_missing']}, "
                f"inconsistent manifests {len(c['inconsistent_manifests'])}, "
                f"errors {len(c['errors'])}"
            )
        if rep.nodes > 1:
            console.print(f"jobs finished per node: {rep.jobs_by_node}")
        if rep.zombies:
            console.print(
                "runs crashed by the heartbeat rule (worker and process both gone), "
                f"then re-dispatched: {rep.zombies}"
            )
        for what in ("lost", "duplicates", "best_wrong", "version_problems"):
            for line in getattr(rep, what):
                console.print(f"{what}: {line}")
    if not rep.ok:
        raise typer.Exit(1)


def register(app: typer.Typer) -> None:
    app.command("chaos")(chaos)
