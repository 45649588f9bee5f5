"""Peak memory of feeding many small examples: the feed must stream to the store.

A child process feeds `n` random uint8 examples of `shape`, produced one at a time by a
generator (as files would be), into a fresh local store, and reports its own peak RSS
(``VmHWM``, Linux) and throughput. The whole set is larger than the target only for big shapes; the
point is that memory stays flat as `n` grows (one `FEED_CHUNK` in memory at a time). When asked,
the child reports its progress on stderr: one line `_STEP_LINE` per `FEED_STEP` examples taken.
"""

from __future__ import annotations

import json
import math
import subprocess
import sys
from collections.abc import Callable
from pathlib import Path
from typing import Any

__all__ = ["FEED_STEP", "feed_steps", "measure_feed"]

FEED_STEP = 1_000  # examples per progress step
_STEP_LINE = "tenantml-feed-step"

_CHILD = r"""
import json, sys, time
import numpy as np
from store.schema import Schema, Tensor
from store import ExampleStore, LocalBlobStore

root, n, shape = sys.argv[1], int(sys.argv[2]), tuple(int(s) for s in sys.argv[3].split(","))
step, step_line = int(sys.argv[4]), sys.argv[5]  # step 0: no progress lines
store = ExampleStore(LocalBlobStore(root))
store.create_tenant("bench", Schema(input=Tensor(*shape), output=Tensor(10)))


def peak_rss_mib():
    # VmHWM: this process image's peak RSS (ru_maxrss would carry the parent's over exec).
    with open("/proc/self/status") as f:
        kib = next(int(line.split()[1]) for line in f if line.startswith("VmHWM:"))
    return kib / 1024


rss_before = peak_rss_mib()
rng = np.random.default_rng(0)

def examples():
    for i in range(n):
        yield rng.integers(0, 256, shape, dtype=np.uint8)
        if step and ((i + 1) % step == 0 or i + 1 == n):  # the feed has taken the block
            print(step_line, file=sys.stderr, flush=True)

def labels():
    for i in range(n):
        yield i % 10

start = time.perf_counter()
manifest, ids = store.feed("bench", examples(), labels())
elapsed = time.perf_counter() - start
print(json.dumps({
    "examples": manifest.n_examples, "batches": len(manifest.batches),
    "seconds": elapsed, "examples_per_s": n / elapsed,
    "raw_mib": n * int(np.prod(shape)) / 2**20,
    "rss_after_imports_mib": rss_before,
    "peak_rss_mib": peak_rss_mib(),
}))
"""


def feed_steps(n: int) -> int:
    """How many times `measure_feed` calls ``on_step`` for ``n`` examples."""
    return math.ceil(n / FEED_STEP)


def measure_feed(
    root: Path,
    n: int = 100_000,
    shape: tuple[int, ...] = (32, 32, 3),
    *,
    on_step: Callable[[], None] | None = None,
) -> dict[str, Any]:
    """Feed ``n`` examples of ``shape`` into a fresh store under ``root`` in a child process
    (module docstring); its figures, with ``n`` and ``shape``.

    ``on_step``: called each time the feed has taken a block of `FEED_STEP` examples (the last
    block may be shorter): `feed_steps` (n) times in all. Raises
    `subprocess.CalledProcessError` if the child fails."""
    argv = [
        sys.executable,
        "-c",
        _CHILD,
        str(root),
        str(n),
        ",".join(map(str, shape)),
        str(FEED_STEP if on_step is not None else 0),
        _STEP_LINE,
    ]
    with subprocess.Popen(argv, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True) as child:
        assert child.stdout is not None and child.stderr is not None
        errors = []
        for line in child.stderr:  # progress lines as they come; anything else is kept
            if line.rstrip("\n") == _STEP_LINE and on_step is not None:
                on_step()
            else:
                errors.append(line)
        stdout = child.stdout.read()
    if child.returncode:
        raise subprocess.CalledProcessError(child.returncode, argv, stdout, "".join(errors))
    result: dict[str, Any] = json.loads(stdout.strip().splitlines()[-1])
    result.update(n=n, shape=list(shape))
    return result
