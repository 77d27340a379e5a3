"""Generation benchmarks: every zoo model that generates tokens (GPT-2, T5, LLaMA, Qwen2, Whisper,
LLaVA), fixed-length greedy ``generate()`` on torch eager: latency of the whole call, time to
first token, per-token decode latency and tokens/s (see `pytest_hwbench.scenarios.generate`).

CPU CI: `-m "cpu and quick"` runs the tiny variants. GPU runners: `-m cuda` runs the full and
large tiers. Tokens per sequence: `--hwbench-new-tokens 32,128` (default 32); prompt length of
text models: `--hwbench-input-lengths 128,512`. Batch sizes are those of the marker (options can
only narrow them).
"""

from __future__ import annotations

import pytest


@pytest.mark.hwbench(modes=["generate"], batch_sizes=[1, 8])
def test_generation(hwbench_case, hwbench):
    result = hwbench.measure(hwbench_case)
    assert result.precision == hwbench_case.precision
    assert result.metrics["ttft_ms"] > 0 and result.metrics["tokens_per_s"] > 0
