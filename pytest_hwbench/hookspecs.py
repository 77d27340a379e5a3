"""Hooks the base plugin calls (added in its `pytest_addhooks`).

A plug-in declares the hooks that only it calls in its own ``pytest_addhooks``, as pytest-xdist
does with its ``newhooks`` module; this module names no plug-in, nor a plug-in's types.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

import pytest

if TYPE_CHECKING:
    from .case import BenchCase
    from .record import BenchmarkRecord, SessionInfo


@pytest.hookspec
def pytest_hwbench_modify_cases(config: pytest.Config, cases: list[BenchCase]) -> None:
    """Worker or serial process, at collection: filter or reorder `cases` in place."""


@pytest.hookspec
def pytest_hwbench_session_start(config: pytest.Config, session: SessionInfo) -> None:
    """Controller or serial process, once: the session's info before the first case."""


@pytest.hookspec
def pytest_hwbench_record(config: pytest.Config, record: BenchmarkRecord) -> None:
    """Controller or serial process, as each case ends: its finished record (passed or failed)."""


@pytest.hookspec
def pytest_hwbench_timing_starts(config: pytest.Config, case: BenchCase) -> None:
    """The process that measures, just before each timed window of `case` (once per try): a
    plug-in whose own work must not overlap the timing (a sink writer) finishes or pauses it here."""


@pytest.hookspec
def pytest_hwbench_timing_ends(config: pytest.Config, case: BenchCase) -> None:
    """The process that measures, just after each timed window of `case` (also when it failed)."""


@pytest.hookspec
def pytest_hwbench_session_finish(config: pytest.Config, session: SessionInfo, exitstatus: int) -> None:
    """Controller or serial process, once: after the last record."""


@pytest.hookspec
def pytest_hwbench_terminal_summary(config: pytest.Config, terminalreporter: Any) -> None:
    """Controller or serial process, at the very end of the console output: lines a plug-in adds
    under the run's hwbench summary (e.g. where the records went), after every other summary."""


@pytest.hookspec
def pytest_hwbench_package_versions(config: pytest.Config) -> dict[str, str]:
    """Controller or serial process, once: distribution -> version for the session's info. The
    answers are merged into one mapping, ours winning where several name one distribution (ours:
    the core packages and each backend's `Backend.distributions`)."""
