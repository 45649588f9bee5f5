"""Where the command line's log records and warnings go: quiet by default.

A newcomer should see our messages and errors, not the libraries' chatter: MLflow's INFO lines
and UserWarnings, scikit-learn's ConvergenceWarning, Prefect's "Starting temporary server",
flow-run and task-run lines, SQLAlchemy's deprecation warnings. So, for one command:

* every warning becomes a log record (`logging.captureWarnings`), logger ``py.warnings``;
* the root logger gets two handlers: `HomeLogHandler` appends every record (INFO and up from
  MLflow, Prefect and our packages; WARNING and up from any other library) to
  ``$TENANTML_HOME/logs/tenantml.log``, and `ConsoleHandler` writes to stderr only our own
  records (loggers `OWN`, and warnings raised by our code) unless ``--verbose``, when it writes
  them all;
* MLflow and Prefect are asked, by their own settings, to log through the root logger
  (``MLFLOW_CONFIGURE_LOGGING=false``; Prefect keeps its console handler off a root logger that
  already has handlers) at INFO (``PREFECT_LOGGING_LEVEL=INFO``), so their records reach the file.

Library errors hidden from the console are counted; the command ends with one line that says
where they are. Nothing is configured at import: `route` does it when a command starts and
`Routing.close` undoes it when the command ends (so `typer.testing.CliRunner` calls stay apart).
"""

from __future__ import annotations

import logging
import os
import sys
from dataclasses import dataclass, field
from pathlib import Path
from typing import TextIO

__all__ = ["OWN", "ConsoleHandler", "HomeLogHandler", "Routing", "route"]

# Our top-level packages: their records are the service talking to the user.
OWN = ("tenantml", "tasks", "flows", "trainers", "mlflow_plugin", "store", "policy")
# Libraries whose INFO lines are worth keeping in the file (others: WARNING and up).
_INFO = ("mlflow", "prefect", *OWN)
_ROOT = Path(__file__).resolve().parents[2]  # the folder that holds the packages in OWN
_OWN_FILES = tuple(str(_ROOT / p) + os.sep for p in OWN)
# Read by MLflow and Prefect when they are imported, later in the command.
_LIBRARY_ENV = {"MLFLOW_CONFIGURE_LOGGING": "false", "PREFECT_LOGGING_LEVEL": "INFO"}
_FILE_FORMAT = "%(asctime)s %(levelname)-7s %(name)s: %(message)s"


def is_own(record: logging.LogRecord) -> bool:
    """A record of our code: from a logger of ours, or a warning raised in one of our files."""
    if record.name == "py.warnings":  # captureWarnings: "path:line: Category: message"
        args = record.args
        text = args[0] if isinstance(args, tuple) and args else record.msg
        return str(text).startswith(_OWN_FILES)
    return record.name.split(".", 1)[0] in OWN


def log_path() -> Path:
    """``<TENANTML_HOME>/logs/tenantml.log``, with the home the command uses now (a command's
    ``--home`` is exported when its `tenantml.Client` is made)."""
    from tasks.settings import Settings

    return Settings.resolve_home() / "logs" / "tenantml.log"


class HomeLogHandler(logging.Handler):
    """Appends to `log_path`, opened at the first record (a command that logs nothing writes
    nothing) and opened again when the home changes."""

    def __init__(self) -> None:
        super().__init__(logging.INFO)
        self.setFormatter(logging.Formatter(_FILE_FORMAT))
        self._path: Path | None = None
        self._file: TextIO | None = None

    @property
    def path(self) -> Path | None:
        """The file written last (None before the first record)."""
        return self._path

    def emit(self, record: logging.LogRecord) -> None:
        try:
            path = log_path()
            if path != self._path or self._file is None:
                self._close_file()
                path.parent.mkdir(parents=True, exist_ok=True)
                self._file = path.open("a", encoding="utf-8")
                self._path = path
            self._file.write(self.format(record) + "\n")
            self._file.flush()
        except Exception:  # noqa: BLE001 - logging must not break the command
            self.handleError(record)

    def _close_file(self) -> None:
        if self._file is not None:
            self._file.close()
            self._file = None

    def close(self) -> None:
        self.acquire()
        try:
            self._close_file()
        finally:
            self.release()
        super().close()


class ConsoleHandler(logging.StreamHandler[TextIO]):
    """stderr as it is when a record comes (a test runner swaps it); our records only, unless
    `verbose`. Counts the library errors it holds back."""

    def __init__(self, verbose: bool) -> None:
        super().__init__()
        self.verbose = verbose
        self.hidden_errors = 0
        self.setFormatter(logging.Formatter("%(levelname)s %(name)s: %(message)s"))

    @property
    def stream(self) -> TextIO:
        return sys.stderr

    @stream.setter
    def stream(self, value: TextIO) -> None:  # StreamHandler.__init__ sets it; stderr it is
        pass

    def filter(self, record: logging.LogRecord) -> bool:
        if self.verbose or is_own(record):
            return bool(super().filter(record))
        if record.levelno >= logging.ERROR:
            self.hidden_errors += 1
        return False


@dataclass
class Routing:
    """What `route` changed, to tell about and to undo."""

    file: HomeLogHandler
    console: ConsoleHandler
    root_level: int
    levels: dict[str, int] = field(default_factory=dict)
    env: dict[str, str | None] = field(default_factory=dict)
    # (logger, its handlers with their places, its propagate) of library loggers set up before
    # the command
    detached: list[tuple[logging.Logger, list[tuple[int, logging.Handler]], bool]] = field(
        default_factory=list
    )

    def summary(self) -> str | None:
        """One line when library errors were logged but not shown, else None."""
        n, path = self.console.hidden_errors, self.file.path
        if not n or path is None:
            return None
        return (
            f"{n} error{'s' if n > 1 else ''} from libraries logged to {path} "
            "(tenantml -v shows them)"
        )

    def close(self) -> None:
        root = logging.getLogger()
        for h in (self.file, self.console):
            root.removeHandler(h)
            h.close()
        root.setLevel(self.root_level)
        for name, level in self.levels.items():
            logging.getLogger(name).setLevel(level)
        logging.captureWarnings(False)
        for logger, handlers, propagate in self.detached:
            for i, handler in handlers:  # back in their places (the order they print in)
                logger.handlers.insert(min(i, len(logger.handlers)), handler)
            logger.propagate = propagate
        for k, v in self.env.items():
            if v is None:
                os.environ.pop(k, None)
            else:
                os.environ[k] = v


def _detach_library_handlers(routing: Routing) -> None:
    """Where MLflow or Prefect was imported before the command (an embedding program, a test
    run), their console handlers are already set up: take them off for the command. MLflow's
    on its loggers (which it stops propagating), Prefect's on the root logger."""
    root = logging.getLogger()
    library = [
        (i, h) for i, h in enumerate(root.handlers) if type(h).__module__.startswith("prefect.")
    ]
    if library:
        routing.detached.append((root, library, root.propagate))
    for name in ("mlflow", "alembic", "sqlalchemy.engine"):
        logger = logging.getLogger(name)
        if logger.propagate and not logger.handlers:
            continue
        routing.detached.append((logger, list(enumerate(logger.handlers)), logger.propagate))
        logger.propagate = True
    for logger, handlers, _ in routing.detached:
        for _, h in handlers:
            logger.removeHandler(h)


def route(verbose: bool = False) -> Routing:
    """Route warnings and library logs as the module docstring says, until `Routing.close`."""
    root = logging.getLogger()
    for h in list(root.handlers):  # a previous command's, in the same process
        if isinstance(h, HomeLogHandler | ConsoleHandler):
            root.removeHandler(h)
            h.close()
    routing = Routing(HomeLogHandler(), ConsoleHandler(verbose), root.level)
    for k, v in _LIBRARY_ENV.items():
        if k not in os.environ:  # a user's own setting wins
            routing.env[k] = None
            os.environ[k] = v
    _detach_library_handlers(routing)
    root.setLevel(logging.WARNING)
    for name in _INFO:
        logger = logging.getLogger(name)
        routing.levels[name] = logger.level
        if logger.level == logging.NOTSET or logger.level > logging.INFO:
            logger.setLevel(logging.INFO)
    root.addHandler(routing.file)
    root.addHandler(routing.console)
    logging.captureWarnings(True)
    return routing
