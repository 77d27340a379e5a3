"""Entry-point groups through which backends, sinks, scenarios, probes and commands register
themselves; ours are listed in ``pyproject.toml`` exactly like a third party's.
"""

from __future__ import annotations

import functools
import warnings
from importlib.metadata import EntryPoints, entry_points
from typing import Generic, TypeVar

from .errors import HwbenchWarning

BACKENDS_GROUP = "pytest_hwbench.backends"
SINKS_GROUP = "pytest_hwbench.sinks"
SCENARIOS_GROUP = "pytest_hwbench.scenarios"
#: Modules that register hardware probes (`pytest_hwbench.hardware.register_probe`).
HARDWARE_GROUP = "pytest_hwbench.hardware"
#: Modules that add `hwbench` subcommands (`pytest_hwbench.cli.register_command`).
COMMANDS_GROUP = "pytest_hwbench.commands"
OWN_DISTRIBUTION = "pytest-hwbench"
#: The import package of `OWN_DISTRIBUTION`: its entry points name modules under it.
OWN_PACKAGE = "pytest_hwbench"


@functools.cache
def _installed_entry_points() -> EntryPoints:
    """Every installed distribution's entry points, read once per process."""
    return entry_points()


def _ours(module: str) -> bool:
    """Whether `module` is in our package: how our entry points and plug-ins are told apart
    (cheaper than asking an entry point for its distribution, which parses its whole metadata)."""
    return module.partition(".")[0] == OWN_PACKAGE


def load_group(group: str, *, kind: str) -> None:
    """Import every module of entry-point `group`: ours first, which must import, then third-party
    ones; one of these that fails is skipped with an `HwbenchWarning` naming it."""
    found = list(_installed_entry_points().select(group=group))
    ours = [ep for ep in found if _ours(ep.module)]
    if not ours:
        raise RuntimeError(
            f"hwbench: no entry points in group {group!r} from {OWN_DISTRIBUTION}: the package is not "
            "installed; run `pip install -e .` in the checkout (or `pip install pytest-hwbench`)"
        )
    for ep in ours:
        ep.load()
    for ep in (ep for ep in found if ep not in ours):
        try:
            ep.load()
        except Exception as exc:  # noqa: BLE001 - a broken plugin names itself, ours still run
            warnings.warn(f"hwbench: could not load {kind} plugin {ep.name!r} ({ep.value}): {exc!r}",
                          HwbenchWarning, stacklevel=2)


T = TypeVar("T")


def implementing(obj: T, protocol: type, base: str, *, source: str = "") -> T:
    """`obj` when it implements `protocol`, else TypeError naming the members (attributes and
    methods of `protocol` and its bases) it lacks, where it came from (`source`, where given) and
    `base`, the public class that gives the members with defaults."""
    if not isinstance(obj, protocol):
        bases = [c for c in protocol.__mro__ if c is not object and c.__name__ not in ("Protocol", "Generic")]
        names = {n for c in bases for n in (*vars(c), *getattr(c, "__annotations__", {})) if n[0] != "_"}
        lacks = ", ".join(sorted(n for n in names if not hasattr(obj, n)))
        culprit = f"{source} gave {obj!r}, which" if source else repr(obj)
        raise TypeError(f"{culprit} does not implement the {protocol.__name__} protocol: it lacks {lacks} "
                        f"(subclass {base} to inherit the members with defaults)")
    return obj


class Registry(Generic[T]):
    """The plugins of one kind by name, filled by `register` as the modules of entry-point
    `group` are imported (`loaded` imports them once); `key` is what their names are called
    (a scenario's is its mode), `kind` by default."""

    def __init__(self, group: str, kind: str, key: str = "") -> None:
        self.group = group
        self.kind = kind
        self.key = key or kind
        self.items: dict[str, T] = {}
        self._loaded = False

    def register(self, name: str, item: T) -> T:
        """Add or replace `name` (a user's plugin may override ours)."""
        self.items[name] = item
        return item

    def has_foreign(self) -> bool:
        """Whether anything but this package adds to the registry: another distribution's entry
        point, or code that registered already (a conftest, a ``-p`` plug-in). Imports nothing."""
        return (any(not _ours(ep.module) for ep in _installed_entry_points().select(group=self.group))
                or any(not _ours(type(item).__module__) for item in self.items.values()))

    def loaded(self) -> dict[str, T]:
        """Every registered plugin, after the group's modules were imported (once; a failed import
        raises again on the next call rather than leave a registry that silently lacks plugins)."""
        if not self._loaded:
            load_group(self.group, kind=self.kind)
            self._loaded = True
        return self.items

    def get(self, name: str) -> T:
        """The plugin registered as `name`; an unknown name lists the known ones."""
        items = self.loaded()
        if name not in items:
            raise KeyError(f"unknown {self.key} {name!r}; known: {', '.join(sorted(items))}")
        return items[name]


__all__ = ["BACKENDS_GROUP", "COMMANDS_GROUP", "HARDWARE_GROUP", "SCENARIOS_GROUP", "SINKS_GROUP", "Registry",
           "implementing", "load_group"]
