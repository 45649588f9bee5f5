"""SEER executed for real on CPU: data-parallel trials over gloo, stages on the wall clock,
survivors resumed from their checkpoints with a new number of processes, MLflow records."""

from __future__ import annotations

import io
import os
from collections import Counter
from collections.abc import Iterator
from pathlib import Path

import numpy as np
import pytest
from typer.testing import CliRunner

from tenantml import datasets

pytestmark = pytest.mark.slow

runner = CliRunner()


@pytest.fixture(scope="module")
def home(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Path]:
    from tenantml.client import Client

    root = tmp_path_factory.mktemp("seer-home")
    old = os.environ.get("TENANTML_HOME")
    os.environ["TENANTML_HOME"] = str(root)
    d = datasets.load("digits")
    c = Client(root)
    c.submit("digits", d.schema)
    c.feed("digits", d.inputs[:600], d.labels[:600])
    yield root
    if old is None:
        os.environ.pop("TENANTML_HOME", None)
    else:
        os.environ["TENANTML_HOME"] = old


def _rank_pids(parent: int) -> list[int]:
    """The SEER rank processes (``python -m trainers.elastic``) whose parent is `parent`."""
    out = []
    for p in Path("/proc").iterdir():
        try:
            ppid = int((p / "stat").read_text().rsplit(")", 1)[1].split()[1])
            if p.name.isdigit() and ppid == parent:
                if b"trainers.elastic" in (p / "cmdline").read_bytes():
                    out.append(int(p.name))
        except (OSError, ValueError, IndexError):
            continue
    return out


def _weights(store, key: str):  # type: ignore[no-untyped-def]
    import torch

    return torch.load(io.BytesIO(store.get_checkpoint("digits", key)), weights_only=True)


@pytest.mark.full
def test_fixed_global_batch_makes_p_2_equal_p_1_and_resumes(home: Path) -> None:
    """Gradient accumulation + DDP averaging: 2 processes take exactly the steps 1 takes."""
    from tasks.settings import Settings
    from trainers.elastic import TrialStage, run_trial_stage

    store = Settings.load(home).store()
    hp = {"lr": 0.05, "momentum": 0.9, "weight_decay": 5e-4}
    results = {}
    for p in (1, 2):
        stage = TrialStage("digits", "lenet", 1, f"eq-p{p}", hp, ["cpu"] * p, until=0.0,
                           global_batch=64, micro_batch=16, min_steps=3, max_steps=3,
                           store_url=store.blobs.url())  # fmt: skip
        results[p] = run_trial_stage(stage)
        assert results[p].world_size == p and results[p].steps == 3
    w1, w2 = _weights(store, "eq-p1")["model"], _weights(store, "eq-p2")["model"]
    assert max(float((w1[k].float() - w2[k].float()).abs().max()) for k in w1) < 1e-5
    # the p=1 trial continues on 2 processes from its checkpoint (a promotion)
    stage = TrialStage("digits", "lenet", 1, "eq-p1", hp, ["cpu", "cpu"], until=0.0,
                       global_batch=64, micro_batch=16, min_steps=2, max_steps=2,
                       store_url=store.blobs.url())  # fmt: skip
    again = run_trial_stage(stage)
    assert again.resumed_step == 3 and again.steps == 5 and again.world_size == 2


def test_a_failing_rank_names_the_problem(home: Path) -> None:
    from tasks.settings import Settings
    from trainers.elastic import TrialStage, run_trial_stage

    url = Settings.load(home).store().blobs.url()
    stage = TrialStage("digits", "nonesuch", 1, "bad", {}, ["cpu"], until=0.0, store_url=url)
    with pytest.raises(RuntimeError, match="unknown model 'nonesuch'"):
        run_trial_stage(stage)


def test_two_stage_plan_end_to_end(home: Path) -> None:
    """The paper's tuner. T = 0.5 min, B = 2.01 GPU-min, eta = 2, t_min = 0.125: N = [2, 2],
    P = [1, 2]; stage 1 runs 2x1 + 2x2 processes, stage 2 runs 1x1 + 1x2 (the best on 2)."""
    from mlflow_plugin.registry import best_model
    from mlflow_plugin.tracking import experiment_name, job_records
    from tenantml.client import Client

    c = Client(home)
    out = c.seer("digits", "lenet", 0.5, 2.01, eta=2, t_min=0.125, global_batch=64, tuner="seer")
    exp = c.mlflow.get_experiment_by_name(experiment_name("digits"))
    jobs = [r for r in job_records(c.mlflow, [exp.experiment_id]) if r.job_id == out["job_id"]]
    assert len(jobs) == 1 and jobs[0].status == "FINISHED"
    trials = c.mlflow.search_runs(
        [exp.experiment_id], filter_string="tags.`tenantml.kind` = 'seer-trial'"
    )
    assert len(trials) == 4
    assert {t.data.tags["mlflow.parentRunId"] for t in trials} == {jobs[0].run_id}
    stage1 = Counter(t.data.tags["seer.stage1"] for t in trials)
    assert stage1["eliminated"] == 2  # one per bracket (floor(2/2) kept of 2 in each)
    assert sum(stage1.values()) == 4
    finals = [t for t in trials if t.data.tags.get("seer.stage2") == "final"]
    assert len(finals) == 2
    for t in finals:  # survivors resumed: more steps after stage 2 than after stage 1
        steps = {m.step: m.value for m in c.mlflow.get_metric_history(t.info.run_id, "steps")}
        assert steps[2] > steps[1] >= 1
    # the job's accuracy is the best final trial's (a few seconds of training: no floor asserted)
    final_acc = [
        {m.step: m.value for m in c.mlflow.get_metric_history(t.info.run_id, "val_accuracy")}[2]
        for t in finals
    ]
    assert out["accuracy"] == pytest.approx(max(final_acc))
    gpus2 = sorted(
        {m.step: m.value for m in c.mlflow.get_metric_history(t.info.run_id, "gpus")}[2]
        for t in finals
    )
    assert gpus2 == [1.0, 2.0]  # the leader trains on 2 processes in stage 2
    artifacts = [a.path for a in c.mlflow.list_artifacts(jobs[0].run_id)]
    assert "seer_plan.json" in artifacts and "seer_decisions.json" not in artifacts
    best = best_model(c.mlflow, "digits")
    assert best is not None and best.job_id == out["job_id"]
    pred = c.infer("digits", datasets.load("digits").inputs[600:620])
    assert len(pred) == 20
    # finished: its state and trial checkpoints are gone, and the same request is that job
    assert not [k for k in c.store.blobs.list("tenants/digits/checkpoints/") if out["job_id"] in k]
    again = c.seer("digits", "lenet", 0.5, 2.01, eta=2, t_min=0.125, global_batch=64, tuner="seer")
    assert (again["run_id"], again["accuracy"]) == (out["run_id"], out["accuracy"])
    assert again["best_version"] == out["best_version"] == best.version and again["reused"]


def test_bad_seer_requests_fail_before_anything_runs(home: Path) -> None:
    from tenantml.cli import app
    from tenantml.client import Client

    c = Client(home)
    before = len(c.mlflow.search_runs([c.mlflow.get_experiment_by_name("tenantml/digits")
                                       .experiment_id]))  # fmt: skip
    r = runner.invoke(app, ["seer", "run", "digits", "--model", "knn", "--deadline", "1",
                            "--budget", "4", "--home", str(home)])  # fmt: skip
    assert r.exit_code == 2 and "not a torch candidate" in r.output and "lenet" in r.output
    r = runner.invoke(app, ["seer", "run", "digits", "--model", "lenet", "--deadline", "1",
                            "--budget", "0.1", "--home", str(home)])  # fmt: skip
    assert r.exit_code == 2 and "below one trial-round" in r.output
    r = runner.invoke(app, ["seer", "run", "nobody", "--model", "lenet", "--deadline", "1",
                            "--budget", "4", "--home", str(home)])  # fmt: skip
    assert r.exit_code == 2 and "nobody" in r.output
    # a global batch that a trial's processes cannot split, and a negative seed, failed only
    # once used: after a stage's other trials had trained, and a FAILED run stored
    plan = ["seer", "run", "digits", "--model", "lenet", "--deadline", "0.5", "--budget", "2",
            "--t-min", "0.25", "--eta", "2", "--tuner", "seer", "--home", str(home)]  # fmt: skip
    for extra, words in (
        (["--p-min", "2", "--global-batch", "1"], "global_batch 1 is smaller than p_min 2"),
        (["--global-batch", "0"], "global_batch 0 is not valid"),
        (["--seed", "-1"], "seed -1 is not valid"),
    ):
        r = runner.invoke(app, [*plan, *extra])
        assert r.exit_code == 2 and words in r.output, r.output
    after = len(c.mlflow.search_runs([c.mlflow.get_experiment_by_name("tenantml/digits")
                                      .experiment_id]))  # fmt: skip
    assert after == before


def test_scheduler_hands_out_seer_jobs_from_cost_estimates() -> None:
    from tasks._seer import derive_seer, seer_options_from_params

    opts = derive_seer(180.0, budget_x=4)
    assert opts.deadline_min == 3.0 and opts.budget_gpu_min == 12.0
    assert derive_seer(1.0, budget_x=4).deadline_min == 1.0  # at least t_min
    params = {f"seer.{k}": str(v) for k, v in opts.as_dict().items()} | {"model": "lenet"}
    assert seer_options_from_params(params) == opts.as_dict()
    assert seer_options_from_params({"model": "lenet"}) is None
    assert np.isclose(opts.as_dict()["t_min"], 1.0)


@pytest.mark.full  # a recovery path (28 s): `make test-full`, with the other kills and restarts
def test_a_stage_that_ends_below_the_trials_best_keeps_the_best_state(home: Path) -> None:
    """Each trial checkpoint records the trial's best stage end. A stage that resumed the best
    state and ends below it copies that state to ``<checkpoint>-best`` before writing its own,
    and the job can load it; run again after a crash (resuming the later state), it keeps the
    copy it has and reports the same best."""
    from tasks.settings import Settings
    from trainers._checkpoint import TrialCheckpoint
    from trainers.elastic import BEST_SUFFIX, TrialStage, load_trial_model, run_trial_stage

    store = Settings.load(home).store()
    hp = {"lr": 0.05, "momentum": 0.9, "weight_decay": 5e-4}
    common = dict(until=0.0, global_batch=64, micro_batch=64, store_url=store.blobs.url())

    def stage(steps: int) -> TrialStage:
        return TrialStage("digits", "lenet", 1, "keep", hp, ["cpu"], min_steps=steps,
                          max_steps=steps, **common)  # fmt: skip

    def saved(key: str) -> TrialCheckpoint:
        return TrialCheckpoint.from_bytes(store.get_checkpoint("digits", key))

    first = run_trial_stage(stage(4))
    assert first.best == [first.accuracy, 4.0] and saved("keep").best == (first.accuracy, 4)
    # "ends below": the stage-1 state claims a score no stage can reach
    ck = saved("keep")
    claimed = TrialCheckpoint(ck.model, ck.opt, ck.step, ck.train_s, (1.01, 4))
    store.put_checkpoint("digits", "keep", claimed.to_bytes())
    r = run_trial_stage(stage(2))
    assert r.resumed_step == 4 and r.steps == 6 and r.best == [1.01, 4.0]
    assert saved("keep" + BEST_SUFFIX).step == 4 and saved("keep").step == 6
    assert saved("keep").best == (1.01, 4)
    model = load_trial_model("digits", "lenet", 1, "keep" + BEST_SUFFIX, store)
    assert model.predict(datasets.load("digits").inputs[:5]).shape == (5,)
    again = run_trial_stage(stage(2))  # the runner recorded nothing: the stage runs again
    assert again.resumed_step == 6 and again.best == [1.01, 4.0]
    assert saved("keep" + BEST_SUFFIX).step == 4  # still the best state, not step 6
    assert again.checkpoint_s > 0
    # the paper's tuner (keep_best off) tracks and copies nothing
    plain = TrialStage("digits", "lenet", 1, "plain", hp, ["cpu"], min_steps=1, max_steps=1,
                       keep_best=False, **common)  # fmt: skip
    assert run_trial_stage(plain).best is None and saved("plain").best is None


def test_a_trial_rank_dies_with_the_process_that_launched_it(home: Path) -> None:
    """SIGKILL to the launcher (a `seer run`, a scheduler) mid-stage: its rank process ends
    too, instead of training on and writing the trial's checkpoint beside the job sent again."""
    import signal
    import subprocess
    import sys
    import time

    from tasks.settings import Settings

    url = Settings.load(home).store().blobs.url()
    script = (
        "import sys, time\n"
        "from trainers.elastic import TrialStage, run_trial_stage\n"
        "run_trial_stage(TrialStage('digits', 'lenet', 1, 'orphan', {'lr': 0.05}, ['cpu'],\n"
        "    until=time.time() + 120, store_url=sys.argv[1]))\n"
    )
    launcher = subprocess.Popen([sys.executable, "-c", script, url])

    def ranks() -> list[int]:
        return _rank_pids(launcher.pid)

    deadline = time.monotonic() + 60
    while not ranks() and time.monotonic() < deadline:
        time.sleep(0.2)
    started = ranks()
    assert started, "no rank started"
    time.sleep(2)  # past the rank's start-up
    launcher.send_signal(signal.SIGKILL)
    launcher.wait()

    def alive() -> list[int]:  # a zombie (state Z) has ended: a subreaper may not reap it
        out = []
        for pid in started:
            try:
                if (Path(f"/proc/{pid}") / "stat").read_text().rsplit(")", 1)[1].split()[0] != "Z":
                    out.append(pid)
            except OSError:
                continue
        return out

    deadline = time.monotonic() + 10
    while alive() and time.monotonic() < deadline:
        time.sleep(0.2)
    left = alive()
    for pid in left:  # kill what the test would leave
        os.kill(pid, signal.SIGKILL)
    assert not left, f"rank {left} outlived its launcher"


def test_a_trial_stage_scores_its_curve_within_the_stage(home: Path) -> None:
    """``evals = 4``: rank 0 scores the validation split at 1/4, 1/2 and 3/4 of the stage's
    time and at its end, each at a later step (the curve `replan` extrapolates)."""
    import time

    from tasks.settings import Settings
    from trainers.elastic import TrialStage, run_trial_stage

    store = Settings.load(home).store()
    hp = {"lr": 0.05, "momentum": 0.9, "weight_decay": 5e-4}
    stage = TrialStage("digits", "lenet", 1, "curve", hp, ["cpu"], until=time.time() + 15,
                       global_batch=64, micro_batch=64, evals=4,
                       store_url=store.blobs.url())  # fmt: skip
    r = run_trial_stage(stage)
    steps = [s for s, _ in r.curve]
    assert len(r.curve) == 4 and steps == sorted(set(steps)) and steps[-1] == r.steps
    assert r.curve[-1][1] == r.accuracy and all(0 <= a <= 1 for _, a in r.curve)


@pytest.mark.full
def test_replan_scores_trials_within_stages_and_logs_its_decisions(home: Path) -> None:
    """The default tuner: the filled plan of the same inputs, every trial scored up to
    `EVALS_PER_STAGE` times a stage, and one re-planning decision after stage 1, logged."""
    import json

    from mlflow_plugin.tracking import experiment_name, job_records
    from tenantml.client import Client
    from trainers.seer_runner import EVALS_PER_STAGE

    c = Client(home)
    out = c.seer("digits", "lenet", 0.5, 2.01, eta=2, t_min=0.125, global_batch=64, seed=1)
    exp = c.mlflow.get_experiment_by_name(experiment_name("digits"))
    [job] = [r for r in job_records(c.mlflow, [exp.experiment_id]) if r.job_id == out["job_id"]]
    assert job.status == "FINISHED"
    path = c.mlflow.download_artifacts(job.run_id, "seer_decisions.json")
    with open(path) as f:
        decisions = json.load(f)
    assert [d["after_stage"] for d in decisions] == [1]
    (d,) = decisions
    assert d["choice"] == "continue" or d["choice"].startswith("exploit-")
    # what is left of B counts each process's start (imports, data: seconds here, against
    # 7.5-s stages), so it may be below zero on this loaded CPU machine
    assert d["left_budget_gpu_min"] < 2.01 and 0 < d["left_deadline_min"] < 0.5
    assert d["steps_per_gpu_min"] > 0
    trials = c.mlflow.search_runs(
        [exp.experiment_id],
        filter_string=f"tags.`mlflow.parentRunId` = '{job.run_id}'",
    )
    assert trials
    for t in trials:
        curve = c.mlflow.get_metric_history(t.info.run_id, "curve_accuracy")
        # stage 1 lasts 10 s: a process that took longer to start scores once, at its end
        assert 1 <= len({m.step for m in curve}) <= EVALS_PER_STAGE * (len(decisions) + 1)
        assert all(0.0 <= m.value <= 1.0 for m in curve)
    assert 0.0 <= out["accuracy"] <= 1.0


@pytest.mark.full
@pytest.mark.parametrize("sig", ["SIGINT", "SIGTERM"])
def test_ctrl_c_ends_a_seer_run_and_its_trial_processes(home: Path, sig: str) -> None:
    """SIGINT or SIGTERM to `tenantml seer run` alone while its trials train: the one line,
    exit code 130, and its rank processes (which the signal did not reach) stopped. Before, the
    job ran on to its end and the process hung in Prefect's tracebacks; with the handler in the
    main thread, Prefect's flow engine took SIGTERM, waited out the stage and failed the job."""
    import signal
    import subprocess
    import sys
    import time

    seed = str(11 + len(sig))  # a job of its own per signal
    cmd = [sys.executable, "-m", "tenantml.cli", "seer", "run", "digits", "--model", "lenet",
           "--deadline", "3", "--budget", "8", "--seed", seed, "--home", str(home)]  # fmt: skip
    proc = subprocess.Popen(cmd, start_new_session=True, stdout=subprocess.PIPE,
                            stderr=subprocess.PIPE, text=True)  # fmt: skip

    def ranks() -> list[int]:
        return _rank_pids(proc.pid)

    deadline = time.monotonic() + 120
    while not ranks() and proc.poll() is None and time.monotonic() < deadline:
        time.sleep(0.5)
    started = ranks()
    assert started, proc.communicate(timeout=60)
    if sig == "SIGINT":  # the same request meanwhile: refused, the job is this process's
        again = subprocess.run(cmd, capture_output=True, text=True, timeout=120)
        assert again.returncode == 2, (again.stdout, again.stderr[-3000:])
        assert f"is being trained by process {proc.pid} on this machine" in again.stderr
        assert "Traceback" not in again.stderr, again.stderr[-3000:]
        assert "errors from libraries" not in again.stderr, again.stderr  # not run, not retried
        assert ranks(), "the first run's trials go on"
    proc.send_signal(signal.Signals[sig])
    out, err = proc.communicate(timeout=60)
    assert proc.returncode == 130, (out, err[-3000:])
    assert f"stopped by {sig}; the same `tenantml seer run` resumes the job" in out, out
    assert "Traceback" not in err, err[-3000:]
    time.sleep(1)
    assert not [pid for pid in started if Path(f"/proc/{pid}").exists()], started
