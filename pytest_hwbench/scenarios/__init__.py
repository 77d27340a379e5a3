"""Scenarios: what one timed iteration of a case does, by mode (``inference``, ``generate``,
``train``, or a third party's). Each `Scenario` registers itself (``pytest_hwbench.scenarios``
entry points) and loads its model as a `LoadedModel`, so the runner treats every mode alike.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any, ClassVar, Protocol, runtime_checkable

from .._plugins import SCENARIOS_GROUP, Registry, implementing
from ..vocabulary import DEFAULT_MODE, TOKEN_MODES

if TYPE_CHECKING:
    from ..backends.base import LoadedModel
    from ..hardware import HardwareInfo
    from ..models import ModelSpec

#: mode -> scenario, filled by `register_scenario` as the entry-point modules are imported.
SCENARIOS: Registry[Scenario] = Registry(SCENARIOS_GROUP, "scenario", key="mode")


@runtime_checkable
class Scenario(Protocol):
    """What a mode provides (``inference``, ``generate``, ``train``, or a third party's); a scenario
    that subclasses `Scenario` inherits the members with a default."""

    #: The mode's name: the `BenchCase.mode` and the pytest marker.
    mode: str
    #: Backends the mode runs on (e.g. ``("torch",)``); other backends get no case.
    backends: tuple[str, ...]
    #: One line for the mode's pytest marker.
    description: str
    #: Precisions the mode runs at somewhere.
    precisions: tuple[str, ...]
    #: Case options the mode takes (``("new_tokens",)`` for generate), passed to `load`.
    options: ClassVar[tuple[str, ...]] = ()
    #: FLOPs of one timed iteration, in forward passes (a training step is about 3); None where
    #: no single figure holds (generate), and the record then has no achieved TFLOP/s.
    forwards_per_iteration: ClassVar[float | None] = 1.0

    def supports(self, spec: ModelSpec) -> bool:
        """Whether cases of this mode are generated for `spec` at all (e.g. generate: decoders)."""
        ...

    def unavailable(self, spec: ModelSpec, backend: str, hardware: str, precision: str,
                    hw: HardwareInfo) -> str | None:
        """None when the case can run here, else a skip reason naming what is missing."""
        ...

    def load(self, spec: ModelSpec, hardware: str, precision: str, device_index: int = 0, *,
             backend: str = "torch", **options: Any) -> LoadedModel:
        """Build the model for this mode on the case's `backend` (one of `backends`) with the case's
        mode `options` (e.g. ``new_tokens``); ``LoadedModel.prepare(inputs)`` returns the call one
        timed iteration runs, which may be `MeasuresMore` (e.g. time to first token)."""
        ...


def register_scenario(scenario: Scenario) -> Scenario:
    """Add a mode (called by each scenario module at import; a third party's too)."""
    implementing(scenario, Scenario, "pytest_hwbench.Scenario")
    if "new_tokens" in scenario.options:
        TOKEN_MODES.add(scenario.mode)
    return SCENARIOS.register(scenario.mode, scenario)


def registered_scenarios() -> dict[str, Scenario]:
    """Every scenario by mode, ours and the entry-point group's, imported once; the default
    mode (`DEFAULT_MODE`) comes first."""
    scenarios = SCENARIOS.loaded()
    return {mode: scenarios[mode] for mode in dict.fromkeys([DEFAULT_MODE, *scenarios]) if mode in scenarios}


def registered_modes() -> tuple[str, ...]:
    """The modes a case may have, the default first."""
    return tuple(registered_scenarios())


def get_scenario(mode: str) -> Scenario:
    """The scenario of `mode`; an unknown mode lists the known ones."""
    return SCENARIOS.get(mode)


__all__ = ["DEFAULT_MODE", "Scenario", "get_scenario", "register_scenario",
           "registered_modes", "registered_scenarios"]
