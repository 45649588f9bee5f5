"""Tenant models as MLflow pyfunc models, with a signature derived from the tenant's schema.

Signature (MLflow tensor spec), for a schema input field of shape ``S``:

* fixed-shape input: one tensor ``float32 (-1, *S)``;
* a sequence ``{[Tensor[A]], [next]}``: named tensors ``x float32 (-1, -1, *S)`` (zero-padded)
  and ``lengths int64 (-1,)``;
* output: a string column of class names for class outputs, else ``float32 (-1, *S_out)``.

The wrapped `trainers.TrainedModel` applies the same input checks as `feed` and the network's own
preprocessing, so `models:/<tenant>@best` predicts exactly as the trainer validated.
"""

from __future__ import annotations

import tempfile
from pathlib import Path

import mlflow
import numpy as np
from mlflow.models import ModelSignature
from mlflow.pyfunc.model import PythonModel, PythonModelContext
from mlflow.types.schema import ColSpec, TensorSpec
from mlflow.types.schema import Schema as MlflowSchema

from store import is_class_output
from store.schema import Schema
from trainers import TrainedModel

__all__ = ["TenantPyfunc", "log_trained_model", "pip_requirements", "signature_for"]


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


class TenantPyfunc(PythonModel):
    """pyfunc wrapper: loads the saved `TrainedModel` from the artifact ``model``."""

    def load_context(self, context: PythonModelContext) -> None:
        self.model = TrainedModel.load(context.artifacts["model"])

    # No type hints here: MLflow would read them as a second, conflicting signature.
    def predict(self, context, model_input, params=None):  # type: ignore[no-untyped-def]
        if isinstance(model_input, dict):
            out = self.model.predict(model_input["x"], model_input["lengths"])
        else:
            out = self.model.predict(np.asarray(model_input))
        if is_class_output(self.model.schema):
            return np.asarray([str(v) for v in out])
        return out


def pip_requirements() -> list[str]:
    """Pinned to what runs here; passing them skips MLflow's slow requirement inference."""
    import sklearn
    import torch

    return [
        f"torch=={torch.__version__.split('+')[0]}",
        f"scikit-learn=={sklearn.__version__}",
        f"mlflow=={mlflow.__version__}",
        "tenantml",
    ]


def log_trained_model(model: TrainedModel, name: str = "model") -> str:
    """Log `model` into the active run as a pyfunc; returns its model URI."""
    with tempfile.TemporaryDirectory(prefix="tenantml-model-") as tmp:
        path = model.save(Path(tmp) / "model")
        info = mlflow.pyfunc.log_model(
            name=name,
            python_model=str(Path(__file__).with_name("_model_code.py")),
            artifacts={"model": str(path)},
            signature=signature_for(model.schema),
            pip_requirements=pip_requirements(),
        )
    uri: str = info.model_uri
    return uri
