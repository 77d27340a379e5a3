"""The pytest plugin (entry point ``hwbench`` in group ``pytest11``): options, markers, case
generation, skipping, measurement, record flow. pluggy finds hooks and fixtures as this module's
attributes, so every module-level hook and fixture of the submodules is imported here.
"""

from __future__ import annotations

from .collection import count_matched_cases, pytest_collection_modifyitems, pytest_generate_tests
from .fixtures import hwbench, hwbench_case, pytest_runtest_makereport
from .options import pytest_addhooks, pytest_addoption
from .session import pytest_hwbench_package_versions
from .state import pytest_configure

__all__ = ["count_matched_cases", "hwbench", "hwbench_case", "pytest_addhooks", "pytest_addoption",
           "pytest_collection_modifyitems", "pytest_configure", "pytest_generate_tests",
           "pytest_hwbench_package_versions", "pytest_runtest_makereport"]
