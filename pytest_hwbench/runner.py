"""Run one benchmark case: load (cached), prepare inputs, cold call, timed loop, memory.

Works without pytest: `Runner().run(BenchCase(...))` from a script or notebook gives a
`CaseResult`; `CaseResult.to_record(...)` turns it into a `BenchmarkRecord`.
"""

from __future__ import annotations

import dataclasses
import gc
import socket
import time
import traceback
from collections import OrderedDict
from dataclasses import dataclass, field
from typing import Any

from .backends.base import LoadedModel, get_backend
from .errors import OutOfMemory
from .hardware import HardwareInfo, detect_hardware
from .interference import InterferenceMonitor, ReferenceBaseline, free_cores, judge, severity
from .models import ModelSpec, achieved_tflops, get_model
from .record import METRIC_FIELDS, BenchmarkRecord
from .scenarios import DEFAULT_MODE, get_scenario, registered_modes
from .trackers import Latency, LatencyTracker, Memory, MemoryTracker, TimingConfig, device_allocated_mb
from .vocabulary import check_precision, normalise_mode

#: Tokens a generate case makes per sequence when none is given.
DEFAULT_NEW_TOKENS = 32


def takes_new_tokens(mode: str) -> bool:
    """Whether cases of `mode` make tokens, so carry `BenchCase.new_tokens` (its scenario's
    ``options`` name ``new_tokens``)."""
    return "new_tokens" in getattr(get_scenario(mode), "options", ())


@dataclass(frozen=True)
class BenchCase:
    """One point of the benchmark grid.

    `new_tokens` (generate mode only, default `DEFAULT_NEW_TOKENS`) is the number of tokens each
    sequence generates; `input_length` replaces the model's sequence length (the prompt length
    in generate mode) for text inputs.
    """

    model: str
    backend: str
    hardware: str
    precision: str
    batch_size: int
    mode: str = DEFAULT_MODE
    new_tokens: int | None = None
    input_length: int | None = None

    def __post_init__(self) -> None:
        if self.batch_size < 1:
            raise ValueError(f"batch_size must be >= 1, got {self.batch_size}")
        object.__setattr__(self, "precision", check_precision(self.precision))
        object.__setattr__(self, "mode", normalise_mode(self.mode))  # "training" is "train"
        modes = registered_modes()
        if self.mode not in modes:
            raise ValueError(f"mode {self.mode!r} is not one of {', '.join(modes)}")
        if takes_new_tokens(self.mode):
            if self.new_tokens is None:
                object.__setattr__(self, "new_tokens", DEFAULT_NEW_TOKENS)
            elif self.new_tokens < 1:
                raise ValueError(f"new_tokens must be >= 1, got {self.new_tokens}")
        elif self.new_tokens is not None:
            raise ValueError(f"new_tokens applies to modes that generate tokens, not {self.mode!r}")
        if self.input_length is not None and self.input_length < 1:
            raise ValueError(f"input_length must be >= 1, got {self.input_length}")

    @property
    def id(self) -> str:
        """Readable case id, e.g. ``bert-base-cpu-torch-fp32-b8``, ``gpt2-cpu-torch-fp32-b1-generate-out32``."""
        base = f"{self.model}-{self.hardware}-{self.backend}-{self.precision}-b{self.batch_size}"
        if self.mode != DEFAULT_MODE:
            base += f"-{self.mode}"
        if self.input_length is not None:
            base += f"-in{self.input_length}"
        if self.new_tokens is not None:
            base += f"-out{self.new_tokens}"
        return base

    @property
    def load_key(self) -> tuple[str, ...]:
        """Cases with the same key share one loaded model (a generate model is loaded for its
        number of new tokens, so that number is part of the key)."""
        key = (self.model, self.backend, self.hardware, self.precision, self.mode)
        return key if self.new_tokens is None else (*key, f"out{self.new_tokens}")

    def spec(self) -> ModelSpec:
        """The zoo model, with `input_length` as its sequence length when given."""
        spec = get_model(self.model)
        if self.input_length is not None and self.input_length != spec.sequence_length:
            spec = dataclasses.replace(spec, sequence_length=self.input_length)
        return spec

    def unavailable(self, hw: HardwareInfo | None = None) -> str | None:
        """None when this case can run here, else the skip reason.

        The backend's reason comes first (hardware, runtime, precision); then the model's known
        gap on this backend (`ModelSpec.backend_gaps`); then memory: a case whose
        `ModelSpec.estimated_memory_mb` does not fit its device is skipped before it is built
        (`memory_shortfall`).
        """
        hw = hw or detect_hardware()
        reason = get_backend(self.backend).unavailable(self.hardware, self.precision, hw)
        if reason:
            return reason
        try:
            spec: ModelSpec | None = self.spec()
        except KeyError:  # an unknown model fails in its run, with the zoo's hint
            spec = None
        scenario = get_scenario(self.mode)
        if self.backend not in scenario.backends:
            return f"{self.mode}: runs on {', '.join(scenario.backends)}, not {self.backend}"
        if spec is not None:
            reason = scenario.unavailable(spec, self.backend, self.hardware, self.precision, hw)
            if reason:
                return reason
        gap = spec.backend_gaps.get(self.backend) if spec is not None else None
        if gap:
            return f"{self.model} on {self.backend}: {gap}"
        return (self._input_length_reason(spec) if spec is not None else None) or memory_shortfall(self, hw)

    def _input_length_reason(self, spec: ModelSpec) -> str | None:
        """Why `input_length` cannot run as asked: the model embeds fewer positions. The inputs
        would be cut to the limit, and the case would measure another length than its id says
        (issue 18, item 9)."""
        if self.input_length is None:
            return None
        try:
            limit = spec.max_sequence_length
        except Exception:  # an unbuildable config fails in its run, with the error
            return None
        if limit is not None and self.input_length > limit:
            return (f"{self.model} takes at most {limit} tokens, not {self.input_length}; "
                    f"give --hwbench-input-lengths up to {limit}")
        return None


#: Share of a device's memory a case may plan to use: the OS, the Python process, the runtime
#: (CUDA context, allocator slack) and the estimate's own error need the rest.
MEMORY_USABLE_SHARE = 0.9


def _device_memory_mb(hardware: str, hw: HardwareInfo) -> float | None:
    """Memory of the device a case on `hardware` runs on: host RAM for the CPU, the smallest
    device of an accelerator target; None where detection gives no figure (mps, OpenVINO
    devices, ...), and then only the host check applies."""
    if hardware == "cpu":
        return _host_memory_mb(hw)
    target = hw.targets.get(hardware)
    if target is None or not target.available:
        return None
    sizes = [d.memory_mb for d in target.devices if d.memory_mb]
    return float(min(sizes)) if sizes else None


def _host_memory_mb(hw: HardwareInfo) -> float | None:
    cpu = hw.targets.get("cpu")
    memory = cpu.details.get("memory_mb") if cpu is not None else None
    return float(memory) if memory else None


def _gib(mb: float) -> str:
    return f"{mb / 1024:.1f} GiB"


def memory_shortfall(case: BenchCase, hw: HardwareInfo) -> str | None:
    """None when `case` fits in memory here, else a skip reason naming the figures.

    Two checks, each against `MEMORY_USABLE_SHARE` of the memory detection reports:
    - the device: weights at the case's precision plus peak activations at its batch size
      (`ModelSpec.estimated_memory_mb`) against host RAM (cpu) or the accelerator's memory;
    - the host: every backend builds the seeded model in fp32 on the host before it casts,
      moves or exports it, so fp32 weights must fit in host RAM whatever the target.
    The quick tier is tiny by contract (CI smoke on any machine) and is not estimated: the
    estimate builds the model on the meta device, which imports torch and transformers at
    collection. A model that cannot be built or measured is not skipped here: its run fails
    with the error.
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
    device = _device_memory_mb(case.hardware, hw)
    if device is not None and need > device * MEMORY_USABLE_SHARE:
        return (f"needs ~{_gib(need)} for {case.model} {case.precision} at batch {case.batch_size} "
                f"({_gib(weights)} weights + {_gib(need - weights)} activations), "
                f"{case.hardware} has {_gib(device)} ({usable})")
    host = _host_memory_mb(hw)
    if host is not None and build > host * MEMORY_USABLE_SHARE:
        return (f"needs ~{_gib(build)} of host memory to build {case.model} in fp32 before running it at "
                f"{case.precision} on {case.hardware}, cpu has {_gib(host)} ({usable})")
    return None


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

    @property
    def throughput(self) -> float:
        """Items per second at the median latency."""
        return self.latency.throughput(self.case.batch_size)

    def to_record(self, session_id: str, *, nodeid: str = "", worker: str = "main",
                  cpu_affinity: tuple[int, ...] = (), extra: dict[str, Any] | None = None) -> BenchmarkRecord:
        """A passed `BenchmarkRecord` of this result."""
        arch = self.spec.architecture
        lat = self.latency
        # FLOPs one timed iteration does, in forward passes (None: no single figure, e.g. generate)
        forwards = getattr(get_scenario(self.case.mode), "forwards_per_iteration", None)
        return BenchmarkRecord(
            **_case_fields(self.case, self.spec, session_id),
            status="passed",
            device_name=self.device_name,
            precision=self.precision,
            threads=self.threads,
            latency_ms_mean=lat.mean,
            latency_ms_median=lat.median,
            latency_ms_min=lat.min,
            latency_ms_max=lat.max,
            latency_ms_stddev=lat.stddev,
            latency_ms_iqr=lat.iqr,
            latency_ms_p90=lat.p90,
            latency_ms_p95=lat.p95,
            latency_ms_p99=lat.p99,
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
            nodeid=nodeid,
            host=socket.gethostname(),
            worker=worker,
            cpu_affinity=cpu_affinity,
            extra={"load_cached": self.load_cached, **self.details, **(extra or {})},
            noise=self.noise,
            noise_reason=self.noise_reason,
            tries=self.tries,
            interference=self.interference,
            **self.metrics,
        )


def _case_fields(case: BenchCase, spec: ModelSpec | None, session_id: str) -> dict[str, Any]:
    """Record fields that describe the case; model numbers are None when the model cannot be built."""
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
        **_case_fields(case, spec, session_id),
        status="failed",
        device_name="",
        precision=case.precision,
        error=message[:4000],
        nodeid=nodeid,
        host=socket.gethostname(),
        worker=worker,
        cpu_affinity=cpu_affinity,
    )


def is_out_of_memory(exc: BaseException) -> bool:
    """Whether `exc` says a device or the host ran out of memory (torch, CPU allocator, ORT)."""
    if isinstance(exc, (MemoryError, OutOfMemory)):
        return True
    if type(exc).__name__ == "OutOfMemoryError":  # torch.OutOfMemoryError, without importing torch
        return True
    text = str(exc).lower()
    return isinstance(exc, RuntimeError) and any(
        marker in text for marker in ("out of memory", "can't allocate memory", "not enough memory",
                                      "failed to allocate memory")
    )


#: Record metrics a backend or scenario may report through `LoadedModel.details`.
_DETAIL_METRICS = frozenset(METRIC_FIELDS)


#: Measurements of a noisy case after the first, by default; `noise_wait_s` between them.
DEFAULT_NOISE_RETRIES = 2
DEFAULT_NOISE_WAIT_S = 0.5


@dataclass(frozen=True)
class _Try:
    """One measurement of a case and what else the machine did meanwhile."""

    latency: Latency
    memory: Memory
    metrics: dict[str, float]
    cold: float | None
    readings: dict[str, Any]
    verdict: str
    reason: str
    threads: int | None


@dataclass(frozen=True)
class _Noise:
    """The verdict a result carries (all None for a case measured elsewhere)."""

    verdict: str | None = None
    reason: str = ""
    tries: int | None = None
    readings: dict[str, Any] = field(default_factory=dict)


class Runner:
    """Runs cases, keeping the last `cache_size` loaded models for reuse across batch sizes.

    `energy_min_time_s` > 0 measures energy per item on devices with a readable energy counter
    (NVML on NVIDIA GPUs) in a loop of that length after the timed one; 0 turns it off.
    A case whose measurement was noisy (`pytest_hwbench.interference.judge`: other processes on
    its cores, stolen time, a reference kernel slower than `reference` says this host runs it, a
    throttled or shared GPU) is measured again after `noise_wait_s`,
    up to `noise_retries` more times, with its intra-op threads sized to the cores left free
    where the runtime can change them; the cleanest try is kept and the result says how many ran.
    """

    def __init__(self, timing: TimingConfig | None = None, cache_size: int = 1,
                 energy_min_time_s: float = 1.0, noise_retries: int = DEFAULT_NOISE_RETRIES,
                 noise_wait_s: float = DEFAULT_NOISE_WAIT_S, reference: ReferenceBaseline | None = None) -> None:
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
        #: the fastest this host has run the reference kernel (`pytest_hwbench.interference`)
        self.reference = reference if reference is not None else ReferenceBaseline.default()
        #: load key -> (model, load time in s, device MiB its load allocated)
        self._cache: OrderedDict[tuple[Any, ...], tuple[LoadedModel, float, float]] = OrderedDict()

    def _load(self, case: BenchCase, spec: ModelSpec, device_index: int) -> tuple[LoadedModel, float, float, bool]:
        """(model, load time, device MiB the load allocated, whether it came from the cache)."""
        key = (*case.load_key, device_index)
        if key in self._cache:
            self._cache.move_to_end(key)
            loaded, load_time, resident = self._cache[key]
            return loaded, load_time, resident, True
        while len(self._cache) >= self.cache_size:
            self._evict()
        before = device_allocated_mb(case.hardware, device_index) or 0.0
        start = time.perf_counter()
        options = {"new_tokens": case.new_tokens} if case.new_tokens is not None else {}
        loaded = get_scenario(case.mode).load(spec, case.hardware, case.precision, device_index,
                                              backend=case.backend, **options)
        load_time = time.perf_counter() - start
        resident = max(0.0, (device_allocated_mb(case.hardware, device_index) or 0.0) - before)
        self._cache[key] = (loaded, load_time, resident)
        return loaded, load_time, resident, False

    def _evict(self) -> None:
        _, (loaded, _, _) = self._cache.popitem(last=False)
        loaded.close()
        gc.collect()
        _empty_device_cache(loaded.device_kind)

    def close(self) -> None:
        """Release every cached model."""
        while self._cache:
            self._evict()

    def run(self, case: BenchCase, device_index: int = 0) -> CaseResult:
        """Measure one case (the caller checks `case.unavailable()` first).

        Running out of memory raises `OutOfMemory` after every cached model is released and the
        device's cache emptied, so the next case starts with the memory free.
        """
        try:
            return self._run(case, device_index)
        except Exception as exc:
            if not is_out_of_memory(exc):
                raise
            detail = f"{type(exc).__name__}: {str(exc)[:1000]}"
            # The frames the error passed through hold the case's tensors in their locals.
            traceback.clear_frames(exc.__traceback__)
        # Freed only here, outside the handler: while an `except` block runs, the interpreter
        # itself holds the exception being handled (sys.exc_info), its traceback and so every
        # frame it passed through; memory freed there stayed allocated (issue 9, part 1). The
        # error is raised here too, so it has no __context__ chaining the original one.
        self.close()
        gc.collect()
        _empty_device_cache(case.hardware)
        raise OutOfMemory(f"out of memory on {case.hardware} ({detail}); memory freed for the next case")

    def _run(self, case: BenchCase, device_index: int) -> CaseResult:
        spec = case.spec()
        loaded, load_time, resident, cached = self._load(case, spec, device_index)
        # Device memory this case does not own (leftovers, other cached models): recorded in
        # extra and kept out of the case's peak, so a peak is the case's own figure.
        in_use = device_allocated_mb(loaded.device_kind, loaded.device_index)
        foreign = max(0.0, in_use - resident) if in_use is not None else None
        call = loaded.prepare(spec.make_inputs(case.batch_size))
        details = dict(loaded.details or {})
        metrics = {k: float(details.pop(k)) for k in list(details) if k in _DETAIL_METRICS}
        if loaded.timer == "remote":
            # Measured outside this process: on a remote device (Qualcomm AI Hub), prepare() ran the
            # profile job and left the per-iteration times and peak memory in details; a call with
            # `measure_remote(timing)` (a browser page) measures now, under this run's timing.
            measure_remote = getattr(call, "measure_remote", None)
            noise = _Noise()  # measured on another machine: this one's load says nothing of it
            if measure_remote is not None:  # on this machine, in another process: judged as ours
                measured, noise = self._measure_elsewhere(measure_remote, loaded)
                details.update(measured)
            remote = details.pop("remote_timings_ms", None)
            if not remote:
                raise RuntimeError(f"{case.backend}: timer 'remote' but no details['remote_timings_ms']")
            latency = Latency.from_values(remote)
            cold = float(details.pop("remote_cold_latency_ms", latency.values_ms[0]))
            memory_result = Memory(None, details.pop("remote_peak_device_memory_mb", None))
            threads = loaded.threads
        else:
            tracker = LatencyTracker(loaded.timer, loaded.sync, loaded.device_index)
            cold = None
            tries: list[_Try] = []
            threads = loaded.threads
            try:
                while True:
                    attempt = self._measure(loaded, call, tracker, foreign, cold is None)
                    cold = attempt.cold if cold is None else cold
                    tries.append(dataclasses.replace(attempt, threads=threads))
                    if attempt.verdict == "clean" or len(tries) > self.noise_retries:
                        break
                    # Busy: wait, then measure again on the cores the others left free (the fewer
                    # of what the timed window and the wait saw).
                    free = min(free_cores(attempt.readings), free_cores(self._wait(self.noise_wait_s)))
                    if loaded.set_threads is not None:
                        threads = loaded.set_threads(min(free, loaded.threads or free))
            finally:
                if loaded.set_threads is not None and loaded.threads and threads != loaded.threads:
                    loaded.set_threads(loaded.threads)  # the next case starts with the full count
            kept = min(tries, key=lambda t: (t.verdict != "clean", severity(t.readings, t.threads)))
            latency, memory_result, threads = kept.latency, kept.memory, kept.threads
            metrics.update(kept.metrics)
            noise = _Noise(kept.verdict, kept.reason, len(tries), kept.readings)
            if foreign is not None:
                details["device_memory_in_use_at_start_mb"] = round(foreign, 1)
            if tracker.timer_used != loaded.timer:  # the device's events could not run: wall clock
                details["timer"] = tracker.timer_used
            metrics.update(self._energy(loaded, call, case, details))
            assert cold is not None
        return CaseResult(
            case=case,
            spec=spec,
            precision=loaded.precision,
            device_name=loaded.device_name,
            threads=threads,
            latency=latency,
            cold_latency_ms=cold,
            load_time_s=load_time,
            memory=memory_result,
            load_cached=cached,
            details=details,
            metrics=metrics,
            noise=noise.verdict,
            noise_reason=noise.reason,
            tries=noise.tries,
            interference=noise.readings,
        )

    def _measure(self, loaded: LoadedModel, call: Any, tracker: LatencyTracker, foreign: float | None,
                 cold_call: bool) -> _Try:
        """One measurement of `call` (the cold call first when `cold_call`), bracketed by the
        interference monitor, judged."""
        gpu = loaded.device_index if loaded.device_kind == "cuda" else None
        memory = MemoryTracker(loaded.device_kind, loaded.device_index, foreign_mb=foreign)
        metrics: dict[str, float] = {}
        with memory.track(), InterferenceMonitor(gpu, loaded.own_pids(), self.reference) as monitor:
            cold = tracker.time_once(call) if cold_call else None
            latency = tracker.run(call, self.timing)
            more = getattr(call, "measure_more", None)
            if more is not None:
                metrics.update(more(tracker, self.timing, latency))
        assert memory.result is not None
        verdict, reason = judge(monitor.readings)
        return _Try(latency, memory.result, metrics, cold, monitor.readings, verdict, reason, loaded.threads)

    def _measure_elsewhere(self, measure: Any, loaded: LoadedModel) -> tuple[dict[str, Any], _Noise]:
        """`measure(timing)` (another process on this machine times the model, e.g. a browser
        page) bracketed by the interference monitor, retried like a local measurement when
        noisy; the details of the cleanest try and its verdict."""
        tries: list[tuple[float, dict[str, Any], _Noise]] = []
        while True:
            with InterferenceMonitor(None, loaded.own_pids(), self.reference) as monitor:
                measured = measure(self.timing)
            verdict, reason = judge(monitor.readings)
            tries.append((severity(monitor.readings, loaded.threads),
                          measured, _Noise(verdict, reason, 0, monitor.readings)))
            if verdict == "clean" or len(tries) > self.noise_retries:
                break
            self._wait(self.noise_wait_s)
        _, measured, noise = min(tries, key=lambda t: (t[2].verdict != "clean", t[0]))
        return measured, dataclasses.replace(noise, tries=len(tries))

    @staticmethod
    def _wait(seconds: float) -> dict[str, Any]:
        """Sleep `seconds`, reading what the other processes do meanwhile."""
        with InterferenceMonitor() as monitor:
            time.sleep(seconds)
        return monitor.readings


    def _energy(self, loaded: LoadedModel, call: Any, case: BenchCase, details: dict[str, Any]) -> dict[str, float]:
        """Energy per item where the device has a readable counter (NVML); on accelerators that
        cannot, ``details["energy"]`` says why. Measured after the timed loop, in a loop of its own."""
        if loaded.device_kind == "cpu" or self.energy_min_time_s == 0:
            return {}
        from .energy import EnergyUnavailable, energy_unavailable, measure_energy

        reason = energy_unavailable(loaded.device_kind, loaded.device_index)
        if reason:
            details["energy"] = reason
            return {}
        try:
            energy = measure_energy(call, loaded.sync, batch_size=case.batch_size, device_kind=loaded.device_kind,
                                    device_index=loaded.device_index, min_time_s=self.energy_min_time_s)
        except EnergyUnavailable as exc:  # e.g. the counter did not advance
            details["energy"] = str(exc)
            return {}
        details["energy_method"] = energy.method
        return {"energy_j_per_item": energy.joules_per_item, "avg_power_w": energy.avg_power_w}


def _empty_device_cache(device_kind: str) -> None:
    """Return cached allocator blocks of `device_kind` to the device (no-op on the CPU)."""
    if device_kind not in ("cuda", "rocm", "xpu", "mps"):
        return
    import torch

    module = torch.cuda if device_kind in ("cuda", "rocm") else getattr(torch, device_kind, None)
    if module is not None and hasattr(module, "empty_cache"):
        module.empty_cache()


__all__ = [
    "DEFAULT_NEW_TOKENS",
    "DEFAULT_NOISE_RETRIES",
    "DEFAULT_NOISE_WAIT_S",
    "MEMORY_USABLE_SHARE",
    "BenchCase",
    "CaseResult",
    "Runner",
    "failed_record",
    "is_out_of_memory",
    "memory_shortfall",
    "takes_new_tokens",
]
