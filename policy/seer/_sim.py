"""Building blocks of the elastic-tuning simulator (see :mod:`policy.seer.tuning`): the
recorded curve set, the speed-up model ``lambda(p)``, configuration samplers, the settings every
method shares, a run's outcome, and the trial bookkeeping (progress and resource-time paid)."""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from functools import cached_property
from typing import Protocol

import numpy as np

from policy._types import FloatArray
from policy.seer._plan import Stage, assign_stage

__all__ = [
    "ConfigSampler",
    "Curves",
    "Outcome",
    "PowerScaling",
    "SamplerFactory",
    "Scaling",
    "Trials",
    "TuningSettings",
    "UniformSampler",
    "power_scaling",
    "train_stage",
]

Scaling = Callable[[int], float]


@dataclass(frozen=True)
class PowerScaling:
    """``lambda(p) = p**exponent``: sublinear speed-up on ``p`` resources (picklable)."""

    exponent: float = 0.8

    def __call__(self, p: int) -> float:
        return float(float(p) ** self.exponent)


def power_scaling(exponent: float = 0.8) -> Scaling:
    """``lambda(p) = p**exponent``. The default 0.8 is our reading of the shape of Fig. 2
    (VGG16/ResNet50 on SVHN): clearly below linear, about 5.3x on 8 GPUs."""
    if not 0 < exponent <= 1:
        raise ValueError(f"scaling exponent must be in (0, 1] (sublinear), got {exponent}")
    return PowerScaling(exponent)


@dataclass(frozen=True)
class Curves:
    """One tuning problem: ``len(ids)`` configurations.

    ``times[c]``: (L_c,) increasing single-resource training time of each evaluation;
    ``values[c]``: (L_c,) metric, higher is better; ``hps``: (n, d) hyperparameters or None;
    ``upper``: a bound the metric cannot pass, where one is known (a negated loss: 0).
    """

    name: str
    ids: tuple[str, ...]
    times: tuple[FloatArray, ...]
    values: tuple[FloatArray, ...]
    hps: FloatArray | None = None
    hp_names: tuple[str, ...] = ()
    upper: float = np.inf

    def __post_init__(self) -> None:
        if not self.ids:
            raise ValueError(f"curve set {self.name!r} has no curves")
        for i, t, v in zip(self.ids, self.times, self.values, strict=True):
            if len(t) == 0 or len(t) != len(v):
                raise ValueError(f"curve {i!r} of {self.name!r}: empty or ragged")
            if np.any(np.diff(t) <= 0) or t[0] <= 0:
                raise ValueError(f"curve {i!r} of {self.name!r}: times must increase from > 0")

    def __len__(self) -> int:
        return len(self.ids)

    @property
    def untrained(self) -> float:
        """Metric of a model before its first evaluation: the worst first evaluation."""
        return float(min(v[0] for v in self.values))

    @property
    def epoch_time(self) -> float:
        """Median time per evaluation (one epoch): ``t[-1] / len(t)`` over the curves. (The
        first evaluation alone misleads where steps grow, as LCDB's training-set anchors do.)"""
        return float(np.median([t[-1] / len(t) for t in self.times]))

    @property
    def full_time(self) -> float:
        """Median time of a whole curve (one configuration trained to its end)."""
        return float(np.median([t[-1] for t in self.times]))

    @cached_property
    def unit_hps(self) -> FloatArray:
        """(n, d') hyperparameters scaled to [0, 1] for a model-based searcher: log scale for
        positive ones spanning more than 20x, constant ones dropped; (n, 0) when the set has
        none or any is missing."""
        hps = self.hps
        if hps is None or hps.shape[1] == 0 or not bool(np.all(np.isfinite(hps))):
            return np.zeros((len(self), 0))
        log = (hps.min(0) > 0) & (hps.max(0) > 20 * hps.min(0))
        x = np.where(log, np.log(np.where(hps > 0, hps, 1.0)), hps)
        lo, hi = x.min(0), x.max(0)
        keep = hi > lo
        return np.asarray((x[:, keep] - lo[keep]) / (hi[keep] - lo[keep]), float)

    def nearest_untried(self, target: FloatArray, used: set[int]) -> int:
        """The configuration nearest ``target`` (a point in :attr:`unit_hps`' space) not in
        ``used``; the nearest of all when every one is used. A model-based searcher proposes
        points, a recorded set holds each configuration once."""
        order = np.argsort(((self.unit_hps - target) ** 2).sum(1), kind="stable")
        return next((int(c) for c in order if int(c) not in used), int(order[0]))

    @property
    def max_evals(self) -> int:
        return max(len(t) for t in self.times)

    def value(self, c: int, progress: float) -> float:
        """Metric of configuration ``c`` after ``progress`` single-resource time."""
        j = int(np.searchsorted(self.times[c], progress * (1 + 1e-12), side="right")) - 1
        return float(self.values[c][j]) if j >= 0 else self.untrained

    def evals(self, c: int, progress: float) -> int:
        return int(np.searchsorted(self.times[c], progress * (1 + 1e-12), side="right"))

    def end(self, c: int) -> float:
        return float(self.times[c][-1])

    def time_of_eval(self, c: int, j: int) -> float:
        """Time to reach evaluation ``j`` (1-based), or the curve's end when it is shorter."""
        t = self.times[c]
        return float(t[min(j, len(t)) - 1])


class ConfigSampler(Protocol):
    """Proposes configurations (curve indices) and learns from their results. ``exhausted``:
    every configuration of the (finite, recorded) space has been proposed once."""

    @property
    def exhausted(self) -> bool: ...

    def sample(self) -> int: ...

    def tell(self, config: int, value: float, evals: int) -> None: ...


class UniformSampler:
    """Uniform sampling without replacement (cycling through a new permutation when exhausted)."""

    def __init__(self, n: int, rng: np.random.Generator) -> None:
        self._n, self._rng = n, rng
        self._queue: list[int] = []
        self._drawn = 0

    @property
    def exhausted(self) -> bool:
        return self._drawn >= self._n

    @property
    def untried(self) -> int:
        """Configurations not proposed yet (0 once exhausted)."""
        return max(0, self._n - self._drawn)

    def sample(self) -> int:
        if not self._queue:
            self._queue = [int(i) for i in self._rng.permutation(self._n)][::-1]
        self._drawn += 1
        return self._queue.pop()

    def tell(self, config: int, value: float, evals: int) -> None:
        return None


SamplerFactory = Callable[[Curves, np.random.Generator], ConfigSampler]


@dataclass(frozen=True)
class TuningSettings:
    """Shared knobs. ``t_min``: minimum round time (default: one epoch, ``Curves.epoch_time``);
    ``p_max`` 4 for SEER and E-Grid as in Sec. 6.3."""

    eta: float = 4
    v: float = 2
    p_min: int = 1
    p_max: float = 4
    t_min: float | None = None
    scaling: Scaling = field(default_factory=power_scaling)
    bohb_sampler: SamplerFactory | None = None


@dataclass(frozen=True)
class Outcome:
    """``value``: metric of the returned model; ``resource_time`` actually paid for;
    ``jobs``: (start time, configuration, rung) of every job, for the rung-based methods;
    ``decisions``: what a re-planning method chose at each decision point, one line each."""

    method: str
    value: float
    trials: int
    resource_time: float
    jobs: tuple[tuple[float, int, int], ...] = ()
    decisions: tuple[str, ...] = ()


class Trials:
    """Progress bookkeeping: trial id -> (configuration, progress)."""

    def __init__(self, curves: Curves, scaling: Scaling) -> None:
        self.curves, self.scaling = curves, scaling
        self.config: list[int] = []
        self.progress: list[float] = []
        self.paid = 0.0

    def new(self, config: int) -> int:
        self.config.append(config)
        self.progress.append(0.0)
        return len(self.config) - 1

    def train(self, t: int, wall: float, p: int) -> float:
        """Train trial ``t`` on ``p`` resources for at most ``wall`` time (less when its curve
        ends); pays ``p`` x the time used. Returns the wall time used."""
        speed = self.scaling(p)
        left = self.curves.end(self.config[t]) - self.progress[t]
        used = min(wall, max(0.0, left) / speed)
        self.progress[t] += used * speed
        self.paid += p * used
        return used

    def value(self, t: int) -> float:
        return self.curves.value(self.config[t], self.progress[t])

    def done(self, t: int) -> bool:
        return self.progress[t] >= self.curves.end(self.config[t]) * (1 - 1e-12)

    def best(self, among: Sequence[int] | None = None) -> int:
        ids = range(len(self.config)) if among is None else among
        return max(ids, key=self.value)


def train_stage(
    tr: Trials,
    stage: Stage,
    alive: Sequence[str],
    train: Callable[[int, float, int], object] | None = None,
) -> list[list[str]]:
    """Run one SEER stage on the simulator: :func:`policy.seer.assign_stage` places the trials
    alive (ids as strings) by their metric so far (Alg. 1 lines 6 and 11), and each trains on its
    bracket's resources for the stage's length (``train(trial, wall, p)``, default
    :meth:`Trials.train`). Returns the trials of each bracket."""
    losses = {t: -tr.value(int(t)) for t in alive}
    groups = assign_stage(stage, alive, losses)
    for b, group in zip(stage.brackets, groups, strict=True):
        for t in group:
            (train or tr.train)(int(t), stage.end - stage.start, b.gpus_per_trial)
    return groups
