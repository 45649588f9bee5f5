"""A trained tenant model: predicts from raw schema-shaped inputs, saves and loads itself.

Torch models are saved as a state dict plus the candidate name and schema, and rebuilt from the zoo
on load (``torch.load(weights_only=True)``: no pickled code). scikit-learn models are pickled with
joblib, so only load artifacts this service wrote.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import numpy as np
from numpy.typing import NDArray

from store import is_class_output
from store.schema import Schema
from trainers._data import encode_batch

__all__ = ["TrainedModel"]


class TrainedModel:
    """`predict(inputs)` -> class names (or indices when unnamed) ``(n,)``, or tensors."""

    def __init__(self, candidate: str, schema: Schema, classes: tuple[str, ...], net: Any) -> None:
        self.candidate = candidate
        self.schema = schema
        self.classes = tuple(classes)
        self.net = net  # a TenantNet (torch) or a fitted sklearn Pipeline

    @property
    def family(self) -> str:
        from trainers.templates import Candidate

        return Candidate.parse(self.candidate).spec.family

    def predict_raw(self, inputs: Any, lengths: Any = None) -> NDArray[Any]:
        """Class indices ``(n,)`` or tensor outputs ``(n, *S_out)``.

        Sequences come as a list of ``(T_i, *S)`` arrays, or padded ``(n, T_max, *S)`` with
        `lengths` ``(n,)``.
        """
        batch = encode_batch(self.schema, inputs, lengths)  # lengths checked, rows cut
        x, lengths = batch.x, batch.lengths
        if self.family == "sklearn":
            return np.asarray(self.net.predict(x.reshape(len(x), -1)))
        import torch

        from trainers.torch_trainer import infer_batches

        out = infer_batches(self.net, x, lengths, torch.device("cpu"))
        return out.argmax(1) if is_class_output(self.schema) else out

    def predict(self, inputs: Any, lengths: Any = None) -> NDArray[Any]:
        raw = self.predict_raw(inputs, lengths)
        if is_class_output(self.schema) and self.classes:
            # Named classes (fed as strings); an index past the names prints as a number.
            return np.asarray([self.classes[i] if i < len(self.classes) else str(i) for i in raw])
        return raw

    def save(self, path: str | Path) -> Path:
        path = Path(path)
        path.mkdir(parents=True, exist_ok=True)
        meta = {"candidate": self.candidate, "schema": str(self.schema), "classes": self.classes}
        (path / "tenantml-model.json").write_text(json.dumps(meta))
        if self.family == "sklearn":
            import joblib

            joblib.dump(self.net, path / "model.joblib")
        else:
            import torch

            torch.save(self.net.state_dict(), path / "model.pt")
        return path

    @classmethod
    def load(cls, path: str | Path) -> TrainedModel:
        path = Path(path)
        meta = json.loads((path / "tenantml-model.json").read_text())
        schema = Schema.parse(meta["schema"])
        model = cls(meta["candidate"], schema, tuple(meta["classes"]), None)
        if model.family == "sklearn":
            import joblib

            model.net = joblib.load(path / "model.joblib")
        else:
            import torch

            from trainers.torch_trainer import build_net

            net = build_net(meta["candidate"], schema)
            net.load_state_dict(torch.load(path / "model.pt", weights_only=True))
            model.net = net.eval()
        return model
