"""The `scheduler` flow: the long-running loop of the service.

Each pass: collect finished `train` runs and `record` them (move `best`), `refresh` the state from
the store and MLflow, and when slots are free, one *tick*: `decide` (the policy) and dispatch one
`train` run per free slot, then log the tick's metrics. Passes never wait for a job; with G slots,
G jobs run. ``ticks=N`` stops after N ticks once their jobs have finished; ``ticks=None`` runs
until stopped (or, with ``stop_when_idle``, until no tenant has a model left to try).

Restart safety: the state is rebuilt from MLflow at start. Jobs a previous scheduler left RUNNING
are taken over (servers: its flow run is still going) or dispatched again with the same job id
(they resume from their checkpoints); promotions a crash skipped are redone (idempotent).
"""

from __future__ import annotations

import functools
import time
from typing import Any

from prefect import flow

from flows.train import train
from store import ExampleStore
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
) -> dict[str, Any]:
    """Run the service loop (see the module docstring); returns a summary."""
    import mlflow
    from mlflow.tracking import MlflowClient

    from mlflow_plugin.tracking import SCHEDULER_EXPERIMENT
    from tasks import JobSpec, Planner, decide, record, refresh, tick_metrics
    from tasks._dispatch import DeploymentDispatcher, Done, LocalDispatcher
    from tasks._seer import seer_options_from_params
    from tasks._service import record_finished
    from tasks.outage import (
        Backoff,
        default_patience_s,
        is_outage,
        patient,
        ride_out,
        serve_patiently,
        wait_or_give_up,
    )

    settings = Settings.load().apply()
    serve_patiently()  # a slow answer (a big upload) is waited for, not failed
    policy = policy or settings.policy
    slots = slots or settings.gpu_slots
    # The scheduler waits out server outages (`tasks.outage`) instead of failing.
    outage_patience_s = default_patience_s() if outage_patience_s is None else outage_patience_s
    client = patient(MlflowClient(settings.tracking_uri), settings, outage_patience_s)
    store = ExampleStore(patient(settings.store().blobs, settings, outage_patience_s))
    local = dispatch == "local" or (dispatch == "auto" and settings.mode == "embedded")
    # Prefetch (one waiting job per slot) where slot locks work: one machine (up, or embedded).
    if prefetch is None:
        prefetch = slots if (local or settings.pin_gpus) else 0
    lock_dir = str(settings.home / "slots") if prefetch else None
    planner = Planner(policy, slots, seed, prefetch=prefetch, lock_dir=lock_dir)
    dispatcher: LocalDispatcher | DeploymentDispatcher = (
        LocalDispatcher(planner.capacity, train)
        if local
        else DeploymentDispatcher(
            slots, {"TENANTML_HOME": str(settings.home)}, pin_gpus=settings.pin_gpus
        )
    )

    state, refreshed = refresh(client, store), time.monotonic()
    for tenant in state.tenants:  # promotions a crash may have skipped
        ok = [r for r in state.records if r.tenant == tenant.name and r.status == "FINISHED"]
        if ok:
            record_finished(client, max(ok, key=lambda r: r.accuracy or 0.0))
    tick = max((r.tick or 0 for r in state.records), default=0)
    for r in state.running():  # left running by a previous scheduler
        slot = len(dispatcher.in_flight) % slots
        seer = seer_options_from_params(client.get_run(r.run_id).data.params)
        spec = JobSpec(
            r.tenant,
            r.candidate,
            r.snapshot or 0,
            r.job_id,
            r.tick or tick,
            policy,
            None,
            max_epochs,
            slot=slot,
            sleep_s=sleep_s,
            slot_lock=lock_dir and f"{lock_dir}/slot-{slot}.lock",
            seer=seer,
        )
        if isinstance(dispatcher, DeploymentDispatcher) and r.flow_run_id:
            dispatcher.adopt(spec, r.flow_run_id)
        else:
            dispatcher.submit(spec)
        print(f"resuming {r.tenant}/{r.job_id} left running by an earlier scheduler")

    exp = client.get_experiment_by_name(SCHEDULER_EXPERIMENT)
    location = settings.artifact_location and f"{settings.artifact_location}/scheduler"
    exp_id = exp.experiment_id if exp else client.create_experiment(SCHEDULER_EXPERIMENT, location)
    started, done_ticks, jobs_done, train_s = time.monotonic(), 0, 0, 0.0
    with mlflow.start_run(experiment_id=exp_id, run_name=f"scheduler-{policy}") as run:
        mlflow.log_params(
            {
                "policy": policy,
                "slots": slots,
                "ticks": ticks,
                "max_epochs": max_epochs,
                "mode": settings.mode,
            }
        )
        outage = Backoff(outage_patience_s)
        finished: list[Done] = []
        try:
            while True:
                try:
                    # Jobs polled as finished stay in `finished` until recorded, so a pass cut
                    # short by an outage records them on the next one.
                    finished.extend(dispatcher.poll())
                    if finished:
                        state, refreshed = refresh(client, store), time.monotonic()
                    while finished:
                        done = finished[0]
                        rec = next(
                            (
                                r
                                for r in state.records
                                if r.tenant == done.spec.tenant and r.job_id == done.spec.job_id
                            ),
                            None,
                        )
                        status = "ok" if done.ok else f"failed ({done.detail})"
                        print(
                            f"job {done.spec.tenant}/{done.spec.job_id} {status} in "
                            f"{done.seconds:.1f} s, accuracy {rec.accuracy if rec else None}"
                        )
                        if rec is not None:
                            record(client, rec)
                            train_s += rec.cost_s or 0.0
                        finished.pop(0)
                        jobs_done += 1
                    want_more = ticks is None or done_ticks < ticks
                    new: list[JobSpec] = []
                    if want_more and len(dispatcher.in_flight) < planner.capacity:
                        # A free slot with nothing new finished: look again for new tenants or
                        # examples every `refresh_s`, not on every poll (one MLflow search each).
                        if time.monotonic() - refreshed >= refresh_s:
                            state, refreshed = refresh(client, store), time.monotonic()
                        new = decide(
                            planner,
                            state,
                            in_flight=dispatcher.in_flight,
                            tick=tick + 1,
                            max_epochs=max_epochs,
                            job_budget_s=job_budget_s,
                            seer_budget_x=seer_budget_x,
                        )
                        if sleep_s is not None:
                            new = [JobSpec(**{**j.params(), "sleep_s": sleep_s}) for j in new]
                        if new:
                            tick += 1
                            done_ticks += 1
                            for spec in new:
                                dispatcher.submit(spec)
                            metrics = tick_metrics(state)
                            wall = time.monotonic() - started
                            busy = min(1.0, train_s / max(slots * wall, 1e-9))
                            metrics["gpu_busy_fraction"] = busy
                            log_tick = functools.partial(mlflow.log_metrics, metrics, step=tick)
                            ride_out(
                                log_tick,
                                what="scheduler",
                                settings=settings,
                                patience_s=outage_patience_s,
                            )
                            print(
                                f"tick {tick}: "
                                + ", ".join(f"{s.tenant}:{s.candidate}" for s in new)
                            )
                    idle = not dispatcher.in_flight and not new
                    if ticks is not None and done_ticks >= ticks and not dispatcher.in_flight:
                        break
                    if idle and (stop_when_idle or ticks is not None) and want_more:
                        break  # nothing left to try and nothing running
                except Exception as e:
                    # A server outage: wait (bounded backoff, one log line per attempt) and go
                    # on where we were; the pass is redone from MLflow, so nothing is lost.
                    if not is_outage(e):
                        raise
                    wait_or_give_up(outage, e, "scheduler", settings, print)
                    continue
                outage.reset()
                time.sleep(poll_s)
        finally:
            dispatcher.close()
        wall = time.monotonic() - started
        busy = min(1.0, train_s / max(slots * wall, 1e-9))  # the trainers' own time
        totals = {"gpu_busy_fraction_total": busy, "jobs_done": jobs_done}
        ride_out(
            lambda: mlflow.log_metrics(totals),
            what="scheduler",
            settings=settings,
            patience_s=outage_patience_s,
        )
        return {
            "ticks": done_ticks,
            "jobs": jobs_done,
            "last_tick": tick,
            "wall_s": wall,
            "busy_fraction": busy,
            "run_id": run.info.run_id,
        }
