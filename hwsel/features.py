"""Features from architecture, not names: what the predictors see of a benchmark case.

`feature_frame` (records) and `query_frame` (a configuration never measured) share one function,
so training and prediction cannot drift apart; a model's name only looks its architecture up
(`hwsel.resolution`)."""

from __future__ import annotations

import math
import os
from collections.abc import Iterable
from dataclasses import fields
from typing import Any

import numpy as np
import pandas as pd

from pytest_hwbench import facts
from pytest_hwbench.vocabulary import bytes_per_element

from .resolution import ModelInfo, resolve_model
from .roofline import roofline_arrays
from .specs import DeviceSpec, spec_for

# --- features ---------------------------------------------------------------------------------


def launch_floor_ms(hardware: str, backend: str) -> float:
    """Host time one dispatched operator costs on `hardware` through `backend` (ms): the target's
    ``launch_cost_ms`` times the backend's ``launch_share`` (`pytest_hwbench.facts`)."""
    return facts.launch_cost_ms(hardware) * facts.backend_facts(backend).launch_share

CATEGORICAL_FEATURES: tuple[str, ...] = (
    "family", "model_type", "backend", "hardware", "precision", "mode", "device", "device_kind",
)

NUMERIC_FEATURES: tuple[str, ...] = (
    "log_param_count", "log_flops_per_item", "log_flops_per_forward", "num_layers", "hidden_size",
    "log_sequence_length", "image_size", "log_audio_samples", "batch_size", "log_batch_size", "threads",
    "bytes_per_element", "log_peak_tflops", "log_memory_bandwidth_gbs", "device_memory_gb", "spec_known",
    "log_weight_mb", "log_roofline_compute_ms", "log_roofline_memory_ms", "log_roofline_ms",
    "log_roofline_memory_mb", "log_launches", "log_launch_floor_ms", "log_flops_per_launch", "log_regime_ms",
    "num_attention_heads", "kv_group",
)

#: What the predictors take, in this order.
FEATURE_COLUMNS: tuple[str, ...] = CATEGORICAL_FEATURES + NUMERIC_FEATURES


def _default_threads(hardware: str) -> float:
    """Threads a CPU run uses when the row does not say: this machine's usable cores."""
    if hardware in facts.target_set(host_cpu=True) and hasattr(os, "sched_getaffinity"):
        return float(len(os.sched_getaffinity(0)))
    return float(os.cpu_count() or 1)


def _log(values: np.ndarray) -> np.ndarray:
    with np.errstate(divide="ignore", invalid="ignore"):
        out = np.log(values)
    return np.where(np.isfinite(out), out, np.nan)


def _missing(value: Any) -> bool:
    if value is None or value is pd.NA or value is pd.NaT:
        return True
    if isinstance(value, float):
        return math.isnan(value)
    return isinstance(value, str) and value == ""


def _values(rows: pd.DataFrame, name: str) -> list[Any]:
    """A column as a plain list (None where absent), the cheap way for row-wise work."""
    if name not in rows.columns:
        return [None] * len(rows)
    return rows[name].tolist()


def _floats(values: Iterable[Any]) -> np.ndarray:
    return np.array([np.nan if _missing(v) else float(v) for v in values], dtype=float)


def feature_frame(rows: pd.DataFrame) -> pd.DataFrame:
    """`FEATURE_COLUMNS` for rows holding record fields (those `query_row` writes), index kept; null
    architecture fields come from the model's `ModelInfo` when its name resolves."""
    if len(rows) == 0:
        return pd.DataFrame({c: pd.Series(dtype=object if c in CATEGORICAL_FEATURES else float)
                             for c in FEATURE_COLUMNS})
    names = ["" if _missing(n) else str(n) for n in _values(rows, "model")]
    arch: dict[str, dict[str, Any] | None] = {}
    for name in set(names):
        try:
            arch[name] = resolve_model(name).to_dict()
        except KeyError:
            arch[name] = None
    archs = [arch[n] for n in names]

    def from_arch(field: str) -> list[Any]:
        return [None if a is None else a[field] for a in archs]

    def filled(field: str) -> list[Any]:
        return [f if _missing(o) else o for o, f in zip(_values(rows, field), from_arch(field), strict=True)]

    def text(values: Iterable[Any], default: str, lower: bool = False) -> np.ndarray:
        out = [default if _missing(v) else str(v) for v in values]
        return np.array([v.lower() for v in out] if lower else out, dtype=object)

    batch = _floats(_values(rows, "batch_size"))
    batch = np.where(np.isfinite(batch) & (batch >= 1), batch, 1.0)
    params = _floats(filled("param_count"))
    # FLOPs from the architecture lookup where the name resolves: a record's count depends on the
    # process that made it, and a query must see the number the training rows saw.
    flops_forward = _floats(_values(rows, "flops_per_forward"))
    arch_flops = _floats(from_arch("flops_per_item"))
    flops_item = np.where(np.isfinite(arch_flops) & (arch_flops > 0), arch_flops, flops_forward / batch)
    layers = _floats(filled("num_layers"))
    hidden = _floats(filled("hidden_size"))
    launches = _floats(filled("launches_per_forward"))
    heads = _floats(filled("num_attention_heads"))
    kv_heads = _floats(filled("num_key_value_heads"))
    seq = _floats(filled("sequence_length"))
    image = _floats(filled("image_size"))
    audio = _floats(filled("audio_samples"))

    hardware = text(_values(rows, "hardware"), "cpu", lower=True)
    device_name = text(_values(rows, "device_name"), "")
    precision = text(_values(rows, "precision"), "fp32", lower=True)
    pairs = list(zip(hardware, device_name, strict=True))
    specs: dict[tuple[str, str], DeviceSpec] = {p: spec_for(p[0], p[1] or None) for p in set(pairs)}
    row_specs = [specs[p] for p in pairs]
    tflops = np.array([sp.tflops(pr) for sp, pr in zip(row_specs, precision, strict=True)], dtype=float)
    bandwidth = np.array([sp.memory_bandwidth_gbs for sp in row_specs], dtype=float)
    bytes_el = np.array([bytes_per_element(p) for p in precision], dtype=float)

    threads = _floats(_values(rows, "threads"))
    defaults = {h: _default_threads(h) for h in set(hardware)}
    threads = np.where(np.isfinite(threads), threads, np.array([defaults[h] for h in hardware], dtype=float))

    roof = roofline_arrays(params, flops_item, hidden, layers, batch, bytes_el, tflops, bandwidth)
    # Launch floor: ~20 operators per layer where the architecture could not be traced.
    launches = np.where(np.isfinite(launches) & (launches > 0), launches,
                        20.0 * np.where(np.isfinite(layers) & (layers > 0), layers, 12.0))
    backend = text(_values(rows, "backend"), "torch")
    per_pair = {pair: launch_floor_ms(*pair) for pair in set(zip(hardware, backend, strict=True))}
    floor_ms = launches * np.array([per_pair[pair] for pair in zip(hardware, backend, strict=True)], dtype=float)
    columns: dict[str, Any] = {
        "family": text(filled("family"), "unknown"),
        "model_type": text(filled("model_type"), "unknown"),
        "backend": backend,
        "hardware": hardware,
        "precision": precision,
        "mode": text(_values(rows, "mode"), "inference"),
        "device": np.array([sp.name for sp in row_specs], dtype=object),
        "device_kind": np.array([sp.kind for sp in row_specs], dtype=object),
        "log_param_count": _log(params),
        "log_flops_per_item": _log(flops_item),
        "log_flops_per_forward": _log(flops_item * batch),
        "num_layers": layers,
        "hidden_size": hidden,
        "log_sequence_length": _log(seq),
        "image_size": image,
        "log_audio_samples": _log(audio),
        "batch_size": batch,
        "log_batch_size": np.log(batch),
        "threads": threads,
        "bytes_per_element": bytes_el,
        "log_peak_tflops": _log(tflops),
        "log_memory_bandwidth_gbs": _log(bandwidth),
        "device_memory_gb": np.array([sp.memory_gb for sp in row_specs], dtype=float),
        "spec_known": np.array([1.0 if sp.known else 0.0 for sp in row_specs], dtype=float),
        "log_weight_mb": _log(roof["weight_mb"]),
        "log_roofline_compute_ms": _log(roof["compute_ms"]),
        "log_roofline_memory_ms": _log(roof["memory_ms"]),
        "log_roofline_ms": _log(roof["latency_ms"]),
        "log_roofline_memory_mb": _log(roof["memory_mb"]),
        "log_launches": _log(launches),
        "log_launch_floor_ms": _log(floor_ms),
        "log_flops_per_launch": _log(flops_item * batch / launches),
        "log_regime_ms": _log(np.maximum(floor_ms, roof["latency_ms"])),
        "num_attention_heads": heads,
        "kv_group": heads / np.where(kv_heads > 0, kv_heads, np.nan),
    }
    return pd.DataFrame({name: columns[name] for name in FEATURE_COLUMNS}, index=rows.index)


#: `ModelInfo` fields a record holds by the same name (its name is the record's ``model``, its FLOPs
#: per item the record's ``flops_per_forward`` over the batch).
_RECORD_FIELDS: tuple[str, ...] = tuple(f.name for f in fields(ModelInfo) if f.name not in ("name", "flops_per_item"))


def query_row(model: ModelInfo, *, hardware: str, backend: str, precision: str, batch_size: int,
              mode: str = "inference", device_name: str | None = None,
              threads: int | None = None) -> dict[str, Any]:
    """A record-like dict for one configuration (`threads` None: this machine's usable cores); stack
    many and call `feature_frame` once (much faster than one `query_frame` per configuration)."""
    if batch_size < 1:
        raise ValueError(f"batch_size must be >= 1, got {batch_size}")
    return {"model": model.name, **{name: getattr(model, name) for name in _RECORD_FIELDS},
            "flops_per_forward": float(model.flops_per_item) * batch_size, "batch_size": int(batch_size),
            "precision": precision, "backend": backend, "hardware": hardware,
            "device_name": device_name or "", "mode": mode, "threads": threads}


def query_frame(model: ModelInfo, **case: Any) -> pd.DataFrame:
    """One row of `FEATURE_COLUMNS` for a configuration (measured or not); `case` as in `query_row`."""
    return feature_frame(pd.DataFrame([query_row(model, **case)]))


__all__ = ["CATEGORICAL_FEATURES", "FEATURE_COLUMNS", "NUMERIC_FEATURES", "feature_frame", "launch_floor_ms",
           "query_frame", "query_row"]
