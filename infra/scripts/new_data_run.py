"""What feeding more data does to a tenant that has tried every model (docs/live.md, "New
data"): wine is fed 100 examples in a fresh embedded home, the scheduler runs until all of its
candidates were tried, then the other 78 are fed and it runs again. Prints the served model
before the feed, the first jobs on the new snapshot, and every version ``best`` moved to.

Run from the repository root (about a minute on two cores):
``python infra/scripts/new_data_run.py [--ticks 30]``.
"""

from __future__ import annotations

import argparse
import os
import tempfile


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--ticks", type=int, default=30, help="scheduler ticks per run")
    args = ap.parse_args()
    os.environ["TENANTML_HOME"] = tempfile.mkdtemp(prefix="tenantml-new-data-")
    from mlflow_plugin import best_model
    from mlflow_plugin.tracking import job_records, tenant_experiments
    from tenantml import datasets
    from tenantml.client import Client

    c = Client()
    d = datasets.load("wine")
    c.submit("wine", d.schema)
    c.feed("wine", d.inputs[:100], d.labels[:100])
    c.run(ticks=args.ticks, poll_s=0.2)
    before = best_model(c.mlflow, "wine")
    c.feed("wine", d.inputs[100:], d.labels[100:])
    c.run(ticks=args.ticks, poll_s=0.2)
    records = job_records(c.mlflow, tenant_experiments(c.mlflow).values())
    on = {s: [r for r in records if r.snapshot == s] for s in (1, 2)}
    assert before is not None
    print(f"snapshot 1: {len(on[1])} jobs; served {before.candidate} at {before.accuracy:.3f}")
    first = sorted((r for r in on[2] if r.accuracy is not None), key=lambda r: r.start_time)
    print(f"snapshot 2: {len(on[2])} jobs; first: " + ", ".join(
        f"{r.candidate} {r.accuracy:.3f}" for r in first[:4]
    ))  # fmt: skip
    versions = sorted(c.mlflow.search_model_versions("name = 'wine'"), key=lambda v: int(v.version))
    print("best moved to: " + " -> ".join(
        f"{v.tags['tenantml.candidate']} {float(v.tags['tenantml.accuracy']):.3f} "
        f"(s{v.tags['tenantml.snapshot']})" for v in versions
    ))  # fmt: skip
    final = best_model(c.mlflow, "wine")
    assert final is not None
    print(f"served now: {final.candidate} at {final.accuracy:.3f} on snapshot {final.snapshot}")


if __name__ == "__main__":
    main()
