"""How the chaos drill counts what a kill cost (`tenantml.ops.chaos.count_recovery`), without
servers: the epochs lost and the time back to training, and nothing for a process killed after
its job had ended."""

from __future__ import annotations

from tenantml.ops.chaos import ChaosReport, Fault, count_recovery


def _kill(kind: str, epochs: int, at: float) -> Fault:
    return Fault(kind, 10.0, "pid 1, torch", job="digits/lenet-s1", epochs_at_kill=epochs,
                 killed_at=at)  # fmt: skip


def test_a_resumed_job_loses_the_epochs_after_its_checkpoint() -> None:
    fault = _kill("kill-train", 5, 100.0)
    count_recovery(fault, 4.0, [50.0, 103.5])
    assert fault.lost_epochs == 1.0 and fault.back_s == 3.5 and not fault.ended_first
    fault = _kill("kill-train", 16, 100.0)  # started again from scratch: all 16 lost
    count_recovery(fault, 0.0, [50.0, 101.0])
    assert fault.lost_epochs == 16.0 and fault.back_s == 1.0


def test_a_job_that_had_ended_by_the_kill_lost_nothing_and_is_not_stuck() -> None:
    """The poll saw the job RUNNING with 16 epochs; it ended before the kill, which hit its
    process recording it: FINISHED with no attempt after the kill. Before, that counted as 16
    epochs lost, and a node loss so counted as stuck (never back to training)."""
    fault = _kill("lose-node", 16, 100.0)
    count_recovery(fault, 0.0, [50.0])
    assert fault.lost_epochs == 0.0 and fault.back_s is None and fault.ended_first
    assert fault.detail.endswith("its job had ended by then")
    assert ChaosReport(3, faults=[fault]).ok
    stuck = _kill("lose-node", 2, 100.0)  # a loss whose job never trained again is not ok
    assert not ChaosReport(3, faults=[stuck]).ok
