"""Several installations in one process (a notebook's operator, a test): each `Client` works
on its own home, whichever was made last. A `Client` exports its settings to the process
(MLflow's tracking URI, Prefect's home: MLflow loads models and the scheduler flow reads its
settings from there), and the one made last had them."""

from __future__ import annotations

import json
import os
from pathlib import Path

import mlflow
import numpy as np
import pytest

from mlflow_plugin import (
    ensure_tenant_experiment,
    log_trained_model,
    promote_if_better,
    start_job_run,
)
from mlflow_plugin.tracking import end_job_run
from store import UnknownTenantError
from tenantml import datasets
from tenantml.client import Client, NoModelYetError
from trainers import TrainJob, train

pytestmark = pytest.mark.usefixtures("restore_env")


def _served(c: Client, tenant: str, candidate: str) -> None:
    """`candidate` trained on `tenant`'s examples and made its `best`, as a job would (in a
    run MLflow's fluent API opens: on the home applied last)."""
    c.settings.apply()
    schema = c.store.schema(tenant)
    exp = ensure_tenant_experiment(c.mlflow, tenant, str(schema), [candidate])
    result = train(TrainJob(tenant, candidate), c.store)
    run_id = start_job_run(c.mlflow, exp, tenant=tenant, job_id=f"{candidate}-s1",
                           params={"model": candidate, "snapshot": 1}, tags={})  # fmt: skip
    with mlflow.start_run(run_id=run_id):
        uri = log_trained_model(result.model)
    end_job_run(c.mlflow, run_id, ok=True)
    promote_if_better(c.mlflow, tenant, model_uri=uri, run_id=run_id, accuracy=0.9,
                      candidate=candidate, job_id=f"{candidate}-s1", snapshot=1)  # fmt: skip


def _accuracy(predicted: np.ndarray, labels: np.ndarray) -> float:
    return float(np.mean(predicted == np.asarray(labels).astype(str)))


def test_each_client_infers_from_its_own_home(tmp_path: Path) -> None:
    """Before, MLflow loaded the model from the home of the Client made last: another
    installation's model of the same name and version, or none."""
    wine = datasets.load("wine")
    x, y = wine.inputs[:40], wine.labels[:40]
    flipped = np.asarray(wine.labels)[::-1]  # b's `wine`: the same name, other labels
    a = Client(tmp_path / "a")
    a.submit("wine", wine.schema)
    a.feed("wine", wine.inputs, wine.labels)
    _served(a, "wine", "random_forest")
    b = Client(tmp_path / "b")  # another home, made last: no tenant `wine` yet
    with pytest.raises(UnknownTenantError, match="unknown tenant"):
        b.infer("wine", x[:2])
    assert _accuracy(a.infer("wine", x), y) >= 0.9
    b.submit("wine", wine.schema)
    b.feed("wine", wine.inputs, flipped)
    with pytest.raises(NoModelYetError):
        b.infer("wine", x[:2])
    _served(b, "wine", "extra_trees")
    assert _accuracy(b.infer("wine", x), flipped[:40]) >= 0.9
    assert _accuracy(a.infer("wine", x), y) >= 0.9


def _servers_home(root: Path) -> Path:
    """A home `tenantml up` would have made (its servers are not needed here)."""
    root.mkdir(parents=True)
    (root / "servers.json").write_text(json.dumps({
        "tracking_uri": "http://127.0.0.1:9/", "store": (root / "store").as_uri(),
        "prefect_api_url": "http://127.0.0.1:9/api", "env": {"MLFLOW_TRACKING_USERNAME": "op",
                                                             "MLFLOW_TRACKING_PASSWORD": "pw"},
    }))  # fmt: skip
    return root


def test_an_embedded_home_after_one_on_servers_is_embedded(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Before, the first home's Prefect API stayed in the environment, and the second home
    was read as on servers, with the first home's Prefect."""
    monkeypatch.delenv("PREFECT_API_URL", raising=False)
    monkeypatch.delenv("MLFLOW_TRACKING_USERNAME", raising=False)
    on_servers = Client(_servers_home(tmp_path / "a"), check_servers=False)
    assert os.environ["PREFECT_API_URL"] == "http://127.0.0.1:9/api"
    assert os.environ["MLFLOW_TRACKING_USERNAME"] == "op"
    embedded = Client(tmp_path / "b")
    assert embedded.settings.mode == "embedded" and embedded.settings.prefect_api_url is None
    assert "PREFECT_API_URL" not in os.environ and "MLFLOW_TRACKING_USERNAME" not in os.environ
    on_servers.settings.ensure_applied()  # what its calls do first
    assert os.environ["PREFECT_API_URL"] == "http://127.0.0.1:9/api"
    assert os.environ["TENANTML_HOME"] == str(tmp_path / "a")
    embedded.settings.ensure_applied()
    assert "PREFECT_API_URL" not in os.environ


def test_the_users_own_environment_is_kept(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """A cluster's Prefect API and the user's own credentials, given in the environment, hold
    for every home; a tenant's identity lasts while its client is the one applied."""
    monkeypatch.setenv("PREFECT_API_URL", "http://prefect.example:4200/api")
    monkeypatch.setenv("MLFLOW_TRACKING_USERNAME", "me")
    on_servers = Client(_servers_home(tmp_path / "a"), check_servers=False)
    assert on_servers.settings.prefect_api_url == "http://prefect.example:4200/api"
    assert os.environ["MLFLOW_TRACKING_USERNAME"] == "me"  # not servers.json's operator
    tenant = Client(tmp_path / "a", check_servers=False, user="t1", password="secret")
    assert os.environ["MLFLOW_TRACKING_USERNAME"] == "t1"
    other = Client(tmp_path / "b", check_servers=False)
    assert other.settings.mode == "servers"  # the user's Prefect API names a server
    assert os.environ["PREFECT_API_URL"] == "http://prefect.example:4200/api"
    assert os.environ["MLFLOW_TRACKING_USERNAME"] == "me"  # the tenant's identity is gone
    tenant.settings.ensure_applied()
    assert os.environ["MLFLOW_TRACKING_USERNAME"] == "t1"
    on_servers.settings.ensure_applied()
    assert os.environ["MLFLOW_TRACKING_USERNAME"] == "me"


def test_the_users_own_change_is_kept(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """A Prefect API the user names after an `apply` is theirs (the one before it is not
    brought back)."""
    from tasks.settings import Settings

    monkeypatch.setenv("PREFECT_API_URL", "http://x.example/api")
    Client(tmp_path / "a", check_servers=False)
    os.environ["PREFECT_API_URL"] = "http://y.example/api"
    assert Client(tmp_path / "b", check_servers=False).settings.prefect_api_url == (
        "http://y.example/api"
    )
    assert Settings.load().prefect_api_url == "http://y.example/api"  # as a job's thread reads


def test_a_home_on_servers_gets_its_credentials_back_for_its_store(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """boto3 reads the S3 server's credentials from the environment when the store is made:
    a first use of `a.store` after `b` was made found none."""
    monkeypatch.delenv("AWS_ACCESS_KEY_ID", raising=False)
    root = _servers_home(tmp_path / "a")
    config = json.loads((root / "servers.json").read_text())
    config["env"]["AWS_ACCESS_KEY_ID"] = "bundled"
    (root / "servers.json").write_text(json.dumps(config))
    a = Client(root, check_servers=False)
    Client(tmp_path / "b")
    assert "AWS_ACCESS_KEY_ID" not in os.environ
    a.store.tenants()
    assert os.environ["AWS_ACCESS_KEY_ID"] == "bundled"


def test_another_home_waits_while_a_scheduler_runs_here(tmp_path: Path) -> None:
    """The jobs of a scheduler running in this process read the process's environment: another
    home applied meanwhile would have moved them to it."""
    from tasks.settings import InstallationBusyError, Settings

    a = Client(tmp_path / "a")
    with a.settings.in_use():
        with pytest.raises(InstallationBusyError, match=f"the scheduler of {tmp_path / 'a'}"):
            Client(tmp_path / "b")
        assert Settings.load().apply().home == tmp_path / "a"  # a job's thread: its own home
        assert os.environ["TENANTML_HOME"] == str(tmp_path / "a")
    assert Client(tmp_path / "b").settings.home == tmp_path / "b"


def test_prefects_senders_are_drained_on_a_change_of_home(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Prefect keys its events worker without the API's URL: the events a home's flows left
    go to its server before the next home's settings are read."""
    import prefect  # noqa: F401  (the drain is for a process that has Prefect)

    import tasks.prefect_start as ps

    drained: list[str] = []
    monkeypatch.setattr(ps, "drain_prefect_senders", lambda: drained.append("drain") or True)
    a = Client(tmp_path / "a")
    drained.clear()  # whatever this process applied before
    b = Client(tmp_path / "b")
    assert drained == ["drain"]
    b.settings.ensure_applied()  # already b's: nothing to drain
    a.settings.ensure_applied()
    assert drained == ["drain", "drain"]
