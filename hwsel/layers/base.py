"""What a prediction layer is: a name and one call that answers many queries at once; a layer
never sees another layer, the predictor's cache or its status."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any, Protocol, runtime_checkable

from ..query import Prediction, Query


@runtime_checkable
class Layer(Protocol):
    """One source of answers: `answer` gets resolved queries (`hwsel.predict.Predictor.resolve`),
    must not change them, and returns one entry per query in order, a `Prediction` whose ``source``
    is the layer's `name` or None where it cannot answer. Anything slow happens when it is built."""

    #: ``measured``, ``registered``, ``roofline`` or ``rules`` (`hwsel.config.SOURCES`).
    name: str

    def answer(self, queries: Sequence[Query]) -> list[Prediction | None]:
        """One `Prediction` or None per query, in order."""
        ...


def prediction(q: Query, source: str, latency: float, memory: float, interval: tuple[float, float],
               detail: str, **fields: Any) -> Prediction:
    """Layer `source`'s answer to `q`, for its case and device (``device_spec`` by
    `hwsel.specs.spec_for`), throughput ``batch / latency``; `fields` sets other fields."""
    from ..specs import spec_for

    fields = {"throughput": q.batch_size / latency * 1e3, "backend": q.backend, **fields}
    return Prediction(q.hardware, latency_ms=latency, memory_mb=memory, source=source, interval=interval,
                      precision=q.precision, batch_size=q.batch_size, mode=q.mode, detail=detail,
                      device=q.device_name, device_source=q.device_source,
                      device_spec=spec_for(q.hardware, q.device_name).name, **fields)


def query_features(queries: Sequence[Query], mode_names: Mapping[str, str] | None = None) -> Any:
    """`hwsel.features.FEATURE_COLUMNS` of many queries in one `feature_frame` call (as training
    used); `mode_names` maps a mode to the spelling the champion was trained with."""
    import pandas as pd

    from ..features import feature_frame, query_row
    from ..query import default_backend

    names = dict(mode_names or {})
    return feature_frame(pd.DataFrame([
        query_row(q.model, hardware=q.hardware, backend=q.backend or default_backend(q.hardware), precision=q.precision,
                  batch_size=q.batch_size, mode=names.get(q.mode, q.mode), device_name=q.device_name)
        for q in queries]))


__all__ = ["Layer", "prediction", "query_features"]
