"""Predictions in the predecessor's shapes: one case on each hardware target (`predict_performance`
for the Python API, `prediction_report`, the answer of ``hwsel predict`` and ``POST
/performance/predict``) and the prediction matrix, every model x hardware x batch size x
precision (`prediction_matrix`)."""

from __future__ import annotations

import datetime as _dt
import os
from collections import Counter
from collections.abc import Mapping, Sequence
from typing import Any

from .config import SelectionConfig
from .predict import Predictor, bulk, predictor_for
from .query import ModelRef, Prediction, Query, ask_grid
from .ranking import device_table
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


#: The full-tier zoo models: the matrix's default rows.
DEFAULT_MATRIX_MODELS: tuple[str, ...] = ("bert-base", "gpt2", "t5-small", "vit-base", "resnet-50", "whisper-tiny",
                                          "wav2vec2-base", "clip-vit-b32")


def prediction_matrix(models: Sequence[Any] | None = None, hardware: Sequence[str] | None = None,
                      batch_sizes: Sequence[int] = (1, 8, 32), precisions: Sequence[str] = ("fp32", "fp16"),
                      mode: str = "inference", backend: str | None = None, *,
                      device: str | Mapping[str, str] | None = None, predictor: Predictor | None = None,
                      source: str | os.PathLike[str] | None = None, tracking_uri: str | None = None,
                      config: SelectionConfig | str | os.PathLike[str] | None = None) -> dict[str, Any]:
    """Predictions for every model x hardware x batch size x precision, in the predecessor's shape.

    ``models[name]["predictions"][hardware][str(batch)][precision]`` holds throughput,
    latency_mean, memory_usage, source, interval and backend; ``devices[hardware]`` says which
    device each target's answers are for and why (`device` as in `predict_performance`).
    """
    p = predictor_for(predictor, source, tracking_uri, config)
    grid = ask_grid(p.config_, what="prediction_matrix",
                    models=list(models) if models is not None else list(DEFAULT_MATRIX_MODELS), hardware=hardware,
                    batch_sizes=batch_sizes, modes=[mode], precisions=precisions, backend=backend, device=device)
    infos, hws, batches, precs, mode = grid.models, grid.hardware, grid.batch_sizes, grid.precisions, grid.modes[0]
    resolved = {hw: p.resolve_target(hw, grid.backend, grid.devices.get(hw)) for hw in hws}
    queries = [Query(info, hw, prec, b, mode, backend_name, name, why)
               for info in infos for hw, (backend_name, name, why) in resolved.items() for b in batches for prec in precs]
    with bulk(len(queries)):
        preds = p.predict_many(queries)
        cells = iter(preds)
        out = {info.name: {"name": info.name, "category": info.family, "param_count": int(info.param_count),
                           "predictions": {hw: {str(b): {prec: _cell(next(cells)) for prec in precs} for b in batches}
                                           for hw in hws}}
               for info in infos}
        return {
            "timestamp": _dt.datetime.now(_dt.timezone.utc).isoformat(),
            "mode": mode,
            "devices": device_table(resolved),
            "models": out,
            "hardware_platforms": list(hws),
            "batch_sizes": batches,
            "precision_options": precs,
            "sources": dict(Counter(pred.source for pred in preds)),
            "configurations": len(queries),
        }


def _cell(pred: Prediction) -> dict[str, Any]:
    return {"throughput": pred.throughput, "latency_mean": pred.latency_ms, "memory_usage": pred.memory_mb,
            "source": pred.source, "interval": list(pred.interval), "backend": pred.backend}


__all__ = ["DEFAULT_MATRIX_MODELS", "predict_performance", "prediction_matrix", "prediction_report"]
