"""The model zoo and model sets: models built from transformers config classes, never downloaded.
`spec` (`ModelSpec`), `inputs` (per modality), `trace` (the meta-device trace), `zoo` (the built-in
models, the registry), `sets` (user models). Importing it imports neither torch nor transformers.
"""

from __future__ import annotations

from .sets import load_model_set, spec_from_config
from .spec import FAMILIES, MODALITIES, TIERS, ModelArchitecture, ModelSpec, achieved_tflops
from .trace import dense_flops_estimate
from .zoo import KEY_MODELS, MODELS, ZOO_NAMES, ZOO_SPECS, get_model, register_model

__all__ = ["FAMILIES", "KEY_MODELS", "MODALITIES", "MODELS", "TIERS", "ZOO_NAMES", "ZOO_SPECS",
           "ModelArchitecture", "ModelSpec", "achieved_tflops", "dense_flops_estimate", "get_model",
           "load_model_set", "register_model", "spec_from_config"]
