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


def _fed_store(tmp_path_factory: pytest.TempPathFactory, name: str) -> object:
    """A local example store with the offline data set `name` fed as tenant `name`."""
    from store import ExampleStore, LocalBlobStore
    from tenantml import datasets

    store = ExampleStore(LocalBlobStore(tmp_path_factory.mktemp(name) / "store"))
    d = datasets.load(name)
    store.create_tenant(name, d.schema)
    store.feed(name, d.inputs, d.labels)
    return store


@pytest.fixture(scope="module")
def wine(tmp_path_factory: pytest.TempPathFactory) -> object:
    """A local example store with the UCI wine tenant ``wine`` fed (178 examples)."""
    return _fed_store(tmp_path_factory, "wine")


@pytest.fixture(scope="module")
def digits(tmp_path_factory: pytest.TempPathFactory) -> object:
    """A local example store with scikit-learn's digits fed as tenant ``digits`` (1,797)."""
    return _fed_store(tmp_path_factory, "digits")


@pytest.fixture
def restore_env() -> Iterator[None]:
    """`Client` exports its settings to the process: undo that after the test (the
    environment, and what `tasks.settings` knows of its own exports)."""
    import tasks.settings as ts

    saved = dict(os.environ)
    known = (dict(ts._EXPORTED), dict(ts._BEFORE), ts._APPLIED, list(ts._IN_USE))
    yield
    os.environ.clear()
    os.environ.update(saved)
    for now, then in zip((ts._EXPORTED, ts._BEFORE), known[:2], strict=True):
        now.clear()
        now.update(then)  # type: ignore[attr-defined]
    ts._APPLIED = known[2]
    ts._IN_USE[:] = known[3]
