"""hwsel and the web targets (issue 17 item 6): wasm, webgpu and webnn select, predict, map,
matrix, compatibility, CLI and REST; onnxruntime-web records train and answer like any other.

The records are shaped like this machine's onnxruntime-web runs (tests/data/web, FACTS.md): the
WebAssembly provider at CPU speed on the CPU detected here (the device a wasm question defaults to
where a browser is found), WebGPU on SwiftShader two orders of magnitude slower.
"""

from __future__ import annotations

import json
import subprocess
import sys
import uuid
import warnings
from pathlib import Path

import pytest
from _here import cpu_name

from hwsel.config import load_config
from hwsel.query import default_backend
from hwsel.specs import spec_for, wasm_spec
from pytest_hwbench import facts
from pytest_hwbench.record import BenchmarkRecord, SessionInfo

MODELS = ("bert-tiny", "vit-tiny", "gpt2-tiny")
BATCHES = (1, 8, 32)
SESSION = SessionInfo(session_id=uuid.uuid4().hex, started_at="2026-11-24T00:00:00+00:00", host="test")
SWIFTSHADER = "WebGPU google swiftshader (software)"


def _latency(hardware: str, model: str, batch: int) -> float:
    scale = {"bert-tiny": 1.0, "vit-tiny": 0.75, "gpt2-tiny": 1.4}[model]
    if hardware == "wasm":
        return (0.1 + 0.21 * batch) * scale
    if hardware == "webgpu":
        return (60.0 + 50.0 * batch) * scale
    return (0.05 + 0.05 * batch) * scale  # cpu (torch)


def _records() -> list[BenchmarkRecord]:
    from hwsel.query import model_info

    out = []
    for model in MODELS:
        info = model_info(model)
        for hardware, backend, device in (("wasm", "onnxruntime-web", cpu_name()),
                                          ("webgpu", "onnxruntime-web", SWIFTSHADER), ("cpu", "torch", cpu_name())):
            for batch in BATCHES:
                for run, jitter in enumerate((0.98, 1.02)):
                    lat = _latency(hardware, model, batch) * jitter
                    out.append(BenchmarkRecord(
                        case_id=f"{model}-{hardware}-{backend}-fp32-b{batch}", session_id=SESSION.session_id,
                        status="passed", model=model, family=info.family, model_type=info.model_type,
                        backend=backend, hardware=hardware, device_name=device, precision="fp32", mode="inference",
                        batch_size=batch, sequence_length=info.sequence_length, image_size=info.image_size,
                        param_count=info.param_count, flops_per_forward=info.flops_per_item * batch,
                        latency_ms_mean=lat, latency_ms_median=lat, latency_ms_min=lat * 0.9,
                        latency_ms_max=lat * 1.4, latency_ms_p90=lat * 1.1, latency_ms_p95=lat * 1.2,
                        iterations=50, throughput_items_per_s=batch / lat * 1e3,
                        peak_host_rss_mb=500.0 + batch if hardware == "cpu" else None,
                        peak_device_memory_mb=400.0 + 2 * batch if hardware != "cpu" else None, host=f"run{run}",
                        extra={"web_software_adapter": hardware == "webgpu"} if hardware != "cpu" else {}))
    return out


@pytest.fixture(scope="module")
def store(tmp_path_factory: pytest.TempPathFactory) -> Path:
    from pytest_hwbench.sinks import DuckDBSink

    path = tmp_path_factory.mktemp("web") / "hwbench.duckdb"
    sink = DuckDBSink(path)
    sink.open_session(SESSION)
    sink.write(_records())
    sink.close("finished")
    return path


@pytest.fixture(scope="module")
def registry(tmp_path_factory: pytest.TempPathFactory, store: Path) -> str:
    from hwsel.train import train

    root = tmp_path_factory.mktemp("registry")
    uri = f"sqlite:///{root / 'mlflow.db'}"
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        result = train(str(store), tracking_uri=uri, trials=2, seed=0, progress=False, snapshot_dir=root / "snap")
    assert set(result.targets) == {"latency", "throughput", "memory"}
    return uri



def test_web_targets_are_known_and_mean_onnxruntime_web():
    order, web = facts.fallback_order(), facts.target_set("web")
    assert {"wasm", "webgpu", "webnn"} <= set(order) and web == {"wasm", "webgpu", "webnn"}
    assert order.index("cpu") < min(order.index(h) for h in web)  # ties go to native targets
    assert {default_backend(h) for h in web} == {"onnxruntime-web"}
    cfg = load_config()
    assert cfg.precision_support["wasm"] == ("fp32",) and "fp16" in cfg.precision_support["webgpu"]
    assert cfg.rating("vision", "webgpu") == "high" and cfg.rating("multimodal", "wasm") == "low"


def test_specs_say_what_is_known_about_web_devices():
    wasm = spec_for("wasm", "")
    assert wasm.name.startswith("wasm:") and wasm.memory_gb == 4.0 and set(wasm.peak_tflops) == {"fp32"}
    assert wasm.tflops("fp32") < spec_for("cpu", "").tflops("fp32")  # 4 SIMD lanes, half the cores
    assert wasm_spec("Some Other CPU").known is False
    software = spec_for("webgpu", SWIFTSHADER)
    assert software.name == "webgpu-software" and software.kind == "cpu"
    assert spec_for("webgpu", "WebGPU nvidia ampere").name == "webgpu-generic"
    assert spec_for("webnn", "WebNN gpu").known is False


def test_web_targets_are_left_out_of_the_default_selection(empty_cwd):
    from hwsel.select import available_hardware

    assert not set(available_hardware()) & facts.target_set("web")  # even where a browser is detected


def test_select_answers_from_web_records(empty_cwd, store):
    from hwsel import select_hardware

    rec = select_hardware("bert-tiny", batch_size=8, available_hardware=["wasm", "webgpu", "cpu"], source=store)
    scores = dict(rec.all_scores)
    for hw in ("wasm", "webgpu"):
        prediction = scores[hw].prediction
        assert prediction.source == "measured" and prediction.backend == "onnxruntime-web"
        assert prediction.latency_ms == pytest.approx(_latency(hw, "bert-tiny", 8), rel=0.05)
    assert scores["webgpu"].prediction.device == SWIFTSHADER
    assert rec.primary_recommendation == "cpu" and rec.fallback_options[0] == "wasm"
    # "this model in a browser: webgpu or wasm?"
    browser = select_hardware("vit-tiny", available_hardware=["webgpu", "wasm"], source=store)
    assert browser.primary_recommendation == "wasm"


def test_trained_predictors_answer_unmeasured_web_cases(empty_cwd, store, registry):
    from hwsel import predict_performance

    answer = predict_performance("bert-tiny", batch_size=16, hardware=["wasm", "webgpu"], source=store,
                                 tracking_uri=registry)
    by_hw = dict(answer)
    assert by_hw["wasm"].source == "registered" and by_hw["webgpu"].source == "registered"
    assert by_hw["wasm"].latency_ms < by_hw["webgpu"].latency_ms


def test_matrix_and_map_cover_web_targets(empty_cwd, store):
    from hwsel import prediction_matrix, selection_map

    matrix = prediction_matrix(["bert-tiny"], hardware=["wasm", "webgpu", "webnn"], batch_sizes=[1],
                               precisions=["fp32"], source=store)
    cells = matrix["models"]["bert-tiny"]["predictions"]
    assert cells["wasm"]["1"]["fp32"]["source"] == "measured"
    assert cells["webnn"]["1"]["fp32"]["backend"] == "onnxruntime-web"
    mapped = selection_map(families=["vision"], batch_sizes=[1], hardware=["wasm", "webgpu"], modes=["inference"],
                           source=store)
    assert mapped["model_families"]["vision"]["model_sizes"]["small"]["inference"]["primary"] in ("wasm", "webgpu")


def test_cli_select_with_web_hardware(empty_cwd, store, registry):
    done = subprocess.run([str(Path(sys.executable).parent / "hwsel"), "select", "--model", "bert-tiny",
                           "--hardware", "wasm", "webgpu", "cpu", "--json", "--source", str(store),
                           "--tracking-uri", registry], capture_output=True, text=True, timeout=300)
    assert done.returncode == 0, done.stderr
    answer = json.loads(done.stdout)
    assert answer["all_scores"]["wasm"]["prediction"]["source"] == "measured"
    assert answer["all_scores"]["webgpu"]["prediction"]["backend"] == "onnxruntime-web"


def test_rest_select_and_predict_take_web_targets(empty_cwd, store):
    pytest.importorskip("fastapi")
    from fastapi.testclient import TestClient

    from hwsel.app import create_app

    client = TestClient(create_app(source=store))
    reply = client.post("/hardware/select", json={"model_name": "bert-tiny", "batch_size": 8,
                                                   "available_hardware": ["wasm", "webgpu", "cpu"]})
    assert reply.status_code == 200, reply.text
    assert reply.json()["all_scores"]["wasm"]["source"] == "measured"
    reply = client.post("/performance/predict", json={"model_name": "vit-tiny", "hardware": ["webnn", "webgpu"]})
    assert reply.status_code == 200, reply.text
    assert "webnn" in json.dumps(reply.json())
