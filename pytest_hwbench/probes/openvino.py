"""The ``openvino`` target: the OpenVINO runtime and its devices (CPU, GPU, NPU)."""

from __future__ import annotations

import contextlib
import importlib

from ..hardware import DeviceInfo, TargetInfo, not_available, register_probe
from ..vocabulary import PRECISIONS

#: OpenVINO OPTIMIZATION_CAPABILITIES -> our precision names.
_OV_CAPS = {"FP32": "fp32", "FP16": "fp16", "BF16": "bf16", "INT8": "int8"}


def detect_openvino() -> TargetInfo:
    """OpenVINO runtime and its devices (CPU, GPU, NPU)."""
    try:
        ov = importlib.import_module("openvino")
    except ImportError:
        return not_available("openvino", "openvino is not installed (pip install 'pytest-hwbench[openvino]')")
    core, devices = ov.Core(), []
    for i, name in enumerate(core.available_devices):
        full, caps = name, ["FP32"]
        with contextlib.suppress(RuntimeError):
            full = core.get_property(name, "FULL_DEVICE_NAME")
        with contextlib.suppress(RuntimeError):
            caps = core.get_property(name, "OPTIMIZATION_CAPABILITIES")
        precisions = tuple(p for cap, p in _OV_CAPS.items() if cap in caps)
        devices.append(DeviceInfo(i, f"{name}: {full}", None, None, precisions))
    if not devices:
        return not_available("openvino", "openvino found no device")
    precisions = tuple(p for p in PRECISIONS if any(p in d.precisions for d in devices))
    return TargetInfo("openvino", True, "", tuple(devices), precisions, {"version": ov.__version__})


register_probe("openvino", detect_openvino)

__all__ = ["detect_openvino"]
