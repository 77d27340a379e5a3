"""The fixtures: ``hwbench_case`` (the case a test measures) and ``hwbench`` (measures it); the
record rides on the test report, so under pytest-xdist it reaches the controller with it."""

from __future__ import annotations

from collections.abc import Generator
from typing import TYPE_CHECKING, Any

import pytest

from ..case import BenchCase
from ..errors import OutOfMemory, UnsupportedCase
from ..record import BenchmarkRecord
from .state import RECORD_ATTR, STATE, HwbenchState

if TYPE_CHECKING:
    from ..result import CaseResult


@pytest.fixture
def hwbench_case(request: pytest.FixtureRequest) -> BenchCase:
    """The case this test measures (parametrized by the plugin)."""
    return request.param  # type: ignore[no-any-return]


class Hwbench:
    """The ``hwbench`` fixture: measures cases and hands their records on."""

    def __init__(self, state: HwbenchState, request: pytest.FixtureRequest) -> None:
        self._state = state
        self._request = request
        self.result: CaseResult | None = None
        self.record: BenchmarkRecord | None = None

    def measure(self, case: BenchCase) -> CaseResult:
        """Measure `case`; skip when the backend cannot run it here; a crash is a failed record.
        Running out of memory is an outcome: its failed record keeps the error, the test is xfailed."""
        from ..result import failed_record  # the measuring side (numpy, trackers): only when a case runs

        state, node = self._state, self._request.node
        placement = state.placement
        common = {"nodeid": node.nodeid, "worker": placement.worker, "cpu_affinity": placement.cpu_affinity}
        try:
            result = state.runner.run(case, placement.device_index)
        except UnsupportedCase as exc:
            pytest.skip(str(exc))
        except Exception as exc:
            self.record = node.stash[_RECORD] = failed_record(case, state.session_id, exc, **common)
            if isinstance(exc, OutOfMemory):
                pytest.xfail(f"{case.id}: {exc} (recorded as a failed case)")
            raise
        self.result = result
        self.record = node.stash[_RECORD] = result.to_record(state.session_id, **common)
        self._feed_pytest_benchmark(result, self.record)
        return result

    def _feed_pytest_benchmark(self, result: CaseResult, record: BenchmarkRecord) -> None:
        if not self._request.config.pluginmanager.hasplugin("benchmark"):
            return
        bench = self._request.getfixturevalue("benchmark")
        bench.extra_info.update({**record.params(), **{k: v for k, v in record.metrics().items() if v is not None}})
        # The fixture was used, by us: without a mode pytest-benchmark warns "Benchmark fixture was
        # not used at all" for every case when it is disabled (--benchmark-disable, xdist).
        bench._mode = "hwbench"
        if bench.disabled:  # pytest-benchmark turns itself off under xdist (FACTS.md)
            return
        # pytest-benchmark has no public way to take timings measured elsewhere (pedantic() times
        # the call itself); _make_stats is what pedantic uses (pinned to 5.x in pyproject.toml).
        stats = bench._make_stats(1)
        for value in result.latency.values_ms:
            stats.update(value / 1e3)


_RECORD = pytest.StashKey[BenchmarkRecord]()


@pytest.fixture
def hwbench(request: pytest.FixtureRequest) -> Hwbench:
    """Measures benchmark cases: ``hwbench.measure(hwbench_case)``."""
    return Hwbench(request.config.stash[STATE], request)


@pytest.hookimpl(wrapper=True)
def pytest_runtest_makereport(item: pytest.Item, call: pytest.CallInfo[None]) -> Generator[None, Any, Any]:
    report = yield
    if call.when == "call" and _RECORD in item.stash:
        # The report carries the record as a dict (an xdist worker's report travels to the
        # controller as JSON; conftests and report plugins read it).
        setattr(report, RECORD_ATTR, item.stash[_RECORD].to_dict())
    return report


__all__ = ["Hwbench", "hwbench", "hwbench_case", "pytest_runtest_makereport"]
