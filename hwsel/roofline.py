"""The roofline estimate of one forward: max(compute time, memory time) on a device's peaks.

Compute time is FLOPs over the device's peak FLOP/s at the precision, memory time the bytes moved
(weights once, activations per item) over its memory bandwidth (`hwsel.specs`). `roofline` answers
for one model and case; `roofline_arrays` is the same arithmetic over arrays, for the feature
frame and the roofline layer. Imports numpy, not pandas.
"""

from __future__ import annotations

from dataclasses import dataclass, fields

import numpy as np

from pytest_hwbench.vocabulary import bytes_per_element

from .resolution import ModelInfo
from .specs import spec_for


@dataclass(frozen=True)
class RooflineEstimate:
    """A roofline estimate of one forward pass: `latency_ms` is max(`compute_ms`, `memory_ms`),
    `throughput` items/s at that latency, `memory_mb` the model's own weights and peak activations
    (a process adds its runtime on top)."""

    latency_ms: float
    throughput: float
    memory_mb: float
    compute_ms: float
    memory_ms: float


def roofline_arrays(params: np.ndarray, flops_item: np.ndarray, hidden: np.ndarray, layers: np.ndarray,
                    batch: np.ndarray, bytes_el: np.ndarray, tflops: np.ndarray,
                    bandwidth_gbs: np.ndarray) -> dict[str, np.ndarray]:
    """Vectorised roofline; every argument is a float array of the same length.

    Activation traffic per item is estimated from FLOPs: a transformer layer does about 24 h^2
    FLOPs per token and reads/writes about 10 h activations per token, so activation elements
    ~ 0.4 * FLOPs / h. The peak activation footprint is about four layers' worth of that.
    """
    h = np.where(np.isfinite(hidden) & (hidden > 0), hidden, 256.0)
    n_layers = np.where(np.isfinite(layers) & (layers > 0), layers, 12.0)
    act_bytes_item = 0.4 * flops_item / h * bytes_el
    weight_bytes = params * bytes_el
    compute_ms = flops_item * batch / (tflops * 1e12) * 1e3
    memory_ms = (weight_bytes + batch * act_bytes_item) / (bandwidth_gbs * 1e9) * 1e3
    latency_ms = np.maximum(compute_ms, memory_ms)
    peak_act = batch * act_bytes_item * np.minimum(4.0, n_layers) / n_layers
    return {"compute_ms": compute_ms, "memory_ms": memory_ms, "latency_ms": latency_ms,
            "throughput": batch / latency_ms * 1e3, "memory_mb": (weight_bytes + peak_act) / 2**20,
            "weight_mb": weight_bytes / 2**20}


def roofline(model: ModelInfo, *, hardware: str, precision: str, batch_size: int,
             device_name: str | None = None) -> RooflineEstimate:
    """Roofline estimate of one forward over `batch_size` items on a device (see `RooflineEstimate`)."""
    if batch_size < 1:
        raise ValueError(f"batch_size must be >= 1, got {batch_size}")
    spec = spec_for(hardware, device_name)
    values = (model.param_count, model.flops_per_item, model.hidden_size or np.nan, model.num_layers or np.nan,
              batch_size, bytes_per_element(precision), spec.tflops(precision), spec.memory_bandwidth_gbs)
    out = roofline_arrays(*(np.array([float(v)]) for v in values))
    return RooflineEstimate(**{f.name: float(out[f.name][0]) for f in fields(RooflineEstimate)})


__all__ = ["RooflineEstimate", "roofline", "roofline_arrays"]
