"""The runner: one case's loop. Load (cached), prepare inputs, measure, judge, free. Works without
pytest: `Runner().run(BenchCase(...))` gives a `CaseResult`."""

from __future__ import annotations

import gc
import time
import traceback
from collections import OrderedDict
from collections.abc import Callable
from contextlib import AbstractContextManager, nullcontext
from dataclasses import dataclass, field
from typing import Any

from . import torch_device
from .backends.base import LoadedModel
from .case import BenchCase
from .errors import OutOfMemory
from .interference import InterferenceMonitor, ReferenceBaseline, crowded, free_cores, judge, severity
from .models import ModelSpec
from .record import METRIC_FIELDS
from .result import CaseResult
from .scenarios import get_scenario
from .trackers import Measurement, Sample, TimingConfig
from .vocabulary import DEFAULT_NOISE_RETRIES, cache_dir


def is_out_of_memory(exc: BaseException) -> bool:
    """Whether `exc` says a device or the host ran out of memory (torch, CPU allocator, ORT)."""
    # torch.OutOfMemoryError is known by its name: no torch import for a case that never used it
    if isinstance(exc, (MemoryError, OutOfMemory)) or type(exc).__name__ == "OutOfMemoryError":
        return True
    markers = ("out of memory", "can't allocate memory", "not enough memory", "failed to allocate memory")
    return isinstance(exc, RuntimeError) and any(marker in str(exc).lower() for marker in markers)


#: `noise_wait_s` between the tries of a noisy case.
DEFAULT_NOISE_WAIT_S = 0.5
#: Two tries agree when their medians differ by no more than this share (or by twice the larger
#: of their relative IQRs, when that is wider): a further try would tell nothing new.
AGREE_SHARE = 0.05


@dataclass(frozen=True)
class _Try:
    """One measurement of a case, what else the machine did meanwhile, and the verdict."""

    sample: Sample
    threads: int | None
    readings: dict[str, Any] = field(default_factory=dict)
    verdict: str | None = None  # None: measured on another machine, this one's load says nothing
    reason: str = ""

    def agrees_with(self, other: _Try) -> bool:
        """Whether `other` measured the same as this try: medians within `AGREE_SHARE`, or within
        twice the larger relative IQR of the two, on the same thread count."""
        if self.threads != other.threads:
            return False
        mine, theirs = self.sample.latency, other.sample.latency
        a, b = mine.median, theirs.median
        if not (a > 0 and b > 0):
            return False
        spread = max((mine.iqr or 0.0) / a, (theirs.iqr or 0.0) / b)
        return abs(b / a - 1.0) <= max(AGREE_SHARE, 2.0 * spread)


class Runner:
    """Runs cases, keeping the last `cache_size` loaded models for reuse across batch sizes.

    `energy_min_time_s` > 0 measures energy per item on devices with a readable energy counter
    (NVML on NVIDIA GPUs) in a loop of that length after the timed one; 0 turns it off.
    A noisy case (`pytest_hwbench.interference.judge`) is measured again after `noise_wait_s`,
    up to `noise_retries` more times, on the cores left free, until a try is clean or agrees with
    the one before (`_Try.agrees_with`); the cleanest try is kept. Host speed (against
    `reference`) is recorded, never retried. Each timed window runs inside `timed_window(case)`
    (what must not overlap the timing waits on entry, e.g. the pytest plugin's sink writer).
    """

    def __init__(self, timing: TimingConfig | None = None, cache_size: int = 1,
                 energy_min_time_s: float = 1.0, noise_retries: int = DEFAULT_NOISE_RETRIES,
                 noise_wait_s: float = DEFAULT_NOISE_WAIT_S, reference: ReferenceBaseline | None = None,
                 timed_window: Callable[[BenchCase], AbstractContextManager[Any]] | None = None) -> None:
        self.timing = timing or TimingConfig()
        self.cache_size = max(1, cache_size)
        if not energy_min_time_s >= 0:
            raise ValueError(f"energy_min_time_s must be >= 0 seconds, got {energy_min_time_s}")
        self.energy_min_time_s = float(energy_min_time_s)
        if not (isinstance(noise_retries, int) and noise_retries >= 0):
            raise ValueError(f"noise_retries must be an integer >= 0, got {noise_retries!r}")
        if not 0 <= noise_wait_s <= 60:
            raise ValueError(f"noise_wait_s must be between 0 and 60 seconds, got {noise_wait_s!r}")
        self.noise_retries = noise_retries
        self.noise_wait_s = float(noise_wait_s)
        self.reference = reference or ReferenceBaseline(cache_dir("reference") / "baseline.json")
        self.timed_window = timed_window or (lambda case: nullcontext())
        #: load key -> (model, load time in s, device MiB its load allocated)
        self._cache: OrderedDict[tuple[Any, ...], tuple[LoadedModel, float, float]] = OrderedDict()

    def run(self, case: BenchCase, device_index: int = 0) -> CaseResult:
        """Measure one case (the caller checks `case.unavailable()` first). Running out of memory
        raises `OutOfMemory` after every cached model and the device's cache are released."""
        try:
            return self._run(case, device_index)
        except Exception as exc:
            if not is_out_of_memory(exc):
                raise
            detail = f"{type(exc).__name__}: {str(exc)[:1000]}"
            # The frames the error passed through hold the case's tensors in their locals.
            traceback.clear_frames(exc.__traceback__)
        # Freed only here, outside the handler: while an `except` block runs, the interpreter holds
        # the exception (sys.exc_info), its traceback and so every frame it passed through. Raised
        # here, the error has no __context__ chaining the original one either.
        self.close()
        gc.collect()
        torch_device.empty_cache(case.hardware)
        raise OutOfMemory(f"out of memory on {case.hardware} ({detail}); memory freed for the next case")

    def _run(self, case: BenchCase, device_index: int) -> CaseResult:
        spec = case.spec()
        loaded, load_time, resident, cached = self._load(case, spec, device_index)
        # Device memory this case does not own (leftovers, other cached models): recorded in
        # extra and kept out of the case's peak, so a peak is the case's own figure.
        in_use = torch_device.allocated_mb(loaded.device_kind, loaded.device_index)
        foreign = max(0.0, in_use - resident) if in_use is not None else None
        measurement = loaded.measurement(spec.make_inputs(case.batch_size), foreign)
        details = dict(loaded.details or {})
        # record metrics a backend or scenario reports among its details
        metrics = {k: float(details.pop(k)) for k in list(details) if k in METRIC_FIELDS}
        tries: list[_Try] = []
        threads = loaded.threads
        try:
            while True:
                with self.timed_window(case):
                    attempt = self._measure(loaded, measurement, threads, not tries)
                tries.append(attempt)
                if (attempt.verdict in (None, "clean") or len(tries) > self.noise_retries
                        or (len(tries) >= 2 and tries[-2].agrees_with(attempt))):
                    break
                if crowded(attempt.readings, threads):
                    # Busy: wait, then measure again on the cores the others left free (the fewer
                    # of what the timed window and the wait saw). A host that changed speed, or a
                    # slowed GPU, is measured again at once: a wait frees nothing there.
                    with InterferenceMonitor() as waited:
                        time.sleep(self.noise_wait_s)
                    free = min(free_cores(attempt.readings), free_cores(waited.readings))
                    now = loaded.set_threads(min(free, loaded.threads or free))
                    threads = threads if now is None else now
        finally:
            if loaded.threads and threads != loaded.threads:
                loaded.set_threads(loaded.threads)  # the next case starts with the full count
        kept = min(tries, key=lambda t: (t.verdict not in (None, "clean"), severity(t.readings, t.threads)))
        details.update(kept.sample.details)
        metrics.update(kept.sample.metrics)
        metrics.update(measurement.energy(case.batch_size, self.energy_min_time_s, details))
        judged = kept.verdict is not None
        return CaseResult(
            case=case, spec=spec, precision=loaded.precision, device_name=loaded.device_name,
            threads=kept.threads, latency=kept.sample.latency, cold_latency_ms=tries[0].sample.cold_ms,
            load_time_s=load_time, memory=kept.sample.memory, load_cached=cached, details=details,
            metrics=metrics, noise=kept.verdict, noise_reason=kept.reason, tries=len(tries) if judged else None,
            interference=kept.readings if judged else {},
        )

    def _measure(self, loaded: LoadedModel, measurement: Measurement, threads: int | None, first: bool) -> _Try:
        """One measurement (the cold call too when `first`) in the interference monitor, judged."""
        gpu = loaded.device_index if loaded.device_kind == "cuda" else None
        monitor = InterferenceMonitor(gpu, loaded.own_pids(), self.reference)
        sample = measurement.measure(self.timing, monitor, first)
        if not sample.judged:
            return _Try(sample, threads)
        readings = dict(monitor.readings)
        trend = sample.latency.rounds_trend
        if trend is not None:  # whether a change of host speed reached the loop (`judge`)
            readings["rounds_trend"] = round(trend, 3)
        verdict, reason = judge(readings, threads=threads)
        return _Try(sample, threads, readings, verdict, reason)

    def _load(self, case: BenchCase, spec: ModelSpec, device_index: int) -> tuple[LoadedModel, float, float, bool]:
        """(model, load time, device MiB the load allocated, whether it came from the cache)."""
        key = (*case.load_key, device_index)
        if key in self._cache:
            self._cache.move_to_end(key)
            return (*self._cache[key], True)
        while len(self._cache) >= self.cache_size:
            self._evict()
        before = torch_device.allocated_mb(case.hardware, device_index) or 0.0
        start = time.perf_counter()
        options = {"new_tokens": case.new_tokens} if case.new_tokens is not None else {}
        loaded = get_scenario(case.mode).load(spec, case.hardware, case.precision, device_index,
                                              backend=case.backend, **options)
        load_time = time.perf_counter() - start
        resident = max(0.0, (torch_device.allocated_mb(case.hardware, device_index) or 0.0) - before)
        self._cache[key] = (loaded, load_time, resident)
        return loaded, load_time, resident, False

    def _evict(self, collect: bool = True) -> None:
        _, (loaded, _, _) = self._cache.popitem(last=False)
        loaded.close()
        if collect:  # the next case starts with the memory free
            gc.collect()
            torch_device.empty_cache(loaded.device_kind)

    def close(self, collect: bool = True) -> None:
        """Release every cached model; `collect=False` when nothing runs after (session end: a
        collection there costs time per process and frees memory nobody would use)."""
        while self._cache:
            self._evict(collect)


__all__ = ["AGREE_SHARE", "DEFAULT_NOISE_WAIT_S", "Runner", "is_out_of_memory"]
