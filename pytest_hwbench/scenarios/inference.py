"""The ``inference`` scenario: one forward pass per iteration, through any registered backend,
which does all the work; the scenario makes inference a mode like the others.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from ..backends.base import get_backend, registered_backends
from ..vocabulary import MODE_DOCS, PRECISIONS
from . import DEFAULT_MODE, Scenario, register_scenario

if TYPE_CHECKING:
    from ..backends.base import LoadedModel
    from ..hardware import HardwareInfo
    from ..models import ModelSpec


class InferenceScenario(Scenario):
    """Forward passes, on every backend at every precision a backend offers."""

    mode = DEFAULT_MODE
    description = MODE_DOCS["inference"]
    precisions: tuple[str, ...] = PRECISIONS

    @property
    def backends(self) -> tuple[str, ...]:
        return tuple(registered_backends())

    def supports(self, spec: ModelSpec) -> bool:
        return True

    def unavailable(self, spec: ModelSpec, backend: str, hardware: str, precision: str,
                    hw: HardwareInfo) -> str | None:
        return None  # the backend's own reasons are asked for every mode (`BenchCase.unavailable`)

    def load(self, spec: ModelSpec, hardware: str, precision: str, device_index: int = 0, *,
             backend: str = "torch", **options: Any) -> LoadedModel:
        return get_backend(backend).load(spec, hardware, precision, device_index)


SCENARIO = register_scenario(InferenceScenario())

__all__ = ["SCENARIO", "InferenceScenario"]
