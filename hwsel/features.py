"""Features from architecture, not names: what the predictors see of a benchmark case.

A case is described by its model's architecture numbers (`ModelInfo`: family, model type,
parameter count, FLOPs per item, layers, hidden size, input shape), the workload (batch size,
precision, mode, threads), where it runs (backend, hardware, the device's `DeviceSpec`: peak
FLOP/s and memory bandwidth) and a roofline estimate built from those. The model's name is used
only to look its architecture up; it is never a feature, so a model the predictors have not seen
gets a prediction from what it is made of.

`feature_frame` turns rows with `BenchmarkRecord` fields into `FEATURE_COLUMNS`; `query_frame`
builds the same row for a configuration that was never measured. Both go through one function,
so training and prediction cannot drift apart.

Length: over 500 lines; about 40 are the zoo's architecture table, the rest is the one feature
pipeline (model lookup, roofline, feature frame) that training and prediction share.
"""

from __future__ import annotations

import dataclasses
import difflib
import functools
import hashlib
import json
import math
import os
from collections.abc import Iterable, Mapping
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any

import numpy as np
import pandas as pd

from hwsel.specs import DeviceSpec, local_cpu_spec, spec_for
from pytest_hwbench import facts
from pytest_hwbench.models import ModelArchitecture
from pytest_hwbench.vocabulary import CPU_KINDS, bytes_per_element


@dataclass(frozen=True)
class ModelInfo:
    """hwsel's one description of a model: its name and family, its architecture numbers (no
    weights) and the size of one item.

    The architecture fields are `pytest_hwbench.models.ModelArchitecture`'s, by the same names
    (`from_architecture` copies every one of them that hwsel keeps; `activation_bytes_per_item`
    it does not use); the input shape fields say what one item is: tokens (`sequence_length`),
    an image side (`image_size`) or audio samples. `flops_per_item` is forward FLOPs for one
    item (batch 1). The field order is the constructor's, positional arguments included.
    """

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


#: `ModelInfo` fields that are `ModelArchitecture`'s, and those that say what one item is (the rest
#: of them but the name and family): derived from the two classes, never listed by hand.
_ARCHITECTURE_FIELDS: tuple[str, ...] = tuple(
    f.name for f in dataclasses.fields(ModelInfo) if f.name in {a.name for a in dataclasses.fields(ModelArchitecture)})
_SHAPE_FIELDS: tuple[str, ...] = tuple(
    f.name for f in dataclasses.fields(ModelInfo) if f.name not in (*_ARCHITECTURE_FIELDS, "name", "family"))


@dataclass(frozen=True)
class RooflineEstimate:
    """A roofline estimate of one forward pass: max(compute time, memory time).

    Attributes:
        latency_ms: max(compute_ms, memory_ms).
        throughput: items per second at that latency.
        memory_mb: weights plus peak activations, MiB (the model's own footprint; a process adds
            its runtime on top).
        compute_ms: FLOPs / peak FLOP/s at the precision.
        memory_ms: bytes moved (weights once, activations per item) / memory bandwidth.
    """

    latency_ms: float
    throughput: float
    memory_mb: float
    compute_ms: float
    memory_ms: float


# --- model lookup ---------------------------------------------------------------------------

#: Hub-style names -> zoo names. Keys are lower case, without the organisation prefix.
ALIASES: dict[str, str] = {
    "bert-base-uncased": "bert-base",
    "bert-base-cased": "bert-base",
    "bert-base-multilingual-cased": "bert-base",
    "gpt2-small": "gpt2",
    "openai-community/gpt2": "gpt2",
    "t5-small": "t5-small",
    "google-t5/t5-small": "t5-small",
    "vit-base-patch16-224": "vit-base",
    "vit-base-patch16-224-in21k": "vit-base",
    "resnet-50": "resnet-50",
    "resnet50": "resnet-50",
    "whisper-tiny": "whisper-tiny",
    "whisper-tiny.en": "whisper-tiny",
    "wav2vec2-base": "wav2vec2-base",
    "wav2vec2-base-960h": "wav2vec2-base",
    "clip-vit-base-patch32": "clip-vit-b32",
    "clip-vit-b-32": "clip-vit-b32",
    # aliases of zoo entries that may not exist in every version of the zoo: skipped when absent
    "tinyllama-1.1b-chat-v1.0": "tinyllama-1.1b",
    "tinyllama_v1.1": "tinyllama-1.1b",
    "qwen2-0.5b-instruct": "qwen2-0.5b",
    "llama-2-7b-hf": "llama-7b",
    "llama-2-7b": "llama-7b",
    "qwen2-7b-instruct": "qwen2-7b",
    "llava-1.5-7b-hf": "llava-7b",
    "detr-resnet-50": "detr-resnet-50",
    "xclip-base-patch32": "xclip-base-p32",
}

#: Architecture numbers of the built-in zoo, so that resolving a zoo model needs neither torch nor
#: transformers (a meta-device build takes seconds). Each entry carries the fingerprint of the spec
#: it was computed from; a spec that changed is measured again. Regenerate with
#: ``python -m hwsel.features``.
_ZOO_TABLE: dict[str, dict[str, Any]] = {
    "bert-base": {"fingerprint": "4c7dd4c5256d", "name": "bert-base", "family": "embedding", "model_type": "bert", "param_count": 109482240, "flops_per_item": 22348431360.0, "num_layers": 12, "hidden_size": 768, "sequence_length": 128, "image_size": None, "audio_samples": None, "launches_per_forward": 239, "num_attention_heads": 12, "num_key_value_heads": 12},
    "bert-tiny": {"fingerprint": "7705e7444062", "name": "bert-tiny", "family": "embedding", "model_type": "bert", "param_count": 168128, "flops_per_item": 4726784.0, "num_layers": 2, "hidden_size": 64, "sequence_length": 32, "image_size": None, "audio_samples": None, "launches_per_forward": 49, "num_attention_heads": 2, "num_key_value_heads": 2},
    "clap-htsat-unfused": {"fingerprint": "c1b31399ebe0", "name": "clap-htsat-unfused", "family": "multimodal", "model_type": "clap", "param_count": 153492890, "flops_per_item": 34166409216.0, "num_layers": 16, "hidden_size": 768, "sequence_length": 128, "image_size": None, "audio_samples": 491520, "launches_per_forward": 736, "num_attention_heads": 12, "num_key_value_heads": 12},
    "clap-tiny": {"fingerprint": "f828ef880975", "name": "clap-tiny", "family": "multimodal", "model_type": "clap", "param_count": 217894, "flops_per_item": 19419264.0, "num_layers": 4, "hidden_size": 64, "sequence_length": 32, "image_size": None, "audio_samples": 122880, "launches_per_forward": 144, "num_attention_heads": 2, "num_key_value_heads": 2},
    "clip-tiny": {"fingerprint": "63047cc1eb21", "name": "clip-tiny", "family": "multimodal", "model_type": "clip", "param_count": 3355713, "flops_per_item": 8675904.0, "num_layers": 2, "hidden_size": 64, "sequence_length": 32, "image_size": 64, "audio_samples": None, "launches_per_forward": 128, "num_attention_heads": 2, "num_key_value_heads": 2},
    "clip-vit-b32": {"fingerprint": "dcc700a172e4", "name": "clip-vit-b32", "family": "multimodal", "model_type": "clip", "param_count": 151277313, "flops_per_item": 14777164800.0, "num_layers": 12, "hidden_size": 512, "sequence_length": 77, "image_size": 224, "audio_samples": None, "launches_per_forward": 608, "num_attention_heads": 8, "num_key_value_heads": 8},
    "detr-resnet-50": {"fingerprint": "4d22e39d012f", "name": "detr-resnet-50", "family": "vision", "model_type": "detr", "param_count": 41524768, "flops_per_item": 120339200000.0, "num_layers": 6, "hidden_size": 256, "sequence_length": None, "image_size": 800, "audio_samples": None, "launches_per_forward": 910, "num_attention_heads": 8, "num_key_value_heads": 8},
    "detr-tiny": {"fingerprint": "ed542167a987", "name": "detr-tiny", "family": "vision", "model_type": "detr", "param_count": 206160, "flops_per_item": 24160256.0, "num_layers": 2, "hidden_size": 64, "sequence_length": None, "image_size": 64, "audio_samples": None, "launches_per_forward": 232, "num_attention_heads": 2, "num_key_value_heads": 2},
    "gpt2": {"fingerprint": "80d6095b2b27", "name": "gpt2", "family": "text_generation", "model_type": "gpt2", "param_count": 124439808, "flops_per_item": 32228179968.0, "num_layers": 12, "hidden_size": 768, "sequence_length": 128, "image_size": None, "audio_samples": None, "launches_per_forward": 395, "num_attention_heads": 12, "num_key_value_heads": 12},
    "gpt2-tiny": {"fingerprint": "82272d363645", "name": "gpt2-tiny", "family": "text_generation", "model_type": "gpt2", "param_count": 3324736, "flops_per_item": 212668416.0, "num_layers": 2, "hidden_size": 64, "sequence_length": 32, "image_size": None, "audio_samples": None, "launches_per_forward": 75, "num_attention_heads": 2, "num_key_value_heads": 2},
    "llama-7b": {"fingerprint": "ade945a97f13", "name": "llama-7b", "family": "text_generation", "model_type": "llama", "param_count": 6738415616, "flops_per_item": 1700001742848.0, "num_layers": 32, "hidden_size": 4096, "sequence_length": 128, "image_size": None, "audio_samples": None, "launches_per_forward": 1813, "num_attention_heads": 32, "num_key_value_heads": 32},
    "llama-tiny": {"fingerprint": "e2ce63692391", "name": "llama-tiny", "family": "text_generation", "model_type": "llama", "param_count": 202048, "flops_per_item": 9338880.0, "num_layers": 2, "hidden_size": 64, "sequence_length": 32, "image_size": None, "audio_samples": None, "launches_per_forward": 137, "num_attention_heads": 4, "num_key_value_heads": 2},
    "llava-7b": {"fingerprint": "31ef33588850", "name": "llava-7b", "family": "multimodal", "model_type": "llava", "param_count": 7063427072, "flops_per_item": 9969056972800.0, "num_layers": 32, "hidden_size": 4096, "sequence_length": 704, "image_size": 336, "audio_samples": None, "launches_per_forward": 2333, "num_attention_heads": 32, "num_key_value_heads": 32},
    "llava-tiny": {"fingerprint": "a704dcd2aa7a", "name": "llava-tiny", "family": "multimodal", "model_type": "llava", "param_count": 330944, "flops_per_item": 18760192.0, "num_layers": 2, "hidden_size": 64, "sequence_length": 48, "image_size": 64, "audio_samples": None, "launches_per_forward": 195, "num_attention_heads": 4, "num_key_value_heads": 2},
    "llava-tinyllama-1.4b": {"fingerprint": "7d098fff784d", "name": "llava-tinyllama-1.4b", "family": "multimodal", "model_type": "llava", "param_count": 1410113536, "flops_per_item": 1935136096256.0, "num_layers": 22, "hidden_size": 2048, "sequence_length": 704, "image_size": 336, "audio_samples": None, "launches_per_forward": 1817, "num_attention_heads": 32, "num_key_value_heads": 4},
    "qwen2-0.5b": {"fingerprint": "919e99fb6c62", "name": "qwen2-0.5b", "family": "text_generation", "model_type": "qwen2", "param_count": 494032768, "flops_per_item": 127863357440.0, "num_layers": 24, "hidden_size": 896, "sequence_length": 128, "image_size": None, "audio_samples": None, "launches_per_forward": 1341, "num_attention_heads": 14, "num_key_value_heads": 2},
    "qwen2-7b": {"fingerprint": "5df5f48a2d59", "name": "qwen2-7b", "family": "text_generation", "model_type": "qwen2", "param_count": 7615616512, "flops_per_item": 1816569839616.0, "num_layers": 28, "hidden_size": 3584, "sequence_length": 128, "image_size": None, "audio_samples": None, "launches_per_forward": 1561, "num_attention_heads": 28, "num_key_value_heads": 4},
    "qwen2-tiny": {"fingerprint": "a35ceb90b5a3", "name": "qwen2-tiny", "family": "text_generation", "model_type": "qwen2", "param_count": 202304, "flops_per_item": 9338880.0, "num_layers": 2, "hidden_size": 64, "sequence_length": 32, "image_size": None, "audio_samples": None, "launches_per_forward": 131, "num_attention_heads": 4, "num_key_value_heads": 2},
    "resnet-50": {"fingerprint": "2078c52c42df", "name": "resnet-50", "family": "vision", "model_type": "resnet", "param_count": 23508032, "flops_per_item": 8174272512.0, "num_layers": 16, "hidden_size": 2048, "sequence_length": None, "image_size": 224, "audio_samples": None, "launches_per_forward": 226, "num_attention_heads": None, "num_key_value_heads": None},
    "resnet-tiny": {"fingerprint": "46718aa73147", "name": "resnet-tiny", "family": "vision", "model_type": "resnet", "param_count": 21584, "flops_per_item": 9011200.0, "num_layers": 2, "hidden_size": 32, "sequence_length": None, "image_size": 64, "audio_samples": None, "launches_per_forward": 27, "num_attention_heads": None, "num_key_value_heads": None},
    "t5-small": {"fingerprint": "9d90783eb018", "name": "t5-small", "family": "text_generation", "model_type": "t5", "param_count": 60506624, "flops_per_item": 16089350144.0, "num_layers": 6, "hidden_size": 512, "sequence_length": 128, "image_size": None, "audio_samples": None, "launches_per_forward": 706, "num_attention_heads": 8, "num_key_value_heads": 8},
    "t5-tiny": {"fingerprint": "6a32f55f3b92", "name": "t5-tiny", "family": "text_generation", "model_type": "t5", "param_count": 228736, "flops_per_item": 16154624.0, "num_layers": 2, "hidden_size": 64, "sequence_length": 32, "image_size": None, "audio_samples": None, "launches_per_forward": 278, "num_attention_heads": 2, "num_key_value_heads": 2},
    "tinyllama-1.1b": {"fingerprint": "8b2667c07bf1", "name": "tinyllama-1.1b", "family": "text_generation", "model_type": "llama", "param_count": 1100048384, "flops_per_item": 267764367360.0, "num_layers": 22, "hidden_size": 2048, "sequence_length": 128, "image_size": None, "audio_samples": None, "launches_per_forward": 1297, "num_attention_heads": 32, "num_key_value_heads": 4},
    "vit-base": {"fingerprint": "05d70d44bc07", "name": "vit-base", "family": "vision", "model_type": "vit", "param_count": 86389248, "flops_per_item": 35127300096.0, "num_layers": 12, "hidden_size": 768, "sequence_length": None, "image_size": 224, "audio_samples": None, "launches_per_forward": 234, "num_attention_heads": 12, "num_key_value_heads": 12},
    "vit-tiny": {"fingerprint": "af523b1621a6", "name": "vit-tiny", "family": "vision", "model_type": "vit", "param_count": 121600, "flops_per_item": 3957248.0, "num_layers": 2, "hidden_size": 64, "sequence_length": None, "image_size": 64, "audio_samples": None, "launches_per_forward": 44, "num_attention_heads": 2, "num_key_value_heads": 2},
    "wav2vec2-base": {"fingerprint": "b61a78551625", "name": "wav2vec2-base", "family": "audio", "model_type": "wav2vec2", "param_count": 94371712, "flops_per_item": 13822748672.0, "num_layers": 12, "hidden_size": 768, "sequence_length": None, "image_size": None, "audio_samples": 16000, "launches_per_forward": 250, "num_attention_heads": 12, "num_key_value_heads": 12},
    "wav2vec2-tiny": {"fingerprint": "b42ab3a9c2de", "name": "wav2vec2-tiny", "family": "audio", "model_type": "wav2vec2", "param_count": 118928, "flops_per_item": 78243200.0, "num_layers": 2, "hidden_size": 64, "sequence_length": None, "image_size": None, "audio_samples": 16000, "launches_per_forward": 52, "num_attention_heads": 2, "num_key_value_heads": 2},
    "whisper-micro": {"fingerprint": "16cba2ebd146", "name": "whisper-micro", "family": "audio", "model_type": "whisper", "param_count": 3524928, "flops_per_item": 33677312.0, "num_layers": 2, "hidden_size": 64, "sequence_length": 16, "image_size": None, "audio_samples": 32000, "launches_per_forward": 169, "num_attention_heads": 2, "num_key_value_heads": 2},
    "whisper-tiny": {"fingerprint": "dd03c5eec920", "name": "whisper-tiny", "family": "audio", "model_type": "whisper", "param_count": 37760640, "flops_per_item": 41306357760.0, "num_layers": 4, "hidden_size": 384, "sequence_length": 32, "image_size": None, "audio_samples": 480000, "launches_per_forward": 323, "num_attention_heads": 6, "num_key_value_heads": 6},
    "xclip-base-p32": {"fingerprint": "773d2eb12dd9", "name": "xclip-base-p32", "family": "multimodal", "model_type": "xclip", "param_count": 196585729, "flops_per_item": 78024078336.0, "num_layers": 12, "hidden_size": 512, "sequence_length": 77, "image_size": 224, "audio_samples": None, "launches_per_forward": 943, "num_attention_heads": 8, "num_key_value_heads": 8},
    "xclip-tiny": {"fingerprint": "c7bd8db0eba0", "name": "xclip-tiny", "family": "multimodal", "model_type": "xclip", "param_count": 441281, "flops_per_item": 22712448.0, "num_layers": 2, "hidden_size": 64, "sequence_length": 32, "image_size": 64, "audio_samples": None, "launches_per_forward": 243, "num_attention_heads": 2, "num_key_value_heads": 2},
}


def _fingerprint(spec: Any) -> str:
    data = {
        "family": spec.family,
        "config_class": spec.config_class,
        "modality": spec.modality,
        "config_kwargs": spec.config_kwargs,
        "auto_class": spec.auto_class,
        "sequence_length": spec.sequence_length,
    }
    text = json.dumps(data, sort_keys=True, default=str)
    return hashlib.sha1(text.encode()).hexdigest()[:12]


def _measure_spec(spec: Any, name: str | None = None) -> ModelInfo:
    """ModelInfo of a zoo `ModelSpec` from a meta-device build (imports torch and transformers)."""
    return ModelInfo.from_architecture(spec.architecture, name=name or spec.name, family=spec.family,
                                       shape=spec.input_shape())


#: Config keys holding the depth of a model's stack of identical layers.
_DEPTH_KEYS: tuple[str, ...] = ("num_hidden_layers", "n_layer", "num_layers")
#: A stack deeper than this is built at depths 2 and 3 on the meta device and extrapolated:
#: each identical layer adds the same parameters, FLOPs and launches, so the line through the
#: two is exact (checked against whole builds of BERT, GPT-2, LLaMA, Qwen2, T5 and ViT configs in
#: tests/test_hwsel_trust.py). A whole build costs ~8.6 ms per layer (43 s for a
#: 5,000-layer config).
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


def _read_disk(key: str, name: str) -> ModelInfo | None:
    try:
        data = json.loads(cache_path().read_text(encoding="utf-8"))
        entry = data[key]
        return ModelInfo(**{**entry, "name": name})
    except (OSError, ValueError, KeyError, TypeError):  # no file, no entry, another layout
        return None


def _write_disk(key: str, info: ModelInfo) -> None:
    """Best effort: an unwritable cache only costs a rebuild next time."""
    path = cache_path()
    try:
        try:
            data = json.loads(path.read_text(encoding="utf-8"))
        except (OSError, ValueError):
            data = {}
        data = data if isinstance(data, dict) else {}
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
    """`ModelInfo` of a `pytest_hwbench.models.ModelSpec`.

    Looked up by the spec's fingerprint in the built-in zoo table, then this process's memory,
    then the disk cache (`cache_path`); only a spec seen nowhere is built on the meta device
    (seconds; imports torch and transformers), a deep stack of identical layers at two shallow
    depths (`EXTRAPOLATE_ABOVE`).
    """
    key = _fingerprint(spec)
    entry = _ZOO_TABLE.get(spec.name)
    if entry is not None and entry.get("fingerprint") == key:
        fields = {k: v for k, v in entry.items() if k != "fingerprint"}
        return ModelInfo(**{**fields, "name": name or spec.name})
    if key not in _measured:
        disk_key = _disk_key(key)
        info = _read_disk(disk_key, spec.name)
        if info is None:
            info = _measure(spec)
            _write_disk(disk_key, info)
        if len(_measured) >= _MEASURED_MAX:
            _measured.pop(next(iter(_measured)))
        _measured[key] = info
    found = _measured[key]
    want = name or spec.name
    return found if want == found.name else ModelInfo(**{**found.to_dict(), "name": want})


def _normal(name: str) -> str:
    return name.strip().lower()


def _candidates() -> list[str]:
    from pytest_hwbench.models import MODELS

    return sorted(set(MODELS) | set(ALIASES))


def _unknown(name: str, extra: str = "") -> KeyError:
    names = _candidates()
    bare = _normal(name).rsplit("/", 1)[-1]
    close = difflib.get_close_matches(bare, names, n=5, cutoff=0.5) or difflib.get_close_matches(
        _normal(name), names, n=5, cutoff=0.4
    )
    hint = f" Close matches: {', '.join(close)}." if close else ""
    return KeyError(
        f"unknown model {name!r}.{hint}{extra} For a model outside the zoo pass its architecture: "
        "--config PATH (CLI) or config=PATH (Python), PATH being a directory with a config.json "
        "(transformers) or a model-set TOML/JSON file (see `hwbench models` and README)."
    )


def _from_config(name: str | None, config: str | os.PathLike[str] | Mapping[str, Any]) -> ModelInfo:
    from pytest_hwbench.models import load_model_set, spec_from_config

    if isinstance(config, Mapping):
        try:
            return info_from_spec(spec_from_config(config, name))
        except ValueError as exc:
            raise KeyError(f"model {name or config.get('model_type')!r}: bad config: {exc}") from None
    path = Path(config)
    try:
        specs = load_model_set(path)
    except (ValueError, OSError) as exc:
        raise KeyError(f"model {name!r}: cannot read config {str(path)!r}: {exc}") from None
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


@functools.lru_cache(maxsize=1024)
def _resolve_cached(name: str) -> ModelInfo:
    from pytest_hwbench.models import MODELS

    if name in MODELS:
        return info_from_spec(MODELS[name])
    text = _normal(name)
    for key in (text, text.rsplit("/", 1)[-1]):
        target = key if key in MODELS else ALIASES.get(key)
        if target in MODELS:
            return info_from_spec(MODELS[target])
    raise _unknown(name)


def resolve_model(
    name: str | None, config: str | os.PathLike[str] | Mapping[str, Any] | None = None
) -> ModelInfo:
    """Architecture numbers for `name`.

    `name` is a zoo name (`hwbench models`), a common hub-style name (``bert-base-uncased``,
    ``google/vit-base-patch16-224``, ``openai/whisper-tiny``, ...), or any name when `config`
    is a Hugging Face ``config.json`` (a file, a directory holding one, or its parsed contents
    as a mapping) or a model-set TOML/JSON file. With a config, `name` may be None: it then
    comes from the config (``_name_or_path``, the folder or file name, else ``<type>-custom``).

    Raises:
        KeyError: unknown name; the message lists close matches and how to pass a config.
    """
    if config is not None:
        return _from_config(name, config)
    if not name:
        raise KeyError("no model given: pass a zoo name (see `hwbench models`) or config=PATH to a "
                       "config.json, a directory holding one, or a model-set TOML/JSON (CLI: --config PATH)")
    try:
        return _resolve_cached(name)
    except KeyError as exc:
        raise _unknown(name) from exc.__cause__


# --- roofline ---------------------------------------------------------------------------------



def _roofline_arrays(
    params: np.ndarray,
    flops_item: np.ndarray,
    hidden: np.ndarray,
    layers: np.ndarray,
    batch: np.ndarray,
    bytes_el: np.ndarray,
    tflops: np.ndarray,
    bandwidth_gbs: np.ndarray,
) -> dict[str, np.ndarray]:
    """Vectorised roofline; every argument is a float array of the same length.

    Activation traffic per item is estimated from FLOPs: a transformer layer does about 24 h^2
    FLOPs per token and reads/writes about 10 h activations per token, so activation elements
    ~ 0.4 * FLOPs / h. The peak activation footprint is about four layers' worth of that.
    """
    h = np.where(np.isfinite(hidden) & (hidden > 0), hidden, 256.0)
    n_layers = np.where(np.isfinite(layers) & (layers > 0), layers, 12.0)
    act_bytes_item = 0.4 * flops_item / h * bytes_el
    weight_bytes = params * bytes_el
    compute_ms = flops_item * batch / (tflops * 1e12) * 1e3
    memory_ms = (weight_bytes + batch * act_bytes_item) / (bandwidth_gbs * 1e9) * 1e3
    latency_ms = np.maximum(compute_ms, memory_ms)
    peak_act = batch * act_bytes_item * np.minimum(4.0, n_layers) / n_layers
    memory_mb = (weight_bytes + peak_act) / 2**20
    return {
        "compute_ms": compute_ms,
        "memory_ms": memory_ms,
        "latency_ms": latency_ms,
        "throughput": batch / latency_ms * 1e3,
        "memory_mb": memory_mb,
        "weight_mb": weight_bytes / 2**20,
    }


def roofline(
    model: ModelInfo, *, hardware: str, precision: str, batch_size: int, device_name: str | None = None
) -> RooflineEstimate:
    """Roofline estimate of one forward over `batch_size` items on a device (see `RooflineEstimate`)."""
    if batch_size < 1:
        raise ValueError(f"batch_size must be >= 1, got {batch_size}")
    spec = spec_for(hardware, device_name)
    out = _roofline_arrays(
        np.array([float(model.param_count)]),
        np.array([float(model.flops_per_item)]),
        np.array([float(model.hidden_size or np.nan)]),
        np.array([float(model.num_layers or np.nan)]),
        np.array([float(batch_size)]),
        np.array([float(bytes_per_element(precision))]),
        np.array([spec.tflops(precision)]),
        np.array([spec.memory_bandwidth_gbs]),
    )
    return RooflineEstimate(
        latency_ms=float(out["latency_ms"][0]),
        throughput=float(out["throughput"][0]),
        memory_mb=float(out["memory_mb"][0]),
        compute_ms=float(out["compute_ms"][0]),
        memory_ms=float(out["memory_ms"][0]),
    )


# --- features ---------------------------------------------------------------------------------

#: Host time an eager framework spends per dispatched operator (ms): the launch floor of a
#: forward is about launches x this. A starting point only; the predictors learn the rest per
#: hardware and backend from the records.
#: Eager PyTorch on the hardware: about 20 us per operator with Hugging Face models (H100
#: evidence: bert-base, 239 operators, 7.2 ms at batch 1 in fp16; this CPU: 17 us).
#: Web (onnxruntime-web): wasm dispatches like a native CPU runtime; a WebGPU dispatch goes through
#: the browser's GPU process (about 0.1 ms each; 70 ms for bert-tiny on SwiftShader here).
#: Each target row's ``launch_cost_ms`` in `pytest_hwbench.facts`, read at each use.
LAUNCH_COST_MS: Mapping[str, float] = facts.NameMap(lambda: {r.name: r.launch_cost_ms for r in facts.target_rows()})
#: The share of that cost a runtime keeps: graph runtimes and compilers fuse and batch launches
#: (CUDA graphs replay a forward as one launch). Unknown backends count as eager. Each backend
#: row's ``launch_share`` in `pytest_hwbench.facts`, read at each use.
LAUNCH_SHARE: Mapping[str, float] = facts.NameMap(lambda: {b.name: b.launch_share for b in facts.backend_rows()})

CATEGORICAL_FEATURES: tuple[str, ...] = (
    "family",
    "model_type",
    "backend",
    "hardware",
    "precision",
    "mode",
    "device",
    "device_kind",
)

NUMERIC_FEATURES: tuple[str, ...] = (
    "log_param_count",
    "log_flops_per_item",
    "log_flops_per_forward",
    "num_layers",
    "hidden_size",
    "log_sequence_length",
    "image_size",
    "log_audio_samples",
    "batch_size",
    "log_batch_size",
    "threads",
    "bytes_per_element",
    "log_peak_tflops",
    "log_memory_bandwidth_gbs",
    "device_memory_gb",
    "spec_known",
    "log_weight_mb",
    "log_roofline_compute_ms",
    "log_roofline_memory_ms",
    "log_roofline_ms",
    "log_roofline_memory_mb",
    "log_launches",
    "log_launch_floor_ms",
    "log_flops_per_launch",
    "log_regime_ms",
    "num_attention_heads",
    "kv_group",
)

#: What the predictors take, in this order.
FEATURE_COLUMNS: tuple[str, ...] = CATEGORICAL_FEATURES + NUMERIC_FEATURES

#: Record fields `feature_frame` reads (architecture fields are looked up by model name if absent).
INPUT_FIELDS: tuple[str, ...] = (
    "model",
    "family",
    "model_type",
    "param_count",
    "flops_per_forward",
    "batch_size",
    "sequence_length",
    "image_size",
    "audio_samples",
    "launches_per_forward",
    "num_attention_heads",
    "num_key_value_heads",
    "precision",
    "backend",
    "hardware",
    "device_name",
    "mode",
    "threads",
)


def _default_threads(hardware: str) -> float:
    """Threads a CPU run uses when the row does not say: this machine's usable cores."""
    if hardware in CPU_KINDS:
        try:
            return float(len(os.sched_getaffinity(0)))
        except AttributeError:
            return float(os.cpu_count() or 1)
    return float(os.cpu_count() or 1)


def _lookup_arch(names: Iterable[str]) -> dict[str, ModelInfo | None]:
    out: dict[str, ModelInfo | None] = {}
    for name in names:
        try:
            out[name] = resolve_model(str(name))
        except KeyError:
            out[name] = None
    return out


def _log(values: np.ndarray) -> np.ndarray:
    with np.errstate(divide="ignore", invalid="ignore"):
        out = np.log(values)
    return np.where(np.isfinite(out), out, np.nan)


def _missing(value: Any) -> bool:
    if value is None or value is pd.NA or value is pd.NaT:
        return True
    if isinstance(value, float):
        return math.isnan(value)
    return isinstance(value, str) and value == ""


def _values(rows: pd.DataFrame, name: str) -> list[Any]:
    """A column as a plain list (None where absent), the cheap way for row-wise work."""
    if name not in rows.columns:
        return [None] * len(rows)
    return rows[name].tolist()


def _floats(values: Iterable[Any]) -> np.ndarray:
    return np.array([np.nan if _missing(v) else float(v) for v in values], dtype=float)


def feature_frame(rows: pd.DataFrame) -> pd.DataFrame:
    """`FEATURE_COLUMNS` for rows holding record fields (see `INPUT_FIELDS`).

    Missing architecture fields (`num_layers`, `hidden_size`, and any of `INPUT_FIELDS` that is
    null) are filled from the model's `ModelInfo` when its name resolves; `flops_per_forward` is
    per forward (FLOPs per item x batch), as in records. Rows keep their index. Row-wise work
    runs on plain lists (about 1 ms for ten rows, 50 ms for 10,000).
    """
    if len(rows) == 0:
        return pd.DataFrame({c: pd.Series(dtype=object if c in CATEGORICAL_FEATURES else float)
                             for c in FEATURE_COLUMNS})
    names = ["" if _missing(n) else str(n) for n in _values(rows, "model")]
    arch = _lookup_arch(set(names))
    archs = [arch[n] for n in names]

    def from_arch(field: str) -> list[Any]:
        return [getattr(a, field) if a is not None else None for a in archs]

    def filled(field: str) -> list[Any]:
        return [f if _missing(o) else o for o, f in zip(_values(rows, field), from_arch(field), strict=True)]

    def text(values: Iterable[Any], default: str, lower: bool = False) -> np.ndarray:
        out = [default if _missing(v) else str(v) for v in values]
        return np.array([v.lower() for v in out] if lower else out, dtype=object)

    batch = _floats(_values(rows, "batch_size"))
    batch = np.where(np.isfinite(batch) & (batch >= 1), batch, 1.0)
    params = _floats(filled("param_count"))
    # FLOPs come from the architecture lookup when the name resolves, the record otherwise: the
    # count a record carries depends on the process that made it (bench sessions logged 10.8 M
    # FLOPs per item for bert-tiny where a plain process counts 4.7 M), and a query must see the
    # same number the training rows saw.
    flops_forward = _floats(_values(rows, "flops_per_forward"))
    arch_flops = _floats(from_arch("flops_per_item"))
    flops_item = np.where(np.isfinite(arch_flops) & (arch_flops > 0), arch_flops, flops_forward / batch)
    layers = _floats(filled("num_layers"))
    hidden = _floats(filled("hidden_size"))
    launches = _floats(filled("launches_per_forward"))
    heads = _floats(filled("num_attention_heads"))
    kv_heads = _floats(filled("num_key_value_heads"))
    seq = _floats(filled("sequence_length"))
    image = _floats(filled("image_size"))
    audio = _floats(filled("audio_samples"))

    hardware = text(_values(rows, "hardware"), "cpu", lower=True)
    device_name = text(_values(rows, "device_name"), "")
    precision = text(_values(rows, "precision"), "fp32", lower=True)
    pairs = list(zip(hardware, device_name, strict=True))
    specs: dict[tuple[str, str], DeviceSpec] = {p: spec_for(p[0], p[1] or None) for p in set(pairs)}
    row_specs = [specs[p] for p in pairs]
    tflops = np.array([sp.tflops(pr) for sp, pr in zip(row_specs, precision, strict=True)], dtype=float)
    bandwidth = np.array([sp.memory_bandwidth_gbs for sp in row_specs], dtype=float)
    bytes_el = np.array([bytes_per_element(p) for p in precision], dtype=float)

    threads = _floats(_values(rows, "threads"))
    defaults = {h: _default_threads(h) for h in set(hardware)}
    threads = np.where(np.isfinite(threads), threads, np.array([defaults[h] for h in hardware], dtype=float))

    roof = _roofline_arrays(params, flops_item, hidden, layers, batch, bytes_el, tflops, bandwidth)
    # Launch floor: ~20 operators per layer where the architecture could not be traced.
    launches = np.where(np.isfinite(launches) & (launches > 0), launches,
                        20.0 * np.where(np.isfinite(layers) & (layers > 0), layers, 12.0))
    backend = text(_values(rows, "backend"), "torch")
    floor_ms = launches * np.array([LAUNCH_COST_MS.get(h, 0.02) * LAUNCH_SHARE.get(b, 1.0)
                                    for h, b in zip(hardware, backend, strict=True)], dtype=float)
    columns: dict[str, Any] = {
        "family": text(filled("family"), "unknown"),
        "model_type": text(filled("model_type"), "unknown"),
        "backend": backend,
        "hardware": hardware,
        "precision": precision,
        "mode": text(_values(rows, "mode"), "inference"),
        "device": np.array([sp.name for sp in row_specs], dtype=object),
        "device_kind": np.array([sp.kind for sp in row_specs], dtype=object),
        "log_param_count": _log(params),
        "log_flops_per_item": _log(flops_item),
        "log_flops_per_forward": _log(flops_item * batch),
        "num_layers": layers,
        "hidden_size": hidden,
        "log_sequence_length": _log(seq),
        "image_size": image,
        "log_audio_samples": _log(audio),
        "batch_size": batch,
        "log_batch_size": np.log(batch),
        "threads": threads,
        "bytes_per_element": bytes_el,
        "log_peak_tflops": _log(tflops),
        "log_memory_bandwidth_gbs": _log(bandwidth),
        "device_memory_gb": np.array([sp.memory_gb for sp in row_specs], dtype=float),
        "spec_known": np.array([1.0 if sp.known else 0.0 for sp in row_specs], dtype=float),
        "log_weight_mb": _log(roof["weight_mb"]),
        "log_roofline_compute_ms": _log(roof["compute_ms"]),
        "log_roofline_memory_ms": _log(roof["memory_ms"]),
        "log_roofline_ms": _log(roof["latency_ms"]),
        "log_roofline_memory_mb": _log(roof["memory_mb"]),
        "log_launches": _log(launches),
        "log_launch_floor_ms": _log(floor_ms),
        "log_flops_per_launch": _log(flops_item * batch / launches),
        "log_regime_ms": _log(np.maximum(floor_ms, roof["latency_ms"])),
        "num_attention_heads": heads,
        "kv_group": heads / np.where(kv_heads > 0, kv_heads, np.nan),
    }
    return pd.DataFrame({name: columns[name] for name in FEATURE_COLUMNS}, index=rows.index)


def query_row(
    model: ModelInfo,
    *,
    hardware: str,
    backend: str,
    precision: str,
    batch_size: int,
    mode: str = "inference",
    device_name: str | None = None,
    threads: int | None = None,
) -> dict[str, Any]:
    """A record-like dict for one configuration; stack many and call `feature_frame` once
    (much faster than one `query_frame` per configuration)."""
    if batch_size < 1:
        raise ValueError(f"batch_size must be >= 1, got {batch_size}")
    return {
        "model": model.name,
        "family": model.family,
        "model_type": model.model_type,
        "param_count": model.param_count,
        "flops_per_forward": float(model.flops_per_item) * batch_size,
        "num_layers": model.num_layers,
        "hidden_size": model.hidden_size,
        "sequence_length": model.sequence_length,
        "image_size": model.image_size,
        "audio_samples": model.audio_samples,
        "launches_per_forward": model.launches_per_forward,
        "num_attention_heads": model.num_attention_heads,
        "num_key_value_heads": model.num_key_value_heads,
        "batch_size": int(batch_size),
        "precision": precision,
        "backend": backend,
        "hardware": hardware,
        "device_name": device_name or "",
        "mode": mode,
        "threads": threads,
    }


def query_frame(
    model: ModelInfo,
    *,
    hardware: str,
    backend: str,
    precision: str,
    batch_size: int,
    mode: str = "inference",
    device_name: str | None = None,
    threads: int | None = None,
) -> pd.DataFrame:
    """One row of `FEATURE_COLUMNS` for a configuration (measured or not)."""
    row = query_row(model, hardware=hardware, backend=backend, precision=precision, batch_size=batch_size,
                    mode=mode, device_name=device_name, threads=threads)
    return feature_frame(pd.DataFrame([row]))


def roofline_frame(rows: pd.DataFrame) -> pd.DataFrame:
    """Roofline latency_ms, throughput and memory_mb for rows with record fields (vectorised)."""
    feats = feature_frame(rows)
    batch = feats["batch_size"].to_numpy(dtype=float)
    latency = np.exp(feats["log_roofline_ms"].to_numpy(dtype=float))
    return pd.DataFrame(
        {
            "latency_ms": latency,
            "throughput": batch / latency * 1e3,
            "memory_mb": np.exp(feats["log_roofline_memory_mb"].to_numpy(dtype=float)),
        },
        index=rows.index,
    )


def local_cpu_name() -> str:
    """This machine's CPU spec name (what `device` says for local CPU rows)."""
    return local_cpu_spec().name


def _dump_zoo() -> dict[str, dict[str, Any]]:
    """The `_ZOO_TABLE` for the current zoo (builds every zoo model on the meta device)."""
    from pytest_hwbench.models import MODELS, ZOO_SPECS

    table = {}
    for spec in ZOO_SPECS:
        current = MODELS[spec.name]
        info = _measure_spec(current)
        table[spec.name] = {**info.to_dict(), "fingerprint": _fingerprint(current)}
    return table


def _check_table(table: Mapping[str, Mapping[str, Any]]) -> None:
    for name, entry in table.items():
        if not math.isfinite(float(entry["flops_per_item"])):
            raise ValueError(f"{name}: non-finite FLOPs")


__all__ = [
    "ALIASES",
    "CATEGORICAL_FEATURES",
    "FEATURE_COLUMNS",
    "INPUT_FIELDS",
    "LAUNCH_COST_MS",
    "LAUNCH_SHARE",
    "NUMERIC_FEATURES",
    "ModelInfo",
    "RooflineEstimate",
    "cache_path",
    "feature_frame",
    "info_from_spec",
    "query_frame",
    "query_row",
    "resolve_model",
    "roofline",
    "roofline_frame",
]

if __name__ == "__main__":  # python -m hwsel.features: print the zoo table to paste above
    _table = _dump_zoo()
    _check_table(_table)
    print(json.dumps(_table, indent=1, sort_keys=True))
