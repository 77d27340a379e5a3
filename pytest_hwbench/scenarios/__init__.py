"""Scenarios: what one timed iteration of a case does, by mode.

``inference`` (one forward through a backend) is the runner's own path. Every other mode is a
`Scenario`: ``generate`` (one ``generate()`` call of fixed length, plus time to first token and
per-token decode; eager, or with the decode step compiled on the torch.compile backends) and
``train`` (one optimizer step). A scenario loads its own model, as a mode needs a different
model from inference (an LM head, trainable fp32 weights under autocast), and returns a
`LoadedModel`, so caching, the timed loop and memory tracking are the runner's, the same for
every mode.
"""

from __future__ import annotations

import importlib
from typing import TYPE_CHECKING, Any, Protocol, runtime_checkable

if TYPE_CHECKING:
    from ..backends.base import LoadedModel
    from ..hardware import HardwareInfo
    from ..models import ModelSpec
    from ..trackers import Latency, LatencyTracker, TimingConfig

#: mode -> module that defines ``SCENARIO``. ``inference`` has none: it is the backends' own path.
SCENARIO_MODULES: dict[str, str] = {
    "generate": "pytest_hwbench.scenarios.generate",
    "train": "pytest_hwbench.scenarios.train",
}


@runtime_checkable
class Scenario(Protocol):
    """What a mode other than inference provides."""

    #: The mode's name (``generate``, ``train``): the `BenchCase.mode` and the pytest marker.
    mode: str
    #: Backends the mode runs on (e.g. ``("torch",)``); other backends skip with a reason.
    backends: tuple[str, ...]
    #: Precisions the mode runs at somewhere.
    precisions: tuple[str, ...]

    def supports(self, spec: ModelSpec) -> bool:
        """Whether cases of this mode are generated for `spec` at all (e.g. generate: decoders)."""
        ...

    def unavailable(self, spec: ModelSpec, backend: str, hardware: str, precision: str,
                    hw: HardwareInfo) -> str | None:
        """None when the case can run here, else a skip reason naming what is missing."""
        ...

    def load(self, spec: ModelSpec, hardware: str, precision: str, device_index: int = 0, *,
             backend: str = "torch", **options: Any) -> LoadedModel:
        """Build the model for this mode. `backend` is the case's, one of `backends` (e.g.
        generate compiles its decode step on ``torch-compile``); `options` are the case's mode
        options (e.g. ``new_tokens``). ``LoadedModel.prepare(inputs)`` returns the call that one
        timed iteration runs; if that call has a ``measure_more(tracker, timing, latency)``
        method (see `MeasuresMore`), the runner calls it after the timed loop for extra metrics."""
        ...


@runtime_checkable
class MeasuresMore(Protocol):
    """A prepared call that measures more than its own latency (e.g. time to first token)."""

    def __call__(self) -> Any: ...

    def measure_more(self, tracker: LatencyTracker, timing: TimingConfig, latency: Latency) -> dict[str, float]:
        """Metrics named as `BenchmarkRecord` fields, measured after the timed loop."""
        ...


def get_scenario(mode: str) -> Scenario:
    """The scenario of `mode`; an unknown mode lists the known ones (``inference`` has none)."""
    try:
        module = SCENARIO_MODULES[mode]
    except KeyError:
        known = ", ".join(sorted(SCENARIO_MODULES))
        raise KeyError(f"mode {mode!r} has no scenario; scenarios exist for {known} "
                       "(inference runs through the backends)") from None
    return importlib.import_module(module).SCENARIO  # type: ignore[no-any-return]


__all__ = ["SCENARIO_MODULES", "MeasuresMore", "Scenario", "get_scenario"]
