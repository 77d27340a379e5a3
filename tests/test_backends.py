"""Backends on real tiny zoo models: outputs match torch eager fp32, precision is read back.

Every check loads once and runs batch 1 and batch 4 from that load (the runner's contract).
The reference is torch eager fp32 on the same weights: exports come from
`EXPORT_SEED`, and the torch backend builds from the same seed here.
"""

from __future__ import annotations

import os
import subprocess
import sys
from typing import Any

import pytest

from pytest_hwbench.backends._onnx_export import EXPORT_SEED, export_onnx
from pytest_hwbench.backends.base import get_backend
from pytest_hwbench.case import BenchCase
from pytest_hwbench.errors import UnsupportedCase
from pytest_hwbench.hardware import detect_hardware
from pytest_hwbench.models import MODELS

torch = pytest.importorskip("torch")
np = pytest.importorskip("numpy")

TINY = sorted(name for name, spec in MODELS.items() if spec.tier == "quick")
BATCHES = (1, 4)
#: Largest |output - reference| allowed, relative to the largest |reference| of that output.
TOLERANCE = {"fp32": 1e-4, "bf16": 5e-2, "fp16": 5e-2, "int8": 1.5e-1}


@pytest.fixture(scope="module", autouse=True)
def _export_cache(tmp_path_factory: pytest.TempPathFactory) -> Any:
    """Exports of this module go to a fresh cache, so a stale user cache cannot hide a bug."""
    with pytest.MonkeyPatch.context() as mp:
        mp.setenv("HWBENCH_CACHE_DIR", str(tmp_path_factory.mktemp("hwbench-cache")))
        yield


@pytest.fixture(scope="module")
def references() -> dict[str, Any]:
    return {}


def _reference(references: dict[str, Any], name: str) -> Any:
    if name not in references:
        references[name] = MODELS[name].build_model("cpu", seed=EXPORT_SEED)
    return references[name]


def _as_numpy(value: Any) -> Any:
    if isinstance(value, torch.Tensor):
        return value.detach().float().cpu().numpy()
    return np.asarray(value, dtype=np.float32)


def _check(backend: str, name: str, precision: str, references: dict[str, Any],
           tolerance: float | None = None) -> Any:
    """Load once; at batch 1 and 4 compare every output with torch eager fp32; return the load."""
    tolerance = TOLERANCE[precision] if tolerance is None else tolerance
    b = get_backend(backend)
    # The case's own check: the backend's reasons and the model's known gaps on it.
    reason = BenchCase(name, backend, "cpu", precision, 1).unavailable(detect_hardware())
    if reason:
        pytest.skip(reason)
    spec = MODELS[name]
    reference = _reference(references, name)
    try:
        with torch.random.fork_rng(devices=[]):
            torch.manual_seed(EXPORT_SEED)  # the torch backend builds the same weights as the export
            loaded = b.load(spec, "cpu", precision)
    except UnsupportedCase as exc:
        pytest.skip(str(exc))
    assert loaded.precision == precision
    assert loaded.threads == torch.get_num_threads()
    for batch in BATCHES:
        inputs = spec.make_inputs(batch, seed=batch)
        out = loaded.prepare(inputs)()
        with torch.inference_mode():
            expected = reference(**inputs)
        names = [k for k, v in expected.items() if isinstance(v, torch.Tensor)]
        compared = 0
        for key in names:
            if key not in out:
                continue
            got, want = _as_numpy(out[key]), _as_numpy(expected[key])
            assert got.shape == want.shape, f"{backend} {name} {key} b{batch}: shape {got.shape} != {want.shape}"
            err = float(np.abs(got - want).max() / max(float(np.abs(want).max()), 1e-6))
            assert err <= tolerance, f"{backend} {precision} {name} {key} b{batch}: rel err {err:.2e}"
            compared += 1
        assert compared, f"{backend} {name}: no output in common with torch ({sorted(out)} vs {names})"
    return loaded


# --- torch eager (the reference backend itself) -----------------------------------------------

@pytest.mark.parametrize("precision", ["fp32", "bf16", "int8"])
@pytest.mark.parametrize("name", ["bert-tiny", "resnet-tiny"])
def test_torch(name: str, precision: str, references: dict[str, Any]) -> None:
    _check("torch", name, precision, references)


# --- onnxruntime ------------------------------------------------------------------------------

@pytest.mark.parametrize("name", TINY)
def test_onnxruntime_fp32(name: str, references: dict[str, Any]) -> None:
    pytest.importorskip("onnxruntime")
    loaded = _check("onnxruntime", name, "fp32", references)
    assert loaded.details["provider"] == "CPUExecutionProvider"
    assert loaded.details["weights_fp32"] == 1.0


@pytest.mark.parametrize("name", ["bert-tiny", "resnet-tiny"])
def test_onnxruntime_int8(name: str, references: dict[str, Any]) -> None:
    pytest.importorskip("onnxruntime")
    onnx = pytest.importorskip("onnx")
    loaded = _check("onnxruntime", name, "int8", references)
    ops = {n.op_type for n in onnx.load(loaded.details["onnx_file"]).graph.node}
    assert ops & {"MatMulInteger", "ConvInteger"}, ops
    assert "DynamicQuantizeLinear" in ops


def test_onnxruntime_fp16_on_cpu_is_a_skip_with_reason() -> None:
    pytest.importorskip("onnxruntime")
    hw = detect_hardware()
    backend = get_backend("onnxruntime")
    assert "fp16" not in backend.default_precisions("cpu", hw)
    if "fp16" not in hw["cpu"].precisions:
        reason = backend.unavailable("cpu", "fp16", hw)
        assert reason and "fp16" in reason


def test_export_is_cached_and_shared() -> None:
    pytest.importorskip("onnx")
    spec = MODELS["bert-tiny"]
    first = export_onnx(spec)
    mtime = first.path.stat().st_mtime_ns
    again = export_onnx(spec)
    assert again == first and again.path.stat().st_mtime_ns == mtime
    assert os.environ["HWBENCH_CACHE_DIR"] in str(first.path)
    assert first.input_names == ("input_ids", "attention_mask")


@pytest.mark.e2e
def test_dynamo_exporter_fallback(monkeypatch: pytest.MonkeyPatch, references: dict[str, Any]) -> None:
    """The fallback exporter alone: a model it handles matches torch, one it cannot is a skip."""
    pytest.importorskip("onnxscript")
    ort = pytest.importorskip("onnxruntime")
    from pytest_hwbench.backends import _onnx_export

    monkeypatch.setattr(_onnx_export, "EXPORTERS", (("dynamo", _onnx_export._export_dynamo),))
    exported = export_onnx(MODELS["bert-tiny"])
    assert exported.exporter == "dynamo"
    session = ort.InferenceSession(str(exported.path), providers=["CPUExecutionProvider"])
    for batch in BATCHES:
        inputs = MODELS["bert-tiny"].make_inputs(batch, seed=batch)
        got = session.run(["last_hidden_state"], {k: v.numpy() for k, v in inputs.items()})[0]
        with torch.inference_mode():
            want = _reference(references, "bert-tiny")(**inputs).last_hidden_state.numpy()
        assert np.abs(got - want).max() <= TOLERANCE["fp32"] * np.abs(want).max()
    try:
        export_onnx(MODELS["t5-tiny"])
    except UnsupportedCase as exc:
        assert str(exc).startswith("t5-tiny: ONNX export failed (dynamo exporter: ")
        with pytest.raises(UnsupportedCase):  # remembered: the process does not try again
            export_onnx(MODELS["t5-tiny"])
    else:
        pytest.skip("the dynamo exporter now handles t5-tiny; pick another model for the failure path")


# --- openvino ---------------------------------------------------------------------------------

@pytest.mark.parametrize(("name", "precision"), [(n, "fp32") for n in TINY] +
                         [("bert-tiny", "bf16"), ("resnet-tiny", "bf16")])
def test_openvino(name: str, precision: str, references: dict[str, Any]) -> None:
    pytest.importorskip("openvino")
    loaded = _check("openvino", name, precision, references)
    hint = {"fp32": "f32", "bf16": "bf16"}[precision]
    assert loaded.details["inference_precision_hint"] == hint
    # Every MatMul/Convolution of the runtime graph runs at the precision asked for.
    layers = {k: v for k, v in loaded.details.items() if k.startswith("layers_")}
    assert set(layers) == {f"layers_{precision}"}, layers


def test_openvino_fp32_is_pinned_where_default_is_bf16() -> None:
    """The FACTS.md trap: OpenVINO's default on an avx512_bf16 CPU is bf16; our fp32 is f32."""
    ov = pytest.importorskip("openvino")
    from pytest_hwbench.backends.openvino import runtime_precisions

    spec = MODELS["bert-tiny"]
    core = ov.Core()
    default = core.compile_model(core.read_model(str(export_onnx(spec).path)), "CPU")
    loaded = get_backend("openvino").load(spec, "cpu", "fp32")
    assert loaded.precision == "fp32"
    assert loaded.details["inference_precision_hint"] == "f32"
    assert set(k for k in loaded.details if k.startswith("layers_")) == {"layers_fp32"}
    if "bf16" in runtime_precisions(default):
        # This CPU is one where the trap is live: the default compile really is bf16.
        assert default.get_property("INFERENCE_PRECISION_HINT").get_type_name() == "bf16"


def test_openvino_int8_needs_nncf_or_runs(references: dict[str, Any]) -> None:
    pytest.importorskip("openvino")
    import importlib.util

    from pytest_hwbench.backends.openvino import NNCF_MISSING

    backend = get_backend("openvino")
    hw = detect_hardware()
    if "int8" not in hw["openvino"].devices[0].precisions:
        pytest.skip("this OpenVINO CPU device has no INT8 capability")
    if importlib.util.find_spec("nncf") is None:
        assert backend.unavailable("cpu", "int8", hw) == NNCF_MISSING
        with pytest.raises(UnsupportedCase, match="nncf"):
            backend.load(MODELS["bert-tiny"], "cpu", "int8")
        return
    # Static int8 (activations too) from four calibration items on random weights: loose.
    loaded = _check("openvino", "bert-tiny", "int8", references, tolerance=0.4)
    assert loaded.details.get("layers_int8", 0) > 0


def test_openvino_markers_and_unknown_hardware() -> None:
    backend = get_backend("openvino")
    assert backend.markers("cpu") == ("cpu", "openvino")
    assert backend.markers("gpu") == ("openvino",)
    assert get_backend("onnxruntime").markers("cuda") == ("cuda",)
    hw = detect_hardware()
    if hw["openvino"].available and not any(d.name.startswith("NPU") for d in hw["openvino"].devices):
        assert "no NPU device" in (backend.unavailable("npu", "fp32", hw) or "")


def test_backend_modules_import_without_runtimes() -> None:
    """With onnxruntime and openvino unimportable, the backends register and say why they skip."""
    code = (
        "import sys\n"
        "sys.modules['onnxruntime'] = None\n"
        "sys.modules['openvino'] = None\n"
        "from pytest_hwbench.backends.base import registered_backends\n"
        "from pytest_hwbench.hardware import detect_hardware\n"
        "b = registered_backends()\n"
        "hw = detect_hardware()\n"
        "print(b['onnxruntime'].unavailable('cpu', 'fp32', hw))\n"
        "print(b['openvino'].unavailable('cpu', 'fp32', hw))\n"
    )
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120)
    assert done.returncode == 0, done.stderr
    ort_reason, ov_reason = done.stdout.strip().splitlines()[-2:]
    assert ort_reason.startswith("onnxruntime: onnxruntime is not installed")
    assert ov_reason.startswith("openvino: openvino is not installed")
