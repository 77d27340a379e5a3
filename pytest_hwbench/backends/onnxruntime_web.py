"""onnxruntime-web backend: the shared ONNX export, run by onnxruntime-web in a headless Chromium
on ``wasm``, ``webgpu`` and ``webnn`` (one bundle each, `BUNDLES`).

The page times each ``session.run`` with ``performance.now()`` (warm-up by count, by time and, in
a fresh page, until two `SETTLE_WINDOW_S` windows agree within `SETTLE_TOLERANCE`): a loaded
model's measurement is a `RemoteCall`. Memory is the peak PSS summed over the browser's
processes. One browser per process, reused, ended by `shutdown`, a failure or interpreter exit.
"""

from __future__ import annotations

import contextlib
import importlib.util
import itertools
import sys
import threading
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from ..env_settings import ENV_SETTINGS
from ..errors import PrecisionMismatch, UnsupportedCase
from ..hardware import HardwareInfo
from ..models import ModelSpec
from ._onnx_export import export_onnx, numpy_feeds
from .base import Backend, LoadedModel, RemoteMeasurement, register_backend

#: onnxruntime-web bundle per target (FACTS.md: asking a bundle for a provider it lacks fails
#: with "no available backend found").
BUNDLES: dict[str, str] = {"wasm": "ort.wasm.min.mjs", "webgpu": "ort.webgpu.min.mjs", "webnn": "ort.min.mjs"}
#: Seconds of warm-up in the page, besides the run's warm-up count (these settings' defaults and
#: ranges are in `pytest_hwbench.env_settings`).
WARMUP_ENV = "HWBENCH_WEB_WARMUP_S"
#: Longest warm-up until steady of the first measurement in a fresh page (0: off).
SETTLE_ENV = "HWBENCH_WEB_SETTLE_S"
#: The window whose median the settling compares with the previous window's.
SETTLE_WINDOW_S = 1.0
#: Relative difference of two consecutive window medians under which the page counts as steady.
SETTLE_TOLERANCE = 0.03
#: How the record names its memory figure (``extra["web_memory"]``).
MEMORY_KIND = "pss"
MEMORY_DOC = "peak proportional set size (PSS) summed over the browser's processes while the page measured"
#: Seconds one load or one measurement may take in the page before the browser is killed: a hang
#: becomes a failed case, the next case gets a new browser.
TIMEOUT_ENV = "HWBENCH_WEB_TIMEOUT_S"
#: wasm threads (``$HWBENCH_WEB_THREADS``); unset: onnxruntime-web's default (half the cores, at most 4).
THREADS_ENV = "HWBENCH_WEB_THREADS"
#: numpy dtypes the page can feed (onnxruntime-web's tensor types of the same names).
_PAGE_DTYPES = frozenset({"float32", "float16", "int64", "int32", "bool", "uint8", "int8"})
#: onnxruntime-web output tensor type -> our precision name.
_OUTPUT_PRECISION = {"float32": "fp32", "float16": "fp16"}


def _seconds(name: str) -> float:
    return float(ENV_SETTINGS[name].read() or 0.0)


def _web() -> Any:
    from .. import web

    return web


@dataclass(frozen=True)
class _PageCall:
    """What `prepare` returns: `measure_remote` measures in the page; calling it refuses."""

    model: _PageModel
    feeds: list[dict[str, Any]]
    blob: bytes

    def __call__(self) -> Any:
        raise RuntimeError("onnxruntime-web: this case runs in a browser page; its times come from "
                           "measure_remote(timing), a Python clock measures nothing here")

    def measure_remote(self, timing: Any) -> RemoteMeasurement:
        return self.model.measure(self, timing)


class _PageModel:
    """One session in the page: load, measure per input shape, release."""

    def __init__(self, spec: ModelSpec, hardware: str, precision: str, path: Path, key: str) -> None:
        self.spec, self.hardware, self.precision, self.path, self.key = spec, hardware, precision, path, key
        self.bundle = BUNDLES[hardware]
        self.details: dict[str, Any] = {}
        self._driver = _web().shared_driver()
        self._launches = -1

    def load(self, device_type: str | None) -> dict[str, Any]:
        driver = self._driver
        providers = ([{"name": "webnn", "deviceType": device_type or "cpu"}] if self.hardware == "webnn"
                     else [self.hardware])
        url = driver.add_blob(self.path)
        try:
            value = driver.call("load", bundle=self.bundle, timeout_s=_seconds(TIMEOUT_ENV), key=self.key,
                                model=url, executionProviders=providers,
                                numThreads=int(_seconds(THREADS_ENV)))
        except _web().PageError as exc:
            # The page could not load onnxruntime-web's wasm (a missing or broken install): add the fix.
            text = str(exc).lower()
            failed = any(word in text for word in ("fetch", "failed to load", "aborted", "404", "compile"))
            if ".wasm" in text or "wasm" in text and failed:
                raise _web().PageError(f"{exc}{_web().hello_hint(str(exc))}") from exc
            raise
        finally:
            driver.drop_blob(url)
        self._launches = driver.launches
        self.details.update({"web_bundle": self.bundle, "web_ort_version": driver.hello.get("ortVersion"),
                             "web_user_agent": driver.hello.get("userAgent"),
                             "web_cross_origin_isolated": driver.hello.get("crossOriginIsolated"),
                             "web_session_create_ms": round(float(value.get("createMs") or 0.0), 3)})
        return dict(value)

    def prepare(self, inputs: dict[str, Any]) -> _PageCall:
        import numpy as np

        feeds, chunks, offset = [], [], 0
        arrays = numpy_feeds(inputs, dict.fromkeys(self.input_names), "onnxruntime-web session")
        for name, array in arrays.items():
            if array.dtype.kind == "f":
                array = array.astype(np.float16 if self.precision == "fp16" else np.float32)
            dtype = str(array.dtype)
            if dtype not in _PAGE_DTYPES:
                raise UnsupportedCase(f"onnxruntime-web: input {name} has dtype {array.dtype}, which the page cannot feed")
            data = array.tobytes()
            feeds.append({"name": name, "dtype": dtype, "dims": list(array.shape), "offset": offset, "bytes": len(data)})
            chunks.append(data)
            offset += len(data)
        return _PageCall(self, feeds, b"".join(chunks))

    def measure(self, call: _PageCall, timing: Any) -> RemoteMeasurement:
        driver = self._driver
        if driver.launches != self._launches or not driver.running():
            # A crash or hang in another case restarted the browser: this page has no session now.
            self.load(self.details.get("web_device_type"))
        warmup_s = _seconds(WARMUP_ENV)
        settle_s = _seconds(SETTLE_ENV)
        url = driver.add_blob(call.blob)
        sampler = _MemorySampler(driver.pid)
        try:
            value = driver.call("measure", bundle=self.bundle, timeout_s=_seconds(TIMEOUT_ENV) + warmup_s
                                + settle_s + timing.min_time_s, key=self.key, inputs=url, feeds=call.feeds,
                                timing={"warmup_iterations": timing.warmup_iterations, "warmup_s": warmup_s,
                                        "min_iterations": timing.min_iterations, "min_time_s": timing.min_time_s,
                                        "max_iterations": timing.max_iterations, "settle_s": settle_s,
                                        "settle_window_s": SETTLE_WINDOW_S, "settle_tolerance": SETTLE_TOLERANCE})
        finally:
            driver.drop_blob(url)
            peak_mb = sampler.stop()
        if value.get("settleWindows"):  # this measurement was the page's first: it warmed up until steady
            self.details.update({"web_warmup_settled": bool(value.get("settled")),
                                 "web_warmup_windows": int(value["settleWindows"]),
                                 "web_warmup_settle_ms": round(float(value.get("warmupMs") or 0.0), 1)})
        types = dict(value.get("outputTypes") or {})
        ran = {_OUTPUT_PRECISION.get(t, t) for t in types.values() if t in _OUTPUT_PRECISION}
        if ran and ran != {self.precision}:
            raise PrecisionMismatch(f"{self.spec.name}: asked onnxruntime-web for {self.precision}, the page's outputs "
                                    f"are {', '.join(sorted(set(types.values())))}")
        return RemoteMeasurement(
            tuple(float(v) for v in value["timesMs"]), float(value["coldMs"]), peak_mb,
            {**self.details,
                "web_memory": MEMORY_KIND, "web_memory_doc": MEMORY_DOC,
                "web_warmup_iterations": value.get("warmupIterations"),
                "web_warmup_ms": round(float(value.get("warmupMs") or 0.0), 1), "web_output_types": types,
                "timer": "performance.now() in the page"})

    def release(self) -> None:
        driver = self._driver
        if driver.running() and driver.launches == self._launches:
            # a browser that cannot release is killed at the next failure or exit
            with contextlib.suppress(Exception):
                driver.call("release", bundle=self.bundle, timeout_s=30.0, key=self.key)

    input_names: tuple[str, ...] = ()


class OnnxRuntimeWebBackend(Backend):
    """onnxruntime-web in headless Chromium: WebAssembly, WebGPU and WebNN providers."""

    name = "onnxruntime-web"
    hardware: tuple[str, ...] = ("wasm", "webgpu", "webnn")
    precisions: tuple[str, ...] = ("fp32", "fp16")

    def __init__(self) -> None:
        self._loads = itertools.count(1)  # next() on it is atomic: keys stay unique across threads

    def default_precisions(self, hardware: str, hw: HardwareInfo) -> tuple[str, ...]:
        return ("fp32",)

    def unavailable(self, hardware: str, precision: str, hw: HardwareInfo) -> str | None:
        if hardware not in self.hardware:
            return f"{self.name}: no hardware target {hardware!r} (known: {', '.join(self.hardware)})"
        target = hw.get(hardware)
        if target is None:
            return f"{hardware}: not detected (the pytest_hwbench.hardware entry points are not installed: pip install -e .)"
        if not target.available:
            return f"{hardware}: {target.reason}"
        if importlib.util.find_spec("onnx") is None:
            return f"{self.name} needs onnx for the export (pip install 'pytest-hwbench[onnx]')"
        if precision not in target.precisions:
            why = " (the WebGPU adapter lacks the shader-f16 feature)" if hardware == "webgpu" else ""
            return f"{precision}: {self.name} runs {', '.join(target.precisions)} on {hardware}{why}"
        return None

    def shutdown(self) -> None:
        """End the browser (session end); the next load starts a new one. Nothing to end, and
        nothing imported, when no web case ran in this process."""
        web = sys.modules.get(f"{__package__.rpartition('.')[0]}.web")
        if web is not None:
            web.close_shared_driver()

    def load(self, spec: ModelSpec, hardware: str, precision: str, device_index: int = 0) -> LoadedModel:
        from ..hardware import detect_hardware
        from .onnxruntime import convert_fp16, graph_precision

        exported = export_onnx(spec)
        path = convert_fp16(exported, spec.name) if precision == "fp16" else exported.path
        graph, shares = graph_precision(path)
        if graph != precision:
            raise PrecisionMismatch(f"{spec.name}: asked {self.name} for {precision}, the graph holds {graph} "
                                    f"(weights by precision: {shares})")
        if any(path.parent.glob("*.data")):
            raise UnsupportedCase(f"{self.name}: {spec.name}'s ONNX file keeps its weights in external data, "
                                  "which the page does not load")
        target = detect_hardware([hardware])[hardware]  # detected by `unavailable` already
        found = target.details
        device_type = found.get("device_type") if hardware == "webnn" else None
        key = f"{spec.name}-{hardware}-{precision}-{next(self._loads)}"
        model = _PageModel(spec, hardware, precision, path, key)
        value = model.load(device_type)
        model.input_names = tuple(value.get("inputNames") or exported.input_names)
        model.details.update({"web_device_type": device_type, "exporter": exported.exporter, "opset": exported.opset,
                              "onnx_file": str(path), "web_browser_version": found.get("browser_version"),
                              "web_timer_resolution_ms": found.get("timer_resolution_ms"),
                              **{f"weights_{k}": v for k, v in shares.items()}})
        if hardware == "webgpu":
            model.details.update(web_adapter=found.get("adapter"), web_software_adapter=bool(found.get("software_adapter")))
        threads = int(value["numThreads"]) if hardware == "wasm" and value.get("numThreads") else None
        device_name = str(target.devices[0].name if target.devices else hardware)
        return _WebModel(precision=graph, device_name=device_name, timer="remote", device_kind=hardware, threads=threads,
                         details=model.details, page=model)


@dataclass(frozen=True, kw_only=True)
class _WebModel(LoadedModel):
    """A session in a browser page: its calls are measured in the page, and the browser's CPU
    time is the case's own."""

    page: _PageModel

    def prepare(self, inputs: dict[str, Any]) -> _PageCall:
        return self.page.prepare(inputs)

    def close(self) -> None:
        self.page.release()

    def own_pids(self) -> tuple[int, ...]:
        return _browser_pids(self.page._driver.pid)


class _MemorySampler:
    """Peak PSS (MiB) summed over the browser's process tree, sampled while the page measures:
    the case's memory figure, browser overhead included (the page cannot tell its own memory).
    PSS, not RSS: summed RSS counts shared pages once per process, about twice the footprint."""

    INTERVAL_S = 0.25

    def __init__(self, pid: int | None) -> None:
        self.pid = pid
        self.peak = 0.0
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, name="hwbench-web-memory", daemon=True)
        self._thread.start()

    def _sample(self) -> None:
        import psutil

        total = 0
        for each in _browser_pids(self.pid):
            try:
                total += psutil.Process(each).memory_full_info().pss
            except Exception:  # noqa: BLE001 - a process that just ended
                continue
        self.peak = max(self.peak, total / 2**20)

    def _run(self) -> None:
        while not self._stop.is_set():
            self._sample()
            self._stop.wait(self.INTERVAL_S)

    def stop(self) -> float | None:
        self._stop.set()
        self._thread.join(timeout=5)
        self._sample()
        return round(self.peak, 1) if self.peak > 0 else None


def _browser_pids(pid: int | None) -> tuple[int, ...]:
    """The browser and its children: their CPU time is the case's own work."""
    if pid is None:
        return ()
    try:
        import psutil

        return (pid, *(p.pid for p in psutil.Process(pid).children(recursive=True)))
    except Exception:  # noqa: BLE001 - gone
        return ()


BACKEND = register_backend(OnnxRuntimeWebBackend())

__all__ = ["BACKEND", "BUNDLES", "MEMORY_KIND", "OnnxRuntimeWebBackend"]
