"""The shipped matrix's prior fitted once per machine (`tasks._prior_cache`): the cached prior is
the fit itself, a new matrix is a new file, a damaged or unwritable cache costs only a refit,
and the live state uses it only before its tenants have results."""

from __future__ import annotations

import logging
from pathlib import Path

import numpy as np
import pytest

from policy import Observation
from policy.prior import OnlinePrior
from store.schema import Schema, Tensor
from tasks import _service
from tasks._prior_cache import cache_path, fit_shipped
from tasks._service import ServiceState, TenantInfo, build_problem
from trainers import candidates
from trainers.zoo import prior_quality

TAB = Schema(input=Tensor(5), output=Tensor(2))


@pytest.fixture
def cache(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path))
    return tmp_path / "tenantml"


def _shipped(n_tenants: int = 3) -> OnlinePrior:
    cat = tuple(c.name for c in candidates(TAB))
    return OnlinePrior(prior_quality(cat), n_tenants)


def test_the_cached_prior_is_the_fit_itself(cache: Path) -> None:
    fresh = _shipped().fit()
    first = fit_shipped(_shipped())  # fits and keeps it
    assert cache_path(_shipped()).is_file() and cache_path(_shipped()).parent == cache
    again = fit_shipped(_shipped())  # read back
    for p in (first, again):
        assert np.array_equal(p.mean, fresh.mean) and np.array_equal(p.cov, fresh.cov)
        assert p.noise == fresh.noise
    # the tenants' count does not change the fit (their empty columns are left out)
    assert cache_path(_shipped(7)) == cache_path(_shipped(3))


def test_another_matrix_or_setting_is_another_file(cache: Path) -> None:
    a = _shipped()
    b = OnlinePrior(a.base.copy(), 3)
    b.base[0, np.flatnonzero(np.isfinite(b.base[0]))[0]] += 0.01
    c = OnlinePrior(a.base, 3, min_tenants=5)
    assert len({cache_path(a), cache_path(b), cache_path(c)}) == 3


def test_a_source_with_results_is_refused(cache: Path) -> None:
    src = _shipped()
    src.observe([Observation(0, 0, 0.8, 1.0, 1.0, True)])
    with pytest.raises(ValueError, match="without tenant results"):
        fit_shipped(src)
    assert not cache.exists()


def test_a_damaged_cache_is_fitted_again_and_replaced(
    cache: Path, caplog: pytest.LogCaptureFixture
) -> None:
    fresh = _shipped().fit()
    path = cache_path(_shipped())
    cache.mkdir(parents=True)
    for junk in (b"not an npz", b"PK\x03\x04cut off"):
        path.write_bytes(junk)
        with caplog.at_level(logging.WARNING, logger="tasks._prior_cache"):
            prior = fit_shipped(_shipped())
        assert np.array_equal(prior.cov, fresh.cov) and "ignoring the prior cache" in caplog.text
        caplog.clear()
        assert np.array_equal(np.load(path)["cov"], fresh.cov)  # replaced by the fit
    np.savez(path, mean=np.zeros(2), cov=np.eye(2), noise=1e-4)  # another catalogue's shape
    assert np.array_equal(fit_shipped(_shipped()).mean, fresh.mean)
    assert sorted(p.name for p in cache.iterdir()) == [path.name]  # no temporary files left


def test_an_unwritable_cache_only_costs_the_fit(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture
) -> None:
    blocker = tmp_path / "file"
    blocker.write_text("a file where the cache directory would go")
    monkeypatch.setenv("XDG_CACHE_HOME", str(blocker))
    with caplog.at_level(logging.WARNING, logger="tasks._prior_cache"):
        prior = fit_shipped(_shipped())
    assert np.array_equal(prior.mean, _shipped().fit().mean)
    assert "could not keep the prior's fit" in caplog.text


def test_the_live_state_reads_the_cache_before_its_tenants_have_results(
    cache: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    from mlflow_plugin.tracking import JobRecord

    names = ["c1", "c2", "c3"]
    tenants = [TenantInfo(t, TAB, tuple(c.name for c in candidates(TAB)), 100, 1, t) for t in names]
    problem, cat = build_problem(tenants)
    monkeypatch.setattr(_service, "_FITS", {})  # a new scheduler process: no fits in memory
    bare = ServiceState(tenants, [], problem, cat).with_learnt_prior().problem.prior
    assert len(list(cache.iterdir())) == 1
    with monkeypatch.context() as m:  # the next new process on this machine fits nothing
        m.setattr(_service, "_FITS", {})
        m.setattr(OnlinePrior, "fit", lambda self: pytest.fail("fitted again"))
        again = ServiceState(tenants, [], problem, cat).with_learnt_prior().problem.prior
    assert bare is not None and again is not None and np.array_equal(bare.cov, again.cov)
    with monkeypatch.context() as m:  # with a result, the fit sees it: no cache
        m.setattr(_service, "_FITS", {})
        m.setattr("tasks._prior_cache._read", lambda *a: pytest.fail("read with results"))
        done = JobRecord("c1-knn", "c1", "knn", "knn-s1", "FINISHED", 0.9, 1.0, 1, 1, 0.0, 1.0,
                         None)  # fmt: skip
        learnt = ServiceState(tenants, [done], problem, cat).with_learnt_prior().problem.prior
    assert learnt is not None
