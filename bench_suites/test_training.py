"""Training benchmarks: one optimizer step (forward, backward, AdamW step) per iteration.

Every zoo model on torch eager, at fp32 and under autocast fp16/bf16 (fp32 master weights, a grad
scaler at fp16) where the hardware runs them natively; records report samples/s and peak memory.
CPU cases run one small batch, which keeps `-m "cpu and quick"` fast; accelerators run batches
large enough to leave the host-launch-bound regime. A marker and the command line both narrow
the grid, so `--hwbench-batch-sizes` picks among these sizes; write a test of your own with the
same marker for others.
"""

from __future__ import annotations

import math

import pytest


def _check(result, case) -> None:
    assert result.latency.iterations >= 1
    # The autocast dtype that ran is the precision the case claims; the weights stay fp32.
    assert result.precision == case.precision
    assert result.details["master_weights"] == "fp32"
    assert math.isclose(result.throughput, case.batch_size / (result.latency.median / 1e3))


@pytest.mark.hwbench(modes=["train"], hardware=["cpu"], batch_sizes=[2])
def test_training_cpu(hwbench_case, hwbench):
    _check(hwbench.measure(hwbench_case), hwbench_case)


@pytest.mark.hwbench(modes=["train"], hardware=["cuda", "rocm", "mps", "xpu"], batch_sizes=[8, 32])
def test_training(hwbench_case, hwbench):
    _check(hwbench.measure(hwbench_case), hwbench_case)
