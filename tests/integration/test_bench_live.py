"""`tenantml bench-live` end to end: the service itself (`tenantml run` in its own process,
embedded, stopped with Ctrl-C at the budget) on a tenant it never saw the test part of."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest
from mlflow.tracking import MlflowClient

from tenantml.bench.live import write_demo_tenants

pytestmark = [pytest.mark.slow, pytest.mark.full, pytest.mark.timeout(600)]


def _wine_only(tmp_path: Path) -> Path:
    """A tenant directory with the demo's wine.csv alone."""
    demo = write_demo_tenants(tmp_path / "demo")  # wine.csv, breast-cancer.csv, digits/
    (tmp_path / "tenants").mkdir()
    return (demo / "wine.csv").rename(tmp_path / "tenants" / "wine.csv").parent


def test_bench_live_serves_wine_within_its_budget(tmp_path: Path) -> None:
    tenants = _wine_only(tmp_path)
    out = tmp_path / "out"
    cmd = [sys.executable, "-m", "tenantml.cli", "bench-live", str(tenants),
           "--budget-s", "75", "--systems", "live,live-independent", "--weights", "wine=2",
           "--out", str(out)]  # fmt: skip
    done = subprocess.run(cmd, capture_output=True, text=True, timeout=500)
    assert done.returncode == 0, done.stdout[-2000:] + done.stderr[-3000:]

    summary = json.loads((out / "summary.json").read_text())
    assert summary["tenants"] == ["wine"] and summary["weights"] == {"wine": 2.0}
    assert set(summary["systems"]) == {"live", "live-independent"}
    for name, prior in (("live", "learnt"), ("live-independent", "independent")):
        mlflow = MlflowClient(f"sqlite:///{out / 'homes' / name / 'mlflow.db'}")
        [run] = mlflow.search_runs(
            [mlflow.get_experiment_by_name("tenantml/scheduler").experiment_id]
        )
        assert run.data.params["prior"] == prior, name
    for name, system in summary["systems"].items():
        assert system["jobs"] >= 1, (name, system)
        # served within the budget, scored on the held-out quarter: well above chance (0.4)
        assert system["final_accuracy"]["wine"] >= 0.8, (name, system)
        assert system["wall_s"] >= 75
        assert 0.0 <= system["loss_estimate"]["predicted_mean"] <= 1.0
    curves = (out / "curves.csv").read_text().splitlines()
    assert curves[0] == "system,t,mean_test_accuracy,mean_test_regret" and len(curves) == 83
    assert (out / "accuracy.png").read_bytes()[:4] == b"\x89PNG"
    assert "mean served test accuracy over 1 tenants" in done.stdout  # after the table


def test_bench_live_repeats_on_two_splits(tmp_path: Path) -> None:
    """`--repeats 2`: the comparison on the splits of seeds 0 and 1, each run whole in its own
    directory (the second with the systems' order rotated), then combined with standard errors
    and the AUC difference to the first system paired by split."""
    tenants = _wine_only(tmp_path)
    out = tmp_path / "out"
    # --mlflow: the user's tracking store, its experiment made here to keep artifacts in tmp
    user = f"sqlite:///{tmp_path / 'user.db'}"
    exp_id = MlflowClient(user).create_experiment("bench-live", str(tmp_path / "artifacts"))
    cmd = [sys.executable, "-m", "tenantml.cli", "bench-live", str(tenants),
           "--budget-s", "25", "--systems", "live,roundrobin", "--repeats", "2",
           "--out", str(out), "--mlflow"]  # fmt: skip
    env = {**os.environ, "MLFLOW_TRACKING_URI": user}
    done = subprocess.run(cmd, capture_output=True, text=True, timeout=500, env=env)
    assert done.returncode == 0, done.stdout[-2000:] + done.stderr[-3000:]
    # the results went to the user's store, not to the homes the services ran on (each of
    # which pointed this process's MLFLOW_TRACKING_URI at itself)
    runs = MlflowClient(user).search_runs([exp_id])
    assert sorted(r.info.run_name for r in runs) == ["live", "roundrobin"]
    assert all(r.data.params["seeds"] == "0,1" for r in runs)
    for seed in (0, 1):
        for system in ("live", "roundrobin"):
            home = MlflowClient(
                f"sqlite:///{out / f'seed-{seed}' / 'homes' / system / 'mlflow.db'}"
            )
            assert home.get_experiment_by_name("bench-live") is None

    for seed in (0, 1):
        split = json.loads((out / f"seed-{seed}" / "summary.json").read_text())
        assert split["seed"] == seed and list(split["systems"]) == ["live", "roundrobin"]
        assert (out / f"seed-{seed}" / "homes" / "roundrobin" / "mlflow.db").exists()
    # the second split ran round robin first
    log = done.stdout
    assert log.index("roundrobin: 1 tenants, 25 s x 1 slot(s), seed 1") < log.index(
        "live: 1 tenants, 25 s x 1 slot(s), seed 1"
    )
    combined = json.loads((out / "summary.json").read_text())
    assert combined["seeds"] == [0, 1] and combined["reference"] == "live"
    # the combination is of the two splits' own numbers, paired by split
    splits = [json.loads((out / f"seed-{k}" / "summary.json").read_text()) for k in (0, 1)]
    auc = {
        name: [s["systems"][name]["test_regret_auc"] for s in splits]
        for name in ("live", "roundrobin")
    }
    rr = combined["systems"]["roundrobin"]
    assert rr["test_regret_auc"]["mean"] == pytest.approx(sum(auc["roundrobin"]) / 2)
    diffs = [r - q for r, q in zip(auc["roundrobin"], auc["live"], strict=True)]
    assert rr["auc_minus_live"]["mean"] == pytest.approx(sum(diffs) / 2)
    assert rr["auc_minus_live"]["splits_live_smaller"] == sum(d > 0 for d in diffs)
    assert len((out / "curves.csv").read_text().splitlines()) == 83
    assert "over 2 splits (seeds 0, 1)" in " ".join(done.stdout.split())
    # and per tenant, which says where a difference comes from (one tenant: the same pairing)
    per = rr["auc_minus_live_by_tenant"]["wine"]
    assert per["mean"] == pytest.approx(rr["auc_minus_live"]["mean"])
    assert "roundrobin: AUC - live" in done.stdout


@pytest.mark.parametrize("sig", ["SIGINT", "SIGTERM"])
def test_ctrl_c_stops_bench_live_and_the_service_it_started(tmp_path: Path, sig: str) -> None:
    """The service runs in a session of its own (bench-live stops it as a user would), so a
    terminal's Ctrl-C (or a SIGTERM) reached only bench-live: it exited and left `tenantml run`
    training."""
    import signal
    import time

    tenants = _wine_only(tmp_path)
    out = tmp_path / "out"
    cmd = [sys.executable, "-m", "tenantml.cli", "bench-live", str(tenants),
           "--budget-s", "300", "--systems", "live", "--out", str(out)]  # fmt: skip
    bench = subprocess.Popen(cmd, start_new_session=True, stdout=subprocess.PIPE,
                             stderr=subprocess.PIPE, text=True)  # fmt: skip
    log = out / "homes" / "live" / "run.log"
    deadline = time.monotonic() + 240
    while not (log.exists() and "dispatched" in log.read_text()) and time.monotonic() < deadline:
        time.sleep(0.5)
    assert bench.poll() is None and log.exists(), bench.communicate(timeout=5)
    mine = f"TENANTML_HOME={out / 'homes' / 'live'}".encode()

    def services() -> list[int]:
        pids = []
        for proc in Path("/proc").iterdir():
            try:
                if proc.name.isdigit() and mine in (proc / "environ").read_bytes().split(b"\0"):
                    if b"tenantml.cli\0run" in (proc / "cmdline").read_bytes():
                        pids.append(int(proc.name))
            except OSError:
                continue
        return pids

    assert services(), "the service did not start"
    os.killpg(bench.pid, signal.Signals[sig])
    _, err = bench.communicate(timeout=120)
    assert bench.returncode == 130, err[-3000:]
    assert "Traceback" not in err, err[-3000:]
    assert services() == []
