"""How the chaos drill counts what a kill cost (`tenantml.ops.chaos.count_recovery`), without
servers: the epochs lost and the time back to training, and nothing for a process killed after
its job had ended."""

from __future__ import annotations

from tenantml.ops.chaos import Fault, count_recovery


def _kill(epochs: int, at: float) -> Fault:
    return Fault("kill-train", 10.0, "pid 1, torch", job="digits/lenet-s1", epochs_at_kill=epochs,
                 killed_at=at)  # fmt: skip


def test_a_resumed_job_loses_the_epochs_after_its_checkpoint() -> None:
    fault = _kill(5, 100.0)
    count_recovery(fault, 140.0, 4.0, [50.0, 103.5])
    assert fault.lost_epochs == 1.0 and fault.back_s == 3.5


def test_a_job_that_had_ended_by_the_kill_lost_nothing() -> None:
    """The poll saw the job RUNNING with 16 epochs; its run ended before the kill, which hit its
    process recording it. Before, that counted as 16 epochs lost and failed the drill."""
    fault = _kill(16, 100.0)
    count_recovery(fault, 99.2, 0.0, [50.0])
    assert fault.lost_epochs == 0.0 and fault.back_s is None
    assert fault.detail.endswith("its job had ended by then")
    fault = _kill(16, 100.0)  # the same run ending after the kill: no resume, 16 lost
    count_recovery(fault, 100.5, 0.0, [50.0])
    assert fault.lost_epochs == 16.0 and fault.back_s is None
