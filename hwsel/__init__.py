"""hwsel: hardware selection and performance prediction from hwbench runs.

Every prediction comes from the first layer that can answer, and says which: ``measured`` (an
exact match in the benchmark data), ``registered`` (the MLflow-registered champion models),
``roofline`` (device peaks) or ``rules`` (heuristics; no data, no scikit-learn). ::

    from hwsel import select_hardware, predict_performance

    rec = select_hardware("bert-base-uncased", batch_size=8, available_hardware=["cpu", "cuda"])
    rec.primary_recommendation, rec.fallback_options, rec.prediction_source, rec.explanation
    predict_performance("t5-small", hardware=["cuda"], batch_size=16, precision="fp16")["cuda"].interval

Data and models are loaded once per (source, tracking_uri, config) and kept: after that a
selection is in-memory arithmetic. Build a `Predictor` yourself to choose the source or the
layers; every function takes ``predictor=``.
"""

from __future__ import annotations

from .config import HardwarePreference, SelectionConfig, TaskProfile, Thresholds, Weights, load_config
from .distributed import DistributedConfig, MemoryEstimate, distributed_training_config
from .predict import (
    HwselWarning,
    Prediction,
    Predictor,
    Query,
    clear_predictors,
    get_predictor,
    model_info,
    predict_performance,
    prediction_matrix,
)
from .select import (
    HardwareScore,
    Recommendation,
    analyze_model,
    available_hardware,
    detect_hardware,
    select_hardware,
    select_hardware_for_task,
    selection_map,
)

__all__ = [
    "DistributedConfig",
    "HardwarePreference",
    "HardwareScore",
    "HwselWarning",
    "MemoryEstimate",
    "Prediction",
    "Predictor",
    "Query",
    "Recommendation",
    "SelectionConfig",
    "TaskProfile",
    "Thresholds",
    "Weights",
    "analyze_model",
    "available_hardware",
    "clear_predictors",
    "detect_hardware",
    "distributed_training_config",
    "get_predictor",
    "load_config",
    "model_info",
    "predict_performance",
    "prediction_matrix",
    "select_hardware",
    "select_hardware_for_task",
    "selection_map",
]
