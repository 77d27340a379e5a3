"""The recording plug-in (``pytest11: hwbench-recording``): the default sinks through
``pytest_hwbench_default_sinks``, ``--hwbench-sink`` next to them, and turning recording off."""

from __future__ import annotations

import json
import sqlite3
from pathlib import Path

import pytest

from pytest_hwbench.sinks import load_results

#: Every test here starts another process, a server or a training: the end-to-end tier.
pytestmark = pytest.mark.e2e

TEST = """
import pytest

@pytest.mark.hwbench(models=["bert-tiny"], hardware=["cpu"], backends=["torch"], batch_sizes=[1], precisions=["fp32"])
def test_case(hwbench_case, hwbench):
    hwbench.measure(hwbench_case)
"""
FAST = ("-p", "no:cacheprovider", "--hwbench-min-time", "0", "--hwbench-min-iterations", "2",
        "--hwbench-warmup", "0", "--hwbench-noise-retries", "0")

#: A conftest whose sinks replace MLflow and DuckDB: records go to a JSON-lines file.
CONFTEST = """
import json
from pathlib import Path

from pytest_hwbench.sinks import Sink

OUT = Path(__file__).parent / "records.jsonl"


class Lines(Sink):
    name = "lines"

    def open_session(self, session):
        pass

    def write(self, records):
        with OUT.open("a") as f:
            for record in records:
                f.write(json.dumps(record.to_dict()) + "\\n")

    def existing_ids(self, record_ids):
        return set()

    def close(self, status):
        pass


class Bare:  # the required members only: no where(), no browse()
    name = "bare"


def pytest_hwbench_default_sinks(config, tracking):
    return [Bare()] if config.getoption("--bare", False) else [Lines()]


def pytest_addoption(parser):
    parser.addoption("--bare", action="store_true")
"""


def _experiments(db: Path) -> list[str]:
    with sqlite3.connect(db) as con:
        return [row[0] for row in con.execute("select name from experiments where name != 'Default'")]


def test_an_extra_mlflow_sink_logs_to_the_sessions_experiment(pytester: pytest.Pytester, tmp_path: Path) -> None:
    pytester.makepyfile(test_one=TEST)
    extra = tmp_path / "extra" / "mlflow.db"
    extra.parent.mkdir()
    result = pytester.runpytest_subprocess(*FAST, "--hwbench-store", str(tmp_path / "store"),
                                           "--hwbench-experiment", "myexp", "--hwbench-sink", f"mlflow:sqlite:///{extra}",
                                           timeout=300)
    result.assert_outcomes(passed=1)
    assert _experiments(tmp_path / "store" / "mlflow.db") == ["myexp"]
    assert _experiments(extra) == ["myexp"]


def test_a_conftest_replaces_the_default_sinks_and_the_spool_stays(pytester: pytest.Pytester, tmp_path: Path) -> None:
    pytester.makeconftest(CONFTEST)
    pytester.makepyfile(test_one=TEST)
    store = tmp_path / "store"
    result = pytester.runpytest_subprocess(*FAST, "--hwbench-store", str(store), timeout=300)
    result.assert_outcomes(passed=1)
    (line,) = (pytester.path / "records.jsonl").read_text().splitlines()
    assert json.loads(line)["case_id"] == "bert-tiny-cpu-torch-fp32-b1"
    assert not (store / "hwbench.duckdb").exists() and not (store / "mlflow.db").exists()
    assert list((store / "spool").iterdir())  # written first, whatever the sinks

    bare = pytester.runpytest_subprocess(*FAST, "--hwbench-store", str(store), "--bare", timeout=300)
    assert bare.ret != pytest.ExitCode.OK
    bare.stdout.fnmatch_lines(["*pytest_hwbench_default_sinks gave*does not implement the Sink protocol: it lacks "
                               "browse, close, existing_ids, open_session, where, write*"])


def test_turning_the_recording_plugin_off_records_nothing(pytester: pytest.Pytester, tmp_path: Path) -> None:
    pytester.makepyfile(test_one=TEST)
    result = pytester.runpytest_subprocess(*FAST, "-p", "no:hwbench-recording", timeout=300)
    result.assert_outcomes(passed=1)
    assert not (pytester.path / "mlruns").exists()
    on = pytester.runpytest_subprocess(*FAST, timeout=300)
    on.assert_outcomes(passed=1)
    assert len(load_results(pytester.path / "mlruns" / "hwbench.duckdb")) == 1


def test_the_default_sinks_hook_is_declared_by_the_recording_plugin(pytester: pytest.Pytester) -> None:
    """The hook comes with the plug-in that calls it: off with it, and absent from the base
    plugin's hookspecs, whose module names no plug-in type."""
    import pytest_hwbench.hookspecs as base_hooks

    assert not hasattr(base_hooks, "pytest_hwbench_default_sinks")
    on = pytester.parseconfigure()
    assert on.pluginmanager.hook.pytest_hwbench_default_sinks.spec is not None
    (impl,) = [i for i in on.pluginmanager.hook.pytest_hwbench_default_sinks.get_hookimpls()
               if i.plugin_name == "hwbench-recording"]
    assert impl.trylast
    off = pytester.parseconfigure("-p", "no:hwbench-recording")
    assert getattr(off.pluginmanager.hook, "pytest_hwbench_default_sinks", None) is None
    assert off.pluginmanager.hook.pytest_hwbench_record.spec is not None  # the base plugin's hooks stay
