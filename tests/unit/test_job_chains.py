"""Short jobs chained into one flow run (issue 18, item 5): the planner chains the policy's picks
while their expected seconds fit in ``chain_s`` and never a pick that does not; every chained job
is pending for the policy and never sent twice; a chain survives the JSON of a flow run's
parameters; the dispatcher counts runs against the capacity and reports every job of a run."""

from __future__ import annotations

import dataclasses
import json
import time
from concurrent.futures import Future
from pathlib import Path
from typing import Any

import pytest

from tasks._dispatch import LocalDispatcher
from tasks._service import MAX_CHAIN, JobSpec, Planner, ServiceState, count_jobs
from tests.unit.test_service_logic import TAB, _record, _state, _tenant


def _tenants(n: int = 3) -> list[Any]:
    return [_tenant(name, TAB) for name in "abcdefgh"[:n]]


def test_without_chain_s_a_run_holds_one_job() -> None:
    jobs = Planner("roundrobin", slots=2).decide(_state(_tenants(), []), in_flight=[], tick=1)
    assert len(jobs) == 2 and all(j.then == () for j in jobs)


def test_short_jobs_are_chained_up_to_chain_s_and_never_twice() -> None:
    planner = Planner("roundrobin", slots=2)
    state = _state(_tenants(), [])
    runs = planner.decide(state, in_flight=[], tick=1, chain_s=5.0, sleep_s=1.0)
    assert len(runs) == 2  # one run per free slot
    for run in runs:
        chain = run.chain()
        assert len(chain) == 5  # 5 x 1 s fit in 5 s
        assert {j.slot for j in chain} == {run.slot} and {j.tick for j in chain} == {1}
        assert all(j.sleep_s == 1.0 and j.then == () for j in chain)
    every = [(j.tenant, j.job_id) for run in runs for j in run.chain()]
    assert len(every) == len(set(every)) == 10
    assert count_jobs(runs) == 10
    # All ten are pending: with both slots' runs in flight nothing more is sent...
    assert planner.decide(state, in_flight=runs, tick=2, chain_s=5.0, sleep_s=1.0) == []
    # ...and the next run repeats none of them.
    [more] = planner.decide(state, in_flight=runs[1:], tick=2, chain_s=5.0, sleep_s=1.0)
    assert not {(j.tenant, j.job_id) for j in more.chain()} & set(every[5:])


def test_a_pick_longer_than_what_is_left_is_not_chained() -> None:
    planner = Planner("roundrobin", slots=1)
    state = _state(_tenants(), [])
    [run] = planner.decide(state, in_flight=[], tick=1, chain_s=2.5, sleep_s=1.0)
    assert len(run.chain()) == 2  # a third 1-s job would pass 2.5 s
    # The refused pick went back to the policy: the loop holds only what was sent.
    assert planner.loop is not None and len(planner.loop.pending) == 2
    [long] = planner.decide(state, in_flight=[], tick=1, chain_s=2.5, sleep_s=3.0)
    assert long.then == ()  # one job already longer than chain_s


def _order(slots: int, prefetch: int, chain_s: float) -> tuple[list[JobSpec], list[Any]]:
    """The runs of a first decision, and the policy's picks in its order (the same planner
    state deciding once more, with nothing sent, one job per run and one slot per run)."""
    state = _state(_tenants(8), [])
    kw: dict[str, Any] = {"prefetch": prefetch, "lock_dir": "/locks"} if prefetch else {}
    runs = Planner("roundrobin", slots=slots, **kw).decide(
        state, in_flight=[], tick=1, chain_s=chain_s, sleep_s=1.0
    )
    n = sum(len(r.chain()) for r in runs)
    picks = Planner("roundrobin", slots=n).decide(state, in_flight=[], tick=1, sleep_s=1.0)
    return runs, [(j.tenant, j.job_id) for j in picks]


def test_a_slots_runs_take_the_policys_picks_in_its_order() -> None:
    """One slot with a prefetched run: the first run takes the policy's first picks, the
    prefetched one the next, so the slot (which trains its runs in turn, `SlotHold`) trains
    them in the policy's order. Before, both runs' heads were the first two picks, and the
    prefetched run's jobs could train between the first run's."""
    runs, picks = _order(slots=1, prefetch=1, chain_s=3.0)
    assert [len(r.chain()) for r in runs] == [3, 3]
    assert [(j.tenant, j.job_id) for r in runs for j in r.chain()] == picks


def test_two_slots_take_the_policys_picks_in_turn() -> None:
    """Two slots train at once: the picks alternate between them, so the policy's first picks
    (each tenant's first model) train first on both rather than all on one slot."""
    runs, picks = _order(slots=2, prefetch=0, chain_s=3.0)
    first, second = (r.chain() for r in runs)
    assert [(j.tenant, j.job_id) for j in first] == picks[0::2]
    assert [(j.tenant, j.job_id) for j in second] == picks[1::2]
    assert {j.slot for j in first} == {0} and {j.slot for j in second} == {1}


def test_a_chain_is_at_most_max_chain_jobs() -> None:
    state = _state(_tenants(8), [])
    [run] = Planner("roundrobin", slots=1).decide(
        state, in_flight=[], tick=1, chain_s=1000.0, sleep_s=1.0
    )
    assert len(run.chain()) == MAX_CHAIN


def test_costs_in_dollars_are_not_chained() -> None:
    base = _state(_tenants(), [])
    usd_per_s = (1e-4,) * len(base.catalogue)
    usd = ServiceState(base.tenants, [], base.problem, base.catalogue, usd_per_s)
    [run] = Planner("roundrobin", slots=1).decide(usd, in_flight=[], tick=1, chain_s=60.0)
    assert run.then == ()


def test_nothing_is_chained_before_a_job_has_measured_the_overhead() -> None:
    """Before any job finished, a job's expected seconds rest on the embedded service's overhead
    prior (0.15 s); a server home with authentication took 8 s a job, and a first tick of 16
    chained picks per run ran for minutes (`run --ticks 2` past 300 s in CI)."""
    tenants = _tenants()
    [first] = Planner("roundrobin", slots=1).decide(
        _state(tenants, []), in_flight=[], tick=1, chain_s=10.0
    )
    assert first.then == ()
    # One finished job (span 1 s, training 1 s: no overhead) and the next run is chained.
    done = [_record(first.tenant, first.candidate)]
    [nxt] = Planner("roundrobin", slots=1).decide(
        _state(tenants, done), in_flight=[], tick=2, chain_s=10.0
    )
    assert len(nxt.chain()) > 1
    # Where the prior is this service's own measurement (jobs trained in the scheduler's
    # process, as embedded), the first tick is chained on it.
    [known] = Planner("roundrobin", slots=1, overhead_known=True).decide(
        _state(tenants, []), in_flight=[], tick=1, chain_s=10.0
    )
    assert len(known.chain()) > 1


def test_finished_jobs_leave_the_policys_pending() -> None:
    planner = Planner("roundrobin", slots=1)
    tenants = _tenants()
    [run] = planner.decide(_state(tenants, []), in_flight=[], tick=1, chain_s=3.0, sleep_s=1.0)
    records = [_record(j.tenant, j.candidate) for j in run.chain()]
    [nxt] = planner.decide(_state(tenants, records), in_flight=[], tick=2, chain_s=3.0, sleep_s=1.0)
    assert not {(j.tenant, j.candidate) for j in nxt.chain()} & {
        (j.tenant, j.candidate) for j in run.chain()
    }


def test_a_chains_finished_jobs_are_results_not_pending() -> None:
    """A job of a chain still in flight that MLflow shows FINISHED is in the policy's history;
    it is no longer also pending (hallucinated at its posterior mean)."""
    from policy import Assignment

    planner = Planner("roundrobin", slots=2)
    tenants = _tenants()
    [run, _] = planner.decide(_state(tenants, []), in_flight=[], tick=1, chain_s=3.0, sleep_s=1.0)
    first, *rest = run.chain()
    done = dataclasses.replace(_record(first.tenant, first.candidate), job_id=first.job_id)
    state = _state(tenants, [done])
    ti, mi = state.index()
    [new] = planner.decide(state, in_flight=[run], tick=2, chain_s=3.0, sleep_s=1.0)
    assert planner.loop is not None
    assert planner.loop.pending == tuple(
        Assignment(ti[j.tenant], mi[j.candidate]) for j in (*rest, *new.chain())
    )
    assert (first.tenant, first.candidate) not in {(j.tenant, j.candidate) for j in new.chain()}


def test_a_chain_survives_a_flow_runs_json_parameters() -> None:
    [run] = Planner("roundrobin", slots=1).decide(
        _state(_tenants(), []), in_flight=[], tick=1, chain_s=3.0, sleep_s=1.0
    )
    back = JobSpec(**json.loads(json.dumps(run.params())))
    assert back == run and all(isinstance(j, JobSpec) for j in back.then)
    assert back.chain()[0] == JobSpec(**{**run.params(), "then": ()})


def test_the_dispatcher_counts_runs_and_reports_every_job_of_one() -> None:
    [run] = Planner("roundrobin", slots=1).decide(
        _state(_tenants(), []), in_flight=[], tick=1, chain_s=3.0, sleep_s=1.0
    )
    sent: list[dict[str, Any]] = []

    def train(params: dict[str, Any]) -> None:
        sent.append(params)

    d = LocalDispatcher(1, train)
    d.submit(run)
    assert len(d.in_flight) == 1 and count_jobs(d.in_flight) == 3
    d.close()  # waits for the thread
    done = d.poll()
    assert [x.spec.job_id for x in done] == [j.job_id for j in run.chain()]
    assert all(x.ok for x in done) and d.in_flight == []
    assert len(sent) == 1 and len(sent[0]["then"]) == 2  # one flow run for the three


def test_a_failed_chain_reports_each_job_failed_after_its_attempts() -> None:
    [run] = Planner("roundrobin", slots=1).decide(
        _state(_tenants(), []), in_flight=[], tick=1, chain_s=2.0, sleep_s=1.0
    )
    calls: list[int] = []

    def train(params: dict[str, Any]) -> None:
        calls.append(1)
        raise RuntimeError("boom")

    d = LocalDispatcher(1, train, max_attempts=2)
    d.submit(run)
    done: list[Any] = []
    for _ in range(200):
        done += d.poll()
        if done:
            break
        fut: Future[Any] = next(iter(d.jobs.values())).handle
        fut.exception()  # wait for the attempt
    d.close()
    assert len(calls) == 2 and len(done) == 2 and not any(x.ok for x in done)
    assert "boom" in done[0].detail


def test_a_poll_cut_short_by_an_outage_loses_no_ended_run() -> None:
    """`poll` takes an ended run off the list as it goes; an outage while it checks a later
    run raised out of it, and the runs it had taken were never reported (no result, no
    `record`, a left job not pending). Now the next poll returns them."""
    from dataclasses import dataclass as _dc

    from tasks._dispatch import _Base

    @_dc
    class Flaky(_Base):
        down: bool = True

        def _start(self, spec: JobSpec) -> str:
            return spec.job_id

        def _state(self, handle: Any) -> tuple[bool, bool, str]:
            if handle == "b" and self.down:
                raise ConnectionError("the Prefect server does not answer")
            return handle == "a", True, "COMPLETED"

    d = Flaky(2)
    for job_id in ("a", "b"):
        d.submit(JobSpec("t", "svm", 1, job_id, 1, "rate", None, 1))
    with pytest.raises(ConnectionError):
        d.poll()
    d.down = False
    assert [x.spec.job_id for x in d.poll()] == ["a"] and d.poll() == []
    assert [s.job_id for s in d.in_flight] == ["b"]


@pytest.mark.parametrize("chain_s", [-1.0, float("nan")])
def test_a_bad_chain_s_is_refused_before_anything_starts(chain_s: float) -> None:
    from tasks import SchedulerOptions

    fields: dict[str, Any] = dict(
        ticks=1, policy=None, slots=None, max_epochs=1, job_budget_s=None, sleep_s=None,
        poll_s=0.5, refresh_s=5.0, seed=0, stop_when_idle=False, dispatch="auto", prefetch=None,
        seer_budget_x=None, outage_patience_s=None, prior="learnt",
    )  # fmt: skip
    with pytest.raises(ValueError, match="chain_s"):
        SchedulerOptions(**fields, chain_s=chain_s)


def test_a_refused_pick_keeps_its_turn() -> None:
    """Round robin's turn is the picker's state: a pick not chained (too long for what is left)
    goes back as if never made, so its tenant heads the next run instead of being skipped."""
    planner = Planner("roundrobin", slots=1)
    state = _state(_tenants(3), [])
    heads = []
    for tick in range(3):
        [run] = planner.decide(state, in_flight=[], tick=tick, chain_s=1.5, sleep_s=1.0)
        assert run.then == ()  # a second 1-s job would pass 1.5 s
        heads.append(run.tenant)
    assert heads == ["a", "b", "c"]


def test_a_restarted_scheduler_adopts_a_held_chain_once(monkeypatch: pytest.MonkeyPatch) -> None:
    """A chain's run that Prefect still holds is adopted whole: its job RUNNING in MLflow is not
    also adopted (or sent) on its own, which would track one flow run twice and, if it failed,
    train that job twice at once. Its job that finished before is not told or counted again
    (it is in `Progress.told`: recorded when the run ends) nor shown as resumed."""
    from types import SimpleNamespace

    import tasks._loop as steps

    [run] = Planner("roundrobin", slots=1).decide(
        _state(_tenants(), []), in_flight=[], tick=1, chain_s=3.0, sleep_s=1.0
    )
    head, member = run.chain()[:2]
    training = dataclasses.replace(
        _record(member.tenant, member.candidate, "RUNNING", 0.0), flow_run_id="fr-1"
    )
    trained = dataclasses.replace(_record(head.tenant, head.candidate), job_id=head.job_id)
    state = _state(_tenants(), [trained, training])
    monkeypatch.setattr(steps, "refresh", lambda *args, **kwargs: state)
    monkeypatch.setattr(steps, "redo_promotions", lambda svc, state: None)

    class Dispatcher:
        in_flight: list[JobSpec] = []

        def __init__(self) -> None:
            self.adopted: list[tuple[str, str]] = []
            self.sent: list[JobSpec] = []

        def left_going(self) -> list[tuple[JobSpec, str]]:
            return [(run, "fr-1")]

        def adopt(self, spec: JobSpec, flow_run_id: str, *, listed: bool = False) -> bool:
            assert listed  # held by the back-end: listed just now, not read again
            self.adopted.append((spec.job_id, flow_run_id))
            return True

        def submit(self, spec: JobSpec) -> None:
            self.sent.append(spec)

    d = Dispatcher()
    settings = SimpleNamespace(capacity_prices=None)
    svc = SimpleNamespace(client=None, store=None, settings=settings, patience_s=1.0, slots=1,
                          options=SimpleNamespace(prior="learnt"), dispatcher=d,
                          stop=steps.StopRequest(), sole_home=None)  # fmt: skip
    events: list[Any] = []
    with steps.listen(events.append):
        progress = steps.resume_orphans(svc)  # type: ignore[arg-type]
    assert d.adopted == [(run.job_id, "fr-1")] and d.sent == []
    assert progress.told == {(head.tenant, head.job_id)} and svc.stop.told is progress.told
    assert [e.job_id for e in events] == [j.job_id for j in run.chain()[1:]]  # resumed


class _SendingDispatcher:
    """What `resume_orphans` needs of a dispatcher: nothing held, and what it sends kept."""

    in_flight: list[JobSpec] = []

    def __init__(self) -> None:
        self.sent: list[JobSpec] = []

    def left_going(self) -> list[tuple[JobSpec, str]]:
        return []

    def submit(self, spec: JobSpec) -> None:
        self.sent.append(spec)


def _params_client(params: dict[str, dict[str, str]]) -> Any:
    """A client whose runs (by id) have `params` (none for an id not in it): `_orphan_spec`."""
    from types import SimpleNamespace

    return SimpleNamespace(
        get_run=lambda run_id: SimpleNamespace(
            data=SimpleNamespace(params=params.get(run_id, {}), tags={})
        ),
        set_tag=lambda run_id, key, value: None,
        get_experiment_by_name=lambda name: None,  # no scheduler ever recorded
    )


def test_a_restarted_scheduler_leaves_a_seer_run_job_to_its_live_process(
    monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    """Jobs RUNNING in MLflow when a scheduler starts. One of `tenantml seer run` (`BY_HAND`)
    whose process still runs, or may (another machine or container, or no process recorded),
    is left to it: sent again, two processes trained the same trials into the same
    checkpoints. One whose process has ended (a Ctrl-C, a crash) is sent again, so it
    finishes. The scheduler's own jobs are sent again, unless their latest attempt's process
    still runs here (its flow run marked crashed while it trained): left to it too. Every job
    left is pending for the policy (`Progress.left`)."""
    import socket
    import subprocess
    import sys
    from types import SimpleNamespace

    import tasks._loop as steps
    from mlflow_plugin.tracking import process_tag
    from tasks import BY_HAND

    live = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(60)"])
    ended = subprocess.Popen([sys.executable, "-c", "pass"])
    ended_tag = process_tag(ended.pid)
    ended.wait()
    live_tag = process_tag(live.pid)
    far = live_tag.partition("@")[0] + "@node-b/boot/1"

    def running(tenant: str, cand: str, job_id: str, **tags: Any) -> Any:
        r = _record(tenant, cand, "RUNNING", 0.0)
        return dataclasses.replace(r, run_id=job_id, job_id=job_id, **tags)

    records = [
        running("a", "lenet", "seer-live", policy=BY_HAND, process=live_tag),
        running("a", "svm", "seer-far", policy=BY_HAND, process=far),
        running("a", "knn", "seer-old", policy=BY_HAND, process=None),
        running("b", "lenet", "seer-ended", policy=BY_HAND, process=ended_tag),
        running("c", "svm", "own", policy="rate", process=live_tag),
        running("c", "knn", "own-ended", policy="rate", process=ended_tag),
        running("c", "lenet", "own-far", policy="rate", process=far),  # a lost node's, maybe
    ]
    state = _state(_tenants(), records)
    monkeypatch.setattr(steps, "refresh", lambda *args, **kwargs: state)
    monkeypatch.setattr(steps, "redo_promotions", lambda svc, state: None)

    d = _SendingDispatcher()
    from tasks._seer import SeerOptions

    # each run's params as `train_job` logs them (none: an older run's): a job sent again, or
    # left, keeps its epochs, its time limit (in seconds only once `limit_unit` says so: a
    # spot pool's went out in dollars before) and its SEER options
    seer = {k: str(v) for k, v in SeerOptions(2.0, 8.0).to_params().items()}
    params = {
        "seer-live": {"time_budget_s": "None", **seer},
        "own-ended": {"max_epochs": "3", "time_budget_s": "12.5", "limit_unit": "s"},
        "seer-far": seer,
        "own-far": {"max_epochs": "2", "time_budget_s": "0.0135"},  # dollars, before the unit
    }
    client = _params_client(params)
    svc = SimpleNamespace(client=client, store=None, patience_s=1.0, slots=1, lock_dir=None,
                          settings=SimpleNamespace(capacity_prices=None), policy="rate",
                          options=SimpleNamespace(prior="learnt", max_epochs=1, sleep_s=0.5),
                          dispatcher=d, stop=steps.StopRequest(), sole_home=None)  # fmt: skip
    events: list[Any] = []
    try:
        with steps.listen(events.append):
            progress = steps.resume_orphans(svc)  # type: ignore[arg-type]
    finally:
        live.kill()
        live.wait()
    # a dispatch benchmark's sleep jobs (``sleep_s``) stand in for its own jobs, never for the
    # `seer run` job it resumes (it finished one with accuracy 0 and no model)
    sent = {s.job_id: s.sleep_s for s in d.sent}
    assert sent == {"own-ended": 0.5, "own-far": 0.5, "seer-ended": None}
    limits = {s.job_id: (s.max_epochs, s.time_budget_s) for s in d.sent}
    assert limits == {"own-ended": (3, 12.5), "own-far": (2, None), "seer-ended": (1, None)}
    left = [e for e in events if isinstance(e, steps.JobLeft)]
    assert [(e.job_id, e.seer_run) for e in left] == [
        ("seer-live", True), ("seer-far", True), ("seer-old", True), ("own", False)]  # fmt: skip
    # all pending: while their process runs here, or as long as they may take (one this
    # machine cannot see; `still_left`), with their SEER options (its deadline is that time)
    assert {job for _, job in progress.left} == {"seer-live", "seer-far", "seer-old", "own"}
    assert progress.left[("a", "seer-live")][0].seer == SeerOptions(2.0, 8.0).as_dict()
    # the live process has ended by now: 60 s of grace for its jobs; the one on a place this
    # machine cannot see stays pending for its 2-minute deadline; those with none for 60 s
    soon = {job for _, job in steps.still_left(state, progress.left, time.monotonic() + 30.0)}
    later = {job for _, job in steps.still_left(state, progress.left, time.monotonic() + 90.0)}
    assert soon == {"seer-live", "seer-far", "seer-old", "own"} and later == {"seer-far"}
    assert not steps.still_left(state, progress.left, time.monotonic() + 130.0)
    from tenantml.cli.service import _event_line

    line = _event_line(left[0])
    assert line.startswith("left a lenet (seer-live) to its `tenantml seer run`"), line
    assert f"(process {live.pid} on {socket.gethostname()})" in line
    out = capsys.readouterr().out
    for job in ("seer-live", "seer-far", "seer-old"):
        assert f"leaving a/{job} to its `tenantml seer run`" in out, out


def test_a_restarted_scheduler_sends_again_a_job_that_failed_while_none_watched_it(
    monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    """A job whose run failed between a scheduler's death and the next one's start was never
    sent again: the dead scheduler would have (it had attempts left), and the next one took
    only RUNNING jobs over. The bounded chaos run lost a job so (FAILED in a killed worker's
    process). Failed and sent again: only since the earlier scheduler started (older failures
    were its to see; a home of an older version has no `GAVE_UP` tags), not one a scheduler
    gave up on (`GAVE_UP`), not a `seer run`'s, not one whose process still runs here (between
    the train flow's own retries)."""
    import subprocess
    import sys
    from types import SimpleNamespace

    import tasks._loop as steps
    from mlflow_plugin.tracking import process_tag
    from tasks import BY_HAND

    def failed(tenant: str, cand: str, job_id: str, **fields: Any) -> Any:
        r = dataclasses.replace(_record(tenant, cand, "FAILED", 0.0), end_time=1000.0)
        return dataclasses.replace(r, run_id=job_id, job_id=job_id, **fields)

    live = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(60)"])
    records = [
        failed("a", "lenet", "unwatched"),
        failed("a", "svm", "before-the-last-scheduler", end_time=900.0),
        failed("b", "knn", "given-up", gave_up=True),
        failed("c", "svm", "by-hand", policy=BY_HAND),
        failed("c", "knn", "retrying", process=process_tag(live.pid)),
        # failed before the last scheduler, which sent it again and died while it waited
        failed("b", "mlp", "resent-then-lost", end_time=900.0, resent_at=960.0),
        failed("b", "svm", "resent-before-it", end_time=900.0, resent_at=940.0),
        dataclasses.replace(_record("a", "knn"), job_id="done"),
    ]
    state = _state(_tenants(), records)
    monkeypatch.setattr(steps, "refresh", lambda *args, **kwargs: state)
    monkeypatch.setattr(steps, "redo_promotions", lambda svc, state: None)
    monkeypatch.setattr(steps, "previous_scheduler_start", lambda client, exclude: 950.0)

    d = _SendingDispatcher()
    params = {"unwatched": {"max_epochs": "4", "time_budget_s": "30.0", "limit_unit": "s"}}
    tagged: list[tuple[str, str, int]] = []  # (run, tag, jobs sent by then)
    client = _params_client(params)
    client.set_tag = lambda run_id, key, value: tagged.append((run_id, key, len(d.sent)))
    svc = SimpleNamespace(client=client, store=None, patience_s=1.0, slots=1, lock_dir=None,
                          settings=SimpleNamespace(capacity_prices=None), policy="rate",
                          options=SimpleNamespace(prior="learnt", max_epochs=1, sleep_s=None),
                          dispatcher=d, stop=steps.StopRequest(), sole_home=None)  # fmt: skip
    events: list[Any] = []
    try:
        with steps.listen(events.append):
            steps.resume_orphans(svc)  # type: ignore[arg-type]
    finally:
        live.kill()
        live.wait()
    assert [(s.tenant, s.job_id, s.max_epochs, s.time_budget_s) for s in d.sent] == [
        ("a", "unwatched", 4, 30.0), ("b", "resent-then-lost", 1, None)]  # fmt: skip
    assert [e.job_id for e in events] == ["unwatched", "resent-then-lost"]
    assert all(e.resumed for e in events)
    # each marked sent again, so that it is not lost should this scheduler die before it runs
    from mlflow_plugin.tracking import RESENT_AT

    # (marked before it is sent, both before either: a scheduler that dies between the two
    # leaves it marked; one that holds them back behind a suspect, too: test_crash_suspects)
    assert [(run, sent) for run, key, sent in tagged if key == RESENT_AT] == [
        ("unwatched", 0), ("resent-then-lost", 0)]  # fmt: skip
    out = capsys.readouterr().out
    assert "sending a/unwatched again: it failed with no scheduler to retry it" in out
    assert "left running" not in out  # it was not: it failed
    # no scheduler ever ran on this home: no failure was a scheduler's to retry
    monkeypatch.setattr(steps, "previous_scheduler_start", lambda client, exclude: None)
    d.sent.clear()
    steps.resume_orphans(svc)  # type: ignore[arg-type]
    assert d.sent == []


def test_a_job_whose_attempts_are_spent_is_marked_given_up(
    tracking: Any, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The scheduler marks a job that ended failed with its back-end's attempts spent
    (`GAVE_UP`, real MLflow): the next scheduler leaves it failed (the test above)."""
    from types import SimpleNamespace

    import tasks._loop as steps
    from mlflow_plugin import JobRun, job_records
    from mlflow_plugin.tracking import GAVE_UP
    from tasks._dispatch import Done

    exp = tracking.create_experiment("given-up")
    run = JobRun.start(tracking, exp, tenant="a", job_id="knn-s1", candidate="knn", snapshot=1,
                       policy="rate", tick=1)  # fmt: skip
    run.end(ok=False)
    [rec] = job_records(tracking, [exp])
    assert rec.status == "FAILED" and not rec.gave_up
    state = _state(_tenants(), [rec])
    spec = JobSpec("a", "knn", 1, "knn-s1", 1, "rate", None, 2)

    class Dispatcher:
        in_flight: list[JobSpec] = []

        def poll(self) -> list[Done]:
            return [Done(spec, False, 0.5, "FAILED: Flow run encountered an exception")]

    svc = SimpleNamespace(dispatcher=Dispatcher(), client=tracking, store=None,
                          settings=SimpleNamespace(capacity_prices=None),
                          options=SimpleNamespace(refresh_s=10.0, prior="learnt"))  # fmt: skip
    progress = steps.Progress(state, 0.0, 0, None)  # type: ignore[arg-type]
    monkeypatch.setattr(steps, "refresh", lambda *args, **kwargs: state)
    monkeypatch.setattr(steps, "publish_leaderboards", lambda *args, **kwargs: None)
    steps.record_finished_jobs(svc, progress)  # type: ignore[arg-type]
    [again] = job_records(tracking, [exp])
    assert again.gave_up and progress.jobs_done == 1
    tags = tracking.get_run(rec.run_id).data.tags
    assert tags[GAVE_UP] == "FAILED: Flow run encountered an exception"


def test_a_failed_job_sent_again_is_not_lost_when_that_scheduler_dies_before_it_runs(
    tracking: Any, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A job failed while no scheduler watched it; the next scheduler sends it again at its
    start and dies while the job still waits for its slot (real MLflow: the run stays FAILED
    with its old end). The one after counts it failed from when it was sent again
    (`RESENT_AT`), so it sends it once more; before, its end was older than the dead
    scheduler's start, and it was never trained again."""
    import subprocess
    import sys
    import time
    from types import SimpleNamespace

    import tasks._loop as steps
    from mlflow_plugin import JobRun, job_records
    from mlflow_plugin.tracking import PROCESS, process_tag

    exp = tracking.create_experiment("resent")
    run = JobRun.start(tracking, exp, tenant="a", job_id="knn-s1", candidate="knn", snapshot=1,
                       policy="rate", tick=1)  # fmt: skip
    run.end(ok=False)
    ended = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(60)"])
    tracking.set_tag(run.run_id, PROCESS, process_tag(ended.pid))  # it failed in a worker
    ended.kill()
    ended.wait()
    [rec] = job_records(tracking, [exp])
    monkeypatch.setattr(
        steps, "refresh", lambda *a, **k: _state(_tenants(), job_records(tracking, [exp]))
    )
    monkeypatch.setattr(steps, "redo_promotions", lambda svc, state: None)

    def start(scheduler_started: float) -> list[JobSpec]:
        monkeypatch.setattr(steps, "previous_scheduler_start", lambda c, e: scheduler_started)
        d = _SendingDispatcher()
        svc = SimpleNamespace(client=tracking, store=None, patience_s=1.0, slots=1,
                              lock_dir=None, settings=SimpleNamespace(capacity_prices=None),
                              policy="rate", options=SimpleNamespace(prior="learnt",
                              max_epochs=1, sleep_s=None), dispatcher=d,
                              stop=steps.StopRequest(), sole_home=None)  # fmt: skip
        steps.resume_orphans(svc)  # type: ignore[arg-type]
        return d.sent

    assert rec.end_time is not None
    time.sleep(0.05)  # the second scheduler starts after the job's end
    # the second scheduler: the job failed after the first started; sent again, and marked
    assert [s.job_id for s in start(rec.end_time - 1.0)] == ["knn-s1"]
    [marked] = job_records(tracking, [exp])
    assert marked.status == "FAILED" and marked.resent_at is not None
    assert marked.end_time == rec.end_time and marked.end_time < marked.resent_at - 0.01
    # it died before the job ran; the third (the second started just before it sent): the
    # job is sent again, not lost, though its end is older than the second's start
    assert [s.job_id for s in start(marked.resent_at - 0.01)] == ["knn-s1"]
    # a scheduler that started after the last send and saw it through would not
    assert start(time.time() + 60.0) == []


def test_a_job_three_schedulers_died_while_it_trained_alone_in_them_is_given_up(
    tracking: Any, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    """Embedded, a job trains in its scheduler's threads: one that kills the process (memory,
    a crash in native code) took every later scheduler down with it, resumed each time. A
    scheduler that died without ending its run (real MLflow) while the job trained alone in its
    process counts against the job, once per scheduler; at the third the next scheduler gives
    it up (FAILED, tried with no model). Not counted: a stop by a signal (the run ended
    KILLED), a death with two jobs training in the process (which killed it?), a death of
    another process the job ran in (a worker's), a scheduler that still runs."""
    import subprocess
    import sys
    from types import SimpleNamespace

    import mlflow

    import tasks._loop as steps
    from mlflow_plugin import JobRun, job_records
    from mlflow_plugin.tracking import (
        CRASHES,
        GAVE_UP,
        PROCESS,
        SCHEDULER_EXPERIMENT,
        process_tag,
    )
    from tasks._crashes import died_scheduler

    exp = tracking.create_experiment("crashing")
    for job_id, cand in (("mlp-s1", "mlp"), ("knn-s1", "knn")):
        job = JobRun.start(tracking, exp, tenant="a", job_id=job_id, candidate=cand,
                           snapshot=1, policy="rate", tick=1)  # fmt: skip
        mlflow.end_run()  # no longer this process's active run; left RUNNING, as a crash does
        tracking.update_run(job.run_id, status="RUNNING")
    runs = {r.job_id: r.run_id for r in job_records(tracking, [exp])}
    schedulers = tracking.create_experiment(SCHEDULER_EXPERIMENT)

    def ended_process() -> str:
        proc = subprocess.Popen([sys.executable, "-c", "pass"])
        tag = process_tag(proc.pid)
        proc.wait()
        return tag

    def scheduler_ended(status: str | None, together: bool = False) -> None:
        """A scheduler trained mlp-s1 in its own process and ended so (None: died, its run
        left RUNNING); knn-s1 trained in a worker's process, which died too, or `together`
        in the scheduler's beside mlp-s1."""
        tag = ended_process()
        run = tracking.create_run(schedulers, tags={PROCESS: tag})
        if status is not None:
            tracking.set_terminated(run.info.run_id, status)
        tracking.set_tag(runs["mlp-s1"], PROCESS, tag)
        tracking.set_tag(runs["knn-s1"], PROCESS, tag if together else ended_process())

    monkeypatch.setattr(
        steps, "refresh", lambda *a, **k: _state(_tenants(), job_records(tracking, [exp]))
    )
    monkeypatch.setattr(steps, "redo_promotions", lambda svc, state: None)
    d = _SendingDispatcher()
    svc = SimpleNamespace(client=tracking, store=None, patience_s=1.0, slots=1, lock_dir=None,
                          settings=SimpleNamespace(capacity_prices=None), policy="rate",
                          options=SimpleNamespace(prior="learnt", max_epochs=1, sleep_s=None),
                          dispatcher=d, stop=steps.StopRequest(), sole_home=None)  # fmt: skip
    progress: Any = None

    def restart() -> tuple[list[str], list[Any]]:
        nonlocal progress
        d.sent.clear()
        events: list[Any] = []
        with steps.listen(events.append):
            progress = steps.resume_orphans(svc)  # type: ignore[arg-type]
        return sorted(s.job_id for s in d.sent), events

    def crashes() -> tuple[str | None, str | None]:
        return tuple(tracking.get_run(runs[j]).data.tags.get(CRASHES) for j in runs)  # type: ignore[return-value]

    both = ["knn-s1", "mlp-s1"]
    scheduler_ended("KILLED")  # Ctrl-C
    assert restart()[0] == both and crashes() == (None, None)
    scheduler_ended(None)
    assert restart()[0] == both and crashes() == ("1", None)
    # the next start ended before its own run began: that death is not counted again
    assert restart()[0] == both and crashes() == ("1", None)
    scheduler_ended(None, together=True)  # two jobs in the process: neither is the suspect
    assert restart()[0] == both and crashes() == ("1", None)
    scheduler_ended(None)
    assert restart()[0] == both and crashes() == ("2", None)
    scheduler_ended(None)
    sent, events = restart()
    assert sent == ["knn-s1"] and crashes() == ("3", None)
    mlp = tracking.get_run(runs["mlp-s1"])
    assert mlp.info.status == "FAILED" and "died 3 times" in mlp.data.tags[GAVE_UP]
    # the policy sees it tried (FAILED), not pending
    assert {r.job_id: r.status for r in progress.state.records}["mlp-s1"] == "FAILED"
    [gave_up] = [e for e in events if isinstance(e, steps.JobFinished)]
    assert (gave_up.job_id, gave_up.ok) == ("mlp-s1", False)
    assert "giving up a/mlp-s1: the service died 3 times" in capsys.readouterr().out
    # a scheduler's run, with its process, begins before it sends any job (so a job that
    # takes it down at once is seen in a run). The jobs that failed unwatched before a
    # scheduler's start are its to send again only once it got through its start-up: one
    # stopped halfway leaves them to the next (`previous_scheduler_start`)
    now_ms = int(time.time() * 1000)
    took = tracking.create_run(schedulers, start_time=now_ms - 2000,
                               tags={PROCESS: ended_process(), steps.TOOK_OVER: "1"})  # fmt: skip
    halfway = tracking.create_run(schedulers, start_time=now_ms - 1000,
                                  tags={PROCESS: ended_process()})  # fmt: skip
    tracking.set_terminated(halfway.info.run_id, "KILLED")
    assert steps.previous_scheduler_start(tracking) == took.info.start_time / 1000
    svc.settings = SimpleNamespace(artifact_location=None, mode="embedded", capacity_prices=None,
                                   home=Path("/nowhere"))  # fmt: skip
    svc.options = SimpleNamespace(prior="learnt", ticks=0, budget_s=None, max_epochs=1,
                                  sleep_s=None)  # fmt: skip
    with steps.scheduler_run(svc) as run:  # type: ignore[arg-type]
        assert tracking.get_run(run.info.run_id).data.tags[PROCESS] == process_tag()
        assert not died_scheduler(tracking, process_tag(), None)  # it runs
        assert (
            steps.previous_scheduler_start(tracking, run.info.run_id) == took.info.start_time / 1000
        )
        steps.resume_orphans(svc)  # type: ignore[arg-type]
    assert steps.previous_scheduler_start(tracking) == run.info.start_time / 1000


def test_seer_jobs_are_not_chained() -> None:
    """A SEER job takes `seer_budget_x` times its expected cost: never a short job."""
    [run] = Planner("roundrobin", slots=1).decide(
        _state(_tenants(), []), in_flight=[], tick=1, chain_s=60.0, seer_budget_x=4.0
    )
    assert run.then == ()


def test_a_chains_finished_jobs_are_taken_before_its_run_ends_and_once() -> None:
    """The scheduler takes a chained run's jobs as MLflow shows them FINISHED (`Done.early`,
    timed by their MLflow run), each once; running, failed and unchained jobs wait for the
    back-end's report."""
    from tasks._loop import finished_in_chains, untold_jobs

    tenants = _tenants()
    [run] = Planner("roundrobin", slots=1).decide(
        _state(tenants, []), in_flight=[], tick=1, chain_s=4.0, sleep_s=1.0
    )
    first, second, third, *_ = run.chain()
    single = JobSpec("c", "svm", 1, "svm-s1", 1, "roundrobin", None, 1)

    def rec(job: JobSpec, status: str) -> Any:
        r = _record(job.tenant, job.candidate, status)
        return dataclasses.replace(r, job_id=job.job_id, start_time=10.0, end_time=12.5)

    records = [rec(first, "FINISHED"), rec(second, "FAILED"), rec(third, "RUNNING"),
               rec(single, "FINISHED")]  # fmt: skip
    told: set[tuple[str, str]] = set()
    [done] = finished_in_chains(_state(tenants, records), [run, single], told)
    assert done.spec == first and done.ok and done.early and done.seconds == 2.5
    assert told == {(first.tenant, first.job_id)}
    assert finished_in_chains(_state(tenants, records), [run, single], told) == []  # once
    records[2] = rec(third, "FINISHED")
    [later] = finished_in_chains(_state(tenants, records), [run], told)
    assert later.spec == third and len(told) == 2
    # What a stop leaves going: the jobs not told (the single run's one too, unless `chained`).
    n = len(run.chain())
    assert untold_jobs([run, single], told) == n - 2 + 1
    assert untold_jobs([run, single], told, chained=True) == n - 2
    assert untold_jobs([single], set(), chained=True) == 0


def test_one_seer_request_runs_once_per_machine_at_a_time(tmp_path: Path) -> None:
    """Two `seer run`s of one request started together: the second is refused while the first
    holds the request's lock, and may run once it is let go. Another request, or the same job
    id of another tenant (snapshots count per tenant), is not held by it."""
    import os

    from mlflow_plugin.tracking import JobBusyError
    from tasks import RESUMED_BY_SCHEDULER, request_lock

    job = "seer-lenet-s1-0c1d2e3f"
    with request_lock(tmp_path, "a", job):
        busy = f"being trained by process {os.getpid()} on this machine .another `tenantml seer"
        with pytest.raises(JobBusyError, match=busy):
            with request_lock(tmp_path, "a", job):
                pass
        with request_lock(tmp_path, "a", "seer-lenet-s1-99999999"):  # another request
            pass
        with request_lock(tmp_path, "b", job):  # another tenant
            pass
    with request_lock(tmp_path, "a", job, RESUMED_BY_SCHEDULER):  # a scheduler's run holds it
        with pytest.raises(JobBusyError, match="a scheduler's `train` run of the job"):
            with request_lock(tmp_path, "a", job):
                pass
    with request_lock(tmp_path, "a", job):
        pass


def test_a_job_its_train_run_left_to_another_process_is_not_counted_nor_sent_again(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """A run the scheduler sent ends well, but its job is still RUNNING in MLflow: its `train`
    run left it to a live process (the job's earlier attempt, crashed alive; or a `seer run`
    of the request). The scheduler says so (`JobLeft`), counts neither the job nor its cost as
    its own, and keeps it pending for the policy while that process trains it: before, the
    policy picked the same job at once, and the next run left it again, tick after tick."""
    import socket
    import subprocess
    import sys
    import time
    from types import SimpleNamespace

    import tasks._loop as steps
    from mlflow_plugin.tracking import process_tag
    from tasks import BY_HAND
    from tasks._dispatch import Done
    from tenantml.cli.service import _event_line

    live = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(60)"])
    ended = subprocess.Popen([sys.executable, "-c", "pass"])
    ended_tag = process_tag(ended.pid)
    ended.wait()
    try:
        here = {"process": process_tag(live.pid), "node": socket.gethostname()}
        left = dataclasses.replace(_record("a", "knn", "RUNNING", 0.0), cost_s=30.0, **here)
        seer = dataclasses.replace(_record("b", "knn", "RUNNING", 0.0),
                                   job_id="seer-knn-s1-0c1d2e3f", policy=BY_HAND)  # fmt: skip
        done = _record("c", "knn")
        state = _state(_tenants(), [left, seer, done])
        monkeypatch.setattr(steps, "refresh", lambda *args, **kwargs: state)
        monkeypatch.setattr(steps, "record", lambda client, rec: None)
        monkeypatch.setattr(steps, "publish_leaderboards", lambda *args, **kwargs: None)

        def spec(r: Any) -> JobSpec:
            return JobSpec(r.tenant, r.candidate, 1, r.job_id, 1, "rate", None, 2)

        class Dispatcher:
            in_flight: list[JobSpec] = []

            def poll(self) -> list[Done]:
                return [Done(spec(r), True, 0.5) for r in (left, seer, done)]

        svc = SimpleNamespace(dispatcher=Dispatcher(), client=None, store=None,
                              settings=SimpleNamespace(capacity_prices=None),
                              options=SimpleNamespace(refresh_s=10.0, prior="learnt"))  # fmt: skip
        progress = steps.Progress(state, 0.0, 0, None)  # type: ignore[arg-type]
        events: list[Any] = []
        with steps.listen(events.append):
            steps.record_finished_jobs(svc, progress)  # type: ignore[arg-type]
        assert [type(e).__name__ for e in events] == ["JobLeft", "JobLeft", "JobFinished"]
        assert [getattr(e, "seer_run", None) for e in events[:2]] == [False, True]
        assert progress.jobs_done == 1 and progress.train_s == done.cost_s
        line = _event_line(events[0])
        assert line.startswith("left a knn") and "an earlier attempt" in line, line
        assert f"(process {live.pid} on {socket.gethostname()})" in line, line
        assert "process unknown" in _event_line(events[1])  # no live process recorded: the lock's

        # Pending while their processes train them: the policy does not pick them again.
        now = time.monotonic()
        assert set(steps.still_left(state, progress.left, now)) == {
            ("a", left.job_id), ("b", seer.job_id)}  # fmt: skip
        planner = Planner("roundrobin", slots=3)
        one = _state(_tenants(1), [left])
        picks = planner.decide(one, in_flight=[], tick=2)
        assert "knn" in {p.candidate for p in picks}  # what the policy would pick again
        pending = [s for s, _ in progress.left.values()]
        again = Planner("roundrobin", slots=3).decide(one, in_flight=[], tick=2, elsewhere=pending)
        assert "knn" not in {p.candidate for p in again} and len(again) == 3
        # After a grace (a `seer run` holding the request's lock records its process within
        # seconds): pending while a process here trains it; not once that process ended, nor
        # on a process this machine cannot see (b's), nor once FINISHED, even within the grace.
        later = now + steps.LEFT_GRACE_S + 1
        assert set(steps.still_left(state, progress.left, later)) == {("a", left.job_id)}
        gone = _state(_tenants(), [dataclasses.replace(left, process=ended_tag), seer, done])
        assert steps.still_left(gone, progress.left, later) == {}
        finished = _state(_tenants(), [dataclasses.replace(left, status="FINISHED")])
        assert ("a", left.job_id) not in steps.still_left(finished, progress.left, now)
        # On a place this machine cannot see (a worker on another node saw it run): pending
        # for as long as the job may take (its time limit), then it may be sent again.
        far = dataclasses.replace(left, process=here["process"].partition("@")[0] + "@b/x/1")
        limited = {("a", left.job_id): (dataclasses.replace(spec(left), time_budget_s=600.0), now)}
        seen_far = _state(_tenants(), [far])
        assert steps.still_left(seen_far, limited, later) == limited
        assert steps.still_left(seen_far, limited, now + 601) == {}
        # Another process's job is pending only on the tenant's current data, for a model it
        # has: one on older data, or of a model not the tenant's, leaves the policy's picks
        # as they are.
        older = JobSpec("a", "knn", 0, "knn-s0", 1, "rate")
        alien = JobSpec("a", "no-such-model", 1, "x-s1", 1, "rate")
        base = [
            p.candidate for p in Planner("roundrobin", slots=3).decide(one, in_flight=[], tick=2)
        ]
        for stale in (older, alien):
            got = Planner("roundrobin", slots=3).decide(
                one, in_flight=[], tick=2, elsewhere=[stale]
            )
            assert [p.candidate for p in got] == base
    finally:
        live.kill()
        live.wait()


def test_a_lock_names_its_present_holder_after_earlier_ones(tmp_path: Path) -> None:
    """Earlier holders (other processes, since ended) leave nothing behind: a refusal names the
    process that holds the lock now, and what it is, exactly (the file was opened for append,
    and every refusal named the first holder ever)."""
    import os
    import subprocess
    import sys

    from tasks import SchedulerBusyError, scheduler_lock

    hold = "from pathlib import Path; from tasks import scheduler_lock\n" \
           f"with scheduler_lock(Path({str(tmp_path)!r})): pass"  # fmt: skip
    for _ in range(2):  # two earlier schedulers, ended
        subprocess.run([sys.executable, "-c", hold], check=True, timeout=60)
    with scheduler_lock(tmp_path):
        with pytest.raises(SchedulerBusyError) as refused:
            with scheduler_lock(tmp_path):
                pass
    text = str(refused.value)
    assert f"a scheduler already runs on {tmp_path}: process {os.getpid()} (" in text, text
    assert "\n" not in text and text.count("process ") == 1, text
    assert (tmp_path / "locks" / "scheduler.lock").read_text().startswith(f"{os.getpid()}\n")


def test_a_scheduler_is_its_homes_only_while_it_holds_the_lock_and_mlflow_is_the_homes(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """`Service.sole` (`tasks._crashes`: a dead scheduler of another pid namespace counts) asks
    both: this process holds the home's lock now (a second holder refused does not take it
    away), and MLflow's store is the home's own database, not one set by
    ``TENANTML_TRACKING_URI`` that other homes' schedulers may share."""
    from tasks import SchedulerBusyError, scheduler_lock
    from tasks._locks import holds_lock
    from tasks.settings import Settings

    monkeypatch.delenv("TENANTML_TRACKING_URI", raising=False)
    settings = Settings.load(tmp_path)
    assert settings.tracking_in_home and not holds_lock(settings.home, "scheduler")
    with scheduler_lock(settings.home):
        assert holds_lock(settings.home, "scheduler")
        with pytest.raises(SchedulerBusyError), scheduler_lock(settings.home):
            pass
        assert holds_lock(settings.home, "scheduler")
        assert not holds_lock(tmp_path / "other", "scheduler")
    assert not holds_lock(settings.home, "scheduler")
    monkeypatch.setenv("TENANTML_TRACKING_URI", "http://127.0.0.1:5000")
    assert not Settings.load(tmp_path).tracking_in_home


def test_a_job_adopted_from_its_mlflow_record_keeps_the_slot_it_was_sent_to(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """A run Prefect still holds that `left_going` did not list is adopted from its MLflow
    record (`FLOW_RUN_ID`) on the slot it was sent to (`SLOT`): there its GPU trains it, or
    it waits on that GPU's lock. Placed by load, two runs of slot 1 (one training, one sent
    ahead) were counted one on each slot. A slot this scheduler does not have: by load."""
    from types import SimpleNamespace

    import tasks._loop as steps

    training, ahead, gone = (
        dataclasses.replace(
            _record("a", cand, "RUNNING", 0.0), flow_run_id=f"fr-{cand}", slot=slot
        )  # fmt: skip
        for cand, slot in (("knn", 1), ("mlp", 1), ("svm", 5))
    )
    state = _state(_tenants(), [training, ahead, gone])
    monkeypatch.setattr(steps, "refresh", lambda *args, **kwargs: state)
    monkeypatch.setattr(steps, "redo_promotions", lambda svc, state: None)

    class Dispatcher:
        def __init__(self) -> None:
            self.in_flight: list[JobSpec] = []

        def left_going(self) -> list[tuple[JobSpec, str]]:
            return []

        def adopt(self, spec: JobSpec, flow_run_id: str, *, listed: bool = False) -> bool:
            self.in_flight.append(spec)
            return True

    d = Dispatcher()
    client = SimpleNamespace(
        get_run=lambda run_id: SimpleNamespace(data=SimpleNamespace(params={}))
    )
    svc = SimpleNamespace(client=client, store=None, settings=SimpleNamespace(capacity_prices=None),
                          patience_s=1.0, slots=2, lock_dir=None, policy="rate",
                          options=SimpleNamespace(prior="learnt", max_epochs=1, sleep_s=None),
                          dispatcher=d, stop=steps.StopRequest(), sole_home=None)  # fmt: skip
    steps.resume_orphans(svc)  # type: ignore[arg-type]
    assert {s.job_id: s.slot for s in d.in_flight} == {"knn-s1": 1, "mlp-s1": 1, "svm-s1": 0}
