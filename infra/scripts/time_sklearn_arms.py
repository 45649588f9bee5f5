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

``--growth`` instead measures how each arm's cost grows with the data: its seconds on one task
at each of ``GROWTH_ROWS`` examples (a seeded synthetic set, 20 features and four classes, for
the tabular arms; 8x8 glyphs for the pixel arms; all holdout jobs), and the slope ``e`` of log
seconds on log examples, least squares: a fit's cost grows like ``examples^e``. An SVM's or a
1-NN's ``e`` is 1.4-2.2, a forest's 0.7-1.1, histogram boosting's 0.2-0.3 (it bins the rows, and
stops early). The service's prior predicts ``seconds_per_1000[arm] * size / 1000`` times
``(examples / reference_size)^(e - 1)`` (``tasks._service.build_problem``; ``size`` counts a
cross-validated job's folds, a fold's fit sees about the examples), where ``reference_size`` is
the geometric mean of the examples of the tasks ``seconds_per_1000`` was measured on (where its
value holds, under the power law). Without it, a tenant of 12,000 rows was predicted the same
SVM-to-forest ratio as one of 1,500, where the polynomial SVM took 42 s against the forest's
7.0 (0.42 s against 0.90 at 1,500). To check the law, each arm's largest size is predicted from a
fit on the smaller ones, and from the linear law through them. Measured (``--growth --repeats
3``): the power law predicts 24 of 37 arms better, median log error 0.17 against 0.41; the RMS
ties (0.67 both), since an iterative solver's cost follows its convergence, not a power of the
rows (logistic regression with saga: 0.22 s at 1,500 rows, 3.1 s at 3,000, 6.3 s at 12,000).

``--growth`` also measures each arm's growth in an example's input values and in the classes
(``--growth-of``: any of ``rows features classes``, default all): at `GROWTH_AT_ROWS` examples,
the tabular arms on synthetic sets of `GROWTH_FEATURES` columns (four classes) and of
`GROWTH_CLASSES` classes (20 columns), the pixel arms on glyphs of `GROWTH_SIDES` sides (ten
letters) and of `GROWTH_CLASSES` letters (8x8). The file's ``feature_exponent`` and
``class_exponent`` hold them, ``reference_features`` and ``reference_classes`` the geometric
means of the cost run's tasks' (where ``seconds_per_1000`` holds): a fit's cost grows like
``(features / reference)^e_f (classes / reference)^e_c`` on top of the rows'. The service's
prior leaves them out: with them, bench-live's jobs' costs were predicted better and its
test-regret AUC was worse (docs/live.md, "Its growth in the features and the classes").

``--check-growth DIR ...`` compares, on the bench-live runs' jobs (their homes' stores give each
tenant's examples), how well the table predicts a tenant's costs once the tenant's own level is
known (the mean of its jobs' log errors): the RMS of the jobs' log errors about it, with the
growths and without, in the rows alone and in all three.

Usage: ``.venv/bin/python infra/scripts/time_sklearn_arms.py [--repeats R] [--arms A ...]
[--out PATH] [--growth [--growth-of C ...]]`` (about three minutes on this machine, one run
per arm and task; ``--growth`` about ten per repeat in the rows, five in the features and
classes); ``--arms`` re-measures only those and keeps the file's other values, and each mode
keeps what the other measured.
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
from typing import Any

import numpy as np
import sklearn
from numpy.typing import NDArray
from sklearn.datasets import load_breast_cancer, load_iris, load_wine, make_classification

from store import ExampleStore, LocalBlobStore
from store.schema import Schema, Tensor
from trainers import CV_MAX_EXAMPLES, TrainJob, cost_size, train
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

    @property
    def features(self) -> int:
        """An example's input values (a tabular row's columns, an image's pixels)."""
        return math.prod(self.x.shape[1:])

    @property
    def classes(self) -> int:
        return len(np.unique(self.y))

    def size(self, covariate: str) -> int:
        """Its examples, features or classes (`COVARIATES`)."""
        return {"rows": len(self.y), "features": self.features, "classes": self.classes}[covariate]


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


def _glyphs(name: str, n: int, side: int, classes: int = 10) -> TimingTask:
    """``n`` grey images (side x side) of the first `classes` letters (A-J by default), drawn
    with Pillow's built-in font at seeded random sizes, positions and rotations: a
    handwriting-like task (mostly dark background, strokes), whose pixels cost what real
    images' do (Gaussian pixels do not: k-NN and logistic regression then cost several times
    less against forests than on digits)."""
    from PIL import Image, ImageDraw, ImageFont

    rng = np.random.default_rng(0)
    if not 2 <= classes <= len(LETTERS):
        raise ValueError(f"glyphs have 2 to {len(LETTERS)} classes, got {classes}")
    y = np.arange(n) % classes
    x = np.zeros((n, side, side, 1), np.float32)
    for k, label in enumerate(y):
        size = int(rng.integers(18, 26))
        img = Image.new("L", (32, 32))
        ImageDraw.Draw(img).text(
            (int(rng.integers(2, 10)), int(rng.integers(0, 6))),
            LETTERS[label],
            fill=int(rng.integers(160, 256)),
            font=ImageFont.load_default(size=size),
        )
        img = img.rotate(float(rng.uniform(-20, 20))).resize(
            (side, side), Image.Resampling.BILINEAR
        )
        x[k, :, :, 0] = np.asarray(img, np.float32)
    return TimingTask(name, x, y.astype(np.int64))


#: the letters `_glyphs` draws, one class each
LETTERS = "ABCDEFGHIJKLMNOP"


def image_tasks() -> list[TimingTask]:
    return [_glyphs("glyphs-8x8", 1500, 8), _glyphs("glyphs-28x28", 1500, 28)]


#: the examples each arm's growth is timed at (``--growth``): every one a holdout job (more than
#: `trainers.CV_MAX_EXAMPLES`: a cross-validated job fits its folds, 6.25 times the work)
GROWTH_ROWS = (1500, 3000, 6000, 12000)


#: the input values (a tabular row's columns; an image's pixels, as its sides ``sqrt`` of them)
#: and the classes each arm's growth in them is timed at (``--growth``), at `GROWTH_AT_ROWS`
#: examples and the rows' task's other settings: about bench-live's real tenants (5-19
#: columns, 2-6 classes) and its digits and MNIST (64 and 784 pixels, 10 classes)
GROWTH_FEATURES = (10, 20, 40, 80)
GROWTH_SIDES = (8, 12, 20, 28)
GROWTH_CLASSES = (2, 4, 8, 16)
GROWTH_AT_ROWS = 3000
#: what a tenant's size is: ``--growth`` measures each arm's growth in each of them
COVARIATES = ("rows", "features", "classes")
#: where `trainers/sklearn_costs.json` keeps each covariate's exponents and reference sizes
EXPONENT_KEYS = {
    "rows": "size_exponent",
    "features": "feature_exponent",
    "classes": "class_exponent",
}
REFERENCE_KEYS = {
    "rows": "reference_size",
    "features": "reference_features",
    "classes": "reference_classes",
}


def growth_tasks(rows: Sequence[int], kind: str, covariate: str = "rows") -> list[TimingTask]:
    """Tasks of one kind (``tabular`` or ``images``) at each size of one `covariate`: the rows
    in `rows`, or `GROWTH_FEATURES` (`GROWTH_SIDES`) or `GROWTH_CLASSES` (module docstring)."""
    if covariate not in COVARIATES:
        raise ValueError(f"covariate must be one of {COVARIATES}, got {covariate!r}")
    # names carry the covariate: one store holds every covariate's tasks, and a task fed twice
    # under one name would hold its examples twice (3,000 x 20 is a rows and a features task)
    n, to = GROWTH_AT_ROWS, covariate
    if kind == "tabular":
        if covariate == "features":
            return [_synthetic(f"{to}-synthetic-{n}x{f}", n, (f,), 4, 8) for f in GROWTH_FEATURES]
        if covariate == "classes":
            return [
                _synthetic(f"{to}-synthetic-{n}x20-c{c}", n, (20,), c, 8) for c in GROWTH_CLASSES
            ]
        return [_synthetic(f"{to}-synthetic-{n}x20", n, (20,), 4, 8) for n in rows]
    if covariate == "features":
        return [_glyphs(f"{to}-glyphs-{s}x{s}-{n}", n, s) for s in GROWTH_SIDES]
    if covariate == "classes":
        return [_glyphs(f"{to}-glyphs-8x8-{n}-c{c}", n, 8, c) for c in GROWTH_CLASSES]
    return [_glyphs(f"{to}-glyphs-8x8-{n}", n, 8) for n in rows]


def seconds_per_thousand(seconds: float, n_examples: int, tabular: bool) -> float:
    """A job's seconds per 1,000 examples of a holdout job (`trainers.cost_size`)."""
    return seconds * 1000.0 / cost_size(n_examples, tabular)


def reference_size(tasks: Sequence[TimingTask], covariate: str = "rows") -> float:
    """The geometric mean of the tasks' examples (or features, or classes): where a geometric
    mean over them of seconds per 1,000 examples (`seconds_per_thousand`) holds if a fit's cost
    grows like a power of its examples (a cross-validated job's folds each fit about them), of
    its features and of its classes."""
    return math.exp(statistics.fmean(math.log(t.size(covariate)) for t in tasks))


def _register(tasks: Sequence[TimingTask], store: ExampleStore) -> None:
    for task in tasks:
        shape = task.x.shape[1:]
        store.create_tenant(task.name, Schema(input=Tensor(*shape), output=Tensor(task.classes)))
        store.feed(task.name, task.x, [str(v) for v in task.y])


def _seconds(arm: str, task: TimingTask, store: ExampleStore, repeats: int) -> float:
    """The median seconds of `repeats` jobs of `arm` on `task` (the service's `train`)."""
    runs = [train(TrainJob(task.name, arm, seed=r), store).cost_s for r in range(repeats)]
    seconds = statistics.median(runs)
    print(f"  {arm:34s} {task.name:24s} {seconds:7.3f} s", flush=True)
    return seconds


def time_arms(
    arms: Sequence[str], tasks: Sequence[TimingTask], store: ExampleStore, repeats: int = 1
) -> dict[str, float]:
    """Per arm, the geometric mean over `tasks` of its median seconds per 1,000 examples."""
    _register(tasks, store)
    out = {}
    for arm in arms:
        logs = [
            math.log(seconds_per_thousand(_seconds(arm, t, store, repeats), len(t.y), t.tabular))
            for t in tasks
        ]
        out[arm] = float(math.exp(statistics.fmean(logs)))
    return out


@dataclass(frozen=True)
class Growth:
    """One arm's growth: ``exponent`` ``e`` (cost grows like ``size^e``, fitted on every size);
    the log errors of predicting its largest size from the smaller ones, by a power law fitted
    on them (``power_error``) and by a linear one through them (``linear_error``)."""

    exponent: float
    power_error: float
    linear_error: float


def fit_growth(sizes: Sequence[float], seconds: Sequence[float]) -> Growth:
    """The `Growth` of costs `seconds` measured at `sizes` (at least three, distinct)."""
    if len(sizes) < 3 or len(set(sizes)) < 3:
        raise ValueError(f"need costs at three or more distinct sizes, got sizes {list(sizes)}")
    x, y = np.log(np.asarray(sizes, float)), np.log(np.asarray(seconds, float))
    slope, _ = np.polyfit(x, y, 1)
    held_slope, held_intercept = np.polyfit(x[:-1], y[:-1], 1)
    power = held_intercept + held_slope * x[-1]
    linear = float(np.mean(y[:-1] - x[:-1])) + x[-1]
    return Growth(float(slope), float(power - y[-1]), float(linear - y[-1]))


def time_growth(
    arms: Sequence[str],
    tasks: Sequence[TimingTask],
    store: ExampleStore,
    repeats: int = 1,
    covariate: str = "rows",
) -> dict[str, Growth]:
    """Per arm, its `Growth` over `tasks` (one kind of task at several sizes of `covariate`)."""
    _register(tasks, store)
    sizes = [float(t.size(covariate)) for t in tasks]
    out = {}
    for arm in arms:
        out[arm] = fit_growth(sizes, [_seconds(arm, t, store, repeats) for t in tasks])
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
        for db in _homes(dirs)
        for tenant, arm, cost in _job_costs(db)
        if arm in table
    ]
    if not jobs:
        raise _no_jobs(dirs)
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


def _tenant_sizes(home: Path) -> dict[str, tuple[int, int, int]]:
    """Each tenant's (examples, input values, classes) in a service home's store (its latest
    snapshot; the schema's input and output sizes)."""
    store = ExampleStore(LocalBlobStore(home / "store"))
    out = {}
    for name in store.tenants():
        schema = store.schema(name)
        out[name] = (store.manifest(name).n_examples, schema.input.size, schema.output.size)
    return out


def _measured_up_to(doc: dict[str, Any], group: str) -> tuple[float, float, float]:
    """The largest (rows, features, classes) the file `doc`'s growths were measured at, for
    the tabular or the pixel arms (past them a power law fitted below is not trusted)."""
    growth = doc.get("measured_on", {}).get("growth", {})
    features = growth.get("features", []) if group == "tabular" else [
        side * side for side in growth.get("image_sides", [])
    ]  # fmt: skip
    return (
        max(growth.get("rows", [math.inf])),
        max(features, default=math.inf),
        max(growth.get("classes", [math.inf])),
    )


def check_growth(
    dirs: Sequence[Path], doc: dict[str, Any], covariates: Sequence[str] = COVARIATES
) -> dict[str, tuple[float, float, int]]:
    """Per group (tabular, pixels): the RMS of the bench-live jobs' log errors about their
    tenant's mean error, predicted with the file `doc`'s growths in `covariates` (those it
    has) and without, and the jobs (module docstring)."""
    table = doc["seconds_per_1000"]
    used = [c for c in covariates if EXPONENT_KEYS[c] in doc]
    with_g: dict[str, dict[str, list[float]]] = {"tabular": {}, "pixels": {}}
    without: dict[str, dict[str, list[float]]] = {"tabular": {}, "pixels": {}}
    for db in _homes(dirs):
        sizes = _tenant_sizes(db.parent)
        for tenant, arm, cost in _job_costs(db):
            if arm not in table or arm not in doc[EXPONENT_KEYS["rows"]]:
                continue
            group = "pixels" if arm.startswith("pixels-") else "tabular"
            # as the service does in the rows: past the measured sizes every arm grows alike
            # (the tenant's level takes it up); a fit's examples, not its folds' work. Only
            # differences between a tenant's arms count (its mean error is taken out), so the
            # rows' slope 1 subtracted is the service's tenant scale, with no effect here
            up_to = _measured_up_to(doc, group)
            grown = 0.0
            for c in used:
                k = COVARIATES.index(c)
                x = math.log(min(sizes[tenant][k], up_to[k]) / doc[REFERENCE_KEYS[c]][group])
                typical = 1.0 if c == "rows" else 0.0
                # an arm a partial run has not measured in `c`: no growth of its own there
                grown += (doc[EXPONENT_KEYS[c]].get(arm, typical) - typical) * x
            e = math.log(max(cost, 1e-3)) - math.log(table[arm])
            without[group].setdefault(f"{db}:{tenant}", []).append(e)
            with_g[group].setdefault(f"{db}:{tenant}", []).append(e - grown)
    out = {
        group: (_rms_about_means(with_g[group]), _rms_about_means(jobs), len(_flat(jobs)))
        for group, jobs in without.items()
        if jobs
    }
    if not out:
        raise _no_jobs(dirs)
    return out


def _homes(dirs: Sequence[Path]) -> list[Path]:
    """The MLflow databases of the service homes of bench-live runs in `dirs` (a run of
    several splits keeps them in ``seed-*/homes``, a run of one in ``homes``)."""
    return [
        db
        for d in dirs
        for pattern in ("seed-*/homes/*/mlflow.db", "homes/*/mlflow.db")
        for db in sorted(d.glob(pattern))
    ]


def _no_jobs(dirs: Sequence[Path]) -> SystemExit:
    return SystemExit(
        f"no scikit-learn jobs in {[str(d) for d in dirs]}/homes/* or their seed-*/homes/*"
    )


def _flat(groups: dict[str, list[float]]) -> list[float]:
    return [v for values in groups.values() for v in values]


def _rms_about_means(groups: dict[str, list[float]]) -> float:
    return math.sqrt(
        statistics.fmean((v - statistics.fmean(vs)) ** 2 for vs in groups.values() for v in vs)
    )


def _round(value: float, digits: int = 3) -> float:
    return float(f"{value:.{digits}g}")


def main(argv: Sequence[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--repeats", type=int, default=1, help="runs per arm and task (median)")
    parser.add_argument("--arms", nargs="*", help="only these arms (default: every one)")
    parser.add_argument("--out", type=Path, default=OUT)
    parser.add_argument("--check", nargs="+", type=Path, help="bench-live output directories")
    parser.add_argument(
        "--growth", action="store_true", help="measure each arm's growth with the data's size"
    )
    parser.add_argument(
        "--growth-rows",
        type=int,
        nargs="+",
        default=list(GROWTH_ROWS),
        help=f"examples to time each arm's growth at (default {list(GROWTH_ROWS)})",
    )
    parser.add_argument(
        "--growth-of",
        nargs="+",
        choices=COVARIATES,
        default=list(COVARIATES),
        help="with --growth: the covariates to measure each arm's growth in (default: all); "
        "the file keeps the others' values",
    )
    parser.add_argument("--check-growth", nargs="+", type=Path, help="bench-live output dirs")
    args = parser.parse_args(argv)
    if args.check:
        table = json.loads(args.out.read_text())["seconds_per_1000"]
        for group, errors in check(args.check, table).items():
            for arm, e in errors.items():
                print(f"  {arm:34s} {e:+.2f}")
            rms = math.sqrt(statistics.fmean(e * e for e in errors.values()))
            print(f"{group}: RMS of the arms' log errors {rms:.2f} ({len(errors)} arms)")
        return
    if args.check_growth:
        doc = json.loads(args.out.read_text())
        for covariates in (("rows",), COVARIATES):
            for group, (fitted, flat, jobs) in check_growth(
                args.check_growth, doc, covariates
            ).items():
                print(
                    f"{group}: RMS of the jobs' log errors about their tenant's {fitted:.3f} with "
                    f"the growths in the {', '.join(covariates)}, {flat:.3f} without ({jobs} jobs)"
                )
        return
    chosen = set(args.arms or [*TABULAR_MODELS, *PIXEL_MODELS])
    unknown = chosen - {*TABULAR_MODELS, *PIXEL_MODELS}
    if unknown:
        parser.error(f"unknown arms {sorted(unknown)}; valid: {[*TABULAR_MODELS, *PIXEL_MODELS]}")
    rows, growth_of = args.growth_rows, list(dict.fromkeys(args.growth_of))
    if args.growth and "rows" in growth_of and (len(set(rows)) < 3 or min(rows) <= CV_MAX_EXAMPLES):
        parser.error(
            f"--growth-rows needs three or more distinct sizes above {CV_MAX_EXAMPLES} examples "
            f"(holdout jobs: a cross-validated one fits its folds), got {rows}"
        )
    old = json.loads(args.out.read_text()) if args.out.exists() else {}
    costs: dict[str, float] = old.get("seconds_per_1000", {})
    exponents = {c: old.get(EXPONENT_KEYS[c], {}) for c in COVARIATES}
    measured_on = old.get("measured_on", {})
    tab = [a for a in TABULAR_MODELS if a in chosen]
    pix = [a for a in PIXEL_MODELS if a in chosen]
    tab_tasks, img_tasks = tabular_tasks(), image_tasks()
    with tempfile.TemporaryDirectory() as tmp:
        tab_store = ExampleStore(LocalBlobStore(Path(tmp) / "t"))
        img_store = ExampleStore(LocalBlobStore(Path(tmp) / "i"))
        machine = {
            "machine": platform.machine(),
            "processor": platform.processor() or "unknown",
            "python": platform.python_version(),
            "scikit-learn": sklearn.__version__,
        }
        if args.growth:
            for covariate in growth_of:
                print(f"growth in the {covariate}:", flush=True)
                grown: dict[str, Growth] = {}
                for arms, kind, store in ((tab, "tabular", tab_store), (pix, "images", img_store)):
                    if arms:
                        tasks = growth_tasks(rows, kind, covariate)
                        grown |= time_growth(arms, tasks, store, args.repeats, covariate)
                _print_growth(grown)
                # a partial run updates the others' values
                exponents[covariate] = (exponents[covariate] if args.arms else {}) | {
                    k: g.exponent for k, g in grown.items()
                }
            measured_on["growth"] = _growth_record(
                measured_on.get("growth", {}), growth_of, rows, machine | {"repeats": args.repeats}
            )
        else:
            new = time_arms(tab, tab_tasks, tab_store, args.repeats)
            new |= time_arms(pix, img_tasks, img_store, args.repeats)
            costs = (costs if args.arms else {}) | new
            measured_on |= machine | {
                "repeats": args.repeats,
                "tabular_tasks": [t.name for t in tab_tasks],
                "image_tasks": [t.name for t in img_tasks],
            }
    doc = {
        "about": "seconds per 1,000 examples of a holdout job, per scikit-learn arm, at "
        "reference_size examples, reference_features input values and reference_classes "
        "classes; a fit's cost grows like examples^size_exponent * "
        "features^feature_exponent * classes^class_exponent "
        "(infra/scripts/time_sklearn_arms.py)",
        "measured_on": measured_on,
        "seconds_per_1000": {k: _round(v) for k, v in sorted(costs.items())},
        **{
            EXPONENT_KEYS[c]: {k: _round(v) for k, v in sorted(exponents[c].items())}
            for c in COVARIATES
            if exponents[c]
        },
        **{
            REFERENCE_KEYS[c]: {
                "tabular": _round(reference_size(tab_tasks, c)),
                "pixels": _round(reference_size(img_tasks, c)),
            }
            for c in COVARIATES
        },
    }
    args.out.write_text(json.dumps(doc, indent=1, sort_keys=True) + "\n")
    print(f"wrote {args.out}")


def _growth_record(
    old: dict[str, Any], measured: Sequence[str], rows: Sequence[int], run: dict[str, Any]
) -> dict[str, Any]:
    """``measured_on["growth"]`` after a ``--growth`` run of the covariates `measured` (`run`:
    its machine and repeats): each covariate's sizes, and the run that measured them, change
    only when it was measured. The rows' run is recorded at the top level, where the service
    reads the most rows measured (`trainers.zoo.GROWTH_MEASURED_UP_TO`)."""
    out = dict(old)
    if "rows" in measured:
        out |= run | {
            "rows": list(rows),
            "tabular_task": "synthetic, 20 features, 4 classes",
            "image_task": "glyphs-8x8, 10 letters",
        }
    if "features" in measured:
        out |= {
            "features": list(GROWTH_FEATURES),
            "image_sides": list(GROWTH_SIDES),
            "features_run": run | {"rows": GROWTH_AT_ROWS},
        }
    if "classes" in measured:
        out |= {"classes": list(GROWTH_CLASSES), "classes_run": run | {"rows": GROWTH_AT_ROWS}}
    return out


def _print_growth(grown: dict[str, Growth]) -> None:
    for arm, g in grown.items():
        print(
            f"  {arm:34s} exponent {g.exponent:5.2f}; its largest size predicted from the "
            f"smaller ones: log error {g.power_error:+.2f} (linear: {g.linear_error:+.2f})"
        )
    for name, errors in (
        ("power law", [g.power_error for g in grown.values()]),
        ("linear", [g.linear_error for g in grown.values()]),
    ):
        rms = math.sqrt(statistics.fmean(e * e for e in errors)) if errors else float("nan")
        print(f"largest size predicted, RMS log error over {len(errors)} arms, {name}: {rms:.2f}")


if __name__ == "__main__":
    main()
