"""The ``roofline`` layer: a compute/memory-bound estimate from the device's peaks.

`hwsel.roofline` (peak FLOP/s and memory bandwidth of the device's `hwsel.specs`
entry) plus a launch overhead per forward and the runtime's own memory; training steps count
three forwards and hold gradients and optimizer states (`hwsel.memory`).
"""

from __future__ import annotations

import functools
import math
from collections.abc import Sequence
from typing import Any

from pytest_hwbench.vocabulary import TRAIN_MODE, bytes_per_element

from ..memory import memory_breakdown
from ..query import Prediction, Query
from .base import DeviceFields
from .rules import TRAIN_FLOPS, launch_overhead_ms, runtime_mb


def roofline_arrays(queries: Sequence[Query]) -> dict[str, Any]:
    """`hwsel.roofline` for many queries at once (arrays: latency_ms, memory_mb, ...).

    Device specs are looked up once per (hardware, device name); the arithmetic is one
    vectorised call of the same function `hwsel.roofline.roofline` uses, so the two never disagree.
    """
    import numpy as np

    from ..roofline import roofline_arrays as arrays
    from ..specs import spec_for

    specs = {key: spec_for(*key) for key in {(q.hardware, q.device_name) for q in queries}}
    col = functools.partial(np.fromiter, dtype=float, count=len(queries))
    nan = float("nan")
    return arrays(
        col(float(q.model.param_count) for q in queries),
        col(float(q.model.flops_per_item) for q in queries),
        col(float(q.model.hidden_size or nan) for q in queries),
        col(float(q.model.num_layers or nan) for q in queries),
        col(float(q.batch_size) for q in queries),
        col(float(bytes_per_element(q.precision)) for q in queries),
        col(specs[q.hardware, q.device_name].tflops(q.precision) for q in queries),
        col(specs[q.hardware, q.device_name].memory_bandwidth_gbs for q in queries),
    )


class RooflineLayer:
    """Answers every query with finite roofline numbers; the interval is (latency / f, latency * f)."""

    name = "roofline"

    def __init__(self, interval_factor: float, where: DeviceFields | None = None) -> None:
        self.interval_factor = interval_factor
        self.where = where or DeviceFields()

    def answer(self, queries: Sequence[Query]) -> list[Prediction | None]:
        f = self.interval_factor
        est = roofline_arrays(queries)
        lat, mem, comp, bw = est["latency_ms"], est["memory_mb"], est["compute_ms"], est["memory_ms"]
        out: list[Prediction | None] = []
        for j, q in enumerate(queries):
            latency, memory = float(lat[j]), float(mem[j])
            if not (math.isfinite(latency) and latency > 0 and math.isfinite(memory)):
                out.append(None)
                continue
            bound = "compute" if comp[j] >= bw[j] else "memory"
            if q.mode == TRAIN_MODE:
                # The roofline models a forward; a training step is about three (forward + backward),
                # and it also holds gradients and optimizer states.
                latency *= TRAIN_FLOPS
                bd = memory_breakdown(q.model, batch_size=q.batch_size, precision=q.precision, mode=TRAIN_MODE)
                memory += bd.gradients_mb + bd.optimizer_mb + bd.activations_mb
            # A roofline alone ignores launch overhead, and would then call a GPU 1000x faster than a
            # CPU for a tiny model at batch 1 (eager GPUs are launch bound there, FACTS.md).
            overhead = launch_overhead_ms(q)
            latency += overhead
            memory += runtime_mb(q.hardware)  # the roofline counts the model only
            out.append(Prediction(q.hardware, latency, q.batch_size / latency * 1e3, memory, "roofline",
                                  (latency / f, latency * f), q.backend, q.precision, q.batch_size, q.mode,
                                  f"{bound} bound ({comp[j]:.3g} ms compute, {bw[j]:.3g} ms memory traffic) "
                                  f"+ {overhead:.3g} ms launch overhead", **self.where(q)))
        return out


__all__ = ["RooflineLayer", "roofline_arrays"]
