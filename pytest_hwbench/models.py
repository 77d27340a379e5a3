"""The model zoo: models built from transformers config classes, never downloaded.

A `ModelSpec` names a config class and its kwargs, the auto class that builds the model, and
the modality whose input factory feeds it. Parameter count, FLOPs per forward and the peak
activation memory come from a meta-device build: no weights are allocated, so the numbers of a
7B model cost about a second. Users add models with a TOML/JSON model-set file or a local
directory holding a `config.json` (`load_model_set`, `--hwbench-model-set`).

The predecessor's key model set (BERT, CLAP, CLIP, DETR, LLaMA, LLaVA, Qwen2, T5, ViT, Wav2Vec2,
Whisper, XCLIP; `KEY_MODELS`) comes in tiers: ``quick`` (two layers, hidden 64: CI smoke on any
CPU), ``full`` (real sizes that fit a 24 GB CPU machine in fp32, e.g. TinyLlama-1.1B, Qwen2-0.5B)
and ``large`` (real sizes for GPU runners: LLaMA-7B, Qwen2-7B, LLaVA-1.5-7B). Cases whose
`ModelSpec.estimated_memory_mb` exceeds the target's memory are skipped (`BenchCase.unavailable`).

Length: over 500 lines; the zoo's definitions (config arguments of some 30 models) take about
300, model sets and the meta-device trace the rest.
"""

from __future__ import annotations

import difflib
import functools
import json
import math
import re
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field, replace
from pathlib import Path
from types import MappingProxyType
from typing import Any

from .vocabulary import BYTES_PER_PRECISION

try:
    import tomllib
except ModuleNotFoundError:  # Python 3.10
    import tomli as tomllib  # type: ignore[no-redef]

FAMILIES: tuple[str, ...] = ("embedding", "text_generation", "vision", "audio", "multimodal")
MODALITIES: tuple[str, ...] = (
    "text", "text2text", "image", "audio_features", "audio_waveform", "image_text",
    "audio_text", "video_text", "image_text_tokens",
)
#: quick: tiny variants for CI; full: real sizes that fit a 24 GB CPU host in fp32; large: real
#: sizes for GPU runners (their CPU cases skip on hosts without the memory).
TIERS: tuple[str, ...] = ("full", "quick", "large")
#: Bytes per weight at each precision. int8 is dynamic quantization of the Linear weights, so
#: this is a floor: embeddings and norms stay fp32.
WEIGHT_BYTES: Mapping[str, int] = BYTES_PER_PRECISION
#: Bytes per activation value: dynamic int8 quantizes weights only and keeps fp32 activations.
ACTIVATION_BYTES: Mapping[str, int] = MappingProxyType({**BYTES_PER_PRECISION, "int8": 4})


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
    #: backend name -> why this model cannot run there, for gaps no backend can detect before
    #: a wrong result (e.g. an export that silently fixes the batch size). A skip reason.
    backend_gaps: Mapping[str, str] = field(default_factory=dict)

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

    def build_model(self, device: Any = "cpu", dtype: Any = None, seed: int | None = 0,
                    auto_class: str | None = None) -> Any:
        """A randomly initialised model in eval mode on `device` (``"meta"`` allocates nothing).

        The weights come from `seed` (None: the global RNG), so every backend runs the same
        model; the caller's RNG state is left as it was. `auto_class` replaces the spec's own
        (e.g. a generation head where the zoo builds the base model, as for Whisper).
        """
        import contextlib

        import torch
        import transformers

        config = self.build_config()
        auto = getattr(transformers, auto_class or self.auto_class)
        rng = torch.random.fork_rng(devices=[]) if seed is not None else contextlib.nullcontext()
        with rng, torch.device(device):
            if seed is not None:
                torch.manual_seed(seed)
            model = auto.from_config(config, dtype=dtype) if dtype is not None else auto.from_config(config)
        return model.eval()

    def input_shape(self) -> dict[str, int | None]:
        """The size of one item: sequence length, image size or audio samples."""
        return _SHAPES[self.modality](self, self._config())

    @property
    def max_sequence_length(self) -> int | None:
        """The longest token sequence the model takes, from its config's position limit.

        None where its input is no token sequence (images, waveforms) or the config sets no
        limit (T5's relative positions). Builds the config, not the model.
        """
        return _MAX_LENGTH[self.modality](self._config())

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

    def weights_memory_mb(self, precision: str = "fp32") -> float:
        """MiB the weights take at `precision` (`WEIGHT_BYTES` per parameter)."""
        return self.architecture.param_count * _bytes(WEIGHT_BYTES, precision) / 2**20

    def activation_memory_mb(self, precision: str = "fp32", batch_size: int = 1) -> float:
        """MiB of activations alive at the peak of one forward over `batch_size` items.

        The peak is measured once, at batch 1 in fp32, on the meta device: the most bytes that
        op outputs of the forward held at one time, the returned outputs (logits, KV cache)
        included, weights and inputs excluded. It is scaled linearly in the batch and by
        `ACTIVATION_BYTES` / 4 for the precision. Runtime overhead (CUDA context, allocator
        slack, a second copy while exporting) is not in it. 0 when the forward cannot run on
        the meta device.
        """
        per_item = self.architecture.activation_bytes_per_item or 0.0
        return per_item * _bytes(ACTIVATION_BYTES, precision) / 4 * batch_size / 2**20

    def estimated_memory_mb(self, precision: str = "fp32", batch_size: int = 1) -> float:
        """MiB one forward needs at `precision` and `batch_size`: weights plus peak activations."""
        return self.weights_memory_mb(precision) + self.activation_memory_mb(precision, batch_size)


@dataclass(frozen=True)
class ModelArchitecture:
    """Numbers about a model that need no weights."""

    model_type: str
    param_count: int
    flops_per_item: float
    num_layers: int | None
    hidden_size: int | None
    #: Peak bytes of activations of one fp32 forward at batch 1 (None: not measurable on meta).
    activation_bytes_per_item: float | None = None
    #: Operators one eager forward dispatches that compute (views excluded): about one device
    #: kernel launch each, which is what bounds small-batch GPU latency (None: not measurable).
    launches_per_forward: int | None = None
    num_attention_heads: int | None = None
    #: Key/value heads (grouped-query attention); equal to the attention heads otherwise.
    num_key_value_heads: int | None = None


def _bytes(table: Mapping[str, int], precision: str) -> int:
    try:
        return table[precision]
    except KeyError:
        raise ValueError(f"precision {precision!r} is not one of {', '.join(table)}") from None


# --- input factories, one per modality -------------------------------------------------------

def _position_limit(config: Any) -> int | None:
    """Positions the (text) model embeds; None for relative positions (T5) or no text model."""
    cfg = getattr(config, "text_config", config)
    limit = getattr(cfg, "max_position_embeddings", None) or getattr(cfg, "n_positions", None)
    return int(limit) if limit else None


def _text_len(spec: ModelSpec, config: Any) -> int:
    limit = _position_limit(config)
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


#: CLAP's feature extractor works at 48 kHz with a hop of 480 samples (ClapFeatureExtractor).
_CLAP_HOP = 480


def _clap_frames(config: Any) -> int:
    # ClapAudioEncoder.reshape_mel2img folds (time, mel) into a spec_size x spec_size image:
    # time is stretched to spec_size * (spec_size // num_mel_bins) frames (1024 for HTSAT, about
    # 10 s at 48 kHz). Feed exactly that many, so the encoder does no resampling of its own.
    audio = config.audio_config
    return int(audio.spec_size) * (int(audio.spec_size) // int(audio.num_mel_bins))


def _in_audio_text(spec: ModelSpec, config: Any, batch: int, gen: Any) -> dict[str, Any]:
    import torch

    # ClapModel: input_features is (batch, 1, time, mel) log-mel (4 channels only with fusion).
    mel = int(config.audio_config.num_mel_bins)
    inputs = _in_text(spec, config, batch, gen)
    inputs["input_features"] = torch.randn((batch, 1, _clap_frames(config), mel), generator=gen)
    return inputs


def _in_video_text(spec: ModelSpec, config: Any, batch: int, gen: Any) -> dict[str, Any]:
    import torch

    # XCLIPModel: pixel_values is (batch, frames, channels, H, W) with frames == vision num_frames.
    vision = config.vision_config
    size = _image_size(config)
    shape = (batch, int(vision.num_frames), int(getattr(vision, "num_channels", 3)), size, size)
    inputs = _in_text(spec, config, batch, gen)
    inputs["pixel_values"] = torch.randn(shape, generator=gen)
    return inputs


def _image_tokens(config: Any) -> int:
    """Placeholder tokens one image takes in a LLaVA prompt: one per image feature.

    LlavaModel.get_image_features keeps every patch of the chosen vision layer, and the CLS
    token too only under the "full" strategy; get_placeholder_mask then wants exactly that many
    image tokens in input_ids (576 for LLaVA-1.5's 336 px, patch 14).
    """
    vision = config.vision_config
    patches = (int(vision.image_size) // int(vision.patch_size)) ** 2
    return patches + (1 if config.vision_feature_select_strategy == "full" else 0)


def _tokens_text_len(spec: ModelSpec, config: Any) -> int:
    limit = int(config.text_config.max_position_embeddings) - _image_tokens(config)
    return max(1, min(spec.sequence_length, limit))


def _in_image_text_tokens(spec: ModelSpec, config: Any, batch: int, gen: Any) -> dict[str, Any]:
    import torch

    # LLaVA-style prompt: the image's placeholder tokens, then `sequence_length` text tokens
    # (random ids that never collide with the image token).
    image_token = int(config.image_token_index)
    text = _ids(config, (batch, _tokens_text_len(spec, config)), gen)
    text = torch.where(text == image_token, torch.zeros_like(text), text)
    image = torch.full((batch, _image_tokens(config)), image_token, dtype=text.dtype)
    ids = torch.cat([image, text], dim=1)
    inputs = {"input_ids": ids, "attention_mask": torch.ones_like(ids)}
    inputs.update(_in_image(spec, config, batch, gen))
    return inputs


_INPUTS = {
    "text": _in_text,
    "text2text": _in_text2text,
    "image": _in_image,
    "audio_features": _in_audio_features,
    "audio_waveform": _in_audio_waveform,
    "image_text": _in_image_text,
    "audio_text": _in_audio_text,
    "video_text": _in_video_text,
    "image_text_tokens": _in_image_text_tokens,
}


def _shape(sequence_length: int | None = None, image_size: int | None = None,
           audio_samples: int | None = None) -> dict[str, int | None]:
    return {"sequence_length": sequence_length, "image_size": image_size, "audio_samples": audio_samples}


#: modality -> the longest text a model of that modality takes (None: no limit or no text).
_MAX_LENGTH = {
    "text": _position_limit,
    "text2text": _position_limit,
    "image": lambda c: None,
    "audio_features": lambda c: int(c.max_target_positions),
    "audio_waveform": lambda c: None,
    "image_text": _position_limit,
    "audio_text": _position_limit,
    "video_text": _position_limit,
    "image_text_tokens": lambda c: max(1, int(c.text_config.max_position_embeddings) - _image_tokens(c)),
}

#: modality -> the size of one item. Keys are `BenchmarkRecord` fields: video frames have none,
#: so a video item reports its frame size only (the frame count is in the config).
_SHAPES = {
    "text": lambda s, c: _shape(_text_len(s, c)),
    "text2text": lambda s, c: _shape(_text_len(s, c)),
    "image": lambda s, c: _shape(image_size=_image_size(c)),
    "audio_features": lambda s, c: _shape(
        min(s.sequence_length, int(c.max_target_positions)),
        audio_samples=_audio_frames(c) * int(getattr(c, "hop_length", 160) or 160),
    ),
    "audio_waveform": lambda s, c: _shape(audio_samples=_AUDIO_SAMPLES),
    "image_text": lambda s, c: _shape(_text_len(s, c), _image_size(c)),
    "audio_text": lambda s, c: _shape(_text_len(s, c), audio_samples=_clap_frames(c) * _CLAP_HOP),
    "video_text": lambda s, c: _shape(_text_len(s, c), _image_size(c)),
    # the tokens the language model sees: the image's placeholders plus the text
    "image_text_tokens": lambda s, c: _shape(_image_tokens(c) + _tokens_text_len(s, c), _image_size(c)),
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


@functools.cache
def _meta_run_mode() -> type:
    """A dispatch mode for a meta-device forward: records peak activation bytes, reads checks as true.

    Peak: every op output with storage of its own (not a view, not an in-place result) is live
    from its creation until its storage is freed (a weakref on the storage, so views keep it
    alive, as they do in a real run). Meta storages have sizes, not data.

    Launches: every op that computes (not a view) counts once, about one kernel launch in an
    eager run.

    Checks: transformers reads booleans out of tensors (`padding_mask.all()` in its mask
    helpers, LLaVA's image-token count check), which a meta tensor cannot give. A boolean
    scalar read on meta answers True: the zoo's inputs are valid and its masks all ones, so the
    checks hold. Other scalar reads still raise, and the caller falls back to estimates.
    Defined on first use: this module imports torch lazily.
    """
    import weakref

    import torch
    from torch.utils._python_dispatch import TorchDispatchMode
    from torch.utils._pytree import tree_leaves

    class MetaRun(TorchDispatchMode):
        def __init__(self) -> None:
            super().__init__()
            self.live = 0
            self.peak = 0
            self.launches = 0
            self._refs: dict[int, Any] = {}

        def _free(self, key: int, nbytes: int) -> None:
            self.live -= nbytes
            self._refs.pop(key, None)

        def __torch_dispatch__(self, func: Any, types: Any, args: Any = (), kwargs: Any = None) -> Any:
            if func is torch.ops.aten._local_scalar_dense.default and args[0].is_meta \
                    and args[0].dtype == torch.bool:
                return True
            out = func(*args, **(kwargs or {}))
            aliases = [r.alias_info for r in func._schema.returns]
            if not (aliases and all(a is not None and not a.is_write for a in aliases)):
                self.launches += 1  # computes (views only re-describe memory)
            if any(a is not None for a in aliases):
                return out  # a view or an in-place result: no new memory
            for t in tree_leaves(out):
                if not isinstance(t, torch.Tensor):
                    continue
                storage = t.untyped_storage()
                key = id(storage)
                ref = self._refs.get(key)
                if ref is not None and ref() is storage:
                    continue
                nbytes = int(storage.nbytes())
                self.live += nbytes
                self.peak = max(self.peak, self.live)
                self._refs[key] = weakref.ref(storage, lambda _, k=key, n=nbytes: self._free(k, n))
            return out

    return MetaRun


def _tied_output_weight(model: Any, embeddings: list[Any]) -> int:
    """Size of an output head that shares its weight with an input embedding (Qwen2-0.5B)."""
    get = getattr(model, "get_output_embeddings", None)
    head = get() if callable(get) else None
    weight = getattr(head, "weight", None)
    if weight is None or not any(e.weight is weight for e in embeddings):
        return 0
    return int(weight.numel())


def dense_flops_estimate(model: Any, tokens: int, num_layers: int | None, hidden_size: int | None) -> float:
    """Forward FLOPs of a dense transformer for one item of `tokens` tokens, from its weights.

    2 FLOPs per weight per token (Kaplan et al. 2020, C_forward ~ 2N) over the weights a token
    passes through: all parameters but the embedding tables (lookups), plus an output head tied
    to an embedding (it is a matmul however it is stored); then 4 * layers * tokens^2 * hidden
    for the attention scores and their weighted sum. Within 0.1% of FlopCounterMode for the
    LLaMA and Qwen2 sizes of the zoo at 128 tokens.
    """
    import torch

    embeddings = [m for m in model.modules() if isinstance(m, torch.nn.Embedding)]
    params = sum(p.numel() for p in model.parameters())
    matmul_weights = params - sum(e.weight.numel() for e in embeddings) + _tied_output_weight(model, embeddings)
    attention = 4.0 * (num_layers or 0) * tokens * tokens * (hidden_size or 0)
    return 2.0 * matmul_weights * tokens + attention


#: What a meta-device forward raises where it cannot go on (FlopCounterMode's GQA shape assert,
#: `.item()` on a meta tensor, a kernel without a meta implementation, a data-dependent check).
_META_ERRORS = (AssertionError, RuntimeError, NotImplementedError, ValueError)


def _architecture(spec: ModelSpec) -> ModelArchitecture:
    import torch
    from torch.utils.flop_counter import FlopCounterMode

    model = spec.build_model("meta")
    params = sum(p.numel() for p in model.parameters())
    # All-ones attention masks stay: transformers reads booleans out of them (`mask.all()`),
    # which the meta-run mode answers (see `_meta_run_mode`).
    inputs = spec.make_inputs(1, device="meta")
    config = spec._config()
    num_layers = _first_attr(config, ("num_hidden_layers", "n_layer", "num_layers", "encoder_layers", "depths"))
    hidden_size = _first_attr(config, ("hidden_size", "n_embd", "d_model", "hidden_sizes"))
    heads = _first_attr(config, ("num_attention_heads", "n_head", "encoder_attention_heads"))
    kv_heads = _first_attr(config, ("num_key_value_heads",)) or heads
    live = _meta_run_mode()()
    activations: float | None = None
    launches: int | None = None
    try:
        counter = FlopCounterMode(display=False)
        with live, counter, torch.no_grad():
            model(**inputs)
        flops = float(counter.get_total_flops())
        activations = float(live.peak)
        launches = live.launches
    except _META_ERRORS:
        # FlopCounterMode rejects grouped-query attention shapes on CUDA kernels (FACTS.md), and
        # a model may not run on meta at all: estimate from the weights instead, and measure
        # the activations without the counter where the forward itself runs.
        tokens = spec.input_shape().get("sequence_length") or 1
        flops = dense_flops_estimate(model, tokens, num_layers, hidden_size)
        live = _meta_run_mode()()
        try:
            with live, torch.no_grad():
                model(**inputs)
            activations = float(live.peak)
            launches = live.launches
        except _META_ERRORS:
            activations = None
    return ModelArchitecture(
        model_type=str(getattr(config, "model_type", spec.config_class)),
        param_count=int(params),
        flops_per_item=flops,
        num_layers=num_layers,
        hidden_size=hidden_size,
        activation_bytes_per_item=activations,
        launches_per_forward=launches,
        num_attention_heads=heads,
        num_key_value_heads=kv_heads,
    )


# --- the zoo ----------------------------------------------------------------------------------

_TINY_TEXT = {"num_hidden_layers": 2, "hidden_size": 64, "num_attention_heads": 2, "intermediate_size": 128,
              "vocab_size": 1000}
#: Decoder-only LMs: grouped-query attention as in the real ones (4 query heads, 2 KV heads).
_TINY_LM = {**_TINY_TEXT, "num_attention_heads": 4, "num_key_value_heads": 2, "max_position_embeddings": 256}
_TINY_VISION = {**_TINY_TEXT, "image_size": 64, "patch_size": 16} | {"vocab_size": None}

# Real sizes, written out rather than left to config defaults, which move between releases.
#: LLaMA-7B (Llama-2-7b dims: multi-head attention, no GQA): 6.74B parameters.
_LLAMA_7B = {"hidden_size": 4096, "intermediate_size": 11008, "num_hidden_layers": 32, "num_attention_heads": 32,
             "num_key_value_heads": 32, "vocab_size": 32000, "max_position_embeddings": 4096}
#: TinyLlama-1.1B: LLaMA-2 layout at 22 layers, hidden 2048, GQA with 4 KV heads: 1.10B parameters.
_TINYLLAMA = {"hidden_size": 2048, "intermediate_size": 5632, "num_hidden_layers": 22, "num_attention_heads": 32,
              "num_key_value_heads": 4, "vocab_size": 32000, "max_position_embeddings": 2048}
#: CLIP ViT-L/14 at 336 px, LLaVA-1.5's vision tower: 304M parameters, 576 patches.
_CLIP_L336 = {"hidden_size": 1024, "intermediate_size": 4096, "num_hidden_layers": 24, "num_attention_heads": 16,
              "image_size": 336, "patch_size": 14, "projection_dim": 768}
#: LLaVA-1.5 pads the LLaMA vocabulary to 32064 and puts <image> at 32000.
_LLAVA = {"image_token_index": 32000, "vision_feature_layer": -2, "vision_feature_select_strategy": "default"}
#: Seen with torch 2.13 / transformers 5.23: LlavaModel.get_image_features turns the image batch
#: into a Python list (`list(image_features)`), so the TorchScript exporter bakes the example
#: batch into a Split node (onnxruntime and OpenVINO then fail at any other batch size), and the
#: dynamo exporter stops at transformers' shape check (`torch._check_tensor_all`), which has no
#: ONNX function, or with TRANSFORMERS_DISABLE_TORCH_CHECK=1 gives a graph fixed at batch 2.
_LLAVA_ONNX_GAP = ("no dynamic-batch ONNX export of LLaVA: transformers' LlavaModel.get_image_features "
                   "splits the image batch into a Python list, so the TorchScript exporter fixes the batch "
                   "at 2 (a Split node) and the dynamo exporter has no ONNX function for aten._is_all_true")
_LLAVA_GAPS = {"onnxruntime": _LLAVA_ONNX_GAP, "onnxruntime-trt": _LLAVA_ONNX_GAP, "openvino": _LLAVA_ONNX_GAP,
               "onnxruntime-web": _LLAVA_ONNX_GAP}
#: DETR's ResNet-50 backbone built by transformers (not timm), without pretrained weights.
_DETR = {"use_timm_backbone": False, "use_pretrained_backbone": False}

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
    # CLAP consumes audio and text, as CLIP consumes images and text: multimodal, like CLIP here
    # (the predecessor filed it under audio). laion/clap-htsat-unfused: HTSAT + RoBERTa, 153M.
    ModelSpec("clap-htsat-unfused", "multimodal", "ClapConfig", "audio_text"),
    # DETR-ResNet-50 (41.5M) at 800 x 800: its processor resizes the short side to 800.
    ModelSpec("detr-resnet-50", "vision", "DetrConfig", "image",
              {**_DETR, "backbone_config": {"model_type": "resnet",
                                            "out_features": ["stage1", "stage2", "stage3", "stage4"]},
               "num_labels": 91, "image_size": 800},
              auto_class="AutoModelForObjectDetection"),
    # microsoft/xclip-base-patch32: 8 frames of 224 px, 197M.
    ModelSpec("xclip-base-p32", "multimodal", "XCLIPConfig", "video_text", sequence_length=77),
    ModelSpec("tinyllama-1.1b", "text_generation", "LlamaConfig", "text", _TINYLLAMA,
              auto_class="AutoModelForCausalLM"),
    # Qwen2-0.5B: GQA (14 query, 2 KV heads), output head tied to the embedding: 494M.
    ModelSpec("qwen2-0.5b", "text_generation", "Qwen2Config", "text",
              {"hidden_size": 896, "intermediate_size": 4864, "num_hidden_layers": 24, "num_attention_heads": 14,
               "num_key_value_heads": 2, "vocab_size": 151936, "max_position_embeddings": 32768,
               "tie_word_embeddings": True},
              auto_class="AutoModelForCausalLM"),
    # A LLaVA that fits a CPU host: LLaVA-1.5's vision tower and projector on TinyLlama-1.1B
    # (the TinyLLaVA recipe), 1.41B.
    ModelSpec("llava-tinyllama-1.4b", "multimodal", "LlavaConfig", "image_text_tokens",
              {**_LLAVA, "vision_config": {"model_type": "clip_vision_model", **_CLIP_L336},
               "text_config": {"model_type": "llama", **_TINYLLAMA, "vocab_size": 32064}},
              auto_class="AutoModelForImageTextToText", backend_gaps=_LLAVA_GAPS),
    # the large tier: real sizes for GPU runners
    ModelSpec("llama-7b", "text_generation", "LlamaConfig", "text", _LLAMA_7B,
              auto_class="AutoModelForCausalLM", tier="large"),
    # Qwen2-7B: GQA (28 query, 4 KV heads), untied head: 7.62B.
    ModelSpec("qwen2-7b", "text_generation", "Qwen2Config", "text",
              {"hidden_size": 3584, "intermediate_size": 18944, "num_hidden_layers": 28, "num_attention_heads": 28,
               "num_key_value_heads": 4, "vocab_size": 152064, "max_position_embeddings": 32768,
               "tie_word_embeddings": False},
              auto_class="AutoModelForCausalLM", tier="large"),
    # llava-hf/llava-1.5-7b-hf: CLIP ViT-L/14-336 + Vicuna-7B (LLaMA-7B dims), 7.06B.
    ModelSpec("llava-7b", "multimodal", "LlavaConfig", "image_text_tokens",
              {**_LLAVA, "vision_config": {"model_type": "clip_vision_model", **_CLIP_L336},
               "text_config": {"model_type": "llama", **_LLAMA_7B, "vocab_size": 32064}},
              auto_class="AutoModelForImageTextToText", tier="large", backend_gaps=_LLAVA_GAPS),
    # the quick tier: same architectures, two layers, hidden 64
    ModelSpec("bert-tiny", "embedding", "BertConfig", "text", _TINY_TEXT, tier="quick", sequence_length=32),
    ModelSpec("gpt2-tiny", "text_generation", "GPT2Config", "text",
              {"n_layer": 2, "n_embd": 64, "n_head": 2, "n_positions": 128},
              auto_class="AutoModelForCausalLM", tier="quick", sequence_length=32),
    ModelSpec("t5-tiny", "text_generation", "T5Config", "text2text",
              {"num_layers": 2, "num_decoder_layers": 2, "d_model": 64, "d_kv": 32, "d_ff": 128, "num_heads": 2,
               "vocab_size": 1000}, auto_class="AutoModelForSeq2SeqLM", tier="quick", sequence_length=32),
    ModelSpec("vit-tiny", "vision", "ViTConfig", "image", _TINY_VISION, tier="quick"),
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
               "vision_config": _TINY_VISION, "projection_dim": 32},
              tier="quick", sequence_length=32),
    ModelSpec("clap-tiny", "multimodal", "ClapConfig", "audio_text",
              {"text_config": {**_TINY_TEXT, "max_position_embeddings": 66},
               # two Swin stages: 16 -> 32 channels, spec 64 x 64 from 256 frames of 16 mel bins
               "audio_config": {"spec_size": 64, "num_mel_bins": 16, "patch_embeds_hidden_size": 32,
                                "hidden_size": 64, "depths": [1, 1], "num_attention_heads": [2, 2],
                                "window_size": 4},
               "projection_dim": 32},
              tier="quick", sequence_length=32),
    ModelSpec("detr-tiny", "vision", "DetrConfig", "image",
              {**_DETR, "backbone_config": {"model_type": "resnet", "embedding_size": 16, "hidden_sizes": [16, 32],
                                            "depths": [1, 1], "layer_type": "basic",
                                            "out_features": ["stage1", "stage2"]},
               "d_model": 64, "encoder_layers": 2, "decoder_layers": 2, "encoder_attention_heads": 2,
               "decoder_attention_heads": 2, "encoder_ffn_dim": 128, "decoder_ffn_dim": 128, "num_queries": 10,
               "num_labels": 91, "image_size": 64},
              auto_class="AutoModelForObjectDetection", tier="quick"),
    ModelSpec("xclip-tiny", "multimodal", "XCLIPConfig", "video_text",
              {"text_config": {**_TINY_TEXT, "max_position_embeddings": 77},
               "vision_config": {**_TINY_VISION, "num_frames": 4, "mit_hidden_size": 64, "mit_intermediate_size": 128,
                                 "mit_num_hidden_layers": 1, "mit_num_attention_heads": 2},
               "projection_dim": 64, "prompt_num_attention_heads": 2},
              tier="quick", sequence_length=32),
    ModelSpec("llama-tiny", "text_generation", "LlamaConfig", "text", _TINY_LM,
              auto_class="AutoModelForCausalLM", tier="quick", sequence_length=32),
    ModelSpec("qwen2-tiny", "text_generation", "Qwen2Config", "text", _TINY_LM,
              auto_class="AutoModelForCausalLM", tier="quick", sequence_length=32),
    # 16 image tokens (64 px, patch 16) + 32 text tokens; <image> is id 1000 of 1024
    ModelSpec("llava-tiny", "multimodal", "LlavaConfig", "image_text_tokens",
              {"image_token_index": 1000, "vision_feature_layer": -2, "vision_feature_select_strategy": "default",
               "vision_config": {"model_type": "clip_vision_model", **_TINY_VISION, "projection_dim": 32},
               "text_config": {"model_type": "llama", **_TINY_LM, "vocab_size": 1024}},
              auto_class="AutoModelForImageTextToText", tier="quick", sequence_length=32,
              backend_gaps=_LLAVA_GAPS),
)

#: The predecessor's key model set (model-benchmarking-guide): architecture -> its zoo variants,
#: smallest first. LLaVA-Next is left out: it is LLaVA with image tiling.
KEY_MODELS: dict[str, tuple[str, ...]] = {
    "BERT": ("bert-tiny", "bert-base"),
    "CLAP": ("clap-tiny", "clap-htsat-unfused"),
    "CLIP": ("clip-tiny", "clip-vit-b32"),
    "DETR": ("detr-tiny", "detr-resnet-50"),
    "LLaMA": ("llama-tiny", "tinyllama-1.1b", "llama-7b"),
    "LLaVA": ("llava-tiny", "llava-tinyllama-1.4b", "llava-7b"),
    "Qwen2": ("qwen2-tiny", "qwen2-0.5b", "qwen2-7b"),
    "T5": ("t5-tiny", "t5-small"),
    "ViT": ("vit-tiny", "vit-base"),
    "Wav2Vec2": ("wav2vec2-tiny", "wav2vec2-base"),
    "Whisper": ("whisper-micro", "whisper-tiny"),
    "XCLIP": ("xclip-tiny", "xclip-base-p32"),
}


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
    "clap": ("multimodal", "audio_text", "AutoModel"),
    "xclip": ("multimodal", "video_text", "AutoModel"),
    "llava": ("multimodal", "image_text_tokens", "AutoModelForImageTextToText"),
    "detr": ("vision", "image", "AutoModelForObjectDetection"),
}


def _spec_from_dir(path: Path) -> ModelSpec:
    config_file = path / "config.json"
    try:
        config = json.loads(config_file.read_text(encoding="utf-8"))
    except (OSError, UnicodeDecodeError, json.JSONDecodeError) as exc:
        raise ValueError(f"{config_file}: cannot be read as JSON ({exc})") from None
    model_type = config.get("model_type") if isinstance(config, dict) else None
    if model_type not in _MODEL_TYPES:
        raise ValueError(
            f"{path}/config.json: model_type {model_type!r} has no default family; known: "
            f"{', '.join(sorted(_MODEL_TYPES))}. Describe it in a model-set TOML instead."
        )
    family, modality, auto = _MODEL_TYPES[model_type]
    gaps = _LLAVA_GAPS if model_type == "llava" else {}
    return ModelSpec(path.name, family, str(path.resolve()), modality, auto_class=auto, backend_gaps=gaps)


#: config.json keys that describe the file, not the architecture.
_CONFIG_METADATA = ("model_type", "architectures", "_name_or_path", "transformers_version", "torch_dtype", "dtype",
                    "auto_map", "_commit_hash")


def is_hf_config(data: Any) -> bool:
    """Whether parsed JSON is a Hugging Face ``config.json`` (a ``model_type``, no ``models`` list)."""
    return isinstance(data, Mapping) and "model_type" in data and "models" not in data


def spec_from_config(config: Mapping[str, Any], name: str | None = None, *, where: str = "config") -> ModelSpec:
    """A checked `ModelSpec` from the contents of a Hugging Face ``config.json``.

    The config class comes from its ``model_type`` (e.g. ``bert`` -> ``BertConfig``), the other
    keys become its keyword arguments; family, modality and auto class are those of the model
    type (`_MODEL_TYPES`). `name` defaults to the config's ``_name_or_path`` (last part), else
    ``<model_type>-custom``. Raises ValueError naming `where` and the field.
    """
    if not isinstance(config, Mapping):
        raise ValueError(f"{where}: expected a JSON object (the contents of a config.json), got "
                         f"{type(config).__name__}")
    model_type = config.get("model_type")
    if model_type not in _MODEL_TYPES:
        raise ValueError(f"{where}: model_type {model_type!r} has no default family; known: "
                         f"{', '.join(sorted(_MODEL_TYPES))}. Describe it in a model-set TOML instead.")
    import transformers

    config_class = type(transformers.AutoConfig.for_model(model_type)).__name__
    kwargs = {k: v for k, v in config.items() if k not in _CONFIG_METADATA}
    problem = _size_problem(kwargs, "")
    if problem is not None:
        raise ValueError(f"{where}: {problem}")
    if not name:
        origin = config.get("_name_or_path")
        name = str(origin).rstrip("/").rsplit("/", 1)[-1] if isinstance(origin, str) and origin.strip() else ""
        name = name or f"{model_type}-custom"
    family, modality, auto = _MODEL_TYPES[model_type]
    gaps = _LLAVA_GAPS if model_type == "llava" else {}
    spec = ModelSpec(name, family, config_class, modality, config_kwargs=kwargs, auto_class=auto, backend_gaps=gaps)
    try:
        return check_model_spec(spec)
    except ValueError as exc:
        raise ValueError(f"{where}: {exc}") from None


#: Fields of a model-set entry: the `ModelSpec` fields; the first four are required.
_REQUIRED_FIELDS: tuple[str, ...] = ("name", "family", "config_class", "modality")
_ENTRY_FIELDS: tuple[str, ...] = tuple(f for f in ModelSpec.__dataclass_fields__)
_CHOICES: dict[str, tuple[str, ...]] = {"family": FAMILIES, "modality": MODALITIES, "tier": TIERS}
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


def nonpositive_size(config: Mapping[str, Any], prefix: str = "") -> tuple[str, Any] | None:
    """(dotted field, value) of the first size in `config` (nested configs and lists included)
    that is a number but not a whole number >= 1, or None. Sizes are the keys of `SIZE_KEYS`; None means the
    config class's default."""
    for key, value in config.items():
        name = f"{prefix}{key}"
        if isinstance(value, Mapping):
            found = nonpositive_size(value, f"{name}.")
            if found is not None:
                return found
        elif key in SIZE_KEYS and value is not None:
            values = value if isinstance(value, list | tuple) else [value]
            for v in values:  # a value that is no number is the config class's to refuse
                if isinstance(v, int | float) and not isinstance(v, bool) and (not v >= 1 or v != int(v)):
                    return name, value
    return None


def _size_problem(config: Mapping[str, Any], prefix: str) -> str | None:
    found = nonpositive_size(config, prefix)
    if found is None:
        return None
    return f"field {found[0]!r}: a size must be a whole number >= 1, got {found[1]!r}"


def _entry_spec(entry: Any) -> tuple[ModelSpec | None, str | None, str]:
    """(spec, None, "") for a well-formed entry, else (None, field, problem)."""
    unknown = [key for key in entry if key not in _ENTRY_FIELDS]
    if unknown:
        return None, str(unknown[0]), f"unknown field; accepted: {', '.join(_ENTRY_FIELDS)}"
    for key in _REQUIRED_FIELDS:
        if key not in entry:
            return None, key, "missing (required: " + ", ".join(_REQUIRED_FIELDS) + ")"
    for key in ("family", "config_class", "modality", "auto_class", "tier"):
        if key in entry and (not isinstance(entry[key], str) or not entry[key].strip()):
            return None, key, f"expected a non-empty string, got {entry[key]!r}"
    for key, choices in _CHOICES.items():
        if key in entry and entry[key] not in choices:
            return None, key, f"{entry[key]!r} is not one of {', '.join(choices)}"
    length = entry.get("sequence_length", 1)
    if isinstance(length, bool) or not isinstance(length, int) or length < 1:
        return None, "sequence_length", f"expected a whole number >= 1, got {length!r}"
    for key in ("config_kwargs", "backend_gaps"):
        if key in entry and not isinstance(entry[key], Mapping):
            return None, key, f"expected a table, got {type(entry[key]).__name__} {entry[key]!r}"
    found = nonpositive_size(entry.get("config_kwargs") or {}, "config_kwargs.")
    if found is not None:
        return None, found[0], f"a size must be a whole number >= 1, got {found[1]!r}"
    return ModelSpec(**entry), None, ""


def check_model_spec(spec: ModelSpec) -> ModelSpec:
    """Build `spec`'s config once (kept for its cases) and check what every case would need.

    Cheap: a transformers config object, the auto class's name and the input shape of the
    modality; no model is built. Raises ValueError naming the field: ``config_class``,
    ``config_kwargs.<key>``, ``auto_class`` or ``modality``.
    """
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
    name only for the same architecture, or with ``replace = true``; every size in
    ``config_kwargs`` (`SIZE_KEYS`: layers, heads, widths, positions) must be >= 1.

    Every model is checked here, once (`check_model_spec`: its config is built and kept), so a
    bad set stops a run before any case. Raises ValueError naming the file, the model (or the
    entry) and the field.
    """
    path = Path(path)
    if path.is_dir():
        if not (path / "config.json").exists():
            raise ValueError(f"model directory {path} has no config.json")
        spec = _spec_from_dir(path)
        try:
            return [check_model_spec(spec)]
        except ValueError as exc:
            raise ValueError(f"model directory {path}: {exc}") from None
    if not path.exists():
        raise ValueError(f"model set {path} does not exist (expected a .toml/.json file or a directory)")
    if path.suffix not in (".toml", ".json"):
        raise ValueError(f"model set {path}: unknown suffix {path.suffix!r}; use .toml, .json or a directory")
    try:
        text = path.read_text(encoding="utf-8")
        data = tomllib.loads(text) if path.suffix == ".toml" else json.loads(text)
    except (OSError, UnicodeDecodeError) as exc:
        raise ValueError(f"model set {path}: cannot be read ({exc})") from None
    except (tomllib.TOMLDecodeError, json.JSONDecodeError) as exc:
        raise ValueError(f"model set {path}: not valid {path.suffix[1:].upper()}: {exc}") from None
    if is_hf_config(data):  # a transformers config.json file, named after its folder or itself
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
        spec, field_name, problem = _entry_spec(entry)
        if spec is None:
            raise ValueError(f"{where}: field {field_name!r}: {problem}")
        try:
            specs.append(check_model_spec(spec))
        except ValueError as exc:
            raise ValueError(f"{where}: {exc}") from None
        if not take_over:
            _check_zoo_name(spec, where)
    return specs


#: The built-in zoo's names: a model set may reuse one only for the same architecture.
ZOO_NAMES: frozenset[str] = frozenset(s.name for s in ZOO_SPECS)


def _architecture_dict(spec: ModelSpec) -> dict[str, Any]:
    """The built config's values that say what the model is (no metadata)."""
    data = spec._config().to_dict()
    return {k: v for k, v in data.items() if k not in _CONFIG_METADATA and k not in ("return_dict",)}


def _check_zoo_name(spec: ModelSpec, where: str) -> None:
    """Refuse an entry that takes a built-in zoo name for another architecture (records would
    carry the zoo model's name for a different model)."""
    if spec.name not in ZOO_NAMES:
        return
    zoo = next(s for s in ZOO_SPECS if s.name == spec.name)
    zoo = _clean(zoo)
    if zoo.config_class == spec.config_class and _architecture_dict(zoo) == _architecture_dict(spec):
        return
    raise ValueError(f"{where}: field 'name': {spec.name!r} is a built-in zoo model ({zoo.config_class}) and this "
                     f"entry describes another architecture ({spec.config_class}({_kwargs_text(spec.config_kwargs)})); "
                     "give it its own name, or set replace = true to take the zoo name over")


def flops_per_item(spec: ModelSpec) -> float:
    """Forward FLOPs for one item (batch 1)."""
    return spec.architecture.flops_per_item


def achieved_tflops(flops_item: float | None, batch_size: int, latency_s: float) -> float | None:
    """TFLOP/s reached by one forward over `batch_size` items taking `latency_s`."""
    if not flops_item or latency_s <= 0 or not math.isfinite(latency_s):
        return None
    return flops_item * batch_size / latency_s / 1e12


__all__ = [
    "ACTIVATION_BYTES",
    "FAMILIES",
    "KEY_MODELS",
    "MODALITIES",
    "MODELS",
    "TIERS",
    "SIZE_KEYS",
    "WEIGHT_BYTES",
    "ZOO_NAMES",
    "is_hf_config",
    "spec_from_config",
    "ModelArchitecture",
    "ModelSpec",
    "achieved_tflops",
    "check_model_spec",
    "dense_flops_estimate",
    "get_model",
    "load_model_set",
    "nonpositive_size",
    "register_model",
]
