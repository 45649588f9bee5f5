"""Shared fixtures: real servers on loopback, started once per session and stopped by PID."""

from __future__ import annotations

import os
import sys
from collections.abc import Iterator
from pathlib import Path

import pytest

from tests.servers import S3Server, s3_server

# Prefect logs "Stopping temporary server" at interpreter exit, after pytest closed its capture
# streams (a traceback after the summary line); keep its loggers at WARNING in tests.
os.environ.setdefault("PREFECT_LOGGING_LEVEL", "WARNING")
os.environ.setdefault("PREFECT_SERVER_LOGGING_LEVEL", "WARNING")
# Prefect reads its settings once, when first imported, and collecting tests/unit imports it
# before any test's `Settings.apply` runs: an ephemeral server in a fresh PREFECT_HOME (its
# migrations take 20-40 s on 2 loaded cores) would then get Prefect's default 20 s to start.
os.environ.setdefault("PREFECT_SERVER_EPHEMERAL_STARTUP_TIMEOUT_SECONDS", "120")
# `make test` runs two pytest workers on two cores, each with servers and training processes:
# one OpenMP thread per process (torch, BLAS; inherited by the jobs' subprocesses). A LeNet job
# on digits took 28-40 s with torch's default of a thread per core, against 7 s on one.
os.environ.setdefault("OMP_NUM_THREADS", "1")


@pytest.fixture(scope="session")
def s3(tmp_path_factory: pytest.TempPathFactory) -> Iterator[S3Server]:
    os.environ.setdefault("AWS_ACCESS_KEY_ID", "testing")
    os.environ.setdefault("AWS_SECRET_ACCESS_KEY", "testing")
    os.environ.setdefault("AWS_DEFAULT_REGION", "us-east-1")
    with s3_server(Path(tmp_path_factory.mktemp("s3"))) as server:
        yield server


@pytest.fixture(autouse=True)
def _prefect_events_drained() -> Iterator[None]:
    """After a test that ran a flow in this process, stop Prefect's events worker: its
    websocket's keep-alive pings draw from the global `random` every 20 s from a thread, and
    Hypothesis, seeing the global random state change while it drew an example, warned
    (`HypothesisDeprecationWarning`, "Do not use the `random` module inside strategies") in
    whichever property test of the same pytest worker came later. The next flow starts a new
    worker."""
    yield
    worker = sys.modules.get("prefect.events.worker")
    if worker is not None:
        worker.EventsWorker.drain_all(timeout=10, at_exit=False)
