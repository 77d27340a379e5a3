"""The REST API under a real uvicorn on 127.0.0.1, called over HTTP with httpx.

Every endpoint is called with a good request and with bad ones; then hypothesis throws 150
generated bodies (valid, half-valid and junk: NaN, huge numbers, wrong types, unknown keys, raw
bytes) at the POST endpoints and checks that none gets a 5xx, and that every error is JSON that
says what was wrong.
"""

from __future__ import annotations

import json
import socket
import threading
import time
import uuid
from collections.abc import Iterator

import httpx
import pandas as pd
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from hwsel import Predictor
from hwsel.resolution import resolve_model
from pytest_hwbench.facts import fallback_order
from pytest_hwbench.record import BenchmarkRecord

uvicorn = pytest.importorskip("uvicorn")
from hwsel.app import create_app  # noqa: E402  (needs fastapi, like uvicorn)


def _records() -> list[BenchmarkRecord]:
    """Real records of two models on cpu and cuda (made-up numbers: the CPU wins at batch 1)."""
    session = uuid.uuid4().hex
    out = []
    for model in ("bert-tiny", "gpt2-tiny"):
        info = resolve_model(model)
        for hardware, base, per_item in (("cpu", 0.5, 0.6), ("cuda", 6.0, 0.01)):
            for batch in (1, 8):
                lat = base + per_item * batch
                out.append(BenchmarkRecord(
                    case_id=f"{model}-{hardware}-b{batch}", session_id=session, status="passed", model=model,
                    family=info.family, model_type=info.model_type, backend="torch", hardware=hardware,
                    device_name=hardware, precision="fp32", mode="inference", batch_size=batch,
                    param_count=info.param_count, flops_per_forward=info.flops_per_item * batch,
                    latency_ms_median=lat, latency_ms_min=lat * 0.9, latency_ms_p95=lat * 1.2,
                    throughput_items_per_s=batch / lat * 1e3, peak_host_rss_mb=500.0))
    return out


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


@pytest.fixture(scope="module")
def base_url(tmp_path_factory: pytest.TempPathFactory) -> Iterator[str]:
    from hwsel.data import snapshot

    path = snapshot(pd.DataFrame([r.to_dict() for r in _records()]), tmp_path_factory.mktemp("rest") / "runs.parquet")
    predictor = Predictor.load(path, tracking_uri=f"sqlite:///{path.parent / 'none.db'}")
    port = _free_port()
    server = uvicorn.Server(uvicorn.Config(create_app(predictor), host="127.0.0.1", port=port, log_level="warning"))
    thread = threading.Thread(target=server.run, daemon=True)
    thread.start()
    deadline = time.monotonic() + 30
    while not server.started:
        assert thread.is_alive() and time.monotonic() < deadline, "uvicorn did not start"
        time.sleep(0.05)
    yield f"http://127.0.0.1:{port}"
    server.should_exit = True
    thread.join(timeout=10)


@pytest.fixture(scope="module")
def client(base_url: str) -> Iterator[httpx.Client]:
    with httpx.Client(base_url=base_url, timeout=60) as c:
        yield c


# --- every endpoint --------------------------------------------------------------------------------

def test_health_and_detect(client: httpx.Client) -> None:
    health = client.get("/health")
    assert health.status_code == 200
    body = health.json()
    assert body["status"] == "healthy" and body["database_connected"] is True
    assert body["available_components"]["measured"] and not body["available_components"]["registered"]
    assert body["prediction_layers"]["measured"]["rows"] == 8
    detect = client.get("/hardware/detect").json()
    assert detect["hardware"]["cpu"] is True and detect["details"]["cpu"]["devices"]


def test_select(client: httpx.Client) -> None:
    r = client.post("/hardware/select", json={"model_name": "bert-tiny", "batch_size": 1,
                                               "available_hardware": ["cpu", "cuda"]})
    assert r.status_code == 200, r.text
    body = r.json()
    assert body["primary_recommendation"] == "cpu" and body["fallback_options"] == ["cuda"]
    assert body["prediction_source"] == "measured" and body["compatible_hardware"] == ["cpu", "cuda"]
    assert body["all_scores"]["cpu"]["predictions"]["latency"] == pytest.approx(1.1)
    assert body["explanation"]
    # the predecessor's spelling and a task profile
    r = client.post("/hardware/select", json={"model": "bert-base-uncased", "model_family": "embedding",
                                               "batch_size": 16, "task_type": "embedding",
                                               "available_hardware": ["cpu", "cuda", "qnn"]})
    assert r.status_code == 200, r.text
    assert r.json()["task_type"] == "embedding" and r.json()["model_name"] == "bert-base"


def test_select_says_tie(client: httpx.Client) -> None:
    """bert-tiny at batch 8: the CPU measured 5.3 ms (4.8-6.4), the GPU 6.1 ms (5.5-7.3): a tie; both
    need 500 MiB and neither measured energy, so the score ranks them."""
    r = client.post("/hardware/select", json={"model_name": "bert-tiny", "batch_size": 8,
                                               "available_hardware": ["cpu", "cuda"]})
    assert r.status_code == 200, r.text
    body = r.json()
    assert body["tie"] == ["cpu", "cuda"] and body["primary_recommendation"] == "cpu"
    assert "memory" in body["tie_rule"] and body["explanation"].startswith("Tie between cpu, cuda")
    decided = client.post("/hardware/select", json={"model_name": "bert-tiny", "batch_size": 1,
                                                     "available_hardware": ["cpu", "cuda"]}).json()
    assert decided["tie"] == [] and decided["primary_recommendation"] == "cpu"
    batch = client.post("/hardware/batch", json={"models": ["bert-tiny"], "batch_size": 8,
                                                 "available_hardware": ["cpu", "cuda"]}).json()
    assert batch["bert-tiny"]["tie"] == ["cpu", "cuda"]


def test_batch(client: httpx.Client) -> None:
    r = client.post("/hardware/batch", json={"models": [{"name": "bert-tiny", "family": "embedding"}, "gpt2-tiny",
                                                        "no-such-model"],
                                             "batch_size": 8, "available_hardware": ["cpu", "cuda"]})
    assert r.status_code == 200, r.text
    body = r.json()
    assert body["bert-tiny"]["primary"] == "cpu" and body["gpt2-tiny"]["prediction_source"] == "measured"
    assert body["no-such-model"]["primary"] is None and "unknown model" in body["no-such-model"]["error"]


def test_map(client: httpx.Client) -> None:
    r = client.post("/hardware/map", json={"model_families": ["embedding", "vision"], "batch_sizes": [1, 32],
                                           "hardware_platforms": ["cpu", "cuda", "mps"]})
    assert r.status_code == 200, r.text
    fam = r.json()["model_families"]["vision"]
    assert fam["model_sizes"]["small"]["inference"]["primary"] in ("cpu", "cuda", "mps")
    assert set(fam["inference"]["batch_sizes"]) == {"1", "32"}


def test_predict(client: httpx.Client) -> None:
    r = client.post("/performance/predict", json={"model_name": "t5-small", "hardware": ["cuda"], "batch_size": 16,
                                                  "precision": "fp16"})
    assert r.status_code == 200, r.text
    cuda = r.json()["predictions"]["cuda"]
    assert cuda["source"] == "roofline" and cuda["interval"][0] < cuda["latency_ms"] < cuda["interval"][1]
    r = client.post("/performance/predict", json={"model_name": "gpt2-tiny", "hardware": "cpu", "batch_size": 8})
    assert r.json()["predictions"]["cpu"]["source"] == "measured"
    r = client.post("/performance/predict", json={"model_name": "bert-base", "sequence_length": 512})
    body = r.json()
    assert r.status_code == 200 and body["sequence_length"] == 512 and set(body["predictions"]) == set(fallback_order())


def test_predict_and_select_carry_device_and_backend(client: httpx.Client) -> None:
    """Issue 10: the question names a device and a backend, and the answer says which it used."""
    from pytest_hwbench.hardware import detect_hardware

    r = client.post("/performance/predict", json={"model_name": "gpt2-tiny", "hardware": "cuda", "batch_size": 8,
                                                  "device": "h100"})
    assert r.status_code == 200, r.text
    body = r.json()
    cuda = body["predictions"]["cuda"]
    assert (cuda["device"], cuda["device_source"], cuda["device_spec"]) == ("h100", "asked", "h100")
    assert cuda["backend"] == "torch" and body["backend"] == "torch" and body["devices"] == {"cuda": "h100"}
    # these records name no device ("cuda"): they answer for any, and the answer says so
    assert cuda["source"] == "measured" and "a device the records do not name" in cuda["detail"]
    r = client.post("/performance/predict", json={"model_name": "gpt2-tiny", "hardware": ["cpu", "cuda"],
                                                  "batch_size": 8, "device": {"cuda": "NVIDIA A100-SXM4-80GB"}})
    assert r.status_code == 200, r.text
    preds = r.json()["predictions"]
    here = detect_hardware()["cpu"].devices[0].name
    assert (preds["cpu"]["device"], preds["cpu"]["device_source"]) == (here, "detected")
    assert preds["cuda"]["device_spec"] == "a100" and preds["cuda"]["backend"] == "torch"
    r = client.post("/performance/predict", json={"model_name": "gpt2-tiny", "hardware": "cpu", "batch_size": 8,
                                                  "backend": "onnxruntime"})
    assert r.json()["predictions"]["cpu"]["backend"] == "onnxruntime" and r.json()["backend"] == "onnxruntime"
    assert r.json()["predictions"]["cpu"]["source"] != "measured"  # only torch was measured
    r = client.post("/hardware/select", json={"model_name": "bert-tiny", "available_hardware": ["cpu", "cuda"],
                                               "device": {"cuda": "h100"}})
    assert r.status_code == 200, r.text
    body = r.json()
    assert body["backend"] == "torch" and body["devices"]["cuda"]["device"] == "h100"
    assert body["all_scores"]["cuda"]["prediction"]["device_spec"] == "h100"
    r = client.post("/performance/matrix", json={"models": ["bert-tiny"], "hardware_platforms": ["cuda"],
                                                 "batch_sizes": [1], "precisions": ["fp32"], "device": "l4"})
    assert r.status_code == 200 and r.json()["devices"]["cuda"]["device_spec"] == "l4"


def test_matrix(client: httpx.Client) -> None:
    r = client.post("/performance/matrix", json={"models": ["bert-tiny"], "hardware_platforms": ["cpu", "cuda"],
                                                 "batch_sizes": [1, 8], "precisions": ["fp32"]})
    assert r.status_code == 200, r.text
    body = r.json()
    assert body["configurations"] == 4 and body["sources"] == {"measured": 4}
    assert body["models"]["bert-tiny"]["predictions"]["cuda"]["8"]["fp32"]["latency_mean"] == pytest.approx(6.08)


def test_distributed(client: httpx.Client) -> None:
    r = client.post("/training/distributed", json={"model_name": "gpt2", "gpu_count": 8, "batch_size": 16,
                                                   "max_memory_gb": 16})
    assert r.status_code == 200, r.text
    body = r.json()
    assert body["distributed_strategy"] == "DDP" and body["global_batch_size"] == 128
    assert body["estimated_memory"]["per_gpu_gb"] < 16
    r = client.post("/training/distributed", json={"model_name": "gpt2", "gpu_count": 2, "batch_size": 64,
                                                   "max_memory_gb": 4})
    body = r.json()
    assert body["distributed_strategy"] == "FSDP" and body["gradient_checkpointing"] is True


def test_analysis(client: httpx.Client) -> None:
    r = client.post("/analysis/model", json={"model_name": "bert-tiny", "batch_sizes": [1, 8],
                                             "hardware_platforms": ["cpu", "cuda"]})
    assert r.status_code == 200, r.text
    body = r.json()
    assert body["inference"]["recommendations"]["1"]["primary"] == "cpu"
    assert body["inference"]["performance"]["8"]["cuda"]["source"] == "measured"
    assert body["training"]["recommendations"]["8"]["source"] in ("roofline", "rules")


@pytest.mark.parametrize(("path", "body", "status", "words"), [
    ("/hardware/select", {"model_name": "bert-tiny", "batch_size": 0}, 422, ["batch_size", "greater than or equal to 1"]),
    ("/hardware/select", {"model_name": "bert-tiny", "available_hardware": ["tpu"]}, 422, ["'tpu'", "accepted"]),
    ("/hardware/select", {"model_name": "bert-tiny", "precision": "fp8"}, 422, ["precision", "fp32"]),
    ("/hardware/select", {"model_name": "bert-bse"}, 404, ["unknown model 'bert-bse'", "bert-base"]),
    ("/hardware/select", {"model_name": "bert-tiny", "colour": "red"}, 422, ["colour", "Extra inputs"]),
    ("/hardware/select", {"model_name": "bert-tiny", "model_family": "vision"}, 422, ["embedding model, not vision"]),
    ("/hardware/select", {"model_name": "bert-tiny", "task_type": "dance"}, 422, ["unknown task 'dance'"]),
    ("/performance/predict", {"model_name": "vit-tiny", "sequence_length": 64}, 422, ["not a token sequence"]),
    ("/performance/predict", {"model_name": "bert-tiny", "hardware": []}, 422, ["no hardware given"]),
    ("/training/distributed", {"model_name": "gpt2", "max_memory_gb": -1}, 422, ["max_memory_gb"]),
    ("/performance/matrix", {"models": ["nope"]}, 404, ["unknown model 'nope'"]),
    ("/hardware/map", {"model_families": ["poetry"]}, 422, ["model_families"]),
    ("/performance/predict", {"model_name": "bert-tiny", "hardware": ["cpu", "cuda"], "device": "h100"}, 422,
     ["several hardware targets", "cuda"]),
    ("/hardware/select", {"model_name": "bert-tiny", "available_hardware": ["cpu"], "device": {"cuda": "h100"}}, 422,
     ["'cuda', which is not among"]),
    ("/performance/predict", {"model_name": "bert-tiny", "device": ""}, 422, ["device"]),
    # a backend neither the facts table nor the records know, a device neither the specs nor the records know
    ("/performance/predict", {"model_name": "bert-tiny", "hardware": "cpu", "backend": "nosuch"}, 422,
     ["backend", "unknown backend 'nosuch'", "torch-compile", "onnxruntime"]),
    ("/hardware/select", {"model_name": "bert-tiny", "available_hardware": ["cuda"], "device": "some other gpu"}, 422,
     ["device", "unknown device 'some other gpu' for cuda", "h100"]),
    # a config with -3 layers: the documented 422 naming the config, its model and the field
    ("/performance/predict", {"config": {"model_type": "llama", "num_hidden_layers": -3, "hidden_size": 64,
                                         "num_attention_heads": 4, "intermediate_size": 128, "vocab_size": 100},
                              "hardware": "cpu"}, 422, ["config", "'llama-custom'", "num_hidden_layers", "-3"]),
    # a llava whose text config holds text configs again: transformers keeps them as plain dicts
    ("/performance/predict", {"config": {"model_type": "llava", "text_config": {"text_config": {"text_config": {}}}},
                              "hardware": "cpu"}, 422,
     ["config_kwargs.text_config.text_config", "LlamaConfig has no sub-config 'text_config'"]),
])
def test_bad_requests_are_4xx_json_naming_the_problem(client: httpx.Client, path: str, body: dict, status: int,
                                                      words: list[str]) -> None:
    r = client.post(path, json=body)
    assert r.status_code == status, r.text
    payload = r.json()
    assert payload["status"] == "error"
    for word in words:
        assert word in payload["message"] or word in json.dumps(payload.get("errors")), payload


def test_unknown_path_and_method_keep_the_error_shape(client: httpx.Client) -> None:
    r = client.get("/hardware/nothing")
    assert r.status_code == 404 and r.json()["status"] == "error"
    r = client.get("/hardware/select")
    assert r.status_code == 405 and r.json()["message"]


def test_malformed_json_and_nan_are_422(client: httpx.Client) -> None:
    r = client.post("/hardware/select", content=b"{not json", headers={"content-type": "application/json"})
    assert r.status_code == 422 and r.json()["status"] == "error"
    r = client.post("/training/distributed", content=b'{"model_name": "gpt2", "max_memory_gb": NaN}',
                    headers={"content-type": "application/json"})
    assert r.status_code == 422 and "max_memory_gb" in r.json()["message"]


# --- fuzz ----------------------------------------------------------------------------------------

_junk = st.one_of(
    st.none(), st.booleans(), st.integers(-(10**20), 10**20), st.floats(allow_nan=True, allow_infinity=True),
    st.text(max_size=20), st.lists(st.integers(-3, 100), max_size=4), st.dictionaries(st.text(max_size=4),
                                                                                        st.integers(), max_size=2))
# Well-typed values (in range or not: unknown names, batch sizes at the bounds) reach the handlers;
# junk exercises validation. A request is either all well-typed or may hold junk anywhere.
_T = {
    "model": st.sampled_from(["bert-tiny", "gpt2-tiny", "bert-base-uncased", "vit-tiny", "whisper-micro", "gpt2",
                              "nope", "x" * 200]),
    "family": st.sampled_from(["embedding", "text_generation", "vision", "audio", "multimodal"]),
    "hw": st.sampled_from([*fallback_order(), "tpu"]),
    "batch": st.integers(1, 65536) | st.sampled_from([1, 8, 64]),
    "precision": st.sampled_from(["fp32", "fp16", "bf16", "int8"]),
    "mode": st.sampled_from(["inference", "training"]),
    "seq": st.integers(1, 1 << 17) | st.sampled_from([64, 512]),
    "task": st.sampled_from(["classification", "generation", "embedding", "fine_tuning", "training", "dance"]),
    "backend": st.sampled_from(["torch", "onnxruntime", "openvino"]),
    "device": st.sampled_from(["h100", "NVIDIA H100 80GB HBM3", "t4", "some gpu", "AMD EPYC"])
    | st.dictionaries(st.sampled_from([*fallback_order(), "tpu"]), st.sampled_from(["h100", "a100", "mi300x"]), max_size=2),
    "gpus": st.integers(1, 4096),
    "memory": st.floats(0.01, 1e5) | st.sampled_from([0.5, 16.0, 80.0]),
}


def _requests(v: dict[str, st.SearchStrategy], extra: st.SearchStrategy) -> st.SearchStrategy:
    hw_list = st.lists(v["hw"], min_size=1, max_size=4)

    def body(**fields: st.SearchStrategy) -> st.SearchStrategy:
        return st.tuples(st.fixed_dictionaries({}, optional=fields), extra).map(lambda t: {**t[0], **t[1]})

    return st.one_of(
        st.tuples(st.just("/hardware/select"), body(
            model_name=v["model"], model_family=v["family"], batch_size=v["batch"], sequence_length=v["seq"],
            mode=v["mode"], precision=v["precision"], available_hardware=hw_list, task_type=v["task"],
            backend=v["backend"], device=v["device"])),
        st.tuples(st.just("/hardware/batch"), body(
            models=st.lists(v["model"] | st.fixed_dictionaries({"name": v["model"]}, optional={"family": v["family"]}),
                            min_size=1, max_size=3),
            batch_size=v["batch"], mode=v["mode"], precision=v["precision"], available_hardware=hw_list)),
        st.tuples(st.just("/hardware/map"), body(
            model_families=st.lists(v["family"], min_size=1, max_size=2), batch_sizes=st.lists(v["batch"], min_size=1,
                                                                                            max_size=3),
            hardware_platforms=hw_list, modes=st.lists(v["mode"], min_size=1, max_size=2), precision=v["precision"])),
        st.tuples(st.just("/performance/predict"), body(
            model_name=v["model"], hardware=hw_list | v["hw"], batch_size=v["batch"], sequence_length=v["seq"],
            mode=v["mode"], precision=v["precision"], backend=v["backend"], device=v["device"])),
        st.tuples(st.just("/performance/matrix"), body(
            models=st.lists(v["model"], min_size=1, max_size=2), hardware_platforms=hw_list,
            batch_sizes=st.lists(v["batch"], min_size=1, max_size=4),
            precisions=st.lists(v["precision"], min_size=1, max_size=3), mode=v["mode"])),
        st.tuples(st.just("/training/distributed"), body(
            model_name=v["model"], gpu_count=v["gpus"], batch_size=v["batch"], precision=v["precision"],
            max_memory_gb=v["memory"])),
        st.tuples(st.just("/analysis/model"), body(
            model_name=v["model"], batch_sizes=st.lists(v["batch"], min_size=1, max_size=3),
            hardware_platforms=hw_list, modes=st.lists(v["mode"], min_size=1, max_size=2), precision=v["precision"])),
    )


_REQUESTS = st.one_of(
    _requests(_T, st.just({})),
    _requests({k: s | _junk for k, s in _T.items()},
              st.dictionaries(st.sampled_from(["colour", "gpu_count", "distributed"]), _junk, max_size=1)),
    st.tuples(st.sampled_from(["/hardware/select", "/performance/predict"]), st.binary(max_size=40)),
)


@settings(max_examples=150, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(request=_REQUESTS)
def test_fuzzed_requests_never_get_a_5xx(client: httpx.Client, request: tuple[str, object]) -> None:
    path, body = request
    # json.dumps (allow_nan) so that NaN and Infinity reach the server as JSON5-ish literals
    content = body if isinstance(body, bytes) else json.dumps(body).encode()
    r = client.post(path, content=content, headers={"content-type": "application/json"})
    assert r.status_code < 500, (path, body, r.text)
    payload = r.json()
    if r.status_code >= 400:
        assert payload["status"] == "error" and payload["message"], payload
    else:
        assert r.status_code == 200
