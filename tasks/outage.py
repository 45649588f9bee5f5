"""Riding out a server outage: bounded backoff for the service, fail-fast for users.

The service's own processes (the scheduler flow and `train` jobs) must survive the MLflow
server, the Prefect server or the S3 endpoint going away for a while: they wait, with bounded
exponential backoff and one clear log line per attempt naming the server that does not answer,
then carry on where they were. Nothing is lost, because nothing was done: only calls whose
*connection* failed are retried (the request never reached the server), so a create-only write
or a metric is never applied twice.

Users' calls (SDK, CLI) do the opposite: `tenantml.client.Client` checks the servers first and
fails within seconds with `ServerUnreachableError` naming the server (no multi-minute hangs).

* `is_outage(exc)`: the exception (or one in its chain) is a failed connection;
  `connection_broke(exc)`: one cut in the middle (a command names the server it lost);
* `ride_out(fn, ...)`: call `fn`, waiting out outages for at most `patience_s`;
* `patient(obj, ...)`: a proxy whose every method call rides out outages (an `MlflowClient`, a
  blob store);
* `unreachable_server(settings)`: which configured server does not answer, with its URL;
* `wait_for_servers(settings, ...)`: block until every configured server answers (a scheduler
  started during an outage waits, as a running one does, instead of exiting).

Backoff: 1, 2, 4, 8 then 15 s between attempts (``TENANTML_OUTAGE_PATIENCE_S``, default 600 s,
bounds the total; then `ServerUnreachableError`).

A *slow* answer is not an outage: the request may have been applied, so it is not retried here.
Instead the service's processes wait longer for an answer than users do (`serve_patiently`:
``MLFLOW_HTTP_REQUEST_TIMEOUT`` = ``TENANTML_SERVICE_HTTP_TIMEOUT_S``, default 300 s, against 20 s
for the SDK and CLI). A train job's model upload streams through the MLflow server to S3; a busy
server, or a frozen S3 endpoint behind it, answers late, and a 20 s timeout failed such jobs.
"""

from __future__ import annotations

import logging
import os
import time
import urllib.request
from collections.abc import Callable, Iterator
from typing import Any, TypeVar, cast

from tasks.settings import ServerUnreachableError, Settings

__all__ = [
    "Backoff",
    "connection_broke",
    "default_patience_s",
    "is_outage",
    "patient",
    "ride_out",
    "serve_patiently",
    "unreachable_server",
    "wait_for_servers",
    "wait_or_give_up",
]

T = TypeVar("T")
log = logging.getLogger("tasks.outage")

# Text of failed connections as the HTTP stacks word them (MLflow wraps requests' error in an
# MlflowException carrying only its message).
_CONNECT_FAILURES = (
    "Connection refused",
    "Failed to establish a new connection",
    "Could not connect to the endpoint URL",
    "All connection attempts failed",
)


def default_patience_s() -> float:
    text = os.environ.get("TENANTML_OUTAGE_PATIENCE_S", "600")
    try:
        value = float(text)
    except ValueError:
        value = -1.0
    if value < 0:
        raise ValueError(f"TENANTML_OUTAGE_PATIENCE_S={text!r} is not valid: use seconds >= 0")
    return value


def serve_patiently() -> float:
    """Give this process (the scheduler, a train job) the service's HTTP read timeout; returns
    it. ``TENANTML_SERVICE_HTTP_TIMEOUT_S`` (default 300) must be seconds > 0."""
    text = os.environ.get("TENANTML_SERVICE_HTTP_TIMEOUT_S", "300")
    try:
        value = int(text)
    except ValueError:
        value = 0
    if value <= 0:
        raise ValueError(
            f"TENANTML_SERVICE_HTTP_TIMEOUT_S={text!r} is not valid: use whole seconds > 0"
        )
    os.environ["MLFLOW_HTTP_REQUEST_TIMEOUT"] = str(value)  # MLflow reads it on every request
    return float(value)


def _chain(exc: BaseException) -> Iterator[BaseException]:
    """`exc`, then its cause (or context), and so on, each once."""
    seen: set[int] = set()
    e: BaseException | None = exc
    while e is not None and id(e) not in seen:
        seen.add(id(e))
        yield e
        e = e.__cause__ or e.__context__


def is_outage(exc: BaseException) -> bool:
    """True when `exc` (or an exception in its cause/context chain) is a failed connection."""
    return any(
        isinstance(e, ConnectionRefusedError)
        or type(e).__name__ in {"ConnectError", "EndpointConnectionError", "NewConnectionError"}
        or any(text in str(e) for text in _CONNECT_FAILURES)
        for e in _chain(exc)
    )


def connection_broke(exc: BaseException) -> bool:
    """True when `exc` (or one in its chain) is a connection cut in the middle (reset, aborted:
    a server going away as the request arrived). Not an outage the service may retry (the
    request may have arrived); a command may name the server, once it indeed does not answer."""
    return any(
        isinstance(e, ConnectionError)
        or any(text in str(e) for text in ("Connection aborted", "Connection reset"))
        for e in _chain(exc)
    )


def _answers(url: str) -> bool:
    try:
        with urllib.request.urlopen(url, timeout=3):
            return True
    except urllib.error.HTTPError:
        return True  # it answered, if with an error status
    except OSError:
        return False


def unreachable_server(settings: Settings) -> str | None:
    """The first configured server that does not answer, as 'the X server at URL', or None."""
    checks = []
    if settings.tracking_uri.startswith("http"):
        checks.append(("the MLflow server", settings.tracking_uri.rstrip("/") + "/health"))
    if settings.prefect_api_url:
        checks.append(("the Prefect server", settings.prefect_api_url.rstrip("/") + "/health"))
    if settings.s3_endpoint_url:
        checks.append(("the S3 endpoint", settings.s3_endpoint_url))
    for what, url in checks:
        if not _answers(url):
            return f"{what} at {url.removesuffix('/health')}"
    return None


class Backoff:
    """Delays 1, 2, 4, 8, then `cap` seconds, until `patience_s` have passed since `start`."""

    def __init__(self, patience_s: float, cap_s: float = 15.0) -> None:
        self.patience_s = patience_s
        self.cap_s = cap_s
        self.started: float | None = None
        self.attempt = 0

    def reset(self) -> None:
        self.started, self.attempt = None, 0

    def next_delay(self) -> float | None:
        """Seconds to wait before the next attempt, or None when patience is spent."""
        now = time.monotonic()
        if self.started is None:
            self.started = now
        left = self.patience_s - (now - self.started)
        if left <= 0:
            return None
        delay = min(self.cap_s, 2.0**self.attempt, left)
        self.attempt += 1
        return delay


def wait_or_give_up(
    backoff: Backoff,
    exc: BaseException,
    what: str,
    settings: Settings | None,
    say: Callable[[str], None],
) -> None:
    """Say which server is unreachable and sleep `backoff`'s next delay, or raise
    `ServerUnreachableError` once its patience is spent."""
    try:
        server = unreachable_server(settings or Settings.load()) or "a server"
    except (OSError, ValueError):
        server = "a server"
    delay = backoff.next_delay()
    if delay is None:
        raise ServerUnreachableError(
            f"{what}: {server} did not answer for {backoff.patience_s:.0f} s; giving up "
            f"(last error: {str(exc)[:200]})"
        ) from exc
    say(
        f"{what}: {server} is unreachable; retry {backoff.attempt} in {delay:.0f} s "
        f"(giving up after {backoff.patience_s:.0f} s)"
    )
    time.sleep(delay)


def wait_for_servers(
    settings: Settings,
    patience_s: float | None = None,
    *,
    what: str = "the scheduler's start",
    say: Callable[[str], None] | None = None,
) -> None:
    """Return once every server of `settings` answers; until then say which one does not and
    back off as `ride_out` does (the same lines); `ServerUnreachableError` after `patience_s`
    (default ``TENANTML_OUTAGE_PATIENCE_S``). For the service's processes only: users' commands
    fail fast instead (`tenantml.client.Client.check_servers`)."""
    backoff = Backoff(default_patience_s() if patience_s is None else patience_s)
    while (server := unreachable_server(settings)) is not None:
        gone = ConnectionRefusedError(f"{server} does not answer")
        wait_or_give_up(backoff, gone, what, settings, say or log.warning)


def ride_out(
    fn: Callable[[], T],
    *,
    what: str,
    settings: Settings | None = None,
    patience_s: float | None = None,
    say: Callable[[str], None] | None = None,
) -> T:
    """`fn()`, retried while it fails with `is_outage` errors, for at most `patience_s`."""
    backoff = Backoff(default_patience_s() if patience_s is None else patience_s)
    while True:
        try:
            return fn()
        except Exception as e:
            if not is_outage(e):
                raise
            wait_or_give_up(backoff, e, what, settings, say or log.warning)


class _Patient:
    def __init__(self, target: Any, settings: Settings | None, patience_s: float | None) -> None:
        self._target = target
        self._settings = settings
        self._patience_s = patience_s

    def __getattr__(self, name: str) -> Any:
        attr = getattr(self._target, name)
        if not callable(attr) or name.startswith("_"):
            return attr

        def call(*args: Any, **kwargs: Any) -> Any:
            what = f"{type(self._target).__name__}.{name}"
            return ride_out(
                lambda: attr(*args, **kwargs),
                what=what,
                settings=self._settings,
                patience_s=self._patience_s,
            )

        return call


def patient(obj: T, settings: Settings | None = None, patience_s: float | None = None) -> T:
    """`obj` whose method calls wait out outages (see `ride_out`); same interface."""
    return cast(T, _Patient(obj, settings, patience_s))
