"""The `scheduler` flow: the long-running loop of the service.

Each pass: collect finished `train` runs and `record` them (move `best`), `refresh` the state from
the store and MLflow, and when slots are free, one *tick*: `decide` (the policy) and dispatch one
`train` run per free slot, then log the tick's metrics. Passes never wait for a job; with G slots,
G jobs run. ``ticks=N`` stops after N ticks once their jobs have finished, ``budget_s=S`` once no
tick started after S seconds and their jobs have finished; with neither it runs until stopped
(or, with ``stop_when_idle``, until no tenant has a model left to try).

One scheduler per home (`tasks.scheduler_lock`): a second one started beside it returns
``{"busy": why}`` at once and sends nothing (two each decided alone and filled the same slots).

Restart safety: the state is rebuilt from MLflow at start. Jobs a previous scheduler left RUNNING
are taken over (servers: its flow run is still going) or dispatched again with the same job id
(they resume from their checkpoints), except one that three schedulers died training alone in
their own process (given up: `tasks._crashes.MAX_CRASHES`); one that two of them died training
beside others is resumed alone first (`tasks._loop.send_held`); promotions a crash skipped are
redone (idempotent). The scheduler's MLflow run begins before it sends any job.

A pass that fails because a server (MLflow, Prefect, S3) does not answer is waited out (bounded
backoff, one log line per attempt) and done again. The steps live in `tasks` (`tasks._loop`).

SIGINT or SIGTERM (in the main thread) stops it within a pass: no tick starts after it, the
summary names the signal (``interrupted``) and counts the jobs left going (``in_flight``); they
resume on the next scheduler. The scheduler's MLflow run ends KILLED; it logs ``loss.png``
(every tenant's loss estimate and the total over the ticks) as it goes.
"""

from __future__ import annotations

import time
from contextlib import ExitStack
from typing import Any

from prefect import flow

from flows.train import train
from tasks import (
    JobSpec,
    SchedulerBusyError,
    SchedulerOptions,
    Service,
    connect,
    decide_tick,
    dispatch_tick,
    log_summary,
    log_tick,
    pause,
    record_finished_jobs,
    refresh_if_stale,
    release_dispatcher,
    resume_orphans,
    scheduler_lock,
    scheduler_run,
    send_held,
    should_stop,
    start_clock,
    stop_on_signals,
    tell_waiting,
    wait_out_outage,
    wants_tick,
)
from tasks.settings import Settings

__all__ = ["scheduler"]


@flow(name="scheduler", log_prints=True)
def scheduler(
    ticks: int | None = None,
    policy: str | None = None,
    slots: int | None = None,
    max_epochs: int = 10,
    job_budget_s: float | None = None,
    sleep_s: float | None = None,
    poll_s: float = 0.5,
    refresh_s: float = 5.0,
    seed: int = 0,
    stop_when_idle: bool = False,
    dispatch: str = "auto",
    prefetch: int | None = None,
    seer_budget_x: float | None = None,
    outage_patience_s: float | None = None,
    prior: str = "learnt",
    chain_s: float = 10.0,
    seer_tuner: str = "replan",
    budget_s: float | None = None,
) -> dict[str, Any]:
    """Run the service loop (see the module docstring; the parameters: `tasks.SchedulerOptions`);
    returns a summary: ticks, jobs, last_tick, wall_s, busy_fraction, run_id, interrupted,
    in_flight."""
    options = SchedulerOptions(**locals())  # locals(): the 18 parameters
    with stop_on_signals(), ExitStack() as held:
        try:  # first: a second scheduler is refused before it connects (or waits out an outage)
            held.enter_context(scheduler_lock(Settings.resolve_home()))
        except SchedulerBusyError as e:  # an answer, not a failure: no traceback
            print(f"not started: {e}")
            return {"busy": str(e)}
        return _serve(connect(options, run_train=train))


def _serve(svc: Service) -> dict[str, Any]:
    """The loop of the module docstring, from the jobs an earlier scheduler left to the summary."""
    started = time.monotonic()
    with scheduler_run(svc) as run, release_dispatcher(svc):
        progress = resume_orphans(svc)
        start_clock(svc, progress, started)
        while not svc.stop.requested:
            try:
                record_finished_jobs(svc, progress)
                send_held(svc, progress)
                jobs: list[JobSpec] = []
                if wants_tick(svc, progress):
                    refresh_if_stale(svc, progress)
                    jobs = decide_tick(svc, progress)
                    if jobs:
                        jobs = dispatch_tick(svc, progress, jobs)  # those sent
                    if jobs:
                        log_tick(svc, progress, jobs)
                if should_stop(svc, progress, jobs):
                    break
                tell_waiting(svc, progress, jobs)
            except Exception as e:
                wait_out_outage(svc, progress, e)  # re-raises all but a server outage
            else:
                pause(svc, progress)
        return log_summary(svc, progress, run)
