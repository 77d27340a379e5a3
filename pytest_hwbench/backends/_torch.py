"""What the torch backends and the torch scenarios share: the seeded model at a precision, the
`TorchModel` every torch runtime loads as, and torch.compile's modes, warm-up and recompile guard
(device-level details are `pytest_hwbench.torch_device`'s). torch is imported inside functions.
"""

from __future__ import annotations

import contextlib
import functools
import os
import shutil
import time
from collections.abc import Callable
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from ..errors import PrecisionMismatch, UnsupportedCase
from ..torch_device import device_string, disable_tf32, sync_for, timer_for
from ..vocabulary import TORCH_DTYPES
from .base import LoadedModel

if TYPE_CHECKING:
    from ..hardware import TargetInfo
    from ..models import ModelSpec

#: The torch eager backend's name (``torch``), which the torch scenarios run on.
EAGER = "torch"
#: Share of the weights dynamic int8 must cover before we call a model int8.
INT8_MIN_COVERAGE = 0.5
#: Graphs dynamo keeps per code object (shared by every model whose forward goes through the same
#: transformers decorator; each prepared shape adds one until `close()`) before it runs the code
#: eagerly: with its default (8), a ninth batch size would be measured as compiled (torch 2.13).
RECOMPILE_LIMIT = 256


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


def load_model(spec: ModelSpec, hardware: str, precision: str, device_index: int = 0,
               auto_class: str | None = None) -> Any:
    """The zoo model (with `auto_class`'s head, default the spec's) at `precision` on the device
    of `hardware`, built from the zoo's seed on the CPU then cast, so its weights are the same
    everywhere; raises `PrecisionMismatch` when torch holds another precision than asked for."""
    import torch

    disable_tf32(hardware)
    model = spec.build_model("cpu", auto_class=auto_class)
    if precision == "int8":
        model = _quantize_int8(model, spec.name)
    elif precision != "fp32":
        model = model.to(getattr(torch, TORCH_DTYPES[precision]))
    model = model.to(device_string(hardware, device_index))
    ran = effective_precision(model)
    if ran != precision:
        raise PrecisionMismatch(f"{spec.name}: asked for {precision}, torch holds {ran}")
    return model


def move_inputs(inputs: dict[str, Any], device: str, dtype: Any) -> dict[str, Any]:
    """`inputs` on `device`, floating-point ones cast to `dtype` (None: left as they are)."""
    return {k: v.to(device=device, dtype=dtype) if v.is_floating_point() and dtype is not None else v.to(device)
            for k, v in inputs.items()}


def device_name(hardware: str, index: int = 0) -> str:
    """The device's name as detection reports it (records' ``device_name``): the CPU model, or
    the name torch gives device `index` of a GPU runtime."""
    from ..hardware import detect_hardware

    target = detect_hardware([hardware])[hardware]
    if hardware == "cpu":
        return str(target.details.get("model", "cpu"))
    return target.devices[index].name if index < len(target.devices) else f"{hardware} device {index}"


def torch_fields(hardware: str, device_index: int, precision: str,
                 details: dict[str, Any] | None = None) -> dict[str, Any]:
    """The `LoadedModel` fields of a torch model on `hardware`: device name, timer and threads
    as every torch backend and scenario reports them."""
    import torch

    threads = torch.get_num_threads() if hardware == "cpu" else None
    return {"precision": precision, "device_name": device_name(hardware, device_index), "device_kind": hardware,
            "device_index": device_index, "threads": threads, "details": details or {}, "timer": timer_for(hardware)}


def with_natives(allowed: tuple[str, ...], target: TargetInfo) -> tuple[str, ...]:
    """The default precisions of a torch backend: fp32 and those of `allowed` that `target`
    runs natively (all of `allowed` where `target` is unavailable, so its cases skip with a reason)."""
    return tuple(p for p in allowed if not target.available or p == "fp32" or p in target.precisions)


@dataclass(frozen=True, kw_only=True)
class TorchModel(LoadedModel):
    """A torch model on one device (`torch_fields`); subclasses implement `prepare`.

    It waits for its device with `pytest_hwbench.torch_device.sync_for`, and on the CPU changes
    torch's intra-op threads, except when `compiled`: dynamo guards on the thread count, so a
    retry on fewer threads would recompile instead of measuring the same graph.
    """

    compiled: bool = False

    def __post_init__(self) -> None:
        # `sync` is the device's sync itself, so the timed loop makes no method call around it.
        object.__setattr__(self, "sync", sync_for(self.device_kind, self.device_index))

    def set_threads(self, count: int) -> int | None:
        if self.device_kind != "cpu" or self.compiled:
            return None
        import torch

        torch.set_num_threads(max(1, int(count)))
        return int(torch.get_num_threads())


# --- torch.compile -----------------------------------------------------------------------------


def _on_path(*names: str | None) -> str | None:
    return next((name for name in names if name and shutil.which(name)), None)


def _cxx_compiler() -> str | None:
    """The C++ compiler inductor's CPU code generation will use: $CXX, g++, clang++ or c++."""
    return _on_path(os.environ.get("CXX"), "g++", "clang++", "c++")


@functools.cache
def _dynamo_unsupported() -> str | None:
    """Why torch.compile refuses this Python (e.g. a version dynamo does not trace yet), or None."""
    from torch._dynamo.eval_frame import check_if_dynamo_supported

    try:
        check_if_dynamo_supported()
    except Exception as exc:  # dynamo's own check raises RuntimeError naming the cause
        return str(exc)
    return None


def _toolchain_missing(hardware: str) -> str | None:
    """What torch.compile lacks here to generate code for `hardware` (a skip reason), or None."""
    unsupported = _dynamo_unsupported()
    if unsupported:
        return f"torch.compile: {unsupported}"
    if hardware == "cpu":
        if _cxx_compiler() is None:
            return ("C++ compiler: torch.compile on cpu generates C++ and none of $CXX, g++, clang++, c++ "
                    "is on PATH; install one (apt-get install g++) or set CXX")
        return None
    import importlib.util

    if importlib.util.find_spec("triton") is None:
        return f"triton: torch.compile on {hardware} generates triton kernels; this torch has no triton"
    if _on_path(os.environ.get("CC"), "gcc", "clang") is None:
        return ("C compiler: triton builds its kernel launchers with $CC, gcc or clang and none is on "
                "PATH; install one (apt-get install gcc) or set CC")
    return None


@dataclass(frozen=True)
class CompileMode:
    """One torch.compile backend's mode: `name` (the backend's) and inductor's `mode`."""

    name: str
    mode: str

    def missing(self, hardware: str) -> str | None:
        """What this mode lacks on `hardware` (CUDA graphs, a compiler toolchain): a skip reason, or None."""
        # Inductor records CUDA graphs for cuda devices only (ROCm's HIP graphs included);
        # elsewhere reduce-overhead would run the default mode under this backend's name.
        if self.mode == "reduce-overhead" and hardware not in ("cuda", "rocm"):
            return f"{hardware}: reduce-overhead uses CUDA graphs; {hardware} has none, use torch-compile"
        return _toolchain_missing(hardware)

    def compile_kwargs(self, hardware: str) -> dict[str, Any]:
        """Keyword arguments of ``torch.compile`` for this mode on `hardware` (besides ``dynamic``)."""
        if hardware == "cpu":
            # Inductor looks for $CXX or g++ only; hand it the compiler `unavailable` found. On the
            # CPU the mode is "default" (reduce-overhead skips there), and torch.compile takes
            # options or a mode, not both.
            return {"options": {"cpp.cxx": (None, _cxx_compiler())}}
        return {"mode": self.mode}


#: The torch.compile backends' modes, by backend name.
COMPILE_MODES: dict[str, CompileMode] = {
    "torch-compile": CompileMode("torch-compile", "default"),
    "torch-compile-ro": CompileMode("torch-compile-ro", "reduce-overhead"),
}


def warm_up(run: Callable[[], Any], *, mode: str, sync: Callable[[], None], details: dict[str, Any],
            name: str) -> None:
    """Call `run` until its graphs are compiled (and, in reduce-overhead, its CUDA graphs recorded),
    outside any timed loop; `details` gets ``compile_time_s`` and the FX graph cache counts.

    Raises `UnsupportedCase` when reduce-overhead ran without CUDA graphs (the case would be the
    default mode under another name)."""
    import torch
    from torch._dynamo.utils import counters

    before = {k: counters["inductor"][k] for k in ("fxgraph_cache_hit", "fxgraph_cache_miss", "cudagraph_skips")}
    # The limit applies when a graph is added, which happens here and nowhere else;
    # fail_on_recompile_limit_hit turns dynamo's silent eager fallback into an error.
    with torch._dynamo.config.patch(recompile_limit=RECOMPILE_LIMIT, fail_on_recompile_limit_hit=True):
        start = time.perf_counter()
        # reduce-overhead: the first call compiles and warms up, the second records the CUDA
        # graph, later ones replay it; recording is part of compiling.
        for _ in range(2 if mode == "reduce-overhead" else 1):
            run()
        sync()
        details["compile_time_s"] = time.perf_counter() - start
    after = {k: counters["inductor"][k] - v for k, v in before.items()}
    details.update(compile_cache_hits=after["fxgraph_cache_hit"], compile_cache_misses=after["fxgraph_cache_miss"])
    if mode == "reduce-overhead" and after["cudagraph_skips"]:
        raise UnsupportedCase(
            f"{name}: reduce-overhead ran without CUDA graphs (inductor skipped "
            f"{after['cudagraph_skips']} graph(s); TORCH_LOGS=cudagraphs says why), use torch-compile"
        )


def no_recompile() -> contextlib.AbstractContextManager[None]:
    """Around a timed call: a recompile would be timed as latency, so it raises instead."""
    import torch

    return torch.compiler.set_stance("fail_on_recompile")


def graphs_compiled() -> int:
    """Graphs dynamo has compiled in this process so far (a counter; `torch._dynamo.reset` keeps it)."""
    from torch._dynamo.utils import counters

    return int(counters["stats"]["unique_graphs"])


__all__ = ["COMPILE_MODES", "EAGER", "INT8_MIN_COVERAGE", "RECOMPILE_LIMIT", "CompileMode", "TorchModel",
           "device_name", "effective_precision", "graphs_compiled", "load_model", "move_inputs", "no_recompile",
           "torch_fields", "warm_up", "with_natives"]
