"""The suites' default grid on accelerators (bench_suites/conftest.py) and `--hwbench-grid all`."""

from __future__ import annotations

import json
import os
import re
import subprocess
import sys
from pathlib import Path

import pytest

#: Every test here starts another process, a server or a training: the end-to-end tier.
pytestmark = pytest.mark.e2e

ROOT = Path(__file__).resolve().parents[1]

#: A plug-in for the collecting session: each collected case's id and its markers, as JSON.
_DUMP_PLUGIN = '''
import json, os

def pytest_collection_finish(session):
    cases = {item.nodeid: sorted({mark.name for mark in item.iter_markers()}) for item in session.items}
    with open(os.environ["HWBENCH_TEST_DUMP"], "w") as out:
        json.dump(cases, out)
'''


@pytest.fixture(scope="module")
def grids(tmp_path_factory: pytest.TempPathFactory) -> dict[str, dict[str, set[str]]]:
    """Every case of the suites (`-m ""`) under each `--hwbench-grid`, with its markers: one collection a grid."""
    tmp = tmp_path_factory.mktemp("grids")
    (tmp / "hwbench_dump_cases.py").write_text(_DUMP_PLUGIN)
    out = {}
    for grid in ("ci", "all"):
        dump = tmp / f"{grid}.json"
        env = {**os.environ, "PYTHONPATH": str(tmp), "HWBENCH_TEST_DUMP": str(dump)}
        proc = subprocess.run([sys.executable, "-m", "pytest", "bench_suites", "--collect-only", "-q",
                               "-p", "no:cacheprovider", "-p", "hwbench_dump_cases", "-m", "", "--hwbench-grid", grid],
                              cwd=ROOT, capture_output=True, text=True, timeout=300, env=env)
        assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-3000:]
        out[grid] = {case: set(marks) for case, marks in json.loads(dump.read_text()).items()}
    return out


def _select(cases: dict[str, set[str]], *markers: str) -> set[str]:
    """The ids of the cases that carry every one of `markers` (what `-m "a and b"` selects)."""
    return {m.group(1) for node, marks in cases.items() if set(markers) <= marks and (m := re.search(r"\[(.+)\]$", node))}


def test_cuda_default_grid_is_the_ci_grid_and_all_widens_it(grids):
    ci, everything = _select(grids["ci"], "cuda"), _select(grids["all"], "cuda")
    assert ci and ci < everything
    assert len(everything) > 4 * len(ci)
    # The 7B tier, TensorRT engines and torch.compile's default mode wait for `all`.
    assert not [c for c in ci if c.startswith(("llama-7b-", "qwen2-7b-", "llava-7b-"))]
    assert not [c for c in ci if "-onnxruntime-trt-" in c or "-cuda-torch-compile-fp" in c]
    assert [c for c in everything if c.startswith("llama-7b-cuda-torch-")]
    # Eager inference of the full tier stays at every precision; compiled decode is in.
    assert {"bert-base-cuda-torch-fp32-b1", "bert-base-cuda-torch-fp16-b32", "bert-base-cuda-torch-bf16-b1",
            "tinyllama-1.1b-cuda-torch-compile-ro-bf16-b1-generate-out32"} <= ci
    # The smoke tier is a part of the CI grid.
    quick = _select(grids["ci"], "cuda", "quick")
    assert quick and quick <= ci


def test_cpu_grid_is_not_trimmed(grids):
    quick = _select(grids["ci"], "cpu", "quick")
    assert quick and quick == _select(grids["all"], "cpu", "quick")
