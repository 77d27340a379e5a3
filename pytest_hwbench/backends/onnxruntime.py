"""ONNX Runtime backend: CPU, CUDA and OpenVINO execution providers, and TensorRT as its own
backend, ``onnxruntime-trt`` (it picks kernels itself: its numbers do not share the CUDA label).

One ONNX export per model (`_onnx_export`), with cached int8 (dynamic quantization) and fp16
variants; the precision reported is read back from the graph and the provider options."""

from __future__ import annotations

import importlib.util
import math
from collections import Counter
from pathlib import Path
from typing import Any

from ..errors import PrecisionMismatch, UnsupportedCase
from ..hardware import HardwareInfo
from ..models import ModelSpec
from ..vocabulary import cache_dir
from ._onnx_export import ExportedModel, cached_variant, export_onnx, numpy_feeds, summarize_error
from ._torch import device_name
from .base import Backend, FedModel, LoadedModel, register_backend

#: Share of the MatMul/Conv weights that must be int8 before we call a quantized graph int8.
INT8_MIN_COVERAGE = 0.5

#: ONNX ops that compute with int8 weights, and float ops whose weight initializers we weigh.
_INT8_OPS = frozenset({"MatMulInteger", "ConvInteger", "QLinearMatMul", "QLinearConv", "QGemm", "QAttention",
                       "DynamicQuantizeMatMul", "MatMulIntegerToFloat", "DynamicQuantizeLSTM"})
_FLOAT_OPS = frozenset({"MatMul", "Gemm", "Conv", "ConvTranspose", "Attention", "FusedMatMul", "FusedConv", "LSTM",
                        "GRU"})
#: ONNX TensorProto data types -> our names (FLOAT=1, FLOAT16=10, BFLOAT16=16, INT8=3, UINT8=2).
_ONNX_DTYPES = {1: "fp32", 10: "fp16", 16: "bf16", 3: "int8", 2: "int8"}
#: Session input types -> numpy dtype names.
_INPUT_DTYPES = {"tensor(float)": "float32", "tensor(float16)": "float16", "tensor(double)": "float64",
                 "tensor(int64)": "int64", "tensor(int32)": "int32", "tensor(bool)": "bool"}


def graph_precision(path: str | Path) -> tuple[str, dict[str, float]]:
    """The precision an ONNX graph computes in, from its MatMul/Gemm/Conv weights.

    Returns the precision holding at least half the weight elements (else ``mixed(a,b)``) and
    the share of each precision.
    """
    import onnx

    model = onnx.load(str(path), load_external_data=False)  # dims are enough; skip the weights
    graph = model.graph
    inits = {i.name: i for i in graph.initializer}
    weights: Counter[str] = Counter()
    for node in graph.node:
        if node.op_type not in _INT8_OPS and node.op_type not in _FLOAT_OPS:
            continue
        for name in node.input:
            init = inits.get(name)
            if init is None or len(init.dims) < 2:  # biases, scales and zero points are not weights
                continue
            kind = "int8" if node.op_type in _INT8_OPS else _ONNX_DTYPES.get(init.data_type, str(init.data_type))
            weights[kind] += math.prod(int(d) for d in init.dims)
    if not weights:  # no weighted op found: fall back on every float initializer
        weights.update(_ONNX_DTYPES[i.data_type] for i in graph.initializer if i.data_type in (1, 10, 16))
    total = sum(weights.values()) or 1
    shares = {k: round(v / total, 4) for k, v in sorted(weights.items())}
    top = max(shares, key=lambda k: shares[k], default="fp32")
    if shares.get(top, 1.0) >= 0.5:
        return top, shares
    return "mixed(" + ",".join(sorted(shares)) + ")", shares


def _quantize_int8(exported: ExportedModel, name: str) -> Path:
    from onnxruntime.quantization import QuantType, quantize_dynamic

    def build(directory: Path) -> str:
        # MatMul with constant weights -> MatMulInteger, Conv -> ConvInteger, activations
        # quantized per call (DynamicQuantizeLinear): ORT's dynamic int8, CPU only.
        quantize_dynamic(str(exported.path), str(directory / "model.onnx"), weight_type=QuantType.QInt8,
                         use_external_data_format=exported.path.stat().st_size > 1.8 * 2**30)
        return "model.onnx"

    path = cached_variant(exported, "int8", build, f"int8: onnxruntime quantize_dynamic failed on {name}")
    _, shares = graph_precision(path)
    if shares.get("int8", 0.0) < INT8_MIN_COVERAGE:
        raise UnsupportedCase(
            f"int8: onnxruntime dynamic quantization covers {shares.get('int8', 0.0):.0%} of {name}'s MatMul/Conv "
            f"weights (needs {INT8_MIN_COVERAGE:.0%})"
        )
    return path


def convert_fp16(exported: ExportedModel, name: str) -> Path:
    def build(directory: Path) -> str:
        import onnx
        from onnxruntime.transformers.float16 import convert_float_to_float16

        model = onnx.load(str(exported.path))
        # Inputs and outputs become float16 too: prepare() feeds fp16, as torch's fp16 does.
        model = convert_float_to_float16(model, keep_io_types=False)
        onnx.save(model, str(directory / "model.onnx"),
                  save_as_external_data=exported.path.stat().st_size > 0.9 * 2**30)
        return "model.onnx"

    return cached_variant(exported, "fp16", build, f"fp16: converting {name}'s ONNX graph to float16 failed")


class OnnxRuntimeBackend(Backend):
    """ONNX Runtime with one execution provider per hardware target."""

    distributions = ("onnxruntime",)

    name = "onnxruntime"
    hardware: tuple[str, ...] = ("cpu", "cuda", "openvino")
    precisions: tuple[str, ...] = ("fp32", "fp16", "int8")
    #: hardware -> the execution provider that must run it, and the precisions it runs there.
    providers: dict[str, str] = {"cpu": "CPUExecutionProvider", "cuda": "CUDAExecutionProvider",
                                 "openvino": "OpenVINOExecutionProvider"}
    allowed: dict[str, tuple[str, ...]] = {"cpu": ("fp32", "fp16", "int8"), "cuda": ("fp32", "fp16"),
                                           "openvino": ("fp32",)}

    def detects(self, hardware: str) -> tuple[str, ...]:
        return (hardware, "onnxruntime")  # the onnxruntime probe lists the execution providers

    def default_precisions(self, hardware: str, hw: HardwareInfo) -> tuple[str, ...]:
        if hardware == "cpu":
            # fp16 on the CPU provider is not a native path here: run it only when asked.
            return ("fp32", "int8") if "int8" in hw["cpu"].precisions else ("fp32",)
        return self.allowed[hardware]

    def unavailable(self, hardware: str, precision: str, hw: HardwareInfo) -> str | None:
        if hardware not in self.hardware:
            return f"{self.name}: no hardware target {hardware!r} (known: {', '.join(self.hardware)})"
        target = hw["onnxruntime"]
        if not target.available:
            return f"onnxruntime: {target.reason}"
        if importlib.util.find_spec("onnx") is None:  # the probe found onnxruntime itself
            return "onnxruntime backend needs onnx (pip install onnx, or 'pytest-hwbench[onnx]')"
        provider = self.providers[hardware]
        providers = list(target.details.get("providers", ()))
        if provider not in providers:
            return f"{hardware}: {self.name} {provider} not available (providers: {', '.join(providers) or 'none'})"
        allowed = self.allowed[hardware]
        if precision not in allowed:
            return f"{precision}: {self.name} runs {', '.join(allowed)} on {hardware} ({provider})"
        if hardware == "cpu" and precision == "fp16":
            reason = hw["cpu"].unsupported_precision("fp16")
            if reason:
                return f"fp16: {provider} has no native fp16 path on this CPU ({reason})"
        if precision == "int8" and importlib.util.find_spec("onnxruntime.quantization") is None:
            return "int8: onnxruntime.quantization is missing from this onnxruntime build"
        return None

    # --- loading ------------------------------------------------------------------------------

    def _provider_options(self, hardware: str, precision: str, device_index: int, threads: int) -> list[Any]:
        provider = self.providers[hardware]
        if hardware == "cuda":
            # fp32 means fp32: TF32 tensor-core math is opt-in, as in the torch backend.
            return [(provider, {"device_id": str(device_index), "use_tf32": "0"}), "CPUExecutionProvider"]
        if hardware == "openvino":
            # precision=FP32 makes the provider pin OpenVINO's INFERENCE_PRECISION_HINT to f32;
            # OpenVINO would otherwise pick bf16 on CPUs with avx512_bf16 (FACTS.md).
            return [(provider, {"device_type": "CPU", "precision": "FP32", "num_of_threads": str(threads)}),
                    "CPUExecutionProvider"]
        return [provider]

    def _model_file(self, exported: ExportedModel, spec: ModelSpec, precision: str) -> Path:
        if precision == "int8":
            return _quantize_int8(exported, spec.name)
        if precision == "fp16":
            return convert_fp16(exported, spec.name)
        return exported.path

    def _read_back(self, session: Any, hardware: str, graph: str) -> str:
        """The precision the session runs: the graph's, unless provider options say otherwise."""
        options = session.get_provider_options().get(self.providers[hardware], {})
        if hardware == "cuda" and graph == "fp32" and str(options.get("use_tf32", "0")) not in ("0", "False"):
            return "tf32"
        if hardware == "openvino" and str(options.get("precision", "FP32")).upper() != "FP32":
            return str(options["precision"]).lower()
        return graph

    def load(self, spec: ModelSpec, hardware: str, precision: str, device_index: int = 0) -> LoadedModel:
        import onnxruntime as ort
        import torch

        exported = export_onnx(spec)
        path = self._model_file(exported, spec, precision)
        graph, shares = graph_precision(path)
        threads = torch.get_num_threads()
        options = ort.SessionOptions()
        # Same thread count as torch, so CPU numbers compare like with like.
        options.intra_op_num_threads = threads
        options.inter_op_num_threads = 1
        options.execution_mode = ort.ExecutionMode.ORT_SEQUENTIAL
        options.graph_optimization_level = ort.GraphOptimizationLevel.ORT_ENABLE_ALL
        options.log_severity_level = 3
        provider = self.providers[hardware]
        try:
            session = ort.InferenceSession(str(path), options,
                                           providers=self._provider_options(hardware, precision, device_index, threads))
        except Exception as exc:
            text = str(exc)
            if "NOT_IMPLEMENTED" in text or "Could not find an implementation" in text:
                raise UnsupportedCase(f"{precision}: {provider} cannot run {spec.name}: {summarize_error(exc)}") from exc
            raise
        used = session.get_providers()
        if not used or used[0] != provider:
            # ORT falls back to the CPU provider silently when e.g. CUDA libraries fail to load.
            raise UnsupportedCase(f"{self.name}: {provider} did not load (session runs on {', '.join(used)})")
        ran = self._read_back(session, hardware, graph)
        if ran != precision:
            raise PrecisionMismatch(f"{spec.name}: asked {self.name} for {precision}, the session runs {ran} "
                                    f"(weights by precision: {shares})")
        kind = "cuda" if hardware == "cuda" else "cpu"
        details = {"provider": used[0], "exporter": exported.exporter, "opset": exported.opset, "onnx_file": str(path),
                   "onnxruntime_version": ort.__version__, **{f"weights_{k}": v for k, v in shares.items()}}
        # Timed by the wall clock: session.run returns after the device finished (outputs copied or bound).
        return FedModel(precision=ran, device_name=device_name(kind, device_index), device_kind=kind,
                        device_index=device_index, threads=threads if kind == "cpu" else None, details=details,
                        feed=_preparer(session, hardware, device_index))


def _preparer(session: Any, hardware: str, device_index: int) -> Any:
    """The `prepare` of a session: inputs to feeds (bound on the GPU for cuda), and the call."""
    wanted = {i.name: _INPUT_DTYPES.get(i.type) for i in session.get_inputs()}
    outputs = [o.name for o in session.get_outputs()]

    def prepare(inputs: dict[str, Any]) -> Any:
        feeds = numpy_feeds(inputs, wanted, "onnxruntime session")
        if hardware != "cuda":
            return lambda: dict(zip(outputs, session.run(None, feeds), strict=True))
        import onnxruntime as ort

        # Inputs copied to the GPU once; outputs stay there: the loop times the model only.
        binding = session.io_binding()
        for name, array in feeds.items():
            binding.bind_ortvalue_input(name, ort.OrtValue.ortvalue_from_numpy(array, "cuda", device_index))
        for name in outputs:
            binding.bind_output(name, "cuda", device_index)

        def call() -> Any:
            session.run_with_iobinding(binding)
            return binding

        return call

    return prepare


class OnnxRuntimeTensorRTBackend(OnnxRuntimeBackend):
    """ONNX Runtime's TensorRT provider (CUDA provider for what TensorRT does not take)."""

    name = "onnxruntime-trt"
    hardware = ("cuda",)
    precisions = ("fp32", "fp16")
    providers = {"cuda": "TensorrtExecutionProvider"}
    allowed = {"cuda": precisions}

    def _provider_options(self, hardware: str, precision: str, device_index: int, threads: int) -> list[Any]:
        # Engines are built per input shape (in the cold call) and cached on disk across runs.
        trt = {"device_id": str(device_index), "trt_fp16_enable": "True" if precision == "fp16" else "False",
               "trt_engine_cache_enable": "True", "trt_engine_cache_path": str(cache_dir("onnx") / "trt")}
        return [("TensorrtExecutionProvider", trt),
                ("CUDAExecutionProvider", {"device_id": str(device_index), "use_tf32": "0"}), "CPUExecutionProvider"]

    def _model_file(self, exported: ExportedModel, spec: ModelSpec, precision: str) -> Path:
        return exported.path  # fp16 is TensorRT's choice per layer (trt_fp16_enable), not a new graph

    def _read_back(self, session: Any, hardware: str, graph: str) -> str:
        options = session.get_provider_options().get("TensorrtExecutionProvider", {})
        fp16 = str(options.get("trt_fp16_enable", "0")).lower() in ("1", "true")
        return "fp16" if fp16 else graph


BACKEND = register_backend(OnnxRuntimeBackend())
TENSORRT_BACKEND = register_backend(OnnxRuntimeTensorRTBackend())

__all__ = ["BACKEND", "TENSORRT_BACKEND", "OnnxRuntimeBackend", "OnnxRuntimeTensorRTBackend", "graph_precision"]
