"""How long the everyday commands take to answer: ``tenantml bench-startup``.

A command a tenant types often (``tenants``, ``examples``, ``status``, ``feed``, ``infer``)
should answer before the user wonders: under 1 s for those the store answers, under 2 s to start
feeding or inferring. Most of that time is imports, so each command is timed as its own process,
the way a user runs it, on a home with `n` tenants (tabular, ``Tensor[4]`` -> 3 classes, a few
examples each), and compared with ``python -c pass`` measured in the same run (the ratio is what
stays comparable between machines and loads). One more run of each under ``python -X
importtime`` says which frameworks it loaded (`FRAMEWORKS`).

``status`` reads the leaderboard the service keeps in the store (`tasks.leaderboard`; `submit`
published it), ``status --fresh`` asks MLflow. ``infer`` runs before any model is trained, so it
answers "no model yet" (exit 1): what is timed is everything up to the model's lookup in the
registry.

`measure_first_dispatch` times the service itself: ``tenantml run`` on a new home (built as
above, before the clock starts) until it dispatches its first job, the wait every new
installation, ``demo`` and ``bench-live`` system pays. Twice per repeat: with no template of
Prefect's database in the cache (the machine's first home: Prefect migrates an empty database)
and with the template the first left (`tasks.prefect_start`).
"""

from __future__ import annotations

import os
import statistics
import subprocess
import sys
import threading
import time
from collections.abc import Callable, Sequence
from dataclasses import asdict, dataclass
from pathlib import Path

import numpy as np

__all__ = [
    "COMMANDS",
    "FRAMEWORKS",
    "CommandTime",
    "FirstDispatch",
    "make_home",
    "measure_first_dispatch",
    "measure_startup",
    "startup_runs",
]

FRAMEWORKS = ("torch", "prefect", "mlflow", "sklearn")
# examples per tenant in the homes `measure_first_dispatch` runs: the scheduler schedules a
# tenant once it has 10 (`tasks._service.Planner.decide`)
RUN_EXAMPLES = 30
SCHEMA = "{input: {[Tensor[4]], []}, output: {[Tensor[3]], []}}"
LABELS = ("a", "b", "c")
# name -> the command's arguments ({csv}: a labelled CSV, {inputs}: an unlabelled one), and
# the exit status it should end with.
COMMANDS: dict[str, tuple[tuple[str, ...], int]] = {
    "--help": (("--help",), 0),
    "tenants": (("tenants",), 0),
    "examples": (("examples", "t00"), 0),
    "status": (("status", "t00"), 0),  # the leaderboard `submit` published in the store
    "status --fresh": (("status", "t00", "--fresh"), 0),  # asks MLflow
    "status (all)": (("status",), 0),  # every tenant: MLflow, and the loss estimates computed
    "feed": (("feed", "t00", "--csv", "{csv}", "--label-column", "label"), 0),
    "infer": (("infer", "t00", "--csv", "{inputs}"), 1),  # no model yet
}


@dataclass(frozen=True)
class CommandTime:
    command: str
    argv: tuple[str, ...]
    seconds: float  # median of the runs
    ratio: float  # seconds / python -c pass
    runs: tuple[float, ...]
    exit_code: int
    expected_exit_code: int
    frameworks: tuple[str, ...]  # which of FRAMEWORKS the command loaded


@dataclass(frozen=True)
class FirstDispatch:
    """Seconds from ``tenantml run`` on a new home to its first dispatched job, per repeat:
    ``cold`` with an empty cache (Prefect migrates), ``template`` from the migrated copy."""

    cold: tuple[float, ...]
    template: tuple[float, ...]

    @property
    def cold_s(self) -> float:
        return statistics.median(self.cold)

    @property
    def template_s(self) -> float:
        return statistics.median(self.template)


def tenant_names(n: int) -> list[str]:
    return [f"t{i:02d}" for i in range(n)]


def _write_csvs(root: Path, rows: int) -> tuple[Path, Path]:
    rng = np.random.default_rng(0)
    x = rng.normal(size=(rows, 4)).round(4)
    header = "f0,f1,f2,f3"
    labelled, inputs = root / "examples.csv", root / "inputs.csv"
    lines = [f"{','.join(map(str, r))},{LABELS[i % 3]}" for i, r in enumerate(x)]
    labelled.write_text("\n".join([header + ",label", *lines]) + "\n")
    inputs.write_text("\n".join([header, *(",".join(map(str, r)) for r in x)]) + "\n")
    return labelled, inputs


def make_home(home: Path, n_tenants: int, n_examples: int) -> None:
    """`n_tenants` tabular tenants with `n_examples` examples each (an existing tenant with
    examples is left as it is)."""
    from tenantml.client import Client

    c = Client(home)
    rng = np.random.default_rng(0)
    for name in tenant_names(n_tenants):
        c.submit(name, SCHEMA)
        if c.store.manifest(name).n_examples == 0:
            x = rng.normal(size=(n_examples, 4)).astype(np.float32)
            c.feed(name, x, [LABELS[i % 3] for i in range(n_examples)])


def _frameworks(stderr: str) -> tuple[str, ...]:
    """Which of FRAMEWORKS ``-X importtime``'s report (on stderr) shows imported."""
    loaded = {
        line.rsplit("|", 1)[1].strip()
        for line in stderr.splitlines()
        if line.startswith("import time:") and "|" in line
    }
    return tuple(f for f in FRAMEWORKS if f in loaded)


def _time(argv: Sequence[str], env: dict[str, str], cwd: Path) -> tuple[float, int]:
    start = time.perf_counter()
    done = subprocess.run(argv, env=env, cwd=cwd, capture_output=True, check=False)
    return time.perf_counter() - start, done.returncode


def startup_runs(n_commands: int, repeats: int) -> int:
    """The processes `measure_startup` runs (and calls ``on_step`` for): per repeat, ``python
    -c pass`` and each command; then one ``-X importtime`` run of each command."""
    return repeats * (1 + n_commands) + n_commands


def measure_startup(
    home: Path,
    *,
    n_tenants: int = 20,
    n_examples: int = 6,
    repeats: int = 3,
    commands: Sequence[str] = tuple(COMMANDS),
    on_step: Callable[[], None] | None = None,
) -> tuple[float, list[CommandTime]]:
    """Build the home, then time ``python -c pass`` and each command (median of `repeats`
    runs, runs interleaved so a burst of load hits all alike). Returns (python's seconds, one
    `CommandTime` per command).

    ``on_step``: called after each process run, timed or ``-X importtime`` (outside its
    timing): `startup_runs` (len(commands), repeats) times in all; building the home is not a
    step."""
    step = on_step or (lambda: None)
    unknown = [c for c in commands if c not in COMMANDS]
    if unknown:
        raise ValueError(f"commands {unknown} are not valid; valid: {', '.join(COMMANDS)}")
    if n_tenants < 1 or n_examples < 3 or repeats < 1:
        raise ValueError(
            f"--tenants {n_tenants}, --examples {n_examples}, --repeats {repeats} are not "
            "valid: use at least 1 tenant, 3 examples (one per class) and 1 repeat"
        )
    home.mkdir(parents=True, exist_ok=True)
    make_home(home, n_tenants, n_examples)
    csv, inputs = _write_csvs(home, n_examples)
    env = {**os.environ, "TENANTML_HOME": str(home)}
    # -P: the home (the working directory) holds a folder named store/, which must not shadow
    # the package of that name.
    cli = (sys.executable, "-P", "-m", "tenantml.cli")
    argvs = {
        name: tuple(a.format(csv=csv, inputs=inputs) for a in COMMANDS[name][0])
        for name in commands
    }
    base: list[float] = []
    runs: dict[str, list[float]] = {name: [] for name in commands}
    codes: dict[str, int] = {}
    for _ in range(repeats):
        base.append(_time((sys.executable, "-P", "-c", "pass"), env, home)[0])
        step()
        for name in commands:
            seconds, codes[name] = _time((*cli, *argvs[name]), env, home)
            runs[name].append(seconds)
            step()
    python_s = statistics.median(base)
    out = []
    for name in commands:
        probe = subprocess.run(
            (sys.executable, "-P", "-X", "importtime", "-m", "tenantml.cli", *argvs[name]),
            env=env,
            cwd=home,
            capture_output=True,
            text=True,
            check=False,
        )
        step()
        median = statistics.median(runs[name])
        out.append(
            CommandTime(
                command=name,
                argv=("tenantml", *argvs[name]),
                seconds=median,
                ratio=median / python_s,
                runs=tuple(runs[name]),
                exit_code=codes[name],
                expected_exit_code=COMMANDS[name][1],
                frameworks=_frameworks(probe.stderr),
            )
        )
    return python_s, out


def _time_to_first_dispatch(home: Path, cache: Path, timeout_s: float = 300.0) -> float:
    """Seconds from starting ``tenantml run --slots 1`` on `home` (Prefect's template cache at
    `cache`) to its first "dispatched" line; then the run is stopped as a user stops it."""
    import signal

    from tenantml.bench.live import stop_as_a_user

    env = {**os.environ, "TENANTML_HOME": str(home), "XDG_CACHE_HOME": str(cache)}
    start = time.perf_counter()
    proc = subprocess.Popen(
        (sys.executable, "-P", "-m", "tenantml.cli", "run", "--slots", "1"),
        env=env, cwd=home, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True,
        start_new_session=True,
    )  # fmt: skip
    seconds: float | None = None
    tail: list[str] = []
    # a run that prints nothing would block the read below: stop it at the timeout
    watchdog = threading.Timer(timeout_s, os.killpg, (proc.pid, signal.SIGINT))
    watchdog.start()
    try:
        assert proc.stdout is not None
        for line in proc.stdout:
            if "dispatched" in line:
                seconds = time.perf_counter() - start
                break
            tail = [*tail[-20:], line]
    finally:
        watchdog.cancel()
        stop_as_a_user(proc, grace_s=60)
    if seconds is None:
        raise RuntimeError(
            f"tenantml run dispatched nothing in {timeout_s:g} s on {home}:\n{''.join(tail)}"
        )
    return seconds


def measure_first_dispatch(
    root: Path,
    *,
    n_tenants: int = 20,
    n_examples: int = 6,
    repeats: int = 3,
    on_step: Callable[[], None] | None = None,
) -> FirstDispatch:
    """Per repeat, two new homes under `root` (each built before its clock starts, with at
    least `RUN_EXAMPLES` examples per tenant) and a new cache: ``tenantml run`` timed to its
    first dispatch with the cache empty, then with the template that run left. ``on_step``:
    called after each run (2 x `repeats`)."""
    step = on_step or (lambda: None)
    n_examples = max(n_examples, RUN_EXAMPLES)
    cold: list[float] = []
    warm: list[float] = []
    for k in range(repeats):
        cache = root / f"cache-{k}"
        for kind, times in (("cold", cold), ("template", warm)):
            home = root / f"run-{k}-{kind}"
            make_home(home, n_tenants, n_examples)
            times.append(_time_to_first_dispatch(home, cache))
            step()
    return FirstDispatch(tuple(cold), tuple(warm))


def to_json(
    python_s: float,
    times: Sequence[CommandTime],
    n_tenants: int,
    repeats: int,
    first_dispatch: FirstDispatch | None = None,
) -> dict[str, object]:
    out: dict[str, object] = {
        "tenants": n_tenants,
        "repeats": repeats,
        "python": sys.version.split()[0],
        "python_c_pass_s": python_s,
        "commands": [asdict(t) for t in times],
    }
    if first_dispatch is not None:
        out["run_first_dispatch"] = {
            "cold_s": first_dispatch.cold_s,
            "template_s": first_dispatch.template_s,
            **asdict(first_dispatch),
        }
    return out
