"""Hardware and runtime detection: what this machine can run, and why not where it cannot.

`detect_hardware(targets)` runs each asked-for target's probe at most once per process; the
targets and their order are the rows of `pytest_hwbench.facts`, and other modules add probes with
`register_probe`. Torch's GPU runtimes are read as recorded facts (`gather_torch_facts`) and then
interpreted (`target_from_facts`), so the interpretation is tested on other machines' facts.
"""

from __future__ import annotations

import contextlib
import functools
import os
import platform
import threading
from collections.abc import Callable, Iterable, Mapping
from dataclasses import asdict, dataclass, field, fields
from pathlib import Path
from typing import Any

from ._plugins import HARDWARE_GROUP, Registry
from .facts import target_names, torch_runtimes
from .vocabulary import PRECISIONS

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

    def unsupported_precision(self, precision: str) -> str | None:
        """None when `precision` runs natively here (on its first device), else the skip reason."""
        if not self.available:
            return f"{self.name}: {self.reason}"
        first = self.devices[0] if self.devices else None
        supported = first.precisions if first and first.precisions else self.precisions
        if precision in supported:
            return None
        where = first.name if first else self.name
        return f"{precision} unsupported on this {self.name} device ({where}); supported: {', '.join(supported)}"


@dataclass(frozen=True)
class HardwareInfo:
    """What `detect_hardware` found, keyed by target name: the targets it probed, nothing more.
    Looking a target up probes nothing; one that was not probed is a KeyError (`get`: None)."""

    targets: Mapping[str, TargetInfo]

    def __getitem__(self, name: str) -> TargetInfo:
        try:
            return self.targets[name]
        except KeyError:
            raise KeyError(f"hardware target {name!r} was not probed for this value (it holds "
                           f"{', '.join(self.targets) or 'none'}); detect_hardware(targets=[{name!r}, ...]) "
                           "probes it") from None

    def get(self, name: str) -> TargetInfo | None:
        """The target `name`, or None where it was not probed."""
        return self.targets.get(name)

    def available(self) -> list[str]:
        """Names of the available targets."""
        return [name for name, info in self.targets.items() if info.available]

    def summary(self) -> str:
        """One line, e.g. ``cpu(AMD EPYC x2), onnxruntime(CPUExecutionProvider)``."""
        names = {info.name: sorted({d.name for d in info.devices}) for info in self.targets.values() if info.available}
        return ", ".join(f"{name}({', '.join(devices)})" if devices else name for name, devices in names.items())

    def to_dict(self) -> dict[str, Any]:
        """JSON-ready dict, one entry per target."""
        return {name: asdict(info) for name, info in self.targets.items()}


def not_available(name: str, reason: str, **details: Any) -> TargetInfo:
    """The `TargetInfo` of a target that cannot run here, saying why."""
    return TargetInfo(name=name, available=False, reason=reason, details=details)


def detect_cpu() -> TargetInfo:
    """The host CPU: model name, cores, ISA flags, native precisions."""
    import psutil

    machine = platform.machine()
    model, flags = platform.processor() or machine, set()
    cpuinfo = Path("/proc/cpuinfo")
    for line in cpuinfo.read_text(errors="replace").splitlines() if cpuinfo.exists() else ():
        key, _, value = (part.strip() for part in line.partition(":"))
        if key in ("model name", "Model", "Hardware") and value:
            model = value
        elif key in ("flags", "Features"):
            flags.update(value.split())
    has = {"fp32": True, "fp16": bool(flags & {"avx512_fp16", "amx_fp16", "asimdhp", "fphp"}),
           "bf16": bool(flags & {"avx512_bf16", "amx_bf16", "bf16"}),
           "int8": machine.lower() in ("x86_64", "amd64", "aarch64", "arm64")}  # fbgemm (x86) / qnnpack (Arm)
    precisions = tuple(p for p, present in has.items() if present)
    memory_mb = round(psutil.virtual_memory().total / 2**20)
    usable = len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else os.cpu_count()
    details = {"model": model, "machine": machine, "physical_cores": psutil.cpu_count(logical=False),
               "logical_cores": psutil.cpu_count(logical=True), "usable_cores": usable, "memory_mb": memory_mb,
               "flags": sorted(flags & set(CPU_FLAGS))}
    return TargetInfo("cpu", True, "", (DeviceInfo(0, model, memory_mb, None, precisions),), precisions, details)


# --- torch GPU runtimes: recorded facts in, TargetInfo out ------------------------------------

#: `torch.cuda.get_device_properties(i)` fields worth recording, named as torch names them.
#: ``pci_*`` exist from torch 2.8; on CUDA builds ``gcnArchName`` repeats ``name``
#: (torch/csrc/cuda/Module.cpp), so it is recorded on ROCm builds only.
CUDA_PROPERTY_FIELDS: tuple[str, ...] = (
    "name", "major", "minor", "total_memory", "multi_processor_count", "is_integrated",
    "uuid", "pci_bus_id", "pci_device_id", "pci_domain_id", "L2_cache_size",
)
ROCM_PROPERTY_FIELDS: tuple[str, ...] = (*CUDA_PROPERTY_FIELDS, "gcnArchName")
#: `torch.xpu.get_device_properties(i)` fields worth recording (`torch._C._XpuDeviceProperties`).
XPU_PROPERTY_FIELDS: tuple[str, ...] = (
    "name", "platform_name", "vendor", "type", "device_id", "driver_version", "version",
    "total_memory", "max_compute_units", "gpu_eu_count", "gpu_subslice_count", "has_fp16",
    "has_fp64", "has_bfloat16_conversions", "has_subgroup_matrix_multiply_accumulate",
    "is_integrated_gpu", "architecture", "uuid",
)
#: Environment variables that change which devices a runtime sees.
VISIBILITY_ENV: Mapping[str, tuple[str, ...]] = {
    "cuda": ("CUDA_VISIBLE_DEVICES", "CUDA_DEVICE_ORDER"),
    "rocm": ("HIP_VISIBLE_DEVICES", "ROCR_VISIBLE_DEVICES", "CUDA_VISIBLE_DEVICES"),
    "mps": (),
    "xpu": ("ZE_AFFINITY_MASK", "ONEAPI_DEVICE_SELECTOR"),
}
#: gfx architectures with bfloat16 arithmetic in hardware (CDNA1+, RDNA3+; HIP's
#: docs/reference/hardware_features.rst). torch.cuda.is_bf16_supported() answers True on every
#: ROCm device, emulated or not, so it cannot tell.
ROCM_BF16_ARCHS: tuple[str, ...] = ("gfx908", "gfx90a", "gfx94", "gfx95", "gfx11", "gfx12")
#: MPS refuses bfloat16 before macOS 14 ("MPS BFloat16 is only supported on MacOS 14 or newer").
MPS_BF16_MACOS = 14


@dataclass(frozen=True)
class TorchFacts:
    """What the installed torch reported about one runtime: the whole input of its detection.

    `devices` holds one mapping per device under torch's own property names (``total_memory`` in
    bytes...); mps's one device holds ``name``, ``core_count`` and ``recommended_max_memory``.
    `extra` holds ``env`` (the visibility variables set), ``driver`` (cuda) and ``macos`` (mps);
    `error` is an exception raised while asking.
    """

    runtime: str
    torch_installed: bool = True
    torch_version: str | None = None
    version: Mapping[str, str | None] = field(default_factory=dict)
    is_built: bool = False
    is_available: bool = False
    device_count: int = 0
    devices: tuple[Mapping[str, Any], ...] = ()
    extra: Mapping[str, Any] = field(default_factory=dict)
    error: str | None = None

    def __post_init__(self) -> None:
        if self.runtime not in torch_runtimes():
            raise ValueError(f"runtime {self.runtime!r} is not one of {torch_runtimes()}")

    @classmethod
    def from_dict(cls, data: Mapping[str, Any]) -> TorchFacts:
        """Facts from a JSON-ready dict (`to_dict`'s shape; other keys such as ``source`` are ignored)."""
        values = {f.name: data[f.name] for f in fields(cls) if f.name in data}
        return cls(**{**values, "devices": tuple(dict(d) for d in data.get("devices") or ())})

    def to_dict(self) -> dict[str, Any]:
        """JSON-ready dict; `from_dict` reads it back."""
        return {**asdict(self), "devices": [dict(d) for d in self.devices]}


def _plain(value: Any) -> Any:
    """A JSON-ready copy of a property value (torch's uuid objects become their string)."""
    if value is None or isinstance(value, (bool, int, float, str)):
        return value
    if isinstance(value, (list, tuple)):
        return [_plain(v) for v in value]
    return str(value)


def _gather(torch: Any, runtime: str, facts: dict[str, Any]) -> TorchFacts:
    version = facts["version"]
    if runtime in ("cuda", "rocm"):
        # A ROCm build drives AMD GPUs through torch.cuda: each target claims only its own build.
        built = bool(version["hip"]) if runtime == "rocm" else version["cuda"] is not None
        module, fields = torch.cuda, ROCM_PROPERTY_FIELDS if runtime == "rocm" else CUDA_PROPERTY_FIELDS
    elif runtime == "xpu":
        module, fields = getattr(torch, "xpu", None), XPU_PROPERTY_FIELDS
        compiled = getattr(module, "_is_compiled", None)
        built = bool(compiled()) if callable(compiled) else version["xpu"] is not None
    else:
        module = getattr(torch.backends, "mps", None)
        facts["extra"]["macos"] = platform.mac_ver()[0] or None
        built = module is not None and bool(module.is_built())
    if not built or module is None:
        return TorchFacts(**facts)
    available = bool(module.is_available())
    if runtime == "mps":  # no device properties: its one device is what the backend's getters say
        getters = {"name": getattr(module, "get_name", None), "core_count": getattr(module, "get_core_count", None),
                   "recommended_max_memory": getattr(torch.mps, "recommended_max_memory", None)}
        devices = ({key: _plain(fn()) for key, fn in getters.items() if callable(fn)},) if available else ()
    else:
        count = int(module.device_count()) if available else 0
        props = [module.get_device_properties(i) for i in range(count)]
        devices = tuple({name: _plain(getattr(p, name)) for name in fields if hasattr(p, name)} for p in props)
    if runtime == "cuda" and available:
        with contextlib.suppress(AttributeError, RuntimeError):
            facts["extra"]["driver"] = int(torch._C._cuda_getDriverVersion())
    return TorchFacts(**facts, is_built=True, is_available=available, device_count=len(devices), devices=devices)


def gather_torch_facts(runtime: str) -> TorchFacts:
    """Ask the installed torch what it sees of `runtime` (cuda, rocm, mps, xpu); interpret nothing
    (``json.dumps(gather_torch_facts("rocm").to_dict())`` records a machine for the tests)."""
    if runtime not in torch_runtimes():
        raise ValueError(f"runtime {runtime!r} is not one of {torch_runtimes()}")
    env = {name: os.environ[name] for name in VISIBILITY_ENV[runtime] if name in os.environ}
    try:
        import torch
    except ImportError:
        return TorchFacts(runtime, torch_installed=False, extra={"env": env})
    facts: dict[str, Any] = {
        "runtime": runtime,
        "torch_version": str(torch.__version__),
        "version": {k: getattr(torch.version, k, None) for k in ("cuda", "hip", "xpu")},
        "extra": {"env": env},
    }
    try:
        return _gather(torch, runtime, facts)
    except Exception as exc:  # a broken driver must not stop detection; the reason names it
        return TorchFacts(**facts, error=f"{type(exc).__name__}: {exc}")


def _mib(value: Any) -> float | None:
    return round(value / 2**20) if isinstance(value, (int, float)) and value > 0 else None


def _gpu_precisions(bf16: bool) -> tuple[str, ...]:
    return ("fp32", "fp16", "bf16") if bf16 else ("fp32", "fp16")


def rocm_arch(props: Mapping[str, Any]) -> str | None:
    """The gfx architecture of a ROCm device (``gfx942`` from ``gfx942:sramecc+:xnack-``)."""
    arch = str(props.get("gcnArchName") or "").split(":", 1)[0]
    return arch or None


def _why_not(facts: TorchFacts) -> str | None:
    """Why the runtime those facts describe cannot run here, None where it can."""
    runtime, hip = facts.runtime, facts.version.get("hip")
    if not facts.torch_installed:
        return "torch is not installed"
    if facts.error:
        return f"detection failed: {facts.error}"
    if runtime == "cuda" and hip:
        return f"torch is a ROCm build (hip {hip}); see the rocm target"
    if not facts.is_built:
        return {
            "cuda": f"torch {facts.torch_version} is built without CUDA (torch.version.cuda is None)",
            "rocm": "torch is not a ROCm build (torch.version.hip is None)",
            "mps": "torch is built without MPS (torch.backends.mps.is_built() is False)",
            "xpu": f"torch {facts.torch_version} is built without XPU (torch.xpu._is_compiled() is False; install "
                   "an XPU build of torch)",
        }[runtime]
    if not facts.is_available or not facts.devices:
        macos, env = facts.extra.get("macos"), facts.extra.get("env") or {}
        where = f" on macOS {macos}" if macos else ""
        shown = [f"{n}={env[n]!r}" for n in VISIBILITY_ENV[runtime] if n in env and n != "CUDA_DEVICE_ORDER"]
        return {
            "cuda": "torch.cuda.is_available() is False",
            "rocm": f"torch.cuda.is_available() is False on this ROCm build (hip {hip})",
            "mps": f"torch.backends.mps.is_available() is False{where} (MPS needs Apple silicon or an AMD GPU and "
                   "macOS 12.3+)",
            "xpu": "torch.xpu.is_available() is False (no Intel GPU visible to Level Zero)",
        }[runtime] + (f" ({', '.join(shown)})" if shown else "")
    return None


def _cuda_devices(facts: TorchFacts) -> tuple[list[DeviceInfo], dict[str, Any]]:
    devices = []
    for i, props in enumerate(facts.devices):
        major, minor = props.get("major"), props.get("minor")
        # Native bf16 from compute capability 8.0 (Ampere), as torch.cuda.is_bf16_supported(
        # including_emulation=False) decides; older GPUs only emulate it.
        devices.append(DeviceInfo(i, str(props.get("name") or f"cuda:{i}"), _mib(props.get("total_memory")),
                                  f"{major}.{minor}" if major is not None else None,
                                  _gpu_precisions(isinstance(major, int) and major >= 8)))
    details: dict[str, Any] = {"cuda_runtime": facts.version.get("cuda")}
    if facts.extra.get("driver") is not None:
        details["driver"] = facts.extra["driver"]
    return devices, details


def _rocm_devices(facts: TorchFacts) -> tuple[list[DeviceInfo], dict[str, Any]]:
    devices = []
    for i, props in enumerate(facts.devices):
        arch = rocm_arch(props)
        # Unknown arch (torch too old to report gcnArchName): keep torch's own answer, bf16.
        devices.append(DeviceInfo(i, str(props.get("name") or f"AMD GPU {arch or i}"), _mib(props.get("total_memory")),
                                  arch, _gpu_precisions(arch is None or arch.startswith(ROCM_BF16_ARCHS))))
    return devices, {"hip": facts.version.get("hip"), "archs": sorted({d.capability for d in devices if d.capability})}


def _mps_devices(facts: TorchFacts) -> tuple[list[DeviceInfo], dict[str, Any]]:
    props, macos = facts.devices[0], facts.extra.get("macos")
    major = (macos or "").partition(".")[0]
    # recommended_max_memory is Metal's recommendedMaxWorkingSetSize: what the GPU may use of
    # unified memory before it pages, the figure a memory check should plan against.
    device = DeviceInfo(0, str(props.get("name") or "Apple MPS"), _mib(props.get("recommended_max_memory")),
                        None, _gpu_precisions(major.isdigit() and int(major) >= MPS_BF16_MACOS))
    return [device], {"macos": macos, "gpu_cores": props.get("core_count")}


def _xpu_devices(facts: TorchFacts) -> tuple[list[DeviceInfo], dict[str, Any]]:
    devices = []
    for i, props in enumerate(facts.devices):
        # torch.xpu.is_bf16_supported(including_emulation=False) reads has_bfloat16_conversions;
        # torch builds that do not report it answer True for every device.
        has = {"fp32": True, "fp16": props.get("has_fp16", True), "bf16": props.get("has_bfloat16_conversions", True)}
        devices.append(DeviceInfo(i, str(props.get("name") or f"xpu:{i}"), _mib(props.get("total_memory")),
                                  None, tuple(p for p, present in has.items() if present)))
    first = facts.devices[0]
    return devices, {"xpu": facts.version.get("xpu"), "driver": first.get("driver_version"),
                     "platform": first.get("platform_name")}


_INTERPRETERS: Mapping[str, Callable[[TorchFacts], tuple[list[DeviceInfo], dict[str, Any]]]] = {
    "cuda": _cuda_devices, "rocm": _rocm_devices, "mps": _mps_devices, "xpu": _xpu_devices,
}


def target_from_facts(facts: TorchFacts) -> TargetInfo:
    """The `TargetInfo` those facts describe: availability and why not, devices, precisions."""
    reason = _why_not(facts)
    if reason is not None:
        return not_available(facts.runtime, reason)
    devices, details = _INTERPRETERS[facts.runtime](facts)
    precisions = tuple(p for p in PRECISIONS if all(p in d.precisions for d in devices))
    return TargetInfo(facts.runtime, True, "", tuple(devices), precisions, {"torch": facts.torch_version, **details})


def detect_torch_runtime(runtime: str) -> TargetInfo:
    """The target of torch GPU runtime `runtime`: NVIDIA (cuda), AMD through torch's HIP build
    (rocm), Apple (mps) or Intel (xpu) GPUs."""
    return target_from_facts(gather_torch_facts(runtime))


#: target name -> probe, filled by `register_probe`: the torch runtimes and the CPU here, other
#: targets by the modules of the ``pytest_hwbench.hardware`` entry-point group (ours and a third
#: party's alike; a later registration of a name replaces the earlier one).
_PROBES: Registry[Callable[[], TargetInfo]] = Registry(HARDWARE_GROUP, "hardware probe")


def _in_table_order(names: Iterable[str]) -> list[str]:
    """`names` in the target table's order, then those without a row in the order given."""
    table = target_names()
    return sorted(names, key=lambda name: table.index(name) if name in table else len(table))


def register_probe(name: str, probe: Callable[[], TargetInfo]) -> Callable[[], TargetInfo]:
    """Add (or replace) the probe of target `name`; called by probe modules at import."""
    return _PROBES.register(name, probe)


def registered_probes() -> dict[str, Callable[[], TargetInfo]]:
    """Every probe by target, imported once: the target table's rows in its order
    (`pytest_hwbench.facts.target_names`), then others in the order they registered."""
    probes = _PROBES.loaded()
    return {name: probes[name] for name in _in_table_order(probes)}


register_probe("cpu", detect_cpu)
for _runtime in _INTERPRETERS:
    register_probe(_runtime, functools.partial(detect_torch_runtime, _runtime))


#: target -> what its probe found, once per process (`detect_hardware`).
_FOUND: dict[str, TargetInfo] = {}
_FOUND_LOCK = threading.Lock()


def detect_hardware(targets: Iterable[str] | None = None) -> HardwareInfo:
    """What this machine has for `targets` (every registered target when None), each probed at
    most once per process: a CPU question runs the CPU probe only, and no browser starts unless a
    web target is asked for. A probe that crashes reports its target unavailable; an unknown
    target name is a ValueError naming the known ones."""
    wanted = None if targets is None else list(dict.fromkeys(targets))
    # The CPU and torch runtimes are built in: asking only for them imports no probe module.
    built_in = wanted is not None and all(name in _PROBES.items for name in wanted)
    probes = _PROBES.items if built_in else registered_probes()
    unknown = [name for name in wanted or () if name not in probes]
    if unknown:
        raise ValueError(f"unknown hardware target(s) {', '.join(map(repr, unknown))}; "
                         f"known: {', '.join(registered_probes())}")
    found = {}
    for name in _in_table_order(probes if wanted is None else wanted):
        with _FOUND_LOCK:
            if name not in _FOUND:
                try:
                    _FOUND[name] = probes[name]()
                except Exception as exc:  # a broken driver must not stop the session
                    _FOUND[name] = not_available(name, f"detection failed: {type(exc).__name__}: {exc}")
            found[name] = _FOUND[name]
    return HardwareInfo(found)


def probed_hardware() -> HardwareInfo:
    """The targets this process has probed so far (nothing is probed by asking)."""
    with _FOUND_LOCK:
        return HardwareInfo({name: _FOUND[name] for name in _in_table_order(_FOUND)})


__all__ = ["DeviceInfo", "HardwareInfo", "TargetInfo", "TorchFacts", "detect_hardware", "detect_torch_runtime",
           "gather_torch_facts", "not_available", "probed_hardware", "register_probe", "registered_probes",
           "target_from_facts"]
