"""Service benchmarks: the scheduler's CPU per tick at scale, and dispatch overhead on servers.

`measure_tick_cpu`: `n` image tenants with `models` candidates each (a random subset of the 36
image candidates), `obs` finished jobs each; CPU seconds (``time.process_time``) of one
scheduler pass without I/O: building the policy's problem (`tasks.state_of`, the GP prior learnt
from the shipped data and every tenant's results included), `Planner.decide` for all slots, and
the per-tick metrics (each tenant's loss estimate). One job finishes per pass, so each pass has
a new result: the state's prior is refitted every pass and the planner's every
`policy.prior.REFIT_EVERY` passes (``prior_refits``). MLflow and the store are not involved
here; their cost per pass is one search of the job runs.
"""

from __future__ import annotations

import statistics
import time
from collections import Counter
from collections.abc import Callable
from typing import Any

import numpy as np

__all__ = ["TICK_PASSES", "measure_tick_cpu"]

TICK_PASSES = 25  # scheduler passes `measure_tick_cpu` times by default


def measure_tick_cpu(
    n_tenants: int = 200,
    models: int = 20,
    obs_per_tenant: int = 10,
    slots: int = 8,
    passes: int = TICK_PASSES,
    policy: str = "rate",
    seed: int = 0,
    *,
    on_step: Callable[[], None] | None = None,
) -> dict[str, Any]:
    """CPU seconds of ``passes`` scheduler passes (module docstring): medians and the first
    pass, per part (problem, decide, metrics).

    ``on_step``: called after each pass (outside its timing), so ``passes`` times in all.
    Raises ValueError for ``models`` outside 1..(the image candidates)."""
    from mlflow_plugin.tracking import JobRecord
    from store.schema import Schema, Tensor
    from tasks import (
        JobSpec,
        Planner,
        TenantInfo,
        state_of,
        tick_metrics,
    )
    from trainers import torch_candidates

    rng = np.random.default_rng(seed)
    image = Schema(input=Tensor(32, 32, 3), output=Tensor(10))
    tenants = []
    # the CNNs and their f_k variants (its measured fits are of these 36; an image task's pixel
    # arms are the tabular ones)
    pool = [c.name for c in torch_candidates(image)]
    if not 1 <= models <= len(pool):
        raise ValueError(f"models={models} is not valid: use 1..{len(pool)}")
    for i in range(n_tenants):
        cands = tuple(str(c) for c in rng.choice(pool, size=models, replace=False))
        tenants.append(TenantInfo(f"t{i}", image, cands, 1000, 1, str(i)))
    records = []
    for i, t in enumerate(tenants):
        for j, cand in enumerate(rng.permutation(t.candidates)[:obs_per_tenant]):
            records.append(
                JobRecord(
                    f"r{i}-{j}",
                    t.name,
                    str(cand),
                    f"{cand}-s1",
                    "FINISHED",
                    float(rng.uniform(0.5, 1.0)),
                    float(rng.uniform(1, 100)),
                    j,
                    1,
                    0.0,
                    1.0,
                    None,
                )
            )
    n_models = len({c for t in tenants for c in t.candidates})
    times: dict[str, list[float]] = {"build": [], "decide": [], "metrics": []}
    planner = Planner(policy, slots, seed)
    in_flight: list[JobSpec] = []
    for p in range(passes):
        t0 = time.process_time()
        state = state_of(tenants, records)  # as `load_state` builds it, learnt prior included
        t1 = time.process_time()
        if in_flight:  # one slot freed per pass: its job finished, a new result for the prior
            done, in_flight = in_flight[0], in_flight[1:]
            records = [*records, _finished(done, float(rng.uniform(0.5, 1.0)), p)]
        new = planner.decide(state, in_flight=in_flight, tick=p + 1)
        in_flight += new
        t2 = time.process_time()
        tick_metrics(state)
        t3 = time.process_time()
        for key, dt in zip(times, (t1 - t0, t2 - t1, t3 - t2), strict=True):
            times[key].append(dt)
        if on_step is not None:
            on_step()
    med = {k: statistics.median(v) for k, v in times.items()}
    first = {k: v[0] for k, v in times.items()}
    return {
        "tenants": n_tenants,
        "models": n_models,
        "obs_per_tenant": obs_per_tenant,
        "slots": slots,
        "policy": policy,
        "passes": passes,
        "cpu_s_median": med,
        "cpu_s_first_pass": first,
        "tick_cpu_s_median": sum(med.values()),
        # the first pass imports scikit-learn's GP and fits from scratch; the most of the rest
        "tick_cpu_s_max_later": max(
            map(sum, list(zip(*times.values(), strict=True))[1:]), default=0.0
        ),
        "prior_refits": planner.loop.refits if planner.loop is not None else 0,
    }


def _finished(job: Any, accuracy: float, p: int) -> Any:
    from mlflow_plugin.tracking import JobRecord

    return JobRecord(f"new-{p}", job.tenant, job.candidate, job.job_id, "FINISHED", accuracy,
                     10.0, p, 1, 0.0, 1.0, None)  # fmt: skip


_SETUP = """
from tenantml.client import Client
from tenantml import datasets
c = Client()
d = datasets.load("digits")
c.submit("dispatch", d.schema)
c.feed("dispatch", d.inputs[:200], d.labels[:200])
"""


def measure_dispatch(
    jobs: int = 20,
    job_seconds: float = 120.0,
    slots: int = 2,
    postgres: bool = False,
    warm: bool | None = None,
    prefetch: int = 1,
    nodes: int = 1,
    chain_s: float = 0.0,
) -> dict[str, Any]:
    """Dispatch overhead through real servers (started and stopped here, in a temporary home).

    `jobs` sleep-based jobs of `job_seconds` each go through the scheduler, the work pool ``gpu``
    and its `slots` process workers. Latency: from the scheduler's dispatch to the start of the
    job's trainer (``started_at - dispatched_at``; with prefetching this includes the wait for
    the slot). Hand-off gap: on one slot, from a job's end to the next job's first step. Idle
    fraction: 1 - (time the trainers ran) / (slots x the makespan from the first dispatch to the
    last job's end). `warm`: flow runs fork from the node's warm process (`tenantml.ops.warm`);
    False: each is a new Python process; None: as `up` decides (warm on one node). `prefetch`:
    jobs sent per slot beyond the running one.
    `nodes` = 2: the `slots` are split between this machine (node A: the servers, listening on a
    link, and the rest) and node B (`tenantml.ops.nodes`: ``slots // 2`` GPU workers in a
    network namespace, its own empty directory); prefetched runs then wait on the lock of the
    GPU whose worker took them, on that worker's node. A slot is a GPU (tags ``tenantml.node``
    and ``tenantml.gpu``) where the runs say which; else the scheduler's ``tenantml.slot``.
    `chain_s`: the scheduler's ``chain_s``: ``floor(chain_s / job_seconds)`` jobs to a flow run
    (at least 1; `jobs` is rounded up to whole runs).
    """
    import os
    import subprocess
    import sys
    import tempfile
    from pathlib import Path

    from mlflow.tracking import MlflowClient

    from mlflow_plugin.tracking import experiment_name
    from tasks import MAX_CHAIN
    from tenantml.ops import nodes as node_ops
    from tenantml.ops.servers import down, node_env, up

    if jobs < (1 + prefetch) * slots:
        least = (1 + prefetch) * slots
        raise ValueError(f"jobs={jobs} is not valid: use at least (1 + prefetch) x slots = {least}")
    if nodes not in (1, 2) or (nodes == 2 and slots < 2):
        raise ValueError(f"nodes={nodes} with slots={slots} is not valid: use 1, or 2 and 2+ slots")
    if nodes == 2 and (reason := node_ops.unavailable()):
        raise ValueError(f"nodes=2 needs a second node, which this machine cannot make: {reason}")
    home = Path(tempfile.mkdtemp(prefix="tenantml-dispatch-"))
    link = node_ops.create_link() if nodes == 2 else None
    node: node_ops.Node | None = None
    on_b = slots // 2 if link else 0
    try:
        listen = link.address if link else None
        cfg = up(home, slots=slots - on_b, postgres=postgres, warm=warm, prefetch=prefetch,
                 listen=listen)  # fmt: skip
    except BaseException:
        if link:
            node_ops.remove_link(link)
        raise
    try:
        if link:
            logs = home / "servers" / "logs"
            node = node_ops.Node("node-b", link, node_env(home), (home,), logs)
            for gpu in range(on_b):
                node.start_worker(gpu)
        env = {**os.environ, "TENANTML_HOME": str(home), "PREFECT_LOGGING_LEVEL": "ERROR"}
        subprocess.run([sys.executable, "-c", _SETUP], env=env, check=True, capture_output=True)
        # The first tick fills every slot and queues the prefetched runs; each later tick
        # refills one. A run holds `per_run` jobs.
        per_run = max(1, min(MAX_CHAIN, int(chain_s // job_seconds))) if chain_s else 1
        ticks = max(1, -(-jobs // per_run) - (1 + prefetch) * slots + 1)
        start = time.monotonic()
        subprocess.run(
            [
                sys.executable,
                "-m",
                "tenantml.cli",
                "run",
                "--ticks",
                str(ticks),
                "--slots",
                str(slots),
                "--policy",
                "roundrobin",
                "--sleep-job-seconds",
                str(job_seconds),
                "--chain-s",
                str(chain_s),
            ],
            env=env,
            check=True,
            capture_output=True,
        )
        wall = time.monotonic() - start
        client = MlflowClient(cfg["tracking_uri"])
        exp = client.get_experiment_by_name(experiment_name("dispatch"))
        if exp is None:
            raise RuntimeError("the benchmark tenant has no MLflow experiment: setup failed")
        runs = client.search_runs([exp.experiment_id], max_results=1000)
        done = [r for r in runs if "ended_at" in r.data.metrics]
        m = [r.data.metrics for r in done]
        latency = [x["dispatch_latency_s"] for x in m if "dispatch_latency_s" in x]
        # Hand-off gap: from one job's end to the next job's first step on the same slot.
        # Steady state: each slot from its first job's first step to its last job's end.
        gaps: list[float] = []
        span = 0.0
        for slot in {_gpu(r) for r in done}:
            on = sorted((r.data.metrics for r in done if _gpu(r) == slot),
                        key=lambda x: x["started_at"])  # fmt: skip
            gaps += [b["started_at"] - a["ended_at"] for a, b in zip(on, on[1:], strict=False)]
            span += max(x["ended_at"] for x in on) - on[0]["started_at"]
        first = min(x["started_at"] - x.get("dispatch_latency_s", 0.0) for x in m)
        makespan = max(x["ended_at"] for x in m) - first
        busy = sum(x["cost_s"] for x in m)
        return {
            "jobs": len(m),
            "job_seconds": job_seconds,
            "slots": slots,
            "postgres": postgres,
            "warm": cfg["flow_run_command"] is not None,
            "prefetch_per_slot": prefetch,
            "chain_s": chain_s,
            "jobs_per_run": per_run,
            "nodes": nodes,
            "jobs_by_node": dict(Counter(r.data.tags.get("tenantml.node") for r in done)),
            "latency_s_median": statistics.median(latency),
            "latency_s_max": max(latency),
            "handoff_gap_s_median": statistics.median(gaps) if gaps else None,
            "handoff_gap_s_max": max(gaps) if gaps else None,
            "makespan_s": makespan,
            "ideal_makespan_s": job_seconds * len(m) / slots,
            "idle_fraction": 1.0 - busy / (slots * makespan),
            "busy_fraction_steady": busy / span,
            "scheduler_wall_s": wall,
        }
    finally:
        if node is not None:
            node.remove()
        elif link is not None:
            node_ops.remove_link(link)
        down(home)


def _gpu(run: Any) -> tuple[str | None, ...]:
    """The GPU a job's run trained on: (node, CUDA device) where its worker pinned one, else the
    scheduler's slot (one machine, the scheduler pins)."""
    tags = run.data.tags
    if "tenantml.gpu" in tags:
        return tags.get("tenantml.node"), tags["tenantml.gpu"]
    return (tags.get("tenantml.slot"),)
