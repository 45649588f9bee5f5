"""The warm process (`tenantml.ops.warm`): a real server process on a Unix socket, real clients,
real signals. The children run tests/warm_target.py instead of Prefect's engine; the engine path
itself runs in tests/integration/test_servers.py, whose servers fork every flow run this way."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path

import pytest

from tenantml.ops.servers import stop_pid
from tenantml.ops.warm import SOCKET_ENV

ROOT = Path(__file__).resolve().parents[2]


@pytest.fixture
def warm(tmp_path: Path) -> Iterator[Path]:
    sock = tmp_path / "warm.sock"
    cmd = [sys.executable, "-m", "tenantml.ops.warm", "serve", "--socket", str(sock)]
    proc = subprocess.Popen(
        [*cmd, "--module", "tests.warm_target"], cwd=ROOT, start_new_session=True
    )
    deadline = time.monotonic() + 60
    while not sock.exists():
        assert proc.poll() is None and time.monotonic() < deadline, (
            "the warm process never listened"
        )
        time.sleep(0.05)
    yield sock
    stop_pid(proc.pid)


def _client(sock: Path | None, cwd: Path, **env: str) -> subprocess.Popen[str]:
    full = {**os.environ, "PYTHONPATH": str(ROOT), **env}
    full.pop(SOCKET_ENV, None)
    if sock is not None:
        full[SOCKET_ENV] = str(sock)
    return subprocess.Popen(
        [sys.executable, "-m", "tenantml.ops.warm", "run", "flow-run-1"],
        cwd=cwd,
        env=full,
        stdin=subprocess.PIPE,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )


def test_a_child_gets_the_clients_streams_environment_and_directory_and_its_exit_status(
    warm: Path, tmp_path: Path
) -> None:
    client = _client(warm, tmp_path, WARM_PROBE="probe-1", WARM_EXIT="3")
    out, err = client.communicate("hello\n", timeout=60)
    assert client.returncode == 3
    lines = out.splitlines()
    assert lines[0] == f"argv=['flow-run-1'] env=probe-1 cwd={tmp_path}"
    assert lines[1].startswith("stdin=hello pid=")
    assert int(lines[1].split("pid=")[1]) != client.pid  # it ran in the warm process's child
    assert "to stderr" in err


def test_children_are_independent_and_start_fast(warm: Path, tmp_path: Path) -> None:
    clients = [_client(warm, tmp_path, WARM_PROBE=str(i)) for i in range(4)]
    outs = [c.communicate("x\n", timeout=60)[0] for c in clients]
    assert [c.returncode for c in clients] == [0, 0, 0, 0]
    assert [o.splitlines()[0].split()[1] for o in outs] == [f"env={i}" for i in range(4)]


def _sleeping(warm: Path, tmp_path: Path) -> tuple[subprocess.Popen[str], int]:
    """A client whose child sleeps a minute, and the child's PID (once it runs)."""
    client = _client(warm, tmp_path, WARM_SLEEP="60")
    assert client.stdout is not None and client.stdin is not None
    client.stdin.write("x\n")
    client.stdin.flush()
    client.stdout.readline()
    return client, int(client.stdout.readline().split("pid=")[1])


def test_a_signal_to_the_client_reaches_the_child(warm: Path, tmp_path: Path) -> None:
    client, child = _sleeping(warm, tmp_path)
    client.send_signal(signal.SIGTERM)  # caught by the client and passed on
    _gone(child)  # the child, whose SIGTERM is Python's default, ended...
    assert client.wait(timeout=30) == 128 + signal.SIGKILL  # ...without a word: "killed"


def test_a_killed_client_takes_its_child_along(warm: Path, tmp_path: Path) -> None:
    """SIGKILL cannot be passed on: the child sees its connection close and ends itself."""
    client, child = _sleeping(warm, tmp_path)
    client.kill()
    client.wait(timeout=30)
    _gone(child)


def test_a_child_whose_client_gave_up_runs_nothing(warm: Path, tmp_path: Path) -> None:
    """A client whose handshake timed out starts the flow run cold itself; the child it asked
    for, forked late, must not run it as well: it runs only once told to."""
    import socket

    from tenantml.ops.warm import _recv, _send

    stdin_r, stdin_w = os.pipe()
    out_r, out_w = os.pipe()
    conn = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    conn.connect(str(warm))
    env = {**os.environ, "PYTHONPATH": str(ROOT), "WARM_PROBE": "late"}
    _send(conn, {"env": env, "cwd": str(tmp_path), "argv": []}, [stdin_r, out_w, out_w])
    child = int(_recv(conn)[0]["pid"])
    time.sleep(1.0)  # a child that did not wait to be told would have printed by now
    conn.close()  # as the client does when it gives up
    for fd in (stdin_r, stdin_w, out_w):
        os.close(fd)
    _gone(child)
    with os.fdopen(out_r, "rb") as out:
        assert out.read() == b""  # warm_target never ran (it prints argv and env first)


def test_the_client_has_a_session_of_its_own(warm: Path, tmp_path: Path) -> None:
    """A worker starts a run with a command in its own process group; a SIGTERM to that group
    (the worker stopped or restarted) reached the client, which passed it on, and the job ended.
    Prefect starts its own runs in a session of their own; so does the client."""
    client, _ = _sleeping(warm, tmp_path)
    try:
        assert os.getsid(client.pid) == client.pid and os.getpgid(client.pid) == client.pid
    finally:
        client.kill()
        client.wait(timeout=30)


def test_what_the_warm_process_imports_starts_no_thread_and_no_gpu() -> None:
    """Forking is safe only if the imports start no thread (a lock a thread held stays locked
    in the child) and leave CUDA uninitialised; and they include PyTorch, the dearest."""
    code = (
        "import importlib, sys, threading\n"
        "from tenantml.ops.warm import ENGINE, PRELOAD\n"
        "for name in (ENGINE, *PRELOAD):\n"
        "    importlib.import_module(name)\n"
        "loaded = 'torch' in sys.modules and 'sklearn' in sys.modules\n"
        "import torch\n"
        "print([t.name for t in threading.enumerate()], torch.cuda.is_initialized(), loaded)\n"
    )
    out = subprocess.run([sys.executable, "-c", code], cwd=ROOT, capture_output=True, text=True,
                         timeout=300, check=True)  # fmt: skip
    assert out.stdout.strip().splitlines()[-1] == "['MainThread'] False True", out.stdout


def test_without_a_warm_process_the_client_runs_the_engine_itself(tmp_path: Path) -> None:
    client = _client(tmp_path / "nothing.sock", tmp_path)
    _, err = client.communicate("", timeout=120)
    assert "no warm process" in err and "starting cold" in err
    assert "Invalid flow run id" in err  # prefect.engine itself, given "flow-run-1"
    assert client.returncode == 1


def _gone(pid: int, within_s: float = 10.0) -> None:
    deadline = time.monotonic() + within_s
    while time.monotonic() < deadline:
        try:
            os.kill(pid, 0)
        except ProcessLookupError:
            return
        time.sleep(0.05)
    pytest.fail(f"the child {pid} outlived its client")


def test_down_removes_the_temporary_folder_of_a_long_homes_warm_socket(tmp_path: Path) -> None:
    """A home whose socket path would pass a Unix socket's 107 bytes gets its warm socket in a
    temporary folder (`_start_warm`); `down` removes that folder, and nothing else."""
    import json
    import tempfile

    from tenantml.ops.servers import WARM_SOCKET_DIR_PREFIX, down

    def home_with_socket(home: Path, socket: Path) -> None:
        (home / "servers").mkdir(parents=True)
        cmd = [sys.executable, "-m", "tenantml.ops.warm", "serve", "--socket", str(socket)]
        commands = {"warm": {"cmd": cmd, "env": {}}}
        (home / "servers" / "commands.json").write_text(json.dumps(commands))

    long_home = tmp_path / ("h" * 120)
    folder = Path(tempfile.mkdtemp(prefix=WARM_SOCKET_DIR_PREFIX))
    (folder / "warm.sock").touch()
    home_with_socket(long_home, folder / "warm.sock")
    assert down(long_home) == [] and not folder.exists()
    # a folder `up` did not make (named alike, elsewhere) is left alone
    short_home, other = tmp_path / "short", tmp_path / f"{WARM_SOCKET_DIR_PREFIX}mine"
    other.mkdir()
    home_with_socket(short_home, other / "warm.sock")
    down(short_home)
    assert other.exists()
