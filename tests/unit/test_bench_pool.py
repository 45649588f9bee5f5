"""The benchmarks' worker processes run one BLAS thread each (`tenantml.bench._pool`): two
processes on two cores with OpenBLAS's default thread per core made the oboe replay 4.4x slower."""

from __future__ import annotations

from typing import Any

import pytest


def _blas_threads(_: int) -> list[Any]:
    import scipy.linalg  # noqa: F401  (its own OpenBLAS, loaded after the worker started)
    from threadpoolctl import threadpool_info

    return [lib["num_threads"] for lib in threadpool_info() if lib["user_api"] == "blas"]


def test_each_worker_has_one_blas_thread(monkeypatch: pytest.MonkeyPatch) -> None:
    from threadpoolctl import threadpool_limits

    from tenantml.bench._pool import in_order

    # what the workers start from (forked), whatever this run's environment says (`make test`
    # sets one thread): two threads, in the libraries loaded and in those loaded later
    for var in ("OMP_NUM_THREADS", "OPENBLAS_NUM_THREADS", "MKL_NUM_THREADS"):
        monkeypatch.setenv(var, "2")
    with threadpool_limits(limits=2):
        for threads in in_order(_blas_threads, [0, 1], jobs=2):
            assert threads and set(threads) == {1}, threads
