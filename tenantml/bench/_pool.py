"""`in_order`: a function over many work items, in processes when that pays; `process_pool`: the
benchmarks' worker processes, one BLAS thread each."""

from __future__ import annotations

import os
from collections.abc import Callable, Iterator, Sequence
from concurrent.futures import ProcessPoolExecutor
from typing import TypeVar

T = TypeVar("T")
R = TypeVar("R")


def process_pool(workers: int) -> ProcessPoolExecutor:
    """``workers`` processes whose BLAS and OpenMP pools have one thread each: the processes
    already fill the cores, and OpenBLAS's own threads on top of them spin against each other
    (`tenantml bench oboe --repeats 4 --jobs 2` on 2 cores: 204 s with the default two threads a
    process, 46 s with one, the same AUCs)."""
    return ProcessPoolExecutor(workers, initializer=_one_thread_each)


def _one_thread_each() -> None:
    """A worker's start: one thread for the libraries loaded (threadpoolctl) and for those it
    loads later (they read the variables when loaded)."""
    from threadpoolctl import threadpool_limits

    for var in ("OMP_NUM_THREADS", "OPENBLAS_NUM_THREADS", "MKL_NUM_THREADS"):
        os.environ[var] = "1"
    threadpool_limits(limits=1)


def in_order(fn: Callable[[T], R], work: Sequence[T], jobs: int | None) -> Iterator[R]:
    """``fn`` of each item of ``work``, in order, as each result arrives; in ``jobs`` processes
    (default: all cores) when there is more than one item (``fn`` must then be picklable)."""
    workers = min(len(work), jobs or os.cpu_count() or 1)
    if workers > 1:
        with process_pool(workers) as pool:
            yield from pool.map(fn, work)
    else:
        yield from map(fn, work)
