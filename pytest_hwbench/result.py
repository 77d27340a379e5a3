"""From what a case measured to its `BenchmarkRecord`: `CaseResult.to_record` for a passed
case, `failed_record` for one that raised."""

from __future__ import annotations

import socket
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

from .models import ModelSpec, achieved_tflops
from .record import BenchmarkRecord
from .trackers import Latency, Memory

if TYPE_CHECKING:
    from .case import BenchCase

#: `CaseResult.forwards_per_iteration` when not given: ask the case's scenario.
FROM_SCENARIO: float = float("-inf")
#: `Latency` statistics recorded as ``latency_ms_<stat>``.
_LATENCY_STATS = ("mean", "median", "min", "max", "stddev", "iqr", "p90", "p95", "p99")


@dataclass(frozen=True)
class CaseResult:
    """What one case measured."""

    case: BenchCase
    spec: ModelSpec
    precision: str
    device_name: str
    threads: int | None
    latency: Latency
    cold_latency_ms: float
    load_time_s: float
    memory: Memory
    load_cached: bool
    details: dict[str, Any] = field(default_factory=dict)
    #: further metrics named as `BenchmarkRecord` fields (compile time, time to first token...)
    metrics: dict[str, float] = field(default_factory=dict)
    #: interference verdict of the kept measurement (`BenchmarkRecord.noise` and the fields after it)
    noise: str | None = None
    noise_reason: str = ""
    tries: int | None = None
    interference: dict[str, Any] = field(default_factory=dict)
    #: FLOPs of one timed iteration, in forward passes (None: no single figure, e.g. generate);
    #: left out, the case's scenario says (`Scenario.forwards_per_iteration`)
    forwards_per_iteration: float | None = FROM_SCENARIO

    @property
    def throughput(self) -> float:
        """Items per second at the median latency."""
        return self.latency.throughput(self.case.batch_size)

    def to_record(self, session_id: str, *, nodeid: str = "", worker: str = "main",
                  cpu_affinity: tuple[int, ...] = (), extra: dict[str, Any] | None = None) -> BenchmarkRecord:
        """A passed `BenchmarkRecord` of this result."""
        arch = self.spec.architecture
        lat = self.latency
        forwards = self.forwards_per_iteration
        if forwards == FROM_SCENARIO:  # None compares unequal
            from .scenarios import get_scenario

            forwards = get_scenario(self.case.mode).forwards_per_iteration
        return BenchmarkRecord(
            **_case_fields(self.case, self.spec, session_id, nodeid, worker, cpu_affinity),
            status="passed",
            device_name=self.device_name,
            precision=self.precision,
            threads=self.threads,
            **{f"latency_ms_{stat}": getattr(lat, stat) for stat in _LATENCY_STATS},
            iterations=lat.iterations,
            throughput_items_per_s=self.throughput,
            load_time_s=self.load_time_s,
            cold_latency_ms=self.cold_latency_ms,
            peak_host_rss_mb=self.memory.peak_host_rss_mb,
            peak_device_memory_mb=self.memory.peak_device_mb,
            achieved_tflops=(achieved_tflops(arch.flops_per_item * forwards,
                                             self.case.batch_size, lat.median / 1e3)
                             if forwards is not None else None),
            timings_ms=lat.values_ms,
            extra={"load_cached": self.load_cached, **self.details, **(extra or {})},
            noise=self.noise,
            noise_reason=self.noise_reason,
            tries=self.tries,
            interference=self.interference,
            **self.metrics,
        )


def _case_fields(case: BenchCase, spec: ModelSpec | None, session_id: str, nodeid: str, worker: str,
                 cpu_affinity: tuple[int, ...]) -> dict[str, Any]:
    """Record fields that describe the case and where it ran (model numbers None if unbuildable)."""
    try:
        arch = spec.architecture if spec is not None else None
        shape = spec.input_shape() if spec is not None else {}
    except Exception:  # the failure being recorded may be this very one
        arch, shape = None, {}
    return {
        "case_id": case.id,
        "session_id": session_id,
        "model": case.model,
        "family": spec.family if spec is not None else "unknown",
        "model_type": arch.model_type if arch else "unknown",
        "backend": case.backend,
        "hardware": case.hardware,
        "mode": case.mode,
        "batch_size": case.batch_size,
        "new_tokens": case.new_tokens,
        "param_count": arch.param_count if arch else None,
        "flops_per_forward": arch.flops_per_item * case.batch_size if arch else None,
        "nodeid": nodeid,
        "host": socket.gethostname(),
        "worker": worker,
        "cpu_affinity": cpu_affinity,
        **shape,
    }


def failed_record(case: BenchCase, session_id: str, error: BaseException | str, *, nodeid: str = "",
                  worker: str = "main", cpu_affinity: tuple[int, ...] = ()) -> BenchmarkRecord:
    """A failed `BenchmarkRecord`: the case, the error, no measurements."""
    try:
        spec: ModelSpec | None = case.spec()
    except KeyError:
        spec = None
    message = error if isinstance(error, str) else f"{type(error).__name__}: {error}"
    return BenchmarkRecord(
        **_case_fields(case, spec, session_id, nodeid, worker, cpu_affinity),
        status="failed",
        device_name="",
        precision=case.precision,
        error=message[:4000],
    )


__all__ = ["CaseResult", "failed_record"]
