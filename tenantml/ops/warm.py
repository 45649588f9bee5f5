"""A warm process per node: Prefect flow runs that start in milliseconds instead of seconds.

A process worker starts every flow run as a new Python process (``python -m prefect.engine``),
which spends several CPU-seconds importing Prefect, MLflow, PyTorch and the trainers before the
job's first step: about 13 s per `train` run on a loaded 2-core machine, longer than a small job.
Here the imports are paid once:

* ``python -m tenantml.ops.warm serve --socket S`` (started by ``tenantml up``, one per node)
  imports the engine, the flows and what they import (`PRELOAD`), then waits on the Unix socket
  `S`. For each request it
  forks; the child takes the requester's standard streams, environment and working directory and
  runs ``prefect.engine`` as ``python -m prefect.engine`` would (`runpy`), with everything
  already imported. The parent starts no Python thread and does not initialise CUDA, so forking
  it is safe.
* ``python -m tenantml.ops.warm run`` is the command the ``gpu`` pool's worker starts for a
  `train` run (the job variable ``command``, which the scheduler sets from ``flow_run_command``
  in ``servers.json``: `tasks._dispatch`). It starts a session of its own (as Prefect does for
  the runs it starts with its own command), imports only the standard library, hands
  its streams and environment (``PREFECT__FLOW_RUN_ID``, ``CUDA_VISIBLE_DEVICES``, ...) to the
  warm process named by ``TENANTML_WARM_SOCKET``, passes SIGTERM/SIGINT on to the child, and
  exits with the child's exit status. Where no warm process answers (a Kubernetes pod, a node
  whose warm process died) it becomes ``python -m prefect.engine`` itself (exec): slower, never
  broken.

A killed `run` (SIGKILL: a node lost, `tenantml chaos`) takes its child with it: the child
watches its connection and kills itself when the other end closes. So a flow run still lives and
dies with the process the worker started, as Prefect's heartbeats and cancellation expect.
"""

from __future__ import annotations

import contextlib
import json
import os
import signal
import socket
import struct
import sys
from typing import Any, NoReturn

__all__ = ["SOCKET_ENV", "run", "serve"]

SOCKET_ENV = "TENANTML_WARM_SOCKET"
ENGINE = "prefect.engine"  # what a process worker runs for a flow run: python -m prefect.engine
# What the flow runs execute and import: Prefect's engine, the flows, and what `train` imports
# when it runs (the store, MLflow's client, the trainers with scikit-learn and PyTorch: 4.7 s
# on the loaded 2-core machine, once the engine and flows were in). None of it starts a Python
# thread or initialises CUDA (`tests/unit/test_warm.py`); OpenBLAS's own threads, which it may
# start when loaded, it re-creates in a forked child (its fork handler).
PRELOAD = (
    "prefect.flow_engine",
    "flows.train",
    "flows.seer",
    "mlflow_plugin.tracking",
    "tasks._service",
    "trainers.sklearn_trainer",
    "trainers.torch_trainer",
)
HANDSHAKE_TIMEOUT_S = 30.0  # a warm process that does not fork within this: the run starts cold
_HEADER = struct.Struct("!I")  # a message: its length, then that many bytes of JSON
_STREAMS = 3  # stdin, stdout, stderr


def _send(conn: socket.socket, message: dict[str, Any], fds: list[int] | None = None) -> None:
    data = json.dumps(message).encode()
    packet = _HEADER.pack(len(data)) + data
    if fds:
        socket.send_fds(conn, [packet], fds)
    else:
        conn.sendall(packet)


def _recv_exact(conn: socket.socket, n: int) -> bytes:
    chunks = b""
    while len(chunks) < n:
        chunk = conn.recv(n - len(chunks))
        if not chunk:
            raise EOFError("the other end closed the connection")
        chunks += chunk
    return chunks


def _recv(conn: socket.socket, max_fds: int = 0) -> tuple[dict[str, Any], list[int]]:
    """One message and the file descriptors sent with it (with its first bytes)."""
    fds: list[int] = []
    if max_fds:
        head, fds, _, _ = socket.recv_fds(conn, _HEADER.size, max_fds)
        if len(head) < _HEADER.size:
            head += _recv_exact(conn, _HEADER.size - len(head))
    else:
        head = _recv_exact(conn, _HEADER.size)
    (size,) = _HEADER.unpack(head)
    return dict(json.loads(_recv_exact(conn, size))), fds


# -- the client: what the worker starts ---------------------------------------------------------


def run(argv: list[str]) -> NoReturn:
    """Run the flow run of this process's environment in the warm process; exit with its
    status. Without one, become ``python -m prefect.engine`` (`argv` is passed to it)."""
    cold = [sys.executable, "-m", ENGINE, *argv]
    # A session of its own, as Prefect gives the runs it starts itself: a run with a command
    # (this one) is started in its worker's process group, and a SIGTERM to that group (a dead
    # worker's, when `restart` stops what is left of it: chaos's kill-worker) ended its job.
    with contextlib.suppress(OSError):  # already a session leader
        os.setsid()
    path = os.environ.get(SOCKET_ENV)
    conn = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    conn.settimeout(HANDSHAKE_TIMEOUT_S)
    try:
        if not path:
            raise FileNotFoundError(f"{SOCKET_ENV} is not set")
        conn.connect(path)
        request = {"env": dict(os.environ), "cwd": os.getcwd(), "argv": argv}
        _send(conn, request, list(range(_STREAMS)))
        child = int(_recv(conn)[0]["pid"])
        _send(conn, {"go": True})  # the child runs the flow run only once told: see `_child`
        conn.settimeout(None)  # the run takes as long as it takes
    except (OSError, EOFError) as e:  # (a timeout too: a child forked late never hears "go")
        conn.close()
        print(f"tenantml warm: no warm process ({e}); starting cold", file=sys.stderr, flush=True)
        os.execv(sys.executable, cold)

    def forward(signum: int, _frame: object) -> None:
        try:
            os.kill(child, signum)
        except ProcessLookupError:
            pass

    for sig in (signal.SIGTERM, signal.SIGINT, signal.SIGHUP):
        signal.signal(sig, forward)
    try:
        status = int(_recv(conn)[0]["exit"])
    except (OSError, EOFError):
        status = 128 + signal.SIGKILL  # the child died without a word: killed
    os._exit(status)


# -- the warm process -----------------------------------------------------------------------------


def serve(path: str, preload: tuple[str, ...] = PRELOAD, module: str = ENGINE) -> NoReturn:
    """Import `module` (what each child runs as ``python -m module``) and `preload`, then fork
    one child per request on the Unix socket `path`, forever (until a signal ends it)."""
    import gc
    import importlib
    import threading

    for name in (module, *preload):
        importlib.import_module(name)  # here, once, for every child
    extra = [t.name for t in threading.enumerate() if t is not threading.main_thread()]
    if extra:  # a thread does not survive fork; whatever it guards could be left locked
        print(f"tenantml warm: threads after imports: {extra}", file=sys.stderr, flush=True)
    gc.freeze()  # the imported objects stay shared with the children (copy-on-write)
    signal.signal(signal.SIGCHLD, signal.SIG_IGN)  # children are reaped by the kernel
    if os.path.exists(path):
        os.unlink(path)
    server = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    server.bind(path)
    server.listen(64)
    print(f"tenantml warm: ready on {path} (pid {os.getpid()})", file=sys.stderr, flush=True)
    while True:
        conn, _ = server.accept()
        try:
            pid = os.fork()
        except OSError as e:  # out of memory or processes: this run starts cold, later ones warm
            print(f"tenantml warm: could not fork ({e})", file=sys.stderr, flush=True)
            conn.close()
            continue
        if pid == 0:
            server.close()
            _child(conn, module)
        conn.close()


def _child(conn: socket.socket, module: str) -> NoReturn:
    """Become the requester's ``python -m <module>``; report its exit status."""
    import atexit
    import runpy
    import threading
    import traceback
    import warnings

    status = 1
    try:
        request, fds = _recv(conn, _STREAMS)
        for target, fd in enumerate(fds):
            os.dup2(fd, target)
            os.close(fd)
        signal.signal(signal.SIGCHLD, signal.SIG_DFL)  # a job's own subprocesses are waited for
        os.environ.clear()
        os.environ.update(request["env"])
        os.chdir(request["cwd"])
        if "prefect" in sys.modules:  # Prefect read its settings at import, in the parent
            from prefect.context import refresh_global_settings_context

            refresh_global_settings_context()
        _send(conn, {"pid": os.getpid()})
        # Run only once the client says so: a client that gave up waiting (its handshake timed
        # out) has started the flow run cold itself, and closes the connection instead.
        try:
            go = bool(_recv(conn)[0].get("go"))
        except (OSError, EOFError):
            go = False
        if go:
            threading.Thread(target=_die_with, args=(conn,), daemon=True, name="warm-watch").start()
            from tasks.streams import outlive_lost_output

            # before the engine's first log line: a worker killed meanwhile (chaos's
            # kill-worker) leaves the streams without a reader, and Prefect's console
            # handler turns a broken pipe into SystemExit (`tasks.streams`)
            outlive_lost_output()
            sys.argv = [module, *request["argv"]]
            # runpy warns that the module it runs as __main__ is imported already: on purpose.
            warnings.filterwarnings("ignore", f"'{module}' found in sys.modules", RuntimeWarning)
            try:
                runpy.run_module(module, run_name="__main__", alter_sys=True)
                status = 0
            except SystemExit as e:
                status = e.code if isinstance(e.code, int) else (0 if e.code is None else 1)
    except BaseException:  # (Prefect's engine re-raises the signal that ended a run)
        traceback.print_exc()
    finally:
        try:  # what an interpreter's exit runs, however the run ends: first threading's own
            # exit callbacks (Prefect's events worker drains there) and the join of non-daemon
            # threads, then the atexit functions (Prefect's log worker drains there)
            getattr(threading, "_shutdown")()  # noqa: B009  (private: not in typeshed)
            atexit._run_exitfuncs()
        except BaseException:
            traceback.print_exc()
        sys.stdout.flush()
        sys.stderr.flush()
        try:
            _send(conn, {"exit": status})
        except OSError:
            pass
        os._exit(status)


def _die_with(conn: socket.socket) -> None:
    """Kill this process when the client's end of `conn` closes (the client was killed)."""
    try:
        while conn.recv(1):
            pass
    except OSError:
        pass
    os.kill(os.getpid(), signal.SIGKILL)


def main(argv: list[str]) -> None:
    if argv[:1] == ["run"]:
        run(argv[1:])
    if argv[:1] == ["serve"] and len(argv) in (3, 5) and argv[1] == "--socket":
        if len(argv) == 5 and argv[3] == "--module":
            serve(argv[2], preload=(), module=argv[4])
        if len(argv) == 3:
            serve(argv[2])
    raise SystemExit(
        "usage: python -m tenantml.ops.warm serve --socket PATH [--module M] | run [FLOW_RUN_ID]"
    )


if __name__ == "__main__":
    main(sys.argv[1:])
