"""The `BenchmarkRecord`: one finished benchmark case, the unit every sink stores.

This module depends on nothing of ours but the shared words (`pytest_hwbench.vocabulary`, which
imports nothing), so sinks, reports and `hwsel` can read records without importing torch or pytest.
"""

from __future__ import annotations

import dataclasses
import datetime as _dt
import json
import math
import uuid
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any, Literal, get_args

from pytest_hwbench.facts import target_set
from pytest_hwbench.vocabulary import NOISE_VERDICTS, normalise_mode

SCHEMA_VERSION = 4

#: ``crashed``: the process measuring the case died (an xdist worker killed or segfaulted); the
#: controller wrote the record.
Status = Literal["passed", "failed", "crashed"]
STATUSES: tuple[str, ...] = get_args(Status)

@dataclass(frozen=True)
class BenchmarkRecord:
    """One benchmark case's parameters, measurements and context. `precision` is the one that ran,
    read back from the runtime; a failed case (out of memory, export error...) is a record too, with
    `status="failed"` and `error`, and a case whose process died is `status="crashed"`."""

    # identity
    case_id: str
    session_id: str
    status: Status
    # params
    model: str
    family: str
    model_type: str
    backend: str
    hardware: str
    device_name: str
    precision: str
    mode: str
    batch_size: int
    sequence_length: int | None = None
    image_size: int | None = None
    audio_samples: int | None = None
    param_count: int | None = None
    flops_per_forward: float | None = None
    threads: int | None = None
    #: generate mode: tokens generated per sequence (prompt length is `sequence_length`)
    new_tokens: int | None = None
    # metrics
    latency_ms_mean: float | None = None
    latency_ms_median: float | None = None
    latency_ms_min: float | None = None
    latency_ms_max: float | None = None
    latency_ms_stddev: float | None = None
    latency_ms_iqr: float | None = None
    latency_ms_p90: float | None = None
    latency_ms_p95: float | None = None
    latency_ms_p99: float | None = None
    iterations: int | None = None
    throughput_items_per_s: float | None = None
    load_time_s: float | None = None
    cold_latency_ms: float | None = None
    peak_host_rss_mb: float | None = None
    peak_device_memory_mb: float | None = None
    achieved_tflops: float | None = None
    #: compiled backends: seconds spent compiling for this case's input shape (not in latency)
    compile_time_s: float | None = None
    #: generate mode: time to first token, the prefill call that makes it, median
    ttft_ms: float | None = None
    #: generate mode: each further token, (full - ttft) / (new_tokens - 1), medians
    decode_ms_per_token: float | None = None
    #: generate mode: generated tokens per second over the batch
    tokens_per_s: float | None = None
    #: energy per item from the device's counter (NVML), where it can be read
    energy_j_per_item: float | None = None
    avg_power_w: float | None = None
    # raw per-iteration timings, milliseconds
    timings_ms: tuple[float, ...] = ()
    # interference (schema 3): what else the machine did while the case was timed
    #: ``clean`` or ``noisy`` (`pytest_hwbench.interference.judge`); None: not judged (an older
    #: record, a failed case)
    noise: str | None = None
    #: why the record is noisy, in words, e.g. ``1.7 of 2 cores busy with other processes``
    noise_reason: str = ""
    #: measurements taken for this case (1: the first was clean); the cleanest one is kept
    tries: int | None = None
    #: the readings the verdict came from: other_cores, steal_cores, own_cores, cores_allowed,
    #: load_avg_1m, cpu_mhz, window_s; the reference kernel beside the case (reference_before_us,
    #: reference_after_us, reference_us, reference_baseline_us) and ``host_speed`` (schema 4, see
    #: `BenchmarkRecord.host_speed`); on NVIDIA GPUs gpu_sm_clock_mhz, gpu_clock_event_reasons...
    interference: Mapping[str, Any] = field(default_factory=dict)
    # context
    error: str | None = None
    nodeid: str = ""
    host: str = ""
    worker: str = "main"
    cpu_affinity: tuple[int, ...] = ()
    extra: Mapping[str, Any] = field(default_factory=dict)
    record_id: str = field(default_factory=lambda: uuid.uuid4().hex)
    created_at: str = field(default_factory=lambda: _dt.datetime.now(_dt.timezone.utc).isoformat())
    schema_version: int = SCHEMA_VERSION

    def __post_init__(self) -> None:
        if self.status not in STATUSES:
            raise ValueError(f"status {self.status!r} is not one of {STATUSES}")
        if self.batch_size < 1:
            raise ValueError(f"batch_size must be >= 1, got {self.batch_size}")
        if self.noise not in (None, *NOISE_VERDICTS):
            raise ValueError(f"noise {self.noise!r} is not one of {NOISE_VERDICTS} (or None: not judged)")

    @property
    def host_speed(self) -> float | None:
        """How fast the host ran during this case against its own recent baseline: the reference
        kernel's baseline time over its time beside the case (1.0: at its recent best; 0.75: a
        third slower). None: unknown (not measured, or a record older than schema 4)."""
        value = self.interference.get("host_speed")
        return float(value) if isinstance(value, (int, float)) and value > 0 else None

    @property
    def host_bound(self) -> bool:
        """Whether the case computed on the host's CPU (a target row `on_host_cpu`): only then does
        `host_speed`, a CPU kernel's, speak for its latency (`hwbench compare` and hwsel correct for it)."""
        return self.hardware in target_set(host_cpu=True)

    @property
    def run_name(self) -> str:
        """Readable name, e.g. ``bert-base/cuda/fp16/b64``."""
        return f"{self.model}/{self.hardware}/{self.backend}/{self.precision}/b{self.batch_size}"

    def params(self) -> dict[str, Any]:
        """The case parameters, always the same keys."""
        return {name: getattr(self, name) for name in PARAM_FIELDS}

    def metrics(self) -> dict[str, float | None]:
        """The measurements, always the same keys (None where not measured)."""
        return {name: getattr(self, name) for name in METRIC_FIELDS}

    def to_dict(self) -> dict[str, Any]:
        """JSON-ready dict (tuples become lists)."""
        return {k: list(v) if isinstance(v, tuple) else v for k, v in dataclasses.asdict(self).items()}

    def to_json(self) -> str:
        """One line of JSON."""
        return json.dumps(self.to_dict(), sort_keys=True, default=str)

    @classmethod
    def from_dict(cls, data: Mapping[str, Any]) -> BenchmarkRecord:
        """Build a record from a dict of any schema version (see `normalize_record`)."""
        return cls(**normalize_record(data))


@dataclass(frozen=True)
class SessionInfo:
    """One pytest session (or one replay): the parent of its records."""

    session_id: str
    started_at: str
    host: str
    git_commit: str = ""
    git_branch: str = ""
    runner_label: str = ""
    hardware_summary: str = ""
    package_versions: Mapping[str, str] = field(default_factory=dict)
    extra: Mapping[str, Any] = field(default_factory=dict)

    def to_dict(self) -> dict[str, Any]:
        """JSON-ready dict."""
        return dataclasses.asdict(self)

    @classmethod
    def from_dict(cls, data: Mapping[str, Any]) -> SessionInfo:
        """Inverse of `to_dict`; unknown keys go to `extra`."""
        known = {f.name for f in dataclasses.fields(cls)}
        extra = dict(data.get("extra") or {})
        extra.update({k: v for k, v in data.items() if k not in known})
        return cls(**{k: v for k, v in data.items() if k in known and k != "extra"}, extra=extra)


_FIELD_NAMES = tuple(f.name for f in dataclasses.fields(BenchmarkRecord))
#: Params, the record's "params" section: what a case *is*. Same names and types for every case
#: (MLflow compares runs by them).
PARAM_FIELDS = _FIELD_NAMES[_FIELD_NAMES.index("model"):_FIELD_NAMES.index("latency_ms_mean")]
#: Metrics, its "metrics" section: what a case *measured*. Missing values are None (e.g. device
#: memory on CPU).
METRIC_FIELDS = _FIELD_NAMES[_FIELD_NAMES.index("latency_ms_mean"):_FIELD_NAMES.index("timings_ms")]


def normalize_record(data: Mapping[str, Any]) -> dict[str, Any]:
    """Upgrade a record dict of an older schema version to the current one.

    Unknown keys (written by a newer version) move into `extra` instead of failing; a mode in an
    older spelling becomes its one name (``training`` -> ``train``).
    """
    # Fields added since version 1 are optional: an older record measured none of them and was
    # not judged (noise None). Before version 4 the reference ratio was against an all-time best,
    # no host speed: it reads as unknown.
    try:
        version = int(data.get("schema_version") or 1)
    except (TypeError, ValueError):
        version = 1
    out = {k: v for k, v in data.items() if k in _FIELD_NAMES}
    out["extra"] = {**(data.get("extra") or {}), **{k: v for k, v in data.items() if k not in _FIELD_NAMES}}
    out["schema_version"] = SCHEMA_VERSION
    out["timings_ms"] = tuple(float(t) for t in out.get("timings_ms") or ())
    out["cpu_affinity"] = tuple(int(c) for c in out.get("cpu_affinity") or ())
    out["interference"] = dict(out.get("interference") or {})
    if version < 4:
        out["interference"].pop("host_speed", None)
    out["noise_reason"] = out.get("noise_reason") or ""
    if isinstance(out.get("mode"), str):
        out["mode"] = normalise_mode(out["mode"])  # older hwsel records say "training"
    return out


# --- what can be a measurement at all -------------------------------------------------------------
# A NaN, a zero or a latency of 31 years is no measurement. The bounds are physical, wide enough
# that no real run meets them:

#: Fastest forward any record may claim: 100 ns, the cost of a few hundred instructions; a
#: framework's dispatch of one operator alone takes longer (and `perf_counter` itself ~50 ns).
MIN_LATENCY_MS = 1e-4
#: Slowest: one day per forward; no session waits that long for a single iteration.
MAX_LATENCY_MS = 86_400_000.0
#: Peak FLOP/s of any single device, 10 PFLOP/s: above every accelerator's dense peak (an H100
#: ~1 PFLOP/s bf16, a B200 ~4.5 PFLOP/s fp8); the committed H100 records reach 0.4 PFLOP/s. A
#: latency below ``flops_per_forward / MAX_DEVICE_FLOPS`` would beat every device there is.
MAX_DEVICE_FLOPS = 1e16
#: Largest memory figure (MiB) a record may hold: 1 PiB.
MAX_MEMORY_MB = float(2**30)

#: Latency statistics that, where present, must be finite and positive (dispersions may be 0).
_LATENCIES: tuple[str, ...] = ("latency_ms_mean", "latency_ms_min", "latency_ms_max", "latency_ms_p90",
                               "latency_ms_p95", "latency_ms_p99", "cold_latency_ms", "ttft_ms",
                               "decode_ms_per_token")
_DISPERSIONS: tuple[str, ...] = ("latency_ms_stddev", "latency_ms_iqr")
_MEMORIES: tuple[str, ...] = ("peak_host_rss_mb", "peak_device_memory_mb")


def _number(value: Any) -> float | None:
    """`value` as a float (NaN where it is no number, e.g. pandas' NA); None where it is missing."""
    if value is None or isinstance(value, bool):
        return None
    try:
        return float(value)
    except (TypeError, ValueError):
        return float("nan")


def measurement_problem(record: BenchmarkRecord | Mapping[str, Any]) -> str | None:
    """Why `record` (a `BenchmarkRecord` or a mapping of its fields, e.g. a frame row) cannot be
    a measurement, or None when it can; only ``passed`` records are judged. The answer is a reason
    the same for every record with that fault (e.g. ``"latency_ms_median not finite"``), then the
    value in parentheses. A NaN in an optional field reads as missing (a frame's empty cell)."""
    data: Mapping[str, Any] = record.to_dict() if isinstance(record, BenchmarkRecord) else record
    if data.get("status", "passed") != "passed":
        return None
    median = _number(data.get("latency_ms_median"))
    if median is None:
        return "latency_ms_median missing (a passed record without a median latency)"
    if not math.isfinite(median):
        return f"latency_ms_median not finite ({median})"
    if median <= 0:
        return f"latency_ms_median <= 0 ({median:g} ms)"
    if median < MIN_LATENCY_MS:
        return f"latency_ms_median below {MIN_LATENCY_MS * 1e6:g} ns ({median:g} ms)"
    if median > MAX_LATENCY_MS:
        return f"latency_ms_median above one day ({median:g} ms)"
    flops = _number(data.get("flops_per_forward"))
    if flops is not None and math.isfinite(flops) and flops > 0 and median < flops / MAX_DEVICE_FLOPS * 1e3:
        return (f"latency_ms_median faster than any device ({median:g} ms for {flops:.3g} FLOPs: "
                f"{flops / median * 1e3:.3g} FLOP/s > {MAX_DEVICE_FLOPS:g})")
    for name in (*_LATENCIES, *_DISPERSIONS, "throughput_items_per_s", *_MEMORIES):
        value = _number(data.get(name))
        if value is None or math.isnan(value):
            continue
        if not math.isfinite(value):
            return f"{name} not finite ({value})"
        if value < 0 or (value == 0 and name in (*_LATENCIES, "throughput_items_per_s")):
            return f"{name} {'<= 0' if name in (*_LATENCIES, 'throughput_items_per_s') else '< 0'} ({value:g})"
        if name in _MEMORIES and value > MAX_MEMORY_MB:
            return f"{name} above 1 PiB ({value:g} MiB)"
        if name in _LATENCIES and value > MAX_LATENCY_MS:
            return f"{name} above one day ({value:g} ms)"
    low, high = _number(data.get("latency_ms_min")), _number(data.get("latency_ms_max"))
    slack = 1e-9 * median
    if (low is not None and low > median + slack) or (high is not None and high < median - slack):  # NaN: False
        return f"latency order broken (min {low}, median {median:g}, max {high})"
    iterations = _number(data.get("iterations"))
    if iterations is not None and not math.isnan(iterations) and not (math.isfinite(iterations) and iterations >= 1):
        return f"iterations < 1 ({iterations})"
    timings = data.get("timings_ms")
    if timings is not None and not isinstance(timings, str | bytes):
        try:
            bad = [t for t in timings if not (math.isfinite(float(t)) and float(t) > 0)]
        except (TypeError, ValueError):
            bad = ["not a number"]
        if bad:
            return f"timings_ms not finite or <= 0 ({bad[0]})"
    return None


__all__ = ["MAX_DEVICE_FLOPS", "MAX_LATENCY_MS", "MAX_MEMORY_MB", "METRIC_FIELDS", "MIN_LATENCY_MS",
           "PARAM_FIELDS", "SCHEMA_VERSION", "BenchmarkRecord", "SessionInfo", "measurement_problem",
           "normalize_record"]
