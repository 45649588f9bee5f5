"""The service's logic without servers: problem building, the planner across passes (picker
state, prefetch slots), history from job records, loss estimates, settings, slot locks."""

from __future__ import annotations

import dataclasses
import json
import math
import threading
import time
from pathlib import Path

import numpy as np
import pytest

from mlflow_plugin.tracking import JobRecord
from policy import Assignment, History, Observation, loss_estimates, validate_problem
from policy._book import TenantBook
from store.schema import Schema, Tensor
from tasks._service import (
    JOB_OVERHEAD_PRIOR_S,
    JobSpec,
    Planner,
    ServiceState,
    SlotHold,
    TenantInfo,
    _restrict,
    build_problem,
    job_overhead,
    state_of,
)
from tasks.settings import Settings
from trainers import PIXEL_MODELS, Candidate, candidates

TAB = Schema(input=Tensor(5), output=Tensor(2))
IMG = Schema(input=Tensor(8, 8, 1), output=Tensor(10))


def _tenant(name: str, schema: Schema, n: int = 100) -> TenantInfo:
    return TenantInfo(name, schema, tuple(c.name for c in candidates(schema)), n, 1, name)


def _record(tenant: str, cand: str, status: str = "FINISHED", acc: float = 0.9) -> JobRecord:
    return JobRecord(f"{tenant}-{cand}", tenant, cand, f"{cand}-s1", status, acc, 1.0, 1, 1,
                     0.0, 1.0, None)  # fmt: skip


def _state(tenants: list[TenantInfo], records: list[JobRecord]) -> ServiceState:
    problem, catalogue = build_problem(tenants)
    return ServiceState(tenants, records, problem, catalogue)


def test_problem_is_the_union_of_candidates() -> None:
    s = _state([_tenant("a", TAB), _tenant("b", IMG), _tenant("c", TAB)], [])
    tabular = tuple(c.name for c in candidates(TAB))
    assert s.catalogue[: len(tabular)] == tabular
    n, image = len(tabular), len(candidates(IMG))
    # the image tenant's pixel arms are arms of their own, not the tabular tenants'
    assert len(s.catalogue) == n + image and image == 36 + len(PIXEL_MODELS)
    assert s.problem.available.sum(axis=1).tolist() == [n, image, n]
    assert np.all(s.problem.cost[s.problem.available] > 0)
    # a CNN is predicted dearer than logistic regression for the same data size
    k_lr, k_cnn = s.catalogue.index("logistic_regression"), s.catalogue.index("resnet18")
    assert s.problem.cost[1, k_cnn] > s.problem.cost[0, k_lr]


def test_history_from_records() -> None:
    recs = [_record("a", "svm"), _record("a", "knn", "FAILED"), _record("a", "mlp", "RUNNING"),
            _record("gone", "svm")]  # fmt: skip
    s = _state([_tenant("a", TAB)], recs)
    log = s.history().log
    assert [(o.arm, o.completed) for o in log] == [
        (s.catalogue.index("svm"), True), (s.catalogue.index("knn"), False),
    ]  # fmt: skip
    assert [r.candidate for r in s.running()] == ["mlp"]


def test_planner_keeps_the_pickers_turn_across_passes() -> None:
    tenants = [_tenant("a", TAB), _tenant("b", TAB), _tenant("c", TAB)]
    planner = Planner("roundrobin", slots=1)
    records: list[JobRecord] = []
    served = []
    for tick in range(6):
        [job] = planner.decide(_state(tenants, records), in_flight=[], tick=tick)
        served.append(job.tenant)
        records.append(_record(job.tenant, job.candidate))
    assert served == ["a", "b", "c", "a", "b", "c"]


def test_prefetch_fills_each_slot_with_one_waiting_job() -> None:
    tenants = [_tenant("a", TAB), _tenant("b", TAB)]
    planner = Planner("roundrobin", slots=2, prefetch=2, lock_dir="/locks")
    jobs = planner.decide(_state(tenants, []), in_flight=[], tick=1)
    assert len(jobs) == 4 and sorted(j.slot for j in jobs) == [0, 0, 1, 1]
    assert {j.slot_lock for j in jobs} == {"/locks/slot-0.lock", "/locks/slot-1.lock"}
    assert len({(j.tenant, j.candidate) for j in jobs}) == 4  # pending jobs are not repeated
    assert planner.decide(_state(tenants, []), in_flight=jobs, tick=2) == []
    again = planner.decide(_state(tenants, []), in_flight=jobs[1:], tick=2)
    assert len(again) == 1 and again[0].slot == jobs[0].slot
    with pytest.raises(ValueError, match="lock_dir"):
        Planner("rate", 1, prefetch=1)


def test_runs_not_sent_give_their_slot_turns_back() -> None:
    """A tick cut short by an outage sends some of its runs: the next run on a slot waits for
    the last turn sent there, not for the turn of a run that never went (it waited
    `TURN_PATIENCE_S` for it)."""
    tenants = [_tenant("a", TAB), _tenant("b", TAB)]
    planner = Planner("roundrobin", slots=1, prefetch=2, lock_dir="/locks")
    jobs = planner.decide(_state(tenants, []), in_flight=[], tick=1)
    assert len(jobs) == 3 and [j.after for j in jobs[1:]] == [j.turn for j in jobs[:-1]]
    planner.unsent(jobs[1:])  # only the first was sent
    runs = planner.decide(_state(tenants, []), in_flight=jobs[:1], tick=2)
    assert runs and runs[0].after == jobs[0].turn
    planner.unsent(runs)  # none of these went either
    assert planner.decide(_state(tenants, []), in_flight=jobs[:1], tick=3)[0].after == (
        jobs[0].turn
    )


def test_on_several_nodes_prefetched_jobs_carry_no_lock_the_worker_holds_its_gpus() -> None:
    """Worker locks (`up --listen`, a cluster): the same jobs, none naming a lock file of the
    scheduler's machine; each waits on its worker's GPU lock, on its node (`SlotHold`)."""
    tenants = [_tenant("a", TAB), _tenant("b", TAB)]
    planner = Planner("roundrobin", slots=2, prefetch=2, worker_locks=True)
    jobs = planner.decide(_state(tenants, []), in_flight=[], tick=1)
    assert len(jobs) == 4 and {j.slot_lock for j in jobs} == {None}
    with pytest.raises(ValueError, match="give worker_locks or lock_dir, not both"):
        Planner("rate", 1, prefetch=1, lock_dir="/locks", worker_locks=True)


def test_tenants_without_enough_examples_wait() -> None:
    planner = Planner("roundrobin", slots=1)
    jobs = planner.decide(_state([_tenant("a", TAB, n=3)], []), in_flight=[], tick=1)
    assert jobs == []


def test_loss_estimates() -> None:
    s = _state([_tenant("a", TAB), _tenant("b", TAB)], [])
    prior = loss_estimates(s.problem, History())
    assert np.all(prior > 0.3)  # nothing known: about the prior mean of the best model
    done = History(tuple(Observation(0, k, 0.99, 1.0) for k in range(len(candidates(TAB)))))
    after = loss_estimates(s.problem, done)
    assert after[0] == 0.0  # every model of a tried: nothing to gain
    # b's posterior is its own; what a's results change for b is the calibration's scale,
    # learnt across tenants (a's 0.99s surprised the prior: b's interval widens)
    assert loss_estimates(s.problem, done, calibration=0)[1] == prior[1] < after[1]
    one = loss_estimates(s.problem, History((Observation(1, 0, 0.95, 1.0),)))
    assert 0 < one[1] < prior[1]


def test_settings(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    for k in ("TENANTML_TRACKING_URI", "TENANTML_STORE", "PREFECT_API_URL", "TENANTML_GPU_SLOTS"):
        monkeypatch.delenv(k, raising=False)
    s = Settings.load(tmp_path)
    assert s.mode == "embedded" and s.tracking_uri == f"sqlite:///{tmp_path / 'mlflow.db'}"
    assert s.store().blobs.describe() == f"local directory {tmp_path / 'store'}"
    (tmp_path / "servers.json").write_text(json.dumps({
        "tracking_uri": "http://127.0.0.1:1", "store": "s3://b/p", "prefect_api_url": "http://x/api",
        "s3_endpoint_url": "http://127.0.0.1:2", "gpu_slots": 3,
    }))  # fmt: skip
    s = Settings.load(tmp_path)
    assert (s.mode, s.gpu_slots, s.pin_gpus, s.store_url) == ("servers", 3, True, "s3://b/p")
    assert s.prefetch_per_slot is None  # servers.json names none: workers 1 per slot
    assert (s.prefetch_for(local=False), s.prefetch_for(local=True)) == (1, 0)
    monkeypatch.setenv("TENANTML_PREFETCH_PER_SLOT", "3")  # a cluster's, by environment
    assert Settings.load(tmp_path).prefetch_for(local=True) == 3  # given: for every dispatch
    monkeypatch.setenv("TENANTML_PREFETCH_PER_SLOT", "-1")
    with pytest.raises(ValueError, match="TENANTML_PREFETCH_PER_SLOT='-1' is not valid: use 0"):
        Settings.load(tmp_path)
    monkeypatch.delenv("TENANTML_PREFETCH_PER_SLOT")
    monkeypatch.setenv("TENANTML_GPU_SLOTS", "0")
    with pytest.raises(ValueError, match="TENANTML_GPU_SLOTS"):
        Settings.load(tmp_path)
    monkeypatch.setenv("TENANTML_GPU_SLOTS", "1")
    monkeypatch.setenv("TENANTML_STORE", "ftp://nope")
    with pytest.raises(ValueError, match="file:///abs/dir or s3://bucket/prefix"):
        Settings.load(tmp_path).store()


@pytest.mark.parametrize("lock", ["slot", "worker"])
def test_slot_lock_serializes_jobs_on_one_slot(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, lock: str
) -> None:
    """One machine: the lock named in the job. Another node: the job names none, and the lock
    is the GPU's of the worker that started it (``TENANTML_GPU_LOCK``, on that node)."""
    path = str(tmp_path / "locks" / "gpu-0.lock")
    if lock == "worker":
        monkeypatch.setenv("TENANTML_GPU_LOCK", path)
    spec = JobSpec("a", "svm", 1, "j", 1, "rate", slot_lock=path if lock == "slot" else None)
    events: list[str] = []

    def job(name: str, hold: float) -> None:
        with SlotHold.of(spec).training():
            events.append(f"{name} start")
            time.sleep(hold)
            events.append(f"{name} end")

    first = threading.Thread(target=job, args=("first", 0.3))
    first.start()
    time.sleep(0.1)
    second = threading.Thread(target=job, args=("second", 0.0))
    second.start()
    first.join()
    second.join()
    assert events == ["first start", "first end", "second start", "second end"]


def test_a_chain_holds_its_slot_between_its_jobs(tmp_path: Path) -> None:
    """A run of three chained jobs keeps the slot from its first job's training to its last's:
    the prefetched run waiting on the slot trains after all three, not between them, and as
    soon as the last has trained (while that job would log its model)."""
    lock = str(tmp_path / "slot-0.lock")
    events: list[str] = []
    chain = SlotHold(lock, jobs=3)
    waiting = threading.Event()

    def prefetched() -> None:
        waiting.set()
        with SlotHold(lock).training():
            events.append("next run")

    other = threading.Thread(target=prefetched)
    for k in range(3):
        with chain.training():
            if k == 0:
                other.start()
                waiting.wait()
            time.sleep(0.1)  # the other run waits on the lock meanwhile
            events.append(f"job {k}")
        if k < 2:
            time.sleep(0.1)  # between two jobs (logging a model): the slot stays held
    other.join(timeout=5)
    events.append("job 2 logged")
    assert events == ["job 0", "job 1", "job 2", "next run", "job 2 logged"]
    chain.release()  # idempotent: already let go after the last job


def test_a_run_lets_its_slot_go_when_a_job_never_trains(tmp_path: Path) -> None:
    """A chain whose later job fails before training (or was done by an earlier attempt) does
    not keep the slot: `release` at the run's end, or `job_done` for a skipped job."""
    lock = str(tmp_path / "slot-0.lock")
    chain = SlotHold(lock, jobs=3)
    with chain.training():
        pass
    chain.job_done()  # the second was finished by an earlier attempt
    assert chain._file is not None  # the third may still train
    chain.release()  # it failed before training: the run ends
    with SlotHold(lock).training():  # the slot is free again (this would wait forever)
        pass
    # the run's flow says `job_done` of every job whatever happened; a job `training` counted
    # already is counted once, and the slot goes after the last job, not at the run's end
    named = SlotHold(lock, jobs=3)
    with named.training("a"):
        pass
    named.job_done("a")  # the flow, after its training
    named.job_done("b")  # failed before training
    assert named._file is not None  # "c" may still train
    with named.training("c"):
        pass
    assert named._file is None  # let go after the last job
    named.job_done("c")  # the flow, after it: nothing more
    assert named.left == 0
    # job ids repeat across tenants (``lr-s1``), and a chain may mix tenants: counted apart
    mixed = SlotHold(lock, jobs=2)
    for job in ("a/lr-s1", "b/lr-s1"):
        with mixed.training(job):
            pass
    assert mixed._file is None and mixed.left == 0


def test_runs_take_their_slot_in_the_order_they_were_sent(tmp_path: Path) -> None:
    """Two runs sent at once on one slot (the first tick: a run and the prefetched one): the
    second reaches the lock first, yet the first trains first. Without turns it was a race."""
    lock = str(tmp_path / "slot-0.lock")
    events: list[str] = []
    second_waits = threading.Event()

    def second() -> None:
        second_waits.set()
        with SlotHold(lock, turn=11, after=10).training():
            events.append("second")

    other = threading.Thread(target=second)
    other.start()
    second_waits.wait()
    time.sleep(0.1)  # the second run is at the lock first
    with SlotHold(lock, turn=10).training():
        events.append("first")
    other.join(timeout=5)
    assert events == ["first", "second"]


def test_a_run_that_never_trains_passes_its_turn(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The run before this one ended without training (its jobs failed early or were done):
    `release` passes its turn, and the next run takes the slot at once, not after the
    patience for a dead run."""
    import tasks._service as service

    monkeypatch.setattr(service, "TURN_PATIENCE_S", 3600.0)  # would hang the test
    lock = str(tmp_path / "slot-0.lock")
    SlotHold(lock, turn=10).release()
    took: list[bool] = []

    def take() -> None:
        with SlotHold(lock, turn=11, after=10).training():
            took.append(True)

    t = threading.Thread(target=take, daemon=True)
    t.start()
    t.join(timeout=30)
    assert took == [True]


def test_a_run_sent_after_a_dead_one_waits_at_most_the_patience(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The run before it was killed before it took the slot: the next one takes it after
    `TURN_PATIENCE_S`, and the turn recorded is its own."""
    import tasks._service as service

    monkeypatch.setattr(service, "TURN_PATIENCE_S", 0.2)
    lock = str(tmp_path / "slot-0.lock")
    with SlotHold(lock, turn=12, after=11).training():
        pass
    assert Path(lock).read_text() == "12"


def test_the_planner_gives_a_slots_runs_their_turns() -> None:
    """One slot and a prefetched run: the second run is sent after the first; a later run on
    the slot comes after the last sent. Several nodes (worker locks): no turns."""
    tenants = [_tenant(n, TAB) for n in "abc"]
    planner = Planner("roundrobin", slots=1, prefetch=1, lock_dir="/locks")
    first, second = planner.decide(_state(tenants, []), in_flight=[], tick=1)
    assert first.turn is not None and first.after is None
    assert (second.turn, second.after) == (first.turn + 1, first.turn)
    [third] = planner.decide(_state(tenants, []), in_flight=[second], tick=2)
    assert (third.turn, third.after) == (second.turn + 1, second.turn)
    workers = Planner("roundrobin", slots=1, prefetch=1, worker_locks=True)
    assert {
        (j.turn, j.after) for j in workers.decide(_state(tenants, []), in_flight=[], tick=1)
    } == {(None, None)}


def test_unreachable_server_is_named_and_the_cli_exits_1(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, restore_env: None
) -> None:
    from typer.testing import CliRunner

    from tasks.settings import ServerUnreachableError
    from tenantml.cli import app
    from tenantml.client import Client
    from tenantml.ops.servers import free_port

    for k in ("TENANTML_TRACKING_URI", "TENANTML_STORE", "PREFECT_API_URL"):
        monkeypatch.delenv(k, raising=False)
    dead = f"http://127.0.0.1:{free_port()}"
    (tmp_path / "servers.json").write_text(json.dumps({
        "tracking_uri": dead, "store": "s3://b/p", "prefect_api_url": f"{dead}/api",
    }))  # fmt: skip
    with pytest.raises(
        ServerUnreachableError, match=f"MLflow server at {dead}/health.*tenantml up"
    ):
        Client(tmp_path)
    res = CliRunner().invoke(app, ["tenants", "--home", str(tmp_path)])
    assert res.exit_code == 1 and "is not reachable" in res.output and "tenantml up" in res.output


def test_a_server_that_stops_answering_during_a_command_is_named_in_one_line(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, restore_env: None
) -> None:
    """The MLflow server answers the command's check of the servers, then goes away before
    the command reads it: one line naming the server and what to do, exit 1 (before: MLflow's
    traceback, `status` and `status --fresh`). An error that quotes a refused connection while
    the servers answer is not one."""
    from http.server import BaseHTTPRequestHandler, HTTPServer

    from typer.testing import CliRunner

    from tenantml.cli import app
    from tenantml.ops.servers import free_port

    class Health(BaseHTTPRequestHandler):
        def do_GET(self) -> None:
            self.send_response(200)
            self.end_headers()
            self.wfile.write(b"OK")

        def log_message(self, *args: object) -> None:
            pass

    def answer_once(port: int) -> threading.Thread:
        """A server on `port` that answers one request (the check), then is gone."""
        server = HTTPServer(("127.0.0.1", port), Health)

        def serve() -> None:
            server.handle_request()
            server.server_close()

        thread = threading.Thread(target=serve, daemon=True)
        thread.start()
        return thread

    for k in ("TENANTML_TRACKING_URI", "TENANTML_STORE", "PREFECT_API_URL"):
        monkeypatch.delenv(k, raising=False)
    monkeypatch.setenv("MLFLOW_HTTP_REQUEST_MAX_RETRIES", "0")
    port = free_port()
    uri = f"http://127.0.0.1:{port}"
    store_dir = tmp_path / "examples"
    (tmp_path / "servers.json").write_text(json.dumps({
        "tracking_uri": uri, "store": store_dir.as_uri()}))  # fmt: skip
    Settings.load(tmp_path).store().create_tenant("t", Schema(input=Tensor(4), output=Tensor(2)))
    for args in (["status"], ["status", "t", "--fresh"]):
        thread = answer_once(port)
        res = CliRunner().invoke(app, [*args, "--home", str(tmp_path)])
        thread.join(10)
        assert res.exit_code == 1, (args, res.output, res.exception)
        assert f"error: the MLflow server at {uri} does not answer; start it" in res.output, (
            res.output
        )
        assert "tenantml up" in res.output and "Traceback" not in res.output
    # An error that only quotes a failed connection (a SEER rank's log), while every server
    # answers, stays as it is: not taken for an outage.
    from tenantml.cli.service import _errors

    server = HTTPServer(("127.0.0.1", port), Health)
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    monkeypatch.setenv("TENANTML_HOME", str(tmp_path))
    try:
        with pytest.raises(RuntimeError, match="rank 1 exited"):
            with _errors():
                raise RuntimeError("rank 1 exited with 1: errno: 111 - Connection refused")
    finally:
        server.shutdown()
        server.server_close()
    # A connection cut as the server went (reset: the request arrived as it closed) is named
    # too, once the server indeed does not answer.
    import typer

    with pytest.raises(typer.Exit) as gone:
        with _errors():
            raise ConnectionResetError(104, "Connection reset by peer")
    assert gone.value.exit_code == 1


def test_a_feed_that_lost_to_another_is_one_line(capsys: pytest.CaptureFixture[str]) -> None:
    """A feed whose class names clashed with another feed's (`store.ConcurrentUpdateError`, a
    RuntimeError) is one line naming what to do, exit 1; before, a traceback."""
    import typer

    from store import ConcurrentUpdateError
    from tenantml.cli.service import _errors

    with pytest.raises(typer.Exit) as lost:
        with _errors():
            raise ConcurrentUpdateError(
                "tenant 'a': ...; nothing of this feed was stored: feed it again"
            )
    assert lost.value.exit_code == 1
    assert "feed it again" in capsys.readouterr().err


def test_planner_hands_torch_models_seer_jobs_with_deadline_from_the_cost_estimate() -> None:
    # the image tenant with its CNNs only (its pixel arms are scikit-learn models: no SEER)
    img = _tenant("img", IMG)
    nets = tuple(c for c in img.candidates if Candidate.parse(c).spec.family != "sklearn")
    state = _state([dataclasses.replace(img, candidates=nets), _tenant("tab", TAB)], [])
    planner = Planner("roundrobin", slots=8)
    specs = planner.decide(state, in_flight=[], tick=1, seer_budget_x=4)
    assert {s.tenant for s in specs} == {"img", "tab"}
    loop = planner.loop
    assert loop is not None
    ti, mi = state.index()
    from policy import Assignment

    for s in specs:
        family = "sklearn" if s.tenant == "tab" else "torch"
        if family == "sklearn":
            assert s.seer is None and not s.job_id.startswith("seer-")
            continue
        assert s.seer is not None and s.job_id.startswith("seer-")
        expected = loop.expected_cost(Assignment(ti[s.tenant], mi[s.candidate]))
        assert s.seer["deadline_min"] == pytest.approx(max(1.0, expected / 60))
        assert s.seer["budget_gpu_min"] == pytest.approx(4 * s.seer["deadline_min"])
    assert all(s.seer is None for s in planner.decide(state, in_flight=specs[:0], tick=2))


def test_spot_pool_costs_are_expected_dollars() -> None:
    from tasks._service import capacity_prices

    tenants = [_tenant("img", IMG), _tenant("tab", TAB)]
    seconds = _state(tenants, [])
    cat = seconds.catalogue
    usd = capacity_prices("gpu=0.72,cpu=0.036", cat)
    assert usd is not None
    problem, _ = build_problem(tenants, usd)
    k_cnn, k_svm = cat.index("resnet18"), cat.index("svm")
    # a GPU arm costs 0.72/3600 USD per second, a CPU arm 0.036/3600
    assert problem.cost[0, k_cnn] == pytest.approx(seconds.problem.cost[0, k_cnn] * 0.0002)
    assert problem.cost[1, k_svm] == pytest.approx(seconds.problem.cost[1, k_svm] * 0.00001)
    state = ServiceState(tenants, [_record("tab", "svm")], problem, cat, usd)
    (obs,) = state.history().log
    assert obs.cost == pytest.approx(1.0 * 0.00001)  # 1 s of CPU instance
    assert capacity_prices(None, cat) is None
    for bad in ("gpu=0.7", "gpu=x,cpu=1", "gpu=0,cpu=1"):
        with pytest.raises(ValueError, match="TENANTML_CAPACITY_PRICES"):
            capacity_prices(bad, cat)


def test_results_reach_the_policy_in_the_pools_units_whichever_way_they_arrive() -> None:
    """The planner builds its loop from the history once and then feeds it each pass's new
    results; on a spot pool the new ones went in as seconds beside a history in dollars (the
    incremental path dropped `usd_per_s`). A NaN accuracy is no model: one stopped `rate` for
    every tenant."""
    from tasks._service import capacity_prices

    tab = _tenant("tab", TAB)
    cat = _state([tab], []).catalogue
    usd = capacity_prices("gpu=0.72,cpu=0.036", cat)
    problem, cat = build_problem([tab], usd)
    first, second = _record("tab", cat[0]), _record("tab", cat[1])
    planner = Planner("rate", slots=1)
    planner.decide(ServiceState([tab], [first], problem, cat, usd), in_flight=[], tick=1)
    both = ServiceState([tab], [first, second], problem, cat, usd)
    planner.decide(both, in_flight=[], tick=2)  # the second result fed to the loop as it is
    assert [o.cost for o in planner.loop.history.log] == [o.cost for o in both.history().log]
    assert planner.loop.history.log[-1].cost == pytest.approx(1.0 * 0.036 / 3600)
    nan = ServiceState([tab], [_record("tab", cat[2], acc=math.nan)], problem, cat, usd)
    (obs,) = nan.history().log
    assert not obs.completed and obs.quality == 0.0
    assert Planner("rate", slots=1).decide(nan, in_flight=[], tick=1)


def test_spot_pool_jobs_get_their_limits_and_deadlines_in_seconds() -> None:
    # on a spot pool the policy's costs and limits are dollars; a job's time limit and a SEER
    # job's deadline are seconds of its instance: the same as on a pool priced in seconds
    from tasks._service import capacity_prices

    img = _tenant("img", IMG)
    nets = tuple(c for c in img.candidates if Candidate.parse(c).spec.family != "sklearn")
    tenants = [dataclasses.replace(img, candidates=nets), _tenant("tab", TAB)]
    seconds = _state(tenants, [])
    usd = capacity_prices("gpu=0.72,cpu=0.036", seconds.catalogue)
    problem, cat = build_problem(tenants, usd)
    spot = ServiceState(tenants, [], problem, cat, usd)
    for seer_x in (None, 4.0):
        jobs = {}
        for state in (seconds, spot):
            specs = Planner("roundrobin", slots=8).decide(
                state, in_flight=[], tick=1, seer_budget_x=seer_x
            )
            jobs[state is spot] = {(s.tenant, s.candidate): s for s in specs}
        assert jobs[True].keys() == jobs[False].keys() and len(jobs[True]) == 8
        for key, job in jobs[True].items():
            plain = jobs[False][key]
            assert plain.time_budget_s is not None and plain.time_budget_s > 0
            assert job.time_budget_s == pytest.approx(plain.time_budget_s)
            if seer_x is not None and key[0] == "img":
                assert job.seer is not None and plain.seer is not None
                assert job.seer["deadline_min"] == pytest.approx(plain.seer["deadline_min"])
    # runs queued on two slots: each pick on the slot with the fewest expected seconds queued,
    # GPU and CPU seconds alike (in dollars a GPU job counted 20 times a CPU job as long)
    # (a big tabular tenant's CPU jobs longer than a small image tenant's GPU jobs)
    mixed = [dataclasses.replace(tenants[0], n_examples=20), _tenant("tab", TAB, 200_000)]
    usd = capacity_prices("gpu=0.72,cpu=0.036", _state(mixed, []).catalogue)
    placed = []
    for prices in (None, usd):
        problem, cat = build_problem(mixed, prices)
        specs = Planner("roundrobin", slots=2, prefetch=6, lock_dir="/locks").decide(
            ServiceState(mixed, [], problem, cat, prices), in_flight=[], tick=1
        )
        placed.append([(s.tenant, s.candidate, s.slot) for s in specs])
    assert placed[0] == placed[1] and len(placed[0]) == 8


def test_scheduler_parameters_are_checked_before_anything_starts() -> None:
    from tasks import SchedulerOptions

    good = dict(ticks=None, policy=None, slots=None, max_epochs=10, job_budget_s=None,
                sleep_s=None, poll_s=0.5, refresh_s=5.0, seed=0, stop_when_idle=False,
                dispatch="auto", prefetch=None, seer_budget_x=None,
                outage_patience_s=None, prior="learnt")  # fmt: skip
    SchedulerOptions(**good)  # type: ignore[arg-type]
    for bad, message in [
        ({"dispatch": "gpu"}, "dispatch 'gpu': use one of auto, local, pool"),
        ({"policy": ""}, "policy '': use one of"),
        ({"slots": 0}, "slots 0: use 1 or more"),
        ({"ticks": -1}, "ticks -1: use 0 or more"),
        ({"prefetch": -2}, "prefetch -2: use 0 or more"),
        ({"max_epochs": 0}, "max_epochs 0: use 1 or more"),
        ({"job_budget_s": 0.0}, "job_budget_s 0.0: use a positive number"),
        ({"budget_s": -5.0}, "budget_s -5.0: use a positive number"),
        ({"poll_s": 0.0}, "poll_s 0.0: use a positive number of seconds"),
        ({"prior": "flat"}, "prior 'flat': use one of learnt, independent"),
        ({"seer_budget_x": 0.5}, "seer_budget_x 0.5: use 1 or more"),  # as `run` says
        ({"seer_tuner": "asha"}, "seer_tuner 'asha': use one of replan, seer"),
    ]:
        with pytest.raises(ValueError, match="scheduler parameters not valid: " + message):
            SchedulerOptions(**{**good, **bad})  # type: ignore[arg-type]
    from tasks.options import option_problems

    with pytest.raises(ValueError, match="'job_budget' is not a scheduler option: use ticks, "):
        option_problems(job_budget=-1.0)  # a caller's typo would turn the check off
    assert option_problems(seed=3, stop_when_idle=True, slots=None) == []


def test_client_run_checks_its_options_before_it_waits_for_prefect() -> None:
    """`Client.run` names a bad option before the flow (and its server) is waited for: it took
    28 s, among Prefect's lines, and an unknown name came back as Prefect's signature."""
    from flows.scheduler import scheduler
    from tenantml.client import _check_scheduler_options

    _check_scheduler_options(scheduler.fn, 3, {"slots": 2, "policy": "hybrid"})  # good ones
    with pytest.raises(ValueError, match=r"options \['bogus'\] are not valid: use ticks, policy"):
        _check_scheduler_options(scheduler.fn, 1, {"bogus": 3})
    with pytest.raises(ValueError, match="slots 0: use 1 or more"):
        _check_scheduler_options(scheduler.fn, 0, {"slots": 0})
    with pytest.raises(ValueError, match="ticks -1: use 0 or more"):
        _check_scheduler_options(scheduler.fn, -1, {})
    _check_scheduler_options(scheduler.fn, 1, {"slots": "2"})  # Prefect coerces it, as before


def test_gpu_count_without_a_driver_needs_no_torch(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """No NVIDIA driver: no device, said without importing torch (3 s of every start-up)."""
    import os
    import subprocess
    import sys

    import tasks.settings as settings

    monkeypatch.delenv("CUDA_VISIBLE_DEVICES", raising=False)
    monkeypatch.setattr(settings, "_NVIDIA_DRIVER", tmp_path / "no-driver")
    assert settings._cuda_devices() == 0
    monkeypatch.setenv("CUDA_VISIBLE_DEVICES", "0,3")
    assert settings._cuda_devices() == 2
    code = (
        "import sys, tasks.settings as s\n"
        "s._NVIDIA_DRIVER = s.Path('/nonexistent')\n"
        "print(s.Settings.load(sys.argv[1]).gpu_slots, 'torch' in sys.modules)"
    )
    env = {k: v for k, v in os.environ.items() if k != "CUDA_VISIBLE_DEVICES"}
    out = subprocess.run([sys.executable, "-c", code, str(tmp_path)], env=env,
                         capture_output=True, text=True, check=True, timeout=120)  # fmt: skip
    assert out.stdout.split() == ["1", "False"]


def test_a_jobs_cost_is_its_training_and_the_overhead_is_measured_apart() -> None:
    """The cost model learns from training seconds; what every run's span adds beyond them
    (the MLflow run, the model's logging, the registry) is measured as the median excess and
    reaches the policy as `Problem.job_overhead`, which it adds to every job's cost."""
    quick = dataclasses.replace(_record("a", "knn"), cost_s=0.01, start_time=100.0, end_time=100.31)
    slow = dataclasses.replace(_record("a", "svm"), cost_s=7.0, start_time=100.0, end_time=107.2)
    mid = dataclasses.replace(_record("a", "mlp"), cost_s=0.5, start_time=100.0, end_time=100.75)
    open_ = dataclasses.replace(_record("a", "rf"), cost_s=None, end_time=None, status="RUNNING")
    records = [quick, slow, mid, open_]
    s = _state([_tenant("a", TAB)], records)
    costs = {s.catalogue[o.arm]: o.cost for o in s.history().log}
    assert costs == {"knn": 0.01, "svm": 7.0, "mlp": 0.5}
    assert job_overhead(records) == pytest.approx(0.25)  # median of 0.30, 0.20, 0.25
    assert job_overhead([open_]) == JOB_OVERHEAD_PRIOR_S  # none finished: the prior
    state = state_of([_tenant("a", TAB)], records, prior="independent")
    assert state.problem.job_overhead == pytest.approx(0.25)
    # the policy weighs each job at the overhead plus its predicted training seconds
    book = TenantBook(state.problem)
    book.sync(state.history())
    assert book.estimator is not None
    trained = book.estimator.expected(0)
    k, v = (book.local_index[0, state.catalogue.index(m)] for m in ("knn", "svm"))
    assert book.costs[0][v] / book.costs[0][k] == pytest.approx(
        (trained[v] + 0.25) / (trained[k] + 0.25)
    )
    with pytest.raises(ValueError, match="job overhead -1.0 is invalid"):
        validate_problem(dataclasses.replace(state.problem, job_overhead=-1.0))


def test_the_planner_hands_the_policy_the_overhead_measured_since_it_started() -> None:
    """At start no job has run (the prior overhead); once finished jobs show 0.25 s beyond
    their training, the planner's policy sees it."""
    tenants = [_tenant("a", TAB), _tenant("b", TAB)]
    planner = Planner("rate", slots=1)
    records: list[JobRecord] = []
    planner.decide(state_of(tenants, records), in_flight=[], tick=0)
    assert planner.loop is not None
    assert planner.loop.problem.job_overhead == JOB_OVERHEAD_PRIOR_S
    for tick, excess in enumerate((0.25, 0.25, 0.26), start=1):
        [job] = planner.decide(state_of(tenants, records), in_flight=[], tick=tick)
        done = dataclasses.replace(
            _record(job.tenant, job.candidate), cost_s=0.01, start_time=0.0, end_time=0.01 + excess
        )
        records.append(done)
        planner.decide(state_of(tenants, records), in_flight=[], tick=tick)
        assert planner.loop.problem.job_overhead == pytest.approx(0.25)


def test_a_tenants_weight_is_its_w_i_and_rate_serves_the_heavier_first() -> None:
    """Three identical tenants: with weights 1, 1, 1 rate starts with the first; with c at 5
    (its regret counts five times), with c. The weights reach `Problem.weights` unchanged."""
    plain = [_tenant("a", TAB), _tenant("b", TAB), _tenant("c", TAB)]
    heavy = [*plain[:2], dataclasses.replace(plain[2], weight=5.0)]
    assert _state(heavy, []).problem.weights.tolist() == [1.0, 1.0, 5.0]
    [first] = Planner("rate", slots=1).decide(_state(plain, []), in_flight=[], tick=0)
    assert first.tenant == "a"
    [first] = Planner("rate", slots=1).decide(_state(heavy, []), in_flight=[], tick=0)
    assert first.tenant == "c"


def test_the_independent_prior_ablation_keeps_the_arms_apart() -> None:
    """``prior="independent"``: the GP prior `build_problem` starts from (every arm mean 0.5,
    no correlation), whatever the other tenants' results; ``learnt`` (the default) learns
    from them; anything else is named."""
    from tasks._service import state_of

    tenants = [_tenant("a", TAB), _tenant("b", TAB)]
    records = [_record("a", c.name, acc=0.6 + 0.05 * k) for k, c in enumerate(candidates(TAB))]
    independent = state_of(tenants, records, prior="independent").problem.prior
    learnt = state_of(tenants, records).problem.prior
    assert independent is not None and learnt is not None
    np.testing.assert_allclose(independent.mean, 0.5)
    assert np.count_nonzero(independent.cov - np.diag(np.diag(independent.cov))) == 0
    assert not np.allclose(learnt.mean, independent.mean)
    with pytest.raises(
        ValueError, match="prior 'flat' is not valid: use one of learnt, independent"
    ):
        state_of(tenants, records, prior="flat")


def test_up_makes_the_rule_start_at_pending_on_process_pools_only() -> None:
    """`up`'s pools are process pools: its automation starts at Pending too; the file (what a
    Kubernetes pool gets, by hand) does not, since a pod may be Pending for minutes."""
    import yaml

    from tenantml.ops.servers import AUTOMATIONS, process_pool_automation

    file = yaml.safe_load(AUTOMATIONS.read_text())["trigger"]
    made = process_pool_automation()["trigger"]
    assert "prefect.flow-run.Pending" not in file["after"]
    assert {"prefect.flow-run.Pending", "prefect.flow-run.Submitting"} <= set(made["after"])
    assert "prefect.flow-run.Running" in made["expect"]
    assert set(file["after"]) < set(made["after"]) and made["within"] == file["within"]


def test_a_tenant_restricted_after_jobs_ran_keeps_what_it_serves_and_plans_within_its_models(
) -> None:  # fmt: skip
    # digits trained extra trees (0.95, served) and an SVM that failed when it is restricted to
    # LeNet (`submit --models`): both stay in the policy's view (a job still running does too,
    # as the dispatcher's in-flight job), only LeNet is chosen next
    allowed = ("lenet", "lenet+f1")
    recs = [_record("img", "pixels-extra_trees", acc=0.95),
            _record("img", "pixels-svm", status="FAILED")]  # fmt: skip
    img = _restrict(_tenant("img", IMG), allowed, recs)
    assert img.candidates == ("lenet", "pixels-extra_trees", "pixels-svm", "lenet+f1")
    assert _restrict(_tenant("img", IMG), None, recs) == _tenant("img", IMG)
    s = _state([img, _tenant("tab", TAB)], recs)
    assert [o.quality for o in s.history().log] == [0.95, 0.0]  # the served model counts
    for policy in ("rate", "roundrobin"):
        specs = Planner(policy, slots=2).decide(s, in_flight=[], tick=1)
        assert all(x.candidate in allowed for x in specs if x.tenant == "img")
    assert "img" in {x.tenant for x in specs}  # round robin's turn comes to it


def test_the_planner_starts_a_new_loop_when_a_tenants_models_or_weight_change() -> None:
    planner = Planner("rate", slots=1)
    tenants = [_tenant("img", IMG), _tenant("tab", TAB)]
    planner.decide(_state(tenants, []), in_flight=[], tick=1)
    first = planner.loop
    planner.decide(_state(tenants, []), in_flight=[], tick=2)
    assert planner.loop is first
    narrowed = [_restrict(tenants[0], ("lenet",), []), tenants[1]]
    specs = planner.decide(_state(narrowed, []), in_flight=[], tick=3)
    assert planner.loop is not first and all(x.candidate == "lenet" for x in specs
                                             if x.tenant == "img")  # fmt: skip
    second = planner.loop
    heavier = [narrowed[0], dataclasses.replace(narrowed[1], weight=3.0)]
    planner.decide(_state(heavier, []), in_flight=[], tick=4)
    assert planner.loop is not second


def test_a_cnns_predicted_cost_is_its_epochs_and_grid_where_a_scikit_learn_model_fits_once() -> (
    None
):
    """Before any job: an MLP (one fit) on 1,200 examples is predicted RELATIVE_COST x 1.2
    seconds, times its measured growth from the size RELATIVE_COST holds at and the prior's
    log-normal factor, LeNet (10 epochs x the learning-rate grid) RELATIVE_COST's ratio x 10
    |LR_GRID| (an epoch grows like the examples). After the tenant's scikit-learn jobs report
    their measured seconds, the ratio stays: on digits LeNet took 23 s and the MLP 0.6 s
    (bench-live), where a tenant scale learnt from one-fit jobs once predicted LeNet as cheap as
    the MLP."""
    from policy import Assignment, SchedulerLoop
    from trainers import LR_GRID
    from trainers.zoo import COST_GROWTH, RELATIVE_COST

    s = _state([_tenant("digits", IMG, n=1200)], [])
    k_mlp, k_lenet = s.catalogue.index("pixels-mlp"), s.catalogue.index("lenet")
    exponent, at = COST_GROWTH["pixels-mlp"]
    growth = (1200 / at) ** (exponent - 1)
    ratio = 10 * len(LR_GRID) * RELATIVE_COST["lenet"] / RELATIVE_COST["pixels-mlp"] / growth
    assert s.problem.cost[0, k_lenet] / s.problem.cost[0, k_mlp] == pytest.approx(ratio)
    assert s.problem.cost[0, k_mlp] == pytest.approx(
        RELATIVE_COST["pixels-mlp"] * 1.2 * growth * math.exp(0.5 * (1.0 + 0.5)), rel=1e-6
    )
    records = [
        dataclasses.replace(_record("digits", c), cost_s=0.6)
        for c in ("pixels-mlp", "pixels-svm", "pixels-knn")
    ]
    state = _state([_tenant("digits", IMG, n=1200)], records)
    loop = SchedulerLoop(state.problem, state.history(), slots=1)
    lenet = loop.expected_cost(Assignment(0, k_lenet))
    assert lenet >= 10 * loop.expected_cost(Assignment(0, k_mlp)) and lenet > 5.0


def test_a_models_predicted_cost_grows_with_the_examples_as_measured() -> None:
    """A polynomial SVM's cost grows far faster than the examples and a forest's about like
    them (`trainers.zoo.COST_GROWTH`, measured by ``infra/scripts/time_sklearn_arms.py
    --growth``): before any job the SVM of a tenant of 12,000 rows is predicted
    ``8^(e_svm - e_forest)`` times dearer against its forest than at 1,500. A tenant at the size
    RELATIVE_COST holds at is predicted RELATIVE_COST's ratio. A cross-validated tenant of
    1,000 rows grows by its examples, not by the 6.25 times them its folds' work counts (a
    fold's fit sees about the examples), and one of 48,000 like its examples past the 12,000
    the growths were measured up to."""
    from trainers.zoo import COST_GROWTH, RELATIVE_COST

    svm, forest = "svm-poly-c4-r10", "random_forest"
    at = COST_GROWTH[svm][1]
    from trainers.zoo import GROWTH_MEASURED_UP_TO

    assert GROWTH_MEASURED_UP_TO == 12000
    tenants = [_tenant(f"t{n}", TAB, n=n) for n in (1500, 12000, round(at), 1000, 48000)]
    s = _state(tenants, [])
    k_svm, k_forest = s.catalogue.index(svm), s.catalogue.index(forest)
    ratio = s.problem.cost[:, k_svm] / s.problem.cost[:, k_forest]
    steeper = COST_GROWTH[svm][0] - COST_GROWTH[forest][0]
    assert steeper > 0.5  # what the measurement says; the growths below follow it
    assert ratio[1] / ratio[0] == pytest.approx(8.0**steeper, rel=1e-6)
    assert ratio[2] == pytest.approx(RELATIVE_COST[svm] / RELATIVE_COST[forest], rel=1e-3)
    assert ratio[3] / ratio[0] == pytest.approx((1000 / 1500) ** steeper, rel=1e-6)
    assert ratio[4] == pytest.approx(ratio[1], rel=1e-9)


def test_the_planner_learns_a_models_cost_from_the_other_tenants_jobs() -> None:
    """On tenants a and b the SVM took 40x the k-NN's seconds; tenant c has run nothing, and
    the planner's loop (refitted from the history when it starts) expects c's SVM dearer,
    relative to its k-NN, than `build_problem`'s prior does."""
    tenants = [_tenant("a", TAB), _tenant("b", TAB), _tenant("c", TAB)]
    records = [
        dataclasses.replace(_record(t, cand), cost_s=cost, start_time=0.0, end_time=cost + 0.2)
        for t in ("a", "b")
        for cand, cost in (("knn", 0.05), ("svm", 2.0))
    ]
    state = state_of(tenants, records, prior="independent")
    planner = Planner("rate", slots=1)
    planner.decide(state, in_flight=[], tick=1)
    assert planner.loop is not None
    knn, svm = (Assignment(2, state.catalogue.index(m)) for m in ("knn", "svm"))
    hand_set = state.problem.cost[2, svm.arm] / state.problem.cost[2, knn.arm]
    learnt = planner.loop.expected_cost(svm) / planner.loop.expected_cost(knn)
    assert learnt > 3.0 * hand_set
    assert planner.loop.problem.cost_prior is not state.problem.cost_prior
