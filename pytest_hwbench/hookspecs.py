"""Hooks that pytest-hwbench offers (added in `pytest_addhooks`)."""

from __future__ import annotations

from typing import TYPE_CHECKING

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
def pytest_hwbench_session_finish(config: pytest.Config, session: SessionInfo, exitstatus: int) -> None:
    """Controller or serial process, once: after the last record."""
