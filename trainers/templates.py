"""Candidate model generation by template matching (shared/papers/000, Sec. 2.1, Fig. 4).

The templates are tried top to bottom, most specific first; the first that matches a schema
decides the workload and its consistent models. Letters are positive integers, ``*`` an arbitrary
tail of a list, lower-case letters field names. One row is ours, not the paper's: *tabular
classification* (a flat ``Tensor[A]`` input, no recursion) sits above the paper's catch-all
"general classification", so flat feature vectors get a scikit-learn set instead of a bit-level
RNN. Rows whose models are not built here (seq2seq, tree models, bit-level nets) still match, so
a tenant learns what its task is and that no candidate exists yet, rather than a wrong match.

Image classification has the paper's CNNs and, ours, `PIXEL_MODELS` (``pixels-<arm>``, arms
of their own: `trainers.zoo`): the tabular portfolio on the flattened pixels, the baseline a
practitioner (and FLAML) starts an image task with. They cost
about a second on small images (MNIST, 1,500 training images: extra trees 0.94 validation accuracy
in 0.7 s on one core; digits: 0.987 in 0.3 s) where a CNN job takes tens of seconds, so the
cost-aware policy serves an image tenant a first model early and the CNNs after. Two kinds of
tabular arm are left out because their cost grows with the 784+ features and 10 classes in a way
the cost prior (one scale per tenant, `RELATIVE_COST` per arm) cannot see: histogram gradient
boosting grows a tree per class per iteration (26 s for 0.90 on that MNIST sample), and the L1
(saga) logistic regressions do not converge in their 2,000 iterations (77 s for 0.88).

Automatic normalization (Sec. 2.1, Fig. 5): for image-shaped inputs, every consistent CNN also
appears once per ``k`` in `NORMALIZATION_KS` with ``f_k(x) = -x^(2k) + x^k`` applied to each
example scaled to ``[0, 1]`` (see `trainers.nets.normalize_fk`). The paper gives no values of
``k``; ours are log-spaced so that each one brings up a further band of a high-dynamic-range input:
``k = 1`` (plain), ``1/4`` and ``1/16``.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

from store.schema import DataType, Schema
from trainers.zoo import PIXEL_MODELS, TABULAR_MODELS, ZOO, ModelSpec

__all__ = [
    "NORMALIZATION_KS",
    "PIXEL_MODELS",
    "TEMPLATES",
    "Candidate",
    "NoCandidatesError",
    "Template",
    "candidates",
    "match",
    "torch_candidates",
]

NORMALIZATION_KS: tuple[float, ...] = (1.0, 0.25, 0.0625)


class NoCandidatesError(ValueError):
    pass


def _tensors(dt: DataType, *ranks: int, tail: bool = False) -> bool:
    """``[Tensor[r1 dims], Tensor[r2 dims], ...(, *)]``: ranks of the leading fields."""
    shapes = [f.shape for f in dt.fields]
    if len(shapes) < len(ranks) or (not tail and len(shapes) != len(ranks)):
        return False
    return all(len(s) == r for s, r in zip(shapes, ranks, strict=False))


@dataclass(frozen=True)
class Template:
    """One row of Fig. 4: input and output patterns (as printed there) and the models."""

    workload: str
    input: str
    output: str
    models: tuple[str, ...]
    matches: Callable[[Schema], bool]
    image: bool = False


TEMPLATES: tuple[Template, ...] = (
    Template(
        "image classification",
        "{[Tensor[A,B,C]], []}",
        "{[Tensor[D]], []}",
        (
            "alexnet",
            "bn_alexnet",
            "resnet18",
            "resnet50",
            "googlenet",
            "squeezenet",
            "vgg16",
            "nin",
            "lenet",
            *PIXEL_MODELS,
        ),
        lambda s: (
            _tensors(s.input, 3)
            and not s.input.recursive
            and _tensors(s.output, 1)
            and not s.output.recursive
        ),
        image=True,
    ),
    Template(
        "image recovery",
        "{[Tensor[A,B,C]], []}",
        "{[Tensor[D,E,F]], []}",
        ("conv_autoencoder",),
        lambda s: (
            _tensors(s.input, 3)
            and not s.input.recursive
            and _tensors(s.output, 3)
            and not s.output.recursive
        ),
        image=True,
    ),
    Template(
        "time series classification",
        "{[Tensor[A], *], [a]}",
        "{[Tensor[D]], []}",
        ("rnn", "lstm", "bilstm", "gru"),
        lambda s: (
            _tensors(s.input, 1, tail=True)
            and len(s.input.recursive) == 1
            and _tensors(s.output, 1)
            and not s.output.recursive
        ),
    ),
    Template(
        "time series translation",
        "{[Tensor[A], *], [a]}",
        "{[Tensor[B], *], [b]}",
        (),
        lambda s: (
            _tensors(s.input, 1, tail=True)
            and len(s.input.recursive) == 1
            and _tensors(s.output, 1, tail=True)
            and len(s.output.recursive) == 1
        ),
    ),
    Template(
        "tree classification",
        "{[Tensor[A], *], [a, c]}",
        "{[Tensor[B]], []}",
        (),
        lambda s: (
            _tensors(s.input, 1, tail=True)
            and len(s.input.recursive) == 2
            and _tensors(s.output, 1)
            and not s.output.recursive
        ),
    ),
    Template(
        "tabular classification",
        "{[Tensor[A]], []}",
        "{[Tensor[D]], []}",
        TABULAR_MODELS,  # scikit-learn families x their portfolio (trainers/zoo.py)
        lambda s: (
            _tensors(s.input, 1)
            and not s.input.recursive
            and _tensors(s.output, 1)
            and not s.output.recursive
        ),
    ),
    Template(
        "general classification",
        "{[*], [*]}",
        "{[Tensor[B]], []}",
        (),
        lambda s: _tensors(s.output, 1) and not s.output.recursive,
    ),
    Template("general auto-encoder", "{[*], [*]}", "{[*], [*]}", (), lambda s: True),
)


@dataclass(frozen=True)
class Candidate:
    """A trainable candidate: a zoo model, optionally with f_k input normalization."""

    model: str
    k: float | None = None

    @property
    def name(self) -> str:
        """Stable id used as the arm name, e.g. ``resnet18`` or ``resnet18+f0.25``."""
        return self.model if self.k is None else f"{self.model}+f{self.k:g}"

    @property
    def spec(self) -> ModelSpec:
        return ZOO[self.model]

    @classmethod
    def parse(cls, name: str) -> Candidate:
        model, _, k = name.partition("+f")
        if model not in ZOO:
            raise KeyError(f"unknown model {model!r}; the zoo has {sorted(ZOO)}")
        try:
            return cls(model, float(k) if k else None)
        except ValueError:
            raise KeyError(f"candidate {name!r}: '+f' must be followed by a number k") from None


def match(schema: Schema) -> Template:
    """The first template of Fig. 4 (top to bottom) that `schema` matches."""
    return next(t for t in TEMPLATES if t.matches(schema))


def candidates(schema: Schema, *, augment: bool = True) -> list[Candidate]:
    """Consistent models for `schema`, plus the f_k-normalized variants of the CNNs for image
    inputs."""
    template = match(schema)
    if not template.models:
        supported = [t.workload for t in TEMPLATES if t.models]
        raise NoCandidatesError(
            f"schema {schema} is a {template.workload} task (Fig. 4: input {template.input}, "
            f"output {template.output}); no models for it are built yet. Supported: {supported}"
        )
    if template.workload.endswith("classification") and schema.output.fields[0].shape[0] < 2:
        raise NoCandidatesError(
            f"output {schema.output} has 1 class; classification needs Tensor[D] with D >= 2"
        )
    out = [Candidate(m) for m in template.models]
    if augment and template.image:
        nets = [m for m in template.models if ZOO[m].family != "sklearn"]
        out += [Candidate(m, k) for k in NORMALIZATION_KS for m in nets]
    return out


def torch_candidates(schema: Schema) -> list[Candidate]:
    """`candidates` trained by the torch trainer (an image task's CNNs and their f_k variants,
    not its pixel arms): those SEER tunes and whose jobs log epochs and checkpoints."""
    return [c for c in candidates(schema) if c.spec.family != "sklearn"]
