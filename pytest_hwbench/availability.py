"""Whether a case can run here, and if not, the skip reason: hardware, runtime, precision,
the mode, the model's known gaps, its input length and memory.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Protocol

from .backends.base import get_backend
from .device_memory import MEMORY_USABLE_SHARE, device_memory_mb, host_memory_mb
from .hardware import HardwareInfo, detect_hardware
from .scenarios import get_scenario

if TYPE_CHECKING:
    from .models import ModelSpec


class CaseFields(Protocol):
    """What this module reads of a case: its names, batch size and input length, and its model
    (a protocol, as `BenchCase` imports this module when asked)."""

    model: str
    backend: str
    hardware: str
    precision: str
    batch_size: int
    mode: str
    input_length: int | None

    def spec(self) -> ModelSpec:
        """The zoo model the case runs."""
        ...


def targets_for(case: CaseFields) -> tuple[str, ...]:
    """The targets whose detection `unavailable` reads for `case`: those its backend reads
    (`Backend.detects`) and the host CPU (memory)."""
    return tuple(dict.fromkeys((*get_backend(case.backend).detects(case.hardware), "cpu")))


def unavailable(case: CaseFields, hw: HardwareInfo | None = None) -> str | None:
    """None when `case` can run here, else the skip reason. `hw` holds at least `targets_for(case)`;
    without it, those targets are probed.

    In order: the backend's reason (hardware, runtime, precision), the mode's, the model's known
    gap on this backend (`ModelSpec.backend_gaps`), an input longer than the model embeds, and
    memory (`memory_shortfall`).
    """
    hw = hw or detect_hardware(targets_for(case))
    reason = get_backend(case.backend).unavailable(case.hardware, case.precision, hw)
    if reason:
        return reason
    scenario = get_scenario(case.mode)
    if case.backend not in scenario.backends:
        return f"{case.mode}: runs on {', '.join(scenario.backends)}, not {case.backend}"
    try:
        spec = case.spec()
    except KeyError:  # an unknown model fails in its run, with the zoo's hint
        return None
    reason = scenario.unavailable(spec, case.backend, case.hardware, case.precision, hw)
    if reason:
        return reason
    gap = spec.backend_gaps.get(case.backend)
    if gap:
        return f"{case.model} on {case.backend}: {gap}"
    if case.input_length is not None:
        # A longer input would be cut to the limit: the case would measure another length than its id says.
        try:
            limit = spec.max_sequence_length
        except Exception:  # an unbuildable config fails in its run, with the error
            limit = None
        if limit is not None and case.input_length > limit:
            return (f"{case.model} takes at most {limit} tokens, not {case.input_length}; "
                    f"give --hwbench-input-lengths up to {limit}")
    return memory_shortfall(case, hw)


def _gib(mb: float) -> str:
    return f"{mb / 1024:.1f} GiB"


def memory_shortfall(case: CaseFields, hw: HardwareInfo) -> str | None:
    """None when `case` fits in memory here, else a skip reason naming the figures.

    Its weights and peak activations (`ModelSpec.estimated_memory_mb`) are checked against
    `MEMORY_USABLE_SHARE` of its device's memory, its fp32 weights (every backend builds them on
    the host first) against that share of host RAM. The quick tier (tiny by contract) and models
    that cannot be built are not estimated.
    """
    try:
        spec = case.spec()
        if spec.tier == "quick" and case.input_length is None:  # a longer input may not be tiny
            return None
        need = spec.estimated_memory_mb(case.precision, case.batch_size)
        build = spec.weights_memory_mb("fp32")
        weights = spec.weights_memory_mb(case.precision)
    except Exception:  # unknown or unbuildable model: the run records the error itself
        return None
    usable = f"{MEMORY_USABLE_SHARE:.0%} usable"
    device = device_memory_mb(case.hardware, hw)
    if device is not None and need > device * MEMORY_USABLE_SHARE:
        return (f"needs ~{_gib(need)} for {case.model} {case.precision} at batch {case.batch_size} "
                f"({_gib(weights)} weights + {_gib(need - weights)} activations), "
                f"{case.hardware} has {_gib(device)} ({usable})")
    host = host_memory_mb(hw)
    if host is not None and build > host * MEMORY_USABLE_SHARE:
        return (f"needs ~{_gib(build)} of host memory to build {case.model} in fp32 before running it at "
                f"{case.precision} on {case.hardware}, cpu has {_gib(host)} ({usable})")
    return None


__all__ = ["CaseFields", "memory_shortfall", "targets_for", "unavailable"]
