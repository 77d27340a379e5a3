"""The question and its answer (`Query`, `Prediction`), the checks every field of a question
passes, and `ask`/`ask_grid`, the one question builder of the Python API, the CLI and REST: every
bad value raises one `QuestionError` naming the field. Nothing here loads data, models or MLflow.
"""

from __future__ import annotations

import dataclasses
import os
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from types import MappingProxyType
from typing import Any

from pytest_hwbench import facts
from pytest_hwbench.models import FAMILIES
from pytest_hwbench.vocabulary import MODE_ALIASES, PRECISIONS, TRAIN_MODE
from pytest_hwbench.vocabulary import check_precision as _check_precision

from .config import SelectionConfig, check_mode
from .resolution import ModelInfo, resolve_model

#: Batch sizes above this are refused: predictions stay finite and requests stay cheap.
MAX_BATCH_SIZE = 1 << 20


class HwselWarning(UserWarning):
    """Warnings from hwsel (filter with ``-W ignore::hwsel.HwselWarning``)."""


@dataclass(frozen=True)
class Prediction:
    """Predicted (or measured) performance of one case on one hardware target.

    `interval` is a (low, high) latency range in ms. `device` is the device the answer is for
    (None: the kind's generic spec), `device_source` why that one (`DEVICE_SOURCES`), `device_spec`
    the `hwsel.specs` entry of its numbers. `energy_j_per_item` is measured only (else None).
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
    energy_j_per_item: float | None = None

    def device_text(self) -> str:
        """The device and why it was chosen, in words (for CLI lines and explanations)."""
        return describe_device(self.hardware, self.device, self.device_source, self.device_spec)

    def to_dict(self) -> dict[str, Any]:
        """JSON-ready dict; also carries the predecessor's names (latency, memory_usage)."""
        return {**dataclasses.asdict(self), "interval": list(self.interval), "latency": self.latency_ms,
                "memory_usage": self.memory_mb}


@dataclass(frozen=True)
class Query:
    """One case to predict. `backend` and `device_name` None mean the hardware's defaults, which
    `Predictor.resolve` fills in (with `device_source`); a mode is stored by its one name."""

    model: ModelInfo
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


def default_backend(hardware: str) -> str:
    """The backend a question about `hardware` means when it names none (its `pytest_hwbench.facts` row's)."""
    try:
        return facts.target_facts(hardware).default_backend
    except KeyError:
        return DEFAULT_BACKEND


def describe_device(hardware: str, device: str | None, source: str, spec: str = "") -> str:
    """``NVIDIA H100 80GB HBM3 (default: most benchmark records of cuda)``, or the generic spec."""
    why = DEVICE_SOURCES.get(source, source).format(hardware=hardware)
    if device is None:
        return why
    return f"{device} ({why})" if not spec or spec.lower() == device.lower() else f"{device} ({why}; spec {spec})"


class QuestionError(ValueError):
    """A question that cannot be answered as asked: `field` names the input (``model``,
    ``hardware``, ``batch_size``, ...), the message the bad value and what is accepted. The CLI
    answers it with exit code 2, REST with 422 (404 for `UnknownModelError`)."""

    def __init__(self, message: str, field: str = "") -> None:
        super().__init__(message)
        self.field = field

    def __str__(self) -> str:  # the message as written, also for the KeyError subclass
        return str(self.args[0]) if self.args else ""


class UnknownModelError(QuestionError, KeyError):
    """A model name neither the zoo nor its aliases know; also a KeyError (REST answers 404)."""


def error_text(exc: BaseException) -> str:
    """An exception's message as written (a KeyError's str() quotes its argument)."""
    return str(exc.args[0]) if isinstance(exc, KeyError) and exc.args else str(exc)


def check_device(device: Any, name: str = "device") -> str:
    """A device name or spec name: a non-empty line of at most 200 characters; else QuestionError."""
    if not isinstance(device, str) or not device.strip() or len(device) > 200 or not device.isprintable():
        raise QuestionError(f"{name} must be a device name such as 'NVIDIA H100 80GB HBM3' or a spec name such as "
                            f"'h100' (hwsel.specs), got {device!r}", "device")
    return " ".join(device.split())


def device_map(hardware: Sequence[str], device: str | Mapping[str, str] | None) -> dict[str, str]:
    """hardware -> asked device, from one device name (one hardware target) or a mapping of
    targets asked about; else QuestionError naming the fix."""
    if device is None:
        return {}
    if isinstance(device, Mapping):
        out = {}
        for hw, name in device.items():
            if hw not in hardware:
                raise QuestionError(f"device given for {hw!r}, which is not among the hardware asked about "
                                    f"({', '.join(hardware)}); name one of those", "device")
            out[str(hw)] = check_device(name, f"device for {hw}")
        return out
    name = check_device(device)
    if len(hardware) != 1:
        on_host = facts.target_set(host_cpu=True)
        hw = next((h for h in hardware if h not in on_host), hardware[0])  # device names mostly name accelerators
        raise QuestionError(f"one device ({name!r}) for several hardware targets ({', '.join(hardware)}); give one "
                            f"per target, e.g. {{'{hw}': {name!r}}} (CLI: --device {hw}={name!r})", "device")
    return {hardware[0]: name}


def check_batch_size(batch_size: Any, name: str = "batch_size") -> int:
    """A whole number in [1, MAX_BATCH_SIZE]; else QuestionError naming the value."""
    if isinstance(batch_size, bool) or not isinstance(batch_size, int):
        if isinstance(batch_size, float) and batch_size.is_integer():
            batch_size = int(batch_size)
        else:
            raise QuestionError(f"{name} must be a whole number >= 1, got {batch_size!r}", name)
    if not 1 <= batch_size <= MAX_BATCH_SIZE:
        raise QuestionError(f"{name} must be between 1 and {MAX_BATCH_SIZE}, got {batch_size}", name)
    return batch_size


def check_precision(precision: Any) -> str:
    """One of `pytest_hwbench.vocabulary.PRECISIONS`; else QuestionError listing them."""
    try:
        return _check_precision(precision)
    except ValueError:
        raise QuestionError(f"unknown precision {precision!r}; accepted: {', '.join(PRECISIONS)}",
                            "precision") from None


#: Precisions a training step computes in: the floating-point ones (int8 is inference only).
TRAIN_PRECISIONS: tuple[str, ...] = tuple(p for p in PRECISIONS if p.startswith(("fp", "bf")))


def check_train_precision(precision: str) -> str:
    """`precision` if a training step computes in it (`TRAIN_PRECISIONS`); else QuestionError."""
    if precision not in TRAIN_PRECISIONS:
        raise QuestionError(f"{precision} is not a training precision (it is inference-only quantization); use "
                            f"{', '.join(TRAIN_PRECISIONS[:-1])} or {TRAIN_PRECISIONS[-1]}", "precision")
    return precision


def check_backend(backend: Any) -> str | None:
    """None (the hardware's default) or a short backend name; else QuestionError."""
    if backend is not None and (not isinstance(backend, str) or not backend or len(backend) > 64):
        raise QuestionError(f"backend must be a short name such as torch, onnxruntime or openvino, got {backend!r}",
                            "backend")
    return backend


#: How a question names its model: a zoo name or hub-style alias, a `ModelInfo`, or None when a
#: config describes it.
ModelRef = str | ModelInfo | None


def model_info(model: ModelRef,
               config: str | os.PathLike[str] | Mapping[str, Any] | None = None) -> ModelInfo:
    """A `ModelInfo` for a zoo name, a hub-style alias, or a `ModelInfo` (returned as is); `model`
    and `config` as in `hwsel.resolution.resolve_model`, whose KeyError this raises too. A config
    that describes no model raises `QuestionError` (field ``config``), any other input TypeError."""
    if isinstance(model, ModelInfo):
        return model
    if not isinstance(model, str) and (model is not None or config is None):
        raise TypeError(f"model must be a name or a hwsel.ModelInfo, got {type(model).__name__}")
    if config is None and (not model or len(model) > 200):
        raise KeyError(f"unknown model {str(model)[:200]!r}: give a zoo name such as bert-base or gpt2")
    try:
        return resolve_model(model, config)
    except ValueError as exc:  # only a config raises it: the model it describes is not one
        raise QuestionError(str(exc), "config") from None


def _position_limit(info: ModelInfo) -> int | None:
    """The model's position limit where the zoo knows its config (None: unknown or unlimited)."""
    from pytest_hwbench.models import MODELS

    try:
        return MODELS[info.name].max_sequence_length
    except Exception:  # not a zoo model, or a config that cannot say; the question's own bound still holds
        return None


#: ModelInfo fields that count something: each must be >= 1 where given (None: unknown).
_SIZE_FIELDS: tuple[str, ...] = ("param_count", "flops_per_item", "num_layers", "hidden_size", "sequence_length",
                                 "image_size", "audio_samples", "num_attention_heads", "num_key_value_heads")


def _check_sizes(info: ModelInfo) -> None:
    """QuestionError naming the first size of `info` that is not a positive number."""
    for name in _SIZE_FIELDS:
        value = getattr(info, name)
        if value is None and name not in ("param_count", "flops_per_item"):
            continue
        try:
            ok = float(value) > 0  # NaN too is not
        except (TypeError, ValueError):
            ok = False
        if not ok:
            raise QuestionError(f"model {info.name!r}: {name} must be a number > 0, got {value!r}", "model")


def describe_model(model: ModelRef = None, *, config: str | os.PathLike[str] | Mapping[str, Any] | None = None,
                   sequence_length: int | None = None, family: str | None = None) -> ModelInfo:
    """The model part of a question, built once: a name, alias or ModelInfo, or a `config` (a
    config.json, a folder holding one, its parsed contents, or a model-set file), at
    `sequence_length` tokens (within the model's position limit), checked against `family`.
    Raises `UnknownModelError` for an unknown name, else `QuestionError` naming the field.
    """
    if model is None and config is None:
        raise QuestionError("name the model: a zoo name or hub-style alias (CLI --model NAME, REST model_name), or "
                            "describe it with a config (CLI --config PATH: a config.json, a directory holding one, "
                            "or a model-set TOML/JSON; REST config: the contents of a Hugging Face config.json)",
                            "model")
    try:
        info = model_info(model, config)
    except KeyError as exc:
        if config is not None:
            raise QuestionError(error_text(exc), "config") from None
        raise UnknownModelError(error_text(exc), "model") from None
    except TypeError as exc:
        raise QuestionError(str(exc), "model") from None
    _check_sizes(info)
    if sequence_length is not None:
        length = check_batch_size(sequence_length, "sequence_length")
        limit = _position_limit(info)
        if limit is not None and length > limit:
            raise QuestionError(f"{info.name} takes at most {limit} tokens (its config's position limit), "
                                f"got {length}", "sequence_length")
        old = info.sequence_length
        if length != old:
            if not old:
                raise QuestionError(f"sequence_length does not apply to {info.name}: its input is not a token "
                                    "sequence", "sequence_length")
            # the new name keeps measured data of the default length from answering for it
            info = dataclasses.replace(info, name=f"{info.name}@seq{length}", sequence_length=length,
                                       flops_per_item=float(info.flops_per_item) * length / old)
    if family is not None and family != info.family:
        raise QuestionError(f"model {info.name!r} is a {info.family} model, not {family}; drop model_family or fix it",
                            "model_family")
    return info


def ask(config: SelectionConfig, model: ModelRef, hardware: str | Sequence[str] | None = None, *, batch_size: Any = 1,
        precision: Any = "fp32", mode: Any = "inference", backend: Any = None,
        device: str | Mapping[str, str] | None = None, sequence_length: int | None = None) -> list[Query]:
    """One `Query` per hardware target from what a user typed.

    `model` and `sequence_length` as in `describe_model`; `hardware` one target or several among
    `config`'s (default: all); `device` one device for one target or hardware -> device; `mode` in
    any spelling `hwsel.config.check_mode` reads. Whether a backend or device is known is
    `hwsel.predict.Predictor.resolve`'s to say. Raises `QuestionError` (`UnknownModelError` for an
    unknown name) naming the field.
    """
    grid = ask_grid(config, what="a question", hardware=hardware, batch_sizes=[batch_size], modes=[mode],
                    precisions=[precision], backend=backend, device=device)
    if grid.modes[0] == TRAIN_MODE:
        check_train_precision(grid.precisions[0])
    info = describe_model(model, sequence_length=sequence_length)
    return grid.queries(info, grid.batch_sizes[0], grid.modes[0], grid.precisions[0])


@dataclass(frozen=True)
class GridQuestion:
    """A checked grid of questions (`ask_grid`): every model x hardware target x batch size x mode
    x precision, on one backend (None: each target's default), with the devices asked for."""

    models: tuple[ModelInfo, ...]
    hardware: tuple[str, ...]
    batch_sizes: tuple[int, ...]
    modes: tuple[str, ...]
    precisions: tuple[str, ...]
    backend: str | None = None
    devices: Mapping[str, str] = field(default_factory=dict)
    families: tuple[str, ...] = ()

    def queries(self, model: ModelInfo, batch_size: int, mode: str, precision: str) -> list[Query]:
        """One `Query` per hardware target for one point of the grid."""
        return [Query(model, hw, precision, batch_size, mode, self.backend, self.devices.get(hw))
                for hw in self.hardware]


def _grid_models(models: Sequence[Any]) -> tuple[ModelInfo, ...]:
    """Each model described once (a name, alias or ModelInfo; a mapping gives its ``name``)."""
    out = []
    for i, m in enumerate(models):
        if isinstance(m, Mapping):
            if not isinstance(m.get("name"), str):
                raise QuestionError(f"models[{i}]: a model given as a mapping needs a 'name' (a zoo name such as "
                                    f"bert-base), got {dict(m)!r}", "models")
            m = m["name"]
        out.append(describe_model(m))
    return tuple(out)


def ask_grid(config: SelectionConfig, *, what: str, models: Sequence[Any] | None = None,
             families: Sequence[str] | None = None, hardware: Sequence[str] | None = None,
             batch_sizes: Sequence[Any] = (1,), modes: Sequence[Any] = ("inference",),
             precisions: Sequence[Any] = ("fp32",), backend: Any = None,
             device: str | Mapping[str, str] | None = None) -> GridQuestion:
    """A `GridQuestion` from what a user typed (maps, analyses, matrices).

    `models` (names, aliases, ModelInfos or mappings with a ``name``; None: none) and `families`
    (None: none) are checked as `describe_model` and `FAMILIES` say; `hardware`, `device` and
    `backend` as in `ask`; each list must hold one value at least. `what` names the caller in
    the message about an empty list. Every bad value raises one `QuestionError` naming its field.
    """
    fams = tuple(families) if families is not None else ()
    for fam in fams:
        if fam not in FAMILIES:
            raise QuestionError(f"unknown model family {fam!r}; accepted: {', '.join(FAMILIES)}", "model_family")
    infos = _grid_models(models) if models is not None else ()
    batches = tuple(check_batch_size(b) for b in batch_sizes)
    try:
        mode_names = tuple(dict.fromkeys(check_mode(m) for m in modes))
    except ValueError as exc:
        raise QuestionError(str(exc), "mode") from None
    precs = tuple(check_precision(p) for p in precisions)
    try:
        names = config.check_hardware(hardware if hardware is not None else config.hardware_names)
    except ValueError as exc:
        raise QuestionError(str(exc), "hardware") from None
    for values, name, words in ((models, "models", "model"), (families, "model_families", "family"),
                                (batches, "batch_sizes", "batch size"), (mode_names, "modes", "mode"),
                                (precs, "precisions", "precision")):
        if values is not None and not len(values):
            raise QuestionError(f"{what} needs at least one {words}; {name} is empty", name)
    devices = device_map(names, device)
    return GridQuestion(infos, names, batches, mode_names, precs, check_backend(backend), devices, fams)


__all__ = ["DEFAULT_BACKEND", "DEVICE_SOURCES", "MAX_BATCH_SIZE", "TRAIN_PRECISIONS", "GridQuestion", "HwselWarning",
           "ModelRef", "Prediction", "Query", "QuestionError", "UnknownModelError", "ask", "ask_grid", "check_backend",
           "check_batch_size", "check_device", "check_precision", "check_train_precision", "default_backend",
           "describe_device", "describe_model", "device_map", "error_text", "model_info"]
