"""Quiet by default: library warnings and logs go to TENANTML_HOME/logs/tenantml.log, ours to
the console; ``-v`` shows everything on the console too (`tenantml.cli._logs`)."""

from __future__ import annotations

import logging
import os
import warnings
from collections.abc import Iterator
from pathlib import Path

import pytest
import typer
from typer.testing import CliRunner

from tenantml.cli import _logs
from tenantml.cli.app import _quiet


@pytest.fixture
def home(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Iterator[Path]:
    for k in _logs._LIBRARY_ENV:
        monkeypatch.delenv(k, raising=False)
    monkeypatch.setenv("TENANTML_HOME", str(tmp_path))
    yield tmp_path
    assert not any(
        isinstance(h, _logs.HomeLogHandler | _logs.ConsoleHandler)
        for h in logging.getLogger().handlers
    ), "the routing was left in place"


def _library_noise() -> None:
    """What MLflow, scikit-learn and Prefect do: a UserWarning raised in a library's file, an
    INFO line and an error record on their loggers."""
    with warnings.catch_warnings():
        warnings.simplefilter("always")
        warnings.warn_explicit(
            "Add type hints to the `predict` method", UserWarning, "/site-packages/mlflow/x.py", 7
        )
    logging.getLogger("mlflow.store.db.utils").info("Creating initial MLflow database tables...")
    logging.getLogger("prefect.utilities").error("Task run failed with exception")


def test_library_noise_goes_to_the_home_log_only(
    home: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    routing = _logs.route(verbose=False)
    try:
        _library_noise()
        logging.getLogger("tasks.outage").warning("the MLflow server is down; retrying")
        logging.getLogger("urllib3.connectionpool").info("a library's INFO: not even filed")
    finally:
        summary = routing.summary()
        routing.close()
    err = capsys.readouterr().err
    assert "the MLflow server is down" in err  # ours still print
    assert "type hints" not in err and "Creating initial" not in err and "Task run" not in err
    log = (home / "logs" / "tenantml.log").read_text()
    for line in (
        "UserWarning: Add type hints",
        "INFO    mlflow.store.db.utils: Creating",
        "ERROR   prefect.utilities: Task run failed",
        "the MLflow server is down",
    ):
        assert line in log
    assert "not even filed" not in log
    path = home / "logs" / "tenantml.log"
    assert summary == f"1 error from libraries logged to {path} (tenantml -v shows them)"


def test_verbose_shows_library_noise_on_the_console_too(
    home: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    routing = _logs.route(verbose=True)
    try:
        _library_noise()
    finally:
        summary = routing.summary()
        routing.close()
    err = capsys.readouterr().err
    assert "type hints" in err and "Creating initial" in err and "Task run failed" in err
    assert "Creating initial" in (home / "logs" / "tenantml.log").read_text()
    assert summary is None


def test_our_own_warnings_print(home: Path, capsys: pytest.CaptureFixture[str]) -> None:
    ours = str(Path(_logs.__file__))
    routing = _logs.route()
    try:
        with warnings.catch_warnings():
            warnings.simplefilter("always")
            warnings.warn_explicit("a warning of ours", UserWarning, ours, 1)
    finally:
        routing.close()
    assert "a warning of ours" in capsys.readouterr().err


def test_nothing_logged_writes_no_file_and_close_undoes_everything(home: Path) -> None:
    root = logging.getLogger()
    level, handlers, showwarning = root.level, list(root.handlers), warnings.showwarning
    routing = _logs.route()
    assert warnings.showwarning is not showwarning  # logging.captureWarnings
    assert os.environ["MLFLOW_CONFIGURE_LOGGING"] == "false"
    routing.close()
    assert not (home / "logs").exists()
    assert (root.level, root.handlers) == (level, handlers)
    assert "MLFLOW_CONFIGURE_LOGGING" not in os.environ
    assert warnings.showwarning is showwarning


def test_library_handlers_set_up_before_the_command_are_taken_off_for_it(
    home: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """MLflow and Prefect imported first (an embedding program): their console handlers on the
    mlflow logger and the root logger are set aside while the command runs, then put back."""
    mlflow_logger, root = logging.getLogger("mlflow"), logging.getLogger()
    saved = (list(mlflow_logger.handlers), mlflow_logger.propagate)
    theirs = logging.StreamHandler()
    prefect_like = type("PrefectConsoleHandler", (logging.StreamHandler,), {})()
    type(prefect_like).__module__ = "prefect.logging.handlers"
    mlflow_logger.addHandler(theirs)
    mlflow_logger.propagate = False
    root.addHandler(prefect_like)
    try:
        routing = _logs.route()
        assert theirs not in mlflow_logger.handlers and mlflow_logger.propagate
        assert prefect_like not in root.handlers
        try:
            _library_noise()
        finally:
            routing.close()
        assert "Creating initial" not in capsys.readouterr().err
        assert "Creating initial" in (home / "logs" / "tenantml.log").read_text()
        assert theirs in mlflow_logger.handlers and not mlflow_logger.propagate
        assert prefect_like in root.handlers
    finally:
        mlflow_logger.handlers, mlflow_logger.propagate = saved
        root.removeHandler(prefect_like)


def test_a_users_own_library_settings_win(home: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("PREFECT_LOGGING_LEVEL", "DEBUG")
    _logs.route().close()
    assert os.environ["PREFECT_LOGGING_LEVEL"] == "DEBUG"


def _app() -> typer.Typer:
    """The tenantml app's callback in front of one noisy command."""
    app = typer.Typer()
    app.callback()(_quiet)

    @app.command()
    def noisy() -> None:
        _library_noise()
        typer.echo("our answer")

    return app


def test_the_cli_callback_routes_and_says_where_errors_went(home: Path) -> None:
    res = CliRunner().invoke(_app(), ["noisy"])
    assert res.exit_code == 0, res.output
    assert "our answer" in res.output and "type hints" not in res.output
    assert "1 error from libraries logged to" in res.output
    res = CliRunner().invoke(_app(), ["-v", "noisy"])
    assert "type hints" in res.output and "logged to" not in res.output
