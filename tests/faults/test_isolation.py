"""Tenant isolation on real servers (`tenantml up --auth`: MLflow's authentication app). Tenant
A, with its own credentials, cannot read, feed, refine, infer with or list B's data, runs or
models through the SDK, the CLI or MLflow's own client; B's store is unchanged by every try;
an operator sees all; a wrong password is refused."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import numpy as np
import pytest

from tenantml import datasets
from tenantml.ops.servers import down, up

pytestmark = [pytest.mark.integration, pytest.mark.slow, pytest.mark.full, pytest.mark.timeout(900)]


@pytest.fixture(scope="module")
def home(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Path]:
    root = tmp_path_factory.mktemp("isolation")
    up(root, slots=1, auth=True)
    try:
        yield root
    finally:
        down(root)


def _env(home: Path, user: str | None = None, password: str | None = None) -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if not k.startswith("MLFLOW_TRACKING_")}
    env["TENANTML_HOME"] = str(home)
    env.pop("TENANTML_USER", None)
    env.pop("TENANTML_PASSWORD", None)
    if user:
        env.update({"TENANTML_USER": user, "TENANTML_PASSWORD": password or ""})
    return env


def _cli(env: dict[str, str], *args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, "-m", "tenantml.cli", *args], env=env,
                          capture_output=True, text=True, timeout=300)  # fmt: skip


def _py(env: dict[str, str], code: str) -> dict[str, object]:
    out = subprocess.run([sys.executable, "-c", code], env=env, capture_output=True, text=True,
                         timeout=300)  # fmt: skip
    assert out.returncode == 0, out.stderr[-3000:]
    return dict(json.loads(out.stdout.strip().splitlines()[-1]))


_SETUP = """
import json
from tenantml.client import Client
from tenantml import datasets
c = Client()
creds = {}
for name, data in (("alpha", "wine"), ("beta", "breast_cancer")):
    d = datasets.load(data)
    c.submit(name, d.schema)
    c.feed(name, d.inputs, d.labels)
    creds[name] = c.grant(name)
print(json.dumps(creds))
"""

# As tenant alpha: every SDK call on beta must be refused; each outcome is recorded.
_AS_ALPHA = """
import json
import numpy as np
from tenantml.client import Client
from tenantml import datasets
c = Client()
out = {"tenants": c.tenants(), "own_status": c.status("alpha").best_version is not None}
x = datasets.load("breast_cancer").inputs[:3]
calls = {
    "examples": lambda: c.examples("beta"),
    "feed": lambda: c.feed("beta", x, [0, 1, 0]),
    "refine": lambda: c.refine("beta", disable=[1]),
    "infer": lambda: c.infer("beta", x),
    "status": lambda: c.status("beta"),
    "submit": lambda: c.submit("beta", "{input: {[Tensor[30]], []}, output: {[Tensor[2]], []}}"),
    "run": lambda: c.run(ticks=1),
    "grant": lambda: c.grant("beta"),
}
for name, call in calls.items():
    try:
        call()
        out[name] = "ALLOWED"
    except PermissionError as e:
        out[name] = "refused: " + str(e)[:80]
# MLflow directly, with alpha's credentials
from mlflow.tracking import MlflowClient
import mlflow
m = MlflowClient()
names = [e.name for e in m.search_experiments()]
out["experiments_listed"] = names
models = [r.name for r in m.search_registered_models()]
out["models_listed"] = models
def mlflow_call(fn):
    try:
        got = fn()
    except Exception as e:
        return getattr(e, "error_code", type(e).__name__)
    # A search answers with what the caller may see: nothing of beta's is "EMPTY".
    return "EMPTY" if isinstance(got, list) and not got else "ALLOWED"
beta_exp = {beta_exp!r}
out["mlflow"] = {
    "get_experiment": mlflow_call(lambda: m.get_experiment(beta_exp)),
    "search_runs": mlflow_call(lambda: m.search_runs([beta_exp])),
    "get_run": mlflow_call(lambda: m.get_run({beta_run!r})),
    "metric_history": mlflow_call(lambda: m.get_metric_history({beta_run!r}, "accuracy")),
    "model_versions": mlflow_call(lambda: m.search_model_versions("name = 'beta'")),
    "get_registered_model": mlflow_call(lambda: m.get_registered_model("beta")),
    "load_best": mlflow_call(lambda: mlflow.pyfunc.load_model("models:/beta@best")),
    "own_runs": mlflow_call(lambda: m.search_runs([{alpha_exp!r}])),
}
print(json.dumps(out))
"""


def test_a_tenant_reaches_only_its_own_tenant(home: Path, tmp_path: Path) -> None:
    creds = _py(_env(home), _SETUP)
    # One job each, so that each tenant has runs and a `best` model to protect.
    res = _cli(_env(home), "run", "--ticks", "2", "--slots", "1", "--policy", "roundrobin")
    assert res.returncode == 0, res.stderr[-3000:]
    ids = _py(_env(home), (
        "import json\nfrom tenantml.client import Client\n"
        "from mlflow_plugin.tracking import tenant_experiments\nc = Client()\n"
        "exps = tenant_experiments(c.mlflow)\n"
        "run = c.mlflow.search_runs([exps['beta']])[0].info.run_id\n"
        "store = {k: c.store.blobs.get(k).hex() for k in c.store.blobs.list('tenants/beta/')}\n"
        "print(json.dumps({'exps': exps, 'store': store, 'tenants': c.tenants(), 'run': run,\n"
        "    'best': {t: c.status(t, fresh=True).best_version for t in exps}}))"
    ))  # fmt: skip
    exps, beta_before = ids["exps"], ids["store"]
    assert isinstance(exps, dict) and set(exps) == {"alpha", "beta"}
    assert ids["tenants"] == ["alpha", "beta"]  # the operator sees all
    assert all(ids["best"].values()), ids["best"]  # type: ignore[union-attr]
    alpha = _env(home, "alpha", str(creds["alpha"]))
    out = _py(alpha, _AS_ALPHA.replace("{beta_exp!r}", repr(exps["beta"]))
              .replace("{alpha_exp!r}", repr(exps["alpha"]))
              .replace("{beta_run!r}", repr(ids["run"])))  # fmt: skip
    assert out["tenants"] == ["alpha"] and out["own_status"], out
    for call in ("examples", "feed", "refine", "infer", "status", "submit", "run", "grant"):
        assert str(out[call]).startswith("refused"), (call, out[call])
    assert out["experiments_listed"] == ["tenantml/alpha"], out
    assert out["models_listed"] == ["alpha"], out
    mlflow_calls = out["mlflow"]
    assert isinstance(mlflow_calls, dict)
    for call in ("get_experiment", "get_run", "metric_history", "get_registered_model",
                 "load_best"):  # fmt: skip
        assert mlflow_calls[call] == "PERMISSION_DENIED", (call, mlflow_calls)
    for call in ("search_runs", "model_versions"):  # searches: filtered to what alpha may see
        assert mlflow_calls[call] in ("PERMISSION_DENIED", "EMPTY"), (call, mlflow_calls)
    assert mlflow_calls["own_runs"] == "ALLOWED", mlflow_calls
    # The CLI: the same refusals, exit 2, one line naming the problem.
    d = datasets.load("breast_cancer")
    np.savez(tmp_path / "b.npz", x=d.inputs[:3], y=d.labels[:3])
    rows = tmp_path / "b.csv"
    rows.write_text(",".join(f"f{i}" for i in range(30)) + "\n"
                    + ",".join(map(str, d.inputs[0])) + "\n")  # fmt: skip
    for args in (["feed", "beta", "--npz", str(tmp_path / "b.npz")],
                 ["infer", "beta", "--csv", str(rows)], ["status", "beta"]):  # fmt: skip
        res = _cli(alpha, *args)
        assert (
            res.returncode == 2
            and "may not access tenant 'beta'" in res.stderr
            or (res.returncode == 2 and "is the operator's" in res.stderr)
        ), (args, res.returncode, res.stderr[-500:])
    listed = _cli(alpha, "tenants")
    assert listed.returncode == 0 and listed.stdout.split() == ["alpha"], listed
    own = _cli(alpha, "status")  # with a tenant's identity: its own leaderboard
    assert own.returncode == 0 and own.stdout.startswith("alpha:"), (own.stdout, own.stderr[-500:])
    # Names that try to escape the prefix are refused before any access check.
    for name in ("../beta", "bеta"):  # (all of tests/faults/test_fuzz_inputs.py's, in-process)
        res = _cli(alpha, "examples", name)
        assert res.returncode == 2 and "is not valid" in res.stderr, (name, res.stderr)
    # A wrong password is refused by MLflow with a clear message.
    wrong = _cli(_env(home, "alpha", "not-the-password"), "status", "alpha")
    assert wrong.returncode == 2 and "refused" in wrong.stderr, wrong.stderr[-500:]
    # Nothing of beta's changed.
    after = _py(_env(home), (
        "import json\nfrom tenantml.client import Client\nc = Client()\n"
        "print(json.dumps({k: c.store.blobs.get(k).hex() "
        "for k in c.store.blobs.list('tenants/beta/')}))"
    ))  # fmt: skip
    assert after == beta_before
