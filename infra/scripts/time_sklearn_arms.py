"""Measure what every scikit-learn arm costs, and write ``trainers/sklearn_costs.json``.

The live service's cost model (``policy.costs``, built by ``tasks._service.build_problem``)
predicts a job's seconds as ``RELATIVE_COST[arm] * size / 1000`` times the tenant's scale, which
it learns from the tenant's finished jobs (``trainers.cost_size``: a holdout job's examples,
``CV_WORK`` times them when cross-validated). Only the ratios between arms matter before a
tenant's own jobs report, and they matter most then: a tenant's scale is learnt from its cheap
first jobs, so an arm priced 17 times too cheap against logistic regression stays 17 times too
cheap for every tenant. Hand-set ratios were that far off (the MLP against logistic regression:
10 where ``bench-live real``'s 2,906 tabular jobs measured 170; forests of 200 trees 4-6 where
they took 30-37), and Oboe's and LCDB's timings measure other settings (forests of 10 trees,
liblinear), so the ratios are measured here, on the trainer the service runs.

Each arm is trained by ``trainers.train`` (the service's own code path, store included) on
tasks that are not among ``bench-live``'s tenants:

* tabular arms: scikit-learn's bundled iris, wine and breast-cancer sets (cross-validated, as
  the service does on small tenants) and two seeded synthetic sets from ``make_classification``
  (800 x 50, two classes, cross-validated; 3,000 x 20, four classes, holdout);
* pixel arms (``pixels-<arm>``, on an image tenant's flattened pixels, always holdout): 1,500
  seeded images of ten letters drawn in Pillow's font, 8x8 and 28x28 (`_glyphs`).

An arm's value is the geometric mean over its tasks of ``seconds * 1000 / cost_size``: seconds
per 1,000 examples of a holdout job. Timings are this machine's (run it on an idle machine; one
job at a time, as a slot runs them); the ratios carry over to other machines far better than the
seconds, and each tenant's scale is learnt anyway.

``--check DIR ...`` instead compares the shipped values with the jobs of ``tenantml bench-live``
runs (their ``DIR/seed-*/homes/*/mlflow.db``): per arm, its log weight fitted from the jobs
(``log c = a_t + b_k`` over every tenant t of every run, least squares) less the table's, the
mean offset removed (only ratios matter), and their RMS, over tabular and pixel arms apart.

Usage: ``.venv/bin/python infra/scripts/time_sklearn_arms.py [--repeats R] [--arms A ...]
[--out PATH]`` (about three minutes on this machine, one run per arm and task); ``--arms``
re-measures only those and keeps the file's other values.
"""

from __future__ import annotations

import argparse
import json
import math
import platform
import statistics
import tempfile
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from pathlib import Path

import numpy as np
import sklearn
from numpy.typing import NDArray
from sklearn.datasets import load_breast_cancer, load_iris, load_wine, make_classification

from store import ExampleStore, LocalBlobStore
from store.schema import Schema, Tensor
from trainers import TrainJob, cost_size, train
from trainers.zoo import PIXEL_MODELS, TABULAR_MODELS

ROOT = Path(__file__).resolve().parents[2]
OUT = ROOT / "trainers" / "sklearn_costs.json"


@dataclass(frozen=True)
class TimingTask:
    """A data set to time arms on: ``x`` (n, *shape) float32, ``y`` (n,) int labels."""

    name: str
    x: NDArray[np.float32]
    y: NDArray[np.int64]

    @property
    def tabular(self) -> bool:
        return self.x.ndim == 2


def _bundled(name: str, loader: Callable[..., object]) -> TimingTask:
    d = loader()
    return TimingTask(name, d.data.astype(np.float32), d.target.astype(np.int64))  # type: ignore[attr-defined]


def _synthetic(
    name: str, n: int, shape: tuple[int, ...], classes: int, informative: int
) -> TimingTask:
    x, y = make_classification(
        n_samples=n,
        n_features=math.prod(shape),
        n_informative=informative,
        n_classes=classes,
        random_state=0,
    )
    return TimingTask(name, x.reshape(n, *shape).astype(np.float32), y.astype(np.int64))


def tabular_tasks() -> list[TimingTask]:
    return [
        _bundled("iris", load_iris),
        _bundled("wine", load_wine),
        _bundled("breast-cancer", load_breast_cancer),
        _synthetic("synthetic-800x50", 800, (50,), 2, 10),
        _synthetic("synthetic-3000x20", 3000, (20,), 4, 8),
    ]


def _glyphs(name: str, n: int, side: int) -> TimingTask:
    """``n`` grey images (side x side) of the letters A-J, drawn with Pillow's built-in font at
    seeded random sizes, positions and rotations: a handwriting-like task (mostly dark
    background, strokes), whose pixels cost what real images' do (Gaussian pixels do not: k-NN
    and logistic regression then cost several times less against forests than on digits)."""
    from PIL import Image, ImageDraw, ImageFont

    rng = np.random.default_rng(0)
    y = np.arange(n) % 10
    x = np.zeros((n, side, side, 1), np.float32)
    for k, label in enumerate(y):
        size = int(rng.integers(18, 26))
        img = Image.new("L", (32, 32))
        ImageDraw.Draw(img).text(
            (int(rng.integers(2, 10)), int(rng.integers(0, 6))),
            "ABCDEFGHIJ"[label],
            fill=int(rng.integers(160, 256)),
            font=ImageFont.load_default(size=size),
        )
        img = img.rotate(float(rng.uniform(-20, 20))).resize(
            (side, side), Image.Resampling.BILINEAR
        )
        x[k, :, :, 0] = np.asarray(img, np.float32)
    return TimingTask(name, x, y.astype(np.int64))


def image_tasks() -> list[TimingTask]:
    return [_glyphs("glyphs-8x8", 1500, 8), _glyphs("glyphs-28x28", 1500, 28)]


def seconds_per_thousand(seconds: float, n_examples: int, tabular: bool) -> float:
    """A job's seconds per 1,000 examples of a holdout job (`trainers.cost_size`)."""
    return seconds * 1000.0 / cost_size(n_examples, tabular)


def time_arms(
    arms: Sequence[str], tasks: Sequence[TimingTask], store: ExampleStore, repeats: int = 1
) -> dict[str, float]:
    """Per arm, the geometric mean over `tasks` of its median seconds per 1,000 examples."""
    for task in tasks:
        shape = task.x.shape[1:]
        store.create_tenant(task.name, Schema(input=Tensor(*shape), output=Tensor(10)))
        store.feed(task.name, task.x, [str(v) for v in task.y])
    out = {}
    for arm in arms:
        logs = []
        for task in tasks:
            runs = [train(TrainJob(task.name, arm, seed=r), store).cost_s for r in range(repeats)]
            per_k = seconds_per_thousand(statistics.median(runs), len(task.y), task.tabular)
            logs.append(math.log(per_k))
            print(f"  {arm:34s} {task.name:24s} {statistics.median(runs):7.3f} s", flush=True)
        out[arm] = float(math.exp(statistics.fmean(logs)))
    return out


def _job_costs(db: Path) -> list[tuple[str, str, float]]:
    """(tenant, arm, seconds) of every finished job in a service home's MLflow database, read
    as the service reads them (`mlflow_plugin.tracking.job_records`)."""
    from mlflow.tracking import MlflowClient

    from mlflow_plugin.tracking import job_records, tenant_experiments

    client = MlflowClient(f"sqlite:///{db}")
    return [
        (r.tenant, r.candidate, r.cost_s)
        for r in job_records(client, tenant_experiments(client).values())
        if r.status == "FINISHED" and r.cost_s is not None
    ]


def check(dirs: Sequence[Path], table: dict[str, float]) -> dict[str, dict[str, float]]:
    """Per group (tabular, pixels), per arm: fitted log weight less the table's, offset
    removed, from the jobs of the bench-live runs in `dirs` (module docstring)."""
    jobs = [
        (f"{db}:{tenant}", arm, math.log(max(cost, 1e-3)))
        for d in dirs
        for db in sorted(d.glob("seed-*/homes/*/mlflow.db"))
        for tenant, arm, cost in _job_costs(db)
        if arm in table
    ]
    if not jobs:
        raise SystemExit(f"no scikit-learn jobs in {[str(d) for d in dirs]}/seed-*/homes/*")
    out: dict[str, dict[str, float]] = {}
    for group in ("tabular", "pixels"):
        rows = [j for j in jobs if j[1].startswith("pixels-") == (group == "pixels")]
        if not rows:
            continue
        tenants = sorted({r[0] for r in rows})
        arms = sorted({r[1] for r in rows})
        t = np.array([tenants.index(r[0]) for r in rows])
        k = np.array([arms.index(r[1]) for r in rows])
        y = np.array([r[2] for r in rows])
        a, b = np.zeros(len(tenants)), np.zeros(len(arms))
        for _ in range(100):  # alternating least squares of log c = a_t + b_k
            b = np.bincount(k, y - a[t], len(arms)) / np.bincount(k, minlength=len(arms))
            a = np.bincount(t, y - b[k], len(tenants)) / np.bincount(t, minlength=len(tenants))
        err = b - np.log([table[arm] for arm in arms])
        err -= err.mean()
        out[group] = dict(zip(arms, map(float, err), strict=True))
    return out


def _round(value: float, digits: int = 3) -> float:
    return float(f"{value:.{digits}g}")


def main(argv: Sequence[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--repeats", type=int, default=1, help="runs per arm and task (median)")
    parser.add_argument("--arms", nargs="*", help="only these arms (default: every one)")
    parser.add_argument("--out", type=Path, default=OUT)
    parser.add_argument("--check", nargs="+", type=Path, help="bench-live output directories")
    args = parser.parse_args(argv)
    if args.check:
        table = json.loads(args.out.read_text())["seconds_per_1000"]
        for group, errors in check(args.check, table).items():
            for arm, e in errors.items():
                print(f"  {arm:34s} {e:+.2f}")
            rms = math.sqrt(statistics.fmean(e * e for e in errors.values()))
            print(f"{group}: RMS of the arms' log errors {rms:.2f} ({len(errors)} arms)")
        return
    chosen = set(args.arms or [*TABULAR_MODELS, *PIXEL_MODELS])
    unknown = chosen - {*TABULAR_MODELS, *PIXEL_MODELS}
    if unknown:
        parser.error(f"unknown arms {sorted(unknown)}; valid: {[*TABULAR_MODELS, *PIXEL_MODELS]}")
    tab_tasks, img_tasks = tabular_tasks(), image_tasks()
    with tempfile.TemporaryDirectory() as tmp:
        tab = [a for a in TABULAR_MODELS if a in chosen]
        pix = [a for a in PIXEL_MODELS if a in chosen]
        tab_store = ExampleStore(LocalBlobStore(Path(tmp) / "t"))
        img_store = ExampleStore(LocalBlobStore(Path(tmp) / "i"))
        costs = time_arms(tab, tab_tasks, tab_store, args.repeats)
        costs |= time_arms(pix, img_tasks, img_store, args.repeats)
    if args.arms and args.out.exists():  # a partial run updates the others' values
        costs = json.loads(args.out.read_text())["seconds_per_1000"] | costs
    doc = {
        "about": "seconds per 1,000 examples of a holdout job, per scikit-learn arm "
        "(infra/scripts/time_sklearn_arms.py)",
        "measured_on": {
            "machine": platform.machine(),
            "processor": platform.processor() or "unknown",
            "python": platform.python_version(),
            "scikit-learn": sklearn.__version__,
            "repeats": args.repeats,
            "tabular_tasks": [t.name for t in tab_tasks],
            "image_tasks": [t.name for t in img_tasks],
        },
        "seconds_per_1000": {k: _round(v) for k, v in sorted(costs.items())},
    }
    args.out.write_text(json.dumps(doc, indent=1, sort_keys=True) + "\n")
    print(f"wrote {args.out}")


if __name__ == "__main__":
    main()
