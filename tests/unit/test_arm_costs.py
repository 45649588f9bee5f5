"""The scikit-learn arms' measured costs: what the cost prior starts from, and the script that
measures them (``infra/scripts/time_sklearn_arms.py``)."""

from __future__ import annotations

import json
import math
import statistics
from pathlib import Path

import pytest

from tests.scripts import load_script
from trainers import CV_WORK, cost_size
from trainers.zoo import (
    COST_GROWTH,
    PIXEL_MODELS,
    RELATIVE_COST,
    SKLEARN_COST_FILE,
    TABULAR_MODELS,
)

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


def test_every_sklearn_arm_has_a_measured_growth_and_the_prior_uses_it() -> None:
    doc = json.loads(SHIPPED.read_text())
    exponents, at = doc["size_exponent"], doc["reference_size"]
    assert set(exponents) == {*TABULAR_MODELS, *PIXEL_MODELS}
    for arm, e in exponents.items():
        assert math.isfinite(e) and -0.5 < e < 3.5, arm
        assert COST_GROWTH[arm] == (e, at["pixels" if arm.startswith("pixels-") else "tabular"])
    # a kernel SVM's cost grows faster than the rows, histogram boosting's (binned, stopped
    # early) slower than a forest's
    assert exponents["svm-poly-c4-r10"] > 1.5
    assert exponents["gradient_boosting"] < exponents["random_forest"]


def test_fit_growth_finds_the_power_law_and_predicts_the_largest_size() -> None:
    script = load_script("time_sklearn_arms")
    sizes = [1000.0, 2000.0, 4000.0, 8000.0]
    growth = script.fit_growth(sizes, [2e-4 * s**1.8 for s in sizes])
    assert growth.exponent == pytest.approx(1.8)
    assert growth.power_error == pytest.approx(0.0, abs=1e-9)
    # the linear law through the smaller sizes' mean log of seconds / size, right at 2000
    # (their mean log size), two doublings short at 8000: 0.8 log 2 each
    assert growth.linear_error == pytest.approx(-2 * 0.8 * math.log(2))
    with pytest.raises(ValueError, match="three or more distinct sizes"):
        script.fit_growth([1000.0, 1000.0, 2000.0], [1.0, 1.0, 2.0])


def test_the_growth_run_keeps_the_costs_and_a_cost_run_keeps_the_growths(tmp_path: Path) -> None:
    script = load_script("time_sklearn_arms")
    out = tmp_path / "costs.json"
    out.write_text(json.dumps({"seconds_per_1000": {"knn": 9.0}, "size_exponent": {"mlp": 1.4}}))
    script.main(
        [
            "--growth",
            "--growth-of",
            "rows",
            "--arms",
            "knn",
            "--growth-rows",
            "1100",
            "1300",
            "1600",
            "--out",
            str(out),
        ]
    )
    doc = json.loads(out.read_text())
    assert doc["seconds_per_1000"] == {"knn": 9.0}
    assert set(doc["size_exponent"]) == {"mlp", "knn"} and doc["size_exponent"]["mlp"] == 1.4
    assert math.isfinite(doc["size_exponent"]["knn"])
    assert doc["measured_on"]["growth"]["rows"] == [1100, 1300, 1600]
    # the examples the costs hold at: the geometric mean of the cost run's tasks' examples
    assert doc["reference_size"]["tabular"] == pytest.approx(
        math.exp(statistics.fmean(math.log(n) for n in (150, 178, 569, 800, 3000))), rel=1e-2
    )
    script.main(["--arms", "knn", "--out", str(out)])
    again = json.loads(out.read_text())
    assert again["size_exponent"] == doc["size_exponent"] and again["seconds_per_1000"]["knn"] < 9
    for rows in (["1100", "1100", "1300"], ["600", "1100", "1300"]):  # a repeat; one with CV
        with pytest.raises(SystemExit):
            script.main(["--growth", "--growth-rows", *rows, "--out", str(out)])
        assert json.loads(out.read_text()) == again  # refused before anything is written


def test_every_sklearn_arm_has_a_measured_growth_in_the_features_and_classes() -> None:
    """Measured, and left out of the live service's prior (docs/live.md: its bench-live A/B)."""
    doc = json.loads(SHIPPED.read_text())
    for key in ("feature_exponent", "class_exponent"):
        assert set(doc[key]) == {*TABULAR_MODELS, *PIXEL_MODELS}
        for arm, e in doc[key].items():
            assert math.isfinite(e) and -1.0 < e < 3.5, (key, arm)
    # a forest's split search reads sqrt(columns) of them, a k-NN's fit does not; classic
    # boosting fits a tree per class
    assert doc["feature_exponent"]["random_forest"] - doc["feature_exponent"]["knn"] > 0.3
    assert doc["class_exponent"]["gradient_boosting"] > 0.5
    # where RELATIVE_COST holds: the cost run's tasks' geometric means (four to 50 columns, two
    # to four classes; 8x8 and 28x28 glyphs of ten letters)
    assert doc["reference_features"] == {"tabular": 17.3, "pixels": 224.0}
    assert doc["reference_classes"] == {"tabular": 2.7, "pixels": 10.0}


def test_the_growth_in_the_features_and_classes_is_timed_on_tasks_of_each_size(
    tmp_path: Path,
) -> None:
    script = load_script("time_sklearn_arms")
    tasks = script.growth_tasks([1600, 3200, 6400], "tabular", "features")
    assert [t.features for t in tasks] == list(script.GROWTH_FEATURES)
    assert {len(t.y) for t in tasks} == {script.GROWTH_AT_ROWS}
    tasks = script.growth_tasks([1600, 3200, 6400], "images", "classes")
    assert [t.classes for t in tasks] == list(script.GROWTH_CLASSES)
    assert [t.features for t in script.growth_tasks([1600], "images", "features")] == [
        side * side for side in script.GROWTH_SIDES
    ]
    with pytest.raises(ValueError, match="covariate must be one of"):
        script.growth_tasks([1600], "tabular", "colour")
    # one store holds every covariate's tasks: none may share a name (it would be fed twice)
    for kind in ("tabular", "images"):
        names = [t.name for c in script.COVARIATES for t in script.growth_tasks([3000], kind, c)]
        assert len(set(names)) == len(names)
    # a run of the features' and classes' growths keeps the rows' and the costs, the other
    # arms' growths, and the record of the rows' run
    out = tmp_path / "costs.json"
    rows_run = {"rows": [1500, 3000, 6000], "repeats": 5, "python": "3.0"}
    out.write_text(json.dumps({
        "seconds_per_1000": {"knn": 9.0}, "size_exponent": {"knn": 1.4},
        "feature_exponent": {"mlp": 0.3}, "measured_on": {"growth": rows_run},
    }))  # fmt: skip
    script.main(["--growth", "--growth-of", "features", "classes", "classes", "--arms", "knn",
                 "--growth-rows", "1", "--out", str(out)])  # fmt: skip
    doc = json.loads(out.read_text())
    assert doc["size_exponent"] == {"knn": 1.4} and doc["seconds_per_1000"] == {"knn": 9.0}
    assert set(doc["feature_exponent"]) == {"knn", "mlp"} and doc["feature_exponent"]["mlp"] == 0.3
    assert set(doc["class_exponent"]) == {"knn"}
    growth = doc["measured_on"]["growth"]
    assert {k: growth[k] for k in rows_run} == rows_run
    assert growth["classes"] == list(script.GROWTH_CLASSES)
    assert growth["features_run"]["repeats"] == 1 and growth["classes_run"]["rows"] == 3000
    assert doc["reference_features"]["tabular"] == pytest.approx(
        math.exp(statistics.fmean(math.log(f) for f in (4, 13, 30, 50, 20))), rel=1e-2
    )


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


def test_the_growth_check_scores_the_table_on_bench_live_jobs(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Two tenants of 1,500 and 12,000 rows (holdout jobs), 2 and 16 columns and 2 and 4
    classes in a run's home: the SVM's cost grows like the square of the rows, like the
    columns up to the 8 measured and like the root of the classes, the k-NN's like the rows
    alone, as the table says. With the growths every job is predicted exactly once its
    tenant's level is known; without, the SVM and the k-NN miss by -+(x_t + f_t + c_t / 2) / 2
    about it, x_t the tenant's log rows less the reference's, f_t its log columns (at most 8)
    less theirs, c_t its log classes less theirs; with the rows' growth only, by -+(f_t + c_t /
    2) / 2. A run of one split keeps its home in ``homes``, of several in ``seed-*/homes``."""
    import mlflow
    import numpy as np

    from mlflow_plugin import JobRun, ensure_tenant_experiment
    from store import ExampleStore, LocalBlobStore
    from store.schema import Schema, Tensor

    table = {"knn": 0.01, "svm": 0.05}
    doc = {
        "seconds_per_1000": table,
        "size_exponent": {"knn": 1.0, "svm": 2.0},
        "feature_exponent": {"knn": 0.0, "svm": 1.0},
        "class_exponent": {"knn": 0.0, "svm": 0.5},
        "reference_size": {"tabular": 2000.0, "pixels": 1500.0},
        "reference_features": {"tabular": 4.0, "pixels": 64.0},
        "reference_classes": {"tabular": 2.0, "pixels": 10.0},
        "measured_on": {"growth": {"rows": [12000], "features": [2, 8], "classes": [2, 4]}},
    }
    home = tmp_path / "seed-0" / "homes" / "live"
    store = ExampleStore(LocalBlobStore(home / "store"))
    uri = f"sqlite:///{home / 'mlflow.db'}"
    monkeypatch.setenv("MLFLOW_TRACKING_URI", uri)  # as in the check's test above
    client = mlflow.MlflowClient(uri)
    for tenant, rows, columns, classes, scale in (("a", 1500, 2, 2, 3.0), ("b", 12000, 16, 4, 0.5)):
        store.create_tenant(tenant, Schema(input=Tensor(columns), output=Tensor(classes)))
        store.feed(tenant, np.zeros((rows, columns), np.float32), ["0", "1"] * (rows // 2))
        exp = ensure_tenant_experiment(client, tenant, "{}", [])
        for k, arm in enumerate(table):
            size = cost_size(rows, True)
            cost = (
                (
                    scale
                    * table[arm]
                    * size
                    / 1000
                    * (size / 2000) ** (doc["size_exponent"][arm] - 1)
                )
                * (min(columns, 8) / 4) ** doc["feature_exponent"][arm]
                * (classes / 2) ** doc["class_exponent"][arm]
            )
            job = JobRun.start(client, exp, tenant=tenant, job_id=f"{arm}-{k}", candidate=arm,
                               snapshot=1, policy="rate", tick=k)  # fmt: skip
            job.log_metrics({"cost_s": cost})
            job.end(ok=True)
    script = load_script("time_sklearn_arms")
    grown, flat, jobs = script.check_growth([tmp_path], doc)["tabular"]
    x, f = np.log(np.array([1500.0, 12000.0]) / 2000), np.log(np.array([2.0, 8.0]) / 4)
    c = np.log(np.array([2.0, 4.0]) / 2) / 2
    assert grown == pytest.approx(0.0, abs=1e-9) and jobs == 4
    assert flat == pytest.approx(math.sqrt(np.mean((x + f + c) ** 2)) / 2)
    rows_only, _, _ = script.check_growth([tmp_path], doc, ["rows"])["tabular"]
    assert rows_only == pytest.approx(math.sqrt(np.mean((f + c) ** 2)) / 2)
    # the same home as a run of one split keeps it
    single = tmp_path / "single"
    (single / "homes").mkdir(parents=True)
    home.rename(single / "homes" / "live")
    assert script.check_growth([single], doc)["tabular"][2] == 4
    with pytest.raises(SystemExit, match="no scikit-learn jobs"):
        script.check_growth([tmp_path / "elsewhere"], doc)
