"""A second machine on this one: a node in a Linux network namespace, to test the pool across
machines (`tenantml chaos --nodes 2`, ``tests/faults/test_nodes.py``).

Node A is this machine as it is: it runs the servers (`servers.up` with ``listen`` = the link's
address) and the scheduler. Node B is made of

* a **link** (`Link`): a network namespace with a veth pair, this machine's end holding
  `Link.address` (the servers listen there) and the namespace's end `Link.node_address`;
  nothing else of the host's network is reachable from it;
* its **own empty working directory** (`Node.workdir`, its ``TENANTML_HOME`` and ``HOME``);
* a **mount namespace** per process in which node A's home (servers.json, its store, logs,
  slot locks) is covered by an empty read-only tmpfs, and a UTS namespace with its own host name
  (`Node.name`: the ``tenantml.node`` tag of the job runs it trains);
* **only the settings by environment** of ``infra/k8s/README.md`` (`servers.node_env`): every
  job it runs reads its examples and writes its checkpoints and model through S3 and MLflow.

The code (this checkout and its virtual environment) is shared, as an image would be on a
cluster. `Node.lose` is the loss of the whole machine: every process in its namespace gets
SIGKILL at once and its working directory is deleted; `Node.start_worker` brings it back
empty. Needs Linux, root (network namespaces), ``ip`` (iproute2) and ``unshare`` (util-linux):
`unavailable` says what is missing.
"""

from __future__ import annotations

import ipaddress
import os
import random
import shlex
import shutil
import signal
import subprocess
import sys
import tempfile
import time
from dataclasses import dataclass, field
from pathlib import Path

__all__ = ["Link", "Node", "create_link", "remove_link", "unavailable"]

# Point-to-point /30 networks for links are drawn from here (private, rarely used).
_LINK_POOL = ipaddress.IPv4Network("10.231.0.0/16")


def unavailable() -> str | None:
    """Why nodes cannot be made on this machine, or None when they can."""
    if sys.platform != "linux":
        return "network namespaces need Linux"
    if os.geteuid() != 0:
        return "network namespaces need root (ip netns add)"
    for tool in ("ip", "unshare", "mount"):
        if shutil.which(tool) is None:
            return f"{tool} is not installed (iproute2, util-linux)"
    return None


def _ip(*args: str) -> str:
    out = subprocess.run(["ip", *args], capture_output=True, text=True, timeout=30)
    if out.returncode != 0:
        raise RuntimeError(f"ip {' '.join(args)} failed: {out.stderr.strip()}")
    return out.stdout


@dataclass(frozen=True)
class Link:
    """A network namespace joined to this machine by a veth pair (module docstring)."""

    netns: str
    host_if: str  # the veth end on this machine
    address: str  # this machine's address on the link: where node A's servers listen
    node_address: str  # the node's address


def create_link(rng: random.Random | None = None) -> Link:
    """A new namespace and veth pair on a free /30 of 10.231.0.0/16; `remove_link` undoes it."""
    reason = unavailable()
    if reason:
        raise RuntimeError(f"cannot make a node here: {reason}")
    rng = rng or random.Random()
    used = _ip("-4", "-o", "addr")
    namespaces = _ip("netns", "list")
    nets = list(_LINK_POOL.subnets(new_prefix=30))
    for _ in range(100):
        i = rng.randrange(len(nets))
        net = nets[i]
        host, node = (str(a) for a in net.hosts())
        netns, host_if = f"tml-node-{i}", f"tmlv{i}"
        if f" {host}/" in used or netns in namespaces:
            continue
        _ip("netns", "add", netns)
        try:
            _ip("link", "add", host_if, "type", "veth", "peer", "name", "eth0", "netns", netns)
            _ip("addr", "add", f"{host}/30", "dev", host_if)
            _ip("link", "set", host_if, "up")
            for args in (
                ("addr", "add", f"{node}/30", "dev", "eth0"),
                ("link", "set", "eth0", "up"),
                ("link", "set", "lo", "up"),
            ):
                _ip("netns", "exec", netns, "ip", *args)
        except BaseException:
            remove_link(Link(netns, host_if, host, node))
            raise
        return Link(netns, host_if, host, node)
    raise RuntimeError("no free /30 in 10.231.0.0/16 for a node's link")


def _netns_pids(netns: str) -> list[int]:
    out = subprocess.run(["ip", "netns", "pids", netns], capture_output=True, text=True)
    return [int(p) for p in out.stdout.split()]


def remove_link(link: Link) -> None:
    """Kill what still runs in the namespace, then delete it and its veth pair."""
    for pid in _netns_pids(link.netns):
        try:
            os.kill(pid, signal.SIGKILL)
        except ProcessLookupError:
            pass
    subprocess.run(["ip", "netns", "del", link.netns], capture_output=True)
    subprocess.run(["ip", "link", "del", link.host_if], capture_output=True)


@dataclass
class Node:
    """A machine on `link` named `name`, seeing none of `hidden` (node A's home), with the
    settings `env` (`servers.node_env`) and its own `workdir` (made empty if missing); its
    processes' output goes to `log_dir` (on node A, to read after a loss)."""

    name: str
    link: Link
    env: dict[str, str]
    hidden: tuple[Path, ...]
    log_dir: Path
    workdir: Path = field(default_factory=lambda: Path(tempfile.mkdtemp(prefix="tenantml-node-")))
    _procs: list[subprocess.Popen[bytes]] = field(default_factory=list, init=False, repr=False)

    def __post_init__(self) -> None:
        for h in self.hidden:
            if self.workdir.resolve().is_relative_to(h.resolve()):
                raise ValueError(f"the node's workdir {self.workdir} is inside hidden {h}")

    @property
    def home(self) -> Path:
        """The node's ``TENANTML_HOME``, inside its working directory."""
        return self.workdir / "tenantml"

    def command(self, argv: list[str]) -> list[str]:
        """`argv` as run on the node: in its network, mount and UTS namespaces, in `workdir`."""
        hide = " && ".join(
            f"mount -t tmpfs -o ro,size=4k tenantml-hidden {shlex.quote(str(h))}"
            for h in self.hidden
        )
        script = (
            f"hostname {shlex.quote(self.name)} && {hide or 'true'} && "
            f'cd {shlex.quote(str(self.workdir))} && exec "$@"'
        )
        return [
            "ip",
            "netns",
            "exec",
            self.link.netns,
            "unshare",
            "--mount",
            "--uts",
            "--propagation",
            "private",
            "--",
            "sh",
            "-c",
            script,
            self.name,
            *argv,
        ]

    def environment(self) -> dict[str, str]:
        """What a process on the node gets: a clean environment, the node's own directories, the
        settings `env` (no variable of node A's processes)."""
        return {
            "PATH": os.environ.get("PATH", "/usr/bin:/bin"),
            "LANG": os.environ.get("LANG", "C.UTF-8"),
            "HOME": str(self.workdir),
            "TENANTML_HOME": str(self.home),
            "PREFECT_HOME": str(self.workdir / "prefect"),
            "PREFECT_SERVER_ANALYTICS_ENABLED": "false",
            "DO_NOT_TRACK": "1",
            "PREFECT_WORKER_QUERY_SECONDS": "1",
            "PREFECT_WORKER_PREFETCH_SECONDS": "1",
            **self.env,
        }

    def run(self, argv: list[str], timeout: float = 120) -> subprocess.CompletedProcess[str]:
        """Run `argv` on the node and wait for it (e.g. to look at what it can see)."""
        self.workdir.mkdir(parents=True, exist_ok=True)
        return subprocess.run(
            self.command(argv),
            env=self.environment(),
            capture_output=True,
            text=True,
            timeout=timeout,
        )

    def start_worker(self, gpu: int = 0, pool: str = "gpu") -> int:
        """Start the node's worker for its GPU `gpu` on pool `pool` as an operator would,
        ``tenantml worker`` with the node's settings (`servers.gpu_worker`: it takes 1 + the
        installation's prefetch runs, which wait on that GPU's lock in the node's own
        directory); returns its PID. Makes `workdir` again if a loss deleted it."""
        self.workdir.mkdir(parents=True, exist_ok=True)
        self.log_dir.mkdir(parents=True, exist_ok=True)
        name = f"{self.name}-{gpu}"
        argv = [sys.executable, "-m", "tenantml.cli", "worker", "--gpu", str(gpu), "--pool", pool,
                "--name", name]  # fmt: skip
        with open(self.log_dir / f"{name}.log", "ab") as log:
            proc = subprocess.Popen(
                self.command(argv),
                env=self.environment(),
                stdout=log,
                stderr=subprocess.STDOUT,
                start_new_session=True,
            )
        self._procs.append(proc)
        return proc.pid

    def pids(self) -> list[int]:
        """Every process running on the node (in its network namespace)."""
        return _netns_pids(self.link.netns)

    def lose(self) -> int:
        """The whole machine is lost: SIGKILL every process on it at once, then delete its
        working directory (its disk). Returns how many processes were killed."""
        pids = self.pids()
        for pid in pids:
            try:
                os.kill(pid, signal.SIGKILL)
            except ProcessLookupError:
                pass
        deadline = time.monotonic() + 10
        while self.pids() and time.monotonic() < deadline:
            time.sleep(0.05)
        for proc in self._procs:  # reap the ones this process started
            proc.poll()
        self._procs = [p for p in self._procs if p.returncode is None]
        shutil.rmtree(self.workdir, ignore_errors=True)
        return len(pids)

    def remove(self) -> None:
        """Lose the node for good: its processes, directory and link."""
        self.lose()
        remove_link(self.link)
