"""bench-live's parts that need no service: the tenant directory, the split, the summary's maths
(the end-to-end run is in tests/integration/test_bench_live.py)."""

from __future__ import annotations

import csv
import json
import shutil
from collections.abc import Sequence
from dataclasses import replace
from pathlib import Path
from typing import Any

import numpy as np
import pytest
from PIL import Image
from typer.testing import CliRunner

from tenantml.bench.live import (
    CURVE_POINTS,
    SERVICE_OVERHEAD_S,
    LiveTenant,
    SystemRun,
    expected_wall_s,
    load_tenants,
    summarize,
)
from tenantml.bench.live_repeats import combine_repeats, rotated
from tenantml.cli.app import app


def _csv(path: Path, rows: Sequence[Sequence[object]], header: list[str]) -> None:
    path.write_text("\n".join(",".join(map(str, r)) for r in [header, *rows]) + "\n")


def test_csv_and_image_tenants_split_stratified_and_seeded(tmp_path: Path) -> None:
    rows = [[i, i % 7, "a" if i % 3 else "b"] for i in range(60)]
    _csv(tmp_path / "Tab_One.csv", rows, ["x", "y", "label"])
    for label in ("cat", "dog"):
        (tmp_path / "pics" / label).mkdir(parents=True)
        for i in range(8):
            pixels = np.full((6, 5), 30 * i, np.uint8)
            Image.fromarray(pixels).save(tmp_path / "pics" / label / f"{i}.png")
    (tmp_path / "notes.txt").write_text("ignored")

    tab, pics = load_tenants(tmp_path, seed=3, test_fraction=0.25)
    assert tab.name == "tab-one" and pics.name == "pics"
    assert tab.schema == "{input: {[Tensor[2]], []}, output: {[Tensor[2]], []}}"
    assert pics.schema == "{input: {[Tensor[6, 5, 1]], []}, output: {[Tensor[2]], []}}"
    assert tab.x_train.shape == (45, 2) and tab.x_test.shape == (15, 2)
    assert pics.x_train.shape == (12, 6, 5, 1) and sorted(pics.y_test) == ["cat"] * 2 + ["dog"] * 2
    # stratified: the test part has the label shares of the whole (20 "b" of 60 -> 5 of 15)
    assert int(np.sum(tab.y_test == "b")) == 5
    assert tab.chance == pytest.approx(10 / 15)  # "a" is the most frequent training label
    again = load_tenants(tmp_path, seed=3, test_fraction=0.25)[0]
    assert np.array_equal(again.x_test, tab.x_test)
    other = load_tenants(tmp_path, seed=4, test_fraction=0.25)[0]
    assert not np.array_equal(other.x_test, tab.x_test)


@pytest.mark.parametrize(
    ("files", "kwargs", "message"),
    [
        ({}, {}, "no NAME.csv files"),
        (
            {"t.csv": (["x", "label"], [[1, "a"], [2, "b"], [3, "a"], [4, "b"]])},
            {"label_column": "y"},
            "no label column 'y'",
        ),  # fmt: skip
        ({"t.csv": (["x", "label"], [[1, "a"], [2, "a"], [3, "a"]])}, {}, "at least 2 labels"),
        (
            {"t.csv": (["x", "label"], [[1, "a"], [2, "b"], [3, "a"], [4, "b"]])},
            {"test_fraction": 1.0},
            "--test-fraction 1.0 is not valid",
        ),  # fmt: skip
        ({"t.csv": (["label"], [["a"], ["b"]])}, {}, "at least one feature"),
    ],
)
def test_bad_tenant_directories_are_named(
    tmp_path: Path,
    files: dict[str, tuple[list[str], list[list[object]]]],
    kwargs: dict[str, object],
    message: str,
) -> None:
    for name, (header, rows) in files.items():
        _csv(tmp_path / name, rows, header)
    with pytest.raises(ValueError, match=message):
        load_tenants(tmp_path, **kwargs)  # type: ignore[arg-type]


def test_unreadable_or_clashing_tenants_are_named_before_anything_runs(tmp_path: Path) -> None:
    """Each refused by `load_tenants` (so before FLAML or the service starts) in one line that
    names the file; before, a bad name was refused only by the service's submit, after FLAML
    had run, two files of one name were fed to one tenant, and an unreadable file was a
    traceback."""
    rows = [[i, "ab"[i % 2]] for i in range(8)]

    def refused(message: str) -> None:
        with pytest.raises(ValueError, match=message):
            load_tenants(tmp_path)
        for path in tmp_path.iterdir():
            if path.is_dir() and not path.is_symlink():
                shutil.rmtree(path)
            else:
                path.unlink()

    _csv(tmp_path / "2024 sales.csv", rows, ["x", "label"])
    refused(r"2024 sales.csv: tenant name '2024 sales' is not valid")
    _csv(tmp_path / "a_b.csv", rows, ["x", "label"])
    _csv(tmp_path / "A-B.csv", rows, ["x", "label"])
    refused(r"A-B.csv and .*a_b.csv are both tenant 'a-b'")
    (tmp_path / "gone.csv").symlink_to(tmp_path / "nowhere.csv")
    refused(r"gone.csv: cannot be read \(FileNotFoundError")
    (tmp_path / "odd.csv").mkdir()
    refused(r"odd.csv: cannot be read \(IsADirectoryError")
    (tmp_path / "pics" / "cat").mkdir(parents=True)
    (tmp_path / "pics" / "cat" / "0.png").write_bytes(b"not a png")
    refused(r"pics: cannot be read \(UnidentifiedImageError")
    _csv(tmp_path / "t.csv", [[i, "abc"[i % 3]] for i in range(6)], ["x", "label"])
    refused(r"t.csv: cannot be split with --test-fraction 0.25")
    (tmp_path / "utf16.csv").write_bytes("x,label\n1,a\n".encode("utf-16"))
    refused(r"utf16.csv: cannot be read \(UnicodeDecodeError")


def _tenant(name: str, test: list[str], train: list[str]) -> LiveTenant:
    x = np.zeros((len(test), 1), np.float32)
    return LiveTenant(name, "", x, np.array(train), x, np.array(test))


def test_summary_quarters_regret_auc_and_loss_calibration() -> None:
    # chance: a serves "p" (test 1/2 right), b serves "q" (test 1/4 right)
    a = _tenant("a", ["p", "p", "x", "x"], ["p", "p", "x"])
    b = _tenant("b", ["q", "x", "x", "x"], ["q", "q", "x"])
    fast = SystemRun("fast", {"a": [(0.0, 0.75)], "b": [(0.5, 1.0)]}, {"a": 0.1, "b": 0.0}, 3, 9.0)
    slow = SystemRun("slow", {"a": [(0.5, 1.0)], "b": []}, {}, 0, 9.0)
    summary, rows = summarize([a, b], [fast, slow])

    f, s = summary["systems"]["fast"], summary["systems"]["slow"]
    # at t = 0.25: fast serves a 0.75, b chance 0.25; at t >= 0.5 a 0.75, b 1.0
    assert f["mean_test_accuracy"] == pytest.approx({"q25": 0.5, "q50": 0.875, "q75": 0.875,
                                                     "q100": 0.875})  # fmt: skip
    assert s["mean_test_accuracy"]["q25"] == pytest.approx(0.375)  # both at chance
    assert s["mean_test_accuracy"]["q100"] == pytest.approx((1.0 + 0.25) / 2)
    # best per tenant over both systems: a 1.0, b 1.0; fast's regret is (0.25 + 0.75) / 2 = 0.5
    # before t = 0.5 and 0.125 from there on, integrated exactly (a grid's trapezoids
    # credited the step at 0.5 half a grid interval early: 0.3078)
    assert f["test_regret_auc"] == pytest.approx(0.5 * 0.5 + 0.125 * 0.5)
    assert f["test_regret_auc"] < s["test_regret_auc"]
    # loss estimates at the end (0.1, 0.0) against the realised test loss (0.25, 0.0)
    cal = f["loss_estimate"]
    assert cal.pop("rank_correlation") is None  # two tenants: no rank correlation
    assert cal == pytest.approx(
        {"predicted_mean": 0.05, "realised_mean": 0.125, "mean_abs_error": 0.075}
    )
    assert "loss_estimate" not in s  # a system that estimates nothing reports nothing
    assert f["first_model_t"] == {"a": 0.0, "b": 0.5} and s["first_model_t"]["b"] is None
    assert f["served"] == {"a": [[0.0, 0.75]], "b": [[0.5, 1.0]]} and s["served"]["b"] == []
    assert {r["system"] for r in rows} == {"fast", "slow"} and len(rows) == 2 * CURVE_POINTS


def test_loss_estimates_are_ranked_against_the_realised_losses() -> None:
    """Spearman's rho of the estimates against the realised losses, where it is defined."""
    from tenantml.bench.live import _rank_correlation

    assert _rank_correlation([(0.1, 0.0), (0.2, 0.1), (0.3, 0.3)]) == pytest.approx(1.0)
    assert _rank_correlation([(0.3, 0.0), (0.2, 0.1), (0.1, 0.3)]) == pytest.approx(-1.0)
    assert _rank_correlation([(0.1, 0.0), (0.2, 0.0), (0.3, 0.0)]) is None  # all realised 0
    assert _rank_correlation([(0.1, 0.0), (0.2, 0.1)]) is None and _rank_correlation([]) is None


def test_the_regret_from_each_services_first_job_leaves_its_start_up_out() -> None:
    """Two services whose policies did the same (a's model 0.2 of the budget after the first
    job, b's 0.4 after) but whose start-ups differ (first jobs at 0.1 and 0.3): their AUCs
    differ, their regret from their own first job does not; a peer without jobs has none."""
    a = _tenant("a", ["p", "p", "x", "x"], ["p", "p", "x"])
    b = _tenant("b", ["q", "x", "x", "x"], ["q", "q", "x"])

    def service(name: str, start: float) -> SystemRun:
        steps = {"a": [(start + 0.2, 1.0)], "b": [(start + 0.4, 1.0)]}
        return SystemRun(name, steps, {}, 2, 9.0, first_job_t=start)

    peer = SystemRun("peer", {"a": [(0.25, 1.0)], "b": [(0.25, 1.0)]}, {}, 0, 9.0)
    summary, _ = summarize([a, b], [service("early", 0.1), service("late", 0.3), peer])
    early, late = summary["systems"]["early"], summary["systems"]["late"]
    assert early["test_regret_auc"] < late["test_regret_auc"]
    assert early["test_regret_from_first_job"] == pytest.approx(
        late["test_regret_from_first_job"], abs=2e-3
    )
    # over the window 1 - 0.3: regret (0.5 + 0.75) / 2 until 0.2, 0.75 / 2 until 0.4, then 0
    expected = (0.2 * 0.625 + 0.2 * 0.375) / 0.7
    assert early["test_regret_from_first_job"] == pytest.approx(expected, abs=0.02)
    assert (
        early["first_job_t"] == 0.1
        and "test_regret_from_first_job" not in summary["systems"]["peer"]
    )


def test_a_service_that_started_its_first_job_after_the_budget_leaves_the_others_theirs() -> None:
    """A start-up longer than the budget (first job at 1.2) has no regret from its first job;
    the service that started at 0.1 keeps its own over 1 - 0.1."""
    a = _tenant("a", ["p", "p", "x", "x"], ["p", "p", "x"])
    b = _tenant("b", ["q", "x", "x", "x"], ["q", "q", "x"])
    early = SystemRun("early", {"a": [(0.3, 1.0)], "b": [(0.5, 1.0)]}, {}, 2, 9.0, 0.1)
    stuck = SystemRun("stuck", {"a": [], "b": []}, {}, 1, 9.0, first_job_t=1.2)
    summary, _ = summarize([a, b], [early, stuck])
    systems = summary["systems"]
    assert "test_regret_from_first_job" not in systems["stuck"]
    # each tenant's regret 2/3 (its majority label scores 1/3) until a's model at 0.3 and
    # b's at 0.5, over the window 0.9 from 0.1
    expected = (0.2 * (2 / 3 + 2 / 3) / 2 + 0.2 * (2 / 3) / 2) / 0.9
    assert systems["early"]["test_regret_from_first_job"] == pytest.approx(expected)


def test_the_regret_auc_integrates_the_served_steps_exactly() -> None:
    """A step on a grid point (FLAML's, at the quarters) and one just before it: the earlier
    is the better, by what it served earlier; a grid's trapezoids credited both the same. A
    model served for less than a grid interval counts in ``best_i``."""
    a = _tenant("a", ["p", "p", "x", "x"], ["p", "p", "x"])  # chance 1/2
    on_grid = SystemRun("flaml", {"a": [(0.25, 1.0)]}, {}, 0, 9.0)
    earlier = SystemRun("live", {"a": [(0.25 - 1 / 80, 1.0)]}, {}, 0, 9.0)
    brief = SystemRun("brief", {"a": [(0.30, 0.75), (0.31, 1.0), (0.315, 0.75)]}, {}, 0, 9.0)
    summary, _ = summarize([a], [on_grid, earlier, brief])
    auc = {k: v["test_regret_auc"] for k, v in summary["systems"].items()}
    assert auc["flaml"] == pytest.approx(0.5 * 0.25)
    assert auc["flaml"] - auc["live"] == pytest.approx(0.5 / 80)
    assert auc["brief"] == pytest.approx(0.5 * 0.30 + 0.25 * 0.01 + 0.25 * 0.685)
    alone = summarize([a], [brief])[0]["systems"]["brief"]["test_regret_auc"]
    assert alone == auc["brief"]  # its own 1.0, between two grid points, is best_i


def test_best_counts_no_step_replaced_at_the_same_time() -> None:
    """Two steps at one time: the second is served from then on, the first never is, so it is
    not ``max_t A(t)`` (two FLAML fits that both ended past the share sat at 1.0)."""
    a = _tenant("a", ["p", "p", "x", "x"], ["p", "p", "x"])  # chance 1/2
    run = SystemRun("s", {"a": [(0.5, 0.75), (1.0, 1.0), (1.0, 0.9)]}, {}, 0, 9.0)
    assert run.accuracy(a, 1.0) == 0.9 and run.best(a) == 0.9


def test_flamls_curve_serves_the_largest_budget_that_has_ended() -> None:
    """The quarter's fit that ended later than the half's (its retrain overran) is never served
    after the half's; of fits ending at the same time the larger budget's is served."""
    from tenantml.bench.live import anytime_steps

    assert anytime_steps([(0.3, 0.8), (0.5, 0.9), (0.8, 0.85), (1.0, 0.95)]) == [
        (0.3, 0.8), (0.5, 0.9), (0.8, 0.85), (1.0, 0.95)
    ]  # fmt: skip
    # the quarter's ended at 0.7, after the half's (0.6): from 0.6 on the half's is served
    assert anytime_steps([(0.7, 0.8), (0.6, 0.9), (0.9, 0.92), (1.0, 0.93)]) == [
        (0.6, 0.9), (0.9, 0.92), (1.0, 0.93)
    ]  # fmt: skip
    # the three quarters' and the whole share's both past the share: the whole's at 1.0
    assert anytime_steps([(0.3, 0.7), (0.6, 0.8), (1.0, 0.99), (1.0, 0.9)]) == [
        (0.3, 0.7), (0.6, 0.8), (1.0, 0.9)
    ]  # fmt: skip


def test_an_estimate_for_a_tenant_never_served_is_taken_over_its_majority_label() -> None:
    """The service's estimate for a tenant with no model counts from nothing served (its best
    0); bench-live credits it the majority label, so the estimate is taken less that share."""
    a = _tenant("a", ["p", "p", "x", "x"], ["p", "p", "x"])  # chance 1/2
    b = _tenant("b", ["q", "x", "x", "x"], ["q", "q", "x"])  # chance 1/4
    live = SystemRun("live", {"a": [(0.5, 1.0)], "b": []}, {"a": 0.0, "b": 0.9}, 1, 9.0)
    peer = SystemRun("peer", {"a": [], "b": [(0.5, 1.0)]}, {}, 0, 9.0)
    cal = summarize([a, b], [live, peer])[0]["systems"]["live"]["loss_estimate"]
    # b realised 1.0 - 0.25; its estimate 0.9 of an expected best, 0.65 over the label
    assert cal["predicted_mean"] == pytest.approx((0.0 + 0.65) / 2)
    assert cal["mean_abs_error"] == pytest.approx(abs(0.65 - 0.75) / 2)


def test_the_first_model_column_says_how_many_tenants_were_never_served() -> None:
    from tenantml.cli.app import first_model_cell

    assert first_model_cell({"a": 0.1, "b": 0.1, "c": None}, budget_s=100) == "10 s, 1 never"
    assert first_model_cell({"a": 0.1, "b": 0.1, "c": 0.8}, budget_s=100) == "33 s"
    assert first_model_cell({"a": None}, budget_s=100) == "none"


def test_weights_weight_the_regret() -> None:
    """The same runs as above with b's weight 3: fast's regret before t = 0.5 is
    (1 x 0.25 + 3 x 0.75) / 4 = 0.625, from there on (1 x 0.25 + 3 x 0) / 4 = 0.0625."""
    a = _tenant("a", ["p", "p", "x", "x"], ["p", "p", "x"])
    b = _tenant("b", ["q", "x", "x", "x"], ["q", "q", "x"])
    fast = SystemRun("fast", {"a": [(0.0, 0.75)], "b": [(0.5, 1.0)]}, {}, 3, 9.0)
    slow = SystemRun("slow", {"a": [(0.5, 1.0)], "b": []}, {}, 0, 9.0)
    summary, _ = summarize([a, b], [fast, slow], {"b": 3.0})
    auc = summary["systems"]["fast"]["test_regret_auc"]
    assert auc == pytest.approx(0.625 * 0.5 + 0.0625 * 0.5)
    assert summary["weights"] == {"a": 1.0, "b": 3.0}


def test_weights_weight_the_accuracy_at_the_quarters_as_the_regret() -> None:
    """With b's weight 3, each quarter's accuracy is (1 x a's + 3 x b's) / 4, in summary.json
    and curves.csv alike; the tenants' own stay theirs."""
    a = _tenant("a", ["p", "p", "x", "x"], ["p", "p", "x"])
    b = _tenant("b", ["q", "x", "x", "x"], ["q", "q", "x"])
    fast = SystemRun("fast", {"a": [(0.0, 0.75)], "b": [(0.5, 1.0)]}, {}, 3, 9.0)
    summary, rows = summarize([a, b], [fast], {"b": 3.0})
    entry = summary["systems"]["fast"]
    for q in ("q25", "q50", "q75", "q100"):
        own = entry["test_accuracy_by_tenant"]
        assert entry["mean_test_accuracy"][q] == pytest.approx((own["a"][q] + 3 * own["b"][q]) / 4)
    assert entry["test_accuracy_by_tenant"]["a"]["q100"] == 0.75
    assert rows[-1]["mean_test_accuracy"] == pytest.approx(entry["mean_test_accuracy"]["q100"])
    assert entry["mean_test_accuracy"]["q100"] == pytest.approx((0.75 + 3 * 1.0) / 4)


@pytest.mark.parametrize(
    ("weights", "fragment"),
    [
        ("zz=2", "--weights names zz, not a tenant"),
        ("t=0", "weight 0.0 is not valid: give a number from"),
        ("t", "--weights 't' is not NAME=WEIGHT"),
        ("t=lots", "weight 'lots' is not valid"),
    ],
)
def test_cli_names_bad_weights(tmp_path: Path, weights: str, fragment: str) -> None:
    _csv(tmp_path / "t.csv", [[i, "ab"[i % 2]] for i in range(8)], ["x", "label"])
    out = CliRunner().invoke(
        app, ["bench-live", str(tmp_path), "--weights", weights, "--out", str(tmp_path / "o")]
    )
    assert out.exit_code == 2 and fragment in out.output, out.output
    assert not (tmp_path / "o" / "homes").exists()  # refused before any system ran


def test_cli_names_a_bad_system_and_what_is_valid(tmp_path: Path) -> None:
    _csv(tmp_path / "t.csv", [[i, "ab"[i % 2]] for i in range(8)], ["x", "label"])
    out = CliRunner().invoke(
        app,
        [
            "bench-live",
            str(tmp_path),
            "--systems",
            "live,autogluon",
            "--out",
            str(tmp_path / "out"),
        ],  # fmt: skip
    )
    assert out.exit_code == 2, out.output
    assert "'autogluon' is not valid" in out.output and "flaml" in out.output
    assert not (tmp_path / "out" / "summary.json").exists()
    twice = CliRunner().invoke(
        app, ["bench-live", str(tmp_path), "--systems", "live,flaml,live", "--out",
              str(tmp_path / "out")],
    )  # fmt: skip
    assert twice.exit_code == 2 and "--systems names live more than once" in twice.output
    assert not (tmp_path / "out").exists()


def test_a_home_pointed_at_servers_is_refused(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """bench-live's homes are fresh and embedded: an override that would send their tenants
    to someone's MLflow server is named, and nothing is created."""
    from tenantml.bench.live import run_service

    monkeypatch.setenv("TENANTML_TRACKING_URI", "http://127.0.0.1:1")
    with pytest.raises(ValueError, match="unset TENANTML_TRACKING_URI"):
        run_service("live", [], tmp_path / "home", budget_s=1.0)
    assert not (tmp_path / "home").exists()


def test_repeats_combine_per_split_summaries_paired_by_split() -> None:
    """Two splits: on the first `fast` beats `slow`, on the second they serve the same; the
    combination gives each system's mean and standard error over the splits and `slow`'s AUC
    minus `fast`'s, paired by split."""
    a = _tenant("a", ["p", "p", "x", "x"], ["p", "p", "x"])
    b = _tenant("b", ["q", "x", "x", "x"], ["q", "q", "x"])
    fast = SystemRun("fast", {"a": [(0.0, 0.75)], "b": [(0.5, 1.0)]}, {"a": 0.1, "b": 0.0}, 3, 9.0)
    slow = SystemRun("slow", {"a": [(0.4, 1.0)], "b": []}, {}, 0, 9.0)
    same = SystemRun("slow", fast.steps, {}, 3, 9.0)
    splits = [summarize([a, b], [fast, slow]), summarize([a, b], [fast, same])]
    for k, (summary, _) in enumerate(splits):
        summary.update(seed=7 + k, budget_s=60.0, slots=1, test_fraction=0.25)
    combined, rows = combine_repeats([s for s, _ in splits], [r for _, r in splits])

    assert combined["seeds"] == [7, 8] and combined["reference"] == "fast"
    # the estimates' error beside a constant 0's (the realised loss), over the splits
    fast_entry = combined["systems"]["fast"]
    realised = [s["systems"]["fast"]["loss_estimate"]["realised_mean"] for s, _ in splits]
    assert fast_entry["loss_realised_mean"]["mean"] == pytest.approx(np.mean(realised))
    assert "loss_estimate_rank_correlation" not in fast_entry  # undefined on both splits
    auc = [s["systems"]["slow"]["test_regret_auc"] for s, _ in splits]
    ref = [s["systems"]["fast"]["test_regret_auc"] for s, _ in splits]
    assert auc[0] > ref[0] and auc[1] == pytest.approx(ref[1])
    slow_entry = combined["systems"]["slow"]
    assert slow_entry["test_regret_auc"]["mean"] == pytest.approx(np.mean(auc))
    assert slow_entry["test_regret_auc"]["se"] == pytest.approx(np.std(auc, ddof=1) / np.sqrt(2))
    diffs = np.subtract(auc, ref)
    assert slow_entry["auc_minus_fast"] == pytest.approx(
        {"mean": diffs.mean(), "se": np.std(diffs, ddof=1) / np.sqrt(2), "splits_fast_smaller": 1}
    )
    assert "auc_minus_fast" not in combined["systems"]["fast"]
    # per tenant: each tenant's own AUC, whose mean is the system's; the pairing says where
    # the difference comes from: on the first split slow serves a better model of a later
    # (1.0 from 0.4, chance 1/2 before, against 0.75 throughout) and nothing for b
    for summary, _ in splits:
        for entry in summary["systems"].values():
            own = entry["test_regret_auc_by_tenant"]
            assert np.mean([own["a"], own["b"]]) == pytest.approx(entry["test_regret_auc"])
    per = slow_entry["auc_minus_fast_by_tenant"]
    assert sum(p["mean"] for p in per.values()) / 2 == pytest.approx(diffs.mean())
    assert per["a"]["splits_fast_smaller"] == 0 and per["b"]["splits_fast_smaller"] == 1
    assert per["a"]["mean"] < 0 < per["b"]["mean"]
    assert "auc_minus_fast_by_tenant" not in combined["systems"]["fast"]
    # and when: at a quarter slow still serves a's chance (1/2) against fast's 0.75, from
    # half-way its 1.0; on the second split they are level
    lead = slow_entry["accuracy_lead_of_fast_by_tenant"]["a"]
    assert lead["q25"] == pytest.approx(
        {"mean": 0.25 / 2, "se": 0.25 / 2,
         "splits_fast_ahead": 1, "splits_fast_behind": 0}
    )  # fmt: skip
    assert lead["q50"]["mean"] == pytest.approx(-0.25 / 2)
    assert lead["q50"]["splits_fast_behind"] == 1
    assert "accuracy_lead_of_fast_by_tenant" not in combined["systems"]["fast"]
    # systems without a first job (no `first_job_t`) have no regret from it, nor its pairing
    assert "test_regret_from_first_job" not in slow_entry
    assert "from_first_job_minus_fast" not in slow_entry
    # |est - real|: 0.075 on the first split; on the second a's best is fast's 0.75, so the
    # realised losses are (0, 0) against the estimates (0.1, 0): 0.05
    cal = combined["systems"]["fast"]["loss_estimate_mean_abs_error"]
    assert cal["mean"] == pytest.approx((0.075 + 0.05) / 2) and cal["splits"] == 2
    assert "loss_estimate_mean_abs_error" not in slow_entry
    # a split whose run left no estimates is not in their mean, and the table says so
    no_estimates = {**splits[1][0], "systems": {**splits[1][0]["systems"]}}
    no_estimates["systems"]["fast"] = {
        k: v for k, v in no_estimates["systems"]["fast"].items() if k != "loss_estimate"
    }
    part = combine_repeats([splits[0][0], no_estimates], [])[0]["systems"]["fast"]
    assert part["loss_estimate_mean_abs_error"]["mean"] == pytest.approx(0.075)
    assert part["loss_estimate_mean_abs_error"]["splits"] == 1
    from tenantml.cli.app import _estimate_cell

    cell = _estimate_cell(part["loss_estimate_mean_abs_error"], part["loss_realised_mean"], 2)
    assert cell.endswith(", 1 of 2 splits")
    assert "splits" not in _estimate_cell(cal, combined["systems"]["fast"]["loss_realised_mean"], 2)
    end = [r for r in rows if r["system"] == "slow" and r["t"] == 1.0]
    assert len(rows) == 2 * CURVE_POINTS and end[0]["mean_test_accuracy"] == pytest.approx(
        np.mean([s["systems"]["slow"]["mean_test_accuracy"]["q100"] for s, _ in splits])
    )
    with pytest.raises(ValueError, match="splits ran different systems"):
        combine_repeats([splits[0][0], {**splits[1][0], "systems": {"fast": {}}}], [])
    # the regret is weighted, and the service's options shape what it serves
    with pytest.raises(ValueError, match="splits differ in weights"):
        combine_repeats([splits[0][0], {**splits[1][0], "weights": {"a": 3.0, "b": 1.0}}], [])
    with pytest.raises(ValueError, match="splits differ in service_args"):
        combine_repeats(
            [{**splits[0][0], "service_args": []},
             {**splits[1][0], "service_args": ["--max-epochs", "3"]}], []
        )  # fmt: skip
    # with first jobs (services), the regret from them is combined and paired the same way
    timed = [
        summarize([a, b], [replace(fast, first_job_t=0.0), replace(x, first_job_t=0.0)])[0]
        for x in (slow, same)
    ]
    for k, summary in enumerate(timed):
        summary.update(seed=7 + k, budget_s=60.0, slots=1, test_fraction=0.25)
    both = combine_repeats(timed, [])[0]["systems"]["slow"]
    from_first = [t["systems"]["slow"]["test_regret_from_first_job"] for t in timed]
    assert both["test_regret_from_first_job"]["mean"] == pytest.approx(np.mean(from_first))
    assert both["from_first_job_minus_fast"]["splits_fast_smaller"] == 1
    assert rotated(["a", "b", "c"], 1) == ["b", "c", "a"] and rotated(["a"], 5) == ["a"]


def test_the_expected_wall_clock_counts_flamls_refits() -> None:
    """A service system takes its budget plus its start and scoring; FLAML 2.5 times its budget
    (a refit at each quarter of every tenant's share), times the slots it is given."""
    assert expected_wall_s(["live"], 60) == 60 + SERVICE_OVERHEAD_S
    assert expected_wall_s(["live", "flaml"], 60) == 60 + SERVICE_OVERHEAD_S + 150
    assert expected_wall_s(["flaml"], 60, slots=2) == 300


def test_cli_names_bad_repeats(tmp_path: Path) -> None:
    _csv(tmp_path / "t.csv", [[i, "ab"[i % 2]] for i in range(8)], ["x", "label"])
    out = CliRunner().invoke(
        app, ["bench-live", str(tmp_path), "--repeats", "0", "--out", str(tmp_path / "o")]
    )
    assert out.exit_code == 2 and "--repeats must be 1 or more" in out.output, out.output
    assert not (tmp_path / "o").exists()


def _write_split(run: Path, seed: int, *, budget_s: float = 60.0) -> None:
    """One split's summary.json and curves.csv, as bench-live --repeats writes them."""
    a = _tenant("a", ["p", "p", "x", "x"], ["p", "p", "x"])
    fast = SystemRun("fast", {"a": [(0.0, 0.75)]}, {}, 3, 9.0)
    slow = SystemRun("slow", {"a": [(0.5, 0.5 + seed / 100)]}, {}, 3, 9.0)
    summary, rows = summarize([a], [fast, slow])
    summary.update(seed=seed, budget_s=budget_s, slots=1, test_fraction=0.25)
    where = run / f"seed-{seed}"
    where.mkdir(parents=True)
    (where / "summary.json").write_text(json.dumps(summary))
    with open(where / "curves.csv", "w", newline="") as f:
        writer = csv.DictWriter(f, fieldnames=list(rows[0]))
        writer.writeheader()
        writer.writerows(rows)


def test_runs_made_apart_combine_as_one(tmp_path: Path) -> None:
    """Splits 0-1 and 2 of one comparison, run apart, combine as a run over the three would;
    the per-tenant table says when the reference leads."""
    for seed in (0, 1):
        _write_split(tmp_path / "first", seed)
    _write_split(tmp_path / "second", 2)
    out = CliRunner().invoke(
        app, ["bench-live-combine", str(tmp_path / "first"), str(tmp_path / "second"),
              "--out", str(tmp_path / "all")], env={"COLUMNS": "200"},
    )  # fmt: skip
    assert out.exit_code == 0, out.output
    combined = json.loads((tmp_path / "all" / "summary.json").read_text())
    assert combined["seeds"] == [0, 1, 2] and combined["reference"] == "fast"
    assert {p.name for p in (tmp_path / "all").iterdir()} == {
        "summary.json", "curves.csv", "accuracy.png"
    }  # fmt: skip
    lead = combined["systems"]["slow"]["accuracy_lead_of_fast_by_tenant"]["a"]
    assert lead["q25"]["splits_fast_ahead"] == 3 and lead["q100"]["splits_fast_behind"] == 0
    assert "served test accuracy, fast minus slow" in out.output


@pytest.mark.parametrize(
    ("runs", "fragment"),
    [
        (["first", "missing"], "missing: no bench-live split in it"),
        (["first", "first"], "seed 0 is given more than once"),
        (["first", "longer"], "splits differ in budget_s: 120.0 (seed 5)"),
        (["first", "broken"], "broken/seed-3: not a readable bench-live split"),
        (["first", "bare"], "not a bench-live split's summary (no tenants, budget_s"),
        (["first", "combined"], "combines splits whose own summaries are gone"),
    ],
)
def test_combine_names_what_cannot_be_combined(
    tmp_path: Path, runs: list[str], fragment: str
) -> None:
    _write_split(tmp_path / "first", 0)
    _write_split(tmp_path / "longer", 5, budget_s=120.0)
    _write_split(tmp_path / "broken", 3)
    (tmp_path / "broken" / "seed-3" / "curves.csv").write_text("system,t\nfast,zero\n")
    _write_split(tmp_path / "bare", 4)
    (tmp_path / "bare" / "seed-4" / "summary.json").write_text('{"systems": {}, "seed": 4}')
    (tmp_path / "combined").mkdir()
    (tmp_path / "combined" / "summary.json").write_text('{"systems": {}, "seeds": [1, 2]}')
    out = CliRunner().invoke(
        app, ["bench-live-combine", *(str(tmp_path / r) for r in runs),
              "--out", str(tmp_path / "all")], env={"COLUMNS": "200"},
    )  # fmt: skip
    assert out.exit_code == 2 and fragment in out.output, out.output
    assert not (tmp_path / "all").exists()


def test_combine_keeps_a_summary_already_there(tmp_path: Path) -> None:
    _write_split(tmp_path / "first", 0)
    _write_split(tmp_path / "first", 1)
    (tmp_path / "all").mkdir()
    (tmp_path / "all" / "summary.json").write_text("{}")
    out = CliRunner().invoke(
        app, ["bench-live-combine", str(tmp_path / "first"), "--out", str(tmp_path / "all")]
    )
    assert out.exit_code == 2 and "holds a summary.json already" in out.output, out.output
    assert (tmp_path / "all" / "summary.json").read_text() == "{}"


def test_combine_logs_each_system_to_the_users_mlflow(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """`--mlflow`: one run per system in the experiment bench-live at MLFLOW_TRACKING_URI,
    with the combination's numbers, the curves as step metrics and the outputs."""
    from mlflow.tracking import MlflowClient

    uri = f"sqlite:///{tmp_path}/user.db"
    monkeypatch.setenv("MLFLOW_TRACKING_URI", uri)
    monkeypatch.chdir(tmp_path)  # MLflow's default artifact root is ./mlruns
    for seed in (0, 1):
        _write_split(tmp_path / "first", seed)
    out = CliRunner().invoke(
        app, ["bench-live-combine", str(tmp_path / "first"), "--out", str(tmp_path / "all"),
              "--mlflow"], env={"COLUMNS": "200"},
    )  # fmt: skip
    assert out.exit_code == 0, out.output
    assert f"logged 2 runs to the MLflow experiment bench-live at {uri}" in out.output
    client = MlflowClient(uri)
    exp = client.get_experiment_by_name("bench-live")
    runs = {r.info.run_name: r for r in client.search_runs([exp.experiment_id])}
    assert sorted(runs) == ["fast", "slow"]
    combined = json.loads((tmp_path / "all" / "summary.json").read_text())
    slow, fast = runs["slow"], runs["fast"]
    assert slow.info.status == "FINISHED" and slow.data.params["seeds"] == "0,1"
    assert slow.data.params["reference"] == "fast" and slow.data.params["system"] == "slow"
    want = combined["systems"]["slow"]
    assert slow.data.metrics["test_regret_auc"] == pytest.approx(want["test_regret_auc"]["mean"])
    assert slow.data.metrics["auc_minus_reference"] == pytest.approx(want["auc_minus_fast"]["mean"])
    assert slow.data.metrics["auc_minus_reference_splits_reference_smaller"] == 2
    assert "auc_minus_reference" not in fast.data.metrics
    history = client.get_metric_history(slow.info.run_id, "mean_test_accuracy")
    assert [m.step for m in history] == list(range(CURVE_POINTS))
    assert {a.path for a in client.list_artifacts(slow.info.run_id)} == {
        "summary.json", "curves.csv", "accuracy.png"
    }  # fmt: skip


def test_an_unreadable_tracking_store_is_named_before_anything_runs(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("MLFLOW_TRACKING_URI", "nosuchscheme://somewhere")
    _csv(tmp_path / "t.csv", [[i, "ab"[i % 2]] for i in range(8)], ["x", "label"])
    for cmd in (["bench-live", str(tmp_path)], ["bench-live-combine", str(tmp_path)]):
        out = CliRunner().invoke(
            app, [*cmd, "--out", str(tmp_path / "o"), "--mlflow"], env={"COLUMNS": "200"}
        )
        assert out.exit_code == 2, out.output
        assert "--mlflow: the tracking store at nosuchscheme://somewhere cannot be read" in (
            out.output
        )
        assert not (tmp_path / "o").exists()


def test_an_error_keeps_its_brackets(capsys: pytest.CaptureFixture[str]) -> None:
    """`pip install 'tenantml[peers]'` lost its "[peers]" as a Rich markup tag."""
    from tenantml.cli.app import _fail

    assert _fail("flaml is an optional peer: pip install 'tenantml[peers]'").exit_code == 2
    assert "pip install 'tenantml[peers]'" in capsys.readouterr().err


def test_flaml_serves_each_fit_from_when_it_ended(monkeypatch: pytest.MonkeyPatch) -> None:
    """A nested fit that overruns its quarter (FLAML retrains on all the rows after its
    search) is served from when it ended, not from the quarter; one past the share at the
    end. A stand-in AutoML whose fits take their budget plus a fifth of the share."""
    import sys
    import types

    import tenantml.bench.live as live

    clock = [0.0]
    share = 10.0  # budget_s x slots / n: 20 s for 2 tenants

    class AutoML:
        def fit(self, x: Any, y: Any, *, time_budget: float, **kwargs: Any) -> None:
            clock[0] += time_budget + 0.2 * share
            self.label = y[0]

        def predict(self, x: Any) -> Any:
            return np.full(len(x), self.label)

    monkeypatch.setitem(sys.modules, "flaml", types.SimpleNamespace(AutoML=AutoML))
    monkeypatch.setattr(live.time, "monotonic", lambda: clock[0])
    a = _tenant("a", ["p", "p", "x", "x"], ["p", "p", "x"])
    b = _tenant("b", ["q", "x", "x", "x"], ["q", "q", "x"])
    run = live.run_flaml([a, b], budget_s=20.0)
    assert [t for t, _ in run.steps["a"]] == pytest.approx([0.45, 0.7, 0.95, 1.0])  # 1.2 -> 1
    assert [acc for _, acc in run.steps["a"]] == [0.5] * 4


def test_a_machine_that_cannot_make_its_prefect_template_is_named_in_one_line(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The template is made before any clock (`_prepare_machine`); where its server fails, the
    command says so in one line with the server's log, which is kept, and runs nothing."""
    import sys

    import tasks.prefect_start as ps

    _csv(tmp_path / "t.csv", [[i, "ab"[i % 2]] for i in range(8)], ["x", "label"])
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path / "cache"))  # no template yet
    monkeypatch.setattr(ps, "_EARLY", [])
    said = "import sys; sys.stderr.write('no room\\n'); exit(3)"
    monkeypatch.setattr(ps, "_server_command", lambda port: [sys.executable, "-c", said])
    out = CliRunner().invoke(
        app, ["bench-live", str(tmp_path), "--systems", "live", "--out", str(tmp_path / "o")]
    )
    assert out.exit_code == 1, out.output
    assert out.exception is None or isinstance(out.exception, SystemExit)  # no traceback
    assert "could not make this machine's template" in out.output, out.output
    assert "exited (code 3)" in out.output
    log = tmp_path / "o" / "machine" / "server.log"
    assert str(log) in out.output.replace("\n", "") and log.read_text() == "no room\n"
    assert not (tmp_path / "o" / "homes").exists() and not (tmp_path / "o" / "live").exists()
