"""Peak memory of feeding many small examples: the feed must stream to the store.

A child process feeds `n` random uint8 examples of `shape`, produced one at a time by a
generator (as files would be), into a fresh local store, and reports its own peak RSS
(``VmHWM``, Linux) and throughput. The whole set is larger than the target only for big shapes; the
point is that memory stays flat as `n` grows (one `FEED_CHUNK` in memory at a time).
"""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path
from typing import Any

__all__ = ["measure_feed"]

_CHILD = r"""
import json, sys, time
import numpy as np
from store.schema import Schema, Tensor
from store import ExampleStore, LocalBlobStore

root, n, shape = sys.argv[1], int(sys.argv[2]), tuple(int(s) for s in sys.argv[3].split(","))
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
    for _ in range(n):
        yield rng.integers(0, 256, shape, dtype=np.uint8)

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


def measure_feed(
    root: Path, n: int = 100_000, shape: tuple[int, ...] = (32, 32, 3)
) -> dict[str, Any]:
    out = subprocess.run(
        [sys.executable, "-c", _CHILD, str(root), str(n), ",".join(map(str, shape))],
        capture_output=True,
        text=True,
        check=True,
    )
    result: dict[str, Any] = json.loads(out.stdout.strip().splitlines()[-1])
    result.update(n=n, shape=list(shape))
    return result
