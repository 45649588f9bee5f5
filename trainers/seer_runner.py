"""Execute a SEER plan (shared/papers/003, Alg. 1) for one (tenant, model) on this machine,
as the paper's tuner (``tuner="seer"``) or as ``replan`` (the default), which re-plans.

The plan (:func:`policy.seer.plan`) fixes the stages; each stage starts at its planned offset from
the job's start (wall clock) and its trials train concurrently, each on ``p`` processes
(:mod:`trainers.elastic`), until the stage's end. Then the brackets eliminate (line 9), the
survivors are re-ordered by loss (line 11) and re-assigned, so the best trials move to the
brackets with more GPUs and resume from their checkpoints with their new ``p``.

Loss is ``1 - validation accuracy``. Devices: the GPUs this process sees, handed out in order
to the ranks of a stage; when a stage asks for more GPUs than there are, ranks share GPUs
(round robin), which a cloud deployment would avoid by adding machines. On a CPU-only machine
every rank is a CPU process. After each stage the job's state (who is alive, their losses,
GPU-seconds spent, the stages still to run) goes to the store, so a restarted job continues at
the next stage.

``replan`` (`policy.seer.replan`, issue 19) starts from `policy.seer.replan.starting_plan`
(the filled plan, `policy.seer.fill`, or E-Grid's where that one bets on one finalist early)
with the default SGD recipe as its first trial (`trainers.elastic.DEFAULT_CONFIG`), scores
every trial ``EVALS_PER_STAGE`` times a stage, and after every stage but the last re-plans the
rest: the unspent budget goes to the remaining stages (``fill`` capped at the
trials alive), then `policy.seer.replan.choose` compares continuing that plan with training the
k most promising trials to the deadline (``exploit-k``), each trial's curve extrapolated by
EarlyCurve's fit. Progress is counted in optimizer steps (the global batch is fixed, so a step
is the same work on any ``p``); steps per minute on one GPU are measured from the stage just
run. Survivors are the best trials of the whole stage (a filled plan's brackets do not feed
each other one to one). Every decision is kept (`SeerResult.decisions`) for the job's record.
It returns the best state any trial reached at a stage end (`returned_state`; the paper's
returns the best trial of its last stage as it ended).
"""

from __future__ import annotations

import json
import threading
import time
from collections.abc import Callable, Sequence
from concurrent.futures import ThreadPoolExecutor
from dataclasses import asdict, dataclass, field, replace
from typing import Any

import numpy as np

from policy.seer import (
    TUNERS,
    Plan,
    Stage,
    StageBracket,
    Tuner,
    assign_stage,
    check_tuner,
    eliminate,
    fill,
    plan,
)
from policy.seer.replan import CurvePredictor, ceiling_of, choose, starting_plan
from policy.seer.tuning import PowerScaling, TuningSettings
from store import ExampleStore
from trainers._job import EpochReport, TrainResult
from trainers.elastic import (
    BEST_SUFFIX,
    StageResult,
    TrialStage,
    load_trial_model,
    run_trial_stage,
    sample_configs,
)

__all__ = [
    "EVALS_PER_STAGE",
    "TUNERS",
    "Returned",
    "SeerJob",
    "StageEvent",
    "returned_state",
    "run_seer",
    "stage_gpu_s",
]

#: validation scores per trial and stage for ``replan`` (EarlyCurve needs 3 points to fit)
EVALS_PER_STAGE = 4


@dataclass(frozen=True)
class SeerJob:
    """A SEER job: deadline (minutes) and budget (GPU-minutes) for ``candidate`` of ``tenant``,
    the planner's knobs (`policy.seer.plan`), the fixed global batch and the seed. The service's
    defaults for these are `tasks._seer.SeerOptions`' (which makes this job), so none here.

    ``micro_batch``: examples per forward pass (gradient accumulation up to the global batch).
    ``devices``: the GPUs to use (``["cuda:0", "cuda:1"]``); default: every visible GPU, else
    CPU processes. ``tuner``: ``replan`` (default) or ``seer``, the paper's (see `TUNERS`).
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
    tuner: Tuner = "replan"

    @property
    def widest(self) -> float:
        """The most GPUs (processes) a trial may get: `p_max`, and no more than the global
        batch, which the trial's processes split (one example a step each at least)."""
        return min(self.p_max, self.global_batch)

    def plan(self) -> Plan:
        """The plan the job starts from: Alg. 1's for ``seer``; for ``replan``
        `policy.seer.replan.starting_plan` (SEER-fill's, or E-Grid's where SEER's bets on one
        finalist early)."""
        make = starting_plan if check_tuner(self.tuner) == "replan" else plan
        return make(
            self.deadline_min,
            self.budget_gpu_min,
            eta=self.eta,
            v=self.v,
            p_min=self.p_min,
            p_max=self.widest,
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
    stages: list[dict[str, Any]] = field(default_factory=list)  # the plan's, as re-planned
    curves: dict[str, list[list[float]]] = field(default_factory=dict)  # [step, accuracy]
    decisions: list[dict[str, Any]] = field(default_factory=list)
    # the stage `next_stage`'s trials that finished it in an attempt where another failed:
    # trial -> its `StageResult` (as a dict); a re-run keeps them instead of training them a
    # second stage on top of their stage-end checkpoints (they got twice the failed one's)
    finished: dict[str, dict[str, Any]] = field(default_factory=dict)
    # the deadline T (minutes) the stages' timeline was planned for: a resumed job re-plans
    # against it, whatever minutes a clock-time deadline has left by then (None: older state)
    plan_t: float | None = None


def _state_key(job: SeerJob) -> str:
    """The checkpoint key of `job`'s `_State`."""
    return f"{job.job_id}-seer"


def _stage_from(d: dict[str, Any]) -> Stage:
    return Stage(
        int(d["index"]),
        float(d["start"]),
        float(d["end"]),
        tuple(StageBracket(**b) for b in d["brackets"]),
    )


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
    on_decision: Callable[[list[dict[str, Any]]], None] | None = None,
) -> TrainResult:
    """Run (or resume) ``job``; returns the best trial's model as a :class:`TrainResult`.

    ``on_stage`` is called after every stage with that stage's events (outcomes filled in);
    ``on_decision`` (``replan``) after every re-planning decision with all of them so far.
    """
    p = job.plan()
    key = _state_key(job)
    blob = store.get_checkpoint(job.tenant, key)
    if blob is not None:  # resume: the remaining stages keep their lengths, starting now
        state = _State(**json.loads(blob))
        if state.plan_t is not None and state.plan_t != p.T:  # the stages' own deadline
            p = replace(p, T=state.plan_t)
        if not state.stages:  # written before the stages were kept
            state.stages = [asdict(st) for st in p.stages]
        if state.next_stage < len(state.stages):
            state.started_at = time.time() - state.stages[state.next_stage]["start"] * 60.0
    else:
        rng = np.random.default_rng(job.seed)
        # ours starts from the default recipe among its trials; the paper's draws them all
        configs = sample_configs(p.sampled_trials, rng, with_default=job.tuner == "replan")
        ids = [f"trial-{i:03d}" for i in range(p.sampled_trials)]
        state = _State(dict(zip(ids, configs, strict=True)), ids, started_at=time.time())
        state.stages = [asdict(st) for st in p.stages]
        state.plan_t = p.T
    devices = _devices(job)
    while state.next_stage < len(state.stages):
        stage = _stage_from(state.stages[state.next_stage])
        groups = assign_stage(stage, state.alive, state.losses)
        events = _run_stage(job, store, state, stage, groups, devices)
        for e in events:
            state.losses[e.trial] = 1.0 - e.result.accuracy
            state.gpu_s += stage_gpu_s(e)
            state.curves.setdefault(e.trial, []).extend(e.result.curve)
        last = state.next_stage == len(state.stages) - 1
        going: dict[str, int] = {}
        if not last:
            ran = [t for ts in groups for t in ts]
            if job.tuner == "replan":
                state.alive = _replan(job, p, state, stage, events, ran)
                if on_decision is not None:
                    on_decision(state.decisions)
            else:
                following = _stage_from(state.stages[state.next_stage + 1])
                nxt = {b.bracket: b.trials for b in following.brackets}
                keep = [nxt.get(b.bracket, 0) for b in stage.brackets]
                state.alive = eliminate(groups, state.losses, keep)
            # where the survivors go next (the assignment the next stage will make)
            following = _stage_from(state.stages[state.next_stage + 1])
            placed = assign_stage(following, state.alive, state.losses)
            going = {t: b.bracket for b, ts in zip(following.brackets, placed, strict=True)
                     for t in ts}  # fmt: skip
        else:
            state.alive = [t for ts in groups for t in ts]
        outcomes = [replace(e, outcome=_outcome(e, going, last)) for e in events]
        state.events += [
            {
                "trial": e.trial,
                "stage": e.stage,
                "gpus": e.gpus,
                "outcome": e.outcome,
                "accuracy": e.result.accuracy,
                "steps": e.result.steps,
                "best": e.result.best,
            }
            for e in outcomes
        ]
        state.next_stage += 1
        store.put_checkpoint(job.tenant, key, json.dumps(asdict(state)).encode())
        if on_stage is not None:
            on_stage(outcomes)
    chosen = returned_state(job.tuner, job.job_id, state.alive, state.losses, state.events)
    model = load_trial_model(job.tenant, job.candidate, job.snapshot, chosen.checkpoint, store)
    best = chosen.trial
    curve = [
        EpochReport(state.configs[e["trial"]]["lr"], e["stage"], -1.0, e["accuracy"], 0.0)
        for e in state.events
        if e["trial"] == best
    ]
    return TrainResult(
        job_id=job.job_id,
        tenant=job.tenant,
        candidate=job.candidate,
        snapshot=job.snapshot,
        accuracy=chosen.accuracy,
        cost_s=state.gpu_s,
        epochs=len(state.stages),
        hyperparameters={**state.configs[best], "seer_trial": best, "steps": chosen.steps},
        model=model,
        curve=curve,
        device=",".join(devices),
    )


@dataclass(frozen=True)
class Returned:
    """The state a job returns: ``trial``'s, stored under ``checkpoint``, with its validation
    ``accuracy`` and global ``steps`` at the stage end that made it."""

    trial: str
    checkpoint: str
    accuracy: float
    steps: int


def returned_state(
    tuner: Tuner,
    job_id: str,
    last_stage: Sequence[str],
    losses: dict[str, float],
    events: Sequence[dict[str, Any]],
) -> Returned:
    """The trial and state a job returns (``events``: every trial's stage ends, in order, with
    ``accuracy``, ``steps`` and ``best``; ``losses``: each trial's loss at its last one).

    The paper's SEER returns the best trial of its last stage as it ended (Alg. 1 line 11).
    ``replan`` returns the best state any trial reached at a stage end: an eliminated trial's
    checkpoint is still in the store, and a trial that goes on can diverge afterwards (a
    finalist at 0.94 after stage 1 ended stage 2 at chance). A trial's best is what its last
    stage end reports its checkpoint records (`trainers.elastic.kept_best`): that checkpoint
    when the best is its step, else the copy under ``BEST_SUFFIX``. Events from before bests
    were kept have none: their last state counts."""
    if tuner == "seer":
        trial = min(last_stage, key=lambda t: losses[t])
        last = _last_event(events, trial)
        return Returned(trial, f"{job_id}-{trial}", float(last["accuracy"]), int(last["steps"]))
    best: dict[str, tuple[float, int, int]] = {}  # trial -> (score, step, its last step)
    for e in events:  # in order: each trial's last stage end is what counts
        score, step = e.get("best") or (e["accuracy"], e["steps"])
        best[e["trial"]] = (float(score), int(step), int(e["steps"]))
    trial = max(best, key=lambda t: best[t][0])
    score, step, last_step = best[trial]
    key = f"{job_id}-{trial}" + ("" if step == last_step else BEST_SUFFIX)
    return Returned(trial, key, score, step)


def stage_gpu_s(e: StageEvent) -> float:
    """The GPU-seconds a trial's stage took: its ranks' count times this stage's training, the
    processes' start and the checkpoint. (``StageResult.train_s`` counts every stage the trial
    trained; adding it charged a trial's earlier stages again at each of its later ones, so the
    budget left for re-planning looked smaller than it was.)"""
    r = e.result
    train = r.train_s if r.stage_train_s is None else r.stage_train_s
    return e.gpus * (train + r.start_s + r.checkpoint_s)


def _last_event(events: Sequence[dict[str, Any]], trial: str) -> dict[str, Any]:
    return [e for e in events if e["trial"] == trial][-1]


def _outcome(e: StageEvent, going: dict[str, int], last: bool) -> str:
    if last:
        return "final"
    if e.trial not in going:
        return "eliminated"
    if going[e.trial] > e.bracket:
        return "promoted"
    return "demoted" if going[e.trial] < e.bracket else "kept"


def _run_stage(
    job: SeerJob,
    store: ExampleStore,
    state: _State,
    stage: Stage,
    groups: list[list[str]],
    devices: list[str],
) -> list[StageEvent]:
    """Train every trial of ``stage`` (``groups``: its trials per bracket) concurrently until
    the stage's end on the wall clock."""
    until = state.started_at + stage.end * 60.0
    threads = max(1, _cpu_count() // stage.gpus) if devices == ["cpu"] else 1
    evals = EVALS_PER_STAGE if job.tuner == "replan" else 1
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
                        evals=evals,
                        keep_best=job.tuner == "replan",
                    ),
                )
            )
    done = {t: StageResult(**r) for t, r in state.finished.items()}
    todo = [w for w in work if w[0] not in done]
    failed: list[tuple[str, BaseException]] = []
    lock = threading.Lock()

    def attempt(w: tuple[str, int, int, TrialStage]) -> None:
        began = time.time()
        try:
            done[w[0]] = run_trial_stage(w[3])
        except BaseException as e:  # the others go on to the stage's end
            with lock:
                failed.append((w[0], e))
                state.gpu_s += (time.time() - began) * w[1]  # its GPUs were held all the same

    with ThreadPoolExecutor(max(1, len(todo))) as pool:
        list(pool.map(attempt, todo))
    if failed:  # keep what finished, and what the failed attempt cost, for the re-run
        state.finished = {t: asdict(r) for t, r in done.items()}
        store.put_checkpoint(job.tenant, _state_key(job), json.dumps(asdict(state)).encode())
        raise failed[0][1]
    state.finished = {}
    return [
        StageEvent(t, stage.index, gpus, bracket, state.configs[t], done[t])
        for t, gpus, bracket, _ in work
    ]


def _replan(
    job: SeerJob, p: Plan, state: _State, stage: Stage, events: Sequence[StageEvent],
    ran: list[str],
) -> list[str]:  # fmt: skip
    """Re-plan what follows ``stage`` (see the module docstring): rewrites ``state.stages``
    after it, appends the decision to ``state.decisions``; returns the trials going on."""
    k = state.next_stage + 1
    rest_stages = [_stage_from(d) for d in state.stages[k:]]
    left_t = p.T - rest_stages[0].start
    left_b = p.B - state.gpu_s / 60.0
    rest = fill(replace(p, B=left_b, stages=tuple(rest_stages)), first_cap=len(ran))
    # steps per minute on one GPU, from the stage just run (lambda(p) = p^0.8, as planned)
    speedup = PowerScaling()
    length = stage.end - stage.start
    rates = [e.result.stage_steps / length / speedup(e.gpus) for e in events if length > 0]
    per_gpu = float(np.median(rates)) if rates else 0.0
    settings = TuningSettings(
        eta=job.eta, v=job.v, p_min=job.p_min, p_max=job.widest, t_min=job.t_min,
        scaling=lambda g: per_gpu * speedup(g),
    )  # fmt: skip
    curves = {t: np.array(state.curves.get(t, []), dtype=float).reshape(-1, 2) for t in ran}
    ceiling = ceiling_of([c[:, 1] for c in curves.values()], upper=1.0)
    predict = {t: CurvePredictor(c[:, 0], c[:, 1], 1 << 30, ceiling) for t, c in curves.items()}
    progress = {t: float(c[-1, 0]) if len(c) else 0.0 for t, c in curves.items()}
    choice = choose(rest.stages, progress, predict, left_t, left_b, settings)
    state.decisions.append(
        {
            "after_stage": stage.index,
            "at_min": stage.end,
            "left_deadline_min": left_t,
            "left_budget_gpu_min": left_b,
            "choice": choice.name,
            "predicted_accuracy": choice.predicted,
            "plan_predicted_accuracy": choice.plan,
            "trials": list(choice.trials),
            "gpus_per_trial": choice.gpus,
            "steps_per_gpu_min": per_gpu,
        }
    )
    if choice.trials:
        top = max(b.bracket for st in rest.stages for b in st.brackets) + 1
        bracket = StageBracket(choice.gpus, len(choice.trials), top)
        exploit = Stage(rest.stages[0].index, rest.stages[0].start, p.T, (bracket,))
        state.stages[k:] = [asdict(exploit)]
        return list(choice.trials)
    state.stages[k:] = [asdict(st) for st in rest.stages]
    return ran


def _cpu_count() -> int:
    import os

    return len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else os.cpu_count() or 1
