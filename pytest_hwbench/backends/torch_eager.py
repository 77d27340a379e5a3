"""PyTorch eager backend: cpu, cuda, rocm, mps and xpu through torch itself."""

from __future__ import annotations

from typing import Any

from ..errors import PrecisionMismatch, UnsupportedCase
from ..hardware import HardwareInfo
from ..models import ModelSpec
from ..torch_device import device_string, disable_tf32, sync_for, timer_for
from .base import Backend, LoadedModel, register_backend

_DTYPES = {"fp32": "float32", "fp16": "float16", "bf16": "bfloat16"}
#: Share of the weights dynamic int8 must cover before we call a model int8.
INT8_MIN_COVERAGE = 0.5


def _quantize_int8(model: Any, name: str) -> Any:
    import torch

    # Embedding tables are lookups, not compute: leave them out of the share.
    embedding = sum(m.weight.numel() for m in model.modules() if isinstance(m, torch.nn.Embedding))
    total = sum(p.numel() for p in model.parameters()) - embedding
    linear = sum(m.weight.numel() for m in model.modules() if isinstance(m, torch.nn.Linear))
    if total == 0 or linear / total < INT8_MIN_COVERAGE:
        raise UnsupportedCase(
            f"int8: torch dynamic quantization covers nn.Linear only, {linear / max(total, 1):.0%} of "
            f"{name}'s non-embedding weights (needs {INT8_MIN_COVERAGE:.0%}); use onnxruntime or openvino for int8"
        )
    return torch.ao.quantization.quantize_dynamic(model, {torch.nn.Linear}, dtype=torch.qint8)


def effective_precision(model: Any) -> str:
    """The precision `model` runs at, read from its modules and parameters."""
    import torch

    if any(type(m).__module__.startswith("torch.ao.nn.quantized") for m in model.modules()):
        return "int8"
    dtypes = {p.dtype for p in model.parameters() if p.is_floating_point()}
    names = {torch.float32: "fp32", torch.float16: "fp16", torch.bfloat16: "bf16"}
    found = sorted({names.get(d, str(d)) for d in dtypes})
    return found[0] if len(found) == 1 else "mixed(" + ",".join(found) + ")"


def _load_model(spec: ModelSpec, hardware: str, precision: str, device_index: int = 0) -> Any:
    """The zoo model at `precision` on the device of `hardware`; raises `PrecisionMismatch` when
    torch holds another precision than the one asked for."""
    import torch

    disable_tf32(hardware)
    model = spec.build_model("cpu")
    if precision == "int8":
        model = _quantize_int8(model, spec.name)
    elif precision != "fp32":
        model = model.to(getattr(torch, _DTYPES[precision]))
    model = model.to(device_string(hardware, device_index))
    ran = effective_precision(model)
    if ran != precision:
        raise PrecisionMismatch(f"{spec.name}: asked for {precision}, torch holds {ran}")
    return model


def _move_inputs(inputs: dict[str, Any], device: str, dtype: Any) -> dict[str, Any]:
    """`inputs` on `device`, floating-point ones cast to `dtype` (None: left as they are)."""
    return {
        k: v.to(device=device, dtype=dtype) if v.is_floating_point() and dtype is not None else v.to(device)
        for k, v in inputs.items()
    }


def device_name(hardware: str, index: int = 0) -> str:
    """The device's name as the runtime or detection reports it (records' ``device_name``)."""
    from ..hardware import detect_hardware

    if hardware in ("cpu", "mps"):
        target = detect_hardware()[hardware]
        if hardware == "cpu":
            return str(target.details.get("model", "cpu"))
        return target.devices[0].name if target.devices else "Apple MPS"
    import torch

    module = torch.xpu if hardware == "xpu" else torch.cuda
    return str(module.get_device_name(index))


def _threads(hardware: str) -> int | None:
    """Intra-op threads torch uses on the CPU; None on accelerators."""
    import torch

    return torch.get_num_threads() if hardware == "cpu" else None


def _set_cpu_threads(count: int) -> int:
    """torch's intra-op threads set to `count`; the count now in effect."""
    import torch

    torch.set_num_threads(max(1, int(count)))
    return int(torch.get_num_threads())


def torch_loaded_model(hardware: str, device_index: int, precision: str, prepare: Any, *,
                       sync: Any = None, close: Any = None, details: dict[str, Any] | None = None,
                       compiled: bool = False) -> LoadedModel:
    """The `LoadedModel` of a torch model on `hardware`: device name, sync, timer and threads
    as every torch backend and scenario reports them (`sync` defaults to the device's).

    A `compiled` model keeps its thread count: dynamo guards on it, so a retry on fewer threads
    would recompile (and fail under ``fail_on_recompile``) instead of measuring the same graph.
    """
    return LoadedModel(
        precision=precision,
        device_name=device_name(hardware, device_index),
        prepare=prepare,
        sync=sync or sync_for(hardware, device_index),
        timer=timer_for(hardware),
        device_kind=hardware,
        device_index=device_index,
        threads=_threads(hardware),
        close=close or (lambda: None),
        details=details,
        set_threads=_set_cpu_threads if hardware == "cpu" and not compiled else None,
    )


class TorchEagerBackend(Backend):
    """torch eager on any device torch supports."""

    name = "torch"
    hardware = ("cpu", "cuda", "rocm", "mps", "xpu")
    precisions = ("fp32", "fp16", "bf16", "int8")

    def markers(self, hardware: str) -> tuple[str, ...]:
        return (hardware,)

    def _precisions_for(self, hardware: str) -> tuple[str, ...]:
        return self.precisions if hardware == "cpu" else ("fp32", "fp16", "bf16")

    def default_precisions(self, hardware: str, hw: HardwareInfo) -> tuple[str, ...]:
        target = hw[hardware]
        allowed = self._precisions_for(hardware)
        if not target.available:
            return allowed
        return tuple(p for p in allowed if p == "fp32" or p in target.precisions)

    def unavailable(self, hardware: str, precision: str, hw: HardwareInfo) -> str | None:
        target = hw[hardware]
        if not target.available:
            return f"{hardware}: {target.reason}"
        if precision not in self._precisions_for(hardware):
            return f"{precision}: torch eager runs {', '.join(self._precisions_for(hardware))} on {hardware}"
        if precision == "int8":
            import torch

            if not torch.backends.quantized.supported_engines or \
                    torch.backends.quantized.supported_engines == ["none"]:
                return "int8: this torch build has no quantized engine (fbgemm/qnnpack)"
            return None
        if precision == "fp32":
            return None
        return target.unsupported_precision(precision)

    def load(self, spec: ModelSpec, hardware: str, precision: str, device_index: int = 0) -> LoadedModel:
        import torch

        device = device_string(hardware, device_index)
        model = _load_model(spec, hardware, precision, device_index)
        dtype = None if precision == "int8" else getattr(torch, _DTYPES[precision])

        def prepare(inputs: dict[str, Any]) -> Any:
            moved = _move_inputs(inputs, device, dtype)

            def call() -> Any:
                with torch.inference_mode():
                    return model(**moved)

            return call

        return torch_loaded_model(hardware, device_index, precision, prepare)


BACKEND = register_backend(TorchEagerBackend())

__all__ = ["BACKEND", "TorchEagerBackend", "device_name", "effective_precision", "torch_loaded_model"]
