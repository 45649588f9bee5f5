"""`tenantml.ops.servers.open_api`: a busy server's 503 is asked again, other errors are not,
against a real HTTP server on 127.0.0.1."""

from __future__ import annotations

import json
import threading
import urllib.error
import urllib.request
from collections.abc import Iterator
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

import pytest

from tenantml.ops.servers import open_api, post_json


class _Busy(BaseHTTPRequestHandler):
    """Answers the first ``busy`` requests with ``status``, then 200 with ``{"ok": n}``."""

    busy = 0
    status = 503
    seen = 0

    def do_POST(self) -> None:  # noqa: N802 (http.server's name)
        type(self).seen += 1
        self.rfile.read(int(self.headers.get("Content-Length", 0)))
        if type(self).seen <= type(self).busy:
            self.send_response(type(self).status)
            self.send_header("Retry-After", "0")
            self.end_headers()
            return
        body = json.dumps({"ok": type(self).seen}).encode()
        self.send_response(200)
        self.send_header("Content-Type", "application/json")
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        self.wfile.write(body)

    do_DELETE = do_POST  # noqa: N815

    def log_message(self, *args: object) -> None:
        return None


@pytest.fixture
def server() -> Iterator[tuple[str, type[_Busy]]]:
    handler = type("Handler", (_Busy,), {"busy": 0, "status": 503, "seen": 0})
    httpd = ThreadingHTTPServer(("127.0.0.1", 0), handler)
    thread = threading.Thread(target=httpd.serve_forever, daemon=True)
    thread.start()
    yield f"http://127.0.0.1:{httpd.server_address[1]}", handler
    httpd.shutdown()
    httpd.server_close()


def test_a_busy_servers_503_is_asked_again(server: tuple[str, type[_Busy]]) -> None:
    url, handler = server
    handler.busy = 2
    assert post_json(f"{url}/automations/filter", {}, timeout=10) == {"ok": 3}
    handler.seen, handler.busy = 0, 1
    delete = urllib.request.Request(f"{url}/automations/x", method="DELETE")
    assert json.loads(open_api(delete, timeout=10)) == {"ok": 2}


def test_a_server_busy_past_the_timeout_and_other_errors_are_raised(
    server: tuple[str, type[_Busy]],
) -> None:
    url, handler = server
    handler.busy = 10**6
    with pytest.raises(urllib.error.HTTPError, match="503"):
        post_json(f"{url}/x", {}, timeout=0.5)
    handler.seen, handler.busy, handler.status = 0, 1, 404
    with pytest.raises(urllib.error.HTTPError, match="404"):
        post_json(f"{url}/x", {}, timeout=10)
    assert handler.seen == 1  # not asked again
