"""The carried AWS spot price history (us-east-1, 2015-03..08; 5 types x 3 zones) on a 1-minute
grid, as :class:`policy.spot.Market` objects. Source and license: tenantml/data/README.md."""

from __future__ import annotations

from functools import lru_cache
from importlib import resources

import numpy as np
import pandas as pd

from policy.spot import Market

__all__ = ["INSTANCE_TYPES", "load_markets"]

#: vCPUs and GPUs of the instance types in the trace (AWS's published specifications)
INSTANCE_TYPES: dict[str, tuple[int, int]] = {
    "m3.medium": (1, 0),
    "r3.large": (2, 0),
    "c3.xlarge": (4, 0),
    "g2.2xlarge": (8, 1),
    "d2.8xlarge": (36, 0),
}


@lru_cache(maxsize=4)
def _frames() -> tuple[pd.DataFrame, dict[str, float]]:
    base = resources.files("tenantml") / "data" / "spot"
    with resources.as_file(base / "spot_prices_us-east-1_2015-03_to_2015-08.csv.gz") as p:
        df = pd.read_csv(p)
    df["timestamp_utc"] = pd.to_datetime(df["timestamp_utc"], utc=True)
    with resources.as_file(base / "on_demand_prices_us-east-1_2015.csv") as p:
        od = pd.read_csv(p)
    return df, dict(zip(od.instance_type, od.on_demand_price_usd_per_hour, strict=True))


def load_markets(
    start: str = "2015-04-01", end: str = "2015-08-31", types: tuple[str, ...] | None = None
) -> list[Market]:
    """Every market's price per minute from ``start`` to ``end`` (UTC dates); a market's price
    before its first record in the window is its last earlier record."""
    df, on_demand = _frames()
    t0 = pd.Timestamp(start, tz="UTC")
    t1 = pd.Timestamp(end, tz="UTC")
    minutes = int((t1 - t0).total_seconds() // 60)
    out = []
    for (zone, itype), g in df.groupby(["availability_zone", "instance_type"], sort=True):
        if types is not None and itype not in types:
            continue
        g = g.sort_values("timestamp_utc")
        idx = ((g.timestamp_utc - t0).dt.total_seconds() // 60).to_numpy(np.int64)
        price = g.spot_price_usd_per_hour.to_numpy(float)
        before = idx < 0
        if not before.any():
            continue  # the market starts inside the window: no price at minute 0
        grid = np.empty(minutes)
        changed = np.zeros(minutes, bool)
        pos = np.searchsorted(idx, np.arange(minutes), side="right") - 1
        grid[:] = price[pos]
        inside = idx[(idx >= 0) & (idx < minutes)]
        changed[inside] = True
        cpus, gpus = INSTANCE_TYPES[str(itype)]
        out.append(
            Market(
                str(zone),
                str(itype),
                grid,
                changed,
                t0.timestamp(),
                cpus,
                gpus,
                float(on_demand[str(itype)]),
            )
        )
    return out
