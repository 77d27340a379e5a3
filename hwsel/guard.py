"""What `hwsel.predict.Predictor` does to an answer before it leaves: `blend` a registered answer
outside its champion's coverage towards the roofline, and `clamp` every answer to physics."""

from __future__ import annotations

import dataclasses
import math
from collections.abc import Sequence

from pytest_hwbench.record import MAX_LATENCY_MS

from .bounds import Floor, blend_log, within
from .query import Prediction


def blend(p: Prediction, roof: Prediction, weight: float, reasons: Sequence[str],
           band: tuple[float, float] | None = None) -> Prediction:
    """`p` moved `weight` of the way towards the roofline answer `roof` (log space); the interval
    is the blended layer's calibrated `band` (log offsets) around the blend, else both answers'
    intervals (relative to their answers) blended by `weight` as the answers are."""
    latency = blend_log(p.latency_ms, roof.latency_ms, weight)
    memory = blend_log(p.memory_mb, roof.memory_mb, weight)
    if band is not None:
        lo, hi = min(latency * math.exp(band[0]), latency), max(latency * math.exp(band[1]), latency)
    else:  # both answers' bands blended by `weight` (`hwsel.intervals.span_offsets` says why)
        lo = min(latency * blend_log(p.interval[0] / p.latency_ms, roof.interval[0] / roof.latency_ms, weight), latency)
        hi = max(latency * blend_log(p.interval[1] / p.latency_ms, roof.interval[1] / roof.latency_ms, weight), latency)
    note = f"extrapolates ({'; '.join(reasons)}): blended {weight:.0%} towards the roofline"
    return dataclasses.replace(p, latency_ms=latency, throughput=p.batch_size / latency * 1e3, memory_mb=memory,
                               interval=(lo, hi), detail=f"{p.detail}; {note}" if p.detail else note)


def clamp(p: Prediction, floor: Floor) -> Prediction:
    """`p` within `floor` (and the one-day ceiling), saying what was clamped.

    A measurement is what happened: one below the floor means the device's spec is too low, and
    the answer keeps the measured numbers and says so."""
    if within(p.latency_ms, p.memory_mb, floor):
        return p
    if p.source == "measured":
        note = f"below the {floor.device_spec} spec's floor ({floor.explain()}): the spec's peaks are low"
        return dataclasses.replace(p, detail=f"{p.detail}; {note}" if p.detail else note)
    notes = []
    latency, memory = p.latency_ms, p.memory_mb
    if not latency >= floor.latency_ms:
        latency = floor.latency_ms
        notes.append(f"latency {p.latency_ms:.4g} ms raised to the physical floor {latency:.4g} ms "
                     f"({'compute' if floor.compute_ms >= floor.memory_ms else 'weight traffic'} at "
                     f"{floor.device_spec} peak)")
    elif latency > max(MAX_LATENCY_MS, floor.latency_ms):
        latency = max(MAX_LATENCY_MS, floor.latency_ms)
        notes.append(f"latency {p.latency_ms:.4g} ms capped at {latency:.4g} ms (one day, or the physical floor "
                     "where that is longer: no benchmark runs longer)")
    if not memory >= floor.memory_mb:
        memory = floor.memory_mb
        notes.append(f"memory {p.memory_mb:.4g} MiB raised to the weights' {memory:.4g} MiB")
    lo, hi = min(max(p.interval[0], floor.latency_ms), latency), max(min(p.interval[1], MAX_LATENCY_MS), latency)
    if floor.latency_ms > MAX_LATENCY_MS:
        notes.append(f"the physical floor alone is {floor.latency_ms / 86_400_000:.3g} days")
    note = "; ".join(notes)
    return dataclasses.replace(p, latency_ms=latency, memory_mb=memory, interval=(lo, hi),
                               throughput=p.batch_size / latency * 1e3 if latency != p.latency_ms else p.throughput,
                               detail=f"{p.detail}; {note}" if p.detail else note)


__all__ = ["blend", "clamp"]
