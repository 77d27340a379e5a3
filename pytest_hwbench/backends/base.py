"""The backend protocol, the loaded model and the backend registry: a backend turns a
`ModelSpec` into a `LoadedModel` on one hardware target at one precision; each backend module
registers itself (`register_backend`) and is listed in the ``pytest_hwbench.backends`` group."""

from __future__ import annotations

from collections.abc import Callable, Mapping
from dataclasses import dataclass, field, fields
from typing import Any, ClassVar, Protocol, runtime_checkable

from .._plugins import BACKENDS_GROUP, Registry, implementing
from ..hardware import HardwareInfo
from ..models import ModelSpec
from ..trackers import LocalCall, MeasuredElsewhere, Measurement, MeasuresMore, RemoteCall, RemoteMeasurement


@dataclass(frozen=True)
class LoadedModel:
    """A model ready to run on one device at one precision; a backend subclasses it and
    implements `prepare` (the other methods have defaults).

    `precision` is the one read back from the runtime; `timer` a timer kind
    (`pytest_hwbench.facts.timer_kinds`); `threads` its intra-op threads (None: no such setting);
    `details` go into the record's extra (entries named as record metrics become those metrics).
    """

    precision: str
    device_name: str
    device_kind: str = "cpu"
    device_index: int = 0
    threads: int | None = None
    details: dict[str, Any] = field(default_factory=dict)
    timer: str = "wall"

    def prepare(self, inputs: dict[str, Any]) -> Callable[[], Any]:
        """A zero-argument call that runs one iteration on `inputs` (torch tensors from the zoo's
        input factory), moved and cast as the runtime needs them."""
        raise NotImplementedError(f"{type(self).__name__} must implement prepare(inputs) -> a zero-argument call")

    def measurement(self, inputs: dict[str, Any], foreign_mb: float | None = None) -> Measurement:
        """How the runner measures the call `prepare(inputs)` gives: a `RemoteCall` of a
        `MeasuredElsewhere` call, else a `LocalCall` with this model's timer and sync (and a
        `MeasuresMore` call's `measure_more`). `foreign_mb` is device memory in use that this
        model does not own (kept out of its peak)."""
        call = self.prepare(inputs)
        if isinstance(call, MeasuredElsewhere):
            return RemoteCall(call)
        more = call.measure_more if isinstance(call, MeasuresMore) else None
        return LocalCall(call, self.sync, self.timer, self.device_kind, self.device_index, foreign_mb, more)

    def sync(self) -> None:
        """Wait until the device finished the work queued so far (nothing to wait for by default)."""
        return None

    def close(self) -> None:
        """Release the model (the runner then collects garbage and empties the device's cache)."""
        return None

    def set_threads(self, count: int) -> int | None:
        """Set the intra-op threads of later calls to `count` and return the count now in effect;
        None where the runtime fixes its threads at load (the default)."""
        return None

    def own_pids(self) -> tuple[int, ...]:
        """Processes besides this one that do the model's work (e.g. a browser): their CPU time
        is the case's own, not interference from other processes."""
        return ()


@dataclass(frozen=True, kw_only=True)
class WrappedModel(LoadedModel):
    """`inner` (another backend's loaded model) with each call it prepares passed through
    `wrap`, and everything else `inner`'s; build one with `WrappedModel.around`."""

    inner: LoadedModel
    wrap: Callable[[Callable[[], Any]], Callable[[], Any]]

    @classmethod
    def around(cls, inner: LoadedModel, wrap: Callable[[Callable[[], Any]], Callable[[], Any]]) -> WrappedModel:
        """`inner` with its prepared calls passed through `wrap`."""
        return cls(**{f.name: getattr(inner, f.name) for f in fields(LoadedModel)}, inner=inner, wrap=wrap)

    def prepare(self, inputs: dict[str, Any]) -> Callable[[], Any]:
        return self.wrap(self.inner.prepare(inputs))

    def sync(self) -> None:
        self.inner.sync()

    def close(self) -> None:
        self.inner.close()

    def set_threads(self, count: int) -> int | None:
        return self.inner.set_threads(count)

    def own_pids(self) -> tuple[int, ...]:
        return self.inner.own_pids()


@dataclass(frozen=True, kw_only=True)
class FedModel(LoadedModel):
    """A runtime's session whose `prepare` is `feed`: inputs in, the zero-argument call out."""

    feed: Callable[[dict[str, Any]], Callable[[], Any]]

    def prepare(self, inputs: dict[str, Any]) -> Callable[[], Any]:
        return self.feed(inputs)


@runtime_checkable
class Backend(Protocol):
    """What every backend provides; the members with a default are optional (a subclass of
    `Backend` inherits them)."""

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

    def detects(self, hardware: str) -> tuple[str, ...]:
        """The targets whose detection `default_precisions` and `unavailable` read for a case on
        `hardware` (the `HardwareInfo` they get holds these): `hardware` itself by default."""
        return (hardware,)

    def markers(self, hardware: str) -> tuple[str, ...]:
        """pytest markers for a case on `hardware` (the hardware marker, and e.g. ``openvino``):
        the hardware marker alone by default."""
        return (hardware,)

    def default_precisions(self, hardware: str, hw: HardwareInfo) -> tuple[str, ...]:
        """Precisions to run by default here: fp32 plus those the hardware runs natively."""
        ...

    def unavailable(self, hardware: str, precision: str, hw: HardwareInfo) -> str | None:
        """None when the case can run here, else a skip reason naming what is missing."""
        ...

    def load(self, spec: ModelSpec, hardware: str, precision: str, device_index: int = 0) -> LoadedModel:
        """Build, convert and load the model for a case that `unavailable` passed (callers ask it
        first); raise `UnsupportedCase` for a known gap."""
        ...


#: name -> backend, filled by `register_backend` as the entry-point modules are imported.
BACKENDS: Registry[Backend] = Registry(BACKENDS_GROUP, "backend")


def register_backend(backend: Backend) -> Backend:
    """Add a backend (called by each backend module at import)."""
    return BACKENDS.register(backend.name, implementing(backend, Backend, "pytest_hwbench.Backend"))


def registered_backends() -> dict[str, Backend]:
    """All backends by name: ours and the entry-point group's, imported once."""
    # By name: the order modules happened to be imported in (a scenario imports the backends it
    # builds on) must not reorder the grid.
    return dict(sorted(BACKENDS.loaded().items()))


def get_backend(name: str) -> Backend:
    """The backend named `name`; an unknown name lists the known ones."""
    return BACKENDS.get(name)


__all__ = ["Backend", "LoadedModel", "MeasuredElsewhere", "Measurement", "RemoteMeasurement",
           "get_backend", "register_backend", "registered_backends"]
