"""The torch trainer: CNNs, the auto-encoder and the recurrent nets, with checkpoint/resume.

One job (`TrainJob`) runs a learning-rate grid (shared/papers/000, Sec. 5.1: {0.1, 0.01, 0.001,
0.0001}) unless it names ``lr``; each rate trains up to `max_epochs` epochs; the model with the best
validation score over all rates and epochs is returned (of equal scores within one rate's run, the
later epoch's: trained longer, at a lower rate). After every epoch the whole state (rate
index, epoch, weights, optimizer, best model, curve, device-seconds: a
`trainers._checkpoint.JobCheckpoint`) goes to the store as the job's checkpoint, so a job started
again with the same id resumes where the last finished epoch left off: a kill loses at most one
epoch. On a revocation notice (`trainers.preemption`) the checkpoint is written at once with the
position inside the epoch, and the job raises `preemption.Preempted`. Epoch order (and the random
shifts of images) is seeded by (seed, rate, epoch), so a resumed job sees the batches an
uninterrupted one would have. A ``time_budget_s`` is shared out as the grid goes: each rate may
spend what is left over the rates not yet run (`_start_rate`); when the budget is spent the job
returns the best model so far.

`train_torch` reads as its steps: `_prepare` (data, device), `_resume` (checkpoint or a fresh
start), then `_train_rate` for each rate of the grid, which runs `_train_epoch` (raising through
`_checkpoint_on_notice` on a notice) and `_finish_epoch` (score, best model, what comes next).

Within one rate's run the rate follows a linear warm-up over the first tenth of its steps, then
a cosine decay to 0 at ``max_epochs`` (Loshchilov & Hutter, ICLR 2017, without restarts; Goyal et
al. 2017's warm-up). The factor is a function of the step index alone (`lr_factor`), so it needs
no state in the checkpoint and a resumed job follows the same schedule. The batch size defaults
to ``n_train / 40`` within [16, 64]: a small data set (1,437 digits) still gets about 40 steps
per pass over it.

Image classifiers (the CNNs of `trainers.nets.IMAGE_NETS`) train with this recipe:

* AdamW (Loshchilov & Hutter, ICLR 2019) with decoupled weight decay 0.05 (`DEFAULT_OPTIMIZER`,
  `DEFAULT_WEIGHT_DECAY`; a job's ``optimizer`` ``sgd`` | ``adam`` | ``adamw`` and
  ``weight_decay`` override them). Within the service's 10 epochs SGD with momentum 0.9 left
  LeNet-5 near chance at 0.001 and 0.0001 and at 0.96-0.97 at 0.01 on the digits; AdamW learns
  at 0.01 and 0.001 of the grid (0.1 is too large for it, as 0.001 and 0.0001 are too small
  for SGD).
* Random translations of each training image by up to `trainers._torch_data.MAX_SHIFT` (1/16)
  of its width and height, bilinear, applied by the net's `trainers.nets.Preprocess` (after the
  f_k normalization); no flips. A job's ``augment`` hyperparameter, false, turns them off
  (`augments`).
* Repeated augmentation (Hoffer et al., CVPR 2020; Berman et al. 2019): one epoch shows at least
  `MIN_IMAGES_PER_EPOCH` images, so a small training split is gone through several times per
  epoch, each time in a new order with new shifts (`passes_per_epoch`). This gives a small data
  set the optimizer steps it needs within the service's ``max_epochs=10``, while an epoch
  stays the unit of `max_epochs`, of the checkpoints and of the curve: the 1,077 digits the
  service trains on in the benchmark below get 2 passes, 84 steps per epoch, 840 per rate (the
  result's ``steps``). LeNet-5 at rate 0.01, mean test accuracy over 8 seeds: 10 epochs of one
  pass 0.983, of two passes 0.990; 20 epochs of one pass did as well (0.989) but would have
  gone past ``max_epochs``; smaller batches did not help (batches of 13, 10 epochs: 0.981).
* Inputs smaller than a net's smallest side are resized up bilinearly in `Preprocess` (LeNet-5 to
  28x28, the torchvision nets to 32x32, the AlexNets to 64x64; NIN takes 8x8 as it is); NIN
  starts from He et al.'s initialization (`trainers.nets.NetworkInNetwork`).

Measured on scikit-learn's digits (8x8, 1,797 images; a seeded stratified 75/25 split, the 75%
fed to a store, each job with the service's defaults: the grid, ``max_epochs=10``, no budget;
one CPU thread), test accuracy of the returned model and the job's device-seconds, before and
after this recipe: LeNet-5 0.973 (6 s) -> 0.993 (14 s); NIN 0.102 (40 s) -> 0.996 (87 s);
ResNet-18 0.982 (282 s) -> 0.989 (580 s); LeNet-5 after f_0.25 0.847 -> 0.911 (f_k maps the
darkest ink to 0, as the background); SqueezeNet 0.409 -> 0.676, still short of the others.

On CUDA: bf16 autocast and channels-last memory for image nets; `cudnn.benchmark`.
"""

from __future__ import annotations

import math
import time
from collections.abc import Callable, Mapping
from dataclasses import dataclass, replace
from typing import Any, NoReturn

import numpy as np
import torch
from numpy.typing import NDArray
from torch import nn
from torch.nn import functional as F  # noqa: N812

from store import ExampleStore, is_class_output
from store.schema import Schema
from trainers import preemption
from trainers._checkpoint import EPOCH_START, EpochPosition, JobCheckpoint
from trainers._job import LR_GRID, EpochReport, TrainJob, TrainResult
from trainers._model import TrainedModel
from trainers._torch_data import MAX_SHIFT, TrainingData, random_shifts
from trainers.nets import (
    IMAGE_NETS,
    SEQUENCE_NETS,
    ConvAutoencoder,
    Preprocess,
    SequenceClassifier,
    TenantNet,
)
from trainers.templates import Candidate

__all__ = [
    "DEFAULT_OPTIMIZER",
    "DEFAULT_WEIGHT_DECAY",
    "LR_GRID",
    "MIN_IMAGES_PER_EPOCH",
    "Stepper",
    "augments",
    "build_net",
    "default_batch_size",
    "infer_batches",
    "lr_factor",
    "passes_per_epoch",
    "pick_device",
    "train_torch",
]

#: share of a rate's steps spent warming up (linear from 1/n_warm to 1)
WARMUP = 0.1


def lr_factor(step: int, total: int) -> float:
    """Multiplier of the rate at 0-based ``step`` of ``total``: warm-up, then cosine to 0."""
    warm = max(1, int(WARMUP * total))
    if step < warm:
        return (step + 1) / warm
    span = max(1, total - warm)
    return 0.5 * (1.0 + math.cos(math.pi * min(step - warm, span) / span))


def default_batch_size(n_train: int) -> int:
    """About 40 steps per epoch, between 16 and 64 examples per batch."""
    return int(min(64, max(16, n_train // 40)))


#: An epoch of an augmented image classifier shows at least this many (translated) images: a
#: smaller training split is gone through several times per epoch (module docstring).
MIN_IMAGES_PER_EPOCH = 2048


def passes_per_epoch(n_train: int, augmented: bool) -> int:
    """How many times one epoch goes through the `n_train` training images, each time in a new
    order and with new random shifts: enough for `MIN_IMAGES_PER_EPOCH` when `augmented`,
    else once."""
    if not augmented or n_train < 1:
        return 1
    return max(1, -(-MIN_IMAGES_PER_EPOCH // n_train))


def pick_device(name: str | None = None) -> torch.device:
    """`name` if given, else CUDA when present, else CPU."""
    if name:
        return torch.device(name)
    return torch.device("cuda" if torch.cuda.is_available() else "cpu")


def build_net(candidate: str, schema: Schema) -> TenantNet:
    """The zoo network for `candidate`, sized for `schema`, behind its preprocessing."""
    cand = Candidate.parse(candidate)
    field = schema.input.single
    if field is None:
        raise ValueError(f"input {schema.input} needs exactly one tensor field for {candidate}")
    out_shape = schema.output.fields[0].shape
    if cand.model in IMAGE_NETS:
        builder, min_size = IMAGE_NETS[cand.model]
        a, b, c = field.shape
        pre = Preprocess(c, k=cand.k, image=True, min_size=min_size)
        return TenantNet(pre, builder(c, out_shape[0]))
    if cand.model == "conv_autoencoder":
        c = field.shape[2]
        d, e, f = out_shape
        pre = Preprocess(c, k=cand.k, image=True, min_size=1)
        return TenantNet(pre, ConvAutoencoder(c, (d, e, f)))
    if cand.model in SEQUENCE_NETS:
        kw: dict[str, Any] = dict(SEQUENCE_NETS[cand.model])
        n_features = int(np.prod(field.shape))
        pre = Preprocess(n_features, k=cand.k, image=False, min_size=1)
        body = SequenceClassifier(n_features=n_features, n_classes=out_shape[0], **kw)
        return TenantNet(pre, body, sequence=True)
    raise ValueError(
        f"{candidate} is not a torch model; torch models: "
        f"{sorted([*IMAGE_NETS, 'conv_autoencoder', *SEQUENCE_NETS])}"
    )


class Stepper:
    """One optimizer step on a batch, with the GPU settings; shared by training and bench."""

    def __init__(
        self, net: TenantNet, opt: torch.optim.Optimizer, device: torch.device, classify: bool
    ) -> None:
        self.net, self.opt, self.device, self.classify = net, opt, device, classify
        self.amp = device.type == "cuda"

    def loss(
        self,
        x: torch.Tensor,
        y: torch.Tensor,
        lengths: torch.Tensor | None,
        shifts: torch.Tensor | None = None,
    ) -> torch.Tensor:
        with torch.autocast(self.device.type, dtype=torch.bfloat16, enabled=self.amp):
            out = self.net(x, lengths, shifts)
        out = out.float()
        if self.classify:
            return F.cross_entropy(out, y)
        return F.mse_loss(out, (y.float() - self.net.out_mean) / self.net.out_std)

    def step(
        self,
        x: torch.Tensor,
        y: torch.Tensor,
        lengths: torch.Tensor | None = None,
        shifts: torch.Tensor | None = None,
    ) -> torch.Tensor:
        """One step on the batch; ``shifts`` ``(b, 2)`` translate its images (`Preprocess`)."""
        self.opt.zero_grad(set_to_none=True)
        loss = self.loss(x, y, lengths, shifts)
        loss.backward()  # type: ignore[no-untyped-call]
        self.opt.step()
        return loss.detach()


@torch.no_grad()
def infer_batches(
    net: TenantNet,
    x: NDArray[Any],
    lengths: NDArray[np.int64] | None,
    device: torch.device,
    batch_size: int = 256,
) -> NDArray[Any]:
    """Network outputs in target units for all of `x` (logits for classes)."""
    net.eval()
    outs = []
    amp = device.type == "cuda"
    for s in range(0, len(x), batch_size):
        xb = torch.from_numpy(x[s : s + batch_size]).to(device)
        lb = None if lengths is None else torch.from_numpy(lengths[s : s + batch_size])
        with torch.autocast(device.type, dtype=torch.bfloat16, enabled=amp):
            out = net(xb, lb)
        outs.append(net.decode(out.float()).cpu().numpy())
    return np.concatenate(outs) if outs else np.zeros((0,), dtype=np.float32)


#: the optimizer of each family when the job names none (module docstring: why AdamW for CNNs)
DEFAULT_OPTIMIZER: dict[str, str] = {"cnn": "adamw", "autoencoder": "adam", "rnn": "adam"}

#: weight decay of each optimizer when the job gives none: SGD's 5e-4 of the ImageNet CNNs
#: (Krizhevsky et al. 2012, Simonyan & Zisserman 2015); AdamW's decoupled 0.05 as in the
#: AdamW recipes of ConvNeXt (Liu et al., CVPR 2022) and DeiT (Touvron et al., ICML 2021)
DEFAULT_WEIGHT_DECAY: dict[str, float] = {"sgd": 5e-4, "adamw": 0.05, "adam": 0.0}


def _optimizer(net: nn.Module, lr: float, job: TrainJob, family: str) -> torch.optim.Optimizer:
    """The job's ``optimizer`` (else `DEFAULT_OPTIMIZER`) at rate `lr`, with its
    ``weight_decay`` (else `DEFAULT_WEIGHT_DECAY`)."""
    hp = job.hyperparameters
    kind = str(hp.get("optimizer", DEFAULT_OPTIMIZER.get(family, "adam")))
    if kind not in DEFAULT_WEIGHT_DECAY:
        raise ValueError(f"optimizer {kind!r} is not valid: use 'sgd', 'adam' or 'adamw'")
    wd = float(hp.get("weight_decay", DEFAULT_WEIGHT_DECAY[kind]))
    if kind == "sgd":
        return torch.optim.SGD(net.parameters(), lr=lr, momentum=0.9, weight_decay=wd)
    if kind == "adamw":
        return torch.optim.AdamW(net.parameters(), lr=lr, weight_decay=wd)
    return torch.optim.Adam(net.parameters(), lr=lr, weight_decay=wd)


def augments(candidate: str, schema: Schema, hyperparameters: Mapping[str, object]) -> bool:
    """Whether training translates the images at random (`trainers.nets.translate_images`): for
    image classifiers, unless the job's ``augment`` hyperparameter is false. Not for image recovery
    (the target would have to move too) nor for sequences."""
    flag = hyperparameters.get("augment", True)
    if isinstance(flag, str):
        flag = flag.strip().lower() not in ("0", "false", "no", "off")
    return bool(flag) and Candidate.parse(candidate).model in IMAGE_NETS and is_class_output(schema)


@dataclass(frozen=True, eq=False)
class _PreparedJob:
    """A validated job with its data at hand: what stays fixed over every rate and epoch.
    ``lrs``: the rates to train, in order (the job's ``lr``, else `LR_GRID`); ``max_shift``:
    the largest random translation of a training image (`augments`), 0 for none; ``passes``:
    how many times an epoch goes through the training split (`passes_per_epoch`)."""

    job: TrainJob
    job_id: str
    snapshot: int
    schema: Schema
    classes: tuple[str, ...]
    family: str
    device: torch.device
    lrs: tuple[float, ...]
    batch_size: int
    data: TrainingData
    max_shift: float
    passes: int


class _CostClock:
    """Device-seconds spent on the job: those of its earlier starts plus this one's so far."""

    def __init__(self, earlier_s: float) -> None:
        self._earlier_s, self._started = earlier_s, time.perf_counter()

    def spent(self) -> float:
        return self._earlier_s + time.perf_counter() - self._started


@dataclass(frozen=True, eq=False)
class _RateRun:
    """One learning rate's run: its index in the grid, the rate, the net and optimizer being
    trained, and the job-seconds (`_CostClock.spent`) at which its share of the budget ends."""

    index: int
    lr: float
    net: TenantNet
    opt: torch.optim.Optimizer
    stepper: Stepper
    deadline_s: float | None


def train_torch(
    job: TrainJob, store: ExampleStore, on_epoch: Callable[[EpochReport], None] | None = None
) -> TrainResult:
    """Run (or resume) `job`; see the module docstring.

    Raises:
        preemption.Preempted: a revocation notice came; the mid-epoch checkpoint is written.
    """
    run = _prepare(job, store)
    ck = _resume(run, store)
    resumed_from = ck.epochs_total
    clock = _CostClock(ck.cost_s)
    while not ck.done and ck.lr_index < len(run.lrs):
        ck = _train_rate(run, store, ck, clock, on_epoch)
    return _result(run, ck, resumed_from)


def _prepare(job: TrainJob, store: ExampleStore) -> _PreparedJob:
    """Check `job`, resolve its snapshot and id, load and split its data, pick the device."""
    job.validate()
    cand = Candidate.parse(job.candidate)
    schema = store.schema(job.tenant)
    snapshot = job.snapshot if job.snapshot is not None else store.manifest(job.tenant).version
    ds = store.load(job.tenant, snapshot)
    data = TrainingData.split(ds, job.val_fraction, job.seed, is_class_output(schema))
    device = pick_device(job.device)
    if device.type == "cuda":
        torch.backends.cudnn.benchmark = True
    lrs = (float(job.hyperparameters["lr"]),) if "lr" in job.hyperparameters else LR_GRID
    augmented = augments(job.candidate, schema, job.hyperparameters)
    given = job.hyperparameters.get("batch_size")
    batch_size = default_batch_size(data.n_train) if given is None else int(given)
    if batch_size < 1:
        raise ValueError(f"batch_size={batch_size} is not valid: use 1 or more")
    return _PreparedJob(
        job=job,
        job_id=job.resolved_id(snapshot),
        snapshot=snapshot,
        schema=schema,
        classes=ds.classes,
        family=cand.spec.family,
        device=device,
        lrs=lrs,
        batch_size=batch_size,
        data=data,
        max_shift=MAX_SHIFT if augmented else 0.0,
        passes=passes_per_epoch(data.n_train, augmented),
    )


def _resume(run: _PreparedJob, store: ExampleStore) -> JobCheckpoint:
    """The job's checkpoint in the store, or the state of a job not yet started."""
    blob = store.get_checkpoint(run.job.tenant, run.job_id)
    if blob is None:
        return JobCheckpoint(job_id=run.job_id, snapshot=run.snapshot, best_lr=run.lrs[0])
    ck = JobCheckpoint.from_bytes(blob, source=f"checkpoint of job {run.job_id!r}")
    if ck.snapshot != run.snapshot:
        raise ValueError(
            f"checkpoint of job {run.job_id!r} does not belong to this job: it trained on "
            f"snapshot {ck.snapshot}, the job is on snapshot {run.snapshot}"
        )
    return ck


def _fresh_net(run: _PreparedJob, lr_index: int) -> TenantNet:
    """The candidate's net, seeded per rate, normalised to the training split, on the device."""
    torch.manual_seed(run.job.seed * 1000 + lr_index)
    net = build_net(run.job.candidate, run.schema)
    run.data.fit_normalisation(net)
    return net.to(run.device)


def _start_rate(run: _PreparedJob, ck: JobCheckpoint, clock: _CostClock) -> _RateRun:
    """The run of rate ``ck.lr_index``: a fresh net, or the checkpoint's when it stopped inside
    this rate's run."""
    i = ck.lr_index
    lr = run.lrs[i]
    net = _fresh_net(run, i)
    opt = _optimizer(net, lr, run.job, run.family)
    if ck.model is not None and ck.opt is not None:
        net.load_state_dict(ck.model)
        opt.load_state_dict(ck.opt)
    budget, deadline = run.job.time_budget_s, None
    if budget is not None:  # this rate's share of what is left: the rates not yet run split it
        now = clock.spent()
        deadline = now + (budget - now) / (len(run.lrs) - i)
    return _RateRun(i, lr, net, opt, Stepper(net, opt, run.device, run.data.classify), deadline)


def _train_rate(
    run: _PreparedJob,
    store: ExampleStore,
    ck: JobCheckpoint,
    clock: _CostClock,
    on_epoch: Callable[[EpochReport], None] | None,
) -> JobCheckpoint:
    """One step of the learning-rate grid: train rate ``ck.lr_index`` from where `ck` left it,
    epoch by epoch, writing the checkpoint after each, until the rate's run or the job is over.
    Returns the last checkpoint written."""
    if ck.epoch >= run.job.max_epochs:  # resumed under a smaller max_epochs: this rate is over
        following = ck.lr_index + 1
        return replace(
            ck, lr_index=following, epoch=0, model=None, opt=None, done=following >= len(run.lrs)
        )
    rate = _start_rate(run, ck, clock)
    while ck.epoch < run.job.max_epochs:
        train_loss, ck = _train_epoch(run, store, rate, ck, clock)
        ck, report = _finish_epoch(run, rate, ck, train_loss, clock)
        store.put_checkpoint(run.job.tenant, run.job_id, ck.to_bytes())
        if on_epoch is not None:
            on_epoch(report)  # after the write: a caller that stops the job here loses nothing
        if ck.lr_index != rate.index or ck.done:
            break
    return ck


def _epoch_order(
    seed: int, lr_index: int, epoch: int, n: int, max_shift: float = 0.0, passes: int = 1
) -> tuple[torch.Tensor, torch.Tensor | None]:
    """The training rows of one epoch in order, ``(passes * n,)``: ``passes`` permutations of
    the ``n`` rows one after the other; and when ``max_shift`` > 0 the translation
    ``(passes * n, 2)`` of the image at each position (`random_shifts`). Seeded by (seed, rate,
    epoch) alone, so a resumed job sees the batches an uninterrupted one would."""
    gen = torch.Generator().manual_seed(seed * 1_000_003 + lr_index * 1009 + epoch)
    order = torch.cat([torch.randperm(n, generator=gen) for _ in range(passes)])
    return order, random_shifts(len(order), max_shift, gen) if max_shift > 0 else None


def _train_epoch(
    run: _PreparedJob,
    store: ExampleStore,
    rate: _RateRun,
    ck: JobCheckpoint,
    clock: _CostClock,
) -> tuple[float, JobCheckpoint]:
    """Epoch ``ck.epoch + 1`` of `rate`, from ``ck.position`` (a preempted epoch resumes at its
    next batch). Returns the epoch's mean training loss and `ck` with the steps counted.

    Raises:
        preemption.Preempted: a revocation notice came (checked after every step).
    """
    order, shifts = _epoch_order(
        run.job.seed, rate.index, ck.epoch + 1, run.data.n_train, run.max_shift, run.passes
    )
    # one copy per epoch, not per step: a step then starts no copy from host memory, which
    # would wait for the GPU (`trainers._torch_data.RESIDENT_MAX_BYTES`); the split itself
    # goes to the GPU in the first epoch, on the job's cost clock like the rest of its work
    order = order.to(run.data.keep_on(run.device))
    shifts = None if shifts is None else shifts.to(run.device)
    rate.net.train()
    start = ck.position
    # the loss sum stays on the device: reading it every step would wait for the GPU
    total = torch.full((), start.loss_sum, device=run.device)
    n_batches, steps = start.batches, ck.steps_total
    per_epoch = -(-len(order) // run.batch_size)
    for bi, s in enumerate(range(0, len(order), run.batch_size)):
        if bi < start.next_batch:
            continue  # run before the notice
        rows = order[s : s + run.batch_size]
        if len(rows) < 2 and len(order) > 1:
            continue  # batch norm needs 2+ examples
        factor = lr_factor(ck.epoch * per_epoch + bi, run.job.max_epochs * per_epoch)
        for group in rate.opt.param_groups:
            group["lr"] = rate.lr * factor
        batch_shifts = None if shifts is None else shifts[s : s + run.batch_size]
        total += rate.stepper.step(*run.data.train_batch(rows, run.device), batch_shifts)
        n_batches += 1
        steps += 1
        if preemption.pending():
            position = EpochPosition(bi + 1, float(total), n_batches)
            _checkpoint_on_notice(
                run, store, rate, replace(ck, steps_total=steps, position=position), clock
            )
    return float(total) / max(n_batches, 1), replace(ck, steps_total=steps, position=EPOCH_START)


def _checkpoint_on_notice(
    run: _PreparedJob,
    store: ExampleStore,
    rate: _RateRun,
    ck: JobCheckpoint,
    clock: _CostClock,
) -> NoReturn:
    """Write the mid-epoch checkpoint (`ck` holds the position in the epoch) with the net and
    optimizer as they are now, and stop the job (SpotTune, Sec. III-A)."""
    ck = replace(ck, model=rate.net.state_dict(), opt=rate.opt.state_dict(), cost_s=clock.spent())
    t0 = time.perf_counter()
    store.put_checkpoint(run.job.tenant, run.job_id, ck.to_bytes())
    raise preemption.Preempted(
        run.job_id,
        ck.epoch + 1,
        ck.position.next_batch,
        ck.steps_total,
        checkpoint_s=time.perf_counter() - t0,
    )


def _finish_epoch(
    run: _PreparedJob, rate: _RateRun, ck: JobCheckpoint, train_loss: float, clock: _CostClock
) -> tuple[JobCheckpoint, EpochReport]:
    """Score the epoch just trained on the validation split and fold it into `ck`: the curve,
    the best model so far, and whether this rate's run is over (it diverged, reached
    `max_epochs` or its deadline) or the whole job is (budget spent, or no rate left)."""
    job = run.job
    epoch = ck.epoch + 1
    diverged = not np.isfinite(train_loss)
    pred = infer_batches(rate.net, run.data.x_va, run.data.len_va, run.device)
    acc = 0.0 if diverged else run.data.score(pred)
    report = EpochReport(rate.lr, epoch, train_loss, acc, clock.spent())
    # A tie with the best so far of the same rate goes to the later epoch: trained longer, at a
    # lower rate of the schedule (LeNet-5 on the digits at 0.01, 8 seeds: mean test accuracy of
    # the returned model 0.990 with the earlier epoch, 0.991 with the later).
    tie = acc == ck.best_acc and rate.lr == ck.best_lr and ck.best_model is not None
    if acc > ck.best_acc or (tie and not diverged):
        best = {k: v.detach().cpu().clone() for k, v in rate.net.state_dict().items()}
        ck = replace(ck, best_acc=acc, best_lr=rate.lr, best_model=best)
    out_of_time = job.time_budget_s is not None and clock.spent() >= job.time_budget_s
    rate_over = (
        diverged
        or epoch >= job.max_epochs
        or (rate.deadline_s is not None and clock.spent() >= rate.deadline_s)
    )
    ck = replace(ck, curve=(*ck.curve, report), epochs_total=ck.epochs_total + 1)
    if rate_over:  # the next rate starts from a fresh net
        ck = replace(ck, lr_index=rate.index + 1, epoch=0, model=None, opt=None)
    else:
        ck = replace(ck, epoch=epoch, model=rate.net.state_dict(), opt=rate.opt.state_dict())
    done = out_of_time or ck.lr_index >= len(run.lrs)
    return replace(ck, done=done, cost_s=clock.spent()), report


def _result(run: _PreparedJob, ck: JobCheckpoint, resumed_from: int) -> TrainResult:
    """The job's result from its final checkpoint: the best model over all rates and epochs."""
    net = build_net(run.job.candidate, run.schema)
    if ck.best_model is not None:
        net.load_state_dict(ck.best_model)
    hp = dict(run.job.hyperparameters)
    hp["lr"] = ck.best_lr
    return TrainResult(
        job_id=run.job_id,
        tenant=run.job.tenant,
        candidate=run.job.candidate,
        snapshot=run.snapshot,
        accuracy=max(0.0, ck.best_acc),
        cost_s=ck.cost_s,
        epochs=ck.epochs_total,
        hyperparameters=hp,
        model=TrainedModel(run.job.candidate, run.schema, run.classes, net.eval()),
        curve=list(ck.curve),
        device=str(run.device),
        resumed_from_epoch=resumed_from,
        n_train=run.data.n_train,
        n_val=run.data.n_val,
        steps=ck.steps_total,
    )
