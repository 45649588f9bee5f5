"""The embedded Prefect server's template database (`tasks.prefect_start`), without a server:
what counts as a migrated database, that a new home alone is seeded, and that a template is
replaced in one step. The server itself starting from a seeded home is in
tests/integration/test_prefect_start.py."""

from __future__ import annotations

import sqlite3
from pathlib import Path
from types import SimpleNamespace
from typing import Any

import pytest

from tasks.prefect_start import (
    _is_migrated,
    _save_template,
    _seed_from_template,
    start_early,
    template_path,
)


def _migrated_db(path: Path, revision: str = "abc123") -> Path:
    """A stand-in for a migrated Prefect database: Alembic's revision and a flow_run table."""
    with sqlite3.connect(path) as db:
        db.execute("CREATE TABLE alembic_version (version_num VARCHAR(32) NOT NULL)")
        db.execute("INSERT INTO alembic_version VALUES (?)", (revision,))
        db.execute("CREATE TABLE flow_run (id TEXT)")
        db.execute("PRAGMA journal_mode = WAL")
    return path


def test_template_path_is_per_version_under_the_user_cache(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path))
    assert template_path("3.8.8") == tmp_path / "tenantml" / "prefect-3.8.8.db"
    monkeypatch.delenv("XDG_CACHE_HOME")
    assert template_path("3.8.8") == Path.home() / ".cache" / "tenantml" / "prefect-3.8.8.db"


def test_only_a_migrated_database_counts(tmp_path: Path) -> None:
    assert _is_migrated(_migrated_db(tmp_path / "ok.db"))
    assert not _is_migrated(tmp_path / "missing.db")
    assert not (tmp_path / "missing.db").exists()  # looking did not create it
    (tmp_path / "garbage.db").write_bytes(b"not a database at all" * 100)
    assert not _is_migrated(tmp_path / "garbage.db")
    with sqlite3.connect(tmp_path / "empty.db") as db:  # SQLite, but never migrated
        db.execute("CREATE TABLE flow_run (id TEXT)")
    assert not _is_migrated(tmp_path / "empty.db")
    half = tmp_path / "half.db"
    _migrated_db(half)
    with sqlite3.connect(half) as db:
        db.execute("DROP TABLE flow_run")
    assert not _is_migrated(half)


def test_a_new_home_is_seeded_and_an_existing_one_is_never_touched(tmp_path: Path) -> None:
    template = _migrated_db(tmp_path / "template.db")
    new = tmp_path / "new" / "prefect" / "prefect.db"
    assert _seed_from_template(new, template)
    assert _is_migrated(new)
    existing = tmp_path / "old.db"
    existing.write_bytes(b"a home's own database")
    assert not _seed_from_template(existing, template)
    assert existing.read_bytes() == b"a home's own database"


def test_a_bad_template_seeds_nothing(tmp_path: Path) -> None:
    bad = tmp_path / "template.db"
    bad.write_bytes(b"cut off")
    home_db = tmp_path / "home" / "prefect.db"
    assert not _seed_from_template(home_db, bad)
    assert not home_db.exists()


def test_saving_replaces_a_bad_template_with_a_clean_copy(tmp_path: Path) -> None:
    template = tmp_path / "cache" / "prefect-x.db"
    template.parent.mkdir()
    template.write_bytes(b"cut off")
    _save_template(_migrated_db(tmp_path / "home.db", revision="r42"), template)
    assert _is_migrated(template)
    with sqlite3.connect(template) as db:
        assert db.execute("SELECT version_num FROM alembic_version").fetchone() == ("r42",)
        assert db.execute("PRAGMA journal_mode").fetchone() == ("delete",)
    assert sorted(p.name for p in template.parent.iterdir()) == ["prefect-x.db"]  # no leftovers


def test_nothing_is_started_for_servers_or_another_database(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("PREFECT_HOME", str(tmp_path))
    monkeypatch.setenv("PREFECT_API_URL", "http://127.0.0.1:4200/api")
    assert start_early() is None
    monkeypatch.delenv("PREFECT_API_URL")
    monkeypatch.setenv("PREFECT_API_DATABASE_CONNECTION_URL", "postgresql+asyncpg://x/y")
    assert start_early() is None
    monkeypatch.delenv("PREFECT_API_DATABASE_CONNECTION_URL")
    monkeypatch.delenv("PREFECT_HOME")
    assert start_early() is None


def test_a_server_that_exits_before_answering_is_reported_and_prefect_not_pointed_at_it(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capfd: pytest.CaptureFixture[str]
) -> None:
    """...and what the server wrote is in its log, not on the command's terminal (a Ctrl-C
    reached the server too, whose services' tracebacks followed the command's one line)."""
    import sys

    import tasks.prefect_start as ps

    # uvicorn's own exit code when its port is taken
    said = "import sys; sys.stderr.write('the server says boom\\n'); exit(3)"
    monkeypatch.setattr(ps, "_server_command", lambda port: [sys.executable, "-c", said])
    start = ps.EarlyStart(tmp_path / "prefect.db", tmp_path / "template.db", timeout_s=30)
    start.wait()
    assert isinstance(start.error, RuntimeError) and "exited (code 3)" in str(start.error)
    assert str(tmp_path / "server.log") in str(start.error)
    assert start.process is None  # nothing left for Prefect: it starts its own server
    assert "boom" not in capfd.readouterr().err
    assert (tmp_path / "server.log").read_text() == "the server says boom\n"
    monkeypatch.setattr(ps, "SERVER_LOG_MAX_BYTES", 30)
    for _ in range(2):  # the next start appends; the one after moves the log (over 30 bytes)
        ps.EarlyStart(tmp_path / "prefect.db", tmp_path / "template.db", timeout_s=30).wait()
    assert (tmp_path / "server.log.1").read_text() == "the server says boom\n" * 2
    assert (tmp_path / "server.log").read_text() == "the server says boom\n"


def test_a_server_that_never_answers_is_stopped(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    import sys

    import tasks.prefect_start as ps

    sleeper = [sys.executable, "-c", "import time; time.sleep(60)"]
    monkeypatch.setattr(ps, "_server_command", lambda port: sleeper)
    start = ps.EarlyStart(tmp_path / "prefect.db", tmp_path / "template.db", timeout_s=0.5)
    proc = start.process
    assert proc is not None
    start.wait()
    assert isinstance(start.error, TimeoutError) and "/api/health" in str(start.error)
    assert str(tmp_path / "server.log") in str(start.error)
    assert proc.poll() is not None and start.process is None


def test_a_command_ended_by_a_signal_stops_its_early_server(tmp_path: Path) -> None:
    """`tenantml.cli.service.end_now` (Ctrl-C or SIGTERM: a line, ``os._exit(130)``) skips the
    exit hooks, the one that stops the early server too: a demo stopped while it fed
    its tenants left Prefect's temporary server running, its parent gone."""
    import subprocess
    import sys
    import time

    script = (
        "import sys\nimport tasks.prefect_start as ps\nfrom pathlib import Path\n"
        "ps._server_command = lambda port: [sys.executable, '-c', 'import time; time.sleep(60)']\n"
        f"start = ps.EarlyStart(Path({str(tmp_path)!r}) / 'p.db', Path({str(tmp_path)!r}) / "
        "'t.db', timeout_s=60)\n"
        "print(start.process.pid, flush=True)\n"
        # Prefect's own temporary server (where the early one failed), one that ignores SIGTERM
        "import signal, subprocess, types\n"
        "own = subprocess.Popen([sys.executable, '-c', 'import signal, time; signal.signal("
        "signal.SIGTERM, signal.SIG_IGN); print(1, flush=True); time.sleep(60)'], "
        "stdout=subprocess.PIPE)\nown.stdout.readline()\n"
        "ns = types.SimpleNamespace\nserver = ns(_instances={8: ns(server_process=own)})\n"
        "sys.modules['prefect.server.api.server'] = ns("
        "SubprocessASGIServer=server)\nprint(own.pid, flush=True)\n"
        "from tenantml.cli.service import end_now\nend_now(None, 'stopped by SIGTERM')\n"
    )
    log = tmp_path / "out.txt"
    with open(log, "w") as out:  # a file, not a pipe: the server would hold a pipe open
        code = subprocess.run([sys.executable, "-c", script], stdout=out,
                              stderr=subprocess.STDOUT, timeout=120).returncode  # fmt: skip
    assert code == 130, log.read_text()[-2000:]
    pid, own, line = log.read_text().split("\n")[:3]
    assert line == "stopped by SIGTERM"
    time.sleep(0.5)
    for server in (pid, own):
        stat = Path(f"/proc/{server}/stat")
        alive = stat.exists() and stat.read_text().split()[2] != "Z"
        assert not alive, f"the server {server} outlived the command"


def test_the_early_server_leaves_out_the_block_catalogue_unless_the_user_asks() -> None:
    from tasks.prefect_start import SERVER_ENV, server_env

    env = server_env({"PATH": "/bin"})
    assert env["PREFECT_SERVER_REGISTER_BLOCKS_ON_START"] == "0"
    assert env["PREFECT_SERVER_MEMOIZE_BLOCK_AUTO_REGISTRATION"] == "0"
    assert env["PATH"] == "/bin"
    assert SERVER_ENV.items() <= env.items()
    mine = server_env({"PREFECT_SERVER_REGISTER_BLOCKS_ON_START": "true"})
    assert mine["PREFECT_SERVER_REGISTER_BLOCKS_ON_START"] == "true"
    # a setting by another of its names: both are left to the user (memoised registration
    # with registration off would record the catalogue as registered)
    legacy = server_env({"PREFECT_MEMOIZE_BLOCK_AUTO_REGISTRATION": "1"})
    assert "PREFECT_SERVER_REGISTER_BLOCKS_ON_START" not in legacy
    assert "PREFECT_SERVER_MEMOIZE_BLOCK_AUTO_REGISTRATION" not in legacy


def _early(url: str, db: Path, done: list[str] | None = None) -> Any:
    """A stand-in for a running `EarlyStart`: what pointing Prefect at one reads, and its
    `stop`, which ends it (and says so in `done`)."""
    start = SimpleNamespace(api_url=url, db=db, alive=True)

    def stop() -> None:
        start.alive = False
        if done is not None:
            done.append(f"stop {url}")

    start.stop = stop
    return start


@pytest.fixture
def prefect_settings(monkeypatch: pytest.MonkeyPatch) -> Any:
    """Prefect's process-wide settings naming no API, put back as they were afterwards; no
    early starts known to this process."""
    import prefect.context as context
    from prefect.settings import PREFECT_API_URL

    import tasks.prefect_start as ps

    now = context.GLOBAL_SETTINGS_CONTEXT
    unnamed = context.SettingsContext(
        profile=now.profile,
        settings=now.settings.copy_with_update(restore_defaults={PREFECT_API_URL}),
    )
    monkeypatch.setattr(context, "GLOBAL_SETTINGS_CONTEXT", unnamed)
    monkeypatch.setattr(ps, "_EARLY", [])
    monkeypatch.setattr(ps, "_POINTED", [])
    return context


def test_prefect_is_pointed_at_the_early_server_in_its_process_wide_settings_only(
    prefect_settings: Any, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    import os

    from prefect.settings import PREFECT_API_URL

    import tasks.prefect_start as ps

    done: list[str] = []  # what happened to the servers and Prefect's senders, in order
    monkeypatch.setattr(ps, "drain_prefect_senders", lambda: done.append("drain") or True)
    a = _early("http://127.0.0.1:1111/api", tmp_path / "a" / "prefect.db", done)
    ps._EARLY.append(a)
    assert ps._point_prefect_at(a) is None
    assert PREFECT_API_URL.value() == a.api_url
    assert "PREFECT_API_URL" not in os.environ  # children and `Settings.load` never see it
    assert ps._point_prefect_at(a) is None and a.alive and done == []  # again: nothing changes
    # another home's early server of this process replaces it: what Prefect's events and logs
    # workers still held for the first is sent to it, then it is stopped (the drain for real:
    # tests/integration/test_prefect_start.py)
    b = _early("http://127.0.0.1:2222/api", tmp_path / "b" / "prefect.db", done)
    ps._EARLY.append(b)
    assert ps._point_prefect_at(b) is None
    assert PREFECT_API_URL.value() == b.api_url and ps._POINTED == [b]
    assert done == ["drain", f"stop {a.api_url}"] and b.alive
    # read again from the environment (`Settings.apply`): pointed again, for its own home only,
    # also from a thread inside a settings context of its own (a job's, for its heartbeats)
    from prefect.settings import PREFECT_FLOWS_HEARTBEAT_FREQUENCY, temporary_settings

    for home, api_url, expected in (
        (tmp_path / "a", None, None),  # another home's server: Prefect starts this home's own
        (tmp_path / "b", "http://elsewhere:4200/api", "http://elsewhere:4200/api"),
        (tmp_path / "b", None, b.api_url),
    ):
        monkeypatch.setenv("PREFECT_HOME", str(home))
        if api_url is None:
            monkeypatch.delenv("PREFECT_API_URL", raising=False)
        else:
            monkeypatch.setenv("PREFECT_API_URL", api_url)
        with temporary_settings(updates={PREFECT_FLOWS_HEARTBEAT_FREQUENCY: None}):
            ps.refresh_prefect_settings()
        assert PREFECT_API_URL.value() == expected, (home, api_url)


def test_prefect_is_not_pointed_where_something_else_decides(
    prefect_settings: Any, tmp_path: Path
) -> None:
    from prefect.settings import PREFECT_API_URL, temporary_settings

    import tasks.prefect_start as ps

    start = _early("http://127.0.0.1:1111/api", tmp_path / "prefect.db")
    ps._EARLY.append(start)
    with temporary_settings(updates={PREFECT_API_URL: "http://theirs:4200/api"}):
        error = ps._point_prefect_at(start)  # this thread's own settings would not see it
    assert isinstance(error, RuntimeError) and "settings context of its own" in str(error)
    assert PREFECT_API_URL.value() is None
    prefect_settings.GLOBAL_SETTINGS_CONTEXT = prefect_settings.SettingsContext(
        profile=prefect_settings.GLOBAL_SETTINGS_CONTEXT.profile,
        settings=prefect_settings.GLOBAL_SETTINGS_CONTEXT.settings.copy_with_update(
            updates={PREFECT_API_URL: "http://theirs:4200/api"}
        ),
    )  # e.g. a Prefect profile that names a server
    error = ps._point_prefect_at(start)
    assert isinstance(error, RuntimeError) and "theirs:4200" in str(error)
    assert PREFECT_API_URL.value() == "http://theirs:4200/api" and ps._POINTED == []


_HEALTHY = """
import http.server, sys
class Health(http.server.BaseHTTPRequestHandler):
    def do_GET(self):
        self.send_response(200 if self.path == "/api/health" else 404)
        self.end_headers()
    def log_message(self, *args):
        pass
http.server.HTTPServer(("127.0.0.1", int(sys.argv[1])), Health).serve_forever()
"""


def test_a_reused_start_that_fails_its_second_wait_is_let_go(
    prefect_settings: Any, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A second `run` of the process waits on the same start again; where that fails (here: a
    thread in a settings context of its own), the server is stopped and Prefect's settings no
    longer name it, so Prefect starts its own instead of calling a stopped one."""
    import sys

    from prefect.settings import PREFECT_API_URL, temporary_settings

    import tasks.prefect_start as ps

    monkeypatch.setenv("PREFECT_HOME", str(tmp_path))
    monkeypatch.delenv("PREFECT_API_URL", raising=False)
    monkeypatch.setattr(ps, "_server_command", lambda port: [sys.executable, "-c", _HEALTHY,
                                                             str(port)])  # fmt: skip
    start = ps.EarlyStart(tmp_path / "prefect.db", tmp_path / "template.db", timeout_s=30)
    try:
        start.wait()
        assert start.error is None and start.pointed_at and start.alive
        assert PREFECT_API_URL.value() == start.api_url and ps._POINTED == [start]
        with temporary_settings(updates={PREFECT_API_URL: None}):
            start.wait()
        assert isinstance(start.error, RuntimeError) and not start.alive
        assert not start.pointed_at and ps._POINTED == [] and ps._EARLY == []
        assert PREFECT_API_URL.value() is None
        start.error = None  # a start stopped since (another home's came): never pointed at
        start.wait()
        assert "stopped" in str(start.error) and PREFECT_API_URL.value() is None
    finally:
        start.stop()


def test_a_start_that_timed_out_is_stopped_before_another_on_its_database(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    import sys

    import tasks.prefect_start as ps

    monkeypatch.setenv("PREFECT_HOME", str(tmp_path))
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path / "cache"))
    monkeypatch.delenv("PREFECT_API_URL", raising=False)
    monkeypatch.delenv("PREFECT_API_DATABASE_CONNECTION_URL", raising=False)
    monkeypatch.setattr(ps, "_EARLY", [])
    sleeper = [sys.executable, "-c", "import time; time.sleep(60)"]
    monkeypatch.setattr(ps, "_server_command", lambda port: sleeper)
    monkeypatch.setattr(ps, "STARTUP_TIMEOUT_S", 0.3)
    first = start_early()
    assert first is not None
    try:
        first.join()  # timed out, not yet waited on: its server still runs
        assert isinstance(first.error, TimeoutError) and first.alive
        second = start_early()
        assert second is not None and second is not first
        assert not first.alive and ps._EARLY == [second]  # one server per database
    finally:
        ps.stop_all()
    assert ps._EARLY == []


def test_stop_all_ends_servers_that_ignore_sigterm(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """On Ctrl-C every early server gets SIGTERM at once and one deadline; those still running
    then are killed."""
    import signal
    import sys

    import tasks.prefect_start as ps

    monkeypatch.setattr(ps, "_EARLY", [])
    # answering /health only once SIGTERM is ignored: `join` returns after that
    stubborn = "import signal; signal.signal(signal.SIGTERM, signal.SIG_IGN)\n" + _HEALTHY
    monkeypatch.setattr(ps, "_server_command", lambda port: [sys.executable, "-c", stubborn,
                                                             str(port)])  # fmt: skip
    starts = [ps.EarlyStart(tmp_path / f"{i}" / "prefect.db", tmp_path / "t.db", timeout_s=60)
              for i in range(2)]  # fmt: skip
    procs = [start.process for start in starts]
    for start in starts:
        start.join()
        assert start.error is None
    ps.stop_all(timeout_s=0.2)
    assert [p.returncode for p in procs if p is not None] == [-signal.SIGKILL] * 2
    assert ps._EARLY == [] and not any(start.alive for start in starts)


_MIGRATING_DB = """
import os, sqlite3, sys
db = sqlite3.connect(os.path.join(os.environ["PREFECT_HOME"], "prefect.db"))
db.execute("CREATE TABLE alembic_version (version_num VARCHAR(32) NOT NULL)")
db.execute("INSERT INTO alembic_version VALUES ('abc123')")
db.execute("CREATE TABLE flow_run (id TEXT)")
db.commit()
db.close()
"""
_MIGRATING = _MIGRATING_DB + _HEALTHY  # a stand-in migrates the home, then answers


def test_the_machines_template_is_made_once_on_a_scratch_home(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """`ensure_template` (bench-live, before any clock): a server on the scratch home, not on
    this process's ``PREFECT_HOME``, migrates it and leaves the template; then nothing to do."""
    import sys
    from importlib.metadata import version

    import tasks.prefect_start as ps

    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path / "cache"))
    monkeypatch.setenv("PREFECT_HOME", str(tmp_path / "users-home"))
    monkeypatch.setattr(ps, "_EARLY", [])
    monkeypatch.setattr(ps, "_server_command", lambda port: [sys.executable, "-c", _MIGRATING,
                                                             str(port)])  # fmt: skip
    scratch = tmp_path / "scratch"
    scratch.mkdir()
    assert ps.ensure_template(scratch, timeout_s=30) is True
    assert _is_migrated(template_path(version("prefect")))
    assert not (tmp_path / "users-home").exists() and ps._EARLY == []  # its server stopped
    assert ps.ensure_template(tmp_path / "unused", timeout_s=30) is False
    assert not (tmp_path / "unused").exists()


def test_a_template_that_cannot_be_made_says_why(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    import sys

    import tasks.prefect_start as ps

    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path / "cache"))
    monkeypatch.setattr(ps, "_EARLY", [])
    monkeypatch.setattr(ps, "_server_command", lambda port: [sys.executable, "-c", "exit(3)"])
    with pytest.raises(RuntimeError, match=r"exited \(code 3\)"):
        ps.ensure_template(tmp_path, timeout_s=30)
    assert ps._EARLY == []
