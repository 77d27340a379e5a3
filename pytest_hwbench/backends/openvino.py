"""OpenVINO backend: CPU, GPU and NPU through OpenVINO's own runtime, on the shared ONNX export.

Every compile pins PERFORMANCE_HINT=LATENCY and INFERENCE_PRECISION_HINT (else OpenVINO runs bf16
on CPUs with avx512_bf16, FACTS.md): the precision reported is that hint, cross-checked with the
runtime graph's compute layers. int8 is nncf post-training quantization."""

from __future__ import annotations

import importlib.util
from collections import Counter
from pathlib import Path
from typing import Any

from ..errors import PrecisionMismatch, UnsupportedCase
from ..hardware import DeviceInfo, HardwareInfo
from ..models import ModelSpec
from . import _torch
from ._onnx_export import ExportedModel, cached_variant, export_onnx, numpy_feeds, summarize_error
from .base import Backend, FedModel, LoadedModel, register_backend

#: our hardware name -> OpenVINO device family.
_DEVICES = {"cpu": "CPU", "gpu": "GPU", "npu": "NPU"}
#: our precision -> INFERENCE_PRECISION_HINT. int8 layers run int8; the rest is pinned to f32
#: (as torch's and onnxruntime's dynamic int8 keep fp32 around their int8 MatMuls).
_HINTS = {"fp32": "f32", "bf16": "bf16", "fp16": "f16", "int8": "f32"}
#: OpenVINO element types -> our names.
_TYPES = {"f32": "fp32", "float32": "fp32", "bf16": "bf16", "bfloat16": "bf16", "f16": "fp16", "float16": "fp16",
          "i8": "int8", "u8": "int8", "int8": "int8", "uint8": "int8"}
#: Runtime-graph layer types that carry the model's compute (weights).
_COMPUTE_LAYERS = frozenset({"FullyConnected", "MatMul", "Convolution", "GroupConvolution", "Deconvolution",
                             "GroupDeconvolution"})
#: Share of compute layers that must run int8 before we call a compiled model int8.
INT8_MIN_COVERAGE = 0.5
#: Calibration items for nncf (batch 1 each, seeds 0..N-1 of the zoo's input factory).
CALIBRATION_ITEMS = 4
NNCF_MISSING = "openvino int8 needs nncf (pip install nncf)"


def _type_name(name: str) -> str:
    return _TYPES.get(name.lower(), name.lower())


def _ov_devices(hardware: str, hw: HardwareInfo) -> list[DeviceInfo]:
    """OpenVINO devices of one family; detection names them ``"GPU.1: Intel(R) Arc..."``."""
    family = _DEVICES[hardware]
    return [d for d in hw["openvino"].devices if d.name.split(":")[0].split(".")[0] == family]


def runtime_precisions(compiled: Any) -> dict[str, int]:
    """Compute layers of a compiled model by the precision they run at (from the runtime graph)."""
    counts: Counter[str] = Counter()
    try:
        ops = compiled.get_runtime_model().get_ops()
    except RuntimeError:  # some plugins do not expose a runtime graph
        return {}
    for op in ops:
        info = op.get_rt_info()
        try:
            layer = info["layerType"].astype(str)
            precision = info["runtimePrecision"].astype(str)
        except (KeyError, RuntimeError, AttributeError):
            continue
        if layer in _COMPUTE_LAYERS:
            counts[_type_name(precision)] += 1
    return dict(sorted(counts.items()))


def _read_back(compiled: Any, precision: str) -> tuple[str, str, dict[str, int]]:
    """(precision that runs, INFERENCE_PRECISION_HINT as compiled, compute layers by precision)."""
    raw = compiled.get_property("INFERENCE_PRECISION_HINT")
    raw_name = str(raw.get_type_name() if hasattr(raw, "get_type_name") else raw)
    hint = _type_name(raw_name)
    layers = runtime_precisions(compiled)
    total = sum(layers.values())
    if precision == "int8":
        int8 = layers.get("int8", 0)
        ran = "int8" if total and int8 / total >= INT8_MIN_COVERAGE else f"{hint} ({int8}/{total} int8 layers)"
        return ran, raw_name, layers
    if total:
        # The hint is what the plugin promises; the runtime graph is what it built. Both must agree.
        top = max(layers, key=lambda k: layers[k])
        if layers[top] / total >= 0.5 and top != hint:
            return f"{top} (hint {hint})", raw_name, layers
    return hint, raw_name, layers


class OpenVinoBackend(Backend):
    """OpenVINO runtime on its CPU, GPU and NPU plugins."""

    distributions = ("openvino",)

    name = "openvino"
    hardware: tuple[str, ...] = ("cpu", "gpu", "npu")
    precisions: tuple[str, ...] = ("fp32", "bf16", "fp16", "int8")

    def markers(self, hardware: str) -> tuple[str, ...]:
        return ("cpu", "openvino") if hardware == "cpu" else ("openvino",)

    def detects(self, hardware: str) -> tuple[str, ...]:
        return ("openvino",)  # its hardware names OpenVINO devices, found by the openvino probe

    def default_precisions(self, hardware: str, hw: HardwareInfo) -> tuple[str, ...]:
        target = hw["openvino"]
        devices = _ov_devices(hardware, hw) if target.available else []
        if not devices:
            return ("fp32",)
        # What the device says it optimizes for (OPTIMIZATION_CAPABILITIES); NPUs may lack FP32.
        return tuple(p for p in self.precisions if p in devices[0].precisions) or ("fp32",)

    def unavailable(self, hardware: str, precision: str, hw: HardwareInfo) -> str | None:
        if hardware not in self.hardware:
            return f"openvino: no hardware target {hardware!r} (known: {', '.join(self.hardware)})"
        target = hw["openvino"]
        if not target.available:
            return f"openvino: {target.reason}"
        devices = _ov_devices(hardware, hw)
        if not devices:
            names = ", ".join(d.name for d in target.devices) or "none"
            return f"openvino: no {_DEVICES[hardware]} device (available: {names})"
        if precision not in self.precisions:
            return f"{precision}: openvino runs {', '.join(self.precisions)}"
        device = devices[0]
        if precision not in device.precisions:
            return (f"{precision} unsupported on OpenVINO {device.name} (OPTIMIZATION_CAPABILITIES give "
                    f"{', '.join(device.precisions) or 'nothing'})")
        if precision == "int8" and importlib.util.find_spec("nncf") is None:
            return NNCF_MISSING
        return None

    def load(self, spec: ModelSpec, hardware: str, precision: str, device_index: int = 0) -> LoadedModel:
        import openvino as ov
        import torch

        from ..hardware import detect_hardware

        devices = _ov_devices(hardware, detect_hardware(["openvino"]))
        if device_index >= len(devices):
            raise UnsupportedCase(f"openvino: no {_DEVICES[hardware]} device with index {device_index}")
        device = devices[device_index].name.split(":")[0]
        exported = export_onnx(spec)
        core = ov.Core()
        path = self._quantized(exported, spec, core) if precision == "int8" else exported.path
        model = core.read_model(str(path))
        threads = torch.get_num_threads()
        config: dict[str, Any] = {"PERFORMANCE_HINT": "LATENCY", "INFERENCE_PRECISION_HINT": _HINTS[precision]}
        if hardware == "cpu":
            # Same thread count as torch, so CPU numbers compare like with like.
            config["INFERENCE_NUM_THREADS"] = threads
        try:
            compiled = core.compile_model(model, device, config)
        except RuntimeError as exc:
            raise UnsupportedCase(f"{precision}: OpenVINO {device} did not compile {spec.name}: "
                                  f"{summarize_error(exc)}") from exc
        ran, hint, layers = _read_back(compiled, precision)
        if ran != precision:
            raise PrecisionMismatch(f"{spec.name}: asked OpenVINO {device} for {precision}, it compiled {ran} "
                                    f"(compute layers by precision: {layers})")
        if hardware == "cpu":
            device_name = _torch.device_name("cpu")
            threads = int(compiled.get_property("INFERENCE_NUM_THREADS")) or threads
        else:
            device_name = str(core.get_property(device, "FULL_DEVICE_NAME"))
        details = {"openvino_device": device, "exporter": exported.exporter, "opset": exported.opset,
                   "openvino_version": ov.__version__, "inference_precision_hint": hint,
                   **{f"layers_{k}": v for k, v in layers.items()}}
        # Timed by the wall clock (the default timer): infer() is synchronous.
        return FedModel(precision=ran, device_name=device_name, device_kind=hardware, device_index=device_index,
                        threads=threads if hardware == "cpu" else None, details=details,
                        feed=_preparer(compiled, exported.input_names, exported.output_names))

    def _quantized(self, exported: ExportedModel, spec: ModelSpec, core: Any) -> Path:
        """The nncf-quantized OpenVINO IR of `exported`, built once and cached beside it."""
        try:
            import nncf
        except ImportError:
            raise UnsupportedCase(NNCF_MISSING) from None
        import openvino as ov

        def build(directory: Path) -> str:
            model = core.read_model(str(exported.path))
            names = [_port_name(i, exported.input_names) for i in model.inputs]
            batches = (spec.make_inputs(1, seed=seed) for seed in range(CALIBRATION_ITEMS))
            items = [{n: inputs[n].numpy() for n in names} for inputs in batches]
            # Transformers keep their softmax/layer-norm math in float (nncf's TRANSFORMER preset).
            model_type = None if spec.build_config().model_type == "resnet" else nncf.ModelType.TRANSFORMER
            quantized = nncf.quantize(model, nncf.Dataset(items), subset_size=len(items), model_type=model_type)
            # compress_to_fp16=False: the float weights left around the int8 layers stay fp32.
            ov.save_model(quantized, str(directory / "model.xml"), compress_to_fp16=False)
            return "model.xml"

        return cached_variant(exported, "ov-int8", build, f"int8: nncf.quantize failed on {spec.name}")


def _port_name(port: Any, wanted: tuple[str, ...]) -> str:
    # The ONNX frontend gives a port every name its tensor has (GPT-2's input_ids is also
    # "/model/transformer/Reshape_output_0"): pick the graph's input/output name.
    names = port.get_names()
    return next((n for n in wanted if n in names), port.get_any_name())


def _preparer(compiled: Any, input_names: tuple[str, ...], output_names: tuple[str, ...]) -> Any:
    import openvino as ov

    inputs = {_port_name(i, input_names): i.get_element_type().to_dtype() for i in compiled.inputs}
    outputs = [(_port_name(o, output_names), o) for o in compiled.outputs]
    request = compiled.create_infer_request()

    def prepare(batch: dict[str, Any]) -> Any:
        arrays = numpy_feeds(batch, inputs, "OpenVINO model")
        tensors = {n: ov.Tensor(a, shared_memory=True) for n, a in arrays.items()}

        def call() -> dict[str, Any]:
            # share_outputs: views of the request's buffers, valid until the next call (no copy
            # in the timed loop); copy them to keep them.
            result = request.infer(tensors, share_inputs=True, share_outputs=True)
            return {n: result[port] for n, port in outputs}

        return call

    return prepare


BACKEND = register_backend(OpenVinoBackend())

__all__ = ["BACKEND", "NNCF_MISSING", "OpenVinoBackend", "runtime_precisions"]
