"""Revocation notices for training processes (SpotTune, shared/papers/004, Sec. III-A: "when
receiving the pre-delivered revocation notice, SpotTune checkpoints its intermediate training
results to S3").

A capacity backend delivers the notice to a training process as SIGTERM (what Kubernetes and a
spot-interruption handler on EC2 send). :func:`install` makes SIGTERM set a flag; the torch
trainer checks :func:`pending` after every optimizer step, writes its checkpoint *with its
position inside the epoch* and raises :class:`Preempted`, so the job resumes at the next step on
another worker and loses nothing that was done before the notice.
"""

from __future__ import annotations

import signal
import threading
from types import FrameType

__all__ = ["PREEMPTED_EXIT", "Preempted", "clear", "install", "notify", "pending"]

#: exit status of a worker process that stopped on a notice, checkpointed (EX_TEMPFAIL)
PREEMPTED_EXIT = 75

_notice = threading.Event()


class Preempted(Exception):
    """Training stopped on a revocation notice after writing its checkpoint."""

    def __init__(
        self, job_id: str, epoch: int, batch: int, steps: int, checkpoint_s: float = 0.0
    ) -> None:
        super().__init__(
            f"job {job_id} preempted at epoch {epoch}, batch {batch} ({steps} steps done); "
            "its checkpoint is written"
        )
        self.job_id, self.epoch, self.batch, self.steps = job_id, epoch, batch, steps
        self.checkpoint_s = checkpoint_s  # time to write the checkpoint after the notice


def install() -> None:
    """SIGTERM -> a pending notice (call in the main thread of a worker process)."""

    def handler(signum: int, frame: FrameType | None) -> None:
        _notice.set()

    signal.signal(signal.SIGTERM, handler)


def notify() -> None:
    """Deliver a notice in-process (tests, or a poller of EC2's instance-action endpoint)."""
    _notice.set()


def pending() -> bool:
    return _notice.is_set()


def clear() -> None:
    _notice.clear()
