"""Execute a SEER plan (shared/papers/003, Alg. 1) for one (tenant, model) on this machine.

The plan (:func:`policy.seer.plan`) fixes the stages; each stage starts at its planned offset from
the job's start (wall clock) and its trials train concurrently, each on ``p`` processes
(:mod:`trainers.elastic`), until the stage's end. Then the brackets eliminate (line 9), the
survivors are re-ordered by loss (line 11) and re-assigned, so the best trials move to the
brackets with more GPUs and resume from their checkpoints with their new ``p``.

Loss is ``1 - validation accuracy``. Devices: the GPUs this process sees, handed out in order
to the ranks of a stage; when a stage asks for more GPUs than there are, ranks share GPUs
(round robin), which a cloud deployment would avoid by adding machines. On a CPU-only machine
every rank is a CPU process. After each stage the job's state (who is alive, their losses,
GPU-seconds spent) goes to the store, so a restarted job continues at the next stage.
"""

from __future__ import annotations

import json
import time
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from dataclasses import asdict, dataclass, field
from typing import Any

import numpy as np

from policy.seer import Plan, assign_stage, eliminate, plan
from store import ExampleStore
from trainers._job import EpochReport, TrainResult
from trainers.elastic import (
    StageResult,
    TrialStage,
    load_trial_model,
    run_trial_stage,
    sample_configs,
)

__all__ = ["SeerJob", "StageEvent", "run_seer"]


@dataclass(frozen=True)
class SeerJob:
    """A SEER job: deadline (minutes) and budget (GPU-minutes) for ``candidate`` of ``tenant``,
    the planner's knobs (`policy.seer.plan`), the fixed global batch and the seed. The service's
    defaults for these are `tasks._seer.SeerOptions`' (which makes this job), so none here.

    ``micro_batch``: examples per forward pass (gradient accumulation up to the global batch).
    ``devices``: the GPUs to use (``["cuda:0", "cuda:1"]``); default: every visible GPU, else
    CPU processes.
    """

    tenant: str
    candidate: str
    snapshot: int
    job_id: str
    deadline_min: float
    budget_gpu_min: float
    eta: float
    v: float
    p_min: int
    p_max: float  # math.inf: no limit
    t_min: float
    global_batch: int
    seed: int
    micro_batch: int = 64
    devices: tuple[str, ...] | None = None

    def plan(self) -> Plan:
        return plan(
            self.deadline_min,
            self.budget_gpu_min,
            eta=self.eta,
            v=self.v,
            p_min=self.p_min,
            p_max=self.p_max,
            t_min=self.t_min,
        )


@dataclass(frozen=True)
class StageEvent:
    """One trial's stage: ``outcome`` is ``promoted`` (moved to a bracket with more GPUs),
    ``kept``, ``demoted``, ``eliminated`` (line 9) or ``final`` (trained in the last stage)."""

    trial: str
    stage: int
    gpus: int
    bracket: int
    hyperparameters: dict[str, float]
    result: StageResult
    outcome: str = ""


@dataclass
class _State:
    configs: dict[str, dict[str, float]]
    alive: list[str]
    losses: dict[str, float] = field(default_factory=dict)
    bracket: dict[str, int] = field(default_factory=dict)
    next_stage: int = 0
    gpu_s: float = 0.0
    started_at: float = 0.0
    events: list[dict[str, Any]] = field(default_factory=list)


def _devices(job: SeerJob) -> list[str]:
    if job.devices:
        return list(job.devices)
    import torch

    n = torch.cuda.device_count()
    return [f"cuda:{i}" for i in range(n)] if n else ["cpu"]


def run_seer(
    job: SeerJob,
    store: ExampleStore,
    on_stage: Callable[[list[StageEvent]], None] | None = None,
) -> TrainResult:
    """Run (or resume) ``job``; returns the best trial's model as a :class:`TrainResult`.

    ``on_stage`` is called after every stage with that stage's events (outcomes filled in).
    """
    p = job.plan()
    key = f"{job.job_id}-seer"
    blob = store.get_checkpoint(job.tenant, key)
    if blob is not None:  # resume: the remaining stages keep their lengths, starting now
        state = _State(**json.loads(blob))
        if state.next_stage < len(p.stages):
            state.started_at = time.time() - p.stages[state.next_stage].start * 60.0
    else:
        rng = np.random.default_rng(job.seed)
        configs = sample_configs(p.sampled_trials, rng)
        ids = [f"trial-{i:03d}" for i in range(p.sampled_trials)]
        state = _State(dict(zip(ids, configs, strict=True)), ids, started_at=time.time())
    devices = _devices(job)
    for stage in p.stages[state.next_stage :]:
        groups = assign_stage(stage, state.alive, state.losses)
        until = state.started_at + stage.end * 60.0  # stages end on the wall clock
        threads = max(1, _cpu_count() // stage.gpus) if devices == ["cpu"] else 1
        work: list[tuple[str, int, int, TrialStage]] = []
        cursor = 0
        for b, trials in zip(stage.brackets, groups, strict=True):
            for t in trials:
                ranks = [devices[(cursor + r) % len(devices)] for r in range(b.gpus_per_trial)]
                if devices != ["cpu"]:
                    cursor += b.gpus_per_trial
                work.append(
                    (
                        t,
                        b.gpus_per_trial,
                        b.bracket,
                        TrialStage(
                            job.tenant,
                            job.candidate,
                            job.snapshot,
                            f"{job.job_id}-{t}",
                            state.configs[t],
                            ranks,
                            until,
                            job.global_batch,
                            job.micro_batch,
                            job.seed,
                            store_url=store.blobs.url(),
                            s3_endpoint_url=getattr(store.blobs, "endpoint_url", None),
                            threads_per_rank=threads,
                        ),
                    )
                )
        with ThreadPoolExecutor(max(1, len(work))) as pool:
            results = list(pool.map(lambda w: run_trial_stage(w[3]), work))
        events = [
            StageEvent(t, stage.index, gpus, bracket, state.configs[t], r)
            for (t, gpus, bracket, _), r in zip(work, results, strict=True)
        ]
        for e in events:
            state.losses[e.trial] = 1.0 - e.result.accuracy
            state.gpu_s += e.gpus * (e.result.train_s + e.result.start_s + e.result.checkpoint_s)
        last = stage.index == p.stages[-1].index
        if not last:
            nxt = {b.bracket: b.trials for b in p.stages[stage.index].brackets}
            keep = [nxt.get(b.bracket, 0) for b in stage.brackets]
            state.alive = eliminate(groups, state.losses, keep)
            # where the survivors go next (the assignment the next stage will make)
            placed = assign_stage(p.stages[stage.index], state.alive, state.losses)
            going = {
                t: b.bracket
                for b, ts in zip(p.stages[stage.index].brackets, placed, strict=True)
                for t in ts
            }
        else:
            going = {}
        outcomes = []
        for e in events:
            if last:
                outcome = "final"
            elif e.trial not in going:
                outcome = "eliminated"
            elif going[e.trial] > e.bracket:
                outcome = "promoted"
            elif going[e.trial] < e.bracket:
                outcome = "demoted"
            else:
                outcome = "kept"
            outcomes.append(StageEvent(**{**e.__dict__, "outcome": outcome}))
        state.events += [
            {
                "trial": e.trial,
                "stage": e.stage,
                "gpus": e.gpus,
                "outcome": e.outcome,
                "accuracy": e.result.accuracy,
                "steps": e.result.steps,
            }
            for e in outcomes
        ]
        if last:
            state.alive = [t for ts in groups for t in ts]
        state.next_stage = stage.index
        store.put_checkpoint(job.tenant, key, json.dumps(asdict(state)).encode())
        if on_stage is not None:
            on_stage(outcomes)
    best = min(state.alive, key=lambda t: state.losses[t])
    model = load_trial_model(job.tenant, job.candidate, job.snapshot, f"{job.job_id}-{best}", store)
    curve = [
        EpochReport(state.configs[e["trial"]]["lr"], e["stage"], -1.0, e["accuracy"], 0.0)
        for e in state.events
        if e["trial"] == best
    ]
    steps = max(e["steps"] for e in state.events if e["trial"] == best)
    return TrainResult(
        job_id=job.job_id,
        tenant=job.tenant,
        candidate=job.candidate,
        snapshot=job.snapshot,
        accuracy=1.0 - state.losses[best],
        cost_s=state.gpu_s,
        epochs=len(p.stages),
        hyperparameters={**state.configs[best], "seer_trial": best, "steps": steps},
        model=model,
        curve=curve,
        device=",".join(devices),
    )


def _cpu_count() -> int:
    import os

    return len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else os.cpu_count() or 1
