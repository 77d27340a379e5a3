"""torch.compile backends: ``torch-compile`` (mode "default") and ``torch-compile-ro``
(mode "reduce-overhead", i.e. CUDA graphs), on cpu, cuda, rocm and xpu.

Models compile with ``dynamic=False``: one graph per input shape, so every batch size gets a
graph specialised to it, as a deployment that pads to fixed batch sizes runs. `prepare()`
makes the first call of each shape, which compiles; its seconds go to
``details["compile_time_s"]``, so the runner's latency is the steady state without compilation.
A timed call that would compile again raises instead of measuring a compilation.
``details["compile_cache_hits"]`` / ``["compile_cache_misses"]`` count inductor's on-disk FX
graph cache for that compile: a hit takes a fraction of a cold compile's time.

The generate scenario compiles its decode step through the same backends (`compile_kwargs`,
`warm_up`, `no_recompile`), so both modes compile, warm up and refuse recompiles alike.
"""

from __future__ import annotations

import contextlib
import functools
import os
import shutil
import time
from collections.abc import Callable, Iterator
from typing import Any

from ..errors import UnsupportedCase
from ..hardware import HardwareInfo
from ..models import ModelSpec
from ..torch_device import device_string, sync_for
from .base import Backend, LoadedModel, register_backend
from .torch_eager import (
    _DTYPES,
    _load_model,
    _move_inputs,
    torch_loaded_model,
)

#: Dynamo keeps the graphs of one code object (shared by every model whose forward goes through
#: the same transformers decorator) up to this many, then runs the code eagerly with a warning.
#: Each prepared shape adds one until `close()` resets dynamo. With the default (8) a ninth
#: batch size ran eager and would be measured as compiled; a fresh `torch.compile` wrapper per
#: shape does not help, the count is per code object (both seen on torch 2.13).
RECOMPILE_LIMIT = 256


def _cxx_compiler() -> str | None:
    """The C++ compiler inductor's CPU code generation will use: $CXX, g++, clang++ or c++."""
    for name in (os.environ.get("CXX"), "g++", "clang++", "c++"):
        if name and shutil.which(name):
            return name
    return None


def _c_compiler() -> str | None:
    """The C compiler triton builds its GPU kernel launchers with: $CC, gcc or clang."""
    for name in (os.environ.get("CC"), "gcc", "clang"):
        if name and shutil.which(name):
            return name
    return None


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
    if _c_compiler() is None:
        return ("C compiler: triton builds its kernel launchers with $CC, gcc or clang and none is on "
                "PATH; install one (apt-get install gcc) or set CC")
    return None


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
    details["compile_cache_hits"] = after["fxgraph_cache_hit"]
    details["compile_cache_misses"] = after["fxgraph_cache_miss"]
    if mode == "reduce-overhead" and after["cudagraph_skips"]:
        raise UnsupportedCase(
            f"{name}: reduce-overhead ran without CUDA graphs (inductor skipped "
            f"{after['cudagraph_skips']} graph(s); TORCH_LOGS=cudagraphs says why), use torch-compile"
        )


@contextlib.contextmanager
def no_recompile() -> Iterator[None]:
    """Around a timed call: a recompile would be timed as latency, so it raises instead."""
    import torch

    with torch.compiler.set_stance("fail_on_recompile"):
        yield


def graphs_compiled() -> int:
    """Graphs dynamo has compiled in this process so far (a counter; `torch._dynamo.reset` keeps it)."""
    from torch._dynamo.utils import counters

    return int(counters["stats"]["unique_graphs"])


class TorchCompileBackend(Backend):
    """torch.compile (inductor) in one mode, on any device inductor generates code for."""

    # mps is left out: inductor's Metal code generation is a prototype in torch 2.13 and has
    # not been verified to run the zoo here.
    hardware = ("cpu", "cuda", "rocm", "xpu")
    precisions = ("fp32", "fp16", "bf16")
    #: Inductor compiles C++ per model and batch size on the CPU: ~11 min for the quick tier on a
    #: cold cache on a 2-core host. CPU cases therefore run when the backend is named
    #: (``--hwbench-backends torch-compile``), not in the default grid.
    opt_in_hardware = ("cpu",)

    def __init__(self, name: str, mode: str) -> None:
        self.name = name
        self.mode = mode

    def markers(self, hardware: str) -> tuple[str, ...]:
        return (hardware,)

    def default_precisions(self, hardware: str, hw: HardwareInfo) -> tuple[str, ...]:
        if hardware == "cpu":
            # Inductor compiles C++ per shape: a cold compile of a quick-tier model takes 10-100 s
            # on a 2-core CI host, so cpu runs fp32 unless --hwbench-precisions asks for more.
            return ("fp32",)
        target = hw[hardware]
        if not target.available:
            return self.precisions
        return tuple(p for p in self.precisions if p == "fp32" or p in target.precisions)

    def unavailable(self, hardware: str, precision: str, hw: HardwareInfo) -> str | None:
        if hardware not in self.hardware:
            return f"{hardware}: {self.name} runs on {', '.join(self.hardware)}"
        target = hw[hardware]
        if not target.available:
            return f"{hardware}: {target.reason}"
        no_graphs = self._no_cuda_graphs(hardware)
        if no_graphs:
            return no_graphs
        if precision not in self.precisions:
            return f"{precision}: {self.name} runs {', '.join(self.precisions)}"
        missing = _toolchain_missing(hardware)
        if missing:
            return missing
        if precision == "fp32":
            return None
        return target.unsupported_precision(precision)

    def missing(self, hardware: str) -> str | None:
        """What this mode lacks on `hardware` (CUDA graphs, a compiler toolchain): a skip reason, or None."""
        return self._no_cuda_graphs(hardware) or _toolchain_missing(hardware)

    def compile_kwargs(self, hardware: str) -> dict[str, Any]:
        """Keyword arguments of ``torch.compile`` for this mode on `hardware` (besides ``dynamic``)."""
        if hardware == "cpu":
            # Inductor looks for $CXX or g++ only; hand it the compiler `unavailable` found. On the
            # CPU the mode is "default" (reduce-overhead skips there), and torch.compile takes
            # options or a mode, not both.
            return {"options": {"cpp.cxx": (None, _cxx_compiler())}}
        return {"mode": self.mode}

    def _no_cuda_graphs(self, hardware: str) -> str | None:
        """Why this mode cannot run on `hardware` for want of CUDA graphs, or None."""
        # Inductor records CUDA graphs for cuda devices only (ROCm's HIP graphs included);
        # elsewhere reduce-overhead would run the default mode under this backend's name.
        if self.mode == "reduce-overhead" and hardware not in ("cuda", "rocm"):
            return f"{hardware}: reduce-overhead uses CUDA graphs; {hardware} has none, use torch-compile"
        return None

    def load(self, spec: ModelSpec, hardware: str, precision: str, device_index: int = 0) -> LoadedModel:
        import torch

        missing = self.missing(hardware)
        if missing:
            raise UnsupportedCase(missing)
        device = device_string(hardware, device_index)
        # TF32 off on cuda/rocm as in torch eager; inductor reads the same flags when it
        # generates matmul kernels, so fp32 stays fp32.
        model = _load_model(spec, hardware, precision, device_index)
        dtype = getattr(torch, _DTYPES[precision])
        sync = sync_for(hardware, device_index)
        compiled = torch.compile(model, dynamic=False, **self.compile_kwargs(hardware))
        details: dict[str, Any] = {"compile_mode": self.mode}
        state = {"compiled": compiled}

        def prepare(inputs: dict[str, Any]) -> Any:
            moved = _move_inputs(inputs, device, dtype)
            fn = state["compiled"]
            if fn is None:
                raise RuntimeError(f"{self.name}: {spec.name} was closed")

            def run() -> Any:
                # Grad mode is set outside the compiled call, so AOTAutograd builds an inference
                # graph (pytorch#110666). no_grad and inference_mode both compiled bert-tiny with
                # no graph break and one graph per shape; inference_mode is what torch eager uses.
                with torch.inference_mode():
                    return fn(**moved)

            warm_up(run, mode=self.mode, sync=sync, details=details, name=spec.name)

            def call() -> Any:
                with no_recompile():
                    return run()

            return call

        def close() -> None:
            # Drop the graphs (and CUDA graph pools) so the next model starts with empty caches.
            # The reset is process-wide: another compiled model still cached by the runner
            # compiles again in its next prepare(), where that time is counted.
            state["compiled"] = None
            torch._dynamo.reset()

        return torch_loaded_model(hardware, device_index, precision, prepare, sync=sync, close=close,
                                  details=details, compiled=True)


COMPILE = register_backend(TorchCompileBackend("torch-compile", "default"))
COMPILE_RO = register_backend(TorchCompileBackend("torch-compile-ro", "reduce-overhead"))

__all__ = ["COMPILE", "COMPILE_RO", "RECOMPILE_LIMIT", "TorchCompileBackend", "graphs_compiled", "no_recompile",
           "warm_up"]
