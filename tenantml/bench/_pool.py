"""`in_order`: a function over many work items, in processes when that pays."""

from __future__ import annotations

import os
from collections.abc import Callable, Iterator, Sequence
from concurrent.futures import ProcessPoolExecutor
from typing import TypeVar

T = TypeVar("T")
R = TypeVar("R")


def in_order(fn: Callable[[T], R], work: Sequence[T], jobs: int | None) -> Iterator[R]:
    """``fn`` of each item of ``work``, in order, as each result arrives; in ``jobs`` processes
    (default: all cores) when there is more than one item (``fn`` must then be picklable)."""
    workers = min(len(work), jobs or os.cpu_count() or 1)
    if workers > 1:
        with ProcessPoolExecutor(workers) as pool:
            yield from pool.map(fn, work)
    else:
        yield from map(fn, work)
