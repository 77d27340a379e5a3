"""The models a selection map's rows stand for (`representative_models`): per family and size
category a zoo model of that size, else the family's base model (`FAMILY_BASE_MODELS`) scaled."""

from __future__ import annotations

import dataclasses
import math
from collections.abc import Mapping, Sequence
from types import MappingProxyType
from typing import Any

from .config import SIZE_CATEGORIES, SelectionConfig
from .query import model_info
from .resolution import ModelInfo

#: The zoo model each family's map rows start from.
FAMILY_BASE_MODELS: Mapping[str, str] = MappingProxyType({
    "embedding": "bert-base", "text_generation": "gpt2", "vision": "vit-base", "audio": "whisper-tiny",
    "multimodal": "clip-vit-b32"})
#: Other zoo models considered as a family's representative of a size category.
_FAMILY_MODELS: Mapping[str, tuple[str, ...]] = MappingProxyType({
    "embedding": ("bert-base",), "text_generation": ("gpt2", "t5-small"), "vision": ("vit-base", "resnet-50"),
    "audio": ("whisper-tiny", "wav2vec2-base"), "multimodal": ("clip-vit-b32",)})


def _scaled(info: ModelInfo, params: int, name: str) -> ModelInfo:
    """`info` grown or shrunk to `params` parameters (depth and width each by the cube root)."""
    ratio = params / max(int(info.param_count), 1)
    change: dict[str, Any] = {"name": name, "param_count": int(params),
                              "flops_per_item": float(info.flops_per_item) * ratio}
    if info.num_layers:
        change["num_layers"] = max(1, round(info.num_layers * ratio ** (1 / 3)))
    if info.hidden_size:
        change["hidden_size"] = max(8, round(info.hidden_size * ratio ** (1 / 3)))
    return dataclasses.replace(info, **change)


def representative_models(config: SelectionConfig, families: Sequence[str]) -> dict[str, dict[str, ModelInfo]]:
    """family -> size category -> a ModelInfo: a zoo model of that size, else the base model scaled."""
    th = config.thresholds.model_size
    lows = {"small": 1, "medium": th["small"] + 1, "large": th["medium"] + 1}
    targets = {"small": th["small"] // 2, "medium": int(math.sqrt(th["small"] * th["medium"])),
               "large": int(math.sqrt(th["medium"] * th["large"]))}
    out: dict[str, dict[str, ModelInfo]] = {}
    for fam in families:
        infos = [model_info(n) for n in _FAMILY_MODELS[fam]]
        sizes: dict[str, ModelInfo] = {}
        for cat in SIZE_CATEGORIES:
            fit = [i for i in infos if lows[cat] <= i.param_count <= th[cat]]
            sizes[cat] = fit[0] if fit else _scaled(infos[0], targets[cat], f"{fam}-{cat}-scaled")
        out[fam] = sizes
    return out


__all__ = ["FAMILY_BASE_MODELS", "representative_models"]
