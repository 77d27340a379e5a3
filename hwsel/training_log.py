"""What a training run logs to MLflow besides its parameters: studies, the intervals' calibration,
the roofline baseline and each champion decision."""

from __future__ import annotations

import math
import tempfile
from collections.abc import Mapping
from pathlib import Path
from typing import Any

import numpy as np
import pandas as pd

from hwsel.estimators import build_estimator, one_thread
from hwsel.evaluation import lomo_folds, out_of_fold, scheme_metrics
from hwsel.promotion import Decision


def flatten(prefix: str, metrics: Mapping[str, Mapping[str, float]]) -> dict[str, float]:
    """``prefix.scheme.metric`` -> value, for each finite metric of each cross-validation scheme."""
    return {f"{prefix}.{scheme}.{name}": float(value) for scheme, values in metrics.items()
            for name, value in values.items() if math.isfinite(float(value))}


def log_study(client: Any, run_id: str, target: str, params: Mapping[str, Any], trials: pd.DataFrame,
              oof: pd.DataFrame, sub: pd.DataFrame, now: int) -> None:
    """Log `target`'s study: each trial's value, the best recipe's `params`, the `trials` table
    (``study/``) and the out-of-fold predictions `oof` with the cases of `sub` (``evaluation/``)."""
    from mlflow.entities import Metric, Param

    values = trials["value"].to_numpy(dtype=float)
    client.log_batch(run_id, metrics=[Metric(f"{target}.trial_value", float(v), now, int(i))
                                      for i, v in enumerate(values) if math.isfinite(v)],
                     params=[Param(f"{target}.best.{k}", str(v)[:500]) for k, v in params.items()])
    client.log_text(run_id, trials.to_csv(index=False), f"study/{target}_trials.csv")
    rows = oof["row"].to_numpy()
    oof = oof.assign(**{c: sub[c].to_numpy()[rows] for c in ("model", "backend", "hardware", "precision", "batch_size")})
    with tempfile.TemporaryDirectory(prefix="hwsel-train-") as tmp:
        oof_path = Path(tmp) / f"{target}_oof.parquet"
        oof.to_parquet(oof_path, index=False)
        client.log_artifact(run_id, str(oof_path), "evaluation")


def log_intervals(client: Any, run_id: str, params: Mapping[str, Any], offset_col: str, seed: int,
                  sub: pd.DataFrame, Xs: pd.DataFrame, ys: np.ndarray, now: int, level: float) -> str | None:
    """Calibrate the latency model's adaptive intervals (`hwsel.intervals.AdaptiveIntervals`, of
    nominal coverage `level`) on leave-one-model-out predictions of the chosen recipe, log them as
    the run's artifact ``intervals/latency_intervals.json`` with each layer's nested
    leave-one-model-out coverage and widths (``latency.lomo_interval_*``,
    ``latency.<layer>_interval_*``, per distance bucket ``..._coverage.d<low>-<high>``), and return
    the artifact's URI; None with fewer than two models."""
    from mlflow.entities import Metric

    from hwsel.intervals import (
        DISTANCE_BUCKETS,
        AdaptiveIntervals,
        calibratable,
        layer_oofs,
        lomo_distances,
        lomo_offsets,
        novelty_frame,
    )

    if sub["model"].nunique() < 2:
        return None
    estimator = build_estimator(dict(params), offset_column=offset_col, seed=seed)
    with one_thread():
        oof = out_of_fold(estimator, Xs, ys, lomo_folds(sub))
    frame = novelty_frame(sub, Xs)
    others = {name: part for name, part in layer_oofs(sub, Xs, oof).items() if calibratable(frame, part)}
    intervals = AdaptiveIntervals.calibrate(frame, oof, level, others)
    metrics: dict[str, float] = {}
    for name, part in {"lomo": oof, **others}.items():
        low, high = lomo_offsets(frame, part, level)
        resid = (part["y_true"] - part["y_pred"]).to_numpy()
        width = np.exp(high - low)
        prefix = f"latency.{name}_interval"
        inside = (resid >= low) & (resid <= high)
        distance = lomo_distances(frame, part)
        for lo, hi in DISTANCE_BUCKETS:  # coverage where the answers lie that far from the other models
            bucket = (distance >= lo) & (distance < hi)
            if bucket.any():
                metrics[f"{prefix}_coverage.d{lo:g}-{hi:g}"] = float(np.mean(inside[bucket]))
        metrics.update({f"{prefix}_coverage": float(np.mean(inside)),
                        f"{prefix}_width_median": float(np.median(width)),
                        f"{prefix}_width_p10": float(np.quantile(width, 0.1)),
                        f"{prefix}_width_p90": float(np.quantile(width, 0.9)),
                        f"{prefix}_rows": float(len(part))})
    client.log_batch(run_id, metrics=[Metric(k, v, now, 0) for k, v in metrics.items() if math.isfinite(v)])
    client.log_text(run_id, intervals.to_json(), "intervals/latency_intervals.json")
    return f"runs:/{run_id}/intervals/latency_intervals.json"


def log_roofline_baseline(client: Any, run_id: str, Xs: pd.DataFrame, oof: pd.DataFrame, now: int) -> None:
    """Log the roofline estimate's own cross-validated latency errors (``roofline_latency.*``), the
    baseline a learned model has to beat."""
    from mlflow.entities import Metric

    rows = oof["row"].to_numpy()
    base = oof.assign(y_pred=Xs["log_roofline_ms"].to_numpy()[rows])
    metrics = flatten("roofline_latency", scheme_metrics(base))
    client.log_batch(run_id, metrics=[Metric(k, v, now, 0) for k, v in metrics.items()])


def log_decision(client: Any, run_id: str, target: str, version: str, decision: Decision, now: int) -> None:
    """Log whether `target`'s new `version` took @champion, and why: on the version (tag
    ``hwsel.champion_decision``) and on the training run (``<target>.alias_moved``,
    ``<target>.champion_score``, tags ``hwsel.<target>.version`` and ``.decision``)."""
    from mlflow.entities import Metric, RunTag

    from hwsel import registry

    moved, _, champ_score, reason = decision
    client.set_model_version_tag(registry.MODEL_NAMES[target], version, "hwsel.champion_decision", reason[:5000])
    client.log_batch(run_id, metrics=[Metric(f"{target}.alias_moved", float(moved), now, 0)]
                     + ([Metric(f"{target}.champion_score", champ_score, now, 0)]
                        if champ_score is not None and math.isfinite(champ_score) else []),
                     tags=[RunTag(f"hwsel.{target}.version", version),
                           RunTag(f"hwsel.{target}.decision", reason[:5000])])


__all__ = ["flatten", "log_decision", "log_intervals", "log_roofline_baseline", "log_study"]
