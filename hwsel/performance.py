"""One case predicted on each hardware target: `predict_performance` for the Python API, and
`prediction_report`, the answer of ``hwsel predict`` and ``POST /performance/predict``."""

from __future__ import annotations

import os
from collections.abc import Mapping, Sequence
from typing import Any

from .config import SelectionConfig
from .predict import Predictor, predictor_for
from .query import ModelRef, Prediction
from .resolution import ModelInfo


def predict_performance(model: ModelRef, hardware: str | Sequence[str] | None = None, batch_size: int = 1,
                        precision: str = "fp32", mode: str = "inference", backend: str | None = None, *,
                        device: str | Mapping[str, str] | None = None,
                        predictor: Predictor | None = None, source: str | os.PathLike[str] | None = None,
                        tracking_uri: str | None = None,
                        config: SelectionConfig | str | os.PathLike[str] | None = None,
                        seq_length: int | None = None) -> dict[str, Prediction]:
    """hardware -> `Prediction` for one case, each saying which device and backend it is for.

    `hardware` defaults to every configured target. `device` names the device (``"NVIDIA H100
    80GB HBM3"`` or a spec name such as ``"h100"``) for one target, or maps targets to devices.
    `backend` defaults to the target's (`hwsel.query.default_backend`). `seq_length` asks about
    another input length in tokens (at most the model's position limit; the answer's model is
    named ``<name>@seq<N>``). Bad input raises `hwsel.query.QuestionError` naming the field
    (`UnknownModelError`, also a KeyError, for an unknown model).
    """
    p = predictor_for(predictor, source, tracking_uri, config)
    return p.predict(model, hardware, batch_size=batch_size, precision=precision, mode=mode, backend=backend,
                     device=device, sequence_length=seq_length)


def prediction_report(model: ModelInfo, predictions: Mapping[str, Prediction], *, batch_size: int, precision: str,
                      mode: str) -> dict[str, Any]:
    """`model`'s case and its `predictions` (hardware -> answer), JSON-ready; ``backend`` is the one
    backend every answer is for (None when the targets' differ)."""
    backends = {p.backend for p in predictions.values()}
    return {"model_name": model.name, "model_family": model.family, "batch_size": batch_size, "precision": precision,
            "mode": mode, "sequence_length": model.sequence_length,
            "backend": backends.pop() if len(backends) == 1 else None,
            "devices": {hw: p.device for hw, p in predictions.items()},
            "predictions": {hw: p.to_dict() for hw, p in predictions.items()}}


__all__ = ["predict_performance", "prediction_report"]
