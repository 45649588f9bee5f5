"""A job's process outlives the reader of its output (`tasks.streams`): real pipes whose
reading end is closed, as a killed worker leaves them."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]

# Writes more than a pipe's buffer and Python's to both streams, then what a job does at its
# end (MLflow prints a run's URL to stdout when it ends it), and exits 0 if nothing raised.
_WRITER = """
import sys
if sys.argv[1] == "outlive":
    from tasks.streams import outlive_lost_output
    outlive_lost_output()
    outlive_lost_output()  # idempotent
for i in range(2000):
    print("epoch", i, "x" * 80)
    print("log", i, "y" * 80, file=sys.stderr)
sys.stdout.write("View run at: http://127.0.0.1/#/runs/1\\n")
sys.stdout.flush()
open(sys.argv[2], "w").write("done")
"""


def _run_with_dead_pipes(mode: str, tmp_path: Path) -> tuple[int, bool]:
    """Run `_WRITER` with stdout and stderr pipes whose reading ends are closed at once."""
    out_r, out_w = os.pipe()
    err_r, err_w = os.pipe()
    os.close(out_r)
    os.close(err_r)
    marker = tmp_path / f"{mode}.done"
    try:
        proc = subprocess.run([sys.executable, "-c", _WRITER, mode, str(marker)], cwd=ROOT,
                              stdout=out_w, stderr=err_w, timeout=120)  # fmt: skip
    finally:
        os.close(out_w)
        os.close(err_w)
    return proc.returncode, marker.exists()


def test_a_process_whose_output_reader_died_goes_on(tmp_path: Path) -> None:
    assert _run_with_dead_pipes("outlive", tmp_path) == (0, True)


def test_without_it_the_first_write_to_the_dead_pipe_fails(tmp_path: Path) -> None:
    """The failure `outlive_lost_output` prevents (so the test above tests something)."""
    code, done = _run_with_dead_pipes("plain", tmp_path)
    assert code != 0 and not done


def test_streams_without_a_descriptor_are_left_alone(monkeypatch: pytest.MonkeyPatch) -> None:
    import io

    from tasks.streams import outlive_lost_output

    out, err = io.StringIO(), io.StringIO()
    monkeypatch.setattr(sys, "stdout", out)
    monkeypatch.setattr(sys, "stderr", err)
    outlive_lost_output()
    assert sys.stdout is out and sys.stderr is err
