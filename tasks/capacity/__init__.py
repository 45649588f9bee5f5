"""Transient capacity for training jobs (SpotTune, shared/papers/004): where jobs run, how a
revocation notice reaches them, and the loop that re-queues a revoked job so that it resumes
from the checkpoint it wrote on the notice.

- :class:`LocalBackend`: replays a real spot price trace on this machine; workers are processes;
  a notice is SIGTERM, the revocation SIGKILL after the notice window.
- :class:`Ec2Backend`: AWS EC2 spot requests with a maximum price through boto3; the notice is
  the instance-action metadata endpoint (:func:`instance_action`).
- :func:`run_jobs`: SpotTune's provisioning loop (Alg. 1 lines 15-46) over a backend.
"""

from typing import Any

__all__ = [
    "Attempt",
    "Ec2Backend",
    "JobReport",
    "LocalBackend",
    "LocalInstance",
    "instance_action",
    "run_jobs",
]

_WHERE = {
    "Ec2Backend": "_ec2",
    "instance_action": "_ec2",
    "LocalBackend": "_local",
    "LocalInstance": "_local",
    "Attempt": "runner",
    "JobReport": "runner",
    "run_jobs": "runner",
}


def __getattr__(name: str) -> Any:
    # Lazy: `python -m tasks.capacity.worker` must install its SIGTERM handler before any
    # heavy import (the package is imported first).
    if name not in _WHERE:
        raise AttributeError(name)
    import importlib

    return getattr(importlib.import_module(f"tasks.capacity.{_WHERE[name]}"), name)
