"""Energy through NVML: unit conversions and integration on recorded figures, device mapping on
recorded torch device properties, and the real unavailable paths of this driver-less machine."""

from __future__ import annotations

import json
import math
import sys
import time
from pathlib import Path

import pytest

from pytest_hwbench import energy as energy_module
from pytest_hwbench.energy import (
    NVML_INSTALL_HINT,
    Energy,
    EnergyUnavailable,
    energy_from_counter,
    energy_unavailable,
    integrate_power,
    measure_energy,
    nvml_lookup_keys,
    nvml_pci_bus_id,
)

RUNTIMES = Path(__file__).parent / "data" / "runtimes"


def _device(name: str) -> dict:
    return json.loads((RUNTIMES / f"{name}.json").read_text())["devices"][0]


def _nvml_works() -> bool:
    try:
        import pynvml

        pynvml.nvmlInit()
    except Exception:
        return False
    return True


# --- the value object -------------------------------------------------------------------------


def test_energy_per_item_and_average_power() -> None:
    e = Energy(joules=120.0, seconds=2.0, calls=40, items=40 * 8)
    assert e.joules_per_item == pytest.approx(120 / 320)
    assert e.avg_power_w == pytest.approx(60.0)
    assert e.method == "counter"
    assert math.isnan(Energy(1.0, 0.0, 0, 0).joules_per_item)
    assert math.isnan(Energy(1.0, 0.0, 0, 0).avg_power_w)


# --- counter and power conversions on recorded figures ----------------------------------------

# powerapi-ng/pyJoules#23: an NVIDIA Titan RTX over 60 s, the difference of two
# nvmlDeviceGetTotalEnergyConsumption readings (printed as uJ, in fact mJ): 952,494 idle and
# 16,522,288 under load; the reporter expected about 16 W idle and 280 W loaded.
TITAN_RTX_60S = {"idle": 952_494, "load": 16_522_288}


@pytest.mark.parametrize(("state", "watts"), [("idle", 15.87), ("load", 275.37)])
def test_counter_difference_is_millijoules(state: str, watts: float) -> None:
    delta = TITAN_RTX_60S[state]
    joules = energy_from_counter(0, delta)
    assert joules == pytest.approx(delta / 1000)
    # The counter counts since the driver loaded: only the difference matters.
    assert energy_from_counter(7_311_042_118, 7_311_042_118 + delta) == pytest.approx(joules)
    assert Energy(joules, 60.0, 1, 1).avg_power_w == pytest.approx(watts, abs=0.01)


def test_counter_going_backwards_is_an_error() -> None:
    with pytest.raises(ValueError, match="went backwards"):
        energy_from_counter(5_000, 4_000)


def test_integrate_constant_power() -> None:
    # 250 W for one second, sampled every 20 ms as NVML reports it: milliwatts.
    samples = [(i * 0.02, 250_000.0) for i in range(51)]
    assert integrate_power(samples) == pytest.approx(250.0)


def test_integrate_is_the_trapezoid_rule() -> None:
    # A linear ramp 100 W -> 300 W over 2 s is integrated exactly: 400 J.
    ramp = [(t / 10, 100_000 + 100_000 * t / 10) for t in range(21)]
    assert integrate_power(ramp) == pytest.approx(400.0)
    # Uneven spacing: 0-0.5 s at 100->200 W (75 J), 0.5-0.6 s at 200->200 W (20 J).
    assert integrate_power([(0.0, 100_000), (0.5, 200_000), (0.6, 200_000)]) == pytest.approx(95.0)


@pytest.mark.parametrize(("samples", "fragment"), [([], "got 0"), ([(0.0, 1.0)], "got 1"),
                                                   ([(1.0, 5.0), (0.5, 5.0)], "out of time order")])
def test_integrate_rejects_what_it_cannot_integrate(samples, fragment: str) -> None:
    with pytest.raises(ValueError, match=fragment):
        integrate_power(samples)


# --- torch device -> NVML device ---------------------------------------------------------------


def test_pci_bus_id_matches_nvidia_smi() -> None:
    # The recorded Colab T4: torch says pci_domain_id=0, pci_bus_id=0, pci_device_id=4 and
    # nvidia-smi on the same machine shows Bus-Id 00000000:00:04.0.
    t4 = _device("cuda_t4")
    assert nvml_pci_bus_id(t4["pci_domain_id"], t4["pci_bus_id"], t4["pci_device_id"]) == "00000000:00:04.0"
    assert nvml_pci_bus_id(1, 0x3B, 0x1F) == "00000001:3B:1F.0"


def test_lookup_keys_prefer_uuid_then_pci() -> None:
    keys = nvml_lookup_keys(_device("cuda_t4"), 0, {}, nvml_count=1, torch_count=1)
    assert keys == [("uuid", "GPU-2465eb53-250b-43ad-af03-85dd8f0b4eca"),
                    ("uuid", "MIG-2465eb53-250b-43ad-af03-85dd8f0b4eca"),
                    ("pci", "00000000:00:04.0"),
                    ("index", 0)]  # one device on both sides: the index is the same device


def test_lookup_keys_never_guess_the_index_when_orders_can_differ() -> None:
    h100 = _device("cuda_h100")  # torch 2.7: uuid, no pci_* fields
    uuid_keys = [("uuid", "GPU-4dbfbb99-983a-79af-8527-ca9f0c139426"),
                 ("uuid", "MIG-4dbfbb99-983a-79af-8527-ca9f0c139426")]
    # CUDA_VISIBLE_DEVICES=3 on an 8-GPU node: torch's cuda:0 is NVML's device 3.
    assert nvml_lookup_keys(h100, 0, {"CUDA_VISIBLE_DEVICES": "3"}, 8, 1) == uuid_keys
    # All 8 visible, but CUDA's default order is fastest-first, NVML's is by PCI bus.
    assert nvml_lookup_keys(h100, 2, {}, 8, 8) == uuid_keys
    assert nvml_lookup_keys(h100, 2, {"CUDA_DEVICE_ORDER": "PCI_BUS_ID"}, 8, 8) == [*uuid_keys, ("index", 2)]
    # Without a uuid or PCI address and with orders that may differ there is nothing to try.
    assert nvml_lookup_keys({"name": "NVIDIA H100 80GB HBM3"}, 1, {}, 8, 8) == []


def test_lookup_keys_keep_an_nvml_style_uuid() -> None:
    assert nvml_lookup_keys({"uuid": "MIG-4dbfbb99-983a-79af"}, 0, {}, 2, 1) == [("uuid", "MIG-4dbfbb99-983a-79af")]


# --- the real paths on this machine -----------------------------------------------------------


@pytest.mark.parametrize("kind", ["cpu", "rocm", "mps", "xpu", "openvino"])
def test_non_cuda_devices_get_a_reason(kind: str) -> None:
    assert energy_unavailable(kind, 0) == f"energy: measured through NVML on NVIDIA GPUs only; {kind} is not a cuda device"


@pytest.mark.skipif(_nvml_works(), reason="this machine has an NVIDIA driver")
def test_cuda_without_a_driver_gives_the_nvml_reason() -> None:
    pytest.importorskip("pynvml")
    reason = energy_unavailable("cuda", 0)
    assert reason is not None
    assert reason.startswith("energy: NVML init failed (")
    assert "NVIDIA driver" in reason
    calls: list[int] = []
    with pytest.raises(EnergyUnavailable) as exc:
        measure_energy(lambda: calls.append(1), lambda: None, batch_size=4, device_kind="cuda", device_index=0)
    assert str(exc.value) == reason
    assert calls == []  # nothing ran: the benchmark's own loop is not disturbed


def test_missing_bindings_name_the_extra(monkeypatch) -> None:
    monkeypatch.setitem(sys.modules, "pynvml", None)  # what `import pynvml` meets where it is not installed
    energy_module._nvml.cache_clear()
    energy_module._handle.cache_clear()
    try:
        reason = energy_unavailable("cuda", 0)
    finally:
        energy_module._nvml.cache_clear()
        energy_module._handle.cache_clear()
    assert reason == f"energy: NVML bindings (nvidia-ml-py) are not installed; {NVML_INSTALL_HINT}"
    assert 'pip install "pytest-hwbench[nvml]"' in reason


def test_measure_energy_checks_its_arguments_first() -> None:
    for kwargs in ({"batch_size": 0}, {"min_calls": 0}, {"min_time_s": -1.0}, {"min_time_s": math.nan}):
        args = {"batch_size": 1, "device_kind": "cuda", "device_index": 0, **kwargs}
        with pytest.raises(ValueError, match="batch_size >= 1"):
            measure_energy(lambda: None, lambda: None, **args)


def test_measure_energy_on_a_non_cuda_device_raises_the_reason() -> None:
    with pytest.raises(EnergyUnavailable, match="cpu is not a cuda device"):
        measure_energy(lambda: None, lambda: None, batch_size=1, device_kind="cpu", device_index=0)


def test_power_sampler_integrates_what_it_reads() -> None:
    # The sampler thread is ours; fed a steady 150 W reading it must integrate to 150 W x span.
    sampler = energy_module._PowerSampler(lambda: 150_000.0, interval_s=0.01)
    sampler.start()
    time.sleep(0.2)
    samples = sampler.stop()
    span = samples[-1][0] - samples[0][0]
    assert sampler.error is None
    assert 0.19 <= span < 2.0
    assert len(samples) >= 5  # at 10 ms a loaded 2-core machine still takes several samples
    assert [t for t, _ in samples] == sorted(t for t, _ in samples)
    assert integrate_power(samples) == pytest.approx(150.0 * span)
