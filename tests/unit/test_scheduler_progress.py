"""What a person watching the scheduler sees, without servers: its events, SIGINT/SIGTERM as a
request to stop, the loss picture (`tasks._plot`), and how `tenantml run` and `status --plot`
put them into words and files."""

from __future__ import annotations

import io
import signal
import socket
import subprocess
import sys
import threading
import time
from dataclasses import dataclass, field
from pathlib import Path
from types import SimpleNamespace
from typing import Any

import numpy as np
import pytest
from PIL import Image
from typer.testing import CliRunner

from tasks import (
    STOP,
    JobDispatched,
    JobFinished,
    JobSpec,
    Progress,
    SchedulerEvent,
    Stopping,
    StopRequest,
    dispatch_tick,
    listen,
    pause,
    should_stop,
    stop_on_signals,
    wants_tick,
)
from tasks._plot import add_tick, load_tick_history, loss_picture
from tasks.outage import Backoff


@dataclass
class FakeDispatcher:
    in_flight: list[JobSpec] = field(default_factory=list)
    fail_after: int | None = None  # sends that go through before the server goes away

    def submit(self, spec: JobSpec) -> None:
        if self.fail_after is not None and len(self.in_flight) >= self.fail_after:
            raise ConnectionError("the Prefect server does not answer")
        self.in_flight.append(spec)


@dataclass
class FakePlanner:
    capacity: int = 2
    taken_back: list[JobSpec] = field(default_factory=list)

    def unsent(self, runs: list[JobSpec]) -> None:
        self.taken_back += runs


@dataclass
class FakeOptions:
    ticks: int | None = 5
    poll_s: float = 30.0
    budget_s: float | None = None
    stop_when_idle: bool = False
    refresh_s: float = 5.0
    max_epochs: int = 3
    sleep_s: float | None = None


@dataclass
class _RunsWithParams:
    params: dict[str, str]

    def get_run(self, run_id: str) -> Any:
        return SimpleNamespace(data=SimpleNamespace(params=self.params))


@dataclass
class FakeService:
    """The parts of `tasks.Service` the steps under test read."""

    dispatcher: FakeDispatcher
    stop: StopRequest
    planner: FakePlanner = field(default_factory=FakePlanner)
    options: FakeOptions = field(default_factory=FakeOptions)
    policy: str = "rate"
    slots: int = 1
    lock_dir: str | None = None
    # a job run's params, as `_orphan_spec` reads them to send a job again
    client: Any = field(default_factory=lambda: _RunsWithParams({"max_epochs": "3"}))


def _spec(tenant: str, model: str) -> JobSpec:
    return JobSpec(tenant, model, 1, f"{model}-s1", 1, "rate", None, 3)


def _progress() -> Progress:
    return Progress(state=None, refreshed=0.0, tick=4, outage=Backoff(60.0))  # type: ignore[arg-type]


def test_an_outage_part_way_through_a_tick_counts_it_only_with_a_job_sent() -> None:
    """The tick is counted with its first job sent; the runs not sent go back to the planner
    (their slot turns). Before, the tick was counted first: ``--ticks 1`` ended with nothing
    sent when the server went away at the first job."""
    svc: Any = FakeService(FakeDispatcher(fail_after=0), StopRequest())
    progress = _progress()
    jobs = [_spec("wine", "svm"), _spec("digits", "lenet")]
    with pytest.raises(ConnectionError):
        dispatch_tick(svc, progress, jobs)
    assert (progress.tick, progress.ticks_done) == (4, 0) and svc.planner.taken_back == jobs
    svc = FakeService(FakeDispatcher(fail_after=1), StopRequest())
    with pytest.raises(ConnectionError):
        dispatch_tick(svc, progress, jobs)
    assert (progress.tick, progress.ticks_done) == (5, 1) and svc.planner.taken_back == jobs[1:]
    svc = FakeService(FakeDispatcher(), StopRequest())
    assert dispatch_tick(svc, progress, jobs) == jobs and svc.planner.taken_back == []


def test_dispatch_tells_the_listeners_and_a_stop_ends_the_ticks() -> None:
    events: list[SchedulerEvent] = []
    stop = StopRequest()
    svc: Any = FakeService(FakeDispatcher(), stop)
    progress = _progress()
    with listen(events.append):
        dispatch_tick(svc, progress, [_spec("wine", "svm"), _spec("digits", "lenet")])
    assert events == [
        JobDispatched(5, "wine", "svm", "svm-s1"),
        JobDispatched(5, "digits", "lenet", "lenet-s1"),
    ]
    svc.planner.capacity = 3
    assert wants_tick(svc, progress)
    stop.dispatcher = svc.dispatcher
    with listen(events.append):
        stop.request("SIGTERM")
        stop.request("SIGINT")  # the first one counts
    assert events[-1] == Stopping("SIGTERM", 2, None) and len(events) == 3
    assert not wants_tick(svc, progress)  # no tick after a stop
    started = time.monotonic()
    pause(svc, progress)  # poll_s is 30 s: a requested stop does not wait
    assert time.monotonic() - started < 5


def test_a_time_budget_ends_the_ticks_and_the_scheduler_once_its_jobs_finish() -> None:
    """``budget_s``: no tick starts after it; the jobs in flight finish, then it stops (as after
    its ``ticks``); before it, a policy with nothing left to try stops it only with
    ``stop_when_idle`` (tenants may come)."""
    svc: Any = FakeService(FakeDispatcher([_spec("wine", "svm")]), StopRequest())
    svc.options = FakeOptions(ticks=None, budget_s=60.0)
    progress = _progress()
    progress.started = time.monotonic() - 59.0
    assert wants_tick(svc, progress)
    assert not should_stop(svc, progress, [])  # a job is in flight
    progress.started -= 2.0  # 61 s: the budget is spent
    assert not wants_tick(svc, progress)
    assert not should_stop(svc, progress, [])  # its job finishes first
    svc.dispatcher.in_flight.clear()
    assert should_stop(svc, progress, [])
    progress.started = time.monotonic()  # in time, the policy sent nothing: it waits for more
    assert not should_stop(svc, progress, [])
    svc.options = FakeOptions(ticks=None, budget_s=60.0, stop_when_idle=True)
    assert should_stop(svc, progress, []) and not should_stop(svc, progress, [_spec("a", "b")])


def _record(spec: JobSpec, status: str, policy: str, process: str) -> Any:
    from mlflow_plugin.tracking import JobRecord

    return JobRecord("run", spec.tenant, spec.candidate, spec.job_id, status, None, None, 1, 1,
                     0.0, None, None, socket.gethostname(), policy, process)  # fmt: skip


def test_a_drain_waits_for_a_job_left_to_a_live_process_of_the_service() -> None:
    """``ticks=0`` ends once nothing is in flight, but not while a job the service sent trains in
    a process it was left to (an earlier attempt, alive here); it ends once that job's record
    is FINISHED. A `seer run` by hand is not waited for. A drain that ended before left the job
    RUNNING, which the chaos drill counts as lost."""
    from mlflow_plugin.tracking import process_tag
    from tasks._loop import LEFT_GRACE_S
    from tasks._seer import BY_HAND

    svc: Any = FakeService(FakeDispatcher(), StopRequest())
    svc.options = FakeOptions(ticks=0)
    progress = _progress()
    job = _spec("digits", "lenet")
    alive = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(60)"])
    try:
        tag = process_tag(alive.pid)
        progress.refreshed = time.monotonic()  # the state is fresh: no refresh
        progress.state = SimpleNamespace(records=[_record(job, "RUNNING", "rate", tag)])
        progress.left = {(job.tenant, job.job_id): (job, time.monotonic())}
        assert not should_stop(svc, progress, [])
        progress.state.records = [_record(job, "RUNNING", BY_HAND, tag)]
        assert should_stop(svc, progress, [])
        progress.left = {(job.tenant, job.job_id): (job, time.monotonic())}
        progress.state.records = [_record(job, "FINISHED", "rate", tag)]
        assert should_stop(svc, progress, []) and progress.left == {}
    finally:
        alive.kill()
        alive.wait()
    # The process ended without recording the job (as one did just after its worker was
    # SIGKILLed in the node-loss drill): within the grace after it was left the drain waits;
    # then it sends the job again, same id, to resume.
    progress.state.records = [_record(job, "RUNNING", "rate", tag)]
    progress.left = {(job.tenant, job.job_id): (job, time.monotonic())}
    assert not should_stop(svc, progress, []) and svc.dispatcher.in_flight == []
    progress.left = {(job.tenant, job.job_id): (job, time.monotonic() - LEFT_GRACE_S - 1)}
    assert not should_stop(svc, progress, []) and progress.left == {}
    [again] = svc.dispatcher.in_flight
    assert (again.tenant, again.job_id, again.max_epochs) == (job.tenant, job.job_id, 3)


def test_a_stop_wakes_a_pause_at_once() -> None:
    stop = StopRequest()
    svc: Any = FakeService(FakeDispatcher(), stop)
    threading.Timer(0.2, stop.request, args=("SIGINT",)).start()
    started = time.monotonic()
    pause(svc, _progress())
    assert 0.1 < time.monotonic() - started < 5 and stop.signal == "SIGINT"
    started = time.monotonic()
    pause(svc, _progress())  # and every pause after it
    assert time.monotonic() - started < 5


def test_a_run_that_ends_in_this_process_cuts_the_pause_short() -> None:
    """Embedded, the slot's thread nudges the scheduler as its run ends: the pass that records
    the job and fills the slot comes at once, not ``poll_s`` (here 30 s) later; a nudge that
    came while no pause was going cuts the next one short; neither is a stop."""
    from tasks._dispatch import LocalDispatcher

    stop = StopRequest()
    release = threading.Event()
    d = LocalDispatcher(1, lambda params: release.wait(10), on_done=stop.nudge)
    svc: Any = FakeService(FakeDispatcher(), stop)
    d.submit(_spec("wine", "svm"))
    threading.Timer(0.2, release.set).start()
    started = time.monotonic()
    pause(svc, _progress())
    assert time.monotonic() - started < 5 and not stop.requested
    [done] = d.poll()
    assert done.ok and done.spec.tenant == "wine"
    stop.nudge()  # between two pauses
    started = time.monotonic()
    pause(svc, _progress())
    assert time.monotonic() - started < 5 and not stop.requested
    d.close()


def test_embedded_runs_go_without_prefects_heartbeats() -> None:
    """Embedded (``heartbeats=False``) a run sees Prefect's flow-run heartbeats off in its own
    thread, and only there; a local dispatcher of a servers installation keeps them (its
    zombie-run automation crashes a run silent for 120 s)."""
    from prefect.settings import get_current_settings

    from tasks._dispatch import LocalDispatcher

    seen: dict[bool, int | None] = {}
    for beats in (False, True):
        d = LocalDispatcher(1, lambda params, b=beats: seen.__setitem__(b, _heartbeat()),
                            heartbeats=beats)  # fmt: skip
        d.submit(_spec("wine", "svm"))
        d.close()  # waits for the run
        [done] = d.poll()
        assert done.ok
    assert seen[False] is None
    assert seen[True] == get_current_settings().flows.heartbeat_frequency is not None


def test_an_embedded_scheduler_dispatches_in_process_without_heartbeats(
    tmp_path: Path, restore_env: None, monkeypatch: pytest.MonkeyPatch
) -> None:
    from tasks import SchedulerOptions, connect, scheduler_lock
    from tasks._dispatch import LocalDispatcher

    for var in ("PREFECT_API_URL", "TENANTML_TRACKING_URI", "TENANTML_STORE"):
        monkeypatch.delenv(var, raising=False)
    monkeypatch.setenv("TENANTML_HOME", str(tmp_path))
    options = SchedulerOptions(
        ticks=1, policy=None, slots=1, max_epochs=1, job_budget_s=None, sleep_s=None,
        poll_s=0.5, refresh_s=5.0, seed=0, stop_when_idle=False, dispatch="auto",
        prefetch=None, seer_budget_x=None, outage_patience_s=None, prior="learnt",
    )  # fmt: skip
    svc = connect(options, run_train=lambda params: None)
    try:
        assert isinstance(svc.dispatcher, LocalDispatcher) and not svc.dispatcher.heartbeats
        assert svc.sole_home is None  # not holding the home's lock (the flow takes it first)
    finally:
        svc.dispatcher.close()
    with scheduler_lock(tmp_path.resolve()):  # as the scheduler flow does: its home's only one
        svc = connect(options, run_train=lambda params: None)
        svc.dispatcher.close()
    assert svc.sole_home == tmp_path.resolve()  # `tasks._crashes`


def _heartbeat() -> int | None:
    from prefect.settings import get_current_settings

    value: int | None = get_current_settings().flows.heartbeat_frequency
    return value


def test_sigint_and_sigterm_request_a_stop_and_a_second_one_interrupts() -> None:
    events: list[SchedulerEvent] = []
    before = signal.getsignal(signal.SIGINT), signal.getsignal(signal.SIGTERM)
    with stop_on_signals() as stop, listen(events.append):
        assert stop is STOP and not stop.requested
        with stop_on_signals():  # nested (the flow inside the CLI): the same request
            signal.raise_signal(signal.SIGTERM)
        assert stop.requested and stop.signal == "SIGTERM"
        assert events == [Stopping("SIGTERM", 0, None)]
        with pytest.raises(KeyboardInterrupt, match="SIGINT"):
            signal.raise_signal(signal.SIGINT)
    assert (signal.getsignal(signal.SIGINT), signal.getsignal(signal.SIGTERM)) == before
    assert not STOP.requested and STOP.signal is None  # the next scheduler starts afresh


def test_loss_history_keeps_the_later_value_of_a_tick_and_only_loss_metrics() -> None:
    history: dict[str, list[tuple[int, float]]] = {}
    add_tick(history, 2, {"loss_estimate.wine": 0.5, "regret_estimate": 0.7, "gpu": 1.0})
    add_tick(history, 1, {"loss_estimate.wine": 0.9, "regret_estimate": 1.0})
    add_tick(history, 2, {"loss_estimate.wine": 0.4})
    assert history == {
        "loss_estimate.wine": [(1, 0.9), (2, 0.4)],
        "regret_estimate": [(1, 1.0), (2, 0.7)],
    }


def _scheduler_runs(tracking_uri: str, runs: list[dict[str, list[tuple[int, float]]]]) -> None:
    from mlflow.tracking import MlflowClient

    from mlflow_plugin.tracking import SCHEDULER_EXPERIMENT

    client = MlflowClient(tracking_uri)
    exp = client.create_experiment(SCHEDULER_EXPERIMENT)
    for metrics in runs:
        run = client.create_run(exp)
        for key, points in metrics.items():
            for step, value in points:
                client.log_metric(run.info.run_id, key, value, step=step)
        client.log_metric(run.info.run_id, "gpu_busy_fraction", 0.5, step=1)
        client.set_terminated(run.info.run_id)
        time.sleep(0.01)  # distinct start times: the later run wins a shared tick


def test_loss_history_from_mlflow_and_its_picture(tmp_path: Path) -> None:
    from mlflow.tracking import MlflowClient

    uri = f"sqlite:///{tmp_path / 'mlflow.db'}"
    assert load_tick_history(MlflowClient(uri)) == {}
    _scheduler_runs(
        uri,
        [
            {"loss_estimate.wine": [(1, 0.5), (2, 0.1)], "regret_estimate": [(1, 0.5), (2, 0.1)]},
            {"loss_estimate.wine": [(2, 0.2), (3, 0.0)], "regret_estimate": [(2, 0.3), (3, 0.1)],
             "loss_estimate.digits": [(2, 0.1), (3, 0.1)]},
        ],
    )  # fmt: skip
    history = load_tick_history(MlflowClient(uri))
    assert history == {
        "loss_estimate.digits": [(2, 0.1), (3, 0.1)],
        "loss_estimate.wine": [(1, 0.5), (2, 0.2), (3, 0.0)],
        "regret_estimate": [(1, 0.5), (2, 0.3), (3, 0.1)],
    }
    for h in (history, {}):
        png = loss_picture(h)
        assert png.startswith(b"\x89PNG")
        assert Image.open(io.BytesIO(png)).size == (800, 450)


def test_run_lines_are_plain_text() -> None:
    from tenantml.cli.service import _event_line, _stopped_line

    done = JobFinished("wine", "svm", "svm-s1", True, np.float64(0.972222), np.float32(1.25),
                       np.float64(0.00123))  # fmt: skip
    assert _event_line(done) == (
        "finished wine svm: accuracy 0.9722, cost 1.2 s, wine's loss estimate 0.0012"
    )
    failed = JobFinished("wine", "svm", "svm-s1", False, None, None, None, "FAILED: oom\nmore")
    assert _event_line(failed) == (
        "failed (FAILED: oom) wine svm: accuracy -, cost - s, wine's loss estimate -"
    )
    assert _event_line(JobDispatched(3, "wine", "svm", "svm-s1")) == "tick 3: dispatched wine svm"
    assert _event_line(JobDispatched(3, "wine", "svm", "svm-s1", resumed=True)) == (
        "resumed wine svm (left unfinished earlier)"
    )
    assert _stopped_line("SIGINT", 1, embedded=True) == (
        "stopped by SIGINT: 1 job in flight; they resume on the next `tenantml run`"
    )


def test_status_plot_writes_the_picture_from_mlflow(tmp_path: Path) -> None:
    from tenantml.cli import app

    home = tmp_path / "home"
    runner = CliRunner()
    png = tmp_path / "loss.png"
    res = runner.invoke(app, ["status", "--home", str(home)])  # the overview, of no tenant
    assert res.exit_code == 0 and "no tenants yet" in res.output, res.output
    res = runner.invoke(app, ["status", "--plot", str(png), "--home", str(home)])
    assert res.exit_code == 1 and "no scheduler has logged a tick yet" in res.output, res.output
    res = runner.invoke(app, ["status", "--plot", str(tmp_path / "x.jpg"), "--home", str(home)])
    assert res.exit_code == 2 and "ending in .png" in res.output, res.output
    _scheduler_runs(
        f"sqlite:///{home / 'mlflow.db'}",
        [{"loss_estimate.wine": [(1, 0.5), (2, 0.1)], "regret_estimate": [(1, 0.5), (2, 0.1)]}],
    )
    res = runner.invoke(app, ["status", "--plot", str(png), "--home", str(home)])
    assert res.exit_code == 0, res.output
    assert "the loss estimates of 1 tenant and their total over 2 ticks" in res.output
    assert png.read_bytes().startswith(b"\x89PNG")


def _tenant(name: str, n_examples: int) -> Any:
    from store.schema import Schema
    from tasks import TenantInfo

    schema = Schema.parse("{input: {[Tensor[4]], []}, output: {[Tensor[3]], []}}")
    return TenantInfo(name, schema, ("knn-k1-p1",), n_examples, 1, "1")


def test_the_reason_to_wait_names_what_would_change_it() -> None:
    from tasks._loop import waiting_reason

    assert "no tenants yet" in waiting_reason([])
    few = waiting_reason([_tenant("wine", 6)])
    assert few.startswith("wine (6) has fewer than 10 examples") and "tenantml feed" in few
    assert "other" not in few  # no other tenant to speak of
    many = waiting_reason([_tenant(f"t{i}", i) for i in range(7)] + [_tenant("iris", 150)])
    assert many.startswith("t0 (0), t1 (1), t2 (2), t3 (3), t4 (4) and 2 more have fewer")
    assert "every other tenant has nothing left to train" in many
    done = waiting_reason([_tenant("iris", 150), _tenant("wine", 10)])
    assert done.startswith("every tenant has nothing left to train on its current examples")


def test_a_scheduler_with_nothing_to_train_says_why_once(
    capsys: pytest.CaptureFixture[str],
) -> None:
    from tasks import Waiting
    from tasks._loop import tell_waiting

    svc: Any = FakeService(FakeDispatcher(), StopRequest())
    progress = _progress()
    progress.state = SimpleNamespace(tenants=(_tenant("wine", 6),))  # type: ignore[assignment]
    events: list[SchedulerEvent] = []
    with listen(events.append):
        for _ in range(3):  # pass after pass: once
            tell_waiting(svc, progress, [])
    reason = (
        "wine (6) has fewer than 10 examples, the fewest a tenant is trained on: "
        "feed more with `tenantml feed`"
    )
    assert events == [Waiting(reason)]  # what `tenantml run` shows
    assert capsys.readouterr().out == f"waiting: {reason}\n"  # the flow's log
    progress.state = SimpleNamespace(tenants=(_tenant("wine", 12),))  # type: ignore[assignment]
    tell_waiting(svc, progress, [])  # another reason: said
    assert capsys.readouterr().out.startswith("waiting: every tenant has nothing left")
    tell_waiting(svc, progress, [_spec("wine", "svm")])  # a job sent: forgotten
    svc.dispatcher.in_flight.append(_spec("wine", "svm"))
    tell_waiting(svc, progress, [])  # a job in flight: not waiting
    assert capsys.readouterr().out == ""
    svc.dispatcher.in_flight.clear()
    tell_waiting(svc, progress, [])  # the same reason as before the job: said again
    assert capsys.readouterr().out.startswith("waiting: every tenant has nothing left")
