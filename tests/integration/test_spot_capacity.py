"""Transient capacity for real: workers revoked on a replayed price trace checkpoint to a real
S3-compatible server on the notice and resume elsewhere; EC2 spot calls against moto_server;
the instance-action notice over HTTP."""

from __future__ import annotations

import http.server
import json
import os
import threading
import uuid
from collections.abc import Iterator
from pathlib import Path

import boto3
import numpy as np
import pytest

from policy.spot import Market
from tenantml import datasets
from tests.servers import S3Server

pytestmark = pytest.mark.slow


@pytest.fixture()
def s3_home(s3: S3Server, tmp_path: Path) -> Iterator[dict[str, str]]:
    bucket = f"spot-{uuid.uuid4().hex[:8]}"
    boto3.client("s3", endpoint_url=s3.endpoint_url).create_bucket(Bucket=bucket)
    env = {"TENANTML_HOME": str(tmp_path), "TENANTML_STORE": f"s3://{bucket}/store",
           "TENANTML_S3_ENDPOINT_URL": s3.endpoint_url}  # fmt: skip
    old = {k: os.environ.get(k) for k in env}
    os.environ.update(env)
    yield env
    for k, v in old.items():
        if v is None:
            os.environ.pop(k, None)
        else:
            os.environ[k] = v


#: long enough that an attempt cannot finish between two notices (8 s apart) on a fast, idle
#: machine: 300 epochs (7,500 steps) once took under 8 s there and met no notice
EPOCHS = 500


def _volatile_market(minutes: int = 4000) -> Market:
    """Price 0.05, with a spike every 8 minutes: a worker is noticed every few seconds."""
    prices = np.full(minutes, 0.05)
    for s in range(6, minutes, 8):
        prices[s : s + 2] = 1.0
    changed = np.r_[False, np.diff(prices) != 0]
    return Market("local-a", "cpu.small", prices, changed, 0.0, 1, 0, 0.1)


@pytest.mark.full
def test_revoked_workers_checkpoint_to_s3_and_resume(s3_home: dict[str, str]) -> None:
    from tasks.capacity import LocalBackend, run_jobs
    from tasks.settings import Settings

    store = Settings.load().apply().store()
    d = datasets.load("digits")
    store.create_tenant("digits", d.schema)
    store.feed("digits", d.inputs[:500], d.labels[:500])
    # 500 epochs (12,500 steps) and a notice every 8 s: on one thread (tests/conftest.py) a job
    # trains 500-1,000 steps a second, and 20 epochs ended before the first notice
    jobs = [{"tenant": "digits", "candidate": "lenet", "job_id": f"spot-{i}", "max_epochs": EPOCHS,
             "hyperparameters": {"lr": 0.01, "batch_size": 16, "augment": False}, "seed": i}
            for i in range(2)]  # fmt: skip
    backend = LocalBackend([_volatile_market()], start=0, seconds_per_minute=1.0, env=s3_home)
    reports = run_jobs(jobs, backend, max_price_delta=0.01, timeout_s=600)
    assert all(r.finished for r in reports)
    preempted = [a for r in reports for a in r.attempts
                 if a.report.get("status") == "preempted" and "steps" in a.report]  # fmt: skip
    assert len(preempted) >= 2, [[(a.exit_code, a.report) for a in r.attempts] for r in reports]
    for r in reports:
        assert r.lost_steps == 0, [(a.exit_code, a.report) for a in r.attempts]  # resumed exactly
        final = r.attempts[-1].report
        assert final["status"] == "finished" and final["accuracy"] > 0.5
        # the resumed run did the same number of steps an uninterrupted one does
        assert final["steps"] == EPOCHS * int(np.ceil(400 / 16))
    for a in preempted:  # a notice while training: checkpoint written within the window
        assert a.report["steps"] >= a.report["start_steps"]
        assert a.report["checkpoint_s"] < 2 * backend.spm


def test_ec2_spot_requests_against_moto(s3: S3Server) -> None:
    from tasks.capacity import Ec2Backend

    ec2 = boto3.client("ec2", endpoint_url=s3.endpoint_url, region_name="us-east-1")
    image = ec2.describe_images()["Images"][0]["ImageId"]
    backend = Ec2Backend(ec2, image)
    price = backend.spot_price("m3.medium", "us-east-1a")
    assert price > 0
    req, inst = backend.request("m3.medium", "us-east-1a", price + 0.01, timeout_s=30)
    desc = ec2.describe_spot_instance_requests(SpotInstanceRequestIds=[req])
    r = desc["SpotInstanceRequests"][0]
    assert float(r["SpotPrice"]) == pytest.approx(price + 0.01, abs=1e-5)
    assert r["LaunchSpecification"]["InstanceType"] == "m3.medium"
    backend.terminate(req, inst)
    state = ec2.describe_instances(InstanceIds=[inst])["Reservations"][0]["Instances"][0]
    assert state["State"]["Name"] in ("shutting-down", "terminated")


class _Imds(http.server.BaseHTTPRequestHandler):
    action: dict[str, str] | None = None

    def do_GET(self) -> None:  # noqa: N802
        if self.path == "/latest/meta-data/spot/instance-action" and self.action:
            body = json.dumps(self.action).encode()
            self.send_response(200)
            self.end_headers()
            self.wfile.write(body)
        else:
            self.send_response(404)
            self.end_headers()

    def log_message(self, *args: object) -> None:
        return None


def test_instance_action_notice_over_http() -> None:
    from tasks.capacity import instance_action

    server = http.server.HTTPServer(("127.0.0.1", 0), _Imds)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    url = f"http://127.0.0.1:{server.server_port}"
    try:
        assert instance_action(url) is None
        _Imds.action = {"action": "terminate", "time": "2026-11-22T10:00:00Z"}
        assert instance_action(url) == _Imds.action
    finally:
        server.shutdown()
