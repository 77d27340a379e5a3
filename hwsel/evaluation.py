"""How the predictors are scored: grouped folds (held-out batch sizes, models, devices), out-of-fold
predictions and their errors."""

from __future__ import annotations

import math
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np
import pandas as pd
from sklearn.base import clone
from sklearn.model_selection import GroupKFold

from .specs import device_key


@dataclass(frozen=True)
class Fold:
    """One train/test split of one scheme."""

    scheme: str
    index: int
    train: np.ndarray
    test: np.ndarray


def _group_folds(table: pd.DataFrame, scheme: str, groups: np.ndarray, most: int) -> list[Fold]:
    """GroupKFold's folds of `groups` (at most `most`), none with fewer than two groups."""
    n_groups = len(np.unique(groups))
    splits = GroupKFold(n_splits=min(most, n_groups)).split(table, groups=groups) if n_groups > 1 else []
    return [Fold(scheme, i, tr, te) for i, (tr, te) in enumerate(splits)]


def cv_folds(table: pd.DataFrame) -> list[Fold]:
    """Grouped folds, deterministic (two trainings on one table use the same ones): held-out batch
    sizes (at most 8 folds), held-out models and held-out devices (at most 5 each); a scheme with
    fewer than two groups is skipped."""
    # one device by any of its names (`hwsel.specs.device_key`), so no spelling leaks into training
    devices = np.array([f"{hw}|{device_key(str(hw), name if isinstance(name, str) else None)}"
                        for hw, name in zip(table["hardware"], table["device_name"], strict=True)],
                       dtype=object)
    folds = (_group_folds(table, "heldout_batch", table["batch_size"].astype(int).to_numpy(), 8)
             + _group_folds(table, "heldout_model", table["model"].astype(str).to_numpy(), 5)
             + _group_folds(table, "heldout_device", devices, 5))
    if not folds:
        raise ValueError("cannot cross-validate: the data has a single model and a single batch size")
    return folds


def lomo_folds(table: pd.DataFrame) -> list[Fold]:
    """Leave one model out: one fold per model (scheme ``lomo``), in GroupKFold's order.

    Raises:
        ValueError: the table holds fewer than two models.
    """
    folds = _group_folds(table, "lomo", table["model"].astype(str).to_numpy(), len(table))
    if not folds:
        raise ValueError(f"leave-one-model-out needs at least two models, the table holds "
                         f"{table['model'].nunique()}")
    return folds


def out_of_fold(
    estimator: Any,
    X: pd.DataFrame,
    y: np.ndarray,
    folds: Sequence[Fold],
    *,
    report: Callable[[int, float], None] | None = None,
) -> pd.DataFrame:
    """Out-of-fold log predictions: columns scheme, fold, row, y_true, y_pred (log units).

    `report(step, running_score)` is called after each fold (Optuna pruning hooks in there).
    """
    parts = []
    for step, fold in enumerate(folds):
        model = clone(estimator).fit(X.iloc[fold.train], y[fold.train])
        pred = np.asarray(model.predict(X.iloc[fold.test]), dtype=float)
        parts.append(pd.DataFrame({"scheme": fold.scheme, "fold": fold.index, "row": fold.test,
                                   "y_true": y[fold.test], "y_pred": pred}))
        if report is not None:
            report(step, score_oof(pd.concat(parts, ignore_index=True)))
    return pd.concat(parts, ignore_index=True)


def score_oof(oof: pd.DataFrame) -> float:
    """The selection score: mean over schemes of mean |log(pred / measured)|; lower is better."""
    per_scheme = []
    for _, g in oof.groupby("scheme", sort=True):
        err = np.abs(g["y_pred"].to_numpy() - g["y_true"].to_numpy())
        per_scheme.append(float(np.mean(err)) if np.all(np.isfinite(err)) else math.inf)
    return float(np.mean(per_scheme)) if per_scheme else math.inf


def error_metrics(y_true: np.ndarray, y_pred: np.ndarray) -> dict[str, float]:
    """Errors in natural units from log values: MAPE, median and p90 APE, share within 10%."""
    true = np.exp(np.asarray(y_true, dtype=float))
    pred = np.exp(np.asarray(y_pred, dtype=float))
    ape = np.abs(pred - true) / true
    if len(ape) == 0:
        return {"mape": math.nan, "median_ape": math.nan, "p90_ape": math.nan, "within_10pct": math.nan,
                "log_mae": math.nan, "n": 0.0}
    return {
        "mape": float(np.mean(ape)),
        "median_ape": float(np.median(ape)),
        "p90_ape": float(np.quantile(ape, 0.9)),
        "within_10pct": float(np.mean(ape <= 0.10)),
        "log_mae": float(np.mean(np.abs(np.log(pred) - np.log(true)))),
        "n": float(len(ape)),
    }


def scheme_metrics(oof: pd.DataFrame) -> dict[str, dict[str, float]]:
    """`error_metrics` per scheme of an out-of-fold frame."""
    return {scheme: error_metrics(g["y_true"].to_numpy(), g["y_pred"].to_numpy())
            for scheme, g in oof.groupby("scheme", sort=True)}


__all__ = ["Fold", "cv_folds", "error_metrics", "lomo_folds", "out_of_fold", "scheme_metrics", "score_oof"]
