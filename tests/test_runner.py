"""The runner outside pytest: remote-timed backends and the model cache."""

from __future__ import annotations

import pytest

from pytest_hwbench import BenchCase, LoadedModel, Runner, TimingConfig
from pytest_hwbench.backends.base import _REGISTRY, register_backend

REMOTE_TIMES = [4.0, 5.0, 6.0, 5.5, 4.5]


class _RemoteBackend:
    """A backend whose device is measured elsewhere (the shape Qualcomm AI Hub results take)."""

    name = "remote-test"
    hardware = ("cpu",)
    precisions = ("fp32",)

    def __init__(self) -> None:
        self.loads = 0

    def markers(self, hardware: str) -> tuple[str, ...]:
        return ("cpu",)

    def default_precisions(self, hardware, hw):
        return ("fp32",)

    def unavailable(self, hardware, precision, hw):
        return None

    def load(self, spec, hardware, precision, device_index=0):
        self.loads += 1
        details = {"remote_timings_ms": list(REMOTE_TIMES), "remote_peak_device_memory_mb": 12.5, "job": "j1"}

        def prepare(inputs):
            def call():
                raise AssertionError("a remote-timed call must not be timed locally")
            return call

        return LoadedModel(precision="fp32", device_name="remote phone", prepare=prepare, timer="remote",
                           details=details)


@pytest.fixture
def remote_backend():
    backend = _RemoteBackend()
    register_backend(backend)
    yield backend
    _REGISTRY.pop(backend.name, None)


def test_remote_timer_takes_the_backends_timings(remote_backend):
    runner = Runner(TimingConfig(warmup_iterations=0, min_iterations=1, min_time_s=0))
    result = runner.run(BenchCase("bert-tiny", "remote-test", "cpu", "fp32", 2))
    assert result.latency.values_ms == tuple(REMOTE_TIMES)
    assert result.latency.median == 5.0
    assert result.memory.peak_device_mb == 12.5
    assert result.memory.peak_host_rss_mb is None
    record = result.to_record("s1")
    assert record.timings_ms == tuple(REMOTE_TIMES)
    assert "remote_timings_ms" not in record.extra and record.extra["job"] == "j1"
    assert record.throughput_items_per_s == pytest.approx(2 / 0.005)


def test_model_is_loaded_once_across_batch_sizes(remote_backend):
    runner = Runner(TimingConfig(warmup_iterations=0, min_iterations=1, min_time_s=0))
    first = runner.run(BenchCase("bert-tiny", "remote-test", "cpu", "fp32", 1))
    second = runner.run(BenchCase("bert-tiny", "remote-test", "cpu", "fp32", 8))
    assert remote_backend.loads == 1
    assert (first.load_cached, second.load_cached) == (False, True)
    assert first.load_time_s == second.load_time_s
