"""Detection of the web targets ``wasm``, ``webgpu`` and ``webnn`` (entry-point group
``pytest_hwbench.hardware``): the browser, onnxruntime-web and what a probe page sees, found once
per process (`web_facts`); `targets_from_facts` interprets those facts and touches no browser.
"""

from __future__ import annotations

import functools
import hashlib
import json
import os
import platform
import time
from collections.abc import Mapping
from dataclasses import asdict
from pathlib import Path
from typing import Any

from ..facts import target_names
from ..hardware import DeviceInfo, TargetInfo, register_probe
from ..vocabulary import cache_dir
from ._locate import find_browser, find_ort_web, write_cache

#: Seconds the probe may take, the browser's start included (`pytest_hwbench.env_settings`). A
#: browser that hangs at start costs this once: the failure is cached like a finding.
PROBE_TIMEOUT_ENV = "HWBENCH_WEB_PROBE_TIMEOUT_S"
#: ``HWBENCH_WEB_PROBE=0`` skips the probe page (no browser starts): the web targets are then
#: unavailable, saying so. ``fresh`` probes again even when a cached probe is still valid.
PROBE_ENV = "HWBENCH_WEB_PROBE"
#: Seconds a probe's findings, or its failure, are reused (`cache_dir("web")/probe.json`) by later
#: processes on this host with the same browser and flags (`_probe_key`).
PROBE_CACHE_S = 24 * 3600.0
#: WebNN device types the probe asks `navigator.ml.createContext` for, in preference order.
WEBNN_DEVICE_TYPES: tuple[str, ...] = ("npu", "gpu", "cpu")
#: Adapter architectures that are software renderers, not GPUs.
SOFTWARE_ADAPTERS: tuple[str, ...] = ("swiftshader", "llvmpipe", "lavapipe", "warp", "softpipe")
NO_WEBNN_FIX = ("WebNN needs a browser with a WebNN backend (e.g. Chrome or Edge on Windows, ChromeOS or macOS "
                "with --enable-features=WebMachineLearningNeuralNetwork); this Chromium build has none")
NO_WEBGPU_FIX = ("WebGPU needs an adapter: run Chromium with --enable-unsafe-webgpu (hwbench does) and, for a real "
                 "GPU, a Vulkan driver (extra flags through HWBENCH_BROWSER_FLAGS)")


def run_probe(browser: str) -> dict[str, Any]:
    """The probe page's findings in a fresh browser, which is ended before returning; the whole
    (browser start included) is bounded by ``$HWBENCH_WEB_PROBE_TIMEOUT_S``."""
    from ..env_settings import ENV_SETTINGS
    from ._driver import WebDriver

    timeout_s = float(ENV_SETTINGS[PROBE_TIMEOUT_ENV].read() or 0)
    started = time.monotonic()
    driver = WebDriver(browser, start_timeout_s=timeout_s)
    try:
        driver.open_page("")
        left = max(1.0, timeout_s - (time.monotonic() - started))
        return dict(driver.call("probe", timeout_s=left))
    finally:
        driver.close()


@functools.cache
def web_facts() -> dict[str, Any]:
    """Browser, onnxruntime-web and probe, found once per process (JSON-ready)."""
    from ..env_settings import ENV_SETTINGS

    browser, browser_reason = find_browser()
    ort, ort_reason = find_ort_web()
    facts: dict[str, Any] = {
        "browser": asdict(browser) if browser else None, "browser_reason": browser_reason,
        "ort_web": {"dist": str(ort.dist), "version": ort.version} if ort else None, "ort_web_reason": ort_reason,
        "probe": None, "probe_error": "",
    }
    setting = os.environ.get(PROBE_ENV, "").strip()
    if browser is None:
        return facts
    if setting == "0":
        facts["probe_off"] = True
        facts["probe_error"] = f"probe turned off ({PROBE_ENV}=0; unset it to probe the browser)"
        return facts
    from ._runfolder import sweep_stale_runs

    sweep_stale_runs()  # a killed run's browser folders, even when this run starts no browser
    try:
        ENV_SETTINGS[PROBE_TIMEOUT_ENV].read()
    except ValueError as exc:  # this run's setting, no finding about the browser: nothing is cached
        facts["probe_error"] = str(exc)
        return facts
    key = _probe_key(asdict(browser))
    cached = None if setting == "fresh" else _cached_probe(key)
    if cached is not None:
        facts["probe"], error = cached
        if error:
            facts["probe_error"] = f"{error} (cached from an earlier probe on this host; {PROBE_ENV}=fresh probes again)"
        return facts
    try:
        facts["probe"] = run_probe(browser.path)
    except Exception as exc:  # noqa: BLE001 - a broken browser makes the targets unavailable, with why
        facts["probe_error"] = f"{type(exc).__name__}: {exc}"
    write_cache(_probe_file(), {"key": key, "at": time.time(), "probe": facts["probe"], "error": facts["probe_error"]})
    return facts


def _probe_key(browser: Mapping[str, Any]) -> dict[str, Any]:
    """What the probe's findings depend on: host, browser, its flags, the probe page and this
    package's version (not onnxruntime-web: the probe page never loads it)."""
    from importlib.metadata import PackageNotFoundError, version

    from ._driver import BROWSER_FLAGS, FLAGS_ENV, PAGE_DIR

    digest = hashlib.sha256(b"".join(f.read_bytes() for f in sorted(PAGE_DIR.glob("bench.*")))).hexdigest()[:16]
    try:
        ours = version("pytest-hwbench")
    except PackageNotFoundError:
        ours = "?"
    return {"host": platform.node(), "browser": dict(browser), "page": digest,
            "flags": [*BROWSER_FLAGS, os.environ.get(FLAGS_ENV, "")], "pytest_hwbench": ours}


def _probe_file() -> Path:
    return cache_dir("web") / "probe.json"


def _cached_probe(key: Mapping[str, Any]) -> tuple[dict[str, Any] | None, str] | None:
    """A recent probe's with the same `key`: its findings and "", or None and why it failed; None
    when there is no such probe."""
    try:
        entry = json.loads(_probe_file().read_text())
        fresh = 0 <= time.time() - float(entry["at"]) < PROBE_CACHE_S
        same = entry["key"] == json.loads(json.dumps(key))
        if not (fresh and same):
            return None
        if entry.get("probe") is None:
            return None, str(entry["error"])
        return dict(entry["probe"]), ""
    except (OSError, ValueError, TypeError, KeyError):  # unreadable or malformed: probe again
        return None


def is_software_adapter(adapter: Mapping[str, Any]) -> bool:
    """Whether a WebGPU adapter is a software renderer (SwiftShader, llvmpipe...), not a GPU."""
    text = f"{adapter.get('vendor', '')} {adapter.get('architecture', '')} {adapter.get('description', '')}".lower()
    return bool(adapter.get("isFallbackAdapter")) or any(name in text for name in SOFTWARE_ADAPTERS)


def adapter_name(adapter: Mapping[str, Any]) -> str:
    """``WebGPU google swiftshader (software)``: the adapter as the browser names it."""
    words = [str(adapter.get(k) or "").strip() for k in ("vendor", "architecture", "description")]
    name = " ".join(dict.fromkeys(w for w in words if w)) or "unknown adapter"
    return f"WebGPU {name}" + (" (software)" if is_software_adapter(adapter) else "")


def _common(facts: Mapping[str, Any]) -> tuple[str | None, dict[str, Any]]:
    """A reason every web target shares (no browser, no onnxruntime-web, probe failed), and details."""
    browser, ort, probe = (facts.get(key) or {} for key in ("browser", "ort_web", "probe"))
    details: dict[str, Any] = {
        "browser": browser.get("path"), "browser_version": browser.get("version"),
        "ort_web_version": ort.get("version"), "ort_web_dist": ort.get("dist"),
        "cross_origin_isolated": probe.get("crossOriginIsolated"),
        "timer_resolution_ms": probe.get("timerResolutionMs"),
    }
    if not browser:
        return str(facts.get("browser_reason") or "no browser"), details
    if facts.get("probe") is None:
        if facts.get("probe_off"):
            return str(facts.get("probe_error")), details
        return f"the capability probe page failed in {browser.get('version')}: {facts.get('probe_error')}", details
    return None, details


def _wasm(probe: Mapping[str, Any], cpu_name: str) -> tuple[str, dict[str, Any], tuple[DeviceInfo, ...]]:
    if not probe.get("webassembly"):
        return "WebAssembly is not available in this browser", {}, ()
    extra = {"hardware_concurrency": probe.get("hardwareConcurrency"),
             "shared_array_buffer": probe.get("sharedArrayBuffer")}
    return "", extra, (DeviceInfo(0, cpu_name, None, "wasm-simd", ("fp32",)),)


def _webgpu(probe: Mapping[str, Any], cpu_name: str) -> tuple[str, dict[str, Any], tuple[DeviceInfo, ...]]:
    gpu = probe.get("webgpu") or {}
    adapter = gpu.get("adapter")
    if not adapter:
        return f"no WebGPU adapter: {gpu.get('error') or 'no WebGPU adapter'}; {NO_WEBGPU_FIX}", {}, ()
    features = list(gpu.get("features") or ())
    precisions = ("fp32", "fp16") if "shader-f16" in features else ("fp32",)
    software = is_software_adapter(adapter)
    extra = {"adapter": dict(adapter), "software_adapter": software, "features": features,
             "max_buffer_size": gpu.get("maxBufferSize")}
    return "", extra, (DeviceInfo(0, adapter_name(adapter), None, "software" if software else None, precisions),)


def _webnn(probe: Mapping[str, Any], cpu_name: str) -> tuple[str, dict[str, Any], tuple[DeviceInfo, ...]]:
    nn = probe.get("webnn") or {}
    contexts = nn.get("contexts") or {}
    working = [t for t in WEBNN_DEVICE_TYPES if (contexts.get(t) or {}).get("ok")]
    if not nn.get("present") or not working:
        errors = list(dict.fromkeys(str(c.get("error")) for c in contexts.values() if c.get("error")))
        why = "; ".join(errors) or str(nn.get("error") or "navigator.ml is undefined")
        return f"{why} ({NO_WEBNN_FIX})", {"contexts": contexts}, ()
    devices = tuple(DeviceInfo(i, f"WebNN {t}", None, t, ("fp32", "fp16")) for i, t in enumerate(working))
    return "", {"contexts": contexts, "device_type": working[0]}, devices


def targets_from_facts(facts: Mapping[str, Any], cpu_name: str = "cpu") -> dict[str, TargetInfo]:
    """The three web `TargetInfo`s those facts describe (`web_facts()`'s shape)."""
    reason, details = _common(facts)
    targets = {}
    for name, judge in (("wasm", _wasm), ("webgpu", _webgpu), ("webnn", _webnn)):
        if reason:
            targets[name] = TargetInfo(name, False, reason, details=details)
            continue
        why, extra, devices = judge(facts["probe"], cpu_name)
        # onnxruntime-web is asked after the browser's own verdict: installing it cannot give a
        # browser WebNN.
        if not why and not facts.get("ort_web"):
            why = str(facts.get("ort_web_reason") or "onnxruntime-web is not installed")
        if why:
            targets[name] = TargetInfo(name, False, why, details={**details, **extra})
        else:
            targets[name] = TargetInfo(name, True, "", devices, devices[0].precisions, {**details, **extra})
    return targets


@functools.cache
def web_targets() -> dict[str, TargetInfo]:
    """`targets_from_facts(web_facts())` with the host CPU's name, once per process."""
    from ..hardware import detect_cpu

    try:
        cpu = str(detect_cpu().details.get("model") or "cpu")
    except Exception:  # noqa: BLE001 - a name is all we need
        cpu = "cpu"
    return targets_from_facts(web_facts(), cpu)


for _name in target_names("web"):  # the facts table's web rows, one hardware marker each
    register_probe(_name, lambda name=_name: web_targets()[name])

__all__ = ["adapter_name", "is_software_adapter", "run_probe", "targets_from_facts",
           "web_facts", "web_targets"]
