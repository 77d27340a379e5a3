"""The model zoo: models built from transformers config classes, never downloaded.

A `ModelSpec` names a config class and its kwargs, the auto class that builds the model, and
the modality whose input factory feeds it. Parameter count and FLOPs per forward come from a
meta-device build: no weights are allocated. Users add models with a TOML/JSON model-set file
or a local directory holding a `config.json` (`load_model_set`, `--hwbench-model-set`).
"""

from __future__ import annotations

import difflib
import functools
import json
import math
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Any

try:
    import tomllib
except ModuleNotFoundError:  # Python 3.10
    import tomli as tomllib  # type: ignore[no-redef]

FAMILIES: tuple[str, ...] = ("embedding", "text_generation", "vision", "audio", "multimodal")
MODALITIES: tuple[str, ...] = ("text", "text2text", "image", "audio_features", "audio_waveform", "image_text")
TIERS: tuple[str, ...] = ("full", "quick")


@dataclass(frozen=True)
class ModelSpec:
    """How to build one zoo model and feed it."""

    name: str
    family: str
    config_class: str
    modality: str
    config_kwargs: Mapping[str, Any] = field(default_factory=dict)
    auto_class: str = "AutoModel"
    tier: str = "full"
    sequence_length: int = 128

    def __post_init__(self) -> None:
        if self.family not in FAMILIES:
            raise ValueError(f"model {self.name!r}: family {self.family!r} is not one of {', '.join(FAMILIES)}")
        if self.modality not in MODALITIES:
            raise ValueError(f"model {self.name!r}: modality {self.modality!r} is not one of {', '.join(MODALITIES)}")
        if self.tier not in TIERS:
            raise ValueError(f"model {self.name!r}: tier {self.tier!r} is not one of {', '.join(TIERS)}")
        if self.sequence_length < 1:
            raise ValueError(f"model {self.name!r}: sequence_length must be >= 1, got {self.sequence_length}")

    def build_config(self) -> Any:
        """The transformers config object (no hub access)."""
        import transformers

        if self.config_class.startswith("/") or self.config_class.startswith("."):
            return transformers.AutoConfig.from_pretrained(self.config_class, local_files_only=True)
        try:
            cls = getattr(transformers, self.config_class)
        except AttributeError:
            raise ValueError(
                f"model {self.name!r}: transformers has no config class {self.config_class!r}"
            ) from None
        return cls(**self.config_kwargs)

    def build_model(self, device: Any = "cpu", dtype: Any = None, seed: int | None = 0) -> Any:
        """A randomly initialised model in eval mode on `device` (``"meta"`` allocates nothing).

        The weights come from `seed` (None: the global RNG), so every backend runs the same
        model; the caller's RNG state is left as it was.
        """
        import contextlib

        import torch
        import transformers

        config = self.build_config()
        auto = getattr(transformers, self.auto_class)
        rng = torch.random.fork_rng(devices=[]) if seed is not None else contextlib.nullcontext()
        with rng, torch.device(device):
            if seed is not None:
                torch.manual_seed(seed)
            model = auto.from_config(config, dtype=dtype) if dtype is not None else auto.from_config(config)
        return model.eval()

    def input_shape(self) -> dict[str, int | None]:
        """The size of one item: sequence length, image size or audio samples."""
        return _SHAPES[self.modality](self, self._config())

    def make_inputs(self, batch_size: int, device: Any = "cpu", seed: int = 0) -> dict[str, Any]:
        """Deterministic random inputs for `batch_size` items, as forward() kwargs."""
        import torch

        gen = torch.Generator().manual_seed(seed)
        inputs = _INPUTS[self.modality](self, self._config(), batch_size, gen)
        return {k: v.to(device) for k, v in inputs.items()}

    @functools.cached_property
    def _cached_config(self) -> Any:
        return self.build_config()

    def _config(self) -> Any:
        return self._cached_config

    @functools.cached_property
    def architecture(self) -> ModelArchitecture:
        """Parameter count, FLOPs per item and shape numbers, from a meta-device build."""
        return _architecture(self)


@dataclass(frozen=True)
class ModelArchitecture:
    """Numbers about a model that need no weights."""

    model_type: str
    param_count: int
    flops_per_item: float
    num_layers: int | None
    hidden_size: int | None


# --- input factories, one per modality -------------------------------------------------------

def _text_len(spec: ModelSpec, config: Any) -> int:
    cfg = getattr(config, "text_config", config)
    limit = getattr(cfg, "max_position_embeddings", None) or getattr(cfg, "n_positions", None)
    return min(spec.sequence_length, limit) if limit else spec.sequence_length


def _image_size(config: Any) -> int:
    cfg = getattr(config, "vision_config", config)
    return int(getattr(cfg, "image_size", 224) or 224)


def _audio_frames(config: Any) -> int:
    # Whisper's encoder needs exactly 2 * max_source_positions mel frames.
    return 2 * int(config.max_source_positions)


_AUDIO_SAMPLES = 16_000  # one second at 16 kHz


def _ids(config: Any, shape: tuple[int, ...], gen: Any) -> Any:
    import torch

    cfg = getattr(config, "text_config", config)
    return torch.randint(0, int(cfg.vocab_size), shape, generator=gen)


def _in_text(spec: ModelSpec, config: Any, batch: int, gen: Any) -> dict[str, Any]:
    import torch

    ids = _ids(config, (batch, _text_len(spec, config)), gen)
    return {"input_ids": ids, "attention_mask": torch.ones_like(ids)}


def _in_text2text(spec: ModelSpec, config: Any, batch: int, gen: Any) -> dict[str, Any]:
    inputs = _in_text(spec, config, batch, gen)
    inputs["decoder_input_ids"] = _ids(config, (batch, _text_len(spec, config)), gen)
    return inputs


def _in_image(spec: ModelSpec, config: Any, batch: int, gen: Any) -> dict[str, Any]:
    import torch

    size = _image_size(config)
    channels = int(getattr(getattr(config, "vision_config", config), "num_channels", 3))
    return {"pixel_values": torch.randn((batch, channels, size, size), generator=gen)}


def _in_audio_features(spec: ModelSpec, config: Any, batch: int, gen: Any) -> dict[str, Any]:
    import torch

    feats = torch.randn((batch, int(config.num_mel_bins), _audio_frames(config)), generator=gen)
    decoder_len = min(spec.sequence_length, int(config.max_target_positions))
    return {"input_features": feats, "decoder_input_ids": _ids(config, (batch, decoder_len), gen)}


def _in_audio_waveform(spec: ModelSpec, config: Any, batch: int, gen: Any) -> dict[str, Any]:
    import torch

    return {"input_values": torch.randn((batch, _AUDIO_SAMPLES), generator=gen)}


def _in_image_text(spec: ModelSpec, config: Any, batch: int, gen: Any) -> dict[str, Any]:
    inputs = _in_text(spec, config, batch, gen)
    inputs.update(_in_image(spec, config, batch, gen))
    return inputs


_INPUTS = {
    "text": _in_text,
    "text2text": _in_text2text,
    "image": _in_image,
    "audio_features": _in_audio_features,
    "audio_waveform": _in_audio_waveform,
    "image_text": _in_image_text,
}

_SHAPES = {
    "text": lambda s, c: {"sequence_length": _text_len(s, c), "image_size": None, "audio_samples": None},
    "text2text": lambda s, c: {"sequence_length": _text_len(s, c), "image_size": None, "audio_samples": None},
    "image": lambda s, c: {"sequence_length": None, "image_size": _image_size(c), "audio_samples": None},
    "audio_features": lambda s, c: {
        "sequence_length": min(s.sequence_length, int(c.max_target_positions)),
        "image_size": None,
        "audio_samples": _audio_frames(c) * int(getattr(c, "hop_length", 160) or 160),
    },
    "audio_waveform": lambda s, c: {"sequence_length": None, "image_size": None, "audio_samples": _AUDIO_SAMPLES},
    "image_text": lambda s, c: {"sequence_length": _text_len(s, c), "image_size": _image_size(c), "audio_samples": None},
}


def _first_attr(config: Any, names: Iterable[str]) -> int | None:
    for cfg in (config, getattr(config, "text_config", None), getattr(config, "vision_config", None)):
        if cfg is None:
            continue
        for name in names:
            value = getattr(cfg, name, None)
            if isinstance(value, int):
                return value
            if isinstance(value, list | tuple) and value:
                # ResNet-style stages: layers add up, the width is the last stage's.
                return int(sum(value)) if name == "depths" else int(value[-1])
    return None


def _architecture(spec: ModelSpec) -> ModelArchitecture:
    import torch
    from torch.utils.flop_counter import FlopCounterMode

    model = spec.build_model("meta")
    params = sum(p.numel() for p in model.parameters())
    inputs = spec.make_inputs(1, device="meta")
    # An all-ones attention mask changes no FLOPs, but transformers inspects its values
    # (`.item()`), which a meta tensor cannot give: count without it.
    inputs.pop("attention_mask", None)
    try:
        counter = FlopCounterMode(display=False)
        with counter, torch.no_grad():
            model(**inputs)
        flops = float(counter.get_total_flops())
    except (AssertionError, RuntimeError, NotImplementedError):
        # FlopCounterMode rejects grouped-query attention shapes (FACTS.md); fall back to the
        # dense-transformer estimate 2 * (non-embedding params) * tokens.
        embedding = sum(m.weight.numel() for m in model.modules() if isinstance(m, torch.nn.Embedding))
        tokens = spec.input_shape().get("sequence_length") or 1
        flops = 2.0 * (params - embedding) * tokens
    config = spec._config()
    return ModelArchitecture(
        model_type=str(getattr(config, "model_type", spec.config_class)),
        param_count=int(params),
        flops_per_item=flops,
        num_layers=_first_attr(config, ("num_hidden_layers", "n_layer", "num_layers", "encoder_layers", "depths")),
        hidden_size=_first_attr(config, ("hidden_size", "n_embd", "d_model", "hidden_sizes")),
    )


# --- the zoo ----------------------------------------------------------------------------------

_TINY_TEXT = {"num_hidden_layers": 2, "hidden_size": 64, "num_attention_heads": 2, "intermediate_size": 128,
              "vocab_size": 1000}

ZOO_SPECS: tuple[ModelSpec, ...] = (
    ModelSpec("bert-base", "embedding", "BertConfig", "text"),
    ModelSpec("gpt2", "text_generation", "GPT2Config", "text", auto_class="AutoModelForCausalLM"),
    ModelSpec("t5-small", "text_generation", "T5Config", "text2text", auto_class="AutoModelForSeq2SeqLM"),
    ModelSpec("vit-base", "vision", "ViTConfig", "image"),
    ModelSpec("resnet-50", "vision", "ResNetConfig", "image"),
    ModelSpec("whisper-tiny", "audio", "WhisperConfig", "audio_features", sequence_length=32),
    ModelSpec("wav2vec2-base", "audio", "Wav2Vec2Config", "audio_waveform"),
    ModelSpec("clip-vit-b32", "multimodal", "CLIPConfig", "image_text", sequence_length=77,
              config_kwargs={"vision_config": {"patch_size": 32}}),
    # the quick tier: same architectures, two layers, hidden 64
    ModelSpec("bert-tiny", "embedding", "BertConfig", "text", _TINY_TEXT, tier="quick", sequence_length=32),
    ModelSpec("gpt2-tiny", "text_generation", "GPT2Config", "text",
              {"n_layer": 2, "n_embd": 64, "n_head": 2, "n_positions": 128},
              auto_class="AutoModelForCausalLM", tier="quick", sequence_length=32),
    ModelSpec("t5-tiny", "text_generation", "T5Config", "text2text",
              {"num_layers": 2, "num_decoder_layers": 2, "d_model": 64, "d_kv": 32, "d_ff": 128, "num_heads": 2,
               "vocab_size": 1000}, auto_class="AutoModelForSeq2SeqLM", tier="quick", sequence_length=32),
    ModelSpec("vit-tiny", "vision", "ViTConfig", "image",
              {**_TINY_TEXT, "image_size": 64, "patch_size": 16} | {"vocab_size": None}, tier="quick"),
    ModelSpec("resnet-tiny", "vision", "ResNetConfig", "image",
              {"embedding_size": 16, "hidden_sizes": [16, 32], "depths": [1, 1], "layer_type": "basic",
               "image_size": 64}, tier="quick"),
    ModelSpec("whisper-micro", "audio", "WhisperConfig", "audio_features",
              {"d_model": 64, "encoder_layers": 2, "decoder_layers": 2, "encoder_attention_heads": 2,
               "decoder_attention_heads": 2, "encoder_ffn_dim": 128, "decoder_ffn_dim": 128,
               "num_mel_bins": 80, "max_source_positions": 100, "max_target_positions": 64},
              tier="quick", sequence_length=16),
    ModelSpec("wav2vec2-tiny", "audio", "Wav2Vec2Config", "audio_waveform",
              {**_TINY_TEXT, "conv_dim": [32, 32, 32], "conv_stride": [5, 4, 4], "conv_kernel": [10, 8, 8],
               "num_conv_pos_embeddings": 16, "num_conv_pos_embedding_groups": 2} | {"vocab_size": 32},
              tier="quick"),
    ModelSpec("clip-tiny", "multimodal", "CLIPConfig", "image_text",
              {"text_config": {**_TINY_TEXT, "max_position_embeddings": 77} | {"vocab_size": None},
               "vision_config": {**_TINY_TEXT, "image_size": 64, "patch_size": 16} | {"vocab_size": None},
               "projection_dim": 32},
              tier="quick", sequence_length=32),
)


def _clean(spec: ModelSpec) -> ModelSpec:
    """Drop None-valued kwargs (a tiny variant's way of saying 'keep the default')."""
    def strip(d: Mapping[str, Any]) -> dict[str, Any]:
        return {k: strip(v) if isinstance(v, Mapping) else v for k, v in d.items() if v is not None}
    return replace(spec, config_kwargs=strip(spec.config_kwargs))


#: name -> spec. `register_model` adds to it; users rarely touch it directly.
MODELS: dict[str, ModelSpec] = {s.name: _clean(s) for s in ZOO_SPECS}


def register_model(spec: ModelSpec, *, replace_existing: bool = False) -> ModelSpec:
    """Add a model to the zoo; a clashing name is an error unless `replace_existing`."""
    if spec.name in MODELS and not replace_existing and MODELS[spec.name] != spec:
        raise ValueError(f"model {spec.name!r} is already in the zoo; pick another name")
    MODELS[spec.name] = spec
    return spec


def get_model(name: str) -> ModelSpec:
    """The zoo entry named `name`; an unknown name lists close matches."""
    try:
        return MODELS[name]
    except KeyError:
        close = difflib.get_close_matches(name, MODELS, n=3, cutoff=0.4)
        hint = f" Did you mean {', '.join(close)}?" if close else ""
        raise KeyError(
            f"unknown model {name!r}.{hint} Known: {', '.join(sorted(MODELS))}. "
            "Add your own with --hwbench-model-set FILE.toml|DIR (see README)."
        ) from None


#: model_type (config.json) -> (family, modality, auto class), for directories with a config.json.
_MODEL_TYPES: dict[str, tuple[str, str, str]] = {
    "bert": ("embedding", "text", "AutoModel"),
    "roberta": ("embedding", "text", "AutoModel"),
    "distilbert": ("embedding", "text", "AutoModel"),
    "mpnet": ("embedding", "text", "AutoModel"),
    "gpt2": ("text_generation", "text", "AutoModelForCausalLM"),
    "llama": ("text_generation", "text", "AutoModelForCausalLM"),
    "qwen2": ("text_generation", "text", "AutoModelForCausalLM"),
    "t5": ("text_generation", "text2text", "AutoModelForSeq2SeqLM"),
    "vit": ("vision", "image", "AutoModel"),
    "resnet": ("vision", "image", "AutoModel"),
    "whisper": ("audio", "audio_features", "AutoModel"),
    "wav2vec2": ("audio", "audio_waveform", "AutoModel"),
    "clip": ("multimodal", "image_text", "AutoModel"),
}


def _spec_from_dir(path: Path) -> ModelSpec:
    config = json.loads((path / "config.json").read_text())
    model_type = config.get("model_type")
    if model_type not in _MODEL_TYPES:
        raise ValueError(
            f"{path}/config.json: model_type {model_type!r} has no default family; known: "
            f"{', '.join(sorted(_MODEL_TYPES))}. Describe it in a model-set TOML instead."
        )
    family, modality, auto = _MODEL_TYPES[model_type]
    return ModelSpec(path.name, family, str(path.resolve()), modality, auto_class=auto)


def load_model_set(path: str | Path) -> list[ModelSpec]:
    """Read models from a TOML/JSON model-set file or a directory with a `config.json`.

    File form: ``[[models]]`` tables (TOML) or ``{"models": [...]}`` (JSON), each with
    ``name``, ``family``, ``config_class``, ``modality`` and optional ``config_kwargs``,
    ``auto_class``, ``tier``, ``sequence_length``.
    """
    path = Path(path)
    if path.is_dir():
        if not (path / "config.json").exists():
            raise ValueError(f"model directory {path} has no config.json")
        return [_spec_from_dir(path)]
    if not path.exists():
        raise ValueError(f"model set {path} does not exist (expected a .toml/.json file or a directory)")
    text = path.read_text()
    if path.suffix == ".toml":
        data = tomllib.loads(text)
    elif path.suffix == ".json":
        data = json.loads(text)
    else:
        raise ValueError(f"model set {path}: unknown suffix {path.suffix!r}; use .toml, .json or a directory")
    entries = data.get("models") if isinstance(data, dict) else None
    if not isinstance(entries, list) or not entries:
        raise ValueError(f"model set {path}: expected a non-empty 'models' list")
    specs = []
    for i, entry in enumerate(entries):
        try:
            specs.append(ModelSpec(**entry))
        except TypeError as exc:
            raise ValueError(f"model set {path}, entry {i}: {exc}") from None
    return specs


def flops_per_item(spec: ModelSpec) -> float:
    """Forward FLOPs for one item (batch 1)."""
    return spec.architecture.flops_per_item


def achieved_tflops(flops_item: float | None, batch_size: int, latency_s: float) -> float | None:
    """TFLOP/s reached by one forward over `batch_size` items taking `latency_s`."""
    if not flops_item or latency_s <= 0 or not math.isfinite(latency_s):
        return None
    return flops_item * batch_size / latency_s / 1e12


__all__ = [
    "FAMILIES",
    "MODALITIES",
    "MODELS",
    "ModelArchitecture",
    "ModelSpec",
    "achieved_tflops",
    "get_model",
    "load_model_set",
    "register_model",
]
