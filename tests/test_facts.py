"""The table of target and backend facts: the names derived from it, hwsel's reading of it, and
a new target is one row plus its probe.

The fictional target runs in fresh processes (a pytest plug-in passed with ``-p`` declares its
row and its probe, as a third party's would), so it never leaks into this process's tables.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

from pytest_hwbench import facts
from pytest_hwbench.facts import BackendFacts, TargetFacts

ROOT = Path(__file__).resolve().parents[1]

#: A plug-in that adds a target: one row of facts and one probe, nothing else.
NPU9_PLUGIN = '''
from pytest_hwbench.facts import TargetFacts, register_target
from pytest_hwbench.hardware import DeviceInfo, TargetInfo, register_probe

register_target(TargetFacts("npu9", "accelerator", "cases that need a fictional NPU-9", torch_module="npu9",
                            fallback_rank=10, launch_cost_ms=0.01))
register_probe("npu9", lambda: TargetInfo("npu9", True, "", (DeviceInfo(0, "NPU-9", 4096.0, None, ("fp32",)),),
                                          ("fp32",)))
'''


def _run(args: list[str], tmp_path: Path) -> subprocess.CompletedProcess[str]:
    (tmp_path / "npu9_plugin.py").write_text(NPU9_PLUGIN)
    env = {**os.environ, "PYTHONPATH": os.pathsep.join([str(tmp_path), *filter(None, [os.environ.get("PYTHONPATH")])])}
    return subprocess.run([sys.executable, *args], cwd=ROOT, capture_output=True, text=True, timeout=300,
                          env=env, check=False)


def test_the_names_derived_from_the_table():
    assert facts.target_names() == ("cpu", "cuda", "rocm", "mps", "xpu", "openvino", "onnxruntime", "qnn",
                                    "wasm", "webgpu", "webnn")
    assert facts.target_set(host_cpu=True) == {"cpu", "onnxruntime", "openvino", "wasm"}
    assert facts.target_set("web") == frozenset({"wasm", "webgpu", "webnn"})
    assert facts.torch_modules() == {"cuda": "cuda", "rocm": "cuda", "xpu": "xpu", "mps": "mps"}
    assert facts.torch_runtimes() == ("cuda", "rocm", "mps", "xpu")
    assert facts.timer_kinds() == ("wall", "cuda", "mps", "xpu")
    docs = facts.marker_docs()
    assert docs["cpu"] == "cases that run on the host CPU (any backend)"
    assert docs["rocm"] == "cases that need an AMD GPU through torch's ROCm build"
    assert "onnxruntime" not in docs  # a runtime probed, not a marker of its own
    assert facts.launch_cost_ms("webgpu") == 0.1 and facts.launch_cost_ms("no-such-target") == 0.02
    assert facts.backends_as_hardware() == ("openvino",)


def test_a_row_registered_later_is_in_the_next_answer():
    row = TargetFacts("testcpu9", "cpu", "cases on a fictional CPU runtime")
    try:
        facts.register_target(row)
        assert facts.target_names()[-1] == "testcpu9" and "testcpu9" in facts.target_set(host_cpu=True)
        assert facts.marker_docs()["testcpu9"] == "cases on a fictional CPU runtime"
        assert "testcpu9" not in facts.torch_modules() and facts.target_facts("testcpu9") is row
    finally:
        facts.unregister_target("testcpu9")
    assert "testcpu9" not in facts.target_names() and "testcpu9" not in facts.target_set(host_cpu=True)


def test_bad_rows_name_the_field():
    with pytest.raises(ValueError, match="kind 'gpu' is not one of cpu, accelerator, web, remote"):
        TargetFacts("npu9", "gpu")
    with pytest.raises(ValueError, match="timer 'cuda' must be 'wall' or its torch module"):
        TargetFacts("npu9", "accelerator", timer="cuda")
    with pytest.raises(ValueError, match="launch_share must be in"):
        BackendFacts("mine", launch_share=0)
    with pytest.raises(KeyError, match="no facts for hardware target 'nope'.*register_target"):
        facts.target_facts("nope")
    with pytest.raises(TypeError, match="takes a TargetFacts row"):
        facts.register_target({"name": "npu9"})  # type: ignore[arg-type]


def test_hwsel_reads_its_facts_from_the_table():
    """hwsel's default backends and launch floors are the rows' values."""
    from hwsel import features, query

    rows = facts.target_rows()
    # onnxruntime's row names no backend of its own: hwsel considers it only with backend= named
    # (a question naming neither gets torch there, which does not run on that target).
    assert {r.name: query.default_backend(r.name) for r in rows} == {r.name: r.default_backend for r in rows}
    assert query.default_backend("onnxruntime") == "torch"
    for r in rows:
        for b in facts.backend_rows():
            assert features.launch_floor_ms(r.name, b.name) == r.launch_cost_ms * b.launch_share
    assert facts.backend_facts("someone-elses").launch_share == 1.0  # unknown backends count as eager


def test_the_table_and_the_vocabulary_import_nothing_heavy():
    proc = subprocess.run([sys.executable, "-c", textwrap.dedent("""
        import json, sys
        import pytest_hwbench.facts, pytest_hwbench.vocabulary
        print(json.dumps(sorted(m for m in sys.modules if m.startswith("pytest_hwbench")
                                or m in ("pytest", "torch", "numpy", "pluggy"))))
    """)], cwd=ROOT, capture_output=True, text=True, timeout=120, check=True)
    assert json.loads(proc.stdout) == ["pytest_hwbench", "pytest_hwbench._lazy", "pytest_hwbench.facts",
                                       "pytest_hwbench.vocabulary"]


@pytest.mark.e2e
def test_a_fictional_target_is_one_row_plus_its_probe(tmp_path):
    """The plug-in adds a row and a probe: detection finds the target, pytest registers its
    marker, the option accepts it and the grid offers its cases (torch runs it: its row names a
    torch module)."""
    found = _run(["-c", textwrap.dedent("""
        import json
        import npu9_plugin
        from pytest_hwbench.facts import target_names
        from pytest_hwbench.hardware import detect_hardware, registered_probes
        info = detect_hardware(targets=["npu9"])["npu9"]
        print(json.dumps({"available": info.available, "device": info.devices[0].name,
                          "kinds": list(target_names()), "probes": list(registered_probes())[-1]}))
    """)], tmp_path)
    assert found.returncode == 0, found.stderr[-3000:]
    detected = json.loads(found.stdout.strip().splitlines()[-1])
    assert detected == {"available": True, "device": "NPU-9", "kinds": [*facts.target_names(), "npu9"],
                        "probes": "npu9"}

    markers = _run(["-m", "pytest", "-p", "npu9_plugin", "-p", "no:cacheprovider", "--markers"], tmp_path)
    assert markers.returncode == 0, markers.stdout[-3000:] + markers.stderr[-3000:]
    assert "@pytest.mark.npu9: cases that need a fictional NPU-9" in markers.stdout

    grid = _run(["-m", "pytest", "-p", "npu9_plugin", "-p", "no:cacheprovider", "bench_suites/test_inference.py",
                 "--co", "-q", "--strict-markers", "-m", "npu9", "--hwbench-hardware", "npu9",
                 "--hwbench-models", "bert-tiny"], tmp_path)
    assert grid.returncode == 0, grid.stdout[-3000:] + grid.stderr[-3000:]
    ids = [line for line in grid.stdout.splitlines() if "::test_inference[" in line]
    assert ids == ["bench_suites/test_inference.py::test_inference[bert-tiny-npu9-torch-fp32-b1]",
                   "bench_suites/test_inference.py::test_inference[bert-tiny-npu9-torch-fp32-b8]",
                   "bench_suites/test_inference.py::test_inference[bert-tiny-npu9-torch-fp32-b32]"], grid.stdout[-3000:]
