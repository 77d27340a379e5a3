"""The prediction matrix: every model x hardware x batch size x precision, in the predecessor's shape.

All rows go to one `Predictor.predict_many` call, so each layer scores its rows in one batch.
"""

from __future__ import annotations

import os
from collections.abc import Mapping, Sequence
from typing import Any

from .config import SelectionConfig
from .predict import Predictor, bulk, predictor_for
from .query import Query, QuestionError, ask, check_batch_size, check_precision

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
    names = list(models) if models is not None else list(DEFAULT_MATRIX_MODELS)
    batches = [check_batch_size(b) for b in batch_sizes]
    precs = [check_precision(x) for x in precisions]
    if not names or not batches or not precs:
        raise QuestionError("prediction_matrix needs at least one model, batch size and precision")
    # one question per model (`ask` checks the rest once); each model is built once
    firsts = [ask(p.config_, m["name"] if isinstance(m, Mapping) else m, hardware, batch_size=batches[0],
                  precision=precs[0], mode=mode, backend=backend, device=device) for m in names]
    infos = [qs[0].model for qs in firsts]
    hws = [q.hardware for q in firsts[0]]
    mode = firsts[0][0].mode
    resolved = {q.hardware: p.resolve(q) for q in firsts[0]}
    queries = [Query(info, hw, prec, b, mode, r.backend, r.device_name, r.device_source)
               for info in infos for hw, r in resolved.items() for b in batches for prec in precs]
    with bulk(len(queries)):
        return _matrix(p, infos, hws, batches, precs, mode, queries)


def _matrix(p: Predictor, infos: Sequence[Any], hws: Sequence[str], batches: Sequence[int], precs: Sequence[str],
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
