"""Fixtures shared by the unit tests: an MLflow tracking store on SQLite, a small real tenant,
and an environment restored after a test that applies settings."""

from __future__ import annotations

import os
from collections.abc import Iterator

import pytest


@pytest.fixture(scope="module")
def tracking(tmp_path_factory: pytest.TempPathFactory) -> Iterator[object]:
    """An `MlflowClient` on a fresh SQLite tracking and registry store (one per module)."""
    from mlflow.tracking import MlflowClient

    root = tmp_path_factory.mktemp("mlflow")
    # By environment, as `Settings.apply` does, not `mlflow.set_tracking_uri`: that pins a
    # process-wide URI which outranks the environment, so a later test in the same process
    # (pytest-xdist) would write to this store while its `Client` reads its own home's.
    names = ("MLFLOW_TRACKING_URI", "MLFLOW_REGISTRY_URI")
    saved, cwd = {k: os.environ.get(k) for k in names}, os.getcwd()
    os.chdir(root)  # SQLite tracking puts default artifacts in ./mlruns: keep them here
    os.environ.update(dict.fromkeys(names, f"sqlite:///{root / 'mlflow.db'}"))
    try:
        yield MlflowClient()
    finally:
        for k, v in saved.items():
            if v is None:
                os.environ.pop(k, None)
            else:
                os.environ[k] = v
        os.chdir(cwd)


@pytest.fixture(scope="module")
def wine(tmp_path_factory: pytest.TempPathFactory) -> object:
    """A local example store with the UCI wine tenant ``wine`` fed (178 examples)."""
    from store import ExampleStore, LocalBlobStore
    from tenantml import datasets

    store = ExampleStore(LocalBlobStore(tmp_path_factory.mktemp("store")))
    d = datasets.load("wine")
    store.create_tenant("wine", d.schema)
    store.feed("wine", d.inputs, d.labels)
    return store


@pytest.fixture
def restore_env() -> Iterator[None]:
    """`Client` exports its settings to the process: undo that after the test."""
    saved = dict(os.environ)
    yield
    os.environ.clear()
    os.environ.update(saved)
