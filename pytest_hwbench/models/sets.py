"""Model sets: user models from a TOML/JSON file, a Hugging Face `config.json` file or a folder with one.

Every model is checked once, when read (`check_model_spec`), and every error names the file, the
entry or model, and the field.
"""

from __future__ import annotations

import difflib
import functools
import json
import re
from collections.abc import Mapping
from pathlib import Path
from typing import Any

from .spec import CHOICES, MODALITIES, ModelSpec
from .zoo import BUILT_IN, ZOO_SPECS


@functools.cache
def _model_types() -> dict[str, tuple[str, str, str, Mapping[str, str]]]:
    """model_type (config.json) -> (family, modality, auto class, backend gaps): those of the zoo's
    models of that type, and BERT's for the BERT-like encoders."""
    import transformers

    types = {getattr(transformers, s.config_class).model_type:
             (s.family, s.modality, s.auto_class, s.backend_gaps) for s in ZOO_SPECS}
    return {**types, **dict.fromkeys(("roberta", "distilbert", "mpnet"), types["bert"])}


#: The largest model-set or config.json file read (a real one is a few KiB).
MAX_MODEL_FILE_BYTES = 4 * 2**20


def _read_model_file(path: Path, what: str) -> str:
    """The text of a model-set or config file: a regular file of at most `MAX_MODEL_FILE_BYTES`
    (a FIFO would block the read, ``/dev/zero`` never end); else ValueError naming it."""
    import stat

    try:
        info = path.stat()
    except OSError as exc:
        raise ValueError(f"{what} {path}: cannot be read ({exc})") from None
    if not stat.S_ISREG(info.st_mode):
        raise ValueError(f"{what} {path}: not a regular file; name a .toml/.json file or a directory with a "
                         "config.json")
    if info.st_size > MAX_MODEL_FILE_BYTES:
        raise ValueError(f"{what} {path}: {info.st_size} bytes, more than a model set or config holds "
                         f"(at most {MAX_MODEL_FILE_BYTES // 2**20} MiB)")
    with path.open("rb") as f:
        data = f.read(MAX_MODEL_FILE_BYTES + 1)
    return data.decode("utf-8")


def _model_type_row(config: Mapping[str, Any], where: str) -> tuple[str, str, str, Mapping[str, str]]:
    """(family, modality, auto class, backend gaps) of a config.json's ``model_type``, once its
    sizes are checked (`_refuse_nonpositive_size`)."""
    model_type = config.get("model_type")
    if model_type not in _model_types():
        raise ValueError(f"{where}: model_type {model_type!r} has no default family; known: "
                         f"{', '.join(sorted(_model_types()))}. Describe it in a model-set TOML instead.")
    _refuse_nonpositive_size(config, where)
    return _model_types()[model_type]


#: config.json keys that describe the file, not the architecture.
_CONFIG_METADATA = ("model_type", "architectures", "_name_or_path", "transformers_version", "torch_dtype", "dtype",
                    "auto_map", "_commit_hash")


def spec_from_config(config: Mapping[str, Any], name: str | None = None, *, where: str = "config") -> ModelSpec:
    """A checked `ModelSpec` from the contents of a Hugging Face ``config.json``: the config class of
    its ``model_type`` (family, modality and auto class: `_model_types`), the other keys its keyword
    arguments. `name` defaults to the last part of ``_name_or_path``, else ``<model_type>-custom``.
    Raises ValueError naming `where` and the field."""
    if not isinstance(config, Mapping):
        raise ValueError(f"{where}: expected a JSON object (the contents of a config.json), got "
                         f"{type(config).__name__}")
    family, modality, auto, gaps = _model_type_row(config, where)
    model_type = config["model_type"]
    import transformers

    config_class = type(transformers.AutoConfig.for_model(model_type)).__name__
    kwargs = {k: v for k, v in config.items() if k not in _CONFIG_METADATA}
    if not name:
        origin = config.get("_name_or_path")
        name = str(origin).rstrip("/").rsplit("/", 1)[-1] if isinstance(origin, str) and origin.strip() else ""
        name = name or f"{model_type}-custom"
    spec = ModelSpec(name, family, config_class, modality, config_kwargs=kwargs, auto_class=auto, backend_gaps=gaps)
    try:
        return check_model_spec(spec)
    except ValueError as exc:
        raise ValueError(f"{where}: {exc}") from None


#: Fields of a model-set entry: the `ModelSpec` fields; the first four are required.
_REQUIRED_FIELDS: tuple[str, ...] = ("name", "family", "config_class", "modality")
_ENTRY_FIELDS: tuple[str, ...] = tuple(f for f in ModelSpec.__dataclass_fields__)
# transformers' strict config dataclasses name the field in their message (huggingface_hub's
# StrictDataclassFieldValidationError): "Validation error for field 'hidden_size': ..."
_CONFIG_FIELD = re.compile(r"field '([^']+)'")


#: Config keys that count something (layers, heads, widths, positions): each must be >= 1.
SIZE_KEYS: frozenset[str] = frozenset({
    "num_hidden_layers", "num_layers", "n_layer", "n_layers", "num_decoder_layers", "encoder_layers", "decoder_layers",
    "hidden_size", "n_embd", "d_model", "embed_dim", "projection_dim", "d_ff", "d_kv", "n_inner", "head_dim",
    "intermediate_size", "encoder_ffn_dim", "decoder_ffn_dim", "num_attention_heads", "n_head", "num_heads",
    "num_key_value_heads", "encoder_attention_heads", "decoder_attention_heads", "vocab_size",
    "max_position_embeddings", "n_positions", "image_size", "patch_size", "num_channels", "num_mel_bins",
    "hidden_sizes", "depths", "max_source_positions", "max_target_positions",
})


def _refuse_nonpositive_size(config: Mapping[str, Any], where: str, prefix: str = "") -> None:
    """ValueError naming `where` and the dotted field of the first size in `config` (a key of
    `SIZE_KEYS`; nested configs and lists included) that is a number but not a whole number >= 1.
    None means the config class's default; a value that is no number is the config class's to refuse."""
    for key, value in config.items():
        name = f"{prefix}{key}"
        if isinstance(value, Mapping):
            _refuse_nonpositive_size(value, where, f"{name}.")
        elif key in SIZE_KEYS and value is not None:
            for v in value if isinstance(value, list | tuple) else [value]:
                if isinstance(v, int | float) and not isinstance(v, bool) and (not v >= 1 or v != int(v)):
                    raise ValueError(f"{where}: field {name!r}: a size must be a whole number >= 1, "
                                     f"got {value!r}")


def _entry_spec(entry: Mapping[str, Any], where: str) -> ModelSpec:
    """The spec of a model-set entry; ValueError naming `where` and the field when it is not well-formed."""

    def bad(key: str, problem: str) -> ValueError:
        return ValueError(f"{where}: field {key!r}: {problem}")

    unknown = [key for key in entry if key not in _ENTRY_FIELDS]
    if unknown:
        raise bad(str(unknown[0]), f"unknown field; accepted: {', '.join(_ENTRY_FIELDS)}")
    for key in _REQUIRED_FIELDS:
        if key not in entry:
            raise bad(key, "missing (required: " + ", ".join(_REQUIRED_FIELDS) + ")")
    for key in ("family", "config_class", "modality", "auto_class", "tier"):
        if key in entry and (not isinstance(entry[key], str) or not entry[key].strip()):
            raise bad(key, f"expected a non-empty string, got {entry[key]!r}")
    for key, choices in CHOICES.items():
        if key in entry and entry[key] not in choices:
            raise bad(key, f"{entry[key]!r} is not one of {', '.join(choices)}")
    length = entry.get("sequence_length", 1)
    if isinstance(length, bool) or not isinstance(length, int) or length < 1:
        raise bad("sequence_length", f"expected a whole number >= 1, got {length!r}")
    for key in ("config_kwargs", "backend_gaps"):
        if key in entry and not isinstance(entry[key], Mapping):
            raise bad(key, f"expected a table, got {type(entry[key]).__name__} {entry[key]!r}")
    _refuse_nonpositive_size(entry.get("config_kwargs") or {}, where, "config_kwargs.")
    return ModelSpec(**entry)


def _stray_sub_config(config: Any, prefix: str = "config_kwargs.",
                      names: frozenset[str] | None = None) -> tuple[str, str] | None:
    """(dotted field, config class) of the first sub-config name of `config`'s class (a llava's
    ``text_config``) found again as a plain mapping in a sub-config that does not build it, or None."""
    import transformers

    names = frozenset(getattr(config, "sub_configs", None) or ()) if names is None else names
    for key, value in vars(config).items():
        if isinstance(value, transformers.PretrainedConfig):
            found = _stray_sub_config(value, f"{prefix}{key}.", names)
            if found is not None:
                return found
        elif key in names and isinstance(value, Mapping):
            return f"{prefix}{key}", type(config).__name__
    return None


def check_model_spec(spec: ModelSpec) -> ModelSpec:
    """Build `spec`'s config once (kept for its cases) and check what every case would need,
    building no model; ValueError names the field: ``config_class``, ``config_kwargs.<key>``,
    ``auto_class`` or ``modality``."""
    import transformers

    kwargs = spec.config_kwargs
    is_path = spec.config_class.startswith(("/", "."))
    if not is_path and not hasattr(transformers, spec.config_class):
        close = difflib.get_close_matches(spec.config_class, [n for n in dir(transformers) if n.endswith("Config")],
                                          n=3, cutoff=0.6)
        hint = f"; did you mean {', '.join(close)}?" if close else " (e.g. BertConfig, LlamaConfig, ViTConfig)"
        raise ValueError(f"field 'config_class': transformers has no config class {spec.config_class!r}{hint}")
    try:
        config = spec._config()  # cached on the spec: the cases reuse this object
    except Exception as exc:  # a config class raises whatever its checks raise
        text = f"{type(exc).__name__}: {exc}".replace("\n", " ")
        if is_path:
            raise ValueError(f"field 'config_class': cannot load {spec.config_class}: {text}") from None
        match = _CONFIG_FIELD.search(str(exc))
        key = match.group(1) if match and match.group(1) in kwargs else None
        field_name = f"config_kwargs.{key}" if key else "config_kwargs"
        raise ValueError(f"field {field_name!r}: {spec.config_class}({_kwargs_text(kwargs)}) fails: {text}") from None
    stray = _stray_sub_config(config)
    if stray is not None:
        raise ValueError(f"field {stray[0]!r}: {stray[1]} has no sub-config {stray[0].rsplit('.', 1)[-1]!r} "
                         "(transformers would keep it as a plain dict the model cannot use); drop it or move its "
                         "fields up a level")
    if not hasattr(transformers, spec.auto_class):
        raise ValueError(f"field 'auto_class': transformers has no class {spec.auto_class!r} "
                         "(e.g. AutoModel, AutoModelForCausalLM, AutoModelForSeq2SeqLM)")
    try:
        spec.input_shape()
    except Exception as exc:
        raise ValueError(
            f"field 'modality': {spec.modality!r} does not fit {type(config).__name__} "
            f"({type(exc).__name__}: {exc}); pick the modality of the model's inputs: {', '.join(MODALITIES)}"
        ) from None
    return spec


def _kwargs_text(kwargs: Mapping[str, Any]) -> str:
    text = ", ".join(f"{k}={v!r}" for k, v in kwargs.items())
    return text if len(text) <= 200 else text[:197] + "..."


def load_model_set(path: str | Path) -> list[ModelSpec]:
    """Read models from a TOML/JSON model-set file, a `config.json` file or a directory with one.

    File form: ``[[models]]`` tables (TOML) or ``{"models": [...]}`` (JSON), each with
    ``name``, ``family``, ``config_class``, ``modality`` and optional ``config_kwargs``,
    ``auto_class``, ``tier``, ``sequence_length``, ``replace``. An entry may reuse a built-in zoo
    name only for the same architecture, or with ``replace = true``. Every model is checked here
    (`check_model_spec`); ValueError names the file, the model (or the entry) and the field.
    """
    path = Path(path)
    if path.is_dir():
        config_file = path / "config.json"
        if not config_file.exists():
            raise ValueError(f"model directory {path} has no config.json")
        try:
            config = json.loads(_read_model_file(config_file, "config"))
        except (OSError, UnicodeDecodeError, json.JSONDecodeError) as exc:
            raise ValueError(f"{config_file}: cannot be read as JSON ({exc})") from None
        family, modality, auto, gaps = _model_type_row(config if isinstance(config, dict) else {}, str(config_file))
        spec = ModelSpec(path.name, family, str(path.resolve()), modality, auto_class=auto, backend_gaps=gaps)
        try:
            return [check_model_spec(spec)]
        except ValueError as exc:
            raise ValueError(f"model directory {path}: {exc}") from None
    if not path.exists():
        raise ValueError(f"model set {path} does not exist (expected a .toml/.json file or a directory)")
    if path.suffix not in (".toml", ".json"):
        raise ValueError(f"model set {path}: unknown suffix {path.suffix!r}; use .toml, .json or a directory")
    try:
        import tomllib
    except ModuleNotFoundError:  # Python 3.10
        import tomli as tomllib  # type: ignore[no-redef]
    try:
        text = _read_model_file(path, "model set")
        data = tomllib.loads(text) if path.suffix == ".toml" else json.loads(text)
    except (OSError, UnicodeDecodeError) as exc:
        raise ValueError(f"model set {path}: cannot be read ({exc})") from None
    except (tomllib.TOMLDecodeError, json.JSONDecodeError) as exc:
        raise ValueError(f"model set {path}: not valid {path.suffix[1:].upper()}: {exc}") from None
    if isinstance(data, Mapping) and "model_type" in data and "models" not in data:  # a transformers config.json
        default = path.parent.name if path.name == "config.json" else path.stem
        return [spec_from_config(data, None if data.get("_name_or_path") else default, where=str(path))]
    entries = data.get("models") if isinstance(data, dict) else None
    if not isinstance(entries, list) or not entries:
        raise ValueError(f"model set {path}: expected a non-empty 'models' list")
    specs: list[ModelSpec] = []
    seen: dict[str, int] = {}
    for i, entry in enumerate(entries):
        if not isinstance(entry, dict):
            raise ValueError(
                f"model set {path}: entry {i} of 'models' is not a table but {type(entry).__name__} {entry!r}; "
                f"each entry is a table with {', '.join(_REQUIRED_FIELDS)}"
            )
        name = entry.get("name")
        if not isinstance(name, str) or not name.strip():
            raise ValueError(f"model set {path}, entry {i}: field 'name': expected a non-empty string, got {name!r}")
        where = f"model set {path}, entry {i} (model {name!r})"
        if name in seen:
            raise ValueError(f"{where}: field 'name': {name!r} is already entry {seen[name]}; names must be unique")
        seen[name] = i
        entry = dict(entry)
        take_over = entry.pop("replace", False)
        if not isinstance(take_over, bool):
            raise ValueError(f"{where}: field 'replace': expected true or false, got {take_over!r}")
        spec = _entry_spec(entry, where)
        try:
            specs.append(check_model_spec(spec))
        except ValueError as exc:
            raise ValueError(f"{where}: {exc}") from None
        if not take_over:
            _check_zoo_name(spec, where)
    return specs


def _check_zoo_name(spec: ModelSpec, where: str) -> None:
    """Refuse an entry that takes a built-in zoo name for another architecture (records would
    carry the zoo model's name for a different model)."""

    def architecture(s: ModelSpec) -> dict[str, Any]:  # the built config's values, no metadata
        return {k: v for k, v in s._config().to_dict().items() if k not in (*_CONFIG_METADATA, "return_dict")}

    zoo = BUILT_IN.get(spec.name)
    if zoo is None or (zoo.config_class == spec.config_class and architecture(zoo) == architecture(spec)):
        return
    raise ValueError(f"{where}: field 'name': {spec.name!r} is a built-in zoo model ({zoo.config_class}) and this "
                     f"entry describes another architecture ({spec.config_class}({_kwargs_text(spec.config_kwargs)})); "
                     "give it its own name, or set replace = true to take the zoo name over")


__all__ = ["SIZE_KEYS", "check_model_spec", "load_model_set", "spec_from_config"]
