"""`tenantml.ops.servers.stop_pid` stops a process whether or not it leads a process group:
`spot revoke-bench` started its S3 server in the bench's own group, `stop_pid` found no group
of that id, said the server was gone, and every run left a `moto_server` behind."""

from __future__ import annotations

import subprocess
import sys

import pytest

from tenantml.ops.servers import stop_pid


@pytest.mark.parametrize("own_group", [True, False])
def test_stop_pid_stops_the_process_with_or_without_its_own_group(own_group: bool) -> None:
    proc = subprocess.Popen(
        [sys.executable, "-c", "import time; time.sleep(120)"], start_new_session=own_group
    )
    try:
        assert stop_pid(proc.pid, timeout=6.0)
        assert proc.wait(timeout=5) is not None
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait()
