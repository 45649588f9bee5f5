"""A job's process outlives the reader of its output (`tasks.streams`): real pipes whose
reading end is closed, as a killed worker leaves them."""

from __future__ import annotations

import os
import subprocess
import sys
import time
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


# A log handler made before (Prefect's console handler: rich, which turns a broken pipe into
# SystemExit), then the reader goes away; the streams are pointed at /dev/null before the
# next line is logged, and a write straight to descriptor 1 goes there too.
_LOGS_AFTER_THE_READER_WENT = """
import os, stat, sys, time
from rich.console import Console
console = Console(file=sys.stderr)
if sys.argv[1] == "outlive":
    from tasks.streams import outlive_lost_output
    outlive_lost_output()
print("ready", flush=True)
deadline = time.monotonic() + 10
while time.monotonic() < deadline and stat.S_ISFIFO(os.fstat(2).st_mode):
    time.sleep(0.05)  # until the streams are swapped (or long after the reader went)
for i in range(5):
    console.print("Finished in state Completed()", "x" * 100)
os.write(1, b"straight to descriptor 1\\n")
open(sys.argv[2], "w").write("done")
"""


@pytest.mark.parametrize(("mode", "survives"), [("outlive", True), ("plain", False)])
def test_a_handler_made_before_writes_into_dev_null_once_the_reader_went(
    mode: str, survives: bool, tmp_path: Path
) -> None:
    marker = tmp_path / "done"
    proc = subprocess.Popen(
        [sys.executable, "-c", _LOGS_AFTER_THE_READER_WENT, mode, str(marker)], cwd=ROOT,
        stdout=subprocess.PIPE, stderr=subprocess.PIPE,
    )  # fmt: skip
    assert proc.stdout is not None and proc.stderr is not None
    assert proc.stdout.readline().strip() == b"ready"
    proc.stdout.close()  # the worker is killed: nobody reads either pipe any more
    proc.stderr.close()
    started = time.monotonic()
    code = proc.wait(timeout=120)
    assert (code == 0 and marker.exists()) is survives, (code, time.monotonic() - started)


def test_streams_without_a_descriptor_are_left_alone(monkeypatch: pytest.MonkeyPatch) -> None:
    import io

    from tasks import streams

    monkeypatch.setattr(streams, "_STD_FDS", ())  # this (pytest) process's descriptors: not ours
    out, err = io.StringIO(), io.StringIO()
    monkeypatch.setattr(sys, "stdout", out)
    monkeypatch.setattr(sys, "stderr", err)
    streams.outlive_lost_output()
    assert sys.stdout is out and sys.stderr is err
