"""Latency and memory trackers, and the two ways a prepared call is measured (`LocalCall`,
`RemoteCall`), both giving a `Sample`. Device synchronisation lives here, never in a benchmark body."""

from __future__ import annotations

import math
import time
import warnings
from collections.abc import Callable, Iterator, Mapping, Sequence
from contextlib import AbstractContextManager, contextmanager, suppress
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Protocol, runtime_checkable

from . import torch_device
from .errors import HwbenchWarning
from .facts import timer_kinds
from .torch_device import device_module
from .vocabulary import MAX_ITERATIONS

#: Blocks a timed loop's iterations are cut into; each block's median is one round.
ROUNDS = 5


def round_medians(timings_ms: Sequence[float], rounds: int = ROUNDS) -> list[float]:
    """Medians of `rounds` consecutive, nearly equal blocks of the finite `timings_ms` (fewer: one each)."""
    import numpy as np

    values = np.asarray([t for t in timings_ms if math.isfinite(t)], dtype=float)
    if values.size == 0:
        return []
    return [float(np.median(block)) for block in np.array_split(values, min(rounds, values.size))]


@dataclass(frozen=True)
class Latency:
    """Statistics of per-iteration latencies, in milliseconds."""

    values_ms: tuple[float, ...]
    mean: float
    median: float
    min: float
    max: float
    stddev: float
    iqr: float
    p90: float
    p95: float
    p99: float

    @property
    def iterations(self) -> int:
        """Number of timed iterations."""
        return len(self.values_ms)

    @classmethod
    def from_values(cls, values_ms: Sequence[float]) -> Latency:
        """Statistics of `values_ms` (linear-interpolated percentiles, sample stddev)."""
        if len(values_ms) == 0:
            raise ValueError("Latency.from_values needs at least one value")
        import numpy as np  # numpy only once a case is measured: an unrelated pytest run stays light

        arr = np.asarray(values_ms, dtype=float)
        q1, median, q3, p90, p95, p99 = np.percentile(arr, [25, 50, 75, 90, 95, 99])
        stddev = arr.std(ddof=1) if arr.size > 1 else 0.0
        stats = (arr.mean(), median, arr.min(), arr.max(), stddev, q3 - q1, p90, p95, p99)  # field order
        return cls(tuple(arr.tolist()), *(float(v) for v in stats))

    @property
    def rounds_trend(self) -> float | None:
        """The median of the loop's last round (`round_medians`) over that of its first (above 1:
        it ended slower); None for fewer than `ROUNDS` iterations."""
        if len(self.values_ms) < ROUNDS:
            return None
        rounds = round_medians(self.values_ms)
        return rounds[-1] / rounds[0] if rounds[0] > 0 else None

    def throughput(self, items_per_call: int) -> float:
        """Items per second at the median latency."""
        return items_per_call / (self.median / 1e3) if self.median > 0 else math.inf


@dataclass(frozen=True)
class TimingConfig:
    """How long to warm up and how long to measure."""

    warmup_iterations: int = 3
    min_iterations: int = 10
    min_time_s: float = 1.0
    max_iterations: int = MAX_ITERATIONS

    def __post_init__(self) -> None:
        if self.warmup_iterations < 0:
            raise ValueError(f"warmup_iterations must be >= 0, got {self.warmup_iterations}")
        if self.min_iterations < 1:
            raise ValueError(f"min_iterations must be >= 1, got {self.min_iterations}")
        if not math.isfinite(self.min_time_s) or self.min_time_s < 0:
            raise ValueError(f"min_time_s must be >= 0, got {self.min_time_s}; give a finite number of seconds")
        if self.max_iterations < self.min_iterations:
            raise ValueError(f"max_iterations ({self.max_iterations}) must be >= min_iterations ({self.min_iterations})")


def event_timer_unavailable(kind: str) -> str | None:
    """None when the device events of timer `kind` can time work here, else why not."""
    if kind not in timer_kinds():
        raise ValueError(f"timer kind {kind!r} is not one of {timer_kinds()}")
    if kind == "wall":
        return "the wall timer uses no device events"
    try:
        import torch
    except ImportError:
        return "torch is not installed"
    module = device_module(kind)  # a timer kind is named after the torch module it uses
    if module is None or not hasattr(module, "Event"):
        return f"torch {torch.__version__} has no torch.{kind}.Event"
    if not module.is_available():
        return f"torch.{kind}.is_available() is False"
    return None


@dataclass
class LatencyTracker:
    """Times calls of a zero-argument function on one device: `kind` is ``"wall"`` (perf_counter
    around call + sync) or a device's events (``"cuda"``, also HIP, ``"xpu"``, ``"mps"``) on the
    current stream of device `device_index`. Where the events cannot run or give impossible
    intervals, it warns and times with the wall clock (see `timer_used`)."""

    kind: str = "wall"
    sync: Callable[[], None] = lambda: None
    device_index: int = 0
    #: The timer the last `run` used: `kind`, or ``"wall"`` after a fallback.
    timer_used: str = field(default="wall", init=False)

    def __post_init__(self) -> None:
        if self.kind not in timer_kinds():
            raise ValueError(f"timer kind {self.kind!r} is not one of {timer_kinds()}")

    def _call_ms(self, fn: Callable[[], Any]) -> float:
        start = time.perf_counter()
        fn()
        self.sync()
        return (time.perf_counter() - start) * 1e3

    def time_once(self, fn: Callable[[], Any]) -> float:
        """One synchronised call, in milliseconds (for cold-start latency)."""
        self.sync()
        return self._call_ms(fn)

    def run(self, fn: Callable[[], Any], config: TimingConfig) -> Latency:
        """Warm up, then time iterations until both `min_iterations` and `min_time_s` are met."""
        for _ in range(config.warmup_iterations):
            fn()
        self.sync()
        if self.kind != "wall":
            reason = event_timer_unavailable(self.kind)
            if reason is None:
                values = self._run_events(fn, config)
                if all(math.isfinite(v) and v >= 0 for v in values):
                    self.timer_used = self.kind
                    return Latency.from_values(values)
                # MPS events stamped host-side could come back reversed for short intervals
                # (pytorch/pytorch#196395); a wrong figure is worse than a slower, honest one.
                reason = f"{self.kind} events returned impossible intervals (min {min(values):.4g} ms)"
            warnings.warn(f"{self.kind} timer: {reason}; timing with the wall clock around call + sync",
                          HwbenchWarning, stacklevel=2)
        self.timer_used = "wall"
        return Latency.from_values(_repeat(config, lambda: self._call_ms(fn)))

    def _run_events(self, fn: Callable[[], Any], config: TimingConfig) -> list[float]:
        module = device_module(self.kind)
        # Events go on the stream the work goes to: the current stream of the measured device,
        # not of whichever device is current. MPS has one device and one stream.
        record_args = () if self.kind == "mps" else (module.current_stream(self.device_index),)

        def timed() -> tuple[Any, Any]:
            start, end = module.Event(enable_timing=True), module.Event(enable_timing=True)
            start.record(*record_args)
            fn()
            end.record(*record_args)
            return start, end

        pairs = _repeat(config, timed)  # host time: may end slightly early, the count stays exact
        self.sync()
        if self.kind == "mps":
            # Device-wide sync, not Event.synchronize(): elapsed_time() after the latter could
            # wait forever (pytorch/pytorch#162872).
            module.synchronize()
        else:
            pairs[-1][1].synchronize()
        return [float(s.elapsed_time(e)) for s, e in pairs]


def _repeat(config: TimingConfig, once: Callable[[], Any]) -> list[Any]:
    """`once()`'s results, called until `min_iterations` and `min_time_s` are met (or `max_iterations`)."""
    results = []
    deadline = time.perf_counter() + config.min_time_s
    while len(results) < config.max_iterations:
        results.append(once())
        if len(results) >= config.min_iterations and time.perf_counter() >= deadline:
            break
    return results


def _read_hwm_mb() -> float | None:
    with suppress(OSError):
        for line in Path("/proc/self/status").read_text().splitlines():
            if line.startswith("VmHWM:"):
                return int(line.split()[1]) / 1024
    import resource
    import sys

    peak = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
    return peak / 2**20 if sys.platform == "darwin" else peak / 1024


def _reset_hwm() -> None:
    # Writing 5 resets the peak-RSS high-water mark (Linux >= 4.0, proc(5) clear_refs).
    with suppress(OSError):
        Path("/proc/self/clear_refs").write_text("5")


@dataclass(frozen=True)
class Memory:
    """Peak host RSS and peak device memory during a tracked block, in MiB; `peak_device_mb` is the
    block's own (`own_peak_mb`: less `device_in_use_at_start_mb`), None where it cannot be told."""

    peak_host_rss_mb: float | None
    peak_device_mb: float | None
    device_in_use_at_start_mb: float | None = None


def own_peak_mb(peak_mb: float | None, in_use_at_start_mb: float | None) -> float | None:
    """`peak_mb` less what others held at the block's start; None when below it (not the block's own)."""
    if peak_mb is None or not in_use_at_start_mb:
        return peak_mb
    return peak_mb - in_use_at_start_mb if peak_mb >= in_use_at_start_mb else None


@dataclass
class MemoryTracker:
    """Tracks peak host RSS (process high-water mark) and peak device memory of one device;
    `foreign_mb`, device memory in use at the start that the tracked work does not own (a failed
    case's leftovers, another model), is reported apart and not counted in the peak."""

    device_kind: str = "cpu"
    device_index: int = 0
    foreign_mb: float | None = None
    result: Memory | None = field(default=None, init=False)

    @contextmanager
    def track(self) -> Iterator[MemoryTracker]:
        """Measure within the block; read `self.result` afterwards."""
        torch_device.reset_peak_mb(self.device_kind, self.device_index)
        _reset_hwm()
        try:
            yield self
        finally:
            device_mb = torch_device.peak_mb(self.device_kind, self.device_index)
            self.result = Memory(_read_hwm_mb(), own_peak_mb(device_mb, self.foreign_mb), self.foreign_mb)


@dataclass(frozen=True)
class RemoteMeasurement:
    """What a call timed outside this process's loop measured (`MeasuredElsewhere`):
    `cold_latency_ms` defaults to the first timing, `details` go into the record's extra;
    `on_this_host` says whether the measuring process shares this machine (a browser page: its
    interference is judged) or not (a cloud device: the record carries no noise verdict)."""

    timings_ms: tuple[float, ...]
    cold_latency_ms: float | None = None
    peak_device_memory_mb: float | None = None
    details: Mapping[str, Any] = field(default_factory=dict)
    on_this_host: bool = True


@runtime_checkable
class MeasuredElsewhere(Protocol):
    """A prepared call that another process or machine times (a browser page, a cloud device)."""

    def __call__(self) -> Any: ...

    def measure_remote(self, timing: TimingConfig) -> RemoteMeasurement:
        """Measure under `timing` (or report what was measured already) and say where."""
        ...


@runtime_checkable
class MeasuresMore(Protocol):
    """A prepared call that measures more than its own latency (e.g. time to first token)."""

    def __call__(self) -> Any: ...

    def measure_more(self, tracker: LatencyTracker, timing: TimingConfig, latency: Latency) -> dict[str, float]:
        """Metrics named as `BenchmarkRecord` fields, measured after the timed loop."""
        ...


@dataclass(frozen=True)
class Sample:
    """One measurement of a prepared call: `cold_ms` is the first call's latency (NaN where none
    was made), `metrics` further record fields, `details` the record's extra; `judged` says whether
    this machine's load bears on the figures (False for a call measured on another machine)."""

    latency: Latency
    memory: Memory
    cold_ms: float
    metrics: Mapping[str, float] = field(default_factory=dict)
    details: Mapping[str, Any] = field(default_factory=dict)
    judged: bool = True


class Measurement(Protocol):
    """How one prepared call is measured (`LocalCall`, `RemoteCall` or a third party's): the runner
    calls `measure` once per try, then `energy` once, after the try it keeps."""

    def measure(self, timing: TimingConfig, window: AbstractContextManager[Any], first: bool) -> Sample:
        """One measurement under `timing` in `window` (the interference monitor); `first`: cold call too."""
        ...

    def energy(self, batch_size: int, min_time_s: float, details: dict[str, Any]) -> dict[str, float]:
        """Energy metrics where the device has a readable counter (`min_time_s` > 0), else the reason in
        ``details["energy"]`` (or nothing)."""
        ...


@dataclass
class LocalCall:
    """A call timed in this process: the cold call (first try), the timed loop under a
    `LatencyTracker` of `timer`, memory under a `MemoryTracker`, then `more` (the call's
    `MeasuresMore.measure_more`, if given) with the same tracker. `foreign_mb` (see
    `MemoryTracker`) and a timer that fell back to the wall clock go into the sample's details.
    """

    call: Callable[[], Any]
    sync: Callable[[], None]
    timer: str = "wall"
    device_kind: str = "cpu"
    device_index: int = 0
    foreign_mb: float | None = None
    more: Callable[[LatencyTracker, TimingConfig, Latency], Mapping[str, float]] | None = None

    def __post_init__(self) -> None:
        self.tracker = LatencyTracker(self.timer, self.sync, self.device_index)

    def measure(self, timing: TimingConfig, window: AbstractContextManager[Any], first: bool) -> Sample:
        memory = MemoryTracker(self.device_kind, self.device_index, foreign_mb=self.foreign_mb)
        with memory.track(), window:
            cold = self.tracker.time_once(self.call) if first else float("nan")
            latency = self.tracker.run(self.call, timing)
            more = self.more(self.tracker, timing, latency) if self.more is not None else {}
        assert memory.result is not None
        details: dict[str, Any] = {}
        if self.foreign_mb is not None:
            details["device_memory_in_use_at_start_mb"] = round(self.foreign_mb, 1)
        if self.tracker.timer_used != self.timer:  # the device's events could not run: wall clock
            details["timer"] = self.tracker.timer_used
        return Sample(latency, memory.result, cold, dict(more), details)

    def energy(self, batch_size: int, min_time_s: float, details: dict[str, Any]) -> dict[str, float]:
        """Energy per item, in a loop of its own, on accelerators with a readable counter (NVML)."""
        if self.device_kind == "cpu" or min_time_s == 0:
            return {}
        from .energy import EnergyUnavailable, measure_energy

        try:
            energy = measure_energy(self.call, self.sync, batch_size=batch_size, device_kind=self.device_kind,
                                    device_index=self.device_index, min_time_s=min_time_s)
        except EnergyUnavailable as exc:  # no readable counter here, or it did not advance
            details["energy"] = str(exc)
            return {}
        details["energy_method"] = energy.method
        return {"energy_j_per_item": energy.joules_per_item, "avg_power_w": energy.avg_power_w}


@dataclass
class RemoteCall:
    """A call that another process or machine times (`MeasuredElsewhere`); no energy is measured."""

    call: MeasuredElsewhere

    def measure(self, timing: TimingConfig, window: AbstractContextManager[Any], first: bool) -> Sample:
        with window:
            remote = self.call.measure_remote(timing)
        latency = Latency.from_values(remote.timings_ms)
        cold = remote.cold_latency_ms if remote.cold_latency_ms is not None else latency.values_ms[0]
        return Sample(latency, Memory(None, remote.peak_device_memory_mb), float(cold),
                      details=dict(remote.details), judged=remote.on_this_host)

    def energy(self, batch_size: int, min_time_s: float, details: dict[str, Any]) -> dict[str, float]:
        return {}


__all__ = ["ROUNDS", "Latency", "LatencyTracker", "LocalCall", "MeasuredElsewhere", "Measurement",
           "MeasuresMore", "Memory", "MemoryTracker", "RemoteCall", "RemoteMeasurement", "Sample",
           "TimingConfig", "event_timer_unavailable", "own_peak_mb", "round_medians"]
