"""The torch trainer: CNNs, the auto-encoder and the recurrent nets, with checkpoint/resume.

One job (`TrainJob`) runs a learning-rate grid (shared/papers/000, Sec. 5.1: {0.1, 0.01, 0.001,
0.0001}) unless it names ``lr``; each rate trains up to `max_epochs` epochs; the model with the best
validation score over all rates and epochs is returned. After every epoch the whole state (rate
index, epoch, weights, optimizer, best model, curve, device-seconds) goes to the store as the job's
checkpoint, so a job started again with the same id resumes where the last finished epoch left
off: a kill loses at most one epoch. Epoch order is seeded by (seed, rate, epoch), so a resumed
job sees the batches an uninterrupted one would have.

On CUDA: bf16 autocast and channels-last memory for image nets; `cudnn.benchmark`.
"""

from __future__ import annotations

import io
import time
from collections.abc import Callable
from dataclasses import asdict
from typing import Any

import numpy as np
import torch
from numpy.typing import NDArray
from torch import nn
from torch.nn import functional as F  # noqa: N812

from store import ExampleStore, is_class_output
from store.schema import Schema
from trainers import preemption
from trainers._data import split
from trainers._job import LR_GRID, EpochReport, TrainJob, TrainResult
from trainers._model import TrainedModel
from trainers.nets import (
    IMAGE_NETS,
    SEQUENCE_NETS,
    ConvAutoencoder,
    Preprocess,
    SequenceClassifier,
    TenantNet,
)
from trainers.templates import Candidate

__all__ = ["LR_GRID", "Stepper", "build_net", "infer_batches", "pick_device", "train_torch"]

CHECKPOINT_FORMAT = 1


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

    def loss(self, x: torch.Tensor, y: torch.Tensor, lengths: torch.Tensor | None) -> torch.Tensor:
        with torch.autocast(self.device.type, dtype=torch.bfloat16, enabled=self.amp):
            out = self.net(x, lengths)
        out = out.float()
        if self.classify:
            return F.cross_entropy(out, y)
        return F.mse_loss(out, (y.float() - self.net.out_mean) / self.net.out_std)

    def step(
        self, x: torch.Tensor, y: torch.Tensor, lengths: torch.Tensor | None = None
    ) -> torch.Tensor:
        self.opt.zero_grad(set_to_none=True)
        loss = self.loss(x, y, lengths)
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


def _score(pred: NDArray[Any], y: NDArray[Any], classify: bool) -> float:
    """Accuracy for classes; for tensors R^2 = 1 - SSE/SST, clipped at 0."""
    if classify:
        return float((pred.argmax(1) == y).mean())
    sst = float(((y - y.mean()) ** 2).sum())
    return max(0.0, 1.0 - float(((pred - y) ** 2).sum()) / max(sst, 1e-12))


def _optimizer(net: nn.Module, lr: float, job: TrainJob, family: str) -> torch.optim.Optimizer:
    hp = job.hyperparameters
    kind = str(hp.get("optimizer", "sgd" if family == "cnn" else "adam"))
    wd = float(hp.get("weight_decay", 5e-4 if kind == "sgd" else 0.0))
    if kind == "sgd":
        return torch.optim.SGD(net.parameters(), lr=lr, momentum=0.9, weight_decay=wd)
    if kind == "adam":
        return torch.optim.Adam(net.parameters(), lr=lr, weight_decay=wd)
    raise ValueError(f"optimizer {kind!r} is not valid: use 'sgd' or 'adam'")


def _to_bytes(obj: Any) -> bytes:
    buf = io.BytesIO()
    torch.save(obj, buf)
    return buf.getvalue()


def train_torch(
    job: TrainJob, store: ExampleStore, on_epoch: Callable[[EpochReport], None] | None = None
) -> TrainResult:
    """Run (or resume) `job`; see the module docstring."""
    job.validate()
    cand = Candidate.parse(job.candidate)
    schema = store.schema(job.tenant)
    snapshot = job.snapshot if job.snapshot is not None else store.manifest(job.tenant).version
    job_id = job.resolved_id(snapshot)
    ds = store.load(job.tenant, snapshot)
    classify = is_class_output(schema)
    tr, va = split(ds, job.val_fraction, job.seed, classify)
    device = pick_device(job.device)
    if device.type == "cuda":
        torch.backends.cudnn.benchmark = True
    lrs = (float(job.hyperparameters["lr"]),) if "lr" in job.hyperparameters else LR_GRID
    batch_size = int(job.hyperparameters.get("batch_size", 64))
    if batch_size < 1:
        raise ValueError(f"batch_size={batch_size} is not valid: use 1 or more")

    x_tr, y_tr = torch.from_numpy(ds.x[tr]), torch.from_numpy(ds.y[tr])
    len_tr = None if ds.lengths is None else torch.from_numpy(ds.lengths[tr])
    len_va = None if ds.lengths is None else ds.lengths[va]

    def fresh_net(lr_index: int) -> TenantNet:
        torch.manual_seed(job.seed * 1000 + lr_index)
        net = build_net(job.candidate, schema)
        net.pre.fit(x_tr, len_tr)
        if not classify:
            net.out_mean.fill_(float(y_tr.float().mean()))
            net.out_std.fill_(float(y_tr.float().std().clamp_min(1e-6)))
        return net.to(device)

    state: dict[str, Any] = {
        "format": CHECKPOINT_FORMAT,
        "job_id": job_id,
        "snapshot": snapshot,
        "lr_index": 0,
        "epoch": 0,
        "model": None,
        "opt": None,
        "best_acc": -1.0,
        "best_lr": lrs[0],
        "best_model": None,
        "curve": [],
        "cost_s": 0.0,
        "epochs_total": 0,
        "done": False,
        "batch": 0,
        "partial_loss": 0.0,
        "partial_batches": 0,
        "steps_total": 0,
    }
    resumed_from = 0
    blob = store.get_checkpoint(job.tenant, job_id)
    if blob is not None:
        saved = torch.load(io.BytesIO(blob), weights_only=True, map_location="cpu")
        if saved.get("format") != CHECKPOINT_FORMAT or saved.get("snapshot") != snapshot:
            raise ValueError(f"checkpoint of job {job_id!r} does not belong to this job")
        state.update(saved)
        resumed_from = int(state["epochs_total"])

    started = time.perf_counter()
    cost_before = float(state["cost_s"])

    def spent() -> float:
        return cost_before + time.perf_counter() - started

    while not state["done"] and state["lr_index"] < len(lrs):
        i = int(state["lr_index"])
        lr = lrs[i]
        net = fresh_net(i)
        opt = _optimizer(net, lr, job, cand.spec.family)
        if state["model"] is not None:  # resume inside this rate's run
            net.load_state_dict(state["model"])
            opt.load_state_dict(state["opt"])
        stepper = Stepper(net, opt, device, classify)
        # This rate's share of the remaining budget.
        rate_deadline = (
            None
            if job.time_budget_s is None
            else spent() + (job.time_budget_s - spent()) / (len(lrs) - i)
        )
        while state["epoch"] < job.max_epochs:
            epoch = int(state["epoch"]) + 1
            gen = torch.Generator().manual_seed(job.seed * 1_000_003 + i * 1009 + epoch)
            order = torch.randperm(len(tr), generator=gen)
            net.train()
            # a job preempted inside this epoch resumes at its next batch (same order)
            first = int(state.get("batch", 0))
            total = torch.full((), float(state.get("partial_loss", 0.0)), device=device)
            n_batches = int(state.get("partial_batches", 0))
            for bi, s in enumerate(range(0, len(order), batch_size)):
                if bi < first:
                    continue
                b = order[s : s + batch_size]
                if len(b) < 2 and len(order) > 1:
                    continue  # batch norm needs 2+ examples
                xb = x_tr[b].to(device, non_blocking=True)
                yb = y_tr[b].to(device, non_blocking=True)
                lb = None if len_tr is None else len_tr[b]
                total += stepper.step(xb, yb, lb)
                n_batches += 1
                state["steps_total"] = int(state.get("steps_total", 0)) + 1
                if preemption.pending():  # revocation notice: checkpoint now, mid-epoch
                    state.update(
                        batch=bi + 1,
                        partial_loss=float(total),
                        partial_batches=n_batches,
                        model=net.state_dict(),
                        opt=opt.state_dict(),
                        cost_s=spent(),
                    )
                    t_ck = time.perf_counter()
                    store.put_checkpoint(job.tenant, job_id, _to_bytes(state))
                    err = preemption.Preempted(job_id, epoch, bi + 1, int(state["steps_total"]))
                    err.checkpoint_s = time.perf_counter() - t_ck
                    raise err
            state["batch"], state["partial_loss"], state["partial_batches"] = 0, 0.0, 0
            train_loss = float(total) / max(n_batches, 1)
            pred = infer_batches(net, ds.x[va], len_va, device)
            acc = _score(pred, ds.y[va], classify) if np.isfinite(train_loss) else 0.0
            report = EpochReport(lr, epoch, train_loss, acc, spent())
            state["curve"].append(asdict(report))
            state["epoch"] = epoch
            state["epochs_total"] += 1
            if acc > state["best_acc"]:
                state["best_acc"], state["best_lr"] = acc, lr
                state["best_model"] = {
                    k: v.detach().cpu().clone() for k, v in net.state_dict().items()
                }
            state["model"] = net.state_dict()
            state["opt"] = opt.state_dict()
            out_of_time = job.time_budget_s is not None and spent() >= job.time_budget_s
            diverged = not np.isfinite(train_loss)
            if (
                diverged
                or epoch >= job.max_epochs
                or (rate_deadline is not None and spent() >= rate_deadline)
            ):
                state["lr_index"], state["epoch"] = i + 1, 0
                state["model"] = state["opt"] = None
            state["done"] = out_of_time or state["lr_index"] >= len(lrs)
            state["cost_s"] = spent()
            store.put_checkpoint(job.tenant, job_id, _to_bytes(state))
            if on_epoch is not None:
                on_epoch(report)
            if state["lr_index"] != i or state["done"]:
                break

    net = build_net(job.candidate, schema)
    if state["best_model"] is not None:
        net.load_state_dict(state["best_model"])
    model = TrainedModel(job.candidate, schema, ds.classes, net.eval())
    hp = dict(job.hyperparameters)
    hp["lr"] = float(state["best_lr"])
    return TrainResult(
        job_id=job_id,
        tenant=job.tenant,
        candidate=job.candidate,
        snapshot=snapshot,
        accuracy=max(0.0, float(state["best_acc"])),
        cost_s=float(state["cost_s"]),
        epochs=int(state["epochs_total"]),
        hyperparameters=hp,
        model=model,
        curve=[EpochReport(**c) for c in state["curve"]],
        device=str(device),
        resumed_from_epoch=resumed_from,
        n_train=len(tr),
        n_val=len(va),
        steps=int(state.get("steps_total", 0)),
    )
