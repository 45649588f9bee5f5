"""A job that kills its scheduler's process while other jobs train beside it (embedded, with
``--slots`` > 1) is found and given up, and no other job is lost on the way (`tasks._crashes`,
`tasks._loop.send_held`).

Real MLflow (the `tracking` fixture) and the real `LocalDispatcher`; each scheduler start is
simulated as the service runs it: its run in ``tenantml/scheduler`` with its process, begun
before `resume_orphans`, and its jobs started in threads that tag their runs with that process
(as the `train` flow's attempt does). A scheduler that dies leaves its run RUNNING and its jobs'
runs RUNNING; its process has ended."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path
from types import SimpleNamespace
from typing import Any

import mlflow
import pytest

import tasks._loop as steps
from mlflow_plugin import JobRun, job_records
from mlflow_plugin.tracking import (
    CRASHED_IN,
    CRASHES,
    GAVE_UP,
    HOME,
    PROCESS,
    RESENT_AT,
    SHARED_CRASHES,
    ensure_scheduler_experiment,
    process_tag,
)
from tasks._crashes import MAX_CRASHES, SHARED_BEFORE_ALONE
from tasks._dispatch import LocalDispatcher
from tests.unit.test_job_chains import _tenants
from tests.unit.test_service_logic import _state


def _ended_process() -> str:
    """The `process_tag` of a process that has ended."""
    proc = subprocess.Popen([sys.executable, "-c", "pass"])
    tag = process_tag(proc.pid)
    proc.wait()
    return tag


class _Home:
    """One home's MLflow: the tenants' job runs (by job id) and the schedulers' experiment; and
    the scheduler now running (`start`), whose jobs train in its `dispatcher`'s threads."""

    def __init__(
        self, tracking: Any, monkeypatch: pytest.MonkeyPatch, name: str, home: Path
    ) -> None:
        self.tracking = tracking
        self.home = home
        self.exp = tracking.create_experiment(name)
        self.schedulers = ensure_scheduler_experiment(tracking, None)
        self.runs: dict[str, str] = {}
        self.process = ""  # the running scheduler's
        self.started: list[list[str]] = []  # the jobs each start trained, in order
        self.namespaces = 0  # pid namespaces made up for `start(container=True)`
        self.svc: Any = None
        monkeypatch.setattr(
            steps, "refresh", lambda *a, **k: _state(_tenants(), job_records(tracking, [self.exp]))
        )
        monkeypatch.setattr(steps, "redo_promotions", lambda svc, state: None)

    def job(self, job_id: str, candidate: str) -> None:
        """A job of tenant ``a`` left RUNNING by a worker's process that ended (no death of a
        scheduler: sent again, nothing counted)."""
        job = JobRun.start(self.tracking, self.exp, tenant="a", job_id=job_id,
                           candidate=candidate, snapshot=1, policy="rate", tick=1)  # fmt: skip
        mlflow.end_run()  # no longer this process's active run; RUNNING, as a crash leaves it
        self.tracking.update_run(job.run_id, status="RUNNING")
        self.tracking.set_tag(job.run_id, PROCESS, _ended_process())
        self.runs[job_id] = job.run_id

    def _train(self, params: dict[str, Any]) -> None:
        """A job's attempt starting in the scheduler's process (`flows.train` tags it so)."""
        self.tracking.set_tag(self.runs[params["job_id"]], PROCESS, self.process)
        self.started[-1].append(params["job_id"])

    def start(
        self,
        dispatcher: Any = None,
        *,
        container: bool = False,
        sole: bool = False,
        host: str | None = None,
        home: str | None = None,
    ) -> steps.Progress:
        """A new scheduler (a new process): its run, then `resume_orphans`; its jobs train in
        this process (`LocalDispatcher`) unless another `dispatcher` is given. `container`: the
        process is of a pid namespace of its own, as in a container started anew, on `host`
        (default: this one); `sole`: the scheduler is its home's only one
        (`Service.sole_home`); `home`: the home its run names (default: this one's)."""
        self.process = _ended_process()  # it dies unless its run ends
        if container:  # the same boot, another pid namespace
            self.namespaces += 1
            ident, _, place = self.process.partition("@")
            this_host, boot, _ = place.split("/")
            self.process = f"{ident}@{host or this_host}/{boot}/{self.namespaces}"
        tags = {PROCESS: self.process, HOME: home or str(self.home)}
        run = self.tracking.create_run(self.schedulers, tags=tags)
        self.started.append([])
        self.svc = SimpleNamespace(
            client=self.tracking, store=None, patience_s=1.0, slots=2, lock_dir=None,
            settings=SimpleNamespace(capacity_prices=None), policy="rate",
            options=SimpleNamespace(prior="learnt", max_epochs=1, sleep_s=None, ticks=None,
                                    budget_s=None, stop_when_idle=True),
            planner=SimpleNamespace(capacity=2),
            dispatcher=dispatcher or LocalDispatcher(2, self._train),
            stop=steps.StopRequest(), sole_home=self.home if sole else None,
        )  # fmt: skip
        self.svc.stop.run_id = run.info.run_id
        self.svc.stop.dispatcher = self.svc.dispatcher  # as `connect` does: `Stopping` counts
        self.svc.stop.stopped_dir = self.home / "stopped"  # ... and a stop is marked there
        return steps.resume_orphans(self.svc)

    def in_flight(self) -> list[str]:
        """The jobs sent and not reported, once their attempts have started."""
        for job in self.svc.dispatcher.jobs.values():
            job.handle.result()
        return sorted(spec.job_id for spec in self.svc.dispatcher.in_flight)

    def finish(self, job_id: str) -> None:
        """The job's attempt ends FINISHED, and the dispatcher reports it."""
        self.tracking.set_terminated(self.runs[job_id], "FINISHED")
        assert [d.spec.job_id for d in self.svc.dispatcher.poll()] == [job_id]

    def tags(self, job_id: str) -> dict[str, str]:
        return dict(self.tracking.get_run(self.runs[job_id]).data.tags)

    def status(self, job_id: str) -> str:
        return str(self.tracking.get_run(self.runs[job_id]).info.status)


def test_a_job_that_kills_its_scheduler_beside_others_is_resumed_alone_and_given_up(
    tracking: Any,
    monkeypatch: pytest.MonkeyPatch,
    capsys: pytest.CaptureFixture[str],
    tmp_path: Path,
) -> None:
    """Embedded with two slots, every restart resumed together the jobs a dead scheduler left,
    so a job that kills the process was never the lone suspect: each restart died (forever,
    under a supervisor). Now a job in `SHARED_BEFORE_ALONE` such deaths is resumed alone, one
    suspect at a time, no tick and no other job beside it: an innocent one finishes, the killer
    dies alone `MAX_CRASHES` times and is given up, and then the jobs held back go. A job that
    failed unwatched, held back meanwhile, is not lost though three schedulers die holding it."""
    assert (SHARED_BEFORE_ALONE, MAX_CRASHES) == (2, 3)
    home = _Home(tracking, monkeypatch, "killer-beside-others", tmp_path)
    for job_id, cand in (("knn-s1", "knn"), ("mlp-s1", "mlp"), ("svm-s1", "svm")):
        home.job(job_id, cand)
    both = ["knn-s1", "mlp-s1", "svm-s1"]
    # the first scheduler sends the three, and dies with them training in its process
    home.start()
    assert home.in_flight() == both

    # 1st restart: one death beside others says little (a SIGKILL by hand): all go together
    progress = home.start()
    assert home.in_flight() == both and not progress.holding
    assert {home.tags(j)[SHARED_CRASHES] for j in both} == {"1"}
    # meanwhile a job failed with no scheduler to retry it (after this start)
    home.job("rf-s1", "rf")
    home.tracking.set_terminated(home.runs["rf-s1"], "FAILED")
    capsys.readouterr()

    # 2nd restart: the three shared two deaths: the first goes alone, the others wait
    progress = home.start()
    assert home.in_flight() == ["knn-s1"]
    assert [j.job_id for j in progress.suspects] == ["mlp-s1", "svm-s1"]
    assert [j.job_id for j in progress.held] == ["rf-s1"] and RESENT_AT in home.tags("rf-s1")
    out = capsys.readouterr().out
    assert "a/mlp-s1 is resumed alone: 2 schedulers died while it trained beside" in out
    assert "holding 1 other job left until then" in out and "rf-s1 again" not in out
    assert not steps.wants_tick(home.svc, progress)
    assert not steps.should_stop(home.svc, progress, [])
    steps.send_held(home.svc, progress)  # one suspect at a time
    assert home.in_flight() == ["knn-s1"] and not steps.wants_tick(home.svc, progress)
    home.finish("knn-s1")  # innocent; the pass that records it sends the next
    steps.send_held(home.svc, progress)
    assert home.in_flight() == ["mlp-s1"] and not steps.wants_tick(home.svc, progress)
    # ... which kills the process: this scheduler dies, svm-s1 and rf-s1 never sent

    # 3rd restart: mlp-s1 died alone (1); svm-s1's death (the 2nd start's) is not counted again
    progress = home.start()
    assert (home.tags("mlp-s1")[CRASHES], home.tags("svm-s1").get(CRASHES)) == ("1", None)
    assert home.tags("svm-s1")[SHARED_CRASHES] == "2"
    # fewest deaths alone first: the likelier killer's next death comes last
    assert home.in_flight() == ["svm-s1"] and [j.job_id for j in progress.suspects] == ["mlp-s1"]
    assert [j.job_id for j in progress.held] == ["rf-s1"]  # marked sent: still the next one's
    home.finish("svm-s1")
    # the pass that recorded it: nothing in flight, yet no tick, no stop, no "waiting" line
    events: list[Any] = []
    with steps.listen(events.append):
        steps.tell_waiting(home.svc, progress, [])
    assert events == [] and not steps.should_stop(home.svc, progress, [])
    steps.send_held(home.svc, progress)
    assert home.in_flight() == ["mlp-s1"]  # the last suspect: still alone
    assert not steps.wants_tick(home.svc, progress)  # dies alone again

    progress = home.start()  # 4th restart
    assert home.tags("mlp-s1")[CRASHES] == "2" and home.in_flight() == ["mlp-s1"]
    assert [j.job_id for j in progress.held] == ["rf-s1"]  # dies alone a third time
    capsys.readouterr()

    # 5th restart: mlp-s1 is given up; nothing is held, the failed job goes at once
    progress = home.start()
    assert home.status("mlp-s1") == "FAILED" and "died 3 times" in home.tags("mlp-s1")[GAVE_UP]
    assert not progress.holding and home.in_flight() == ["rf-s1"]
    assert "sending a/rf-s1 again: it failed with no scheduler" in capsys.readouterr().out
    assert steps.wants_tick(home.svc, progress)  # a free slot: ticks go on beside it
    home.finish("rf-s1")
    assert steps.should_stop(home.svc, progress, [])  # stop_when_idle: all done
    assert {j: home.status(j) for j in both} == {
        "knn-s1": "FINISHED",
        "mlp-s1": "FAILED",
        "svm-s1": "FINISHED",
    }
    # every start trained: together, together, one at a time, then the held job
    assert [sorted(s) for s in home.started] == [
        both, both, ["knn-s1", "mlp-s1"], ["mlp-s1", "svm-s1"], ["mlp-s1"], ["rf-s1"]
    ]  # fmt: skip


def test_a_stopped_scheduler_leaves_its_held_jobs_to_the_next(
    tracking: Any, monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    """A stop request (Ctrl-C) with a suspect training alone: nothing more is sent, `Stopping`
    counts the jobs held back too, and the next start resumes the suspect alone again. A stop
    is no death: the deaths counted so far stand, and no new one is counted; the suspects'
    order counts their deaths alone so far (knn-s1 died alone once: last)."""
    home = _Home(tracking, monkeypatch, "stopped-while-holding", tmp_path)
    for job_id, cand in (("knn-s1", "knn"), ("mlp-s1", "mlp")):
        home.job(job_id, cand)
        home.tracking.set_tag(home.runs[job_id], SHARED_CRASHES, "2")
    home.tracking.set_tag(home.runs["knn-s1"], CRASHES, "1")
    progress = home.start()
    assert home.in_flight() == ["mlp-s1"] and [j.job_id for j in progress.suspects] == ["knn-s1"]
    events: list[Any] = []
    with steps.listen(events.append):
        home.svc.stop.request("SIGINT")
    [stopping] = events
    assert stopping.in_flight == 2  # one in flight, one held
    home.finish("mlp-s1")  # suppose it ended as the stop came
    steps.send_held(home.svc, progress)
    assert home.in_flight() == [] and progress.holding
    home.tracking.set_terminated(home.svc.stop.run_id, "KILLED")  # as `scheduler_run` ends it
    home.tracking.update_run(home.runs["mlp-s1"], status="RUNNING")  # (stopped mid-job)
    progress = home.start()
    assert home.in_flight() == ["mlp-s1"] and [j.job_id for j in progress.suspects] == ["knn-s1"]
    counted = {(j, k): home.tags(j).get(k) for j in ("knn-s1", "mlp-s1")
               for k in (CRASHES, SHARED_CRASHES, CRASHED_IN)}  # fmt: skip
    assert counted == {
        ("knn-s1", CRASHES): "1", ("knn-s1", SHARED_CRASHES): "2", ("knn-s1", CRASHED_IN): None,
        ("mlp-s1", CRASHES): None, ("mlp-s1", SHARED_CRASHES): "2", ("mlp-s1", CRASHED_IN): None,
    }  # fmt: skip


def test_a_failed_suspect_is_held_too_and_only_where_jobs_train_in_the_scheduler(
    tracking: Any, monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    """A suspect whose last attempt failed while no scheduler watched it is sent alone too,
    not with the others; the jobs held behind the suspects go together, beside whatever is in
    flight. With a back-end whose jobs train in workers' processes (a
    deployment), whose deaths cannot take the scheduler down, nothing is held."""
    from tests.unit.test_job_chains import _SendingDispatcher

    home = _Home(tracking, monkeypatch, "failed-suspect", tmp_path)
    home.start()  # an earlier scheduler that got through its start-up
    for job_id, cand in (("knn-s1", "knn"), ("mlp-s1", "mlp"), ("svm-s1", "svm")):
        home.job(job_id, cand)
    for job_id in ("knn-s1", "mlp-s1"):
        home.tracking.set_tag(home.runs[job_id], SHARED_CRASHES, "2")
    home.tracking.set_terminated(home.runs["mlp-s1"], "FAILED")  # after that start: unwatched
    progress = home.start()
    assert home.in_flight() == ["knn-s1"]
    assert [j.job_id for j in progress.suspects] == ["mlp-s1"]
    assert [j.job_id for j in progress.held] == ["svm-s1"]
    # a scheduler whose jobs train in workers' processes sends them all at once
    workers = _SendingDispatcher()
    progress = home.start(workers)
    assert sorted(s.job_id for s in workers.sent) == ["knn-s1", "mlp-s1", "svm-s1"]
    assert not progress.holding
    # back on this process's threads: the suspects alone again (knn-s1 died alone in the
    # first of them: last now), then the others
    progress = home.start()
    assert home.tags("knn-s1")[CRASHES] == "1"
    assert home.in_flight() == ["mlp-s1"] and [j.job_id for j in progress.suspects] == ["knn-s1"]
    home.finish("mlp-s1")
    steps.send_held(home.svc, progress)
    assert home.in_flight() == ["knn-s1"] and progress.held
    home.finish("knn-s1")
    steps.send_held(home.svc, progress)  # no suspect left: the held jobs go
    assert home.in_flight() == ["svm-s1"] and not progress.holding
    # the rest of a batch an outage cut short goes beside what it sent, not one at a time
    home.job("rf-s1", "rf")
    progress.held = [r for r in job_records(tracking, [home.exp]) if r.job_id == "rf-s1"]
    steps.send_held(home.svc, progress)
    assert home.in_flight() == ["rf-s1", "svm-s1"] and not progress.holding


def test_a_job_sent_again_goes_to_the_least_loaded_slot() -> None:
    """Three slots, runs on slots 1 and 2 (the one on slot 0 ended while an outage cut a
    batch short): the next goes to slot 0, not to ``len(in_flight) % slots`` = 2, beside a
    run whose lock it would wait for."""
    from tasks._service import JobSpec, least_loaded_slot

    def run(slot: int) -> JobSpec:
        return JobSpec("a", "knn", 1, f"knn-{slot}", 1, "rate", None, 1, slot=slot)

    assert least_loaded_slot([run(1), run(2)], 3) == 0
    assert least_loaded_slot([run(0), run(2), run(0)], 3) == 1
    assert least_loaded_slot([], 2) == 0


def test_a_stop_whose_end_never_reached_mlflow_is_no_death(
    tracking: Any, monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    """Ctrl-C ends the scheduler's run KILLED within 2 s (`end_now`) or not at all: with a store
    that slow, the stop read as a death and counted against the jobs that trained in it. The
    stop is marked in the home at once (`mark_stopped`, in the signal's handler, before any
    listener may end the process), and a run so marked is no death; one that dies unmarked
    still is, in the same process too (a second `Client.run` in a notebook)."""
    from tasks._crashes import died_scheduler

    home = _Home(tracking, monkeypatch, "stopped-unrecorded", tmp_path)
    for job_id, cand in (("knn-s1", "knn"), ("mlp-s1", "mlp")):
        home.job(job_id, cand)
    home.start()
    assert home.in_flight() == ["knn-s1", "mlp-s1"]
    stopped = home.svc.stop.run_id
    home.svc.stop.request("SIGINT")
    assert [p.name for p in (tmp_path / "stopped").iterdir()] == [stopped]
    # its run is left RUNNING: its KILLED end never reached MLflow
    first = home.process
    progress = home.start()
    assert home.in_flight() == ["knn-s1", "mlp-s1"] and not progress.holding
    counted = [home.tags(j).get(k) for j in ("knn-s1", "mlp-s1")
               for k in (CRASHES, SHARED_CRASHES, CRASHED_IN)]  # fmt: skip
    assert counted == [None] * 6
    progress = home.start()  # the last one died unmarked: a death, beside another job
    assert [home.tags(j).get(SHARED_CRASHES) for j in ("knn-s1", "mlp-s1")] == ["1", "1"]
    # a later scheduler in the stopped one's process that dies is a death: the mark is its run's
    assert not died_scheduler(tracking, first, tmp_path / "stopped")
    home.tracking.create_run(home.schedulers, tags={PROCESS: first})
    assert died_scheduler(tracking, first, tmp_path / "stopped")


@pytest.mark.parametrize("where", ["here", "shared-store", "another-home", "another-host"])
def test_a_job_that_kills_its_container_is_given_up_where_the_scheduler_is_its_homes_only(
    tracking: Any, monkeypatch: pytest.MonkeyPatch, tmp_path: Path, where: str
) -> None:
    """A container restarted by its runtime (after the cgroup's OOM killer) starts the service
    in a new pid namespace: the dead scheduler's process is one `process_state` cannot see
    ("unknown"), so its death counted nowhere, and a job that ran the container out of memory
    was resumed into every restart. Where the scheduler is its home's only one
    (`Service.sole_home`: the home's lock, MLflow in the home) and the dead one was of this
    home on this host, such a death counts: after the third the job is given up. Not where it
    cannot be told: a store other homes' schedulers may share, a run of another home writing
    to it, or a process of another host (which may hold the home's lock unseen)."""
    home = _Home(tracking, monkeypatch, f"container-{where}", tmp_path)
    home.job("mlp-s1", "mlp")
    counts = where == "here"
    how: dict[str, Any] = {
        "container": True,
        "sole": where != "shared-store",
        "home": str(tmp_path / "other") if where == "another-home" else None,
        "host": "elsewhere" if where == "another-host" else None,
    }
    home.start(**how)  # it resumes the job, and the container dies
    assert home.in_flight() == ["mlp-s1"]
    for death in range(1, MAX_CRASHES):
        home.start(**how)
        assert home.in_flight() == ["mlp-s1"]
        assert home.tags("mlp-s1").get(CRASHES) == (str(death) if counts else None)
    progress = home.start(**how)
    if counts:
        assert home.in_flight() == [] and home.status("mlp-s1") == "FAILED"
        assert f"died {MAX_CRASHES} times" in home.tags("mlp-s1")[GAVE_UP]
        assert not progress.holding
    else:
        assert home.in_flight() == ["mlp-s1"] and CRASHES not in home.tags("mlp-s1")
