"""Web platforms: onnxruntime-web in a real headless Chromium, targets wasm, webgpu, webnn.

Everything runs against the real parts: the Chromium on PATH, onnxruntime-web where
`find_ort_web` finds it, real DuckDB and MLflow stores. Where the browser or onnxruntime-web is
missing, the tests that need them skip (CI installs both: `.ci/run`). The interpretation of
probe results is tested on probes recorded in ``tests/data/web/``.
"""

from __future__ import annotations

import json
import os
import re
import signal
import subprocess
import sys
import threading
import time
from collections.abc import Callable
from importlib.metadata import entry_points
from pathlib import Path
from typing import Any

import psutil
import pytest
from _scripts import script_module

from pytest_hwbench.hardware import detect_hardware
from pytest_hwbench.web import (
    BrowserCrashed,
    BrowserTimeout,
    PageError,
    WebDriver,
    close_shared_driver,
    find_browser,
    find_ort_web,
    shared_driver,
)
from pytest_hwbench.web.detect import adapter_name, is_software_adapter, targets_from_facts

DATA = Path(__file__).parent / "data" / "web"
BROWSER, _ = find_browser()
ORT, _ = find_ort_web()


def needs_browser(test: Any) -> Any:
    """A test that starts Chromium: the end-to-end tier, skipped where there is none."""
    return pytest.mark.e2e(pytest.mark.skipif(BROWSER is None, reason="no Chromium here (CI installs one: .ci/run)")(test))


def needs_web(test: Any) -> Any:
    """A test that runs onnxruntime-web in Chromium: the end-to-end tier, skipped without either."""
    return pytest.mark.e2e(pytest.mark.skipif(BROWSER is None or ORT is None,
                                              reason="no Chromium or onnxruntime-web here (CI installs both: "
                                                     ".ci/run)")(test))


def _recorded(name: str) -> dict:
    return json.loads((DATA / name).read_text())


def _browsers_under(folder: Path) -> list[psutil.Process]:
    """Chromium processes whose profile lies under `folder` (each run's own TMPDIR)."""
    found = []
    for proc in psutil.process_iter(["cmdline"]):
        cmdline = " ".join(proc.info.get("cmdline") or ())
        if f"--user-data-dir={folder}" in cmdline:
            found.append(proc)
    return found


# --- registration, ids, markers -----------------------------------------------------------------

def test_backend_probe_and_command_register_through_entry_points():
    assert {ep.name: ep.value for ep in entry_points(group="pytest_hwbench.backends")}["onnxruntime-web"] == \
        "pytest_hwbench.backends.onnxruntime_web"
    assert "pytest_hwbench.web.detect" in {ep.value for ep in entry_points(group="pytest_hwbench.hardware")}
    assert "pytest_hwbench.web_commands" in {ep.value for ep in entry_points(group="pytest_hwbench.commands")}
    hw = detect_hardware()
    assert {"wasm", "webgpu", "webnn"} <= set(hw.targets)


def test_case_ids_and_markers():
    from pytest_hwbench.backends.base import get_backend
    from pytest_hwbench.plugin.grid import Selection, case_from_id, generate_cases

    grid = generate_cases(Selection(models=("bert-tiny",), backends=("onnxruntime-web",), batch_sizes=(1,)),
                          detect_hardware)
    ids = [case.id for case in grid.cases]
    assert ids == ["bert-tiny-wasm-onnxruntime-web-fp32-b1", "bert-tiny-webgpu-onnxruntime-web-fp32-b1",
                   "bert-tiny-webnn-onnxruntime-web-fp32-b1"]
    assert case_from_id("bert-tiny-webgpu-onnxruntime-web-fp32-b1") == grid.cases[1]
    backend = get_backend("onnxruntime-web")
    assert [backend.markers(h) for h in backend.hardware] == [("wasm",), ("webgpu",), ("webnn",)]


def test_markers_are_registered_for_strict_markers(pytester):
    result = pytester.runpytest("--markers")
    result.stdout.fnmatch_lines(["@pytest.mark.wasm: *WebAssembly*", "@pytest.mark.webgpu: *WebGPU*",
                                 "@pytest.mark.webnn: *WebNN*"])


# --- detection: recorded probes ------------------------------------------------------------------

def test_recorded_probe_without_webnn_and_with_swiftshader():
    targets = targets_from_facts(_recorded("chromium156-swiftshader.json"), cpu_name="AMD EPYC")
    wasm, webgpu, webnn = targets["wasm"], targets["webgpu"], targets["webnn"]
    assert wasm.available and wasm.devices[0].name == "AMD EPYC" and wasm.precisions == ("fp32",)
    assert webgpu.available and webgpu.devices[0].name == "WebGPU google swiftshader (software)"
    assert webgpu.details["software_adapter"] is True
    assert webgpu.precisions == ("fp32",)  # SwiftShader has no shader-f16
    assert not webnn.available
    assert "WebNN is not supported on this platform" in webnn.reason
    assert "WebNN needs a browser with a WebNN backend" in webnn.reason


def test_recorded_webnn_success_translates_into_an_available_target():
    targets = targets_from_facts(_recorded("webnn-and-gpu-adapter.json"))
    webnn, webgpu = targets["webnn"], targets["webgpu"]
    assert webnn.available, webnn.reason
    assert [d.name for d in webnn.devices] == ["WebNN gpu", "WebNN cpu"]  # npu failed, preference order
    assert webnn.details["device_type"] == "gpu"
    assert webgpu.devices[0].name == "WebGPU nvidia ampere"
    assert webgpu.details["software_adapter"] is False
    assert webgpu.precisions == ("fp32", "fp16")


def test_fp16_runs_where_the_adapter_has_shader_f16():
    from pytest_hwbench.backends.base import get_backend
    from pytest_hwbench.hardware import HardwareInfo

    backend = get_backend("onnxruntime-web")
    here = HardwareInfo(targets_from_facts(_recorded("chromium156-swiftshader.json")))
    assert "shader-f16" in backend.unavailable("webgpu", "fp16", here)
    assert backend.unavailable("webgpu", "fp32", here) is None
    gpu = HardwareInfo(targets_from_facts(_recorded("webnn-and-gpu-adapter.json")))
    assert backend.unavailable("webgpu", "fp16", gpu) is None
    assert backend.unavailable("webnn", "fp32", gpu) is None
    assert backend.unavailable("webnn", "fp32", here).startswith("webnn: NotSupportedError")


def test_the_probe_can_be_turned_off(monkeypatch):
    from pytest_hwbench.web import detect

    monkeypatch.setenv("HWBENCH_WEB_PROBE", "0")
    detect.web_facts.cache_clear()
    try:
        facts = detect.web_facts()
    finally:
        detect.web_facts.cache_clear()
    if facts["browser"] is not None:
        reason = targets_from_facts(facts)["wasm"].reason
        assert facts["probe"] is None and reason.startswith("probe turned off (HWBENCH_WEB_PROBE=0"), reason
        assert "failed" not in reason


def test_a_bad_probe_timeout_is_said_and_never_cached(monkeypatch, tmp_path):
    from pytest_hwbench.web import detect

    monkeypatch.setenv("HWBENCH_CACHE_DIR", str(tmp_path))
    monkeypatch.setenv("HWBENCH_BROWSER", sys.executable)  # a browser found: the probe would start it
    monkeypatch.setenv("HWBENCH_WEB_PROBE", "fresh")
    monkeypatch.setenv("HWBENCH_WEB_PROBE_TIMEOUT_S", "nan")

    def no_browser(path):
        raise AssertionError("a browser was started")

    monkeypatch.setattr(detect, "run_probe", no_browser)
    detect.web_facts.cache_clear()
    try:
        facts = detect.web_facts()
    finally:
        detect.web_facts.cache_clear()
    assert facts["probe_error"].startswith("HWBENCH_WEB_PROBE_TIMEOUT_S='nan' is not accepted; accepted: a finite "
                                           "number > 0"), facts
    assert not (tmp_path / "web" / "probe.json").exists()  # later runs with good settings probe afresh


def test_web_settings_in_the_environment_are_checked_like_options(pytester, monkeypatch):
    from pytest_hwbench.env_settings import ENV_SETTINGS, check_env_settings

    check_env_settings({})  # every default is accepted
    for name, text, says in (("HWBENCH_WEB_TIMEOUT_S", "abc", "a finite number > 0"),
                             ("HWBENCH_WEB_TIMEOUT_S", "0", "a finite number > 0"),
                             ("HWBENCH_WEB_SETTLE_S", "-1", "a finite number >= 0"),
                             ("HWBENCH_WEB_THREADS", "2.5", "a whole number >= 1"),
                             ("HWBENCH_QAI_HUB_TIMEOUT_S", "inf", "a whole number >= 1")):
        with pytest.raises(ValueError, match=re.escape(f"{name}={text!r} is not accepted; accepted: {says}")):
            check_env_settings({name: text})
        assert ENV_SETTINGS[name].read({name: " "}) == ENV_SETTINGS[name].default
    # A session with one: a usage error at start (exit 4), before any case, not a failed web case.
    monkeypatch.setenv("HWBENCH_WEB_TIMEOUT_S", "abc")
    pytester.makepyfile(test_bench=_SUITE)
    result = pytester.runpytest("-m", "wasm", "--hwbench-no-track", "-p", "no:cacheprovider")
    assert result.ret == pytest.ExitCode.USAGE_ERROR
    assert "HWBENCH_WEB_TIMEOUT_S='abc' is not accepted" in result.stderr.str()


@needs_web
def test_a_later_process_reuses_the_probe_of_the_same_browser(monkeypatch, tmp_path):
    from pytest_hwbench.web import detect

    monkeypatch.setenv("HWBENCH_CACHE_DIR", str(tmp_path))
    monkeypatch.delenv("HWBENCH_WEB_PROBE", raising=False)
    detect.web_facts.cache_clear()
    try:
        first = detect.web_facts()  # a real browser runs the probe page
        assert first["probe"] and (tmp_path / "web" / "probe.json").exists()

        def no_browser(path):
            raise RuntimeError("the browser was started again")

        monkeypatch.setattr(detect, "run_probe", no_browser)
        detect.web_facts.cache_clear()
        assert detect.web_facts()["probe"] == first["probe"]  # from the cache: no browser
        monkeypatch.setenv("HWBENCH_BROWSER_FLAGS", "--some-other-flag")  # another browser setup: probed again
        detect.web_facts.cache_clear()
        assert "the browser was started again" in detect.web_facts()["probe_error"]
        monkeypatch.delenv("HWBENCH_BROWSER_FLAGS")
        cached = tmp_path / "web" / "probe.json"
        for broken in ('{"at": null}', "[1, 2]", "not json"):  # a malformed cache is a miss, not a failure
            saved = cached.read_text()
            cached.write_text(broken)
            detect.web_facts.cache_clear()
            assert "the browser was started again" in detect.web_facts()["probe_error"], broken
            cached.write_text(saved)
        monkeypatch.setenv("HWBENCH_WEB_PROBE", "fresh")
        detect.web_facts.cache_clear()
        assert "the browser was started again" in detect.web_facts()["probe_error"]
    finally:
        detect.web_facts.cache_clear()


def test_missing_browser_and_missing_ort_web_name_the_fix():
    facts = _recorded("chromium156-swiftshader.json")
    no_browser = {**facts, "browser": None, "probe": None,
                  "browser_reason": "no Chromium found (chromium-headless-shell, chromium, chromium-browser are not "
                                    "on PATH): install Chromium (Debian/Ubuntu: `apt-get install -y "
                                    "--no-install-recommends chromium`) or set HWBENCH_BROWSER"}
    for target in targets_from_facts(no_browser).values():
        assert not target.available and "apt-get install" in target.reason
    no_ort = {**facts, "ort_web": None, "ort_web_reason": "onnxruntime-web is not installed: run `hwbench web install`"}
    targets = targets_from_facts(no_ort)
    assert "hwbench web install" in targets["wasm"].reason and "hwbench web install" in targets["webgpu"].reason
    # The browser's own verdict comes first: installing onnxruntime-web gives no browser WebNN.
    assert "WebNN is not supported on this platform" in targets["webnn"].reason


def test_software_adapters_are_recognised():
    assert is_software_adapter({"vendor": "google", "architecture": "swiftshader"})
    assert is_software_adapter({"vendor": "mesa", "description": "llvmpipe (LLVM 15.0.6, 256 bits)"})
    assert not is_software_adapter({"vendor": "intel", "architecture": "gen-12lp"})
    assert adapter_name({"vendor": "apple", "architecture": "metal-3"}) == "WebGPU apple metal-3"


def test_find_browser_honours_the_environment_and_path(monkeypatch, tmp_path):
    monkeypatch.setenv("HWBENCH_BROWSER", str(tmp_path / "nothing"))
    browser, why = find_browser()
    assert browser is None and "HWBENCH_BROWSER" in why and "apt-get install" in why
    monkeypatch.delenv("HWBENCH_BROWSER")
    monkeypatch.setenv("PATH", str(tmp_path))
    browser, why = find_browser()
    assert browser is None and "chromium-headless-shell, chromium, chromium-browser" in why


def test_find_ort_web_honours_the_environment(monkeypatch, tmp_path):
    monkeypatch.setenv("HWBENCH_ORT_WEB", str(tmp_path))
    found, why = find_ort_web()
    assert found is None and "hwbench web install" in why
    package = tmp_path / "onnxruntime-web"
    (package / "dist").mkdir(parents=True)
    (package / "package.json").write_text(json.dumps({"name": "onnxruntime-web", "version": "9.9.9"}))
    monkeypatch.setenv("HWBENCH_ORT_WEB", str(package / "dist"))
    found, _ = find_ort_web()
    assert found is not None and found.version == "9.9.9" and found.dist == (package / "dist").resolve()


# --- detection: the real browser here -------------------------------------------------------------

@needs_web
def test_probe_here_finds_wasm_and_a_software_webgpu_and_no_webnn():
    hw = detect_hardware()
    assert hw["wasm"].available, hw["wasm"].reason
    assert hw["wasm"].details["cross_origin_isolated"] is True
    assert hw["wasm"].details["timer_resolution_ms"] <= 0.1
    webgpu = hw["webgpu"]
    assert webgpu.available, webgpu.reason
    if "swiftshader" in webgpu.devices[0].name:
        assert webgpu.devices[0].name.endswith("(software)") and webgpu.details["software_adapter"]
    if "Debian" in subprocess.run([BROWSER.path, "--version"], capture_output=True, text=True).stdout:
        assert "WebNN is not supported" in hw["webnn"].reason


# --- the driver: failures become errors with the browser's message, the browser restarts ---------

@pytest.fixture(scope="module")
def driver():
    if BROWSER is None or ORT is None:
        pytest.skip("no Chromium or onnxruntime-web here (CI installs both: .ci/run)")
    d = WebDriver(BROWSER.path, ORT.dist)
    yield d
    d.close()


def _unsupported_op_model(path: Path) -> Path:
    from onnx import TensorProto, helper, save

    node = helper.make_node("NoSuchOp", ["x"], ["y"], domain="com.example")
    graph = helper.make_graph([node], "g", [helper.make_tensor_value_info("x", TensorProto.FLOAT, [1])],
                              [helper.make_tensor_value_info("y", TensorProto.FLOAT, [1])])
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17), helper.make_opsetid("com.example", 1)],
                              ir_version=8)
    save(model, str(path))
    return path


def test_unsupported_operator_and_bad_model_are_page_errors_with_the_browsers_message(driver, tmp_path):
    url = driver.add_blob(_unsupported_op_model(tmp_path / "op.onnx"))
    with pytest.raises(PageError, match="NoSuchOp"):
        driver.call("load", bundle="ort.wasm.min.mjs", key="op", model=url, executionProviders=["wasm"], numThreads=0)
    url = driver.add_blob(b"this is not an onnx file")
    with pytest.raises(PageError) as info:
        driver.call("load", bundle="ort.wasm.min.mjs", key="bad", model=url, executionProviders=["wasm"], numThreads=0)
    assert str(info.value)  # onnxruntime-web's own words
    pid = driver.pid
    assert driver.call("sleep", bundle="ort.wasm.min.mjs", ms=1) == {"slept": 1}
    assert driver.pid == pid  # a page error keeps the browser


def test_a_provider_the_bundle_lacks_is_the_browsers_message(driver, tmp_path):
    url = driver.add_blob(_unsupported_op_model(tmp_path / "op.onnx"))
    with pytest.raises(PageError, match="no available backend found"):
        driver.call("load", bundle="ort.wasm.min.mjs", key="gpu", model=url, executionProviders=["webgpu"],
                    numThreads=0)


def test_a_hang_is_bounded_by_the_timeout_and_the_next_command_gets_a_new_browser(driver):
    driver.call("sleep", bundle="", ms=1)
    old = driver.pid
    launches = driver.launches
    started = time.monotonic()
    with pytest.raises(BrowserTimeout, match="did not finish within 2 s; the browser was killed"):
        driver.call("sleep", bundle="", ms=60_000, timeout_s=2)
    assert time.monotonic() - started < 15
    assert not psutil.pid_exists(old) or psutil.Process(old).status() == psutil.STATUS_ZOMBIE
    assert driver.call("sleep", bundle="", ms=1) == {"slept": 1}
    assert driver.launches == launches + 1


def test_a_browser_crash_is_an_error_and_the_next_command_restarts_it(driver):
    driver.call("sleep", bundle="", ms=1)
    pid = driver.pid
    threading.Timer(1.0, lambda: os.killpg(pid, signal.SIGKILL)).start()
    with pytest.raises(BrowserCrashed, match="the browser exited"):
        driver.call("sleep", bundle="", ms=30_000, timeout_s=60)
    assert driver.call("sleep", bundle="", ms=1) == {"slept": 1}
    assert driver.pid != pid


# --- measuring: the backend through the runner ----------------------------------------------------

@needs_web
def test_runner_times_in_the_page_and_reads_the_precision_back(monkeypatch):
    from pytest_hwbench.case import BenchCase
    from pytest_hwbench.runner import Runner
    from pytest_hwbench.trackers import TimingConfig

    monkeypatch.setenv("HWBENCH_WEB_WARMUP_S", "0.2")
    runner = Runner(TimingConfig(warmup_iterations=1, min_iterations=7, min_time_s=0.0))
    try:
        result = runner.run(BenchCase("bert-tiny", "onnxruntime-web", "wasm", "fp32", 2))
    finally:
        runner.close()
        close_shared_driver()
    assert result.latency.iterations == 7  # min iterations, min time 0: exactly the page's count
    assert result.precision == "fp32"
    details = result.details
    assert details["web_bundle"] == "ort.wasm.min.mjs" and details["web_ort_version"] == ORT.version
    assert details["web_output_types"] and set(details["web_output_types"].values()) == {"float32"}
    assert details["timer"] == "performance.now() in the page"
    assert details["web_cross_origin_isolated"] is True
    assert details["web_warmup_ms"] >= 200
    # The first measurement in a fresh page warmed up until steady (two 1 s windows at least, or the bound).
    assert details["web_warmup_windows"] >= 2 and details["web_warmup_settle_ms"] >= 2000
    assert isinstance(details["web_warmup_settled"], bool)
    # Memory: summed PSS of the browser's processes, named so; a browser with a page is 100s of MiB.
    assert details["web_memory"] == "pss" and 50 < result.memory.peak_device_mb < 4000
    # in-page times are multiples of the isolated timer's 5 us step, not a Python clock's
    assert all(abs(v * 200 - round(v * 200)) < 1e-3 for v in result.latency.values_ms)


def _kill_during_measure(after_s: float, kill: Callable[[], None]) -> None:
    """Run `kill` `after_s` seconds into the shared driver's next "measure" command, however long the
    Python side takes before it (a kill before the command only starts a fresh browser, by design)."""
    driver = shared_driver()

    def call_then_kill(op: str, **kwargs: Any) -> Any:
        if op == "measure":
            del driver.call  # once: the class's method again
            threading.Timer(after_s, kill).start()
        return WebDriver.call(driver, op, **kwargs)

    driver.call = call_then_kill  # type: ignore[method-assign]


@needs_web
def test_crash_mid_case_fails_that_case_with_the_message_and_the_next_case_runs(monkeypatch):
    from pytest_hwbench.case import BenchCase
    from pytest_hwbench.result import failed_record
    from pytest_hwbench.runner import Runner
    from pytest_hwbench.trackers import TimingConfig

    monkeypatch.setenv("HWBENCH_WEB_WARMUP_S", "8")
    runner = Runner(TimingConfig(warmup_iterations=1, min_iterations=3, min_time_s=0.0))
    case = BenchCase("bert-tiny", "onnxruntime-web", "wasm", "fp32", 1)
    try:
        runner.run(case)  # loads; the browser runs
        pid = shared_driver().pid
        _kill_during_measure(2.0, lambda: os.killpg(pid, signal.SIGKILL))
        with pytest.raises(BrowserCrashed) as info:
            runner.run(case)
        record = failed_record(case, "s", info.value)
        assert record.status == "failed" and "the browser exited" in record.error
        monkeypatch.setenv("HWBENCH_WEB_WARMUP_S", "0")
        result = runner.run(case)  # the model is reloaded into a new browser
        assert result.latency.iterations == 3 and shared_driver().pid != pid
    finally:
        runner.close()
        close_shared_driver()


# --- the plugin: records in both stores, skips with reasons, no browser left ----------------------

_SUITE = """
def test_bench(hwbench_case, hwbench):
    result = hwbench.measure(hwbench_case)
    assert result.precision == hwbench_case.precision
"""


@needs_web
def test_web_cases_land_in_mlflow_and_duckdb_and_leave_no_browser(pytester, tmp_path, monkeypatch):
    run_tmp = tmp_path / "tmp"
    run_tmp.mkdir()
    monkeypatch.setenv("TMPDIR", str(run_tmp))
    monkeypatch.setenv("HWBENCH_WEB_WARMUP_S", "0.2")
    monkeypatch.setenv("HWBENCH_ORT_WEB", str(ORT.dist))  # pytester's subprocess has a HOME of its own
    pytester.makepyfile(test_bench=_SUITE)
    store = tmp_path / "store"
    result = pytester.runpytest_subprocess("-m", "wasm or webgpu or webnn", "-rs", "--hwbench-models", "bert-tiny",
                                           "--hwbench-batch-sizes", "1", "--hwbench-min-time", "0",
                                           "--hwbench-store", str(store))
    assert result.ret == pytest.ExitCode.OK, result.stdout.str()
    assert result.parseoutcomes().get("passed") == 2, result.stdout.str()
    if not detect_hardware()["webnn"].available:
        result.stdout.fnmatch_lines(["SKIPPED*webnn: *WebNN*"])
    assert not _browsers_under(run_tmp)  # every Chromium ended with the session

    from pytest_hwbench.sinks import read_records

    ids = ["bert-tiny-wasm-onnxruntime-web-fp32-b1", "bert-tiny-webgpu-onnxruntime-web-fp32-b1"]
    for source in (store / "hwbench.duckdb", f"sqlite:///{store / 'mlflow.db'}"):
        records = sorted(read_records(source, with_timings=True), key=lambda r: r.case_id)
        assert [r.case_id for r in records] == ids, source
        wasm, webgpu = records
        assert webgpu.extra["web_bundle"] == "ort.webgpu.min.mjs" and wasm.extra["web_bundle"] == "ort.wasm.min.mjs"
        assert webgpu.extra["web_browser_version"] and webgpu.extra["web_ort_version"] == ORT.version
        if "swiftshader" in webgpu.device_name:
            assert webgpu.device_name.endswith("(software)") and webgpu.extra["web_software_adapter"] is True
        for record in records:
            assert record.extra["timer"] == "performance.now() in the page"
            assert len(record.timings_ms) == record.iterations >= 10
            # in-page times: multiples of the isolated timer's 5 us step
            assert all(abs(v * 200 - round(v * 200)) < 1e-3 for v in record.timings_ms)


_KILL_FIRST_CASE = """
import os, signal, threading, time

from pytest_hwbench.web._driver import WebDriver

killed = []
_send = WebDriver._send


def _send_and_kill_the_first_measure(self, command, *, timeout_s):
    if command["op"] == "measure" and not killed:  # the first case: its browser dies while the page measures
        killed.append(self.pid)

        def kill():
            time.sleep(float(os.environ["KILL_AFTER_S"]))  # inside the page's warm-up
            os.killpg(killed[0], signal.SIGKILL)

        threading.Thread(target=kill, daemon=True).start()
    return _send(self, command, timeout_s=timeout_s)


WebDriver._send = _send_and_kill_the_first_measure
"""


@needs_web
def test_a_crash_fails_its_case_with_the_message_and_the_session_goes_on(pytester, tmp_path, monkeypatch):
    run_tmp = tmp_path / "tmp"
    run_tmp.mkdir()
    monkeypatch.setenv("TMPDIR", str(run_tmp))
    monkeypatch.setenv("HWBENCH_ORT_WEB", str(ORT.dist))
    monkeypatch.setenv("HWBENCH_WEB_WARMUP_S", "6")
    monkeypatch.setenv("KILL_AFTER_S", "1")  # one second into the measure op: inside its 6 s warm-up
    pytester.makeconftest(_KILL_FIRST_CASE)
    pytester.makepyfile(test_bench=_SUITE)
    store = tmp_path / "store"
    result = pytester.runpytest_subprocess("-m", "wasm", "--hwbench-models", "bert-tiny,vit-tiny",
                                           "--hwbench-batch-sizes", "1", "--hwbench-min-time", "0",
                                           "--hwbench-store", str(store))
    outcomes = result.parseoutcomes()
    assert outcomes.get("failed") == 1 and outcomes.get("passed") == 1, result.stdout.str()
    result.stdout.fnmatch_lines(["*BrowserCrashed: the browser exited*"])
    assert not _browsers_under(run_tmp)

    from pytest_hwbench.sinks import read_records

    records = {r.case_id: r for r in read_records(store / "hwbench.duckdb")}
    failed = records["bert-tiny-wasm-onnxruntime-web-fp32-b1"]
    assert failed.status == "failed" and "the browser exited" in failed.error
    assert records["vit-tiny-wasm-onnxruntime-web-fp32-b1"].status == "passed"  # a fresh browser


@pytest.mark.e2e
def test_without_a_browser_on_path_web_cases_skip_naming_the_install_step(pytester, tmp_path, monkeypatch):
    bin_dir = tmp_path / "bin"
    bin_dir.mkdir()
    for tool in ("git",):
        found = subprocess.run(["which", tool], capture_output=True, text=True).stdout.strip()
        if found:
            (bin_dir / tool).symlink_to(found)
    monkeypatch.setenv("PATH", str(bin_dir))
    monkeypatch.delenv("HWBENCH_BROWSER", raising=False)
    pytester.makepyfile(test_bench=_SUITE)
    result = pytester.runpytest_subprocess("-m", "wasm or webgpu or webnn", "-rs", "--hwbench-no-track",
                                           "--hwbench-models", "bert-tiny", "--hwbench-batch-sizes", "1")
    assert result.ret == pytest.ExitCode.OK, result.stdout.str()
    assert result.parseoutcomes().get("skipped") == 3 and "passed" not in result.parseoutcomes()
    result.stdout.fnmatch_lines(["SKIPPED*no Chromium found*apt-get install -y*chromium*"])


@needs_web
def test_ctrl_c_leaves_no_browser(pytester, tmp_path):
    run_tmp = tmp_path / "tmp"
    run_tmp.mkdir()
    pytester.makepyfile(test_bench=_SUITE)
    env = {**os.environ, "TMPDIR": str(run_tmp), "HWBENCH_WEB_WARMUP_S": "30", "HWBENCH_ORT_WEB": str(ORT.dist)}
    proc = subprocess.Popen([sys.executable, "-m", "pytest", "-p", "no:cacheprovider", "-m", "wasm",
                             "--hwbench-models", "bert-tiny", "--hwbench-batch-sizes", "1", "--hwbench-no-track"],
                            cwd=pytester.path, env=env, stdout=subprocess.PIPE, stderr=subprocess.STDOUT)
    deadline = time.monotonic() + 120
    while not _browsers_under(run_tmp) and time.monotonic() < deadline and proc.poll() is None:
        time.sleep(0.2)  # until the case is being measured
    if not _browsers_under(run_tmp):
        proc.kill()
        out, _ = proc.communicate(timeout=60)
        pytest.fail(f"the browser never started (pytest exit {proc.returncode}); its output ends:\n"
                    f"{out.decode(errors='replace')[-3000:]}")
    time.sleep(1.0)
    proc.send_signal(signal.SIGINT)
    out, _ = proc.communicate(timeout=60)
    assert b"KeyboardInterrupt" in out, out.decode()[-2000:]
    time.sleep(0.5)
    assert not _browsers_under(run_tmp)


# --- install ------------------------------------------------------------------------------------

@pytest.mark.e2e
@pytest.mark.skipif(not any(os.access(os.path.join(p, "npm"), os.X_OK) for p in os.environ["PATH"].split(os.pathsep)),
                    reason="npm is not installed here")
def test_hwbench_web_install_puts_the_pinned_version_in_the_folder(tmp_path):
    from pytest_hwbench.web import ORT_WEB_VERSION
    from pytest_hwbench.web_commands import install_ort_web

    package = install_ort_web(tmp_path / "web")
    meta = json.loads((package / "package.json").read_text())
    assert meta["name"] == "onnxruntime-web" and meta["version"] == ORT_WEB_VERSION
    assert (package / "dist" / "ort.wasm.min.mjs").is_file()


def test_hwbench_web_status_and_help():
    from pytest_hwbench.cli import build_parser

    assert "web" in build_parser().format_help()
    done = subprocess.run([str(Path(sys.executable).parent / "hwbench"), "web", "status"], capture_output=True,
                          text=True)
    assert "browser:" in done.stdout and "onnxruntime-web:" in done.stdout


# --- suites, nox, CI, fidelity ------------------------------------------------------------------

def test_the_ci_grid_keeps_a_few_quick_web_cases():
    from pytest_hwbench.case import BenchCase

    with script_module(Path(__file__).resolve().parents[1] / "bench_suites" / "conftest.py",
                       "bench_suites_conftest") as module:
        in_ci_grid = module.in_ci_grid

    def case(model: str, hardware: str, batch: int) -> BenchCase:
        return BenchCase(model, "onnxruntime-web", hardware, "fp32", batch)

    assert in_ci_grid(case("bert-tiny", "webgpu", 1)) and in_ci_grid(case("vit-tiny", "wasm", 1))
    assert not in_ci_grid(case("bert-tiny", "webgpu", 8))  # SwiftShader: 0.3 s a forward
    assert not in_ci_grid(case("clip-tiny", "webgpu", 1)) and not in_ci_grid(case("bert-base", "wasm", 1))


def test_nox_has_a_web_bench_session_and_ci_installs_the_web_parts():
    root = Path(__file__).resolve().parents[1]
    listed = subprocess.run([str(Path(sys.executable).parent / "nox"), "-l", "-f", str(root / "noxfile.py")],
                            capture_output=True, text=True, cwd=root)
    if listed.returncode != 0 and "No such file" in listed.stderr:
        pytest.skip("nox is not installed")
    assert "bench(web)" in listed.stdout, listed.stdout + listed.stderr
    ci = (root / ".ci" / "run").read_text()
    assert "hwbench web install" in ci and "chromium" in ci
    assert 'pytest bench_suites -m "(wasm or webgpu or webnn) and quick"' in ci


@needs_web
def test_fidelity_script_prints_page_and_python_medians_and_the_timer_resolution():
    root = Path(__file__).resolve().parents[1]
    done = subprocess.run([sys.executable, str(root / "benchmarks" / "web_fidelity.py"), "--models", "bert-tiny",
                           "--batch-sizes", "1", "--targets", "wasm", "--min-time", "0.1", "--warmup", "0.1",
                           "--vs-python"],
                          capture_output=True, text=True, timeout=300)
    assert done.returncode == 0, done.stderr[-3000:]
    lines = done.stdout.splitlines()
    row = next(line for line in lines if line.startswith("bert-tiny"))
    page, native = float(row.split()[3]), float(row.split()[5])
    assert page > 0 and native > 0
    assert any("in-page timer resolution: 5.0 us cross-origin isolated" in line and "100.0 us without isolation" in line
               for line in lines), done.stdout


# --- failing fast: dead pages, dead renderers, hung starts, leftovers -------------------------------

def _page_renderer(driver: WebDriver) -> int:
    """The renderer showing the page: the biggest of the browser's renderers (the other is a spare)."""
    return max(driver.renderers(), key=lambda pid: psutil.Process(pid).memory_info().rss)


def test_each_page_has_its_own_channel_a_dead_pages_request_takes_no_command(driver):
    driver.call("sleep", bundle="", ms=1)
    old_page = driver._page
    # The old page's long poll is parked on its channel: a command for the next page never goes there.
    assert driver._next_command("no-such-page")[0] == 410
    os.killpg(driver.pid, signal.SIGKILL)
    time.sleep(0.5)  # the browser is dead while its page was idle between commands
    started = time.monotonic()
    assert driver.call("sleep", bundle="", ms=1) == {"slept": 1}
    assert time.monotonic() - started < 10
    assert driver._page != old_page and driver._next_command(old_page)[0] == 410


@needs_web
def test_a_browser_killed_while_idle_costs_the_next_case_seconds(monkeypatch):
    from pytest_hwbench.case import BenchCase
    from pytest_hwbench.runner import Runner
    from pytest_hwbench.trackers import TimingConfig

    monkeypatch.setenv("HWBENCH_WEB_WARMUP_S", "0")
    monkeypatch.setenv("HWBENCH_WEB_SETTLE_S", "0")
    runner = Runner(TimingConfig(warmup_iterations=1, min_iterations=3, min_time_s=0.0))
    case = BenchCase("bert-tiny", "onnxruntime-web", "wasm", "fp32", 1)
    try:
        runner.run(case)
        started = time.monotonic()
        runner.run(case)
        usual_s = time.monotonic() - started  # the same case in a running browser (a loaded host is slow)
        pid = shared_driver().pid
        os.killpg(pid, signal.SIGKILL)  # between cases: the page was idle
        time.sleep(0.5)
        started = time.monotonic()
        result = runner.run(case)
        assert time.monotonic() - started - usual_s < 10  # a new browser and a reload, not a timeout
        assert result.latency.iterations == 3 and shared_driver().pid != pid
    finally:
        runner.close()
        close_shared_driver()


@needs_web
def test_a_renderer_killed_mid_case_fails_it_within_seconds_naming_the_crash(monkeypatch):
    from pytest_hwbench.case import BenchCase
    from pytest_hwbench.runner import Runner
    from pytest_hwbench.trackers import TimingConfig

    monkeypatch.setenv("HWBENCH_WEB_WARMUP_S", "0")
    monkeypatch.setenv("HWBENCH_WEB_SETTLE_S", "0")
    runner = Runner(TimingConfig(warmup_iterations=1, min_iterations=3, min_time_s=0.0))
    case = BenchCase("bert-tiny", "onnxruntime-web", "wasm", "fp32", 1)
    try:
        runner.run(case)  # loaded; the page's renderer now holds the model
        monkeypatch.setenv("HWBENCH_WEB_WARMUP_S", "60")
        renderer = _page_renderer(shared_driver())
        killed_at: list[float] = []

        def kill() -> None:
            killed_at.append(time.monotonic())
            os.kill(renderer, signal.SIGKILL)  # what the kernel's out-of-memory killer does

        _kill_during_measure(1.5, kill)
        with pytest.raises(BrowserCrashed) as info:
            runner.run(case)
        assert time.monotonic() - killed_at[0] < 10
        message = str(info.value)
        assert "renderer process died" in message and "Tab Killed" in message and str(renderer) in message
        assert shared_driver().pid is None  # killed: the next case starts a fresh browser
        monkeypatch.setenv("HWBENCH_WEB_WARMUP_S", "0")
        assert runner.run(case).latency.iterations == 3
    finally:
        runner.close()
        close_shared_driver()


_FAKE_BROWSER = """#!/bin/sh
case "$1" in --version) echo "Chromium 1.0 (a fake that never answers)"; exit 0;; esac
echo started >> "{log}"
exec sleep 600
"""


def test_a_browser_that_hangs_at_start_is_not_waited_on_again_in_the_run(tmp_path, monkeypatch):
    monkeypatch.setenv("TMPDIR", str(tmp_path))
    log = tmp_path / "starts.log"
    fake = tmp_path / "fake-chromium"
    fake.write_text(_FAKE_BROWSER.format(log=log))
    fake.chmod(0o755)
    driver = WebDriver(str(fake), start_timeout_s=2)
    try:
        began = time.monotonic()
        with pytest.raises(BrowserTimeout, match="did not finish within 2 s"):
            driver.call("sleep", ms=1)
        assert time.monotonic() - began < 30
        for _ in range(3):  # the next cases: at once, naming the first hang (before: 90 s each)
            began = time.monotonic()
            with pytest.raises(BrowserTimeout, match="the browser hung at start earlier in this run"):
                driver.call("sleep", ms=1)
            assert time.monotonic() - began < 1.0
        assert log.read_text().count("started") == 1
    finally:
        driver.close()


@pytest.mark.e2e
def test_a_browser_that_hangs_at_start_is_probed_once_and_later_runs_do_not_wait(pytester, tmp_path):
    log = tmp_path / "starts.log"
    fake = tmp_path / "fake-chromium"
    fake.write_text(_FAKE_BROWSER.format(log=log))
    fake.chmod(0o755)
    env = {**os.environ, "HWBENCH_BROWSER": str(fake), "HWBENCH_CACHE_DIR": str(tmp_path / "cache"),
           "HWBENCH_WEB_PROBE_TIMEOUT_S": "3", "TMPDIR": str(tmp_path)}
    env.pop("HWBENCH_WEB_PROBE", None)
    measure = ("import time; from pytest_hwbench.web.detect import web_facts, web_targets; t = time.monotonic(); "
               "web_facts(); print(round(time.monotonic() - t, 3)); print(web_targets()['wasm'].reason)")
    first = subprocess.run([sys.executable, "-c", measure], env=env, capture_output=True, text=True, timeout=120)
    seconds, reason = first.stdout.splitlines()[:2]
    assert 2.5 < float(seconds) < 15, first.stdout + first.stderr  # bounded by the probe timeout (3 s)
    assert "did not finish within 3 s" in reason and log.read_text().count("started") == 1
    again = subprocess.run([sys.executable, "-c", measure], env=env, capture_output=True, text=True, timeout=120)
    seconds, reason = again.stdout.splitlines()[:2]
    assert float(seconds) < 1.0 and "cached from an earlier probe" in reason, again.stdout
    # A -m cpu run in a new process: the browser is not started again.
    pytester.makepyfile(test_bench=_SUITE)
    monkeypatch_env = {k: env[k] for k in ("HWBENCH_BROWSER", "HWBENCH_CACHE_DIR", "HWBENCH_WEB_PROBE_TIMEOUT_S")}
    old = {k: os.environ.get(k) for k in monkeypatch_env}
    os.environ.update(monkeypatch_env)
    try:
        result = pytester.runpytest_subprocess("-m", "cpu", "--hwbench-no-track", "--hwbench-models", "bert-tiny",
                                               "--hwbench-batch-sizes", "1", "--hwbench-backends", "torch",
                                               "--hwbench-min-time", "0")
    finally:
        for k, v in old.items():
            if v is None:
                os.environ.pop(k, None)
            else:
                os.environ[k] = v
    assert result.ret == pytest.ExitCode.OK, result.stdout.str()
    assert log.read_text().count("started") == 1
    assert not list(tmp_path.glob("hwbench-web-run-*"))


_HOLD_A_BROWSER = """
import sys, time
from pytest_hwbench.web import WebDriver
driver = WebDriver(sys.argv[1])
driver.call("sleep", ms=1)
print(driver.pid, flush=True)
time.sleep(600)
"""


def _ours(folder: Path, *pids: int) -> set[str]:
    """Run folders of `pids` (of any process when none is given) and Chromium temp folders in `folder`."""
    runs = {p.name for p in folder.glob("hwbench-web-run-*")}
    if pids:  # other processes on this host may probe meanwhile: only these pids' folders count
        runs = {name for name in runs if any(name.startswith(f"hwbench-web-run-{pid}-") for pid in pids)}
    return runs | {p.name for p in folder.glob("org.chromium.*")} | {p.name for p in folder.glob(".org.chromium.*")}


@needs_browser
def test_a_sigkilled_runs_folders_are_removed_by_the_next_run(tmp_path):
    tmpdir = tmp_path / "a-long-enough-tmpdir-name-that-chromium-gets-a-short-one-in-slash-tmp"
    tmpdir.mkdir()
    env = {**os.environ, "TMPDIR": str(tmpdir)}
    before_tmp = _ours(Path("/tmp"))
    proc = subprocess.Popen([sys.executable, "-c", _HOLD_A_BROWSER, BROWSER.path], env=env, stdout=subprocess.PIPE,
                            text=True)
    try:
        browser_pid = int(proc.stdout.readline())
        assert [p.name for p in tmpdir.glob("hwbench-web-run-*")], "no run folder in $TMPDIR"
        assert list(tmpdir.glob("hwbench-web-run-*/profile-*"))
        assert _ours(Path("/tmp"), proc.pid)  # $TMPDIR is long: the browser's TMPDIR is under /tmp
    finally:
        proc.kill()  # SIGKILL: no atexit
        proc.wait()
    deadline = time.monotonic() + 10
    while psutil.pid_exists(browser_pid) and time.monotonic() < deadline:  # dies with its parent
        time.sleep(0.1)
    assert not psutil.pid_exists(browser_pid) or psutil.Process(browser_pid).status() == psutil.STATUS_ZOMBIE
    assert list(tmpdir.glob("hwbench-web-run-*"))  # left behind by the killed run
    one_more = subprocess.run([sys.executable, "-c", "import os, sys\nfrom pytest_hwbench.web import WebDriver\n"
                               "d = WebDriver(sys.argv[1]); d.call('sleep', ms=1); d.close(); print(os.getpid())",
                               BROWSER.path], env=env, capture_output=True, text=True, timeout=120)
    assert one_more.returncode == 0, one_more.stderr[-2000:]
    assert not _ours(tmpdir), list(tmpdir.iterdir())
    assert not (_ours(Path("/tmp"), proc.pid, int(one_more.stdout.split()[-1])) - before_tmp)


@needs_web
def test_a_broken_onnxruntime_web_names_the_install_command(monkeypatch, tmp_path):
    import shutil

    from pytest_hwbench.case import BenchCase
    from pytest_hwbench.runner import Runner
    from pytest_hwbench.trackers import TimingConfig

    broken = tmp_path / "onnxruntime-web"
    (broken / "dist").mkdir(parents=True)
    shutil.copy(ORT.dist.parent / "package.json", broken / "package.json")
    shutil.copy(ORT.dist / "ort.wasm.min.mjs", broken / "dist")  # the bundle without its wasm files
    monkeypatch.setenv("HWBENCH_ORT_WEB", str(broken))
    close_shared_driver()
    runner = Runner(TimingConfig(warmup_iterations=1, min_iterations=3, min_time_s=0.0))
    try:
        with pytest.raises(PageError) as info:
            runner.run(BenchCase("bert-tiny", "onnxruntime-web", "wasm", "fp32", 1))
    finally:
        runner.close()
        close_shared_driver()
    assert "wasm" in str(info.value) and "hwbench web install" in str(info.value)


def test_the_probe_key_leaves_out_onnxruntime_web():
    from pytest_hwbench.web import detect

    key = detect._probe_key({"path": "/usr/bin/chromium", "version": "Chromium 1"})
    assert "ort_web" not in key and key["browser"]["version"] == "Chromium 1"


@needs_web
def test_fidelity_script_compares_hwbench_with_an_independent_page_and_pss():
    root = Path(__file__).resolve().parents[1]
    done = subprocess.run([sys.executable, str(root / "benchmarks" / "web_fidelity.py"), "--models", "bert-tiny",
                           "--rounds", "1", "--min-time", "0.2", "--reference-warmup", "1"],
                          capture_output=True, text=True, timeout=600)
    assert done.returncode == 0, done.stdout[-3000:] + done.stderr[-3000:]
    lines = done.stdout.splitlines()
    row = next(line for line in lines if line.split()[:2] == ["1", "bert-tiny"])
    hwbench_ms, reference_ms, ratio, recorded, pss, rss = (float(v) for v in row.split()[2:8])
    assert hwbench_ms > 0 and reference_ms > 0 and abs(ratio - hwbench_ms / reference_ms) < 0.01
    assert 0 < pss < rss and recorded > 0  # summed PSS counts shared pages once: below summed RSS
    summary = next(line for line in lines if line.startswith("bert-tiny"))
    assert summary.endswith("pss")
