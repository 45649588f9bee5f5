"""Getting `train` flow runs onto GPU slots and noticing when they end.

`Dispatcher` is the one back-end interface the scheduler drives (`tasks._loop`): ``submit`` starts
a job, ``adopt`` takes over one an earlier scheduler started, ``poll`` reports the jobs that
ended, ``in_flight`` lists the ones running or waiting, ``close`` stops the back-end. Two
implementations:

* `LocalDispatcher` (embedded mode): the `train` flow (handed in by `flows.scheduler`, the layer
  that composes flows) runs in this process, one thread per slot.
* `DeploymentDispatcher` (servers): ``run_deployment("train/train")`` on the work pool ``gpu``
  without waiting (``timeout=0``); a worker process runs it with ``CUDA_VISIBLE_DEVICES`` set to
  the slot. Poll reads the flow runs' states from the Prefect API.

A job that fails or crashes (its process killed) is submitted again with the same spec, up to
`max_attempts`: the job id is the same, so it resumes from its checkpoint.
"""

from __future__ import annotations

import functools
import time
import uuid
from collections.abc import Callable
from concurrent.futures import Future, ThreadPoolExecutor
from dataclasses import dataclass, field, replace
from typing import Any, Protocol

from tasks._service import JobSpec

__all__ = ["DeploymentDispatcher", "Dispatcher", "Done", "LocalDispatcher"]


@dataclass(frozen=True)
class Done:
    """A job that ended: `ok` (its run completed), `seconds` since its last start, and the
    back-end's `detail` on how it ended (an exception, or the flow run's final state).

    `early`: a job of a chained run still going, seen FINISHED in MLflow (the scheduler's
    `tasks._loop.finished_in_chains`, not a back-end): the run reports it again when it ends;
    its `seconds` are its MLflow run's (a resumed job's earlier attempts included).
    """

    spec: JobSpec
    ok: bool
    seconds: float
    detail: str = ""
    early: bool = False


class Dispatcher(Protocol):
    """The execution back-end interface: what the scheduler's loop needs of a dispatcher.

    A job is keyed by ``<tenant>/<job_id>``; sending the same job again resumes it from its
    checkpoint, so a back-end may start a job more than once (retries, restarts).
    """

    @property
    def in_flight(self) -> list[JobSpec]:
        """The runs started (or adopted) and not yet reported by `poll`, one spec each; a run's
        chained jobs are its spec's `JobSpec.then`."""
        ...

    def submit(self, spec: JobSpec) -> None:
        """Start the `train` run of `spec` (stamped with ``dispatched_at``); never waits for it."""
        ...

    def adopt(self, spec: JobSpec, flow_run_id: str, *, listed: bool = False) -> bool:
        """Track the flow run `flow_run_id` an earlier scheduler started for `spec`, instead of
        starting a new one; False when this back-end cannot (the caller then submits `spec`).
        ``listed``: the back-end has just listed the run (`left_going`): it exists."""
        ...

    def left_going(self) -> list[tuple[JobSpec, str]]:
        """The jobs an earlier scheduler sent that the back-end still holds, not ended, as
        (spec, flow run id): those it sent before their MLflow run existed are known only here."""
        ...

    def poll(self) -> list[Done]:
        """The jobs that ended since the last poll, one `Done` per job of each ended run (its
        chained jobs too); a failed run is first started again, up to the back-end's attempts,
        and reported only when those are spent."""
        ...

    def close(self) -> None:
        """Stop: release the back-end's resources (threads: wait for the running jobs)."""
        ...


@dataclass
class _Job:
    spec: JobSpec
    handle: Any
    started: float
    attempts: int = 1


@dataclass
class _Base:
    slots: int
    max_attempts: int = 3
    jobs: dict[str, _Job] = field(default_factory=dict)
    #: runs `poll` found ended and took off `jobs`, not yet returned: a poll cut short (an
    #: outage while it checks or re-sends a later run) returns them on the next one
    _ended: list[Done] = field(default_factory=list)

    @property
    def in_flight(self) -> list[JobSpec]:
        """One spec per run in flight (a run may carry chained jobs: `JobSpec.then`)."""
        return [j.spec for j in self.jobs.values()]

    def _key(self, spec: JobSpec) -> str:
        return f"{spec.tenant}/{spec.job_id}"

    def submit(self, spec: JobSpec) -> None:
        spec = replace(spec, dispatched_at=time.time())
        self.jobs[self._key(spec)] = _Job(spec, self._start(spec), time.monotonic())

    def adopt(self, spec: JobSpec, flow_run_id: str, *, listed: bool = False) -> bool:
        """Nothing to adopt unless a back-end says otherwise: False (the caller submits)."""
        return False

    def left_going(self) -> list[tuple[JobSpec, str]]:
        """None unless a back-end keeps jobs beyond its scheduler's life."""
        return []

    def _start(self, spec: JobSpec) -> Any:
        raise NotImplementedError

    def _state(self, handle: Any) -> tuple[bool, bool, str]:
        """(finished, ok, detail)."""
        raise NotImplementedError

    def poll(self) -> list[Done]:
        """The runs that ended since the last call (a failed one is sent again while it has
        attempts left), each job of a chained run a `Done`. An exception (an outage) leaves the
        runs found ended so far to the next call: none is lost."""
        for key, job in list(self.jobs.items()):
            finished, ok, detail = self._state(job.handle)
            if not finished:
                continue
            elapsed = time.monotonic() - job.started
            if not ok and job.attempts < self.max_attempts:
                job.spec = replace(job.spec, dispatched_at=time.time())
                job.handle, job.attempts = self._start(job.spec), job.attempts + 1
                job.started = time.monotonic()
                continue
            del self.jobs[key]
            self._ended += [Done(spec, ok, elapsed, detail) for spec in job.spec.chain()]
        done, self._ended = self._ended, []
        return done

    def close(self) -> None:
        return None


class LocalDispatcher(_Base):
    """In-process: the `train` flow's own retries cover exceptions; a crash takes this process
    down with it, and the next scheduler resumes the job (so one attempt here). Nothing can be
    adopted: an earlier scheduler's threads died with it (`adopt` is False).

    ``heartbeats=False`` runs the flows without Prefect's flow-run heartbeats (embedded: no
    automation there crashes silent runs, and a run that dies takes the scheduler with it).
    Prefect beats from a thread that sleeps a second at a time and joins it as the run ends,
    so every run ended up to a second late, and the scheduler's next decision with it: a
    trivial flow took 1.1 s with them and 0.16 s without (Prefect 3.8 on the 2-core machine)."""

    def __init__(
        self,
        slots: int,
        run: Callable[[dict[str, Any]], Any],
        max_attempts: int = 1,
        on_done: Callable[[], None] | None = None,
        heartbeats: bool = True,
    ) -> None:
        super().__init__(slots, max_attempts)
        self.run = run  # the `train` flow: run(spec.params())
        # called in the slot's thread as each run ends (the scheduler's `StopRequest.nudge`)
        self.on_done = on_done
        self.heartbeats = heartbeats
        self.pool = ThreadPoolExecutor(max_workers=slots, thread_name_prefix="tenantml-slot")

    def _start(self, spec: JobSpec) -> Future[Any]:
        run = self.run if self.heartbeats else functools.partial(_without_heartbeats, self.run)
        future = self.pool.submit(run, spec.params())
        if self.on_done is not None:
            on_done = self.on_done
            future.add_done_callback(lambda _: on_done())
        return future

    def _state(self, handle: Future[Any]) -> tuple[bool, bool, str]:
        if not handle.done():
            return False, False, ""
        err = handle.exception()
        return True, err is None, "" if err is None else f"{type(err).__name__}: {err}"

    def close(self) -> None:
        self.pool.shutdown(wait=True, cancel_futures=True)


def _without_heartbeats(run: Callable[[dict[str, Any]], Any], params: dict[str, Any]) -> Any:
    """`run(params)` with Prefect's flow-run heartbeats off, in this thread's settings only."""
    from prefect.settings import PREFECT_FLOWS_HEARTBEAT_FREQUENCY, temporary_settings

    with temporary_settings(updates={PREFECT_FLOWS_HEARTBEAT_FREQUENCY: None}):
        return run(params)


class DeploymentDispatcher(_Base):
    """Flow runs of the ``train`` deployment on the work pool ``gpu``, read back from the Prefect
    API; a worker may outlive the scheduler, so a run left going can be adopted."""

    def __init__(
        self,
        slots: int,
        env: dict[str, str],
        deployment: str = "train/train",
        max_attempts: int = 3,
        pin_gpus: bool = True,
        command: str | None = None,
    ) -> None:
        super().__init__(slots, max_attempts)
        self.env = env
        self.deployment = deployment
        self.pin_gpus = pin_gpus  # False on a cluster: the node's worker decides the GPU
        self.command = command  # the flow run's command (`tenantml.ops.warm`); None: the pool's

    def _start(self, spec: JobSpec) -> Any:
        from prefect.deployments import run_deployment

        env = dict(self.env)
        if self.pin_gpus:
            env["CUDA_VISIBLE_DEVICES"] = str(spec.slot)
        variables: dict[str, Any] = {"env": env}
        if self.command:
            variables["command"] = self.command
        fr = run_deployment(
            self.deployment,
            parameters={"spec": spec.params()},
            timeout=0,
            job_variables=variables,
            flow_run_name=f"{spec.tenant}-{spec.job_id}",
        )
        return fr.id  # type: ignore[union-attr]  # sync call: a FlowRun, not a coroutine

    def adopt(self, spec: JobSpec, flow_run_id: str, *, listed: bool = False) -> bool:
        """Track a run a previous scheduler started instead of a new one; `poll` reports it
        when it ends, and sends it again if it failed. False (the caller sends it) when this
        Prefect server has no such flow run: deleted, or of another server's database (an
        embedded home later served by `tenantml up`); adopted, every `poll` failed on it, and
        every restart adopted it again. ``listed`` (by `left_going`): not read again."""
        if not listed and not self._exists(flow_run_id):
            return False
        self.jobs[self._key(spec)] = _Job(spec, flow_run_id, time.monotonic())
        return True

    @staticmethod
    def _exists(flow_run_id: str) -> bool:
        """Whether this Prefect server holds flow run `flow_run_id`."""
        from prefect.client.orchestration import get_client
        from prefect.exceptions import ObjectNotFound

        try:
            run_id = uuid.UUID(flow_run_id)
        except ValueError:
            return False
        with get_client(sync_client=True) as client:
            try:
                client.read_flow_run(run_id)
            except ObjectNotFound:
                return False
        return True

    def left_going(self) -> list[tuple[JobSpec, str]]:
        """The deployment's flow runs not yet final (scheduled, pending, running, ...), each with
        the spec it was sent with; one whose ``spec`` parameter no longer fits `JobSpec` (sent by
        another version) is left alone with a log line. Read page after page (the server's
        default limit each, 200 unless set otherwise: a larger limit is refused) until one
        brings no run not seen: one request returned only the first page, so on a pool with
        more runs going (128 GPUs and a run waiting on each) the rest could be sent again. A run
        that ends between two pages may hide one that follows it (the pages shift): it is
        adopted through its MLflow record, or, if it has none yet, sent again."""
        from prefect.client.orchestration import get_client
        from prefect.client.schemas.filters import (
            FlowRunFilter,
            FlowRunFilterDeploymentId,
            FlowRunFilterState,
            FlowRunFilterStateType,
        )
        from prefect.client.schemas.objects import TERMINAL_STATES
        from prefect.client.schemas.sorting import FlowRunSort

        runs: dict[uuid.UUID, Any] = {}  # by id: a run listed on two pages counts once
        with get_client(sync_client=True) as client:
            deployment = client.read_deployment_by_name(self.deployment)
            going = FlowRunFilter(
                deployment_id=FlowRunFilterDeploymentId(any_=[deployment.id]),
                state=FlowRunFilterState(
                    type=FlowRunFilterStateType(not_any_=list(TERMINAL_STATES))
                ),
            )
            offset = 0
            while True:
                page = client.read_flow_runs(
                    flow_run_filter=going, sort=FlowRunSort.ID_DESC, offset=offset
                )
                new = {fr.id: fr for fr in page if fr.id not in runs}
                if not new:
                    break
                runs.update(new)
                offset += len(page)
        out = []
        for fr in runs.values():
            try:
                out.append((JobSpec(**fr.parameters["spec"]), str(fr.id)))
            except (KeyError, TypeError) as err:
                print(f"flow run {fr.name} ({fr.id}) left alone: its spec does not fit ({err})")
        return out

    def _state(self, handle: Any) -> tuple[bool, bool, str]:
        from prefect.client.orchestration import get_client

        with get_client(sync_client=True) as client:
            fr = client.read_flow_run(handle)
        state = fr.state
        if state is None or not state.is_final():
            return False, False, ""
        return True, state.is_completed(), f"{state.type.value}: {state.message or ''}"
