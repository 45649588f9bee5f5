"""The embedded service's MLflow database, on a new home, from a migrated copy.

Embedded, MLflow keeps its runs in ``sqlite:////<home>/mlflow.db`` (`tasks.settings`). On a new
home the first MLflow store to open it creates every table and runs each Alembic revision since
MLflow's first: 1.6 s of the 2-core machine's CPU, against 0.04 s to open a migrated database,
paid by every new home (each test's, each `bench-live` system's, each `demo`'s) before its first
job. As for Prefect's database (`tasks.prefect_start`), a template per machine and MLflow
version (`template_path`) takes that out:

- `keep_template`, called once a store has opened the home's database (the scheduler's
  `connect`, the SDK's `Client.mlflow`), copies it to the user's cache when the cache has no
  template and the database is still as MLflow made it (its default experiment and workspace,
  not a row in any other table: checked on the copy). The copy leaves out the default
  experiment, whose artifact location names that home.
- `seed_from_template` (`tasks.settings.Settings.apply`, on a new home only) copies the template
  to the home; MLflow then finds every table migrated and creates the default experiment with
  the home's own artifact location, as it would on an empty database.

A template that is not one (a cut-off copy, another program's file, a database with
experiments) is ignored, and replaced by the next home that can make one. The copy into a home
never replaces a database already there: another process may have it open.
"""

from __future__ import annotations

import contextlib
import functools
import logging
import sqlite3
from pathlib import Path

from tasks.settings import copy_if_absent, user_cache, write_atomically

__all__ = ["keep_template", "seed_from_template", "sqlite_path", "template_path"]

log = logging.getLogger(__name__)

DEFAULT_EXPERIMENT_ID = 0  # MLflow's "Default" experiment, made with the store (its SQL store)


def template_path(version: str) -> Path:
    """Where the migrated, empty MLflow database of MLflow `version` is kept for new homes:
    ``$XDG_CACHE_HOME/tenantml`` (default ``~/.cache/tenantml``), ``mlflow-<version>.db``."""
    return user_cache() / f"mlflow-{version}.db"


def sqlite_path(tracking_uri: str) -> Path | None:
    """The file of a ``sqlite:///<absolute path>`` tracking URI; None for any other URI (a
    server, another database, a relative or in-memory SQLite one)."""
    prefix = "sqlite:///"
    if not tracking_uri.startswith(prefix):
        return None
    path = tracking_uri[len(prefix) :].partition("?")[0]
    return Path(path) if path.startswith("/") else None


@functools.cache
def _mlflow_version() -> str:
    from importlib.metadata import version

    return version("mlflow")


# What MLflow's store puts in a new database besides its tables: the default workspace (an
# Alembic revision inserts it) and the default experiment (the store, when it opens)
AS_MADE_ROWS = {"alembic_version": 1, "workspaces": 1, "experiments": 1}


def _row_counts(db: sqlite3.Connection) -> dict[str, int]:
    """Rows of every table of `db`, counted up to 2 (enough to tell 0, 1 and more: an old
    home's millions of metric rows are not counted)."""
    tables = [t for (t,) in db.execute("SELECT name FROM sqlite_master WHERE type = 'table'")]
    return {
        t: db.execute(f'SELECT COUNT(*) FROM (SELECT 1 FROM "{t}" LIMIT 2)').fetchone()[0]
        for t in tables
    }


def _holds_only(db: sqlite3.Connection, experiments: int) -> bool:
    """Whether `db` is a migrated MLflow database that holds nothing but what its store made:
    one Alembic revision, the default workspace, `experiments` experiments (0, or 1: the
    default one), and not a row in any other table (runs, tags, models, traces, webhooks...)."""
    counts = _row_counts(db)
    expected = {**AS_MADE_ROWS, "experiments": experiments}
    if any(counts.get(t) != n for t, n in expected.items()):
        return False
    if any(n for t, n in counts.items() if t not in expected):
        return False
    (workspace,) = db.execute("SELECT name FROM workspaces").fetchone()
    if workspace != "default":
        return False
    if experiments:
        (ident,) = db.execute("SELECT experiment_id FROM experiments").fetchone()
        return bool(ident == DEFAULT_EXPERIMENT_ID)
    return True


def _read_only(path: Path) -> contextlib.closing[sqlite3.Connection]:
    return contextlib.closing(sqlite3.connect(f"file:{path}?mode=ro", uri=True))


def _holds_only_at(path: Path, experiments: int) -> bool:
    """`_holds_only` of the database at `path`, read-only; False if it is none (missing, cut
    off, another program's file): 0 experiments for a template, 1 for a home as made."""
    try:
        with _read_only(path) as db:
            return _holds_only(db, experiments)
    except sqlite3.Error:
        return False


class NotAsMadeError(RuntimeError):
    """The copy of a home's database held more than its store made (written meanwhile)."""


def _copy_without_default_experiment(source: Path, dest: Path) -> None:
    """sqlite3's online backup of `source` into `dest`, checked to hold only what MLflow made,
    its default experiment deleted, in rollback-journal mode (no -wal/-shm files beside it).
    Raises `NotAsMadeError` if the copy holds more."""
    with (
        contextlib.closing(sqlite3.connect(source)) as src,
        contextlib.closing(sqlite3.connect(dest)) as out,
    ):
        src.backup(out)
        if not _holds_only(out, experiments=1):  # the copy, not the home: it may have changed
            raise NotAsMadeError(f"{source} holds more than MLflow made")
        out.execute("DELETE FROM experiments WHERE experiment_id = ?", (DEFAULT_EXPERIMENT_ID,))
        out.commit()
        out.execute("PRAGMA journal_mode = DELETE")


def keep_template(tracking_uri: str) -> bool:
    """Keep the home's database (`tracking_uri`, once a store has opened it) as the template
    for later new homes, when there is no template yet and the database is still as MLflow
    made it. Returns whether it was kept; any failure (an unwritable cache, a full disk, a
    database busy beyond sqlite3's timeout) only leaves the next new home without one."""
    db = sqlite_path(tracking_uri)
    if db is None or not db.exists():
        return False
    try:
        template = template_path(_mlflow_version())
        if _holds_only_at(template, 0) or not _holds_only_at(db, 1):
            return False
        template.parent.mkdir(parents=True, exist_ok=True)
        write_atomically(lambda tmp: _copy_without_default_experiment(db, tmp), template)
    except (OSError, sqlite3.Error, NotAsMadeError) as e:
        log.debug("no MLflow template from %s: %r", db, e)
        return False
    return True


def seed_from_template(tracking_uri: str) -> bool:
    """A new home's MLflow database (`tracking_uri`, a SQLite file that does not exist yet)
    copied from the template, when there is a valid one. Returns whether it was."""
    db = sqlite_path(tracking_uri)
    if db is None or db.exists():
        return False
    template = template_path(_mlflow_version())
    if not _holds_only_at(template, 0):
        return False
    return copy_if_absent(template, db)
