"""Performance prediction with a layered fallback; every answer says where it came from.

For one case (model, hardware kind and device, precision, batch size, mode, backend) a `Predictor`
answers from the first layer that can:

1. ``measured``   an exact match in the benchmark data (`hwsel.data.load_runs`), indexed once
                  into a dict keyed by the case; the interval is the measured spread.
2. ``registered`` the registered champion models (`hwsel.registry.load_champion`), loaded once;
                  only for (hardware, backend, precision, mode) combinations their training
                  snapshot holds; the interval is the champion's residual band.
3. ``roofline``   a compute/memory-bound estimate from the device's peak FLOP/s and bandwidth
                  (`hwsel.features`' roofline) plus a launch overhead per forward.
4. ``rules``      plain heuristics (a table of effective FLOP/s and overheads per hardware); no
                  data, no scikit-learn, no MLflow.

The question names a device as well as a kind (``cuda`` + ``NVIDIA H100 80GB HBM3``, or a spec
name from `hwsel.specs` such as ``h100``): the measured layer answers from that device's records
(or records that name no device), the others from its spec. With none given, the device is the
one detected here when this machine has that kind of hardware, else the one most benchmark
records of that kind hold (loaded data and the champion's training snapshot), else none (the
kind's generic spec); every answer says which device it used and why (`Prediction.device`,
`Prediction.device_source`). The backend is part of the question too: eager ``torch`` unless
one is asked for (``openvino`` on the openvino target, ``qai_hub`` on qnn); the measured layer
never answers with another backend's numbers.

Loading is the only step that touches MLflow or DuckDB. After it, predictions are dict lookups
or in-memory arithmetic; many rows of one layer go to one vectorised call
(`Predictor.predict_many`), and answers are cached by case. The registered layer scores each (model, hardware, backend,
precision, mode) at the batch sizes of `Predictor.GRID_BATCH_SIZES` once, in one call with the
other rows asked for (a forest costs as much for 300 rows as for one); any batch size between
answers by interpolating log latency and log memory linearly in log batch size between its two
grid neighbours, so later questions never score again.
"""

from __future__ import annotations

import contextlib
import dataclasses
import functools
import gc
import importlib
import logging
import math
import os
import warnings
from collections.abc import Iterable, Iterator, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from types import MappingProxyType
from typing import Any

from .config import MODES, PRECISIONS, SOURCES, SelectionConfig, load_config

log = logging.getLogger("hwsel")

TARGETS: tuple[str, ...] = ("latency", "throughput", "memory")
_BYTES = MappingProxyType({"fp32": 4, "fp16": 2, "bf16": 2, "int8": 1})
#: Batch sizes above this are refused: predictions stay finite and requests stay cheap.
MAX_BATCH_SIZE = 1 << 20


class HwselWarning(UserWarning):
    """Warnings from hwsel (filter with ``-W ignore::hwsel.HwselWarning``)."""


# --- values ---------------------------------------------------------------------------------------

@dataclass(frozen=True)
class Prediction:
    """Predicted (or measured) performance of one case on one hardware target.

    `interval` is a (low, high) range for the latency in milliseconds: the measured spread, the
    registered model's prediction interval, or a fixed factor around an estimate. `device` is the
    device the answer is for (None: none known, the kind's generic spec), `device_source` why that
    one (see `DEVICE_SOURCES`) and `device_spec` the `hwsel.specs` entry its numbers came from.
    """

    hardware: str
    latency_ms: float
    throughput: float
    memory_mb: float
    source: str
    interval: tuple[float, float]
    backend: str | None = None
    precision: str = "fp32"
    batch_size: int = 1
    mode: str = "inference"
    detail: str = ""
    device: str | None = None
    device_source: str = ""
    device_spec: str = ""

    def device_text(self) -> str:
        """The device and why it was chosen, in words (for CLI lines and explanations)."""
        return describe_device(self.hardware, self.device, self.device_source, self.device_spec)

    def to_dict(self) -> dict[str, Any]:
        """JSON-ready dict; also carries the predecessor's names (latency, memory_usage)."""
        return {
            "hardware": self.hardware,
            "latency_ms": self.latency_ms,
            "throughput": self.throughput,
            "memory_mb": self.memory_mb,
            "source": self.source,
            "interval": list(self.interval),
            "backend": self.backend,
            "precision": self.precision,
            "batch_size": self.batch_size,
            "mode": self.mode,
            "detail": self.detail,
            "device": self.device,
            "device_source": self.device_source,
            "device_spec": self.device_spec,
            "latency": self.latency_ms,
            "memory_usage": self.memory_mb,
        }


@dataclass(frozen=True)
class Query:
    """One case to predict.

    `backend` None means the hardware's default (`default_backend`); `device_name` None means
    the predictor's default device for the hardware (`Predictor.default_device`). `Predictor`
    fills both in (`Predictor.resolve`) and sets `device_source`.
    """

    model: Any  # hwsel.features.ModelInfo
    hardware: str
    precision: str = "fp32"
    batch_size: int = 1
    mode: str = "inference"
    backend: str | None = None
    device_name: str | None = None
    device_source: str = ""


#: Why an answer is for its device: named in the question, found on this machine, the one most
#: benchmark records of the kind hold, or none at all (the kind's generic spec).
DEVICE_SOURCES: Mapping[str, str] = MappingProxyType({
    "asked": "asked for",
    "detected": "default: detected here",
    "records": "default: most benchmark records of {hardware}",
    "none": "no device given, none detected or recorded: generic {hardware} spec",
})

#: Backend a question means when it names none: eager PyTorch, except on targets that are a runtime.
DEFAULT_BACKEND = "torch"
_HARDWARE_BACKENDS: Mapping[str, str] = MappingProxyType({"openvino": "openvino", "qnn": "qai_hub"})


def default_backend(hardware: str) -> str:
    """The backend a question about `hardware` means when it names none (eager ``torch`` mostly)."""
    return _HARDWARE_BACKENDS.get(hardware, DEFAULT_BACKEND)


def describe_device(hardware: str, device: str | None, source: str, spec: str = "") -> str:
    """``NVIDIA H100 80GB HBM3 (default: most benchmark records of cuda)``, or the generic spec."""
    why = DEVICE_SOURCES.get(source, source).format(hardware=hardware)
    if device is None:
        return why
    return f"{device} ({why})" if not spec or spec.lower() == device.lower() else f"{device} ({why}; spec {spec})"


def check_device(device: Any, name: str = "device") -> str:
    """A device name or spec name: a non-empty line of at most 200 characters."""
    if not isinstance(device, str) or not device.strip() or len(device) > 200 or not device.isprintable():
        raise ValueError(f"{name} must be a device name such as 'NVIDIA H100 80GB HBM3' or a spec name such as "
                         f"'h100' (hwsel.specs), got {device!r}")
    return " ".join(device.split())


def device_map(hardware: Sequence[str], device: str | Mapping[str, str] | None) -> dict[str, str]:
    """hardware -> asked device, from one device name (one hardware target) or a mapping.

    Raises ValueError naming the fix: one name for several targets is ambiguous, and a mapping
    may only name targets that are asked about.
    """
    if device is None:
        return {}
    if isinstance(device, Mapping):
        out = {}
        for hw, name in device.items():
            if hw not in hardware:
                raise ValueError(f"device given for {hw!r}, which is not among the hardware asked about "
                                 f"({', '.join(hardware)}); name one of those")
            out[str(hw)] = check_device(name, f"device for {hw}")
        return out
    name = check_device(device)
    if len(hardware) != 1:
        from .specs import CPU_TARGETS

        hw = next((h for h in hardware if h not in CPU_TARGETS), hardware[0])  # device names mostly name accelerators
        raise ValueError(f"one device ({name!r}) for several hardware targets ({', '.join(hardware)}); give one "
                         f"per target, e.g. {{'{hw}': {name!r}}} (CLI: --device {hw}={name!r})")
    return {hardware[0]: name}


# --- optional layers, imported lazily ------------------------------------------------------------

@contextlib.contextmanager
def _bulk(size: int) -> Iterator[None]:
    """Pause the cyclic GC while building many small objects.

    With torch's object graph in memory, the generation-2 collections that 10,000 new results
    trigger cost up to a second (seen on a loaded 2-core machine); none of these objects form
    cycles, so pausing loses nothing.
    """
    if size < 1000 or not gc.isenabled():
        yield
        return
    gc.disable()
    try:
        yield
    finally:
        gc.enable()


def _optional(module: str) -> Any | None:
    """Our sibling module, or None when it (or what it needs) is not installed."""
    try:
        return importlib.import_module(f"hwsel.{module}")
    except ImportError as exc:
        log.debug("hwsel.%s unavailable: %s", module, exc)
        return None


# --- validation ------------------------------------------------------------------------------------

def check_batch_size(batch_size: Any, name: str = "batch_size") -> int:
    """A whole number in [1, MAX_BATCH_SIZE]; else ValueError naming the value."""
    if isinstance(batch_size, bool) or not isinstance(batch_size, int):
        if isinstance(batch_size, float) and batch_size.is_integer():
            batch_size = int(batch_size)
        else:
            raise ValueError(f"{name} must be a whole number >= 1, got {batch_size!r}")
    if not 1 <= batch_size <= MAX_BATCH_SIZE:
        raise ValueError(f"{name} must be between 1 and {MAX_BATCH_SIZE}, got {batch_size}")
    return batch_size


def check_precision(precision: Any) -> str:
    """One of fp32, fp16, bf16, int8; else ValueError listing them."""
    if precision not in PRECISIONS:
        raise ValueError(f"unknown precision {precision!r}; accepted: {', '.join(PRECISIONS)}")
    return str(precision)


def check_mode(mode: Any) -> str:
    """inference or training; else ValueError listing them."""
    if mode not in MODES:
        raise ValueError(f"unknown mode {mode!r}; accepted: {', '.join(MODES)}")
    return str(mode)


# --- models ----------------------------------------------------------------------------------------

def model_info(model: Any, config: str | os.PathLike[str] | None = None) -> Any:
    """A `ModelInfo` for a zoo name, a hub-style alias, or a ModelInfo-like object (returned as is).

    Unknown names raise KeyError listing close matches and how to describe a model of your own.
    """
    if not isinstance(model, str):
        if all(hasattr(model, a) for a in ("name", "family", "param_count", "flops_per_item")):
            return model
        raise TypeError(f"model must be a name or a ModelInfo, got {type(model).__name__}")
    if not model or len(model) > 200:
        raise KeyError(f"unknown model {model[:200]!r}: give a zoo name such as bert-base or gpt2")
    from .features import resolve_model

    return resolve_model(model, config)


def with_sequence_length(info: Any, sequence_length: int | None) -> Any:
    """`info` at another sequence length (FLOPs scaled linearly), renamed ``name@seqN``.

    The new name keeps measured data of the default length from answering for it.
    """
    if sequence_length is None or sequence_length == getattr(info, "sequence_length", None):
        return info
    length = check_batch_size(sequence_length, "sequence_length")
    old = getattr(info, "sequence_length", None)
    if not old:
        raise ValueError(f"sequence_length does not apply to {info.name}: its input is not a token sequence")
    return dataclasses.replace(info, name=f"{info.name}@seq{length}", sequence_length=length,
                               flops_per_item=float(info.flops_per_item) * length / old)


def _tokens(m: Any) -> int:
    if getattr(m, "sequence_length", None):
        tokens = int(m.sequence_length)
    elif getattr(m, "image_size", None):
        tokens = max(1, (int(m.image_size) // 16) ** 2)
    elif getattr(m, "audio_samples", None):
        tokens = max(1, int(m.audio_samples) // 320)
    else:
        tokens = 128
    return max(1, tokens)


def _shape(m: Any) -> tuple[int, int, int]:
    """(tokens, hidden, layers), guessed from the parameter count where the config is silent."""
    layers = int(getattr(m, "num_layers", None) or 12)
    hidden = getattr(m, "hidden_size", None)
    if not hidden:
        hidden = max(64, int(math.sqrt(max(m.param_count, 1) / (12 * layers))))
    return _tokens(m), int(hidden), max(1, layers)


@dataclass(frozen=True)
class MemoryBreakdown:
    """Memory of one replica in MiB: weights, gradients, optimizer states, activations."""

    parameters_mb: float
    gradients_mb: float
    optimizer_mb: float
    activations_mb: float
    runtime_mb: float

    @property
    def total_mb(self) -> float:
        return self.parameters_mb + self.gradients_mb + self.optimizer_mb + self.activations_mb + self.runtime_mb


def memory_breakdown(model: Any, *, batch_size: int, precision: str = "fp32", mode: str = "inference",
                     checkpointing: bool = False, runtime_mb: float = 0.0) -> MemoryBreakdown:
    """Memory needed by one replica, from parameter count and shape (no data needed).

    Training keeps gradients in the compute precision and AdamW states in fp32 (two moments,
    plus an fp32 master copy under mixed precision): 16 bytes per parameter with half-precision
    weights, as in the ZeRO paper. Activations follow Korthikanti et al. (2022): per layer and
    item ``tokens * hidden * (34 + 5 * heads * tokens / hidden)`` bytes in 16 bit; with activation
    checkpointing only each layer's input (2 * tokens * hidden bytes) plus one layer's full set.
    Inference keeps one layer's working set per item.
    """
    mib = 2.0**20
    nbytes = _BYTES[precision]
    params = float(model.param_count)
    tokens, hidden, layers = _shape(model)
    heads = max(1, hidden // 64)
    scale = nbytes / 2  # the formula is for 16-bit activations
    per_layer = tokens * hidden * (34 + 5 * heads * tokens / hidden) * scale
    if mode == "training":
        weights = params * nbytes
        grads = params * nbytes
        optimizer = params * (8 + (4 if nbytes < 4 else 0))
        if checkpointing:
            acts = batch_size * (layers * 2 * tokens * hidden * scale + per_layer)
        else:
            acts = batch_size * layers * per_layer
    else:
        weights, grads, optimizer = params * nbytes, 0.0, 0.0
        acts = batch_size * per_layer / 2
    return MemoryBreakdown(weights / mib, grads / mib, optimizer / mib, acts / mib, runtime_mb)


def roofline_arrays(queries: Sequence[Query]) -> dict[str, Any]:
    """`hwsel.features`' roofline for many queries at once (arrays: latency_ms, memory_mb, ...).

    Device specs are looked up once per (hardware, device name); the arithmetic is one
    vectorised call of the same function `features.roofline` uses, so the two never disagree.
    """
    import numpy as np

    from . import features
    from .specs import spec_for

    specs = {key: spec_for(*key) for key in {(q.hardware, q.device_name) for q in queries}}
    col = functools.partial(np.fromiter, dtype=float, count=len(queries))
    nan = float("nan")
    return features._roofline_arrays(
        col(float(q.model.param_count) for q in queries),
        col(float(q.model.flops_per_item) for q in queries),
        col(float(q.model.hidden_size or nan) for q in queries),
        col(float(q.model.num_layers or nan) for q in queries),
        col(float(q.batch_size) for q in queries),
        col(features.BYTES_PER_ELEMENT.get(q.precision, 4.0) for q in queries),
        col(specs[q.hardware, q.device_name].tflops(q.precision) for q in queries),
        col(specs[q.hardware, q.device_name].memory_bandwidth_gbs for q in queries),
    )


# --- rules: the last layer, pure heuristics --------------------------------------------------------

#: Effective (not peak) TFLOP/s of eager frameworks on a common device of each kind. Seen:
#: BERT-base on a 2-core CPU about 0.1 TFLOP/s, on an H100 fp16 about 160 (FACTS.md).
_RULE_TFLOPS: Mapping[str, Mapping[str, float]] = MappingProxyType({
    "cuda": {"fp32": 20.0, "fp16": 120.0, "bf16": 120.0, "int8": 150.0},
    "rocm": {"fp32": 15.0, "fp16": 90.0, "bf16": 90.0, "int8": 100.0},
    "xpu": {"fp32": 8.0, "fp16": 40.0, "bf16": 40.0, "int8": 50.0},
    "mps": {"fp32": 3.0, "fp16": 5.0, "bf16": 4.0, "int8": 3.0},
    "openvino": {"fp32": 0.3, "fp16": 0.3, "bf16": 0.8, "int8": 1.0},
    "qnn": {"fp32": 1.0, "fp16": 8.0, "bf16": 4.0, "int8": 16.0},
    "cpu": {"fp32": 0.15, "fp16": 0.04, "bf16": 0.35, "int8": 0.4},
})
#: Fixed cost per forward for a 12-layer model, ms: GPUs in eager mode are launch bound
#: (BERT-base on an H100 takes about 7 ms at batch 1 and 8 ms at batch 128, FACTS.md).
_RULE_OVERHEAD_MS = MappingProxyType(
    {"cuda": 6.0, "rocm": 7.0, "xpu": 8.0, "mps": 5.0, "openvino": 0.5, "qnn": 2.0, "cpu": 0.5})
_RULE_RUNTIME_MB = MappingProxyType(
    {"cuda": 500.0, "rocm": 500.0, "xpu": 400.0, "mps": 300.0, "openvino": 150.0, "qnn": 50.0, "cpu": 150.0})
_TRAIN_FLOPS = 3.0  # forward + backward


def launch_overhead_ms(q: Query) -> float:
    """Fixed cost per forward (twice per training step) that no FLOP count shows: kernel
    launches and framework dispatch, scaled by depth from a 12-layer model."""
    layers = int(getattr(q.model, "num_layers", None) or 12)
    return _RULE_OVERHEAD_MS.get(q.hardware, 1.0) * layers / 12 * (2.0 if q.mode == "training" else 1.0)


def rules_estimate(q: Query) -> tuple[float, float, float]:
    """(latency ms, throughput items/s, memory MiB) from heuristics alone."""
    m = q.model
    tflops = _RULE_TFLOPS.get(q.hardware, _RULE_TFLOPS["cpu"])[q.precision]
    flops = float(m.flops_per_item) * q.batch_size * (_TRAIN_FLOPS if q.mode == "training" else 1.0)
    latency = launch_overhead_ms(q) + flops / (tflops * 1e12) * 1e3
    mem = memory_breakdown(m, batch_size=q.batch_size, precision=q.precision, mode=q.mode,
                           runtime_mb=_RULE_RUNTIME_MB.get(q.hardware, 200.0)).total_mb
    return latency, q.batch_size / latency * 1e3, mem


# --- measured data ----------------------------------------------------------------------------------

@dataclass(frozen=True)
class Measured:
    """The measurements of one case on one backend (median over repeated runs)."""

    latency_ms: float
    throughput: float
    memory_mb: float | None
    low: float
    high: float
    backend: str
    runs: int
    device: str | None = None


def _finite(v: Any) -> float | None:
    try:
        f = float(v)
    except (TypeError, ValueError):
        return None
    return f if math.isfinite(f) and f >= 0 else None


#: A record from an OpenVINO backend also counts as hardware "openvino" (its device is cpu/gpu/npu).
_BACKEND_AS_HARDWARE = ("openvino",)


class MeasuredIndex:
    """Benchmark rows indexed by the exact case:
    (model, hardware, precision, batch, mode) -> backend -> device key -> Measured.

    Device keys are `hwsel.specs.device_key` ("" for records that name no device). `devices`
    counts the records of each hardware kind per device name.
    """

    def __init__(self, runs: Any = None) -> None:
        self._index: dict[tuple[str, str, str, int, str], dict[str, dict[str, Measured]]] = {}
        self.rows = 0
        self.hardware: frozenset[str] = frozenset()
        self.backends: frozenset[str] = frozenset()
        self.devices: dict[str, dict[str, int]] = {}
        if runs is not None and len(runs):
            self._build(runs)

    def _build(self, runs: Any) -> None:
        import pandas as pd

        from .specs import device_key

        df = pd.DataFrame(runs).copy()
        need = ("model", "hardware", "precision", "batch_size", "latency_ms_median")
        missing = [c for c in need if c not in df.columns]
        if missing:
            raise ValueError(f"benchmark data lacks column {missing[0]!r}; got {', '.join(map(str, df.columns))}")
        for col, default in (("backend", DEFAULT_BACKEND), ("mode", "inference"), ("device_name", None)):
            if col not in df.columns:
                df[col] = default
        if "status" in df.columns:
            df = df[df["status"].fillna("passed") == "passed"]
        df = df[pd.to_numeric(df["latency_ms_median"], errors="coerce") > 0]
        groups: dict[tuple[Any, ...], list[Mapping[str, Any]]] = {}
        devices: dict[str, dict[str, int]] = {}
        for row in df.to_dict("records"):
            try:
                key = (str(row["model"]), str(row["hardware"]), str(row["precision"]), int(row["batch_size"]),
                       str(row["mode"]), str(row["backend"]))
            except (TypeError, ValueError):
                continue
            raw = row.get("device_name")
            name = " ".join(raw.split()) if isinstance(raw, str) else ""
            for hw in (key[1], key[5]) if key[5] in _BACKEND_AS_HARDWARE and key[1] != key[5] else (key[1],):
                dkey = device_key(hw, name)
                groups.setdefault((key[0], hw, *key[2:], dkey), []).append(row)
                if dkey:
                    per = devices.setdefault(hw, {})
                    per[name] = per.get(name, 0) + 1
        hardware, backends = set(), set()
        for (model, hw, prec, batch, mode, backend, dkey), rows in groups.items():
            per_backend = self._index.setdefault((model, hw, prec, batch, mode), {}).setdefault(backend, {})
            per_backend[dkey] = self._summarise(rows, batch, backend, hw if dkey else None)
            hardware.add(hw)
            backends.add(backend)
        self.rows = len(df)
        self.hardware, self.backends, self.devices = frozenset(hardware), frozenset(backends), devices

    @staticmethod
    def _summarise(rows: Sequence[Mapping[str, Any]], batch: int, backend: str, hardware: str | None) -> Measured:
        import collections
        import statistics

        lat = [v for r in rows if (v := _finite(r.get("latency_ms_median")))]
        median = statistics.median(lat)
        thr = [v for r in rows if (v := _finite(r.get("throughput_items_per_s")))]
        mem = [v for r in rows if (v := _finite(r.get("peak_device_memory_mb")) or _finite(r.get("peak_host_rss_mb")))]
        def first(row: Mapping[str, Any], keys: tuple[str, ...]) -> float | None:
            return next((v for k in keys if (v := _finite(row.get(k))) is not None), None)

        # per run: its fastest iteration .. its p95 (p90, max where p95 is missing)
        lows = [v for r in rows if (v := first(r, ("latency_ms_min", "latency_ms_median"))) is not None]
        highs = [v for r in rows if (v := first(r, ("latency_ms_p95", "latency_ms_p90", "latency_ms_max",
                                                     "latency_ms_median"))) is not None]
        return Measured(
            latency_ms=median,
            throughput=statistics.median(thr) if thr else batch / median * 1e3,
            memory_mb=statistics.median(mem) if mem else None,
            low=min(lows + [median]),
            high=max(highs + [median]),
            backend=backend,
            runs=len(rows),
            device=collections.Counter(" ".join(str(r.get("device_name")).split()) for r in rows).most_common(1)[0][0]
            if hardware is not None else None,
        )

    def __len__(self) -> int:
        return len(self._index)

    def lookup(self, model: str, hardware: str, precision: str, batch_size: int, mode: str,
               backend: str | None = None, device: str | None = None) -> Measured | None:
        """The exact case on `backend` (None: `default_backend(hardware)`; never another backend)
        and `device`: its records, else records that name no device; None when neither exists.
        Records of another named device never answer."""
        from .specs import device_key

        found = self._index.get((model, hardware, precision, batch_size, mode))
        per_device = found.get(backend or default_backend(hardware)) if found else None
        if not per_device:
            return None
        key = device_key(hardware, device)
        return per_device.get(key) if key in per_device else per_device.get("")

    def cases(self) -> list[tuple[str, str, str, int, str]]:
        """Every indexed case key."""
        return list(self._index)


# --- the predictor -----------------------------------------------------------------------------------

@dataclass
class LayerStatus:
    """Whether a layer is on, and why not."""

    available: bool
    note: str = ""
    details: dict[str, Any] = field(default_factory=dict)


def _default_store(tracking_uri: str | None = None) -> str | None:
    """The store to read when none is named, or None when there is none here.

    ``$MLFLOW_TRACKING_URI`` or ``mlruns/mlflow.db`` (what `hwsel.data.default_source` reads), else
    the DuckDB file ``mlruns/hwbench.duckdb``. We never create a store just by looking (opening a
    SQLite URI would).
    """
    if tracking_uri:
        return tracking_uri
    if os.environ.get("MLFLOW_TRACKING_URI") or Path("mlruns/mlflow.db").exists():
        from .data import default_source

        return default_source()
    if Path("mlruns/hwbench.duckdb").exists():
        return "mlruns/hwbench.duckdb"
    return None


@dataclass(frozen=True)
class _GridRow:
    """Registered-model outputs in log space for a run of rows (log latency, interval, memory)."""

    latency: Any
    low: Any
    high: Any
    memory: Any | None

    def slice(self, start: int, stop: int) -> _GridRow:
        return _GridRow(self.latency[start:stop], self.low[start:stop], self.high[start:stop],
                        None if self.memory is None else self.memory[start:stop])

    def at(self, j: int) -> tuple[float, float, float, float | None]:
        return (float(self.latency[j]), float(self.low[j]), float(self.high[j]),
                None if self.memory is None else float(self.memory[j]))

    def interpolate(self, log_grid: Any, log_batch: float) -> tuple[float, float, float, float | None]:
        """Values at `log_batch`, linear in log batch between the grid neighbours (exact on the grid)."""
        import numpy as np

        def at(values: Any) -> float:
            return float(np.interp(log_batch, log_grid, values))

        return (at(self.latency), at(self.low), at(self.high), None if self.memory is None else at(self.memory))


class Predictor:
    """Answers performance queries from the first layer that can (see the module docstring).

    Build with `Predictor.load(...)` (reads data and champions once) or directly from a runs
    DataFrame and champion objects. `layers` limits which layers may answer;
    `training_devices` (hardware -> device name -> rows) adds devices the champion was trained on
    to those of `runs` when choosing a default device, and `detect` False leaves this machine's
    hardware out of that choice (see `default_device`).
    """

    def __init__(self, *, runs: Any = None, champions: Mapping[str, Any] | None = None,
                 config: SelectionConfig | str | os.PathLike[str] | None = None,
                 layers: Iterable[str] = SOURCES, notes: Mapping[str, str] | None = None,
                 champion_domain: Iterable[tuple[str, str, str, str]] | None = None,
                 training_devices: Mapping[str, Mapping[str, int]] | None = None,
                 detect: bool = True) -> None:
        self.config = load_config(config)
        self.layers = tuple(layers)
        bad = [s for s in self.layers if s not in SOURCES]
        if bad:
            raise ValueError(f"unknown layer {bad[0]!r}; accepted: {', '.join(SOURCES)}")
        notes = dict(notes or {})
        self.index = MeasuredIndex(runs if "measured" in self.layers else None)
        self.champions = {t: c for t, c in (champions or {}).items() if c is not None} \
            if "registered" in self.layers else {}
        # Champions answer only for (hardware, backend, precision, mode) combinations their training
        # data had: a regression extrapolated to an unseen device or precision is worse than the
        # roofline estimate. The domain comes from the training snapshot (`champion_domain`, see
        # `Predictor.load`), else from the loaded benchmark data; with neither it is open.
        domain = None if champion_domain is None else frozenset(champion_domain)
        if self.champions and domain is None and self.index.rows:
            # an openvino record also indexed as hardware "openvino" was trained on as its own hardware (cpu)
            domain = frozenset((hw, be, prec, mode) for (_, hw, prec, _, mode), per in self.index._index.items()
                               for be in per if not (hw in _BACKEND_AS_HARDWARE and hw == be))
        self._domain: frozenset[tuple[str, str, str, str]] | None = domain
        # hardware -> device name -> records: the loaded data's and the champion's training rows
        counts: dict[str, dict[str, int]] = {}
        for source in (self.index.devices, training_devices or {}):
            for hw, per in source.items():
                for name, n in per.items():
                    counts.setdefault(hw, {})[name] = counts.setdefault(hw, {}).get(name, 0) + int(n)
        self.record_devices: dict[str, dict[str, int]] = counts
        self.detect = detect
        self._defaults: dict[str, tuple[str | None, str]] = {}
        self._device_answers: dict[tuple[str, str | None, str], dict[str, Any]] = {}
        self.status: dict[str, LayerStatus] = {
            "measured": LayerStatus(bool(len(self.index)),
                                    "" if len(self.index) else notes.get("measured") or "no usable benchmark rows",
                                    {"rows": self.index.rows, "cases": len(self.index)}),
            "registered": LayerStatus("latency" in self.champions,
                                      "" if "latency" in self.champions else notes.get(
                                          "registered", "no registered latency model"),
                                      {**{t: _champion_summary(c) for t, c in self.champions.items()},
                                       "domain": None if domain is None else sorted("/".join(d) for d in domain)}),
            "roofline": LayerStatus("roofline" in self.layers, ""),
            "rules": LayerStatus("rules" in self.layers, ""),
        }
        for name in SOURCES:
            if name not in self.layers:
                self.status[name] = LayerStatus(False, "layer turned off")
        if not any(s.available for s in self.status.values()):
            raise ValueError(f"no prediction layer is on; enable at least one of {', '.join(SOURCES)}")
        self._cache: dict[Query, Prediction] = {}
        #: (model, hardware, precision, mode, backend, device) -> registered predictions on the grid
        self._grid: dict[tuple[Any, ...], _GridRow] = {}
        #: rows the registered models have scored so far (each grid point once)
        self.scored_rows = 0

    # -- loading ------------------------------------------------------------------------------

    @classmethod
    def load(cls, source: str | os.PathLike[str] | None = None, *, tracking_uri: str | None = None,
             config: SelectionConfig | str | os.PathLike[str] | None = None, layers: Iterable[str] = SOURCES,
             experiment: str = "hwbench", detect: bool = True) -> Predictor:
        """Read the benchmark data and the registered champions once; failures turn a layer off.

        `source` is an MLflow tracking URI, a ``.duckdb``, ``.parquet`` or ``.jsonl`` file, or a
        list of those (their union). With neither a source nor a default store here (``mlruns/``),
        the data layer is off and says so. `detect` False leaves this machine's hardware out of
        the default device (answers then depend on the records alone, wherever they run).
        """
        layers = tuple(layers)
        notes: dict[str, str] = {}
        runs = None
        if "measured" in layers:
            runs, notes["measured"] = _load_runs(source, experiment)
        champions: dict[str, Any] = {}
        domain, devices = None, None
        if "registered" in layers:
            champions, notes["registered"] = _load_champions(tracking_uri)
            if "latency" in champions:
                frame = _snapshot_frame(champions["latency"], tracking_uri)
                domain, devices = _snapshot_domain(frame), _snapshot_devices(frame)
        return cls(runs=runs, champions=champions, config=config, layers=layers, notes=notes,
                   champion_domain=domain, training_devices=devices, detect=detect)

    def describe(self) -> dict[str, Any]:
        """Which layers answer, with row counts, champion versions and why a layer is off."""
        return {name: {"available": s.available, "note": s.note, **s.details} for name, s in self.status.items()}

    # -- devices -------------------------------------------------------------------------------

    def default_device(self, hardware: str) -> tuple[str | None, str]:
        """(device name or None, why) for a question about `hardware` that names no device.

        The device detected here when this machine has that kind of hardware
        (`pytest_hwbench.detect_hardware`), else the device most benchmark records of that kind
        hold (loaded data plus the champion's training snapshot), else None: the generic spec.
        """
        found = self._defaults.get(hardware)
        if found is None:
            found = self._defaults[hardware] = self._default_device(hardware)
        return found

    def _default_device(self, hardware: str) -> tuple[str | None, str]:
        if self.detect:
            name = _detected_device(hardware)
            if name:
                return name, "detected"
        counts = self.record_devices.get(hardware)
        if counts:
            return max(sorted(counts), key=lambda n: counts[n]), "records"
        return None, "none"

    def resolve(self, q: Query) -> Query:
        """`q` with its backend and device filled in (see `default_backend`, `default_device`)."""
        if q.device_source and q.backend is not None:
            return q
        backend = q.backend if q.backend is not None else default_backend(q.hardware)
        if q.device_source:
            name, source = q.device_name, q.device_source
        elif q.device_name:
            name, source = check_device(q.device_name), "asked"
        else:
            name, source = self.default_device(q.hardware)
        return dataclasses.replace(q, backend=backend, device_name=name, device_source=source)

    # -- prediction --------------------------------------------------------------------------

    def query(self, model: Any, hardware: str, *, batch_size: int = 1, precision: str = "fp32",
              mode: str = "inference", backend: str | None = None, device: str | None = None) -> Query:
        """A validated, resolved `Query` (raises ValueError/KeyError naming the bad value)."""
        info = model_info(model)
        hw = self.config.check_hardware([hardware])[0]
        return self.resolve(Query(info, hw, check_precision(precision), check_batch_size(batch_size),
                                  check_mode(mode), _check_backend(backend),
                                  None if device is None else check_device(device)))

    def predict(self, model: Any, hardware: str | Sequence[str], *, batch_size: int = 1, precision: str = "fp32",
                mode: str = "inference", backend: str | None = None,
                device: str | Mapping[str, str] | None = None) -> dict[str, Prediction]:
        """hardware -> `Prediction` for one model and case.

        `device`: one device name or spec name (with one hardware target), or hardware -> device;
        targets without one get `default_device`. Each answer says which device it is for.
        """
        names = self.config.check_hardware(hardware)
        devices = device_map(names, device)
        queries = [self.query(model, hw, batch_size=batch_size, precision=precision, mode=mode, backend=backend,
                              device=devices.get(hw)) for hw in names]
        return dict(zip(names, self.predict_many(queries), strict=True))

    def predict_many(self, queries: Sequence[Query]) -> list[Prediction]:
        """Predictions for many validated queries, each from the first layer that can answer.

        Rows the measured index misses get one feature frame between them; the registered
        models score all of them in one ``predict`` call per target, and the roofline reads the
        same frame. Answers are cached by query.
        """
        with _bulk(len(queries)):
            return self._predict_many(queries)

    def _predict_many(self, queries: Sequence[Query]) -> list[Prediction]:
        queries = [self.resolve(q) for q in queries]
        out: list[Prediction | None] = [self._cache.get(q) for q in queries]
        todo = [i for i, p in enumerate(out) if p is None]
        if not todo:
            return out  # type: ignore[return-value]
        work = [queries[i] for i in todo]
        preds = self._run_layers(work)
        if len(self._cache) > 100_000:
            self._cache.clear()
        for q, p in zip(work, preds, strict=True):
            self._cache[q] = p
        for i, p in zip(todo, preds, strict=False):
            out[i] = p
        return out  # type: ignore[return-value]

    def _run_layers(self, queries: Sequence[Query]) -> list[Prediction]:
        out: list[Prediction | None] = [None] * len(queries)
        todo = list(range(len(queries)))
        for layer in SOURCES:
            if todo and self.status[layer].available:
                todo = self._fill(out, todo, getattr(self, f"_layer_{layer}")([queries[i] for i in todo]))
        if todo:  # only when the rules layer is off
            q = queries[todo[0]]
            raise ValueError(f"no enabled layer can predict {q.model.name} on {q.hardware}; "
                             f"enable the rules layer (layers={self.layers})")
        return out  # type: ignore[return-value]

    def _where(self, q: Query) -> dict[str, Any]:
        """The device fields of every answer to `q` (`Prediction.device`, ...), made once per device."""
        key = (q.hardware, q.device_name, q.device_source)
        found = self._device_answers.get(key)
        if found is None:
            from .specs import spec_for

            found = self._device_answers[key] = {"device": q.device_name, "device_source": q.device_source,
                                                "device_spec": spec_for(q.hardware, q.device_name).name}
        return found

    #: Batch sizes the registered models score for every case key they are asked about; batch
    #: sizes between them interpolate (log-log), larger ones are scored as asked.
    GRID_BATCH_SIZES: tuple[int, ...] = (1, 2, 4, 8, 16, 32, 64, 128, 256, 512, 1024)

    @staticmethod
    def _fill(out: list[Prediction | None], todo: list[int], answered: Sequence[Prediction | None]) -> list[int]:
        rest = []
        for i, pred in zip(todo, answered, strict=True):
            if pred is None:
                rest.append(i)
            else:
                out[i] = pred
        return rest

    def _layer_measured(self, queries: Sequence[Query]) -> list[Prediction | None]:
        out: list[Prediction | None] = []
        for q in queries:
            m = self.index.lookup(q.model.name, q.hardware, q.precision, q.batch_size, q.mode, q.backend,
                                  q.device_name)
            if m is None:
                out.append(None)
                continue
            memory = m.memory_mb
            detail = f"{m.runs} run(s) on {m.device or 'a device the records do not name'}, backend {m.backend}"
            if memory is None:
                memory = rules_estimate(q)[2]
                detail += "; memory estimated by rules (not measured)"
            out.append(Prediction(q.hardware, m.latency_ms, m.throughput, memory, "measured", (m.low, m.high),
                                  m.backend, q.precision, q.batch_size, q.mode, detail, **self._where(q)))
        return out

    @staticmethod
    def _frame(queries: Sequence[Query]) -> Any:
        """`FEATURE_COLUMNS` for many queries: one `feature_frame` call (as training used)."""
        import pandas as pd

        from .features import feature_frame, query_row

        rows = [query_row(q.model, hardware=q.hardware, backend=q.backend or default_backend(q.hardware),
                          precision=q.precision,
                          batch_size=q.batch_size, mode=q.mode, device_name=q.device_name) for q in queries]
        return feature_frame(pd.DataFrame(rows))

    @staticmethod
    def _grid_key(q: Query) -> tuple[Any, ...]:
        return (q.model, q.hardware, q.precision, q.mode, q.backend, q.device_name)

    def _score(self, queries: Sequence[Query]) -> _GridRow:
        """The champions' log latency, log interval and log memory for `queries` (one call each)."""
        import numpy as np

        sub = self._frame(queries)
        lat_log = _champion_log(self.champions["latency"], sub)
        with np.errstate(divide="ignore", invalid="ignore"):
            low, high = (np.log(v) for v in _champion_interval(self.champions["latency"], sub, lat_log))
        mem = _champion_log(self.champions["memory"], sub) if "memory" in self.champions else None
        self.scored_rows += len(queries)
        return _GridRow(lat_log, low, high, mem)

    def _layer_registered(self, queries: Sequence[Query]) -> list[Prediction | None]:
        import numpy as np

        out: list[Prediction | None] = [None] * len(queries)
        dom = self._domain
        idx = [i for i, q in enumerate(queries)
               if dom is None or (q.hardware, q.backend or default_backend(q.hardware), q.precision, q.mode) in dom]
        if not idx:
            return out
        grid = self.GRID_BATCH_SIZES
        top = grid[-1]
        beyond = [i for i in idx if queries[i].batch_size > top]
        missing = list(dict.fromkeys(self._grid_key(queries[i]) for i in idx if queries[i].batch_size <= top
                                     and self._grid_key(queries[i]) not in self._grid))
        try:
            if missing:
                rows = [dataclasses.replace(queries[next(i for i in idx if self._grid_key(queries[i]) == key)],
                                            batch_size=b) for key in missing for b in grid]
                scored = self._score(rows)
                if len(self._grid) > 100_000:
                    self._grid.clear()
                for k, key in enumerate(missing):
                    self._grid[key] = scored.slice(k * len(grid), (k + 1) * len(grid))
            far = self._score([queries[i] for i in beyond]) if beyond else None
        except Exception as exc:  # a champion that cannot score these rows hands them to the next layer
            warnings.warn(f"registered model failed ({type(exc).__name__}: {exc}); using the next layer",
                          HwselWarning, stacklevel=3)
            return out
        version = _champion_summary(self.champions["latency"]).get("version")
        log_grid = np.log(np.asarray(grid, dtype=float))
        position = {i: j for j, i in enumerate(beyond)}
        for i in idx:
            q = queries[i]
            if i in position:
                assert far is not None
                values = far.at(position[i])
            else:
                values = self._grid[self._grid_key(q)].interpolate(log_grid, math.log(q.batch_size))
            lat_log, low_log, high_log, mem_log = values
            latency = math.exp(lat_log) if math.isfinite(lat_log) else math.nan
            if not math.isfinite(latency) or latency <= 0:
                continue
            throughput = q.batch_size / latency * 1e3  # derived, as hwsel.train derives it
            memory = math.exp(mem_log) if mem_log is not None and math.isfinite(mem_log) else math.nan
            detail = ""
            if not (math.isfinite(memory) and memory > 0):
                memory, detail = rules_estimate(q)[2], "; memory estimated by rules"
            lo = math.exp(low_log) if math.isfinite(low_log) else latency
            hi = math.exp(high_log) if math.isfinite(high_log) else latency
            if q.batch_size not in grid and q.batch_size <= top:
                detail += "; interpolated between the model's grid batch sizes"
            out[i] = Prediction(q.hardware, latency, throughput, memory, "registered",
                                (max(0.0, min(lo, latency)), max(hi, latency)), q.backend, q.precision,
                                q.batch_size, q.mode, f"champion model version {version}{detail}", **self._where(q))
        return out

    def _layer_roofline(self, queries: Sequence[Query]) -> list[Prediction | None]:
        f = self.config.thresholds.interval_factor["roofline"]
        est = roofline_arrays(queries)
        lat, mem, comp, bw = est["latency_ms"], est["memory_mb"], est["compute_ms"], est["memory_ms"]
        out: list[Prediction | None] = []
        for j, q in enumerate(queries):
            latency, memory = float(lat[j]), float(mem[j])
            if not (math.isfinite(latency) and latency > 0 and math.isfinite(memory)):
                out.append(None)
                continue
            bound = "compute" if comp[j] >= bw[j] else "memory"
            if q.mode == "training":
                # The roofline models a forward; a training step is about three (forward + backward),
                # and it also holds gradients and optimizer states.
                latency *= _TRAIN_FLOPS
                bd = memory_breakdown(q.model, batch_size=q.batch_size, precision=q.precision, mode="training")
                memory += bd.gradients_mb + bd.optimizer_mb + bd.activations_mb
            # A roofline alone ignores launch overhead, and would then call a GPU 1000x faster than a
            # CPU for a tiny model at batch 1 (eager GPUs are launch bound there, FACTS.md).
            overhead = launch_overhead_ms(q)
            latency += overhead
            memory += _RULE_RUNTIME_MB.get(q.hardware, 200.0)  # the roofline counts the model only
            out.append(Prediction(q.hardware, latency, q.batch_size / latency * 1e3, memory, "roofline",
                                  (latency / f, latency * f), q.backend, q.precision, q.batch_size, q.mode,
                                  f"{bound} bound ({comp[j]:.3g} ms compute, {bw[j]:.3g} ms memory traffic) "
                                  f"+ {overhead:.3g} ms launch overhead", **self._where(q)))
        return out

    def _layer_rules(self, queries: Sequence[Query]) -> list[Prediction | None]:
        f = self.config.thresholds.interval_factor["rules"]
        out: list[Prediction | None] = []
        for q in queries:
            latency, throughput, memory = rules_estimate(q)
            out.append(Prediction(q.hardware, latency, throughput, memory, "rules", (latency / f, latency * f),
                                  q.backend, q.precision, q.batch_size, q.mode, "heuristic estimate", **self._where(q)))
        return out


def _check_backend(backend: Any) -> str | None:
    if backend is None:
        return None
    if not isinstance(backend, str) or not backend or len(backend) > 64:
        raise ValueError(f"backend must be a short name such as torch, onnxruntime or openvino, got {backend!r}")
    return backend


def _champion_log(champion: Any, features: Any) -> Any:
    """Log-space prediction (`ChampionModel.predict_log`), or the log of `predict`."""
    import numpy as np

    if hasattr(champion, "predict_log"):
        return np.asarray(champion.predict_log(features), dtype=float)
    with np.errstate(divide="ignore", invalid="ignore"):
        return np.log(np.asarray(champion.predict(features), dtype=float))


def _champion_interval(champion: Any, features: Any, log_pred: Any) -> tuple[Any, Any]:
    """The champion's (low, high), from its residual quantiles when it has them (no second scoring)."""
    import numpy as np

    q10, q90 = getattr(champion, "residual_q10", None), getattr(champion, "residual_q90", None)
    if q10 is not None and q90 is not None:
        return np.exp(log_pred + q10), np.exp(log_pred + q90)
    low, high = champion.interval(features)
    return np.asarray(low, dtype=float), np.asarray(high, dtype=float)


def _champion_summary(champion: Any) -> dict[str, Any]:
    return {"version": getattr(champion, "version", None), "run_id": getattr(champion, "run_id", None)}


def _load_runs(source: Any, experiment: str) -> tuple[Any, str]:
    data = _optional("data")
    if data is None:
        return None, "hwsel.data is not importable"
    if source is None:
        source = _default_store()
        if source is None:
            return None, "no benchmark data: no mlruns/ store here and no --source given"
    sources = [str(s) for s in data.source_list(source)]
    where = ", ".join(sources)
    try:
        runs = data.load_runs(sources[0] if len(sources) == 1 else sources, experiment=experiment)
    except Exception as exc:  # any unreadable store: say so and answer from the other layers
        warnings.warn(f"benchmark data not loaded from {where}: {exc}", HwselWarning, stacklevel=3)
        return None, f"benchmark data not loaded: {exc}"
    if runs is None or not len(runs):
        return None, f"no passed benchmark runs in {where}"
    return runs, ""


def _snapshot_frame(champion: Any, tracking_uri: str | None = None) -> Any | None:
    """The (hardware, backend, precision, mode, device_name) columns of a champion's training
    snapshot, read once at load from the Parquet artifact its ``hwsel.snapshot`` tag names; None
    when it cannot be read."""
    uri = (getattr(champion, "tags", None) or {}).get("hwsel.snapshot")
    if not uri:
        return None
    try:
        import tempfile

        import mlflow.artifacts
        import pandas as pd

        from ._quiet import quiet_mlflow
        from .data import default_source

        with tempfile.TemporaryDirectory(prefix="hwsel-domain-") as tmp, quiet_mlflow():
            local = mlflow.artifacts.download_artifacts(artifact_uri=uri, dst_path=tmp,
                                                        tracking_uri=tracking_uri or default_source())
            frame = pd.read_parquet(local)
    except Exception as exc:  # the snapshot is a nicety: without it the data decides
        log.debug("champion snapshot unreadable: %s", exc)
        return None
    cols = [c for c in ("hardware", "backend", "precision", "mode", "device_name") if c in frame.columns]
    return frame.loc[:, cols]


def _snapshot_domain(frame: Any | None) -> frozenset[tuple[str, str, str, str]] | None:
    if frame is None or not {"hardware", "precision"} <= set(frame.columns):
        return None
    frame = frame.reindex(columns=["hardware", "backend", "precision", "mode"])
    frame = frame.fillna({"backend": DEFAULT_BACKEND, "mode": "inference"}).astype(str)
    return frozenset(map(tuple, frame.drop_duplicates().to_numpy().tolist()))


def _snapshot_devices(frame: Any | None) -> dict[str, dict[str, int]]:
    """hardware -> device name -> training rows, for the devices the snapshot names."""
    from .specs import device_key

    if frame is None or "device_name" not in frame.columns or "hardware" not in frame.columns:
        return {}
    out: dict[str, dict[str, int]] = {}
    for (hw, raw), n in frame.groupby(["hardware", "device_name"], dropna=True).size().items():
        name = " ".join(str(raw).split())
        if device_key(str(hw), name):
            out.setdefault(str(hw), {})[name] = int(n)
    return out


def champion_domain(champion: Any, tracking_uri: str | None = None) -> frozenset[tuple[str, str, str, str]] | None:
    """(hardware, backend, precision, mode) combinations in a champion's training snapshot.

    Read once at load from the Parquet artifact the version's ``hwsel.snapshot`` tag names;
    None when it cannot be read (the caller then falls back to the loaded data).
    """
    return _snapshot_domain(_snapshot_frame(champion, tracking_uri))


def _detected_device(hardware: str) -> str | None:
    """The first device `pytest_hwbench.detect_hardware()` finds for `hardware`, if it is here."""
    try:
        from pytest_hwbench.hardware import detect_hardware

        target = detect_hardware().targets.get(hardware)
    except Exception as exc:  # detection is best effort: without it the records decide
        log.debug("hardware detection failed: %s", exc)
        return None
    if target is None or not target.available or not target.devices:
        return None
    name = " ".join(str(target.devices[0].name).split())
    return name or None


def _load_champions(tracking_uri: str | None) -> tuple[dict[str, Any], str]:
    registry = _optional("registry")
    if registry is None:
        return {}, "hwsel.registry is not importable"
    if _default_store(tracking_uri) is None:
        return {}, "no registry: no mlruns/ store here and no --tracking-uri given"
    from ._quiet import quiet_mlflow

    champions = {}
    for target in TARGETS:
        try:
            with quiet_mlflow():
                champion = registry.load_champion(target, tracking_uri)
        except Exception as exc:  # an unreadable registry must not stop estimates from the other layers
            warnings.warn(f"registered {target} model not loaded: {type(exc).__name__}: {exc}", HwselWarning,
                          stacklevel=3)
            champion = None
        if champion is not None:
            champions[target] = champion
    return champions, "" if champions else "no champion registered (run `hwsel train`)"


# --- module-level API ---------------------------------------------------------------------------------

_PREDICTORS: dict[tuple[Any, ...], Predictor] = {}


def get_predictor(source: str | os.PathLike[str] | None = None, *, tracking_uri: str | None = None,
                  config: SelectionConfig | str | os.PathLike[str] | None = None,
                  layers: Iterable[str] = SOURCES) -> Predictor:
    """The shared `Predictor` for these arguments, loaded on first use and kept for the process.

    `clear_predictors()` forgets them (e.g. after `hwsel train` registered a new champion).
    """
    from .config import ENV_VAR

    cfg_key = config if config is None or isinstance(config, str | os.PathLike) else id(config)
    src_key = None if source is None else str(source) if isinstance(source, str | os.PathLike) \
        else tuple(map(str, source))
    key = (src_key, tracking_uri, cfg_key, tuple(layers), os.environ.get(ENV_VAR))
    predictor = _PREDICTORS.get(key)
    if predictor is None:
        predictor = _PREDICTORS[key] = Predictor.load(source, tracking_uri=tracking_uri, config=config,
                                                      layers=layers)
    return predictor


def clear_predictors() -> None:
    """Forget the shared predictors; the next call loads data and champions again."""
    _PREDICTORS.clear()


def _predictor(predictor: Predictor | None, source: Any, tracking_uri: str | None, config: Any) -> Predictor:
    if predictor is not None:
        return predictor
    return get_predictor(source, tracking_uri=tracking_uri, config=config)


def predict_performance(model: Any, hardware: str | Sequence[str] | None = None, batch_size: int = 1,
                        precision: str = "fp32", mode: str = "inference", backend: str | None = None, *,
                        device: str | Mapping[str, str] | None = None,
                        predictor: Predictor | None = None, source: str | os.PathLike[str] | None = None,
                        tracking_uri: str | None = None,
                        config: SelectionConfig | str | os.PathLike[str] | None = None) -> dict[str, Prediction]:
    """hardware -> `Prediction` (latency_ms, throughput, memory_mb, source, interval) for one case.

    `hardware` defaults to every configured target: prediction is for hardware you may not have.
    `device` names the device (``"NVIDIA H100 80GB HBM3"`` or a spec name such as ``"h100"``) for
    one target, or maps targets to devices; otherwise each target gets `Predictor.default_device`.
    `backend` defaults to eager ``torch`` (`default_backend`). Each `Prediction` says which device
    and backend it is for.
    """
    p = _predictor(predictor, source, tracking_uri, config)
    return p.predict(model, hardware if hardware is not None else p.config.hardware_names, batch_size=batch_size,
                     precision=precision, mode=mode, backend=backend, device=device)


#: The full-tier zoo models: the matrix's default rows.
DEFAULT_MATRIX_MODELS: tuple[str, ...] = ("bert-base", "gpt2", "t5-small", "vit-base", "resnet-50", "whisper-tiny",
                                          "wav2vec2-base", "clip-vit-b32")


def prediction_matrix(models: Sequence[Any] | None = None, hardware: Sequence[str] | None = None,
                      batch_sizes: Sequence[int] = (1, 8, 32), precisions: Sequence[str] = ("fp32", "fp16"),
                      mode: str = "inference", backend: str | None = None, *,
                      device: str | Mapping[str, str] | None = None, predictor: Predictor | None = None,
                      source: str | os.PathLike[str] | None = None, tracking_uri: str | None = None,
                      config: SelectionConfig | str | os.PathLike[str] | None = None) -> dict[str, Any]:
    """Predictions for every model x hardware x batch size x precision, in the predecessor's shape.

    ``models[name]["predictions"][hardware][str(batch)][precision]`` holds throughput,
    latency_mean, memory_usage, source, interval and backend; ``devices[hardware]`` says which
    device each target's answers are for and why (`device` as in `predict_performance`). All rows
    are predicted in one `predict_many` call, so each layer scores its rows in one batch.
    """
    p = _predictor(predictor, source, tracking_uri, config)
    names = list(models) if models is not None else list(DEFAULT_MATRIX_MODELS)
    infos = [model_info(m["name"] if isinstance(m, Mapping) else m) for m in names]
    hws = p.config.check_hardware(hardware if hardware is not None else p.config.hardware_names)
    batches = [check_batch_size(b) for b in batch_sizes]
    precs = [check_precision(x) for x in precisions]
    mode = check_mode(mode)
    backend = _check_backend(backend)
    if not infos or not batches or not precs:
        raise ValueError("prediction_matrix needs at least one model, batch size and precision")
    devices = device_map(hws, device)
    resolved = {hw: p.resolve(Query(infos[0], hw, precs[0], batches[0], mode, backend, devices.get(hw)))
                for hw in hws}
    queries = [Query(info, hw, prec, b, mode, r.backend, r.device_name, r.device_source)
               for info in infos for hw, r in resolved.items() for b in batches for prec in precs]
    with _bulk(len(queries)):
        return _matrix(p, infos, hws, batches, precs, mode, queries)


def _matrix(p: Predictor, infos: Sequence[Any], hws: Sequence[str], batches: Sequence[int], precs: Sequence[str],
            mode: str, queries: Sequence[Query]) -> dict[str, Any]:
    import datetime as _dt

    preds = iter(p.predict_many(queries))
    out: dict[str, Any] = {}
    sources: dict[str, int] = {}
    for info in infos:
        table: dict[str, Any] = {}
        for hw in hws:
            per_batch: dict[str, Any] = {}
            for b in batches:
                per_prec: dict[str, Any] = {}
                for prec in precs:
                    pred = next(preds)
                    sources[pred.source] = sources.get(pred.source, 0) + 1
                    per_prec[prec] = {"throughput": pred.throughput, "latency_mean": pred.latency_ms,
                                      "memory_usage": pred.memory_mb, "source": pred.source,
                                      "interval": list(pred.interval), "backend": pred.backend}
                per_batch[str(b)] = per_prec
            table[hw] = per_batch
        out[info.name] = {"name": info.name, "category": info.family, "param_count": int(info.param_count),
                          "predictions": table}
    from .specs import spec_for

    first = {q.hardware: q for q in reversed(queries)}
    devices = {hw: {"device": q.device_name, "device_source": q.device_source,
                    "device_spec": spec_for(hw, q.device_name).name, "backend": q.backend}
               for hw, q in first.items()}
    return {
        "timestamp": _dt.datetime.now(_dt.timezone.utc).isoformat(),
        "mode": mode,
        "devices": {hw: devices[hw] for hw in hws},
        "models": out,
        "hardware_platforms": list(hws),
        "batch_sizes": batches,
        "precision_options": precs,
        "sources": sources,
        "configurations": len(queries),
    }


__all__ = [
    "DEFAULT_BACKEND",
    "DEFAULT_MATRIX_MODELS",
    "DEVICE_SOURCES",
    "MAX_BATCH_SIZE",
    "HwselWarning",
    "Measured",
    "MeasuredIndex",
    "MemoryBreakdown",
    "Prediction",
    "Predictor",
    "Query",
    "champion_domain",
    "check_device",
    "clear_predictors",
    "default_backend",
    "describe_device",
    "device_map",
    "get_predictor",
    "memory_breakdown",
    "model_info",
    "predict_performance",
    "prediction_matrix",
    "rules_estimate",
    "with_sequence_length",
]
