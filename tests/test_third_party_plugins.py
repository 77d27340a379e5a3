"""A backend, a sink and a scenario from a throwaway package register through the entry points
our own use, and a case runs through each, with no change to base code."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

#: Every test here starts another process, a server or a training: the end-to-end tier.
pytestmark = pytest.mark.e2e

PACKAGE = '''
"""A third party's hwbench plugins: backend "extra-backend", scenario "echo", sink "extra"."""
import json
from pathlib import Path

from pytest_hwbench import Backend, LoadedModel, register_backend
from pytest_hwbench.sinks import Sink, register_sink
from pytest_hwbench.scenarios import Scenario, register_scenario


class _Summer(LoadedModel):
    def prepare(self, inputs):
        tensors = [v for v in inputs.values() if hasattr(v, "sum")]
        return lambda: sum(float(t.float().sum()) for t in tensors)


def _loaded(tag):
    return _Summer(precision="fp32", device_name=f"extra {tag}", details={"by": tag})


class ExtraBackend(Backend):
    name = "extra-backend"
    hardware = ("cpu",)
    precisions = ("fp32",)

    def markers(self, hardware):
        return (hardware,)

    def default_precisions(self, hardware, hw):
        return ("fp32",)

    def unavailable(self, hardware, precision, hw):
        return None if precision == "fp32" else f"{precision}: extra-backend runs fp32"

    def load(self, spec, hardware, precision, device_index=0):
        return _loaded("backend")


class EchoScenario(Scenario):
    mode = "echo"
    description = "a third party's mode"
    backends = ("extra-backend",)
    precisions = ("fp32",)

    def supports(self, spec):
        return spec.modality == "text"

    def unavailable(self, spec, backend, hardware, precision, hw):
        return None

    def load(self, spec, hardware, precision, device_index=0, *, backend="extra-backend", **options):
        return _loaded("scenario")


class JsonLinesSink(Sink):
    name = "extra"

    def __init__(self, target):
        self.path = Path(target)

    def open_session(self, session):
        pass

    def write(self, records):
        with self.path.open("a") as out:
            for record in records:
                out.write(json.dumps(record.to_dict()) + "\\n")

    def close(self, status):
        pass


def _read(target, **options):
    from pytest_hwbench.record import BenchmarkRecord

    return [BenchmarkRecord.from_dict(json.loads(line)) for line in Path(target).read_text().splitlines()]


register_backend(ExtraBackend())
register_scenario(EchoScenario())
register_sink("extra", lambda target, **options: JsonLinesSink(target), reader=_read)
'''

ENTRY_POINTS = """
[pytest_hwbench.backends]
extra-backend = hwbench_extra

[pytest_hwbench.scenarios]
echo = hwbench_extra

[pytest_hwbench.sinks]
extra = hwbench_extra
"""

TEST = """
import pytest

@pytest.mark.hwbench(models=["bert-tiny"], hardware=["cpu"], batch_sizes=[1], precisions=["fp32"])
def test_case(hwbench_case, hwbench):
    hwbench.measure(hwbench_case)
"""


@pytest.fixture
def site(tmp_path: Path) -> Path:
    """An installed throwaway distribution: its module and its dist-info with entry points."""
    root = tmp_path / "site"
    (root / "hwbench_extra").mkdir(parents=True)
    (root / "hwbench_extra" / "__init__.py").write_text(PACKAGE)
    info = root / "hwbench_extra-0.1.dist-info"
    info.mkdir()
    (info / "METADATA").write_text("Metadata-Version: 2.1\nName: hwbench-extra\nVersion: 0.1\n")
    (info / "entry_points.txt").write_text(textwrap.dedent(ENTRY_POINTS))
    return root


def test_a_third_party_backend_scenario_and_sink_run_cases(pytester: pytest.Pytester, site: Path,
                                                            tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("PYTHONPATH", os.pathsep.join([str(site), os.environ.get("PYTHONPATH", "")]))
    pytester.makepyfile(test_extra=TEST)
    out = tmp_path / "extra.jsonl"
    result = pytester.runpytest_subprocess(
        "-v", "-p", "no:cacheprovider", "--strict-markers", "--hwbench-store", str(tmp_path / "store"),
        "--hwbench-backends", "extra-backend,torch", "--hwbench-modes", "inference,echo",
        "--hwbench-sink", f"extra:{out}", "--hwbench-min-time", "0", "--hwbench-min-iterations", "2",
        "--hwbench-warmup", "0", timeout=300)
    assert result.ret == pytest.ExitCode.OK, result.stdout.str() + result.stderr.str()
    result.assert_outcomes(passed=3)
    result.stdout.fnmatch_lines_random([
        "*test_case[[]bert-tiny-cpu-extra-backend-fp32-b1[]] PASSED*",
        "*test_case[[]bert-tiny-cpu-extra-backend-fp32-b1-echo[]] PASSED*",
        "*test_case[[]bert-tiny-cpu-torch-fp32-b1[]] PASSED*",
    ])
    # The sink got every record, as did ours; its reader reads them back.
    written = {json.loads(line)["case_id"]: json.loads(line) for line in out.read_text().splitlines()}
    assert set(written) == {"bert-tiny-cpu-extra-backend-fp32-b1", "bert-tiny-cpu-extra-backend-fp32-b1-echo",
                            "bert-tiny-cpu-torch-fp32-b1"}
    assert written["bert-tiny-cpu-extra-backend-fp32-b1-echo"]["extra"]["by"] == "scenario"
    assert written["bert-tiny-cpu-extra-backend-fp32-b1"]["extra"]["by"] == "backend"
    from pytest_hwbench.sinks import load_results

    assert len(load_results(tmp_path / "store" / "hwbench.duckdb")) == 3
    read = subprocess.run(
        [sys.executable, "-c", f"from pytest_hwbench.sinks import read_records; print(len(read_records('extra:{out}')))"],
        capture_output=True, text=True, check=True, env={**os.environ, "PYTHONPATH": str(site)})
    assert read.stdout.strip() == "3"
