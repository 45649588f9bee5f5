"""The service commands of the ``tenantml`` CLI: they mirror `tenantml.Client`.

Pipe style (ease.ml Fig. 3)::

    find dogs -name '*.jpg' | tenantml feed pets --label dog
    find new -name '*.jpg' | tenantml infer pets            # path<TAB>prediction per line

Exit codes: 0 ok; 2 bad input (unknown tenant, bad schema or example, bad option); 1 the service
cannot answer (a server is down, no model yet).
"""

from __future__ import annotations

import json
import sys
import threading
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Annotated, Any

import numpy as np
import typer
from rich.console import Console
from rich.live import Live
from rich.table import Table

__all__ = ["register"]

console = Console(markup=False, highlight=False, soft_wrap=True)  # data may hold [brackets]
err = Console(stderr=True, markup=False, highlight=False)

Files = Annotated[list[Path] | None, typer.Argument(help="files (default: paths on stdin)")]
Home = Annotated[Path | None, typer.Option("--home", help="TENANTML_HOME (default ~/.tenantml)")]


@contextmanager
def _errors() -> Iterator[None]:
    """Known failures -> one clear line on stderr and a non-zero exit; nothing half-written."""
    from store import UnknownTenantError
    from tasks.settings import ServerUnreachableError
    from tenantml.client import NoModelYetError

    try:
        yield
    except (NoModelYetError, ServerUnreachableError) as e:
        err.print(f"error: {e}", soft_wrap=True)
        raise typer.Exit(1) from None
    except PermissionError as e:  # store._scoped.TenantAccessError
        err.print(f"error: {e}", soft_wrap=True)
        raise typer.Exit(2) from None
    except (UnknownTenantError, ValueError, KeyError, FileNotFoundError) as e:
        msg = e.args[0] if isinstance(e, KeyError) and e.args else e
        err.print(f"error: {msg}", soft_wrap=True)
        raise typer.Exit(2) from None
    except Exception as e:  # MLflow's RestException (not imported here: it loads all MLflow)
        if getattr(e, "error_code", None) not in ("PERMISSION_DENIED", "UNAUTHENTICATED"):
            raise
        err.print(
            f"error: the MLflow server refused: {str(e)[:300]} (check TENANTML_USER and "
            "TENANTML_PASSWORD; a tenant reaches only its own tenant)",
            soft_wrap=True,
        )
        raise typer.Exit(2) from None


def _client(home: Path | None) -> Any:
    from tenantml.client import Client

    return Client(home)


def _plain(value: Any) -> Any:
    """A prediction or label as a plain int/float/str/list (no ``np.int64(...)`` reprs)."""
    if isinstance(value, np.ndarray):
        return value.tolist()
    return value.item() if isinstance(value, np.generic) else value


def _home() -> Path:
    """``TENANTML_HOME`` (default ~/.tenantml), as `tasks.settings.Settings` resolves it."""
    from tasks.settings import Settings

    return Settings.resolve_home()


def _paths(files: list[Path] | None) -> list[str]:
    if files:
        return [str(f) for f in files]
    if sys.stdin is None or sys.stdin.isatty():
        raise ValueError("give files as arguments or one path per line on standard input")
    return [line.strip() for line in sys.stdin if line.strip()]


def submit(
    name: Annotated[str, typer.Argument(help="tenant name: [a-z][a-z0-9_-]*")],
    schema: Annotated[str, typer.Argument(help="schema text, or @FILE to read it from a file")],
    home: Home = None,
) -> None:
    """Declare a task by its input/output schema (ease.ml Fig. 2 syntax)."""
    with _errors():
        text = Path(schema[1:]).read_text() if schema.startswith("@") else schema
        lb = _client(home).submit(name, text)
        console.print(f"tenant {name!r}: {lb.schema}; {lb.n_candidates} candidate models")


def feed(
    name: Annotated[str, typer.Argument()],
    files: Annotated[
        list[Path] | None, typer.Argument(help="files (default: paths on stdin)")
    ] = None,
    label: Annotated[str | None, typer.Option(help="label of every file fed")] = None,
    csv: Annotated[Path | None, typer.Option(help="CSV with a header: one example per row")] = None,
    label_column: Annotated[str | None, typer.Option(help="the CSV's label column")] = None,
    npz: Annotated[Path | None, typer.Option(help=".npz with arrays x and y")] = None,
    home: Home = None,
) -> None:
    """Feed labelled examples: files with --label, a CSV, or an .npz; all or nothing."""
    with _errors():
        c = _client(home)
        if npz is not None:
            from store.limits import load_npz

            arrays = load_npz(npz, ("x", "y"))
            snap, ids = c.feed(name, arrays["x"], arrays["y"])
        elif csv is not None:
            from store.loaders import read_csv_rows

            field = c.store.schema(name).input.single
            if field is None or len(field.shape) != 1:
                raise ValueError(f"--csv feeds flat Tensor[A] inputs; {name!r} is {field}")
            x, labels = read_csv_rows(csv, field.shape[0], label_column)
            if labels is None:
                if label is None:
                    raise ValueError("give --label-column (per row) or --label (for all rows)")
                labels = [label] * len(x)
            snap, ids = c.feed(name, x, labels)
        else:
            if label is None:
                raise ValueError("give --label for the files fed (one label per call)")
            paths = _paths(files)
            snap, ids = c.feed_files(name, paths, [label] * len(paths))
        console.print(f"fed {len(ids)} examples (ids {ids.start}-{ids.stop - 1}); snapshot {snap}")


def _ids(text: str | None) -> list[int]:
    if not text:
        return []
    try:
        return [int(v) for v in text.split(",") if v.strip()]
    except ValueError:
        raise ValueError(f"ids {text!r} are not valid: use comma-separated integers") from None


def refine(
    name: Annotated[str, typer.Argument()],
    disable: Annotated[str | None, typer.Option(help="ids to switch off, e.g. 3,17")] = None,
    enable: Annotated[str | None, typer.Option(help="ids to switch back on")] = None,
    home: Home = None,
) -> None:
    """Switch examples off (noisy labels) or back on, by id."""
    with _errors():
        snap = _client(home).refine(name, enable=_ids(enable), disable=_ids(disable))
        console.print(f"snapshot {snap}")


def examples(
    name: Annotated[str, typer.Argument()],
    snapshot: Annotated[int | None, typer.Option()] = None,
    as_json: Annotated[bool, typer.Option("--json", help="JSON lines")] = False,
    home: Home = None,
) -> None:
    """List examples with their id, enabled flag and label."""
    with _errors():
        for r in _client(home).examples(name, snapshot):
            if as_json:
                print(json.dumps({"id": r.id, "enabled": r.enabled, "label": r.label}))
            else:
                print(f"{r.id}\t{'on' if r.enabled else 'off'}\t{r.label}")


def infer(
    name: Annotated[str, typer.Argument()],
    files: Annotated[
        list[Path] | None, typer.Argument(help="files (default: paths on stdin)")
    ] = None,
    csv: Annotated[Path | None, typer.Option(help="CSV with a header: one input per row")] = None,
    as_json: Annotated[bool, typer.Option("--json", help="JSON lines")] = False,
    home: Home = None,
) -> None:
    """Predict with the tenant's best model so far: prints ``input<TAB>prediction`` lines."""
    with _errors():
        c = _client(home)
        if csv is not None:
            from store.loaders import read_csv_rows

            field = c.store.schema(name).input.single
            if field is None or len(field.shape) != 1:
                raise ValueError(f"--csv infers flat Tensor[A] inputs; {name!r} is {field}")
            x, _ = read_csv_rows(csv, field.shape[0])
            keys = [f"{csv}:{i + 2}" for i in range(len(x))]
            pred = c.infer(name, x)
        else:
            keys = _paths(files)
            pred = c.infer_files(name, keys)
        for key, p in zip(keys, pred, strict=True):
            value = _plain(p)
            print(json.dumps({"input": key, "prediction": value}) if as_json else f"{key}\t{value}")


def status(name: Annotated[str, typer.Argument()], home: Home = None) -> None:
    """Leaderboard: models tried, accuracy, cost, when, and which is `best`."""
    with _errors():
        lb = _client(home).status(name)
        t = Table(title=f"{name}: {lb.schema}", title_justify="left")
        for col in ("model", "status", "accuracy", "cost (s)", "finished", "best"):
            t.add_column(col)
        for r in lb.rows:
            when = time.strftime("%H:%M:%S", time.localtime(r.finished_at)) if r.finished_at else ""
            t.add_row(
                r.candidate,
                r.status,
                "" if r.accuracy is None else f"{r.accuracy:.4f}",
                "" if r.cost_s is None else f"{r.cost_s:.1f}",
                when,
                "*" if r.best else "",
            )
        console.print(t)
        console.print(
            f"{lb.n_enabled}/{lb.n_examples} examples enabled, snapshot {lb.snapshot}; "
            f"{len(lb.rows)}/{lb.n_candidates} candidates tried; best version "
            f"{lb.best_version or 'none yet'}"
        )


def tenants(home: Home = None) -> None:
    """List tenants."""
    with _errors():
        for name in _client(home).tenants():
            print(name)


def run(
    ticks: Annotated[
        int | None,
        typer.Option(
            help="stop after N ticks (default: run on); 0: finish the jobs left in "
            "flight by an earlier scheduler, start none"
        ),
    ] = None,
    policy: Annotated[str | None, typer.Option(help="scheduling policy (default: rate)")] = None,
    slots: Annotated[int | None, typer.Option(help="GPU slots (default: GPUs, or 1)")] = None,
    max_epochs: Annotated[int, typer.Option(help="epochs per learning rate")] = 10,
    job_budget: Annotated[float | None, typer.Option(help="seconds per job at most")] = None,
    seer_budget_x: Annotated[
        float | None,
        typer.Option(help="tune torch models with SEER: budget = X x the expected job time"),
    ] = None,
    sleep_job_seconds: Annotated[float | None, typer.Option(hidden=True)] = None,
    home: Home = None,
) -> None:
    """Run the scheduler in the current mode (embedded or servers) for N ticks, or until stopped."""
    with _errors():
        from policy import POLICY_NAMES

        if policy is not None and policy not in POLICY_NAMES:
            raise ValueError(f"--policy {policy!r} is not valid; valid: {', '.join(POLICY_NAMES)}")
        if ticks is not None and ticks < 0:
            raise ValueError(f"--ticks {ticks} is not valid: use 0 (drain) or more")
        if seer_budget_x is not None and not seer_budget_x >= 1:
            raise ValueError(f"--seer-budget-x {seer_budget_x} is not valid: use 1 or more")
        out = _client(home).run(
            ticks,
            policy=policy,
            slots=slots,
            max_epochs=max_epochs,
            job_budget_s=job_budget,
            sleep_s=sleep_job_seconds,
            seer_budget_x=seer_budget_x,
        )
        console.print(
            f"{out['ticks']} ticks, {out['jobs']} jobs in {out['wall_s']:.0f} s; "
            f"GPU busy {out['busy_fraction']:.0%}"
        )


def _live_table(c: Any) -> Table:
    from tasks._service import load_state, tick_metrics

    state = load_state(c.mlflow, c.store)
    metrics = tick_metrics(state)
    t = Table(title="tenantml demo (embedded)", title_justify="left")
    for col in ("tenant", "examples", "tried", "best model", "accuracy", "loss estimate"):
        t.add_column(col)
    for ten in state.tenants:
        done = [r for r in state.records if r.tenant == ten.name and r.status == "FINISHED"]
        best = max(done, key=lambda r: r.accuracy or 0.0, default=None)
        t.add_row(
            ten.name,
            str(ten.n_examples),
            f"{len(done)}/{len(ten.candidates)}",
            best.candidate if best else "-",
            f"{best.accuracy:.3f}" if best and best.accuracy is not None else "-",
            f"{metrics.get(f'loss_estimate.{ten.name}', 0.0):.3f}",
        )
    t.caption = f"total regret estimate {metrics.get('regret_estimate', 0.0):.3f}"
    return t


def demo(
    ticks: Annotated[int, typer.Option(help="scheduler ticks")] = 16,
    max_epochs: Annotated[int, typer.Option(help="epochs per learning rate")] = 3,
    job_budget: Annotated[float, typer.Option(help="seconds per job at most")] = 60.0,
    home: Annotated[Path | None, typer.Option("--home", help="default: TENANTML_HOME/demo")] = None,
) -> None:
    """The service on real offline data, embedded (no servers): submit, feed, schedule, infer."""
    from tenantml import datasets

    with _errors():
        root = home or _home() / "demo"
        from tenantml.client import Client

        c = Client(root)
        if c.settings.mode != "embedded":
            raise ValueError(f"{root} is set up for servers; give the demo its own --home")
        console.print(f"TENANTML_HOME={c.settings.home} (embedded: SQLite MLflow, local store)")
        names = ["digits", "breast_cancer", "wine", "japanese_vowels"]
        for ds in names:
            d = datasets.load(ds)
            tenant = ds.replace("_", "-")
            c.submit(tenant, d.schema)
            if c.store.manifest(tenant).n_examples == 0:
                c.feed(tenant, d.inputs, d.labels)
            console.print(f"  {tenant}: {d.schema} - {len(d.labels)} {d.description}")
        result: dict[str, Any] = {}
        failure: list[BaseException] = []

        def work() -> None:
            try:
                result.update(c.run(ticks, max_epochs=max_epochs, job_budget_s=job_budget))
            except BaseException as e:  # noqa: BLE001 - reported below
                failure.append(e)

        worker = threading.Thread(target=work, daemon=True)
        worker.start()
        table = _live_table(c)
        # transient, then printed once: a live display left in place ends without a newline
        # when stdout is not a terminal, and the next line would run on from its caption
        with Live(table, console=console, refresh_per_second=1, transient=True) as live:
            while worker.is_alive():
                worker.join(timeout=3)
                table = _live_table(c)
                live.update(table)
        console.print(table)
        if failure:
            raise failure[0]
        console.print(
            f"{result['ticks']} ticks, {result['jobs']} jobs in {result['wall_s']:.0f} s;"
            f" GPU busy {result['busy_fraction']:.0%}"
        )
        for ds in names:  # infer with the first tenant that has a best model
            tenant = ds.replace("_", "-")
            if c.status(tenant).best_version is None:
                continue
            d = datasets.load(ds)
            pred = ", ".join(str(_plain(p)) for p in c.infer(tenant, d.inputs[:5]))
            true = ", ".join(str(_plain(y)) for y in d.labels[:5])
            console.print(f"infer {tenant}, 5 examples: predicted {pred}; true {true}")
            break
        ui = f".venv/bin/mlflow ui --backend-store-uri {c.settings.tracking_uri}"
        console.print(f"Open the MLflow UI on this run:\n  {ui}")


def up(
    slots: Annotated[int, typer.Option(help="GPU slots: one worker each")] = 1,
    postgres: Annotated[bool, typer.Option(help="MLflow and Prefect on PostgreSQL")] = False,
    s3_endpoint: Annotated[str | None, typer.Option(help="use this S3 (else a local one)")] = None,
    auth: Annotated[
        bool, typer.Option(help="MLflow's authentication app: per-tenant credentials (grant)")
    ] = False,
    home: Home = None,
) -> None:
    """Start the servers on loopback (S3, MLflow, Prefect, the gpu pool and its workers)."""
    from tenantml.ops.servers import up as start

    with _errors():
        root = home or _home()
        cfg = start(root, slots=slots, postgres=postgres, s3_endpoint=s3_endpoint, auth=auth)
        console.print(
            f"up for {root.resolve()}:\n  MLflow UI  {cfg['tracking_uri']}\n"
            f"  Prefect UI {cfg['prefect_api_url'][:-4]}\n  S3         "
            f"{cfg['s3_endpoint_url']}\n  {slots} worker(s) on work pool 'gpu'; "
            "deployments scheduler/scheduler and train/train"
        )


def grant(name: Annotated[str, typer.Argument()], home: Home = None) -> None:
    """Operator: give tenant NAME credentials that reach its own data, runs and models only
    (servers started with `tenantml up --auth`); prints them as environment variables."""
    with _errors():
        password = _client(home).grant(name)
        console.print(f"TENANTML_USER={name}\nTENANTML_PASSWORD={password}")


def down(home: Home = None) -> None:
    """Stop the servers `tenantml up` started, by PID."""
    from tenantml.ops.servers import down as stop

    root = home or _home()
    console.print(f"stopped: {', '.join(stop(root)) or 'nothing was running'}")


COMMANDS: dict[str, Callable[..., None]] = {
    "submit": submit,
    "feed": feed,
    "refine": refine,
    "examples": examples,
    "infer": infer,
    "status": status,
    "tenants": tenants,
    "run": run,
    "demo": demo,
    "up": up,
    "down": down,
    "grant": grant,
}


def register(app: typer.Typer) -> None:
    for name, fn in COMMANDS.items():
        app.command(name)(fn)
