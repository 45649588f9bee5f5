"""The embedded MLflow database's template (`tasks.tracking_template`), with MLflow's own SQL
store: a new home's database, as MLflow made it, becomes the template without its default
experiment; a later new home is seeded from it and MLflow opens it as its own; what is not a
template, or a home that has a database, is left alone."""

from __future__ import annotations

import shutil
import sqlite3
from pathlib import Path

import pytest

from tasks.settings import Settings, copy_if_absent
from tasks.tracking_template import (
    NotAsMadeError,
    _copy_without_default_experiment,
    keep_template,
    seed_from_template,
    sqlite_path,
    template_path,
)


@pytest.fixture
def cache(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path / "cache"))
    return tmp_path / "cache" / "tenantml"


@pytest.fixture(scope="module")
def made_by_mlflow(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A new home's database as MLflow's store made it (1.6 s: made once, copied per test)."""
    home = tmp_path_factory.mktemp("made")
    _open(home / "mlflow.db", home / "mlruns")
    return home / "mlflow.db"


def _new_home(made: Path, home: Path) -> Path:
    """A copy of `made` as `home`'s database (its default experiment names the made home)."""
    home.mkdir(parents=True)
    shutil.copyfile(made, home / "mlflow.db")
    return home / "mlflow.db"


def _uri(path: Path) -> str:
    return f"sqlite:///{path}"


def _open(path: Path, artifacts: Path) -> object:
    from mlflow.store.tracking.sqlalchemy_store import SqlAlchemyStore

    return SqlAlchemyStore(_uri(path), str(artifacts))


def _experiments(path: Path) -> list[tuple[int, str, str]]:
    with sqlite3.connect(path) as db:
        rows = db.execute("SELECT experiment_id, name, artifact_location FROM experiments")
        return sorted(rows.fetchall())


def test_sqlite_path_is_an_absolute_sqlite_file_only() -> None:
    assert sqlite_path("sqlite:////h/mlflow.db") == Path("/h/mlflow.db")
    assert sqlite_path("sqlite:////h/mlflow.db?timeout=20") == Path("/h/mlflow.db")
    assert sqlite_path("sqlite:///relative.db") is None
    assert sqlite_path("sqlite://") is None
    assert sqlite_path("http://127.0.0.1:5000") is None
    assert sqlite_path("postgresql://u@h/db") is None


def test_template_path_is_per_version_under_the_user_cache(cache: Path) -> None:
    assert template_path("3.17.2") == cache / "mlflow-3.17.2.db"


def test_a_new_home_made_by_mlflow_becomes_the_template_and_seeds_the_next(
    tmp_path: Path, cache: Path, made_by_mlflow: Path
) -> None:
    first = _new_home(made_by_mlflow, tmp_path / "a")
    assert keep_template(_uri(first))
    (template,) = cache.glob("mlflow-*.db")
    assert _experiments(template) == []  # the first home's default experiment left out
    assert [e[:2] for e in _experiments(first)] == [(0, "Default")]

    second = tmp_path / "b" / "mlflow.db"
    assert seed_from_template(_uri(second))
    store = _open(second, tmp_path / "b" / "mlruns")
    # MLflow made the default experiment for this home, and works as on a database of its own
    assert _experiments(second) == [(0, "Default", str(tmp_path / "b" / "mlruns" / "0"))]
    ident = store.create_experiment("tenantml/x")  # type: ignore[attr-defined]
    assert store.get_experiment(ident).name == "tenantml/x"  # type: ignore[attr-defined]
    assert _experiments(template) == []  # the template is untouched
    assert not keep_template(_uri(second))  # there is one already


def test_a_home_with_experiments_is_never_kept(
    tmp_path: Path, cache: Path, made_by_mlflow: Path
) -> None:
    home = _new_home(made_by_mlflow, tmp_path / "h")
    store = _open(home, tmp_path / "h" / "mlruns")
    store.create_experiment("tenantml/secret")  # type: ignore[attr-defined]
    assert not keep_template(_uri(home))
    assert not cache.exists() or not list(cache.glob("mlflow-*.db"))


def test_a_home_with_anything_beyond_what_mlflow_made_is_never_kept(
    tmp_path: Path, cache: Path, made_by_mlflow: Path
) -> None:
    """Not only experiments and runs: a tag on the default experiment, a registered model (a
    table the tracking store's tables do not name); and the copy is checked, not the home."""
    from mlflow.entities import ExperimentTag
    from mlflow.store.model_registry.sqlalchemy_store import SqlAlchemyStore as RegistryStore

    tagged = _new_home(made_by_mlflow, tmp_path / "tagged")
    store = _open(tagged, tmp_path / "tagged" / "mlruns")
    store.set_experiment_tag("0", ExperimentTag("owner", "secret"))  # type: ignore[attr-defined]
    modelled = _new_home(made_by_mlflow, tmp_path / "modelled")
    RegistryStore(_uri(modelled)).create_registered_model("secret-model")
    for home in (tagged, modelled):
        assert not keep_template(_uri(home))
        with pytest.raises(NotAsMadeError):  # were the home to change after its check
            _copy_without_default_experiment(home, tmp_path / "copy.db")
    assert not cache.exists() or not list(cache.iterdir())  # no template, no leftovers


def test_an_unwritable_cache_only_leaves_new_homes_without_a_template(
    tmp_path: Path, made_by_mlflow: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    (tmp_path / "not-a-dir").write_text("a file where the cache would be")
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path / "not-a-dir"))
    home = _new_home(made_by_mlflow, tmp_path / "h")
    assert not keep_template(_uri(home))
    assert not seed_from_template(_uri(tmp_path / "new" / "mlflow.db"))
    assert not (tmp_path / "new" / "mlflow.db").exists()


def test_a_bad_template_seeds_nothing_and_is_replaced(
    tmp_path: Path, cache: Path, made_by_mlflow: Path
) -> None:
    home = _new_home(made_by_mlflow, tmp_path / "h")
    cache.mkdir(parents=True)
    from importlib.metadata import version

    bad = template_path(version("mlflow"))
    bad.write_bytes(b"cut off")
    new = tmp_path / "new" / "mlflow.db"
    assert not seed_from_template(_uri(new))
    assert not new.exists()
    assert keep_template(_uri(home))
    assert _experiments(bad) == []
    assert sorted(p.name for p in cache.iterdir()) == [bad.name]  # no leftovers


def test_an_existing_home_database_is_never_replaced(
    tmp_path: Path, cache: Path, made_by_mlflow: Path
) -> None:
    first = _new_home(made_by_mlflow, tmp_path / "a")
    assert keep_template(_uri(first))
    existing = tmp_path / "b" / "mlflow.db"
    existing.parent.mkdir()
    existing.write_bytes(b"a home's own database")
    assert not seed_from_template(_uri(existing))
    assert not copy_if_absent(_the_template(cache), existing)  # even past the check
    assert existing.read_bytes() == b"a home's own database"
    assert sorted(p.name for p in existing.parent.iterdir()) == ["mlflow.db"]  # no leftovers


def _the_template(cache: Path) -> Path:
    (template,) = cache.glob("mlflow-*.db")
    return template


def test_settings_seed_a_new_embedded_home_only(
    tmp_path: Path, cache: Path, made_by_mlflow: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    import os

    monkeypatch.setattr(os, "environ", os.environ.copy())  # `apply` exports the home's settings
    first = Settings.load(tmp_path / "a")
    _new_home(made_by_mlflow, first.home)
    assert keep_template(first.tracking_uri)
    second = Settings.load(tmp_path / "b").apply()
    assert (second.home / "mlflow.db").exists()
    assert _experiments(second.home / "mlflow.db") == []  # MLflow adds its default when it opens
    (tmp_path / "c").mkdir()
    (tmp_path / "c" / "mlflow.db").write_bytes(b"a home's own database")
    Settings.load(tmp_path / "c").apply()
    assert (tmp_path / "c" / "mlflow.db").read_bytes() == b"a home's own database"
