"""Entry-point groups through which backends, sinks and scenarios register themselves.

Ours are listed in ``pyproject.toml`` under the same groups a third-party package uses, so base
code names no implementation: loading a group imports each listed module, which calls its
``register_*`` function.
"""

from __future__ import annotations

import warnings
from importlib.metadata import entry_points

from .errors import HwbenchWarning

BACKENDS_GROUP = "pytest_hwbench.backends"
SINKS_GROUP = "pytest_hwbench.sinks"
SCENARIOS_GROUP = "pytest_hwbench.scenarios"
OWN_DISTRIBUTION = "pytest-hwbench"


def load_group(group: str, *, kind: str) -> None:
    """Import every module of entry-point `group`: ours first (in the order ``pyproject.toml``
    lists them), then third-party ones. Ours must import; a third-party one that fails is
    skipped with an `HwbenchWarning` naming it, so it cannot stop the rest."""
    found = list(entry_points(group=group))
    ours = [ep for ep in found if ep.dist is not None and ep.dist.name == OWN_DISTRIBUTION]
    if not ours:
        raise RuntimeError(
            f"hwbench: no entry points in group {group!r} from {OWN_DISTRIBUTION}: the package is not "
            "installed; run `pip install -e .` in the checkout (or `pip install pytest-hwbench`)"
        )
    for ep in ours:
        ep.load()
    for ep in found:
        if ep in ours:
            continue
        try:
            ep.load()
        except Exception as exc:  # noqa: BLE001 - a broken plugin names itself, ours still run
            warnings.warn(f"hwbench: could not load {kind} plugin {ep.name!r} ({ep.value}): {exc!r}",
                          HwbenchWarning, stacklevel=2)


__all__ = ["BACKENDS_GROUP", "SCENARIOS_GROUP", "SINKS_GROUP", "load_group"]
