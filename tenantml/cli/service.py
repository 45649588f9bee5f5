"""The service commands of the ``tenantml`` CLI: they mirror `tenantml.Client`.

Pipe style (ease.ml Fig. 3)::

    find dogs -name '*.jpg' | tenantml feed pets --label dog
    find new -name '*.jpg' | tenantml infer pets            # path<TAB>prediction per line

Exit codes: 0 ok; 2 bad input (unknown tenant, bad schema or example, bad option); 1 the service
cannot answer (a server is down, no model yet).
"""

from __future__ import annotations

import json
import os
import sys
import threading
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Annotated, Any, NoReturn

import typer
from rich.console import Console
from rich.live import Live
from rich.table import Table

from tenantml._signals import sigterm_as_interrupt
from tenantml.cli._out import stdout_console

__all__ = ["register"]

# data may hold [brackets]
console = stdout_console(markup=False, highlight=False, soft_wrap=True)
err = Console(stderr=True, markup=False, highlight=False)

Files = Annotated[list[Path] | None, typer.Argument(help="files (default: paths on stdin)")]
Home = Annotated[Path | None, typer.Option("--home", help="TENANTML_HOME (default ~/.tenantml)")]


@contextmanager
def _errors() -> Iterator[None]:
    """Known failures -> one clear line on stderr and a non-zero exit; nothing half-written."""
    from store import ConcurrentUpdateError, UnknownTenantError
    from tasks.settings import ServerUnreachableError
    from tenantml.client import NoModelYetError

    try:
        yield
    except (NoModelYetError, ServerUnreachableError, ConcurrentUpdateError) as e:
        err.print(f"error: {e}", soft_wrap=True)
        raise typer.Exit(1) from None
    except PermissionError as e:  # store._scoped.TenantAccessError
        err.print(f"error: {e}", soft_wrap=True)
        raise typer.Exit(2) from None
    except (
        UnknownTenantError,
        ValueError,
        KeyError,
        FileNotFoundError,
        IsADirectoryError,  # a folder given as a file (--csv DIR, @DIR, --plot DIR)
        NotADirectoryError,
        FileExistsError,  # a file where a folder goes (TENANTML_HOME)
    ) as e:
        msg = e.args[0] if isinstance(e, KeyError) and e.args else e
        err.print(f"error: {msg}", soft_wrap=True)
        raise typer.Exit(2) from None
    except Exception as e:  # MLflow's RestException (not imported here: it loads all MLflow)
        if (gone := _server_gone(e)) is not None:
            err.print(
                f"error: {gone} does not answer; start it (`tenantml up` starts this machine's "
                "servers), then run the command again",
                soft_wrap=True,
            )
            raise typer.Exit(1) from None
        if getattr(e, "error_code", None) not in ("PERMISSION_DENIED", "UNAUTHENTICATED"):
            raise
        err.print(
            f"error: the MLflow server refused: {str(e)[:300]} (check TENANTML_USER and "
            "TENANTML_PASSWORD; a tenant reaches only its own tenant)",
            soft_wrap=True,
        )
        raise typer.Exit(2) from None


def _read_text(path: Path) -> str:
    """A text file's contents; one that is not UTF-8 is named (the decoder's message alone,
    "'utf-8' codec can't decode byte 0x80", did not say which file)."""
    try:
        return path.read_text(encoding="utf-8")
    except UnicodeDecodeError:
        raise ValueError(f"{path}: not a UTF-8 text file") from None


def _server_gone(e: BaseException) -> str | None:
    """The server that does not answer now, as 'the X server at URL', when `e` is a failed or
    broken connection (`tasks.outage.is_outage`, `connection_broke`: a server went away after
    the command's client was made) and a server indeed does not answer; else None, and the
    error stays as it is (its text may only quote a connection failure: a SEER rank's log)."""
    from tasks.outage import connection_broke, is_outage, unreachable_server
    from tasks.settings import Settings

    if not (is_outage(e) or connection_broke(e)):
        return None
    try:
        return unreachable_server(Settings.load())  # the home the command's client applied
    except Exception:  # settings unreadable now: the error as it is
        return None


def _client(home: Path | None) -> Any:
    from tenantml.client import Client

    return Client(home)


def _plain(value: Any) -> Any:
    """A prediction or label as a plain int/float/str/list (no ``np.int64(...)`` reprs)."""
    import numpy as np  # here, not at the top: `tenantml --help` loads no numpy

    if isinstance(value, np.ndarray):
        return value.tolist()
    return value.item() if isinstance(value, np.generic) else value


def _home() -> Path:
    """``TENANTML_HOME`` (default ~/.tenantml), as `tasks.settings.Settings` resolves it."""
    from tasks.settings import Settings

    return Settings.resolve_home()


def _check_takes_files(c: Any, name: str, instead: str) -> None:
    """Refuse files (or paths on stdin) for a tenant whose inputs are not images or sequences,
    naming the option that takes its inputs (`instead`): the loader's own message named an SDK
    function (`echo rows.csv | tenantml infer` read the CSV as an example file)."""
    from store.loaders import takes_files

    schema = c.store.schema(name)
    if schema.input.single is not None and not takes_files(schema):
        raise ValueError(f"{name!r} takes {schema.input} inputs, not files: {instead}")


def _paths(files: list[Path] | None) -> list[str]:
    if files:
        return [str(f) for f in files]
    if sys.stdin is None or sys.stdin.isatty():
        raise ValueError("give files as arguments or one path per line on standard input")
    return [line.strip() for line in sys.stdin if line.strip()]


def submit(
    name: Annotated[str, typer.Argument(help="tenant name: \\[a-z]\\[a-z0-9_-]*")],
    schema: Annotated[str, typer.Argument(help="schema text, or @FILE to read it from a file")],
    weight: Annotated[
        float | None,
        typer.Option(
            help="operator: how much this tenant's regret counts (default 1; 2 = twice); "
            "change it later with `tenantml weight`"
        ),
    ] = None,
    models: Annotated[
        str | None,
        typer.Option(
            help="train only these candidates, comma-separated (e.g. lenet,resnet18); "
            "'all' lifts it (default: all the schema's candidates, or what was set before)"
        ),
    ] = None,
    home: Home = None,
) -> None:
    """Declare a task by its input/output schema (ease.ml Fig. 2 syntax)."""
    with _errors():
        text = _read_text(Path(schema[1:])) if schema.startswith("@") else schema
        chosen = None if models is None else [m.strip() for m in models.split(",") if m.strip()]
        lb = _client(home).submit(name, text, weight=weight, models=chosen)
        shown = "" if lb.weight is None else f", weight {lb.weight:g}"
        console.print(f"tenant {name!r}: {lb.schema}; {lb.n_candidates} candidate models{shown}")
        if chosen and chosen != ["all"]:
            console.print(f"trains only: {', '.join(chosen)}")


def weight(
    name: Annotated[str, typer.Argument(help="tenant")],
    value: Annotated[
        str | None,
        typer.Argument(help="new weight, a positive number (default 1); none: show it"),
    ] = None,
    home: Home = None,
) -> None:
    """Operator: show or set a tenant's weight, the factor of its regret in the total the
    scheduler reduces (the `rate` policy serves a tenant of weight 2 as if its loss were
    twice as large). The scheduler uses it from its next refresh."""
    with _errors():
        c = _client(home)
        if value is None:
            c.store.schema(name)  # names the known tenants when there is no such one
            print(f"{name}\t{c.weight(name):g}")
            return
        from mlflow_plugin.tracking import valid_weight

        w = c.set_weight(name, valid_weight(value))
        console.print(f"tenant {name!r}: weight {w:g}", markup=False)


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
        # one source, and one way to label it: the others were ignored without a word
        given = [what for what, v in (("FILES", files), ("--csv", csv), ("--npz", npz)) if v]
        if len(given) > 1:
            raise ValueError(f"feed one source at a time; got {' and '.join(given)}")
        if label is not None and label_column is not None:
            raise ValueError("give --label (every example's) or --label-column (per row), not both")
        if npz is not None and (label is not None or label_column is not None):
            raise ValueError("an .npz holds its labels (y): drop --label and --label-column")
        if label_column is not None and csv is None:
            raise ValueError("--label-column names a column of --csv; give --csv FILE")
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
            _check_takes_files(
                c, name, "give rows with --csv FILE (a header, one example per row) or arrays "
                "with --npz FILE"
            )  # fmt: skip
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
            _check_takes_files(c, name, "give rows with --csv FILE (a header, one input per row)")
            keys = _paths(files)
            pred = c.infer_files(name, keys)
        for key, p in zip(keys, pred, strict=True):
            value = _plain(p)
            print(json.dumps({"input": key, "prediction": value}) if as_json else f"{key}\t{value}")


def status(
    name: Annotated[str | None, typer.Argument(help="tenant (its leaderboard)")] = None,
    plot: Annotated[
        Path | None,
        typer.Option(
            "--plot",
            help="write every tenant's loss estimate and their total over the ticks to this PNG",
        ),
    ] = None,
    fresh: Annotated[
        bool,
        typer.Option(
            "--fresh",
            help="ask MLflow now, not the leaderboard the service keeps in the store (slower)",
        ),
    ] = False,
    home: Home = None,
) -> None:
    """Every tenant: examples, models tried, the best, its accuracy, the loss estimate and the
    weight; with NAME, its leaderboard: models tried, accuracy, cost, when, and which is `best`;
    with --plot FILE.png, the loss picture the scheduler logs (loss.png), from MLflow's per-tick
    metrics.

    The leaderboard is the copy the service keeps in the store, updated by the scheduler at
    every change (its age is shown); --fresh reads MLflow itself."""
    with _errors():
        c = _client(home)
        if plot is not None:
            _write_loss_plot(c, plot)
        if name is None and plot is None and c.settings.user:
            name = c.settings.user  # a tenant's identity reaches its own tenant only
        if name is None:
            if plot is None and not c.tenants():
                console.print("no tenants yet: declare one with `tenantml submit NAME SCHEMA`")
            elif plot is None:  # every tenant, one line each
                console.print(_live_table(c, "tenantml status", weights=True))
                console.print("tenantml status NAME: a tenant's leaderboard")
            return
        lb = c.status(name, fresh=fresh)
        t = Table(title=f"{name}: {lb.schema}", title_justify="left")
        for col in ("model", "status", "accuracy", "cost (s)", "finished", "data", "best"):
            t.add_column(col)
        for r in lb.rows:
            when = time.strftime("%H:%M:%S", time.localtime(r.finished_at)) if r.finished_at else ""
            t.add_row(
                r.candidate,
                r.status,
                "" if r.accuracy is None else f"{r.accuracy:.4f}",
                "" if r.cost_s is None else f"{r.cost_s:.1f}",
                when,
                "" if r.snapshot is None else f"s{r.snapshot}",
                "*" if r.best else "",
            )
        console.print(t)
        tried = len({r.candidate for r in lb.rows if r.snapshot in (None, lb.snapshot)})
        console.print(
            f"{lb.n_enabled}/{lb.n_examples} examples enabled, snapshot {lb.snapshot}; "
            f"{tried}/{lb.n_candidates} candidates tried on it; best version "
            f"{lb.best_version or 'none yet'}"
            + ("" if lb.weight is None else f"; weight {lb.weight:g}")
        )
        if lb.as_of is not None:
            age = time.strftime("%H:%M:%S", time.localtime(lb.as_of))
            console.print(f"as of {age}, the service's last update (--fresh: ask MLflow now)")


def _write_loss_plot(c: Any, path: Path) -> None:
    """`status --plot`: the scheduler's loss picture (`tasks.loss_picture`) of every scheduler run's
    per-tick metrics, to `path`; one line says what it shows."""
    from tasks import LOSS_PREFIX, TOTAL, load_tick_history, loss_picture
    from tenantml.client import NoModelYetError

    if path.suffix.lower() != ".png":
        raise ValueError(f"--plot {str(path)!r} is not valid: give a file name ending in .png")
    history = load_tick_history(c.mlflow)
    if not history:
        raise NoModelYetError(
            "no scheduler has logged a tick yet: run the scheduler (`tenantml run`), then try again"
        )
    path.write_bytes(loss_picture(history))
    tenants = sum(key.startswith(LOSS_PREFIX) for key in history)
    ticks = len(history.get(TOTAL, []))
    console.print(
        f"wrote {path}: the loss estimates of {tenants} tenant{'' if tenants == 1 else 's'} "
        f"and their total over {ticks} tick{'' if ticks == 1 else 's'}"
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
    tuner: Annotated[
        str,
        typer.Option(help="with --seer-budget-x: replan (re-plans after each stage) or seer"),
    ] = "replan",
    prior: Annotated[
        str,
        typer.Option(
            help="the policy's GP prior: learnt (across tenants, the default) or independent "
            "(arms known nothing about: the ablation)"
        ),
    ] = "learnt",
    chain_s: Annotated[
        float | None,
        typer.Option(
            help="send jobs expected to take less than S seconds several to a flow run, "
            "chained up to S seconds in all (0: one job per run; default: the scheduler's)"
        ),
    ] = None,
    budget_s: Annotated[
        float | None,
        typer.Option(
            help="start no tick after S seconds (waiting for tenants meanwhile when none has a "
            "model left to try); the jobs in flight finish, then it stops (default: run on)"
        ),
    ] = None,
    sleep_job_seconds: Annotated[float | None, typer.Option(hidden=True)] = None,
    home: Home = None,
) -> None:
    """Run the scheduler in the current mode (embedded or servers) for N ticks or S seconds, or
    until stopped.

    Prints a line per job dispatched and per job finished (on a terminal: the live table of
    `demo` instead). Ctrl-C or SIGTERM stops it within seconds with one line and exit code 130;
    the jobs in flight resume on the next `run`."""
    import gc
    import os
    import signal

    # Until the scheduler's own handler is armed (the imports take seconds), SIGTERM interrupts
    # as Ctrl-C does, so both end in the same one line.
    before = sigterm_as_interrupt()
    view: _RunView | None = None
    try:
        with _errors():
            options: dict[str, Any] = {
                "policy": policy,
                "slots": slots,
                "max_epochs": max_epochs,
                "job_budget_s": job_budget,
                "sleep_s": sleep_job_seconds,
                "seer_budget_x": seer_budget_x,
                "seer_tuner": tuner,
                "prior": prior,
                "budget_s": budget_s,
            }
            if chain_s is not None:  # else the scheduler's default
                options["chain_s"] = chain_s
            # before Prefect's server starts (the flow checks them again, by the same rules)
            _check_run_options(ticks=ticks, **options)
            # Its settings reach the environment before Prefect loads. No fail-fast check of the
            # servers: the scheduler waits for them (`Client.run`).
            from tenantml.client import Client

            c = Client(home, check_servers=False)
            c.start_prefect()  # beside the imports below (embedded: Prefect's server, seconds)
            from tasks import stop_on_signals

            # MLflow's "View run ... at URL" lines (servers) would break into the job lines
            os.environ.setdefault("MLFLOW_SUPPRESS_PRINTING_URL_TO_STDOUT", "true")
            view = _RunView(c)
            with stop_on_signals(), view.showing():
                out = c.run(ticks, on_progress=view, **options)
    except KeyboardInterrupt as e:  # a signal before the handler was armed, or a second one
        stopping = view.stopping if view is not None else None
        in_flight = stopping.in_flight if stopping is not None else 0
        name = str(e.args[0]) if e.args else "SIGINT"
        console.print(_stopped_line(name, in_flight, view is None or view.embedded))
        raise typer.Exit(130) from None
    finally:
        if before is not None:
            signal.signal(signal.SIGTERM, before)
    # The command ends here: spare the exit the collector's pass over every object MLflow,
    # Prefect and torch left (seconds; Python runs it while it finalizes the modules).
    gc.freeze()
    if out["interrupted"]:
        console.print(_stopped_line(out["interrupted"], out["in_flight"], view.embedded))
        raise typer.Exit(130)
    console.print(
        f"{out['ticks']} ticks, {out['jobs']} jobs in {out['wall_s']:.0f} s; "
        f"GPU busy {out['busy_fraction']:.0%}"
    )


#: `run`'s flags whose names are not their `tasks.SchedulerOptions` field's
_RUN_FLAGS = {
    "job_budget_s": "--job-budget",
    "sleep_s": "--sleep-job-seconds",
    "seer_tuner": "--tuner",
}


def _check_run_options(**options: Any) -> None:
    """`run`'s options checked by the scheduler's own rules (`tasks.options.option_problems`),
    each bad one named by its flag.

    Raises:
        ValueError: every option that is not valid, with what would be.
    """
    from tasks.options import option_problems

    problems = option_problems(**{k: v for k, v in options.items() if v is not None})
    if problems:
        flag = {p.name: _RUN_FLAGS.get(p.name, "--" + p.name.replace("_", "-")) for p in problems}
        said = (f"{flag[p.name]} {p.shown} is not valid: {p.advice}" for p in problems)
        raise ValueError("; ".join(said))


def _stopped_line(signal_name: str, in_flight: int, embedded: bool) -> str:
    """The one line `run` ends with when a signal stopped it (the entry point then prints no
    other: `tenantml._signals.announce`)."""
    from tenantml._signals import announce

    announce()
    jobs = f"{in_flight} job{'' if in_flight == 1 else 's'} in flight"
    where = "" if embedded else " (they go on in the workers meanwhile)"
    return f"stopped by {signal_name}: {jobs}; they resume on the next `tenantml run`{where}"


def _event_line(event: Any) -> str:
    """A scheduler event (`tasks.JobDispatched`, `tasks.JobFinished`, `tasks.JobLeft`) as one
    plain line."""
    from tasks import JobDispatched, JobLeft

    if isinstance(event, JobLeft):
        ident, _, place = (event.process or "").partition("@")
        pid = ident.partition(":")[0] or "unknown"
        host = event.node or place.split("/")[0] or "an unknown host"
        if not event.seer_run:
            return (
                f"left {event.tenant} {event.model} ({event.job_id}) to an earlier attempt "
                f"that still trains it (process {pid} on {host}): it records the job, and "
                "moves `best` if better, when it ends"
            )
        return (
            f"left {event.tenant} {event.model} ({event.job_id}) to its `tenantml seer run`, "
            f"which may still train it (process {pid} on {host}): "
            "the same request resumes it, and a scheduler started once that process has "
            "ended on this host sends it again"
        )
    if isinstance(event, JobDispatched):
        if event.resumed:
            return f"resumed {event.tenant} {event.model} (left unfinished earlier)"
        return f"tick {event.tick}: dispatched {event.tenant} {event.model}"

    def num(value: float | None, fmt: str) -> str:
        return "-" if value is None else format(float(value), fmt)

    head = "finished" if event.ok else f"failed ({event.detail.splitlines()[0][:200]})"
    return (
        f"{head} {event.tenant} {event.model}: accuracy {num(event.accuracy, '.4f')}, "
        f"cost {num(event.cost_s, '.1f')} s, {event.tenant}'s loss estimate "
        f"{num(event.loss_estimate, '.4f')}"
    )


class _RunView:
    """What `run` shows while the scheduler runs, fed its events (`Client.run`'s
    ``on_progress``): one plain line per job dispatched or finished, or, on a terminal, the live
    table of `demo`. On a signal in embedded mode it ends the process at once (`_exit_now`)."""

    def __init__(self, c: Any) -> None:
        self.c = c
        self.embedded = c.settings.mode == "embedded"
        self.live: Live | None = None
        self.running: dict[str, str] = {}  # tenant/job id -> "tenant model", in flight
        self.stopping: Any = None  # the tasks.Stopping seen, if any

    def table(self) -> Table:
        t = _live_table(self.c)
        t.title = f"tenantml run ({self.c.settings.mode})"
        running = ", ".join(self.running.values()) or "none"
        t.caption = f"{t.caption}; running: {running}"
        return t

    @contextmanager
    def showing(self) -> Iterator[None]:
        """On a terminal, the live table while the block runs, printed once after it."""
        if not console.is_terminal:
            yield
            return
        table = self.table()
        # transient, then printed once (see `demo`)
        with Live(table, console=console, refresh_per_second=1, transient=True) as live:
            self.live = live
            try:
                yield
            finally:
                self.live = None
        console.print(self.table())

    def __call__(self, event: Any) -> None:
        from tasks import JobDispatched, JobLeft, Stopping, Waiting

        if isinstance(event, Waiting):  # above the table, if any
            console.print(f"waiting: {event.reason}", markup=False, highlight=False)
            return
        if isinstance(event, Stopping):  # in the signal handler: nothing slow here
            self.stopping = event
            if self.embedded:
                _exit_now(self.c, event, cursor=self.live is not None)
            return
        key = f"{event.tenant}/{event.job_id}"
        if isinstance(event, JobLeft):  # not this scheduler's: above the table, if any
            console.print(_event_line(event))
            if self.running.pop(key, None) is not None and self.live is not None:
                self.live.update(self.table())
            return
        if isinstance(event, JobDispatched):
            self.running[key] = f"{event.tenant} {event.model}"
        else:
            self.running.pop(key, None)
        if self.live is not None:
            self.live.update(self.table())
        else:
            console.print(_event_line(event))


def _exit_now(c: Any, event: Any, cursor: bool) -> NoReturn:
    """Embedded `run` on SIGINT/SIGTERM (`tasks.Stopping`, in the signal handler): end the
    process now, with the one line and exit code 130.

    Waiting is no option here: the jobs are threads of this process (a normal exit joins them,
    minutes), and a terminal's Ctrl-C has also reached Prefect's temporary server, after which
    every Prefect call retries for about a minute and ends in a traceback. So no Prefect call
    follows (`end_now`). The jobs' MLflow runs stay RUNNING, so the next `run` sends them again
    with their job ids and they resume from their checkpoints."""
    end_now(c, _stopped_line(event.signal, event.in_flight, embedded=True), event.run_id, cursor)


class InThread:
    """`fn()` in a daemon thread (`thread`, not started), its return value or exception kept
    (`result`, `error`) for the main thread, which keeps the signals: Python delivers them
    there only, and a command that ends on one must not wait for the work."""

    def __init__(self, fn: Callable[[], Any]) -> None:
        self.result: Any = None
        self.error: BaseException | None = None

        def work() -> None:
            try:
                self.result = fn()
            except BaseException as e:  # noqa: BLE001 - the caller raises it
                self.error = e

        self.thread = threading.Thread(target=work, daemon=True)


def end_now(c: Any, line: str, run_id: str | None = None, cursor: bool = False) -> NoReturn:
    """End a command that runs jobs in this process now, from a signal handler: print `line`
    (`cursor`: show the cursor a live display hid), end the MLflow run `run_id` KILLED (2 s at
    most), stop SEER rank processes this process started and Prefect's temporary server, exit
    130 (no interpreter shutdown: it would join the training threads, minutes). Signals that
    come meanwhile (a second Ctrl-C) are ignored: the first one is being carried out."""
    import os
    import signal

    for sig in (signal.SIGINT, signal.SIGTERM):
        try:  # a handler that does nothing (SIG_IGN would pass to the processes started now)
            signal.signal(sig, lambda signum, frame: None)
        except ValueError:  # not the main thread: no handler to replace there
            break
    line = ("\x1b[?25h\n" if cursor else "") + line + "\n"
    try:
        sys.stdout.flush()
        os.write(sys.stdout.fileno(), line.encode())
    except (OSError, ValueError, RuntimeError):  # no file descriptor, or a write cut short
        sys.stdout.write(line)
    if run_id is not None:
        killed = threading.Thread(
            target=c.mlflow.set_terminated, args=(run_id, "KILLED"), daemon=True
        )
        killed.start()
        killed.join(timeout=2)
    if (elastic := sys.modules.get("trainers.elastic")) is not None:
        elastic.stop_ranks()  # a signal to this process alone does not reach them
    if (early := sys.modules.get("tasks.prefect_start")) is not None:
        early.stop_all()  # the servers started early; their atexit hook would stop them
    # Prefect keeps its own temporary server (a uvicorn subprocess, where the early one failed)
    # here; its atexit hook would stop it, and os._exit skips that hook.
    server = sys.modules.get("prefect.server.api.server")
    instances = getattr(getattr(server, "SubprocessASGIServer", None), "_instances", {})
    if instances:
        from trainers.processes import end_processes  # a command running jobs has `trainers`

        end_processes(
            [getattr(instance, "server_process", None) for instance in list(instances.values())],
            timeout_s=1.0,
        )
    os._exit(130)


def _live_table(c: Any, title: str = "tenantml demo (embedded)", weights: bool = False) -> Table:
    """Every tenant of `c`'s home on one line: examples, models finished on its current data of
    all its candidates, the best of them and its accuracy, the posterior expected loss the
    scheduler logs (`tasks.tick_metrics`, from MLflow now) and, with `weights`, its weight."""
    from tasks import load_state, tick_metrics

    state = load_state(c.mlflow, c.store)
    metrics = tick_metrics(state)
    t = Table(title=title, title_justify="left")
    cols = ("tenant", "examples", "tried", "best model", "accuracy", "loss estimate")
    for col in (*cols, "weight") if weights else cols:
        t.add_column(col)
    for ten in state.tenants:
        done = [  # on the tenant's current data (a feed or refine starts a new snapshot)
            r
            for r in state.records
            if r.tenant == ten.name and r.status == "FINISHED" and r.snapshot == ten.snapshot
        ]
        best = max(done, key=lambda r: r.accuracy or 0.0, default=None)
        t.add_row(
            ten.name,
            str(ten.n_examples),
            f"{len(done)}/{len(ten.candidates)}",
            best.candidate if best else "-",
            f"{best.accuracy:.3f}" if best and best.accuracy is not None else "-",
            f"{metrics.get(f'loss_estimate.{ten.name}', 0.0):.3f}",
            *([f"{ten.weight:g}"] if weights else []),
        )
    t.caption = f"total regret estimate {metrics.get('regret_estimate', 0.0):.3f}"
    return t


def _jobs_done(c: Any) -> int:
    """Jobs that finished in `c`'s home so far (any tenant, any data)."""
    from tasks import load_state

    return sum(r.status == "FINISHED" for r in load_state(c.mlflow, c.store).records)


def demo(
    ticks: Annotated[int, typer.Option(help="scheduler ticks")] = 16,
    max_epochs: Annotated[int, typer.Option(help="epochs per learning rate")] = 3,
    job_budget: Annotated[float, typer.Option(help="seconds per job at most")] = 60.0,
    budget_s: Annotated[
        float, typer.Option(help="start no tick after S seconds (the jobs in flight finish)")
    ] = 90.0,
    home: Annotated[Path | None, typer.Option("--home", help="default: TENANTML_HOME/demo")] = None,
) -> None:
    """The service on real offline data, embedded (no servers): submit, feed, schedule, infer.

    Run again on the same home, it goes on from the jobs already done (the CNNs are what is
    left then, up to a minute each on a CPU): within ``--budget-s`` and the jobs then in flight.
    """
    import signal

    # Until the scheduler takes the signals, SIGTERM interrupts as Ctrl-C does (`run` does the
    # same): the command ends with a line, and Prefect's temporary server stops with it.
    before = sigterm_as_interrupt()
    try:
        _demo(ticks, max_epochs, job_budget, budget_s, home)
    except KeyboardInterrupt as e:  # while feeding, or after the scheduler
        name = str(e.args[0]) if e.args else "SIGINT"
        # end_now stops the Prefect server started early (`tasks.prefect_start.stop_all`): it
        # ends with os._exit, which skips the exit hook that would
        end_now(None, f"stopped by {name}; the demo goes on from here next time")
    finally:
        if before is not None:
            signal.signal(signal.SIGTERM, before)


def _demo(
    ticks: int, max_epochs: int, job_budget: float, budget_s: float, home: Path | None
) -> None:
    from tenantml import datasets

    with _errors():
        # before the tenants are fed (the scheduler checks them again, by the same rules)
        _check_run_options(
            ticks=ticks, max_epochs=max_epochs, job_budget_s=job_budget, budget_s=budget_s
        )
        root = home or _home() / "demo"
        from tenantml.client import Client

        c = Client(root)
        if c.settings.mode != "embedded":
            raise ValueError(f"{root} is set up for servers; give the demo its own --home")
        c.start_prefect()  # Prefect's server starts up while the tenants are fed
        console.print(f"TENANTML_HOME={c.settings.home} (embedded: SQLite MLflow, local store)")
        names = ["digits", "breast_cancer", "wine", "japanese_vowels"]
        for ds in names:
            d = datasets.load(ds)
            tenant = ds.replace("_", "-")
            c.submit(tenant, d.schema)
            if c.store.manifest(tenant).n_examples == 0:
                c.feed(tenant, d.inputs, d.labels)
            console.print(f"  {tenant}: {d.schema} - {len(d.labels)} {d.description}")
        if earlier := _jobs_done(c):
            console.print(
                f"  this home has {earlier} jobs from an earlier demo: the scheduler goes on from"
                f" them for {budget_s:g} s (a new --home DIR starts a fresh demo)"
            )
        from tasks import Stopping, stop_on_signals

        def on_event(event: Any) -> None:
            # Ctrl-C or SIGTERM (in the signal handler): end now, as an embedded `run` does
            if isinstance(event, Stopping):
                _exit_now(c, event, cursor=console.is_terminal)

        scheduler = InThread(
            lambda: c.run(
                ticks,
                on_progress=on_event,
                max_epochs=max_epochs,
                job_budget_s=job_budget,
                budget_s=budget_s,
            )
        )
        worker = scheduler.thread
        # The scheduler runs in a thread, where Python gives no signals: they are taken here.
        # (A Ctrl-C left the interpreter shutting down around the training threads: Prefect's
        # tracebacks, then a hung process.)
        with stop_on_signals() as stop:
            worker.start()
            table = _live_table(c)
            # transient, then printed once: a live display left in place ends without a newline
            # when stdout is not a terminal, and the next line would run on from its caption
            try:
                with Live(table, console=console, refresh_per_second=1, transient=True) as live:
                    while worker.is_alive():
                        worker.join(timeout=3)
                        table = _live_table(c)
                        live.update(table)
            except KeyboardInterrupt as e:  # a second signal
                name = str(e.args[0]) if e.args else "SIGINT"
                _exit_now(c, Stopping(name, 0, None), cursor=console.is_terminal)
            signalled = stop.signal  # before the scheduler listened, or after it ended
        console.print(table)
        result: dict[str, Any] = scheduler.result or {}
        if signalled is not None:  # whatever the scheduler did then (a Ctrl-C that reached
            # Prefect's temporary server first fails its start): nothing is left running
            console.print(_stopped_line(signalled, int(result.get("in_flight", 0)), True))
            raise typer.Exit(130)
        if scheduler.error is not None:
            raise scheduler.error
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
        from mlflow_plugin.tracking import experiment_name, runs_page

        ui = f".venv/bin/mlflow ui --backend-store-uri {c.settings.tracking_uri}"
        exp = c.mlflow.get_experiment_by_name(experiment_name(names[0].replace("_", "-")))
        page = runs_page("http://127.0.0.1:5000", exp.experiment_id) if exp else ""
        console.print(f"Open the MLflow UI on this run:\n  {ui}\n  {page}")


def up(
    slots: Annotated[int, typer.Option(help="GPU slots: one worker each")] = 1,
    postgres: Annotated[bool, typer.Option(help="MLflow and Prefect on PostgreSQL")] = False,
    s3_endpoint: Annotated[str | None, typer.Option(help="use this S3 (else a local one)")] = None,
    auth: Annotated[
        bool, typer.Option(help="MLflow's authentication app: per-tenant credentials (grant)")
    ] = False,
    warm: Annotated[
        bool | None,
        typer.Option(
            "--warm/--cold",
            help="flow runs fork from this node's warm process, or each starts a new Python "
            "(default: warm; cold with --listen, whose other nodes have no warm process)",
            show_default=False,
        ),
    ] = None,
    prefetch: Annotated[
        int | None,
        typer.Option(help="jobs sent per slot beyond its running one (default 1)"),
    ] = None,
    listen: Annotated[
        str | None,
        typer.Option(
            help="serve other nodes too: listen on this address of the machine; "
            "`tenantml node-env` prints their settings"
        ),
    ] = None,
    home: Home = None,
) -> None:
    """Start the servers on loopback, or on --listen ADDR for other nodes (S3, MLflow, Prefect,
    the gpu pool and its workers)."""
    from tenantml.ops.servers import up as start

    with _errors():
        root = home or _home()
        cfg = start(
            root,
            slots=slots,
            postgres=postgres,
            s3_endpoint=s3_endpoint,
            auth=auth,
            warm=warm,
            prefetch=prefetch,
            listen=listen,
        )
        console.print(
            f"up for {root.resolve()}:\n  MLflow UI  {cfg['tracking_uri']}\n"
            f"  Prefect UI {cfg['prefect_api_url'][:-4]}\n  S3         "
            f"{cfg['s3_endpoint_url']}\n  {slots} worker(s) on work pool 'gpu'"
            f"{' (train runs fork from a warm process)' if cfg['flow_run_command'] else ''}; "
            "deployments scheduler/scheduler and train/train"
        )


def node_env(home: Home = None) -> None:
    """Operator: the settings by environment another node's workers need to join the servers of
    `tenantml up --listen ADDR`, as `export` lines (infra/k8s/README.md, step 4)."""
    import shlex

    from tenantml.ops.servers import node_env as settings_for_nodes

    with _errors():
        for k, v in settings_for_nodes(home or _home()).items():
            typer.echo(f"export {k}={shlex.quote(v)}")


def worker(
    gpu: Annotated[int, typer.Option(help="the CUDA device this worker's runs train on")] = 0,
    prefetch: Annotated[
        int | None,
        typer.Option(
            help="runs taken beyond the training one, waiting warm on the GPU's lock "
            "(default TENANTML_PREFETCH_PER_SLOT, as the scheduler sends them)"
        ),
    ] = None,
    pool: Annotated[str, typer.Option(help="the Prefect work pool")] = "gpu",
    name: Annotated[str | None, typer.Option(help="worker name (default HOST-gpuN)")] = None,
    home: Home = None,
) -> None:
    """Operator, on a GPU node: run this node's Prefect worker for one GPU (one per GPU), with
    the settings of this environment (`tenantml node-env` prints them on the servers' machine).
    Its runs hold the GPU's lock file in this node's TENANTML_HOME while they train."""
    import socket

    from tasks.settings import Settings
    from tenantml.ops.servers import gpu_worker

    with _errors():
        settings = Settings.load(home)
        if settings.prefect_api_url is None:
            raise ValueError(
                "no Prefect server to take runs from: set PREFECT_API_URL and the other "
                "settings `tenantml node-env` prints on the servers' machine, or `tenantml up`"
            )
        settings.apply()
        ahead = settings.prefetch_for(local=False) if prefetch is None else prefetch
        label = name or f"{socket.gethostname()}-gpu{gpu}"
        cmd, pinned = gpu_worker(gpu, settings.home, ahead, label, pool)
        env = {"PREFECT_WORKER_QUERY_SECONDS": "2", **os.environ, **pinned}
        os.execvpe(cmd[0], cmd, env)  # the worker is this process: signals reach it


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
    "weight": weight,
    "feed": feed,
    "refine": refine,
    "examples": examples,
    "infer": infer,
    "status": status,
    "tenants": tenants,
    "run": run,
    "demo": demo,
    "up": up,
    "node-env": node_env,
    "worker": worker,
    "down": down,
    "grant": grant,
}


def register(app: typer.Typer) -> None:
    for name, fn in COMMANDS.items():
        app.command(name)(fn)
