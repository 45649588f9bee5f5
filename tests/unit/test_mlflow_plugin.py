"""The MLflow plugin against a real MLflow (SQLite store, local artifacts): pyfunc round trip
with the schema's signature, job runs, the `best` alias, and the run-context provider, both
installed (entry point) and called directly."""

from __future__ import annotations

from typing import Any

import mlflow
import numpy as np
import pytest
from mlflow.tracking import MlflowClient

from mlflow_plugin import (
    BestModel,
    TenantRunContext,
    best_model,
    context_env,
    ensure_tenant_experiment,
    job_records,
    log_trained_model,
    promote_if_better,
    signature_for,
    start_job_run,
    tenant_experiments,
)
from mlflow_plugin.tracking import end_job_run
from store import ExampleStore
from store.schema import DataType, Schema, Tensor
from tenantml import datasets
from trainers import TrainJob, train


def test_signature_from_schema() -> None:
    img = signature_for(Schema(input=Tensor(8, 8, 1), output=Tensor(10))).to_dict()
    assert '"shape": [-1, 8, 8, 1]' in img["inputs"] and '"string"' in img["outputs"]
    seq = signature_for(Schema(input=DataType([Tensor(12)], ["next"]), output=Tensor(9)))
    assert [s.name for s in seq.inputs.inputs] == ["x", "lengths"]
    rec = signature_for(Schema(input=Tensor(4, 4, 1), output=Tensor(4, 4, 1))).to_dict()
    assert '"shape": [-1, 4, 4, 1]' in rec["outputs"]


def test_pip_requirements_without_torch(monkeypatch: pytest.MonkeyPatch) -> None:
    """A service installed without the ``ml`` extra (no torch) still logs tabular models: the
    torch pin is left out, not raised."""
    import importlib.metadata

    from mlflow_plugin.pyfunc import pip_requirements

    real = importlib.metadata.version

    def no_torch(dist: str) -> str:
        if dist == "torch":
            raise importlib.metadata.PackageNotFoundError(dist)
        return real(dist)

    with_torch = pip_requirements()
    assert with_torch[0].startswith("torch==") and "+" not in with_torch[0]
    monkeypatch.setattr(importlib.metadata, "version", no_torch)
    reqs = pip_requirements()
    assert not any(r.startswith("torch") for r in reqs)
    assert reqs == with_torch[1:]


def test_job_run_model_and_best_alias(tracking: MlflowClient, wine: ExampleStore) -> None:
    exp = ensure_tenant_experiment(tracking, "wine", str(wine.schema("wine")), ["svm", "knn"])
    assert ensure_tenant_experiment(tracking, "wine", "ignored", []) == exp
    assert tenant_experiments(tracking) == {"wine": exp}
    best = None
    for model in ("knn", "logistic_regression"):
        r = train(TrainJob("wine", model), wine)
        params = {"model": model, "snapshot": r.snapshot}
        run_id = start_job_run(tracking, exp, tenant="wine", job_id=r.job_id, params=params,
                               tags={})  # fmt: skip
        # A retry of the same job finds its run instead of making a second one.
        assert start_job_run(tracking, exp, tenant="wine", job_id=r.job_id, params={},
                             tags={}) == run_id  # fmt: skip
        with mlflow.start_run(run_id=run_id):
            uri = log_trained_model(r.model)
            mlflow.log_metric("accuracy", r.accuracy)
        end_job_run(tracking, run_id, ok=True)
        new = promote_if_better(tracking, "wine", model_uri=uri, run_id=run_id,
                                accuracy=r.accuracy, candidate=model, job_id=r.job_id,
                                snapshot=r.snapshot)  # fmt: skip
        if best is None or r.accuracy > best.accuracy:
            assert new is not None and new.candidate == model
            best = new
        else:
            assert new is None
        # Promoting the same job again changes nothing and registers nothing new.
        versions = len(tracking.search_model_versions("name = 'wine'"))
        promote_if_better(tracking, "wine", model_uri=uri, run_id=run_id, accuracy=r.accuracy,
                          candidate=model, job_id=r.job_id, snapshot=r.snapshot)  # fmt: skip
        assert len(tracking.search_model_versions("name = 'wine'")) == versions
    assert best is not None and best_model(tracking, "wine") == best
    records = job_records(tracking, [exp])
    assert [r.status for r in records] == ["FINISHED", "FINISHED"]
    assert {r.candidate for r in records} == {"knn", "logistic_regression"}
    # infer through the registry: models:/<tenant>@best, the schema's signature enforced
    model = mlflow.pyfunc.load_model("models:/wine@best")
    d = datasets.load("wine")
    pred = model.predict(d.inputs[:30].astype(np.float32))
    assert (np.asarray(pred) == np.asarray(d.labels[:30])).mean() >= 0.8
    with pytest.raises(Exception, match="shape"):
        model.predict(np.zeros((2, 5), dtype=np.float32))


def test_best_settles_on_the_most_accurate_version_when_two_jobs_race(
    tracking: MlflowClient, wine: ExampleStore
) -> None:
    """Two jobs of one tenant that both beat the best they read (two slots finishing together)
    end with ``best`` on the more accurate, whichever moves it last; it never ends lower."""
    from mlflow_plugin import model_versions, settle_best

    exp = ensure_tenant_experiment(tracking, "race", str(wine.schema("wine")), ["knn"])
    r = train(TrainJob("wine", "knn"), wine)
    runs: dict[str, tuple[str, str]] = {}
    for job in ("old", "a", "b", "c", "d", "e", "f"):
        run_id = start_job_run(tracking, exp, tenant="race", job_id=job, params={}, tags={})
        with mlflow.start_run(run_id=run_id):
            runs[job] = (run_id, log_trained_model(r.model))
        end_job_run(tracking, run_id, ok=True)

    def promote(job: str, accuracy: float, client: object = tracking) -> BestModel | None:
        run_id, uri = runs[job]
        return promote_if_better(
            client, "race", model_uri=uri, run_id=run_id, accuracy=accuracy,
            candidate="knn", job_id=job, snapshot=1,
        )  # fmt: skip

    def register(job: str, accuracy: float) -> str:  # what promote_if_better does before a move
        tags = {
            "tenantml.accuracy": repr(accuracy),
            "tenantml.job_id": job,
            "tenantml.snapshot": "1",
        }
        run_id, uri = runs[job]
        model_id = uri.removeprefix("models:/")  # an MLflow 3 logged model, as promote_if_better
        mv = tracking.create_model_version("race", uri, run_id=run_id, tags=tags, model_id=model_id)
        return str(mv.version)

    old = promote("old", 0.80)
    assert old is not None and old.job_id == "old"
    # job a (0.85) read the best (0.80) and registered its version, but has not moved it yet;
    # job b (0.83) beats the 0.80 it reads and moves last: best must not stay on b
    v_a = register("a", 0.85)
    assert promote("b", 0.83) is None  # b's model is not the one served
    best = best_model(tracking, "race")
    assert best is not None and (best.job_id, best.version) == ("a", v_a)
    assert settle_best(tracking, "race") == best  # job a's own move: nothing to change
    # the outcome of the race before: b's version under best; a settle repairs it
    (v_b,) = tracking.search_model_versions(f"name = 'race' and run_id = '{runs['b'][0]}'")
    tracking.set_registered_model_alias("race", "best", str(v_b.version))
    assert settle_best(tracking, "race") == best
    # tied on top: the current best stays; moved back by hand, best goes to the earliest of them
    register("c", 0.85)
    assert settle_best(tracking, "race") == best
    tracking.set_registered_model_alias("race", "best", old.version)
    assert settle_best(tracking, "race") == best

    class Racing:
        """The tracking client, with job f (0.90) promoted by another process right after this
        one's first list of versions: this one's move is then stale."""

        raced = False

        def __getattr__(self, name: str) -> object:
            return getattr(tracking, name)

        def search_model_versions(self, filter_string: str, **page: Any) -> object:
            seen = tracking.search_model_versions(filter_string, **page)
            if filter_string == "name = 'race'" and not self.raced:
                self.raced = True
                assert promote("f", 0.90) is not None
            return seen

    assert promote("e", 0.87, Racing()) is None  # moved best to e, saw f, moved it back
    best = best_model(tracking, "race")
    assert best is not None and best.job_id == "f"
    # a job no better than the best neither registers nor moves it
    versions = len(tracking.search_model_versions("name = 'race'"))
    assert promote("d", 0.90) is None
    assert len(tracking.search_model_versions("name = 'race'")) == versions
    assert best_model(tracking, "race") == best
    # the versions are read page by page (MLflow returns 10,000 at most per search)
    paged = model_versions(tracking, "race", page_size=2)
    assert versions > 2 and sorted(int(v.version) for v in paged) == list(range(1, versions + 1))


def test_run_context_provider_installed_and_direct(tracking: MlflowClient) -> None:
    with context_env(tenant="wine", policy="rate", tick=7):
        assert TenantRunContext().in_context()
        assert TenantRunContext().tags() == {
            "tenantml.tenant": "wine", "tenantml.policy": "rate", "tenantml.tick": "7",
        }  # fmt: skip
        with mlflow.start_run() as run:  # MLflow finds the provider by its entry point
            pass
    tags = tracking.get_run(run.info.run_id).data.tags
    assert tags["tenantml.policy"] == "rate" and tags["tenantml.tick"] == "7"
    assert not TenantRunContext().in_context()


def test_a_process_tag_names_one_live_process() -> None:
    """`process_tag` is ``<pid>:<start time>@<place>``: running while that process is, ended
    once it has, also when another process got its id (another start time); unknown for
    another place (host, boot, pid namespace). `trained_elsewhere` names a live process here
    other than this one."""
    import dataclasses
    import socket
    import subprocess
    import sys

    from mlflow_plugin.tracking import JobRecord, process_state, process_tag, trained_elsewhere

    child = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(60)"])
    try:
        tag = process_tag(child.pid)
        assert process_state(tag) == "running" and process_state(process_tag()) == "running"
        ident, _, place = tag.partition("@")
        pid, _, ticks = ident.partition(":")
        if ticks:  # with /proc: the same id started at another time is another process
            assert process_state(f"{pid}:{int(ticks) + 1}@{place}") == "ended"
        assert process_state(f"{ident}@another-host/boot/1") == "unknown"
        host, _, rest = place.partition("/")
        boot, _, pidns = rest.partition("/")
        # another boot of this host name: this machine before a reboot, or another machine of
        # the same name (pods with a fixed host name); another pid namespace: a container
        assert process_state(f"{ident}@{host}/another-boot/{pidns}") == "unknown"
        assert process_state(f"{ident}@{host}/{boot}/another-pidns") == "unknown"
        job = JobRecord("r", "t", "svm", "svm-s1", "RUNNING", None, None, 1, 1, 0.0, None, None,
                        policy="seer", process=tag)  # fmt: skip
        assert trained_elsewhere(job) == child.pid
        assert trained_elsewhere(dataclasses.replace(job, status="FAILED")) is None
        assert trained_elsewhere(dataclasses.replace(job, process=process_tag())) is None  # us
        assert trained_elsewhere(dataclasses.replace(job, process=None)) is None
        elsewhere = dataclasses.replace(job, process=f"{ident}@another-host/boot/1")
        assert trained_elsewhere(elsewhere) is None
    finally:
        child.kill()
        child.wait()
    assert process_state(tag) == "ended" and trained_elsewhere(job) is None
    assert process_state(None) == process_state("x:1") == process_state("") == "unknown"
    # a tag from before places were recorded: this host's when the run's node is this host
    assert process_state(ident) == "unknown"
    assert process_state(ident, socket.gethostname()) == "ended"
    assert process_state(process_tag().partition("@")[0], socket.gethostname()) == "running"


def test_a_process_proc_hides_is_asked_by_its_id(monkeypatch: pytest.MonkeyPatch) -> None:
    """``/proc`` mounted with ``hidepid``: another user's process cannot be read there, which
    is no sign that it ended; its id answers (a live `seer run` read as ended would have its
    job sent again beside it)."""
    import builtins

    import mlflow_plugin.tracking as tracking

    tag = tracking.process_tag()
    real_open = builtins.open

    def hidden(path: Any, *args: Any, **kwargs: Any) -> Any:
        if str(path).startswith("/proc/") and str(path).endswith("/stat"):
            raise PermissionError(13, "hidden", str(path))
        return real_open(path, *args, **kwargs)

    monkeypatch.setattr(builtins, "open", hidden)
    assert tracking.process_state(tag) == "running"


def test_the_versions_best_pointed_at_in_turn() -> None:
    """bench-live scored every registered version from its creation; a version registered
    beside a better one (two jobs that read the same old best) was never served. The order
    `settle_best` keeps: up on one snapshot (a tie keeps the earlier), any model of newer data,
    never one of unknown accuracy (NaN: registered, never pointed at)."""
    from types import SimpleNamespace

    from mlflow_plugin.registry import served_versions

    def v(version: int, at: int, accuracy: str, snapshot: int = 1) -> Any:
        tags = {"tenantml.accuracy": accuracy, "tenantml.snapshot": str(snapshot)}
        return SimpleNamespace(version=str(version), creation_timestamp=at, tags=tags, run_id="r")

    versions = [v(1, 10, "0.80"), v(3, 30, "0.83"), v(2, 20, "0.85"), v(4, 40, "0.85"),
                v(5, 50, "0.70", 2), v(6, 60, "nan", 3), v(7, 70, "0.9", 3)]  # fmt: skip
    assert [x.version for x in served_versions(versions)] == ["1", "2", "5", "7"]
