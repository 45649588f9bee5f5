"""Where a torch job's seconds go: one job per (image tenant, arm), as a service slot runs it.

`bench-live images` on a GPU (docs/live.md, "On a GPU") saw no CNN finish within a minute: a
LeNet-5 job on 1,500 MNIST images was still running 33 s after it started on an H200. This
script times such jobs outside the service, on the tenants `bench-live images` feeds (the same
seeded, stratified train parts of digits and MNIST), through ``trainers.train`` with the
service's defaults (the learning-rate grid, ``max_epochs=10``, a checkpoint after every epoch),
and reports for each job:

* ``first_epoch_s``: the wall clock to the end of the first epoch of the first rate (the job's
  data, device start, cuDNN's autotuning of each new batch shape, the first kernels), with its
  validation and checkpoint,
* ``epoch_s``: the median later epoch, its validation and checkpoint included,
* ``checkpoint_s``: writing the checkpoints (``ExampleStore.put_checkpoint``), summed,
* ``steps``, ``steps_per_s``: optimizer steps (``TrainResult.steps``) per second of the job's
  wall clock less its checkpoint writes (so the first epoch's start-up and the validations
  count in).

Each (tenant, arm) runs ``--repeats`` times in one process, with seeds 0, 1, ... (a job of the
same seed would resume from the first one's checkpoint); the first job of the process pays the
device's start, every arm's first job its batch shapes' autotuning, so the first and second
job of the first pair differ by both. The service's planner may also give a job a time limit
(``TrainJob.time_budget_s``); these jobs have none. Run it once with a GPU and once with
``CUDA_VISIBLE_DEVICES=`` on the same machine to compare the two on equal jobs.

Usage: ``python infra/scripts/time_torch_jobs.py [--arms lenet squeezenet ...] [--tenants digits
mnist] [--repeats 2] [--out PATH.json]``.
"""

from __future__ import annotations

import argparse
import json
import platform
import statistics
import tempfile
import time
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from store import ExampleStore, LocalBlobStore
from store.schema import Schema
from tenantml.bench.live import LiveTenant, load_tenants, write_image_tenants
from trainers import EpochReport, TrainJob, train


class _TimedStore(ExampleStore):
    """The service's store, counting the seconds spent writing checkpoints."""

    checkpoint_s = 0.0

    def put_checkpoint(self, tenant: str, job_id: str, blob: bytes) -> None:
        t0 = time.perf_counter()
        super().put_checkpoint(tenant, job_id, blob)
        self.checkpoint_s += time.perf_counter() - t0


def image_tenants(workdir: Path, names: Sequence[str], seed: int = 0) -> list[LiveTenant]:
    """The named tenants of `bench-live images`, split as it splits them (seed 0)."""
    tenants = load_tenants(write_image_tenants(workdir / "tenants"), seed=seed)
    found = {t.name: t for t in tenants}
    missing = [n for n in names if n not in found]
    if missing:
        raise SystemExit(f"no image tenant {missing}: use some of {sorted(found)}")
    return [found[n] for n in names]


def time_job(store: _TimedStore, tenant: str, arm: str, seed: int) -> dict[str, Any]:
    """One job of `arm` on `tenant` and where its seconds went (module docstring)."""
    marks: list[float] = []
    store.checkpoint_s = 0.0
    t0 = time.perf_counter()

    def on_epoch(report: EpochReport) -> None:
        marks.append(time.perf_counter())

    result = train(TrainJob(tenant, arm, seed=seed), store, on_epoch=on_epoch)
    wall = time.perf_counter() - t0
    epochs = [b - a for a, b in zip([t0, *marks], marks, strict=False)]
    train_s = wall - store.checkpoint_s
    steps = result.steps
    return {
        "tenant": tenant,
        "arm": arm,
        "seed": seed,
        "wall_s": wall,
        "cost_s": result.cost_s,
        "epochs": result.epochs,
        "first_epoch_s": epochs[0] if epochs else float("nan"),
        "epoch_s": statistics.median(epochs[1:]) if len(epochs) > 1 else float("nan"),
        "checkpoint_s": store.checkpoint_s,
        "steps": steps,
        "steps_per_s": steps / train_s if steps and train_s > 0 else float("nan"),
        "val_accuracy": result.accuracy,
    }


def main(argv: Sequence[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--arms", nargs="+", default=["lenet", "squeezenet", "resnet18"])
    parser.add_argument("--tenants", nargs="+", default=["digits", "mnist"])
    parser.add_argument("--repeats", type=int, default=2)
    parser.add_argument("--out", type=Path, default=None)
    args = parser.parse_args(argv)

    import torch

    device = torch.cuda.get_device_name(0) if torch.cuda.is_available() else "cpu"
    rows = []
    with tempfile.TemporaryDirectory(prefix="tenantml-torch-jobs-") as tmp:
        store = _TimedStore(LocalBlobStore(Path(tmp) / "blobs"))
        for t in image_tenants(Path(tmp), args.tenants):
            store.create_tenant(t.name, Schema.parse(t.schema))
            store.feed(t.name, t.x_train, list(t.y_train))
        print(f"device: {device}, torch {torch.__version__}, {torch.get_num_threads()} threads")
        for tenant in args.tenants:
            for arm in args.arms:
                for r in range(args.repeats):
                    row = time_job(store, tenant, arm, seed=r)
                    rows.append(row)
                    print(
                        f"{tenant:7s} {arm:12s} #{r} {row['wall_s']:7.2f} s  first epoch "
                        f"{row['first_epoch_s']:6.2f} s, later {row['epoch_s']:6.3f} s, "
                        f"checkpoints {row['checkpoint_s']:5.2f} s, {row['epochs']} epochs, "
                        f"{row['steps']} steps ({row['steps_per_s']:.0f}/s), val "
                        f"{row['val_accuracy']:.3f}",
                        flush=True,
                    )
    if args.out:
        meta = {"device": device, "torch": torch.__version__, "python": platform.python_version()}
        args.out.write_text(json.dumps({**meta, "jobs": rows}, indent=1))


if __name__ == "__main__":
    main()
