"""Selection settings: criteria weights, hardware preferences, compatibility and thresholds, each
with a default and checked where it is declared (an error names the setting and what it accepts).

A TOML or JSON file (path given as an argument, or in ``$HWSEL_CONFIG``) overrides any part::

    [weights.inference]          # per mode (inference, train); need not sum to 1 (normalised)
    latency = 0.5
    throughput = 0.2
    memory = 0.2
    compatibility = 0.1

    [hardware.cuda]              # preferences: a score is multiplied by availability / cost
    cost_factor = 2.0
    availability_factor = 1.0
    memory_gb = 80               # device memory; a model that does not fit is incompatible

    [compatibility.vision]       # family -> hardware -> high | medium | low | none
    qnn = "high"

    [tasks.embedding]            # task profile: mode and weights
    mode = "inference"
    throughput = 0.6

    [thresholds]
    batch_size = { small = 1, medium = 8, large = 32 }
    model_size = { small = 100_000_000, medium = 1_000_000_000, large = 10_000_000_000 }
    interval_factor = { roofline = 2.0, rules = 3.0 }

The predecessor's spellings (``latency_weight``, ``selection_criteria``, ``hardware_preferences``,
``batch_size_thresholds``, ``model_size_categories``) are accepted as well.
"""

from __future__ import annotations

import json
import math
import os
from collections.abc import Mapping
from dataclasses import dataclass, field, fields, replace
from pathlib import Path
from types import MappingProxyType
from typing import Any, TypeVar

try:
    import tomllib
except ModuleNotFoundError:  # Python 3.10
    import tomli as tomllib  # type: ignore[no-redef]

from pytest_hwbench import facts
from pytest_hwbench.models import FAMILIES
from pytest_hwbench.vocabulary import (
    DEFAULT_MODE,
    MODE_ALIASES,
    PRECISIONS,
    TRAIN_MODE,
    normalise_mode,
)

ENV_VAR = "HWSEL_CONFIG"

#: The precisions `hwsel.select_precision` chooses among by default.
DEFAULT_PRECISION_CHOICES: tuple[str, ...] = ("fp32", "fp16", "bf16")

#: The modes hwsel selects and predicts for (``generate`` records are not a selection mode).
MODES: tuple[str, ...] = (DEFAULT_MODE, TRAIN_MODE)
#: Every spelling of a mode a question may use: `MODES` and their older names (``training``).
ACCEPTED_MODES: tuple[str, ...] = MODES + tuple(old for old, mode in MODE_ALIASES.items() if mode in MODES)
#: The prediction layers, in the order they answer.
SOURCES: tuple[str, ...] = ("measured", "registered", "roofline", "rules")
RATINGS: Mapping[str, float] = MappingProxyType({"high": 1.0, "medium": 0.6, "low": 0.3, "none": 0.0})
CRITERIA: tuple[str, ...] = ("latency", "throughput", "memory", "compatibility")
SIZE_CATEGORIES: tuple[str, ...] = ("small", "medium", "large")
#: Most hardware targets a config may list: also the longest hardware list a request may send.
MAX_HARDWARE_TARGETS = 32


#: The default width of each estimating layer's intervals (`Thresholds.interval_factor`).
_INTERVAL_FACTORS: Mapping[str, float] = MappingProxyType({"roofline": 2.0, "rules": 3.0})

_V = TypeVar("_V")


class ModeKeyed(dict[str, _V]):
    """A dict keyed by mode that also answers to a mode's older spelling (``training`` -> ``train``);
    its keys are the one names."""

    def __missing__(self, key: str) -> _V:
        name = normalise_mode(key) if isinstance(key, str) else key
        if name != key and dict.__contains__(self, name):
            return dict.__getitem__(self, name)
        raise KeyError(key)

    def __contains__(self, key: object) -> bool:
        return dict.__contains__(self, normalise_mode(key) if isinstance(key, str) else key)

    def get(self, key: str, default: Any = None) -> Any:  # type: ignore[override]
        return self[key] if key in self else default


def check_mode(mode: Any, where: str = "") -> str:
    """`mode` by its one name (hwsel's one reading of a mode: ``training`` is ``train``); else
    ValueError naming it and listing `MODES`, prefixed by `where` (a config table)."""
    name = normalise_mode(mode) if isinstance(mode, str) else None
    if name not in MODES:
        prefix = f"{where}: " if where else ""
        raise ValueError(f"{prefix}unknown mode {mode!r}; accepted: {', '.join(MODES)}")
    return name


def _number(where: str, value: Any, *, minimum: float = 0.0, strict: bool = False) -> float:
    if isinstance(value, bool) or not isinstance(value, int | float) or not math.isfinite(value):
        raise ValueError(f"{where}: expected a finite number, got {value!r}")
    if value < minimum or (strict and value == minimum):
        op = ">" if strict else ">="
        raise ValueError(f"{where}: must be {op} {minimum:g}, got {value!r}")
    return float(value)


def _unknown(where: str, keys: Any, accepted: Any) -> None:
    bad = sorted(set(keys) - set(accepted))
    if bad:
        raise ValueError(f"{where}: unknown key {bad[0]!r}; accepted: {', '.join(accepted)}")


@dataclass(frozen=True)
class Weights:
    """How much each criterion counts. Stored normalised to sum 1."""

    latency: float = 0.4
    throughput: float = 0.3
    memory: float = 0.2
    compatibility: float = 0.1

    def __post_init__(self) -> None:
        values = {c: _number(f"weights.{c}", getattr(self, c)) for c in CRITERIA}
        total = sum(values.values())
        if total <= 0:
            raise ValueError(f"weights: at least one of {', '.join(CRITERIA)} must be > 0, got all 0")
        for name, value in values.items():
            object.__setattr__(self, name, value / total)

    def as_dict(self) -> dict[str, float]:
        """Criterion -> normalised weight."""
        return {c: getattr(self, c) for c in CRITERIA}


@dataclass(frozen=True)
class HardwarePreference:
    """Preferences for one hardware target: final score x availability_factor / cost_factor."""

    cost_factor: float = 1.0
    availability_factor: float = 1.0
    memory_gb: float | None = None

    def __post_init__(self) -> None:
        _number("cost_factor", self.cost_factor, strict=True)
        avail = _number("availability_factor", self.availability_factor)
        if avail > 1:
            raise ValueError(f"availability_factor: must be within [0, 1], got {avail!r}")
        if self.memory_gb is not None:
            _number("memory_gb", self.memory_gb, strict=True)

    @property
    def factor(self) -> float:
        """The multiplier applied to a score."""
        return self.availability_factor / self.cost_factor


@dataclass(frozen=True)
class TaskProfile:
    """A task (classification, generation, ...): which mode it runs in and what matters."""

    mode: str = "inference"
    weights: Weights = field(default_factory=Weights)

    def __post_init__(self) -> None:
        object.__setattr__(self, "mode", check_mode(self.mode, "mode"))  # "training" is "train"


@dataclass(frozen=True)
class Thresholds:
    """Batch-size and model-size categories, and the width of estimated intervals."""

    batch_size: Mapping[str, int] = field(default_factory=lambda: {"small": 1, "medium": 8, "large": 32})
    model_size: Mapping[str, int] = field(
        default_factory=lambda: {"small": 100_000_000, "medium": 1_000_000_000, "large": 10_000_000_000})
    #: An estimate's latency interval is (latency / f, latency * f); a layer not given keeps its default.
    interval_factor: Mapping[str, float] = field(default_factory=lambda: _INTERVAL_FACTORS)

    def __post_init__(self) -> None:
        for name in ("batch_size", "model_size"):
            table = dict(getattr(self, name))
            _unknown(f"thresholds.{name}", table, SIZE_CATEGORIES)
            missing = [c for c in SIZE_CATEGORIES if c not in table]
            if missing:
                raise ValueError(f"thresholds.{name}: missing {missing[0]!r}; give all of {', '.join(SIZE_CATEGORIES)}")
            values = []
            for c in SIZE_CATEGORIES:
                v = table[c]
                if isinstance(v, bool) or not isinstance(v, int | float) or not math.isfinite(v) or v < 1 or v != int(v):
                    raise ValueError(f"thresholds.{name}.{c}: expected a whole number >= 1, got {v!r}")
                values.append(int(v))
            if values != sorted(values):
                raise ValueError(f"thresholds.{name}: must grow small <= medium <= large, got {dict(zip(SIZE_CATEGORIES, values, strict=True))}")
            object.__setattr__(self, name, MappingProxyType(dict(zip(SIZE_CATEGORIES, values, strict=True))))
        intervals = dict(self.interval_factor)
        _unknown("thresholds.interval_factor", intervals, _INTERVAL_FACTORS)
        merged = _INTERVAL_FACTORS | {
            k: _number(f"thresholds.interval_factor.{k}", v, minimum=1.0) for k, v in intervals.items()}
        object.__setattr__(self, "interval_factor", MappingProxyType(merged))

    def model_size_category(self, param_count: int) -> str:
        """small / medium / large for a parameter count (above `large` is still large)."""
        return next((cat for cat in SIZE_CATEGORIES if param_count <= self.model_size[cat]), "large")

    def batch_size_category(self, batch_size: int) -> str:
        """small / medium / large for a batch size (below `medium` is small)."""
        return next((cat for cat in ("large", "medium") if batch_size >= self.batch_size[cat]), "small")


_WEIGHTS: Mapping[str, Weights] = MappingProxyType({
    "inference": Weights(latency=0.4, throughput=0.3, memory=0.2, compatibility=0.1),
    TRAIN_MODE: Weights(latency=0.1, throughput=0.5, memory=0.3, compatibility=0.1)})


def _default_hardware() -> Mapping[str, HardwarePreference]:
    # `facts.fallback_order()` (ties go to the earlier one; the web targets last, selected among only when
    # named: `hwsel.select.available_hardware`), each with a common device's `memory_gb`.
    return MappingProxyType({hw: HardwarePreference(memory_gb=facts.target_facts(hw).memory_gb)
                             for hw in facts.fallback_order()})


# Web: the ONNX export runs in onnxruntime-web (wasm: up to 4 GiB, CPU speed; WebNN: few browsers).
_BASE_COMPATIBILITY = {"cuda": "high", "rocm": "high", "xpu": "medium", "cpu": "medium", "wasm": "medium",
                       "webgpu": "medium", "webnn": "low"}
_COMPATIBILITY_ROWS = {
    "embedding": {"openvino": "high", "qnn": "medium", "mps": "high", "wasm": "high", "webgpu": "high"},
    "text_generation": {"openvino": "medium", "qnn": "low", "mps": "medium", "wasm": "low"},
    "vision": {"openvino": "high", "qnn": "high", "mps": "high", "wasm": "high", "webgpu": "high"},
    "audio": {"openvino": "medium", "qnn": "medium", "mps": "medium"},
    "multimodal": {"openvino": "low", "qnn": "low", "mps": "medium", "wasm": "low"},
}
_COMPATIBILITY: Mapping[str, Mapping[str, str]] = MappingProxyType(
    {fam: MappingProxyType(_BASE_COMPATIBILITY | row) for fam, row in _COMPATIBILITY_ROWS.items()})
_TASKS: Mapping[str, TaskProfile] = MappingProxyType({
    "classification": TaskProfile("inference", Weights(0.5, 0.2, 0.2, 0.1)),
    "generation": TaskProfile("inference", Weights(0.6, 0.1, 0.2, 0.1)),
    "embedding": TaskProfile("inference", Weights(0.2, 0.5, 0.2, 0.1)),
    "speech_recognition": TaskProfile("inference", Weights(0.5, 0.2, 0.2, 0.1)),
    "fine_tuning": TaskProfile(TRAIN_MODE, Weights(0.1, 0.4, 0.4, 0.1)),
    "training": TaskProfile(TRAIN_MODE, Weights(0.1, 0.5, 0.3, 0.1)),
})


@dataclass(frozen=True)
class SelectionConfig:
    """All selection settings. Build with `load_config`; every field is validated."""

    weights: Mapping[str, Weights] = field(default_factory=lambda: _WEIGHTS)
    hardware: Mapping[str, HardwarePreference] = field(default_factory=_default_hardware)
    compatibility: Mapping[str, Mapping[str, str]] = field(default_factory=lambda: _COMPATIBILITY)
    tasks: Mapping[str, TaskProfile] = field(default_factory=lambda: _TASKS)
    thresholds: Thresholds = field(default_factory=Thresholds)
    #: hardware -> precisions it runs (the facts table's; a hardware missing here runs all of them).
    precision_support: Mapping[str, tuple[str, ...]] = field(
        default_factory=lambda: MappingProxyType({row.name: row.precisions for row in facts.target_rows()}))
    #: hardware that cannot train (inference runtimes: the facts table's ``trains=False``).
    inference_only: tuple[str, ...] = field(
        default_factory=lambda: tuple(row.name for row in facts.target_rows() if not row.trains))
    #: where the settings came from ("defaults" or a file path).
    origin: str = "defaults"

    def __post_init__(self) -> None:
        # keyed by the modes' one names ("training" given is "train"), answering to the old ones too
        object.__setattr__(self, "weights", MappingProxyType(ModeKeyed(
            {check_mode(mode, "weights"): weights for mode, weights in self.weights.items()})))
        missing = [m for m in MODES if m not in self.weights]
        if missing:
            raise ValueError(f"weights: missing mode {missing[0]!r}; give all of {', '.join(MODES)}")
        if not self.hardware:
            raise ValueError("hardware: at least one hardware target is needed")
        if len(self.hardware) > MAX_HARDWARE_TARGETS:
            raise ValueError(f"hardware: {len(self.hardware)} targets, at most {MAX_HARDWARE_TARGETS} are supported")
        for hw, row in self.compatibility.items():
            if hw not in FAMILIES:
                raise ValueError(f"compatibility: unknown family {hw!r}; accepted: {', '.join(FAMILIES)}")
            for target, rating in row.items():
                if target not in self.hardware:
                    raise ValueError(f"compatibility.{hw}: unknown hardware {target!r}; accepted: "
                                     f"{', '.join(self.hardware)}")
                if rating not in RATINGS:
                    raise ValueError(f"compatibility.{hw}.{target}: rating {rating!r} is not one of "
                                     f"{', '.join(RATINGS)}")
        for hw, precs in self.precision_support.items():
            bad = [p for p in precs if p not in PRECISIONS]
            if bad:
                raise ValueError(f"precision_support.{hw}: unknown precision {bad[0]!r}; accepted: {', '.join(PRECISIONS)}")

    @property
    def hardware_names(self) -> tuple[str, ...]:
        """Hardware targets we select among, in fallback order."""
        return tuple(self.hardware)

    def rating(self, family: str, hardware: str) -> str:
        """Compatibility rating of a family on a hardware target (medium when not listed)."""
        return self.compatibility.get(family, {}).get(hardware, "medium")

    def check_hardware(self, names: Any) -> tuple[str, ...]:
        """Validate a list of hardware names; raises ValueError naming the unknown one."""
        names = [names] if isinstance(names, str) else list(names)
        for name in names:
            if not isinstance(name, str) or name not in self.hardware:
                raise ValueError(f"unknown hardware {name!r}; accepted: {', '.join(self.hardware)}")
        if not names:
            raise ValueError(f"no hardware given; accepted: {', '.join(self.hardware)}")
        return tuple(dict.fromkeys(names))


# --- parsing ------------------------------------------------------------------------------------

_TOP_KEYS = ("weights", "hardware", "compatibility", "tasks", "thresholds", "precision_support", "inference_only")
_ALIASES = {"selection_criteria": "weights", "hardware_preferences": "hardware",
            "batch_size_thresholds": ("thresholds", "batch_size"), "model_size_categories": ("thresholds", "model_size")}


def _table(where: str, value: Any) -> Mapping[str, Any]:
    if not isinstance(value, Mapping):
        raise ValueError(f"{where}: expected a table/object, got {type(value).__name__} {value!r}")
    return value


def _weights(where: str, raw: Any, base: Weights, extra: tuple[str, ...] = ()) -> Weights:
    table = {k.removesuffix("_weight"): v for k, v in _table(where, raw).items() if k not in extra}
    _unknown(where, table, CRITERIA)
    try:
        return Weights(**(base.as_dict() | table))
    except ValueError as exc:
        raise ValueError(f"{where}: {exc}") from None


def _from_mapping(data: Mapping[str, Any], origin: str) -> SelectionConfig:
    data = dict(_table("config", data))
    for alias, target in _ALIASES.items():
        if alias in data:
            value = data.pop(alias)
            if isinstance(target, tuple):
                data[target[0]] = dict(_table(target[0], data.get(target[0], {}))) | {target[1]: value}
            else:
                data[target] = value
    data.pop("model_families", None)  # predecessor's per-family importance notes: informational only
    _unknown("config", data, _TOP_KEYS)
    cfg = SelectionConfig()
    changes: dict[str, Any] = {"origin": origin}

    if "weights" in data:
        weights = dict(cfg.weights)
        for given, raw in _table("weights", data["weights"]).items():
            mode = check_mode(given, "weights")  # [weights.training] is [weights.train]
            # the predecessor's training criteria had a convergence weight; we have no such signal
            weights[mode] = _weights(f"weights.{mode}", raw, weights[mode], extra=("convergence_weight",))
        changes["weights"] = weights

    if "hardware" in data:
        hardware = dict(cfg.hardware)
        accepted = [f.name for f in fields(HardwarePreference)]
        for hw, raw in _table("hardware", data["hardware"]).items():
            table = dict(_table(f"hardware.{hw}", raw))
            table.pop("power_factor", None)  # predecessor key, not used in scoring
            _unknown(f"hardware.{hw}", table, accepted)
            try:
                hardware[hw] = replace(hardware.get(hw, HardwarePreference()), **table)
            except ValueError as exc:
                raise ValueError(f"hardware.{hw}.{exc}") from None
        changes["hardware"] = MappingProxyType(hardware)

    if "compatibility" in data:
        compat = {fam: dict(row) for fam, row in cfg.compatibility.items()}
        for fam, row in _table("compatibility", data["compatibility"]).items():
            row = dict(_table(f"compatibility.{fam}", row))
            if "hardware_compatibility" in row:  # predecessor: {"cpu": {"compatible": true, "performance_rating": ...}}
                row = {hw: (v.get("performance_rating", "medium") if v.get("compatible", True) else "none")
                       if isinstance(v, Mapping) else v for hw, v in _table(fam, row["hardware_compatibility"]).items()}
            compat.setdefault(fam, {}).update(row)
        changes["compatibility"] = MappingProxyType({f: MappingProxyType(r) for f, r in compat.items()})

    if "tasks" in data:
        tasks = dict(cfg.tasks)
        for task, raw in _table("tasks", data["tasks"]).items():
            table = dict(_table(f"tasks.{task}", raw))
            base = tasks.get(task, TaskProfile())
            mode = table.pop("mode", base.mode)
            try:
                tasks[task] = TaskProfile(mode, _weights(f"tasks.{task}", table, base.weights))
            except ValueError as exc:
                raise ValueError(f"tasks.{task}: {exc}") from None
        changes["tasks"] = MappingProxyType(tasks)

    if "thresholds" in data:
        table = dict(_table("thresholds", data["thresholds"]))
        _unknown("thresholds", table, [f.name for f in fields(Thresholds)])
        base = cfg.thresholds
        merged = {f.name: dict(getattr(base, f.name)) | dict(_table(f"thresholds.{f.name}", table[f.name]))
                  for f in fields(Thresholds) if f.name in table}
        changes["thresholds"] = replace(base, **merged)

    if "precision_support" in data:
        table = _table("precision_support", data["precision_support"])
        changes["precision_support"] = MappingProxyType(
            dict(cfg.precision_support) | {hw: tuple(v) for hw, v in table.items()})
    if "inference_only" in data:
        changes["inference_only"] = tuple(data["inference_only"])
    return replace(cfg, **changes)


def load_config(path: str | os.PathLike[str] | Mapping[str, Any] | SelectionConfig | None = None) -> SelectionConfig:
    """Settings from `path` (TOML or JSON), else from ``$HWSEL_CONFIG``, else the defaults.

    A mapping (already parsed) or a `SelectionConfig` is accepted as well.
    """
    if isinstance(path, SelectionConfig):
        return path
    if isinstance(path, Mapping):
        return _from_mapping(path, "mapping")
    if path is None:
        env = os.environ.get(ENV_VAR)
        if not env:
            return SelectionConfig()
        path = env
    p = Path(path)
    if not p.is_file():
        what = "is a folder" if p.is_dir() else "does not exist"
        raise ValueError(f"selection config {str(p)!r} {what}; pass a .toml or .json file "
                         f"(CLI --selection-config, or ${ENV_VAR})")
    text = p.read_text()
    try:
        if p.suffix == ".toml":
            data = tomllib.loads(text)
        elif p.suffix == ".json":
            data = json.loads(text)
        else:
            raise ValueError(f"config file {str(p)!r}: unknown suffix {p.suffix!r}; use .toml or .json")
    except (tomllib.TOMLDecodeError, json.JSONDecodeError) as exc:
        raise ValueError(f"config file {str(p)!r} is not valid {p.suffix[1:].upper()}: {exc}") from None
    try:
        return _from_mapping(data, str(p))
    except ValueError as exc:
        raise ValueError(f"config file {str(p)!r}: {exc}") from None


__all__ = ["ACCEPTED_MODES", "DEFAULT_PRECISION_CHOICES", "ENV_VAR", "HardwarePreference",
           "MAX_HARDWARE_TARGETS", "MODES", "ModeKeyed", "SOURCES", "SelectionConfig",
           "TaskProfile", "Thresholds", "Weights", "check_mode", "load_config"]
