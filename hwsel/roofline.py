"""The roofline estimate of one forward: max(compute time, memory time) on a device's peaks.

Compute time is FLOPs over the device's peak FLOP/s at the precision, memory time the bytes moved
(weights once, activations per item) over its memory bandwidth (`hwsel.specs`), for the feature
frame and the roofline layer. Imports numpy, not pandas.
"""

from __future__ import annotations

import numpy as np


def roofline_arrays(params: np.ndarray, flops_item: np.ndarray, hidden: np.ndarray, layers: np.ndarray,
                    batch: np.ndarray, bytes_el: np.ndarray, tflops: np.ndarray,
                    bandwidth_gbs: np.ndarray) -> dict[str, np.ndarray]:
    """Roofline arrays of one forward (``compute_ms``, ``memory_ms``, ``latency_ms`` their maximum,
    ``memory_mb`` the model's weights and peak activations, ``weight_mb``); every argument is a
    float array of the same length.

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
            "memory_mb": (weight_bytes + peak_act) / 2**20, "weight_mb": weight_bytes / 2**20}


__all__ = ["roofline_arrays"]
