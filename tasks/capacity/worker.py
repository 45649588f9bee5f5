"""A training worker on transient capacity: ``python -m tasks.capacity.worker SPEC.json``.

Trains one `trainers.TrainJob` (the spec's fields) from its checkpoint in the store, with
SIGTERM as the revocation notice (:mod:`trainers.preemption`). Writes ``SPEC.json.result`` with
what this attempt did and exits 0 (finished) or 75 (preempted, checkpoint written).
"""

from __future__ import annotations

import signal
import sys
import time


# A notice that comes while Python still imports torch and loads data: nothing has been trained
# in this attempt, so answer at once (exit 75 with a report) instead of being killed mid-import.
def _early_notice(signum: int, frame: object) -> None:
    import json as _json
    import os as _os

    with open(sys.argv[1] + ".result", "w") as f:
        _json.dump({"status": "preempted", "before_training": True}, f)
    _os._exit(75)


signal.signal(signal.SIGTERM, _early_notice)

import json  # noqa: E402

from trainers import preemption  # noqa: E402

__all__ = ["main"]


def main(argv: list[str]) -> int:
    started = time.perf_counter()
    spec_path = argv[0]
    with open(spec_path) as f:
        spec = json.load(f)
    from tasks.settings import Settings
    from trainers import TrainJob, train

    store = Settings.load().apply().store()
    job = TrainJob(**spec["job"])
    snapshot = job.snapshot if job.snapshot is not None else store.manifest(job.tenant).version
    before = _steps_in_checkpoint(store, job.tenant, job.resolved_id(snapshot))
    preemption.install()  # from here on the trainer answers a notice with a checkpoint
    setup_s = time.perf_counter() - started
    report: dict[str, object] = {"start_steps": before, "setup_s": setup_s}
    if preemption.pending():  # the notice came while starting: nothing to save
        report.update(
            status="preempted", steps=before, checkpoint_s=0.0, wall_s=time.perf_counter() - started
        )
        with open(spec_path + ".result", "w") as f:
            json.dump(report, f)
        return preemption.PREEMPTED_EXIT
    try:
        result = train(job, store)
    except preemption.Preempted as e:
        report.update(
            status="preempted",
            steps=e.steps,
            checkpoint_s=e.checkpoint_s,
            wall_s=time.perf_counter() - started,
        )
        code = preemption.PREEMPTED_EXIT
    else:
        report.update(
            status="finished",
            steps=result.steps,
            accuracy=result.accuracy,
            epochs=result.epochs,
            wall_s=time.perf_counter() - started,
        )
        code = 0
    with open(spec_path + ".result", "w") as f:
        json.dump(report, f)
    return code


def _steps_in_checkpoint(store: object, tenant: str, job_id: str) -> int:
    import io

    import torch

    blob = store.get_checkpoint(tenant, job_id)  # type: ignore[attr-defined]
    if blob is None:
        return 0
    saved = torch.load(io.BytesIO(blob), weights_only=True, map_location="cpu")
    return int(saved.get("steps_total", 0))


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
