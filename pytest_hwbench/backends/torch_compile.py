"""torch.compile backends: ``torch-compile`` (mode "default") and ``torch-compile-ro``
(mode "reduce-overhead", i.e. CUDA graphs), on cpu, cuda, rocm and xpu.

One graph per input shape (``dynamic=False``, as a deployment padding to fixed batch sizes runs),
compiled in `prepare()` outside the timed loop (`_torch.warm_up`); a timed call that would
compile again raises.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from ..errors import UnsupportedCase
from ..hardware import HardwareInfo
from ..models import ModelSpec
from ..torch_device import device_string
from ..vocabulary import TORCH_DTYPES
from ._torch import (
    COMPILE_MODES,
    CompileMode,
    TorchModel,
    load_model,
    move_inputs,
    no_recompile,
    torch_fields,
    warm_up,
    with_natives,
)
from .base import Backend, LoadedModel, register_backend


@dataclass(frozen=True, kw_only=True)
class CompiledModel(TorchModel):
    """A model compiled by torch.compile in one `mode`: each `prepare` compiles (and warms up)
    the graph of its input shape; the call it returns refuses to recompile."""

    #: the compiled function; None once closed
    compiled_fn: Any
    backend: str
    model_name: str
    mode: str
    dtype: Any

    def prepare(self, inputs: dict[str, Any]) -> Any:
        import torch

        moved = move_inputs(inputs, device_string(self.device_kind, self.device_index), self.dtype)
        fn = self.compiled_fn
        if fn is None:
            raise RuntimeError(f"{self.backend}: {self.model_name} was closed")

        def run() -> Any:
            # Grad mode is set outside the compiled call, so AOTAutograd builds an inference
            # graph (pytorch#110666). no_grad and inference_mode both compiled bert-tiny with
            # no graph break and one graph per shape; inference_mode is what torch eager uses.
            with torch.inference_mode():
                return fn(**moved)

        warm_up(run, mode=self.mode, sync=self.sync, details=self.details, name=self.model_name)

        def call() -> Any:
            with no_recompile():
                return run()

        return call

    def close(self) -> None:
        # Drop the graphs (and CUDA graph pools) so the next model starts with empty caches.
        # The reset is process-wide: another compiled model still cached by the runner
        # compiles again in its next prepare(), where that time is counted.
        import torch

        object.__setattr__(self, "compiled_fn", None)  # frozen, but the model's memory must go
        torch._dynamo.reset()


class TorchCompileBackend(Backend):
    """torch.compile (inductor) in one mode, on any device inductor generates code for."""

    # mps is left out: inductor's Metal code generation is a prototype in torch 2.13 and has
    # not been verified to run the zoo here.
    hardware = ("cpu", "cuda", "rocm", "xpu")
    precisions = ("fp32", "fp16", "bf16")
    #: Inductor compiles C++ per model and batch size on the CPU (~11 min for the quick tier on a
    #: cold 2-core host): CPU cases run when the backend is named, and in fp32 unless asked.
    opt_in_hardware = ("cpu",)

    def __init__(self, compiler: CompileMode) -> None:
        self.compiler = compiler
        self.name = compiler.name
        self.mode = compiler.mode

    def default_precisions(self, hardware: str, hw: HardwareInfo) -> tuple[str, ...]:
        return ("fp32",) if hardware == "cpu" else with_natives(self.precisions, hw[hardware])

    def unavailable(self, hardware: str, precision: str, hw: HardwareInfo) -> str | None:
        if hardware not in self.hardware:
            return f"{hardware}: {self.name} runs on {', '.join(self.hardware)}"
        target = hw[hardware]
        if not target.available:
            return f"{hardware}: {target.reason}"
        if precision not in self.precisions:
            return f"{precision}: {self.name} runs {', '.join(self.precisions)}"
        missing = self.compiler.missing(hardware)
        if missing or precision == "fp32":
            return missing
        return target.unsupported_precision(precision)

    def load(self, spec: ModelSpec, hardware: str, precision: str, device_index: int = 0) -> LoadedModel:
        import torch

        missing = self.compiler.missing(hardware)
        if missing:
            raise UnsupportedCase(missing)
        # TF32 off on cuda/rocm as in torch eager; inductor reads the same flags when it
        # generates matmul kernels, so fp32 stays fp32.
        model = load_model(spec, hardware, precision, device_index)
        compiled = torch.compile(model, dynamic=False, **self.compiler.compile_kwargs(hardware))
        details: dict[str, Any] = {"compile_mode": self.mode}
        return CompiledModel(**torch_fields(hardware, device_index, precision, details), compiled=True,
                             compiled_fn=compiled, backend=self.name, model_name=spec.name, mode=self.mode,
                             dtype=getattr(torch, TORCH_DTYPES[precision]))


COMPILE = register_backend(TorchCompileBackend(COMPILE_MODES["torch-compile"]))
COMPILE_RO = register_backend(TorchCompileBackend(COMPILE_MODES["torch-compile-ro"]))

__all__ = ["COMPILE", "COMPILE_RO", "CompiledModel", "TorchCompileBackend"]
