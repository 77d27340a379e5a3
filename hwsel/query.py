"""The question and its answer: `Query`, `Prediction`, and the checks every field of a question passes.

A question names a model, a hardware kind and a device (``cuda`` + ``NVIDIA H100 80GB HBM3``, or
a spec name from `hwsel.specs` such as ``h100``), a precision, a batch size, a mode and a backend.
Modes and precisions are `pytest_hwbench.vocabulary`'s words: the selection modes are
``inference`` and ``train`` (``training`` is accepted and read as ``train``).

Every layer of `hwsel.layers` and the `hwsel.predict.Predictor` speak these values; nothing
here loads data, models or MLflow.
"""

from __future__ import annotations

import dataclasses
import os
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from types import MappingProxyType
from typing import Any

from pytest_hwbench.vocabulary import MODE_ALIASES, PRECISIONS
from pytest_hwbench.vocabulary import check_mode as _check_mode
from pytest_hwbench.vocabulary import check_precision as _check_precision

from .config import MODES

#: Batch sizes above this are refused: predictions stay finite and requests stay cheap.
MAX_BATCH_SIZE = 1 << 20


class HwselWarning(UserWarning):
    """Warnings from hwsel (filter with ``-W ignore::hwsel.HwselWarning``)."""


# --- values ---------------------------------------------------------------------------------------

@dataclass(frozen=True)
class Prediction:
    """Predicted (or measured) performance of one case on one hardware target.

    `interval` is a (low, high) range for the latency in milliseconds: the measured spread, the
    registered model's prediction interval, or a fixed factor around an estimate. `device` is the
    device the answer is for (None: none known, the kind's generic spec), `device_source` why that
    one (see `DEVICE_SOURCES`) and `device_spec` the `hwsel.specs` entry its numbers came from.
    """

    hardware: str
    latency_ms: float
    throughput: float
    memory_mb: float
    source: str
    interval: tuple[float, float]
    backend: str | None = None
    precision: str = "fp32"
    batch_size: int = 1
    mode: str = "inference"
    detail: str = ""
    device: str | None = None
    device_source: str = ""
    device_spec: str = ""

    def device_text(self) -> str:
        """The device and why it was chosen, in words (for CLI lines and explanations)."""
        return describe_device(self.hardware, self.device, self.device_source, self.device_spec)

    def to_dict(self) -> dict[str, Any]:
        """JSON-ready dict; also carries the predecessor's names (latency, memory_usage)."""
        return {
            "hardware": self.hardware,
            "latency_ms": self.latency_ms,
            "throughput": self.throughput,
            "memory_mb": self.memory_mb,
            "source": self.source,
            "interval": list(self.interval),
            "backend": self.backend,
            "precision": self.precision,
            "batch_size": self.batch_size,
            "mode": self.mode,
            "detail": self.detail,
            "device": self.device,
            "device_source": self.device_source,
            "device_spec": self.device_spec,
            "latency": self.latency_ms,
            "memory_usage": self.memory_mb,
        }


@dataclass(frozen=True)
class Query:
    """One case to predict.

    `backend` None means the hardware's default (`default_backend`); `device_name` None means
    the predictor's default device for the hardware (`Predictor.default_device`). `Predictor`
    fills both in (`Predictor.resolve`) and sets `device_source`. A mode in an older spelling
    (``training``) is stored by its one name (``train``).
    """

    model: Any  # hwsel.features.ModelInfo
    hardware: str
    precision: str = "fp32"
    batch_size: int = 1
    mode: str = "inference"
    backend: str | None = None
    device_name: str | None = None
    device_source: str = ""

    def __post_init__(self) -> None:
        if self.mode in MODE_ALIASES:
            object.__setattr__(self, "mode", MODE_ALIASES[self.mode])


#: Why an answer is for its device: named in the question, found on this machine, the one most
#: benchmark records of the kind hold, or none at all (the kind's generic spec).
DEVICE_SOURCES: Mapping[str, str] = MappingProxyType({
    "asked": "asked for",
    "detected": "default: detected here",
    "records": "default: most benchmark records of {hardware}",
    "none": "no device given, none detected or recorded: generic {hardware} spec",
})

#: Backend a question means when it names none: eager PyTorch, except on targets that are a runtime.
DEFAULT_BACKEND = "torch"
_HARDWARE_BACKENDS: Mapping[str, str] = MappingProxyType({"openvino": "openvino", "qnn": "qai_hub",
                                                          "wasm": "onnxruntime-web", "webgpu": "onnxruntime-web",
                                                          "webnn": "onnxruntime-web"})


def default_backend(hardware: str) -> str:
    """The backend a question about `hardware` means when it names none (eager ``torch`` mostly)."""
    return _HARDWARE_BACKENDS.get(hardware, DEFAULT_BACKEND)


def describe_device(hardware: str, device: str | None, source: str, spec: str = "") -> str:
    """``NVIDIA H100 80GB HBM3 (default: most benchmark records of cuda)``, or the generic spec."""
    why = DEVICE_SOURCES.get(source, source).format(hardware=hardware)
    if device is None:
        return why
    return f"{device} ({why})" if not spec or spec.lower() == device.lower() else f"{device} ({why}; spec {spec})"


# --- validation ------------------------------------------------------------------------------------

def check_device(device: Any, name: str = "device") -> str:
    """A device name or spec name: a non-empty line of at most 200 characters."""
    if not isinstance(device, str) or not device.strip() or len(device) > 200 or not device.isprintable():
        raise ValueError(f"{name} must be a device name such as 'NVIDIA H100 80GB HBM3' or a spec name such as "
                         f"'h100' (hwsel.specs), got {device!r}")
    return " ".join(device.split())


def device_map(hardware: Sequence[str], device: str | Mapping[str, str] | None) -> dict[str, str]:
    """hardware -> asked device, from one device name (one hardware target) or a mapping.

    Raises ValueError naming the fix: one name for several targets is ambiguous, and a mapping
    may only name targets that are asked about.
    """
    if device is None:
        return {}
    if isinstance(device, Mapping):
        out = {}
        for hw, name in device.items():
            if hw not in hardware:
                raise ValueError(f"device given for {hw!r}, which is not among the hardware asked about "
                                 f"({', '.join(hardware)}); name one of those")
            out[str(hw)] = check_device(name, f"device for {hw}")
        return out
    name = check_device(device)
    if len(hardware) != 1:
        from .specs import CPU_TARGETS

        hw = next((h for h in hardware if h not in CPU_TARGETS), hardware[0])  # device names mostly name accelerators
        raise ValueError(f"one device ({name!r}) for several hardware targets ({', '.join(hardware)}); give one "
                         f"per target, e.g. {{'{hw}': {name!r}}} (CLI: --device {hw}={name!r})")
    return {hardware[0]: name}


def check_batch_size(batch_size: Any, name: str = "batch_size") -> int:
    """A whole number in [1, MAX_BATCH_SIZE]; else ValueError naming the value."""
    if isinstance(batch_size, bool) or not isinstance(batch_size, int):
        if isinstance(batch_size, float) and batch_size.is_integer():
            batch_size = int(batch_size)
        else:
            raise ValueError(f"{name} must be a whole number >= 1, got {batch_size!r}")
    if not 1 <= batch_size <= MAX_BATCH_SIZE:
        raise ValueError(f"{name} must be between 1 and {MAX_BATCH_SIZE}, got {batch_size}")
    return batch_size


def check_precision(precision: Any) -> str:
    """One of `pytest_hwbench.vocabulary.PRECISIONS`; else ValueError listing them."""
    try:
        return _check_precision(precision)
    except ValueError:
        raise ValueError(f"unknown precision {precision!r}; accepted: {', '.join(PRECISIONS)}") from None


def check_mode(mode: Any) -> str:
    """A selection mode by its one name (`hwsel.config.MODES`; ``training`` is ``train``); else
    ValueError listing them."""
    try:
        return _check_mode(mode, MODES)
    except ValueError:
        raise ValueError(f"unknown mode {mode!r}; accepted: {', '.join(MODES)}") from None


def check_modes(modes: Sequence[Any]) -> list[str]:
    """`check_mode` of each, by their one names, each once (``train`` and ``training`` are one mode)."""
    return list(dict.fromkeys(check_mode(m) for m in modes))


def check_backend(backend: Any) -> str | None:
    """None (the hardware's default) or a short backend name; else ValueError."""
    if backend is None:
        return None
    if not isinstance(backend, str) or not backend or len(backend) > 64:
        raise ValueError(f"backend must be a short name such as torch, onnxruntime or openvino, got {backend!r}")
    return backend


# --- models ----------------------------------------------------------------------------------------

def model_info(model: Any, config: str | os.PathLike[str] | Mapping[str, Any] | None = None) -> Any:
    """A `ModelInfo` for a zoo name, a hub-style alias, or a ModelInfo-like object (returned as is).

    With `config` (a ``config.json``, a folder holding one, its parsed contents, or a model-set
    file), `model` may be None: the name then comes from the config
    (`hwsel.features.resolve_model`). Unknown names raise KeyError listing close matches and how
    to describe a model of your own.
    """
    if model is None and config is not None:
        from .features import resolve_model

        return resolve_model(None, config)
    if not isinstance(model, str):
        if all(hasattr(model, a) for a in ("name", "family", "param_count", "flops_per_item")):
            return model
        raise TypeError(f"model must be a name or a ModelInfo, got {type(model).__name__}")
    if not model or len(model) > 200:
        raise KeyError(f"unknown model {model[:200]!r}: give a zoo name such as bert-base or gpt2")
    from .features import resolve_model

    return resolve_model(model, config)


def with_sequence_length(info: Any, sequence_length: int | None) -> Any:
    """`info` at another sequence length (FLOPs scaled linearly), renamed ``name@seqN``.

    The new name keeps measured data of the default length from answering for it.
    """
    if sequence_length is None or sequence_length == getattr(info, "sequence_length", None):
        return info
    length = check_batch_size(sequence_length, "sequence_length")
    old = getattr(info, "sequence_length", None)
    if not old:
        raise ValueError(f"sequence_length does not apply to {info.name}: its input is not a token sequence")
    return dataclasses.replace(info, name=f"{info.name}@seq{length}", sequence_length=length,
                               flops_per_item=float(info.flops_per_item) * length / old)


__all__ = [
    "DEFAULT_BACKEND",
    "DEVICE_SOURCES",
    "MAX_BATCH_SIZE",
    "HwselWarning",
    "Prediction",
    "Query",
    "check_backend",
    "check_batch_size",
    "check_device",
    "check_mode",
    "check_modes",
    "check_precision",
    "default_backend",
    "describe_device",
    "device_map",
    "model_info",
    "with_sequence_length",
]
