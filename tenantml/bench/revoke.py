"""``tenantml spot revoke-bench``: jobs on revocable local capacity replaying a real price trace,
checkpointing to a real S3-compatible server (moto, started on loopback and stopped by PID).

Each round runs ``jobs`` LeNet jobs on digits through :func:`tasks.capacity.run_jobs` on the
most volatile market of the carried 2015 trace, maximum price = price + ``delta``, until at least
``revocations`` notices have been delivered. Reported: jobs finished, notices, work lost per job
(steps an attempt did that the next one did not start from), attempts killed without answering,
the checkpoint write time after a notice, the restart time (process start, imports, data and
checkpoint restore) and both as a share of training time (SpotTune reports < 10%).
"""

from __future__ import annotations

import os
import subprocess
import tempfile
import uuid
from collections.abc import Callable
from pathlib import Path
from typing import Any

import numpy as np

__all__ = ["revoke_bench"]


def revoke_bench(
    *,
    revocations: int = 20,
    jobs: int = 4,
    epochs: int = 20,
    seconds_per_minute: float = 3.0,
    delta: float = 1e-5,
    max_rounds: int = 10,
    on_step: Callable[[], None] | None = None,
) -> dict[str, Any]:
    """Rounds of ``jobs`` jobs on the replayed trace (module docstring) until ``revocations``
    notices have been delivered or ``max_rounds`` rounds have run; the figures.

    ``on_step``: called once per notice delivered, after the round that delivered it, up to
    ``revocations`` times in all (fewer if ``max_rounds`` runs out first)."""
    import boto3

    from tasks.capacity import LocalBackend, run_jobs
    from tasks.settings import Settings
    from tenantml import datasets
    from tenantml.bench.spot_data import load_markets
    from tenantml.ops.servers import executable, free_port, stop_pid, wait_http

    home = Path(tempfile.mkdtemp(prefix="tenantml-revoke-"))
    port = free_port()
    log = home / "moto.log"
    with open(log, "wb") as out:
        proc = subprocess.Popen(
            [executable("moto_server"), "-H", "127.0.0.1", "-p", str(port)],
            stdout=out,
            stderr=subprocess.STDOUT,
            start_new_session=True,  # its own group, which `stop_pid` stops
        )
    url = f"http://127.0.0.1:{port}"
    try:
        wait_http(url, 30, "moto S3 server", proc.pid, log)
        creds = {
            "AWS_ACCESS_KEY_ID": "testing",
            "AWS_SECRET_ACCESS_KEY": "testing",
            "AWS_DEFAULT_REGION": "us-east-1",
        }
        os.environ.update({k: os.environ.get(k, v) for k, v in creds.items()})
        bucket = f"revoke-{uuid.uuid4().hex[:8]}"
        boto3.client("s3", endpoint_url=url).create_bucket(Bucket=bucket)
        env = {
            "TENANTML_HOME": str(home),
            "TENANTML_STORE": f"s3://{bucket}/store",
            "TENANTML_S3_ENDPOINT_URL": url,
            **creds,
        }
        os.environ.update(env)
        store = Settings.load(home).apply().store()
        d = datasets.load("digits")
        store.create_tenant("digits", d.schema)
        store.feed("digits", d.inputs[:500], d.labels[:500])
        markets = load_markets("2015-08-01", "2015-08-31")
        market = max(markets, key=lambda m: int(m.changed.sum()))
        reports = []
        noticed = 0
        start = 60
        for rnd in range(max_rounds):
            specs = [
                {
                    "tenant": "digits",
                    "candidate": "lenet",
                    "job_id": f"r{rnd}-j{i}",
                    "max_epochs": epochs,
                    "hyperparameters": {"lr": 0.01, "batch_size": 16},
                    "seed": i,
                }
                for i in range(jobs)
            ]
            backend = LocalBackend(
                [market], start=start, seconds_per_minute=seconds_per_minute, env=env
            )
            got = run_jobs(specs, backend, max_price_delta=delta, timeout_s=1800)
            reports += got
            start = backend.minute() + 1
            before = noticed
            noticed = sum(1 for r in reports for a in r.attempts if a.noticed)
            if on_step is not None:
                for _ in range(min(noticed, revocations) - min(before, revocations)):
                    on_step()
            if noticed >= revocations:
                break
    finally:
        stop_pid(proc.pid)
    attempts = [a for r in reports for a in r.attempts]
    reported = [a.report for a in attempts if "steps" in a.report]
    ckpt = [
        float(r["checkpoint_s"])
        for r in reported
        if r.get("status") == "preempted" and int(r["steps"]) > int(r["start_steps"])
    ]
    restarts = [float(r["setup_s"]) for r in reported if int(r["start_steps"]) > 0]
    train_s = sum(max(0.0, float(r["wall_s"]) - float(r["setup_s"])) for r in reported)
    return {
        "market": market.name,
        "jobs": len(reports),
        "finished": sum(r.finished for r in reports),
        "notices": noticed,
        "preempted_with_checkpoint": len(ckpt),
        "noticed_before_training": sum(1 for a in attempts if a.report.get("before_training")),
        "killed_without_answer": sum(r.hard_kills for r in reports),
        "max_lost_steps_per_job": max((r.lost_steps for r in reports), default=0),
        "steps_per_job": epochs * 25,
        "checkpoint_s_mean": float(np.mean(ckpt)) if ckpt else 0.0,
        "checkpoint_s_max": float(np.max(ckpt)) if ckpt else 0.0,
        "restart_s_mean": float(np.mean(restarts)) if restarts else 0.0,
        "training_s": train_s,
        "checkpoint_share": float(sum(ckpt)) / train_s if train_s else 0.0,
        "restart_share": float(sum(restarts)) / train_s if train_s else 0.0,
        "notice_window_s": 2 * seconds_per_minute,
    }
