"""The service on real servers on loopback: `tenantml up` (S3, MLflow and Prefect servers, on
PostgreSQL where it is installed, a process work pool with two workers), three tenants through
the SDK and the CLI, a train process killed mid-epoch, a scheduler killed and restarted.

Every client runs in its own process with ``TENANTML_HOME``, as a user's would.
"""

from __future__ import annotations

import json
import os
import shutil
import signal
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path

import numpy as np
import pytest

from tenantml import datasets
from tenantml.ops.servers import down, flow_processes, up
from tests.signals import STOPPED, signal_after_dispatch

pytestmark = [pytest.mark.integration, pytest.mark.slow, pytest.mark.timeout(600)]


def _have_postgres() -> bool:
    return bool(shutil.which("pg_ctl") or list(Path("/usr/lib/postgresql").glob("*/bin/pg_ctl")))


@pytest.fixture(scope="module")
def home(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Path]:
    root = tmp_path_factory.mktemp("servers")
    up(root, slots=2, postgres=_have_postgres())
    try:
        yield root
    finally:
        pids = json.loads((root / "servers" / "pids.json").read_text())
        down(root)
        for name, pid in pids.items():
            if name != "postgres":
                with pytest.raises(ProcessLookupError):
                    os.kill(pid, 0)
        assert not (root / "servers.json").exists()


def _env(home: Path) -> dict[str, str]:
    return {**os.environ, "TENANTML_HOME": str(home)}


def _py(home: Path, code: str, timeout: float = 300) -> str:
    out = subprocess.run([sys.executable, "-c", code], env=_env(home), capture_output=True,
                         text=True, timeout=timeout)  # fmt: skip
    assert out.returncode == 0, out.stderr[-3000:]
    return out.stdout


def _cli(home: Path, *args: str, timeout: float = 600, input: str | None = None) -> str:
    out = subprocess.run([sys.executable, "-m", "tenantml.cli", *args], env=_env(home),
                         capture_output=True, text=True, timeout=timeout, input=input)  # fmt: skip
    assert out.returncode == 0, (args, out.stdout[-2000:], out.stderr[-3000:])
    return out.stdout


# Every scheduler here: 2 slots, at most 4 epochs per learning rate, round robin.
_RUN = ("--slots", "2", "--max-epochs", "4", "--policy", "roundrobin")
# Later runs reach dearer CNNs (round robin walks every tenant's list): 30 s per job at most.
_BOUNDED = (*_RUN, "--job-budget", "30")

_RECORDS = """
import json
from tenantml.client import Client
from mlflow_plugin.tracking import job_records, tenant_experiments
c = Client()
recs = job_records(c.mlflow, tenant_experiments(c.mlflow).values())
print(json.dumps([r.__dict__ for r in recs]))
"""


def _records(home: Path) -> list[dict[str, object]]:
    return list(json.loads(_py(home, _RECORDS).strip().splitlines()[-1]))


_TENANTS = """
from tenantml.client import Client
from tenantml import datasets
c = Client()
for name in ("wine", "digits"):
    d = datasets.load(name)
    c.submit(name, d.schema)
    if c.store.manifest(name).n_examples == 0:
        c.feed(name, d.inputs, d.labels)
"""


@pytest.fixture()
def tenants(home: Path) -> None:
    """`home` with the wine and digits tenants fed (a no-op after the three-tenants test), so
    each test below also runs alone or in `make test-full` without the first test."""
    _py(home, _TENANTS)


def test_three_tenants_best_models_and_infer(home: Path, tmp_path: Path) -> None:
    cfg = json.loads((home / "servers.json").read_text())
    assert cfg["tracking_uri"].startswith("http://127.0.0.1:") and cfg["store"].startswith("s3://")
    # one machine: train runs fork from the warm process (`up`'s default), started with the rest
    assert cfg["flow_run_command"].endswith(" -m tenantml.ops.warm run"), cfg
    assert "warm" in json.loads((home / "servers" / "pids.json").read_text())
    _py(home, (
        "from tenantml.client import Client\nfrom tenantml import datasets\nc = Client()\n"
        "for n in ('wine', 'breast_cancer'):\n"
        "    d = datasets.load(n)\n    c.submit(n.replace('_', '-'), d.schema)\n"
        "    c.feed(n.replace('_', '-'), d.inputs, d.labels)\n"
    ))  # fmt: skip
    d = datasets.load("digits")
    np.savez(tmp_path / "digits.npz", x=d.inputs, y=d.labels)
    _cli(home, "submit", "digits", str(d.schema))
    assert "fed 1797 examples" in _cli(
        home, "feed", "digits", "--npz", str(tmp_path / "digits.npz")
    )
    out = _cli(home, "run", *_RUN, "--ticks", "3")
    jobs = int(out.split(" ticks, ")[1].split(" jobs")[0])
    assert "3 ticks" in out and jobs >= 4, out  # 2 slots, one prefetched job each: 4 at first
    recs = _records(home)
    assert len(recs) == jobs and all(r["status"] == "FINISHED" for r in recs)
    assert len({(r["tenant"], r["job_id"]) for r in recs}) == jobs
    assert {r["tenant"] for r in recs} == {"wine", "breast-cancer", "digits"}
    pred = _py(home, (
        "import json\nfrom tenantml.client import Client\nfrom tenantml import datasets\n"
        "c = Client()\nout = {}\n"
        "for n in ('wine', 'breast_cancer', 'digits'):\n"
        "    d = datasets.load(n)\n    p = c.infer(n.replace('_', '-'), d.inputs[:100])\n"
        "    out[n] = float((p == [str(v) for v in d.labels[:100]]).mean())\n"
        "print(json.dumps(out))\n"
    ))  # fmt: skip
    acc = json.loads(pred.strip().splitlines()[-1])
    assert acc["wine"] >= 0.9 and acc["breast_cancer"] >= 0.9 and acc["digits"] >= 0.7, acc
    rows = tmp_path / "wine.csv"
    w = datasets.load("wine")
    rows.write_text("\n".join([",".join(f"f{i}" for i in range(13))]
                              + [",".join(map(str, r)) for r in w.inputs[:4]]) + "\n")  # fmt: skip
    lines = _cli(home, "infer", "wine", "--csv", str(rows)).strip().splitlines()
    assert len(lines) == 4 and all(line.split("\t")[1].startswith("class_") for line in lines)
    assert "best version" in _cli(home, "status", "digits")
    # what `tenantml chaos` would say of a lost job: how its flow runs ended
    from tenantml.ops.chaos import _Service

    why = _Service(home, print).why_lost(recs[0]["tenant"], str(recs[0]["job_id"]))
    assert why.startswith("flow runs: COMPLETED: ") and "last error" not in why, why
    assert "no flow run" in _Service(home, print).why_lost("wine", "no-such-job")
    for log in (home / "servers" / "logs").glob("worker-*.log"):  # every run forked warm
        assert "starting cold" not in log.read_text(errors="replace"), log


_DISPATCH = """
import json, sys, time
from tasks.settings import Settings
s = Settings.load().apply()  # before Prefect is imported: it reads PREFECT_API_URL once
from tasks._dispatch import DeploymentDispatcher
from tasks._service import JobSpec
d = DeploymentDispatcher(1, {"TENANTML_HOME": str(s.home)})
d.submit(JobSpec("digits", "lenet", 1, "lenet-kill-test", 99, "manual", None, 12))
while not (done := d.poll()):
    time.sleep(0.2)
print(json.dumps({"ok": done[0].ok, "attempts": 2}))
"""


# More `train` runs going than one page of Prefect's (its default limit, 200), scheduled for
# tomorrow (no worker takes them), then listed as a starting scheduler lists them.
_MANY_GOING = """
import datetime
from tasks.settings import Settings
Settings.load().apply()
from prefect.client.orchestration import get_client
from prefect.states import Scheduled
from tasks._dispatch import DeploymentDispatcher
from tasks._service import JobSpec
n = 205
at = datetime.datetime.now(datetime.timezone.utc) + datetime.timedelta(days=1)
with get_client(sync_client=True) as client:
    deployment = client.read_deployment_by_name("train/train")
    for i in range(n):
        spec = JobSpec("paging", "knn", 1, f"knn-paging-{i}", 1, "manual", None, 1)
        client.create_flow_run_from_deployment(
            deployment.id, parameters={"spec": spec.params()},
            state=Scheduled(scheduled_time=at), name=f"paging-{i}")
going = DeploymentDispatcher(1, {}, pin_gpus=False).left_going()
listed = sorted(int(s.job_id.rsplit("-", 1)[1]) for s, _ in going if s.tenant == "paging")
print(n, listed == list(range(n)), len(listed))
"""

# Every run `_MANY_GOING` made, deleted (each on its own: one that fails leaves the rest going).
_NO_MORE_GOING = """
from tasks.settings import Settings
Settings.load().apply()
from prefect.client.orchestration import get_client
from prefect.client.schemas.filters import FlowRunFilter, FlowRunFilterName
with get_client(sync_client=True) as client:
    deleted = True
    while deleted:  # a page at a time, until one deletes nothing
        deleted = False
        for fr in client.read_flow_runs(
                flow_run_filter=FlowRunFilter(name=FlowRunFilterName(like_="paging-"))):
            try:
                client.delete_flow_run(fr.id)
                deleted = True
            except Exception as e:  # noqa: BLE001 - the others go all the same
                print(f"could not delete {fr.name}: {e}")
"""


def test_a_scheduler_finds_every_run_left_going_beyond_one_page(home: Path) -> None:
    """`left_going` reads every flow run the deployment has going, not only Prefect's first page
    (its default limit, 200): a pool with more (128 GPUs, one run waiting on each) had the rest
    sent again by the next scheduler. 205 runs scheduled for tomorrow, listed, then deleted
    (from here, whatever happened: later tests' schedulers would adopt them)."""
    try:
        n, complete, listed = _py(home, _MANY_GOING, timeout=240).split()[-3:]
        assert complete == "True", (n, listed)
    finally:
        _py(home, _NO_MORE_GOING, timeout=240)


# A `train` run as a scheduler sends it, due in 20 s: until a worker starts it, only Prefect knows
# of the job (no MLflow run), as when a scheduler is killed right after dispatching.
_SENT_ONLY = """
import datetime
from tasks.settings import Settings
s = Settings.load().apply()
from prefect.deployments import run_deployment
from tasks._service import JobSpec
spec = JobSpec("wine", "logistic_regression", 1, "sent-before-mlflow", 98, "manual", None, 2,
               sleep_s=1.0)
at = datetime.datetime.now(datetime.timezone.utc) + datetime.timedelta(seconds=20)
fr = run_deployment("train/train", parameters={"spec": spec.params()}, timeout=0,
                    scheduled_time=at, flow_run_name="wine-sent-before-mlflow")
# a flow run this server does not hold (deleted, another server's) is not adopted: sent instead
import uuid
from tasks._dispatch import DeploymentDispatcher
d = DeploymentDispatcher(1, {}, pin_gpus=False)
print(d.adopt(spec, str(uuid.uuid4())), d.adopt(spec, "not-a-run"), d.adopt(spec, str(fr.id)))
print(fr.id)
"""


@pytest.mark.full
def test_a_job_sent_before_its_mlflow_run_existed_is_drained(home: Path, tenants: None) -> None:
    """A drain (`run --ticks 0`) adopts the flow runs Prefect still holds, not only the jobs
    MLflow shows RUNNING, and returns once they are recorded (issue 20: a scheduler killed just
    after dispatching left a job the next drain did not wait for)."""
    adopted = _py(home, _SENT_ONLY).strip().splitlines()[-2]
    assert adopted == "False False True", adopted
    drain = _cli(home, "run", *_RUN, "--ticks", "0", timeout=300)
    assert "resumed wine logistic_regression" in drain and "1 jobs" in drain, drain
    recs = [r for r in _records(home) if r["job_id"] == "sent-before-mlflow"]
    assert [r["status"] for r in recs] == ["FINISHED"], recs


@pytest.mark.full
def test_killed_train_process_resumes_from_its_checkpoint(home: Path, tenants: None) -> None:
    proc = subprocess.Popen([sys.executable, "-c", _DISPATCH], env=_env(home),
                            stdout=subprocess.PIPE, text=True)  # fmt: skip
    killed = False
    deadline = time.monotonic() + 300
    while time.monotonic() < deadline and proc.poll() is None and not killed:
        recs = [r for r in _records(home) if r["job_id"] == "lenet-kill-test"]
        if recs and recs[0]["status"] == "RUNNING":
            epochs = _py(home, (
                "from tenantml.client import Client\nc = Client()\n"
                f"print(len(c.mlflow.get_metric_history('{recs[0]['run_id']}', 'val_accuracy')))"
            )).strip().splitlines()[-1]  # fmt: skip
            if int(epochs) >= 2:
                for pid in flow_processes(TENANTML_HOME=str(home)):
                    os.kill(pid, signal.SIGKILL)
                    killed = True
        time.sleep(0.2)
    out, _ = proc.communicate(timeout=300)
    assert killed, "the job ended before it could be killed"
    assert json.loads(out.strip().splitlines()[-1])["ok"]
    recs = [r for r in _records(home) if r["job_id"] == "lenet-kill-test"]
    assert len(recs) == 1 and recs[0]["status"] == "FINISHED"
    resumed = _py(home, (
        "from tenantml.client import Client\nc = Client()\n"
        f"print(c.mlflow.get_run('{recs[0]['run_id']}').data.metrics['resumed_from_epoch'])"
    )).strip().splitlines()[-1]  # fmt: skip
    assert float(resumed) >= 2  # the retry continued from the checkpoint, not from scratch


@pytest.mark.full
def test_scheduler_killed_and_restarted_counts_each_job_once(home: Path, tenants: None) -> None:
    before = {(r["tenant"], r["job_id"]) for r in _records(home)}
    cmd = [sys.executable, "-m", "tenantml.cli", "run", *_BOUNDED, "--ticks", "3"]
    proc = subprocess.Popen(cmd, env=_env(home), start_new_session=True,
                            stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)  # fmt: skip
    deadline = time.monotonic() + 300
    while time.monotonic() < deadline and proc.poll() is None:
        new = [r for r in _records(home) if (r["tenant"], r["job_id"]) not in before]
        if any(r["status"] == "FINISHED" for r in new) and any(
            r["status"] == "RUNNING" for r in new
        ):
            os.killpg(proc.pid, signal.SIGKILL)
            break
        time.sleep(0.3)
    proc.wait(timeout=30)
    _cli(home, "run", *_BOUNDED, "--ticks", "1")
    recs = [r for r in _records(home) if (r["tenant"], r["job_id"]) not in before]
    keys = [(r["tenant"], r["job_id"]) for r in recs]
    statuses = [(r["tenant"], r["job_id"], r["status"]) for r in recs]
    assert len(keys) == len(set(keys)), statuses
    assert all(r["status"] == "FINISHED" for r in recs), statuses


@pytest.mark.full
def test_ctrl_c_stops_run_with_one_line_and_the_next_run_takes_its_jobs_over(
    home: Path, tenants: None
) -> None:
    """SIGINT to `tenantml run`'s process group, as a terminal's Ctrl-C: exit code 130, one
    line, no traceback; the jobs go on in the workers and the next `run` takes them over. The
    jobs are sleep-based stand-ins (accuracy 0), so this runs after the tests that train."""
    from mlflow.tracking import MlflowClient

    from mlflow_plugin.tracking import JobRecord, job_records, tenant_experiments

    client = MlflowClient(json.loads((home / "servers.json").read_text())["tracking_uri"])

    def records() -> list[JobRecord]:
        return job_records(client, tenant_experiments(client).values())

    before = {(r.tenant, r.job_id) for r in records()}

    def new() -> list[JobRecord]:
        return [r for r in records() if (r.tenant, r.job_id) not in before]

    cmd = [sys.executable, "-m", "tenantml.cli", "run", *_RUN]
    code, out, err, took = signal_after_dispatch(
        [*cmd, "--ticks", "20", "--sleep-job-seconds", "15"], _env(home), signal.SIGINT,
        to_group=True, ready=lambda: any(r.status == "RUNNING" for r in new()),
    )  # fmt: skip
    print(f"SIGINT on servers: the scheduler ended {took:.2f} s after the signal")
    assert code == 130, (out, err[-3000:])
    assert "Traceback" not in err, err[-5000:]
    stopped = STOPPED.findall(out)
    assert [m[0] for m in stopped] == ["SIGINT"], out
    assert "(they go on in the workers meanwhile)" in out, out
    in_flight = int(stopped[0][1])
    assert in_flight >= 1, out
    drain = _cli(home, "run", *_RUN, "--ticks", "0", "--sleep-job-seconds", "0.1", timeout=300)
    assert "resumed " in drain, drain
    deadline = time.monotonic() + 180  # jobs not yet started when it stopped start later
    while time.monotonic() < deadline:
        recs = new()
        if len(recs) >= in_flight and all(r.status == "FINISHED" for r in recs):
            break
        time.sleep(1)
    recs = new()
    assert len(recs) == in_flight, [(r.job_id, r.status) for r in recs]
    assert all(r.status == "FINISHED" for r in recs), [(r.job_id, r.status) for r in recs]


@pytest.mark.full
def test_run_started_during_an_mlflow_outage_waits_and_then_runs_its_jobs(
    home: Path, tenants: None
) -> None:
    """`tenantml run` started while MLflow is down waits with the running scheduler's lines
    instead of exiting, and dispatches and records its jobs once MLflow is back (issue 20,
    item 3). Sleep-based stand-in jobs: what is tested is the start, not training."""
    from tenantml.ops.servers import restart, stop

    before = {(r["tenant"], r["job_id"]) for r in _records(home)}
    assert stop(home, "mlflow")
    cmd = [sys.executable, "-m", "tenantml.cli", "run", *_RUN, "--ticks", "1",
           "--sleep-job-seconds", "1"]  # fmt: skip
    proc = subprocess.Popen(cmd, env=_env(home), stdout=subprocess.PIPE, stderr=subprocess.STDOUT,
                            text=True)  # fmt: skip
    assert proc.stdout is not None
    waited = []
    try:
        for line in proc.stdout:
            if "the MLflow server at http://127.0.0.1" in line and "is unreachable; retry" in line:
                waited.append(line)
                if len(waited) == 2:  # it waits, and goes on waiting
                    break
    finally:
        restart(home, "mlflow")
    rest, _ = proc.communicate(timeout=300)
    assert len(waited) == 2 and proc.returncode == 0, rest
    new = [r for r in _records(home) if (r["tenant"], r["job_id"]) not in before]
    assert new and all(r["status"] == "FINISHED" for r in new), new
