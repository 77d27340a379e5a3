"""Physical bounds every answer respects (`Floor`, `floor_of`: no memory below the weights' bytes,
no latency below the compute or weight traffic at the device's peaks, nor beyond the harness's
ceiling unless the floor is), and how far a question lies from what a registered model learned
(`Coverage.distance`, `blend_log`).
"""

from __future__ import annotations

import math
from collections.abc import Iterable
from dataclasses import dataclass

from pytest_hwbench import facts
from pytest_hwbench.record import MAX_LATENCY_MS, MIN_LATENCY_MS
from pytest_hwbench.vocabulary import TRAIN_MODE, bytes_per_element

from .query import Query
from .specs import CPU_CEILING, device_key, spec_for

_MIB = 2.0**20
#: Share of the roofline blended in per decade of model size outside the training range.
BLEND_PER_DECADE = 1.0
#: Share of the roofline blended in for a family or device the training data never held.
BLEND_UNSEEN = 0.5


@dataclass(frozen=True)
class Floor:
    """The physical lower bounds of one question on its device."""

    latency_ms: float
    memory_mb: float
    compute_ms: float
    memory_ms: float
    device_spec: str

    def explain(self) -> str:
        """``at least 1.2 ms (compute at h100 peak) and 12.3 MiB (weights)`` in words."""
        which = "compute" if self.compute_ms >= self.memory_ms else "weight traffic"
        return f"at least {self.latency_ms:.4g} ms ({which} at {self.device_spec} peak) and {self.memory_mb:.4g} MiB"


def floor_of(q: Query) -> Floor:
    """The physical lower bounds of `q` (resolved: hardware and device filled in) on its device
    (`hwsel.specs.spec_for`); a CPU whose spec is not known (any CPU known only by name) is bounded
    by `hwsel.specs.CPU_CEILING`, the fastest CPU."""
    spec = spec_for(q.hardware, q.device_name)
    if spec.kind == "cpu" and not spec.known:
        spec = CPU_CEILING
    m = q.model
    nbytes = float(bytes_per_element(q.precision))
    weights = max(0.0, float(m.param_count)) * nbytes
    train = q.mode == TRAIN_MODE
    flops = max(0.0, float(m.flops_per_item)) * q.batch_size * (3.0 if train else 1.0)
    peak = spec.tflops(q.precision) * 1e12
    bandwidth = spec.memory_bandwidth_gbs * 1e9
    compute_ms = flops / peak * 1e3 if peak > 0 else 0.0
    memory_ms = weights * (2.0 if train else 1.0) / bandwidth * 1e3 if bandwidth > 0 else 0.0
    # a generation also holds the key/value cache of its sequence
    kv_cache = (2.0 * int(m.num_layers or 0) * int(m.hidden_size or 0) * int(m.sequence_length or 0) * q.batch_size
                * nbytes if q.mode == "generate" else 0.0)
    memory = (weights * (2.0 if train else 1.0) + kv_cache) / _MIB
    latency = max(compute_ms, memory_ms, MIN_LATENCY_MS)
    return Floor(latency, memory, compute_ms, memory_ms, spec.name)


def within(latency_ms: float, memory_mb: float, floor: Floor, *, slack: float = 1e-9) -> bool:
    """Whether an answer respects `floor` and the ceiling: one day, or the floor where that is longer."""
    return (latency_ms >= floor.latency_ms * (1 - slack) and memory_mb >= floor.memory_mb * (1 - slack)
            and latency_ms <= max(MAX_LATENCY_MS, floor.latency_ms))


@dataclass(frozen=True)
class Coverage:
    """What a model learned from: the size range (parameters), families and devices (identities,
    `hwsel.specs.device_key`) of its rows."""

    min_params: float
    max_params: float
    families: frozenset[str]
    devices: frozenset[str]

    @classmethod
    def from_rows(cls, params: Iterable[float], families: Iterable[str],
                  devices: Iterable[tuple[str, str]]) -> Coverage | None:
        """The coverage of training rows, `devices` being each row's (hardware, device name); None
        when no row has a parameter count."""
        sizes = [float(p) for p in params if p is not None and math.isfinite(float(p)) and float(p) > 0]
        if not sizes:
            return None
        keys = frozenset(key for hw, name in devices if (key := device_key(str(hw), str(name or ""))))
        return cls(min(sizes), max(sizes), frozenset(str(f) for f in families if f), keys)

    def distance(self, param_count: float, family: str | None, hardware: str,
                 device_name: str | None) -> tuple[float, list[str]]:
        """(blend weight in [0, 1], reasons) for a model of `param_count` parameters (not finite:
        unknown) and `family` on `hardware`'s `device_name`: decades of size outside the range, an
        unseen family, an unseen accelerator."""
        reasons: list[str] = []
        weight = 0.0
        p = float(param_count)
        if p > 0:
            decades = max(0.0, math.log10(p / self.max_params), math.log10(self.min_params / p))
            if decades > 0.05:
                weight = max(weight, min(1.0, BLEND_PER_DECADE * decades))
                reasons.append(f"{p / 1e6:.4g}M parameters is {decades:.2g} decade(s) outside the training models' "
                               f"{self.min_params / 1e6:.3g}M-{self.max_params / 1e6:.3g}M")
        family = str(family or "")
        if self.families and family and family not in self.families:
            weight = max(weight, BLEND_UNSEEN)
            reasons.append(f"family {family} not in the training data")
        device = device_key(hardware, device_name)
        # CPU names differ from host to host while the features carry each CPU's peaks: only an
        # unseen accelerator counts as extrapolating.
        if self.devices and device and device not in self.devices and hardware not in facts.target_set(host_cpu=True):
            weight = max(weight, BLEND_UNSEEN)
            reasons.append(f"device {device_name} not in the training data")
        return weight, reasons


def blend_log(value: float, toward: float, weight: float) -> float:
    """`value` moved `weight` of the way towards `toward` in log space (both > 0)."""
    if weight <= 0 or not (value > 0 and toward > 0):
        return value
    return math.exp((1 - weight) * math.log(value) + weight * math.log(toward))


__all__ = ["BLEND_PER_DECADE", "BLEND_UNSEEN", "Coverage", "Floor", "blend_log", "floor_of", "within"]
