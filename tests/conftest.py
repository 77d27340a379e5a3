"""Shared test set-up.

The ``pytester`` fixture snapshots ``sys.modules`` and restores it afterwards, dropping modules
first imported during the test. mlflow and sqlalchemy imported first inside such a run lose
their submodules when the run ends ("cannot import name 'MlflowClient'", "'InternalTraversal'
object is not callable", matplotlib's "Legend needs either Axes or FigureBase as parent" in later
tests). duckdb's and pyarrow's compiled extensions cannot be
initialised twice in one process (a second import aborts the interpreter), and pandas modules
imported twice give two copies of its array classes (``AssertionError: ArrowStringArray`` when
a DuckDB result becomes a frame). Importing them here, before any snapshot, keeps one copy.
"""

import socket
from collections.abc import Iterator
from pathlib import Path

import duckdb  # noqa: F401
import matplotlib.backends.backend_agg  # noqa: F401  (the report's figures: one copy of Axes, Legend...)
import matplotlib.figure  # noqa: F401
import mlflow.store.tracking.sqlalchemy_store  # noqa: F401  (and with it sqlalchemy)
import mlflow.tracking  # noqa: F401  (dropped submodules: "cannot import name 'MlflowClient'" later)
import pandas  # noqa: F401
import pyarrow  # noqa: F401
import pytest

duckdb.connect().execute("SELECT 'x' AS s").df()  # pulls in pandas' Arrow-backed string arrays

pytest_plugins = ["pytester"]

#: Fixtures that start another process (a nested measured pytest session, a CLI, a server, a
#: browser) or train a predictor: a test that uses one belongs to the end-to-end tier (`e2e`).
E2E_FIXTURES = frozenset({
    "pytester", "bench", "team_server", "team_experiment", "filled_store", "servers", "lock_holder",
    "guarded_server", "secret_server", "small_runs", "compiled", "compiled_generate", "other_venv", "driver",
    "spinner", "site", "trained", "snapshot_runs", "runs", "registry", "registry_uri",
})


def pytest_configure(config: pytest.Config) -> None:
    config.addinivalue_line(
        "markers", "e2e: an end-to-end test (another process, a server, a browser or a trained predictor); "
                   "`pytest tests` leaves them out, `pytest tests -m e2e` runs them, `-m ''` runs every test")


#: The xdist group of the tests whose verdicts rest on how fast the machine measures (a planted
#: slowdown, a busy host): `--dist loadgroup` runs them one after another on one worker.
TIMING_GROUP = "timing"


@pytest.hookimpl(tryfirst=True)  # before -m deselects by marker and before xdist reads the groups
def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    for item in items:
        if E2E_FIXTURES & set(getattr(item, "fixturenames", ())):
            item.add_marker(pytest.mark.e2e)
        # Under `--dist loadgroup` a module's tests stay on one worker (its module-scoped servers
        # and sessions are paid once) unless the test names its group.
        if item.get_closest_marker("xdist_group") is None:
            item.add_marker(pytest.mark.xdist_group(item.module.__name__ if item.module else item.nodeid))


@pytest.fixture(autouse=True)
def _not_an_xdist_worker(monkeypatch: pytest.MonkeyPatch) -> None:
    """Nested sessions and commands are not xdist workers, although this test may run in one
    (pytest-benchmark reads ``PYTEST_XDIST_WORKER`` and saves no JSON on a worker other than gw0)."""
    for name in ("PYTEST_XDIST_WORKER", "PYTEST_XDIST_WORKER_COUNT", "PYTEST_XDIST_TESTRUNUID"):
        monkeypatch.delenv(name, raising=False)


def pytest_report_header(config: pytest.Config) -> str:
    expr = config.option.markexpr
    if expr == "not e2e":
        return ("tiers: the fast tier (-m 'not e2e', the default); `pytest tests -m e2e` runs the end-to-end tier, "
                "`pytest tests -m ''` every test")
    return f"tiers: -m {expr!r}" if expr else "tiers: every test"

# The PostgreSQL-backed team server, one per test session for every module that asks for it.
from _postgres import team_experiment, team_server  # noqa: E402, F401


@pytest.fixture
def empty_cwd(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Iterator[Path]:
    """A working directory with no store, and no store or hwsel config named by the environment."""
    monkeypatch.chdir(tmp_path)
    monkeypatch.delenv("MLFLOW_TRACKING_URI", raising=False)
    monkeypatch.delenv("HWSEL_CONFIG", raising=False)
    yield tmp_path


@pytest.fixture
def silent_port() -> Iterator[int]:
    """A port on 127.0.0.1 that accepts connections and never answers (a hung server)."""
    sock = socket.socket()
    sock.bind(("127.0.0.1", 0))
    sock.listen(16)
    try:
        yield int(sock.getsockname()[1])
    finally:
        sock.close()
