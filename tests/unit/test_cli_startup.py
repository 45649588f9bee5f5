"""The everyday commands start fast: the command line, and the commands the store answers, load
no framework (a subprocess reads its own ``sys.modules``, as test_layering does); and
``tenantml bench-startup``, which times them, runs and writes its JSON. No wall-clock
assertions: the timings are the benchmark's to report."""

from __future__ import annotations

import io
import json
import os
import signal
import subprocess
import sys
from pathlib import Path
from typing import Any

import numpy as np
import pytest
from typer.testing import CliRunner

from tenantml.bench.startup import _frameworks
from tenantml.cli import app

FRAMEWORKS = ("torch", "prefect", "mlflow", "sklearn")


def _loaded_by(code: str, env: dict[str, str] | None = None) -> list[str]:
    out = subprocess.run(
        [sys.executable, "-P", "-c", code],
        capture_output=True,
        text=True,
        check=True,
        env=env,
    )
    (line,) = [x for x in out.stdout.splitlines() if x.startswith("loaded:")]
    return [m for m in line.removeprefix("loaded:").split(",") if m]


def test_importing_the_command_line_loads_no_framework() -> None:
    code = (
        "import sys, tenantml.cli.app, tenantml.cli.service\n"
        f"print('loaded:' + ','.join(m for m in {FRAMEWORKS!r} if m in sys.modules))\n"
    )
    assert _loaded_by(code) == []


def _run_command(home: Path, argv: list[str]) -> list[str]:
    """The frameworks `tenantml ARGV` loaded, run by its real entry point in a fresh process."""
    code = (
        "import sys\n"
        "from tenantml.cli.app import main\n"
        f"sys.argv = ['tenantml', *{argv!r}]\n"
        "try:\n"
        "    main()\n"
        "except SystemExit as e:\n"
        "    assert e.code in (0, None), e.code\n"
        f"print('loaded:' + ','.join(m for m in {FRAMEWORKS!r} if m in sys.modules))\n"
    )
    env = {**os.environ, "TENANTML_HOME": str(home)}
    env.pop("CUDA_VISIBLE_DEVICES", None)  # as a user runs it: GPUs are counted, if at all
    for k in ("TENANTML_STORE", "TENANTML_TRACKING_URI", "PREFECT_API_URL"):
        env.pop(k, None)
    return _loaded_by(code, env)


@pytest.fixture
def home(tmp_path: Path) -> Path:
    """A home with one tabular tenant and a few examples, made through the store only."""
    from store.schema import Schema, Tensor
    from tasks.settings import Settings

    s = Settings.load(tmp_path / "home")
    s.store().create_tenant("wine", Schema(input=Tensor(4), output=Tensor(3)))
    s.store().feed("wine", np.ones((3, 4), np.float32), ["a", "b", "c"])
    (tmp_path / "x.csv").write_text("f0,f1,f2,f3,label\n1,2,3,4,a\n4,3,2,1,b\n")
    return tmp_path


@pytest.mark.slow
@pytest.mark.parametrize(
    "argv",
    [
        ["tenants"],
        ["examples", "wine"],
        ["feed", "wine", "--csv", "{tmp}/x.csv", "--label-column", "label"],
    ],
    ids=["tenants", "examples", "feed"],
)
def test_commands_the_store_answers_load_no_framework(home: Path, argv: list[str]) -> None:
    argv = [a.format(tmp=home) for a in argv]
    assert _run_command(home / "home", argv) == []


@pytest.mark.slow
def test_status_without_a_published_leaderboard_asks_mlflow(home: Path) -> None:
    assert _run_command(home / "home", ["status", "wine"]) == ["mlflow"]


def _publish_wine(home: Path) -> None:
    from tasks import leaderboard
    from tasks.settings import Settings

    row = leaderboard.LeaderboardRow("random_forest", "FINISHED", 0.9, 1.5, 1.7e9, True)
    snap = leaderboard.Snapshot((row,), "3", 2.0, 1.7e9)
    leaderboard.publish(Settings.load(home).store(), "wine", snap)


@pytest.mark.slow
def test_status_reads_the_published_leaderboard_and_loads_no_framework(home: Path) -> None:
    _publish_wine(home / "home")
    assert _run_command(home / "home", ["status", "wine"]) == []
    assert _run_command(home / "home", ["status", "wine", "--fresh"]) == ["mlflow"]


def test_status_shows_the_published_leaderboard_and_its_age(home: Path, restore_env: None) -> None:
    _publish_wine(home / "home")
    res = CliRunner().invoke(app, ["status", "wine", "--home", str(home / "home")])
    assert res.exit_code == 0, res.output
    assert "random_forest" in res.output and "0.9000" in res.output
    assert "best version 3" in res.output and "weight 2" in res.output
    assert "as of" in res.output and "--fresh" in res.output


def test_frameworks_are_read_from_importtime() -> None:
    stderr = (
        "import time: self [us] | cumulative | imported package\n"
        "import time:       100 |        200 |   mlflow.tracking\n"
        "import time:       300 |       5000 | mlflow\n"
        "import time:        10 |         10 |     torchvision\n"
    )
    assert _frameworks(stderr) == ("mlflow",)


def test_bench_startup_rejects_an_unknown_command() -> None:
    res = CliRunner().invoke(app, ["bench-startup", "--commands", "tenants,nope"])
    assert res.exit_code == 2 and "nope" in res.output and "valid: --help, tenants" in res.output


@pytest.mark.slow
def test_bench_startup_times_commands_and_writes_json(tmp_path: Path, restore_env: None) -> None:
    out = tmp_path / "out"
    args = ["bench-startup", "--tenants", "1", "--examples", "3", "--repeats", "1"]
    args += ["--commands", "--help,tenants", "--home", str(tmp_path / "home"), "--out", str(out)]
    res = CliRunner().invoke(app, [*args, "--no-run"])
    assert res.exit_code == 0, res.output
    data = json.loads((out / "startup.json").read_text())
    assert data["tenants"] == 1 and data["repeats"] == 1 and data["python_c_pass_s"] > 0
    assert [c["command"] for c in data["commands"]] == ["--help", "tenants"]
    for c in data["commands"]:
        assert c["seconds"] > 0
        assert c["ratio"] == pytest.approx(c["seconds"] / data["python_c_pass_s"])
        assert c["exit_code"] == c["expected_exit_code"] == 0 and len(c["runs"]) == 1
    assert data["commands"][0]["frameworks"] == []  # --help
    assert "tenants" in res.output and "python -c pass" in res.output


@pytest.mark.full
def test_bench_startup_times_run_to_its_first_job_on_new_homes(
    tmp_path: Path, restore_env: None
) -> None:
    out = tmp_path / "out"
    args = ["bench-startup", "--tenants", "1", "--examples", "3", "--repeats", "1"]
    args += ["--commands", "tenants", "--out", str(out)]
    res = CliRunner().invoke(app, args)
    assert res.exit_code == 0, res.output
    first = json.loads((out / "startup.json").read_text())["run_first_dispatch"]
    assert len(first["cold"]) == len(first["template"]) == 1
    assert first["cold_s"] > 0 and first["template_s"] > 0
    assert "first job dispatched after" in res.output


def test_a_folder_where_a_file_goes_and_a_file_where_a_folder_goes_are_one_line(
    home: Path, restore_env: None
) -> None:
    """A folder given as `--csv`, `@SCHEMA` or `--plot`, and a file as the home, ended in a
    traceback and exit 1."""
    (home / "adir").mkdir()
    runner = CliRunner()
    at_home = {"TENANTML_HOME": str(home / "home")}
    for argv, env in (
        (["feed", "wine", "--csv", str(home / "adir"), "--label-column", "label"], at_home),
        (["submit", "other", f"@{home / 'adir'}"], at_home),
        (["status", "--plot", str(home / "adir")], at_home),
        (["tenants"], {"TENANTML_HOME": str(home / "x.csv")}),
    ):
        res = runner.invoke(app, argv, env=env)
        assert res.exit_code == 2, (argv, res.output)
        lines = res.output.strip().splitlines()
        assert lines and lines[0].startswith("error: ") and "Traceback" not in res.output, argv


@pytest.mark.parametrize("sig", [signal.SIGINT, signal.SIGTERM])
def test_a_signal_ends_any_command_with_one_line_and_exit_130(
    home: Path, restore_env: None, monkeypatch: pytest.MonkeyPatch, capsys: Any, sig: int
) -> None:
    """`feed` reading paths from its input when the signal comes: Typer ended the command with
    exit 130 and nothing said, and SIGTERM killed it (143)."""

    class Input(io.StringIO):
        def readline(self, *args: Any) -> str:
            os.kill(os.getpid(), sig)  # delivered here, in the main thread, as from outside
            return ""

        def __iter__(self) -> Any:
            return self

        def __next__(self) -> str:
            self.readline()
            raise StopIteration

    from store.schema import Schema, Tensor
    from tasks.settings import Settings

    # a tenant of images: its files come as paths on standard input
    Settings.load(home / "home").store().create_tenant(
        "pics", Schema(input=Tensor(8, 8, 3), output=Tensor(2))
    )
    monkeypatch.setenv("TENANTML_HOME", str(home / "home"))
    monkeypatch.setattr(sys, "argv", ["tenantml", "feed", "pics", "--label", "a"])
    monkeypatch.setattr(sys, "stdin", Input())
    code = _main_exit_code()
    assert code == 130
    assert capsys.readouterr().err.strip() == f"stopped by {signal.Signals(sig).name}"


def test_feed_takes_one_source_and_one_way_to_label_it(home: Path, restore_env: None) -> None:
    """The others were ignored without a word: `--csv` beside `--npz` fed the npz, a FILE
    beside `--csv` fed the CSV, `--label` beside `--label-column` was dropped."""
    from tasks.settings import Settings

    np.savez(home / "x.npz", x=np.ones((2, 4), np.float32), y=np.array(["a", "b"]))
    csv, npz = str(home / "x.csv"), str(home / "x.npz")
    runner = CliRunner()
    env = {"TENANTML_HOME": str(home / "home")}
    for argv, words in (
        (["--csv", csv, "--label-column", "label", "--npz", npz], "got --csv and --npz"),
        ([csv, "--csv", csv, "--label-column", "label"], "got FILES and --csv"),
        (["--csv", csv, "--label-column", "label", "--label", "c"], "not both"),
        (["--npz", npz, "--label", "a"], "an .npz holds its labels"),
        ([csv, "--label-column", "label"], "--label-column names a column of --csv"),
    ):
        res = runner.invoke(app, ["feed", "wine", *argv], env=env)
        assert res.exit_code == 2 and words in res.output, (argv, res.output)
    assert Settings.load(home / "home").store().manifest("wine").next_id == 3  # nothing fed
    res = runner.invoke(app, ["feed", "wine", "--csv", csv, "--label-column", "label"], env=env)
    assert res.exit_code == 0, res.output


def test_files_for_a_tabular_tenant_name_the_option_that_takes_its_rows(
    home: Path, restore_env: None
) -> None:
    """`echo rows.csv | tenantml infer wine` read the CSV as an example file, and its error
    said to feed "CSV rows (read_csv_rows)", an SDK function."""
    csv = str(home / "x.csv")
    env = {"TENANTML_HOME": str(home / "home")}
    runner = CliRunner()
    res = runner.invoke(app, ["infer", "wine"], input=csv + "\n", env=env)
    assert res.exit_code == 2, res.output
    assert "not files: give rows with --csv FILE (a header, one input per row)" in res.output
    res = runner.invoke(app, ["feed", "wine", csv, "--label", "a"], env=env)
    assert res.exit_code == 2 and "--csv FILE" in res.output and "--npz FILE" in res.output


def test_grant_without_mlflow_users_is_one_line(home: Path, restore_env: None) -> None:
    """On an embedded home (or servers without `--auth`) MLflow has no users: `grant` ended in
    an MLflow traceback."""
    res = CliRunner().invoke(app, ["grant", "wine"], env={"TENANTML_HOME": str(home / "home")})
    assert res.exit_code == 2 and "grant needs MLflow users" in res.output, res.output
    assert "this home is embedded" in res.output


def test_submit_names_a_schema_or_models_of_the_wrong_type(home: Path, restore_env: None) -> None:
    """`submit(name, 42)` raised AttributeError from inside; `models="knn"` was read as the
    models k, n, n."""
    from tenantml.client import Client

    c = Client(home / "home")
    with pytest.raises(TypeError, match="schema 42 is not valid: give a Schema or its text"):
        c.submit("other", 42)  # type: ignore[arg-type]
    with pytest.raises(TypeError, match=r"models 'knn': give a list of names, e.g. \['knn'\]"):
        c.submit("other", "{input: {[Tensor[4]], []}, output: {[Tensor[3]], []}}", models="knn")
    assert c.tenants() == ["wine"]


def test_files_that_cannot_be_read_are_named(home: Path, restore_env: None) -> None:
    """A schema file that is not UTF-8 and a damaged servers.json were reported by their
    decoders' words alone, without the file."""
    (home / "junk.txt").write_bytes(bytes(range(128, 256)))
    runner = CliRunner()
    res = runner.invoke(
        app, ["submit", "other", f"@{home / 'junk.txt'}"], env={"TENANTML_HOME": str(home / "home")}
    )
    assert res.exit_code == 2 and f"{home / 'junk.txt'}: not a UTF-8 text file" in res.output
    (home / "home" / "servers.json").write_text("{not json")
    res = runner.invoke(app, ["tenants"], env={"TENANTML_HOME": str(home / "home")})
    assert res.exit_code == 2 and "servers.json is not valid JSON" in res.output, res.output
    assert "`tenantml down`" in res.output


@pytest.mark.parametrize(
    ("option", "value", "words"),
    [
        ("--slots", "0", "--slots 0 is not valid"),
        ("--max-epochs", "0", "--max-epochs 0 is not valid"),
        ("--job-budget", "nan", "--job-budget nan is not valid"),
        ("--tuner", "bogus", "--tuner 'bogus' is not valid: use one of replan, seer"),
        ("--ticks", "-1", "--ticks -1 is not valid: use 0 or more"),
        ("--seer-budget-x", "0.5", "--seer-budget-x 0.5 is not valid: use 1 or more"),
        ("--prior", "flat", "--prior 'flat' is not valid: use one of learnt, independent"),
        ("--chain-s", "nan", "--chain-s nan is not valid: use 0 (one job per run) or more"),
        ("--policy", "nope", "--policy 'nope' is not valid: use one of rate, "),
    ],
)
def test_run_names_a_bad_option_before_prefect_starts(
    home: Path, restore_env: None, option: str, value: str, words: str
) -> None:
    """They were named only by the flow, 28 s later, among Prefect's lines; by the flow's
    rules (`tasks.options.option_problems`), each by its flag."""
    res = CliRunner().invoke(
        app, ["run", "--ticks", "1", option, value], env={"TENANTML_HOME": str(home / "home")}
    )
    assert res.exit_code == 2 and words in res.output.replace("\n", ""), res.output


def test_run_names_every_bad_option_at_once(home: Path, restore_env: None) -> None:
    res = CliRunner().invoke(
        app,
        ["run", "--slots", "0", "--job-budget", "-3", "--budget-s", "inf", "--tuner", "x"],
        env={"TENANTML_HOME": str(home / "home")},
    )
    said = res.output.replace("\n", "")
    assert res.exit_code == 2 and "--slots 0 is not valid: use 1 or more" in said, said
    assert "; --job-budget -3.0 is not valid: use a positive number" in said
    assert "; --tuner 'x' is not valid" in said and "--budget-s" not in said  # inf: no limit
    assert not (home / "home" / "prefect").exists()  # refused before Prefect's server started


def test_run_stopped_while_it_starts_says_so_once(
    home: Path, restore_env: None, monkeypatch: pytest.MonkeyPatch, capsys: Any
) -> None:
    """Ctrl-C while `run` starts Prefect's server: `run` printed its line, then the entry point
    a second one."""
    from tenantml.client import Client

    monkeypatch.setattr(Client, "start_prefect", lambda self: os.kill(os.getpid(), signal.SIGINT))
    monkeypatch.setenv("TENANTML_HOME", str(home / "home"))
    monkeypatch.setattr(sys, "argv", ["tenantml", "run", "--ticks", "1"])
    code = _main_exit_code()
    out = capsys.readouterr()
    assert code == 130
    lines = [x for x in (out.out + out.err).splitlines() if "stopped by" in x]
    assert len(lines) == 1 and lines[0].startswith("stopped by SIGINT: 0 jobs in flight"), lines


def _main_exit_code() -> Any:
    """The entry point's exit code, run here; the signal handlers it sets are put back."""
    from tenantml.cli.app import main

    before = {s: signal.getsignal(s) for s in (signal.SIGINT, signal.SIGTERM)}
    try:
        with pytest.raises(SystemExit) as ended:
            main()
    finally:
        for s, handler in before.items():
            signal.signal(s, handler)
    return ended.value.code


def test_demo_names_a_bad_option_before_it_feeds_its_tenants(tmp_path: Path) -> None:
    """By the scheduler's rules too: the flow named it after the four tenants were fed."""
    res = CliRunner().invoke(app, ["demo", "--max-epochs", "0", "--home", str(tmp_path / "d")])
    assert res.exit_code == 2 and "--max-epochs 0 is not valid: use 1 or more" in res.output
    assert not (tmp_path / "d").exists()
