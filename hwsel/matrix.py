"""The prediction matrix: every model x hardware x batch size x precision, in the predecessor's shape.

All rows go to one `Predictor.predict_many` call, so each layer scores its rows in one batch.
"""

from __future__ import annotations

import os
from collections.abc import Mapping, Sequence
from typing import Any

from .config import SelectionConfig
from .predict import Predictor, bulk, predictor_for
from .query import Query, ask_grid
from .resolution import ModelInfo

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
    device each target's answers are for and why (`device` as in `predict_performance`). All rows
    are predicted in one `predict_many` call, so each layer scores its rows in one batch.
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
        return _matrix(p, infos, hws, batches, precs, mode, queries)


def _matrix(p: Predictor, infos: Sequence[ModelInfo], hws: Sequence[str], batches: Sequence[int], precs: Sequence[str],
            mode: str, queries: Sequence[Query]) -> dict[str, Any]:
    import datetime as _dt

    preds = iter(p.predict_many(queries))
    out: dict[str, Any] = {}
    sources: dict[str, int] = {}
    for info in infos:
        table: dict[str, Any] = {}
        for hw in hws:
            per_batch: dict[str, Any] = {}
            for b in batches:
                per_prec: dict[str, Any] = {}
                for prec in precs:
                    pred = next(preds)
                    sources[pred.source] = sources.get(pred.source, 0) + 1
                    per_prec[prec] = {"throughput": pred.throughput, "latency_mean": pred.latency_ms,
                                      "memory_usage": pred.memory_mb, "source": pred.source,
                                      "interval": list(pred.interval), "backend": pred.backend}
                per_batch[str(b)] = per_prec
            table[hw] = per_batch
        out[info.name] = {"name": info.name, "category": info.family, "param_count": int(info.param_count),
                          "predictions": table}
    from .specs import spec_for

    first = {q.hardware: q for q in reversed(queries)}
    devices = {hw: {"device": q.device_name, "device_source": q.device_source,
                    "device_spec": spec_for(hw, q.device_name).name, "backend": q.backend}
               for hw, q in first.items()}
    return {
        "timestamp": _dt.datetime.now(_dt.timezone.utc).isoformat(),
        "mode": mode,
        "devices": {hw: devices[hw] for hw in hws},
        "models": out,
        "hardware_platforms": list(hws),
        "batch_sizes": batches,
        "precision_options": precs,
        "sources": sources,
        "configurations": len(queries),
    }


__all__ = ["DEFAULT_MATRIX_MODELS", "prediction_matrix"]
