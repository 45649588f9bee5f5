"""Where a tenantml installation keeps its state, and how it reaches its servers.

Everything of one installation lives under ``TENANTML_HOME`` (default ``~/.tenantml``), so
several installations (and tests) coexist. Two modes, same code:

* **embedded** (default, no servers): MLflow on ``sqlite:////<home>/mlflow.db`` with artifacts in
  ``<home>/mlruns``; the example store in ``<home>/store``; Prefect ephemeral with
  ``PREFECT_HOME=<home>/prefect``; training jobs run in-process, one thread per slot.
* **servers**: ``tenantml up`` writes ``<home>/servers.json`` with the URLs of the Prefect
  server, MLflow server and S3 endpoint it started; training jobs go to the Prefect work pool
  ``gpu``. Environment variables override either: ``TENANTML_TRACKING_URI``,
  ``TENANTML_STORE`` (``file:///abs/dir`` or ``s3://bucket/prefix``), ``TENANTML_S3_ENDPOINT_URL``,
  ``PREFECT_API_URL``, ``TENANTML_GPU_SLOTS``, ``TENANTML_PREFETCH_PER_SLOT``, ``TENANTML_POLICY``.

A GPU worker of a node (`tenantml worker`, `GPU_LOCK_ENV`): ``TENANTML_GPU_LOCK``, the lock file
on that node that its runs hold while they train, so a prefetched run waits there, warm.

Spot capacity: ``TENANTML_CAPACITY_PRICES`` (``"gpu=0.65,cpu=0.21"``, expected USD per hour of
the instances torch and scikit-learn models run on) makes the scheduler's costs dollars
(`tasks._service.capacity_prices`).

A tenant's identity (``tenantml up --auth``, see `store._scoped`): ``TENANTML_USER`` and
``TENANTML_PASSWORD``.
"""

from __future__ import annotations

import contextlib
import json
import os
import shutil
import sys
import threading
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Literal

from store import ExampleStore, open_store

__all__ = [
    "GPU_LOCK_ENV",
    "WORKER_PREFETCH_PER_SLOT",
    "InstallationBusyError",
    "Settings",
    "ServerUnreachableError",
    "copy_if_absent",
    "mlflow_client_defaults",
    "user_cache",
    "write_atomically",
]

Mode = Literal["embedded", "servers"]

# Set by a node's GPU worker (`tenantml.ops.servers.gpu_worker`): the lock file of its GPU on
# that node. A run whose spec carries no slot lock holds this one while it trains.
GPU_LOCK_ENV = "TENANTML_GPU_LOCK"
#: runs sent per slot beyond its running one to GPU workers, when the installation gives none
#: (`Settings.prefetch_for`; `tenantml node-env` hands it to another node's workers)
WORKER_PREFETCH_PER_SLOT = 1


def user_cache() -> Path:
    """Where this machine's user keeps what any installation can rebuild but should not have
    to on every new home (Prefect's template database, the shipped prior's fit):
    ``$XDG_CACHE_HOME/tenantml``, by default ``~/.cache/tenantml``."""
    cache = os.environ.get("XDG_CACHE_HOME") or str(Path.home() / ".cache")
    return Path(cache) / "tenantml"


def write_atomically(write: Callable[[Path], object], dest: Path) -> None:
    """Run ``write(tmp)`` on a file beside `dest`, then move it onto `dest` in one step: a reader
    sees the old file or the whole new one (two processes may race to write the same one). The
    temporary file never stays behind, whatever `write` raised."""
    tmp = dest.with_name(f".{dest.name}.{os.getpid()}.{threading.get_ident()}.tmp")
    try:
        write(tmp)
        os.replace(tmp, dest)
    finally:
        with contextlib.suppress(OSError):  # moved, never written, or no directory to hold it
            tmp.unlink(missing_ok=True)


def copy_if_absent(source: Path, dest: Path) -> bool:
    """Copy `source` to `dest` unless `dest` exists, in one step that never replaces it (a
    hard link of a full copy: another process may have created and opened `dest` meanwhile).
    Returns whether it was copied (not where `dest` exists, nor where the file system has no
    hard links, nor on any other error of the file system: the caller then goes without)."""
    tmp = dest.with_name(f".{dest.name}.{os.getpid()}.{threading.get_ident()}.seed")
    try:
        dest.parent.mkdir(parents=True, exist_ok=True)
        shutil.copyfile(source, tmp)
        os.link(tmp, dest)
    except OSError:  # FileExistsError among them
        return False
    finally:
        with contextlib.suppress(OSError):
            tmp.unlink(missing_ok=True)
    return True


class ServerUnreachableError(RuntimeError):
    """A configured server does not answer; the message says which and how to start it."""


_NVIDIA_DRIVER = Path("/proc/driver/nvidia/gpus")  # one entry per GPU where the driver runs


def _cuda_devices() -> int:
    visible = os.environ.get("CUDA_VISIBLE_DEVICES")
    if visible is not None:
        return len([d for d in visible.split(",") if d.strip()])
    if sys.platform == "linux" and not _NVIDIA_DRIVER.exists():
        return 0  # no NVIDIA driver: no CUDA device, and no 3-s import of torch to say so
    try:
        import torch

        return int(torch.cuda.device_count())
    except ImportError:
        return 0


@dataclass(frozen=True)
class Settings:
    home: Path
    mode: Mode
    tracking_uri: str
    artifact_location: str | None
    store_url: str
    s3_endpoint_url: str | None
    prefect_api_url: str | None
    slots: int  # TENANTML_GPU_SLOTS or servers.json; 0: one per CUDA device
    policy_given: str | None  # TENANTML_POLICY
    server_env: tuple[tuple[str, str], ...] = ()
    # one machine (`tenantml up`): slot i runs on GPU i; with other nodes (`up --listen`, a
    # cluster) each node's workers pin their own GPUs
    pin_gpus: bool = False
    # Jobs sent per slot beyond its running one, each waiting warm on a GPU's lock (one machine:
    # the slot's lock file; other nodes: the lock of the GPU whose worker took it, `GPU_LOCK_ENV`):
    # `tenantml up --prefetch` or TENANTML_PREFETCH_PER_SLOT; GPU workers take 1 + this many runs.
    # None: not given, `prefetch_for` decides.
    prefetch_per_slot: int | None = None
    flow_run_command: str | None = None  # `tenantml up` (not --cold): train runs fork, warm
    # A tenant's identity (`store._scoped`): MLflow credentials, and a store confined to it.
    user: str | None = None
    password: str | None = None
    capacity_prices: str | None = None  # TENANTML_CAPACITY_PRICES, as given

    @classmethod
    def load(cls, home: str | Path | None = None) -> Settings:
        root = Path(home or os.environ.get("TENANTML_HOME") or Path.home() / ".tenantml")
        root = root.expanduser().resolve()
        servers: dict[str, Any] = {}
        if (root / "servers.json").exists():
            try:
                servers = json.loads((root / "servers.json").read_text())
            except ValueError as e:  # a damaged file: its path, not only the decoder's words
                raise ValueError(
                    f"{root / 'servers.json'} is not valid JSON ({e}): `tenantml down` then "
                    "`tenantml up` writes it again"
                ) from None
        env = os.environ.get
        # Servers: `tenantml up` on this machine, or a cluster's Prefect API in the environment.
        api_url = _users_own("PREFECT_API_URL")  # not another installation's, applied here
        mode: Mode = "servers" if servers or api_url else "embedded"
        slots_env = env("TENANTML_GPU_SLOTS") or servers.get("gpu_slots")
        slots = int(slots_env) if slots_env else 0  # 0: one per CUDA device, counted on use
        if slots_env and slots < 1:
            raise ValueError(f"TENANTML_GPU_SLOTS={slots_env!r} is not valid: use 1 or more")
        prefetch_env = env("TENANTML_PREFETCH_PER_SLOT") or servers.get("prefetch_per_slot")
        prefetch = None if prefetch_env is None else str(prefetch_env)
        if prefetch is not None and not prefetch.isdigit():
            raise ValueError(
                f"TENANTML_PREFETCH_PER_SLOT={prefetch_env!r} is not valid: use 0 or more"
            )
        return cls(
            home=root,
            mode=mode,
            tracking_uri=env("TENANTML_TRACKING_URI")
            or servers.get("tracking_uri")
            or f"sqlite:///{root / 'mlflow.db'}",
            artifact_location=None if servers else (root / "mlruns").as_uri(),
            store_url=env("TENANTML_STORE") or servers.get("store") or (root / "store").as_uri(),
            s3_endpoint_url=env("TENANTML_S3_ENDPOINT_URL") or servers.get("s3_endpoint_url"),
            prefect_api_url=api_url or servers.get("prefect_api_url"),
            slots=slots,
            policy_given=env("TENANTML_POLICY") or None,
            server_env=tuple(sorted(servers.get("env", {}).items())),
            pin_gpus=bool(servers) and bool(servers.get("pin_gpus", True)),
            prefetch_per_slot=None if prefetch is None else int(prefetch),
            flow_run_command=servers.get("flow_run_command"),
            user=env("TENANTML_USER") or None,
            password=env("TENANTML_PASSWORD") or None,
            capacity_prices=env("TENANTML_CAPACITY_PRICES") or None,
        )

    @property
    def policy(self) -> str:
        """TENANTML_POLICY, else `policy.DEFAULT_POLICY`."""
        from policy import DEFAULT_POLICY

        return self.policy_given or DEFAULT_POLICY

    def prefetch_for(self, local: bool) -> int:
        """Runs sent per slot beyond its running one: the installation's `prefetch_per_slot`
        when given; else 1 for runs that GPU workers take (a flow run's process starts while the
        slot is still busy) and 0 for runs trained in the scheduler's own process (``local``):
        there a run starts in a thread in about 0.5 s, and a run sent ahead is a run decided
        one run earlier, on older results. Measured on `bench-live real` (120 s, one slot,
        three splits, side by side): the default policy's test-regret AUC 0.0634 with one run
        sent ahead, 0.0570 with none (docs/live.md, "In the scheduler's own process, no run is
        sent ahead")."""
        if self.prefetch_per_slot is not None:
            return self.prefetch_per_slot
        return 0 if local else WORKER_PREFETCH_PER_SLOT

    @property
    def tracking_in_home(self) -> bool:
        """MLflow's store is the home's own database (the embedded default, not a store that
        ``TENANTML_TRACKING_URI`` names, which other homes may share)."""
        return self.tracking_uri == f"sqlite:///{self.home / 'mlflow.db'}"

    @property
    def gpu_slots(self) -> int:
        """G: the slots given, else one per visible CUDA device (at least 1); counting devices
        imports torch where an NVIDIA driver runs, so only the scheduler asks."""
        return self.slots or max(1, _cuda_devices())

    def prefect_env(self) -> dict[str, str]:
        """What Prefect needs in the environment, set before Prefect is imported."""
        env = {
            "PREFECT_HOME": str(self.home / "prefect"),
            "PREFECT_SERVER_EPHEMERAL_STARTUP_TIMEOUT_SECONDS": "90",
            "PREFECT_SERVER_ANALYTICS_ENABLED": "false",
            "DO_NOT_TRACK": "1",
            "PREFECT_LOGGING_LEVEL": os.environ.get("PREFECT_LOGGING_LEVEL", "WARNING"),
        }
        if self.prefect_api_url:
            env["PREFECT_API_URL"] = self.prefect_api_url
            # A scheduler started here beats like the deployed flows: the server crashes runs
            # of ours silent for 120 s (infra/prefect-automations.yaml).
            env["PREFECT_FLOWS_HEARTBEAT_FREQUENCY"] = "30"
        return env

    def apply(self) -> Settings:
        """Export this installation's settings to the process (Prefect, MLflow, boto3).

        What an earlier `apply` in this process exported for another installation (a second
        home's `Client` in a notebook) and this one does not set goes back to what it was
        before: an embedded home applied after a home on servers does not keep its Prefect
        API, and the operator applied after a tenant's identity does not keep its
        credentials.

        Raises:
            InstallationBusyError: a scheduler or SEER job of another installation (or
                identity) runs in this process (`in_use`): its jobs read this environment.
        """
        global _APPLIED
        self.home.mkdir(parents=True, exist_ok=True)
        exported = {
            **self.prefect_env(),
            "TENANTML_HOME": str(self.home),
            "MLFLOW_TRACKING_URI": self.tracking_uri,
        }
        if self.s3_endpoint_url:
            exported["MLFLOW_S3_ENDPOINT_URL"] = self.s3_endpoint_url
        with _EXPORT_LOCK:
            busy = next((b for b in _IN_USE if (b.home, b.user) != (self.home, self.user)), None)
            if busy is not None:
                raise InstallationBusyError(
                    f"the scheduler of {busy.home} runs in this process, and its jobs read the "
                    f"process's environment: use {self.home} once it has ended, or from "
                    "another process"
                )
            previous = _APPLIED
            for k, v in self.server_env:  # e.g. the bundled S3 server's dummy credentials, and
                if _users_own(k) is None:  # the operator's MLflow credentials (`up --auth`),
                    exported[k] = v  # unless the user's environment gives them
            if self.user:  # a tenant's identity replaces the operator's
                exported["MLFLOW_TRACKING_USERNAME"] = self.user
                exported["MLFLOW_TRACKING_PASSWORD"] = self.password or ""
            _export(exported)
            _APPLIED = self
        if self.tracking_uri.startswith("sqlite:///"):  # embedded; a new home: from the template
            from tasks.tracking_template import seed_from_template

            seed_from_template(self.tracking_uri)
        mlflow_client_defaults()
        if "prefect" in sys.modules:  # Prefect read its settings when first imported: re-read
            # them, still naming the embedded server this process runs (not in the environment)
            from tasks.prefect_start import drain_prefect_senders, refresh_prefect_settings

            if previous is not None and (previous.home, previous.prefect_api_url) != (
                self.home,
                self.prefect_api_url,
            ):  # Prefect's events and logs held for the other installation's server go there
                drain_prefect_senders()
            refresh_prefect_settings()
        return self

    @contextlib.contextmanager
    def in_use(self) -> Iterator[Settings]:
        """Applied, and kept so while the block runs (a scheduler or SEER job in this process,
        whose job threads read the environment): applying another installation meanwhile
        raises `InstallationBusyError` instead of switching the jobs to its home. Nests."""
        with _EXPORT_LOCK:
            self.ensure_applied()
            _IN_USE.append(self)
        try:
            yield self
        finally:
            with _EXPORT_LOCK:
                _IN_USE.remove(self)

    def ensure_applied(self) -> Settings:
        """`apply`, unless these settings are the ones this process applied last: for a caller
        that reads the process's environment (MLflow's model loading and credentials, the
        scheduler flow's settings) after another installation's may have been applied, or the
        environment changed since."""
        env = os.environ
        if (
            _APPLIED != self
            or env.get("TENANTML_HOME") != str(self.home)
            or env.get("MLFLOW_TRACKING_URI") != self.tracking_uri
        ):
            self.apply()
        return self

    def store(self) -> ExampleStore:
        """The example store this installation uses."""
        return open_store(self.store_url, s3_endpoint_url=self.s3_endpoint_url)

    @staticmethod
    def resolve_home(home: str | Path | None = None) -> Path:
        """`home`, else ``TENANTML_HOME``, else ``~/.tenantml``, made absolute as `load` makes
        it; reads nothing else (no servers.json, no GPU count), for commands that need only it."""
        root = Path(home or os.environ.get("TENANTML_HOME") or Path.home() / ".tenantml")
        return root.expanduser().resolve()


# What `Settings.apply` exported to this process's environment (name -> value), what each of
# those variables was before the first export (None: unset), and the settings applied last.
_EXPORTED: dict[str, str] = {}
_BEFORE: dict[str, str | None] = {}
_APPLIED: Settings | None = None
_EXPORT_LOCK = threading.RLock()
# The settings of the schedulers and SEER jobs running in this process (`Settings.in_use`).
_IN_USE: list[Settings] = []


class InstallationBusyError(RuntimeError):
    """Another installation's scheduler runs in this process (`Settings.in_use`)."""


def _users_own(name: str) -> str | None:
    """The environment variable `name` as this process's user gave it: its value before
    `Settings.apply` exported it, where it still holds the exported value."""
    with _EXPORT_LOCK:
        value = os.environ.get(name)
        if name in _EXPORTED and value == _EXPORTED[name]:
            return _BEFORE.get(name)
        return value


def _export(variables: dict[str, str]) -> None:
    """Set `variables` in the environment; put back, as they were before, the ones an earlier
    export set and `variables` does not (unless changed since by someone else)."""
    for name in [n for n in _EXPORTED if n not in variables]:
        if os.environ.get(name) == _EXPORTED.pop(name):
            before = _BEFORE.pop(name, None)
            if before is None:
                os.environ.pop(name, None)
            else:
                os.environ[name] = before
        else:
            _BEFORE.pop(name, None)
    for name, value in variables.items():
        now = os.environ.get(name)
        if name not in _EXPORTED or now != _EXPORTED[name]:  # new, or the user's since
            _BEFORE[name] = now
        os.environ[name] = value
        _EXPORTED[name] = value


def mlflow_client_defaults() -> None:
    """MLflow's client settings this project's processes use unless the environment sets them:
    no artifact progress bars, and a tracking server that is down answers within seconds (two
    retries, 20 s per request) rather than after MLflow's default minutes of retries."""
    os.environ.setdefault("MLFLOW_ENABLE_ARTIFACTS_PROGRESS_BAR", "false")
    os.environ.setdefault("MLFLOW_HTTP_REQUEST_MAX_RETRIES", "2")
    os.environ.setdefault("MLFLOW_HTTP_REQUEST_TIMEOUT", "20")
