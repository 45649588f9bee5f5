"""The embedded service's Prefect server, started early and, on a new home, from a migrated copy.

Embedded (no ``PREFECT_API_URL``), Prefect starts a temporary server, a uvicorn subprocess on the
home's SQLite database ``$PREFECT_HOME/prefect.db``, when the first flow runs, and the scheduler
waits for it. Measured on the 2-core machine: 3 s of the server's imports, and on a new home 5 s
more of Alembic migrations (every revision since Prefect's first, on an empty database), of the
18 s from ``tenantml run`` to its first job. Three things take most of that out of the wait:

- `start_early`, as soon as the home's settings are in the environment, starts the server's
  uvicorn subprocess itself, the command Prefect's ``SubprocessASGIServer`` runs, without
  importing Prefect (its server module alone takes 3 s to import, and it would hold back the
  start by that much); a thread waits for the server's ``/health`` beside the caller's own
  imports. `EarlyStart.wait` joins it and, before the first flow runs, points this process's
  Prefect at it (`_point_prefect_at`: ``PREFECT_API_URL`` in Prefect's process-wide settings,
  not in the environment, which this process's children inherit and which `tasks.settings`
  reads as servers mode). Prefect's own server module is never imported then: 2-3 s of the
  scheduler's start-up (it took that long to hand the process to Prefect's
  ``SubprocessASGIServer`` before 2026-11-28). If the early server fails, it is stopped and
  Prefect starts its own as it would have without us. ``tenantml bench-startup`` (new home,
  median of 5, 2-core machine): first job 10.7 -> 7.9 s from the template, 15.3 -> 12.5 s
  without. One process serving several homes in turn (the SDK, tests) keeps one of them: pointed
  at another home's, Prefect first sends what its events and log workers hold to the old one,
  whose server is then stopped (its events worker, keyed without the URL, went on
  sending the new home's task runs to the old server).
- A template per machine and Prefect version (`template_path`): the first new home migrates as
  before, and its database, migrated and still empty of runs, is copied to the user's cache
  (sqlite3's online backup: a consistent copy while the server has it open); every later new home
  starts from a copy of it and Prefect finds nothing to migrate. A template that is not a
  migrated Prefect database (a cut-off copy, another program's file) is ignored and replaced.

- No block catalogue (`NO_BLOCK_CATALOGUE`): the server does not register Prefect's block types
  at its start, nor import every installed Prefect collection to find them.

The early server writes to ``$PREFECT_HOME/server.log``, not to the command's terminal
(`_start_server`).

Servers (``tenantml up``, ``PREFECT_API_URL``) are untouched: they migrate once, at ``up``.
"""

from __future__ import annotations

import atexit
import contextlib
import importlib.util
import inspect
import logging
import os
import socket
import sqlite3
import subprocess
import sys
import threading
import time
import urllib.request
from collections.abc import Mapping
from pathlib import Path
from typing import Any

from tasks.settings import copy_if_absent, user_cache, write_atomically
from trainers.processes import end_processes

__all__ = [
    "EarlyStart",
    "drain_prefect_senders",
    "ensure_template",
    "refresh_prefect_settings",
    "server_env",
    "start_early",
    "stop_all",
    "template_path",
]

log = logging.getLogger(__name__)

DB_NAME = "prefect.db"  # Prefect's default database under PREFECT_HOME
SERVER_LOG = "server.log"  # the early server's output, beside its database (`_start_server`)
SERVER_LOG_MAX_BYTES = 4 << 20  # then the next start moves it to server.log.1
# what Prefect's SubprocessASGIServer sets for its temporary server (prefect/server/api/server.py)
SERVER_ENV = {
    "PREFECT_UI_ENABLED": "0",
    "PREFECT__SERVER_EPHEMERAL": "1",
    "PREFECT__SERVER_FINAL": "1",
}
# Left out of the embedded server (the user's environment still decides): the catalogue of block
# types it registers at each start, for which it first imports every installed Prefect
# collection (prefect-kubernetes' client: 1.8 s of the 2-core machine's CPU). It serves no UI and
# tenantml keeps no blocks; a block saved later registers its own type (`Block.save`). Measured
# on a new home seeded from the template: healthy after 8.1 s -> 5.5 s (median of 3).
NO_BLOCK_CATALOGUE = {
    "PREFECT_SERVER_REGISTER_BLOCKS_ON_START": "0",
    # also off: memoised, the server would still import the collections, and write a hash
    # that a `prefect server` started later on the database would take as "registered"
    "PREFECT_SERVER_MEMOIZE_BLOCK_AUTO_REGISTRATION": "0",
}
# every name Prefect 3.8 reads these two settings from (settings/models/server/root.py)
BLOCK_CATALOGUE_SETTINGS = (
    *NO_BLOCK_CATALOGUE,
    "PREFECT_API_BLOCKS_REGISTER_ON_START",
    "PREFECT_MEMOIZE_BLOCK_AUTO_REGISTRATION",
)
STARTUP_TIMEOUT_S = 60.0  # Prefect's own default is 20 s; a loaded CI machine can take longer
STOP_TIMEOUT_S = 5.0  # a server that has not ended this long after SIGTERM is killed
SIGNAL_STOP_TIMEOUT_S = 1.0  # the same, for all of them together, when a signal ends the command
DRAIN_TIMEOUT_S = 5.0  # for Prefect's events and logs still bound for a server no longer used


def template_path(version: str) -> Path:
    """Where the migrated, empty Prefect database of Prefect `version` is kept for new homes:
    ``$XDG_CACHE_HOME/tenantml`` (default ``~/.cache/tenantml``), ``prefect-<version>.db``."""
    return user_cache() / f"prefect-{version}.db"


def _is_migrated(path: Path) -> bool:
    """Whether `path` is a SQLite database that Alembic has migrated (its ``alembic_version``
    names a revision) and that holds Prefect's ``flow_run`` table."""
    try:
        with contextlib.closing(sqlite3.connect(f"file:{path}?mode=ro", uri=True)) as db:
            revision = db.execute("SELECT version_num FROM alembic_version").fetchone()
            db.execute("SELECT 1 FROM flow_run LIMIT 1").fetchall()
    except sqlite3.Error:
        return False
    return revision is not None


def _backup(source: Path, dest: Path) -> None:
    """sqlite3's online backup of `source` into `dest` (the server may be writing `source`),
    left in rollback-journal mode so that reading it leaves no -wal/-shm files beside it
    (Prefect turns write-ahead logging back on when it opens a home's copy)."""
    with (
        contextlib.closing(sqlite3.connect(source)) as src,
        contextlib.closing(sqlite3.connect(dest)) as out,
    ):
        src.backup(out)
        out.execute("PRAGMA journal_mode = DELETE")


def _seed_from_template(db: Path, template: Path) -> bool:
    """A new home's database copied from `template`, when the home has none and the template is
    a migrated database. Returns whether it was."""
    if db.exists() or not _is_migrated(template):
        return False
    return copy_if_absent(template, db)


def _save_template(db: Path, template: Path) -> None:
    """Keep the home's freshly migrated database as the template for later new homes."""
    template.parent.mkdir(parents=True, exist_ok=True)
    write_atomically(lambda tmp: _backup(db, tmp), template)


#: this process's early starts (`stop_all`)
_EARLY: list[EarlyStart] = []
#: the early start this process's Prefect was last pointed at (`refresh_prefect_settings`)
_POINTED: list[EarlyStart] = []
#: held while `_POINTED` and Prefect's process-wide settings change together (the scheduler's
#: thread points Prefect; job threads re-read the settings)
_POINTING = threading.RLock()


def stop_all(timeout_s: float = SIGNAL_STOP_TIMEOUT_S) -> None:
    """Stop every early server of this process: for a command that ends with ``os._exit`` on a
    signal, which skips the exit hooks doing this. All are sent SIGTERM first, and those still
    running `timeout_s` later are killed: a Ctrl-C waits that long at most, not that long per
    server."""
    end_processes([start.release() for start in list(_EARLY)], timeout_s)


class EarlyStart:
    """Prefect's temporary server, a uvicorn subprocess on the database `db` (seeded from
    `template` when the home is new), started now and awaited in a thread (`start_early`).
    `environ`: the server's environment before `server_env` (default: this process's, whose
    ``PREFECT_HOME`` names `db`'s folder)."""

    def __init__(
        self,
        db: Path,
        template: Path,
        *,
        timeout_s: float = STARTUP_TIMEOUT_S,
        environ: Mapping[str, str] | None = None,
    ) -> None:
        self.db, self.template = db, template
        self.new_home = not db.exists()
        self.seeded = self.new_home and _seed_from_template(db, template)
        self.error: BaseException | None = None
        self.pointed_at = False  # whether `wait` pointed this process's Prefect at it
        self.port = _free_port()
        self.log_path = db.parent / SERVER_LOG
        self.process: subprocess.Popen[bytes] | None = _start_server(
            self.port, self.log_path, os.environ if environ is None else environ
        )
        # Prefect drains its events and logs in `threading._register_atexit` hooks, which run
        # before any `atexit` hook: what they send at exit still finds the server
        atexit.register(self.stop)
        _EARLY.append(self)
        self._thread = threading.Thread(
            target=self._run, args=(timeout_s,), name="prefect-start", daemon=True
        )
        self._thread.start()

    @property
    def api_url(self) -> str:
        return f"http://127.0.0.1:{self.port}/api"

    @property
    def alive(self) -> bool:
        """Whether the server's process runs (it may not answer yet)."""
        return self.process is not None and self.process.poll() is None

    def _run(self, timeout_s: float) -> None:
        # No imports here: a module imported by this thread and the caller's at once, each
        # waiting for a module the other is running, would fail one of the two imports.
        try:
            _wait_healthy(self, timeout_s)
            if self.new_home and not self.seeded and _is_migrated(self.db):
                _save_template(self.db, self.template)
        except Exception as e:  # reported by `wait`; the flow then starts the server itself
            self.error = e

    def join(self) -> None:
        """Block until the server answers, or has failed (`error`); Prefect is not pointed at
        it (`wait` does that)."""
        self._thread.join()

    def wait(self) -> None:
        """Block until the server answers, then point this process's Prefect at it (the
        caller's thread, before any Prefect client of this process; again on each call: cheap,
        but for a change of home: `_point_prefect_at`). A failure here is only logged: the
        early server is stopped and the flow starts Prefect's own, as it would have without
        us, and reports what is wrong."""
        self.join()
        if self.error is None and not self.alive:  # stopped since: another home's came
            self.error = RuntimeError("the early server was stopped")
        if self.error is None:
            self.error = _point_prefect_at(self)
            self.pointed_at = self.error is None
        if self.error is not None:
            log.warning("starting Prefect's temporary server early failed: %r", self.error)
            with _POINTING:  # a second `wait` of a reused start: Prefect lets it go first
                if self in _POINTED:
                    _POINTED.remove(self)
                    refresh_prefect_settings()
            self.pointed_at = False
            self.stop()

    def release(self) -> subprocess.Popen[bytes] | None:
        """The server's process, now no longer this start's, for the caller to end (`stop`,
        `stop_all`)."""
        proc, self.process = self.process, None
        if self in _EARLY:
            _EARLY.remove(self)
        return proc

    def stop(self, timeout_s: float = STOP_TIMEOUT_S) -> None:
        """Stop the server (at this process's exit, when it failed, or when Prefect is pointed
        at another home's); a no-op once stopped."""
        end_processes([self.release()], timeout_s)


def _free_port() -> int:
    """A port on 127.0.0.1 that nothing listens on now (the kernel's choice)."""
    with contextlib.closing(socket.socket(socket.AF_INET, socket.SOCK_STREAM)) as sock:
        sock.bind(("127.0.0.1", 0))
        port: int = sock.getsockname()[1]
    return port


def _start_server(port: int, log_path: Path, environ: Mapping[str, str]) -> subprocess.Popen[bytes]:
    """The server's process, its output appended to `log_path`. Not the command's own stderr:
    a Ctrl-C reaches the whole foreground process group, the server too, and its services, cut
    off mid-write, logged 100-150 lines of tracebacks under the command's one line ``stopped by
    SIGINT`` (9 of 64 `bench-live` runs, 2026-11-28). Each start appends; a log over
    `SERVER_LOG_MAX_BYTES` is moved to ``server.log.1`` first (appending, not replacing: a
    second `run` refused beside a running one starts a server too)."""
    log_path.parent.mkdir(parents=True, exist_ok=True)
    if log_path.exists() and log_path.stat().st_size > SERVER_LOG_MAX_BYTES:
        log_path.replace(log_path.with_name(log_path.name + ".1"))
    with open(log_path, "ab") as out:  # the child keeps its own descriptor
        return subprocess.Popen(
            _server_command(port), env=server_env(environ),
            stdin=subprocess.DEVNULL, stdout=out, stderr=subprocess.STDOUT,
        )  # fmt: skip


def server_env(environ: Mapping[str, str]) -> dict[str, str]:
    """The early server's environment: `environ` with Prefect's settings for its temporary
    server (`SERVER_ENV`), and without the block catalogue (`NO_BLOCK_CATALOGUE`) unless
    `environ` sets either of those settings itself, by any of their names: then both are the
    user's."""
    users = any(name in environ for name in BLOCK_CATALOGUE_SETTINGS)
    return {**({} if users else NO_BLOCK_CATALOGUE), **environ, **SERVER_ENV}


def _server_command(port: int) -> list[str]:
    """The uvicorn command of Prefect's temporary server on `port`, found without importing
    Prefect."""
    spec = importlib.util.find_spec("prefect")
    if spec is None or spec.origin is None:
        raise ModuleNotFoundError("prefect is not installed")
    app_dir = Path(spec.origin).parent.parent
    return [
        sys.executable, "-m", "uvicorn", "--app-dir", str(app_dir),
        "--factory", "prefect.server.api.server:create_app",
        "--host", "127.0.0.1", "--port", str(port), "--log-level", "error", "--lifespan", "on",
    ]  # fmt: skip


def _wait_healthy(start: EarlyStart, timeout_s: float) -> None:
    """Poll the server's ``/health`` until it answers 200; raise if its process ends first or
    `timeout_s` passes."""
    deadline = time.monotonic() + timeout_s
    url = f"{start.api_url}/health"
    opener = urllib.request.build_opener(urllib.request.ProxyHandler({}))  # loopback: no proxy
    while True:
        proc = start.process
        if proc is None or proc.poll() is not None:
            code = None if proc is None else proc.returncode
            raise RuntimeError(
                f"Prefect's temporary server exited (code {code}) before answering; its output "
                f"is in {start.log_path}"
            )
        try:
            with opener.open(url, timeout=2) as response:
                if response.status == 200:
                    return
        except OSError:  # not listening yet (URLError, ConnectionError, timeouts)
            pass
        if time.monotonic() > deadline:
            raise TimeoutError(
                f"Prefect's temporary server: no answer at {url} in {timeout_s:g} s; its output "
                f"is in {start.log_path}"
            )
        time.sleep(0.05)


def _point_prefect_at(start: EarlyStart) -> BaseException | None:
    """Make `start`'s server the Prefect API of this process: Prefect's process-wide settings
    (``prefect.context.GLOBAL_SETTINGS_CONTEXT``, read by every thread that has entered no
    settings context of its own, and replaced the same way by Prefect's own test harness) with
    ``PREFECT_API_URL`` set. Returns the error if the caller's thread runs in a settings context
    of its own, or Prefect's settings already name an API that is not an early server's.

    Pointed at another home's early server, it then ends the one pointed at before: what
    Prefect's events and log workers still hold is sent to it (`drain_prefect_senders`, up to
    `DRAIN_TIMEOUT_S` each), and its server is stopped."""
    import prefect.context as context

    with _POINTING:
        current = context.SettingsContext.get()
        if current is None or current is not context.GLOBAL_SETTINGS_CONTEXT:
            return RuntimeError("this thread runs in a Prefect settings context of its own")
        named = current.settings.api.url
        if named and named not in {s.api_url for s in (*_EARLY, *_POINTED)}:
            return RuntimeError(f"Prefect's settings already name an API: {named}")
        if named != start.api_url:
            context.GLOBAL_SETTINGS_CONTEXT = _naming(current, start.api_url)
        before, _POINTED[:] = [old for old in _POINTED if old is not start], [start]
    for old in before:  # another home's: its last events and logs, then its server
        if drain_prefect_senders():
            old.stop()
    return None


def drain_prefect_senders() -> bool:
    """Send what Prefect's events and log workers hold to the server they were started for, and
    end them: the next event or log starts new ones for the server Prefect names now. Prefect
    keys its events worker without the API's URL, so after a change of home it would otherwise
    go on sending the new home's events to the old home's server. Returns whether it drained:
    not on Prefect's own event-loop thread, which the drain needs (the old server is then left
    running, to its exit hook).

    Prefect's ``drain_all`` stops the workers, then waits for them only where the calling thread
    runs no event loop (elsewhere it hands back a coroutine), so it is called from a thread of
    its own (a notebook's cell runs inside a loop)."""
    from prefect._internal.concurrency.event_loop import get_running_loop
    from prefect._internal.concurrency.threads import in_global_loop
    from prefect.events.worker import EventsWorker
    from prefect.logging.handlers import APILogWorker

    if in_global_loop():
        return False

    def drain() -> None:
        for worker in (EventsWorker, APILogWorker):
            waited = worker.drain_all(timeout=DRAIN_TIMEOUT_S, at_exit=False)
            if inspect.iscoroutine(waited):  # not expected off a loop; never left un-awaited
                waited.close()
            elif isinstance(waited, tuple) and waited[1]:  # (done, not done)
                log.warning("%s: %d not sent to the server left", worker.__name__, len(waited[1]))

    if get_running_loop() is None:
        drain()
    else:
        thread = threading.Thread(target=drain, name="prefect-drain", daemon=True)
        thread.start()
        thread.join()
    return True


def refresh_prefect_settings() -> None:
    """Prefect's process-wide settings read again from the environment (`Settings.apply`
    changed it), still naming the early server Prefect was pointed at if it runs, is this
    ``PREFECT_HOME``'s, and the environment names no API of its own. One assignment, from
    whichever thread: Prefect's own ``refresh_global_settings_context`` followed by pointing
    them again left a moment without the server's URL (a job's thread applies the settings
    while others run), and from a thread inside a settings context of its own (a job's, for
    its heartbeats) the pointing was refused: the next event started a second server."""
    import prefect.context as context

    with _POINTING:
        fresh = context.root_settings_context()
        home = os.environ.get("PREFECT_HOME")
        for start in _POINTED:
            if start.alive and home and start.db == Path(home) / DB_NAME:
                if not os.environ.get("PREFECT_API_URL") and not fresh.settings.api.url:
                    fresh = _naming(fresh, start.api_url)
        context.GLOBAL_SETTINGS_CONTEXT = fresh


def _naming(settings_context: Any, api_url: str) -> Any:
    """A copy of Prefect's `settings_context` (a ``prefect.context.SettingsContext``) whose
    settings name `api_url` as ``PREFECT_API_URL``."""
    from prefect.context import SettingsContext
    from prefect.settings import PREFECT_API_URL

    return SettingsContext(
        profile=settings_context.profile,
        settings=settings_context.settings.copy_with_update(updates={PREFECT_API_URL: api_url}),
    )


# settings a scratch server must not read: they would point it at another API or database
_NOT_FOR_SCRATCH = ("PREFECT_API_", "PREFECT_SERVER_DATABASE_", "PREFECT_PROFILES_PATH")


def ensure_template(scratch: Path, timeout_s: float = STARTUP_TIMEOUT_S) -> bool:
    """This machine's template for Prefect's installed version (`template_path`), made now if
    it has none, by an early server started and stopped on the new home `scratch` (migrations:
    about 5 s on the 2-core machine, once per machine and Prefect version). Returns whether it
    was made; raises where the server failed. For a benchmark of later runs (``tenantml
    bench-live``): only a machine's first `run` migrates a new home. `scratch` is emptied first;
    the server reads none of this process's settings that name an API or a database."""
    import shutil
    from importlib.metadata import version

    template = template_path(version("prefect"))
    if _is_migrated(template):
        return False
    shutil.rmtree(scratch, ignore_errors=True)
    scratch.mkdir(parents=True)
    env = {k: v for k, v in os.environ.items() if not k.startswith(_NOT_FOR_SCRATCH)}
    start = EarlyStart(scratch / DB_NAME, template, timeout_s=timeout_s,
                       environ={**env, "PREFECT_HOME": str(scratch)})  # fmt: skip
    start.join()
    start.stop()
    if start.error is not None:
        raise start.error
    if not _is_migrated(template):
        raise RuntimeError(
            f"Prefect's server on {scratch} answered but left no migrated database for "
            f"{template}; its output is in {start.log_path}"
        )
    return True


# an API, or a database other than the home's (Prefect 3 reads the second by both names)
_NAMING_A_SERVER = (
    "PREFECT_API_URL",
    "PREFECT_API_DATABASE_CONNECTION_URL",
    "PREFECT_SERVER_DATABASE_CONNECTION_URL",
)


def start_early() -> EarlyStart | None:
    """Start Prefect's temporary server now, beside whatever the caller does next, when this
    process will need one: no ``PREFECT_API_URL`` and Prefect's default database under
    ``PREFECT_HOME`` (call after `tasks.settings.Settings.apply`). None otherwise. Imports
    nothing of Prefect's: the caller's `EarlyStart.wait` does, before the first flow."""
    if any(os.environ.get(name) for name in _NAMING_A_SERVER):
        return None
    home = os.environ.get("PREFECT_HOME")
    if not home:
        return None
    db = Path(home) / DB_NAME
    for start in list(_EARLY):  # a second `run` of this process: the same server
        if start.db == db and start.alive:
            if start.error is None:
                return start
            start.stop()  # failed (no answer in time) but running: one server per database
    from importlib.metadata import version

    return EarlyStart(db, template_path(version("prefect")), timeout_s=STARTUP_TIMEOUT_S)
