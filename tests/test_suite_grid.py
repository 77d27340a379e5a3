"""The suites' default grid on accelerators (bench_suites/conftest.py) and `--hwbench-grid all`."""

from __future__ import annotations

import re
import subprocess
import sys
from pathlib import Path

import pytest

#: Every test here starts another process, a server or a training: the end-to-end tier.
pytestmark = pytest.mark.e2e

ROOT = Path(__file__).resolve().parents[1]


def _collect(*args: str) -> list[str]:
    proc = subprocess.run([sys.executable, "-m", "pytest", "bench_suites", "--collect-only", "-q",
                           "-p", "no:cacheprovider", *args], cwd=ROOT, capture_output=True, text=True, timeout=300)
    assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-3000:]
    return [m.group(1) for line in proc.stdout.splitlines() if (m := re.search(r"\[(.+)\]$", line))]


def test_cuda_default_grid_is_the_ci_grid_and_all_widens_it():
    ci, everything = _collect("-m", "cuda"), _collect("-m", "cuda", "--hwbench-grid", "all")
    assert ci and set(ci) < set(everything)
    assert len(everything) > 4 * len(ci)
    # The 7B tier, TensorRT engines and torch.compile's default mode wait for `all`.
    assert not [c for c in ci if c.startswith(("llama-7b-", "qwen2-7b-", "llava-7b-"))]
    assert not [c for c in ci if "-onnxruntime-trt-" in c or "-cuda-torch-compile-fp" in c]
    assert [c for c in everything if c.startswith("llama-7b-cuda-torch-")]
    # Eager inference of the full tier stays at every precision; compiled decode is in.
    assert {"bert-base-cuda-torch-fp32-b1", "bert-base-cuda-torch-fp16-b32", "bert-base-cuda-torch-bf16-b1",
            "tinyllama-1.1b-cuda-torch-compile-ro-bf16-b1-generate-out32"} <= set(ci)
    # The smoke tier is a part of the CI grid.
    quick = _collect("-m", "cuda and quick")
    assert quick and set(quick) <= set(ci)


def test_cpu_grid_is_not_trimmed():
    assert _collect("-m", "cpu and quick") == _collect("-m", "cpu and quick", "--hwbench-grid", "all")
