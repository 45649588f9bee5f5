"""SEER (shared/papers/003): the elastic planner and the tuners it is measured against.

* `policy.seer` (this package): Alg. 1-3 of the paper, the plan of brackets under a deadline T
  and a GPU-minute budget B (re-exported from `policy.seer._plan`).
* `policy.seer.tuning`: the simulated tuners on tabulated learning curves (SEER, ASHA,
  HyperSched, BOHB, E-Hyperband, E-Grid, random) that `tenantml seer simulate` compares, on
  the building blocks of `policy.seer._sim`.
* `policy.seer.replan`: `replan`, our tuner that re-plans the rest of a run after every stage
  from the partial curves observed (issue 19); `seer` stays the paper's Alg. 1.
"""

from typing import Literal

from policy.seer import _plan
from policy.seer._plan import *  # noqa: F403  (the public names are _plan's __all__)

Tuner = Literal["replan", "seer"]
#: the elastic tuners a job can run: ours, `policy.seer.replan` (the default), and the paper's
#: Alg. 1 (`seer`); what `trainers.seer_runner` executes and the scheduler's options accept
TUNERS: tuple[Tuner, ...] = ("replan", "seer")


def check_tuner(name: object) -> Tuner:
    """`name` as a `Tuner`, or a ValueError that names it and the valid ones: the one check of
    a tuner's name for the SDK, the CLI, the scheduler's options and the trainers."""
    if name not in TUNERS:
        raise ValueError(f"tuner {name!r} is not valid: use one of {', '.join(TUNERS)}")
    return name


__all__ = [*_plan.__all__, "TUNERS", "Tuner", "check_tuner"]
