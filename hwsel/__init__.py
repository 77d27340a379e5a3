"""hwsel: hardware selection and performance prediction from hwbench runs.

Every prediction comes from the first layer that can answer, and says which: ``measured`` (an
exact match in the benchmark data), ``registered`` (the MLflow-registered champion models),
``roofline`` (device peaks) or ``rules`` (heuristics; no data, no scikit-learn). ::

    from hwsel import select_hardware, predict_performance, suggest_measurements

    rec = select_hardware("bert-base-uncased", batch_size=8, available_hardware=["cpu", "cuda"],
                          device={"cuda": "NVIDIA H100 80GB HBM3"})
    rec.primary_recommendation, rec.fallback_options, rec.prediction_source, rec.explanation, rec.devices
    pred = predict_performance("t5-small", hardware="cuda", device="h100", batch_size=16, precision="fp16")["cuda"]
    pred.interval, pred.device, pred.device_source, pred.backend

    for s in suggest_measurements(10, source="benchmarks/data/cpu_runs.parquet"):  # what to measure next
        s.command, s.uncertainty, s.predicted_ms

A question names a hardware kind and a device (a device name or a `hwsel.specs` name such as
``h100``; default: the one detected here, else the one most records of that kind hold), and every
answer says which device and backend it is for. Data and models are loaded once per (source,
tracking_uri, config); every function that answers takes ``predictor=`` to choose another.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from pytest_hwbench._lazy import lazy_exports

from .config import HardwarePreference, SelectionConfig, TaskProfile, Thresholds, Weights, load_config
from .distributed import DistributedConfig, MemoryEstimate, distributed_training_config
from .performance import predict_performance, prediction_matrix
from .predict import Predictor, clear_predictors, get_predictor
from .query import HwselWarning, ModelRef, Prediction, Query, QuestionError, UnknownModelError, model_info
from .ranking import PrecisionChoice
from .resolution import ModelInfo
from .select import (
    HardwareScore,
    Recommendation,
    analyze_model,
    available_hardware,
    detect_hardware,
    select_hardware,
    select_precision,
    selection_map,
)

if TYPE_CHECKING:
    from .next import Suggestion, suggest_measurements

#: Imported on first use: fitting needs scikit-learn, which the rules layer does not.
_EXPORTS = {"Suggestion": "next", "suggest_measurements": "next"}

__all__ = ["DistributedConfig", "HardwarePreference", "HardwareScore", "HwselWarning", "MemoryEstimate",
           "ModelInfo", "ModelRef", "PrecisionChoice", "Prediction", "Predictor", "Query", "QuestionError",
           "Recommendation", "SelectionConfig", "Suggestion", "TaskProfile", "Thresholds",
           "UnknownModelError", "Weights", "analyze_model", "available_hardware", "clear_predictors",
           "detect_hardware", "distributed_training_config", "get_predictor", "load_config", "model_info",
           "predict_performance", "prediction_matrix", "select_hardware", "select_precision", "selection_map",
           "suggest_measurements"]

__getattr__, __dir__ = lazy_exports(__name__, _EXPORTS, __all__)
