"""Qualcomm AI Hub backend: the shared ONNX export compiled for and profiled on a hosted
Snapdragon device, reporting AI Hub's own measurements.

`prepare(inputs)` submits a compile and a profile job once per input shape; its call is that
shape's `RemoteProfile` (`MeasuredElsewhere`). The API token goes to `qai_hub.ClientConfig` only;
every message from the client path goes through `scrub` first.
"""

from __future__ import annotations

import configparser
import contextlib
import importlib
import importlib.util
import inspect
import os
import re
import shutil
import statistics
from collections import Counter
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from ..env_settings import ENV_SETTINGS
from ..errors import HwbenchError, UnsupportedCase
from ..hardware import HardwareInfo
from ..models import ModelSpec
from ..probes.qnn import NOT_INSTALLED, TOKEN_ENV, client_ini
from ._onnx_export import ExportedModel, cached_variant, export_onnx
from .base import Backend, LoadedModel, RemoteMeasurement, register_backend

#: Environment variable naming the AI Hub device (``qai-hub list-devices`` shows the names).
DEVICE_ENV = "HWBENCH_QAI_HUB_DEVICE"
DEFAULT_DEVICE = "Samsung Galaxy S24 (Family)"
#: Seconds to wait for one compile or profile job (declared in `pytest_hwbench.env_settings`).
TIMEOUT_ENV = "HWBENCH_QAI_HUB_TIMEOUT_S"

#: AI Hub compile options per precision. ``qnn_context_binary`` runs on the Hexagon NPU (HTP)
#: only, without a CPU fallback, so a profile of it is an NPU measurement. The NPU computes float
#: graphs in fp16, stated by ``--quantize_full_type float16``; int8 is post-training quantization
#: at compile time (with ``calibration_data``, as in qai-hub 0.56's CLI tests); IO stays float/int.
COMPILE_OPTIONS: dict[str, str] = {
    "fp16": "--target_runtime qnn_context_binary --quantize_full_type float16",
    "int8": "--target_runtime qnn_context_binary --quantize_full_type int8",
}
#: Input dtypes AI Hub accepts in ``input_specs`` (qai-hub 0.56 ``submit_compile_job`` docstring).
_SPEC_DTYPES = frozenset({"float32", "int8", "int16", "int32", "int64", "uint8", "uint16"})
#: Compute units a profile's layers report (qai-hub strips the ``COMPUTE_UNIT_`` prefix).
COMPUTE_UNITS: tuple[str, ...] = ("NPU", "GPU", "CPU")


class QaiHubError(HwbenchError):
    """An AI Hub request or job failed (message scrubbed of the API token)."""


# --- the token --------------------------------------------------------------------------------

#: Token-shaped text that must not survive even when we do not know the token itself:
#: ``Authorization: token XYZ`` request headers and ``api_token='XYZ'`` (a ClientConfig repr).
_TOKEN_PATTERNS: tuple[re.Pattern[str], ...] = (
    re.compile(r"(?i)(authorization['\"]?\s*[:=]\s*['\"]?\s*token\s+)[^\s'\",}]+"),
    re.compile(r"(?i)(api_token['\"]?\s*[:=]\s*['\"]?)[^\s'\",)}]+"),
)
REDACTED = "***"


def known_tokens() -> tuple[str, ...]:
    """The API tokens this process could send: ``$QAI_HUB_API_TOKEN`` and the ini file's."""
    parser = configparser.ConfigParser()
    with contextlib.suppress(configparser.Error, OSError, UnicodeDecodeError):
        parser.read(client_ini())  # a missing file reads as empty
    tokens = (os.environ.get(TOKEN_ENV, ""), parser.get("api", "api_token", fallback=""))
    return tuple(dict.fromkeys(t.strip() for t in tokens if t and t.strip()))


def scrub(text: object, secrets: Iterable[str] | None = None) -> str:
    """`text` as a string with every API token in `secrets` (default: `known_tokens()`), and any
    token-shaped text (``Authorization: token ...``, ``api_token=...``), replaced by ``***``."""
    out = str(text)
    for secret in sorted(known_tokens() if secrets is None else secrets, key=len, reverse=True):
        if secret.strip():
            out = out.replace(secret, REDACTED)
    for pattern in _TOKEN_PATTERNS:
        out = pattern.sub(lambda m: m.group(1) + REDACTED, out)
    return out


# --- profile -> measurement -------------------------------------------------------------------

@dataclass(frozen=True)
class RemoteProfile:
    """What one AI Hub profile job measured, in milliseconds and MiB; also the call `prepare`
    returns (`MeasuredElsewhere`: calling it raises).

    `times_ms` holds one time per profiler iteration (profile format 1.2+), else AI Hub's single
    estimate; `peak_memory_mb` is the inference peak-memory range (low, high) or None; `layers`
    counts layers per compute unit (NPU, GPU, CPU, ...).
    """

    times_ms: tuple[float, ...]
    estimated_ms: float | None
    peak_memory_mb: tuple[float, float] | None
    layers: Mapping[str, int]
    first_load_ms: float | None = None
    warm_load_ms: float | None = None
    compile_job_id: str = ""
    profile_job_id: str = ""
    per_iteration: bool = False

    @property
    def median_ms(self) -> float:
        return float(statistics.median(self.times_ms))

    @property
    def peak_memory_high_mb(self) -> float | None:
        """The upper end of the inference peak-memory range (what a sizing decision needs)."""
        return self.peak_memory_mb[1] if self.peak_memory_mb else None

    def __call__(self) -> Any:
        raise QaiHubError("qai_hub: this case ran on an AI Hub device; its times come from "
                          "measure_remote(), a local clock measures nothing here")

    def measure_remote(self, timing: Any) -> RemoteMeasurement:
        """What the profile job measured on the device (AI Hub picks its own iterations, so
        `timing` does not apply); this machine's load says nothing of it."""
        return RemoteMeasurement(self.times_ms, peak_device_memory_mb=self.peak_memory_high_mb, on_this_host=False)

    def details(self) -> dict[str, Any]:
        """Flat, JSON-ready entries for `LoadedModel.details` (and so the record's extra)."""
        low, high = self.peak_memory_mb or (None, None)
        return {"qai_hub_per_iteration_times": self.per_iteration, "qai_hub_estimated_inference_ms": self.estimated_ms,
                "qai_hub_peak_memory_mb_low": low, "qai_hub_peak_memory_mb_high": high,
                "qai_hub_first_load_ms": self.first_load_ms, "qai_hub_warm_load_ms": self.warm_load_ms,
                "qai_hub_compile_job": self.compile_job_id, "qai_hub_profile_job": self.profile_job_id,
                **{f"qai_hub_layers_{unit.lower()}": n for unit, n in self.layers.items()}}


def _us_to_ms(value: Any) -> float | None:
    if value is None or isinstance(value, bool):
        return None
    number = float(value)
    return number / 1e3 if number > 0 else None


def _bytes_range_mb(value: Any) -> tuple[float, float] | None:
    if not isinstance(value, (list, tuple)) or len(value) != 2 or value[1] in (None, 0):
        return None
    low, high = (float(v or 0) / 2**20 for v in value)
    return (min(low, high), max(low, high))


def profile_to_measurement(profile: Mapping[str, Any], *, compile_job_id: str = "",
                           profile_job_id: str = "") -> RemoteProfile:
    """A profile dict from ``ProfileJob.download_profile()`` (qai-hub 0.56's
    ``_profile_pb_to_python_dict``: microseconds, bytes; version-0 profiles have None in the newer
    keys) as a `RemoteProfile`. Raises ValueError naming what is missing when it holds no time."""
    summary = profile.get("execution_summary")
    if not isinstance(summary, Mapping):
        raise ValueError(f"AI Hub profile has no execution_summary (keys: {sorted(profile)})")
    estimated = _us_to_ms(summary.get("estimated_inference_time"))
    all_times = summary.get("all_inference_times") or ()
    times = tuple(t for t in (_us_to_ms(v) for v in all_times) if t is not None)
    per_iteration = bool(times)
    if not times:
        if estimated is None:
            raise ValueError("AI Hub profile has neither all_inference_times nor a positive "
                             "estimated_inference_time")
        times = (estimated,)
    single = summary.get("estimated_inference_peak_memory")  # profiles before format 1.1
    peak = _bytes_range_mb(summary.get("inference_memory_peak_range")) or _bytes_range_mb((single, single))
    units = Counter(str(layer.get("compute_unit") or "UNSPECIFIED").upper()
                    for layer in profile.get("execution_detail") or ())
    return RemoteProfile(times, estimated, peak, dict.fromkeys(COMPUTE_UNITS, 0) | units,
                         _us_to_ms(summary.get("first_load_time")), _us_to_ms(summary.get("warm_load_time")),
                         compile_job_id, profile_job_id, per_iteration)


# --- the client path --------------------------------------------------------------------------

def _import_hub() -> Any:
    """The qai_hub module (a seam: tests put a fake here)."""
    return importlib.import_module("qai_hub")


def _client(hub: Any) -> Any:
    token = os.environ.get(TOKEN_ENV, "").strip()
    # Without the variable, the client reads the ini file `qai-hub configure` wrote.
    return hub.Client(config=hub.ClientConfig(api_token=token)) if token else hub.Client()


def _remote(what: str, fn: Callable[[], Any]) -> Any:
    """`fn()`, with any client error re-raised as a scrubbed `QaiHubError` (context dropped)."""
    try:
        return fn()
    except HwbenchError:
        raise
    except Exception as exc:  # requests, botocore, qai_hub.Error...: all may quote the request
        message = scrub(f"qai_hub: {what} failed: {type(exc).__name__}: {exc}")
    raise QaiHubError(message)


def _run_job(what: str, submit: Callable[[], Any]) -> tuple[Any, str, bool, str]:
    """Submit a job and wait for it: (job, its id, succeeded, scrubbed failure message)."""
    job = _remote(f"submitting the {what} job", submit)
    status = _remote(f"waiting for the {what} job",
                     lambda: job.wait(timeout=int(ENV_SETTINGS[TIMEOUT_ENV].read() or 0)))
    ok = status if isinstance(status, bool) else bool(getattr(status, "success", False))  # older clients: a bool
    message = str(getattr(status, "message", "") or "")
    if not ok and not message:
        status = _remote(f"reading the {what} job status", job.get_status)
        message = str(getattr(status, "message", "") or getattr(status, "code", "") or "failed")
    return job, str(getattr(job, "job_id", "")), ok, scrub(message)


def _input_specs(inputs: Mapping[str, Any], names: Iterable[str]) -> dict[str, tuple[tuple[int, ...], str]]:
    specs = {}
    for name in names:
        if name not in inputs:
            raise ValueError(f"qai_hub: the ONNX graph needs input {name!r}; got {sorted(inputs)}")
        value = inputs[name]
        dtype = str(value.dtype).removeprefix("torch.")
        if dtype not in _SPEC_DTYPES:
            allowed = ", ".join(sorted(_SPEC_DTYPES))
            raise UnsupportedCase(f"qai_hub: input {name!r} is {dtype}; AI Hub takes {allowed}")
        specs[name] = (tuple(int(d) for d in value.shape), dtype)
    return specs


def compile_options(precision: str, specs: Mapping[str, tuple[tuple[int, ...], str]]) -> str:
    """The AI Hub compile options for `precision` and these input specs."""
    options = COMPILE_OPTIONS[precision]
    if any(dtype == "int64" for _, dtype in specs.values()):
        options += " --truncate_64bit_io"  # QNN has no 64-bit integer tensors: token ids become int32
    return options


def _upload_path(exported: ExportedModel) -> Path:
    """What to upload: the .onnx file, or a folder of it and its one external-data file (qai-hub
    takes a folder of one .onnx and at most one .data file; our cache entry holds meta.json too)."""
    data = [p for p in exported.directory.iterdir() if p.suffix == ".data"]
    if not data:
        return exported.path

    def build(directory: Path) -> str:
        folder = directory / "model"
        folder.mkdir()
        for src in (exported.path, *data):
            try:
                os.link(src, folder / src.name)
            except OSError:  # another filesystem: copy
                shutil.copy2(src, folder / src.name)
        return "model"

    return cached_variant(exported, "qai-hub-upload", build)


def _submit_profile(client: Any, model: Any, device: Any, name: str) -> Any:
    # qai-hub 0.56 deprecates submit_profile_job for submit_inference_job(profile=True, inputs=None);
    # older clients have no `profile` argument there and need submit_profile_job.
    submit = getattr(client, "submit_inference_job", None)
    if submit is not None and "profile" in inspect.signature(submit).parameters:
        return submit(model, device, inputs=None, name=name, profile=True)
    return client.submit_profile_job(model, device, name=name)


@dataclass(frozen=True, kw_only=True)
class _HubModel(LoadedModel):
    """A model on an AI Hub device: each input shape is profiled there (once), and the profile is
    its measurement."""

    spec: ModelSpec
    exported: ExportedModel
    client: Any
    device: Any
    profiles: dict[tuple[Any, ...], RemoteProfile] = field(default_factory=dict)

    def prepare(self, inputs: dict[str, Any]) -> RemoteProfile:
        specs = _input_specs(inputs, self.exported.input_names)
        options = compile_options(self.precision, specs)
        key = tuple(sorted(specs.items()))
        if key not in self.profiles:
            self.profiles[key] = self._measure(inputs, specs, options)
        # The runner copies details after prepare: these entries describe the case prepared last.
        self.details.update(self.profiles[key].details(), qai_hub_compile_options=options)
        return self.profiles[key]

    def close(self) -> None:
        self.profiles.clear()

    def _measure(self, inputs: dict[str, Any], specs: dict[str, tuple[tuple[int, ...], str]],
                 options: str) -> RemoteProfile:
        batch = next(iter(specs.values()))[0][0] if specs else 0
        name = f"hwbench {self.spec.name} {self.precision} b{batch}"
        kwargs: dict[str, Any] = {"name": name, "input_specs": specs, "options": options}
        if self.precision == "int8":
            # Post-training quantization needs activations to observe: the case's own inputs
            # (random, like every zoo input; we measure speed, not accuracy).
            kwargs["calibration_data"] = {k: [inputs[k].detach().cpu().numpy()] for k in specs}
        model = _upload_path(self.exported)
        job, compile_id, ok, message = _run_job(
            "compile", lambda: self.client.submit_compile_job(model=str(model), device=self.device, **kwargs))
        if not ok:
            raise UnsupportedCase(f"{self.precision}: AI Hub could not compile {self.spec.name} for "
                                  f"{self.device.name} (job {compile_id}): {message}")
        target = _remote("fetching the compiled model", job.get_target_model)
        if target is None:
            raise UnsupportedCase(f"{self.precision}: AI Hub compile job {compile_id} produced no model")
        profile_job, profile_id, ok, message = _run_job(
            "profile", lambda: _submit_profile(self.client, target, self.device, name))
        if not ok:
            raise QaiHubError(f"qai_hub: profile job {profile_id} for {self.spec.name} on {self.device.name} "
                              f"failed: {message}")
        raw = _remote("downloading the profile", profile_job.download_profile)
        try:
            measured = profile_to_measurement(raw, compile_job_id=compile_id, profile_job_id=profile_id)
        except ValueError as exc:
            raise QaiHubError(scrub(f"qai_hub: profile job {profile_id}: {exc}")) from None
        device = getattr(profile_job, "device", None)
        if getattr(device, "name", ""):
            self.details["qai_hub_device"] = f"{device.name} {getattr(device, 'os', '')}".strip()
        return measured


class QaiHubBackend(Backend):
    """Qualcomm AI Hub: compile for and profile on a hosted Snapdragon device's NPU."""

    distributions = ("qai-hub",)

    name = "qai_hub"
    hardware: tuple[str, ...] = ("qnn",)
    precisions: tuple[str, ...] = ("fp16", "int8")

    #: The AI Hub device asked for (``--hwbench-qai-hub-device``, `pytest_hwbench.backends.qai_hub_options`).
    device: str | None = None

    def default_precisions(self, hardware: str, hw: HardwareInfo) -> tuple[str, ...]:
        return self.precisions

    def device_name(self) -> str:
        """The AI Hub device cases run on: `device`, else ``$HWBENCH_QAI_HUB_DEVICE``, else `DEFAULT_DEVICE`."""
        return self.device or os.environ.get(DEVICE_ENV, "").strip() or DEFAULT_DEVICE

    def unavailable(self, hardware: str, precision: str, hw: HardwareInfo) -> str | None:
        if hardware not in self.hardware:
            return f"{self.name}: no hardware target {hardware!r} (known: {', '.join(self.hardware)})"
        target = hw["qnn"]
        if not target.available:
            return f"qnn: {target.reason}"
        if importlib.util.find_spec("onnx") is None:
            return "qnn: the ONNX export needs onnx (pip install 'pytest-hwbench[qnn]')"
        if precision == "fp32":
            return ("fp32: the Hexagon NPU computes float graphs in fp16; AI Hub has no fp32 NPU path "
                    "(run fp16 or int8)")
        if precision not in self.precisions:
            return f"{precision}: {self.name} runs {', '.join(self.precisions)} on qnn"
        return None

    def load(self, spec: ModelSpec, hardware: str, precision: str, device_index: int = 0) -> LoadedModel:
        try:
            hub = _import_hub()
        except ImportError:
            raise UnsupportedCase(f"qnn: {NOT_INSTALLED}") from None
        exported = export_onnx(spec)
        client = _remote("configuring the client", lambda: _client(hub))
        device_name = self.device_name()
        device = _remote(f"naming device {device_name!r}", lambda: hub.Device(device_name))
        details = {"qai_hub_version": str(getattr(hub, "__version__", "?")), "qai_hub_device_requested": device_name,
                   "target_runtime": "qnn_context_binary", "exporter": exported.exporter, "opset": exported.opset,
                   "onnx_file": str(exported.path)}
        # The precision is what the compile options ask for: AI Hub reports no per-layer dtype.
        return _HubModel(precision=precision, device_name=device_name, timer="remote", device_kind="qnn",
                         details=details, spec=spec, exported=exported, client=client, device=device)


BACKEND = register_backend(QaiHubBackend())

__all__ = ["BACKEND", "COMPILE_OPTIONS", "DEFAULT_DEVICE", "DEVICE_ENV", "QaiHubBackend", "QaiHubError", "RemoteProfile",
           "compile_options", "known_tokens", "profile_to_measurement", "scrub"]
