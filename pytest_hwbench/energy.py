"""Energy per item on NVIDIA GPUs through NVML, where the driver allows; a reason elsewhere.

`measure_energy` reads the GPU's total-energy counter around a loop of calls, or integrates sampled
power where the counter is missing; both read the whole board, other processes on it included.
"""

from __future__ import annotations

import atexit
import contextlib
import functools
import itertools
import math
import os
import threading
import time
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from .errors import HwbenchError

#: How to get the NVML bindings.
NVML_INSTALL_HINT = 'pip install "pytest-hwbench[nvml]"'
#: Seconds between power samples where the energy counter is missing.
POWER_SAMPLE_INTERVAL_S = 0.02


class EnergyUnavailable(HwbenchError):
    """NVML cannot measure this device (or stopped mid-run); the message is the reason."""


@dataclass(frozen=True)
class Energy:
    """Energy a device used over `calls` calls processing `items` items in `seconds`, measured by
    `method`: ``"counter"`` (NVML total-energy counter) or ``"power"`` (integrated power samples)."""

    joules: float
    seconds: float
    calls: int
    items: int
    method: str = "counter"

    @property
    def joules_per_item(self) -> float:
        """Joules per processed item (NaN when no item ran)."""
        return self.joules / self.items if self.items > 0 else math.nan

    @property
    def avg_power_w(self) -> float:
        """Average power over the measured window, in watts (NaN for an empty window)."""
        return self.joules / self.seconds if self.seconds > 0 else math.nan


def energy_from_counter(start_mj: int, end_mj: int) -> float:
    """Joules between two readings of the total-energy counter (millijoules since driver load)."""
    if end_mj < start_mj:
        raise ValueError(f"energy counter went backwards ({start_mj} -> {end_mj} mJ): the driver reloaded")
    return (end_mj - start_mj) / 1e3


def integrate_power(samples: Sequence[tuple[float, float]]) -> float:
    """Joules from ``(seconds, milliwatts)`` power samples (at least two, in time order), by the
    trapezoid rule."""
    if len(samples) < 2:
        raise ValueError(f"need at least 2 power samples to integrate, got {len(samples)}")
    joules = 0.0
    for (t0, p0), (t1, p1) in itertools.pairwise(samples):
        if t1 < t0:
            raise ValueError(f"power samples out of time order ({t0} then {t1})")
        joules += (t1 - t0) * (p0 + p1) / 2 / 1e3
    return joules


def nvml_pci_bus_id(domain: int, bus: int, device: int) -> str:
    """The NVML bus id (``nvmlPciInfo_t.busId``, e.g. ``00000000:3B:00.0``) of a PCI address."""
    return f"{domain:08X}:{bus:02X}:{device:02X}.0"


def nvml_lookup_keys(properties: Mapping[str, Any], device_index: int, env: Mapping[str, str],
                     nvml_count: int, torch_count: int) -> list[tuple[str, Any]]:
    """Ways to find a torch CUDA device in NVML, most reliable first: ``("uuid", str)``,
    ``("pci", str)`` (a bus id) or ``("index", int)``, for NVML's ``nvmlDeviceGetHandleBy*``.

    `properties` holds `torch.cuda.get_device_properties(i)` fields by torch's names (``uuid``
    as its string, ``pci_domain_id``/``pci_bus_id``/``pci_device_id`` from torch 2.8).
    """
    keys: list[tuple[str, Any]] = []
    uuid = str(properties.get("uuid") or "")
    if uuid:
        if uuid.startswith(("GPU-", "MIG-")):
            keys.append(("uuid", uuid))
        else:
            # torch prints the 16 raw bytes; NVML prefixes GPU- (MIG- for a MIG instance).
            keys += [("uuid", f"GPU-{uuid}"), ("uuid", f"MIG-{uuid}")]
    pci = [properties.get(k) for k in ("pci_domain_id", "pci_bus_id", "pci_device_id")]
    if all(isinstance(v, int) for v in pci):
        keys.append(("pci", nvml_pci_bus_id(*pci)))
    # Index order agrees only when every device is visible and CUDA orders by PCI bus, as NVML
    # does, or when there is a single device on both sides.
    same_order = "CUDA_VISIBLE_DEVICES" not in env and env.get("CUDA_DEVICE_ORDER") == "PCI_BUS_ID" \
        and nvml_count == torch_count
    if same_order or nvml_count == torch_count == 1:
        keys.append(("index", device_index))
    return keys


@functools.cache
def _nvml() -> tuple[Any | None, str | None]:
    """The initialised pynvml module, or None and why not (once per process)."""
    try:
        import pynvml
    except ImportError:
        return None, f"energy: NVML bindings (nvidia-ml-py) are not installed; {NVML_INSTALL_HINT}"
    try:
        pynvml.nvmlInit()
    except pynvml.NVMLError as exc:
        return None, f"energy: NVML init failed ({exc}); it needs the NVIDIA driver"
    except OSError as exc:
        return None, f"energy: NVML init failed ({exc})"
    atexit.register(_shutdown, pynvml)
    return pynvml, None


def _shutdown(pynvml: Any) -> None:
    with contextlib.suppress(pynvml.NVMLError):
        pynvml.nvmlShutdown()


@functools.cache
def _handle(device_index: int) -> tuple[Any | None, str | None]:
    """The NVML handle of torch's cuda:`device_index`, or None and why not."""
    pynvml, reason = _nvml()
    if pynvml is None:
        return None, reason
    try:
        import torch

        if torch.version.hip or not torch.cuda.is_available():
            return None, "energy: torch.cuda has no NVIDIA device here"
        torch_count = torch.cuda.device_count()
        if device_index >= torch_count:
            return None, f"energy: torch sees {torch_count} CUDA devices, no cuda:{device_index}"
        props = torch.cuda.get_device_properties(device_index)
        properties = {k: (str(getattr(props, k)) if k == "uuid" else getattr(props, k))
                      for k in ("uuid", "pci_domain_id", "pci_bus_id", "pci_device_id") if hasattr(props, k)}
        nvml_count = pynvml.nvmlDeviceGetCount()
    except (ImportError, RuntimeError, pynvml.NVMLError) as exc:
        return None, f"energy: cannot list devices ({type(exc).__name__}: {exc})"
    lookups = {"uuid": pynvml.nvmlDeviceGetHandleByUUID, "pci": pynvml.nvmlDeviceGetHandleByPciBusId,
               "index": pynvml.nvmlDeviceGetHandleByIndex}
    keys = nvml_lookup_keys(properties, device_index, os.environ, nvml_count, torch_count)
    for how, key in keys:
        try:
            return lookups[how](key), None
        except pynvml.NVMLError:
            continue
    tried = ", ".join(f"{how} {key}" for how, key in keys) or "no uuid or PCI address from torch"
    return None, f"energy: cannot map cuda:{device_index} to an NVML device (tried {tried})"


def nvml_handle(device_index: int) -> tuple[Any | None, Any | None]:
    """(pynvml, the NVML handle of torch's cuda:`device_index`); None for what cannot be read."""
    return _nvml()[0], _handle(device_index)[0]


def _meter(device_kind: str, device_index: int) -> tuple[Any, Any, str]:
    """(pynvml, the device's handle, ``"counter"`` or ``"power"``: how it is measured) where NVML
    can measure the energy of this device; `EnergyUnavailable` with the reason otherwise."""
    if device_kind != "cuda":
        raise EnergyUnavailable(f"energy: measured through NVML on NVIDIA GPUs only; {device_kind} is not a "
                                "cuda device")
    handle, reason = _handle(device_index)
    if handle is None:
        raise EnergyUnavailable(reason)
    pynvml = _nvml()[0]
    try:
        pynvml.nvmlDeviceGetTotalEnergyConsumption(handle)
        return pynvml, handle, "counter"
    except pynvml.NVMLError as exc:
        counter_error = exc
    try:
        pynvml.nvmlDeviceGetPowerUsage(handle)
        return pynvml, handle, "power"
    except pynvml.NVMLError as exc:
        raise EnergyUnavailable(f"energy: this device supports neither the total-energy counter "
                                f"({counter_error}; Volta and newer) nor power readings ({exc})") from None


def energy_unavailable(device_kind: str, device_index: int) -> str | None:
    """None when NVML can measure the energy of this device, else the reason it cannot."""
    try:
        _meter(device_kind, device_index)
    except EnergyUnavailable as exc:
        return str(exc)
    return None


class _PowerSampler:
    """Samples NVML power in a background thread while running."""

    def __init__(self, read_mw: Callable[[], float], interval_s: float = POWER_SAMPLE_INTERVAL_S) -> None:
        self._read, self._interval = read_mw, interval_s
        self.samples: list[tuple[float, float]] = []
        self.error: BaseException | None = None
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._loop, name="hwbench-nvml-power", daemon=True)

    def _sample(self) -> None:
        self.samples.append((time.perf_counter(), float(self._read())))

    def _loop(self) -> None:
        try:
            while not self._stop.wait(self._interval):
                self._sample()
        except BaseException as exc:  # reported by stop(); the benchmark thread goes on
            self.error = exc

    def start(self) -> None:
        self._sample()
        self._thread.start()

    def stop(self) -> list[tuple[float, float]]:
        self._stop.set()
        self._thread.join()
        if self.error is None:
            self._sample()
        return sorted(self.samples)


def measure_energy(call: Callable[[], Any], sync: Callable[[], None], *, batch_size: int, device_kind: str,
                   device_index: int, min_time_s: float = 1.0, min_calls: int = 10) -> Energy:
    """Run `call()` for at least `min_time_s` seconds and `min_calls` calls; the energy it used.

    `sync` (waiting for the device) runs before the window opens and after the last call. Raises
    `EnergyUnavailable` (with the reason) where NVML cannot measure; exceptions from `call`
    propagate. The counter ticks about every 10 ms (gpuopenanalytics/pynvml#18): a second's
    window keeps that near 1%.
    """
    if batch_size < 1 or min_calls < 1 or not min_time_s >= 0:
        raise ValueError(f"need batch_size >= 1, min_calls >= 1, min_time_s >= 0; got {batch_size}, "
                         f"{min_calls}, {min_time_s}")
    pynvml, handle, method = _meter(device_kind, device_index)
    sync()
    sampler = _PowerSampler(lambda: pynvml.nvmlDeviceGetPowerUsage(handle)) if method == "power" else None
    try:
        start_mj = pynvml.nvmlDeviceGetTotalEnergyConsumption(handle) if sampler is None else 0
        if sampler is not None:
            sampler.start()
    except pynvml.NVMLError as exc:
        raise EnergyUnavailable(f"energy: NVML failed at the start ({exc})") from exc
    try:
        t0 = time.perf_counter()
        calls = 0
        while calls < min_calls or time.perf_counter() - t0 < min_time_s:
            call()
            calls += 1
        sync()
        seconds = time.perf_counter() - t0
    finally:
        samples = sampler.stop() if sampler is not None else []
    try:
        if sampler is None:
            joules = energy_from_counter(start_mj, pynvml.nvmlDeviceGetTotalEnergyConsumption(handle))
            if joules == 0:
                raise EnergyUnavailable(f"energy: the counter did not advance in {seconds:.2f} s of work")
        else:
            if sampler.error is not None:
                raise EnergyUnavailable(f"energy: power sampling failed mid-run ({sampler.error})")
            joules = integrate_power(samples)
            seconds = samples[-1][0] - samples[0][0]  # the span the integral covers
    except pynvml.NVMLError as exc:
        raise EnergyUnavailable(f"energy: NVML failed at the end ({exc})") from exc
    except ValueError as exc:
        raise EnergyUnavailable(f"energy: {exc}") from exc
    return Energy(joules, seconds, calls, calls * batch_size, method)


__all__ = ["NVML_INSTALL_HINT", "Energy", "EnergyUnavailable", "energy_from_counter", "energy_unavailable",
           "integrate_power", "measure_energy", "nvml_handle", "nvml_lookup_keys", "nvml_pci_bus_id"]
