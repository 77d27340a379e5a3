"""Trackers: `Latency` statistics, `TimingConfig` validation, `LatencyTracker`, `MemoryTracker`.

Expected statistics are computed independently (the `statistics` module and hand math), never
with numpy, which `Latency.from_values` itself uses.
"""

from __future__ import annotations

import math
import statistics
import sys
import time
from pathlib import Path

import numpy as np
import pytest

from pytest_hwbench.trackers import Latency, LatencyTracker, MemoryTracker, TimingConfig

# A fixed, unsorted sample with a tie and an outlier.
SAMPLE = [4.0, 1.5, 9.0, 2.5, 2.5, 30.0, 7.0, 3.0]


def _linear_percentile(values: list[float], q: float) -> float:
    """Hand-written linear interpolation between closest ranks (numpy's default, Hyndman-Fan 7)."""
    ordered = sorted(values)
    position = (len(ordered) - 1) * q / 100
    lower = math.floor(position)
    upper = min(lower + 1, len(ordered) - 1)
    return ordered[lower] + (ordered[upper] - ordered[lower]) * (position - lower)


def test_latency_from_one_to_ten_matches_hand_math():
    lat = Latency.from_values([float(v) for v in range(1, 11)])
    assert lat.iterations == 10
    assert lat.mean == pytest.approx(5.5)
    assert lat.median == pytest.approx(5.5)
    assert (lat.min, lat.max) == (1.0, 10.0)
    # sample variance of 1..10 is n(n+1)/12 = 110/12
    assert lat.stddev == pytest.approx(math.sqrt(110 / 12))
    # rank positions 0.25*9 = 2.25 -> 3.25 and 0.75*9 = 6.75 -> 7.75
    assert lat.iqr == pytest.approx(7.75 - 3.25)
    assert lat.p90 == pytest.approx(9.1)
    assert lat.p95 == pytest.approx(9.55)
    assert lat.p99 == pytest.approx(9.91)


def test_latency_from_values_matches_statistics_module():
    lat = Latency.from_values(SAMPLE)
    # statistics.quantiles(method="inclusive") is the same linear interpolation, done in pure Python.
    cuts = statistics.quantiles(SAMPLE, n=100, method="inclusive")  # cuts[k-1] is the k-th percentile
    assert lat.values_ms == tuple(SAMPLE)  # order kept: the raw timings are stored as measured
    assert lat.mean == pytest.approx(statistics.fmean(SAMPLE))
    assert lat.median == pytest.approx(statistics.median(SAMPLE))
    assert lat.min == min(SAMPLE)
    assert lat.max == max(SAMPLE)
    assert lat.stddev == pytest.approx(statistics.stdev(SAMPLE))  # sample (n-1), not population
    assert lat.stddev != pytest.approx(statistics.pstdev(SAMPLE))
    assert lat.iqr == pytest.approx(cuts[74] - cuts[24])
    assert lat.p90 == pytest.approx(cuts[89])
    assert lat.p95 == pytest.approx(cuts[94])
    assert lat.p99 == pytest.approx(cuts[98])
    for name, q in (("p90", 90), ("p95", 95), ("p99", 99)):
        assert getattr(lat, name) == pytest.approx(_linear_percentile(SAMPLE, q))


def test_latency_percentiles_are_ordered_and_bounded():
    lat = Latency.from_values(SAMPLE)
    assert lat.min <= lat.median <= lat.p90 <= lat.p95 <= lat.p99 <= lat.max
    assert lat.iqr >= 0


def test_latency_single_value_has_zero_spread():
    lat = Latency.from_values([3.25])
    assert lat.iterations == 1
    assert lat.stddev == 0.0
    assert lat.iqr == 0.0
    assert lat.mean == lat.median == lat.min == lat.max == lat.p90 == lat.p99 == 3.25


@pytest.mark.parametrize("empty", [[], (), np.array([])])
def test_latency_from_no_values_raises(empty):
    with pytest.raises(ValueError, match="at least one value"):
        Latency.from_values(empty)


def test_latency_throughput_uses_median():
    lat = Latency.from_values([2.0, 4.0, 100.0])  # median 4 ms, mean 35.3 ms
    assert lat.throughput(1) == pytest.approx(250.0)
    assert lat.throughput(8) == pytest.approx(2000.0)
    assert Latency.from_values([0.0]).throughput(4) == math.inf


@pytest.mark.parametrize(
    ("kwargs", "fragment"),
    [
        ({"warmup_iterations": -1}, "warmup_iterations must be >= 0, got -1"),
        ({"min_iterations": 0}, "min_iterations must be >= 1, got 0"),
        ({"min_time_s": -0.5}, "min_time_s must be >= 0, got -0.5"),
        ({"min_iterations": 20, "max_iterations": 7}, "max_iterations (7) must be >= min_iterations (20)"),
    ],
)
def test_timing_config_rejects_bad_values_naming_them(kwargs, fragment):
    with pytest.raises(ValueError) as exc:
        TimingConfig(**kwargs)
    assert fragment in str(exc.value)


def test_timing_config_accepts_edges():
    cfg = TimingConfig(warmup_iterations=0, min_iterations=1, min_time_s=0.0, max_iterations=1)
    assert (cfg.warmup_iterations, cfg.min_iterations, cfg.min_time_s, cfg.max_iterations) == (0, 1, 0.0, 1)


def test_timing_config_rejects_nan_min_time():
    with pytest.raises(ValueError, match="min_time_s"):
        TimingConfig(min_time_s=float("nan"))


def test_latency_tracker_rejects_unknown_timer_kind():
    with pytest.raises(ValueError) as exc:
        LatencyTracker("sundial")
    assert "'sundial'" in str(exc.value)
    assert "wall" in str(exc.value)  # lists the accepted kinds


def test_wall_tracker_times_a_sleep():
    calls = 0

    def nap() -> None:
        nonlocal calls
        calls += 1
        time.sleep(0.002)

    cfg = TimingConfig(warmup_iterations=2, min_iterations=5, min_time_s=0.05)
    start = time.perf_counter()
    lat = LatencyTracker("wall").run(nap, cfg)
    elapsed = time.perf_counter() - start

    assert calls == cfg.warmup_iterations + lat.iterations  # warm-up calls are not timed
    assert lat.iterations >= 5
    # Every sleep lasts >= 2 ms, so 25 iterations already pass the 50 ms deadline.
    assert lat.iterations <= 25
    assert elapsed >= 0.05
    assert sum(lat.values_ms) >= 0.9 * 50  # only the loop bookkeeping between calls is untimed
    # time.sleep never returns early (PEP 475); a loaded 2-core machine may wake it late.
    assert 1.9 <= lat.median <= 50.0
    assert lat.min >= 1.9


def test_wall_tracker_min_iterations_bind_when_min_time_is_zero():
    calls = []
    lat = LatencyTracker("wall").run(lambda: calls.append(1), TimingConfig(0, 7, 0.0))
    assert lat.iterations == 7
    assert len(calls) == 7


def test_wall_tracker_stops_at_max_iterations():
    start = time.perf_counter()
    lat = LatencyTracker("wall").run(lambda: None, TimingConfig(0, 3, 30.0, max_iterations=11))
    assert lat.iterations == 11
    assert time.perf_counter() - start < 5  # did not wait for the 30 s min_time


def test_wall_tracker_syncs_after_every_call():
    events: list[str] = []
    tracker = LatencyTracker("wall", sync=lambda: events.append("sync"))
    tracker.run(lambda: events.append("call"), TimingConfig(1, 3, 0.0))
    # warm-up call, one sync after warm-up, then call+sync per timed iteration
    assert events == ["call", "sync"] + ["call", "sync"] * 3


def test_time_once_reports_milliseconds():
    ms = LatencyTracker("wall").time_once(lambda: time.sleep(0.01))
    assert 9.5 <= ms <= 500


_MB = 2**20


def _peak_of(block) -> float:
    tracker = MemoryTracker("cpu")
    with tracker.track() as same:
        block()
    assert same is tracker
    assert tracker.result is not None
    assert tracker.result.peak_device_mb is None  # no device memory on the host
    assert tracker.result.peak_host_rss_mb is not None
    return tracker.result.peak_host_rss_mb


@pytest.mark.skipif(
    not sys.platform.startswith("linux") or not Path("/proc/self/clear_refs").exists(),
    reason="the peak-RSS reset needs Linux /proc/self/clear_refs",
)
def test_memory_tracker_sees_a_200_mb_allocation():
    def allocate() -> None:
        block = np.ones(200 * _MB // 8)  # 200 MiB of float64, every page written
        assert block[-1] == 1.0

    before = _peak_of(lambda: None)
    during = _peak_of(allocate)
    after = _peak_of(lambda: None)  # the high-water mark is reset per block, not carried over
    assert during - before >= 190
    assert during - after >= 190
    assert during - before <= 400  # roughly the allocation, not something unrelated


def test_a_device_peak_is_the_cases_own_figure():
    from pytest_hwbench.trackers import own_peak_mb

    # 67,180 MiB of a failed case's leftovers under a 500 MiB case: the case's peak is 500.
    assert own_peak_mb(67_680.0, 67_180.0) == 500.0
    assert own_peak_mb(800.0, None) == 800.0 and own_peak_mb(800.0, 0.0) == 800.0
    # A peak below what others held at the start cannot be the case's own: no figure.
    assert own_peak_mb(100.0, 67_180.0) is None
    assert own_peak_mb(None, 5.0) is None
