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

from .sets import load_model_set, spec_from_config
from .spec import FAMILIES, MODALITIES, TIERS, ModelArchitecture, ModelSpec, achieved_tflops
from .trace import dense_flops_estimate
from .zoo import KEY_MODELS, MODELS, ZOO_NAMES, ZOO_SPECS, get_model, register_model

__all__ = [
    "FAMILIES",
    "KEY_MODELS",
    "MODALITIES",
    "MODELS",
    "TIERS",
    "ZOO_NAMES",
    "ZOO_SPECS",
    "ModelArchitecture",
    "ModelSpec",
    "achieved_tflops",
    "dense_flops_estimate",
    "get_model",
    "load_model_set",
    "register_model",
    "spec_from_config",
]
