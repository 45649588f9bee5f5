"""tenantml bench: outputs, reproducibility, and one-line errors with exit code 2."""

import json
from pathlib import Path

import numpy as np
import pytest
from typer.testing import CliRunner

from tenantml.bench.datasets import BUILTIN, load_dataset
from tenantml.bench.runner import Protocol, run_protocol
from tenantml.cli import app

runner = CliRunner()


def _csv(path: Path, rows: list[str], header: str = "tenant,model,quality,cost") -> Path:
    path.write_text("\n".join([header, *rows]) + "\n")
    return path


def _bench(out: Path, *args: str) -> dict:
    """Run ``tenantml bench ARGS --out OUT``; assert success; return summary.json."""
    res = runner.invoke(app, ["bench", *args, "--out", str(out)])
    assert res.exit_code == 0, res.output
    return json.loads((out / "summary.json").read_text())


def _good_rows(n_tenants: int = 6, n_models: int = 5) -> list[str]:
    rng = np.random.default_rng(0)
    return [
        f"t{i},m{k},{rng.uniform(0.2, 0.95):.3f},{rng.uniform(1, 9):.2f}"
        for i in range(n_tenants)
        for k in range(n_models)
        if (i + k) % 7
    ]


def test_bench_on_user_csv_writes_all_outputs(tmp_path: Path) -> None:
    data = _csv(tmp_path / "d.csv", _good_rows())
    meta = _csv(
        tmp_path / "meta.csv",
        [f"m{k},{2010 + k},{100 * (5 - k)}" for k in range(5)],
        header="model,year,citations",
    )
    out = tmp_path / "out"
    summary = _bench(
        out, "--data", str(data), "--models-meta", str(meta), "--test-users", "3",
        "--repeats", "3", "--jobs", "1",
    )  # fmt: skip
    assert summary["dataset"] == "d"
    assert {"hybrid", "mostcited", "mostrecent", "spearmint", "oracle", "optuna"} <= set(
        summary["policies"]
    )
    for stats in summary["policies"].values():
        assert set(stats["cost_to_avg_loss"]) == {"0.05", "0.02", "0.01"}
        assert 0 <= stats["auc_avg_loss"] <= stats["auc_worst_loss"] + 1e-12
    assert summary["speedups"]["hybrid"]["0.02"] in (1.0, None)
    lines = (out / "curves.csv").read_text().splitlines()
    assert lines[0] == "policy,repeat,cost,avg_loss,worst_loss,rel_accuracy"
    assert len(lines) == 1 + 3 * len(summary["policies"]) * 1001
    assert (out / "avg_loss.png").stat().st_size > 1000 and (out / "worst_loss.png").exists()


def test_protocol_is_bit_for_bit_reproducible_across_worker_counts() -> None:
    table = load_dataset("easeml-dl")
    proto = Protocol(policies=("hybrid", "random", "spearmint"), test_users=5, repeats=3, seed=9)
    a = run_protocol(table, proto, jobs=1)
    b = run_protocol(table, proto, jobs=2)
    for ra, rb in zip(a, b, strict=True):
        for name in proto.policies:
            np.testing.assert_array_equal(ra.curves[name]["avg_loss"], rb.curves[name]["avg_loss"])
            assert ra.regret[name] == rb.regret[name]


def test_multi_device_and_cost_oblivious_modes(tmp_path: Path) -> None:
    summary = _bench(
        tmp_path / "g", "easeml-dl", "--repeats", "2", "--gpus", "4",
        "--policies", "hybrid,roundrobin",
    )  # fmt: skip
    assert set(summary["policies"]) == {"hybrid", "roundrobin", "hybrid-pooled"}
    summary = _bench(
        tmp_path / "o", "syn-0.5-1.0", "--repeats", "1", "--cost-oblivious", "--policies", "hybrid"
    )
    assert summary["protocol"]["budget"] == 0.5 and summary["protocol"]["cost_oblivious"]


@pytest.mark.parametrize("name", BUILTIN)
def test_every_builtin_data_set_loads(name: str) -> None:
    table = load_dataset(name)
    assert table.quality.shape == (len(table.tenants), len(table.models))
    q = table.quality[np.isfinite(table.quality)]
    assert q.min() >= 0 and q.max() <= 1
    assert (~table.kernel_only).sum() >= 8


BAD = [
    (["t0,m0,0.5,1", "t0,m1,0.6"], "line 3: 3 fields, expected 4"),
    (["t0,m0,abc,1"], "quality 'abc' is not a number"),
    (["t0,m0,0.5,1", "t0,m0,0.6,2"], "line 3: duplicate row for tenant 't0', model 'm0'"),
    (["t0,m0,0.5,0"], "line 2: cost 0.0 must be a finite number > 0"),
    (["t0,m0,0.5,-3"], "cost -3.0 must be a finite number > 0"),
    (["t0,m0,85,1"], "line 2: quality 85.0 outside [0, 1]"),
]


@pytest.mark.parametrize("rows,message", BAD)
def test_bad_csv_is_a_one_line_error_with_exit_2(tmp_path: Path, rows, message) -> None:
    data = _csv(tmp_path / "bad.csv", rows)
    res = runner.invoke(app, ["bench", "--data", str(data), "--out", str(tmp_path / "o")])
    assert res.exit_code == 2
    assert message in res.output and res.output.count("\n") <= 3
    assert not (tmp_path / "o").exists()  # nothing written


def test_missing_columns_and_unknowns(tmp_path: Path) -> None:
    bad = _csv(tmp_path / "h.csv", ["a,b,c"], header="user,arm,acc")
    res = runner.invoke(app, ["bench", "--data", str(bad)])
    assert res.exit_code == 2 and "expected columns tenant,model,quality[,cost]" in res.output
    res = runner.invoke(app, ["bench", "easeml-dl", "--policies", "hybrid,bogus"])
    assert res.exit_code == 2 and "unknown policy 'bogus'; valid: rate, hybrid" in res.output
    res = runner.invoke(app, ["bench", "easeml-dl", "--test-users", "12"])
    assert res.exit_code == 2 and "--test-users 12 but easeml-dl has 8 tenants" in res.output
    res = runner.invoke(app, ["bench", "nope"])
    assert res.exit_code == 2 and "unknown data set 'nope'" in res.output
    res = runner.invoke(app, ["bench", "delgado179", "--policies", "mostcited"])
    assert res.exit_code == 2 and "needs model metadata" in res.output
    res = runner.invoke(app, ["bench", "lcdb", "--costs", "guessed"])
    assert res.exit_code == 2 and "--costs 'guessed'; valid: given, predicted" in res.output
    res = runner.invoke(app, ["bench", "lcdb", "--kernel", "rbf"])
    assert res.exit_code == 2 and "--kernel 'rbf'; valid: app-a, empirical" in res.output
    res = runner.invoke(app, ["bench", "lcdb", "--costs", "predicted", "--cost-oblivious"])
    assert res.exit_code == 2 and "--costs predicted needs the cost-aware protocol" in res.output
    # these ran, and changed Hybrid's numbers
    for option, value, valid in (
        ("--delta", "nan", "a probability in (0, 1)"),
        ("--delta", "5", "a probability in (0, 1)"),
        ("--hybrid-s", "0", ">= 1"),
        ("--lambda-exp", "2", "an exponent in [0, 1]"),
    ):
        res = runner.invoke(app, ["bench", "easeml-dl", option, value])
        assert res.exit_code == 2 and f"valid: {valid}" in res.output, (option, res.output)


def test_predicted_costs_change_decisions_but_not_the_clock(tmp_path: Path) -> None:
    table = load_dataset("oboe", 0)
    kw = dict(policies=("rate", "oracle"), test_users=5, repeats=2, grid_points=51)
    given = run_protocol(table, Protocol(**kw), jobs=1)  # type: ignore[arg-type]
    pred = run_protocol(table, Protocol(costs="predicted", **kw), jobs=1)  # type: ignore[arg-type]
    # the oracle knows the true costs: identical; rate decides from predictions: different
    for g, p in zip(given, pred, strict=True):
        np.testing.assert_array_equal(
            g.curves["oracle"]["avg_loss"], p.curves["oracle"]["avg_loss"]
        )
    assert any(
        not np.array_equal(g.curves["rate"]["avg_loss"], p.curves["rate"]["avg_loss"])
        for g, p in zip(given, pred, strict=True)
    )
    summary = _bench(
        tmp_path / "o", "oboe", "--costs", "predicted", "--policies", "rate,oracle",
        "--repeats", "2", "--test-users", "4", "--jobs", "1",
    )  # fmt: skip
    assert summary["protocol"]["costs"] == "predicted"
    assert set(summary["over_oracle"]["rate"]) == {"0.05", "0.02", "0.01"}


def test_fewer_tenants_than_test_users(tmp_path: Path) -> None:
    data = _csv(tmp_path / "d.csv", _good_rows(n_tenants=4))
    res = runner.invoke(app, ["bench", "--data", str(data), "--test-users", "10"])
    assert res.exit_code == 2 and "valid: 1..4" in res.output


def test_bench_overhead_prints_figures(tmp_path: Path) -> None:
    res = runner.invoke(
        app,
        [
            "bench-overhead",
            "--tenants",
            "50",
            "--models",
            "20",
            "--obs",
            "5",
            "--decisions",
            "10",
            "--memory-tenants",
            "80",
            "--out",
            str(tmp_path),
        ],
    )
    assert res.exit_code == 0, res.output
    assert "median" in res.output and "peak" in res.output
    result = json.loads((tmp_path / "overhead.json").read_text())
    assert result["speed"]["decision_ms_median"] > 0 and result["memory"]["peak_mib"] > 0


def test_bench_logs_each_policy_to_mlflow(tmp_path: Path, monkeypatch) -> None:
    mlflow = pytest.importorskip("mlflow")
    monkeypatch.setenv("MLFLOW_TRACKING_URI", f"sqlite:///{tmp_path}/mlflow.db")
    monkeypatch.setenv("MLFLOW_ARTIFACT_ROOT", str(tmp_path / "artifacts"))
    monkeypatch.chdir(tmp_path)  # the default artifact location is ./mlruns
    res = runner.invoke(
        app,
        [
            "bench",
            "easeml-dl",
            "--repeats",
            "2",
            "--policies",
            "hybrid,roundrobin",
            "--out",
            str(tmp_path / "o"),
            "--mlflow",
        ],
    )
    assert res.exit_code == 0, res.output
    client = mlflow.MlflowClient(f"sqlite:///{tmp_path}/mlflow.db")
    exp = client.get_experiment_by_name("bench-easeml-dl")
    runs = client.search_runs([exp.experiment_id])
    assert sorted(r.data.tags["mlflow.runName"] for r in runs) == ["hybrid", "roundrobin"]
    run = next(r for r in runs if r.data.tags["mlflow.runName"] == "hybrid")
    assert run.data.params["policy"] == "hybrid"
    assert len(client.get_metric_history(run.info.run_id, "avg_loss")) == 1001
    names = {a.path for a in client.list_artifacts(run.info.run_id)}
    assert {"avg_loss.png", "worst_loss.png", "summary.json"} <= names


def test_demo_runs_the_short_protocol(tmp_path: Path) -> None:
    res = runner.invoke(app, ["bench-demo", "--repeats", "2", "--out", str(tmp_path / "demo")])
    assert res.exit_code == 0, res.output
    assert "hybrid" in res.output and (tmp_path / "demo" / "summary.json").exists()


def test_tenant_weights_reach_the_replay(tmp_path: Path) -> None:
    """`--tenant-weights`: w_i from a CSV (unlisted: 1) weight the replay's regret and steer
    `rate`; a bad weight is named with its line."""
    import dataclasses

    from tenantml.bench.datasets import BenchInputError, read_tenant_weights

    table = load_dataset("easeml-dl", 0)
    path = tmp_path / "w.csv"
    listed = table.tenants[::2]
    rows = [f"{t},{w:.3f}" for t, w in zip(listed, np.linspace(0.2, 5, len(listed)), strict=True)]
    path.write_text("tenant,weight\n" + "\n".join(rows) + "\n")
    weights = read_tenant_weights(path, table.tenants)
    assert weights[0] == pytest.approx(0.2) and weights[1] == 1.0
    kw = dict(policies=("rate",), test_users=4, repeats=1, grid_points=21)
    plain = run_protocol(table, Protocol(**kw), jobs=1)  # type: ignore[arg-type]
    heavy = dataclasses.replace(table, weights=weights)
    weighted = run_protocol(heavy, Protocol(**kw), jobs=1)  # type: ignore[arg-type]
    assert not np.array_equal(
        plain[0].curves["rate"]["avg_loss"], weighted[0].curves["rate"]["avg_loss"]
    )
    path.write_text(f"tenant,weight\n{table.tenants[0]},0\n")
    with pytest.raises(BenchInputError, match="line 2: weight 0.0; must be finite and > 0"):
        read_tenant_weights(path, table.tenants)
    # a misspelt tenant is named, not weighed 1 without a word
    path.write_text(f"tenant,weight\n{table.tenants[0]},2\n{table.tenants[1]}x,3\n")
    with pytest.raises(BenchInputError, match=rf"line 3: no tenant '{table.tenants[1]}x' here; "
                       rf"valid: {table.tenants[0]}, "):  # fmt: skip
        read_tenant_weights(path, table.tenants)
    res = runner.invoke(app, ["bench", "easeml-dl", "--tenant-weights", str(tmp_path / "none.csv")])
    assert res.exit_code == 2 and "none.csv: no such file" in res.output
