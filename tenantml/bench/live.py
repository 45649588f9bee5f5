"""bench-live: the service itself, end to end, against FLAML per tenant on the same wall clock.

Issue 16, item 5. Each tenant of a directory (``NAME.csv`` with a header and a label column, or
``NAME/<label>/*.png`` folders) is split into a seeded, stratified train part, which is fed, and
a test part the service never sees (given as the directory, ``demo`` and ``real`` name the
project's own tenants: `write_demo_tenants`, `write_real_tenants`). Then, per system:

* a service system (``live``: the default policy, as `tenantml run` serves;
  ``live-independent``: the same with independent arms for its GP prior, the ablation of
  learning across tenants; ``live-unchained``: one job per flow run, the ablation of chaining
  short jobs; ``hybrid``, ``roundrobin``, any `policy.POLICY_NAMES`) gets a
  fresh home, its tenants submitted and fed through the SDK, and ``tenantml run --policy P
  --slots G`` in its own process, stopped with SIGINT (Ctrl-C) after `budget_s` of wall
  clock. The clock starts when the command starts: its start-up is the service's time too.
  Afterwards the tenant's registered model versions are the models it served: a version is
  registered when it becomes ``best`` (`record`), so at time t the served model is the last
  version created by t. Each is loaded from the registry and scored on the test part.
* ``flaml`` runs FLAML's AutoML per tenant with an equal share of the same clock,
  ``budget_s * slots / n`` seconds, one thread; its anytime curve comes from nested budgets (a
  fit per quarter of the share).

Before a system has a model for a tenant, the tenant is served the most frequent training label
(what it has without one). Notation: ``A[s][i](t)`` the served test accuracy of system s on
tenant i at fraction t of the budget; ``best_i = max_s max_t A[s][i](t)``; test regret
``best_i - A[s][i](t)``; its mean over tenants, integrated over t in [0, 1], is the AUC.
"""

from __future__ import annotations

import csv
import itertools
import json
import os
import signal
import subprocess
import sys
import time
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np
from numpy.typing import NDArray

from tenantml._signals import sigterm_as_interrupt

__all__ = [
    "BUILT_IN_TENANTS",
    "CARRIED_IMAGES",
    "CARRIED_TABULAR",
    "DEMO",
    "FLAML",
    "IMAGES",
    "QUARTERS",
    "REAL",
    "SERVICE_OVERHEAD_S",
    "LiveTenant",
    "SystemRun",
    "combine_runs",
    "expected_wall_s",
    "load_carried_images",
    "load_carried_tabular",
    "load_tenants",
    "run_flaml",
    "run_service",
    "stop_as_a_user",
    "summarize",
    "write_demo_tenants",
    "write_image_tenants",
    "write_real_tenants",
]

FLAML = "flaml"
LIVE = "live"  # the service's default policy: what `tenantml run` serves
# the same with the GP prior of independent arms (`tenantml run --prior independent`): what the
# live service ran before it learnt across tenants (issue 16's ablation)
INDEPENDENT = "live-independent"
# the same with one job per flow run (`tenantml run --chain-s 0`): short jobs not chained
UNCHAINED = "live-unchained"
QUARTERS = (0.25, 0.5, 0.75, 1.0)
CURVE_POINTS = 41  # samples of each curve in curves.csv, t = 0, 1/40, ..., 1
#: what a service system takes beyond its budget: its start before the clock, its stop, the
#: scoring of its served models (5-20 s here and on a lent GPU machine)
SERVICE_OVERHEAD_S = 15.0
STOP_GRACE_S = 120.0  # the service's stop after SIGINT is waited this long before SIGKILL
# settings that point a home at servers (tasks.settings): bench-live's homes are embedded
_SERVER_OVERRIDES = ("TENANTML_TRACKING_URI", "TENANTML_STORE", "PREFECT_API_URL")


@dataclass(frozen=True)
class LiveTenant:
    """One tenant's data: ``x_*`` (n, *shape) float32, ``y_*`` (n,) str labels."""

    name: str
    schema: str
    x_train: NDArray[np.float32]
    y_train: NDArray[np.str_]
    x_test: NDArray[np.float32]
    y_test: NDArray[np.str_]

    @property
    def chance(self) -> float:
        """Test accuracy of the most frequent training label (served before any model)."""
        labels, counts = np.unique(self.y_train, return_counts=True)
        return float(np.mean(self.y_test == labels[np.argmax(counts)]))


@dataclass(frozen=True)
class SystemRun:
    """What one system served: per tenant, ``(t, test accuracy)`` steps, t in [0, 1] of the
    budget, each the accuracy from t on; plus the service's loss estimates at its end."""

    system: str
    steps: dict[str, list[tuple[float, float]]]
    loss_estimates: dict[str, float]
    jobs: int
    wall_s: float
    #: when the service's first job started, in [0, 1] of the budget (None: not a service)
    first_job_t: float | None = None

    def accuracy(self, tenant: LiveTenant, t: float) -> float:
        served = [acc for at, acc in self.steps.get(tenant.name, []) if at <= t]
        return served[-1] if served else tenant.chance

    def integral(self, tenant: LiveTenant, lo: float, hi: float) -> float:
        """``int_lo^hi A(t) dt`` exactly (the served accuracy is a step function): a sampled
        grid credited each step a grid interval early where it fell between samples, and
        FLAML's steps, on the quarters, always so."""
        cuts = sorted({lo, hi, *(at for at, _ in self.steps.get(tenant.name, []) if lo < at < hi)})
        return sum(self.accuracy(tenant, a) * (b - a) for a, b in itertools.pairwise(cuts))

    def best(self, tenant: LiveTenant) -> float:
        """``max_t A(t)`` over the budget, t in [0, 1]: every step counts, however short, but
        not one that another step at the same time replaced before it was served."""
        steps = self.steps.get(tenant.name, [])
        return max([tenant.chance, *(self.accuracy(tenant, at) for at, _ in steps if at <= 1.0)])


def _read_csv_tenant(path: Path, label_column: str | None) -> tuple[NDArray[Any], list[str]]:
    from store.loaders import read_csv_rows

    with open(path, newline="") as f:
        header = next(csv.reader(f), None)
    if not header or len(header) < 2:
        raise ValueError(f"{path}: needs a header with at least one feature and a label column")
    label = label_column if label_column is not None else header[-1]
    if label not in header:
        raise ValueError(f"{path}: no label column {label!r}; columns: {header}")
    x, labels = read_csv_rows(path, len(header) - 1, label)
    assert labels is not None
    return x, labels


def _read_image_tenant(path: Path) -> tuple[NDArray[Any], list[str], tuple[int, int, int]]:
    from PIL import Image

    from store.loaders import load_image

    files = sorted((d.name, f) for d in path.iterdir() if d.is_dir() for f in d.glob("*.png"))
    if not files:
        raise ValueError(f"{path}: no <label>/*.png images")
    with Image.open(files[0][1]) as first:
        w, h = first.size
        shape = (h, w, 1 if first.mode in ("L", "1", "I;16") else 3)
    x = np.stack([load_image(f, shape) for _, f in files]).astype(np.float32)
    return x, [label for label, _ in files], shape


def load_tenants(
    directory: Path, *, seed: int = 0, test_fraction: float = 0.25, label_column: str | None = None
) -> list[LiveTenant]:
    """The tenants of `directory`, each split stratified by label with `seed`."""
    from sklearn.model_selection import train_test_split

    if not 0 < test_fraction < 1:
        raise ValueError(f"--test-fraction {test_fraction} is not valid: use 0 < f < 1")
    if not directory.is_dir():
        raise ValueError(f"{directory}: not a directory of NAME.csv files or NAME/<label>/ folders")
    from store import validate_tenant_name

    tenants = []
    sources: dict[str, Path] = {}
    for path in sorted(directory.iterdir()):
        if path.suffix != ".csv" and not path.is_dir():
            continue
        # the tenant's name, checked (and told apart) before anything runs: the service
        # refused a bad one only at its submit, after FLAML had run; two files of one name
        # (a_b.csv, A-B.csv) were fed to one tenant
        name = path.stem.lower().replace("_", "-")
        try:
            validate_tenant_name(name)
        except ValueError as e:
            raise ValueError(f"{path}: {e}") from None
        if name in sources:
            raise ValueError(
                f"{sources[name]} and {path} are both tenant {name!r}: rename one of them"
            )
        sources[name] = path
        try:
            if path.suffix == ".csv":
                x, labels = _read_csv_tenant(path, label_column)
                schema = f"{{input: {{[Tensor[{x.shape[1]}]], []}}, output: {{[Tensor[K]], []}}}}"
            else:
                x, labels, (a, b, c) = _read_image_tenant(path)
                schema = f"{{input: {{[Tensor[{a}, {b}, {c}]], []}}, output: {{[Tensor[K]], []}}}}"
        except Exception as e:  # unreadable: a broken link, a folder, no access, a bad image,
            # not UTF-8, over a limit (a message that names the file already stays as it is)
            if isinstance(e, ValueError) and str(path) in str(e):
                raise
            raise ValueError(f"{path}: cannot be read ({type(e).__name__}: {e})") from None
        y = np.asarray(labels, dtype=str)
        classes, counts = np.unique(y, return_counts=True)
        if len(classes) < 2 or counts.min() < 2:
            raise ValueError(
                f"{path}: needs at least 2 labels with 2 examples each to split; "
                f"has {dict(zip(classes.tolist(), counts.tolist(), strict=True))}"
            )
        try:
            x_tr, x_te, y_tr, y_te = train_test_split(
                x, y, test_size=test_fraction, random_state=seed, stratify=y
            )
        except ValueError as e:  # too few rows for a test part with every class
            raise ValueError(
                f"{path}: cannot be split with --test-fraction {test_fraction} ({e})"
            ) from None
        tenants.append(
            LiveTenant(name, schema.replace("K", str(len(classes))), x_tr, y_tr, x_te, y_te)
        )
    if not tenants:
        raise ValueError(f"{directory}: no NAME.csv files or NAME/<label>/*.png folders")
    return tenants


DEMO = "demo"  # the directory argument that means the project's own demo tenants
REAL = "real"  # ... and the project's carried real tenant sets (tenantml/data/tenants/)
IMAGES = "images"  # ... and their image tenants alone (digits, MNIST): the GPU's benchmark
# the carried sets (infra/scripts/import_tenants.py; sources, licenses: tenantml/data/README.md):
# NAME.csv.gz, a header, numeric features and the class last as ``label``
CARRIED_TABULAR = (
    "biopsy",
    "chile",
    "crabs",
    "cracker",
    "fishing",
    "glass",
    "oj",
    "participation",
    "pima",
    "tobacco",
)
# NAME.npz: ``images`` uint8 (N, H, W) grey 0-255, ``labels`` (N,)
CARRIED_IMAGES = ("mnist",)


def _carried(filename: str) -> Path:
    from importlib import resources

    return Path(str(resources.files("tenantml") / "data" / "tenants" / filename))


def load_carried_tabular(name: str) -> tuple[NDArray[np.float32], list[str]]:
    """A carried tabular set (one of `CARRIED_TABULAR`): (n, features) float32 inputs and the
    n class labels."""
    import gzip

    if name not in CARRIED_TABULAR:
        raise ValueError(f"{name!r} is not a carried tabular set: {', '.join(CARRIED_TABULAR)}")
    with gzip.open(_carried(f"{name}.csv.gz"), "rt", newline="") as f:
        reader = csv.reader(f)
        header = next(reader)
        rows = list(reader)
    if header[-1] != "label":
        raise ValueError(f"{name}.csv.gz: its last column is {header[-1]!r}, not 'label'")
    x = np.array([row[:-1] for row in rows], dtype=np.float32).reshape(len(rows), len(header) - 1)
    return x, [row[-1] for row in rows]


def load_carried_images(name: str) -> tuple[NDArray[np.uint8], list[str]]:
    """A carried image set (one of `CARRIED_IMAGES`): uint8 (n, H, W) grey images, 0-255, and
    the n class labels."""
    if name not in CARRIED_IMAGES:
        raise ValueError(f"{name!r} is not a carried image set: {', '.join(CARRIED_IMAGES)}")
    with np.load(_carried(f"{name}.npz")) as npz:
        images: NDArray[np.uint8] = npz["images"].astype(np.uint8)
        labels = [str(label) for label in npz["labels"].tolist()]
    return images, labels


def _write_image_folders(folder: Path, images: NDArray[np.uint8], labels: Sequence[str]) -> None:
    """``folder/<label>/NNNN.png``: uint8 (n, H, W) grey `images`, numbered in order."""
    from PIL import Image

    for i, (pixels, label) in enumerate(zip(images, labels, strict=True)):
        (folder / label).mkdir(parents=True, exist_ok=True)
        Image.fromarray(pixels).save(folder / label / f"{i:04d}.png")


def _write_digits(directory: Path) -> None:
    """scikit-learn's digits as ``digits/<label>/*.png``, 8x8 grey (0..16 scaled to 0..255)."""
    from tenantml import datasets

    d = datasets.load("digits")
    pixels = np.clip(np.asarray(d.inputs)[..., 0] * 16.0, 0, 255).astype(np.uint8)
    _write_image_folders(directory / "digits", pixels, [str(label) for label in d.labels])


def write_demo_tenants(directory: Path) -> Path:
    """The project's demo data sets as a bench-live directory: ``wine.csv`` and
    ``breast-cancer.csv`` (label column ``label``) and ``digits/<label>/*.png`` (8x8 grey).
    Returns `directory`."""
    from tenantml import datasets

    directory.mkdir(parents=True, exist_ok=True)
    for name in ("wine", "breast_cancer"):
        d = datasets.load(name)
        x = np.asarray(d.inputs)
        with open(directory / f"{name.replace('_', '-')}.csv", "w", newline="") as f:
            writer = csv.writer(f)
            writer.writerow([*(f"f{j}" for j in range(x.shape[1])), "label"])
            writer.writerows(
                [*map(repr, row.tolist()), label] for row, label in zip(x, d.labels, strict=True)
            )
    _write_digits(directory)
    return directory


def write_real_tenants(directory: Path) -> Path:
    """The project's carried real data sets as a bench-live directory, 12 tenants: the ten of
    `CARRIED_TABULAR` as ``NAME.csv`` (a header, numeric features, ``label`` last), scikit-learn's
    digits as ``digits/<label>/*.png`` (8x8 grey) and each of `CARRIED_IMAGES` as
    ``NAME/<label>/*.png`` (MNIST: 28x28 grey). Returns `directory`."""
    import gzip

    directory.mkdir(parents=True, exist_ok=True)
    for name in CARRIED_TABULAR:
        (directory / f"{name}.csv").write_bytes(
            gzip.decompress(_carried(f"{name}.csv.gz").read_bytes())
        )
    return write_image_tenants(directory)


def write_image_tenants(directory: Path) -> Path:
    """The project's image tenants as a bench-live directory: scikit-learn's digits as
    ``digits/<label>/*.png`` (8x8 grey) and each of `CARRIED_IMAGES` as ``NAME/<label>/*.png``
    (MNIST: 28x28 grey). Returns `directory`."""
    directory.mkdir(parents=True, exist_ok=True)
    _write_digits(directory)
    for name in CARRIED_IMAGES:
        _write_image_folders(directory / name, *load_carried_images(name))
    return directory


# the directory arguments that name the project's own tenants, and their writers
BUILT_IN_TENANTS: dict[str, Callable[[Path], Path]] = {
    DEMO: write_demo_tenants,
    REAL: write_real_tenants,
    IMAGES: write_image_tenants,
}


def _served_steps(home: Path, tenants: Sequence[LiveTenant], t0: float, budget_s: float) -> Any:
    """Per tenant, the versions served (``best``: `served_versions`) as (t, test accuracy);
    the jobs' count; when the first job started (a fraction of the budget; None without
    jobs)."""
    from mlflow_plugin.pyfunc import pyfunc_input
    from mlflow_plugin.registry import model_versions, served_versions
    from mlflow_plugin.tracking import job_records, tenant_experiments
    from store.schema import Schema
    from tenantml.client import Client

    c = Client(home)
    steps: dict[str, list[tuple[float, float]]] = {}
    for tenant in tenants:
        versions = model_versions(c.mlflow, tenant.name)
        model_input = pyfunc_input(Schema.parse(tenant.schema), tenant.x_test)
        points = []
        # the version `best` pointed at from each registration on: with two slots a version
        # registered beside a better one was scored from its creation though never served
        for v in served_versions(versions):
            t = (v.creation_timestamp / 1000.0 - t0) / budget_s
            if t > 1.0:
                continue  # registered after the stop: not served within the budget
            predicted = np.asarray(c._load_model(tenant.name, str(v.version)).predict(model_input))
            points.append((max(t, 0.0), float(np.mean(predicted.astype(str) == tenant.y_test))))
        steps[tenant.name] = points
    records = job_records(c.mlflow, tenant_experiments(c.mlflow).values())
    first = min((r.start_time for r in records), default=None)
    return steps, len(records), None if first is None else (first - t0) / budget_s


def _last_loss_estimates(home: Path) -> dict[str, float]:
    from tasks import LOSS_PREFIX, load_tick_history
    from tenantml.client import Client

    history = load_tick_history(Client(home).mlflow)
    return {
        key[len(LOSS_PREFIX) :]: points[-1][1]
        for key, points in history.items()
        if key.startswith(LOSS_PREFIX) and points
    }


def stop_as_a_user(proc: subprocess.Popen[Any], grace_s: float = STOP_GRACE_S) -> None:
    """Ctrl-C to `proc`'s process group (started with ``start_new_session``): the service stops
    as a user stops it; SIGKILL if it has not after `grace_s`."""
    os.killpg(proc.pid, signal.SIGINT)
    try:
        proc.wait(timeout=grace_s)
    except subprocess.TimeoutExpired:
        os.killpg(proc.pid, signal.SIGKILL)
        proc.wait()


def run_service(
    system: str,
    tenants: Sequence[LiveTenant],
    home: Path,
    *,
    budget_s: float,
    slots: int = 1,
    extra_args: Sequence[str] = (),
    weights: Mapping[str, float] | None = None,
) -> SystemRun:
    """`system` (a policy name, or ``live`` for the default) served for `budget_s` of wall
    clock by ``tenantml run`` in its own process on a fresh embedded home `home`; `weights`:
    tenant -> w_i, set by the operator at submission (others: 1)."""
    from tenantml.client import Client

    overrides = [v for v in _SERVER_OVERRIDES if os.environ.get(v)]
    if overrides:  # they would send the fresh home's tenants and jobs to someone's servers
        raise ValueError(
            f"bench-live runs the service embedded on fresh homes; unset {', '.join(overrides)}"
        )
    env = {**os.environ, "TENANTML_HOME": str(home)}
    c = Client(home)
    for tenant in tenants:
        c.submit(tenant.name, tenant.schema, weight=(weights or {}).get(tenant.name))
        c.feed(tenant.name, tenant.x_train, tenant.y_train.tolist())
    cmd = [sys.executable, "-m", "tenantml.cli", "run", "--slots", str(slots), *extra_args]
    if system == INDEPENDENT:
        cmd += ["--prior", "independent"]
    elif system == UNCHAINED:
        cmd += ["--chain-s", "0"]
    elif system != LIVE:
        cmd += ["--policy", system]
    log = open(home / "run.log", "w")  # noqa: SIM115 (closed below)
    t0 = time.time()
    term = sigterm_as_interrupt()  # before the service exists: no SIGTERM may orphan it
    proc = subprocess.Popen(cmd, env=env, stdout=log, stderr=subprocess.STDOUT,
                            start_new_session=True)  # fmt: skip
    try:
        proc.wait(timeout=budget_s)
    except subprocess.TimeoutExpired:
        stop_as_a_user(proc)
    except BaseException:  # Ctrl-C or SIGTERM here: the service, in a session of its own, too
        stop_as_a_user(proc)
        raise
    finally:
        log.close()
        if term is not None:
            signal.signal(signal.SIGTERM, term)
    if proc.returncode not in (0, 130):
        tail = (home / "run.log").read_text()[-2000:]
        raise RuntimeError(f"tenantml run ({system}) exited {proc.returncode}:\n{tail}")
    wall = time.time() - t0
    steps, jobs, first_job_t = _served_steps(home, tenants, t0, budget_s)
    return SystemRun(system, steps, _last_loss_estimates(home), jobs, wall, first_job_t)


def run_flaml(
    tenants: Sequence[LiveTenant], *, budget_s: float, slots: int = 1, seed: int = 0
) -> SystemRun:
    """FLAML's AutoML per tenant, ``budget_s * slots / n`` seconds each, one thread; its test
    accuracy at each quarter of that share from a fit with that quarter's budget, served from
    when that fit ended (the quarter, or later when it overran; at the end when it ended past
    the share)."""
    import importlib

    try:  # an optional peer (extra `peers`), typed loosely: its exports differ by install
        auto_ml: Any = importlib.import_module("flaml").AutoML
    except (ImportError, AttributeError):
        raise ValueError(
            "the flaml system needs FLAML's AutoML: pip install 'tenantml[peers]' (or leave "
            "flaml out of --systems)"
        ) from None
    share = budget_s * slots / len(tenants)
    start = time.time()
    steps: dict[str, list[tuple[float, float]]] = {}
    for tenant in tenants:
        x_train = tenant.x_train.reshape(len(tenant.x_train), -1)
        x_test = tenant.x_test.reshape(len(tenant.x_test), -1)
        points = []
        for q in QUARTERS:
            automl = auto_ml()
            fit_start = time.monotonic()
            automl.fit(x_train, tenant.y_train, task="classification", time_budget=q * share,
                       n_jobs=1, seed=seed, verbose=0)  # fmt: skip
            # served when the fit ended (its search, then its retrain on all the rows, may pass
            # its budget), not at the quarter; one that ended past the share counts at the end
            # (lenient to the peer: its last fit nearly always passes its budget a little)
            at = min(max(q, (time.monotonic() - fit_start) / share), 1.0)
            predicted = np.asarray(automl.predict(x_test)).astype(str)
            points.append((at, float(np.mean(predicted == tenant.y_test))))
        steps[tenant.name] = anytime_steps(points)
    return SystemRun(FLAML, steps, {}, 0, time.time() - start)


def anytime_steps(points: Sequence[tuple[float, float]]) -> list[tuple[float, float]]:
    """FLAML's anytime curve from its nested fits: `points` (t, test accuracy), one per quarter
    in the quarters' order, t when that fit ended. At t the peer serves the fit of the largest
    budget that has ended by t (an anytime run of the share has searched at least that far), so
    a smaller budget's fit that ended later (its retrain overran) is never served after a larger
    one, and of fits ending at the same t the largest budget's is served."""
    steps: list[tuple[float, float]] = []
    served = -1
    by_time = sorted(range(len(points)), key=lambda q: points[q][0])  # stable: ties by budget
    for q in by_time:
        if q > served:
            served = q
            at, acc = points[q]
            if steps and steps[-1][0] == at:
                steps[-1] = (at, acc)  # replaced at the same t: never served
            else:
                steps.append((at, acc))
    return steps


def summarize(
    tenants: Sequence[LiveTenant],
    runs: Sequence[SystemRun],
    weights: Mapping[str, float] | None = None,
) -> tuple[dict[str, Any], list[dict[str, Any]]]:
    """(summary, curve rows): per system the mean served test accuracy at each quarter and at
    the end, the AUC of the mean test regret, and the loss estimates against the realised test
    loss at the end (``best_i - A[s][i](1)``). With `weights` (tenant -> w_i, others 1) the
    accuracy and the regret are weighted means, ``sum_i w_i r_i / sum_i w_i``: the total the
    service reduces (each tenant's own figures stay as they are)."""
    grid = np.linspace(0.0, 1.0, CURVE_POINTS)
    given = {t.name: float((weights or {}).get(t.name, 1.0)) for t in tenants}
    w = np.array(list(given.values()))  # (n,)
    w = w / w.sum() if len(w) else w
    acc = {
        r.system: np.array([[r.accuracy(t, g) for g in grid] for t in tenants]) for r in runs
    }  # (n, CURVE_POINTS)
    best = np.array([max(r.best(t) for r in runs) for t in tenants])  # (n,)
    aligned = _regret_from_first_job(tenants, runs, best, w)
    summary: dict[str, Any] = {"tenants": list(given), "weights": given, "systems": {}}
    rows = []
    for r in runs:
        a = acc[r.system]
        regret = w @ (best[:, None] - a)  # (CURVE_POINTS,) weighted mean over tenants
        own_auc = best - np.array([r.integral(t, 0.0, 1.0) for t in tenants])  # (n,) AUCs
        realised = best - a[:, -1]
        entry: dict[str, Any] = {
            "mean_test_accuracy": {
                f"q{int(q * 100)}": float(w @ a[:, int(round(q * (CURVE_POINTS - 1)))])
                for q in QUARTERS
            },
            # the AUC of the weighted mean regret is the weighted mean of the tenants' own
            "test_regret_auc": float(w @ own_auc),
            "test_regret_auc_by_tenant": {t.name: float(own_auc[i]) for i, t in enumerate(tenants)},
            "first_job_t": r.first_job_t,
            "final_accuracy": {t.name: float(a[i, -1]) for i, t in enumerate(tenants)},
            # each tenant's served test accuracy at each quarter: where a lead is won or lost
            "test_accuracy_by_tenant": {
                t.name: {
                    f"q{int(q * 100)}": float(a[i, int(round(q * (CURVE_POINTS - 1)))])
                    for q in QUARTERS
                }
                for i, t in enumerate(tenants)
            },
            "jobs": r.jobs,
            "wall_s": r.wall_s,
            # when each tenant was first served a model, as a fraction of the budget (None:
            # never); for the service it includes its start-up, as a new installation's would
            "first_model_t": {
                t.name: (r.steps[t.name][0][0] if r.steps.get(t.name) else None) for t in tenants
            },
            # what each tenant was served: (t, test accuracy) from t on, t in [0, 1]
            "served": {t.name: [list(p) for p in r.steps.get(t.name, [])] for t in tenants},
        }
        if r.system in aligned:
            entry["test_regret_from_first_job"] = aligned[r.system]
        if r.loss_estimates:
            pairs = [
                (_estimate_over_chance(r, t), float(realised[i]))
                for i, t in enumerate(tenants)
                if t.name in r.loss_estimates
            ]
            entry["loss_estimate"] = {
                "predicted_mean": float(np.mean([p for p, _ in pairs])),
                # never negative: also the error of a constant 0, the reference to beat
                "realised_mean": float(np.mean([q for _, q in pairs])),
                "mean_abs_error": float(np.mean([abs(p - q) for p, q in pairs])),
                # do the estimates order the tenants as their realised losses do?
                "rank_correlation": _rank_correlation(pairs),
            }
        summary["systems"][r.system] = entry
        rows += [
            {
                "system": r.system,
                "t": float(g),
                "mean_test_accuracy": float(w @ a[:, j]),
                "mean_test_regret": float(regret[j]),
            }  # fmt: skip
            for j, g in enumerate(grid)
        ]
    return summary, rows


def _estimate_over_chance(run: SystemRun, tenant: LiveTenant) -> float:
    """The service's loss estimate for `tenant` as bench-live realises it. The service counts a
    tenant with no model as served nothing (its best 0: `infer` answers "no model yet"), so its
    estimate is then the expected best accuracy; bench-live credits such a tenant the majority
    label (`LiveTenant.chance`), so the loss it realises is measured from that share."""
    estimate = run.loss_estimates[tenant.name]
    if any(at <= 1.0 for at, _ in run.steps.get(tenant.name, [])):
        return estimate
    return max(estimate - tenant.chance, 0.0)


def _rank_correlation(pairs: Sequence[tuple[float, float]]) -> float | None:
    """Spearman's rho of the (predicted, realised) loss pairs; None where it is undefined
    (fewer than 3 pairs, or either side constant, e.g. every realised loss 0)."""
    from scipy.stats import spearmanr

    pred, real = np.array(pairs, float).T if pairs else (np.zeros(0), np.zeros(0))
    if len(pairs) < 3 or np.ptp(pred) == 0 or np.ptp(real) == 0:
        return None
    return float(spearmanr(pred, real).statistic)


def _regret_from_first_job(
    tenants: Sequence[LiveTenant],
    runs: Sequence[SystemRun],
    best: NDArray[np.float64],
    w: NDArray[np.float64],
) -> dict[str, float]:
    """Per service system, its mean test regret over the same span of time from its own first
    job: ``(1/W) int_0^W r_s(u + f_s) du``, ``f_s`` its first job's start, ``W = 1 - max_s f_s``.
    The start-up before the first job (imports, Prefect's temporary server, the state) is the
    same code for every policy, and its seconds vary by run (17-20 s of 120 in `bench-live
    real`): left out, what remains is what the policies did. A system whose first job started
    only at the end of the budget, or after it (a start-up longer than the budget), has none,
    and does not shorten the others' window."""
    shifts = {
        r.system: r.first_job_t for r in runs if r.first_job_t is not None and r.first_job_t < 1
    }
    if not shifts:
        return {}
    window = 1.0 - max(shifts.values())
    out = {}
    for r in runs:
        if r.system in shifts:
            f = shifts[r.system]
            served = np.array([r.integral(t, f, f + window) for t in tenants]) / window  # (n,)
            out[r.system] = float(w @ (best - served))
    return out


def accuracy_picture(rows: Sequence[dict[str, Any]], budget_s: float) -> bytes:
    """PNG: mean served test accuracy over wall clock, one line per system."""
    import io

    from matplotlib.backends.backend_agg import FigureCanvasAgg
    from matplotlib.figure import Figure

    fig = Figure(figsize=(7, 4), dpi=100, layout="constrained")
    FigureCanvasAgg(fig)
    ax = fig.add_subplot()
    for system in dict.fromkeys(r["system"] for r in rows):
        pts = [(r["t"] * budget_s, r["mean_test_accuracy"]) for r in rows if r["system"] == system]
        ax.step(*zip(*pts, strict=True), where="post", label=system)
    ax.set(xlabel="wall clock (s)", ylabel="mean served test accuracy",
           title="bench-live: what tenants are served")  # fmt: skip
    ax.legend()
    buf = io.BytesIO()
    fig.savefig(buf, format="png")
    return buf.getvalue()


def expected_wall_s(systems: Sequence[str], budget_s: float, slots: int = 1) -> float:
    """About how long one split of the comparison takes: each service system its budget plus
    `SERVICE_OVERHEAD_S`; FLAML ``sum(QUARTERS) = 2.5`` times ``budget_s * slots``, since its
    anytime curve refits each tenant with each quarter of its share (`run_flaml`)."""
    return sum(
        sum(QUARTERS) * budget_s * slots if s == FLAML else budget_s + SERVICE_OVERHEAD_S
        for s in systems
    )


def run_bench_live(
    directory: Path,
    out: Path,
    *,
    systems: Sequence[str],
    budget_s: float,
    slots: int = 1,
    seed: int = 0,
    repeats: int = 1,
    test_fraction: float = 0.25,
    label_column: str | None = None,
    extra_args: Sequence[str] = (),
    say: Callable[[str], None] = print,
    weights: Mapping[str, float] | None = None,
) -> dict[str, Any]:
    """Every system in turn (one at a time: they share the machine's clock), then the summary:
    ``summary.json``, ``curves.csv`` and ``accuracy.png`` in `out`. `weights`: tenant -> w_i
    (others 1), set at submission in the service's homes and weighting the regret; FLAML gives
    every tenant an equal share of the clock as before (a per-tenant tool has no weights).

    `repeats` > 1: the comparison on the splits of seeds ``seed .. seed + repeats - 1``, each in
    ``out/seed-<k>`` with the systems' order rotated, and in `out` their combination
    (:func:`tenantml.bench.live_repeats.combine_repeats`: mean and standard error per system,
    AUC differences to the first system paired by split)."""
    from mlflow_plugin.tracking import valid_weight
    from policy import POLICY_NAMES
    from tenantml.bench.live_repeats import combine_repeats, rotated

    valid = (LIVE, INDEPENDENT, UNCHAINED, FLAML, *POLICY_NAMES)
    for s in systems:
        if s not in valid:
            raise ValueError(f"--systems: {s!r} is not valid; valid: {', '.join(valid)}")
    if not systems:
        raise ValueError(f"--systems: give at least one of {', '.join(valid)}")
    twice = sorted({s for s in systems if list(systems).count(s) > 1})
    if twice:
        raise ValueError(f"--systems names {', '.join(twice)} more than once; give each once")
    if budget_s <= 0 or slots < 1:
        raise ValueError("--budget-s must be positive and --slots 1 or more")
    if repeats < 1:
        raise ValueError(f"--repeats must be 1 or more (one split per repeat), not {repeats}")
    if str(directory) in BUILT_IN_TENANTS:
        directory = BUILT_IN_TENANTS[str(directory)](out / "tenants")
    tenants = load_tenants(directory, seed=seed, test_fraction=test_fraction,
                           label_column=label_column)  # fmt: skip
    names = [t.name for t in tenants]
    unknown = sorted(set(weights or {}) - set(names))
    if unknown:
        raise ValueError(
            f"--weights names {', '.join(unknown)}, not a tenant of {directory}; "
            f"tenants: {', '.join(names)}"
        )
    weights = {name: valid_weight(w) for name, w in (weights or {}).items()}
    homes = [out / "homes" if repeats == 1 else out / f"seed-{seed + k}" for k in range(repeats)]
    taken = [h for h in homes if h.exists()]
    if taken:
        raise ValueError(f"{taken[0]} exists: give a new --out (a run starts from nothing)")

    def one_split(k: int, where: Path) -> tuple[dict[str, Any], list[dict[str, Any]]]:
        split = tenants if k == 0 else load_tenants(
            directory, seed=seed + k, test_fraction=test_fraction, label_column=label_column
        )  # fmt: skip
        runs = []
        for s in rotated(systems, k):
            say(f"{s}: {len(split)} tenants, {budget_s:g} s x {slots} slot(s), seed {seed + k}")
            if s == FLAML:
                runs.append(run_flaml(split, budget_s=budget_s, slots=slots, seed=seed + k))
            else:
                home = (where / "homes" if repeats > 1 else where) / s
                home.mkdir(parents=True)
                runs.append(run_service(s, split, home, budget_s=budget_s, slots=slots,
                                        extra_args=extra_args, weights=weights))  # fmt: skip
        runs.sort(key=lambda r: list(systems).index(r.system))
        summary, rows = summarize(split, runs, weights)
        summary.update(budget_s=budget_s, slots=slots, seed=seed + k,
                       test_fraction=test_fraction, service_args=list(extra_args))  # fmt: skip
        return summary, rows

    wall = expected_wall_s(systems, budget_s, slots) * repeats
    took = f"{wall / 60:.0f} min" if wall >= 120 else f"{wall:.0f} s"
    say(f"about {took} in all ({repeats} split{'s' if repeats > 1 else ''} of "
        + ", ".join(systems) + (", one system at a time" if len(systems) > 1 else "")
        + ("; flaml refits at each quarter of its share: 2.5 times its budget" if FLAML in systems
           else "") + ")")  # fmt: skip
    out.mkdir(parents=True, exist_ok=True)
    if any(s != FLAML for s in systems):
        _prepare_machine(out / "machine", say)
    if repeats == 1:
        summary, rows = one_split(0, homes[0])
    else:
        splits = []
        for k, where in enumerate(homes):
            say(f"split {k + 1} of {repeats} (seed {seed + k})")
            where.mkdir(parents=True)
            splits.append(one_split(k, where))
            _write_outputs(where, *splits[-1], budget_s)
        summary, rows = combine_repeats([s for s, _ in splits], [r for _, r in splits])
    _write_outputs(out, summary, rows, budget_s)
    return summary


class MachineNotReady(RuntimeError):
    """This machine could not make its template of Prefect's database before bench-live's
    clock (`_prepare_machine`): nothing was run."""


def _prepare_machine(scratch: Path, say: Callable[[str], None]) -> None:
    """Before any clock: the template of Prefect's database this machine keeps for new homes
    (`tasks.prefect_start.ensure_template`), made if missing. Only a machine's first
    ``tenantml run`` migrates a new home's database (about 5 s here); every later one, which
    bench-live compares, starts from a copy. Without this the first split's service paid it
    on a new machine (first job at 0.47 of a 30-s budget against 0.28-0.30 on the next three
    splits, 2026-11-29). `scratch` is removed afterwards, and kept where the server failed:
    its log, which the error names, is there.

    Raises:
        MachineNotReady: the server on `scratch` failed, with its reason.
    """
    import shutil
    import sqlite3

    from tasks.prefect_start import ensure_template

    try:
        made = ensure_template(scratch)
    except (RuntimeError, OSError, sqlite3.Error) as e:  # the server failed, the copy too
        raise MachineNotReady(
            "could not make this machine's template of Prefect's database before the clock "
            f"(a Prefect server on {scratch}); nothing was run: {e}"
        ) from e
    shutil.rmtree(scratch, ignore_errors=True)
    if made:
        say("made this machine's Prefect template (once per machine; before any clock)")


def combine_runs(runs: Sequence[Path], out: Path) -> dict[str, Any]:
    """The splits of bench-live runs made apart (e.g. ``--seed 0 --repeats 6`` and ``--seed 6
    --repeats 6``) combined as one run with ``--repeats`` would: ``summary.json``,
    ``curves.csv`` and ``accuracy.png`` in `out`, which must not hold a summary already."""
    from tenantml.bench.live_repeats import combine_repeats, read_splits

    if (out / "summary.json").exists():
        raise ValueError(f"{out} holds a summary.json already: give a new --out")
    summaries, curves = read_splits(runs)
    summary, rows = combine_repeats(summaries, curves)
    out.mkdir(parents=True, exist_ok=True)
    _write_outputs(out, summary, rows, float(summary["budget_s"]))
    return summary


def _write_outputs(
    out: Path, summary: dict[str, Any], rows: Sequence[dict[str, Any]], budget_s: float
) -> None:
    (out / "summary.json").write_text(json.dumps(summary, indent=2) + "\n")
    with open(out / "curves.csv", "w", newline="") as f:
        writer = csv.DictWriter(f, fieldnames=list(rows[0]))
        writer.writeheader()
        writer.writerows(rows)
    (out / "accuracy.png").write_bytes(accuracy_picture(rows, budget_s))
