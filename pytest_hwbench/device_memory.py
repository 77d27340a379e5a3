"""How much memory a case may plan to use on a target: the device's memory as detection reports
it (`pytest_hwbench.hardware.HardwareInfo`), host RAM for the CPU, and the share of it that is usable."""

from __future__ import annotations

from .hardware import HardwareInfo

#: Share of a device's memory a case may plan to use: the OS, the Python process, the runtime
#: (CUDA context, allocator slack) and the estimate's own error need the rest.
MEMORY_USABLE_SHARE = 0.9


def device_memory_mb(hardware: str, hw: HardwareInfo) -> float | None:
    """Memory of the device a case on `hardware` runs on: host RAM for the CPU, the smallest device
    of an accelerator target; None where detection gives no figure (mps, OpenVINO devices, ...)."""
    if hardware == "cpu":
        return host_memory_mb(hw)
    target = hw.get(hardware)
    if target is None or not target.available:
        return None
    sizes = [d.memory_mb for d in target.devices if d.memory_mb]
    return float(min(sizes)) if sizes else None


def host_memory_mb(hw: HardwareInfo) -> float | None:
    """Host RAM as detection reports it, in MiB; None when unknown."""
    cpu = hw.get("cpu")
    memory = cpu.details.get("memory_mb") if cpu is not None else None
    return float(memory) if memory else None


__all__ = ["MEMORY_USABLE_SHARE", "device_memory_mb", "host_memory_mb"]
