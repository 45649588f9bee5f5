"""``infra/scripts/cost_errors.py``: the live service's cost predictions against its jobs."""

from __future__ import annotations

import math
from pathlib import Path

import pytest

from tests.scripts import load_script


def test_each_finished_job_is_scored_against_its_limit_over_the_factor(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A job limited at 16 s was expected to cost 1 s (factor 16); it took e s: log error 1.
    One limited at 32 s took 2 / e^2 s: -2. A failed job, and a limit in dollars, are left out."""
    import mlflow

    from mlflow_plugin import JobRun, ensure_tenant_experiment

    home = tmp_path / "seed-0" / "homes" / "live"
    home.mkdir(parents=True)
    uri = f"sqlite:///{home / 'mlflow.db'}"
    monkeypatch.setenv("MLFLOW_TRACKING_URI", uri)  # JobRun's active run, as the service's
    client = mlflow.MlflowClient(uri)
    exp = ensure_tenant_experiment(client, "a", "{}", [])
    jobs = ((16.0, "s", math.e, True), (32.0, "s", 2 * math.exp(-2), True), (16.0, "s", 3.0, False),
            (16.0, "usd", 3.0, True))  # fmt: skip
    for k, (limit, unit, cost, ok) in enumerate(jobs):
        job = JobRun.start(client, exp, tenant="a", job_id=f"knn-{k}", candidate="knn",
                           snapshot=1, policy="rate", tick=k,
                           params={"time_budget_s": limit, "limit_unit": unit})  # fmt: skip
        job.log_metrics({"cost_s": cost})
        job.end(ok=ok)
    script = load_script("cost_errors")
    errors = sorted(script.log_errors(home / "mlflow.db", factor=16.0))
    assert errors == pytest.approx([-2.0, 1.0])
    s = script.summarise(errors)
    assert (s.jobs, s.mean_abs, s.mean) == (2, pytest.approx(1.5), pytest.approx(-0.5))
    assert s.rms == pytest.approx(math.sqrt(2.5))
    with pytest.raises(SystemExit):  # no home there: named, not a traceback
        script.main([str(tmp_path / "elsewhere")])
