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
the validation split and writes the trial's checkpoint (a `trainers._checkpoint.TrialCheckpoint`:
weights, optimizer, step) to the store; the next stage resumes it with its new ``p``. Examples are
visited in a seeded permutation per epoch indexed by the global step, so the data order does not
depend on ``p`` or on restarts. The rank side lives in `trainers._trial_rank` (it loads torch;
this module does not, so the launcher's process stays light).
"""

from __future__ import annotations

import json
import os
import socket
import subprocess
import sys
import tempfile
import threading
import time
from collections.abc import Mapping, Sequence
from dataclasses import asdict, dataclass, field
from typing import Any

import numpy as np

from trainers._checkpoint import TrialCheckpoint
from trainers.processes import end_processes

__all__ = [
    "BEST_SUFFIX",
    "DEFAULT_CONFIG",
    "SEARCH_SPACE",
    "StageResult",
    "TrialStage",
    "kept_best",
    "load_trial_model",
    "run_trial_stage",
    "sample_configs",
    "stop_ranks",
]

#: the suffix of the key under which a trial's best state is kept once a later stage ends worse
BEST_SUFFIX = "-best"

#: Table 1 of the paper: the standard search space for vision models.
SEARCH_SPACE: dict[str, tuple[float, ...]] = {
    "lr": (1e-4, 5e-4, 1e-3, 5e-3, 0.01, 0.05, 0.1, 0.5, 1.0),
    "weight_decay": (0.0001, 0.0005, 0.001, 0.005),
    "momentum": (0.9, 0.95, 0.99, 0.997),
}


#: the SGD settings a trial without them trains with: the service's own SGD recipe's momentum
#: and weight decay (`trainers.torch_trainer`), at 0.01, the rate of its grid where SGD learned
#: LeNet-5 on the digits within 10 epochs (0.96-0.97)
DEFAULT_CONFIG: dict[str, float] = {"lr": 0.01, "momentum": 0.9, "weight_decay": 5e-4}


def sample_configs(
    n: int, rng: np.random.Generator, with_default: bool = False
) -> list[dict[str, float]]:
    """``n`` configurations drawn uniformly from :data:`SEARCH_SPACE` (Alg. 1 line 2). With
    ``with_default`` the first is `DEFAULT_CONFIG` and ``n - 1`` are drawn: half of Table 1's
    space diverges for a small CNN (learning rates 0.5 and 1, momentum 0.99 and more: a job of
    two trials on digits drew two such and returned 0.0), so a small budget then still does
    as well as the default recipe (as FLAML's search starts from its low-cost default)."""
    first = [dict(DEFAULT_CONFIG)] if with_default and n > 0 else []
    drawn = [{k: float(rng.choice(v)) for k, v in SEARCH_SPACE.items()}
             for _ in range(n - len(first))]  # fmt: skip
    return first + drawn


@dataclass(frozen=True)
class TrialStage:
    """What one trial does in one stage.

    ``until``: wall-clock end (``time.time()``); at least ``min_steps`` steps run even when the
    processes start late. ``evals``: validation scores per stage, evenly spaced in its time,
    the last at its end (a re-planning tuner extrapolates the curve they trace). ``devices``:
    one device string per rank (``"cpu"`` or ``"cuda:i"``). ``keep_best``: track the trial's
    best stage end and keep that state when a later stage ends below it (`kept_best`); the
    paper's tuner returns its finalists as they end and pays for no copies.
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
    evals: int = 1
    keep_best: bool = True

    @property
    def gpus(self) -> int:
        return len(self.devices)


@dataclass(frozen=True)
class StageResult:
    """``accuracy`` on the validation split after the stage; ``steps`` in total (all stages);
    ``stage_steps`` this stage; ``start_s``: seconds from launch to the first step (process
    start, imports, data, checkpoint load); ``checkpoint_s``: time to write the checkpoint;
    ``curve``: ``[step, score]`` of every evaluation this stage, the last the stage end's."""

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
    curve: list[list[float]] = field(default_factory=list)
    best: list[float] | None = None
    stage_train_s: float | None = None


def kept_best(
    resumed_step: int, resumed_best: tuple[float, int] | None, accuracy: float, step: int
) -> tuple[tuple[float, int], bool]:
    """A trial's best stage end once a stage that resumed the state at ``resumed_step`` (whose
    checkpoint recorded the trial's best as ``resumed_best``, None for a new trial) ended at
    ``accuracy``, step ``step``: ``((score, step), copy)``. ``copy``: the resumed state is the
    best and this stage ended below it, so it must be kept as ``checkpoint + BEST_SUFFIX``
    before the new state overwrites it. A stage that ends below a best already kept copies
    nothing (the copy holds it); one that ends at or above it is the new best (ties: the
    later). The best travels in each checkpoint, so a stage re-run after a crash (resuming a
    later state than the runner recorded) still knows where the best is."""
    if resumed_best is None or accuracy >= resumed_best[0]:
        return (accuracy, step), False
    return resumed_best, resumed_best[1] == resumed_step


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


#: the rank processes of this process's trial stages now running (`stop_ranks`), and whether
#: the process is stopping (no rank starts then); reentrant: a signal handler may take it in a
#: thread that holds it
_RANKS: set[subprocess.Popen[bytes]] = set()
_RANKS_LOCK = threading.RLock()
_stopping = False


def stop_ranks(grace_s: float = 2.0) -> None:
    """Stop the rank processes this process started and that still run (SIGTERM, then SIGKILL
    after `grace_s`), and start no more: for a command ending at once on Ctrl-C, which would
    leave them training (a signal sent to the command alone does not reach them). Safe in a
    signal handler."""
    global _stopping
    with _RANKS_LOCK:
        _stopping = True
        ranks = [p for p in _RANKS if p.poll() is None]
    end_processes(ranks, grace_s)


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
                    "parent": os.getpid(),
                },
                f,
            )
        logs = [open(os.path.join(tmp, f"rank{r}.log"), "w+") for r in range(stage.gpus)]
        procs: list[subprocess.Popen[bytes]] = []
        try:
            for r in range(stage.gpus):
                with _RANKS_LOCK:
                    if _stopping:
                        raise RuntimeError(f"trial stage {stage.checkpoint!r}: stopping")
                    procs.append(
                        subprocess.Popen(
                            [sys.executable, "-m", "trainers.elastic", spec, str(r)],
                            stdout=logs[r],
                            stderr=subprocess.STDOUT,
                        )
                    )
                    _RANKS.add(procs[-1])
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
            with _RANKS_LOCK:
                _RANKS.difference_update(procs)
            for f in logs:
                f.close()
        with open(out) as f:
            data = json.load(f)
    data["wall_s"] = time.time() - launched
    return StageResult(**data)


def _rank_main(rank: int, stage: TrialStage, port: int, out: str, launched: float) -> None:
    """Rank ``rank`` of the stage (``python -m trainers.elastic SPEC RANK``): train until the
    ranks agree to stop; rank 0 then writes the trial's checkpoint and its `StageResult` (JSON)
    to ``out``. See `trainers._trial_rank` for the pieces and the notation."""
    from trainers import _trial_rank as tr  # torch and torch.distributed: rank processes only

    with tr.process_group(rank, stage, port) as group:
        store, schema, data = tr.load_trial_data(stage)
        net, opt = tr.build_net_and_optimizer(stage, schema, data, group.device)
        resumed = tr.resume_trial(store, stage, net, opt)
        trial = tr.Trial.wrap(net, opt, data, group, stage.global_batch)
        started = time.time()
        stage_steps, last_loss, curve = tr.run_steps(trial, stage, group, resumed.step)
        train_s = resumed.train_s + time.time() - started
        step = resumed.step + stage_steps
        if group.rank == 0:
            accuracy = tr.evaluate(trial, last_loss)
            checkpoint_s, best = tr.write_checkpoint(
                store, stage, trial, resumed, step, train_s, accuracy
            )
            result = StageResult(
                accuracy=accuracy,
                steps=step,
                stage_steps=stage_steps,
                resumed_step=resumed.step,
                epochs=step / trial.share.steps_per_epoch,
                world_size=group.world,
                train_s=train_s,
                start_s=started - launched,
                checkpoint_s=checkpoint_s,
                wall_s=0.0,  # the launcher's to fill in
                train_loss=last_loss if np.isfinite(last_loss) else -1.0,
                extra={"backend": group.backend, "devices": list(stage.devices)},
                curve=[*curve, [float(step), accuracy]],
                best=None if best is None else [best[0], float(best[1])],
                stage_train_s=train_s - resumed.train_s,
            )
            with open(out, "w") as f:
                json.dump(asdict(result), f)
        group.barrier()  # no rank leaves the group before rank 0 has written


def load_trial_model(
    tenant: str, candidate: str, snapshot: int, checkpoint: str, store: Any
) -> Any:  # -> trainers.TrainedModel
    """The trained model in a trial's checkpoint (weights only), ready for ``predict``."""
    from trainers._model import TrainedModel
    from trainers.torch_trainer import build_net

    blob = store.get_checkpoint(tenant, checkpoint)
    if blob is None:
        raise FileNotFoundError(f"no checkpoint {checkpoint!r} for tenant {tenant!r}")
    saved = TrialCheckpoint.from_bytes(blob, source=f"checkpoint {checkpoint!r}")
    schema = store.schema(tenant)
    net = build_net(candidate, schema)
    net.load_state_dict(saved.model)
    ds_classes = store.load(tenant, snapshot).classes
    return TrainedModel(candidate, schema, ds_classes, net.eval())


def _die_with(parent: int | None) -> None:
    """On Linux, have the kernel kill this rank when the process that launched it ends (a
    SIGKILLed `seer run` or scheduler): an orphaned rank trained on and wrote its trial's
    checkpoint at the stage's end, while the job, sent again, trained the same trial. (The
    launcher's thread waits for its ranks, so it outlives them unless its process dies.)"""
    if parent is None or not sys.platform.startswith("linux"):
        return
    import ctypes
    import signal

    pr_set_pdeathsig = 1
    ctypes.CDLL(None, use_errno=True).prctl(pr_set_pdeathsig, signal.SIGKILL)
    if os.getppid() != parent:  # it ended before the call above
        os._exit(1)


def _main(argv: Sequence[str]) -> None:
    with open(argv[0]) as f:
        spec = json.load(f)
    _die_with(spec.get("parent"))
    stage = TrialStage(**spec["stage"])
    _rank_main(int(argv[1]), stage, int(spec["port"]), spec["out"], float(spec["launched"]))


if __name__ == "__main__":
    _main(sys.argv[1:])
