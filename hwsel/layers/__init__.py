"""The prediction layers, each behind the one `Layer` protocol, in the order they are asked:

1. ``measured``   (`MeasuredLayer`)   an exact match in the benchmark data;
2. ``registered`` (`RegisteredLayer`) the registered champion models, inside their training domain;
3. ``roofline``   (`RooflineLayer`)   device peaks plus launch overhead;
4. ``rules``      (`RulesLayer`)      heuristics that always answer.

`hwsel.predict.Predictor` builds them, asks them in that order and says which one answered.
"""

from __future__ import annotations

from .base import DeviceFields, Layer, LayerStatus
from .measured import Measured, MeasuredIndex, MeasuredLayer
from .registered import GRID_BATCH_SIZES, RegisteredLayer
from .roofline import RooflineLayer, roofline_arrays
from .rules import RulesLayer, launch_overhead_ms, rules_estimate

__all__ = [
    "GRID_BATCH_SIZES",
    "DeviceFields",
    "Layer",
    "LayerStatus",
    "Measured",
    "MeasuredIndex",
    "MeasuredLayer",
    "RegisteredLayer",
    "RooflineLayer",
    "RulesLayer",
    "launch_overhead_ms",
    "roofline_arrays",
    "rules_estimate",
]
