"""The live `replan` tuner's decision between stages (`trainers.seer_runner._replan`): from the
curves the trials traced, it keeps the filled plan or trains the most promising trials to the
deadline, never past the deadline T or the budget B left (Fact 1)."""

from __future__ import annotations

import json
from dataclasses import asdict, astuple
from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from trainers.elastic import StageResult, kept_best
from trainers.seer_runner import (
    Returned,
    SeerJob,
    StageEvent,
    _replan,
    _stage_from,
    _State,
    returned_state,
    stage_gpu_s,
)


def _job(budget: float) -> SeerJob:
    return SeerJob("t", "lenet", 1, "j", 8.0, budget, 2, 2, 1, 4.0, 1.0, 64, 0)


def _event(trial: str, stage: int, steps: int, acc: float) -> StageEvent:
    r = StageResult(acc, steps, steps, 0, 1.0, 1, 60.0, 0.0, 0.0, 60.0, 0.5)
    return StageEvent(trial, stage, 1, 0, {"lr": 0.1}, r)


def _state(job: SeerJob, curves: dict[str, list[list[float]]], gpu_min: float) -> _State:
    p = job.plan()
    ids = list(curves)
    st = _State({t: {"lr": 0.1} for t in ids}, ids, gpu_s=gpu_min * 60.0)
    st.stages = [asdict(s) for s in p.stages]
    st.curves = curves
    st.losses = {t: 1 - c[-1][1] for t, c in curves.items()}
    return st


def test_a_flat_field_keeps_the_plan_and_its_stages_fit_what_is_left() -> None:
    job = _job(64.0)
    p = job.plan()
    first = _stage_from(asdict(p.stages[0]))
    n = first.trials
    curves = {f"trial-{i:03d}": [[s, 0.5] for s in (10, 20, 30, 40)] for i in range(n)}
    st = _state(job, curves, gpu_min=first.resource_time)
    events = [_event(t, 1, 40, 0.5) for t in curves]
    alive = _replan(job, p, st, first, events, list(curves))
    (d,) = st.decisions
    assert d["choice"] == "continue" and alive == list(curves)
    rest = [_stage_from(s) for s in st.stages[1:]]
    assert rest[-1].end <= p.T + 1e-9
    assert sum(s.resource_time for s in rest) <= d["left_budget_gpu_min"] + 1e-9


def test_an_exploit_choice_becomes_one_stage_to_the_deadline(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """`policy.seer.replan.choose` is tested on the simulator; here what the runner makes of
    an ``exploit-2`` answer: the two trials, on its GPUs each, from the next stage's start to T."""
    import trainers.seer_runner as runner
    from policy.seer.replan import Choice

    job = _job(64.0)
    p = job.plan()
    first = _stage_from(asdict(p.stages[0]))
    curves = {f"trial-{i:03d}": [[s, 0.2 + i / 100] for s in (10, 20, 30, 40)]
              for i in range(first.trials)}  # fmt: skip
    st = _state(job, curves, gpu_min=first.resource_time)
    seen = {}

    def fake(stages, progress, predict, left_t, left_b, settings):  # type: ignore[no-untyped-def]
        seen.update(left_t=left_t, left_b=left_b, rate=settings.scaling(1))
        return Choice("exploit-2", 0.9, 0.5, ("trial-003", "trial-001"), 2)

    monkeypatch.setattr(runner, "choose", fake)
    events = [_event(t, 1, 40, c[-1][1]) for t, c in curves.items()]
    alive = _replan(job, p, st, first, events, list(curves))
    assert alive == ["trial-003", "trial-001"]
    (exploit,) = [_stage_from(s) for s in st.stages[1:]]
    assert exploit.start == pytest.approx(first.end) and exploit.end == pytest.approx(p.T)
    assert [(b.trials, b.gpus_per_trial) for b in exploit.brackets] == [(2, 2)]
    assert seen["left_t"] == pytest.approx(p.T - first.end)
    assert seen["left_b"] == pytest.approx(p.B - first.resource_time)
    assert seen["rate"] == pytest.approx(40 / (first.end - first.start))  # steps per GPU-min
    (d,) = st.decisions
    assert d["choice"] == "exploit-2" and d["trials"] == ["trial-003", "trial-001"]


def _ends(*rows: tuple[str, float, int, tuple[float, int] | None]) -> list[dict[str, object]]:
    return [{"trial": t, "accuracy": a, "steps": n, "best": b} for t, a, n, b in rows]


def test_replan_returns_the_best_state_of_the_run_the_paper_its_last_stage() -> None:
    """A finalist at 0.94 after stage 1 diverged to 0.108 in stage 2: `replan` returns its
    stage-1 state, kept under ``-best``; the paper's SEER the finalist as it ended."""
    events = _ends(("trial-000", 0.94, 40, (0.94, 40)), ("trial-001", 0.80, 40, (0.8, 40)),
                   ("trial-000", 0.108, 120, (0.94, 40)))  # fmt: skip
    losses = {"trial-000": 0.892, "trial-001": 0.2}
    got = returned_state("replan", "j", ["trial-000"], losses, events)
    assert got == Returned("trial-000", "j-trial-000-best", 0.94, 40)
    paper = returned_state("seer", "j", ["trial-000"], losses, events)
    assert paper == Returned("trial-000", "j-trial-000", 0.108, 120)
    # an eliminated trial's last state is its best: its own checkpoint
    events = _ends(("trial-000", 0.5, 40, (0.5, 40)), ("trial-001", 0.8, 40, (0.8, 40)),
                   ("trial-000", 0.7, 120, (0.7, 120)))  # fmt: skip
    got = returned_state("replan", "j", ["trial-000"], {"trial-000": 0.3, "trial-001": 0.2},
                         events)  # fmt: skip
    assert got == Returned("trial-001", "j-trial-001", 0.8, 40)
    # events from before bests were kept: the last state counts, as it did
    events = _ends(("trial-000", 0.9, 40, None), ("trial-000", 0.6, 120, None))
    got = returned_state("replan", "j", ["trial-000"], {"trial-000": 0.4}, events)
    assert got == Returned("trial-000", "j-trial-000", 0.6, 120)


def test_kept_best_copies_only_a_best_state_about_to_be_overwritten() -> None:
    assert kept_best(0, None, 0.5, 10) == ((0.5, 10), False)  # a new trial
    assert kept_best(10, (0.5, 10), 0.7, 30) == ((0.7, 30), False)  # better: the new state
    assert kept_best(30, (0.7, 30), 0.7, 50) == ((0.7, 50), False)  # as good: the later
    assert kept_best(50, (0.7, 50), 0.2, 70) == ((0.7, 50), True)  # below: keep step 50
    assert kept_best(70, (0.7, 50), 0.3, 90) == ((0.7, 50), False)  # the copy holds it


@settings(max_examples=300, deadline=None)
@given(st.lists(st.tuples(st.floats(0, 1), st.booleans()), min_size=1, max_size=12))
def test_the_returned_state_is_the_best_ever_written_even_across_crashes(
    stages: list[tuple[float, bool]],
) -> None:
    """A trial's stages on a store (key -> (step, score)), each ending at a score; a crashed
    attempt writes its checkpoint but the runner records no event, and the stage runs again
    from what it wrote (as `run_seer` resumes). The state `returned_state` names is in the
    store, at the step it reports, with the best score of every state ever written."""
    store: dict[str, tuple[int, float, tuple[float, int] | None]] = {}
    events: list[dict[str, object]] = []
    written: list[float] = []
    for score, crashed in stages:
        for attempt_crashes in (crashed, False):
            step, _, best = store.get("j-t", (0, 0.0, None))
            new_step = step + 10
            kept, copy = kept_best(step, best, score, new_step)
            if copy:
                store["j-t-best"] = store["j-t"]
            store["j-t"] = (new_step, score, kept)
            written.append(score)
            if not attempt_crashes:
                events += _ends(("t", score, new_step, kept))
    got = returned_state("replan", "j", ["t"], {}, events)
    step, score, _ = store[got.checkpoint]
    assert (step, score) == (got.steps, got.accuracy) and score == max(written)


def test_a_stage_costs_its_own_training_not_the_trials_earlier_stages() -> None:
    """A trial resumed on 2 ranks: 40 s of training this stage (100 s over all its stages),
    2 s to start, 1 s to checkpoint: 2 x 43 GPU-seconds, not 2 x 103."""
    r = StageResult(0.8, 90, 30, 60, 3.0, 2, 100.0, 2.0, 1.0, 45.0, 0.3, stage_train_s=40.0)
    assert stage_gpu_s(StageEvent("t", 2, 2, 0, {"lr": 0.1}, r)) == 86.0
    old = StageResult(0.8, 90, 30, 60, 3.0, 2, 100.0, 2.0, 1.0, 45.0, 0.3)  # before the field
    assert stage_gpu_s(StageEvent("t", 2, 2, 0, {"lr": 0.1}, old)) == 206.0


def test_replan_starts_from_the_default_recipe_the_paper_draws_every_trial() -> None:
    import numpy as np

    from trainers.elastic import DEFAULT_CONFIG, SEARCH_SPACE, sample_configs

    ours = sample_configs(4, np.random.default_rng(7), with_default=True)
    assert ours[0] == DEFAULT_CONFIG and len(ours) == 4
    paper = sample_configs(4, np.random.default_rng(7))  # Alg. 1 line 2: all drawn
    assert len(paper) == 4 and DEFAULT_CONFIG not in paper
    assert all(c[k] in SEARCH_SPACE[k] for c in ours + paper for k in SEARCH_SPACE)
    assert sample_configs(0, np.random.default_rng(7), with_default=True) == []


def test_a_stage_run_again_after_a_failure_keeps_the_trials_that_finished_it(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """One trial's rank crashes while the stage's others finish (stage-end checkpoints written);
    the flow runs the job again. The finished trials trained the stage a second time on top of
    their checkpoints (twice the failed one's training going into the elimination), and the
    failed attempt's GPU time was never charged to the budget."""
    import time

    import trainers.seer_runner as runner
    from trainers.elastic import StageResult

    class Store:
        def __init__(self) -> None:
            self.checkpoints: dict[str, bytes] = {}

        def get_checkpoint(self, tenant: str, key: str) -> bytes | None:
            return self.checkpoints.get(key)

        def put_checkpoint(self, tenant: str, key: str, data: bytes) -> None:
            self.checkpoints[key] = data

        class blobs:  # noqa: N801 (the attribute the runner reads)
            @staticmethod
            def url() -> str:
                return "mem://"

    store, crash = Store(), {"on": True}

    def stage(ts: Any) -> StageResult:
        resumed = int(store.checkpoints.get(ts.checkpoint, b"0"))
        if crash["on"] and ts.checkpoint.endswith("trial-002"):
            time.sleep(0.2)
            raise RuntimeError("rank 0 exited with -9")
        step = resumed + 100
        store.checkpoints[ts.checkpoint] = str(step).encode()
        return StageResult(0.5 + step / 1e4, step, 100, resumed, 1.0, len(ts.devices), 60.0,
                           0.0, 0.0, 60.0, 0.1, curve=[[float(step), 0.5]],
                           best=[0.5, float(step)], stage_train_s=60.0)  # fmt: skip

    monkeypatch.setattr(runner, "run_trial_stage", stage)
    monkeypatch.setattr(runner, "load_trial_model", lambda *a, **k: None)
    monkeypatch.setattr(runner, "_devices", lambda job: ["cpu"])
    job = SeerJob("t", "lenet", 1, "j", 3.0, 12.0, 2, 2, 1, float("inf"), 1.0, 128, 0,
                  tuner="seer")  # fmt: skip
    first = job.plan().stages[0]
    assert [(b.trials, b.gpus_per_trial) for b in first.brackets] == [(2, 1), (1, 2)]
    with pytest.raises(RuntimeError, match="rank 0 exited"):
        runner.run_seer(job, store)  # type: ignore[arg-type]
    kept = json.loads(store.checkpoints["j-seer"])
    assert sorted(kept["finished"]) == ["trial-000", "trial-001"] and kept["next_stage"] == 0
    assert kept["gpu_s"] >= 0.2 * 2  # the failed trial held its 2 GPUs
    crash["on"] = False
    runner.run_seer(job, store)  # type: ignore[arg-type]
    stage_1 = [e for e in json.loads(store.checkpoints["j-seer"])["events"] if e["stage"] == 1]
    assert sorted((e["trial"], e["steps"]) for e in stage_1) == [
        ("trial-000", 100), ("trial-001", 100), ("trial-002", 100)
    ]  # fmt: skip


def test_a_job_resumed_with_fewer_minutes_left_keeps_its_stages_deadline(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """`seer run --deadline 18:00` again after a Ctrl-C resumes the job (160dc32) with the
    minutes left now, a shorter T than the stored stages were planned on: the re-planning mixed
    the two clocks, and a stage could end before it began. The stages' own T is kept."""
    import trainers.seer_runner as runner
    from trainers.elastic import StageResult

    checkpoints: dict[str, bytes] = {}

    class Store:
        def get_checkpoint(self, tenant: str, key: str) -> bytes | None:
            return checkpoints.get(key)

        def put_checkpoint(self, tenant: str, key: str, data: bytes) -> None:
            checkpoints[key] = data

        class blobs:  # noqa: N801 (the attribute the runner reads)
            @staticmethod
            def url() -> str:
                return "mem://"

    stop = {"at": 2}  # the first attempt ends (Ctrl-C) when stage 2 starts

    def stage(ts: Any) -> StageResult:
        resumed = int(checkpoints.get(ts.checkpoint, b"0"))
        if resumed >= 100 * (stop["at"] - 1):
            raise KeyboardInterrupt
        step = resumed + 100
        checkpoints[ts.checkpoint] = str(step).encode()
        return StageResult(0.5 + step / 1e4, step, 100, resumed, 1.0, len(ts.devices), 60.0,
                           0.0, 0.0, 60.0, 0.1, curve=[[float(step), 0.5 + step / 1e4]],
                           best=[0.5, float(step)], stage_train_s=60.0)  # fmt: skip

    monkeypatch.setattr(runner, "run_trial_stage", stage)
    monkeypatch.setattr(runner, "load_trial_model", lambda *a, **k: None)
    monkeypatch.setattr(runner, "_devices", lambda job: ["cpu"])
    job = _job(64.0)  # deadline 8 min
    with pytest.raises(KeyboardInterrupt):
        runner.run_seer(job, Store())  # type: ignore[arg-type]
    stop["at"] = 99
    later = SeerJob(job.tenant, job.candidate, job.snapshot, job.job_id, 3.0, *astuple(job)[5:])
    runner.run_seer(later, Store())  # type: ignore[arg-type]
    stages = json.loads(checkpoints["j-seer"])["stages"]
    assert all(s["start"] < s["end"] for s in stages), stages
    assert stages[-1]["end"] == pytest.approx(8.0)
    assert all(d["left_deadline_min"] >= 0 for d in json.loads(checkpoints["j-seer"])["decisions"])


def test_no_trial_gets_more_processes_than_the_global_batch() -> None:
    """Each process of a trial takes one example a step at least. `replan`'s starting plan for
    30 min and 80 GPU-minutes gives a trial 4 GPUs; with a global batch of 3 that stage failed
    after its other trials had trained (`seer run`'s check used the paper's plan, 2 GPUs)."""
    wide = SeerJob("t", "lenet", 1, "j", 30.0, 80.0, 4, 2, 1, float("inf"), 1.0, 128, 0)
    assert max(b.gpus_per_trial for s in wide.plan().stages for b in s.brackets) == 4
    narrow = SeerJob("t", "lenet", 1, "j", 30.0, 80.0, 4, 2, 1, float("inf"), 1.0, 3, 0)
    assert narrow.widest == 3
    assert max(b.gpus_per_trial for s in narrow.plan().stages for b in s.brackets) <= 3
