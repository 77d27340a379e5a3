"""hwsel reads the table of target and backend facts (`pytest_hwbench.facts`): a target declared
with one row plus its probe is among the hardware hwsel selects among and predicts for.

The fictional target runs in a fresh process (its row is registered as a third party's plug-in
would, at import), so it never leaks into this process's tables.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import textwrap
from pathlib import Path

from pytest_hwbench import facts

ROOT = Path(__file__).resolve().parents[1]

#: A third party's target: one row of facts and one probe, nothing in hwsel.
NPU9_PLUGIN = '''
from pytest_hwbench.facts import BackendFacts, TargetFacts, register_backend_facts, register_target
from pytest_hwbench.hardware import DeviceInfo, TargetInfo, register_probe

register_target(TargetFacts("npu9", "accelerator", "cases that need a fictional NPU-9", torch_module="npu9",
                            fallback_rank=10, default_backend="npu9rt", launch_cost_ms=0.01))
register_backend_facts(BackendFacts("npu9rt", launch_share=0.5, counts_as_hardware=True))
register_probe("npu9", lambda: TargetInfo("npu9", True, "", (DeviceInfo(0, "NPU-9", 4096.0, None, ("fp32",)),),
                                          ("fp32",)))
'''


def _run(code: str, tmp_path: Path) -> dict:
    (tmp_path / "npu9_plugin.py").write_text(NPU9_PLUGIN)
    env = {k: v for k, v in os.environ.items() if not k.startswith(("MLFLOW_TRACKING", "HWSEL_"))}
    env["PYTHONPATH"] = os.pathsep.join([str(tmp_path), str(ROOT), *filter(None, [os.environ.get("PYTHONPATH")])])
    env["XDG_CACHE_HOME"] = str(tmp_path / "cache")
    env["HWBENCH_WEB_PROBE"] = "fresh"
    proc = subprocess.run([sys.executable, "-c", textwrap.dedent(code)], cwd=tmp_path, capture_output=True,
                          text=True, timeout=300, env=env, check=False)
    assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-3000:]
    return json.loads(proc.stdout.strip().splitlines()[-1])  # type: ignore[no-any-return]


def test_hwsel_reads_the_table():
    """hwsel's hardware, default backends, launch floors and specs say what the rows say, the
    built-in rows included."""
    from hwsel import config, features, query, specs

    assert facts.fallback_order() == ("cuda", "rocm", "xpu", "mps", "openvino", "qnn", "cpu", "webgpu", "webnn",
                                      "wasm") == tuple(config.load_config().hardware_names)
    assert {hw: query.default_backend(hw) for hw in facts.target_names()} == {
        "cpu": "torch", "cuda": "torch", "rocm": "torch", "mps": "torch", "xpu": "torch", "openvino": "openvino",
        "onnxruntime": "torch", "qnn": "qai_hub", "wasm": "onnxruntime-web", "webgpu": "onnxruntime-web",
        "webnn": "onnxruntime-web"}
    assert features.launch_floor_ms("webgpu", "torch") == 0.1
    assert features.launch_floor_ms("cpu", "openvino") == facts.launch_cost_ms("cpu") * 0.15
    assert all(specs.knows_device(hw, "any CPU name") for hw in ("cpu", "onnxruntime", "openvino", "wasm"))


def test_a_row_registered_later_is_in_hwsels_next_answer():
    from hwsel import config, features, query, specs

    row = facts.TargetFacts("testcpu9", "cpu", fallback_rank=99, default_backend="onnxruntime",
                            launch_cost_ms=0.5)
    try:
        facts.register_target(row)
        assert "testcpu9" in config.load_config().hardware_names
        assert query.default_backend("testcpu9") == "onnxruntime" and specs.knows_device("testcpu9", "any CPU")
        assert features.launch_floor_ms("testcpu9", "torch") == 0.5
    finally:
        facts.unregister_target("testcpu9")
    assert "testcpu9" not in config.load_config().hardware_names and not specs.knows_device("testcpu9", "any CPU")
    assert query.default_backend("testcpu9") == "torch" and features.launch_floor_ms("testcpu9", "torch") == 0.02


def test_hwsel_lists_a_fictional_target_and_answers_for_it(tmp_path):
    """After the plug-in's import, hwsel's hardware, its default config, `ask`, `predict` (CLI and
    Python) and `select` all know npu9, with a roofline answer on its row's backend."""
    got = _run("""
        import contextlib, io, json
        import npu9_plugin
        from pytest_hwbench import facts
        from hwsel import config, features, query
        from hwsel.cli import main
        from hwsel.performance import predict_performance
        from hwsel.select import select_hardware

        out = io.StringIO()
        with contextlib.redirect_stdout(out):
            code = main(["predict", "--model", "bert-tiny", "--hardware", "npu9", "cpu", "--json"])
        cli = json.loads(out.getvalue())["predictions"]["npu9"]
        py = predict_performance("bert-tiny", hardware="npu9")["npu9"]
        rec = select_hardware("bert-tiny", available_hardware=["npu9", "cpu"])
        print(json.dumps({
            "hardware": list(facts.fallback_order()), "configured": list(config.load_config().hardware_names),
            "asked": [q.hardware for q in query.ask(config.load_config(), "bert-tiny", "npu9")],
            "backend": query.default_backend("npu9"), "launch": features.launch_floor_ms("npu9", "npu9rt"),
            "as_hardware": list(facts.backends_as_hardware()),
            "code": code, "cli": [cli["source"], cli["backend"], cli["latency_ms"] > 0],
            "python": [py.source, py.backend, py.latency_ms == cli["latency_ms"]],
            "select": sorted(rec.all_scores)}))
    """, tmp_path)
    assert got["hardware"] == [*facts.fallback_order(), "npu9"]
    assert got["configured"][-1] == "npu9" and got["asked"] == ["npu9"]
    assert got["backend"] == "npu9rt" and got["launch"] == 0.01 * 0.5
    assert got["as_hardware"] == ["openvino", "npu9rt"]
    assert got["code"] == 0
    assert got["cli"] == ["roofline", "npu9rt", True]
    assert got["python"] == ["roofline", "npu9rt", True]
    assert got["select"] == ["cpu", "npu9"]


def test_hwsel_reads_the_rows_where_pytest_is_not_installed(tmp_path):
    """The table is standard library only: with pytest and pluggy unimportable, hwsel's views read
    the rows and a roofline question is answered."""
    got = _run("""
        import json, sys

        class NoPytest:
            def find_spec(self, name, path=None, target=None):
                if name.split(".")[0] in ("pytest", "_pytest", "pluggy"):
                    raise ImportError(f"{name} is not installed here")

        sys.meta_path.insert(0, NoPytest())
        from hwsel import Predictor, predict_performance
        from hwsel.config import load_config
        from hwsel.query import default_backend
        answer = predict_performance("bert-tiny", "qnn", predictor=Predictor(layers=("roofline",), detect=False))
        print(json.dumps({"hardware": list(load_config().hardware_names), "qnn": [default_backend("qnn"), answer["qnn"].backend,
                                                                answer["qnn"].source]}))
    """, tmp_path)
    assert got == {"hardware": list(facts.fallback_order()), "qnn": ["qai_hub", "qai_hub", "roofline"]}
