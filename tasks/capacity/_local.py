"""A capacity backend on this machine that replays a spot price trace (tests and demos).

Trace time runs ``seconds_per_minute`` real seconds per trace minute from ``start`` (a minute
index of the market's grid). An instance requested with a maximum price gets a revocation notice
(SIGTERM to its worker) as soon as the price in the next ``notice_minutes`` exceeds it, and is
revoked (SIGKILL) when the notice window has passed, as EC2 does with its two-minute notice.
A new instance gets notices only after ``boot_s`` seconds (EC2 notifies running instances;
a process signalled before its interpreter has started would just die).
"""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field

from policy.spot import Market

__all__ = ["LocalBackend", "LocalInstance"]


@dataclass
class LocalInstance:
    """A worker process on market ``market`` with maximum price ``max_price``."""

    market: int
    max_price: float
    proc: subprocess.Popen[bytes]
    launched_minute: float
    launched_at: float
    noticed_at: float | None = None
    revoked: bool = False
    log_path: str = ""
    extra: dict[str, object] = field(default_factory=dict)


class LocalBackend:
    def __init__(
        self,
        markets: Sequence[Market],
        *,
        start: int,
        seconds_per_minute: float = 0.5,
        notice_minutes: int = 2,
        boot_s: float = 1.0,
        env: Mapping[str, str] | None = None,
    ) -> None:
        self.boot_s = boot_s
        self.markets = list(markets)
        self.start = start
        self.spm = seconds_per_minute
        self.notice_minutes = notice_minutes
        self.env = {**os.environ, **(env or {})}
        self.t0 = time.monotonic()

    def minute(self) -> int:
        """The trace minute now."""
        return self.start + int((time.monotonic() - self.t0) / self.spm)

    def price(self, market: int) -> float:
        return float(self.markets[market].prices[self.minute()])

    def launch(self, market: int, max_price: float, spec_path: str) -> LocalInstance:
        log = spec_path + ".log"
        with open(log, "ab") as out:
            proc = subprocess.Popen(
                [sys.executable, "-m", "tasks.capacity.worker", spec_path],
                stdout=out,
                stderr=subprocess.STDOUT,
                env=self.env,
            )
        return LocalInstance(market, max_price, proc, self.minute(), time.monotonic(), log_path=log)

    def check(self, inst: LocalInstance) -> None:
        """Deliver a notice or a revocation when the trace says so."""
        if inst.proc.poll() is not None:
            return
        now = time.monotonic()
        if now - inst.launched_at < self.boot_s:
            return
        if inst.noticed_at is None:
            t = self.minute()
            window = self.markets[inst.market].prices[t + 1 : t + 1 + self.notice_minutes]
            if len(window) and float(window.max()) > inst.max_price:
                inst.noticed_at = now
                inst.proc.send_signal(signal.SIGTERM)
        elif now - inst.noticed_at > self.notice_minutes * self.spm:
            inst.revoked = True
            inst.proc.kill()

    def terminate(self, inst: LocalInstance) -> None:
        if inst.proc.poll() is None:
            inst.proc.kill()
            inst.proc.wait()
