"""`tenantml up` / `tenantml down`: the real servers on loopback, started and stopped by PID.

`up` starts, under ``TENANTML_HOME/servers/``:

1. an S3-compatible server (moto, in memory) with the bucket ``tenantml``, unless an S3 endpoint
   is given (AWS, MinIO: ``--s3-endpoint``, credentials from the usual AWS variables);
2. PostgreSQL when ``--postgres`` (initdb into ``servers/pg``, a private port and socket dir);
3. an MLflow server (SQLite, or PostgreSQL) whose artifacts go to ``s3://tenantml/mlflow``;
4. a Prefect server (SQLite, or PostgreSQL); the process work pool ``gpu`` with one worker per
   GPU slot (``--limit 2``: its running job and one prefetched job waiting, warm, on the slot's
   lock) for the ``train`` deployment, and the pool ``control`` with one worker for the
   ``scheduler`` deployment (started from the Prefect UI), both from ``infra/prefect.yaml``;

then writes ``servers.json``, which `tasks.settings` reads: from then on every command of this
installation uses the servers.

``--listen ADDR`` serves other machines too: the servers listen on ADDR (an address of this
machine that the other nodes reach) instead of 127.0.0.1, and each worker is a node's GPU worker
(`gpu_worker`, ``tenantml worker`` on the other nodes): it pins its own GPU
(``CUDA_VISIBLE_DEVICES``), and the runs it takes wait on that GPU's lock file on their own
node, not on a slot lock the scheduler names (no node sees another's files). `node_env` gives
the settings by environment that another node's workers need (``infra/k8s/README.md``, step
4); `tenantml.ops.nodes` runs such a node in a network namespace of this machine. `down` stops
every PID it started (TERM, then INT, then KILL: the Prefect worker ignores the first TERM)
and removes ``servers.json``.
"""

from __future__ import annotations

import contextlib
import ipaddress
import json
import os
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import time
import urllib.error
import urllib.request
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from tasks.settings import GPU_LOCK_ENV, WORKER_PREFETCH_PER_SLOT
from tenantml.ops.warm import SOCKET_ENV

__all__ = [
    "MLFLOW_SERVER_ENV",
    "down",
    "executable",
    "flow_processes",
    "free_port",
    "gpu_worker",
    "node_env",
    "post_json",
    "restart",
    "stop",
    "stop_pid",
    "up",
    "wait_http",
]

ROOT = Path(__file__).resolve().parents[2]  # the checkout: flows/ lives here
PYTHON = sys.executable  # this installation's Python: the servers, workers and flow runs use it
BUCKET = "tenantml"
MOTO_CREDENTIALS = {
    "AWS_ACCESS_KEY_ID": "testing",
    "AWS_SECRET_ACCESS_KEY": "testing",
    "AWS_DEFAULT_REGION": "us-east-1",
}


# What every MLflow server started here gets (`up`, the screenshot script).
MLFLOW_SERVER_ENV = {"MLFLOW_SERVER_ENABLE_JOB_EXECUTION": "false"}


def free_port(host: str = "127.0.0.1") -> int:
    with socket.socket() as s:
        s.bind((host, 0))
        return int(s.getsockname()[1])


def _listen_address(listen: str) -> str:
    """`listen` if it is an IPv4 address of this machine; a clear error otherwise."""
    try:
        ipaddress.IPv4Address(listen)
        free_port(listen)
    except (ValueError, OSError):
        raise ValueError(
            f"listen={listen!r} is not an IPv4 address of this machine: give one of its "
            "addresses that the other nodes reach (`ip -4 addr`), e.g. 10.0.0.5"
        ) from None
    return listen


def executable(name: str) -> str:
    """`name` from this Python's environment, else from PATH; a clear error if neither has it."""
    here = Path(sys.executable).with_name(name)
    if here.exists():
        return str(here)
    found = shutil.which(name)
    if not found:
        raise FileNotFoundError(f"{name} not found: install tenantml with its [service] extra")
    return found


def _pg_bin(name: str) -> str:
    found = shutil.which(name) or next(
        (str(p) for p in sorted(Path("/usr/lib/postgresql").glob(f"*/bin/{name}"))), None
    )
    if not found:
        raise FileNotFoundError(
            f"{name} not found: install PostgreSQL (apt-get install postgresql)"
        )
    return found


@dataclass
class _Launcher:
    home: Path

    @property
    def dir(self) -> Path:
        return self.home / "servers"

    def start(self, name: str, cmd: list[str], env: dict[str, str] | None = None) -> int:
        (self.dir / "logs").mkdir(parents=True, exist_ok=True)
        log = open(self.dir / "logs" / f"{name}.log", "ab")  # noqa: SIM115 - the child owns it
        proc = subprocess.Popen(
            cmd,
            stdout=log,
            stderr=subprocess.STDOUT,
            env={**os.environ, **(env or {})},
            start_new_session=True,
            cwd=self.home,
        )
        self.pids()[name] = proc.pid
        self._save_pids()
        commands = self.commands()
        commands[name] = {"cmd": cmd, "env": env or {}}
        (self.dir / "commands.json").write_text(json.dumps(commands, indent=2))
        return proc.pid

    def commands(self) -> dict[str, dict[str, Any]]:
        """How each server was started (command and extra environment), for `restart`."""
        f = self.dir / "commands.json"
        return dict(json.loads(f.read_text())) if f.exists() else {}

    _pids: dict[str, int] | None = None

    def pids(self) -> dict[str, int]:
        if self._pids is None:
            f = self.dir / "pids.json"
            self._pids = json.loads(f.read_text()) if f.exists() else {}
        return self._pids

    def _save_pids(self) -> None:
        self.dir.mkdir(parents=True, exist_ok=True)
        (self.dir / "pids.json").write_text(json.dumps(self.pids(), indent=2))


def wait_http(url: str, timeout: float, what: str, pid: int, log: Path) -> None:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        try:
            os.kill(pid, 0)
        except ProcessLookupError:
            tail = log.read_text(errors="replace")[-2000:] if log.exists() else ""
            raise RuntimeError(
                f"{what} exited while starting; its log {log} ends:\n{tail}"
            ) from None
        try:
            with urllib.request.urlopen(url, timeout=2):
                return
        except OSError:
            time.sleep(0.3)
    raise TimeoutError(f"{what} not ready at {url} after {timeout:.0f} s; see {log}")


def up(
    home: Path,
    *,
    slots: int = 1,
    postgres: bool = False,
    s3_endpoint: str | None = None,
    timeout: float = 120.0,
    auth: bool = False,
    warm: bool | None = None,
    prefetch: int | None = None,
    listen: str | None = None,
) -> dict[str, Any]:
    """Start everything (see the module docstring); returns what ``servers.json`` holds.
    `warm`: start the node's warm process (`tenantml.ops.warm`) that flow runs fork from;
    without it every flow run is a new Python process, which spends several CPU-seconds on
    imports (the servers' tour in `make test`: 111 s cold, 71 s warm). Default (None): warm,
    unless `listen`: the runs' command names this machine's interpreter and the warm process
    is this node's, so other nodes' workers would start them cold anyway, through a path that
    need not exist there. `prefetch`: jobs the scheduler sends
    per slot beyond the running one (each waits, started, on the slot's lock; a slot's worker
    takes 1 + `prefetch` runs at once): more keeps a slot busy with jobs of a few seconds;
    default 1. `listen`: serve other nodes too (module docstring)."""
    home = home.resolve()
    if (home / "servers.json").exists():
        raise ValueError(f"servers are already up for {home}: `tenantml down` first")
    if slots < 1:
        raise ValueError(f"slots={slots} is not valid: use 1 or more")
    if prefetch is None:
        prefetch = 1
    if warm is None:
        warm = listen is None
    if prefetch < 0:
        raise ValueError(f"prefetch={prefetch} is not valid: use 0 or more")
    host = _listen_address(listen) if listen else "127.0.0.1"
    run = _Launcher(home)
    logs = run.dir / "logs"
    env: dict[str, str] = {}
    try:
        # 1. S3
        if s3_endpoint is None:
            port = free_port(host)
            pid = run.start("s3", [executable("moto_server"), "-H", host, "-p", str(port)])
            s3_endpoint = f"http://{host}:{port}"
            wait_http(s3_endpoint, timeout, "the S3 server (moto)", pid, logs / "s3.log")
            env.update(MOTO_CREDENTIALS)
        os.environ.update({k: v for k, v in env.items() if k not in os.environ})
        import boto3

        s3 = boto3.client("s3", endpoint_url=s3_endpoint)
        if BUCKET not in {b["Name"] for b in s3.list_buckets().get("Buckets", [])}:
            s3.create_bucket(Bucket=BUCKET)
        # 2. PostgreSQL
        mlflow_db = f"sqlite:///{run.dir / 'mlflow.db'}"
        prefect_db: str | None = None
        if postgres:
            mlflow_db, prefect_db = _start_postgres(run, timeout)
        # 3. MLflow
        port = free_port(host)
        tracking = f"http://{host}:{port}"
        mlflow_cmd = [
            executable("mlflow"),
            "server",
            "--backend-store-uri",
            mlflow_db,
            "--artifacts-destination",
            f"s3://{BUCKET}/mlflow",
            "--host",
            host,
            "--port",
            str(port),
            "--workers",
            "1",
        ]
        # MLflow 3's server otherwise starts its GenAI job runner: seven more processes (huey
        # consumers), each importing MLflow, for judges and prompt jobs this service never runs.
        mlflow_env = {"MLFLOW_S3_ENDPOINT_URL": s3_endpoint, **MLFLOW_SERVER_ENV}
        if auth:  # store._scoped: nobody sees anything without a grant
            mlflow_cmd += ["--app-name", "basic-auth"]
            auth_env, admin_password = _auth_config(run)
            mlflow_env.update(auth_env)
            env.update(
                {"MLFLOW_TRACKING_USERNAME": "admin", "MLFLOW_TRACKING_PASSWORD": admin_password}
            )
            os.environ.update({k: v for k, v in env.items() if k.startswith("MLFLOW_TRACKING")})
        pid = run.start("mlflow", mlflow_cmd, {**env, **mlflow_env})
        wait_http(f"{tracking}/health", timeout, "the MLflow server", pid, logs / "mlflow.log")
        # 4. Prefect
        port = free_port(host)
        api = f"http://{host}:{port}/api"
        pf_env = {
            "PREFECT_HOME": str(run.dir / "prefect"),
            "PREFECT_API_URL": api,
            "PREFECT_SERVER_ANALYTICS_ENABLED": "false",
            "DO_NOT_TRACK": "1",
        }
        if prefect_db:
            pf_env["PREFECT_API_DATABASE_CONNECTION_URL"] = prefect_db
        pid = run.start(
            "prefect",
            [executable("prefect"), "server", "start", "--host", host, "--port", str(port)],
            pf_env,
        )
        wait_http(f"{api}/health", timeout, "the Prefect server", pid, logs / "prefect.log")
        config = {
            "tracking_uri": tracking,
            "store": f"s3://{BUCKET}/store",
            "s3_endpoint_url": s3_endpoint,
            "prefect_api_url": api,
            "gpu_slots": slots,
            "prefetch_per_slot": prefetch,
            # One machine: the scheduler pins slot i's runs to GPU i. Serving other nodes: each
            # node's workers pin their own GPU, as on a cluster.
            "listen": listen,
            "pin_gpus": listen is None,
            # The command the scheduler gives its `train` runs (job variable): fork them from
            # the warm process; None: the pool's default, a new `python -m prefect.engine`.
            "flow_run_command": f"{PYTHON} -m tenantml.ops.warm run" if warm else None,
            "env": env,
            "postgres": postgres,
            "auth": auth,
        }
        (home / "servers.json").write_text(json.dumps(config, indent=2))
        worker_env = {
            **pf_env,
            **env,
            "TENANTML_HOME": str(home),
            "PREFECT_WORKER_QUERY_SECONDS": "1",
            "PREFECT_WORKER_PREFETCH_SECONDS": "1",
        }
        if warm:
            worker_env[SOCKET_ENV] = _start_warm(run, worker_env, timeout)
        for pool in ("gpu", "control"):
            create = [
                executable("prefect"),
                "--no-prompt",
                "work-pool",
                "create",
                pool,
                "--type",
                "process",
                "--overwrite",
            ]
            subprocess.run(
                create,
                env={**os.environ, **pf_env},
                check=True,
                capture_output=True,
                timeout=timeout,
            )
        # The deployments operators read about are the ones deployed: infra/prefect.yaml.
        deploy = [
            executable("prefect"),
            "--no-prompt",
            "deploy",
            "--all",
            "--prefect-file",
            str(ROOT / "infra" / "prefect.yaml"),
        ]
        subprocess.run(
            deploy,
            env={**os.environ, **worker_env, "TENANTML_ROOT": str(ROOT)},
            check=True,
            capture_output=True,
            timeout=timeout,
            cwd=ROOT,
        )
        _ensure_automations(api, {**os.environ, **pf_env}, timeout)
        # The scheduler deployment (started from the Prefect UI) runs on the pool `control`.
        run.start(
            "worker-control",
            [
                executable("prefect"),
                "worker",
                "start",
                "--pool",
                "control",
                "--limit",
                "1",
                "--name",
                "control",
            ],
            worker_env,
        )
        for i in range(slots):
            if listen:  # as on every node: the worker pins its GPU and holds its lock
                cmd, pinned = gpu_worker(i, home, prefetch, f"slot-{i}")
                run.start(f"worker-{i}", cmd, {**worker_env, **pinned})
                continue
            # --limit: the slot's running job plus the prefetched ones, waiting on its lock
            cmd = [
                executable("prefect"),
                "worker",
                "start",
                "--pool",
                "gpu",
                "--limit",
                str(1 + prefetch),
                "--name",
                f"slot-{i}",
            ]
            run.start(f"worker-{i}", cmd, worker_env)
        return config
    except BaseException:
        down(home)
        raise


AUTOMATIONS = ROOT / "infra" / "prefect-automations.yaml"


#: the temporary directory of a warm socket whose path under a long home would be too long
WARM_SOCKET_DIR_PREFIX = "tenantml-warm-"


def _remove_warm_socket_dir(run: _Launcher) -> None:
    """Remove the temporary directory `_start_warm` made for the warm socket of a long home
    (found in the recorded ``--socket`` argument; a socket under the home is left to it)."""
    cmd = run.commands().get("warm", {}).get("cmd", [])
    if "--socket" not in cmd[:-1]:
        return
    folder = Path(cmd[cmd.index("--socket") + 1]).parent
    if folder.name.startswith(WARM_SOCKET_DIR_PREFIX) and folder.parent == Path(
        tempfile.gettempdir()
    ):
        shutil.rmtree(folder, ignore_errors=True)


def _start_warm(run: _Launcher, env: dict[str, str], timeout: float) -> str:
    """Start the warm process flow runs fork from; its socket path once it listens."""
    path = run.dir / "warm.sock"
    if len(str(path)) > 100:  # a Unix socket's path is at most 107 bytes; `down` removes it
        path = Path(tempfile.mkdtemp(prefix=WARM_SOCKET_DIR_PREFIX)) / "warm.sock"
    path.unlink(missing_ok=True)
    cmd = [PYTHON, "-m", "tenantml.ops.warm", "serve", "--socket", str(path)]
    pid = run.start("warm", cmd, env)
    deadline = time.monotonic() + timeout
    while not path.exists():
        try:
            os.kill(pid, 0)
        except ProcessLookupError:
            log = (run.dir / "logs" / "warm.log").read_text(errors="replace")[-2000:]
            raise RuntimeError(
                f"the warm process exited while starting; its log ends:\n{log}"
            ) from None
        if time.monotonic() > deadline:
            raise TimeoutError(f"the warm process did not listen within {timeout:.0f} s")
        time.sleep(0.2)
    return str(path)


#: answers that say "try again shortly": a server busy (Prefect's SQLite database locked under
#: load answers 503) or a proxy in front of one restarting
RETRY_STATUS = (502, 503, 504)


def open_api(request: urllib.request.Request, timeout: float = 60.0) -> bytes:
    """The body of `request`'s answer; an answer in `RETRY_STATUS` is asked again on the
    service's outage backoff (`tasks.outage.Backoff`: 1, 2, 4 s, at most 5) until `timeout`
    seconds have passed, then raised. (`make test-full` saw `up`'s call to the Prefect API
    answered 503 once, on a machine busy with other work.)"""
    from tasks.outage import Backoff

    backoff = Backoff(timeout, cap_s=5.0)
    while True:
        try:
            with urllib.request.urlopen(request, timeout=timeout) as resp:
                body: bytes = resp.read()
                return body
        except urllib.error.HTTPError as e:
            delay = backoff.next_delay() if e.code in RETRY_STATUS else None
            if delay is None:
                raise
            time.sleep(delay)


def post_json(url: str, body: Any, timeout: float = 60.0) -> Any:
    """POST `body` as JSON to `url` (e.g. the Prefect API's ``/flow_runs/filter``); the answer
    (a busy server's 502/503/504 asked again for up to `timeout` seconds, `open_api`)."""
    request = urllib.request.Request(
        url, data=json.dumps(body).encode(), headers={"Content-Type": "application/json"}
    )
    return json.loads(open_api(request, timeout))


# On `up`'s process pools a run is Pending (the worker's "Submitting") only while its worker
# starts its process: seconds. A worker killed in that moment leaves it Pending, with no process
# to beat, forever (found by `tenantml chaos --nodes 2`). So there the rule's clock starts at
# Pending too, and Running ends that wait (a new one starts with it). Not in the file itself:
# on a Kubernetes pool a pod pulling its image or waiting for a GPU node is Pending for minutes.
PROCESS_POOL_AFTER = ("prefect.flow-run.Pending", "prefect.flow-run.Submitting")
PROCESS_POOL_EXPECT = ("prefect.flow-run.Running",)


def process_pool_automation() -> dict[str, Any]:
    """`AUTOMATIONS` as `up` creates it for its process pools: the clock starts at Pending too
    (`PROCESS_POOL_AFTER`)."""
    import yaml

    wanted: dict[str, Any] = yaml.safe_load(AUTOMATIONS.read_text())
    trigger = wanted["trigger"]
    trigger["after"] = [*trigger["after"], *PROCESS_POOL_AFTER]
    trigger["expect"] = [*trigger["expect"], *PROCESS_POOL_EXPECT]
    return wanted


def _ensure_automations(api: str, env: dict[str, str], timeout: float) -> None:
    """Create the automation `process_pool_automation` (zombie runs are CRASHED) unless the
    server has it already (a second `up` on the same home keeps Prefect's database). Others of
    the same name, made by an older tenantml with another trigger (or a second copy), are
    deleted."""
    import yaml

    wanted = process_pool_automation()
    current = False
    for existing in post_json(f"{api}/automations/filter", {}):
        if existing["name"] != wanted["name"]:
            continue
        if _same_trigger(existing["trigger"], wanted["trigger"]) and not current:
            current = True
            continue
        request = urllib.request.Request(f"{api}/automations/{existing['id']}", method="DELETE")
        open_api(request, timeout)
    if current:
        return
    with tempfile.TemporaryDirectory(prefix="tenantml-automation-") as tmp:
        path = Path(tmp) / "automation.yaml"
        path.write_text(yaml.safe_dump(wanted, sort_keys=False))
        create = [
            executable("prefect"),
            "--no-prompt",
            "automation",
            "create",
            "--from-file",
            str(path),
        ]
        subprocess.run(create, env=env, check=True, capture_output=True, timeout=timeout)


def _same_trigger(server: dict[str, Any], file: dict[str, Any]) -> bool:
    """Whether a trigger read back from the server is the one `AUTOMATIONS` declares (the
    fields we set: the events before and after, the window, the posture)."""
    return (
        set(server.get("after", [])) == set(file["after"])
        and set(server.get("expect", [])) == set(file["expect"])
        and float(server.get("within", 0)) == float(file["within"])
        and server.get("posture") == file["posture"]
    )


def _auth_config(run: _Launcher) -> tuple[dict[str, str], str]:
    """MLflow's basic-auth app: a config with NO_PERMISSIONS by default, its user database in
    the servers directory, and a fresh admin password (the operator's; in servers.json).
    Returns (the MLflow server's extra environment, the admin password)."""
    import secrets

    password = secrets.token_urlsafe(18)
    ini = run.dir / "mlflow-auth.ini"
    ini.write_text(
        "[mlflow]\ndefault_permission = NO_PERMISSIONS\n"
        f"database_uri = sqlite:///{run.dir / 'mlflow-auth.db'}\n"
        f"admin_username = admin\nadmin_password = {password}\n"
        "authorization_function = mlflow.server.auth:authenticate_request_basic_auth\n"
    )
    ini.chmod(0o600)
    server_env = {
        "MLFLOW_AUTH_CONFIG_PATH": str(ini),
        "MLFLOW_FLASK_SERVER_SECRET_KEY": secrets.token_hex(16),
    }
    return server_env, password


def _pg_dir(run: _Launcher) -> Path:
    """PostgreSQL's directory: under the home, or (as root, since initdb runs as the postgres
    user, who may not reach a private home) a directory of its own in /tmp, noted in the home."""
    note = run.dir / "pg-dir"
    if note.exists():
        return Path(note.read_text().strip())
    if os.geteuid() == 0:
        path = Path(tempfile.mkdtemp(prefix="tenantml-pg-"))
    else:
        path = run.dir / "pg"
        path.mkdir(parents=True, exist_ok=True)
    note.write_text(str(path))
    return path


def _start_postgres(run: _Launcher, timeout: float) -> tuple[str, str]:
    """A private PostgreSQL cluster; returns (MLflow URL, Prefect URL)."""
    data, sock = _pg_dir(run) / "data", _pg_dir(run) / "socket"
    sock.mkdir(parents=True, exist_ok=True)
    as_postgres: list[str] = []
    if os.geteuid() == 0:  # initdb refuses root; run it as postgres, in a dir postgres can reach
        import pwd

        pw = pwd.getpwnam("postgres")
        for p in (data.parent, sock):
            os.chown(p, pw.pw_uid, pw.pw_gid)
        as_postgres = ["runuser", "-u", "postgres", "--"]
    if not data.exists():
        initdb = [_pg_bin("initdb"), "-D", str(data), "-U", "tenantml", "--auth=trust"]
        subprocess.run([*as_postgres, *initdb], check=True, capture_output=True, timeout=timeout)
    port = free_port()
    subprocess.run(
        [
            *as_postgres,
            _pg_bin("pg_ctl"),
            "-D",
            str(data),
            "-l",
            str(data.parent / "postgres.log"),
            "-w",
            "-o",
            f"-c listen_addresses=127.0.0.1 -p {port} -k {sock}",
            "start",
        ],
        check=True,
        capture_output=True,
        timeout=timeout,
    )
    pid = int((data / "postmaster.pid").read_text().split()[0])
    run.pids()["postgres"] = pid
    run._save_pids()
    for db in ("mlflow", "prefect"):
        subprocess.run(
            [
                "psql",
                "-h",
                "127.0.0.1",
                "-p",
                str(port),
                "-U",
                "tenantml",
                "-d",
                "postgres",
                "-c",
                f"CREATE DATABASE {db}",
            ],
            check=True,
            capture_output=True,
            timeout=timeout,
        )
    base = f"tenantml@127.0.0.1:{port}"
    return f"postgresql+psycopg2://{base}/mlflow", f"postgresql+asyncpg://{base}/prefect"


def down(home: Path) -> list[str]:
    """Stop every server `up` started for `home`, by PID; returns what was stopped."""
    run = _Launcher(home.resolve())
    stopped = []
    # Workers first (they talk to Prefect), then the warm process (a SIGTERM to its group ends
    # the runs forked from it while the servers can still hear of it), PostgreSQL last.
    order = sorted(
        run.pids(), key=lambda n: (not n.startswith("worker"), n != "warm", n == "postgres")
    )
    for name in order:
        if name == "postgres":  # a daemon of its own: pg_ctl stops it cleanly
            _stop_postgres(run)
            stopped.append(name)
        elif stop_pid(run.pids()[name]):
            if name == "warm":  # its forked runs, in its group, end on that SIGTERM too
                _wait_for_group(run.pids()[name])
            stopped.append(name)
    _remove_warm_socket_dir(run)
    run.pids().clear()
    run._save_pids()
    (home / "servers.json").unlink(missing_ok=True)
    return stopped


def _wait_for_group(pgid: int, timeout: float = 10.0) -> None:
    """Wait until process group `pgid` is empty (its leader may be gone before its members);
    SIGKILL what is left after `timeout` seconds."""
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        try:
            os.killpg(pgid, 0)
        except (ProcessLookupError, PermissionError):
            return
        time.sleep(0.1)
    with contextlib.suppress(ProcessLookupError):
        os.killpg(pgid, signal.SIGKILL)


def stop(home: Path, name: str) -> bool:
    """Stop one server `up` started (``s3``, ``mlflow``, ``prefect``, ``worker-0``, ...), by PID,
    as an outage or a crash would; `restart` brings it back on the same port."""
    run = _Launcher(home.resolve())
    if name not in run.pids():
        raise ValueError(f"no server {name!r} for {home}; running: {', '.join(sorted(run.pids()))}")
    return stop_pid(run.pids()[name])


def restart(home: Path, name: str, timeout: float = 120.0) -> int:
    """Start server `name` again with the command and port `up` gave it; returns its PID."""
    run = _Launcher(home.resolve())
    commands = run.commands()
    if name not in commands:
        raise ValueError(f"no server {name!r} for {home}; known: {', '.join(sorted(commands))}")
    if name in run.pids():
        stop_pid(run.pids()[name])  # a crashed server's PID is gone already: a no-op then
    cmd = commands[name]["cmd"]
    pid = run.start(name, cmd, commands[name]["env"])
    health = {
        "mlflow": ("--host", "--port", "/health"),
        "prefect": ("--host", "--port", "/api/health"),
        "s3": ("-H", "-p", ""),
    }
    if name in health:
        host, port, path = health[name]
        url = f"http://{cmd[cmd.index(host) + 1]}:{cmd[cmd.index(port) + 1]}{path}"
        wait_http(url, timeout, f"the {name} server", pid, run.dir / "logs" / f"{name}.log")
    return pid


def gpu_worker(
    gpu: int, home: Path, prefetch: int, name: str, pool: str = "gpu"
) -> tuple[list[str], dict[str, str]]:
    """A process worker for GPU `gpu` of a node whose ``TENANTML_HOME`` is `home`: its command,
    and the variables it adds to the node's environment.

    It takes 1 + `prefetch` runs of pool `pool` at once, all on its GPU
    (``CUDA_VISIBLE_DEVICES``); each run holds the GPU's lock file on this node
    (`tasks.settings.GPU_LOCK_ENV`) while it trains, so the prefetched ones wait there, started
    and warm. No lock is shared between nodes: a run only waits for runs of its own worker.
    """
    if gpu < 0:
        raise ValueError(f"gpu={gpu} is not valid: use a CUDA device index, 0 or more")
    if prefetch < 0:
        raise ValueError(f"prefetch={prefetch} is not valid: use 0 or more")
    cmd = [executable("prefect"), "worker", "start", "--pool", pool, "--limit",
           str(1 + prefetch), "--name", name]  # fmt: skip
    env = {"CUDA_VISIBLE_DEVICES": str(gpu), GPU_LOCK_ENV: str(home / "slots" / f"gpu-{gpu}.lock")}
    return cmd, env


def node_env(home: Path) -> dict[str, str]:
    """The settings by environment that another node's processes need to join the servers `up`
    started with `listen` for `home` (``infra/k8s/README.md``, step 4): the MLflow, Prefect and
    S3 URLs, the store, and the credentials `up` made (the bundled S3 server's dummy keys, the
    operator's MLflow login with ``--auth``). No path of this machine is in it."""
    cfg_file = home.resolve() / "servers.json"
    if not cfg_file.exists():
        raise ValueError(f"no servers are up for {home}: `tenantml up --listen ADDR` first")
    cfg = json.loads(cfg_file.read_text())
    if not cfg.get("listen"):
        raise ValueError(
            f"the servers of {home} listen on 127.0.0.1 only, which other nodes cannot reach: "
            "`tenantml down`, then `tenantml up --listen ADDR` with an address they reach"
        )
    return {
        "TENANTML_TRACKING_URI": cfg["tracking_uri"],
        "TENANTML_STORE": cfg["store"],
        "TENANTML_S3_ENDPOINT_URL": cfg["s3_endpoint_url"],
        "PREFECT_API_URL": cfg["prefect_api_url"],
        "TENANTML_PREFETCH_PER_SLOT": str(cfg.get("prefetch_per_slot", WORKER_PREFETCH_PER_SLOT)),
        **cfg.get("env", {}),
    }


def _stop_postgres(run: _Launcher) -> None:
    as_postgres = ["runuser", "-u", "postgres", "--"] if os.geteuid() == 0 else []
    pg = _pg_dir(run)
    subprocess.run(
        [*as_postgres, _pg_bin("pg_ctl"), "-D", str(pg / "data"), "-m", "fast", "-w", "stop"],
        capture_output=True,
        timeout=60,
    )
    if os.geteuid() == 0 and pg.parent == Path(tempfile.gettempdir()):
        shutil.rmtree(pg, ignore_errors=True)
        (run.dir / "pg-dir").unlink(missing_ok=True)


def flow_processes(**env: str) -> list[int]:
    """PIDs of the Prefect flow-run processes (a process worker's children: ``prefect.engine``,
    or ``tenantml.ops.warm run``, whose forked child lives and dies with it) whose environment
    holds every ``NAME=value`` of `env`, e.g. ``PREFECT__FLOW_RUN_ID=<id>`` or
    ``TENANTML_HOME=<home>``. Reads Linux's /proc; processes of other users are skipped."""
    want = [f"{k}={v}".encode() for k, v in env.items()]
    pids = []
    for proc in Path("/proc").iterdir():
        if not proc.name.isdigit():
            continue
        try:
            cmdline = (proc / "cmdline").read_bytes()
            environ = (proc / "environ").read_bytes().split(b"\0")
        except OSError:
            continue
        is_flow_run = b"prefect.engine" in cmdline or b"tenantml.ops.warm\0run" in cmdline
        if is_flow_run and all(w in environ for w in want):
            pids.append(int(proc.name))
    return pids


def stop_pid(pid: int, timeout: float = 10.0) -> bool:
    """TERM, then INT, then KILL the process group of `pid` (or `pid` alone when it leads no
    group: a process started without a session of its own); True once it is gone."""
    for sig in (signal.SIGTERM, signal.SIGINT, signal.SIGKILL):
        try:
            os.killpg(pid, sig)
        except ProcessLookupError:  # no such group: gone, or a process in its parent's group
            try:
                os.kill(pid, sig)
            except ProcessLookupError:
                return True
        except PermissionError:
            os.kill(pid, sig)
        deadline = time.monotonic() + timeout / 3
        while time.monotonic() < deadline:
            try:
                os.kill(pid, 0)
            except ProcessLookupError:
                return True
            try:  # reap our own children so they do not linger as zombies
                if os.waitpid(pid, os.WNOHANG)[0] == pid:
                    return True
            except ChildProcessError:
                pass
            time.sleep(0.1)
    return False
