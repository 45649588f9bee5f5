"""Every job kind through one `JobRun` (real MLflow: SQLite store, local artifacts), SEER options
in one shape, and inference inputs encoded once."""

from __future__ import annotations

import dataclasses
import json
import os
import time
from pathlib import Path

import mlflow
import numpy as np
import pytest
from mlflow.tracking import MlflowClient

from mlflow_plugin import JobRun, ensure_tenant_experiment, job_records, pyfunc_input
from mlflow_plugin.tracking import (
    EXPERIMENT_KIND,
    MODEL_TRAINING,
    RUNS_VIEW_KEY,
    RUNS_VIEW_TAG,
    experiment_name,
    runs_page,
    tenant_experiments,
)
from store import BadExampleError, ExampleStore
from store.schema import DataType, Schema, Tensor
from tasks._seer import SeerOptions, seer_options_from_params
from tasks._service import JobSpec, run_job
from trainers._data import InferenceBatch, encode_batch, encode_for_inference

SEQ = Schema(input=DataType([Tensor(3)], ["next"]), output=Tensor(2))


def test_seer_options_round_trip_through_mlflow_params() -> None:
    opts = SeerOptions(3.0, 12.0, eta=2, p_max=4, global_batch=64)
    text = {k: str(v) for k, v in opts.to_params().items()}  # MLflow keeps params as text
    assert SeerOptions.from_params(text | {"model": "lenet", "hp.lr": "0.1"}) == opts
    assert SeerOptions.from_params({"model": "lenet"}) is None
    assert SeerOptions.from_dict(opts.as_dict()) == opts
    assert seer_options_from_params(text) == opts.as_dict()
    # p_max None (infinity) reads back as None; every option has a parser
    assert SeerOptions.from_params({"seer.deadline_min": "1", "seer.budget_gpu_min": "4",
                                    "seer.p_max": "None"}) == SeerOptions(1.0, 4.0)  # fmt: skip
    every = {f"seer.{f.name}": "1" for f in dataclasses.fields(SeerOptions)}
    every["seer.tuner"] = "seer"
    assert SeerOptions.from_params(every) == SeerOptions(
        1.0, 1.0, 1.0, 1.0, 1, 1, 1.0, 1, 1, tuner="seer"
    )
    assert SeerOptions(1, 4).tuner == "replan"
    with pytest.raises(ValueError, match="tuner 'asha' is not valid: use one of"):
        SeerOptions(1, 4, tuner="asha")
    job = opts.job("t", "lenet", 2, "seer-lenet-s2")
    assert (job.eta, job.v, job.p_min, job.p_max, job.t_min) == (2, 2, 1, 4.0, 1.0)
    assert SeerOptions(1, 4).job("t", "lenet", 2, "j").p_max == float("inf")


@pytest.mark.parametrize(
    ("options", "words"),
    [
        ({"tuner": "asha"}, "tuner 'asha' is not valid: use one of replan, seer"),
        ({"seed": -1}, "seed -1 is not valid: give an integer >= 0"),
        ({"seed": True}, "seed True is not valid"),
        ({"global_batch": 0}, "global_batch 0 is not valid: give an integer >= 1"),
        ({"global_batch": 2.5}, "global_batch 2.5 is not valid"),
        ({"p_min": 4, "global_batch": 2}, "global_batch 2 is smaller than p_min 4"),
    ],
)
def test_seer_options_a_job_would_fail_on_are_refused_when_made(
    options: dict[str, object], words: str
) -> None:
    """One check for the SDK, the CLI and the scheduler's SEER jobs: each failed only once used
    (a stage's other trials trained, then a FAILED run). The trainers' job names a bad tuner
    with the same words."""
    from trainers.seer_runner import SeerJob

    with pytest.raises(ValueError, match=words):
        SeerOptions(1, 4, **options)
    if "tuner" in options:
        job = SeerJob("t", "lenet", 1, "j", 1, 4, 4, 2, 1, 4.0, 1.0, 64, 0, tuner="asha")
        with pytest.raises(ValueError, match=words):
            job.plan()


def test_client_seer_names_a_bad_option_before_anything_runs(tmp_path: Path) -> None:
    from tenantml import datasets
    from tenantml.client import Client

    c = Client(tmp_path / "home")
    d = datasets.load("digits")
    c.submit("digits", d.schema)
    c.feed("digits", d.inputs[:20], d.labels[:20])
    for options, words in (
        ({"etaa": 2}, "SEER option 'etaa' is not valid: use eta, v, p_min"),
        ({"seed": -1}, "seed -1 is not valid"),
        ({"tuner": "asha"}, "tuner 'asha' is not valid: use one of replan, seer"),
    ):
        with pytest.raises(ValueError, match=words):
            c.seer("digits", "lenet", 1.0, 4.0, **options)
    assert job_records(c.mlflow, tenant_experiments(c.mlflow).values()) == []  # no job ran


def test_padded_sequences_are_encoded_once() -> None:
    rows = [np.arange(6, dtype=np.float32).reshape(2, 3), np.ones((4, 3), np.float32)]
    listed = encode_batch(SEQ, rows)
    assert listed.x.shape == (2, 4, 3) and listed.lengths is not None
    assert encode_batch(SEQ, listed) is listed  # an encoded batch passes through
    x, lengths = encode_for_inference(SEQ, listed)
    assert x is listed.x and lengths is listed.lengths
    # already in the layout: the same arrays back, checked, not copied
    again = encode_batch(SEQ, listed.x, listed.lengths)
    assert again.x is listed.x and np.array_equal(again.lengths, listed.lengths)
    # padded wider than needed, garbage past the lengths: cut, encoded as the list would be
    wide = np.full((2, 6, 3), np.nan, np.float32)
    wide[0, :2], wide[1, :4] = rows
    cut = encode_batch(SEQ, wide, [2, 4])
    assert np.array_equal(cut.x, listed.x) and np.array_equal(cut.lengths, listed.lengths)
    wide[1, 1, 0] = np.inf
    # an inference batch is not stored: its error says what became of it
    with pytest.raises(BadExampleError, match="example 1 rejected.*; nothing was predicted$"):
        encode_batch(SEQ, wide, [2, 4])
    # lengths out of range were cut Python-style (-1: all but the last step; 9: all 6)
    for bad, example in (([-1, 4], 0), ([2, 9], 1), ([2, 2.5], 1), ([True, 2], 0)):
        with pytest.raises(BadExampleError, match=f"example {example} .*not an integer in 1..6"):
            encode_batch(SEQ, wide, bad)
    with pytest.raises(ValueError, match="1 lengths for 2 inputs"):
        encode_batch(SEQ, wide, [2])
    # whole lengths of any kind, as `int(t)` took them before
    for good in (np.array([2.0, 4.0]), np.array([2, 4], np.int32), [2.0, 4]):
        assert np.array_equal(encode_batch(SEQ, np.zeros((2, 5, 3)), good).lengths, [2, 4])
    form = pyfunc_input(SEQ, rows)
    assert isinstance(form, dict) and form["x"].dtype == np.float32
    flat = pyfunc_input(Schema(input=Tensor(2), output=Tensor(2)), [[0, 1]])
    assert isinstance(flat, np.ndarray) and flat.dtype == np.float32
    assert isinstance(encode_batch(SEQ, rows), InferenceBatch)


def test_one_job_run_per_job_its_tags_set_once(tracking: MlflowClient, wine: ExampleStore) -> None:
    exp = ensure_tenant_experiment(tracking, "wine", str(wine.schema("wine")), ["knn"])
    assert tracking.get_experiment(exp).tags[EXPERIMENT_KIND] == MODEL_TRAINING
    spec = JobSpec("wine", "knn", 1, "knn-s1", 3, "rate", None, 4, 1, dispatched_at=time.time())
    first = run_job(spec, tracking, wine, exp, flow_run_id="flow-1")
    run = tracking.get_run(first.run_id)
    assert first.status == "FINISHED" and first.accuracy is not None and first.tick == 3
    tags = run.data.tags
    assert {k: tags[k] for k in ("tenantml.kind", "tenantml.job_id", "tenantml.tenant",
            "tenantml.tick", "tenantml.policy", "tenantml.slot", "tenantml.flow_run_id")} == {
        "tenantml.kind": "job", "tenantml.job_id": "knn-s1", "tenantml.tenant": "wine",
        "tenantml.tick": "3", "tenantml.policy": "rate", "tenantml.slot": "1",
        "tenantml.flow_run_id": "flow-1"}  # fmt: skip
    assert tags["tenantml.model_uri"].startswith("models:/")
    assert {"model": "knn", "snapshot": "1", "max_epochs": "4"}.items() <= run.data.params.items()
    assert {"accuracy", "cost_s", "epochs", "ended_at", "started_at", "dispatch_latency_s",
            "resumed_from_epoch", "val_accuracy"} <= set(run.data.metrics)  # fmt: skip
    # a retry is the same run, with this attempt's tags
    again = run_job(dataclasses.replace(spec, tick=4, slot=0), tracking, wine, exp,
                    flow_run_id="flow-2")  # fmt: skip
    tags = tracking.get_run(again.run_id).data.tags
    assert again.run_id == first.run_id and again.status == "FINISHED"
    assert (tags["tenantml.tick"], tags["tenantml.slot"], tags["tenantml.flow_run_id"]) == (
        "4", "0", "flow-2")  # fmt: skip
    assert first.slot == 1 and again.slot == 0  # the record: its latest attempt's slot
    # a job that fails ends FAILED, and its run is no longer the thread's active run
    with pytest.raises(KeyError, match="nonesuch"):
        run_job(JobSpec("wine", "nonesuch", 1, "bad-s1", 3, "rate"), tracking, wine, exp)
    assert mlflow.active_run() is None
    assert {(r.job_id, r.status) for r in job_records(tracking, [exp])} == {
        ("knn-s1", "FINISHED"), ("bad-s1", "FAILED")}  # fmt: skip


def test_a_job_run_cut_off_before_its_params_is_no_jobs(
    tracking: MlflowClient, wine: ExampleStore, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A process killed between creating a job's run and logging its params left a RUNNING job
    run without its model, which the scheduler resumed as model '' and which then failed for
    good (the bounded chaos run, 2026-11-29). Such a run is no job's; the next attempt makes
    the job's run."""
    from mlflow_plugin.tracking import JobRecord, start_job_run

    exp = ensure_tenant_experiment(tracking, "wine", str(wine.schema("wine")), ["knn"])

    class Killed(BaseException):
        pass

    def killed(*args: object, **kwargs: object) -> None:
        raise Killed  # the process dies here

    with monkeypatch.context() as m:
        m.setattr(tracking, "log_batch", killed)
        with pytest.raises(Killed):
            start_job_run(tracking, exp, tenant="wine", job_id="cut-s1",
                          params={"model": "knn", "snapshot": 1}, tags={})  # fmt: skip

    def records() -> list[JobRecord]:
        return [r for r in job_records(tracking, [exp]) if r.job_id == "cut-s1"]

    assert records() == []
    run_id = start_job_run(tracking, exp, tenant="wine", job_id="cut-s1",
                           params={"model": "knn", "snapshot": 1}, tags={})  # fmt: skip
    (rec,) = records()
    assert (rec.run_id, rec.candidate, rec.snapshot, rec.status) == (run_id, "knn", 1, "RUNNING")


def test_a_model_that_cannot_be_served_is_not_logged(
    tracking: MlflowClient, wine: ExampleStore
) -> None:
    """``best`` only moves up, so a job that does not beat it keeps its metrics and params but
    logs no model (``tenantml.model_skipped`` says why); one that beats it, or the first, does."""
    from mlflow_plugin.registry import best_model
    from tasks._service import record_finished

    exp = ensure_tenant_experiment(tracking, "wine", str(wine.schema("wine")), ["knn"])
    first = run_job(JobSpec("wine", "knn", 1, "knn-a", 1, "rate"), tracking, wine, exp)
    assert "tenantml.model_uri" in tracking.get_run(first.run_id).data.tags
    promoted = record_finished(tracking, first)
    assert promoted is not None and best_model(tracking, "wine") == promoted
    # the same model again (same accuracy): not better, so never served
    again = run_job(JobSpec("wine", "knn", 1, "knn-b", 2, "rate"), tracking, wine, exp)
    run = tracking.get_run(again.run_id)
    assert again.status == "FINISHED" and again.accuracy == first.accuracy
    assert "tenantml.model_uri" not in run.data.tags
    assert run.data.tags["tenantml.model_skipped"] == (
        f"accuracy {again.accuracy:.4f} does not beat best v{promoted.version} "
        f"({promoted.accuracy:.4f})"
    )
    assert {"accuracy", "cost_s", "resumed_from_epoch"} <= set(run.data.metrics)
    assert record_finished(tracking, again) is None  # nothing to register
    logged = mlflow.search_logged_models(experiment_ids=[exp], output_format="list")
    sources = [m.source_run_id for m in logged]
    assert first.run_id in sources and again.run_id not in sources


def test_trials_are_nested_runs_found_again(tracking: MlflowClient, wine: ExampleStore) -> None:
    exp = ensure_tenant_experiment(tracking, "wine", str(wine.schema("wine")), ["knn"])
    with JobRun.start(tracking, exp, tenant="wine", job_id="seer-x", candidate="lenet",
                      snapshot=1, policy="seer", tick=0) as run:  # fmt: skip
        trial = run.start_trial("trial-000", {"lr": 0.1})
        trial.log_epoch({"val_accuracy": 0.5}, step=1)
        trial.set_tags({"seer.stage1": "final"})
        trial.end(ok=True)
        assert run.start_trial("trial-000", {"lr": 0.1}) is trial
        fresh = JobRun(tracking, exp, run.run_id, "seer-x")
        assert fresh.start_trial("trial-000", {"lr": 0.1}).run_id == trial.run_id
    t = tracking.get_run(trial.run_id)
    assert t.data.tags["mlflow.parentRunId"] == run.run_id
    assert t.data.tags["tenantml.kind"] == "seer-trial" and t.info.status == "FINISHED"
    assert t.data.params == {"lr": "0.1"} and t.data.tags["seer.stage1"] == "final"
    assert tracking.get_run(run.run_id).info.status == "FINISHED"
    assert [r.job_id for r in job_records(tracking, [exp]) if r.job_id == "seer-x"] == ["seer-x"]


def test_tenant_experiment_opens_as_model_training_with_accuracy_and_cost_first(
    tracking: MlflowClient,
) -> None:
    """The UI tags: set on a new experiment, and put right on one made before them."""
    old = tracking.create_experiment(experiment_name("old"), tags={"tenantml.kind": "tenant"})
    assert ensure_tenant_experiment(tracking, "old", "{}", []) == old
    for exp in (old, ensure_tenant_experiment(tracking, "new", "{}", [])):
        tags = tracking.get_experiment(exp).tags
        assert tags[EXPERIMENT_KIND] == MODEL_TRAINING
        view = json.loads(tags[RUNS_VIEW_TAG])
        assert view["selectedColumns"][:2] == ["metrics.`accuracy`", "metrics.`cost_s`"]
        assert view["orderByKey"] == "metrics.`accuracy`" and view["orderByAsc"] is False
    page = runs_page("http://127.0.0.1:5000/", old)
    assert page.startswith(f"http://127.0.0.1:5000/#/experiments/{old}/runs?")
    assert f"viewStateShareKey={RUNS_VIEW_KEY}" in page and "workflowType=machine_learning" in page


# A job whose MLflow server stops answering MLflow's own (fluent) client after the job started:
# the fluent client is pointed at a port nothing listens on, the job's client stays on the store.
_ENDS_IN_AN_OUTAGE = """
import socket, sys
import mlflow
from mlflow.tracking import MlflowClient
from mlflow_plugin import JobRun
client = MlflowClient(sys.argv[1])
exp = client.create_experiment("wine")
run = JobRun.start(client, exp, tenant="wine", job_id="knn-s1", candidate="knn", snapshot=1,
                   policy="rate", tick=1)
with socket.socket() as s:
    s.bind(("127.0.0.1", 0))
    port = s.getsockname()[1]
mlflow.set_tracking_uri(f"http://127.0.0.1:{port}")  # refused from now on
run.end(ok=True)
print("status", client.get_run(run.run_id).info.status)
"""


def test_a_job_that_trained_to_the_end_is_finished_when_the_fluent_end_fails(
    tmp_path: Path,
) -> None:
    """`JobRun.end`: MLflow's fluent ``end_run`` reads the run back to print its URL before it
    sets the status; refused (an MLflow outage), it failed a job that had trained to the end.
    The status is the job's client's to set."""
    import subprocess
    import sys

    uri = f"sqlite:///{tmp_path / 'mlflow.db'}"
    env = {**os.environ, "MLFLOW_TRACKING_URI": uri, "MLFLOW_HTTP_REQUEST_MAX_RETRIES": "0"}
    res = subprocess.run([sys.executable, "-c", _ENDS_IN_AN_OUTAGE, uri], env=env,
                         cwd=Path(__file__).resolve().parents[2], capture_output=True, text=True,
                         timeout=180)  # fmt: skip
    assert res.returncode == 0 and "status FINISHED" in res.stdout, res.stderr[-2000:]
