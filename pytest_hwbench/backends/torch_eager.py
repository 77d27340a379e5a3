"""PyTorch eager backend: cpu, cuda, rocm, mps and xpu through torch itself."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from ..facts import torch_targets
from ..hardware import HardwareInfo
from ..models import ModelSpec
from ..torch_device import device_string
from ..vocabulary import TORCH_DTYPES
from ._torch import EAGER, TorchModel, load_model, move_inputs, torch_fields, with_natives
from .base import Backend, LoadedModel, register_backend


@dataclass(frozen=True, kw_only=True)
class EagerModel(TorchModel):
    """A torch model run eagerly: each prepared call is one forward under ``inference_mode``."""

    model: Any
    dtype: Any

    def prepare(self, inputs: dict[str, Any]) -> Any:
        import torch

        model = self.model
        moved = move_inputs(inputs, device_string(self.device_kind, self.device_index), self.dtype)

        def call() -> Any:
            with torch.inference_mode():
                return model(**moved)

        return call


class TorchEagerBackend(Backend):
    """torch eager on any device torch supports."""

    name = EAGER
    hardware = torch_targets()
    precisions = ("fp32", "fp16", "bf16", "int8")

    def _precisions_for(self, hardware: str) -> tuple[str, ...]:
        return self.precisions if hardware == "cpu" else ("fp32", "fp16", "bf16")

    def default_precisions(self, hardware: str, hw: HardwareInfo) -> tuple[str, ...]:
        return with_natives(self._precisions_for(hardware), hw[hardware])

    def unavailable(self, hardware: str, precision: str, hw: HardwareInfo) -> str | None:
        target = hw[hardware]
        if not target.available:
            return f"{hardware}: {target.reason}"
        if precision not in self._precisions_for(hardware):
            return f"{precision}: torch eager runs {', '.join(self._precisions_for(hardware))} on {hardware}"
        if precision == "int8":
            import torch

            engines = set(torch.backends.quantized.supported_engines) - {"none"}
            return None if engines else "int8: this torch build has no quantized engine (fbgemm/qnnpack)"
        return None if precision == "fp32" else target.unsupported_precision(precision)

    def load(self, spec: ModelSpec, hardware: str, precision: str, device_index: int = 0) -> LoadedModel:
        import torch

        model = load_model(spec, hardware, precision, device_index)
        dtype = None if precision == "int8" else getattr(torch, TORCH_DTYPES[precision])
        return EagerModel(**torch_fields(hardware, device_index, precision), model=model, dtype=dtype)


BACKEND = register_backend(TorchEagerBackend())

__all__ = ["BACKEND", "EagerModel", "TorchEagerBackend"]
