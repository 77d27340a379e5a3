"""The pytest plugin (entry point ``hwbench`` in group ``pytest11``): options, markers, case
generation, skipping, measurement, record flow.

A test that asks for the ``hwbench_case`` fixture is parametrized over models x backends x
hardware x precisions x batch sizes (x modes, new tokens, input lengths); the ``hwbench``
fixture measures a case. Each finished case becomes a `BenchmarkRecord` attached to its test
report, so under pytest-xdist it streams to the controller with the report, and
`pytest_hwbench_record` fires there (or in the serial process).

pytest registers this module object and pluggy looks hooks and fixtures up as its attributes,
so every module-level hook and fixture of the submodules is imported here.
"""

from __future__ import annotations

from .collection import count_matched_cases, pytest_collection_modifyitems, pytest_generate_tests
from .fixtures import Hwbench, hwbench, hwbench_case, pytest_runtest_makereport
from .grid import Selection, case_from_id, generate_cases, hardware_targets
from .options import pytest_addhooks, pytest_addoption
from .progress import Progress
from .session import pytest_hwbench_package_versions
from .state import HwbenchState, pytest_configure

__all__ = [
    "Hwbench",
    "HwbenchState",
    "Progress",
    "Selection",
    "case_from_id",
    "count_matched_cases",
    "generate_cases",
    "hardware_targets",
    "hwbench",
    "hwbench_case",
    "pytest_addhooks",
    "pytest_addoption",
    "pytest_collection_modifyitems",
    "pytest_configure",
    "pytest_generate_tests",
    "pytest_hwbench_package_versions",
    "pytest_runtest_makereport",
]
