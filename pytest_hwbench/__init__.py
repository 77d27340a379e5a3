"""pytest-hwbench: benchmark ML models across hardware, backends, batch sizes and precisions."""

from __future__ import annotations

from typing import TYPE_CHECKING

from ._lazy import lazy_exports

if TYPE_CHECKING:
    from .backends import Backend, LoadedModel, get_backend, register_backend, registered_backends
    from .backends.base import MeasuredElsewhere, RemoteMeasurement, WrappedModel
    from .case import BenchCase
    from .compare import Comparison, compare_records
    from .errors import HwbenchError, HwbenchWarning, PrecisionMismatch, UnsupportedCase
    from .hardware import DeviceInfo, HardwareInfo, TargetInfo, detect_hardware
    from .interference import InterferenceMonitor, ReferenceBaseline, judge
    from .models import MODELS, ModelSpec, get_model, load_model_set, register_model
    from .record import BenchmarkRecord, SessionInfo, normalize_record
    from .result import CaseResult, failed_record
    from .runner import Runner
    from .scenarios import Scenario
    from .trackers import (
        Latency,
        LatencyTracker,
        LocalCall,
        Measurement,
        Memory,
        MemoryTracker,
        RemoteCall,
        Sample,
        TimingConfig,
    )

#: module -> the public names it defines, each imported on first use (PEP 562): cheap imports.
_MODULES: dict[str, tuple[str, ...]] = {
    "backends": ("Backend", "LoadedModel", "get_backend", "register_backend", "registered_backends"),
    "backends.base": ("MeasuredElsewhere", "RemoteMeasurement", "WrappedModel"),
    "case": ("BenchCase",),
    "compare": ("Comparison", "compare_records"),
    "errors": ("HwbenchError", "HwbenchWarning", "PrecisionMismatch", "UnsupportedCase"),
    "hardware": ("DeviceInfo", "HardwareInfo", "TargetInfo", "detect_hardware"),
    "interference": ("InterferenceMonitor", "ReferenceBaseline", "judge"),
    "models": ("MODELS", "ModelSpec", "get_model", "load_model_set", "register_model"),
    "record": ("BenchmarkRecord", "SessionInfo", "normalize_record"),
    "result": ("CaseResult", "failed_record"),
    "runner": ("Runner",),
    "scenarios": ("Scenario",),
    "trackers": ("Latency", "LatencyTracker", "LocalCall", "Measurement", "Memory", "MemoryTracker", "RemoteCall",
                 "Sample", "TimingConfig"),
}

__version__ = "0.1.0"

__all__ = ["MODELS", "Backend", "BenchCase", "BenchmarkRecord", "CaseResult", "Comparison", "DeviceInfo",
           "HardwareInfo", "HwbenchError", "HwbenchWarning", "InterferenceMonitor", "Latency",
           "LatencyTracker", "LoadedModel", "LocalCall", "MeasuredElsewhere", "Measurement", "Memory",
           "MemoryTracker", "ModelSpec", "PrecisionMismatch", "ReferenceBaseline", "RemoteCall",
           "RemoteMeasurement", "Runner", "Sample", "Scenario", "SessionInfo", "TargetInfo", "TimingConfig",
           "UnsupportedCase", "WrappedModel", "__version__", "compare_records", "detect_hardware",
           "failed_record", "get_backend", "get_model", "judge", "load_model_set", "normalize_record",
           "register_backend", "register_model", "registered_backends"]

_EXPORTS = {name: module for module, names in _MODULES.items() for name in names}
__getattr__, __dir__ = lazy_exports(__name__, _EXPORTS, __all__)
