"""One table of facts about hardware targets and backends, and the names derived from it.

Plug-ins add rows with `register_target` / `register_backend_facts`; the derived functions read
the rows at each call. Imports the standard library only, so any process may read it.
"""

from __future__ import annotations

from dataclasses import dataclass

#: What a target is: a runtime on the host CPU, a GPU runtime of this host, a browser, a device
#: reached over the network.
TARGET_KINDS: tuple[str, ...] = ("cpu", "accelerator", "web", "remote")


@dataclass(frozen=True)
class TargetFacts:
    """One hardware target: what it is, how the harness marks and times it, what hwsel assumes.
    `host_cpu`: its device is the host CPU (None: whether `kind` is ``cpu``). `marker_doc`: its
    pytest marker's doc (None: the backends' doc). `torch_module`: the ``torch`` submodule that
    drives it (``cuda`` for rocm). `timer`: ``wall`` or a torch module with device events.
    `fallback_rank`: its place in a predictor's default fallback order (None: considered only when
    asked for). `default_backend`: the backend a question about it means when it names none.
    `launch_cost_ms`: one operator launch of an eager forward there. `trains`: whether it can train.
    `memory_gb`: a common device's memory, hwsel's default for what fits (None: the host's)."""

    name: str
    kind: str
    marker_doc: str | None = None
    host_cpu: bool | None = None
    torch_module: str | None = None
    timer: str = "wall"
    fallback_rank: int | None = None
    default_backend: str = "torch"
    launch_cost_ms: float = 0.02
    precisions: tuple[str, ...] = ("fp32", "fp16", "bf16", "int8")
    trains: bool = True
    memory_gb: float | None = None

    def __post_init__(self) -> None:
        if not self.name or not isinstance(self.name, str) or self.name != self.name.strip().lower():
            raise ValueError(f"target name {self.name!r}: expected a non-empty lower-case name such as 'cuda'")
        if self.kind not in TARGET_KINDS:
            raise ValueError(f"target {self.name!r}: kind {self.kind!r} is not one of {', '.join(TARGET_KINDS)}")
        if self.timer != "wall" and self.timer != self.torch_module:
            raise ValueError(f"target {self.name!r}: timer {self.timer!r} must be 'wall' or its torch module "
                             f"({self.torch_module!r}): device events come from that module")
        if not self.launch_cost_ms > 0:
            raise ValueError(f"target {self.name!r}: launch_cost_ms must be > 0, got {self.launch_cost_ms!r}")
        if not self.precisions or not all(isinstance(p, str) and p for p in self.precisions):
            raise ValueError(f"target {self.name!r}: precisions must name at least one precision, got {self.precisions!r}")
        if self.memory_gb is not None and not self.memory_gb > 0:
            raise ValueError(f"target {self.name!r}: memory_gb must be > 0 or None, got {self.memory_gb!r}")

    @property
    def on_host_cpu(self) -> bool:
        """Whether its device is the host CPU."""
        return self.kind == "cpu" if self.host_cpu is None else self.host_cpu


@dataclass(frozen=True)
class BackendFacts:
    """Facts per backend. `launch_share`: the share of a target's launch cost its runtime keeps
    (graph runtimes and compilers fuse and batch launches; eager is 1.0). `counts_as_hardware`:
    its records also count as hardware of the backend's name (OpenVINO's device is cpu/gpu/npu)."""

    name: str
    launch_share: float = 1.0
    counts_as_hardware: bool = False

    def __post_init__(self) -> None:
        if not self.name or not isinstance(self.name, str):
            raise ValueError(f"backend name {self.name!r}: expected a non-empty name such as 'torch'")
        if not 0 < self.launch_share <= 1:
            raise ValueError(f"backend {self.name!r}: launch_share must be in (0, 1], got {self.launch_share!r}")


_EAGER_LAUNCH_MS = 0.017  # eager PyTorch on a CPU: about 17 us per operator
# Launch costs: eager PyTorch with Hugging Face models, about 20 us per operator on a GPU (H100:
# bert-base, 239 operators, 7.2 ms at batch 1 in fp16); wasm dispatches like a native CPU
# runtime; a WebGPU dispatch goes through the browser's GPU process (about 0.1 ms each).

_WEB_DOC = "cases that run in a headless browser through onnxruntime-web's {} provider"

# Memory: a common device of each kind (H100 80 GB, MI210 64 GB, Max 1100 48 GB, a 16 GB Mac, a
# Snapdragon NPU's 8 GB share); wasm: a 32-bit WebAssembly memory holds 4 GiB at most.
#: The built-in targets, in the order the harness probes and lists them.
TARGETS: tuple[TargetFacts, ...] = (
    TargetFacts("cpu", "cpu", "cases that run on the host CPU (any backend)", fallback_rank=6,
                launch_cost_ms=_EAGER_LAUNCH_MS),
    TargetFacts("cuda", "accelerator", "cases that need an NVIDIA GPU (torch.cuda, or ORT's CUDA/TensorRT providers)",
                torch_module="cuda", timer="cuda", fallback_rank=0, launch_cost_ms=0.022, memory_gb=80.0),
    TargetFacts("rocm", "accelerator", "cases that need an AMD GPU through torch's ROCm build",
                torch_module="cuda", timer="cuda", fallback_rank=1, launch_cost_ms=0.025, precisions=("fp32", "fp16", "bf16"), memory_gb=64.0),
    TargetFacts("mps", "accelerator", "cases that need an Apple GPU (torch.backends.mps)",
                torch_module="mps", timer="mps", fallback_rank=3, launch_cost_ms=0.03, precisions=("fp32", "fp16", "bf16"), memory_gb=16.0),
    TargetFacts("xpu", "accelerator", "cases that need an Intel GPU (torch.xpu)",
                torch_module="xpu", timer="xpu", fallback_rank=2, launch_cost_ms=0.025, precisions=("fp32", "fp16", "bf16"), memory_gb=48.0),
    TargetFacts("openvino", "cpu", "cases that run through OpenVINO (any OpenVINO device)", fallback_rank=4, default_backend="openvino", launch_cost_ms=_EAGER_LAUNCH_MS, trains=False),
    # hwsel considers onnxruntime when a question names its backend; one naming none means torch.
    TargetFacts("onnxruntime", "cpu", launch_cost_ms=_EAGER_LAUNCH_MS, trains=False),
    TargetFacts("qnn", "remote", "cases that run on a Qualcomm NPU through Qualcomm AI Hub", fallback_rank=5, default_backend="qai_hub", launch_cost_ms=_EAGER_LAUNCH_MS, precisions=("fp32", "fp16", "int8"), trains=False, memory_gb=8.0),
    TargetFacts("wasm", "web", _WEB_DOC.format("WebAssembly"), host_cpu=True, fallback_rank=9, default_backend="onnxruntime-web",
                launch_cost_ms=_EAGER_LAUNCH_MS, precisions=("fp32",), trains=False, memory_gb=4.0),
    TargetFacts("webgpu", "web", _WEB_DOC.format("WebGPU"), fallback_rank=7, default_backend="onnxruntime-web", launch_cost_ms=0.1, precisions=("fp32", "fp16"), trains=False),
    TargetFacts("webnn", "web", _WEB_DOC.format("WebNN"), fallback_rank=8, default_backend="onnxruntime-web", launch_cost_ms=0.05, precisions=("fp32", "fp16"), trains=False),
)

#: The built-in backends' facts (a backend without a row counts as eager).
BACKENDS: tuple[BackendFacts, ...] = (
    BackendFacts("torch", 1.0),
    BackendFacts("torch-compile", 0.5),
    BackendFacts("torch-compile-ro", 0.05),
    BackendFacts("onnxruntime", 0.2),
    BackendFacts("onnxruntime-trt", 0.2),  # TensorRT engines inside onnxruntime's session
    BackendFacts("openvino", 0.15, counts_as_hardware=True),
    BackendFacts("qai_hub", 0.05),
    BackendFacts("onnxruntime-web", 0.3),
)

_TARGET_ROWS: dict[str, TargetFacts] = {row.name: row for row in TARGETS}
_BACKEND_ROWS: dict[str, BackendFacts] = {row.name: row for row in BACKENDS}


def register_target(row: TargetFacts) -> TargetFacts:
    """Add (or replace) the row of target `row.name`; a probe or backend module calls it at import."""
    if not isinstance(row, TargetFacts):
        raise TypeError(f"register_target takes a TargetFacts row, got {type(row).__name__} {row!r}")
    _TARGET_ROWS[row.name] = row
    return row


def register_backend_facts(row: BackendFacts) -> BackendFacts:
    """Add (or replace) the facts of backend `row.name`; a backend module calls it at import."""
    if not isinstance(row, BackendFacts):
        raise TypeError(f"register_backend_facts takes a BackendFacts row, got {type(row).__name__} {row!r}")
    _BACKEND_ROWS[row.name] = row
    return row


def unregister_target(name: str) -> None:
    """Drop the row of target `name` (a test's own fictional target); unknown names are ignored."""
    _TARGET_ROWS.pop(name, None)


def target_rows() -> tuple[TargetFacts, ...]:
    """Every target row: the built-in ones in their order, then registered ones in the order they came."""
    return tuple(_TARGET_ROWS.values())


def target_facts(name: str) -> TargetFacts:
    """The row of target `name`; KeyError naming the known targets."""
    try:
        return _TARGET_ROWS[name]
    except KeyError:
        raise KeyError(f"no facts for hardware target {name!r}; known: {', '.join(_TARGET_ROWS)} "
                       "(a plug-in declares its target with pytest_hwbench.facts.register_target)") from None


def backend_rows() -> tuple[BackendFacts, ...]:
    """Every backend row, built-in first."""
    return tuple(_BACKEND_ROWS.values())


def backend_facts(name: str) -> BackendFacts:
    """The row of backend `name`, or an eager default row for a backend without one."""
    return _BACKEND_ROWS.get(name) or BackendFacts(name)


# --- derived names: computed from the rows at each call -----------------------------------------


def target_names(kind: str | None = None, *, host_cpu: bool | None = None) -> tuple[str, ...]:
    """The names of the targets of `kind` (all when None), those on the host CPU or not when
    `host_cpu` is set, in table order."""
    return tuple(r.name for r in _TARGET_ROWS.values() if (kind is None or r.kind == kind)
                 and (host_cpu is None or r.on_host_cpu == host_cpu))


def target_set(kind: str | None = None, *, host_cpu: bool | None = None) -> frozenset[str]:
    """`target_names` as a frozen set."""
    return frozenset(target_names(kind, host_cpu=host_cpu))


def marker_docs() -> dict[str, str]:
    """Target marker -> its doc, for the rows that carry one."""
    return {r.name: r.marker_doc for r in _TARGET_ROWS.values() if r.marker_doc}


def torch_modules() -> dict[str, str]:
    """Target -> the ``torch`` submodule that drives it, for the targets torch drives."""
    return {r.name: r.torch_module for r in _TARGET_ROWS.values() if r.torch_module}


def torch_runtimes() -> tuple[str, ...]:
    """The targets torch drives on a device of their own (not the CPU), in table order."""
    return tuple(r.name for r in _TARGET_ROWS.values() if r.torch_module)


def torch_targets() -> tuple[str, ...]:
    """Every target torch runs on: ``cpu``, then the targets a torch module drives; the hardware
    of a torch backend."""
    return ("cpu", *torch_runtimes())


def timer_kinds() -> tuple[str, ...]:
    """Every timer kind a target uses: ``wall`` first, then the torch modules with device events."""
    return tuple(dict.fromkeys(("wall", *(r.timer for r in _TARGET_ROWS.values()))))


def fallback_order() -> tuple[str, ...]:
    """The targets a predictor picks among by default, best first (rows with a `fallback_rank`)."""
    ranked = (r for r in _TARGET_ROWS.values() if r.fallback_rank is not None)
    return tuple(r.name for r in sorted(ranked, key=lambda r: r.fallback_rank or 0))


def launch_cost_ms(target: str) -> float:
    """One operator launch of an eager forward on `target`, in milliseconds (a target without a
    row gets `TargetFacts`'s default)."""
    row = _TARGET_ROWS.get(target)
    return row.launch_cost_ms if row is not None else TargetFacts.launch_cost_ms


def backends_as_hardware() -> tuple[str, ...]:
    """The backends whose records also count as hardware of their name, in table order."""
    return tuple(b.name for b in _BACKEND_ROWS.values() if b.counts_as_hardware)


__all__ = ["BackendFacts", "TargetFacts", "backend_facts", "backends_as_hardware", "backend_rows",
           "fallback_order", "launch_cost_ms", "marker_docs", "register_backend_facts", "register_target",
           "target_facts", "target_names", "target_rows", "target_set", "timer_kinds", "torch_modules",
           "torch_runtimes", "torch_targets", "unregister_target"]
