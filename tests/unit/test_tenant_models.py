"""A tenant restricted to some of its schema's candidates (`submit --models`): the scheduler's
state offers only those; 'all' lifts it; a model that is not a candidate is named, with the
valid ones, and nothing is stored."""

from __future__ import annotations

from pathlib import Path

from typer.testing import CliRunner

from tenantml.cli import app

IMAGE = "{input: {[Tensor[8, 8, 1]], []}, output: {[Tensor[10]], []}}"
runner = CliRunner()


def _cli(home: Path, *args: str) -> tuple[int, str]:
    res = runner.invoke(app, [*args, "--home", str(home)])
    return res.exit_code, res.output


def _offered(home: Path) -> dict[str, tuple[str, ...]]:
    from tasks import load_state
    from tenantml.client import Client

    c = Client(home)
    state = load_state(c.mlflow, c.store)
    return {t.name: t.candidates for t in state.tenants}


def test_models_restrict_what_the_scheduler_offers(tmp_path: Path, restore_env: None) -> None:
    home = tmp_path / "home"
    code, out = _cli(home, "submit", "digits", IMAGE, "--models", "lenet+f1, lenet")
    assert code == 0 and "2 candidate models" in out and "trains only: lenet+f1, lenet" in out
    code, out = _cli(home, "status", "digits")
    assert code == 0 and "0/2 candidates tried on it" in out, out
    assert _cli(home, "submit", "other", IMAGE)[0] == 0
    offered = _offered(home)
    assert offered["digits"] == ("lenet", "lenet+f1")  # in the catalogue's order
    assert "pixels-extra_trees" in offered["other"] and len(offered["other"]) == 52
    # submitting again without --models keeps the restriction; 'all' lifts it
    assert _cli(home, "submit", "digits", IMAGE)[0] == 0
    assert _offered(home)["digits"] == ("lenet", "lenet+f1")
    code, out = _cli(home, "submit", "digits", IMAGE, "--models", "all")
    assert code == 0 and "52 candidate models" in out, out
    assert _offered(home)["digits"] == _offered(home)["other"]


def test_a_model_that_is_not_a_candidate_is_named_and_nothing_is_stored(
    tmp_path: Path, restore_env: None
) -> None:
    home = tmp_path / "home"
    assert _cli(home, "submit", "digits", IMAGE, "--models", "lenet")[0] == 0
    for bad, named in (("lenet,gpt4", "gpt4"), ("", "(none)"), ("xgboost", "xgboost")):
        code, out = _cli(home, "submit", "digits", IMAGE, "--models", bad)
        assert code == 2, out
        assert f"models {named} are not candidates of this schema" in out, out
        assert "give 'all' or some of: alexnet" in out, out
        code, out = _cli(home, "submit", "fresh", IMAGE, "--models", bad)
        assert code == 2, out
    assert _offered(home) == {"digits": ("lenet",)}  # 'fresh' was not created
