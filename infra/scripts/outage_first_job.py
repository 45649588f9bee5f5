"""How soon a scheduler started during an MLflow outage trains once MLflow is back (issue 20).

    python infra/scripts/outage_first_job.py [--outage-s 60] [--out results/outage-first-job]

Starts real servers on loopback (`tenantml up`, one slot) in a temporary home, submits and feeds
the wine tenant, stops the MLflow server, starts ``tenantml run --ticks 1`` and, `--outage-s`
later, brings MLflow back on its port. Prints and saves (``outage.json``) the seconds from
MLflow's return to the scheduler's first "dispatched" line and to its first "finished" line.
Target (issue 20): the first job trains within 30 s of the outage's end.
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import tempfile
import threading
import time
from pathlib import Path

from tenantml.ops.servers import down, restart, stop, up

_FEED = """
from tenantml.client import Client
from tenantml import datasets
c = Client()
d = datasets.load("wine")
c.submit("wine", d.schema)
c.feed("wine", d.inputs, d.labels)
"""


def measure(home: Path, outage_s: float) -> dict[str, float | None]:
    env = {**os.environ, "TENANTML_HOME": str(home)}
    subprocess.run([sys.executable, "-c", _FEED], env=env, check=True, timeout=300)
    assert stop(home, "mlflow")
    cmd = [sys.executable, "-m", "tenantml.cli", "run", "--ticks", "1", "--slots", "1"]
    proc = subprocess.Popen(cmd, env=env, stdout=subprocess.PIPE, stderr=subprocess.STDOUT,
                            text=True)  # fmt: skip
    seen: dict[str, float] = {}
    lines: list[str] = []

    def read() -> None:
        assert proc.stdout is not None
        for line in proc.stdout:
            lines.append(line)
            for word in ("dispatched", "finished"):
                if word in line and word not in seen:
                    seen[word] = time.monotonic()

    reader = threading.Thread(target=read, daemon=True)
    reader.start()
    time.sleep(outage_s)
    restart(home, "mlflow")
    back = time.monotonic()
    proc.wait(timeout=600)
    reader.join(timeout=10)
    if proc.returncode != 0:
        raise RuntimeError("tenantml run failed:\n" + "".join(lines[-40:]))
    waited = sum("is unreachable; retry" in line for line in lines)
    return {
        "outage_s": outage_s,
        "dispatched_after_s": seen["dispatched"] - back if "dispatched" in seen else None,
        "finished_after_s": seen["finished"] - back if "finished" in seen else None,
        "wait_lines": float(waited),
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--outage-s", type=float, default=60.0)
    parser.add_argument("--out", type=Path, default=Path("results/outage-first-job"))
    args = parser.parse_args()
    with tempfile.TemporaryDirectory(prefix="tenantml-outage-") as tmp:
        home = Path(tmp)
        up(home, slots=1)
        try:
            result = measure(home, args.outage_s)
        finally:
            down(home)
    args.out.mkdir(parents=True, exist_ok=True)
    (args.out / "outage.json").write_text(json.dumps(result, indent=2) + "\n")
    print(
        f"MLflow down {result['outage_s']:.0f} s while `tenantml run` started: first job "
        f"dispatched {result['dispatched_after_s']:.1f} s and finished "
        f"{result['finished_after_s']:.1f} s after MLflow was back ({result['wait_lines']:.0f} "
        "wait lines; target: training within 30 s)"
    )


if __name__ == "__main__":
    main()
