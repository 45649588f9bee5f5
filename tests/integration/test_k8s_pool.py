"""The Kubernetes work pool of ``infra/k8s/``, checked without a cluster: a real Prefect server
creates the ``gpu`` pool from ``infra/k8s/gpu-work-pool.json`` (the server validates the
template and refuses a broken one), ``train`` is deployed on it from ``infra/prefect.yaml``, the
scheduler's own dispatcher starts a run, and prefect-kubernetes (an optional dependency, the
``k8s`` extra) builds the Job manifest a Kubernetes worker would submit for it."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from tests.servers import PrefectServer, prefect_server

pytest.importorskip("prefect_kubernetes", reason="the k8s extra: pip install 'tenantml[k8s]'")

# A deployment path, not one a newcomer's `make test` runs through (44 s): `make test-full`.
pytestmark = [pytest.mark.integration, pytest.mark.full, pytest.mark.timeout(300)]

ROOT = Path(__file__).resolve().parents[2]
TEMPLATE = ROOT / "infra" / "k8s" / "gpu-work-pool.json"
IMAGE = json.loads(TEMPLATE.read_text())["variables"]["properties"]["image"]["default"]

# The scheduler's dispatch path (cluster settings: no GPU pinned by the scheduler), then the
# manifest a Kubernetes worker builds for that run (prefect-kubernetes' own code).
_DISPATCH_AND_RESOLVE = """
import asyncio, json
from prefect.client.orchestration import get_client
from prefect_kubernetes.worker import KubernetesWorkerJobConfiguration
from tasks._dispatch import DeploymentDispatcher
from tasks._service import JobSpec

dispatcher = DeploymentDispatcher(1, {}, pin_gpus=False)
run_id = dispatcher._start(JobSpec("digits", "lenet", 1, "lenet-s1", 1, "manual", None, 4))

async def manifest():
    async with get_client() as client:
        pool = await client.read_work_pool("gpu")
        run = await client.read_flow_run(run_id)
        config = await KubernetesWorkerJobConfiguration.resolve_for_flow_run(
            run, client=client, work_pool=pool, worker_name="k8s-worker"
        )
        deployment = await client.read_deployment(run.deployment_id)
    return config.job_manifest, deployment.job_variables

job, variables = asyncio.run(manifest())
print(json.dumps({"run_id": str(run_id), "manifest": job, "deployment": variables}))
"""


def _prefect(server: PrefectServer, *args: str, **env: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [str(Path(sys.executable).with_name("prefect")), "--no-prompt", *args],
        env={**os.environ, **server.env, **env},
        capture_output=True,
        text=True,
        timeout=180,
        cwd=ROOT,
    )


def test_the_gpu_pool_template_and_the_job_a_train_run_gets(tmp_path: Path) -> None:
    broken = json.loads(TEMPLATE.read_text())
    broken["job_configuration"]["job_manifest"]["spec"]["template"]["spec"]["containers"][0][
        "resources"
    ]["limits"]["nvidia.com/gpu"] = "{{ gpu_count }}"  # a variable the schema does not declare
    (tmp_path / "broken.json").write_text(json.dumps(broken))
    with prefect_server(tmp_path) as server:
        bad = _prefect(server, "work-pool", "create", "gpu", "--type", "kubernetes",
                       "--base-job-template", str(tmp_path / "broken.json"))  # fmt: skip
        assert bad.returncode != 0 and "gpu_count" in bad.stdout + bad.stderr, bad
        made = _prefect(server, "work-pool", "create", "gpu", "--type", "kubernetes",
                        "--base-job-template", str(TEMPLATE))  # fmt: skip
        assert made.returncode == 0, (made.stdout, made.stderr)
        # As infra/k8s/README.md deploys it (`--job-variable` would replace the deployment's
        # job variables, its environment included: the image is the pool's default instead).
        deployed = _prefect(server, "deploy", "--name", "train", "--prefect-file",
                            "infra/prefect.yaml", TENANTML_ROOT="/app")  # fmt: skip
        assert deployed.returncode == 0, (deployed.stdout[-2000:], deployed.stderr[-2000:])
        out = subprocess.run(
            [sys.executable, "-c", _DISPATCH_AND_RESOLVE],
            env={**os.environ, **server.env},
            capture_output=True,
            text=True,
            timeout=180,
            cwd=ROOT,
        )
        assert out.returncode == 0, out.stderr[-3000:]
    got = json.loads(out.stdout.strip().splitlines()[-1])
    job = got["manifest"]
    assert job["kind"] == "Job" and job["metadata"]["namespace"] == "tenantml"
    pod = job["spec"]["template"]["spec"]
    (container,) = pod["containers"]
    assert container["image"] == IMAGE
    for limits in (container["resources"]["limits"], container["resources"]["requests"]):
        assert int(limits["nvidia.com/gpu"]) == 1, container["resources"]
    assert {"key": "nvidia.com/gpu", "operator": "Exists", "effect": "NoSchedule"} in pod[
        "tolerations"
    ]
    env = {e["name"]: e.get("value") for e in container["env"]}
    assert env["PREFECT__FLOW_RUN_ID"] == got["run_id"]
    # infra/prefect-automations.yaml
    assert env.get("PREFECT_FLOWS_HEARTBEAT_FREQUENCY") == "30", (env, got["deployment"])
    assert env["PREFECT_API_URL"] == server.api_url
    # Nothing of the deploying or dispatching machine is baked in: the node's settings come
    # from the pool's environment (infra/k8s/README.md, step 4).
    assert "TENANTML_HOME" not in env and "CUDA_VISIBLE_DEVICES" not in env, env
    assert "prefect flow-run execute" in " ".join(container["args"]), container["args"]
