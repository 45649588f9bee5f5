"""bench-trainer and bench-feed: they run on the CPU, print, save JSON, reject bad options."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
from typer.testing import CliRunner

from store import ExampleStore, LocalBlobStore
from store.schema import Schema, Tensor
from tenantml.cli import app

runner = CliRunner()


def test_bench_trainer_runs_on_cpu(tmp_path: Path) -> None:
    args = ["--image-size", "32", "--batch-size", "4", "--steps", "1", "--rounds", "1"]
    res = runner.invoke(app, ["bench-trainer", *args, "--out", str(tmp_path)])
    assert res.exit_code == 0, res.output
    r = json.loads((tmp_path / "trainer.json").read_text())
    assert r["device"] == "cpu" and r["plain_images_per_s"] > 0 and r["ours_images_per_s"] > 0
    assert abs(r["ratio"] - r["ours_images_per_s"] / r["plain_images_per_s"]) < 1e-9
    assert "ratio ours/plain" in res.output


def test_bench_feed_reports_peak_rss(tmp_path: Path) -> None:
    res = runner.invoke(
        app, ["bench-feed", "--examples", "5000", "--shape", "4,4,1", "--out", str(tmp_path)]
    )
    assert res.exit_code == 0, res.output
    r = json.loads((tmp_path / "feed.json").read_text())
    assert r["examples"] == 5000 and r["batches"] == 2 and r["peak_rss_mib"] > 0


def test_bench_bad_options_exit_2() -> None:
    for args in (["bench-feed", "--shape", "0,3"], ["bench-trainer", "--steps", "0"]):
        res = runner.invoke(app, args)
        assert res.exit_code == 2 and "is not valid" in res.output, res.output


def test_feed_writes_batches_while_the_input_is_still_streaming(tmp_path: Path) -> None:
    store = ExampleStore(LocalBlobStore(tmp_path))
    store.create_tenant("t", Schema(input=Tensor(2), output=Tensor(2)))
    seen_batches: list[int] = []

    def inputs():  # type: ignore[no-untyped-def]
        for i in range(1000):
            if i % 100 == 0:
                seen_batches.append(len(store.blobs.list("tenants/t/batches/")))
            yield np.full(2, i, dtype=np.float32)

    store.feed("t", inputs(), (i % 2 for i in range(1000)), chunk=100)
    # Batch k was on disk before example 100 * (k + 1) was produced: nothing piles up.
    assert seen_batches == list(range(10))
    assert store.manifest("t").n_examples == 1000
