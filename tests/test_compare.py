"""`compare_sessions`: regressions need both a large change and a significant test."""

from __future__ import annotations

import numpy as np
import pandas as pd
import pytest

from pytest_hwbench.compare import Comparison, compare_sessions, format_table
from pytest_hwbench.record import BenchmarkRecord
from pytest_hwbench.trackers import Latency


def record(session: str, model: str, timings: np.ndarray | list[float], *, hardware: str = "cpu",
           precision: str = "fp32", batch: int = 1) -> BenchmarkRecord:
    lat = Latency.from_values([float(t) for t in timings])
    return BenchmarkRecord(
        case_id=f"{model}-{hardware}-torch-{precision}-b{batch}", session_id=session, status="passed",
        model=model, family="embedding", model_type="bert", backend="torch", hardware=hardware,
        device_name="AMD EPYC 7R13", precision=precision, mode="inference", batch_size=batch,
        latency_ms_mean=lat.mean, latency_ms_median=lat.median, latency_ms_min=lat.min,
        latency_ms_max=lat.max, latency_ms_stddev=lat.stddev, latency_ms_iqr=lat.iqr, latency_ms_p90=lat.p90,
        latency_ms_p95=lat.p95, latency_ms_p99=lat.p99, iterations=lat.iterations,
        throughput_items_per_s=lat.throughput(batch), timings_ms=lat.values_ms,
    )


def failed(session: str, model: str, error: str) -> BenchmarkRecord:
    return BenchmarkRecord(
        case_id=f"{model}-cpu-torch-fp32-b1", session_id=session, status="failed", model=model,
        family="embedding", model_type="bert", backend="torch", hardware="cpu", device_name="",
        precision="fp32", mode="inference", batch_size=1, error=error,
    )


def session(records: list[BenchmarkRecord]) -> tuple[pd.DataFrame, dict[str, list[float]]]:
    frame = pd.DataFrame([r.to_dict() for r in records]).drop(columns=["timings_ms"])
    return frame, {r.record_id: list(r.timings_ms) for r in records}


@pytest.fixture(scope="module")
def comparisons() -> dict[str, Comparison]:
    rng = np.random.default_rng(12345)
    a_recs = [
        # 30 % slower, 50 iterations each, 2 % noise: clearly separated
        record("A", "slow", rng.normal(10.0, 0.2, 50)),
        # 30 % faster
        record("A", "fast", rng.normal(20.0, 0.4, 50)),
        # 30 % shift on 3 very noisy values: not significant
        record("A", "noisy", [10.0, 4.0, 16.0]),
        # 5 % shift, 200 iterations, 1 % noise: significant but below the 10 % threshold
        record("A", "small", rng.normal(10.0, 0.1, 200)),
        # same distribution
        record("A", "same", rng.normal(5.0, 0.1, 60)),
        record("A", "only-a", rng.normal(5.0, 0.1, 20)),
        record("A", "breaks", rng.normal(5.0, 0.1, 20)),
    ]
    b_recs = [
        record("B", "slow", rng.normal(13.0, 0.26, 50)),
        record("B", "fast", rng.normal(14.0, 0.28, 50)),
        record("B", "noisy", [13.0, 5.0, 21.0]),
        record("B", "small", rng.normal(10.5, 0.105, 200)),
        record("B", "same", rng.normal(5.0, 0.1, 60)),
        record("B", "only-b", rng.normal(5.0, 0.1, 20)),
        failed("B", "breaks", "torch.OutOfMemoryError: CUDA out of memory"),
    ]
    (a, ta), (b, tb) = session(a_recs), session(b_recs)
    result = compare_sessions(a, b, ta, tb)
    return {c.case_id.split("-cpu-")[0]: c for c in result}


def test_clear_30_percent_slowdown_is_a_regression(comparisons):
    c = comparisons["slow"]
    assert c.verdict == "regression"
    assert c.change == pytest.approx(0.30, abs=0.02)
    assert c.p_value is not None and c.p_value < 1e-10
    assert c.median_a == pytest.approx(10.0, abs=0.1) and c.median_b == pytest.approx(13.0, abs=0.1)
    assert (c.n_a, c.n_b) == (50, 50)


def test_clear_speedup_is_an_improvement(comparisons):
    c = comparisons["fast"]
    assert c.verdict == "improvement" and c.change == pytest.approx(-0.30, abs=0.02)


def test_large_shift_on_tiny_noisy_samples_is_unchanged(comparisons):
    c = comparisons["noisy"]
    assert c.change == pytest.approx(0.30)  # medians 10 -> 13
    assert c.p_value is not None and c.p_value >= 0.05
    assert c.verdict == "unchanged" and "not significant" in c.note


def test_significant_shift_below_threshold_is_unchanged(comparisons):
    c = comparisons["small"]
    assert c.change == pytest.approx(0.05, abs=0.01)
    assert c.p_value is not None and c.p_value < 1e-10
    assert c.verdict == "unchanged"


def test_same_distribution_is_unchanged(comparisons):
    assert comparisons["same"].verdict == "unchanged"


def test_cases_in_one_session_only_are_missing(comparisons):
    only_a, only_b, breaks = comparisons["only-a"], comparisons["only-b"], comparisons["breaks"]
    assert only_a.verdict == "missing" and only_a.median_b is None and only_a.note == "absent from B"
    assert only_b.verdict == "missing" and only_b.median_a is None and only_b.note == "absent from A"
    assert breaks.verdict == "missing" and "failed in B: torch.OutOfMemoryError" in breaks.note
    assert all(c.change is None and c.p_value is None for c in (only_a, only_b, breaks))


def test_order_is_a_then_b_only(comparisons):
    assert list(comparisons) == ["slow", "fast", "noisy", "small", "same", "only-a", "breaks", "only-b"]


def test_threshold_and_alpha_are_honoured():
    rng = np.random.default_rng(9)
    (a, ta), (b, tb) = session([record("A", "m", rng.normal(10, 0.1, 100))]), session(
        [record("B", "m", rng.normal(10.5, 0.1, 100))])
    (loose,) = compare_sessions(a, b, ta, tb, threshold=0.02)
    assert loose.verdict == "regression"
    (strict,) = compare_sessions(a, b, ta, tb, threshold=0.02, alpha=1e-300)
    assert strict.verdict == "unchanged"
    with pytest.raises(ValueError, match="alpha"):
        compare_sessions(a, b, ta, tb, alpha=0)
    with pytest.raises(ValueError, match="threshold"):
        compare_sessions(a, b, ta, tb, threshold=-0.1)


def test_without_raw_timings_no_test_is_possible():
    rng = np.random.default_rng(5)
    (a, _), (b, _) = session([record("A", "m", rng.normal(10, 0.1, 30))]), session(
        [record("B", "m", rng.normal(20, 0.1, 30))])
    (c,) = compare_sessions(a, b, {}, {})
    assert c.verdict == "unchanged" and c.p_value is None and c.change == pytest.approx(1.0, abs=0.05)
    assert "no test" in c.note  # medians from latency_ms_median, but a doubling is not claimed without data


def test_identical_constant_samples():
    (a, ta), (b, tb) = session([record("A", "m", [2.0] * 10)]), session([record("B", "m", [2.0] * 10)])
    (c,) = compare_sessions(a, b, ta, tb)
    assert (c.verdict, c.change, c.p_value) == ("unchanged", 0.0, 1.0)


def test_missing_columns_are_named():
    with pytest.raises(ValueError, match="record_id"):
        compare_sessions(pd.DataFrame({"case_id": ["x"], "status": ["passed"]}),
                         pd.DataFrame({"case_id": ["x"], "status": ["passed"], "record_id": ["r"]}), {}, {})


def test_format_table(comparisons):
    text = format_table(list(comparisons.values()))
    lines = text.splitlines()
    assert lines[0].split()[:3] == ["case_id", "median", "A"]
    slow = comparisons["slow"]
    slow_line = next(ln for ln in lines if ln.startswith("slow-cpu"))
    assert f"{slow.median_a:.3f}" in slow_line and f"{slow.median_b:.3f}" in slow_line
    assert f"{slow.change * 100:+.1f}%" in slow_line and "regression" in slow_line
    only_b_line = next(ln for ln in lines if ln.startswith("only-b-cpu"))
    assert "missing" in only_b_line and "absent from A" in only_b_line
    assert lines[-1] == "1 regression, 1 improvement, 3 unchanged, 3 missing (8 cases)"
