"""Hardware and runtime detection: what this machine can run, and why not where it cannot.

`detect_hardware()` runs the probes once per process and returns a `HardwareInfo`: one
`TargetInfo` per target (cpu, cuda, rocm, mps, xpu, openvino, onnxruntime, qnn), each saying
whether it is available, why not, its devices and the precisions it runs natively.
Probes name capabilities, never backend classes.
"""

from __future__ import annotations

import functools
import importlib
import os
import platform
from collections.abc import Callable, Mapping
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

TARGETS: tuple[str, ...] = ("cpu", "cuda", "rocm", "mps", "xpu", "openvino", "onnxruntime", "qnn")
PRECISIONS: tuple[str, ...] = ("fp32", "fp16", "bf16", "int8")

#: CPU ISA flags worth reporting (x86 and Arm spellings as /proc/cpuinfo gives them).
CPU_FLAGS: tuple[str, ...] = (
    "avx2", "avx512f", "avx512_vnni", "avx512_bf16", "avx512_fp16",
    "amx_tile", "amx_bf16", "amx_int8", "amx_fp16", "avx_vnni",
    "asimd", "asimdhp", "fphp", "bf16", "i8mm", "sve",
)


@dataclass(frozen=True)
class DeviceInfo:
    """One device of a target (a GPU, an OpenVINO device, the CPU package)."""

    index: int
    name: str
    memory_mb: float | None = None
    capability: str | None = None
    precisions: tuple[str, ...] = ()


@dataclass(frozen=True)
class TargetInfo:
    """A hardware target or runtime: available or not (and why), devices, versions."""

    name: str
    available: bool
    reason: str = ""
    devices: tuple[DeviceInfo, ...] = ()
    precisions: tuple[str, ...] = ()
    details: Mapping[str, Any] = field(default_factory=dict)

    def unsupported_precision(self, precision: str, device_index: int = 0) -> str | None:
        """None when `precision` runs natively here, else the skip reason."""
        if not self.available:
            return f"{self.name}: {self.reason}"
        supported = self.precisions
        if self.devices and device_index < len(self.devices) and self.devices[device_index].precisions:
            supported = self.devices[device_index].precisions
        if precision in supported:
            return None
        where = self.devices[device_index].name if self.devices else self.name
        return f"{precision} unsupported on this {self.name} device ({where}); supported: {', '.join(supported)}"


@dataclass(frozen=True)
class HardwareInfo:
    """Everything `detect_hardware` found, keyed by target name."""

    targets: Mapping[str, TargetInfo]

    def __getitem__(self, name: str) -> TargetInfo:
        try:
            return self.targets[name]
        except KeyError:
            raise KeyError(f"unknown hardware target {name!r}; known: {', '.join(self.targets)}") from None

    def available(self) -> list[str]:
        """Names of the available targets."""
        return [name for name, info in self.targets.items() if info.available]

    def summary(self) -> str:
        """One line, e.g. ``cpu(AMD EPYC x2), onnxruntime(CPUExecutionProvider)``."""
        parts = []
        for info in self.targets.values():
            if info.available:
                names = sorted({d.name for d in info.devices})
                parts.append(f"{info.name}({', '.join(names)})" if names else info.name)
        return ", ".join(parts)

    def to_dict(self) -> dict[str, Any]:
        """JSON-ready dict, one entry per target."""
        return {name: asdict(info) for name, info in self.targets.items()}


def _not_available(name: str, reason: str, **details: Any) -> TargetInfo:
    return TargetInfo(name=name, available=False, reason=reason, details=details)


def _cpu_flags() -> tuple[str, set[str]]:
    model, flags = platform.processor() or platform.machine(), set()
    cpuinfo = Path("/proc/cpuinfo")
    if cpuinfo.exists():
        for line in cpuinfo.read_text(errors="replace").splitlines():
            key, _, value = line.partition(":")
            key = key.strip()
            if key in ("model name", "Model", "Hardware") and value.strip():
                model = value.strip()
            elif key in ("flags", "Features"):
                flags.update(value.split())
    return model, flags


def cpu_precisions(flags: set[str], machine: str) -> tuple[str, ...]:
    """Precisions the CPU runs natively, from its ISA flags."""
    precisions = ["fp32"]
    if flags & {"avx512_fp16", "amx_fp16", "asimdhp", "fphp"}:
        precisions.append("fp16")
    if flags & {"avx512_bf16", "amx_bf16", "bf16"}:
        precisions.append("bf16")
    if machine.lower() in ("x86_64", "amd64", "aarch64", "arm64"):
        precisions.append("int8")  # fbgemm (x86) / qnnpack (Arm) dynamic int8
    return tuple(precisions)


def detect_cpu() -> TargetInfo:
    """The host CPU: model name, cores, ISA flags, native precisions."""
    import psutil

    model, flags = _cpu_flags()
    machine = platform.machine()
    precisions = cpu_precisions(flags, machine)
    details = {
        "model": model,
        "machine": machine,
        "physical_cores": psutil.cpu_count(logical=False),
        "logical_cores": psutil.cpu_count(logical=True),
        "usable_cores": len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else os.cpu_count(),
        "memory_mb": round(psutil.virtual_memory().total / 2**20),
        "flags": sorted(flags & set(CPU_FLAGS)),
    }
    device = DeviceInfo(0, model, details["memory_mb"], None, precisions)
    return TargetInfo("cpu", True, "", (device,), precisions, details)


def _torch() -> Any | None:
    try:
        return importlib.import_module("torch")
    except ImportError:
        return None


def _gpu_devices(module: Any, count: int, bf16: Callable[[int], bool]) -> tuple[DeviceInfo, ...]:
    devices = []
    for i in range(count):
        props = module.get_device_properties(i)
        capability = f"{props.major}.{props.minor}" if hasattr(props, "major") else None
        precisions = ("fp32", "fp16") + (("bf16",) if bf16(i) else ())
        devices.append(DeviceInfo(i, props.name, round(props.total_memory / 2**20), capability, precisions))
    return tuple(devices)


def _cuda_like(name: str) -> TargetInfo:
    torch = _torch()
    if torch is None:
        return _not_available(name, "torch is not installed")
    hip = getattr(torch.version, "hip", None)
    if name == "cuda" and hip:
        return _not_available(name, f"torch is a ROCm build (hip {hip}); see the rocm target")
    if name == "rocm" and not hip:
        return _not_available(name, "torch is not a ROCm build (torch.version.hip is None)")
    if name == "cuda" and torch.version.cuda is None:
        return _not_available(name, f"torch {torch.__version__} is built without CUDA (torch.version.cuda is None)")
    if not torch.cuda.is_available():
        return _not_available(name, "torch.cuda.is_available() is False")

    def bf16(index: int) -> bool:
        with torch.cuda.device(index):
            return bool(torch.cuda.is_bf16_supported(including_emulation=False))

    devices = _gpu_devices(torch.cuda, torch.cuda.device_count(), bf16)
    details: dict[str, Any] = {"torch": torch.__version__}
    if hip:
        details["hip"] = hip
    else:
        details["cuda_runtime"] = torch.version.cuda
        try:
            details["driver"] = torch._C._cuda_getDriverVersion()
        except (AttributeError, RuntimeError):
            pass
    precisions = tuple(p for p in PRECISIONS if all(p in d.precisions for d in devices))
    return TargetInfo(name, True, "", devices, precisions, details)


def detect_cuda() -> TargetInfo:
    """NVIDIA GPUs through torch.cuda."""
    return _cuda_like("cuda")


def detect_rocm() -> TargetInfo:
    """AMD GPUs through torch's HIP build (torch.cuda with torch.version.hip)."""
    return _cuda_like("rocm")


def detect_mps() -> TargetInfo:
    """Apple GPUs through torch.backends.mps."""
    torch = _torch()
    if torch is None:
        return _not_available("mps", "torch is not installed")
    if not torch.backends.mps.is_built():
        return _not_available("mps", "torch is built without MPS (torch.backends.mps.is_built() is False)")
    if not torch.backends.mps.is_available():
        return _not_available("mps", "torch.backends.mps.is_available() is False")
    precisions = ("fp32", "fp16", "bf16")
    return TargetInfo("mps", True, "", (DeviceInfo(0, "Apple MPS", None, None, precisions),), precisions,
                      {"torch": torch.__version__, "macos": platform.mac_ver()[0]})


def detect_xpu() -> TargetInfo:
    """Intel GPUs through torch.xpu."""
    torch = _torch()
    if torch is None:
        return _not_available("xpu", "torch is not installed")
    xpu = getattr(torch, "xpu", None)
    if xpu is None or not xpu.is_available():
        return _not_available("xpu", "torch.xpu.is_available() is False")
    devices = _gpu_devices(xpu, xpu.device_count(), lambda i: True)
    precisions = ("fp32", "fp16", "bf16")
    return TargetInfo("xpu", True, "", devices, precisions, {"torch": torch.__version__})


#: OpenVINO OPTIMIZATION_CAPABILITIES -> our precision names.
_OV_CAPS = {"FP32": "fp32", "FP16": "fp16", "BF16": "bf16", "INT8": "int8"}


def openvino_devices_from(core: Any) -> tuple[DeviceInfo, ...]:
    """Device list from an `openvino.Core` (or anything with the same methods)."""
    devices = []
    for i, name in enumerate(core.available_devices):
        try:
            full = core.get_property(name, "FULL_DEVICE_NAME")
        except RuntimeError:
            full = name
        try:
            caps = core.get_property(name, "OPTIMIZATION_CAPABILITIES")
        except RuntimeError:
            caps = ["FP32"]
        precisions = tuple(p for cap, p in _OV_CAPS.items() if cap in caps)
        devices.append(DeviceInfo(i, f"{name}: {full}", None, None, precisions))
    return tuple(devices)


def detect_openvino() -> TargetInfo:
    """OpenVINO runtime and its devices (CPU, GPU, NPU)."""
    try:
        ov = importlib.import_module("openvino")
    except ImportError:
        return _not_available("openvino", "openvino is not installed (pip install 'pytest-hwbench[openvino]')")
    devices = openvino_devices_from(ov.Core())
    if not devices:
        return _not_available("openvino", "openvino found no device")
    precisions = tuple(p for p in PRECISIONS if any(p in d.precisions for d in devices))
    return TargetInfo("openvino", True, "", devices, precisions, {"version": ov.__version__})


def detect_onnxruntime() -> TargetInfo:
    """ONNX Runtime and its execution providers."""
    try:
        ort = importlib.import_module("onnxruntime")
    except ImportError:
        return _not_available("onnxruntime", "onnxruntime is not installed (pip install 'pytest-hwbench[onnx]')")
    providers = tuple(ort.get_available_providers())
    devices = tuple(DeviceInfo(i, p) for i, p in enumerate(providers))
    return TargetInfo("onnxruntime", True, "", devices, ("fp32", "fp16", "int8"),
                      {"version": ort.__version__, "providers": list(providers)})


def qai_hub_configured() -> str | None:
    """None when Qualcomm AI Hub has a token, else how to configure one."""
    if os.environ.get("QAI_HUB_API_TOKEN"):
        return None
    ini = os.environ.get("QAIHUB_CLIENT_INI") or str(Path.home() / ".qai_hub" / "client.ini")
    if Path(ini).exists():
        return None
    return ("no Qualcomm AI Hub token: run `qai-hub configure --api_token TOKEN` "
            "or set QAI_HUB_API_TOKEN")


def detect_qnn() -> TargetInfo:
    """Qualcomm NPUs through Qualcomm AI Hub (cloud devices; needs qai-hub and a token)."""
    try:
        hub = importlib.import_module("qai_hub")
    except ImportError:
        return _not_available("qnn", "qai-hub is not installed (pip install 'pytest-hwbench[qnn]')")
    reason = qai_hub_configured()
    if reason:
        return _not_available("qnn", reason, version=getattr(hub, "__version__", "?"))
    # The Hexagon NPU runs float graphs in fp16: there is no native fp32 there.
    return TargetInfo("qnn", True, "", (), ("fp16", "int8"),
                      {"version": getattr(hub, "__version__", "?")})


#: Probe per target. Third-party code may add probes before the first `detect_hardware()` call.
PROBES: dict[str, Callable[[], TargetInfo]] = {
    "cpu": detect_cpu,
    "cuda": detect_cuda,
    "rocm": detect_rocm,
    "mps": detect_mps,
    "xpu": detect_xpu,
    "openvino": detect_openvino,
    "onnxruntime": detect_onnxruntime,
    "qnn": detect_qnn,
}


@functools.cache
def detect_hardware() -> HardwareInfo:
    """Probe every target once per process; a probe that crashes reports the target unavailable."""
    targets = {}
    for name, probe in PROBES.items():
        try:
            targets[name] = probe()
        except Exception as exc:  # a broken driver must not stop the session
            targets[name] = _not_available(name, f"detection failed: {type(exc).__name__}: {exc}")
    return HardwareInfo(targets)


__all__ = [
    "PRECISIONS",
    "PROBES",
    "TARGETS",
    "DeviceInfo",
    "HardwareInfo",
    "TargetInfo",
    "detect_hardware",
]
