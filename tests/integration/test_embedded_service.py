"""The service end to end in embedded mode (ephemeral Prefect, SQLite MLflow, local store), with
the SDK and the CLI, including a scheduler killed mid-run and restarted."""

from __future__ import annotations

import json
import os
import re
import signal
import subprocess
import sys
import time
from collections import Counter
from collections.abc import Callable, Iterator
from contextlib import ExitStack
from pathlib import Path
from typing import Any

import numpy as np
import pytest
from typer.testing import CliRunner

from tenantml import datasets
from tests.signals import STOPPED, signal_after_dispatch

pytestmark = pytest.mark.slow

runner = CliRunner()


def _tenant_data(name: str, n: int | None = None) -> datasets.DemoData:
    d = datasets.load(name)
    if n is None:
        return d
    idx = np.random.default_rng(0).permutation(len(d.labels))[:n]
    labels = [d.labels[i] for i in idx]
    return datasets.DemoData(d.name, d.schema, d.inputs[idx], labels, d.description)


def _fed_home(home: Path, *tenants: tuple[str, int | None, list[str] | None]) -> dict[str, str]:
    """A new home with each of `tenants` (data set, rows or None for all, models or None for
    all) submitted and fed by another process; returns the environment that names the home."""
    env = {**os.environ, "TENANTML_HOME": str(home)}
    lines = ["from tenantml.client import Client", "from tenantml import datasets", "c = Client()"]
    for data, rows, models in tenants:
        name = data.replace("_", "-")
        lines += [
            f"d = datasets.load({data!r})",
            f"c.submit({name!r}, d.schema, models={models!r})",
            f"c.feed({name!r}, d.inputs[:{rows}], d.labels[:{rows}])",
        ]
    subprocess.run([sys.executable, "-c", "\n".join(lines)], env=env, check=True, timeout=300)
    return env


@pytest.fixture(scope="module")
def home(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Path]:
    root = tmp_path_factory.mktemp("home")
    old = os.environ.get("TENANTML_HOME")
    os.environ["TENANTML_HOME"] = str(root)
    yield root
    if old is None:
        os.environ.pop("TENANTML_HOME", None)
    else:
        os.environ["TENANTML_HOME"] = old


def _job_counts(client) -> Counter[tuple[str, str, str]]:  # type: ignore[no-untyped-def]
    from mlflow_plugin.tracking import job_records, tenant_experiments

    recs = job_records(client.mlflow, tenant_experiments(client.mlflow).values())
    return Counter((r.tenant, r.job_id, r.status) for r in recs)


def test_three_tenants_get_a_best_model_and_infer(home: Path) -> None:
    from tenantml.client import Client, NoModelYetError

    c = Client(home)
    data = {"wine": _tenant_data("wine"), "breast-cancer": _tenant_data("breast_cancer"),
            "digits": _tenant_data("digits")}  # fmt: skip
    for name, d in data.items():
        c.submit(name, d.schema)
        with pytest.raises(NoModelYetError, match="no model yet"):
            c.infer(name, d.inputs[:2])
        c.feed(name, d.inputs, d.labels)
    out = c.run(ticks=4, max_epochs=4, job_budget_s=60, policy="roundrobin", poll_s=0.2)
    assert out["jobs"] >= 4  # four ticks, each a run of one job or more (chained)
    for name, d in data.items():
        lb = c.status(name)
        assert lb.best is not None, name
        # The leaderboard the scheduler published in the store is MLflow's, read without it.
        fresh = c.status(name, fresh=True)
        assert lb.as_of is not None and fresh.as_of is None, name
        assert (lb.rows, lb.best_version, lb.weight) == (fresh.rows, fresh.best_version, 1.0)
        pred = c.infer(name, d.inputs[:100])
        acc = float(np.mean(np.asarray(pred) == np.asarray(d.labels[:100]).astype(str)))
        assert acc >= (0.7 if name == "digits" else 0.9), (name, acc)
    counts = _job_counts(c)
    assert all(v == 1 for v in counts.values())  # one run per job, none twice
    assert sum(1 for (_, _, s) in counts if s == "FINISHED") == out["jobs"]
    # A tick's estimates are logged again at its step as its jobs report, and at the end: the
    # history ends at the service's belief when it stopped, which is what the tick history
    # (status --plot, bench-live's calibration) reads.
    from tasks import LOSS_PREFIX, load_tick_history

    run = c.mlflow.get_run(out["run_id"])
    history = load_tick_history(c.mlflow)
    for name in data:
        key = f"{LOSS_PREFIX}{name}"
        at_last = [m for m in c.mlflow.get_metric_history(run.info.run_id, key)
                   if m.step == out["last_tick"]]  # fmt: skip
        assert len(at_last) >= 2, (name, at_last)  # the tick's, the end's, any between
        end = max(at_last, key=lambda m: m.timestamp)
        assert history[key][-1] == (out["last_tick"], end.value), name


def test_cli_mirrors_the_sdk(home: Path, tmp_path: Path) -> None:
    from tenantml.cli import app

    res = runner.invoke(app, ["tenants"])
    assert res.exit_code == 0 and "wine" in res.output.split()
    res = runner.invoke(app, ["status", "wine"])
    assert res.exit_code == 0 and "*" in res.output, res.output
    res = runner.invoke(app, ["status"])  # every tenant on one line, loss estimate and weight
    assert res.exit_code == 0, res.output
    assert "estimate" in res.output and "weight" in res.output, res.output
    row = next(line for line in res.output.splitlines() if " wine " in line)
    assert "178" in row and "0." in row, row
    rows = tmp_path / "wine.csv"
    d = datasets.load("wine")
    header = ",".join(f"f{i}" for i in range(13))
    rows.write_text(header + "\n" + "\n".join(",".join(map(str, r)) for r in d.inputs[:5]) + "\n")
    res = runner.invoke(app, ["infer", "wine", "--csv", str(rows)])
    assert res.exit_code == 0, res.output
    lines = res.output.strip().splitlines()
    assert len(lines) == 5 and lines[0].split("\t")[1] in {"class_0", "class_1", "class_2"}
    res = runner.invoke(app, ["infer", "wine", "--csv", str(rows), "--json"])
    assert res.exit_code == 0 and '"prediction"' in res.output
    res = runner.invoke(app, ["examples", "wine"])
    assert res.exit_code == 0 and len(res.output.strip().splitlines()) == 178
    res = runner.invoke(app, ["refine", "wine", "--disable", "0,1"])
    assert res.exit_code == 0 and "snapshot" in res.output


@pytest.mark.parametrize(
    ("args", "code", "message"),
    [
        (["status", "nobody"], 2, "unknown tenant 'nobody'"),
        (["infer", "nobody", "--csv", "x.csv"], 2, "unknown tenant"),
        (["submit", "../etc", "{input: {[Tensor[2]], []}, output: {[Tensor[2]], []}}"], 2,
         "tenant name '../etc' is not valid"),
        (["submit", "bad", "{input: {[Tensor[2]], []}}"], 2,
         "line 1, column 26: expected 'output'"),
        (["refine", "wine", "--disable", "x"], 2, "comma-separated integers"),
        (["run", "--policy", "nope"], 2, "--policy 'nope' is not valid"),
        (["run", "--budget-s", "0"], 2, "--budget-s 0.0 is not valid: use a positive number"),
    ],
)  # fmt: skip
def test_cli_errors(home: Path, args: list[str], code: int, message: str) -> None:
    from tenantml.cli import app

    before = sorted(p.relative_to(home) for p in (home / "store").rglob("*"))
    res = runner.invoke(app, args)
    assert res.exit_code == code, res.output
    assert message in res.output, res.output
    assert sorted(p.relative_to(home) for p in (home / "store").rglob("*")) == before


def test_infer_before_any_model_exits_1(home: Path) -> None:
    from tenantml.cli import app

    schema = "{input: {[Tensor[2]], []}, output: {[Tensor[2]], []}}"
    assert runner.invoke(app, ["submit", "fresh", schema]).exit_code == 0
    rows = home / "fresh.csv"
    rows.write_text("a,b\n1,2\n")
    res = runner.invoke(app, ["infer", "fresh", "--csv", str(rows)])
    assert res.exit_code == 1 and "no model yet" in res.output


def _script_in_new_home(script: str, home: Path) -> Any:
    """Run `script` in its own Python process with ``TENANTML_HOME=home``, as a user would;
    returns the JSON of its last line."""
    env = {**os.environ, "TENANTML_HOME": str(home)}
    out = subprocess.run([sys.executable, "-c", script], env=env, capture_output=True,
                         text=True, timeout=600)  # fmt: skip
    assert out.returncode == 0, out.stderr[-3000:]
    return json.loads(out.stdout.strip().splitlines()[-1])


def test_fed_data_is_trained_on_and_served(tmp_path: Path) -> None:
    """A tenant that feeds more examples gets models trained on all of them, and `best` moves to
    one, although every candidate had been tried on the smaller snapshot (`best` prefers the
    newer snapshot's model, whatever the older one measured on its smaller validation split)."""
    script = (
        "import json\nfrom tenantml.client import Client\nfrom tenantml import datasets\n"
        "from mlflow_plugin import best_model\n"
        "from mlflow_plugin.tracking import job_records, tenant_experiments\n"
        "c = Client()\nd = datasets.load('wine')\n"
        # four of the 21 candidates: the rule is the same, and each job is a flow run
        "c.submit('wine', d.schema, models=['logistic_regression', 'random_forest', 'knn',\n"
        "                                    'svm'])\n"
        "c.feed('wine', d.inputs[:100], d.labels[:100])\n"
        "c.run(ticks=30, poll_s=0.2)\n"
        "first = best_model(c.mlflow, 'wine')\n"
        "c.feed('wine', d.inputs[100:], d.labels[100:])\n"
        "c.run(ticks=2, poll_s=0.2)\n"
        "recs = job_records(c.mlflow, tenant_experiments(c.mlflow).values())\n"
        "best = best_model(c.mlflow, 'wine')\n"
        "print(json.dumps({'cands': c.status('wine').n_candidates,\n"
        "    'jobs': [[r.snapshot, r.candidate, r.status] for r in recs],\n"
        "    'first': [first.snapshot, first.accuracy], 'best': [best.snapshot, best.job_id],\n"
        "    'pred': list(map(str, c.infer('wine', d.inputs[:5])))}))\n"
    )
    res = _script_in_new_home(script, tmp_path / "home")
    on = Counter(snap for snap, _, status in res["jobs"] if status == "FINISHED")
    assert on[1] == res["cands"] and on[2] >= 1, on  # all tried on snapshot 1, then retrained
    assert res["first"][0] == 1 and res["best"][0] == 2, res
    assert len(res["pred"]) == 5


def test_a_finished_torch_job_leaves_no_checkpoint(tmp_path: Path) -> None:
    """The trainer writes a checkpoint after every epoch; once the job ends FINISHED its model
    is in MLflow and the checkpoint goes (a demo home held 772 MB of them, 98% of its size). A
    run of it sent again (a crash after the job ended) trains nothing: it finds it FINISHED."""
    script = (
        "import json\nfrom dataclasses import asdict\n"
        "from tenantml.client import Client\nfrom tenantml import datasets\n"
        "from mlflow_plugin.tracking import job_records, tenant_experiments\n"
        "c = Client()\nd = datasets.load('digits')\n"
        "c.submit('digits', d.schema, models=['lenet'])\n"
        "c.feed('digits', d.inputs[:400], d.labels[:400])\n"
        "c.run(ticks=1, max_epochs=2, poll_s=0.2)\n"
        "recs = job_records(c.mlflow, tenant_experiments(c.mlflow).values())\n"
        "left = c.store.blobs.list('tenants/digits/checkpoints/')\n"
        "def started():\n"
        "    return c.mlflow.get_run(recs[0].run_id).data.metrics['started_at']\n"
        "first = started()\n"
        "from flows.train import train\nfrom tasks import JobSpec\n"
        "again = train(asdict(JobSpec('digits', 'lenet', 1, 'lenet-s1', 1, 'rate', None, 2)))\n"
        "print(json.dumps({'jobs': [[r.job_id, r.status] for r in recs], 'left': left,\n"
        "    'again': [a['status'] for a in again], 'retrained': started() != first,\n"
        "    'pred': len(c.infer('digits', d.inputs[:5]))}))\n"
    )
    res = _script_in_new_home(script, tmp_path / "home")
    assert res["jobs"] == [["lenet-s1", "FINISHED"]], res
    assert res["left"] == [] and res["pred"] == 5, res
    assert res["again"] == ["FINISHED"] and not res["retrained"], res


@pytest.mark.full
def test_kill_the_scheduler_and_restart_loses_and_duplicates_nothing(
    tmp_path: Path,
) -> None:
    """A scheduler in its own process is SIGKILLed while a job runs; a new one takes over."""
    home = tmp_path / "svc"
    env = _fed_home(home, ("digits", 600, None))
    cmd = [sys.executable, "-m", "tenantml.cli", "run", "--ticks", "4", "--max-epochs", "6",
           "--policy", "roundrobin"]  # fmt: skip
    proc = subprocess.Popen(cmd, env=env, start_new_session=True,
                            stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)  # fmt: skip
    from mlflow.tracking import MlflowClient

    from mlflow_plugin.tracking import job_records, tenant_experiments

    client = MlflowClient(f"sqlite:///{home / 'mlflow.db'}")
    deadline = time.monotonic() + 300
    killed_with: list[str] = []
    while time.monotonic() < deadline and proc.poll() is None:
        try:
            recs = job_records(client, tenant_experiments(client).values())
        except Exception:  # noqa: BLE001 - the database may not exist yet
            recs = []
        finished = [r for r in recs if r.status == "FINISHED"]
        running = [r for r in recs if r.status == "RUNNING"]
        if finished and running:
            killed_with = [r.job_id for r in running]
            os.killpg(proc.pid, signal.SIGKILL)
            break
        time.sleep(0.3)
    proc.wait(timeout=30)
    assert killed_with, "the scheduler finished before it could be killed mid-job"
    before = {r.job_id for r in job_records(client, tenant_experiments(client).values())
              if r.status == "FINISHED"}  # fmt: skip
    cmd2 = [*cmd[:5], "2", *cmd[6:]]
    subprocess.run(cmd2, env=env, check=True, timeout=600)
    recs = job_records(client, tenant_experiments(client).values())
    ids = [r.job_id for r in recs]
    assert len(ids) == len(set(ids))  # one run per job: the killed one was resumed, not redone
    assert all(r.status == "FINISHED" for r in recs)
    assert set(killed_with) <= set(ids) and before <= set(ids)
    assert len(recs) >= len(before) + len(killed_with)


def _start_killed_when(
    cmd: list[str], env: dict[str, str], log: Path, kill_now: Callable[[Any], bool]
) -> tuple[int, str]:
    """Start `cmd` in a session of its own, its output to `log`, and SIGKILL its process group
    as soon as ``kill_now(proc)`` says so (asked every 0.2 s, for at most 300 s; a read that
    fails, as on a database not made yet, counts as no); returns its exit code and output."""
    with log.open("w") as out:
        proc = subprocess.Popen(cmd, env=env, start_new_session=True, stdout=out,
                                stderr=subprocess.STDOUT)  # fmt: skip
        try:
            deadline = time.monotonic() + 300
            while proc.poll() is None and time.monotonic() < deadline:
                try:
                    kill = kill_now(proc)
                except Exception:  # noqa: BLE001 - the database may not exist yet
                    kill = False
                if kill:
                    os.killpg(proc.pid, signal.SIGKILL)
                    break
                time.sleep(0.2)
            proc.wait(timeout=60)
        finally:  # a timeout, a failed read: no service left running
            if proc.poll() is None:
                os.killpg(proc.pid, signal.SIGKILL)
                proc.wait()
    return proc.returncode, log.read_text()


@pytest.mark.full
@pytest.mark.timeout(900)  # six starts of the service: 59 s alone, several times that on CI
def test_a_job_that_kills_the_service_beside_others_is_found_and_given_up(tmp_path: Path) -> None:
    """End to end, the crash loop of a job that takes the service down while other jobs train
    beside it (`tasks._crashes`): `tenantml run --slots 2` restarted as a service manager
    would, and a watcher that SIGKILLs it whenever one job trains in it, as a job that runs
    the machine out of memory would. The job is chosen while another trains beside it, so
    its first deaths have two suspects. Before, every restart resumed the two together and
    died again. Now, after two such deaths each is resumed alone: the other finishes, the
    chosen one dies alone three times and is given up, and every other job finishes."""
    from mlflow.tracking import MlflowClient

    from mlflow_plugin.tracking import GAVE_UP, job_records, process_state, tenant_experiments

    home = tmp_path / "svc"
    models = ["logistic_regression", "random_forest", "knn"]
    env = _fed_home(home, ("wine", None, models), ("breast_cancer", None, models))
    client = MlflowClient(f"sqlite:///{home / 'mlflow.db'}")
    cmd = [sys.executable, "-m", "tenantml.cli", "run", "--slots", "2", "--ticks", "6",
           "--chain-s", "0", "--sleep-job-seconds", "3", "--policy", "roundrobin"]  # fmt: skip
    target: tuple[str, str] | None = None
    kills, outs, code = 0, list[str](), None

    def kill_now(proc: subprocess.Popen[bytes]) -> bool:
        nonlocal target, kills
        seen = job_records(client, tenant_experiments(client).values())
        # jobs training in this process now (a job held back keeps its dead one's)
        here = [(r.tenant, r.job_id) for r in seen
                if r.status == "RUNNING" and process_state(r.process) == "running"]  # fmt: skip
        if target is None and len(here) >= 2:
            target = here[0]
        # it kills the process beside others, and alone once it is a suspect, sent alone (the
        # watcher waits for the others' attempts to have started: no race)
        suspect = any((r.tenant, r.job_id) == target and r.shared_crashes >= 2 for r in seen)
        kill = target in here and (len(here) >= 2 or suspect)
        kills += kill
        return kill

    for n in range(12):  # restarts, as a service manager's
        code, out = _start_killed_when(cmd, env, tmp_path / f"run-{n}.log", kill_now)
        outs.append(out)
        if code == 0:
            break
        assert code == -signal.SIGKILL, (code, out[-3000:])
    assert target is not None and code == 0, (target, kills, outs[-1][-3000:])
    # two deaths beside others, then three alone
    assert kills == 5, (kills, outs)
    every = job_records(client, tenant_experiments(client).values())
    recs = {(r.tenant, r.job_id): r for r in every}
    killer = client.get_run(recs[target].run_id)
    assert killer.info.status == "FAILED" and "died 3 times" in killer.data.tags[GAVE_UP]
    assert (recs[target].shared_crashes, recs[target].crashes) == (2, 3)
    # those that died beside it twice were suspects too, sent alone, and finished
    assert any(r.shared_crashes == 2 for key, r in recs.items() if key != target), recs
    others = {key: r.status for key, r in recs.items() if key != target}
    assert len(others) == 2 * len(models) - 1 and set(others.values()) == {"FINISHED"}, others


def _in_own_pid_namespace() -> list[str]:
    """The command prefix that starts a process in a pid namespace of its own, as a container
    runtime does (with /proc of that namespace); empty where this machine refuses it (not
    root, no ``unshare``)."""
    prefix = ["unshare", "--pid", "--fork", "--mount-proc"]
    try:
        ok = subprocess.run([*prefix, "true"], capture_output=True, timeout=30).returncode == 0
    except (OSError, subprocess.SubprocessError):
        ok = False
    return prefix if ok else []


@pytest.mark.full
@pytest.mark.timeout(600)  # four starts of the service: 30 s alone, several times that on CI
def test_a_job_that_kills_its_container_is_given_up(tmp_path: Path) -> None:
    """End to end, `tenantml run` restarted as a container runtime restarts a container whose
    service the cgroup's OOM killer took down: each start in a pid namespace of its own
    (`unshare --pid`), and a watcher that SIGKILLs the namespace whenever one job trains in it.
    From the next start the dead scheduler's process was one it could not see ("unknown"), so
    its deaths counted nowhere and the job was resumed into every restart. The scheduler is its
    home's only one (it holds the home's lock, MLflow is in the home), so those deaths count:
    three, then the job is given up and the other job finishes (`tasks._crashes`)."""
    from mlflow.tracking import MlflowClient

    from mlflow_plugin.tracking import GAVE_UP, job_records, tenant_experiments

    prefix = _in_own_pid_namespace()
    if not prefix:
        pytest.skip("starting a process in a pid namespace of its own needs root and `unshare`")
    home = tmp_path / "svc"
    env = _fed_home(home, ("wine", None, ["logistic_regression", "knn"]))
    client = MlflowClient(f"sqlite:///{home / 'mlflow.db'}")
    cmd = [*prefix, sys.executable, "-m", "tenantml.cli", "run", "--slots", "1", "--ticks", "4",
           "--chain-s", "0", "--sleep-job-seconds", "3", "--policy", "roundrobin"]  # fmt: skip
    target: tuple[str, str] | None = None
    dead: set[str] = set()  # the processes of the namespaces killed (their jobs keep them)
    kills, code = 0, None
    with ExitStack() as kept:  # the namespaces killed, held open (below)

        def kill_now(proc: subprocess.Popen[bytes]) -> bool:
            nonlocal target, kills
            seen = job_records(client, tenant_experiments(client).values())
            # training in this start: its process is none of the dead ones (from here
            # `process_state` cannot see a process in that namespace either)
            here = {(r.tenant, r.job_id): r.process for r in seen
                    if r.status == "RUNNING" and r.process and r.process not in dead}  # fmt: skip
            target = target or next(iter(here), None)
            if target not in here:
                return False
            # its namespace held, so that its inode is not handed to the next start's (whose
            # view would then read the dead process "ended", and the test prove nothing)
            init = Path(f"/proc/{proc.pid}/task/{proc.pid}/children").read_text().split()[0]
            kept.callback(os.close, os.open(f"/proc/{init}/ns/pid", os.O_RDONLY))
            dead.add(here[target])
            kills += 1
            return True

        for n in range(8):  # restarts, as a container runtime's
            code, out = _start_killed_when(cmd, env, tmp_path / f"run-{n}.log", kill_now)
            if code == 0:
                break
            assert code == -signal.SIGKILL, (code, out[-3000:])
    assert len({tag.partition("@")[2] for tag in dead}) == kills  # a namespace each
    assert target is not None and code == 0, (target, kills, out[-3000:])
    assert kills == 3, kills
    every = job_records(client, tenant_experiments(client).values())
    recs = {(r.tenant, r.job_id): r for r in every}
    killer = client.get_run(recs[target].run_id)
    assert killer.info.status == "FAILED" and "died 3 times" in killer.data.tags[GAVE_UP]
    others = {key: r.status for key, r in recs.items() if key != target}
    assert list(others.values()) == ["FINISHED"], others


@pytest.fixture(scope="module")
def signal_home(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A home of its own with two small tenants (their models get stand-in sleep jobs here)."""
    home = tmp_path_factory.mktemp("signals")
    _fed_home(home, ("wine", None, None), ("breast_cancer", None, None))
    return home


@pytest.mark.parametrize(
    ("sig", "to_group"),
    [(signal.SIGINT, True), pytest.param(signal.SIGTERM, False, marks=pytest.mark.full)],
    ids=["ctrl-c", "term"],
)
def test_a_signal_stops_run_with_one_line_and_the_next_run_resumes_its_jobs(
    signal_home: Path, sig: signal.Signals, to_group: bool
) -> None:
    """Ctrl-C (SIGINT to the process group, which holds Prefect's temporary server too) or
    SIGTERM: exit code 130, one line, no traceback; the jobs' MLflow runs stay RUNNING and the
    next `run` resumes them."""
    from mlflow.tracking import MlflowClient

    from mlflow_plugin.tracking import (
        SCHEDULER_EXPERIMENT,
        JobRecord,
        job_records,
        tenant_experiments,
    )

    env = {**os.environ, "TENANTML_HOME": str(signal_home)}
    client = MlflowClient(f"sqlite:///{signal_home / 'mlflow.db'}")

    def running() -> list[JobRecord]:
        recs = job_records(client, tenant_experiments(client).values())
        return [r for r in recs if r.status == "RUNNING"]

    cmd = [sys.executable, "-m", "tenantml.cli", "run"]
    # the signal comes while the first job trains (one slot: a second would wait for it)
    code, out, err, took = signal_after_dispatch(
        [*cmd, "--ticks", "20", "--sleep-job-seconds", "60"], env, sig, to_group,
        ready=lambda: bool(running()), jobs=1,
    )  # fmt: skip
    print(f"{sig.name}: the scheduler ended {took:.2f} s after the signal")
    assert code == 130, (out, err[-3000:])
    assert "Traceback" not in err, err[-5000:]
    assert [m[0] for m in STOPPED.findall(out)] == [sig.name], out
    # the stop is marked in the home, by the scheduler's run: no death, should its KILLED end
    # not reach MLflow in time (`tasks._crashes.mark_stopped`)
    schedulers = client.get_experiment_by_name(SCHEDULER_EXPERIMENT)
    [stopped] = client.search_runs([schedulers.experiment_id], max_results=1)  # the newest
    assert (signal_home / "stopped" / stopped.info.run_id).exists()
    arm = r"[\w.+-]+"  # e.g. knn-k1-p1, a tabular portfolio member
    assert re.search(rf"^tick \d+: dispatched (wine|breast-cancer) {arm}$", out, re.M), out
    left = running()
    assert left, "the stopped scheduler's jobs should stay RUNNING (to be resumed)"
    drain = subprocess.run([*cmd, "--ticks", "0", "--sleep-job-seconds", "0.1"], env=env,
                           capture_output=True, text=True, timeout=300)  # fmt: skip
    assert drain.returncode == 0, drain.stderr[-3000:]
    for r in left:
        assert f"resumed {r.tenant} {r.candidate} " in drain.stdout, drain.stdout
        assert f"finished {r.tenant} {r.candidate}: " in drain.stdout, drain.stdout
    recs = job_records(client, tenant_experiments(client).values())
    assert all(r.status == "FINISHED" for r in recs), [(r.job_id, r.status) for r in recs]
    ids = [(r.tenant, r.job_id) for r in recs]
    assert len(ids) == len(set(ids))  # resumed, not run twice


def test_a_chains_jobs_are_told_as_they_finish_and_counted_once(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A chained run's jobs reach the listeners (and the scheduler's estimates) as MLflow shows
    each finished, not together when the run ends; each is told and counted once. Sleep jobs of
    1.5 s, four to a chain: the first is told while the later ones still train."""
    from mlflow_plugin.tracking import job_records, tenant_experiments
    from tasks import JobFinished, SchedulerEvent
    from tenantml.client import Client

    monkeypatch.setenv("TENANTML_HOME", str(tmp_path / "told-home"))
    c = Client(tmp_path / "told-home")
    d = _tenant_data("wine")
    c.submit("wine", d.schema)
    c.feed("wine", d.inputs, d.labels)
    told: list[str] = []
    unfinished_at_first: list[int] = []

    def on_progress(event: SchedulerEvent) -> None:
        if isinstance(event, JobFinished):
            told.append(event.job_id)
            if len(told) == 1:
                recs = job_records(c.mlflow, tenant_experiments(c.mlflow).values())
                unfinished_at_first.append(4 - sum(r.status == "FINISHED" for r in recs))

    out = c.run(ticks=1, on_progress=on_progress, policy="roundrobin", slots=1, sleep_s=1.5,
                chain_s=6.5, refresh_s=0.2, poll_s=0.1)  # fmt: skip
    assert out["jobs"] == 4 and len(told) == len(set(told)) == 4, (out, told)
    assert out["in_flight"] == 0
    assert unfinished_at_first[0] >= 1, unfinished_at_first
    assert sorted(told) == sorted(k[1] for k in _job_counts(c))


def test_a_chain_trains_its_jobs_in_one_flow_run_and_a_resend_skips_the_finished(
    tmp_path: Path,
) -> None:
    """Short jobs chained into one `train` run (the scheduler's ``chain_s``): each is its own
    MLflow run; one that fails does not stop the ones after it, and the run then fails; sent
    again, the chain trains only what did not finish (once per job, never twice)."""
    from flows.train import train
    from mlflow_plugin.tracking import job_records, tenant_experiments
    from tasks import JobSpec
    from tenantml.client import Client

    c = Client(tmp_path / "chain-home")
    d = _tenant_data("wine")
    c.submit("wine", d.schema)
    c.feed("wine", d.inputs, d.labels)
    snap = c.store.manifest("wine").version
    jobs = [JobSpec("wine", m, snap, f"{m}-s{snap}", 1, "manual", None, 2)
            for m in ("knn", "nonesuch", "logistic_regression")]  # fmt: skip
    chain = JobSpec(**{**jobs[0].params(), "then": tuple(jobs[1:])})
    once = train.with_options(retries=0)  # the flow's own retries would send it again too

    def runs() -> dict[str, tuple[str, float | None]]:
        recs = job_records(c.mlflow, tenant_experiments(c.mlflow).values())
        assert len({r.job_id for r in recs}) == len(recs)  # one run per job
        return {r.job_id: (r.status, r.end_time) for r in recs}

    with pytest.raises(KeyError, match="nonesuch"):
        once(chain.params())
    knn, bad, lr = (j.job_id for j in jobs)
    first = runs()
    assert {k: v[0] for k, v in first.items()} == {
        knn: "FINISHED", bad: "FAILED", lr: "FINISHED"}  # fmt: skip
    with pytest.raises(KeyError, match="nonesuch"):
        once(chain.params())  # the scheduler sends it again
    again = runs()
    for job_id in (knn, lr):
        assert again[job_id] == first[job_id]  # not trained again
    # The tenant's best is one of the chain's models, and `status` shows all three jobs.
    lb = c.status("wine", fresh=True)
    assert lb.best is not None and lb.best.candidate in ("knn", "logistic_regression")
    assert len(lb.rows) == 3


def test_a_resent_job_is_left_to_a_live_process_that_trains_it(tmp_path: Path) -> None:
    """One trainer per job. A SEER job of `tenantml seer run` that a scheduler sends again (its
    process had ended), while the user runs the same request again: the `train` run leaves it
    to that `seer run` when the request's lock is held (both started before either recorded its
    process) or when the job's record names a live process. A scheduler's own job sent again
    while its earlier attempt still trains here (its flow run crashed alive) is left to that
    attempt; once no process trains it, the run trains it."""
    import socket

    from flows.train import train
    from mlflow_plugin.tracking import (
        NODE,
        POLICY,
        PROCESS,
        ensure_tenant_experiment,
        job_record,
        process_tag,
        start_job_run,
    )
    from tasks import BY_HAND, JobSpec, SeerOptions, request_lock
    from tenantml.client import Client

    c = Client(tmp_path / "home")
    for name, n in (("digits", 300), ("wine", None)):
        d = _tenant_data(name, n)
        c.submit(name, d.schema)
        c.feed(name, d.inputs, d.labels)
    exp = {t: ensure_tenant_experiment(c.mlflow, t, str(c.store.schema(t)), [], None)
           for t in ("digits", "wine")}  # fmt: skip
    seer_id = "seer-lenet-s1-0c1d2e3f"
    seer = SeerOptions(deadline_min=1.0, budget_gpu_min=1.0).as_dict()
    resent = JobSpec("digits", "lenet", 1, seer_id, 1, "rate", None, 2, seer=seer)
    once = train.with_options(retries=0)

    with request_lock(c.settings.home, "digits", seer_id):  # a `seer run`, not yet recorded
        [left] = once(resent.params())
    assert left["job_id"] == seer_id and f"process {os.getpid()}" in left["left"], left
    assert job_record(c.mlflow, exp["digits"], seer_id) is None  # nothing trained or recorded

    live = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(60)"])
    here = {PROCESS: process_tag(live.pid), NODE: socket.gethostname()}
    own = JobSpec("wine", "knn", 1, "knn-s1", 1, "rate", None, 2)
    try:  # the `seer run` has recorded its process, and trains
        start_job_run(c.mlflow, exp["digits"], tenant="digits", job_id=seer_id,
                      params={"model": "lenet", "snapshot": 1},
                      tags={**here, POLICY: BY_HAND})  # fmt: skip
        [left] = once(resent.params())
        assert f"process {live.pid} on this machine (its `seer run`)" in left["left"], left
        rec = job_record(c.mlflow, exp["digits"], seer_id)
        assert rec is not None and rec.status == "RUNNING" and rec.process == here[PROCESS]
        # the scheduler's own job, its earlier attempt still training here
        start_job_run(c.mlflow, exp["wine"], tenant="wine", job_id=own.job_id,
                      params={"model": "knn", "snapshot": 1},
                      tags={**here, POLICY: "rate"})  # fmt: skip
        [left] = once(own.params())
        assert f"process {live.pid} on this machine (an earlier attempt" in left["left"], left
    finally:
        live.kill()
        live.wait()
    [done] = once(own.params())  # that attempt's process has ended: this run trains the job
    rec = job_record(c.mlflow, exp["wine"], own.job_id)
    assert rec is not None and rec.status == "FINISHED" and done["run_id"] == rec.run_id


def test_a_second_scheduler_on_one_home_is_refused_in_one_line(tmp_path: Path) -> None:
    """`tenantml run` while another scheduler runs on the same home: refused at once in one
    line naming that process (exit 2), nothing sent; before, both decided alone and filled the
    same slots. Once the first has ended, it runs."""
    from tasks import scheduler_lock

    home = tmp_path / "home"
    env = _fed_home(home, ("wine", None, ["knn"]))
    cmd = [sys.executable, "-m", "tenantml.cli", "run", "--ticks", "1"]
    log = tmp_path / "run.log"
    with scheduler_lock(home):  # the first scheduler (this process)
        with open(log, "w") as out:
            res = subprocess.run(cmd, env=env, stdout=out, stderr=subprocess.STDOUT, timeout=300)
        text = log.read_text()
        assert res.returncode == 2, text
        assert f"error: a scheduler already runs on {home}: process {os.getpid()} (" in text, text
        assert "Traceback" not in text, text
        count = (
            "from mlflow_plugin.tracking import job_records, tenant_experiments\n"
            "from tenantml.client import Client\nc = Client()\n"
            "print('jobs', len(job_records(c.mlflow, tenant_experiments(c.mlflow).values())))\n"
        )
        out = subprocess.run([sys.executable, "-c", count], env=env, capture_output=True,
                             text=True, timeout=120, check=True)  # fmt: skip
        assert "jobs 0" in out.stdout, out.stdout  # nothing sent
    with open(log, "w") as out:  # the first has ended: this one runs its tick
        res = subprocess.run(cmd, env=env, stdout=out, stderr=subprocess.STDOUT, timeout=300)
    assert res.returncode == 0 and "1 ticks, 1 jobs" in log.read_text(), log.read_text()
