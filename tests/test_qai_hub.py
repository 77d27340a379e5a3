"""The Qualcomm AI Hub backend without an AI Hub account.

What runs here: the profile translation on recorded profile shapes (tests/data/qai_hub/, made by
qai-hub 0.56's own converter, see make_profiles.py there), skipping and its reasons (a real
pytest run with a stand-in ``qai_hub`` package and no token), the client path against a fake
``qai_hub`` module (jobs, options, caching, errors), and that the API token never reaches a
detail, a record or an error message.
What does not: a real compile or profile job (needs a token and a network).
"""

from __future__ import annotations

import contextlib
import dataclasses
import json
import os
import sys
import types
from pathlib import Path
from typing import Any

import pytest
from _scripts import script_module

from pytest_hwbench.backends import qai_hub as qh
from pytest_hwbench.backends._onnx_export import ExportedModel
from pytest_hwbench.backends.base import get_backend
from pytest_hwbench.case import BenchCase
from pytest_hwbench.errors import UnsupportedCase
from pytest_hwbench.hardware import HardwareInfo, TargetInfo
from pytest_hwbench.models import get_model
from pytest_hwbench.probes.qnn import NO_TOKEN, NOT_INSTALLED, detect_qnn
from pytest_hwbench.result import CaseResult, failed_record
from pytest_hwbench.trackers import Latency, Memory

DATA = Path(__file__).parent / "data" / "qai_hub"
TOKEN = "hwbTok3n-9f8e7d6c5b4a3210-secret"
NO_TOKEN_REASON = "qnn: no Qualcomm AI Hub token: run `qai-hub configure --api_token TOKEN` or set QAI_HUB_API_TOKEN"
NOT_INSTALLED_REASON = "qnn: qai-hub is not installed (pip install 'pytest-hwbench[qnn]')"


def _profile(name: str) -> dict[str, Any]:
    return dict(json.loads((DATA / f"{name}.json").read_text()))


@pytest.fixture(autouse=True)
def _no_credentials(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """No token from the environment or from a real ini file leaks into (or out of) a test."""
    monkeypatch.delenv("QAI_HUB_API_TOKEN", raising=False)
    monkeypatch.setenv("QAIHUB_CLIENT_INI", str(tmp_path / "absent-client.ini"))
    monkeypatch.delenv(qh.DEVICE_ENV, raising=False)


# --- translation of recorded profiles -------------------------------------------------------

def test_profile_with_per_iteration_times_npu_only():
    raw = _profile("bert_tiny_qnn_context_binary_v1_2")
    got = qh.profile_to_measurement(raw, compile_job_id="jc1", profile_job_id="jp1")
    summary = raw["execution_summary"]
    assert got.per_iteration
    assert len(got.times_ms) == len(summary["all_inference_times"]) == 100
    assert got.times_ms[0] == pytest.approx(summary["all_inference_times"][0] / 1e3)  # microseconds -> ms
    assert got.estimated_ms == pytest.approx(0.182)
    assert min(got.times_ms) == pytest.approx(got.estimated_ms)
    assert got.peak_memory_mb == pytest.approx((6.0, 7.0))  # 6291456..7340032 bytes, MiB
    assert got.peak_memory_high_mb == pytest.approx(7.0)
    assert dict(got.layers) == {"NPU": 27, "GPU": 0, "CPU": 0}
    assert got.first_load_ms == pytest.approx(152.31)
    assert got.warm_load_ms == pytest.approx(21.874)
    assert (got.compile_job_id, got.profile_job_id) == ("jc1", "jp1")
    latency = Latency.from_values(got.times_ms)
    assert latency.iterations == 100 and latency.min == pytest.approx(0.182)
    assert got.median_ms == pytest.approx(latency.median)


def test_profile_without_per_iteration_times_counts_fallback_layers():
    got = qh.profile_to_measurement(_profile("mobilenet_tflite_v1_1"))
    assert not got.per_iteration
    assert got.times_ms == (pytest.approx(1.012),)
    assert got.peak_memory_mb == pytest.approx((11.0, 12.0))
    assert dict(got.layers) == {"NPU": 69, "GPU": 2, "CPU": 1}
    assert got.warm_load_ms == pytest.approx(301.117)


def test_version_0_profile_has_one_time_and_no_memory_range():
    got = qh.profile_to_measurement(_profile("legacy_v0"))
    assert got.times_ms == (pytest.approx(3.547),)
    assert got.peak_memory_mb is None  # compile_peak_memory is not the inference peak
    assert dict(got.layers) == {"NPU": 0, "GPU": 0, "CPU": 0}
    assert got.first_load_ms == pytest.approx(512.004) and got.warm_load_ms is None


def test_single_peak_memory_value_becomes_a_point_range():
    raw = _profile("bert_tiny_qnn_context_binary_v1_2")
    raw["execution_summary"]["inference_memory_peak_range"] = None
    got = qh.profile_to_measurement(raw)
    assert got.peak_memory_mb == pytest.approx((7.0, 7.0))


@pytest.mark.parametrize("broken, fragment", [
    ({}, "no execution_summary"),
    ({"execution_summary": {"estimated_inference_time": 0, "all_inference_times": []}}, "all_inference_times"),
    ({"execution_summary": {"estimated_inference_time": None}}, "estimated_inference_time"),
])
def test_profile_without_a_time_is_refused_naming_the_fields(broken, fragment):
    with pytest.raises(ValueError, match=fragment):
        qh.profile_to_measurement(broken)


def test_details_are_flat_and_json_ready():
    got = qh.profile_to_measurement(_profile("mobilenet_tflite_v1_1"), compile_job_id="jc", profile_job_id="jp")
    details = got.details()
    json.dumps(details)
    assert "remote_timings_ms" not in details  # the times travel as a RemoteMeasurement, not in extra
    assert details["qai_hub_layers_gpu"] == 2 and details["qai_hub_layers_cpu"] == 1
    assert details["qai_hub_peak_memory_mb_high"] == pytest.approx(12.0)
    assert all(not isinstance(v, (dict, tuple)) for v in details.values())


def test_recorded_shapes_match_the_installed_client():
    """Rebuild the fixtures with the installed qai-hub's converter: a schema change shows here."""
    pytest.importorskip("qai_hub")
    from qai_hub.client import _profile_pb_to_python_dict

    with script_module(DATA / "make_profiles.py", "make_profiles") as module:
        for name, make in (("bert_tiny_qnn_context_binary_v1_2", module.bert_tiny_qnn_v1_2),
                           ("mobilenet_tflite_v1_1", module.mobilenet_tflite_v1_1), ("legacy_v0", module.legacy_v0)):
            fresh = json.loads(json.dumps(_profile_pb_to_python_dict(make())))
            assert fresh == _profile(name), name


# --- availability -----------------------------------------------------------------------------

def _hw(available: bool, reason: str = "") -> HardwareInfo:
    return HardwareInfo({"qnn": TargetInfo("qnn", available, reason, (), ("fp16", "int8"))})


def test_backend_is_registered_with_the_qnn_marker():
    backend = get_backend("qai_hub")
    assert backend.hardware == ("qnn",)
    assert backend.markers("qnn") == ("qnn",)
    assert set(backend.default_precisions("qnn", _hw(True))) == {"fp16", "int8"}


def test_unavailable_reasons():
    backend = get_backend("qai_hub")
    assert backend.unavailable("qnn", "fp16", _hw(False, NOT_INSTALLED)) == NOT_INSTALLED_REASON
    assert backend.unavailable("qnn", "int8", _hw(False, NO_TOKEN)) == NO_TOKEN_REASON
    assert backend.unavailable("qnn", "fp16", _hw(True)) is None
    assert backend.unavailable("qnn", "int8", _hw(True)) is None
    assert "fp16" in backend.unavailable("qnn", "fp32", _hw(True))
    assert "bf16" in backend.unavailable("qnn", "bf16", _hw(True))
    assert "cpu" in backend.unavailable("cpu", "fp16", _hw(True))


def test_detection_without_a_token_gives_the_configuring_reason(tmp_path, monkeypatch):
    monkeypatch.setitem(sys.modules, "qai_hub", types.SimpleNamespace(__version__="0.56.0"))
    monkeypatch.setenv("HOME", str(tmp_path))  # no ~/.qai_hub/client.ini
    target = detect_qnn()
    assert not target.available
    assert get_backend("qai_hub").unavailable("qnn", "fp16", HardwareInfo({"qnn": target})) == NO_TOKEN_REASON


def test_qnn_cases_skip_with_the_configuring_reason(pytester, tmp_path, monkeypatch):
    """A real run: qai_hub importable (a stand-in package), no token: every qnn case skips."""
    stub = tmp_path / "stub"
    (stub / "qai_hub").mkdir(parents=True)
    (stub / "qai_hub" / "__init__.py").write_text('__version__ = "0.56.0"\n')
    monkeypatch.setenv("PYTHONPATH", os.pathsep.join([str(stub), os.environ.get("PYTHONPATH", "")]))
    monkeypatch.setenv("HOME", str(tmp_path))
    pytester.makepyfile(test_bench="""
def test_bench(hwbench_case, hwbench):
    hwbench.measure(hwbench_case)
""")
    result = pytester.runpytest_subprocess("-m", "qnn", "-rs", "--strict-markers", "--hwbench-no-track",
                                           "--hwbench-models", "bert-tiny", "--hwbench-batch-sizes", "1,2")
    assert result.ret == pytest.ExitCode.OK, result.stdout.str()
    outcomes = result.parseoutcomes()
    assert outcomes.get("skipped") == 4, outcomes  # fp16 and int8, batch 1 and 2
    assert "passed" not in outcomes and "failed" not in outcomes
    result.stdout.fnmatch_lines([f"SKIPPED [[]4[]] test_bench.py: {NO_TOKEN_REASON}"])
    assert TOKEN not in result.stdout.str()


# --- the client path, against a fake qai_hub ----------------------------------------------------

@dataclasses.dataclass
class FakeConfig:
    """Like qai_hub.ClientConfig: a plain dataclass whose repr shows the token."""

    api_token: str
    api_url: str = "https://app.aihub.qualcomm.com"


@dataclasses.dataclass
class FakeDevice:
    name: str = ""
    os: str = ""


@dataclasses.dataclass
class FakeStatus:
    success: bool
    message: str = ""


class FakeJob:
    def __init__(self, job_id: str, ok: bool = True, message: str = "", profile: dict | None = None,
                 device: FakeDevice | None = None) -> None:
        self.job_id, self._ok, self._message, self._profile = job_id, ok, message, profile
        self.device = device
        self.waited_with: int | None = None

    def wait(self, timeout: int | None = None) -> FakeStatus:
        self.waited_with = timeout
        return FakeStatus(self._ok, self._message)

    def get_status(self) -> FakeStatus:
        return FakeStatus(self._ok, self._message)

    def get_target_model(self) -> str:
        return f"target-of-{self.job_id}"

    def download_profile(self) -> dict:
        assert self._profile is not None
        return self._profile


class FakeHub(types.SimpleNamespace):
    """The part of qai_hub the backend uses; records what it was asked."""

    def __init__(self, profile: dict, **behaviour: Any) -> None:
        super().__init__(__version__="0.56.0", Device=FakeDevice, ClientConfig=FakeConfig)
        self.profile, self.behaviour = profile, behaviour
        self.clients: list[Any] = []
        self.compiles: list[dict[str, Any]] = []
        self.profiles: list[dict[str, Any]] = []
        hub = self

        class Client:
            def __init__(self, config: FakeConfig | None = None) -> None:
                self.config = config
                hub.clients.append(self)

            def submit_compile_job(self, model, device, name=None, input_specs=None, options="",
                                   calibration_data=None):
                if "compile_raises" in hub.behaviour:
                    raise hub.behaviour["compile_raises"]
                hub.compiles.append({"model": model, "device": device, "name": name, "input_specs": input_specs,
                                     "options": options, "calibration_data": calibration_data})
                ok, message = hub.behaviour.get("compile_status", (True, ""))
                return FakeJob(f"jcomp{len(hub.compiles)}", ok, message)

            def submit_inference_job(self, model, device, inputs=None, name=None, options="", profile=True):
                hub.profiles.append({"model": model, "device": device, "inputs": inputs, "profile": profile})
                ok, message = hub.behaviour.get("profile_status", (True, ""))
                return FakeJob(f"jprof{len(hub.profiles)}", ok, message, hub.profile,
                               FakeDevice("Samsung Galaxy S24", "14"))

        self.Client = Client


@pytest.fixture
def fake_export(tmp_path, monkeypatch):
    """A stand-in for the cached ONNX export (the real one is tested in test_backends.py)."""
    entry = tmp_path / "onnx" / "bert-tiny-0123456789abcdef"
    entry.mkdir(parents=True)
    (entry / "model.onnx").write_bytes(b"not a real graph")
    exported = ExportedModel(entry / "model.onnx", ("input_ids", "attention_mask"),
                             ("last_hidden_state", "pooler_output"), "legacy", 17, entry.name)
    monkeypatch.setattr(qh, "export_onnx", lambda spec: exported)
    return exported


def _use(monkeypatch: pytest.MonkeyPatch, hub: FakeHub) -> FakeHub:
    monkeypatch.setattr(qh, "_import_hub", lambda: hub)
    return hub


def _load(precision: str = "fp16") -> Any:
    return get_backend("qai_hub").load(get_model("bert-tiny"), "qnn", precision)


def test_prepare_compiles_and_profiles_once_per_shape(monkeypatch, fake_export):
    hub = _use(monkeypatch, FakeHub(_profile("bert_tiny_qnn_context_binary_v1_2")))
    monkeypatch.setenv(qh.DEVICE_ENV, "Snapdragon 8 Elite QRD")
    monkeypatch.setenv(qh.TIMEOUT_ENV, "900")
    spec = get_model("bert-tiny")
    loaded = _load("fp16")
    assert loaded.timer == "remote" and loaded.precision == "fp16" and loaded.device_kind == "qnn"
    assert loaded.device_name == "Snapdragon 8 Elite QRD"
    assert hub.compiles == []  # nothing is submitted before a shape is known

    call = loaded.prepare(spec.make_inputs(1))
    assert len(hub.compiles) == 1 and len(hub.profiles) == 1
    job = hub.compiles[0]
    assert job["model"] == str(fake_export.path)
    assert job["device"].name == "Snapdragon 8 Elite QRD"
    assert job["options"] == qh.COMPILE_OPTIONS["fp16"] + " --truncate_64bit_io"  # token ids are int64
    seq = spec.input_shape()["sequence_length"]
    assert job["input_specs"] == {n: ((1, seq), "int64") for n in fake_export.input_names}
    assert job["calibration_data"] is None
    assert hub.profiles[0]["model"] == "target-of-jcomp1" and hub.profiles[0]["profile"] is True
    assert hub.profiles[0]["inputs"] is None  # AI Hub feeds random inputs when profiling

    expected = qh.profile_to_measurement(_profile("bert_tiny_qnn_context_binary_v1_2"))
    assert loaded.details["qai_hub_compile_job"] == "jcomp1"
    assert loaded.details["qai_hub_profile_job"] == "jprof1"
    assert loaded.details["qai_hub_device"] == "Samsung Galaxy S24 14"
    assert loaded.details["qai_hub_layers_npu"] == 27
    measured = call.measure_remote(None)
    assert measured.timings_ms == expected.times_ms and measured.on_this_host is False
    assert measured.peak_device_memory_mb == expected.peak_memory_high_mb
    # What the runner measures: the profile, reported, not judged by this machine's load
    sample = loaded.measurement(spec.make_inputs(1)).measure(None, contextlib.nullcontext(), True)
    assert sample.latency.values_ms == expected.times_ms and sample.judged is False
    assert sample.memory.peak_device_mb == expected.peak_memory_high_mb and sample.memory.peak_host_rss_mb is None
    with pytest.raises(qh.QaiHubError, match="measure_remote"):
        call()  # a local clock around this would time nothing

    loaded.prepare(spec.make_inputs(1))
    assert len(hub.compiles) == 1  # same shape: cached
    loaded.prepare(spec.make_inputs(2))
    assert len(hub.compiles) == 2
    assert hub.compiles[1]["input_specs"]["input_ids"] == ((2, seq), "int64")
    assert hub.compiles[1]["name"] == "hwbench bert-tiny fp16 b2"
    json.dumps(loaded.details)


def test_int8_compiles_with_calibration_data(monkeypatch, fake_export):
    hub = _use(monkeypatch, FakeHub(_profile("bert_tiny_qnn_context_binary_v1_2")))
    spec = get_model("bert-tiny")
    _load("int8").prepare(spec.make_inputs(2))
    job = hub.compiles[0]
    assert "--quantize_full_type int8" in job["options"]
    assert set(job["calibration_data"]) == set(fake_export.input_names)
    assert [a.shape for a in job["calibration_data"]["input_ids"]] == [(2, spec.input_shape()["sequence_length"])]


def test_default_device(monkeypatch, fake_export):
    _use(monkeypatch, FakeHub(_profile("legacy_v0")))
    assert _load().device_name == qh.DEFAULT_DEVICE


def test_external_weights_upload_as_a_folder(monkeypatch, fake_export):
    hub = _use(monkeypatch, FakeHub(_profile("legacy_v0")))
    (fake_export.directory / "model.onnx.data").write_bytes(b"weights")
    (fake_export.directory / "meta.json").write_text("{}")
    _load().prepare(get_model("bert-tiny").make_inputs(1))
    folder = Path(hub.compiles[0]["model"])
    assert folder.is_dir()
    assert sorted(p.name for p in folder.iterdir()) == ["model.onnx", "model.onnx.data"]


def test_compile_failure_is_an_unsupported_case(monkeypatch, fake_export):
    _use(monkeypatch, FakeHub(_profile("legacy_v0"),
                              compile_status=(False, "Failed to compile: op LayerNorm unsupported on HTP v73")))
    with pytest.raises(UnsupportedCase, match="could not compile bert-tiny.*LayerNorm unsupported"):
        _load().prepare(get_model("bert-tiny").make_inputs(1))


def test_profile_failure_is_an_error(monkeypatch, fake_export):
    _use(monkeypatch, FakeHub(_profile("legacy_v0"), profile_status=(False, "Device ran out of memory")))
    with pytest.raises(qh.QaiHubError, match="profile job jprof1 .*ran out of memory"):
        _load().prepare(get_model("bert-tiny").make_inputs(1))


def test_load_without_qai_hub_is_an_unsupported_case(monkeypatch, fake_export):
    def missing() -> Any:
        raise ImportError("No module named 'qai_hub'")

    monkeypatch.setattr(qh, "_import_hub", missing)
    with pytest.raises(UnsupportedCase, match="qai-hub is not installed"):
        _load()


# --- the token goes nowhere -------------------------------------------------------------------

def _record_of(loaded: Any, batch: int) -> Any:
    spec = get_model("bert-tiny")
    measured = loaded.prepare(spec.make_inputs(batch)).measure_remote(None)  # the profile of that shape
    timings = measured.timings_ms
    result = CaseResult(case=BenchCase("bert-tiny", "qai_hub", "qnn", loaded.precision, batch), spec=spec,
                        precision=loaded.precision, device_name=loaded.device_name, threads=None,
                        latency=Latency.from_values(timings), cold_latency_ms=timings[0], load_time_s=0.0,
                        memory=Memory(None, measured.peak_device_memory_mb), load_cached=False,
                        details=dict(loaded.details))
    return result.to_record("session-1", nodeid="test_bench.py::test_bench[qnn]")


def test_token_from_the_environment_reaches_the_client_and_nothing_else(monkeypatch, fake_export):
    monkeypatch.setenv("QAI_HUB_API_TOKEN", TOKEN)
    hub = _use(monkeypatch, FakeHub(_profile("bert_tiny_qnn_context_binary_v1_2")))
    loaded = _load()
    loaded.prepare(get_model("bert-tiny").make_inputs(1))
    assert hub.clients[0].config.api_token == TOKEN  # qai-hub does not read the variable itself
    record = _record_of(loaded, 1)
    for text in (json.dumps(loaded.details), record.to_json(), json.dumps(record.params(), default=str),
                 repr(record), repr(loaded)):
        assert TOKEN not in text
    assert record.latency_ms_min == pytest.approx(0.182)


def test_client_errors_are_scrubbed(monkeypatch, fake_export):
    monkeypatch.setenv("QAI_HUB_API_TOKEN", TOKEN)
    leak = RuntimeError(f"401 Unauthorized for {FakeConfig(TOKEN)!r}; header Authorization: token {TOKEN}")
    _use(monkeypatch, FakeHub(_profile("legacy_v0"), compile_raises=leak))
    loaded = _load()
    with pytest.raises(qh.QaiHubError) as info:
        loaded.prepare(get_model("bert-tiny").make_inputs(1))
    message = str(info.value)
    assert "submitting the compile job failed: RuntimeError: 401 Unauthorized" in message
    assert TOKEN not in message and "***" in message
    assert info.value.__context__ is None and info.value.__cause__ is None  # the raw error is not chained
    record = failed_record(BenchCase("bert-tiny", "qai_hub", "qnn", "fp16", 1), "session-1", info.value)
    assert TOKEN not in record.to_json()


def test_job_failure_messages_are_scrubbed(monkeypatch, fake_export):
    monkeypatch.setenv("QAI_HUB_API_TOKEN", TOKEN)
    _use(monkeypatch, FakeHub(_profile("legacy_v0"), compile_status=(False, f"bad request, token={TOKEN}")))
    with pytest.raises(UnsupportedCase) as info:
        _load().prepare(get_model("bert-tiny").make_inputs(1))
    assert TOKEN not in str(info.value)


def test_token_from_the_ini_file_is_scrubbed_too(tmp_path, monkeypatch):
    ini = tmp_path / "client.ini"
    ini.write_text(f"[api]\napi_token = {TOKEN}\napi_url = https://app.aihub.qualcomm.com\n")
    monkeypatch.setenv("QAIHUB_CLIENT_INI", str(ini))
    assert qh.known_tokens() == (TOKEN,)
    assert qh.scrub(f"request failed ({TOKEN})") == "request failed (***)"


@pytest.mark.parametrize("text, expected", [
    ("Authorization: token abc123XYZ rejected", "Authorization: token *** rejected"),
    ("{'Authorization': 'token abc123XYZ'}", "{'Authorization': 'token ***'}"),
    ("ClientConfig(api_token='abc123XYZ', api_url='u')", "ClientConfig(api_token='***', api_url='u')"),
    ("api_token = abc123XYZ", "api_token = ***"),
    ("nothing secret here", "nothing secret here"),
])
def test_scrub_redacts_token_shaped_text_without_knowing_the_token(text, expected):
    assert qh.scrub(text, secrets=()) == expected


def test_scrub_replaces_every_known_token_and_ignores_empty_ones():
    assert qh.scrub(f"{TOKEN} and {TOKEN}x", secrets=[TOKEN, "", "  "]) == "*** and ***x"
    assert qh.scrub(ValueError("plain")) == "plain"
