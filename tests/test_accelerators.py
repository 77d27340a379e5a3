"""Detection of cuda, rocm, mps and xpu from facts torch reported on real machines.

Each file under tests/data/runtimes/ holds what torch returned on one machine (its ``source``
says where from). `target_from_facts` is the whole interpretation, so these tests pin it for
hardware this runner does not have; the live probe (`gather_torch_facts`) is checked against the
machine the tests run on.
"""

from __future__ import annotations

import dataclasses
import json
import time
import warnings
from pathlib import Path
from typing import Any

import pytest
import torch

from pytest_hwbench.errors import HwbenchWarning
from pytest_hwbench.facts import timer_kinds, torch_runtimes
from pytest_hwbench.hardware import (
    HardwareInfo,
    TargetInfo,
    TorchFacts,
    detect_torch_runtime,
    gather_torch_facts,
    registered_probes,
    rocm_arch,
    target_from_facts,
)
from pytest_hwbench.torch_device import timer_for
from pytest_hwbench.trackers import (
    LatencyTracker,
    TimingConfig,
    event_timer_unavailable,
)
from pytest_hwbench.vocabulary import PRECISIONS

RUNTIMES = Path(__file__).parent / "data" / "runtimes"


def recorded(name: str) -> TorchFacts:
    """The facts recorded in tests/data/runtimes/`name`.json."""
    return TorchFacts.from_dict(json.loads((RUNTIMES / f"{name}.json").read_text()))


def test_every_recording_names_its_source_and_round_trips() -> None:
    files = sorted(RUNTIMES.glob("*.json"))
    assert len(files) >= 10
    for path in files:
        data = json.loads(path.read_text())
        assert len(data.get("source", "")) > 40, f"{path.name}: say where the values come from"
        facts = TorchFacts.from_dict(data)
        assert facts.runtime in torch_runtimes()
        assert facts.device_count == len(facts.devices), path.name
        assert TorchFacts.from_dict(facts.to_dict()) == facts
        assert {k: v for k, v in data.items() if k != "source"} == facts.to_dict(), path.name


# name -> (available, reason fragment, [(device name, memory MiB, capability, precisions)], target precisions)
EXPECTED: dict[str, tuple[bool, str, list[tuple[str, float | None, str | None, tuple[str, ...]]], tuple[str, ...]]] = {
    "cuda_h100": (True, "", [("NVIDIA H100 80GB HBM3", 81089, "9.0", ("fp32", "fp16", "bf16"))],
                  ("fp32", "fp16", "bf16")),
    # Turing (7.5) only emulates bfloat16.
    "cuda_t4": (True, "", [("Tesla T4", 15095, "7.5", ("fp32", "fp16"))], ("fp32", "fp16")),
    "cuda_cpu_build": (False, "is built without CUDA (torch.version.cuda is None)", [], ()),
    "rocm_mi300x": (True, "", [("AMD Instinct MI300X", 196592, "gfx942", ("fp32", "fp16", "bf16"))],
                    ("fp32", "fp16", "bf16")),
    "rocm_no_devices": (False, "torch.cuda.is_available() is False on this ROCm build (hip 6.1.40091)", [], ()),
    "mps_m2": (True, "", [("Apple M2 Max", 21845, None, ("fp32", "fp16", "bf16"))], ("fp32", "fp16", "bf16")),
    # macOS 13: torch refuses bfloat16 tensors on MPS.
    "mps_m1_macos13": (True, "", [("Apple M1", 5727, None, ("fp32", "fp16"))], ("fp32", "fp16")),
    "mps_not_built": (False, "torch is built without MPS (torch.backends.mps.is_built() is False)", [], ()),
    "xpu_max1550": (True, "", [("Intel(R) Data Center GPU Max 1550", 65520, None, ("fp32", "fp16", "bf16"))] * 2,
                    ("fp32", "fp16", "bf16")),
    "xpu_absent": (False, "is built without XPU (torch.xpu._is_compiled() is False", [], ()),
}


@pytest.mark.parametrize("name", sorted(EXPECTED))
def test_recorded_runtime_gives_expected_target(name: str) -> None:
    available, reason, devices, precisions = EXPECTED[name]
    facts = recorded(name)
    target = target_from_facts(facts)
    assert isinstance(target, TargetInfo)
    assert target.name == facts.runtime
    assert target.available is available
    if available:
        assert target.reason == ""
    else:
        assert reason in target.reason
        assert target.unsupported_precision("fp32") == f"{facts.runtime}: {target.reason}"
    got = [(d.name, d.memory_mb, d.capability, d.precisions) for d in target.devices]
    assert got == devices
    assert [d.index for d in target.devices] == list(range(len(devices)))
    assert target.precisions == precisions
    assert set(target.precisions) <= set(PRECISIONS)
    json.dumps(HardwareInfo({target.name: target}).to_dict())  # the `hwbench detect` output stays JSON


def test_precision_skips_name_the_device() -> None:
    t4 = target_from_facts(recorded("cuda_t4"))
    assert t4.unsupported_precision("fp16") is None
    assert t4.unsupported_precision("bf16") == "bf16 unsupported on this cuda device (Tesla T4); supported: fp32, fp16"
    assert target_from_facts(recorded("cuda_h100")).unsupported_precision("bf16") is None
    m1 = target_from_facts(recorded("mps_m1_macos13"))
    assert "bf16 unsupported on this mps device (Apple M1)" in str(m1.unsupported_precision("bf16"))
    assert target_from_facts(recorded("mps_m2")).unsupported_precision("bf16") is None


def test_details_carry_versions() -> None:
    h100 = target_from_facts(recorded("cuda_h100"))
    assert h100.details == {"torch": "2.7.0", "cuda_runtime": "12.8"}
    assert target_from_facts(recorded("cuda_t4")).details["driver"] == 12040
    mi300x = target_from_facts(recorded("rocm_mi300x"))
    assert mi300x.details["archs"] == ["gfx942"]
    assert target_from_facts(recorded("mps_m2")).details["macos"] == "14.5"
    xpu = target_from_facts(recorded("xpu_max1550"))
    assert xpu.details["driver"] == "1.6.33578+51"
    assert xpu.details["platform"] == "Intel(R) oneAPI Unified Runtime over Level-Zero"


@pytest.mark.parametrize(
    ("arch", "bf16"),
    [
        ("gfx942:sramecc+:xnack-", True),  # MI300X (CDNA3)
        ("gfx90a:sramecc+:xnack-", True),  # MI250X (CDNA2)
        ("gfx908:sramecc+:xnack-", True),  # MI100 (CDNA1)
        ("gfx950", True),  # MI355X (CDNA4)
        ("gfx1100", True),  # RX 7900 XTX (RDNA3)
        ("gfx1201", True),  # RX 9070 (RDNA4)
        ("gfx1030", False),  # RX 6800 XT / PRO W6800 (RDNA2): no bf16 arithmetic
        ("gfx906:sramecc+:xnack-", False),  # MI50 / Radeon VII (GCN5)
    ],
)
def test_rocm_bf16_follows_the_gfx_architecture(arch: str, bf16: bool) -> None:
    device = {**recorded("rocm_mi300x").devices[0], "gcnArchName": arch}
    target = target_from_facts(dataclasses.replace(recorded("rocm_mi300x"), devices=(device,)))
    assert target.devices[0].capability == arch.split(":")[0]
    assert ("bf16" in target.precisions) is bf16
    assert "fp16" in target.precisions


def test_rocm_without_gcn_arch_name_keeps_torchs_answer() -> None:
    # torch builds before gcnArchName existed (collect_env prints "NoGCNArchNameOnOldPyTorch"):
    # torch.cuda.is_bf16_supported() says True on every ROCm device, so detection does too.
    device = {k: v for k, v in recorded("rocm_mi300x").devices[0].items() if k != "gcnArchName"}
    target = target_from_facts(dataclasses.replace(recorded("rocm_mi300x"), devices=(device,)))
    assert target.devices[0].capability is None
    assert "bf16" in target.precisions
    assert rocm_arch(device) is None
    assert rocm_arch({"gcnArchName": ""}) is None


def test_rocm_device_without_a_name_is_named_by_arch() -> None:
    device = {**recorded("rocm_mi300x").devices[0], "name": ""}
    target = target_from_facts(dataclasses.replace(recorded("rocm_mi300x"), devices=(device,)))
    assert target.devices[0].name == "AMD GPU gfx942"


def test_cuda_target_on_a_rocm_build_points_at_rocm() -> None:
    rocm_build = dataclasses.replace(recorded("rocm_no_devices"), runtime="cuda", is_built=False)
    target = target_from_facts(rocm_build)
    assert not target.available
    assert target.reason == "torch is a ROCm build (hip 6.1.40091); see the rocm target"


def test_rocm_target_on_a_cuda_build_says_so() -> None:
    cuda_build = dataclasses.replace(recorded("cuda_h100"), runtime="rocm", is_built=False)
    assert target_from_facts(cuda_build).reason == "torch is not a ROCm build (torch.version.hip is None)"


def test_unavailable_reason_names_the_visibility_variables() -> None:
    hidden = dataclasses.replace(recorded("cuda_h100"), is_available=False, device_count=0, devices=(),
                                 extra={"env": {"CUDA_VISIBLE_DEVICES": "", "CUDA_DEVICE_ORDER": "PCI_BUS_ID"}})
    assert target_from_facts(hidden).reason == "torch.cuda.is_available() is False (CUDA_VISIBLE_DEVICES='')"
    hidden_rocm = dataclasses.replace(recorded("rocm_no_devices"), extra={"env": {"HIP_VISIBLE_DEVICES": "-1"}})
    assert target_from_facts(hidden_rocm).reason.endswith("(hip 6.1.40091) (HIP_VISIBLE_DEVICES='-1')")


def test_mps_not_available_names_the_macos_version() -> None:
    off = dataclasses.replace(recorded("mps_m2"), is_available=False, device_count=0, devices=())
    reason = target_from_facts(off).reason
    assert reason.startswith("torch.backends.mps.is_available() is False on macOS 14.5")


def test_missing_torch_and_probe_errors_become_reasons() -> None:
    for runtime in torch_runtimes():
        absent = target_from_facts(TorchFacts(runtime, torch_installed=False))
        assert (absent.available, absent.reason) == (False, "torch is not installed")
    broken = dataclasses.replace(recorded("cuda_h100"), error="RuntimeError: CUDA driver initialization failed")
    target = target_from_facts(broken)
    assert not target.available
    assert target.reason == "detection failed: RuntimeError: CUDA driver initialization failed"


def test_unknown_runtime_is_rejected_naming_the_known_ones() -> None:
    with pytest.raises(ValueError, match=r"'tpu' is not one of \('cuda', 'rocm', 'mps', 'xpu'\)"):
        TorchFacts("tpu")
    with pytest.raises(ValueError, match="'tpu'"):
        gather_torch_facts("tpu")


def _without_source(data: dict[str, Any]) -> dict[str, Any]:
    return {k: v for k, v in data.items() if k != "source"}


_CPU_WHEEL = torch.version.cuda is None and torch.version.hip is None and not torch.backends.mps.is_built() \
    and not torch.xpu._is_compiled()


@pytest.mark.skipif(not _CPU_WHEEL, reason="the recordings below were made with a CPU-only torch wheel")
@pytest.mark.parametrize(("runtime", "name"), [("cuda", "cuda_cpu_build"), ("mps", "mps_not_built"),
                                               ("xpu", "xpu_absent")])
def test_live_probe_reproduces_the_cpu_wheel_recordings(runtime: str, name: str, monkeypatch) -> None:
    for variable in ("CUDA_VISIBLE_DEVICES", "CUDA_DEVICE_ORDER", "ZE_AFFINITY_MASK", "ONEAPI_DEVICE_SELECTOR"):
        monkeypatch.delenv(variable, raising=False)
    live = gather_torch_facts(runtime).to_dict()
    stored = _without_source(json.loads((RUNTIMES / f"{name}.json").read_text()))
    stored["torch_version"] = live["torch_version"]  # recorded with 2.13.0+cpu; any CPU wheel says the same
    assert live == stored


def test_live_probe_records_the_visibility_variables(monkeypatch) -> None:
    monkeypatch.setenv("CUDA_VISIBLE_DEVICES", "")
    monkeypatch.setenv("HIP_VISIBLE_DEVICES", "1")
    assert gather_torch_facts("cuda").extra["env"]["CUDA_VISIBLE_DEVICES"] == ""
    assert gather_torch_facts("rocm").extra["env"] == {"HIP_VISIBLE_DEVICES": "1", "CUDA_VISIBLE_DEVICES": ""}


def test_detect_functions_are_the_probe_plus_the_interpretation() -> None:
    probes = registered_probes()
    for runtime in ("cuda", "rocm", "mps", "xpu"):
        expected = target_from_facts(gather_torch_facts(runtime))
        assert detect_torch_runtime(runtime) == expected
        assert probes[runtime]() == expected  # each target's registered probe reads its own runtime



# --- timers: which device events time which target --------------------------------------------


@pytest.mark.parametrize(("device_kind", "timer"), [("cuda", "cuda"), ("rocm", "cuda"), ("xpu", "xpu"),
                                                    ("mps", "mps"), ("cpu", "wall"), ("openvino", "wall")])
def test_timer_for_each_target(device_kind: str, timer: str) -> None:
    assert timer_for(device_kind) == timer
    assert timer in timer_kinds()


def test_event_timer_reasons_on_this_machine() -> None:
    assert event_timer_unavailable("wall") == "the wall timer uses no device events"
    for kind in ("cuda", "xpu", "mps"):
        module = getattr(torch, kind)
        reason = event_timer_unavailable(kind)
        if module.is_available():
            assert reason is None
        else:
            assert reason == f"torch.{kind}.is_available() is False"
    with pytest.raises(ValueError, match="'sundial'"):
        event_timer_unavailable("sundial")


@pytest.mark.parametrize("kind", ["cuda", "xpu", "mps"])
def test_event_timer_falls_back_to_the_wall_clock_where_its_events_cannot_run(kind: str) -> None:
    if event_timer_unavailable(kind) is None:
        pytest.skip(f"{kind} events run here")
    events: list[str] = []

    def nap() -> None:
        events.append("call")
        time.sleep(0.002)

    tracker = LatencyTracker(kind, sync=lambda: events.append("sync"), device_index=0)
    with pytest.warns(HwbenchWarning, match=f"{kind} timer: torch.{kind}.is_available\\(\\) is False; timing with the wall"):
        lat = tracker.run(nap, TimingConfig(warmup_iterations=1, min_iterations=4, min_time_s=0.0))
    assert tracker.timer_used == "wall"
    assert lat.iterations == 4
    assert events == ["call", "sync"] + ["call", "sync"] * 4  # the wall timer syncs after every call
    assert lat.min >= 1.9  # each sleep lasts >= 2 ms (PEP 475)


def test_wall_timer_uses_the_wall_clock_without_warning() -> None:
    tracker = LatencyTracker("wall")
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        lat = tracker.run(lambda: time.sleep(0.001), TimingConfig(0, 3, 0.0))
    assert tracker.timer_used == "wall"
    assert lat.iterations == 3
    assert lat.min >= 0.9
