"""Memory one replica of a model needs, from its parameter count and shape (no data, no weights)."""

from __future__ import annotations

import math
from dataclasses import dataclass

from pytest_hwbench.vocabulary import BYTES_PER_PRECISION, TRAIN_MODE, normalise_mode

from .resolution import ModelInfo


def _tokens(m: ModelInfo) -> int:
    if m.sequence_length:
        return max(1, int(m.sequence_length))
    if m.image_size:
        return max(1, (int(m.image_size) // 16) ** 2)
    if m.audio_samples:
        return max(1, int(m.audio_samples) // 320)
    return 128


def _shape(m: ModelInfo) -> tuple[int, int, int]:
    """(tokens, hidden, layers), guessed from the parameter count where the config is silent."""
    layers = int(m.num_layers or 12)
    hidden = m.hidden_size or max(64, int(math.sqrt(max(m.param_count, 1) / (12 * layers))))
    return _tokens(m), int(hidden), max(1, layers)


@dataclass(frozen=True)
class MemoryBreakdown:
    """Memory of one replica in MiB: weights, gradients, optimizer states, activations."""

    parameters_mb: float
    gradients_mb: float
    optimizer_mb: float
    activations_mb: float
    runtime_mb: float

    @property
    def total_mb(self) -> float:
        return self.parameters_mb + self.gradients_mb + self.optimizer_mb + self.activations_mb + self.runtime_mb


def memory_breakdown(model: ModelInfo, *, batch_size: int, precision: str = "fp32", mode: str = "inference",
                     checkpointing: bool = False, runtime_mb: float = 0.0) -> MemoryBreakdown:
    """Memory needed by one replica, from parameter count and shape (no data needed).

    Training (mode ``train``; ``training`` is read as ``train``) keeps gradients in the compute
    precision and AdamW states in fp32 (two moments, plus an fp32 master copy under mixed
    precision): 16 bytes per parameter with half-precision weights, as in the ZeRO paper.
    Activations follow Korthikanti et al. (2022): per layer and item
    ``tokens * hidden * (34 + 5 * heads * tokens / hidden)`` bytes in 16 bit; with activation
    checkpointing only each layer's input (2 * tokens * hidden bytes) plus one layer's full set.
    Inference keeps one layer's working set per item.
    """
    mib = 2.0**20
    nbytes = BYTES_PER_PRECISION[precision]
    params = float(model.param_count)
    tokens, hidden, layers = _shape(model)
    heads = max(1, hidden // 64)
    scale = nbytes / 2  # the formula is for 16-bit activations
    per_layer = tokens * hidden * (34 + 5 * heads * tokens / hidden) * scale
    weights = params * nbytes
    if normalise_mode(mode) == TRAIN_MODE:
        grads = params * nbytes
        optimizer = params * (8 + (4 if nbytes < 4 else 0))
        acts = batch_size * (layers * 2 * tokens * hidden * scale + per_layer if checkpointing else layers * per_layer)
    else:
        grads, optimizer = 0.0, 0.0
        acts = batch_size * per_layer / 2
    return MemoryBreakdown(weights / mib, grads / mib, optimizer / mib, acts / mib, runtime_mb)


__all__ = ["MemoryBreakdown", "memory_breakdown"]
