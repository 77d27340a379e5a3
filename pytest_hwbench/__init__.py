"""pytest-hwbench: benchmark ML models across hardware, backends, batch sizes and precisions."""

from __future__ import annotations

from .backends import Backend, LoadedModel, get_backend, register_backend, registered_backends
from .errors import HwbenchError, HwbenchWarning, PrecisionMismatch, UnsupportedCase
from .hardware import DeviceInfo, HardwareInfo, TargetInfo, detect_hardware
from .models import MODELS, ModelSpec, get_model, load_model_set, register_model
from .record import BenchmarkRecord, SessionInfo, normalize_record
from .runner import BenchCase, CaseResult, Runner, failed_record
from .trackers import Latency, LatencyTracker, Memory, MemoryTracker, TimingConfig

__version__ = "0.1.0"

__all__ = [
    "MODELS",
    "Backend",
    "BenchCase",
    "BenchmarkRecord",
    "CaseResult",
    "DeviceInfo",
    "HardwareInfo",
    "HwbenchError",
    "HwbenchWarning",
    "Latency",
    "LatencyTracker",
    "LoadedModel",
    "Memory",
    "MemoryTracker",
    "ModelSpec",
    "PrecisionMismatch",
    "Runner",
    "SessionInfo",
    "TargetInfo",
    "TimingConfig",
    "UnsupportedCase",
    "__version__",
    "detect_hardware",
    "failed_record",
    "get_backend",
    "get_model",
    "load_model_set",
    "normalize_record",
    "register_backend",
    "register_model",
    "registered_backends",
]
