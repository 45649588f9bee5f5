"""Invariants every policy must satisfy (ARCHITECTURE principle 8), property-tested."""

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from policy import (
    POLICY_NAMES,
    Assignment,
    ModelMeta,
    Observation,
    Oracle,
    Problem,
    SchedulerLoop,
    fit_arm_prior,
    loss_curves,
    make_policy,
    replay,
)
from policy.costs import fit_cost_prior, prior_costs
from tenantml.bench.optuna_peer import OptunaPeer

ALL = (*POLICY_NAMES, "oracle", "optuna")


def _make(name, q, c):
    if name == "oracle":
        return Oracle(q, c)
    if name == "optuna":
        return OptunaPeer()
    return make_policy(name)


@st.composite
def problems(draw):
    n = draw(st.integers(1, 4))
    m = draw(st.integers(2, 6))
    seed = draw(st.integers(0, 2**16))
    rng = np.random.default_rng(seed)
    avail = rng.random((n, m)) < 0.8
    avail[np.arange(n), rng.integers(0, m, n)] = True  # every tenant has an arm
    q = np.where(avail, rng.uniform(0, 1, (n, m)), 0.0)
    c = np.where(avail, rng.uniform(0.05, 1, (n, m)), 1.0)
    train = np.clip(rng.uniform(0, 1, (m, 6)), 0, 1)
    meta = ModelMeta(rng.integers(2000, 2020, m).astype(float), rng.integers(0, 99, m) * 1.0)
    cost_prior = None
    believed = c
    if draw(st.booleans()):  # predicted costs: policies see a model's guesses, jobs may stop
        cost_prior = fit_cost_prior(rng.uniform(0.05, 1, (8, m)))
        believed = np.where(avail, prior_costs(cost_prior, avail), 1.0)
    problem = Problem.create(
        [f"t{i}" for i in range(n)],
        [f"m{k}" for k in range(m)],
        avail,
        believed,
        prior=fit_arm_prior(train),
        meta=meta,
        cost_prior=cost_prior,
    )
    return problem, q, c, seed


@pytest.mark.parametrize("name", ALL)
@settings(max_examples=12, deadline=None)
@given(data=problems(), slots=st.integers(1, 3))
def test_replay_invariants(name, data, slots) -> None:
    problem, q, c, seed = data
    horizon = float(c[problem.available].sum()) * 0.6
    res = replay(
        problem,
        q,
        c,
        _make(name, q, c),
        horizon=horizon,
        slots=slots,
        rng=np.random.default_rng(seed),
        limit_factor=1.0,  # with predicted costs: many jobs stop at their limit
    )
    pairs = [(o.tenant, o.arm) for o in res.trace]
    # a stopped job is charged its limit and delivers no model
    assert all(
        o.quality == 0.0 and o.cost < c[o.tenant, o.arm] for o in res.trace if not o.completed
    )
    if problem.cost_prior is None:
        assert all(o.completed for o in res.trace)
    # no policy picks an arm a tenant does not have, nor trains one twice
    assert all(problem.available[i, k] for i, k in pairs)
    assert len(set(pairs)) == len(pairs)
    # best-so-far never decreases: the loss curves never go up
    grid = np.linspace(0, horizon, 50)
    best = np.where(problem.available, q, -np.inf).max(1)
    lc = loss_curves(res.trace, best, grid)
    assert np.all(np.diff(lc.avg_loss) <= 1e-12) and np.all(np.diff(lc.worst_loss) <= 1e-12)
    # regret never increases without a new observation: between completions the instantaneous
    # ease.ml regret is constant, and at each completion it cannot go up
    inst, best_now = [], np.zeros(problem.n_tenants)
    for o in res.trace:
        best_now[o.tenant] = max(best_now[o.tenant], o.quality)
        inst.append(float(np.sum(best - best_now)))
    assert all(b <= a + 1e-12 for a, b in zip(inst, inst[1:], strict=False))


@pytest.mark.parametrize("name", ALL)
@settings(max_examples=10, deadline=None)
@given(data=problems(), slots=st.integers(2, 4))
def test_multi_device_never_duplicates_a_pending_arm(name, data, slots) -> None:
    problem, q, c, seed = data
    loop = SchedulerLoop(problem, _make(name, q, c), slots, np.random.default_rng(seed))
    for _ in range(30):
        started = loop.fill()
        pend = [(a.tenant, a.arm) for a in loop.pending]
        assert len(set(pend)) == len(pend)
        tried = {(o.tenant, o.arm) for o in loop.history.log}
        assert not tried & {(a.tenant, a.arm) for a in started}
        if not loop.pending:
            break
        a: Assignment = loop.pending[0]
        loop.finished([Observation(a.tenant, a.arm, float(q[a.tenant, a.arm]), 1.0)])


@pytest.mark.parametrize("name", [n for n in ALL if n != "optuna"])
def test_seeded_runs_reproduce_bit_for_bit(name) -> None:
    rng = np.random.default_rng(3)
    q, c = rng.uniform(0, 1, (5, 8)), rng.uniform(0.1, 1, (5, 8))
    problem = Problem.create(
        [f"t{i}" for i in range(5)],
        [f"m{k}" for k in range(8)],
        np.ones((5, 8), bool),
        c,
        prior=fit_arm_prior(rng.uniform(0, 1, (8, 9))),
        meta=ModelMeta(np.arange(8.0), np.arange(8.0)),
    )
    runs = [
        replay(
            problem, q, c, _make(name, q, c), horizon=5.0, slots=2, rng=np.random.default_rng(11)
        ).trace
        for _ in range(2)
    ]
    assert runs[0] == runs[1]
