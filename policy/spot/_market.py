"""SpotTune's market side (shared/papers/004, Sec. II-A and III-A/B): price traces, RevPred's
features and training labels, expected step cost (Eq. 1-2), calibration (Eq. 3), AWS billing.

Notation: a *market* is (availability zone, instance type); its price trace is a step function
(a price holds until the next change), put on a 1-minute grid as Sec. IV-A1 does. ``t`` is a
minute index on that grid. A spot instance requested with maximum price ``b`` is revoked at the
first minute whose price exceeds ``b``; AWS charges the market price per second, and refunds an
instance revoked within its first hour (Sec. II-A).
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass

import numpy as np

from policy._types import FloatArray

__all__ = [
    "FEATURES",
    "HISTORY",
    "Market",
    "best_instance",
    "calibrate",
    "expected_cost_per_hour",
    "expected_step_cost",
    "features",
    "instance_cost",
    "revpred_max_price",
    "revoked_within",
    "tributary_max_price",
]

#: minutes of history fed to RevPred's LSTM (the present record is the 60th)
HISTORY = 59
#: the six engineered features of Sec. III-B, in this order
FEATURES = (
    "price",
    "mean_price_1h",
    "changes_1h",
    "minutes_since_change",
    "workday",
    "hour_of_day",
)


@dataclass(frozen=True)
class Market:
    """One spot market on a 1-minute grid.

    ``prices``: (T,) USD/hour per minute; ``changed``: (T,) bool, a price record at that minute;
    ``start_epoch_s``: UNIX time of minute 0 (for workday / hour of day); ``cpus``/``gpus`` of the
    instance type; ``on_demand``: its on-demand price (USD/hour).
    """

    zone: str
    instance_type: str
    prices: FloatArray
    changed: np.ndarray
    start_epoch_s: float
    cpus: int
    gpus: int
    on_demand: float

    @property
    def name(self) -> str:
        return f"{self.zone}/{self.instance_type}"

    def mean_price(self, t: int, window: int = 60) -> float:
        """``price-bar``: mean price over the last ``window`` minutes up to ``t`` (Eq. 1)."""
        lo = max(0, t - window + 1)
        return float(self.prices[lo : t + 1].mean())


def features(m: Market, t: int) -> FloatArray:
    """The six features at minute ``t`` (Sec. III-B), shape (6,)."""
    lo = max(0, t - 59)
    changes = int(m.changed[lo + 1 : t + 1].sum()) if t > lo else 0
    since = 0
    idx = np.flatnonzero(m.changed[: t + 1])
    if len(idx):
        since = t - int(idx[-1])
    when = m.start_epoch_s + 60.0 * t
    day = int((when // 86400 + 3) % 7)  # 1970-01-01 was a Thursday: 0 = Monday
    hour = int((when % 86400) // 3600)
    return np.array(
        [m.prices[t], m.mean_price(t), changes, since, 1.0 if day < 5 else 0.0, hour], float
    )


def revpred_max_price(m: Market, t: int) -> float:
    """Alg. 2: the training-time maximum price, ``price[t]`` + the mean absolute price change over
    the last hour with the smallest and largest 20% removed. The hour is line 2's open interval
    ``t - 1 h < tau < t``: the 59 changes ``|p[tau] - p[tau - 1]|`` for tau = t-59 .. t-1 (the
    paper's "59 price records in the past hour"), not the change into ``t`` itself."""
    lo = max(1, t - 59)
    deltas = np.sort(np.abs(np.diff(m.prices[lo - 1 : t])))
    L = len(deltas)
    i = np.arange(L)
    kept = deltas[(i > 0.2 * L) & (i < 0.8 * L)]
    b = float(kept.sum()) / (0.6 * L) if L else 0.0
    return float(m.prices[t]) + b


def tributary_max_price(m: Market, t: int, rng: np.random.Generator) -> float:
    """Tributary's (and RevPred's inference-time) maximum price: ``price[t] + U(1e-5, 0.2)``."""
    return float(m.prices[t]) + float(rng.uniform(0.00001, 0.2))


def revoked_within(m: Market, t: int, max_price: float, minutes: int = 60) -> bool:
    """Label: the price exceeds ``max_price`` within the next ``minutes`` (after ``t``)."""
    future = m.prices[t + 1 : t + 1 + minutes]
    return bool(np.any(future > max_price))


def calibrate(p_hat: FloatArray | float, phi_pos: float, phi_neg: float) -> FloatArray:
    """Eq. 3 as printed: ``P / (1 - P) = P^ phi_- / ((1 - P^) phi_+)``.

    ``phi_pos``/``phi_neg``: shares of positive/negative training samples (the class weights
    were phi_- for positives and phi_+ for negatives).
    """
    p = np.clip(np.asarray(p_hat, float), 1e-12, 1 - 1e-12)
    odds = p * phi_neg / ((1 - p) * phi_pos)
    return np.asarray(odds / (1 + odds))


def expected_cost_per_hour(p_revoke: float, mean_price: float) -> float:
    """Eq. 1: ``E[eCost] = (1 - p) * price-bar`` for the next hour (a revocation refunds)."""
    return (1.0 - p_revoke) * mean_price


def expected_step_cost(seconds_per_step: float, p_revoke: float, mean_price: float) -> float:
    """Eq. 2: ``E[sCost] = M[inst][hp] * (1 - p) * price-bar``. Units as the paper's: seconds
    per step times USD per hour (divide by 3600 for USD per step); only the argmin is used."""
    return seconds_per_step * expected_cost_per_hour(p_revoke, mean_price)


def instance_cost(prices: FloatArray, start: int, end: int, revoked: bool) -> float:
    """USD paid for an instance that ran minutes ``[start, end)`` at the market prices, per
    second: nothing when AWS revoked it within its first hour (the refund rule)."""
    if revoked and end - start <= 60:
        return 0.0
    return float(prices[start:end].sum()) / 60.0


def best_instance(
    markets: Sequence[Market],
    t: int,
    seconds_per_step: Sequence[float],
    revocation: Callable[[Market, int, float], float],
    rng: np.random.Generator,
) -> tuple[int, float, float]:
    """GETBESTINST (Alg. 1 lines 1-9): ``(market index, maximum price, expected step cost)``.

    ``seconds_per_step[j]``: M[inst_j][hp]; ``revocation(market, t, max_price)`` -> p.
    """
    best = (-1, 0.0, float("inf"))
    for j, m in enumerate(markets):
        price = tributary_max_price(m, t, rng)  # line 4
        p = revocation(m, t, price)  # line 5
        cost = expected_step_cost(seconds_per_step[j], p, m.mean_price(t))  # line 6
        if cost < best[2]:
            best = (j, price, cost)
    return best
