"""What a model is: `ModelSpec` (how to build and feed it) and the words it is described in;
transformers and torch are imported only when a config, a model or inputs are built.
"""

from __future__ import annotations

import functools
import math
from collections.abc import Mapping
from dataclasses import dataclass, field
from types import MappingProxyType
from typing import Any

from ..vocabulary import BYTES_PER_PRECISION, cache_dir, check_precision
from .inputs import input_shape, make_inputs, max_length
from .trace import ModelArchitecture, stored_architecture, trace_architecture

FAMILIES: tuple[str, ...] = ("embedding", "text_generation", "vision", "audio", "multimodal")
MODALITIES: tuple[str, ...] = (
    "text", "text2text", "image", "audio_features", "audio_waveform", "image_text",
    "audio_text", "video_text", "image_text_tokens",
)
#: quick: tiny variants for CI; full: real sizes that fit a 24 GB CPU host in fp32; large: real
#: sizes for GPU runners (their CPU cases skip on hosts without the memory).
TIERS: tuple[str, ...] = ("full", "quick", "large")
#: The `ModelSpec` fields that take one of a fixed set of words, and those words.
CHOICES: Mapping[str, tuple[str, ...]] = MappingProxyType({"family": FAMILIES, "modality": MODALITIES, "tier": TIERS})
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
        for key, allowed in CHOICES.items():
            value = getattr(self, key)
            if value not in allowed:
                raise ValueError(f"model {self.name!r}: {key} {value!r} is not one of {', '.join(allowed)}")
        if self.sequence_length < 1:
            raise ValueError(f"model {self.name!r}: sequence_length must be >= 1, got {self.sequence_length}")

    def build_config(self) -> Any:
        """The transformers config object (no hub access)."""
        import transformers

        if self.config_class.startswith(("/", ".")):
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
        """A randomly initialised model in eval mode on `device` (``"meta"`` allocates nothing),
        its weights from `seed` (None: the global RNG; the caller's RNG state is left as it was);
        `auto_class` replaces the spec's own (e.g. a generation head)."""
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
        return input_shape(self.modality, self.sequence_length, self._config())

    @property
    def max_sequence_length(self) -> int | None:
        """The longest token sequence the model takes, from its config's position limit (None where
        its input is no token sequence or the config sets no limit, as T5's relative positions)."""
        return max_length(self.modality, self._config())

    def make_inputs(self, batch_size: int, device: Any = "cpu", seed: int = 0) -> dict[str, Any]:
        """Deterministic random inputs for `batch_size` items, as forward() kwargs."""
        import torch

        gen = torch.Generator().manual_seed(seed)
        inputs = make_inputs(self.modality, self.sequence_length, self._config(), batch_size, gen)
        return {k: v.to(device) for k, v in inputs.items()}

    @functools.cached_property
    def _cached_config(self) -> Any:
        return self.build_config()

    def _config(self) -> Any:
        return self._cached_config

    @functools.cached_property
    def architecture(self) -> ModelArchitecture:
        """Parameter count, FLOPs per item and shape numbers, from a meta-device build (traced
        once per config, input and library versions on this machine: `stored_architecture`)."""

        key = {"config": self._config().to_dict(), "config_class": self.config_class, "auto_class": self.auto_class,
               "modality": self.modality, "sequence_length": self.sequence_length}
        # All-ones attention masks stay: transformers reads booleans out of them (`mask.all()`),
        # which the meta-device trace answers.
        return stored_architecture(cache_dir("architecture"), key, lambda: trace_architecture(
            self.build_model("meta"), self.make_inputs(1, device="meta"), self._config(),
            tokens=self.input_shape().get("sequence_length") or 1))

    def weights_memory_mb(self, precision: str = "fp32") -> float:
        """MiB the weights take at `precision` (`BYTES_PER_PRECISION` per parameter; a floor at
        int8, whose embeddings and norms stay fp32)."""
        return self.architecture.param_count * BYTES_PER_PRECISION[check_precision(precision)] / 2**20

    def activation_memory_mb(self, precision: str = "fp32", batch_size: int = 1) -> float:
        """MiB of activations alive at the peak of one forward over `batch_size` items: the
        meta-device peak at batch 1 in fp32 (outputs in, weights, inputs and runtime overhead out),
        scaled by the batch and `ACTIVATION_BYTES` / 4; 0 when the forward cannot run on meta."""
        per_item = self.architecture.activation_bytes_per_item or 0.0
        return per_item * ACTIVATION_BYTES[check_precision(precision)] / 4 * batch_size / 2**20

    def estimated_memory_mb(self, precision: str = "fp32", batch_size: int = 1) -> float:
        """MiB one forward needs at `precision` and `batch_size`: weights plus peak activations."""
        return self.weights_memory_mb(precision) + self.activation_memory_mb(precision, batch_size)


def achieved_tflops(flops_item: float | None, batch_size: int, latency_s: float) -> float | None:
    """TFLOP/s reached by one forward over `batch_size` items taking `latency_s`."""
    if not flops_item or latency_s <= 0 or not math.isfinite(latency_s):
        return None
    return flops_item * batch_size / latency_s / 1e12


__all__ = ["ACTIVATION_BYTES", "CHOICES", "FAMILIES", "MODALITIES", "TIERS", "ModelArchitecture", "ModelSpec",
           "achieved_tflops"]
