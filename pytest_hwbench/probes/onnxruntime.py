"""The ``onnxruntime`` target: ONNX Runtime and its execution providers."""

from __future__ import annotations

import importlib

from ..hardware import DeviceInfo, TargetInfo, not_available, register_probe


def detect_onnxruntime() -> TargetInfo:
    """ONNX Runtime and its execution providers."""
    try:
        ort = importlib.import_module("onnxruntime")
    except ImportError:
        return not_available("onnxruntime", "onnxruntime is not installed (pip install 'pytest-hwbench[onnx]')")
    providers = tuple(ort.get_available_providers())
    devices = tuple(DeviceInfo(i, p) for i, p in enumerate(providers))
    return TargetInfo("onnxruntime", True, "", devices, ("fp32", "fp16", "int8"),
                      {"version": ort.__version__, "providers": list(providers)})


register_probe("onnxruntime", detect_onnxruntime)

__all__ = ["detect_onnxruntime"]
