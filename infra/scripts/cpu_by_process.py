"""CPU seconds of a command and of every process it starts, grouped by what each process is.

Where a test's or a benchmark's time goes when most of it is spent in other processes (servers,
Prefect workers, one flow-run process per job): run the command, sample ``/proc/<pid>/stat`` of
its descendants every `--every` seconds, and print the CPU seconds (user + system) of each
group when it ends. A process that lives less than one interval may be missed, and one's last
fraction of an interval is not counted: the figures are a lower bound, good to a few per cent.
A daemon that leaves the command's tree (PostgreSQL, started by ``pg_ctl``) is not counted.

    python infra/scripts/cpu_by_process.py -- .venv/bin/python -m pytest \\
        tests/integration/test_servers.py -k three_tenants
"""

from __future__ import annotations

import argparse
import os
import subprocess
import sys
import time
from collections import Counter
from pathlib import Path

# what a process is, from its command line: the first pattern found names its group
GROUPS = (
    ("prefect.engine", "flow-run process (one per job run)"),
    ("_workspace_supervisor", "flow-run process (one per job run)"),
    ("prefect server start", "Prefect server"),
    ("prefect.server", "Prefect server"),  # the embedded one: uvicorn on Prefect's app
    ("prefect worker start", "Prefect worker"),
    ("uvicorn", "MLflow server (uvicorn)"),
    ("mlflow server", "MLflow server (uvicorn)"),
    ("prefect --no-prompt", "Prefect commands (deploy, work pools, automations)"),
    ("postgres", "PostgreSQL"),
    ("moto_server", "S3 server (moto)"),
    ("tenantml.cli", "tenantml CLI and SDK clients"),  # also matches "tenantml.client"
    ("pytest", "pytest"),
)


def _stat(pid: int) -> tuple[int, float, str] | None:
    """(parent pid, CPU seconds, command line) of `pid`, or None once it has ended."""
    try:
        stat = Path(f"/proc/{pid}/stat").read_text()
        cmdline = Path(f"/proc/{pid}/cmdline").read_bytes().replace(b"\0", b" ").decode()
    except OSError:
        return None
    fields = stat.rsplit(")", 1)[1].split()
    ticks = os.sysconf("SC_CLK_TCK")
    return int(fields[1]), (int(fields[11]) + int(fields[12])) / ticks, cmdline.strip()


def group_of(cmdline: str) -> str:
    """The group a process with `cmdline` counts in (`GROUPS`, else "other")."""
    return next((name for pattern, name in GROUPS if pattern in cmdline), "other")


def sample(root: int, seen: dict[int, tuple[float, str]]) -> None:
    """Record in `seen` the CPU seconds so far of `root` and each of its descendants alive now
    (a process whose parent has ended and was adopted by init is lost from then on)."""
    procs = {}
    for entry in os.listdir("/proc"):
        if entry.isdigit() and (info := _stat(int(entry))) is not None:
            procs[int(entry)] = info
    ours = {root}
    grew = True
    while grew:
        new = {pid for pid, (ppid, _, _) in procs.items() if ppid in ours} - ours
        ours |= new
        grew = bool(new)
    for pid in ours & procs.keys():
        _, cpu, cmdline = procs[pid]
        seen[pid] = (max(cpu, seen.get(pid, (0.0, ""))[0]), cmdline or seen.get(pid, (0, ""))[1])


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--every", type=float, default=0.5, help="seconds between samples")
    parser.add_argument("command", nargs=argparse.REMAINDER, help="-- COMMAND ...")
    args = parser.parse_args()
    command = args.command[1:] if args.command[:1] == ["--"] else args.command
    if not command:
        parser.error("give the command to measure after --")
    started = time.monotonic()
    proc = subprocess.Popen(command)
    seen: dict[int, tuple[float, str]] = {}
    while proc.poll() is None:
        sample(proc.pid, seen)
        time.sleep(args.every)
    wall = time.monotonic() - started
    by_group: Counter[str] = Counter()
    count: Counter[str] = Counter()
    for cpu, cmdline in seen.values():
        by_group[group_of(cmdline)] += cpu
        count[group_of(cmdline)] += 1
    print(f"{'CPU s':>8}  {'procs':>5}  group", file=sys.stderr)
    for name, cpu in by_group.most_common():
        print(f"{cpu:8.1f}  {count[name]:5d}  {name}", file=sys.stderr)
    total = sum(by_group.values())
    print(f"{total:8.1f}  {len(seen):5d}  in all, over {wall:.0f} s of wall clock", file=sys.stderr)
    return proc.returncode


if __name__ == "__main__":
    sys.exit(main())
