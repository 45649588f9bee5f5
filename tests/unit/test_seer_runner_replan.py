"""The live `replan` tuner's decision between stages (`trainers.seer_runner._replan`): from the
curves the trials traced, it keeps the filled plan or trains the most promising trials to the
deadline, never past the deadline T or the budget B left (Fact 1)."""

from __future__ import annotations

from dataclasses import asdict

import pytest

from trainers.elastic import StageResult
from trainers.seer_runner import (
    Returned,
    SeerJob,
    StageEvent,
    _replan,
    _stage_from,
    _State,
    best_so_far,
    returned_state,
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


def _ends(*rows: tuple[str, float, int]) -> list[dict[str, object]]:
    return [{"trial": t, "accuracy": a, "steps": n} for t, a, n in rows]


def test_replan_returns_the_best_state_of_the_run_the_paper_its_last_stage() -> None:
    """A finalist at 0.94 after stage 1 diverged to 0.108 in stage 2: `replan` returns its
    stage-1 state, kept under ``-best``; the paper's SEER the finalist as it ended."""
    events = _ends(("trial-000", 0.94, 40), ("trial-001", 0.80, 40), ("trial-000", 0.108, 120))
    losses = {"trial-000": 0.892, "trial-001": 0.2}
    got = returned_state("replan", "j", ["trial-000"], losses, events)
    assert got == Returned("trial-000", "j-trial-000-best", 0.94, 40)
    paper = returned_state("seer", "j", ["trial-000"], losses, events)
    assert paper == Returned("trial-000", "j-trial-000", 0.108, 120)
    # an eliminated trial's last state is its best: its own checkpoint
    events = _ends(("trial-000", 0.5, 40), ("trial-001", 0.8, 40), ("trial-000", 0.7, 120))
    got = returned_state("replan", "j", ["trial-000"], {"trial-000": 0.3, "trial-001": 0.2},
                         events)  # fmt: skip
    assert got == Returned("trial-001", "j-trial-001", 0.8, 40)
    # a later stage end as good as the best is the checkpoint itself (nothing was copied)
    events = _ends(("trial-000", 0.9, 40), ("trial-000", 0.9, 120))
    got = returned_state("replan", "j", ["trial-000"], {"trial-000": 0.1}, events)
    assert got == Returned("trial-000", "j-trial-000", 0.9, 120)


def test_best_so_far_is_set_only_while_the_checkpoint_holds_the_best_state() -> None:
    events = _ends(("a", 0.5, 10), ("b", 0.6, 10))
    assert best_so_far(events, "a") == (0.5, 10) and best_so_far(events, "c") is None
    events += _ends(("a", 0.7, 30))
    assert best_so_far(events, "a") == (0.7, 30)
    events += _ends(("a", 0.2, 50))  # its best (step 30) is now the -best copy
    assert best_so_far(events, "a") is None
    events += _ends(("a", 0.7, 70))  # as good again: the checkpoint is a best state
    assert best_so_far(events, "a") == (0.7, 70)
