"""Device specifications: peak FLOP/s per precision, memory bandwidth and memory, per device.

Figures are vendors' dense datasheet numbers (tensor-core rates for fp16/bf16/int8, plain FP32
for fp32: eager PyTorch does not use TF32). A CPU's spec comes from its name alone (`cpu_spec`),
so the same records get the same features on every host.
"""

from __future__ import annotations

import dataclasses
import functools
import re
from collections.abc import Mapping
from dataclasses import dataclass, field

from pytest_hwbench import facts


@dataclass(frozen=True)
class DeviceSpec:
    """Peak numbers of one device: `name` a short key (``h100``, ``cpu:amd epyc``), `peak_tflops`
    precision -> dense peak TFLOP/s (TOP/s for int8; a precision without a native path absent),
    bandwidth in GB/s, memory in GB (the host's for CPUs), `known` False for a generic fallback
    spec, `kind` ``gpu``, ``cpu``, ``npu`` or ``apple``, `aliases` the regexes (lower case) that
    match its device names."""

    name: str
    peak_tflops: Mapping[str, float]
    memory_bandwidth_gbs: float
    memory_gb: float
    known: bool = True
    kind: str = "gpu"
    aliases: tuple[str, ...] = field(default=(), compare=False, repr=False)

    def tflops(self, precision: str) -> float:
        """Peak TFLOP/s at `precision`, fp32's rate where the precision has no native path."""
        value = self.peak_tflops.get(precision) or self.peak_tflops.get("fp32") or min(self.peak_tflops.values())
        return float(value)


def _gpu(name: str, fp32: float, fp16: float, bf16: float | None, int8: float | None, bw: float, mem: float,
         *aliases: str, kind: str = "gpu", known: bool = True) -> DeviceSpec:
    peaks = {k: v for k, v in (("fp32", fp32), ("fp16", fp16), ("bf16", bf16), ("int8", int8)) if v is not None}
    return DeviceSpec(name, peaks, bw, mem, known, kind, aliases)


#: Known accelerators, matched against device names by their `aliases`.
KNOWN_DEVICES: tuple[DeviceSpec, ...] = (
    _gpu("h200", 67.0, 989.0, 989.0, 1979.0, 4800.0, 141.0, r"\bh200\b"),
    _gpu("h100-pcie", 51.0, 756.0, 756.0, 1513.0, 2000.0, 80.0, r"\bh100\b.*pcie"),
    _gpu("h100", 67.0, 989.0, 989.0, 1979.0, 3350.0, 80.0, r"\bh100\b", r"\bgh200\b"),
    _gpu("a100-40gb", 19.5, 312.0, 312.0, 624.0, 1555.0, 40.0, r"\ba100\b.*40\s*gb"),
    _gpu("a100", 19.5, 312.0, 312.0, 624.0, 2039.0, 80.0, r"\ba100\b"),
    _gpu("l40s", 91.6, 362.0, 362.0, 733.0, 864.0, 48.0, r"\bl40s\b"),
    _gpu("l4", 30.3, 121.0, 121.0, 242.0, 300.0, 24.0, r"\bl4\b"),
    _gpu("a10", 31.2, 125.0, 125.0, 250.0, 600.0, 24.0, r"\ba10g?\b"),
    _gpu("t4", 8.1, 65.0, None, 130.0, 320.0, 16.0, r"\bt4\b"),
    _gpu("v100", 15.7, 125.0, None, None, 900.0, 32.0, r"\bv100\b"),
    _gpu("rtx-4090", 82.6, 165.2, 165.2, 660.6, 1008.0, 24.0, r"\b4090\b"),
    _gpu("rtx-3090", 35.6, 71.0, 71.0, 284.0, 936.0, 24.0, r"\b3090\b"),
    _gpu("mi300x", 163.4, 1307.0, 1307.0, 2615.0, 5300.0, 192.0, r"\bmi300x?\b"),
    _gpu("mi250x", 47.9, 383.0, 383.0, 383.0, 3277.0, 128.0, r"\bmi250x?\b"),
    # Intel GPUs (torch.xpu, OpenVINO GPU): XMX rates for fp16/bf16/int8.
    _gpu("intel-max-1550", 52.4, 839.0, 839.0, 1678.0, 3277.0, 128.0, r"max\s*1550", r"data center gpu max"),
    _gpu("intel-arc-a770", 19.7, 138.0, 138.0, 275.0, 560.0, 16.0, r"\ba770\b"),
    _gpu("intel-arc-b580", 13.7, 117.0, 117.0, 233.0, 456.0, 12.0, r"\bb580\b"),
    _gpu("intel-igpu", 2.0, 4.0, 4.0, 8.0, 90.0, 16.0, r"\biris\b", r"\buhd\b", r"intel.*graphics"),
    # Apple GPUs through MPS: no tensor cores, fp16 runs at the fp32 rate or a little above.
    _gpu("apple-m1", 2.6, 2.6, None, None, 68.0, 16.0, r"\bm1\b(?!\s*(pro|max|ultra))", kind="apple"),
    _gpu("apple-m1-pro", 5.2, 5.2, None, None, 200.0, 32.0, r"\bm1\s*pro\b", kind="apple"),
    _gpu("apple-m1-max", 10.4, 10.4, None, None, 400.0, 64.0, r"\bm1\s*(max|ultra)\b", kind="apple"),
    _gpu("apple-m2", 3.6, 3.6, 3.6, None, 100.0, 24.0, r"\bm2\b(?!\s*(pro|max|ultra))", kind="apple"),
    _gpu("apple-m2-max", 13.6, 13.6, 13.6, None, 400.0, 96.0, r"\bm2\s*(pro|max|ultra)\b", kind="apple"),
    _gpu("apple-m3", 4.1, 4.1, 4.1, None, 100.0, 24.0, r"\bm3\b(?!\s*(pro|max|ultra))", kind="apple"),
    _gpu("apple-m3-max", 16.4, 16.4, 16.4, None, 400.0, 128.0, r"\bm3\s*(pro|max|ultra)\b", kind="apple"),
    _gpu("apple-m4", 4.3, 4.3, 4.3, None, 120.0, 32.0, r"\bm4\b(?!\s*(pro|max|ultra))", kind="apple"),
    _gpu("apple-m4-max", 18.4, 18.4, 18.4, None, 546.0, 128.0, r"\bm4\s*(pro|max|ultra)\b", kind="apple"),
    # Intel NPU (Core Ultra), through OpenVINO.
    _gpu("intel-npu", 1.4, 5.5, 5.5, 11.0, 90.0, 16.0, r"\bnpu\b", r"ai boost", kind="npu"),
    # Software WebGPU adapters (Chromium's SwiftShader, Mesa's llvmpipe): shaders JIT-compiled for
    # the CPU; a 2-layer d=128 transformer takes 50-500 ms a forward (FACTS.md, "Web platforms").
    DeviceSpec("webgpu-software", {"fp32": 0.02}, 10.0, 4.0, True, "cpu",
               (r"swiftshader", r"llvmpipe", r"lavapipe", r"\(software\)")),
)

#: When a device name matches nothing: a middling device of the hardware kind, marked unknown.
_GENERIC: dict[str, DeviceSpec] = {
    "cuda": _gpu("cuda-generic", 20.0, 150.0, 150.0, 300.0, 900.0, 24.0, known=False),
    "rocm": _gpu("rocm-generic", 25.0, 200.0, 200.0, 200.0, 1200.0, 32.0, known=False),
    "mps": _gpu("apple-generic", 4.0, 4.0, 4.0, None, 120.0, 24.0, kind="apple", known=False),
    "xpu": _gpu("xpu-generic", 15.0, 100.0, 100.0, 200.0, 500.0, 16.0, known=False),
    "gpu": _gpu("intel-gpu-generic", 2.0, 4.0, 4.0, 8.0, 90.0, 16.0, known=False),
    "npu": _gpu("npu-generic", 1.4, 5.5, None, 11.0, 90.0, 16.0, kind="npu", known=False),
    "qnn": _gpu("qnn-generic", 1.0, 8.0, None, 16.0, 60.0, 12.0, kind="npu", known=False),
    # Web targets with a device named by the browser only: WebGPU reaches a fraction of a GPU's
    # native rate through WGSL shaders and buffers capped at maxBufferSize (4 GiB); WebNN hands
    # the graph to the OS's ML runtime (DirectML, Core ML, TFLite) on a GPU or NPU.
    "webgpu": _gpu("webgpu-generic", 4.0, 8.0, None, None, 250.0, 4.0, known=False),
    "webnn": _gpu("webnn-generic", 2.0, 8.0, None, None, 100.0, 4.0, kind="npu", known=False),
}

def _cpu_spec(name: str, cores: int, flags: frozenset[str], ghz: float, memory_gb: float,
              known: bool = True) -> DeviceSpec:
    """The spec of `cores` cores with CPU `flags`: FMA lanes x 2 FMA pipes x 2 FLOP x clock for
    fp32, bf16 and int8 by their instructions (VNNI, AMX), ~8 GB/s of bandwidth a core, capped."""
    lanes = 16 if "avx512f" in flags else 8 if "avx2" in flags else 4
    fp32 = cores * lanes * 2 * 2 * ghz / 1e3  # TFLOP/s
    peaks = {"fp32": fp32}
    if flags & {"amx_bf16", "amx_tile"}:
        peaks["bf16"] = 8 * fp32
    elif flags & {"avx512_bf16", "bf16"}:
        peaks["bf16"] = 2 * fp32
    if flags & {"amx_fp16", "avx512_fp16", "asimdhp", "fphp"}:
        peaks["fp16"] = 2 * fp32
    peaks["int8"] = (16 if "amx_int8" in flags else 4 if flags & {"avx512_vnni", "avx_vnni", "i8mm"} else 2) * fp32
    bandwidth = min(8.0 * cores, 300.0) + 10.0
    return DeviceSpec(name, peaks, bandwidth, memory_gb, known, "cpu")


def _clock_ghz(model: str) -> float:
    """The clock a CPU's name states (``... @ 2.20GHz``), else 2.5 GHz."""
    match = re.search(r"@\s*([0-9.]+)\s*ghz", model.lower())
    return float(match.group(1)) if match else 2.5


#: Cores a CPU spec assumes: a name does not say how many a record's process could use (its
#: ``threads`` feature does).
GENERIC_CPU_CORES = 8


@functools.lru_cache(maxsize=256)
def cpu_spec(device_name: str = "") -> DeviceSpec:
    """The spec of the CPU called `device_name` (``cpu:`` prefix and case optional), the same on
    every host: 8 AVX2 cores and 32 GB at the clock the name states (else 2.5 GHz), named
    ``cpu:<model in lower case>`` (``cpu-generic`` without a name), ``known`` False."""
    model = " ".join((device_name or "").split()).lower().removeprefix("cpu:").strip()
    name = "cpu-generic" if model in {"", "cpu", "cpu-generic"} else f"cpu:{model}"
    return _cpu_spec(name, GENERIC_CPU_CORES, frozenset({"avx2"}), _clock_ghz(model), 32.0, known=False)


#: The fastest CPU a record may come from (two 192-core sockets with AVX-512 and AMX at 3.7 GHz,
#: 12 DDR5 channels each): the device of a CPU's physical floors when its spec is not known, so
#: that a floor is never above what the CPU that measured can do.
CPU_CEILING = dataclasses.replace(
    _cpu_spec("cpu-ceiling", 384, frozenset({"avx512f", "amx_bf16", "amx_int8", "avx512_fp16"}), 3.7, 6144.0,
              known=False),
    memory_bandwidth_gbs=1600.0)

#: Threads onnxruntime-web gives the WebAssembly provider by default: half the cores, at most 4.
WASM_MAX_THREADS = 4


def wasm_spec(device_name: str = "") -> DeviceSpec:
    """The WebAssembly provider of onnxruntime-web on the CPU called `device_name` (128-bit SIMD,
    up to `WASM_MAX_THREADS` threads, 4 GiB), named ``wasm:<CPU name in lower case>``."""
    model = " ".join((device_name or "").split()).lower() or "cpu"
    threads = max(1, min(WASM_MAX_THREADS, -(-GENERIC_CPU_CORES // 2)))
    base = _cpu_spec(f"wasm:{model}", threads, frozenset(), _clock_ghz(model), 4.0, known=False)
    return dataclasses.replace(base, peak_tflops={"fp32": base.peak_tflops["fp32"]})  # other precisions run at fp32 rate


_BY_NAME: dict[str, DeviceSpec] = {spec.name: spec for spec in KNOWN_DEVICES}


def _match(device_name: str) -> DeviceSpec | None:
    text = device_name.strip().lower()
    if text in _BY_NAME:  # a spec name such as "h100" or "intel-igpu"
        return _BY_NAME[text]
    for spec in KNOWN_DEVICES:
        if any(re.search(pattern, text) for pattern in spec.aliases):
            return spec
    return None


def _is_cpu_name(device_name: str) -> bool:
    text = device_name.lower()
    return text.startswith("cpu") or "cpuexecutionprovider" in text or bool(
        re.search(r"xeon|epyc|ryzen|core\(tm\)|core i[3579]|threadripper|graviton|neoverse|ampere", text))


@functools.lru_cache(maxsize=256)
def spec_for(hardware: str, device_name: str | None = None) -> DeviceSpec:
    """The `DeviceSpec` for a hardware target and (optional) device name, the same on every host:
    `cpu_spec` for a CPU, `wasm_spec` for wasm, a `KNOWN_DEVICES` match for an accelerator, else
    a generic spec of the target's kind with ``known=False``."""
    hardware = (hardware or "cpu").lower()
    name = (device_name or "").strip()
    if hardware == "wasm":
        return wasm_spec(name)
    on_host = hardware in facts.target_set(host_cpu=True)
    if on_host and (not name or _is_cpu_name(name)):
        return cpu_spec(name)
    if name and (found := _match(name)) is not None:
        return found
    if hardware in _GENERIC:
        return _GENERIC[hardware]
    if on_host or _is_cpu_name(name):
        return cpu_spec(name)
    return _GENERIC["cuda"] if hardware.startswith("cuda") else cpu_spec()


#: Device names that name no device: what records hold when the harness did not know the device.
_UNNAMED = frozenset({"", "none", "unknown", "default", "cpu", "gpu", "npu", "cuda", "rocm", "xpu", "mps",
                      "openvino", "qnn", "onnxruntime", "wasm", "webgpu", "webnn"} | {spec.name for spec in _GENERIC.values()}
                     | {"cpu-generic"})


@functools.lru_cache(maxsize=1024)
def device_key(hardware: str, device_name: str | None) -> str:
    """hwsel's one identity of a device: two names are the same device when their keys are equal.

    A known accelerator is its spec name, whatever it is called (``NVIDIA H100 80GB HBM3``,
    ``h100`` and ``H100 SXM5`` are all ``h100``); any other device is its name in lower case
    without a ``cpu:`` prefix; names that name no device (empty, ``cpu``, ``cuda``, a generic
    spec) give "".
    """
    name = " ".join((device_name or "").split())
    low = name.lower()
    if low in _UNNAMED or low == (hardware or "").lower():
        return ""
    found = _match(name)
    return found.name if found is not None else low.removeprefix("cpu:").strip()


def known_device_names() -> tuple[str, ...]:
    """The spec names of `KNOWN_DEVICES`, each of which a question may name."""
    return tuple(spec.name for spec in KNOWN_DEVICES)


def knows_device(hardware: str, device_name: str) -> bool:
    """Whether `device_name` is a device on `hardware` without any record of it: a `KNOWN_DEVICES`
    match, no device at all (the kind's generic spec), or any name on a host-CPU target."""
    return (hardware or "").lower() in facts.target_set(host_cpu=True) or not device_key(hardware, device_name) \
        or _match(" ".join(device_name.split())) is not None


__all__ = ["CPU_CEILING", "DeviceSpec", "GENERIC_CPU_CORES", "KNOWN_DEVICES", "cpu_spec", "device_key",
           "known_device_names", "knows_device", "spec_for", "wasm_spec"]
