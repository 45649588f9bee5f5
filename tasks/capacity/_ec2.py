"""AWS EC2 spot capacity through boto3 (any endpoint: AWS, or moto_server in the tests).

``request`` places a one-time spot request with a maximum price in a zone and returns the
instance id once fulfilled; ``spot_price`` reads ``describe_spot_price_history``; ``terminate``
ends the instance and its request. On the instance, the two-minute notice is the metadata
endpoint ``/latest/meta-data/spot/instance-action`` (404 until AWS schedules the interruption);
:func:`instance_action` polls it, and a worker that sees it calls
:func:`trainers.preemption.notify` so the trainer checkpoints to S3 and exits.
"""

from __future__ import annotations

import json
import time
import urllib.error
import urllib.request
from typing import Any

__all__ = ["IMDS_URL", "Ec2Backend", "instance_action"]

IMDS_URL = "http://169.254.169.254"


def instance_action(base_url: str = IMDS_URL, timeout: float = 1.0) -> dict[str, Any] | None:
    """The pending interruption (``{"action": "terminate", "time": ...}``) or None."""
    url = f"{base_url}/latest/meta-data/spot/instance-action"
    try:
        with urllib.request.urlopen(url, timeout=timeout) as r:
            data: dict[str, Any] = json.loads(r.read().decode())
            return data
    except urllib.error.HTTPError as e:
        if e.code == 404:
            return None
        raise


class Ec2Backend:
    """Spot instances for training workers. ``client``: a boto3 EC2 client."""

    def __init__(self, client: Any, image_id: str, *, user_data: str = "") -> None:
        self.client = client
        self.image_id = image_id
        self.user_data = user_data

    def spot_price(self, instance_type: str, zone: str) -> float:
        """The latest spot price (USD/hour) of ``instance_type`` in ``zone``."""
        page = self.client.describe_spot_price_history(
            InstanceTypes=[instance_type],
            AvailabilityZone=zone,
            ProductDescriptions=["Linux/UNIX"],
            MaxResults=10,
        )
        history = page.get("SpotPriceHistory", [])
        if not history:
            raise LookupError(f"no spot price for {instance_type} in {zone}")
        latest = max(history, key=lambda h: h["Timestamp"])
        return float(latest["SpotPrice"])

    def request(
        self, instance_type: str, zone: str, max_price: float, timeout_s: float = 60.0
    ) -> tuple[str, str]:
        """Place a spot request; returns ``(request id, instance id)`` once fulfilled."""
        spec: dict[str, Any] = {
            "ImageId": self.image_id,
            "InstanceType": instance_type,
            "Placement": {"AvailabilityZone": zone},
        }
        if self.user_data:
            spec["UserData"] = self.user_data
        resp = self.client.request_spot_instances(
            SpotPrice=f"{max_price:.5f}",
            InstanceCount=1,
            Type="one-time",
            LaunchSpecification=spec,
        )
        req_id = resp["SpotInstanceRequests"][0]["SpotInstanceRequestId"]
        deadline = time.monotonic() + timeout_s
        while True:
            req = self.client.describe_spot_instance_requests(SpotInstanceRequestIds=[req_id])
            r = req["SpotInstanceRequests"][0]
            if r.get("InstanceId"):
                return req_id, str(r["InstanceId"])
            if r.get("State") in ("cancelled", "failed", "closed"):
                raise RuntimeError(f"spot request {req_id} {r['State']}: {r.get('Status')}")
            if time.monotonic() > deadline:
                raise TimeoutError(f"spot request {req_id} not fulfilled in {timeout_s:g} s")
            time.sleep(1.0)

    def terminate(self, request_id: str, instance_id: str) -> None:
        self.client.cancel_spot_instance_requests(SpotInstanceRequestIds=[request_id])
        self.client.terminate_instances(InstanceIds=[instance_id])
