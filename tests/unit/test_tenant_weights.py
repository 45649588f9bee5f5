"""Tenant weights (issue 16, item 6): the operator sets w_i from the SDK and the CLI, `status`
shows it, the scheduler's state reads it; a tenant cannot set its own; bad input changes
nothing."""

from __future__ import annotations

from pathlib import Path

import pytest
from typer.testing import CliRunner

from tenantml.cli import app

SCHEMA = "{input: {[Tensor[4]], []}, output: {[Tensor[3]], []}}"
runner = CliRunner()


def _cli(home: Path, *args: str) -> tuple[int, str]:
    res = runner.invoke(app, [*args, "--home", str(home)])
    return res.exit_code, res.output


def test_weights_from_the_cli_reach_status_and_the_scheduler(
    tmp_path: Path, restore_env: None
) -> None:
    from tasks import load_state
    from tenantml.client import Client

    home = tmp_path / "home"
    code, out = _cli(home, "submit", "wine", SCHEMA, "--weight", "2.5")
    assert code == 0 and "weight 2.5" in out, out
    code, out = _cli(home, "submit", "iris", SCHEMA)
    assert code == 0 and "weight 1" in out, out
    assert _cli(home, "weight", "wine") == (0, "wine\t2.5\n")
    code, out = _cli(home, "weight", "iris", "4")
    assert code == 0 and "tenant 'iris': weight 4" in out, out
    code, out = _cli(home, "status", "iris")
    assert code == 0 and "weight 4" in out, out
    c = Client(home)
    assert (c.weight("wine"), c.weight("iris")) == (2.5, 4.0)
    state = load_state(c.mlflow, c.store)
    by_name = dict(zip((t.name for t in state.tenants), state.problem.weights, strict=True))
    assert by_name == {"wine": 2.5, "iris": 4.0}
    assert c.status("wine").weight == 2.5


def test_the_state_reads_every_page_of_experiments(
    tmp_path: Path, restore_env: None, monkeypatch: pytest.MonkeyPatch
) -> None:
    """MLflow returns one page of experiments per search, newest first: read unpaged, the
    oldest tenants (and the scheduler's experiment, which holds the weights) went missing once
    there were more than a page (1,000) of them. Here a page is 2."""
    import mlflow_plugin.tracking as tracking
    from tasks import load_state
    from tenantml.client import Client

    home = tmp_path / "home"
    assert _cli(home, "submit", "first", SCHEMA, "--weight", "3")[0] == 0
    for name in ("b", "c", "d", "e"):
        assert _cli(home, "submit", name, SCHEMA)[0] == 0
    monkeypatch.setattr(tracking, "EXPERIMENTS_PAGE", 2)
    c = Client(home)
    assert sorted(tracking.tenant_experiments(c.mlflow)) == ["b", "c", "d", "e", "first"]
    state = load_state(c.mlflow, c.store)
    by_name = dict(zip((t.name for t in state.tenants), state.problem.weights, strict=True))
    assert by_name == {"first": 3.0, "b": 1.0, "c": 1.0, "d": 1.0, "e": 1.0}


def test_a_bad_weight_is_named_and_changes_nothing(tmp_path: Path, restore_env: None) -> None:
    from tenantml.client import Client

    home = tmp_path / "home"
    assert _cli(home, "submit", "wine", SCHEMA, "--weight", "2")[0] == 0
    for bad in ("0", "-1", "nan", "inf", "heavy", "1e308", "1e-300"):
        # a negative number needs `--` before it on a command line, as for any command
        res = runner.invoke(app, ["weight", "--home", str(home), "wine", "--", bad])
        message = f"weight {bad!r} is not valid: give a number from 1e-06 to 1e+06"
        assert res.exit_code == 2 and message in res.output, res.output
        if bad != "heavy":  # typer itself refuses a non-number for --weight
            code, out = _cli(home, "submit", "iris", SCHEMA, f"--weight={bad}")
            assert code == 2 and "is not valid: give a number from" in out, out
    c = Client(home)
    assert c.weight("wine") == 2.0 and c.tenants() == ["wine"]  # nothing stored for iris
    with pytest.raises(ValueError, match="is not valid"):
        c.set_weight("wine", -1)
    with pytest.raises(ValueError, match="weight True is not valid"):  # was taken as 1
        c.set_weight("wine", True)
    with pytest.raises(KeyError, match="unknown tenant 'nope'"):  # the SDK said 1.0
        c.weight("nope")
    # weights stored before their range existed read as the range's nearest, not as unset (1)
    from mlflow_plugin import tracking

    exp = c.mlflow.get_experiment_by_name(tracking.SCHEDULER_EXPERIMENT)
    c.mlflow.set_experiment_tag(exp.experiment_id, tracking.WEIGHT_PREFIX + "wine", "5e6")
    assert c.weight("wine") == 1e6
    c.mlflow.set_experiment_tag(exp.experiment_id, tracking.WEIGHT_PREFIX + "wine", "1e-7")
    assert c.weight("wine") == 1e-6


def test_an_unknown_tenant_is_named(tmp_path: Path, restore_env: None) -> None:
    home = tmp_path / "home"
    assert _cli(home, "submit", "wine", SCHEMA)[0] == 0
    for args in (("weight", "nope", "2"), ("weight", "nope")):
        code, out = _cli(home, *args)
        assert code == 2 and "unknown tenant 'nope'" in out and "wine" in out, out


def test_a_tenant_cannot_set_its_own_weight(tmp_path: Path, restore_env: None) -> None:
    from store import TenantAccessError
    from tenantml.client import Client

    home = tmp_path / "home"
    Client(home).submit("wine", SCHEMA, weight=3)
    tenant = Client(home, user="wine", password="x")
    with pytest.raises(TenantAccessError, match="a tenant's weight is the operator's"):
        tenant.set_weight("wine", 10)
    with pytest.raises(TenantAccessError, match="a tenant's weight is the operator's"):
        tenant.submit("wine", SCHEMA, weight=10)
    assert Client(home).weight("wine") == 3.0
