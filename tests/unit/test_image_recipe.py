"""The training recipe of the image classifiers: random shifts, AdamW, repeated passes over a
small training split, and NIN's initialization; and two short seeded trainings on the 8x8 digits
that the recipe before these (SGD, no shifts, PyTorch's default init for NIN) did not pass."""

from __future__ import annotations

from collections.abc import Iterator

import numpy as np
import pytest
import torch

from store import ExampleStore
from store.schema import DataType, Schema, Tensor
from trainers import TrainJob, preemption, train
from trainers._torch_data import MAX_SHIFT, TrainingData, random_shifts
from trainers.nets import translate_images
from trainers.torch_trainer import (
    DEFAULT_OPTIMIZER,
    MIN_IMAGES_PER_EPOCH,
    _epoch_order,
    _optimizer,
    augments,
    build_net,
    passes_per_epoch,
)

DIGITS = Schema(input=Tensor(8, 8, 1), output=Tensor(10))


def _dot(row: int, col: int) -> torch.Tensor:
    """A (1, 4, 4, 1) image, 0 but for a 1 at (row, col)."""
    x = torch.zeros(1, 4, 4, 1)
    x[0, row, col, 0] = 1.0
    return x


def test_translate_images_moves_right_and_down_and_fills_zeros() -> None:
    x = _dot(1, 1)
    assert torch.allclose(translate_images(x, torch.zeros(1, 2)), x)
    # a quarter of the width is one pixel of four: the dot moves one pixel right
    assert torch.allclose(translate_images(x, torch.tensor([[0.25, 0.0]])), _dot(1, 2), atol=1e-6)
    assert torch.allclose(translate_images(x, torch.tensor([[0.0, 0.25]])), _dot(2, 1), atol=1e-6)
    # half a pixel: bilinear, the dot's value split over two pixels; nothing comes in from outside
    half = translate_images(_dot(0, 0), torch.tensor([[-0.125, 0.0]]))
    assert float(half[0, 0, 0, 0]) == pytest.approx(0.5) and float(half.sum()) == pytest.approx(0.5)


def test_random_shifts_are_seeded_and_bounded() -> None:
    a = random_shifts(500, MAX_SHIFT, torch.Generator().manual_seed(3))
    b = random_shifts(500, MAX_SHIFT, torch.Generator().manual_seed(3))
    assert a.shape == (500, 2) and torch.equal(a, b)
    assert float(a.abs().max()) <= MAX_SHIFT and float(a.abs().max()) > 0.9 * MAX_SHIFT


def test_shifts_apply_in_training_after_f_k_and_only_to_images() -> None:
    torch.manual_seed(0)
    net = build_net("lenet+f0.25", DIGITS)
    x = torch.rand(3, 8, 8, 1) * 16
    net.pre.fit(x)
    shifts = torch.tensor([[0.125, 0.0], [0.0, -0.125], [0.0, 0.0]])
    pre = net.pre
    expected = (translate_images(pre.scale(x), shifts) - pre.mean) / pre.std
    expected = torch.nn.functional.interpolate(
        expected.permute(0, 3, 1, 2), size=(28, 28), mode="bilinear", align_corners=False
    )
    assert torch.allclose(pre(x, shifts), expected, atol=1e-5)
    assert torch.allclose(pre(x, torch.zeros(3, 2)), pre(x), atol=1e-5)


def test_which_jobs_are_augmented() -> None:
    assert augments("lenet", DIGITS, {}) and augments("resnet18+f0.25", DIGITS, {})
    assert not augments("lenet", DIGITS, {"augment": False})
    assert not augments("lenet", DIGITS, {"augment": "false"})
    recovery = Schema(input=Tensor(8, 8, 1), output=Tensor(8, 8, 1))
    assert not augments("conv_autoencoder", recovery, {})  # the target would have to move too
    sequences = Schema(input=DataType([Tensor(12)], ["next"]), output=Tensor(9))
    assert not augments("gru", sequences, {})


def test_small_training_splits_are_passed_through_several_times_per_epoch() -> None:
    assert passes_per_epoch(1077, augmented=True) == 2  # the digits the service trains on
    assert passes_per_epoch(MIN_IMAGES_PER_EPOCH, augmented=True) == 1
    assert passes_per_epoch(50_000, augmented=True) == 1
    assert passes_per_epoch(100, augmented=True) == 21
    assert passes_per_epoch(1077, augmented=False) == 1
    order, shifts = _epoch_order(0, 1, 3, 10, MAX_SHIFT, passes=3)
    assert shifts is not None and shifts.shape == (30, 2)
    assert sorted(order.tolist()) == sorted(list(range(10)) * 3)
    again, same_shifts = _epoch_order(0, 1, 3, 10, MAX_SHIFT, passes=3)
    assert torch.equal(order, again) and same_shifts is not None
    assert torch.equal(shifts, same_shifts)
    # without shifts the order is the one the trainer has always drawn for (seed, rate, epoch)
    plain, none = _epoch_order(0, 1, 3, 10)
    assert none is None and torch.equal(plain, order[:10])


def test_cnns_default_to_adamw_and_the_others_keep_adam() -> None:
    net = torch.nn.Linear(2, 2)
    opt = _optimizer(net, 0.01, TrainJob("t", "lenet"), "cnn")
    assert DEFAULT_OPTIMIZER["cnn"] == "adamw" and isinstance(opt, torch.optim.AdamW)
    assert opt.param_groups[0]["weight_decay"] == 0.05
    sgd = _optimizer(net, 0.1, TrainJob("t", "lenet", hyperparameters={"optimizer": "sgd"}), "cnn")
    assert isinstance(sgd, torch.optim.SGD) and sgd.param_groups[0]["weight_decay"] == 5e-4
    rnn = _optimizer(net, 0.01, TrainJob("t", "gru"), "rnn")
    assert type(rnn) is torch.optim.Adam and rnn.param_groups[0]["weight_decay"] == 0.0


@pytest.fixture
def one_thread() -> Iterator[None]:
    """Train on one CPU thread, as the timings in the docstrings were taken (and as a shared
    machine runs it best), then give torch its threads back."""
    threads = torch.get_num_threads()
    torch.set_num_threads(1)
    yield
    torch.set_num_threads(threads)


def test_lenet_reaches_the_literature_on_digits_in_the_services_ten_epochs(
    digits: ExampleStore, one_thread: None
) -> None:
    """The service's max_epochs=10 at the grid's rate 0.01: >= 0.99 validation accuracy (one
    CPU thread, about 4 s); the recipe before (SGD, no shifts, one pass per epoch) reached 0.964."""
    r = train(TrainJob("digits", "lenet", hyperparameters={"lr": 0.01}, max_epochs=10), digits)
    assert r.accuracy >= 0.98, r.curve
    assert r.epochs == 10 and r.n_train == 1437
    # two passes of 1,437 images per epoch, in batches of 35: 83 steps per epoch
    assert r.steps == 10 * -(-2 * 1437 // 35)


def test_nin_learns_digits(digits: ExampleStore, one_thread: None) -> None:
    """NIN with PyTorch's default initialization stayed at chance (0.10) at every rate; with He
    et al.'s it passes 0.97 after two epochs (one CPU thread, about 7 s)."""
    r = train(TrainJob("digits", "nin", hyperparameters={"lr": 0.001}, max_epochs=2), digits)
    assert r.accuracy >= 0.9, r.curve


def test_a_job_preempted_inside_an_epoch_resumes_to_the_same_model(
    digits: ExampleStore, one_thread: None, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The shifts and the second pass of an epoch are seeded like its order: a job stopped by a
    revocation notice in the second pass of its second epoch goes on with the very batches and
    shifts an uninterrupted job trains on."""
    job = TrainJob("digits", "lenet", hyperparameters={"lr": 0.01}, max_epochs=2)
    full = train(job, digits)
    steps_per_epoch = -(-2 * 1437 // 35)
    checks = iter(range(10**6))
    stop_at = steps_per_epoch + 60  # inside epoch 2, after its first pass of 42 steps

    monkeypatch.setattr(preemption, "pending", lambda: next(checks) == stop_at)
    stopped = TrainJob(**{**job.__dict__, "job_id": "preempted"})
    with pytest.raises(preemption.Preempted) as info:
        train(stopped, digits)
    assert (info.value.epoch, info.value.batch) == (2, 61)
    monkeypatch.setattr(preemption, "pending", lambda: False)
    resumed = train(stopped, digits)
    assert resumed.steps == full.steps == 2 * steps_per_epoch
    assert [e.val_accuracy for e in resumed.curve] == [e.val_accuracy for e in full.curve]
    assert [e.train_loss for e in resumed.curve] == pytest.approx(
        [e.train_loss for e in full.curve]
    )


def _split(n: int = 6, lengths: bool = False) -> TrainingData:
    x = torch.arange(n * 4, dtype=torch.float32).reshape(n, 2, 2)
    lens = torch.arange(1, n + 1) if lengths else None
    return TrainingData(True, x, torch.arange(n), lens, np.zeros((1, 2, 2)), np.zeros(1), None)


def test_a_training_split_is_kept_on_a_device_only_when_it_fits() -> None:
    """`keep_on` copies the split to a non-CPU device (here PyTorch's ``meta`` device, which a
    CPU-only machine has; a GPU takes the same path) once and within the byte cap; on the CPU,
    or over the cap, rows stay on the CPU and each batch is copied as before."""
    data = _split()
    assert data.keep_on(torch.device("cpu")) == torch.device("cpu")
    big = data.x_tr.nbytes + data.y_tr.nbytes
    assert data.keep_on(torch.device("meta"), max_bytes=big - 1) == torch.device("cpu")
    assert data.keep_on(torch.device("meta"), max_bytes=big) == torch.device("meta")
    assert data.keep_on(torch.device("meta")) == torch.device("meta")  # one copy, kept

    rows = torch.tensor([5, 0, 3])
    xb, yb, lb = data.train_batch(rows.to("meta"), torch.device("meta"))
    assert xb.device.type == yb.device.type == "meta" and lb is None
    assert xb.shape == (3, 2, 2) and yb.shape == (3,)
    xb, yb, _ = data.train_batch(rows, torch.device("cpu"))  # CPU rows: host memory as before
    assert torch.equal(xb, data.x_tr[rows]) and torch.equal(yb, torch.tensor([5, 0, 3]))


def test_sequence_splits_stay_in_host_memory_with_their_lengths() -> None:
    """Packing wants a sequence batch's lengths on the CPU: a split with lengths is not kept on
    a device (its rows would come back every step), and its lengths come with each batch."""
    data = _split(lengths=True)
    assert data.keep_on(torch.device("meta")) == torch.device("cpu")
    _, _, lb = data.train_batch(torch.tensor([4, 1]), torch.device("cpu"))
    assert lb is not None and lb.device.type == "cpu" and lb.tolist() == [5, 2]
