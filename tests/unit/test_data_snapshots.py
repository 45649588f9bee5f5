"""A tenant that feeds or refines its data gets a new snapshot: its models may be trained again
on the data as they are now (the policy keeps what they did before as evidence), and ``best``
moves to the newest snapshot's most accurate model (`mlflow_plugin.registry.beats`)."""

from __future__ import annotations

import dataclasses

import mlflow
import numpy as np
import pytest
from mlflow.tracking import MlflowClient

from mlflow_plugin import (
    BestModel,
    best_model,
    ensure_tenant_experiment,
    log_trained_model,
    promote_if_better,
    settle_best,
    start_job_run,
)
from mlflow_plugin.registry import beats
from mlflow_plugin.tracking import end_job_run
from policy import (
    Assignment,
    History,
    Observation,
    Problem,
    SchedulerLoop,
    Snapshot,
    independent_prior,
)
from policy._book import STALE_FLOOR
from policy.costs import CostPrior
from policy.rate import RatePolicy
from store import ExampleStore
from tasks._service import Planner
from tests.unit.test_service_logic import TAB, _record, _state, _tenant
from trainers import TrainJob, train


def _one_tenant(m: int = 3) -> Problem:
    return Problem.create(
        ["t"], [f"m{k}" for k in range(m)], np.ones((1, m), bool), np.ones((1, m)),
        prior=independent_prior(np.full(m, 0.5)),
    )  # fmt: skip


def test_a_stale_result_informs_the_posterior_but_its_model_may_be_trained_again() -> None:
    problem, pol, rng = _one_tenant(), RatePolicy(), np.random.default_rng(0)
    stale = History((Observation(0, 2, 0.95, 1.0, stale=True),))
    # equal costs, equal priors: the model that did well on the earlier data is retrained first
    d = pol.decide(Snapshot(problem, stale), None, rng)
    assert [(a.tenant, a.arm) for a in d.assignments] == [(0, 2)]
    book = pol.book(Snapshot(problem, stale))
    post = book.posterior(0)
    assert post.mu[2] > 0.9 and post.mu[0] == post.mu[1] == 0.5  # independent arms
    # untried; the best on the data now is a conservative guess of the served model's there
    assert not book.tried[0].any() and book.n_obs[0] == 0
    assert book.best[0] == pytest.approx(0.95 - STALE_FLOOR)
    # once trained on the current data it counts as tried, and its quality is the best, even
    # below the guess (harder data)
    both = stale.append(Observation(0, 2, 0.8, 1.0))
    book = pol.book(Snapshot(problem, both))
    assert book.tried[0][2] and book.best[0] == 0.8 and book.n_obs[0] == 1
    # a failed job on the current data first: the guess still stands until a model completes
    failed = History((Observation(0, 0, 0.0, 1.0, completed=False), *stale.log))
    book = pol.book(Snapshot(problem, failed))
    assert book.best[0] == pytest.approx(0.95 - STALE_FLOOR) and not book.measured[0]
    # a stale result that arrives after a decision is taken into the next one (the cache of
    # `rate` follows every observation), and its cost, paid on other data, is left out
    pol = RatePolicy()
    assert pol.decide(Snapshot(problem, History()), None, rng).assignments[0].arm == 0
    late = History((Observation(0, 1, 0.97, 1e6, stale=True),))
    assert pol.decide(Snapshot(problem, late), None, rng).assignments[0].arm == 1
    priced = Problem.create(
        ["t"], ["m0", "m1"], np.ones((1, 2), bool), np.ones((1, 2)),
        prior=independent_prior(np.full(2, 0.5)),
        cost_prior=CostPrior(np.zeros(2), 0.0, 0.0, 1.0, 0.5),
    )  # fmt: skip

    def expected(history: History) -> float:
        return SchedulerLoop(priced, RatePolicy(), history=history).expected_cost(Assignment(0, 1))

    current = History((dataclasses.replace(late.log[0], stale=False),))
    assert expected(late) == expected(History()) < expected(current)


def test_jobs_on_an_earlier_snapshot_are_stale_for_the_policy() -> None:
    fed = dataclasses.replace(_tenant("a", TAB), snapshot=2)
    old = dataclasses.replace(_record("a", "knn"), snapshot=1)
    new = dataclasses.replace(_record("a", "svm", acc=0.8), job_id="svm-s2", snapshot=2)
    log = _state([fed], [old, new]).history().log
    assert [(o.quality, o.stale) for o in log] == [(0.9, True), (0.8, False)]
    # the planner's loop is rebuilt when a snapshot moves: its observations so far turn stale
    planner = Planner("rate", slots=1)
    before = dataclasses.replace(fed, snapshot=1)
    [job] = planner.decide(_state([before], [old]), in_flight=[], tick=1)
    assert job.candidate != "knn" and job.job_id.endswith("-s1")
    assert planner.loop is not None and not planner.loop.history.log[0].stale
    [job] = planner.decide(_state([fed], [old]), in_flight=[], tick=2)
    assert job.job_id.endswith("-s2") and planner.loop.history.log[0].stale


def test_best_is_the_newest_snapshots_most_accurate(
    tracking: MlflowClient, wine: ExampleStore
) -> None:
    exp = ensure_tenant_experiment(tracking, "fed", str(wine.schema("wine")), ["knn"])
    r = train(TrainJob("wine", "knn"), wine)

    def promote(job: str, accuracy: float, snapshot: int) -> str | None:
        params = {"model": "knn", "snapshot": snapshot}
        run_id = start_job_run(tracking, exp, tenant="fed", job_id=job, params=params, tags={})
        with mlflow.start_run(run_id=run_id):
            uri = log_trained_model(r.model)
        end_job_run(tracking, run_id, ok=True)
        out = promote_if_better(
            tracking, "fed", model_uri=uri, run_id=run_id, accuracy=accuracy,
            candidate="knn", job_id=job, snapshot=snapshot,
        )  # fmt: skip
        return None if out is None else out.job_id

    assert promote("a-s1", 1.0, 1) == "a-s1"  # measured on a small validation split
    # more data: the first model on them is served although it measures less than 1.0 did
    assert promote("a-s2", 0.96, 2) == "a-s2"
    assert promote("b-s1", 0.99, 1) is None  # an older snapshot's job ending late
    assert promote("b-s2", 0.95, 2) is None  # on one snapshot best only moves up
    assert promote("c-s2", 0.98, 2) == "c-s2"
    best = best_model(tracking, "fed")
    assert best is not None and (best.job_id, best.snapshot) == ("c-s2", 2)
    # best moved back by hand to the older data's model: a settle puts the newest data's back
    (old,) = tracking.search_model_versions("name = 'fed' and tags.`tenantml.job_id` = 'a-s1'")
    tracking.set_registered_model_alias("fed", "best", str(old.version))
    assert settle_best(tracking, "fed") == best
    assert beats(0.5, best, snapshot=3) and not beats(0.99, best, snapshot=1)
    assert not beats(0.98, best, snapshot=2) and beats(0.981, best, snapshot=2)


def test_the_leaderboard_puts_the_current_datas_jobs_first() -> None:
    from tasks.leaderboard import Snapshot as Published
    from tasks.leaderboard import rows

    old = dataclasses.replace(_record("a", "svm", acc=1.0), run_id="r1", snapshot=1)
    new = dataclasses.replace(_record("a", "knn", acc=0.95), run_id="r2", snapshot=2)
    served = BestModel("2", 0.95, "r2", "knn", "knn-s2", 2)
    board = rows([old, new], served)
    assert [(r.candidate, r.snapshot, r.best) for r in board] == [
        ("knn", 2, True), ("svm", 1, False)
    ]  # fmt: skip
    # a copy published before rows had a snapshot still reads
    body = Published(board, "2", 1.0, 0.0).to_json().replace(b', "snapshot": 2', b"")
    assert Published.from_json(body).rows[0].snapshot is None


def test_a_models_older_results_count_once_and_never_beside_a_current_one() -> None:
    from tasks._service import _restrict, tick_metrics

    fed = dataclasses.replace(_tenant("a", TAB), snapshot=3)
    records = [
        dataclasses.replace(_record("a", "knn", acc=0.7), run_id="k1", snapshot=1),
        dataclasses.replace(_record("a", "knn", acc=0.8), run_id="k2", snapshot=2),
        dataclasses.replace(_record("a", "svm", acc=0.9), run_id="s2", snapshot=2),
        dataclasses.replace(_record("a", "svm", acc=0.85), run_id="s3", snapshot=3),
    ]
    state = _state([fed], records)
    assert [(o.quality, o.stale) for o in state.history().log] == [(0.8, True), (0.85, False)]
    assert tick_metrics(state)["best_accuracy.a"] == 0.85  # on the data as they are now
    # a restriction keeps what runs or ran on the current data, not what ran before
    running = dataclasses.replace(_record("a", "mlp", "RUNNING"), snapshot=2)
    kept = _restrict(fed, ["logistic_regression"], [*records, running])
    assert set(kept.candidates) == {"logistic_regression", "svm", "mlp"}


def test_a_feed_keeps_the_policys_own_state() -> None:
    planner = Planner("roundrobin", slots=1)
    tenants = [_tenant(name, TAB) for name in "abc"]
    [first] = planner.decide(_state(tenants, []), in_flight=[], tick=1)
    fed = [tenants[0], tenants[1], dataclasses.replace(tenants[2], snapshot=2)]
    [second] = planner.decide(_state(fed, []), in_flight=[], tick=2)
    assert (first.tenant, second.tenant) == ("a", "b")  # the turn goes on, not back to a


def test_the_planners_loop_holds_what_the_history_keeps() -> None:
    """A model retrained on new data supersedes its stale result in the running loop too, as a
    loop rebuilt from MLflow would hold it (decisions must not depend on when it was built)."""
    planner = Planner("rate", slots=1)
    fed = dataclasses.replace(_tenant("a", TAB), snapshot=2)
    old = dataclasses.replace(_record("a", "knn", acc=0.7), run_id="k1", snapshot=1)
    other = dataclasses.replace(_record("a", "svm", acc=0.9), run_id="s1", snapshot=1)
    planner.decide(_state([fed], [old, other]), in_flight=[], tick=1)
    again = dataclasses.replace(_record("a", "knn", acc=0.8), run_id="k2", snapshot=2)
    state = _state([fed], [old, other, again])
    planner.decide(state, in_flight=[], tick=2)
    assert planner.loop is not None
    assert planner.loop.history.log == state.history().log
    assert [(o.quality, o.stale) for o in state.history().log] == [(0.9, True), (0.8, False)]


def test_a_failed_job_that_a_retry_finishes_reaches_the_policy() -> None:
    planner = Planner("rate", slots=1)
    tenant = _tenant("a", TAB)
    failed = dataclasses.replace(_record("a", "knn", "FAILED", acc=0.0), run_id="k")
    planner.decide(_state([tenant], [failed]), in_flight=[], tick=1)
    finished = dataclasses.replace(failed, status="FINISHED", accuracy=0.8)
    planner.decide(_state([tenant], [finished]), in_flight=[], tick=2)
    assert planner.loop is not None  # as a loop rebuilt from MLflow holds it
    assert [(o.quality, o.completed) for o in planner.loop.history.log] == [(0.8, True)]
