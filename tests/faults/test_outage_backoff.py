"""`tasks.outage` on real failed connections: what counts as an outage, bounded backoff, and
a call that waits until a server on loopback comes back."""

from __future__ import annotations

import http.server
import threading
import time
import urllib.request
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

import boto3
import pytest
from mlflow.tracking import MlflowClient

from tasks.outage import Backoff, is_outage, patient, ride_out, wait_for_servers
from tasks.settings import ServerUnreachableError, Settings
from tenantml.ops.servers import free_port


def _error(fn: object) -> BaseException:
    try:
        fn()  # type: ignore[operator]
    except Exception as e:
        return e
    raise AssertionError("no error")


def test_failed_connections_of_every_client_are_outages(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("MLFLOW_HTTP_REQUEST_MAX_RETRIES", "0")
    dead = f"http://127.0.0.1:{free_port()}"
    mlflow_err = _error(lambda: MlflowClient(dead).search_experiments())
    s3 = boto3.client("s3", endpoint_url=dead, aws_access_key_id="x", aws_secret_access_key="x",
                      region_name="us-east-1")  # fmt: skip
    s3_err = _error(lambda: s3.list_buckets())
    url_err = _error(lambda: urllib.request.urlopen(dead, timeout=2))
    for e in (mlflow_err, s3_err, url_err):
        assert is_outage(e), repr(e)
    assert not is_outage(ValueError("tenant name 'A' is not valid"))
    assert not is_outage(KeyError("x"))


def test_backoff_is_bounded() -> None:
    b = Backoff(patience_s=3600, cap_s=15)
    delays = [b.next_delay() for _ in range(7)]
    assert delays == [1, 2, 4, 8, 15, 15, 15]
    b = Backoff(patience_s=0)
    assert b.next_delay() is None


@contextmanager
def _serving_after(port: int, delay_s: float) -> Iterator[None]:
    """An HTTP server on `port` from `delay_s` seconds on (a server coming back), until exit."""
    server: list[http.server.HTTPServer] = []

    def start_later() -> None:
        time.sleep(delay_s)
        srv = http.server.HTTPServer(("127.0.0.1", port), http.server.SimpleHTTPRequestHandler)
        server.append(srv)
        srv.serve_forever()

    threading.Thread(target=start_later, daemon=True).start()
    try:
        yield
    finally:
        if server:
            server[0].shutdown()


def test_ride_out_waits_for_a_server_that_comes_back(tmp_path: Path) -> None:
    port = free_port()
    url = f"http://127.0.0.1:{port}/"
    said: list[str] = []
    t0 = time.monotonic()
    with _serving_after(port, 2.5):
        status = ride_out(lambda: urllib.request.urlopen(url, timeout=2).status, what="probe",
                          patience_s=60, say=said.append)  # fmt: skip
    assert status == 200
    assert said and all("is unreachable; retry" in s and "giving up after 60 s" in s for s in said)
    assert time.monotonic() - t0 < 30


def test_a_service_started_during_an_outage_waits_for_the_server(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    port = free_port()
    monkeypatch.setenv("TENANTML_TRACKING_URI", f"http://127.0.0.1:{port}")
    settings = Settings.load(tmp_path)
    with pytest.raises(
        ServerUnreachableError, match=f"the MLflow server at http://127.0.0.1:{port}"
    ):
        wait_for_servers(settings, patience_s=1.5, say=lambda line: None)
    said: list[str] = []
    t0 = time.monotonic()
    with _serving_after(port, 2.5):
        wait_for_servers(settings, patience_s=60, say=said.append)
    assert time.monotonic() - t0 >= 2.0
    assert said and all(
        f"the scheduler's start: the MLflow server at http://127.0.0.1:{port} is unreachable; retry"
        in line
        and "giving up after 60 s" in line
        for line in said
    ), said


def test_ride_out_gives_up_naming_the_server(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("TENANTML_TRACKING_URI", f"http://127.0.0.1:{free_port()}")
    monkeypatch.setenv("MLFLOW_HTTP_REQUEST_MAX_RETRIES", "0")
    settings = Settings.load(tmp_path)
    client = patient(MlflowClient(settings.tracking_uri), settings, patience_s=1.5)
    with pytest.raises(ServerUnreachableError, match="the MLflow server at http://127.0.0.1"):
        client.search_experiments()


def test_errors_that_are_not_outages_are_not_retried(tmp_path: Path) -> None:
    calls = []

    def bad() -> None:
        calls.append(1)
        raise ValueError("bad input")

    with pytest.raises(ValueError, match="bad input"):
        ride_out(bad, what="probe", patience_s=60)
    assert calls == [1]


class _SlowHandler(http.server.BaseHTTPRequestHandler):
    """Answers every PUT after 2 s, like a busy MLflow server streaming an upload to S3."""

    def do_PUT(self) -> None:  # noqa: N802 - the stdlib's name
        self.rfile.read(int(self.headers.get("Content-Length", 0)))
        time.sleep(2.0)
        self.send_response(200)
        self.send_header("Content-Length", "0")
        self.end_headers()

    def log_message(self, *args: object) -> None:
        pass


def test_the_service_waits_for_a_slow_upload_that_users_do_not(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    from mlflow.store.artifact.http_artifact_repo import HttpArtifactRepository

    from tasks.outage import serve_patiently

    srv = http.server.ThreadingHTTPServer(("127.0.0.1", free_port()), _SlowHandler)
    threading.Thread(target=srv.serve_forever, daemon=True).start()
    url = f"http://127.0.0.1:{srv.server_address[1]}/api/2.0/mlflow-artifacts/artifacts/run"
    model = tmp_path / "model.pt"
    model.write_bytes(b"\0" * 100_000)
    monkeypatch.setenv("MLFLOW_HTTP_REQUEST_MAX_RETRIES", "0")
    try:
        monkeypatch.setenv("MLFLOW_HTTP_REQUEST_TIMEOUT", "1")  # what the SDK's 20 s is to users
        with pytest.raises(Exception, match="(?i)timed? ?out"):
            HttpArtifactRepository(url).log_artifact(str(model))
        monkeypatch.setenv("TENANTML_SERVICE_HTTP_TIMEOUT_S", "10")
        assert serve_patiently() == 10.0
        HttpArtifactRepository(url).log_artifact(str(model))  # the same PUT, waited for
    finally:
        srv.shutdown()
    for bad in ("0", "-5", "soon", "1.5"):
        monkeypatch.setenv("TENANTML_SERVICE_HTTP_TIMEOUT_S", bad)
        with pytest.raises(ValueError, match="TENANTML_SERVICE_HTTP_TIMEOUT_S=.*whole seconds > 0"):
            serve_patiently()
