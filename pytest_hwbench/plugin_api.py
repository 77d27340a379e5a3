"""What hwbench's pytest plug-ins need of the base plugin (``pytest11: hwbench``), and all of it:
strict option parsers, the process's role, the case a test item measures, installed versions.
"""

from __future__ import annotations

import contextlib
import math
import sys
from collections.abc import Callable, Iterable
from importlib import metadata
from typing import Any

import pytest

from .backends.base import registered_backends
from .case import BenchCase

#: The name the base plugin registers its per-process state under; present once it configured.
STATE_PLUGIN = "hwbench-state"
#: The fixture (and parameter) through which a test receives its `BenchCase`.
CASE_PARAM = "hwbench_case"
#: Longest a case's timed loop may be asked to run, in seconds (option parsers refuse more).
MAX_CASE_SECONDS = 3600.0


def text_option(option: str, what: str) -> Callable[[str], str]:
    """A parser of one non-empty value (a name, a path, a URI): `pytest.UsageError` naming
    `option` and what to give (`what`) for an empty one."""

    def parse(value: str) -> str:
        if not value.strip():
            raise pytest.UsageError(f"{option}: empty value; give {what}")
        return value.strip()

    return parse


def positive_option(option: str, kind: type, maximum: float | None = None) -> Callable[[str], Any]:
    """A parser of one number >= 0 (and <= `maximum`) of type `kind`, refusing others with a
    `pytest.UsageError` naming `option`, the value and the range."""

    def parse(value: str) -> Any:
        shown = f"0 to {maximum:g}" if maximum is not None else ">= 0"
        try:
            number = kind(value)
        except ValueError:
            raise pytest.UsageError(f"{option}: {value!r} is not a number; accepted: {shown}") from None
        if not math.isfinite(number) or number < 0 or (maximum is not None and number > maximum):
            raise pytest.UsageError(f"{option}: {value!r} is out of range; accepted: {shown}")
        return number

    return parse


def is_worker(config: pytest.Config) -> bool:
    """Whether this process is a pytest-xdist worker (it measures; the controller writes)."""
    return hasattr(config, "workerinput")


def writes_records(config: pytest.Config) -> bool:
    """Whether this process is the one whose records go to the stores: the base plugin is active
    here (it configured its state) and this is the controller or a serial process."""
    return config.pluginmanager.has_plugin(STATE_PLUGIN) and not is_worker(config)


def case_of(item: pytest.Item) -> BenchCase | None:
    """The case `item` measures, or None for other tests."""
    callspec = getattr(item, "callspec", None)
    case = callspec.params.get(CASE_PARAM) if callspec else None
    return case if isinstance(case, BenchCase) else None


def terminal_line(config: pytest.Config, line: str, **markup: bool) -> None:
    """Write `line` on the terminal now, on a line of its own after pytest's progress dots, also from
    inside a test (capture suspended); on stderr where pytest has no terminal (``-p no:terminal``)."""
    capman = config.pluginmanager.getplugin("capturemanager")
    with capman.global_and_fixture_disabled() if capman is not None else contextlib.nullcontext():
        reporter = config.pluginmanager.get_plugin("terminalreporter")
        if reporter is None:
            print(line, file=sys.stderr, flush=True)
            return
        if reporter._tw.width_of_current_line:
            reporter._tw.line()
        reporter.write_line(line, **markup)


def installed_versions(distributions: Iterable[str]) -> dict[str, str]:
    """distribution -> version, for those of `distributions` that are installed."""
    out = {}
    for dist in distributions:
        with contextlib.suppress(metadata.PackageNotFoundError):
            out[dist] = metadata.version(dist)
    return out


#: Distributions every session reports, whatever runs.
CORE_DISTRIBUTIONS = ("pytest-hwbench", "torch", "transformers", "pytest", "pytest-benchmark", "pytest-xdist")


def core_versions() -> dict[str, str]:
    """The versions every session reports: `CORE_DISTRIBUTIONS` and each registered backend's
    distributions, as installed in this interpreter."""
    return installed_versions(dict.fromkeys(
        [*CORE_DISTRIBUTIONS, *(d for b in registered_backends().values() for d in b.distributions)]))


__all__ = ["CASE_PARAM", "CORE_DISTRIBUTIONS", "MAX_CASE_SECONDS", "STATE_PLUGIN", "case_of", "core_versions",
           "installed_versions", "is_worker",
           "positive_option", "terminal_line", "text_option", "writes_records"]
