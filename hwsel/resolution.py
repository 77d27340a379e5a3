"""Which model a question means: `ModelInfo`, hwsel's one description of a model, and the lookup
that turns a zoo name, a hub-style alias, a ``config.json`` or a model-set file into one (zoo
models from the traced table `hwsel._zoo_table`, needing neither torch nor transformers).
Imports neither numpy nor pandas.
"""

from __future__ import annotations

import dataclasses
import difflib
import functools
import hashlib
import json
import math
import os
from collections.abc import Mapping
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any

from pytest_hwbench.models import ModelArchitecture

from ._zoo_table import ZOO_ARCHITECTURES


@dataclass(frozen=True)
class ModelInfo:
    """hwsel's one description of a model: its name and family, its architecture numbers (no
    weights; `pytest_hwbench.models.ModelArchitecture`'s fields, by the same names) and what one
    item is: tokens (`sequence_length`), an image side or audio samples. `flops_per_item` is
    forward FLOPs for one item."""

    name: str
    family: str
    model_type: str
    param_count: int
    flops_per_item: float
    num_layers: int | None = None
    hidden_size: int | None = None
    sequence_length: int | None = None
    image_size: int | None = None
    audio_samples: int | None = None
    #: Computing operators one eager forward dispatches (about one kernel launch each).
    launches_per_forward: int | None = None
    num_attention_heads: int | None = None
    num_key_value_heads: int | None = None

    def to_dict(self) -> dict[str, Any]:
        """JSON-ready dict."""
        return asdict(self)

    @classmethod
    def from_architecture(cls, arch: ModelArchitecture, *, name: str, family: str,
                          shape: Mapping[str, Any]) -> ModelInfo:
        """The description of a model whose architecture is `arch` and whose item is `shape`
        (`ModelSpec.input_shape()`): every field `arch` shares with this class, by name."""
        values = {f: getattr(arch, f) for f in _ARCHITECTURE_FIELDS}
        # hwsel counts parameters as an int and FLOPs as a float, whatever built them
        values.update(param_count=int(arch.param_count), flops_per_item=float(arch.flops_per_item))
        return cls(name=name, family=family, **values, **{f: shape.get(f) for f in _SHAPE_FIELDS})


#: `ModelInfo` fields that are `ModelArchitecture`'s, and those that say what one item is.
_ARCHITECTURE_FIELDS: tuple[str, ...] = tuple(
    f.name for f in dataclasses.fields(ModelInfo) if f.name in {a.name for a in dataclasses.fields(ModelArchitecture)})
_SHAPE_FIELDS: tuple[str, ...] = tuple(
    f.name for f in dataclasses.fields(ModelInfo) if f.name not in (*_ARCHITECTURE_FIELDS, "name", "family"))


# --- model lookup ---------------------------------------------------------------------------

#: Zoo name -> the hub-style names it answers to (lower case, without the organisation prefix).
_HUB_NAMES: dict[str, tuple[str, ...]] = {
    "bert-base": ("bert-base-uncased", "bert-base-cased", "bert-base-multilingual-cased"),
    "gpt2": ("gpt2-small", "openai-community/gpt2"),
    "t5-small": ("t5-small", "google-t5/t5-small"),
    "vit-base": ("vit-base-patch16-224", "vit-base-patch16-224-in21k"),
    "resnet-50": ("resnet-50", "resnet50"),
    "whisper-tiny": ("whisper-tiny", "whisper-tiny.en"),
    "wav2vec2-base": ("wav2vec2-base", "wav2vec2-base-960h"),
    "clip-vit-b32": ("clip-vit-base-patch32", "clip-vit-b-32"),
    # zoo entries that may not exist in every version of the zoo: their names skipped when absent
    "tinyllama-1.1b": ("tinyllama-1.1b-chat-v1.0", "tinyllama_v1.1"),
    "qwen2-0.5b": ("qwen2-0.5b-instruct",),
    "llama-7b": ("llama-2-7b-hf", "llama-2-7b"),
    "qwen2-7b": ("qwen2-7b-instruct",),
    "llava-7b": ("llava-1.5-7b-hf",),
    "detr-resnet-50": ("detr-resnet-50",),
    "xclip-base-p32": ("xclip-base-patch32",),
}
#: Hub-style names -> zoo names.
ALIASES: dict[str, str] = {hub: zoo for zoo, names in _HUB_NAMES.items() for hub in names}

#: The `ModelSpec` fields a traced architecture depends on.
_FINGERPRINT_FIELDS = ("family", "config_class", "modality", "config_kwargs", "auto_class", "sequence_length")


def _fingerprint(spec: Any) -> str:
    text = json.dumps({k: getattr(spec, k) for k in _FINGERPRINT_FIELDS}, sort_keys=True, default=str)
    return hashlib.sha1(text.encode()).hexdigest()[:12]


def _measure_spec(spec: Any) -> ModelInfo:
    """ModelInfo of a zoo `ModelSpec` from a meta-device build (imports torch and transformers)."""
    return ModelInfo.from_architecture(spec.architecture, name=spec.name, family=spec.family,
                                       shape=spec.input_shape())


#: Config keys holding the depth of a model's stack of identical layers.
_DEPTH_KEYS: tuple[str, ...] = ("num_hidden_layers", "n_layer", "num_layers")
#: A stack deeper than this is built at depths 2 and 3 on the meta device and extrapolated: each
#: identical layer adds the same parameters, FLOPs and launches, so the line through the two is
#: exact (tests/test_hwsel_trust.py), where a whole build costs ~8.6 ms per layer.
EXTRAPOLATE_ABOVE = 8
_PROBE_DEPTHS = (2, 3)
#: Architectures kept in memory (configs sent over REST each add one; oldest dropped first).
_MEASURED_MAX = 1024
#: Architectures kept in the disk cache file.
_DISK_MAX = 4096

_measured: dict[str, ModelInfo] = {}


def _stack_depth(spec: Any) -> tuple[str, int] | None:
    """(key, depth) of a spec whose config sets one stack depth above `EXTRAPOLATE_ABOVE`; None
    when it sets none or several, or holds per-layer lists that would have to shrink with it."""
    kwargs = spec.config_kwargs
    keys = [k for k in _DEPTH_KEYS if k in kwargs]
    if len(keys) != 1:
        return None
    depth = kwargs[keys[0]]
    if isinstance(depth, bool) or not isinstance(depth, int) or depth <= EXTRAPOLATE_ABOVE:
        return None
    if any(isinstance(v, list | tuple) and len(v) == depth for v in kwargs.values()):
        return None  # e.g. layer_types: one entry per layer
    return keys[0], depth


def _measure(spec: Any) -> ModelInfo:
    """`_measure_spec`, or for a deep uniform stack (`_stack_depth`) the line through two shallow builds."""
    found = _stack_depth(spec)
    if found is None:
        return _measure_spec(spec)
    key, depth = found
    try:
        low, high = (_measure_spec(dataclasses.replace(spec, config_kwargs={**spec.config_kwargs, key: d}))
                     for d in _PROBE_DEPTHS)
    except Exception:  # a config that cannot be that shallow: build it whole
        return _measure_spec(spec)
    steps = depth - _PROBE_DEPTHS[0]

    def grow(a: float, b: float) -> float:
        return a + steps * (b - a)

    launches = None if low.launches_per_forward is None or high.launches_per_forward is None else \
        int(round(grow(low.launches_per_forward, high.launches_per_forward)))
    return ModelInfo(**{**high.to_dict(), "name": spec.name, "num_layers": depth,
                        "param_count": int(round(grow(low.param_count, high.param_count))),
                        "flops_per_item": float(grow(low.flops_per_item, high.flops_per_item)),
                        "launches_per_forward": launches})


def cache_path() -> Path:
    """Where measured architectures persist between processes: ``$HWSEL_CACHE_DIR`` or
    ``~/.cache/hwsel``, file ``architectures.json``."""
    root = os.environ.get("HWSEL_CACHE_DIR") or Path(os.environ.get("XDG_CACHE_HOME") or Path.home() / ".cache") / "hwsel"
    return Path(root) / "architectures.json"


def _disk_key(fingerprint: str) -> str:
    try:
        from importlib.metadata import version

        return f"{fingerprint}:v2:transformers-{version('transformers')}"
    except Exception:  # no metadata: still usable, just not tied to a version
        return fingerprint


def _read_disk() -> dict[str, Any]:
    """The disk cache (`cache_path`), {} when there is none or it holds something else."""
    try:
        data = json.loads(cache_path().read_text(encoding="utf-8"))
    except (OSError, ValueError):
        return {}
    return data if isinstance(data, dict) else {}


def _write_disk(key: str, info: ModelInfo) -> None:
    """Best effort: an unwritable cache only costs a rebuild next time."""
    path = cache_path()
    try:
        data = _read_disk()
        while len(data) >= _DISK_MAX:  # each config a REST client sends adds one: keep the file small
            data.pop(next(iter(data)))
        data[key] = info.to_dict()
        path.parent.mkdir(parents=True, exist_ok=True)
        tmp = path.with_suffix(f".{os.getpid()}.tmp")
        tmp.write_text(json.dumps(data, sort_keys=True), encoding="utf-8")
        os.replace(tmp, path)
    except OSError:
        pass


def info_from_spec(spec: Any, name: str | None = None) -> ModelInfo:
    """`ModelInfo` of a `pytest_hwbench.models.ModelSpec`, named `name` (default: the spec's).

    Only a spec neither in the traced zoo table, this process's memory nor the disk cache
    (`cache_path`) is built on the meta device (seconds; imports torch and transformers).
    """
    key = _fingerprint(spec)
    entry = ZOO_ARCHITECTURES.get(spec.name)
    if entry is not None and entry.get("fingerprint") == key:
        traced = {k: v for k, v in entry.items() if k != "fingerprint"}
        return ModelInfo(**traced, name=name or spec.name, family=spec.family)
    if key not in _measured:
        disk_key = _disk_key(key)
        try:
            info = ModelInfo(**{**_read_disk()[disk_key], "name": spec.name})
        except (KeyError, TypeError):  # no entry, or one of another layout
            info = _measure(spec)
            _write_disk(disk_key, info)
        if len(_measured) >= _MEASURED_MAX:
            _measured.pop(next(iter(_measured)))
        _measured[key] = info
    found = _measured[key]
    want = name or spec.name
    return found if want == found.name else ModelInfo(**{**found.to_dict(), "name": want})


def _unknown(name: str) -> KeyError:
    from pytest_hwbench.models import MODELS

    names = sorted(set(MODELS) | set(ALIASES))
    text = name.strip().lower()
    close = difflib.get_close_matches(text.rsplit("/", 1)[-1], names, n=5, cutoff=0.5) or \
        difflib.get_close_matches(text, names, n=5, cutoff=0.4)
    hint = f" Close matches: {', '.join(close)}." if close else ""
    return KeyError(
        f"unknown model {name!r}.{hint} For a model outside the zoo pass its architecture: "
        "--config PATH (CLI) or config=PATH (Python), PATH being a directory with a config.json "
        "(transformers) or a model-set TOML/JSON file (see `hwbench models` and README)."
    )


def _config_name(config: Mapping[str, Any], name: str | None) -> str:
    """The name the model of a parsed config.json goes by, as `pytest_hwbench.models.spec_from_config`
    gives it: `name`, else the last part of its ``_name_or_path``, else ``<model_type>-custom``."""
    origin = config.get("_name_or_path")
    found = str(origin).rstrip("/").rsplit("/", 1)[-1] if isinstance(origin, str) and origin.strip() else ""
    return name or found or f"{config.get('model_type')}-custom"


def _from_config(name: str | None, config: str | os.PathLike[str] | Mapping[str, Any]) -> ModelInfo:
    """The model a config describes; ValueError naming the model (or the file) and the field
    when it cannot describe one, KeyError when a model set lacks `name`."""
    from pytest_hwbench.models import load_model_set, spec_from_config

    if isinstance(config, Mapping):
        return info_from_spec(spec_from_config(config, name, where=f"config of model {_config_name(config, name)!r}"))
    path = Path(config)
    try:
        specs = load_model_set(path)
    except (ValueError, OSError) as exc:
        # the harness's message names the file (and a model set's entry) and the field
        text = str(exc)
        if text.startswith(f"{path}: ") or str(path) not in text:
            text = f"config {path}: {text.removeprefix(f'{path}: ')}"
        raise ValueError(f"model {name!r}, {text}" if name else text) from None
    by_name = {s.name: s for s in specs}
    if name is None or path.is_dir() or len(specs) == 1:
        if name is None and len(specs) > 1:
            raise KeyError(f"config {str(path)!r} is a model set of {len(specs)} models "
                           f"({', '.join(sorted(by_name))}); name one of them")
        return info_from_spec(specs[0], name=name)
    if name in by_name:
        return info_from_spec(by_name[name])
    close = difflib.get_close_matches(name, by_name, n=5, cutoff=0.4)
    hint = f" Close matches: {', '.join(close)}." if close else ""
    raise KeyError(
        f"model {name!r} is not in model set {str(path)!r} (it has {', '.join(sorted(by_name))}).{hint}"
    )


def zoo_name(name: str) -> str | None:
    """The zoo model `name` stands for (a zoo name or hub-style alias, in any case, with or without
    its organisation); None when it names none."""
    from pytest_hwbench.models import MODELS

    if name in MODELS:
        return name
    text = name.strip().lower()
    for key in (text, text.rsplit("/", 1)[-1]):
        target = key if key in MODELS else ALIASES.get(key)
        if target in MODELS:
            return target
    return None


@functools.lru_cache(maxsize=1024)
def _resolve_cached(name: str) -> ModelInfo:
    from pytest_hwbench.models import MODELS

    found = zoo_name(name)
    if found is None:
        raise _unknown(name)
    return info_from_spec(MODELS[found])


def resolve_model(name: str | None,
                  config: str | os.PathLike[str] | Mapping[str, Any] | None = None) -> ModelInfo:
    """Architecture numbers for `name`: a zoo name (`hwbench models`), a hub-style name
    (``bert-base-uncased``, ``google/vit-base-patch16-224``, ...), or any name (None: the config's
    ``_name_or_path``, folder or file name, else ``<type>-custom``) when `config` is a Hugging Face
    ``config.json`` (a file, a folder holding one, or its parsed contents) or a model-set TOML/JSON.

    Raises:
        KeyError: unknown name; the message lists close matches and how to pass a config.
        ValueError: a config that describes no model (a size below 1, an unknown model type, a
            file that cannot be read), naming the model or the file, and the field.
    """
    if config is not None:
        return _from_config(name, config)
    if not name:
        raise KeyError("no model given: pass a zoo name (see `hwbench models`) or config=PATH to a "
                       "config.json, a directory holding one, or a model-set TOML/JSON (CLI: --config PATH)")
    return _resolve_cached(name)


def _dump_zoo() -> dict[str, dict[str, Any]]:
    """The rows of `hwsel._zoo_table` for the current zoo (builds every zoo model on the meta
    device): each model's traced numbers and item size, without the zoo's own name and family."""
    from pytest_hwbench.models import MODELS, ZOO_SPECS

    table = {}
    for spec in ZOO_SPECS:
        current = MODELS[spec.name]
        info = _measure_spec(current)
        traced = {k: v for k, v in info.to_dict().items() if k not in ("name", "family")}
        table[spec.name] = {"fingerprint": _fingerprint(current), **traced}
    return table


__all__ = ["ALIASES", "EXTRAPOLATE_ABOVE", "ModelInfo", "cache_path", "info_from_spec", "resolve_model",
           "zoo_name"]


def _write_table(table: Mapping[str, Mapping[str, Any]]) -> str:
    """The source of `hwsel._zoo_table` holding `table` (its docstring kept)."""
    from . import _zoo_table

    rows = "\n".join(f"    {json.dumps(name)}: {{" + ", ".join(
        f"{json.dumps(k)}: {'None' if v is None else json.dumps(v)}" for k, v in entry.items()) + "},"
        for name, entry in sorted(table.items()))
    return (f'"""{_zoo_table.__doc__}"""\n\nfrom __future__ import annotations\n\nfrom typing import Any\n\n'
            f"ZOO_ARCHITECTURES: dict[str, dict[str, Any]] = {{\n{rows}\n}}\n")


if __name__ == "__main__":  # python -m hwsel.resolution: rewrite hwsel/_zoo_table.py for the current zoo
    _table = _dump_zoo()
    for _name, _entry in _table.items():
        if not math.isfinite(float(_entry["flops_per_item"])):
            raise ValueError(f"{_name}: non-finite FLOPs")
    Path(__file__).with_name("_zoo_table.py").write_text(_write_table(_table), encoding="utf-8")
