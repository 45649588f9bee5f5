"""The embedded service's Prefect server, started early and, on a new home, from a migrated copy.

Embedded (no ``PREFECT_API_URL``), Prefect starts a temporary server, a uvicorn subprocess on the
home's SQLite database ``$PREFECT_HOME/prefect.db``, when the first flow runs, and the scheduler
waits for it. Measured on the 2-core machine: 3 s of the server's imports, and on a new home 5 s
more of Alembic migrations (every revision since Prefect's first, on an empty database), of the
18 s from ``tenantml run`` to its first job. Two things take most of that out of the wait:

- `start_early`, as soon as the home's settings are in the environment, imports Prefect's
  server module (in the caller's thread: a module imported by two threads at once, each
  waiting for one the other is running, fails one of the imports) and starts the server's
  subprocess from a thread, so that it starts up beside the scheduler's own imports;
  `EarlyStart.wait` joins it before the flow runs (Prefect's ``start`` is not safe to enter
  twice at once: a second caller would take a server that is not up yet).
- A template per machine and Prefect version (`template_path`): the first new home migrates as
  before, and its database, migrated and still empty of runs, is copied to the user's cache
  (sqlite3's online backup: a consistent copy while the server has it open); every later new home
  starts from a copy of it and Prefect finds nothing to migrate. A template that is not a
  migrated Prefect database (a cut-off copy, another program's file) is ignored and replaced.

Servers (``tenantml up``, ``PREFECT_API_URL``) are untouched: they migrate once, at ``up``.
"""

from __future__ import annotations

import contextlib
import logging
import os
import shutil
import sqlite3
import threading
from collections.abc import Callable
from pathlib import Path
from typing import Any

__all__ = ["EarlyStart", "start_early", "template_path"]

log = logging.getLogger(__name__)

DB_NAME = "prefect.db"  # Prefect's default database under PREFECT_HOME


def template_path(version: str) -> Path:
    """Where the migrated, empty Prefect database of Prefect `version` is kept for new homes:
    ``$XDG_CACHE_HOME/tenantml`` (default ``~/.cache/tenantml``), ``prefect-<version>.db``."""
    cache = os.environ.get("XDG_CACHE_HOME") or str(Path.home() / ".cache")
    return Path(cache) / "tenantml" / f"prefect-{version}.db"


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


def _copy_atomically(write: Callable[[Path], object], dest: Path) -> None:
    """Run ``write(tmp)`` on a file beside `dest`, then move it onto `dest` in one step: a reader
    sees the old file or the whole new one (two processes may race to write the same one)."""
    tmp = dest.with_name(f".{dest.name}.{os.getpid()}.{threading.get_ident()}.tmp")
    try:
        write(tmp)
        os.replace(tmp, dest)
    finally:
        tmp.unlink(missing_ok=True)


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
    db.parent.mkdir(parents=True, exist_ok=True)
    _copy_atomically(lambda tmp: shutil.copyfile(template, tmp), db)
    return True


def _save_template(db: Path, template: Path) -> None:
    """Keep the home's freshly migrated database as the template for later new homes."""
    template.parent.mkdir(parents=True, exist_ok=True)
    _copy_atomically(lambda tmp: _backup(db, tmp), template)


class EarlyStart:
    """Prefect's temporary server `server`, being started in a thread (`start_early`) on the
    database `db`, seeded from `template` when the home is new."""

    def __init__(self, server: Any, db: Path, template: Path) -> None:
        self.db, self.template = db, template
        self.new_home = not db.exists()
        self.seeded = self.new_home and _seed_from_template(db, template)
        self.error: BaseException | None = None
        self._thread = threading.Thread(
            target=self._run, args=(server,), name="prefect-start", daemon=True
        )
        self._thread.start()

    def _run(self, server: Any) -> None:
        # No imports here: a module imported by this thread and the caller's at once, each
        # waiting for a module the other is running, would fail one of the two imports.
        try:
            server.start()  # Prefect's own start: the uvicorn subprocess, then /health
            if self.new_home and not self.seeded and _is_migrated(self.db):
                _save_template(self.db, self.template)
        except Exception as e:  # reported by `wait`; the flow then starts the server itself
            self.error = e

    def wait(self) -> None:
        """Block until the server answers. A failure here is only logged: the flow then starts
        the server itself, as it would have without us, and reports what is wrong."""
        self._thread.join()
        if self.error is not None:
            log.warning("starting Prefect's temporary server early failed: %r", self.error)


def start_early() -> EarlyStart | None:
    """Start Prefect's temporary server now, beside whatever the caller does next, when this
    process will need one: no ``PREFECT_API_URL`` and Prefect's default database under
    ``PREFECT_HOME`` (call after `tasks.settings.Settings.apply`). None otherwise. Prefect's
    server module is imported here, in the caller's thread (about 3 s)."""
    if os.environ.get("PREFECT_API_URL") or os.environ.get("PREFECT_API_DATABASE_CONNECTION_URL"):
        return None
    home = os.environ.get("PREFECT_HOME")
    if not home:
        return None
    import prefect
    from prefect.server.api.server import SubprocessASGIServer

    template = template_path(prefect.__version__)
    return EarlyStart(SubprocessASGIServer(), Path(home) / DB_NAME, template)
