"""The GP prior learnt across tenants (policy.prior), shared by the live service and the replay's
`live` column: blocks per workload, wide where there is no data, refits in the scheduler loop,
the shipped matrix over the live catalogue, and the live state using it."""

from __future__ import annotations

import gzip
import json
from pathlib import Path

import numpy as np
import pytest

from mlflow_plugin.tracking import JobRecord
from policy import ArmPrior, Observation, Problem, SchedulerLoop, make_policy
from policy.prior import DEFAULT_MEAN, DEFAULT_VAR, MIN_COVERAGE, OnlinePrior, learn_prior
from store.schema import Schema, Tensor
from tasks._service import ServiceState, TenantInfo, build_problem
from tenantml.bench.datasets import load_dataset
from tenantml.bench.runner import (
    LIVE,
    LIVE_PRIOR,
    Protocol,
    all_policy_names,
    run_repeat,
    table_costs,
)
from tests.scripts import load_script
from trainers import candidates
from trainers.zoo import PORTFOLIO_FILE, PRIOR_FILE, prior_quality

ROOT = Path(__file__).resolve().parents[2]


def _two_workloads(rng: np.random.Generator, n: int = 40) -> np.ndarray:
    """(5, 2n): models 0-2 measured on the first n tenants (0 and 1 strongly correlated),
    models 3-4 on the last n; model 2 is noise around 0.6."""
    q = np.full((5, 2 * n), np.nan)
    skill = rng.uniform(0.5, 0.95, n)
    q[0, :n] = skill
    q[1, :n] = np.clip(skill + rng.normal(0, 0.01, n), 0, 1)
    q[2, :n] = rng.uniform(0.55, 0.65, n)
    q[3:, n:] = rng.uniform(0.2, 0.4, (2, n))
    return q


def test_blocks_per_workload_and_correlation_learnt() -> None:
    q = _two_workloads(np.random.default_rng(0))
    p = learn_prior(q)
    assert np.all(p.cov[:3, 3:] == 0.0)  # never measured together: independent
    corr = p.cov[0, 1] / np.sqrt(p.cov[0, 0] * p.cov[1, 1])
    assert corr > 0.8
    assert abs(p.mean[0] - np.nanmean(q[0])) < 1e-9
    assert abs(p.mean[3] - np.nanmean(q[3])) < 1e-9
    assert np.allclose(p.cov, p.cov.T)
    assert np.all(np.linalg.eigvalsh(p.cov) > -1e-10)


def test_models_without_data_stay_wide() -> None:
    q = _two_workloads(np.random.default_rng(1))
    q = np.vstack([q, np.full((1, q.shape[1]), np.nan)])  # a model nobody trained
    q[5, :3] = 0.99  # ... or only three tenants did: fewer than min_tenants
    p = learn_prior(q)
    assert p.mean[5] == DEFAULT_MEAN and p.cov[5, 5] == DEFAULT_VAR
    assert np.all(p.cov[5, :5] == 0.0)
    empty = learn_prior(np.full((3, 0), np.nan))
    assert np.all(empty.mean == DEFAULT_MEAN) and np.allclose(np.diag(empty.cov), DEFAULT_VAR)


def test_mostly_unmeasured_tenants_do_not_shape_the_kernel() -> None:
    q = _two_workloads(np.random.default_rng(2))
    sparse = np.full((5, 6), np.nan)
    sparse[0] = 0.1  # six tenants that measured one model of three: left out of the fit
    p_with = learn_prior(np.concatenate([q, sparse], axis=1))
    p_without = learn_prior(q)
    assert np.allclose(p_with.mean, p_without.mean)
    assert np.allclose(p_with.cov, p_without.cov)


def test_bad_input_is_named() -> None:
    with pytest.raises(ValueError, match="models, tenants"):
        learn_prior(np.zeros(3))
    with pytest.raises(ValueError, match="refit_every must be >= 1"):
        OnlinePrior(np.zeros((2, 0)), 1, refit_every=0)


def test_online_prior_counts_new_results_and_keeps_the_best() -> None:
    src = OnlinePrior(np.full((3, 0), np.nan), n_tenants=2, refit_every=3)
    src.observe([Observation(0, 1, 0.7, 1.0)], count=False)
    assert not src.due()
    src.observe([Observation(0, 1, 0.6, 1.0), Observation(1, 2, 0.0, 5.0, completed=False)])
    assert not src.due()  # a stopped job carries no quality
    assert src.quality()[1, 0] == 0.7  # the best result per (model, tenant)
    src.observe([Observation(0, 1, 0.8, 1.0), Observation(1, 0, 0.5, 1.0)])
    assert src.due() and src.quality()[1, 0] == 0.8
    src.fit()
    assert not src.due()


def test_scheduler_loop_refits_the_prior_it_decides_with() -> None:
    rng = np.random.default_rng(3)
    base = _two_workloads(rng)[:3]  # three models, 40 other tenants
    n = 4
    problem = build_problem_like(n, base)
    src = OnlinePrior(base, n, refit_every=2)
    loop = SchedulerLoop(problem, make_policy("rate"), slots=1, online_prior=src)
    first = loop.problem.prior
    seen = 0
    while seen < 6:
        (a,) = loop.fill()
        loop.finished([Observation(a.tenant, a.arm, 0.9, 1.0)])
        seen += 1
    assert loop.refits == 2  # after results 2 and 4, at the next fill
    loop.fill()
    assert loop.refits == 3
    assert loop.problem.prior is not first
    assert loop.problem.tenants == problem.tenants


def build_problem_like(n: int, base: np.ndarray) -> Problem:
    m = base.shape[0]
    return Problem.create(
        [f"t{i}" for i in range(n)],
        [f"m{k}" for k in range(m)],
        np.ones((n, m), dtype=bool),
        np.ones((n, m)),
        prior=learn_prior(base),
    )


def test_shipped_matrix_covers_the_live_catalogue() -> None:
    tab = [c.name for c in candidates(Schema(input=Tensor(5), output=Tensor(2)))]
    img = [c.name for c in candidates(Schema(input=Tensor(8, 8, 1), output=Tensor(10)))]
    q = prior_quality(tab + img)
    measured = np.isfinite(q).sum(axis=1)
    assert np.all(measured[: len(tab)] >= 200)  # LCDB: ~250 OpenML data sets
    portfolio = json.loads((ROOT / "trainers" / PORTFOLIO_FILE).read_text())
    defaults = {m["name"] for m in portfolio if not m["params"]}  # a family at its defaults
    for k, name in enumerate(img, start=len(tab)):
        if name.startswith("pixels-"):
            # the tabular arm on OpenML's pixel data sets: 3 from Oboe's (a portfolio member),
            # 3 more from LCDB's (a family's defaults: MNIST, Fashion-MNIST, optdigits)
            assert measured[k] == (6 if name[7:] in defaults else 3), name
            continue
        # ease.ml's 18 data sets; LeNet and the f_k variants: none
        assert measured[k] == (0 if "+" in name or name == "lenet" else 18), name
    assert np.all((q[np.isfinite(q)] >= 0) & (q[np.isfinite(q)] <= 1))


def test_shipped_matrix_is_what_the_script_builds() -> None:
    script = load_script("build_live_prior")
    with gzip.open(ROOT / "trainers" / PRIOR_FILE, "rt") as f:
        lines = f.read().splitlines()
    assert lines[1:] == [",".join(r) for r in script.build()]
    members, _ = script.portfolio()
    shipped = json.loads((ROOT / "trainers" / PORTFOLIO_FILE).read_text())
    assert shipped == json.loads(json.dumps(members))
    # greedy: each member raises the family's mean best quality on Oboe's data sets
    for family in {m["family"] for m in members}:
        best = [m["portfolio_mean_best"] for m in members if m["family"] == family]
        assert best == sorted(best) and len(set(best)) == len(best), family


def _record(tenant: str, cand: str, acc: float) -> JobRecord:
    return JobRecord(f"{tenant}-{cand}", tenant, cand, f"{cand}-s1", "FINISHED", acc, 1.0, 1, 1,
                     0.0, 1.0, None)  # fmt: skip


def test_live_state_learns_its_prior_from_shipped_data_and_its_tenants() -> None:
    tab = Schema(input=Tensor(5), output=Tensor(2))
    names = [f"t{i}" for i in range(3)]
    tenants = [TenantInfo(t, tab, tuple(c.name for c in candidates(tab)), 100, 1, t) for t in names]
    problem, cat = build_problem(tenants)
    bare = ServiceState(tenants, [], problem, cat)
    learnt = bare.with_learnt_prior().problem.prior
    assert learnt is not None
    shipped = np.nanmean(prior_quality(cat), axis=1)
    # no results yet: the shipped data alone (App. A imputes its missing cells, hence atol)
    assert np.allclose(learnt.mean, shipped, atol=0.05)
    assert np.all(np.diag(learnt.cov) < DEFAULT_VAR)
    k = cat.index("knn")
    # Tenants that measured a quarter of the models count; a single result would not (see
    # learn_prior). Fifteen results: more than `REFIT_EVERY`, so the state refits.
    tried = ("knn", "svm", "mlp", "random_forest", "extra_trees")
    assert len(tried) >= MIN_COVERAGE * len(cat)
    records = [_record(t, c, 0.2) for t in names for c in tried]
    after = ServiceState(tenants, records, problem, cat).with_learnt_prior().problem.prior
    assert after is not None and after.mean[k] < learnt.mean[k]
    # The planner's loop starts from it and counts only results that come later.
    src = ServiceState(tenants, records, problem, cat).online_prior()
    assert not src.due() and np.isfinite(src.quality()[k, -3:]).all()
    alone = ServiceState(tenants, records[:1], problem, cat).with_learnt_prior().problem.prior
    assert alone is not None and np.allclose(alone.mean, learnt.mean)


def test_replay_live_column_is_the_live_configuration() -> None:
    table = load_dataset("easeml-dl")
    assert LIVE in all_policy_names(table)
    proto = Protocol((LIVE, "rate"), test_users=4, repeats=1, costs="given")
    out = run_repeat(table, table_costs(table, 0), proto.validate(table), 0)
    assert out.jobs[LIVE] > 0 and np.isfinite(out.regret[LIVE][0])
    with pytest.raises(ValueError, match="live.*cost-aware"):
        Protocol((LIVE,), test_users=4, cost_oblivious=True).validate(table)


def test_replay_live_prior_column_is_the_learnt_prior_on_the_protocols_costs(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """``live-prior``: the live prior and policy, but the costs the protocol gives, so that
    ``live`` against it prices predicting costs and it against ``rate`` prices the prior."""
    fits: list[int] = []
    fit = OnlinePrior.fit

    def counted(self: OnlinePrior) -> ArmPrior:
        fits.append(self.n_tenants)
        return fit(self)

    monkeypatch.setattr(OnlinePrior, "fit", counted)
    table = load_dataset("easeml-dl")
    alone = run_repeat(table, table_costs(table, 0), Protocol((LIVE_PRIOR,), test_users=4), 0)
    # its prior is refitted online as the service's is: once before, then as results come
    assert len(fits) >= 2 and alone.jobs[LIVE_PRIOR] > 10
    cost = table_costs(table, 0)
    assert LIVE_PRIOR not in all_policy_names(table)  # a diagnosis: asked for by name
    names = (LIVE, LIVE_PRIOR, "rate")
    given = run_repeat(table, cost, Protocol(names, test_users=4, repeats=1).validate(table), 0)
    predicted = run_repeat(
        table, cost, Protocol(names, test_users=4, repeats=1, costs="predicted"), 0
    )

    def same(a: dict[str, np.ndarray], b: dict[str, np.ndarray]) -> bool:
        return bool(np.array_equal(a["avg_loss"], b["avg_loss"]))

    assert given.jobs[LIVE_PRIOR] > 0 and LIVE_PRIOR in given.calibration
    # the live column predicts costs whatever the protocol says; live-prior follows it
    assert same(given.curves[LIVE], predicted.curves[LIVE])
    assert not same(given.curves[LIVE_PRIOR], predicted.curves[LIVE_PRIOR])
    assert not same(given.curves[LIVE_PRIOR], given.curves[LIVE])
    # on the same given costs, the learnt prior is not App. A's fixed one
    assert not same(given.curves[LIVE_PRIOR], given.curves["rate"])
    with pytest.raises(ValueError, match="live-prior.*cost-aware"):
        Protocol((LIVE_PRIOR,), test_users=4, cost_oblivious=True).validate(table)
