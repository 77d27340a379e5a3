"""The model zoo and model sets: models built from transformers config classes, never downloaded.

One job per module:

- `spec`: `ModelSpec` (how to build one model and feed it), `ModelArchitecture`, and the words
  a model is described in (`FAMILIES`, `MODALITIES`, `TIERS`, bytes per weight and activation);
- `inputs`: the input builders, item sizes and text limits per modality;
- `trace`: the shape-only (meta-device) trace: parameters, FLOPs, activation peak, operators
  launched per forward, attention and KV heads, without allocating weights;
- `zoo`: the built-in models in three tiers (`ZOO_SPECS`, `KEY_MODELS`) and the registry
  (`MODELS`, `register_model`, `get_model`);
- `sets`: user models from a TOML/JSON model-set file, a `config.json` file or a folder holding
  one (`load_model_set`, `--hwbench-model-set`), checked once, errors naming the field.

Importing the package imports neither torch nor transformers.
"""

from __future__ import annotations

from .sets import (
    SIZE_KEYS,
    check_model_spec,
    is_hf_config,
    load_model_set,
    nonpositive_size,
    spec_from_config,
)
from .spec import (
    ACTIVATION_BYTES,
    FAMILIES,
    MODALITIES,
    TIERS,
    WEIGHT_BYTES,
    ModelArchitecture,
    ModelSpec,
    achieved_tflops,
    flops_per_item,
)
from .trace import dense_flops_estimate
from .zoo import KEY_MODELS, MODELS, ZOO_NAMES, ZOO_SPECS, get_model, register_model

__all__ = [
    "ACTIVATION_BYTES",
    "FAMILIES",
    "KEY_MODELS",
    "MODALITIES",
    "MODELS",
    "SIZE_KEYS",
    "TIERS",
    "WEIGHT_BYTES",
    "ZOO_NAMES",
    "ZOO_SPECS",
    "ModelArchitecture",
    "ModelSpec",
    "achieved_tflops",
    "check_model_spec",
    "dense_flops_estimate",
    "flops_per_item",
    "get_model",
    "is_hf_config",
    "load_model_set",
    "nonpositive_size",
    "register_model",
    "spec_from_config",
]
