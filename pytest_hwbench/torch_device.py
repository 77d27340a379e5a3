"""torch's view of a hardware target: device strings, the device module, sync, TF32, memory.
``rocm`` maps to ``torch.cuda`` here and nowhere else; torch is imported only when called."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from .facts import torch_modules

#: Targets torch drives with one device per index (``cuda:0``...), which xdist workers share out
#: one device each; mps has a single device.
INDEXED_TARGETS: tuple[str, ...] = ("cuda", "rocm", "xpu")


def device_string(hardware: str, index: int = 0) -> str:
    """torch's device string for `hardware` (``cpu``, ``cuda:1`` for cuda and rocm, ``mps``...)."""
    if hardware == "cpu":
        return "cpu"
    modules = torch_modules()
    if hardware not in modules:
        raise ValueError(f"torch does not address hardware {hardware!r}; it addresses cpu, "
                         f"{', '.join(modules)}")
    module = modules[hardware]
    return f"{module}:{index}" if hardware in INDEXED_TARGETS else module


def device_module(hardware: str) -> Any | None:
    """The ``torch`` submodule driving `hardware` (``torch.cuda`` for rocm), None where there is none."""
    name = torch_modules().get(hardware)
    if name is None:
        return None
    import torch

    return getattr(torch, name, None)


def sync_for(hardware: str, index: int = 0) -> Callable[[], None]:
    """A call that waits for the work queued on device `index` of `hardware` (no-op on the CPU)."""
    module = device_module(hardware)
    if module is None:
        return lambda: None
    if hardware == "mps":
        return module.synchronize
    device = device_string(hardware, index)
    return lambda: module.synchronize(device)


def disable_tf32(hardware: str) -> None:
    """fp32 means fp32 on NVIDIA and AMD GPUs: TF32 tensor-core math is opt-in."""
    if torch_modules().get(hardware) != "cuda":
        return
    import torch

    torch.backends.cuda.matmul.allow_tf32 = False
    torch.backends.cudnn.allow_tf32 = False


def empty_cache(hardware: str) -> None:
    """Return cached allocator blocks of `hardware` to the device (no-op on the CPU)."""
    module = device_module(hardware)
    if module is not None and hasattr(module, "empty_cache"):
        module.empty_cache()


def _counter_mb(hardware: str, index: int, per_device: str, mps: str) -> float | None:
    """The counter `per_device` of device `index` (`mps`, of MPS's one device), in MiB."""
    module = device_module(hardware)
    if module is not None and hasattr(module, per_device):
        return float(getattr(module, per_device)(index)) / 2**20
    if module is not None and hasattr(module, mps):
        return float(getattr(module, mps)()) / 2**20
    return None


def allocated_mb(hardware: str, index: int = 0) -> float | None:
    """Device memory allocated by tensors now, in MiB; None on the CPU or without a counter."""
    return _counter_mb(hardware, index, "memory_allocated", "current_allocated_memory")


def reset_peak_mb(hardware: str, index: int = 0) -> None:
    """Start a new peak for `peak_mb` on device `index` of `hardware` (no-op without a peak counter)."""
    module = device_module(hardware)
    if module is not None and hasattr(module, "reset_peak_memory_stats"):
        module.reset_peak_memory_stats(index)


def peak_mb(hardware: str, index: int = 0) -> float | None:
    """Peak device memory allocated since `reset_peak_mb`, in MiB; None on the CPU or without a
    counter. MPS has no peak counter: the driver's current allocation is the best bound there."""
    return _counter_mb(hardware, index, "max_memory_allocated", "driver_allocated_memory")


def timer_for(hardware: str) -> str:
    """The timer kind that times work on `hardware`: its device's events, else the wall clock."""
    return torch_modules().get(hardware, "wall")


__all__ = ["INDEXED_TARGETS", "allocated_mb", "device_module", "device_string", "disable_tf32", "empty_cache",
           "peak_mb", "reset_peak_mb", "sync_for", "timer_for"]
