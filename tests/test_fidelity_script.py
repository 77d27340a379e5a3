"""benchmarks/fidelity.py: its launch-bound verdict and targets, and one short CPU run.

The script registers a backend of its own when it runs, so it runs in a subprocess here; the
pure functions are imported (importing registers nothing).
"""

from __future__ import annotations

import statistics
import subprocess
import sys
from pathlib import Path

import pytest
from _scripts import script_module

#: Every test here starts another process, a server or a training: the end-to-end tier.
pytestmark = pytest.mark.e2e

SCRIPT = Path(__file__).resolve().parents[1] / "benchmarks" / "fidelity.py"


@pytest.fixture(scope="module")
def fidelity():
    with script_module(SCRIPT, "hwbench_fidelity_script") as module:
        yield module


def test_import_registers_no_backend(fidelity):
    from pytest_hwbench import registered_backends

    assert fidelity.SHIM not in registered_backends()


def test_launch_bound_when_enqueueing_takes_most_of_the_device_time(fidelity):
    # Eager resnet-50 fp32 b1 on an H100: ~5 ms device, almost all of it Python dispatch.
    assert fidelity.bound("cuda", 5.0, 4.6, 1.0) == "launch"
    # CUDA graphs: one replay enqueued in microseconds; 8x the batch under 2x the time.
    assert fidelity.bound("cuda", 0.45, 0.02, 1.6) == "latency"
    assert fidelity.bound("cuda", 8.0, 2.0, 7.5) == "compute"
    assert fidelity.bound("cuda", 8.0, 2.0, None) == "compute"
    assert fidelity.bound("cpu", 40.0, 40.0, 7.0) == "cpu"


def test_targets(fidelity):
    assert fidelity.target("cpu", "cpu", 39.0, 0.1)[0] == fidelity.CPU_BAND
    assert fidelity.target("cpu", "cpu", 3.0, 0.1)[0] is None
    assert fidelity.target("cuda", "latency", 0.45, 0.1)[0] == fidelity.DEVICE_BAND
    band, why = fidelity.target("cuda", "launch", 5.0, 0.1)
    assert band == pytest.approx((0.9, 1.1)) and "launch bound" in why


def _run(*args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, str(SCRIPT), *args], capture_output=True, text=True, timeout=600)


def test_bad_arguments_exit_2():
    result = _run("--batch-size", "0")
    assert result.returncode == 2 and "batch sizes must be >= 1" in result.stderr


def test_short_cpu_run_prints_figures_and_skips_with_reasons():
    result = _run("--rounds", "1", "--min-time", "0", "--warmup-time", "0", "--launch-factor", "2",
                  "--cases", "bert-tiny", "--hardware", "cpu,cuda", "--backends", "torch,torch-compile-ro")
    out = result.stdout
    assert result.returncode in (0, 1), result.stderr[-2000:]
    row = next(line for line in out.splitlines() if line.startswith("bert-tiny-cpu-torch-fp32-b1 "))
    assert "skipped" not in row and "ERROR" not in row
    assert "bert-tiny-cpu-torch-compile-ro-fp32-b1" in out and "reduce-overhead uses CUDA graphs" in out
    assert "bert-tiny-cuda-torch-fp32-b1" in out  # a row with a GPU, a skip with its reason without
    assert "0 failed" in out


def test_device_event_path_without_a_device(fidelity, monkeypatch):
    """The accelerator branch (events per call, one sync; enqueue time on an idle device), run
    here with a stand-in for torch.cuda whose events stamp perf_counter."""
    import time

    import torch

    from pytest_hwbench import LoadedModel

    class FakeEvent:
        def __init__(self, enable_timing: bool = False) -> None:
            self.at = None

        def record(self, stream=None) -> None:
            self.at = time.perf_counter()

        def elapsed_time(self, other: FakeEvent) -> float:
            return (other.at - self.at) * 1e3

    class FakeAccelerator:
        Event = FakeEvent
        synchronize = staticmethod(lambda: None)

    monkeypatch.setattr(torch, "fakeaccel", FakeAccelerator, raising=False)
    syncs = []
    class Synced(LoadedModel):
        def sync(self) -> None:
            syncs.append(1)

    loaded = Synced(precision="fp32", device_name="fake", timer="fakeaccel", device_kind="cuda")
    calls = []

    def call() -> None:
        calls.append(1)
        time.sleep(0.002)

    times = fidelity.plain_loop(call, loaded, iterations=5, warmup=2)
    assert len(times) == 5 and len(calls) == 7 and all(t >= 1.5 for t in times)
    assert len(syncs) == 2  # after the warm-up, after the loop
    host = fidelity.enqueue_time(call, loaded, iterations=4)
    assert host is not None and host >= 1.5
    assert fidelity.bound("cuda", statistics.median(times), host, None) == "launch"
