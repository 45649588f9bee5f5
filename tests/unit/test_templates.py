"""Fig. 4 template matching (every row, top-to-bottom order) and Fig. 5 normalization."""

import numpy as np
import pytest
import torch

from store.schema import DataType, Schema, Tensor
from trainers import (
    NORMALIZATION_KS,
    PIXEL_MODELS,
    TEMPLATES,
    ZOO,
    Candidate,
    NoCandidatesError,
    candidates,
    match,
)
from trainers.nets import IMAGE_NETS, normalize_fk
from trainers.torch_trainer import build_net

IMAGE = Schema(input=Tensor(32, 32, 3), output=Tensor(10))
ROWS = [
    ("image classification", IMAGE),
    ("image recovery", Schema(input=Tensor(32, 32, 3), output=Tensor(32, 32, 3))),
    (
        "time series classification",
        Schema(input=DataType([Tensor(12)], ["next"]), output=Tensor(9)),
    ),
    (
        "time series translation",
        Schema(input=DataType([Tensor(12)], ["next"]), output=DataType([Tensor(5)], ["next"])),
    ),
    (
        "tree classification",
        Schema(input=DataType([Tensor(300), Tensor(2)], ["left", "right"]), output=Tensor(5)),
    ),
    ("tabular classification", Schema(input=Tensor(30), output=Tensor(2))),
    ("general classification", Schema(input=Tensor(4, 4), output=Tensor(3))),
    ("general auto-encoder", Schema(input=Tensor(4, 4), output=Tensor(4, 4))),
]


@pytest.mark.parametrize(("workload", "schema"), ROWS)
def test_every_row_of_fig4(workload: str, schema: Schema) -> None:
    assert match(schema).workload == workload


def test_rows_are_tried_top_to_bottom() -> None:
    # An image-classification schema also fits the general-classification row below it.
    general = next(t for t in TEMPLATES if t.workload == "general classification")
    assert general.matches(IMAGE)
    assert match(IMAGE).workload == "image classification"
    order = [t.workload for t in TEMPLATES]
    assert order.index("image classification") < order.index("general classification")
    assert order[-1] == "general auto-encoder"


def test_candidates_and_augmentation() -> None:
    plain = candidates(IMAGE, augment=False)
    assert [c.model for c in plain] == list(match(IMAGE).models)
    assert {"alexnet", "bn_alexnet", "resnet18", "resnet50", "googlenet", "squeezenet",
            "vgg16", "nin"} <= {c.model for c in plain}  # fmt: skip
    # the tabular portfolio on the flattened pixels, without the arms whose cost grows with
    # many features and classes
    pixels = {c.model for c in plain if c.spec.family == "sklearn"}
    assert pixels == set(PIXEL_MODELS)
    assert {"pixels-extra_trees", "pixels-svm", "pixels-knn-k1-p1"} <= pixels
    assert not any(ZOO[m].estimator == "gradient_boosting" for m in pixels)
    # arms of their own (the learnt prior keeps them apart), each the tabular arm's estimator
    # and settings
    assert all((ZOO[m].estimator, ZOO[m].params) == (ZOO[m[7:]].estimator, ZOO[m[7:]].params)
               for m in pixels)  # fmt: skip
    full = candidates(IMAGE)
    nets = len(plain) - len(pixels)  # the f_k variants are the CNNs'
    assert len(full) == len(plain) + nets * len(NORMALIZATION_KS)
    assert all(c.spec.family != "sklearn" for c in full if c.k is not None)
    assert {c.k for c in full} == {None, *NORMALIZATION_KS}
    assert Candidate.parse("resnet18+f0.25") == Candidate("resnet18", 0.25)
    assert all(Candidate.parse(c.name) == c for c in full)
    # Augmentation is for image-shaped inputs only.
    tab = Schema(input=Tensor(30), output=Tensor(2))
    assert all(c.k is None for c in candidates(tab))
    assert {c.spec.family for c in candidates(tab)} == {"sklearn"}


@pytest.mark.parametrize("workload", ["time series translation", "tree classification"])
def test_rows_without_models_say_so(workload: str) -> None:
    schema = dict(ROWS)[workload]
    with pytest.raises(NoCandidatesError, match=f"is a {workload} task.*Supported"):
        candidates(schema)


def test_one_class_is_not_classification() -> None:
    with pytest.raises(NoCandidatesError, match="D >= 2"):
        candidates(Schema(input=Tensor(5), output=Tensor(1)))


def test_unknown_candidate() -> None:
    with pytest.raises(KeyError, match="unknown model 'resnet999'"):
        Candidate.parse("resnet999")


def test_fk_matches_fig5_formula() -> None:
    x = torch.tensor([[0.0, 1e-8, 1e-4, 0.25, 1.0]])  # one example, already in [0, 1]
    for k in NORMALIZATION_KS:
        want = 4 * (-(x ** (2 * k)) + x**k)
        torch.testing.assert_close(normalize_fk(x, k), want)
    # Small k lifts values ten orders of magnitude below the maximum into view.
    assert normalize_fk(x, 0.0625)[0, 1] > 0.5 and normalize_fk(x, 1.0)[0, 1] < 1e-6
    big = torch.tensor([[3.0, 3e5, 3e10]])  # min-max scaled per example first
    assert torch.all((normalize_fk(big, 0.25) >= 0) & (normalize_fk(big, 0.25) <= 1))


@pytest.mark.parametrize("model", sorted(IMAGE_NETS))
def test_every_image_net_adapts_to_small_grey_inputs(model: str) -> None:
    schema = Schema(input=Tensor(8, 8, 1), output=Tensor(7))
    net = build_net(f"{model}+f0.25", schema).eval()
    with torch.no_grad():
        out = net(torch.from_numpy(np.random.default_rng(0).random((2, 8, 8, 1), np.float32)))
    assert out.shape == (2, 7) and torch.isfinite(out).all()
