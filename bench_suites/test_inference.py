"""Inference benchmarks: every zoo model on every backend, hardware, precision and batch size.

Narrow a run with markers (`-m "cpu and quick"`) and options (`--hwbench-models bert-base`).
"""

from __future__ import annotations


def test_inference(hwbench_case, hwbench):
    result = hwbench.measure(hwbench_case)
    assert result.latency.iterations >= 1
    # The precision that ran is the precision the case claims (read back from the runtime).
    assert result.precision == hwbench_case.precision
