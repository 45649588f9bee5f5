"""Screenshots of what a user sees in the MLflow and Prefect UIs, taken with headless Chromium.

    python infra/scripts/screenshots.py [--home H] [--out docs/img]

On an embedded home `H` (default: a new one, filled by ``tenantml demo``), this starts the MLflow
UI on the home's SQLite store and a Prefect server on the home's Prefect database, both on
127.0.0.1 with free ports, and saves:

* ``mlflow-runs.png``: a tenant's runs table as `mlflow_plugin.tracking.runs_page` links it (the
  model-training view, the saved view with ``accuracy`` and ``cost_s`` as the first columns);
* ``mlflow-loss.png``: the scheduler run's ``loss.png`` (every tenant's loss estimate and the
  total over ticks);
* ``prefect-runs.png``: the Prefect UI's flow runs (the scheduler and its ``train`` runs).

Both servers are stopped by PID at the end. Needs Chromium (Debian package ``chromium``; set
``CHROMIUM`` for another binary). The README shows two of these pictures.
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import subprocess
import sys
import tempfile
import urllib.request
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT))

from mlflow_plugin.tracking import SCHEDULER_EXPERIMENT as SCHEDULER  # noqa: E402
from mlflow_plugin.tracking import runs_page  # noqa: E402
from tenantml.ops.servers import (  # noqa: E402
    MLFLOW_SERVER_ENV,
    executable,
    free_port,
    stop_pid,
    wait_http,
)

# As the environment notes advise for this machine's closed network: no background connections.
CHROMIUM_FLAGS = (
    "--headless",
    "--no-sandbox",
    "--disable-gpu",
    "--disable-quic",
    "--no-first-run",
    "--disable-background-networking",
    "--disable-component-update",
    "--disable-sync",
    "--hide-scrollbars",
    "--window-size=1800,1000",
    "--virtual-time-budget=15000",
)


@contextmanager
def _server(name: str, cmd: list[str], env: dict[str, str], url: str, logs: Path) -> Iterator[str]:
    """Run `cmd` (a server answering at `url`) for the block; stopped by PID afterwards."""
    log = logs / f"{name}.log"
    with open(log, "wb") as f:
        proc = subprocess.Popen(
            cmd, env=env, stdout=f, stderr=subprocess.STDOUT, start_new_session=True
        )
    try:
        wait_http(url, 180, name, proc.pid, log)
        yield url
    finally:
        stop_pid(proc.pid)


def _get(url: str) -> dict[str, object]:
    with urllib.request.urlopen(url, timeout=30) as r:
        return dict(json.loads(r.read()))


def _post(url: str, body: dict[str, object]) -> dict[str, object]:
    req = urllib.request.Request(
        url, json.dumps(body).encode(), headers={"Content-Type": "application/json"}
    )
    with urllib.request.urlopen(req, timeout=30) as r:
        return dict(json.loads(r.read()))


def shoot(chromium: str, url: str, png: Path) -> None:
    """One screenshot of `url` into `png` (a fresh profile each time)."""
    with tempfile.TemporaryDirectory(prefix="tenantml-chromium-") as profile:
        cmd = [chromium, *CHROMIUM_FLAGS, f"--user-data-dir={profile}", f"--screenshot={png}", url]
        subprocess.run(cmd, check=True, capture_output=True, timeout=180)
    if not png.exists() or png.stat().st_size == 0:
        raise RuntimeError(f"chromium wrote no picture of {url}")
    print(f"{png}  <- {url}")


def _pages(mlflow: str) -> dict[str, str]:
    """The MLflow pages to take: a tenant experiment's runs and the scheduler's loss picture
    (found through MLflow's REST API)."""
    api = f"{mlflow}/api/2.0/mlflow"
    exps = _post(f"{api}/experiments/search", {"max_results": 100}).get("experiments", [])
    by_name = {str(e["name"]): str(e["experiment_id"]) for e in exps}  # type: ignore[index]
    tenants = sorted(n for n in by_name if n.startswith("tenantml/") and n != SCHEDULER)
    if not tenants or SCHEDULER not in by_name:
        raise RuntimeError(f"no tenant or scheduler experiment in {sorted(by_name)}: run the demo")
    tenant = by_name[tenants[0]]
    sched = _post(
        f"{api}/runs/search",
        {"experiment_ids": [by_name[SCHEDULER]], "order_by": ["start_time DESC"], "max_results": 1},
    )["runs"]
    sched_run = sched[0]["info"]["run_id"]  # type: ignore[index]
    sched_exp = by_name[SCHEDULER]
    training = "?workflowType=machine_learning"
    return {
        "mlflow-runs": runs_page(mlflow, tenant),
        "mlflow-loss": f"{mlflow}/#/experiments/{sched_exp}/runs/{sched_run}/artifacts/loss.png"
        + training,
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--home", type=Path, help="an embedded home (default: a new demo home)")
    parser.add_argument("--out", type=Path, default=ROOT / "docs" / "img")
    args = parser.parse_args()
    chromium = (
        os.environ.get("CHROMIUM") or shutil.which("chromium") or shutil.which("chromium-browser")
    )
    if not chromium:
        raise SystemExit("needs Chromium: apt-get install chromium (or set CHROMIUM)")
    args.out.mkdir(parents=True, exist_ok=True)
    with tempfile.TemporaryDirectory(prefix="tenantml-shots-") as tmp:
        home = args.home or Path(tmp) / "home"
        if not (home / "mlflow.db").exists():
            subprocess.run([executable("tenantml"), "demo", "--home", str(home)], check=True)
        logs = Path(tmp)
        mport, pport = free_port(), free_port()
        prefect_api = f"http://127.0.0.1:{pport}/api"  # the UI asks the API here, not at :4200
        env = {**os.environ, **MLFLOW_SERVER_ENV, "PREFECT_HOME": str(home / "prefect")}
        env.update({"PREFECT_API_URL": prefect_api, "PREFECT_UI_API_URL": prefect_api})
        store = f"sqlite:///{home / 'mlflow.db'}"
        mlflow_cmd = [executable("mlflow"), "server", "--host", "127.0.0.1", "--port", str(mport)]
        mlflow_cmd += ["--backend-store-uri", store, "--workers", "1"]
        prefect_cmd = [
            executable("prefect"),
            "server",
            "start",
            "--host",
            "127.0.0.1",
            "--port",
            str(pport),
        ]
        with (
            _server("mlflow", mlflow_cmd, env, f"http://127.0.0.1:{mport}/health", logs) as mlflow,
            _server("prefect", prefect_cmd, env, f"http://127.0.0.1:{pport}/api/health", logs) as _,
        ):
            mlflow = mlflow.removesuffix("/health")
            for name, url in _pages(mlflow).items():
                shoot(chromium, url, args.out / f"{name}.png")
            shoot(chromium, f"http://127.0.0.1:{pport}/runs", args.out / "prefect-runs.png")


if __name__ == "__main__":
    main()
