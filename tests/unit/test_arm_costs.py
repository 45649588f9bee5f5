"""The scikit-learn arms' measured costs: what the cost prior starts from, and the script that
measures them (``infra/scripts/time_sklearn_arms.py``)."""

from __future__ import annotations

import json
import math
from pathlib import Path

import pytest

from tests.scripts import load_script
from trainers import CV_WORK, cost_size
from trainers.zoo import PIXEL_MODELS, RELATIVE_COST, SKLEARN_COST_FILE, TABULAR_MODELS

SHIPPED = Path(__file__).resolve().parents[2] / "trainers" / SKLEARN_COST_FILE


def test_every_sklearn_arm_has_a_measured_cost_and_the_prior_uses_it() -> None:
    measured = json.loads(SHIPPED.read_text())["seconds_per_1000"]
    assert set(measured) == {*TABULAR_MODELS, *PIXEL_MODELS}
    for arm, value in measured.items():
        assert math.isfinite(value) and value > 0, arm
        assert RELATIVE_COST[arm] == value
    # what the hand-set table had wrong by an order of magnitude (bench-live's own jobs agree)
    assert measured["mlp"] > 20 * measured["logistic_regression"]
    assert measured["random_forest"] > 10 * measured["logistic_regression"]


def test_cost_size_counts_the_folds_of_a_cross_validated_job() -> None:
    assert cost_size(150, tabular=True) == pytest.approx(150 * CV_WORK)
    assert cost_size(150, tabular=False) == 150  # an image tenant's pixel arms keep a holdout
    assert cost_size(3000, tabular=True) == 3000  # above CV_MAX_EXAMPLES: a holdout job


def test_the_script_measures_seconds_per_thousand_examples(tmp_path: Path) -> None:
    script = load_script("time_sklearn_arms")
    assert script.seconds_per_thousand(0.5, 150, True) == pytest.approx(500 / (150 * CV_WORK))
    assert script.seconds_per_thousand(0.6, 3000, True) == pytest.approx(0.2)
    # a partial run re-measures its arms and keeps the file's others
    out = tmp_path / "costs.json"
    out.write_text(json.dumps({"seconds_per_1000": {"mlp": 123.0, "knn": 9.0}}))
    script.main(["--arms", "knn", "pixels-knn", "--out", str(out)])
    doc = json.loads(out.read_text())
    costs = doc["seconds_per_1000"]
    assert set(costs) == {"mlp", "knn", "pixels-knn"} and costs["mlp"] == 123.0
    assert 0 < costs["knn"] < 9.0 and costs["pixels-knn"] > 0
    assert doc["measured_on"]["scikit-learn"]


def test_an_unknown_arm_is_named_with_the_valid_ones(capsys: pytest.CaptureFixture[str]) -> None:
    script = load_script("time_sklearn_arms")
    with pytest.raises(SystemExit):
        script.main(["--arms", "xgboost"])
    err = capsys.readouterr().err
    assert "unknown arms ['xgboost']" in err and "logistic_regression" in err


def test_the_check_fits_the_arms_ratios_from_bench_live_jobs(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Two runs' homes, their job runs written by the service's own `JobRun`: the SVM took 8
    times the k-NN's seconds on every tenant; the table says 2 times, so the fitted errors are
    +-log(4)/2 about their mean (tenant scales and the offset drop out). A failed job and an
    arm the table lacks are left out."""
    import mlflow

    from mlflow_plugin import JobRun, ensure_tenant_experiment

    for run in ("seed-0", "seed-1"):
        home = tmp_path / run / "homes" / "live"
        home.mkdir(parents=True)
        uri = f"sqlite:///{home / 'mlflow.db'}"
        # JobRun makes its run MLflow's active one: by environment, as `Settings.apply` does
        # (`mlflow.set_tracking_uri` would pin a process-wide URI for later tests)
        monkeypatch.setenv("MLFLOW_TRACKING_URI", uri)
        client = mlflow.MlflowClient(uri)
        for tenant, scale in (("a", 1.0), ("b", 30.0)):
            exp = ensure_tenant_experiment(client, tenant, "{}", [])
            jobs = (("knn", 0.01, True), ("svm", 0.08, True), ("mlp", 5.0, True),
                    ("svm", 100.0, False))  # fmt: skip
            for k, (arm, cost, ok) in enumerate(jobs):
                job = JobRun.start(
                    client, exp, tenant=tenant, job_id=f"{arm}-{k}", candidate=arm,
                    snapshot=1, policy="rate", tick=k,
                )  # fmt: skip
                job.log_metrics({"cost_s": cost * scale})
                job.end(ok=ok)
    script = load_script("time_sklearn_arms")
    errors = script.check([tmp_path], {"knn": 1.0, "svm": 2.0})  # mlp: not in the table
    assert set(errors) == {"tabular"}
    assert errors["tabular"]["svm"] == pytest.approx(math.log(4) / 2)
    assert errors["tabular"]["knn"] == pytest.approx(-math.log(4) / 2)
    with pytest.raises(SystemExit, match="no scikit-learn jobs"):
        script.check([tmp_path / "elsewhere"], {"knn": 1.0})
