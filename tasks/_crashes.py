"""Jobs that take their scheduler's process down with them.

Embedded (`tenantml run` with no servers), a job trains in the scheduler's own threads, so a
job that kills the process (the kernel's OOM killer, a crash in native code) took the service
down, and every restart resumed it and died again. A scheduler's run records its process
(`PROCESS`) and begins before it sends any job (`tasks._loop.scheduler_run`); a process that
ended with its run left RUNNING *died* (`died_scheduler`; a stop by a signal ends the run
KILLED, and first marks it stopped in the home, should that end not reach MLflow in time:
`mark_stopped`). The next scheduler weighs that death against each job left RUNNING whose
last attempt trained in that process (`count_death`), once per dead process (`CRASHED_IN`):

* the job trained there alone: a crash (`CRASHES`). At `MAX_CRASHES` it is given up
  (`give_up`): its run ends FAILED, counted as tried with no model;
* it trained beside other jobs: a shared crash (`SHARED_CRASHES`); which of them killed the
  process cannot be told. At `SHARED_BEFORE_ALONE` the job is a *suspect*
  (`Deaths.suspect`): the schedulers that follow resume it alone, one suspect at a time, with
  nothing else trained beside it (`tasks._loop.send_held`), so that a death then has one
  suspect and counts as a crash.

Without the second rule a job that killed the process beside others (``--slots`` > 1: each
restart resumes together all the jobs left) was never the lone suspect, and took every later
scheduler down. A job trained in a worker's process (a deployment) never counts: that process
has no scheduler run, and its death is the flow run's, retried by the scheduler; nor is a
suspect held back then (`tasks._loop.resume_orphans`).

A process of another boot (a reboot) or of another pid namespace (a container restarted by its
runtime after the cgroup's OOM killer) is one `process_state` cannot see from here: "unknown",
not "ended". It has ended all the same where it ran a scheduler of this home on this host
(`HOME`, `of_this_host`) and this scheduler is the home's only one (`Service.sole_home`: it
holds the home's lock, which a live scheduler of the home in another container of this host
would hold, and MLflow's store is the home's own database). Where it cannot be told (a store
other homes may write to, another host of the home's file system, whose lock this host's
kernel may not see, a host name the runtime changed) such a death does not count.
"""

from __future__ import annotations

import time
from dataclasses import dataclass
from pathlib import Path

from mlflow.entities import RunTag
from mlflow.tracking import MlflowClient

from mlflow_plugin.tracking import (
    CRASHED_IN,
    CRASHES,
    GAVE_UP,
    HOME,
    PROCESS,
    SCHEDULER_EXPERIMENT,
    SHARED_CRASHES,
    JobRecord,
    of_this_host,
    process_state,
    tag_count,
)

__all__ = [
    "MAX_CRASHES",
    "SHARED_BEFORE_ALONE",
    "Deaths",
    "count_death",
    "died_scheduler",
    "give_up",
    "mark_stopped",
]

#: A job that trained alone in a scheduler's process `MAX_CRASHES` times when that scheduler
#: died is given up: more likely it kills the process than that something else killed it so
#: often, and sent again it would take every later scheduler down with it.
MAX_CRASHES = 3

#: A job that trained beside others in `SHARED_BEFORE_ALONE` schedulers that died is resumed
#: alone from then on. Not after the first: one death of a process with several jobs (a SIGKILL
#: by hand) says little, and resuming jobs one at a time leaves slots idle.
SHARED_BEFORE_ALONE = 2


@dataclass(frozen=True)
class Deaths:
    """The schedulers that died while a job trained in their process: `alone` there
    (`CRASHES`), or beside other jobs (`shared`, `SHARED_CRASHES`)."""

    alone: int = 0
    shared: int = 0

    @property
    def given_up(self) -> bool:
        """`MAX_CRASHES` deaths alone: not to be sent again."""
        return self.alone >= MAX_CRASHES

    @property
    def suspect(self) -> bool:
        """`SHARED_BEFORE_ALONE` deaths beside others: to be resumed alone."""
        return self.shared >= SHARED_BEFORE_ALONE


#: days a stop's mark (`mark_stopped`) is kept: a job held back keeps its stopped scheduler's
#: process on its run until it is sent again
STOP_MARK_DAYS = 30


def mark_stopped(stopped_dir: Path, run_id: str) -> None:
    """Say, in `stopped_dir` (the home's ``stopped/``), that the scheduler whose MLflow run is
    `run_id` is being stopped by a signal; marks older than `STOP_MARK_DAYS` go. A file written
    at once, where the run, ended KILLED, reaches MLflow within `end_now`'s 2 s or not at all:
    a stop whose end came too late read as a death, and counted against its jobs. Keyed by the
    run, not the process: a later scheduler in the same process (a second `Client.run` in a
    notebook) that dies is a death."""
    stopped_dir.mkdir(parents=True, exist_ok=True)
    (stopped_dir / run_id).touch()
    old = time.time() - STOP_MARK_DAYS * 86400.0
    for mark in stopped_dir.iterdir():
        try:
            if mark.stat().st_mtime < old:
                mark.unlink()
        except OSError:  # gone meanwhile
            pass


def died_scheduler(
    client: MlflowClient,
    process: str | None,
    stopped_dir: Path | None,
    sole_home: Path | None = None,
) -> bool:
    """Whether `process` (a job's latest attempt's, `mlflow_plugin.tracking.process_tag`) was
    a scheduler's that died without ending its run: it has ended (or, where this scheduler is
    the only one of `sole_home`, it is one of that home's on this host that cannot be seen:
    module docstring), and its latest run in ``tenantml/scheduler`` (every scheduler's begins
    before it sends a job) was left RUNNING and not stopped by a signal (no mark in
    `stopped_dir`: `mark_stopped`). A worker's process has no run there."""
    state = process_state(process)  # "unknown" for None
    unseen = state == "unknown" and sole_home is not None and of_this_host(process)
    if process is None or not (state == "ended" or unseen):
        return False
    exp = client.get_experiment_by_name(SCHEDULER_EXPERIMENT)
    quoted = process.replace("'", "")  # a tag has none; a filter string must not break on one
    runs = [] if exp is None else client.search_runs(
        [exp.experiment_id], filter_string=f"tags.`{PROCESS}` = '{quoted}'", max_results=1
    )  # fmt: skip
    if not runs or runs[0].info.status != "RUNNING":
        return False
    if state == "unknown" and runs[0].data.tags.get(HOME) != str(sole_home):
        return False  # another home's, writing to this store: it may be alive
    return stopped_dir is None or not (stopped_dir / runs[0].info.run_id).exists()


def count_death(client: MlflowClient, job: JobRecord, alone: bool) -> Deaths:
    """`job` was training in a scheduler's process that died (`died_scheduler`): count the
    death against it, `alone` in that process or not, and return its deaths so far. Each dead
    process is weighed once per job (`CRASHED_IN`): a start that ends before the job trains
    again leaves that process on the job's run, and its fellows may have moved on by then."""
    tags = client.get_run(job.run_id).data.tags
    deaths = Deaths(tag_count(tags.get(CRASHES)), tag_count(tags.get(SHARED_CRASHES)))
    if tags.get(CRASHED_IN) == job.process:
        return deaths
    if alone:
        deaths = Deaths(deaths.alone + 1, deaths.shared)
        counted = RunTag(CRASHES, str(deaths.alone))
    else:
        deaths = Deaths(deaths.alone, deaths.shared + 1)
        counted = RunTag(SHARED_CRASHES, str(deaths.shared))
    # the process weighed and its count in one request (one transaction on a database store)
    client.log_batch(job.run_id, tags=[RunTag(CRASHED_IN, job.process or ""), counted])
    return deaths


def give_up(client: MlflowClient, job: JobRecord, deaths: Deaths) -> str:
    """End `job`'s run FAILED and given up (`GAVE_UP`, saying why): it is not sent again, and
    the policy counts its model as tried with none. Returns the reason."""
    detail = (f"the service died {deaths.alone} times while it trained alone (out of memory, "
              "or a crash in native code?): given up, counted as tried with no model")  # fmt: skip
    client.set_tag(job.run_id, GAVE_UP, detail)
    client.set_terminated(job.run_id, "FAILED")
    return detail
