"""The ``roofline`` layer: a compute/memory-bound estimate from the device's peaks
(`hwsel.roofline`) plus launch overhead and the runtime's memory; its interval is the latency
champion's calibrated ``roofline`` band where there is one, else a fixed factor."""

from __future__ import annotations

import functools
import math
from collections.abc import Mapping, Sequence
from typing import Any

from pytest_hwbench.vocabulary import TRAIN_MODE, bytes_per_element

from ..memory import memory_breakdown
from ..query import Prediction, Query
from .base import prediction, query_features
from .rules import TRAIN_FLOPS, overhead_12_layers_ms, runtime_mb


def roofline_arrays(queries: Sequence[Query]) -> dict[str, Any]:
    """`hwsel.roofline` for many queries at once (arrays: latency_ms, memory_mb, ...), by the
    vectorised function `hwsel.roofline.roofline` uses, so the two never disagree."""
    import numpy as np

    from ..roofline import roofline_arrays as arrays
    from ..specs import spec_for

    col = functools.partial(np.fromiter, dtype=float, count=len(queries))
    nan = float("nan")
    return arrays(
        col(float(q.model.param_count) for q in queries),
        col(float(q.model.flops_per_item) for q in queries),
        col(float(q.model.hidden_size or nan) for q in queries),
        col(float(q.model.num_layers or nan) for q in queries),
        col(float(q.batch_size) for q in queries),
        col(float(bytes_per_element(q.precision)) for q in queries),
        col(spec_for(q.hardware, q.device_name).tflops(q.precision) for q in queries),
        col(spec_for(q.hardware, q.device_name).memory_bandwidth_gbs for q in queries),
    )


def _step_ms(forward_ms: Any, modes: Any, layers: Any, hardware: Any) -> tuple[Any, Any]:
    """(latency, launch overhead) arrays of the roofline layer's answer: the roofline's `forward_ms`,
    three forwards for a training step, plus a fixed cost per forward (twice per training step)
    that no FLOP count shows, scaled by depth (`layers`, 12 where unknown) from a 12-layer model."""
    # A roofline alone would call a GPU 1000x faster than a CPU for a tiny model at batch 1 (eager
    # GPUs are launch bound there, FACTS.md).
    import numpy as np

    train = np.asarray(modes, dtype=object) == TRAIN_MODE
    layers = np.asarray(layers, dtype=float)
    layers = np.where(np.isfinite(layers) & (layers > 0), layers, 12.0)
    per = np.array([overhead_12_layers_ms(str(h)) for h in hardware], dtype=float)
    overhead = per * layers / 12 * np.where(train, 2.0, 1.0)
    return np.asarray(forward_ms, dtype=float) * np.where(train, TRAIN_FLOPS, 1.0) + overhead, overhead


def layer_log_ms(features: Any) -> Any:
    """Log latency the roofline layer answers (`_step_ms`) for rows of
    `hwsel.features.feature_frame` (its ``log_roofline_ms``, ``mode``, ``hardware``, ``num_layers``)."""
    import numpy as np

    latency, _ = _step_ms(np.exp(features["log_roofline_ms"].to_numpy(dtype=float)),
                         features["mode"].astype(str), features["num_layers"], features["hardware"])
    return np.log(latency)


def calibrated_offsets(intervals: Any, layer: str, queries: Sequence[Query],
                       mode_names: Mapping[str, str] | None = None) -> tuple[Any, Any] | None:
    """(low, high) log offsets of `layer`'s band in `intervals` (`hwsel.intervals.AdaptiveIntervals`)
    for `queries`; None without intervals or without a band for that layer."""
    if intervals is None or intervals.layer_band(layer) is None or not queries:
        return None
    result: tuple[Any, Any] = intervals.offsets(query_features(queries, mode_names), layer)
    return result


class RooflineLayer:
    """Answers every query with finite roofline numbers; the interval is the calibrated
    ``roofline`` band of `intervals` where it has one, else (latency / f, latency * f)."""

    name = "roofline"

    def __init__(self, interval_factor: float, intervals: Any = None) -> None:
        self.interval_factor = interval_factor
        self.intervals = intervals

    def answer(self, queries: Sequence[Query]) -> list[Prediction | None]:
        f = self.interval_factor
        band = calibrated_offsets(self.intervals, "roofline", queries)
        est = roofline_arrays(queries)
        comp, bw = est["compute_ms"], est["memory_ms"]
        steps, overheads = _step_ms(est["latency_ms"], [q.mode for q in queries],
                                   [q.model.num_layers for q in queries], [q.hardware for q in queries])
        out: list[Prediction | None] = []
        for j, q in enumerate(queries):
            forward, memory = float(est["latency_ms"][j]), float(est["memory_mb"][j])
            if not (math.isfinite(forward) and forward > 0 and math.isfinite(memory)):
                out.append(None)
                continue
            latency, overhead = float(steps[j]), float(overheads[j])
            if q.mode == TRAIN_MODE:  # a training step also holds gradients and optimizer states
                bd = memory_breakdown(q.model, batch_size=q.batch_size, precision=q.precision, mode=TRAIN_MODE)
                memory += bd.gradients_mb + bd.optimizer_mb + bd.activations_mb
            memory += runtime_mb(q.hardware)  # the roofline counts the model only
            interval = (latency / f, latency * f) if band is None else \
                (latency * math.exp(float(band[0][j])), latency * math.exp(float(band[1][j])))
            bound = "compute" if comp[j] >= bw[j] else "memory"
            out.append(prediction(q, "roofline", latency, memory, interval,
                                  f"{bound} bound ({comp[j]:.3g} ms compute, {bw[j]:.3g} ms memory traffic) "
                                  f"+ {overhead:.3g} ms launch overhead"))
        return out


__all__ = ["RooflineLayer", "calibrated_offsets", "layer_log_ms", "roofline_arrays"]
