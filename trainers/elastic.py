"""One SEER trial for one stage: data-parallel training on ``p`` processes until a wall-clock end.

Each stage of a SEER plan (shared/papers/003, Alg. 1 line 8) trains a trial "with P[i] resources
for time t1 * eta^(k-1)". Here a trial-stage is ``p`` processes joined by ``torch.distributed``
(NCCL on distinct GPUs, gloo on CPU or when processes share a GPU) around a
``DistributedDataParallel`` copy of the tenant's net. As in Sec. 6.1, the **global batch is fixed**
whatever ``p`` is: every step, the global batch ``G`` is split over the ranks, each rank runs its
share in micro-batches with gradient accumulation (``no_sync`` except the last), and each rank's
loss is weighted by its share of ``G``, so the all-reduced gradient is exactly the gradient of the
mean loss over the ``G`` examples (tested against ``p = 1``).

At the stage end the ranks agree to stop (an all-reduce of a stop flag each step), rank 0 scores
the validation split and writes the trial's checkpoint (weights, optimizer, step) to the store;
the next stage resumes it with its new ``p``. Examples are visited in a seeded permutation per
epoch indexed by the global step, so the data order does not depend on ``p`` or on restarts.
"""

from __future__ import annotations

import io
import json
import os
import socket
import subprocess
import sys
import tempfile
import time
from collections.abc import Mapping, Sequence
from dataclasses import asdict, dataclass, field
from typing import Any

import numpy as np

__all__ = [
    "SEARCH_SPACE",
    "StageResult",
    "TrialStage",
    "load_trial_model",
    "run_trial_stage",
    "sample_configs",
]

#: Table 1 of the paper: the standard search space for vision models.
SEARCH_SPACE: dict[str, tuple[float, ...]] = {
    "lr": (1e-4, 5e-4, 1e-3, 5e-3, 0.01, 0.05, 0.1, 0.5, 1.0),
    "weight_decay": (0.0001, 0.0005, 0.001, 0.005),
    "momentum": (0.9, 0.95, 0.99, 0.997),
}

CHECKPOINT_FORMAT = 1


def sample_configs(n: int, rng: np.random.Generator) -> list[dict[str, float]]:
    """``n`` configurations drawn uniformly from :data:`SEARCH_SPACE` (Alg. 1 line 2)."""
    return [{k: float(rng.choice(v)) for k, v in SEARCH_SPACE.items()} for _ in range(n)]


@dataclass(frozen=True)
class TrialStage:
    """What one trial does in one stage.

    ``until``: wall-clock end (``time.time()``); at least ``min_steps`` steps run even when the
    processes start late. ``devices``: one device string per rank (``"cpu"`` or ``"cuda:i"``).
    ``store_url`` (and ``s3_endpoint_url`` for a non-AWS S3 server): the example store, as
    `store.open_store` takes it, so rank processes read data and checkpoints without settings.
    """

    tenant: str
    candidate: str
    snapshot: int
    checkpoint: str
    hyperparameters: Mapping[str, float]
    devices: Sequence[str]
    until: float
    global_batch: int = 128
    micro_batch: int = 64
    seed: int = 0
    val_fraction: float = 0.2
    min_steps: int = 1
    max_steps: int | None = None
    store_url: str = ""
    s3_endpoint_url: str | None = None
    threads_per_rank: int = 1

    @property
    def gpus(self) -> int:
        return len(self.devices)


@dataclass(frozen=True)
class StageResult:
    """``accuracy`` on the validation split after the stage; ``steps`` in total (all stages);
    ``stage_steps`` this stage; ``start_s``: seconds from launch to the first step (process
    start, imports, data, checkpoint load); ``checkpoint_s``: time to write the checkpoint."""

    accuracy: float
    steps: int
    stage_steps: int
    resumed_step: int
    epochs: float
    world_size: int
    train_s: float
    start_s: float
    checkpoint_s: float
    wall_s: float
    train_loss: float
    extra: dict[str, Any] = field(default_factory=dict)


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def run_trial_stage(stage: TrialStage) -> StageResult:
    """Train ``stage`` on ``len(stage.devices)`` processes; returns rank 0's report.

    The ranks are fresh interpreters (``python -m trainers.elastic SPEC RANK``, as torchrun
    starts them), so nothing depends on how the caller's program was started.

    Raises:
        RuntimeError: a rank failed; the message carries the end of its standard error.
    """
    if stage.global_batch < stage.gpus:
        raise ValueError(
            f"global batch {stage.global_batch} is smaller than {stage.gpus} processes"
        )
    launched = time.time()
    with tempfile.TemporaryDirectory(prefix="tenantml-seer-") as tmp:
        out = os.path.join(tmp, "result.json")
        spec = os.path.join(tmp, "stage.json")
        with open(spec, "w") as f:
            json.dump(
                {
                    "stage": {
                        **asdict(stage),
                        "hyperparameters": dict(stage.hyperparameters),
                        "devices": list(stage.devices),
                    },
                    "port": _free_port(),
                    "out": out,
                    "launched": launched,
                },
                f,
            )
        logs = [open(os.path.join(tmp, f"rank{r}.log"), "w+") for r in range(stage.gpus)]
        try:
            procs = [
                subprocess.Popen(
                    [sys.executable, "-m", "trainers.elastic", spec, str(r)],
                    stdout=logs[r],
                    stderr=subprocess.STDOUT,
                )
                for r in range(stage.gpus)
            ]
            codes = [p.wait() for p in procs]
            if any(codes) or not os.path.exists(out):
                failed = next((r for r, c in enumerate(codes) if c), 0)
                logs[failed].seek(0)
                tail = logs[failed].read()[-2000:]
                raise RuntimeError(
                    f"trial stage {stage.checkpoint!r}: rank {failed} exited with "
                    f"{codes[failed]}:\n{tail}"
                )
        finally:
            for f in logs:
                f.close()
        with open(out) as f:
            data = json.load(f)
    data["wall_s"] = time.time() - launched
    return StageResult(**data)


def _rank_main(rank: int, stage: TrialStage, port: int, out: str, launched: float) -> None:
    import torch
    import torch.distributed as dist
    from torch.nn.parallel import DistributedDataParallel

    from store import is_class_output, open_store
    from trainers._data import split
    from trainers.torch_trainer import build_net, infer_batches

    torch.set_num_threads(stage.threads_per_rank)
    world = stage.gpus
    device = torch.device(stage.devices[rank])
    distinct = len(set(stage.devices)) == world
    backend = "nccl" if device.type == "cuda" and distinct else "gloo"
    if device.type == "cuda":
        torch.cuda.set_device(device)
    dist.init_process_group(
        backend, init_method=f"tcp://127.0.0.1:{port}", rank=rank, world_size=world
    )
    try:
        store = open_store(stage.store_url, s3_endpoint_url=stage.s3_endpoint_url)
        schema = store.schema(stage.tenant)
        ds = store.load(stage.tenant, stage.snapshot)
        classify = is_class_output(schema)
        tr, va = split(ds, stage.val_fraction, stage.seed, classify)
        x_tr, y_tr = torch.from_numpy(ds.x[tr]), torch.from_numpy(ds.y[tr])
        len_tr = None if ds.lengths is None else torch.from_numpy(ds.lengths[tr])

        torch.manual_seed(stage.seed)
        net = build_net(stage.candidate, schema)
        net.pre.fit(x_tr, len_tr)
        if not classify:
            net.out_mean.fill_(float(y_tr.float().mean()))
            net.out_std.fill_(float(y_tr.float().std().clamp_min(1e-6)))
        net = net.to(device)
        hp = stage.hyperparameters
        opt = torch.optim.SGD(
            net.parameters(),
            lr=float(hp.get("lr", 0.01)),
            momentum=float(hp.get("momentum", 0.9)),
            weight_decay=float(hp.get("weight_decay", 5e-4)),
        )
        step, train_s = 0, 0.0
        blob = store.get_checkpoint(stage.tenant, stage.checkpoint)
        if blob is not None:
            saved = torch.load(io.BytesIO(blob), weights_only=True, map_location="cpu")
            if saved.get("format") != CHECKPOINT_FORMAT:
                raise ValueError(f"checkpoint {stage.checkpoint!r} has an unknown format")
            net.load_state_dict(saved["model"])
            opt.load_state_dict(saved["opt"])
            step, train_s = int(saved["step"]), float(saved["train_s"])
        resumed = step
        ddp = DistributedDataParallel(
            net, device_ids=[device.index] if device.type == "cuda" else None
        )
        amp = device.type == "cuda"
        n = len(tr)
        if n < world:
            raise ValueError(f"{n} training examples cannot be split over {world} processes")
        g = min(stage.global_batch, n)
        steps_per_epoch = max(1, n // g)
        # this rank's contiguous share of each global batch
        bounds = np.linspace(0, g, world + 1).astype(int)
        lo, hi = int(bounds[rank]), int(bounds[rank + 1])
        weight = (hi - lo) * world / g  # DDP averages over ranks: weight by share of G

        def loss_of(xb: torch.Tensor, yb: torch.Tensor, lb: torch.Tensor | None) -> torch.Tensor:
            with torch.autocast(device.type, dtype=torch.bfloat16, enabled=amp):
                o = ddp(xb, lb)
            o = o.float()
            if classify:
                return torch.nn.functional.cross_entropy(o, yb, reduction="sum")
            target = (yb.float() - net.out_mean) / net.out_std
            return torch.nn.functional.mse_loss(o, target, reduction="sum")

        stop = torch.zeros(1, device=device if backend == "nccl" else "cpu")
        started = time.time()
        start_s = started - launched
        stage_steps, last_loss = 0, float("nan")
        net.train()
        while True:
            epoch, within = divmod(step, steps_per_epoch)
            gen = torch.Generator().manual_seed(stage.seed * 1_000_003 + epoch)
            order = torch.randperm(n, generator=gen)
            idx = order[within * g : within * g + g][lo:hi]
            opt.zero_grad(set_to_none=True)
            chunks = [idx[s : s + stage.micro_batch] for s in range(0, len(idx), stage.micro_batch)]
            total = 0.0
            for j, b in enumerate(chunks):
                xb = x_tr[b].to(device, non_blocking=True)
                yb = y_tr[b].to(device, non_blocking=True)
                lb = None if len_tr is None else len_tr[b]
                last = j == len(chunks) - 1
                ctx = ddp.no_sync() if not last else _nullcontext()
                with ctx:
                    loss = loss_of(xb, yb, lb) * weight / max(1, hi - lo)
                    loss.backward()  # type: ignore[no-untyped-call]
                total += float(loss.detach()) / weight if weight else 0.0
            opt.step()
            step += 1
            stage_steps += 1
            last_loss = total
            done = stage_steps >= stage.min_steps and (
                time.time() >= stage.until
                or (stage.max_steps is not None and stage_steps >= stage.max_steps)
            )
            stop.fill_(1.0 if done else 0.0)
            dist.all_reduce(stop, op=dist.ReduceOp.MAX)
            if stop.item() > 0:
                break
        train_s += time.time() - started
        if rank == 0:
            pred = infer_batches(
                net, ds.x[va], None if ds.lengths is None else ds.lengths[va], device
            )
            y_va = ds.y[va]
            if classify:
                acc = float((pred.argmax(1) == y_va).mean()) if np.isfinite(last_loss) else 0.0
            else:
                sst = float(((y_va - y_va.mean()) ** 2).sum())
                acc = max(0.0, 1.0 - float(((pred - y_va) ** 2).sum()) / max(sst, 1e-12))
            t0 = time.time()
            buf = io.BytesIO()
            torch.save(
                {
                    "format": CHECKPOINT_FORMAT,
                    "model": net.state_dict(),
                    "opt": opt.state_dict(),
                    "step": step,
                    "train_s": train_s,
                },
                buf,
            )
            store.put_checkpoint(stage.tenant, stage.checkpoint, buf.getvalue())
            result = StageResult(
                accuracy=acc if np.isfinite(acc) else 0.0,
                steps=step,
                stage_steps=stage_steps,
                resumed_step=resumed,
                epochs=step / steps_per_epoch,
                world_size=world,
                train_s=train_s,
                start_s=start_s,
                checkpoint_s=time.time() - t0,
                wall_s=0.0,
                train_loss=last_loss if np.isfinite(last_loss) else -1.0,
                extra={"backend": backend, "devices": list(stage.devices)},
            )
            with open(out, "w") as f:
                json.dump(asdict(result), f)
        dist.barrier()
    finally:
        dist.destroy_process_group()


class _nullcontext:  # noqa: N801 - contextlib.nullcontext without the typing fuss in loops
    def __enter__(self) -> None:
        return None

    def __exit__(self, *exc: object) -> None:
        return None


def load_trial_model(
    tenant: str, candidate: str, snapshot: int, checkpoint: str, store: Any
) -> Any:  # -> trainers.TrainedModel
    """The trained model in a trial's checkpoint (weights only), ready for ``predict``."""
    import torch

    from trainers._model import TrainedModel
    from trainers.torch_trainer import build_net

    blob = store.get_checkpoint(tenant, checkpoint)
    if blob is None:
        raise FileNotFoundError(f"no checkpoint {checkpoint!r} for tenant {tenant!r}")
    saved = torch.load(io.BytesIO(blob), weights_only=True, map_location="cpu")
    schema = store.schema(tenant)
    net = build_net(candidate, schema)
    net.load_state_dict(saved["model"])
    ds_classes = store.load(tenant, snapshot).classes
    return TrainedModel(candidate, schema, ds_classes, net.eval())


def _main(argv: Sequence[str]) -> None:
    with open(argv[0]) as f:
        spec = json.load(f)
    stage = TrialStage(**spec["stage"])
    _rank_main(int(argv[1]), stage, int(spec["port"]), spec["out"], float(spec["launched"]))


if __name__ == "__main__":
    _main(sys.argv[1:])
