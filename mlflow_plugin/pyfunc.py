"""Tenant models as MLflow pyfunc models, with a signature derived from the tenant's schema.

Signature (MLflow tensor spec), for a schema input field of shape ``S``:

* fixed-shape input: one tensor ``float32 (-1, *S)``;
* a sequence ``{[Tensor[A]], [next]}``: named tensors ``x float32 (-1, -1, *S)`` (zero-padded)
  and ``lengths int64 (-1,)``;
* output: a string column of class names for class outputs, else ``float32 (-1, *S_out)``.

`pyfunc_input` encodes a tenant's inputs into that form, once, with the checks `feed` applies
(`trainers.encode_batch`). The model checks what it is given the same way, whoever calls
it, without encoding it again, then applies the network's own preprocessing, so
`models:/<tenant>@best` predicts exactly as the trainer validated. Every logged model carries an
input example (one zero example of the schema).
"""

from __future__ import annotations

import tempfile
from collections.abc import Mapping
from pathlib import Path
from typing import TYPE_CHECKING, Any, TypeAlias

import mlflow
import numpy as np
from mlflow.models import ModelSignature
from mlflow.pyfunc.model import PythonModel, PythonModelContext
from mlflow.types.schema import ColSpec, TensorSpec
from mlflow.types.schema import Schema as MlflowSchema
from numpy.typing import NDArray

from store import is_class_output
from store.schema import Schema
from trainers import InferenceBatch, TrainedModel, encode_batch

__all__ = [
    "TenantPyfunc",
    "input_example_for",
    "log_trained_model",
    "pip_requirements",
    "pyfunc_input",
    "signature_for",
]

if TYPE_CHECKING:
    ModelInput: TypeAlias = NDArray[Any] | dict[str, NDArray[Any]]
else:
    # What MLflow reads from `TenantPyfunc.predict`'s hint at run time: a bare ndarray is a type
    # it infers no schema from, so the signature from the schema stays the one contract (for a
    # sequence MLflow hands over the dict of named tensors it checked against that signature).
    ModelInput = np.ndarray


def signature_for(schema: Schema) -> ModelSignature:
    field = schema.input.single
    if field is None:
        raise ValueError(f"input {schema.input} needs exactly one tensor field")
    f32 = np.dtype(np.float32)
    if schema.input.is_sequence:
        inputs = MlflowSchema(
            [
                TensorSpec(f32, (-1, -1, *field.shape), "x"),
                TensorSpec(np.dtype(np.int64), (-1,), "lengths"),
            ]
        )
    else:
        inputs = MlflowSchema([TensorSpec(f32, (-1, *field.shape))])
    if is_class_output(schema):
        outputs = MlflowSchema([ColSpec("string")])
    else:
        outputs = MlflowSchema([TensorSpec(f32, (-1, *schema.output.fields[0].shape))])
    return ModelSignature(inputs=inputs, outputs=outputs)


def _model_input(batch: InferenceBatch) -> ModelInput:
    x = batch.x.astype(np.float32, copy=False)
    return x if batch.lengths is None else {"x": x, "lengths": batch.lengths}


def pyfunc_input(schema: Schema, inputs: Any, lengths: Any = None) -> ModelInput:
    """`inputs` as a tenant model's signature takes them: encoded once, with the checks `feed`
    applies (a bad example raises `store.BadExampleError` naming it). `inputs` and `lengths` as
    `trainers.encode_batch` takes them."""
    return _model_input(encode_batch(schema, inputs, lengths))


def input_example_for(schema: Schema) -> ModelInput:
    """One all-zero example in the signature's form (a sequence of length 1)."""
    field = schema.input.single
    if field is None:
        raise ValueError(f"input {schema.input} needs exactly one tensor field")
    if schema.input.is_sequence:
        x = np.zeros((1, 1, *field.shape), dtype=np.float32)
        return _model_input(InferenceBatch(x, np.ones(1, dtype=np.int64)))
    return _model_input(InferenceBatch(np.zeros((1, *field.shape), dtype=np.float32), None))


class TenantPyfunc(PythonModel):
    """pyfunc wrapper: loads the saved `TrainedModel` from the artifact ``model``."""

    def load_context(self, context: PythonModelContext) -> None:
        self.model = TrainedModel.load(context.artifacts["model"])

    def predict(
        self,
        context: PythonModelContext | None,
        model_input: ModelInput,
        params: dict[str, Any] | None = None,
    ) -> NDArray[Any]:
        """Class names (strings) for class outputs, else the output tensors."""
        schema = self.model.schema
        if isinstance(model_input, dict):
            batch = encode_batch(schema, model_input["x"], model_input["lengths"])
        else:
            batch = encode_batch(schema, np.asarray(model_input))
        out = self.model.predict(batch)  # already encoded: the model does not encode it again
        if is_class_output(schema):
            return np.asarray([str(v) for v in out])
        return out


def pip_requirements() -> list[str]:
    """Pinned to what runs here; passing them skips MLflow's slow requirement inference. The
    versions come from the installed distributions: a tabular job imports no torch for them,
    and where torch is not installed (the service without the ``ml`` extra trains tabular
    arms only) it is left out rather than failing every job."""
    from importlib.metadata import PackageNotFoundError, version

    pins = []
    for dist in ("torch", "scikit-learn"):
        try:
            pins.append(f"{dist}=={version(dist).split('+')[0]}")
        except PackageNotFoundError:
            continue
    return [*pins, f"mlflow=={mlflow.__version__}", "tenantml"]


def log_trained_model(
    model: TrainedModel, name: str = "model", tags: Mapping[str, str] | None = None
) -> str:
    """Log `model` into the active run as a pyfunc (`tags` on MLflow's logged model); returns
    its model URI."""
    with tempfile.TemporaryDirectory(prefix="tenantml-model-") as tmp:
        path = model.save(Path(tmp) / "model")
        info = mlflow.pyfunc.log_model(
            name=name,
            python_model=str(Path(__file__).with_name("_model_code.py")),
            artifacts={"model": str(path)},
            signature=signature_for(model.schema),
            input_example=input_example_for(model.schema),
            pip_requirements=pip_requirements(),
            tags=dict(tags) if tags else None,
        )
    uri: str = info.model_uri
    return uri
