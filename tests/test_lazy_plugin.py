"""Nothing heavy until a hwbench case is collected, and detection per target.

Each check runs in a fresh interpreter, so what it finds in `sys.modules` or among the probed
targets is what that run did, not what an earlier test imported.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

#: Every test here starts another process, a server or a training: the end-to-end tier.
pytestmark = pytest.mark.e2e

ROOT = Path(__file__).resolve().parents[1]
HEAVY = ("torch", "mlflow", "duckdb", "transformers", "onnxruntime", "openvino", "numpy")
#: Modules that only a session with hwbench cases needs: the backend and scenario registries' and
#: the recorder's.
CASE_ONLY = ("pytest_hwbench.backends.torch_eager", "pytest_hwbench.scenarios.inference",
             "pytest_hwbench.sinks._recorder", "pytest_hwbench.sinks.writer", "urllib.request")


def _fresh(code: str, cwd: Path, timeout: float = 300) -> dict:
    """Run `code` in a new interpreter; it prints one JSON line last."""
    proc = subprocess.run([sys.executable, "-c", textwrap.dedent(code)], cwd=cwd, capture_output=True, text=True,
                          timeout=timeout, check=False)
    assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-3000:]
    return json.loads(proc.stdout.strip().splitlines()[-1])


@pytest.mark.parametrize("args", [["-q"], ["--co", "-q"]], ids=["run", "collect-only"])
def test_an_unrelated_pytest_run_imports_nothing_heavy(tmp_path, args):
    (tmp_path / "test_plain.py").write_text("def test_plain():\n    assert 1 + 1 == 2\n")
    found = _fresh(f"""
        import json, sys, pytest
        rc = pytest.main({args!r} + ["-p", "no:cacheprovider", "test_plain.py"])
        import pytest_hwbench.hardware as hardware
        print(json.dumps({{"rc": int(rc), "heavy": [m for m in {HEAVY!r} if m in sys.modules],
                          "case_only": [m for m in {CASE_ONLY!r} if m in sys.modules],
                          "probed": list(hardware.probed_hardware().targets),
                          "plugin": "pytest_hwbench.plugin" in sys.modules}}))
    """, tmp_path)
    assert found["plugin"], "the plugin must be installed and loaded for this test to mean anything"
    assert found["rc"] == 0
    assert found["heavy"] == []
    assert found["case_only"] == []
    assert found["probed"] == []


def test_the_hwbench_command_line_imports_nothing_heavy_to_parse(tmp_path):
    """`hwbench --help` builds the parser of every command, each command module imported."""
    found = _fresh(f"""
        import contextlib, io, json, sys
        from pytest_hwbench.cli import main
        with contextlib.redirect_stdout(io.StringIO()) as out, contextlib.suppress(SystemExit):
            main(["--help"])
        print(json.dumps({{"heavy": [m for m in {HEAVY!r} if m in sys.modules],
                          "ab": "pytest_hwbench.ab" in sys.modules, "said": "ab" in out.getvalue()}}))
    """, tmp_path)
    assert found["ab"] and found["said"], "every command's module must be loaded for this test to mean anything"
    assert found["heavy"] == []


def test_our_markers_are_registered_although_the_registries_stay_unloaded(tmp_path):
    """Every marker our backends and scenarios bring is registered at configure, without loading
    their registries: a ``--strict-markers`` run of a module that uses each of them passes, and
    ``--markers`` shows each mode's description."""
    from pytest_hwbench.backends.base import registered_backends
    from pytest_hwbench.scenarios import registered_scenarios

    def ours(plugin: object) -> bool:
        return type(plugin).__module__.startswith("pytest_hwbench.")

    names = {name for backend in registered_backends().values() if ours(backend)
             for hardware in backend.hardware for name in backend.markers(hardware)}
    modes = {mode: scenario.description for mode, scenario in registered_scenarios().items() if ours(scenario)}
    assert {"cpu", "cuda", "openvino", "qnn", "wasm"} <= names and set(modes) == {"inference", "generate", "train"}
    marks = "".join(f"@pytest.mark.{name}\n" for name in sorted(names | set(modes)))
    (tmp_path / "test_marked.py").write_text(f"import pytest\n\n\n{marks}def test_marked():\n    pass\n")
    found = _fresh(f"""
        import json, sys, pytest
        rc = pytest.main(["--strict-markers", "-q", "-p", "no:cacheprovider", "test_marked.py"])
        print(json.dumps({{"rc": int(rc), "case_only": [m for m in {CASE_ONLY!r} if m in sys.modules]}}))
    """, tmp_path)
    assert found == {"rc": 0, "case_only": []}
    shown = subprocess.run([sys.executable, "-m", "pytest", "--markers", "-p", "no:cacheprovider"], cwd=tmp_path,
                           capture_output=True, text=True, timeout=300, check=False)
    assert shown.returncode == 0, shown.stdout[-3000:] + shown.stderr[-3000:]
    for mode, description in modes.items():
        assert f"@pytest.mark.{mode}: {description}" in shown.stdout


def test_a_cpu_selection_probes_only_what_its_cases_ask_about():
    """-m "cpu and quick": the cpu and the runtimes its backends run on are probed; no GPU runtime,
    no web target (no browser) and no qnn."""
    found = _fresh("""
        import json, sys, pytest
        import pytest_hwbench.hardware as hardware
        rc = pytest.main(["bench_suites/test_inference.py", "-m", "cpu and quick", "--co", "-q",
                          "-p", "no:cacheprovider", "--hwbench-models", "bert-tiny"])
        print(json.dumps({"rc": int(rc), "probed": list(hardware.probed_hardware().targets)}))
    """, ROOT)
    assert found["rc"] == 0
    assert "cpu" in found["probed"]
    assert set(found["probed"]) <= {"cpu", "onnxruntime", "openvino"}, found["probed"]


def test_detection_runs_the_probes_asked_for_once():
    found = _fresh("""
        import json
        from pytest_hwbench import hardware
        calls = []
        original = hardware.registered_probes()["cpu"]
        hardware.register_probe("cpu", lambda: calls.append(1) or original())
        first = hardware.detect_hardware(targets=["cpu"])
        again = hardware.detect_hardware(targets=("cpu",))
        try:
            first["cuda"]  # a lookup probes nothing
            unprobed = ""
        except KeyError as exc:
            unprobed = str(exc)
        try:
            hardware.detect_hardware(targets=["cpu", "tpu-9000"])
            error = ""
        except ValueError as exc:
            error = str(exc)
        print(json.dumps({"calls": len(calls), "same": first["cpu"] == again["cpu"],
                          "targets": list(first.targets), "probed": list(hardware.probed_hardware().targets),
                          "cuda": unprobed, "none": first.get("cuda") is None, "error": error}))
    """, ROOT)
    assert found["calls"] == 1 and found["same"]
    assert found["targets"] == ["cpu"]
    assert found["probed"] == ["cpu"] and found["none"]
    assert "'cuda' was not probed" in found["cuda"] and "detect_hardware(targets=['cuda'" in found["cuda"]
    assert "'tpu-9000'" in found["error"] and "known: cpu, cuda" in found["error"]


def test_a_case_is_a_value_that_imports_only_the_vocabulary():
    """Building, hashing and parsing 1,000 cases (every mode, generate's tokens and input lengths
    included) imports no backend, scenario, model or measuring module."""
    found = _fresh("""
        import itertools, json, sys
        from pytest_hwbench.case import BenchCase, parse_case_id
        modes = ("inference", "generate", "train")
        cases = [BenchCase(model, backend, "cpu", precision, batch, mode, None, length)
                 for model, backend, precision, batch, mode, length in itertools.islice(itertools.product(
                     ("bert-tiny", "gpt2-tiny", "vit-tiny"), ("torch", "onnxruntime"), ("fp32", "bf16"),
                     range(1, 100), modes, (None, 64)), 1000)]
        names = dict(models=("bert-tiny", "gpt2-tiny", "vit-tiny"), hardware=("cpu",),
                     backends=("torch", "onnxruntime"), modes=modes)
        parsed = [parse_case_id(case.id, **names) for case in cases]
        print(json.dumps({"n": len(set(cases)), "round_trip": parsed == cases,
                          "generate_tokens": sorted({c.new_tokens for c in cases if c.mode == "generate"}),
                          "modules": sorted(m for m in sys.modules if m.startswith("pytest_hwbench")
                                            or m in ("torch", "numpy", "transformers"))}))
    """, ROOT)
    assert found["n"] == 1000 and found["round_trip"]
    assert found["generate_tokens"] == [32]
    assert found["modules"] == ["pytest_hwbench", "pytest_hwbench._lazy", "pytest_hwbench.case",
                                "pytest_hwbench.vocabulary"]


def test_a_torch_cpu_case_loads_no_other_runtime_and_no_browser_code(tmp_path):
    """The one-case command (`benchmarks/one_case.py`): a torch case on the CPU probes the CPU
    only; OpenVINO, ONNX Runtime and the web package stay unimported, also at the session's end."""
    found = _fresh(f"""
        import json, sys, pytest
        import pytest_hwbench.hardware as hardware
        rc = pytest.main(["bench_suites/test_inference.py", "-m", "cpu", "-q", "-p", "no:cacheprovider",
                          "--hwbench-models", "bert-tiny", "--hwbench-batch-sizes", "1", "--hwbench-backends", "torch",
                          "--hwbench-precisions", "fp32", "--hwbench-min-time", "0", "--hwbench-min-iterations", "2",
                          "--hwbench-noise-retries", "0", "--hwbench-store", {str(tmp_path / "store")!r}])
        print(json.dumps({{"rc": int(rc), "probed": list(hardware.probed_hardware().targets),
                          "loaded": [m for m in ("openvino", "onnxruntime", "pytest_hwbench.web") if m in sys.modules]}}))
    """, ROOT)
    assert found["rc"] == 0
    assert found["probed"] == ["cpu"]
    assert found["loaded"] == []


CONFTEST_BACKEND = """
from pytest_hwbench import Backend, get_backend, register_backend


class Tagged(Backend):
    name = "tagged"
    hardware = ("cpu",)
    precisions = ("fp32",)
    marker_docs = {"tagged_marker": "cases of a conftest's backend"}

    def markers(self, hardware):
        return ("cpu", "tagged_marker")

    def default_precisions(self, hardware, hw):
        return ("fp32",)

    def unavailable(self, hardware, precision, hw):
        return None

    def load(self, spec, hardware, precision, device_index=0):
        return get_backend("torch").load(spec, hardware, precision, device_index)


register_backend(Tagged())
"""


def test_a_backend_that_a_conftest_registers_brings_its_markers(pytester):
    """A backend registered outside the package (here by a conftest) still gets its own markers
    registered at configure, so ``--strict-markers`` accepts them."""
    pytester.makeconftest(CONFTEST_BACKEND)
    pytester.makepyfile(test_tagged="import pytest\n\n\n@pytest.mark.tagged_marker\ndef test_tagged():\n    pass\n")
    result = pytester.runpytest_subprocess("--strict-markers", "-p", "no:cacheprovider", "--markers")
    result.stdout.fnmatch_lines(["@pytest.mark.tagged_marker: cases of a conftest's backend"])
    result = pytester.runpytest_subprocess("--strict-markers", "-p", "no:cacheprovider", "test_tagged.py")
    result.assert_outcomes(passed=1)


#: One measured case, and the options that make it quick.
MEASURED = """
import pytest


@pytest.mark.hwbench(models=["bert-tiny"], hardware=["cpu"], backends=["torch"], batch_sizes=[1], precisions=["fp32"])
def test_case(hwbench_case, hwbench):
    hwbench.measure(hwbench_case)
"""
QUICK = ["--hwbench-min-time", "0", "--hwbench-min-iterations", "2", "--hwbench-noise-retries", "0"]

UNRAISABLE = MEASURED + """
import gc


class Loop:
    def __init__(self):
        self.me = self

    def __del__(self):
        raise RuntimeError("raised by a finalizer in a garbage cycle")


def test_zz_leaves_a_cycle():
    gc.disable()  # the cycle must outlive the session's end, as a cycle made late in a run does
    Loop()
"""


def test_the_sessions_end_still_reports_an_unraisable_from_a_garbage_cycle(tmp_path):
    """The heap is frozen for pytest's first collection at the end of a session that measured a
    case (`state._freeze_gc`): a finalizer's exception in a garbage cycle is still reported,
    and the heap is unfrozen when pytest returns."""
    (tmp_path / "test_cycle.py").write_text(UNRAISABLE)
    code = f"""
import gc, json, pytest
rc = pytest.main(["-q", "-p", "no:cacheprovider", "-p", "no:randomly", *{QUICK!r},
                  "--hwbench-store", {str(tmp_path / "store")!r}, "test_cycle.py"])
gc.enable()
print(json.dumps({{"rc": int(rc), "frozen": gc.get_freeze_count()}}))
"""
    proc = subprocess.run([sys.executable, "-c", code], cwd=tmp_path, capture_output=True, text=True, timeout=300,
                          check=False)
    out = proc.stdout + proc.stderr
    assert proc.returncode == 0, out[-3000:]
    found = json.loads(proc.stdout.strip().splitlines()[-1])
    assert found == {"rc": 0, "frozen": 0}
    assert "2 passed" in out
    assert "PytestUnraisableExceptionWarning" in out and "raised by a finalizer in a garbage cycle" in out, out[-3000:]


HELD_BY_A_MODULE = """
import gc
import os


class HeldByAModule:
    \"\"\"Freed only when the interpreter's shutdown collects this module's globals; its finalizer
    notes whether the heap was frozen then. It keeps the functions it needs: the modules are gone
    by that time.\"\"\"

    def __init__(self, path):
        self.fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_TRUNC)
        self.write, self.close, self.frozen = os.write, os.close, gc.get_freeze_count

    def __del__(self):
        self.write(self.fd, str(self.frozen()).encode())
        self.close(self.fd)


HELD = HeldByAModule(os.path.join(os.path.dirname(os.path.abspath(__file__)), "finalizer.txt"))
"""


def test_a_process_that_measured_still_finalizes_what_its_modules_hold_at_exit(tmp_path):
    """The interpreter's shutdown after a measured case is the usual one: an object held only by
    a module's globals (here ``sitecustomize``'s, which nothing else keeps alive) is finalized,
    with the heap unfrozen. A shutdown made short by a frozen heap or ``os._exit`` would leave it
    unfinalized, and with it a plug-in's or a library's last write."""
    site = tmp_path / "site"
    site.mkdir()
    (site / "sitecustomize.py").write_text(HELD_BY_A_MODULE)  # imported at start by every python
    (tmp_path / "test_it.py").write_text(MEASURED)
    proc = subprocess.run(
        [sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider", "-p", "no:randomly", *QUICK,
         "--hwbench-store", str(tmp_path / "store"), "test_it.py"],
        cwd=tmp_path, capture_output=True, text=True, timeout=300, check=False,
        env={**os.environ, "PYTHONPATH": os.pathsep.join(filter(None, [str(site), os.environ.get("PYTHONPATH")]))})
    out = proc.stdout + proc.stderr
    assert proc.returncode == 0, out[-3000:]
    assert "hwbench: 1 records" in out, out[-3000:]
    assert (site / "finalizer.txt").read_text() == "0"
