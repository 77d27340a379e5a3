"""The backend protocol and registry.

A backend turns a `ModelSpec` into a `LoadedModel` on one hardware target at one precision.
Base code never names an implementation: each backend module calls `register_backend` on
import, and every backend module, ours included, is listed in the ``pytest_hwbench.backends``
entry-point group (see `pytest_hwbench._plugins`).
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, ClassVar, Protocol, runtime_checkable

from .._plugins import BACKENDS_GROUP, Registry, missing_members
from ..hardware import HardwareInfo
from ..models import ModelSpec

if TYPE_CHECKING:
    from ..trackers import TimingConfig

ENTRY_POINT_GROUP = BACKENDS_GROUP


@dataclass
class LoadedModel:
    """A model ready to run on one device at one precision.

    `precision` is read back from the runtime after loading: the precision that will run.
    `prepare(inputs)` turns torch tensors from the zoo's input factory into a zero-argument
    call that runs one forward; `sync()` waits for the device; `timer` picks the tracker.
    """

    precision: str
    device_name: str
    prepare: Callable[[dict[str, Any]], Callable[[], Any]]
    sync: Callable[[], None] = lambda: None
    timer: str = "wall"
    device_kind: str = "cpu"
    device_index: int = 0
    threads: int | None = None
    close: Callable[[], None] = lambda: None
    details: dict[str, Any] | None = None
    #: Sets the intra-op threads of later calls and returns the count now in effect (the runner
    #: sizes a retry to the cores other processes left free); None where the runtime fixes its
    #: threads at load.
    set_threads: Callable[[int], int] | None = None
    #: Processes besides this one that do the model's work (e.g. a browser): their CPU time is
    #: the case's own, not interference from other processes.
    own_pids: Callable[[], tuple[int, ...]] = lambda: ()


@dataclass(frozen=True)
class RemoteMeasurement:
    """What a call timed outside this process's loop measured (`MeasuredElsewhere`).

    `cold_latency_ms` defaults to the first timing; `details` go into the record's extra;
    `on_this_host` says whether the measuring process shares this machine (a browser page: its
    interference is judged as the case's) or not (a cloud device: this machine's load says
    nothing of it, and the record carries no noise verdict).
    """

    timings_ms: tuple[float, ...]
    cold_latency_ms: float | None = None
    peak_device_memory_mb: float | None = None
    details: Mapping[str, Any] = field(default_factory=dict)
    on_this_host: bool = True


@runtime_checkable
class MeasuredElsewhere(Protocol):
    """A prepared call that another process or machine times (timer ``"remote"``): a browser
    page, a cloud device. The runner calls `measure_remote` instead of its own timed loop."""

    def __call__(self) -> Any: ...

    def measure_remote(self, timing: TimingConfig) -> RemoteMeasurement:
        """Measure under `timing` (or report what was measured already) and say where."""
        ...


@runtime_checkable
class Backend(Protocol):
    """What every backend provides (a module-level object or class instance).

    The members with a default are optional: a backend that subclasses `Backend` inherits them.
    """

    #: Short name used in case ids and `--hwbench-backends` (``torch``, ``onnxruntime``...).
    name: str
    #: Hardware targets the backend can address (``cpu``, ``cuda``...).
    hardware: tuple[str, ...]
    #: Precisions the backend can run somewhere.
    precisions: tuple[str, ...]
    #: Hardware whose cases the default grid leaves out; they run when the backend is named
    #: (``--hwbench-backends`` or the hwbench marker), e.g. torch.compile on the CPU.
    opt_in_hardware: ClassVar[tuple[str, ...]] = ()
    #: Docs of pytest markers of its own (registered by the plugin), marker -> one line.
    marker_docs: ClassVar[Mapping[str, str]] = {}
    #: Distributions it runs on, whose versions each session records (``("onnxruntime",)``).
    distributions: ClassVar[tuple[str, ...]] = ()

    def shutdown(self) -> None:
        """Called once at session end to end process-wide resources (e.g. a browser)."""
        return None

    def markers(self, hardware: str) -> tuple[str, ...]:
        """pytest markers for a case on `hardware` (the hardware marker, and e.g. ``openvino``)."""
        ...

    def default_precisions(self, hardware: str, hw: HardwareInfo) -> tuple[str, ...]:
        """Precisions to run by default here: fp32 plus those the hardware runs natively."""
        ...

    def unavailable(self, hardware: str, precision: str, hw: HardwareInfo) -> str | None:
        """None when the case can run here, else a skip reason naming what is missing."""
        ...

    def load(self, spec: ModelSpec, hardware: str, precision: str, device_index: int = 0) -> LoadedModel:
        """Build, convert and load the model; raise `UnsupportedCase` for a known gap."""
        ...


_BACKENDS: Registry[Backend] = Registry(BACKENDS_GROUP, "backend")
_REGISTRY = _BACKENDS.items


def register_backend(backend: Backend) -> Backend:
    """Add a backend (called by each backend module at import)."""
    if not isinstance(backend, Backend):
        raise TypeError(f"{backend!r} does not implement the Backend protocol: it lacks "
                        f"{', '.join(missing_members(backend, Backend))} (subclass pytest_hwbench.Backend to inherit "
                        "the members with defaults)")
    return _BACKENDS.register(backend.name, backend)


def registered_backends() -> dict[str, Backend]:
    """All backends by name: ours and the entry-point group's, imported once."""
    # By name: the order modules happened to be imported in (a scenario imports the backends it
    # builds on) must not reorder the grid.
    return dict(sorted(_BACKENDS.loaded().items()))


def get_backend(name: str) -> Backend:
    """The backend named `name`; an unknown name lists the known ones."""
    backends = registered_backends()
    try:
        return backends[name]
    except KeyError:
        raise KeyError(f"unknown backend {name!r}; known: {', '.join(sorted(backends))}") from None


__all__ = ["Backend", "LoadedModel", "MeasuredElsewhere", "RemoteMeasurement", "get_backend", "register_backend", "registered_backends"]
