"""The package face: light modules load no backend, runner or torch (issue 11, part 2)."""

from __future__ import annotations

import subprocess
import sys

import pytest

HEAVY = ("torch", "pytest_hwbench.backends", "pytest_hwbench.runner", "pytest_hwbench.scenarios",
         "pytest_hwbench.trackers")


@pytest.mark.parametrize("module", ["pytest_hwbench", "pytest_hwbench.record", "pytest_hwbench.errors"])
def test_importing_a_light_module_loads_nothing_heavy(module):
    code = (f"import sys, {module}; "
            f"print(sorted(m for m in sys.modules if m.startswith({HEAVY!r})))")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True).stdout
    assert out.strip() == "[]", out


def test_public_names_resolve_on_first_use():
    import pytest_hwbench

    for name in pytest_hwbench.__all__:
        assert getattr(pytest_hwbench, name) is not None, name
    assert sorted(dir(pytest_hwbench)) == sorted(pytest_hwbench.__all__)
    with pytest.raises(AttributeError, match="no attribute 'Nope'"):
        pytest_hwbench.Nope  # noqa: B018
