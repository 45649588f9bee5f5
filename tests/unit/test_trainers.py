"""Trainers on real offline data: accuracy, checkpoint/resume, time budget, saved models."""

from __future__ import annotations

import math
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import numpy as np
import pytest

from store import BadExampleError, ExampleStore, LocalBlobStore
from tenantml import datasets
from trainers import EpochReport, TrainedModel, TrainJob, train
from trainers.zoo import TABULAR_MODELS, ZOO


def _store(tmp_path: Path, *names: str) -> ExampleStore:
    store = ExampleStore(LocalBlobStore(tmp_path / "store"))
    for name in names:
        d = datasets.load(name)
        store.create_tenant(name.replace("_", "-"), d.schema)
        store.feed(name.replace("_", "-"), d.inputs, d.labels)
    return store


DIGITS_JOB = TrainJob("digits", "lenet", hyperparameters={"lr": 0.01}, max_epochs=6)


def test_lenet_learns_digits(digits: ExampleStore) -> None:
    r = train(DIGITS_JOB, digits)
    # LeNet-5 on the 8x8 digits: >= 0.98 is what the literature reports; AdamW with random
    # shifts, warm-up and cosine gets there in 6 epochs (0.99; SGD without shifts: 0.94).
    assert r.accuracy >= 0.98, r.curve
    assert r.epochs == 6 and [e.epoch for e in r.curve] == [1, 2, 3, 4, 5, 6]
    assert r.cost_s > 0 and r.n_val == 360 and r.device == "cpu"
    d = datasets.load("digits")
    pred = r.model.predict(d.inputs[:200])
    assert (pred == d.labels[:200]).mean() >= 0.9


class _Killed(Exception):
    pass


def test_resume_continues_from_the_checkpoint_and_matches_an_uninterrupted_run(
    digits: ExampleStore,
) -> None:
    full = train(DIGITS_JOB, digits)

    def die_after_epoch_2(report: EpochReport) -> None:
        if report.epoch == 2:
            raise _Killed

    job = TrainJob(**{**DIGITS_JOB.__dict__, "job_id": "resume-test"})
    with pytest.raises(_Killed):
        train(job, digits, on_epoch=die_after_epoch_2)
    resumed = train(job, digits)
    assert resumed.resumed_from_epoch == 2
    assert resumed.epochs == 6 and [e.epoch for e in resumed.curve] == [1, 2, 3, 4, 5, 6]
    # Same seeded batches and restored optimizer state: the very same model.
    assert [e.val_accuracy for e in resumed.curve] == [e.val_accuracy for e in full.curve]
    again = train(job, digits)  # a finished job returns its result without training
    assert again.resumed_from_epoch == 6 and again.accuracy == resumed.accuracy


@pytest.mark.timeout(120)
def test_resuming_with_fewer_epochs_than_the_checkpoint_ends(digits: ExampleStore) -> None:
    """A job stopped after epoch 2 and started again with max_epochs=1 finishes (it used to
    loop for ever: no epoch ran, so its rate never advanced)."""

    def die_after_epoch_2(report: EpochReport) -> None:
        if report.epoch == 2:
            raise _Killed

    job = TrainJob("digits", "lenet", hyperparameters={"lr": 0.05}, max_epochs=4, job_id="fewer")
    with pytest.raises(_Killed):
        train(job, digits, on_epoch=die_after_epoch_2)
    shorter = train(TrainJob(**{**job.__dict__, "max_epochs": 1}), digits)
    assert shorter.resumed_from_epoch == 2 and [e.epoch for e in shorter.curve] == [1, 2]


_KILL_SCRIPT = """
import sys
from store import ExampleStore, LocalBlobStore
from trainers import TrainJob, train
store = ExampleStore(LocalBlobStore(sys.argv[1]))
train(TrainJob("digits", "lenet", hyperparameters={"lr": 0.05, "augment": False},
               max_epochs=10, job_id="killed"), store)
"""


@pytest.mark.slow
def test_sigkill_mid_training_loses_at_most_one_epoch(digits: ExampleStore, tmp_path: Path) -> None:
    import io

    import torch

    root = str(digits.blobs.root)  # type: ignore[attr-defined]
    proc = subprocess.Popen([sys.executable, "-c", _KILL_SCRIPT, root], start_new_session=True)
    deadline = time.monotonic() + 240
    done = 0
    while time.monotonic() < deadline and proc.poll() is None:
        blob = digits.get_checkpoint("digits", "killed")
        if blob is not None:
            done = torch.load(io.BytesIO(blob), weights_only=True)["epochs_total"]
            if done >= 2:
                break
        time.sleep(0.05)
    assert proc.poll() is None, "training ended before it could be killed"
    os.killpg(proc.pid, signal.SIGKILL)
    proc.wait()
    saved = torch.load(io.BytesIO(digits.get_checkpoint("digits", "killed")), weights_only=True)
    # without augmentation: an epoch is one pass (this test is about the checkpoint; resuming
    # with random shifts is `test_image_recipe`'s)
    hp = {"lr": 0.05, "augment": False}
    job = TrainJob("digits", "lenet", hyperparameters=hp, max_epochs=10, job_id="killed")
    r = train(job, digits)
    assert r.resumed_from_epoch == saved["epochs_total"] >= 2
    assert r.epochs == 10 and [e.epoch for e in r.curve] == list(range(1, 11))


def test_learning_rate_grid_and_time_budget(digits: ExampleStore) -> None:
    r = train(TrainJob("digits", "lenet", max_epochs=1), digits)
    assert sorted({e.lr for e in r.curve}) == [0.0001, 0.001, 0.01, 0.1]
    assert r.hyperparameters["lr"] == max(r.curve, key=lambda e: e.val_accuracy).lr
    short = train(TrainJob("digits", "lenet", max_epochs=50, time_budget_s=1e-3), digits)
    assert short.epochs == 1  # the budget is spent after the first epoch


def test_saved_model_predicts_the_same_and_checks_inputs(
    digits: ExampleStore, tmp_path: Path
) -> None:
    r = train(TrainJob("digits", "lenet+f0.25", hyperparameters={"lr": 0.05}, max_epochs=2),
              digits)  # fmt: skip
    x = datasets.load("digits").inputs[:50]
    loaded = TrainedModel.load(r.model.save(tmp_path / "m"))
    np.testing.assert_array_equal(loaded.predict(x), r.model.predict(x))
    with pytest.raises(
        BadExampleError, match=r"example 0.*shape \(1, 8, 8, 3\) is not \(n, 8, 8, 1\)"
    ):
        loaded.predict(np.zeros((1, 8, 8, 3)))


@pytest.mark.parametrize("name", ["breast_cancer", "wine"])
@pytest.mark.parametrize("model", ["logistic_regression", "random_forest", "svm", "knn"])
def test_sklearn_models_on_tabular_data(tmp_path: Path, name: str, model: str) -> None:
    store = _store(tmp_path, name)
    tenant = name.replace("_", "-")
    r = train(TrainJob(tenant, model), store)
    assert r.accuracy >= 0.85 and r.epochs == 1
    d = datasets.load(name)
    assert set(r.model.predict(d.inputs[:20])) <= set(d.labels)
    loaded = TrainedModel.load(r.model.save(tmp_path / "m"))
    assert list(loaded.predict(d.inputs[:20])) == list(r.model.predict(d.inputs[:20]))


def test_every_portfolio_member_trains_with_its_settings(tmp_path: Path) -> None:
    """Each tabular arm is its family's estimator with the portfolio's settings, which the
    job's own hyperparameters override."""
    store = _store(tmp_path, "wine")
    for name in TABULAR_MODELS:
        spec = ZOO[name]
        r = train(TrainJob("wine", name), store)
        fitted = r.model.net.named_steps["model"].get_params()
        assert {k: fitted[k] for k, _ in spec.params} == dict(spec.params), name
        assert r.accuracy >= 0.8, name
    r = train(TrainJob("wine", "svm-rbf-c16-r0", hyperparameters={"C": 2.0}), store)
    assert r.model.net.named_steps["model"].C == 2.0


def test_a_small_tenant_is_cross_validated_and_served_a_model_fitted_on_every_row(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """wine (178 rows) is scored out-of-fold on all its rows (5 folds) and its model refitted
    on them all; above `CV_MAX_EXAMPLES` rows, and with a class too small for every fold, a
    job keeps the 20 % holdout."""
    from sklearn.base import clone
    from sklearn.model_selection import StratifiedKFold, cross_val_predict

    import trainers._job
    from trainers import CV_FOLDS, CV_MAX_EXAMPLES

    store = _store(tmp_path, "wine")
    d = datasets.load("wine")
    r = train(TrainJob("wine", "logistic_regression"), store)
    assert r.n_train == r.n_val == len(d.labels) <= CV_MAX_EXAMPLES
    # the accuracy is the out-of-fold one, the same as scikit-learn's own for the same folds
    x = np.asarray(d.inputs, np.float32)
    y = np.searchsorted(r.model.classes, np.asarray(d.labels))
    folds = StratifiedKFold(CV_FOLDS, shuffle=True, random_state=0)
    out = cross_val_predict(r.model.net, x, y, cv=folds)
    assert r.accuracy == pytest.approx(float((out == y).mean()))
    # the served model is the one fitted on every row
    full = clone(r.model.net).fit(x, y).named_steps["model"].coef_
    np.testing.assert_allclose(r.model.net.named_steps["model"].coef_, full)
    with monkeypatch.context() as m:
        m.setattr(trainers._job, "CV_MAX_EXAMPLES", 100)
        big = train(TrainJob("wine", "logistic_regression"), store)
    assert big.n_val == math.ceil(0.2 * 178) and big.n_train == 178 - big.n_val
    store.create_tenant("rare", d.schema)
    keep = np.r_[np.flatnonzero(np.asarray(d.labels) != d.labels[0]), 0, 1, 2]
    store.feed("rare", x[keep], [d.labels[i] for i in keep])  # a class of 3 rows: < 5 folds
    rare = train(TrainJob("rare", "logistic_regression"), store)
    assert rare.n_train + rare.n_val == len(keep) and rare.n_val == math.ceil(0.2 * len(keep))


def test_bad_hyperparameters_name_the_valid_ones(tmp_path: Path) -> None:
    store = _store(tmp_path, "wine")
    with pytest.raises(ValueError, match="not valid for svm.*valid names.*'C'"):
        train(TrainJob("wine", "svm", hyperparameters={"bogus": 1}), store)
    with pytest.raises(ValueError, match="max_epochs=0"):
        train(TrainJob("wine", "svm", max_epochs=0), store)


def test_bad_torch_options(digits: ExampleStore) -> None:
    with pytest.raises(
        ValueError, match="optimizer 'lbfgs' is not valid: use 'sgd', 'adam' or 'adamw'"
    ):
        train(TrainJob("digits", "lenet", hyperparameters={"optimizer": "lbfgs"}), digits)
    with pytest.raises(ValueError, match="batch_size=0"):
        train(TrainJob("digits", "lenet", hyperparameters={"batch_size": 0}), digits)


@pytest.mark.slow
def test_recurrent_nets_on_japanese_vowels(tmp_path: Path) -> None:
    store = _store(tmp_path, "japanese_vowels")
    r = train(TrainJob("japanese-vowels", "gru", hyperparameters={"lr": 0.01}, max_epochs=8),
              store)  # fmt: skip
    assert r.accuracy >= 0.8, r.curve
    d = datasets.load("japanese_vowels")
    assert (r.model.predict(d.inputs[:100]) == np.asarray(d.labels[:100])).mean() >= 0.8


def test_recovery_autoencoder_denoises_digits(tmp_path: Path) -> None:
    from store.schema import Schema, Tensor

    store = ExampleStore(LocalBlobStore(tmp_path / "store"))
    clean = datasets.load("digits").inputs[:600]
    noisy = clean + np.random.default_rng(0).normal(0, 3, clean.shape).astype(np.float32)
    store.create_tenant("denoise", Schema(input=Tensor(8, 8, 1), output=Tensor(8, 8, 1)))
    store.feed("denoise", noisy, clean)
    r = train(TrainJob("denoise", "conv_autoencoder", hyperparameters={"lr": 0.01},
                       max_epochs=15), store)  # fmt: skip
    assert r.accuracy >= 0.5, r.curve  # R^2 on held-out pairs
    assert r.model.predict(noisy[:3]).shape == (3, 8, 8, 1)
