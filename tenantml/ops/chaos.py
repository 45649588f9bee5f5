"""`tenantml chaos`: fault injection against the real service on loopback, and the report.

One run, seeded and bounded in count and time:

1. **Kills.** `tenantml up` (S3, MLflow, Prefect, 2 process workers), five real tenants
   (`TENANTS`: three on digits, wine, breast-cancer) and a scheduler that runs on. Then
   ``kills`` SIGKILLs of each of: the scheduler process (restarted), a Prefect worker (restarted
   with `servers.restart`), and a training process that has finished at least one epoch (a job
   not killed before, so the epochs it had done are known exactly), in a seeded order at seeded
   moments.
2. **Outages.** The MLflow and Prefect servers are killed for ``outage_s`` seconds and restarted on
   their ports; the S3 server (moto keeps objects in memory only, so a restart would be data loss,
   not an outage) is frozen with SIGSTOP for ``outage_s`` and thawed. During each, one CLI call
   must fail fast naming the server.
3. **Concurrency.** ``tenants`` tenants feed and infer from one thread each while the scheduler
   runs; every example must be in the final manifests exactly once.
4. **Drain and check.** The scheduler is stopped and ``tenantml run --ticks 0`` finishes (or
   resumes) every job left in flight. Then, from MLflow alone: every job is one run, FINISHED (no
   observation lost, none recorded twice); each tenant's ``best`` alias is on its
   highest-accuracy version; no two versions share a run, none lacks its run; every killed job
   resumed from its checkpoint (``epochs done at the kill - resumed_from_epoch``, goal <= 1).

With ``nodes=2`` the pool spans two machines (`tenantml.ops.nodes`): the servers listen on a
link to node B, a network namespace with its own address, host name and empty directory, no view
of this installation's home, and one worker on the ``gpu`` pool (the scheduler fills three
slots). Its jobs go through S3 and MLflow only. A fourth fault joins the kills, ``lose-node``:
once node B trains a job that has logged an epoch (>= 2 for a torch job, as ``kill-train``),
every process of node B gets SIGKILL at once and its directory is deleted; after a seeded pause
it comes back empty. The heartbeat rule crashes the lost runs, the scheduler dispatches them
again, and a worker on either node resumes each from its checkpoint in S3. Per loss the report
gives the epochs lost and ``back_s``, from the kill to the job training again (its next
``started_at``).

The summary is printed as a table and saved as ``chaos.json``.
"""

from __future__ import annotations

import json
import logging
import os
import random
import signal
import subprocess
import sys
import threading
import time
from collections.abc import Callable, Iterator
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any

import numpy as np

from tenantml.ops import nodes as node_ops
from tenantml.ops import servers

if TYPE_CHECKING:
    from store.schema import Schema

__all__ = ["ChaosReport", "Fault", "chaos_steps", "count_recovery", "run_chaos"]

# Tenant -> bundled data set. Three image tenants (digits under three names, restricted to
# their CNNs: an image task's pixel arms are scikit-learn jobs) keep torch jobs
# that log an epoch every ~0.2-1.5 s (LeNet, SqueezeNet, NIN and their f_k variants: 45 jobs)
# coming for the 20 kills of `--full`: with one, the picker soon moved on to bigger CNNs. Two
# tabular tenants add scikit-learn jobs (no epochs: a kill restarts them).
TENANTS = {
    "digits": "digits",
    "digits-b": "digits",
    "digits-c": "digits",
    "wine": "wine",
    "breast-cancer": "breast_cancer",
}
# 60 s per job: once the 45 small and mid-sized CNN jobs are done (a full run gets there), the
# picker moves to ResNet-18 and GoogLeNet, whose first epoch on digits takes 10-20 s on a loaded
# 2-core machine: at 20 s they logged no epoch, and 6 of 20 kill-train waits found nothing.
# With two nodes, three more digits tenants: node losses need torch jobs with epochs done on
# node B, and the 20 of a full run outlast three tenants' small CNNs (a full run stopped at
# fault 53 of 80 had reached AlexNet, ResNet-50 and VGG-16, which log no epoch within a job).
NODE_TENANTS = {"digits-d": "digits", "digits-e": "digits", "digits-f": "digits"}
SLOTS = 2  # workers on this machine; node B (nodes=2) adds one
SCHEDULER_ARGS = (
    "run",
    "--slots",
    str(SLOTS),
    "--policy",
    "roundrobin",
    "--max-epochs",
    "4",
    "--job-budget",
    "60",
)


@dataclass
class Fault:
    kind: str  # kill-scheduler | kill-worker | kill-train | lose-node | outage-mlflow | ...
    at_s: float
    detail: str = ""
    injected: bool = True
    job: str | None = None  # tenant/job_id of a killed training process (or lost node's job)
    epochs_at_kill: int | None = None
    lost_epochs: float | None = None
    cli_fail_s: float | None = None  # outages: how long a CLI call took to fail
    killed_at: float | None = None  # kill-train, lose-node: wall-clock time of the kill
    back_s: float | None = None  # kill-train, lose-node: from the kill to the job training again
    # kill-train, lose-node: its job had ended by the kill (no attempt started after it), which
    # hit a process finishing up after the job: nothing was lost, and nothing was tested
    ended_first: bool = False


@dataclass
class ChaosReport:
    seed: int
    faults: list[Fault] = field(default_factory=list)
    jobs: int = 0
    nodes: int = 1
    # host name -> finished jobs whose last attempt ran there
    jobs_by_node: dict[str, int] = field(default_factory=dict)
    # jobs not FINISHED after the drain: ``tenant/job_id STATUS (how its flow runs ended)``
    lost: list[str] = field(default_factory=list)
    duplicates: list[str] = field(default_factory=list)  # jobs with more than one run
    best_wrong: list[str] = field(default_factory=list)  # tenants whose `best` is not the max
    version_problems: list[str] = field(default_factory=list)  # duplicated or orphaned versions
    outage_lines: dict[str, bool] = field(default_factory=dict)  # server -> the CLI named it
    # server -> the scheduler's log named it while waiting (a frozen S3 server stalls calls
    # instead of refusing them, so the scheduler just waits, with nothing to say)
    scheduler_named: dict[str, bool] = field(default_factory=dict)
    concurrency: dict[str, Any] = field(default_factory=dict)
    # flow name -> runs the Prefect server crashed for a stopped heartbeat (their process and
    # its worker both gone: infra/prefect-automations.yaml); the scheduler re-dispatched them
    zombies: dict[str, int] = field(default_factory=dict)
    wall_s: float = 0.0

    def table(self) -> list[dict[str, Any]]:
        """One row per fault kind: injected, recovered, lost, duplicates, max work lost."""
        rows = []
        for kind in dict.fromkeys(f.kind for f in self.faults):
            fs = [f for f in self.faults if f.kind == kind and f.injected]
            lost = [f.lost_epochs for f in fs if f.lost_epochs is not None]
            cli = [f.cli_fail_s for f in fs if f.cli_fail_s is not None]
            back = [f.back_s for f in fs if f.back_s is not None]
            rows.append(
                {
                    "fault": kind,
                    "injected": len(fs),
                    "recovered": len(fs) if self.ok else 0,
                    "observations_lost": len(self.lost),
                    "duplicates": len(self.duplicates),
                    "max_epochs_lost": max(lost) if lost else None,
                    "cli_fail_s_max": max(cli) if cli else None,
                    "back_s_max": max(back) if back else None,
                }
            )
        return rows

    @property
    def ok(self) -> bool:
        lost = [f.lost_epochs for f in self.faults if f.lost_epochs is not None]
        # a lost node's job that never trained again is lost work, even if a drain recorded it
        stuck = [
            f
            for f in self.faults
            if f.kind == "lose-node" and f.job and f.back_s is None and not f.ended_first
        ]
        return not (
            stuck
            or self.lost
            or self.duplicates
            or self.best_wrong
            or self.version_problems
            or any(v > 1 for v in lost)
            or not all(self.outage_lines.values())
            or self.concurrency.get("examples_missing", 0)
            or self.concurrency.get("errors")
        )

    def to_json(self) -> dict[str, Any]:
        return {**asdict(self), "ok": self.ok, "table": self.table()}


class _Service:
    """The installation under test: its servers, the scheduler process, MLflow reads."""

    def __init__(self, home: Path, say: Callable[[str], None], slots: int = SLOTS) -> None:
        self.home = home
        self.say = say
        self.args = ("run", "--slots", str(slots), *SCHEDULER_ARGS[3:])
        self.env = {
            **os.environ,
            "TENANTML_HOME": str(home),
            "TENANTML_OUTAGE_PATIENCE_S": "600",
            "MLFLOW_HTTP_REQUEST_MAX_RETRIES": "1",
        }
        self.scheduler: subprocess.Popen[bytes] | None = None
        self.log = home / "chaos-scheduler.log"

    def cli(self, *args: str, timeout: float = 900) -> subprocess.CompletedProcess[str]:
        return subprocess.run(
            [sys.executable, "-m", "tenantml.cli", *args],
            env=self.env,
            capture_output=True,
            text=True,
            timeout=timeout,
        )

    def start_scheduler(self) -> None:
        with open(self.log, "ab") as out:
            self.scheduler = subprocess.Popen(
                [sys.executable, "-m", "tenantml.cli", *self.args],
                env=self.env,
                stdout=out,
                stderr=subprocess.STDOUT,
                start_new_session=True,
            )

    def kill_scheduler(self) -> None:
        if self.scheduler is not None and self.scheduler.poll() is None:
            os.killpg(self.scheduler.pid, signal.SIGKILL)
            self.scheduler.wait(timeout=30)
        self.scheduler = None

    def client(self) -> Any:
        from tenantml.client import Client

        return Client(self.home, check_servers=False)

    def _prefect(self, path: str, body: dict[str, Any]) -> Any:
        """POST `body` to the Prefect API's `path` (read from ``servers.json``)."""
        api = json.loads((self.home / "servers.json").read_text())["prefect_api_url"]
        return servers.post_json(f"{api}{path}", body)

    def why_lost(self, tenant: str, job_id: str) -> str:
        """How the flow runs named for job ``tenant/job_id`` (`tasks._dispatch`: a run is named
        for its first job) ended, oldest first, and the last error their logs hold: what a
        lost job's line in the report says, so that a failure in CI can be read from it. An
        unreadable Prefect API is said, not raised: the report stands without it."""
        try:
            runs = self._prefect(
                "/flow_runs/filter",
                {"flow_runs": {"name": {"any_": [f"{tenant}-{job_id}"]}},
                 "sort": "EXPECTED_START_TIME_ASC"},
            )  # fmt: skip
            ids = [r["id"] for r in runs]
            errors = self._prefect(
                "/logs/filter",
                {"logs": {"flow_run_id": {"any_": ids}, "level": {"ge_": 40}},
                 "sort": "TIMESTAMP_DESC", "limit": 1},
            ) if runs else []  # fmt: skip
        except (OSError, ValueError, KeyError) as e:
            return f"its flow runs could not be read: {e!r}"[:300]
        if not runs:
            return "no flow run of that name (a chained job)"
        states = [
            f"{(r.get('state') or {}).get('type')}: "
            f"{((r.get('state') or {}).get('message') or '')[:120]}"
            for r in runs
        ]
        last = f"; last error: {errors[0]['message'][-600:]}" if errors else ""
        return f"flow runs: {' | '.join(states)}{last}"

    def zombies(self) -> dict[str, int]:
        """Flow runs CRASHED by the heartbeat rule, per flow name (from the Prefect API)."""
        post = self._prefect
        flows = {f["id"]: f["name"] for f in post("/flows/filter", {})}
        crashed: dict[str, int] = {}
        offset = 0
        while page := post(
            "/flow_runs/filter",
            {
                "flow_runs": {"state": {"type": {"any_": ["CRASHED"]}}},
                "offset": offset,
                "limit": 200,
            },
        ):
            for run in page:
                if "no heartbeat" in (run["state"].get("message") or ""):
                    name = flows.get(run["flow_id"], "?")
                    crashed[name] = crashed.get(name, 0) + 1
            offset += len(page)
        return crashed

    def records(self) -> list[Any]:
        from mlflow_plugin.tracking import job_records, tenant_experiments

        c = self.client()
        return job_records(c.mlflow, tenant_experiments(c.mlflow).values())


def _is_torch(candidate: str) -> bool:
    from trainers.zoo import ZOO

    spec = ZOO.get(candidate.split("+")[0].split("@")[0])
    return spec is not None and spec.family != "sklearn"


def _running_jobs(
    svc: _Service, deadline: float, skip: Callable[[Any, str], bool]
) -> Iterator[tuple[Any, str, int, bool]]:
    """RUNNING jobs as MLflow shows them, polled until `deadline`: (record, ``tenant/job_id``,
    epochs logged, patient) for each not skipped by ``skip(record, key)``; `patient` is True in
    the first half of the wait (a fault may hold out for a torch job with >= 2 epochs)."""
    c = svc.client()
    start = time.monotonic()
    while time.monotonic() < deadline:
        patient = time.monotonic() - start < (deadline - start) / 2
        for r in svc.records():
            key = f"{r.tenant}/{r.job_id}"
            if r.status != "RUNNING" or skip(r, key):
                continue
            yield r, key, len(c.mlflow.get_metric_history(r.run_id, "val_accuracy")), patient
        time.sleep(0.3)


def _still_running(svc: _Service, record: Any) -> bool:
    """Whether the job run `record` (read by an earlier poll) is RUNNING now, read again just
    before a kill: a job that ended meanwhile would test nothing (`Fault.ended_first`)."""
    return bool(svc.client().mlflow.get_run(record.run_id).info.status == "RUNNING")


def _kill_train(svc: _Service, killed_jobs: set[str], deadline: float) -> Fault | None:
    """SIGKILL the training process of a running job not killed before: a torch job with >= 2
    epochs done (its resume from the checkpoint shows), or after half the wait any job with
    >= 1 epoch (a scikit-learn job has no epochs to keep: it starts again)."""
    for r, key, epochs, patient in _running_jobs(
        svc, deadline, lambda r, key: key in killed_jobs or not r.flow_run_id
    ):
        torch_job = _is_torch(r.candidate)
        if patient and not torch_job:
            continue
        pid = next(iter(servers.flow_processes(PREFECT__FLOW_RUN_ID=r.flow_run_id)), None)
        if pid is None or epochs < (2 if torch_job else 1) or not _still_running(svc, r):
            continue
        killed_at = time.time()
        os.kill(pid, signal.SIGKILL)
        killed_jobs.add(key)
        family = "torch" if torch_job else "scikit-learn"
        return Fault(
            "kill-train",
            0.0,
            f"pid {pid}, {family}",
            job=key,
            epochs_at_kill=epochs,
            killed_at=killed_at,
        )
    return None


def _lose_node(
    svc: _Service, node: node_ops.Node, lost_jobs: set[str], deadline: float, rng: random.Random
) -> Fault | None:
    """Lose node B while it trains a job not lost before that has logged an epoch (>= 2 for a
    torch job until half the wait is over), then bring it back empty after 1-5 s."""
    for r, key, epochs, patient in _running_jobs(
        svc, deadline, lambda r, key: r.node != node.name or key in lost_jobs
    ):
        if epochs < (2 if patient and _is_torch(r.candidate) else 1) or not _still_running(svc, r):
            continue
        killed_at = time.time()
        processes = node.lose()
        lost_jobs.add(key)
        pause = rng.uniform(1.0, 5.0)
        time.sleep(pause)
        node.start_worker()
        return Fault(
            "lose-node",
            0.0,
            f"SIGKILL {processes} processes of {node.name}, its directory deleted; "
            f"back empty after {pause:.0f} s",
            job=key,
            epochs_at_kill=epochs,
            killed_at=killed_at,
        )
    return None


def _kills(
    svc: _Service,
    rep: ChaosReport,
    kills: int,
    rng: random.Random,
    t0: float,
    on_step: Callable[[], None],
    node: node_ops.Node | None = None,
    node_losses: int = 0,
) -> None:
    order = ["kill-scheduler", "kill-worker", "kill-train"] * kills
    order += ["lose-node"] * (node_losses if node else 0)
    rng.shuffle(order)
    killed_jobs: set[str] = set()
    lost_jobs: set[str] = set()
    for i, kind in enumerate(order):
        time.sleep(rng.uniform(1.0, 6.0))
        at = time.monotonic() - t0
        fault: Fault | None
        if kind == "kill-scheduler":
            svc.kill_scheduler()
            svc.start_scheduler()
            fault = Fault(kind, at, "SIGKILL the scheduler's process group, start a new one")
        elif kind == "lose-node":
            assert node is not None
            fault = _lose_node(svc, node, lost_jobs, time.monotonic() + 300, rng)
            if fault is None:
                fault = Fault(kind, at, f"{node.name} trained no job for 300 s", injected=False)
            fault.at_s = at
        elif kind == "kill-worker":
            name = f"worker-{rng.randrange(SLOTS)}"
            pid = int(json.loads((svc.home / "servers" / "pids.json").read_text())[name])
            os.kill(pid, signal.SIGKILL)
            servers.restart(svc.home, name)
            fault = Fault(kind, at, f"SIGKILL {name} (pid {pid}), restart it")
        else:
            fault = _kill_train(svc, killed_jobs, time.monotonic() + 300)
            if fault is None:
                fault = Fault(kind, at, "no job with an epoch done within 300 s", injected=False)
            fault.at_s = at
        rep.faults.append(fault)
        svc.say(
            f"[{i + 1}/{len(order)}] {fault.kind} at {at:.0f} s: {fault.detail} {fault.job or ''}"
        )
        on_step()


def _outages(
    svc: _Service, rep: ChaosReport, outage_s: float, t0: float, on_step: Callable[[], None]
) -> None:
    pids = json.loads((svc.home / "servers" / "pids.json").read_text())
    for name, what in (
        ("mlflow", "the MLflow server"),
        ("prefect", "the Prefect server"),
        ("s3", "the S3 endpoint"),
    ):
        at = time.monotonic() - t0
        if name == "s3":
            os.killpg(pids["s3"], signal.SIGSTOP)  # moto is in memory: freeze, don't kill
        else:
            servers.stop(svc.home, name)
        started = time.monotonic()
        res = svc.cli("tenants", timeout=120)
        cli_s = time.monotonic() - started
        named = res.returncode == 1 and what in res.stderr
        time.sleep(max(0.0, outage_s - (time.monotonic() - started)))
        if name == "s3":
            os.killpg(pids["s3"], signal.SIGCONT)
        else:
            servers.restart(svc.home, name)
        detail = f"{outage_s:.0f} s; CLI exit {res.returncode}: {res.stderr.strip()[:160]}"
        fault = Fault(f"outage-{name}", at, detail, cli_fail_s=cli_s)
        rep.faults.append(fault)
        if not named:
            rep.faults[-1].detail += " (the CLI did not name the server)"
        rep.outage_lines[name] = named
        svc.say(f"outage {name}: {fault.detail}")
        time.sleep(5)
        on_step()


def _concurrency(
    svc: _Service, rep: ChaosReport, tenants: int, batches: int, on_step: Callable[[], None]
) -> None:
    """`tenants` threads, each feeding `batches` batches of 40 and inferring after each;
    ``on_step`` (from those threads) after each batch."""
    from store.schema import Schema, Tensor
    from tenantml import datasets

    c = svc.client()
    schema = Schema(input=Tensor(6), output=Tensor(2))
    names = [f"conc-{i:02d}" for i in range(tenants)]
    for n in names:
        c.submit(n, schema)
    fed = dict.fromkeys(names, 0)
    infers = dict.fromkeys(names, 0)
    errors: list[str] = []

    # Inference goes to the real tenants that have a `best` model; wait (at most 300 s) for one:
    # the faults before may have left none recorded yet.
    deadline = time.monotonic() + 300
    while True:
        served = [t for t in TENANTS if c.status(t, fresh=True).best_version]
        if served or time.monotonic() > deadline:
            break
        time.sleep(2)
    probes = {t: datasets.load(TENANTS[t]).inputs[:2] for t in served}
    latencies: list[float] = []

    def work(name: str, seed: int) -> None:
        rng = np.random.default_rng(seed)
        client = svc.client()
        try:
            for b in range(batches):
                x = rng.normal(size=(40, 6)).astype(np.float32)
                y = (x[:, 0] > 0).astype(int)
                client.feed(name, x, y)
                fed[name] += 40
                if served:
                    target = served[(seed + b) % len(served)]
                    started = time.monotonic()
                    client.infer(target, probes[target])
                    latencies.append(time.monotonic() - started)
                    infers[name] += 1
                on_step()
        except Exception as e:  # reported, not raised: every thread's outcome is counted
            errors.append(f"{name}: {type(e).__name__}: {e}")

    logging.getLogger("urllib3.connectionpool").setLevel(logging.ERROR)  # 20 threads > 10 sockets
    t0 = time.monotonic()
    threads = [threading.Thread(target=work, args=(n, i)) for i, n in enumerate(names)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(timeout=900)
    wall = time.monotonic() - t0
    missing = 0
    inconsistent = []
    for n in names:
        m = c.store.manifest(n)
        ids = [e.id for e in c.examples(n)]
        versions = c.store.versions(n)
        missing += fed[n] - m.n_examples
        contiguous = versions == list(range(versions[0], m.version + 1))
        if len(set(ids)) != len(ids) or m.n_examples != fed[n] or not contiguous:
            inconsistent.append(
                f"{n}: {len(ids)} ids, {m.n_examples} examples, {fed[n]} fed, versions {versions}"
            )
    rep.concurrency = {
        "tenants": tenants,
        "examples_fed": sum(fed.values()),
        "examples_missing": missing,
        "inconsistent_manifests": inconsistent,
        "infer_calls": sum(infers.values()),
        "errors": errors,
        "wall_s": wall,
        "infer_tenants": served,
        "infer_p50_s": float(np.median(latencies)) if latencies else None,
        "feeds_per_s": tenants * batches / wall,
        "examples_per_s": sum(fed.values()) / wall,
    }
    svc.say(f"concurrency: {json.dumps(rep.concurrency)[:400]}")


def _check(svc: _Service, rep: ChaosReport) -> None:
    """The invariants, from MLflow alone (see the module docstring)."""
    from mlflow_plugin.registry import best_model, model_versions, serving_key

    c = svc.client()
    recs = svc.records()
    rep.jobs = len({(r.tenant, r.job_id) for r in recs})
    seen: dict[tuple[str, str], int] = {}
    for r in recs:
        seen[(r.tenant, r.job_id)] = seen.get((r.tenant, r.job_id), 0) + 1
    rep.duplicates = [f"{t}/{j} x{n}" for (t, j), n in seen.items() if n > 1]
    rep.lost = [
        f"{r.tenant}/{r.job_id} {r.status} ({svc.why_lost(r.tenant, r.job_id)})"
        for r in recs
        if r.status != "FINISHED"
    ]
    by_run = {r.run_id: r for r in recs}
    for tenant in {r.tenant for r in recs}:
        ok = [r for r in recs if r.tenant == tenant and r.status == "FINISHED"]
        best = best_model(c.mlflow, tenant)
        top = max(ok, key=lambda r: serving_key(r.snapshot, r.accuracy), default=None)
        if top is not None and (  # `best` is the newest data's most accurate (`beats`)
            best is None
            or best.snapshot < (top.snapshot or 0)
            or best.accuracy < (top.accuracy or 0.0) - 1e-12
        ):
            rep.best_wrong.append(
                f"{tenant}: best {best and (best.accuracy, best.snapshot)}, but "
                f"{top.candidate} measured {top.accuracy} on snapshot {top.snapshot}"
            )
        versions = model_versions(c.mlflow, tenant) if best else []
        runs = [v.run_id for v in versions]
        if len(runs) != len(set(runs)):
            rep.version_problems.append(f"{tenant}: two versions of one run")
        rep.version_problems += [
            f"{tenant}: version {v.version} has no job run"
            for v in versions
            if v.run_id not in by_run
        ]
    for r in recs:
        if r.status == "FINISHED" and r.node:
            rep.jobs_by_node[r.node] = rep.jobs_by_node.get(r.node, 0) + 1
    for f in rep.faults:
        if f.kind not in ("kill-train", "lose-node") or f.job is None:
            continue
        tenant, job_id = f.job.split("/", 1)
        r = next((r for r in recs if r.tenant == tenant and r.job_id == job_id), None)
        if r is None or r.status != "FINISHED":
            continue  # counted as lost above
        resumed = c.mlflow.get_run(r.run_id).data.metrics.get("resumed_from_epoch", 0.0)
        starts = [m.value for m in c.mlflow.get_metric_history(r.run_id, "started_at")]
        count_recovery(f, resumed, starts)


def count_recovery(fault: Fault, resumed_from: float, started_at: list[float]) -> None:
    """Fill in `fault`'s ``lost_epochs`` and ``back_s`` (a kill of a training process, or a node
    loss, of a job now FINISHED): the epochs done at the kill less the epoch its next attempt
    resumed from (`resumed_from`), and the time from the kill to the first attempt started
    after it (`started_at`: every attempt's wall-clock start). A FINISHED job with no attempt
    after the kill had ended by then (`Fault.ended_first`): the poll saw it RUNNING, then it
    ended, and the kill hit its process finishing up after the job; nothing was lost."""
    after = [t for t in started_at if fault.killed_at is not None and t > fault.killed_at]
    if fault.killed_at is not None and not after:
        fault.lost_epochs, fault.ended_first = 0.0, True
        fault.detail += "; its job had ended by then"
        return
    fault.lost_epochs = max(0.0, float(fault.epochs_at_kill or 0) - resumed_from)
    fault.back_s = min(after) - fault.killed_at if after and fault.killed_at is not None else None


def _torch_models(schema: Schema) -> list[str] | None:
    """An image tenant's CNNs (`submit --models`: the kills need jobs with epochs); None (all
    candidates) for a tabular one."""
    from trainers import torch_candidates

    nets = [c.name for c in torch_candidates(schema)]
    return nets or None


def chaos_steps(
    *,
    kills: int,
    outage_s: float,
    tenants: int,
    batches: int,
    nodes: int = 1,
    node_losses: int | None = None,
) -> int:
    """How many times `run_chaos` with these counts calls ``on_step``: each kill of each kind
    (node losses too with two nodes: `node_losses`, default `kills`), each of the three outages,
    each tenant's each batch."""
    losses = (kills if node_losses is None else node_losses) if nodes == 2 else 0
    return 3 * kills + losses + (3 if outage_s else 0) + tenants * batches


def run_chaos(
    home: Path,
    *,
    kills: int = 2,
    outage_s: float = 30.0,
    tenants: int = 20,
    batches: int = 5,
    seed: int = 0,
    postgres: bool = False,
    nodes: int = 1,
    node_losses: int | None = None,
    say: Callable[[str], None] = print,
    on_step: Callable[[], None] | None = None,
) -> ChaosReport:
    """Run the whole fault-injection session (module docstring) on a fresh installation.

    ``on_step``: called as each fault is done, a unit being one kill (of any kind), one server's
    outage, or one feed batch (with its inference) of one concurrency tenant; `chaos_steps`
    times in all when nothing fails. The batches' calls come from the tenants' threads, at
    the same time. Starting the servers, the drain and the checks are not steps. `nodes`: 1, or
    2 for a pool across two machines with node losses (module docstring), `node_losses` of them
    (default: `kills`). With two nodes, more tenants on digits (`NODE_TENANTS`) keep small CNNs
    coming: a node loss waits for a job on node B with epochs done, which the big CNNs (AlexNet,
    VGG-16) do not log within a job on a CPU."""
    step = on_step or (lambda: None)
    from tenantml import datasets

    losses = kills if node_losses is None else node_losses
    if kills < 0 or losses < 0 or outage_s < 0 or tenants < 0 or batches < 1:
        raise ValueError(
            f"kills={kills}, node_losses={losses}, outage_s={outage_s}, tenants={tenants}, "
            f"batches={batches}: use kills, node losses, outage and tenants >= 0 and batches >= 1"
        )
    if nodes not in (1, 2):
        raise ValueError(f"nodes={nodes} is not valid: use 1, or 2 (node B on this machine)")
    if nodes == 2 and (reason := node_ops.unavailable()):
        raise ValueError(f"nodes=2 needs a second node, which this machine cannot make: {reason}")
    home = home.resolve()
    rng = random.Random(seed)
    rep = ChaosReport(seed, nodes=nodes)
    t0 = time.monotonic()
    say(f"starting the servers under {home}")
    link = node_ops.create_link(random.Random(seed)) if nodes == 2 else None
    node: node_ops.Node | None = None
    try:
        servers.up(home, slots=SLOTS, postgres=postgres, listen=link.address if link else None)
    except BaseException:
        if link:
            node_ops.remove_link(link)
        raise
    svc = _Service(home, say, slots=SLOTS + (nodes == 2))
    try:
        if link:
            node = node_ops.Node(
                "node-b", link, servers.node_env(home), (home,), home / "servers" / "logs"
            )
            node.start_worker()
            say(f"node B: {link.node_address}, its own directory {node.workdir}")
        c = svc.client()
        for name, data in {**TENANTS, **(NODE_TENANTS if node else {})}.items():
            d = datasets.load(data)
            c.submit(name, d.schema, models=_torch_models(d.schema))
            c.feed(name, d.inputs, d.labels)
        svc.start_scheduler()
        if kills or (node and losses):
            _kills(svc, rep, kills, rng, t0, step, node, losses)
        if outage_s:
            _outages(svc, rep, outage_s, t0, step)
        if tenants:
            _concurrency(svc, rep, tenants, batches, step)
        svc.kill_scheduler()
        say("draining: `tenantml run --ticks 0` finishes every job left in flight")
        try:
            drain = svc.cli(*svc.args, "--ticks", "0", timeout=1200)
        except subprocess.TimeoutExpired as e:  # its output, to be read after the failure
            out = [
                b.decode(errors="replace") if isinstance(b, bytes) else b or ""
                for b in (e.stdout, e.stderr)
            ]
            (home / "chaos-drain.log").write_text("".join(out))
            raise
        (home / "chaos-drain.log").write_text(drain.stdout + drain.stderr)  # read after a failure
        if drain.returncode != 0:
            raise RuntimeError(f"the drain failed: {drain.stderr[-2000:]}")
        text = svc.log.read_text(errors="replace")
        for name, server in (
            ("mlflow", "the MLflow server at"),
            ("prefect", "the Prefect server at"),
            ("s3", "the S3 endpoint at"),
        ):
            rep.scheduler_named[name] = f"{server}" in text and "is unreachable; retry" in text
        _check(svc, rep)
        rep.zombies = svc.zombies()
    finally:
        svc.kill_scheduler()
        if node is not None:
            node.remove()
        elif link is not None:
            node_ops.remove_link(link)
        servers.down(home)
    rep.wall_s = time.monotonic() - t0
    return rep
