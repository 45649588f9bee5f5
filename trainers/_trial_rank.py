"""What one rank of a SEER trial-stage does (`trainers.elastic`), in the pieces that
`trainers.elastic._rank_main` composes: join the process group, load the data, build the net,
resume the trial's checkpoint, run global steps until the ranks agree to stop, then (rank 0)
score the validation split and write the checkpoint.

Notation (shared/papers/003, Sec. 6.1; see `trainers.elastic`):

    p          world size, the number of ranks
    n          training examples
    G          global batch, ``min(global_batch, n)``: the same whatever p is
    [lo, hi)   this rank's contiguous share of each global batch, ``linspace(0, G, p + 1)``
    w          ``(hi - lo) * p / G``: that share relative to an even split

A rank sums the loss over its share, micro-batch by micro-batch (gradients are all-reduced only
on the last one), and scales it by ``w / (hi - lo) = p / G``. DDP averages gradients over the p
ranks, so the all-reduced gradient is that of the mean loss over the G examples: the very step
p = 1 takes. The rows of global step ``t`` come from a permutation seeded by (seed, epoch of
``t``) alone, so the data order depends neither on p nor on restarts.

Imported only in rank processes: it loads torch and ``torch.distributed``.
"""

from __future__ import annotations

import time
from collections.abc import Iterator
from contextlib import AbstractContextManager, contextmanager, nullcontext
from dataclasses import dataclass
from typing import TYPE_CHECKING

import numpy as np
import torch
import torch.distributed as dist
from torch.nn import functional as F  # noqa: N812
from torch.nn.parallel import DistributedDataParallel

from store import ExampleStore, is_class_output, open_store
from store.schema import Schema
from trainers._checkpoint import TrialCheckpoint
from trainers._torch_data import TrainingData
from trainers.elastic import BEST_SUFFIX, DEFAULT_CONFIG, kept_best
from trainers.nets import TenantNet
from trainers.torch_trainer import build_net, infer_batches

if TYPE_CHECKING:
    from trainers.elastic import TrialStage

__all__ = [
    "BatchShare",
    "RankGroup",
    "Resumed",
    "Trial",
    "build_net_and_optimizer",
    "evaluate",
    "load_trial_data",
    "process_group",
    "resume_trial",
    "run_steps",
    "write_checkpoint",
]


@dataclass(frozen=True)
class RankGroup:
    """This process's place in the stage: ``rank`` of ``world`` (p), its ``device``, and the
    ``backend``: NCCL when every rank has a GPU of its own, else gloo."""

    rank: int
    world: int
    device: torch.device
    backend: str

    def barrier(self) -> None:
        dist.barrier()


@contextmanager
def process_group(rank: int, stage: TrialStage, port: int) -> Iterator[RankGroup]:
    """Join the stage's ``torch.distributed`` group on 127.0.0.1:``port``; leave it on exit."""
    torch.set_num_threads(stage.threads_per_rank)
    world = stage.gpus
    device = torch.device(stage.devices[rank])
    distinct = len(set(stage.devices)) == world
    # NCCL cannot run two ranks on one GPU; gloo can (and is the only choice on the CPU)
    backend = "nccl" if device.type == "cuda" and distinct else "gloo"
    if device.type == "cuda":
        torch.cuda.set_device(device)
    dist.init_process_group(
        backend, init_method=f"tcp://127.0.0.1:{port}", rank=rank, world_size=world
    )
    try:
        yield RankGroup(rank, world, device, backend)
    finally:
        dist.destroy_process_group()


def load_trial_data(stage: TrialStage) -> tuple[ExampleStore, Schema, TrainingData]:
    """The store named in ``stage``, the tenant's schema and the snapshot's seeded split (the
    same on every rank: the split depends on the stage's seed only)."""
    store = open_store(stage.store_url, s3_endpoint_url=stage.s3_endpoint_url)
    schema = store.schema(stage.tenant)
    ds = store.load(stage.tenant, stage.snapshot)
    data = TrainingData.split(ds, stage.val_fraction, stage.seed, is_class_output(schema))
    return store, schema, data


def build_net_and_optimizer(
    stage: TrialStage, schema: Schema, data: TrainingData, device: torch.device
) -> tuple[TenantNet, torch.optim.Optimizer]:
    """The trial's net (seeded by the stage's seed, normalised to the training split) on
    ``device``, and SGD with the trial's ``lr``, ``momentum`` and ``weight_decay``."""
    torch.manual_seed(stage.seed)
    net = build_net(stage.candidate, schema)
    data.fit_normalisation(net)
    net = net.to(device)
    hp = stage.hyperparameters
    opt = torch.optim.SGD(
        net.parameters(),
        lr=float(hp.get("lr", DEFAULT_CONFIG["lr"])),
        momentum=float(hp.get("momentum", DEFAULT_CONFIG["momentum"])),
        weight_decay=float(hp.get("weight_decay", DEFAULT_CONFIG["weight_decay"])),
    )
    return net, opt


@dataclass(frozen=True)
class Resumed:
    """What a trial resumed from its checkpoint: the global ``step``, the training seconds of
    the earlier stages and the trial's best ``(score, step)`` it recorded; all empty for a new
    trial."""

    step: int = 0
    train_s: float = 0.0
    best: tuple[float, int] | None = None


def resume_trial(
    store: ExampleStore, stage: TrialStage, net: TenantNet, opt: torch.optim.Optimizer
) -> Resumed:
    """Load the trial's checkpoint, if any, into ``net`` and ``opt``."""
    blob = store.get_checkpoint(stage.tenant, stage.checkpoint)
    if blob is None:
        return Resumed()
    ck = TrialCheckpoint.from_bytes(blob, source=f"checkpoint {stage.checkpoint!r}")
    net.load_state_dict(ck.model)
    opt.load_state_dict(ck.opt)
    return Resumed(ck.step, ck.train_s, ck.best)


@dataclass(frozen=True)
class BatchShare:
    """This rank's share ``[lo, hi)`` of every global batch of ``global_batch`` (G) rows out of
    ``n``, and its ``weight`` w; an epoch is ``steps_per_epoch`` = max(1, n // G) global steps."""

    n: int
    global_batch: int
    steps_per_epoch: int
    lo: int
    hi: int
    weight: float

    @classmethod
    def of(cls, n: int, group: RankGroup, global_batch: int) -> BatchShare:
        if n < group.world:
            raise ValueError(f"{n} training examples cannot be split over {group.world} processes")
        g = min(global_batch, n)
        bounds = np.linspace(0, g, group.world + 1).astype(int)
        lo, hi = int(bounds[group.rank]), int(bounds[group.rank + 1])
        # DDP averages over the p ranks: weight each rank by its share of G
        return cls(n, g, max(1, n // g), lo, hi, (hi - lo) * group.world / g)

    def rows(self, step: int, seed: int) -> torch.Tensor:
        """This rank's training rows ``(hi - lo,)`` at global step ``step``."""
        epoch, within = divmod(step, self.steps_per_epoch)
        gen = torch.Generator().manual_seed(seed * 1_000_003 + epoch)
        order = torch.randperm(self.n, generator=gen)
        g = self.global_batch
        return order[within * g : within * g + g][self.lo : self.hi]


@dataclass(frozen=True, eq=False)
class Trial:
    """The trial as this rank trains it: the net, its DDP wrapper (which all-reduces the
    gradients), the optimizer, the data, and this rank's share of each global batch."""

    net: TenantNet
    ddp: DistributedDataParallel
    opt: torch.optim.Optimizer
    data: TrainingData
    share: BatchShare
    device: torch.device

    @classmethod
    def wrap(
        cls,
        net: TenantNet,
        opt: torch.optim.Optimizer,
        data: TrainingData,
        group: RankGroup,
        global_batch: int,
    ) -> Trial:
        """Wrap ``net`` in DDP (which makes every rank start from rank 0's weights)."""
        share = BatchShare.of(data.n_train, group, global_batch)
        device = group.device
        ddp = DistributedDataParallel(
            net, device_ids=[device.index] if device.type == "cuda" else None
        )
        return cls(net, ddp, opt, data, share, device)

    def summed_loss(
        self, xb: torch.Tensor, yb: torch.Tensor, lb: torch.Tensor | None
    ) -> torch.Tensor:
        """Loss summed (not averaged) over a micro-batch: cross-entropy for classes, squared
        error on z-scored targets for tensors."""
        with torch.autocast(self.device.type, dtype=torch.bfloat16, enabled=self.amp):
            out = self.ddp(xb, lb)
        out = out.float()
        if self.data.classify:
            return F.cross_entropy(out, yb, reduction="sum")
        target = (yb.float() - self.net.out_mean) / self.net.out_std
        return F.mse_loss(out, target, reduction="sum")

    @property
    def amp(self) -> bool:
        """bf16 autocast on CUDA only."""
        return self.device.type == "cuda"

    def step(self, rows: torch.Tensor, micro_batch: int) -> float:
        """One global step on this rank's ``rows`` ``(hi - lo,)``, in micro-batches of
        ``micro_batch`` with gradient accumulation. Returns this rank's mean loss on its rows."""
        share = self.share
        self.opt.zero_grad(set_to_none=True)
        chunks = [rows[s : s + micro_batch] for s in range(0, len(rows), micro_batch)]
        total = 0.0
        for j, b in enumerate(chunks):
            xb, yb, lb = self.data.train_batch(b, self.device)
            # all-reduce once per step: on the last micro-batch, with every gradient summed
            sync: AbstractContextManager[None] = (
                nullcontext() if j == len(chunks) - 1 else self.ddp.no_sync()
            )
            with sync:
                loss = self.summed_loss(xb, yb, lb) * share.weight / max(1, share.hi - share.lo)
                loss.backward()  # type: ignore[no-untyped-call]
            total += float(loss.detach()) / share.weight if share.weight else 0.0
        self.opt.step()
        return total


def _agree_to_stop(flag: torch.Tensor, done: bool) -> bool:
    """Whether any rank is done: an all-reduce (max) of each rank's flag, so that every rank
    stops after the same step (one stopping alone would leave the others in an all-reduce)."""
    flag.fill_(1.0 if done else 0.0)
    dist.all_reduce(flag, op=dist.ReduceOp.MAX)
    return flag.item() > 0


def run_steps(
    trial: Trial, stage: TrialStage, group: RankGroup, first_step: int
) -> tuple[int, float, list[list[float]]]:
    """Global steps from ``first_step`` on, at least ``stage.min_steps``, until the stage's
    wall-clock end (``until``) or ``max_steps``. Returns the number of steps taken, this
    rank's loss on the last one, and the ``[step, score]`` evaluations made on the way.

    With ``stage.evals = n > 1``, rank 0 also scores the validation split after the steps that
    pass ``1/n, ..., (n-1)/n`` of the stage's time (the last score is the stage end's), so a
    re-planning tuner sees each trial's learning curve within a stage; the other ranks wait for
    it in the next step's all-reduce. Evaluation runs on the plain net, not its DDP wrapper."""
    flag = torch.zeros(1, device=group.device if group.backend == "nccl" else "cpu")
    stage_steps, last_loss = 0, float("nan")
    started = time.time()
    span = max(stage.until - started, 0.0)
    marks = [started + span * i / stage.evals for i in range(1, stage.evals)]
    curve: list[list[float]] = []
    trial.net.train()
    while True:
        last_loss = trial.step(
            trial.share.rows(first_step + stage_steps, stage.seed), stage.micro_batch
        )
        stage_steps += 1
        done = stage_steps >= stage.min_steps and (
            time.time() >= stage.until
            or (stage.max_steps is not None and stage_steps >= stage.max_steps)
        )
        if _agree_to_stop(flag, done):
            return stage_steps, last_loss, curve
        if group.rank == 0 and marks and time.time() >= marks[0]:
            while marks and time.time() >= marks[0]:
                marks.pop(0)
            curve.append([float(first_step + stage_steps), evaluate(trial, last_loss)])
            trial.net.train()


def evaluate(trial: Trial, last_loss: float) -> float:
    """The trial's validation score (`TrainingData.score`); 0 for a classifier whose training
    loss diverged, and 0 for a score that is not finite."""
    data = trial.data
    pred = infer_batches(trial.net, data.x_va, data.len_va, trial.device)
    if data.classify and not np.isfinite(last_loss):
        return 0.0
    acc = data.score(pred)
    return acc if np.isfinite(acc) else 0.0


def write_checkpoint(
    store: ExampleStore,
    stage: TrialStage,
    trial: Trial,
    resumed: Resumed,
    step: int,
    train_s: float,
    accuracy: float,
) -> tuple[float, tuple[float, int] | None]:
    """Write the trial's `TrialCheckpoint` after a stage that ended at ``accuracy`` (step
    ``step``), keeping the resumed state as ``checkpoint + BEST_SUFFIX`` first when it is the
    trial's best and this stage ended below it (`trainers.elastic.kept_best`; only with
    ``stage.keep_best``). Returns the seconds both took and the trial's best ``(score, step)``
    (None without ``keep_best``)."""
    t0 = time.time()
    kept: tuple[float, int] | None = None
    if stage.keep_best:
        kept, copy = kept_best(resumed.step, resumed.best, accuracy, step)
        # the resumed state is still the stored one: only rank 0 writes, and only after this
        blob = store.get_checkpoint(stage.tenant, stage.checkpoint) if copy else None
        if blob is not None:
            store.put_checkpoint(stage.tenant, stage.checkpoint + BEST_SUFFIX, blob)
    ck = TrialCheckpoint(trial.net.state_dict(), trial.opt.state_dict(), step, train_s, kept)
    store.put_checkpoint(stage.tenant, stage.checkpoint, ck.to_bytes())
    return time.time() - t0, kept
