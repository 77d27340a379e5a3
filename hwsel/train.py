"""Training: Optuna-tuned scikit-learn regressors for latency, throughput and memory.

One `train()` call:

1. loads runs (`hwsel.data.load_runs`) and builds the training table; snapshots it to Parquet and
   logs the snapshot with the training run (experiment ``hwsel-training``), with its SHA-256;
2. per learned target (latency, memory) runs a seeded TPE study that picks the estimator
   (histogram gradient-boosted trees, random forest, or Ridge over log roofline terms and the
   other features) and its hyperparameters. Every target is learned in log space; each
   estimator may predict the residual against the roofline estimate (``offset="roofline"``),
   which lets trees generalise to models of sizes they have not seen, and may be wrapped in a
   `BatchCurveRegressor` (``batch_curves``): a configuration measured at two or more batch sizes
   then answers from its own fitted ``a + b * batch`` curve. The objective is the mean
   absolute log error over two grouped cross-validations, the questions users ask:
   *held-out batch sizes* (GroupKFold over batch size) and *held-out models* (GroupKFold over
   model). Trials report after each fold and are pruned (MedianPruner) when behind;
3. throughput is not learned separately: ``log throughput = log(1000 * batch) - log latency``
   (`ThroughputFromLatency`), so the two predictions always agree;
4. fits the winner on all rows, evaluates out-of-fold (MAPE, median/p90 error, share within
   10%, roofline baseline), logs study and evaluation, registers a new version of
   ``hwsel-latency``, ``hwsel-throughput`` and ``hwsel-memory`` (`hwsel.registry`);
5. moves each model's ``champion`` alias only when the new version wins on the same
   evaluation. The current champion's *recipe* (its estimator and hyperparameters, cloned from
   the registered pipeline) is cross-validated on the new table with the same splits; its
   already-fitted weights are not scored, as they may have been trained on the held-out rows.
   The new version wins when its score is lower by more than `SCORE_TOLERANCE`; on a tie with
   the very same recipe it wins only if the data changed (same recipe, more data: a refresh).
   Training twice on the same data with the same seed therefore leaves the alias where it is.
   ``hwsel-throughput`` follows ``hwsel-latency`` (same model), so the two champions agree.

Everything is logged through one `MlflowClient` with explicit run ids; no fluent active run.
"""

from __future__ import annotations

import contextlib
import dataclasses
import datetime as _dt
import json
import math
import os
import tempfile
import time
from collections.abc import Callable, Iterator, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np
import pandas as pd
from sklearn.base import BaseEstimator, RegressorMixin, clone
from sklearn.compose import ColumnTransformer
from sklearn.ensemble import HistGradientBoostingRegressor, RandomForestRegressor
from sklearn.impute import SimpleImputer
from sklearn.linear_model import Ridge
from sklearn.model_selection import GroupKFold
from sklearn.pipeline import Pipeline
from sklearn.preprocessing import OneHotEncoder, StandardScaler

from hwsel.data import frame_digest, load_runs, snapshot, training_table
from hwsel.features import CATEGORICAL_FEATURES, FEATURE_COLUMNS, NUMERIC_FEATURES, feature_frame
from pytest_hwbench.vocabulary import DEFAULT_EXPERIMENT

TRAINING_EXPERIMENT = "hwsel-training"
#: Lower by more than this (mean absolute log error) to beat the champion.
SCORE_TOLERANCE = 1e-9
#: Nominal coverage of the prediction intervals the registered models carry.
INTERVAL_LEVEL = 0.9
ESTIMATORS: tuple[str, ...] = ("hgb", "rf", "ridge")
SCHEMES: tuple[str, ...] = ("heldout_batch", "heldout_model")
_LOG_1000 = math.log(1000.0)

#: target -> (table column, roofline offset feature). Throughput derives from latency.
LEARNED: dict[str, tuple[str, str]] = {
    "latency": ("latency_ms", "log_roofline_ms"),
    "memory": ("memory_mb", "log_roofline_memory_mb"),
}


# --- estimators (scikit-learn rules: __init__ stores, fit returns self, fitted state ends in _) ---

class OffsetRegressor(RegressorMixin, BaseEstimator):
    """Fits `estimator` to ``y - X[offset]`` and adds the offset back when predicting.

    With ``offset="log_roofline_ms"`` the inner model learns log(measured / roofline), an
    efficiency that varies far less across model sizes than latency itself does. ``offset=None``
    is a plain pass-through.
    """

    def __init__(self, estimator: Any = None, offset: str | None = None) -> None:
        self.estimator = estimator
        self.offset = offset

    def _offset(self, X: pd.DataFrame) -> np.ndarray:
        if self.offset is None:
            return np.zeros(len(X))
        values = np.asarray(X[self.offset], dtype=float)
        return np.where(np.isfinite(values), values, 0.0)

    def fit(self, X: pd.DataFrame, y: Any) -> OffsetRegressor:
        self.estimator_ = clone(self.estimator).fit(X, np.asarray(y, dtype=float) - self._offset(X))
        return self

    def predict(self, X: pd.DataFrame) -> np.ndarray:
        return np.asarray(self.estimator_.predict(X), dtype=float) + self._offset(X)


class ThroughputFromLatency(RegressorMixin, BaseEstimator):
    """Log throughput (items/s) from a log-latency (ms) regressor: log(1000 * batch) - log latency.

    `fit` takes log throughput, turns it into log latency and fits a clone of `latency`.
    `from_fitted` wraps an already fitted latency model, so both registered models give
    ``throughput == batch / latency`` exactly.
    """

    def __init__(self, latency: Any = None) -> None:
        self.latency = latency

    @staticmethod
    def _log_items(X: pd.DataFrame) -> np.ndarray:
        return _LOG_1000 + np.asarray(X["log_batch_size"], dtype=float)

    def fit(self, X: pd.DataFrame, y: Any) -> ThroughputFromLatency:
        self.latency_ = clone(self.latency).fit(X, self._log_items(X) - np.asarray(y, dtype=float))
        return self

    def predict(self, X: pd.DataFrame) -> np.ndarray:
        return self._log_items(X) - np.asarray(self.latency_.predict(X), dtype=float)

    @classmethod
    def from_fitted(cls, latency: Any) -> ThroughputFromLatency:
        """Wrap a fitted latency model (no refit)."""
        model = cls(latency=latency)
        model.latency_ = latency
        return model


#: The regime terms `RegimeRegressor` calibrates, as logs of milliseconds (see hwsel.features).
REGIME_TERMS: tuple[str, ...] = ("log_launch_floor_ms", "log_roofline_compute_ms", "log_roofline_memory_ms")
#: Pools a configuration's regime coefficients come from, most specific first: the device and
#: runtime as measured, then the runtime on any device of the kind, then the kind of device.
REGIME_POOLS: tuple[tuple[str, ...], ...] = (
    ("device", "backend", "precision", "mode"),
    ("device", "backend", "mode"),
    ("device_kind", "backend", "precision", "mode"),
    ("device_kind", "backend", "mode"),
    ("device_kind", "mode"),
    ("mode",),
    (),
)


class RegimeRegressor(RegressorMixin, BaseEstimator):
    """latency ~ a * launch floor + b * compute time + c * memory time, calibrated per pool.

    The three terms are a model's eager launch floor (operators x launch cost), its roofline
    compute time and memory time on the device's peaks; (a, b, c) >= 0 are fitted by
    non-negative least squares on relative error, per pool of rows (`REGIME_POOLS`: the same
    device, backend, precision and mode first). A configuration takes the coefficients of the
    most specific pool with at least `min_rows` rows from at least `min_models` models, so a
    device with few records borrows efficiencies from its kind, and a model never measured
    gets its own launches, FLOPs and bytes weighed by what other models showed. Log targets.
    """

    def __init__(self, min_rows: int = 6, min_models: int = 2) -> None:
        self.min_rows = min_rows
        self.min_models = min_models

    @staticmethod
    def _terms(X: pd.DataFrame) -> np.ndarray:
        values = np.exp(np.column_stack([np.asarray(X[c], dtype=float) for c in REGIME_TERMS]))
        return np.where(np.isfinite(values), values, 0.0)

    @staticmethod
    def _keys(X: pd.DataFrame, pool: tuple[str, ...]) -> list[tuple[Any, ...]]:
        if not pool:
            return [()] * len(X)
        return list(zip(*(X[c].astype(str).to_numpy() for c in pool), strict=True))

    def fit(self, X: pd.DataFrame, y: Any) -> RegimeRegressor:
        from scipy.optimize import nnls

        value = np.exp(np.asarray(y, dtype=float))
        terms = self._terms(X)
        models = X["log_param_count"].round(6).to_numpy() if "log_param_count" in X else np.zeros(len(X))
        self.coefs_: list[dict[tuple[Any, ...], np.ndarray]] = []
        for pool in REGIME_POOLS:
            rows: dict[tuple[Any, ...], list[int]] = {}
            for i, key in enumerate(self._keys(X, pool)):
                rows.setdefault(key, []).append(i)
            fitted = {}
            for key, idx in rows.items():
                if len(idx) < self.min_rows or len(np.unique(models[idx])) < self.min_models:
                    continue
                design = terms[idx] / value[idx, None]
                coef, _ = nnls(design, np.ones(len(idx)))
                if np.any(coef > 0):
                    fitted[key] = coef
            self.coefs_.append(fitted)
        return self

    def predict(self, X: pd.DataFrame) -> np.ndarray:
        terms = self._terms(X)
        out = np.full(len(X), np.nan)
        for pool, fitted in zip(REGIME_POOLS, self.coefs_, strict=True):
            todo = np.isnan(out)
            if not todo.any():
                break
            keys = self._keys(X, pool)
            for i in np.flatnonzero(todo):
                coef = fitted.get(keys[i])
                if coef is not None:
                    out[i] = float(terms[i] @ coef)
        fallback = terms.max(axis=1)  # nothing fitted at all: the plain roofline with its floor
        out = np.where(np.isfinite(out) & (out > 0), out, np.maximum(fallback, 1e-6))
        return np.log(out)


class ResidualRegressor(RegressorMixin, BaseEstimator):
    """Fits `base`, then `estimator` to what `base` leaves (both on log targets)."""

    def __init__(self, base: Any = None, estimator: Any = None) -> None:
        self.base = base
        self.estimator = estimator

    def fit(self, X: pd.DataFrame, y: Any) -> ResidualRegressor:
        y = np.asarray(y, dtype=float)
        self.base_ = clone(self.base).fit(X, y)
        self.estimator_ = clone(self.estimator).fit(X, y - self.base_.predict(X))
        return self

    def predict(self, X: pd.DataFrame) -> np.ndarray:
        return np.asarray(self.base_.predict(X), dtype=float) + np.asarray(self.estimator_.predict(X), dtype=float)


#: Feature columns that change with the batch size; every other column describes the configuration.
BATCH_COLUMNS: frozenset[str] = frozenset({
    "batch_size", "log_batch_size", "log_flops_per_forward", "log_roofline_compute_ms",
    "log_roofline_memory_ms", "log_roofline_ms", "log_roofline_memory_mb", "log_flops_per_launch", "log_regime_ms",
})
CONFIG_CATEGORICAL: tuple[str, ...] = tuple(c for c in CATEGORICAL_FEATURES if c not in BATCH_COLUMNS)
CONFIG_NUMERIC: tuple[str, ...] = tuple(c for c in NUMERIC_FEATURES if c not in BATCH_COLUMNS)


def config_keys(X: pd.DataFrame) -> list[tuple[Any, ...]]:
    """One hashable key per row: its batch-independent features (NaN as None, floats rounded)."""
    columns = [X[c].to_numpy() for c in CONFIG_CATEGORICAL] + [
        np.round(X[c].to_numpy(dtype=float), 9) for c in CONFIG_NUMERIC]
    return [tuple(None if isinstance(v, float) and math.isnan(v) else v for v in row) for row in zip(*columns, strict=True)]


def fit_fixed_and_per_item(batch: np.ndarray, value: np.ndarray) -> tuple[float, float]:
    """(a, b) >= 0 with ``a + b * batch`` closest to `value` in relative error (NNLS)."""
    from scipy.optimize import nnls

    design = np.column_stack([1.0 / value, batch / value])
    (a, b), _ = nnls(design, np.ones(len(value)))
    return float(a), float(b)


class BatchCurveRegressor(RegressorMixin, BaseEstimator):
    """A measured configuration's own batch curve, `general` for everything else (log targets).

    Latency (and peak memory) of one configuration grows as ``a + b * batch``: a fixed cost per
    call (launches, weight traffic) plus a cost per item. Every configuration (rows equal in
    all batch-independent features, `config_keys`) measured at two or more batch sizes gets its
    own (a, b) by non-negative least squares on relative error, so a batch size it was not
    measured at is inter- or extrapolated along its own curve. A configuration measured at one
    batch size takes `general`'s curve shifted through its measurement; configurations never
    measured (other models, devices, precisions) get `general`'s prediction.
    """

    def __init__(self, general: Any = None, floor: float = 1e-3) -> None:
        self.general = general
        self.floor = floor

    def fit(self, X: pd.DataFrame, y: Any) -> BatchCurveRegressor:
        y = np.asarray(y, dtype=float)
        self.general_ = clone(self.general).fit(X, y)
        value = np.exp(y)
        batch = X["batch_size"].to_numpy(dtype=float)
        rows: dict[tuple[Any, ...], list[int]] = {}
        for i, key in enumerate(config_keys(X)):
            rows.setdefault(key, []).append(i)
        curves: dict[tuple[Any, ...], tuple[float, float]] = {}
        shifts: dict[tuple[Any, ...], float] = {}
        for key, idx in rows.items():
            if len(np.unique(batch[idx])) >= 2:
                a, b = fit_fixed_and_per_item(batch[idx], value[idx])
                scale = float(np.min(value[idx]))  # both terms stay positive
                curves[key] = (max(a, self.floor * scale), max(b, self.floor * scale / float(np.max(batch[idx]))))
            else:
                shifts[key] = float(np.mean(y[idx] - self.general_.predict(X.iloc[idx])))
        self.curves_, self.shifts_ = curves, shifts
        return self

    def predict(self, X: pd.DataFrame) -> np.ndarray:
        keys = config_keys(X)
        batch = X["batch_size"].to_numpy(dtype=float)
        out = np.full(len(X), np.nan)
        for i, key in enumerate(keys):
            curve = self.curves_.get(key)
            if curve is not None:
                out[i] = math.log(curve[0] + curve[1] * batch[i])
        rest = np.isnan(out)
        if rest.any():
            shift = np.array([self.shifts_.get(k, 0.0) for k, r in zip(keys, rest, strict=True) if r])
            out[rest] = np.asarray(self.general_.predict(X.loc[rest]), dtype=float) + shift
        return out


def build_estimator(params: Mapping[str, Any], *, offset_column: str, seed: int = 0) -> OffsetRegressor:
    """The unfitted log-target regressor that `params` (an Optuna trial's choice) describes."""
    kind = params["estimator"]
    onehot = OneHotEncoder(handle_unknown="ignore", sparse_output=False)
    if kind == "ridge":
        numeric = Pipeline([("impute", SimpleImputer(strategy="constant", fill_value=0.0, add_indicator=True,
                                                     keep_empty_features=True)),
                            ("scale", StandardScaler())])
        model: Any = Ridge(alpha=float(params.get("alpha", 1.0)))
    else:
        numeric = "passthrough"  # both tree models take NaN natively
        if kind == "hgb":
            # ... but HistGradientBoosting (scikit-learn 1.9) fails on a column that is NaN in
            # every row (audio length on a table without audio models): a value below any real
            # one stands for "missing" instead, in a bin of its own.
            numeric = SimpleImputer(strategy="constant", fill_value=-1e9, keep_empty_features=True)
            model = HistGradientBoostingRegressor(
                loss=str(params.get("loss", "squared_error")),
                learning_rate=float(params.get("learning_rate", 0.1)),
                max_iter=int(params.get("max_iter", 200)),
                max_leaf_nodes=int(params.get("max_leaf_nodes", 31)),
                min_samples_leaf=int(params.get("min_samples_leaf", 20)),
                l2_regularization=float(params.get("l2_regularization", 0.0)),
                early_stopping=False,
                random_state=seed,
            )
        elif kind == "rf":
            model = RandomForestRegressor(
                n_estimators=int(params.get("n_estimators", 100)),
                min_samples_leaf=int(params.get("rf_min_samples_leaf", 1)),
                max_features=float(params.get("max_features", 1.0)),
                n_jobs=1,
                random_state=seed,
            )
        else:
            raise ValueError(f"unknown estimator {kind!r}; choose one of {', '.join(ESTIMATORS)}")
    columns = ColumnTransformer(
        [("cat", onehot, list(CATEGORICAL_FEATURES)), ("num", numeric, list(NUMERIC_FEATURES))],
        verbose_feature_names_out=False,
    )
    pipeline = Pipeline([("features", columns), ("model", model)])
    offset = params.get("offset", "roofline")
    if offset == "regime":  # learn what the calibrated regime model leaves
        general: Any = ResidualRegressor(RegimeRegressor(), pipeline)
    else:
        general = OffsetRegressor(pipeline, offset=offset_column if offset == "roofline" else None)
    return OffsetRegressor(BatchCurveRegressor(general), offset=None) if params.get("batch_curves") else general


#: Offsets the search may choose: the roofline column, the calibrated regime model (latency only,
#: `RegimeRegressor`) or none.
OFFSETS: tuple[str, ...] = ("roofline", "regime", "none")


#: The first trial of each study: for latency the calibrated regime with a ridge over its
#: residual and each configuration's own batch curve (best or near it on the CPU snapshot and
#: the H100 records, issue 10); for other targets a ridge over the roofline.
STARTING_RECIPES: Mapping[str, Mapping[str, Any]] = {
    "latency": {"estimator": "ridge", "offset": "regime", "batch_curves": True, "alpha": 10.0},
    "other": {"estimator": "ridge", "offset": "roofline", "batch_curves": True, "alpha": 1.0},
}


def suggest(trial: Any, offsets: Sequence[str] = OFFSETS) -> dict[str, Any]:
    """The search space: estimator, offset and the estimator's hyperparameters."""
    params: dict[str, Any] = {"estimator": trial.suggest_categorical("estimator", list(ESTIMATORS))}
    params["offset"] = trial.suggest_categorical("offset", list(offsets))
    # A configuration's own measured batch curve where it has one (BatchCurveRegressor).
    params["batch_curves"] = trial.suggest_categorical("batch_curves", [True, False])
    if params["estimator"] == "hgb":
        # absolute_error: a robust loss, since contention on a shared machine only ever adds time.
        params["loss"] = trial.suggest_categorical("loss", ["squared_error", "absolute_error"])
        params["learning_rate"] = trial.suggest_float("learning_rate", 0.02, 0.3, log=True)
        params["max_iter"] = trial.suggest_int("max_iter", 100, 500, step=50)
        params["max_leaf_nodes"] = trial.suggest_int("max_leaf_nodes", 7, 63)
        params["min_samples_leaf"] = trial.suggest_int("min_samples_leaf", 2, 30)
        params["l2_regularization"] = trial.suggest_float("l2_regularization", 1e-4, 10.0, log=True)
    elif params["estimator"] == "rf":
        params["n_estimators"] = trial.suggest_int("n_estimators", 50, 250, step=50)
        params["rf_min_samples_leaf"] = trial.suggest_int("rf_min_samples_leaf", 1, 8)
        params["max_features"] = trial.suggest_float("max_features", 0.3, 1.0)
    else:
        params["alpha"] = trial.suggest_float("alpha", 1e-3, 100.0, log=True)
    return params


@contextlib.contextmanager
def one_thread() -> Iterator[None]:
    """Run OpenMP/BLAS code (HistGradientBoosting, Ridge) on one thread inside the block.

    The tables are small (hundreds to thousands of rows), so threads buy little, and on a shared
    2-core machine HistGradientBoosting's OpenMP threads stall: 11 CV folds took 109 s with the
    default threads and 5 s with one.
    """
    from threadpoolctl import threadpool_limits

    with threadpool_limits(limits=1):
        yield


# --- cross-validation -----------------------------------------------------------------------

@dataclass(frozen=True)
class Fold:
    """One train/test split of one scheme."""

    scheme: str
    index: int
    train: np.ndarray
    test: np.ndarray


def cv_folds(table: pd.DataFrame, *, max_folds: int = 5) -> list[Fold]:
    """Grouped folds: held-out batch sizes (one group per batch size) and held-out models.

    Deterministic (GroupKFold without shuffling), so two trainings on the same table use the very
    same folds. A scheme with fewer than two groups is skipped.
    """
    folds: list[Fold] = []
    groups = {
        "heldout_batch": table["batch_size"].astype(int).to_numpy(),
        "heldout_model": table["model"].astype(str).to_numpy(),
    }
    for scheme, group in groups.items():
        n_groups = len(np.unique(group))
        if n_groups < 2:
            continue
        # One fold per batch size (up to 8): each batch size is held out once on its own.
        limit = 8 if scheme == "heldout_batch" else max(2, max_folds)
        splitter = GroupKFold(n_splits=min(limit, n_groups))
        for i, (train_idx, test_idx) in enumerate(splitter.split(table, groups=group)):
            folds.append(Fold(scheme, i, train_idx, test_idx))
    if not folds:
        raise ValueError("cannot cross-validate: the data has a single model and a single batch size")
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
    errors: dict[str, list[np.ndarray]] = {}
    for step, fold in enumerate(folds):
        model = clone(estimator).fit(X.iloc[fold.train], y[fold.train])
        pred = np.asarray(model.predict(X.iloc[fold.test]), dtype=float)
        parts.append(pd.DataFrame({"scheme": fold.scheme, "fold": fold.index, "row": fold.test,
                                   "y_true": y[fold.test], "y_pred": pred}))
        errors.setdefault(fold.scheme, []).append(np.abs(pred - y[fold.test]))
        if report is not None:
            report(step, _combine(errors))
    return pd.concat(parts, ignore_index=True)


def _combine(errors: Mapping[str, Sequence[np.ndarray]]) -> float:
    """Mean over schemes of the mean absolute log error of that scheme's rows."""
    values = []
    for parts in errors.values():
        err = np.concatenate(list(parts))
        values.append(float(np.mean(err)) if np.all(np.isfinite(err)) else math.inf)
    return float(np.mean(values)) if values else math.inf


def score_oof(oof: pd.DataFrame) -> float:
    """The selection score: mean over schemes of mean |log(pred / measured)|; lower is better."""
    return _combine({scheme: [np.abs(g["y_pred"].to_numpy() - g["y_true"].to_numpy())]
                     for scheme, g in oof.groupby("scheme", sort=True)})


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


def conformal_band(residuals: np.ndarray, level: float = 0.9) -> tuple[float, float]:
    """Split-conformal (low, high) offsets in log units for a nominal `level` interval.

    `residuals` are out-of-fold ``log(measured) - log(predicted)`` of rows whose group (model)
    the predictor had not seen; each tail gets ``(1 - level) / 2`` with the finite-sample
    correction ``ceil((n + 1) q) / n``, so ``pred * exp(low) .. pred * exp(high)`` covers at
    least `level` of exchangeable new cases. (0, 0) when there are no residuals.
    """
    r = np.sort(np.asarray(residuals, dtype=float)[np.isfinite(residuals)])
    n = len(r)
    if n == 0:
        return 0.0, 0.0
    tail = (1.0 - level) / 2.0
    hi_rank = min(n, math.ceil((n + 1) * (1.0 - tail)))
    lo_rank = max(1, math.floor((n + 1) * tail))
    return float(min(r[lo_rank - 1], 0.0)), float(max(r[hi_rank - 1], 0.0))


def interval_residuals(oof: pd.DataFrame) -> np.ndarray:
    """Log residuals (measured - predicted) of the held-out-model folds, else of all folds."""
    part = oof[oof["scheme"] == "heldout_model"]
    part = part if len(part) else oof
    return (part["y_true"] - part["y_pred"]).to_numpy(dtype=float)


def scheme_metrics(oof: pd.DataFrame) -> dict[str, dict[str, float]]:
    """`error_metrics` per scheme of an out-of-fold frame."""
    return {scheme: error_metrics(g["y_true"].to_numpy(), g["y_pred"].to_numpy())
            for scheme, g in oof.groupby("scheme", sort=True)}


# --- the study ------------------------------------------------------------------------------

@dataclass(frozen=True)
class StudyResult:
    """Best recipe of one target's study, its out-of-fold predictions and the trials."""

    params: dict[str, Any]
    score: float
    oof: pd.DataFrame
    trials: pd.DataFrame


def run_study(
    X: pd.DataFrame,
    y: np.ndarray,
    folds: Sequence[Fold],
    *,
    offset_column: str,
    trials: int,
    seed: int,
    progress: bool = False,
    name: str = "hwsel",
) -> StudyResult:
    """A seeded TPE study over `suggest`'s space, pruning across folds (MedianPruner).

    Trial 0 is the target's `STARTING_RECIPES` entry; the regime offset is offered for latency
    (`offset_column` is latency's roofline column) only.
    """
    import optuna

    latency = offset_column == LEARNED["latency"][1]
    offsets = OFFSETS if latency else ("roofline", "none")

    def objective(trial: optuna.Trial) -> float:
        params = suggest(trial, offsets)
        estimator = build_estimator(params, offset_column=offset_column, seed=seed)

        def report(step: int, value: float) -> None:
            trial.report(value, step)
            if trial.should_prune():
                raise optuna.TrialPruned()

        return score_oof(out_of_fold(estimator, X, y, folds, report=report))

    # Optuna logs one INFO line per trial; keep training quiet, through Optuna's own switch.
    previous = optuna.logging.get_verbosity()
    optuna.logging.set_verbosity(optuna.logging.WARNING)
    try:
        sampler = optuna.samplers.TPESampler(seed=seed, n_startup_trials=min(10, max(1, trials // 3)))
        pruner = optuna.pruners.MedianPruner(n_startup_trials=5, n_warmup_steps=max(1, len(folds) // 3))
        study = optuna.create_study(direction="minimize", sampler=sampler, pruner=pruner, study_name=name)
        # The first trial is a recipe that extrapolates well, so a short study never ends up
        # with only the random start-up draws to choose from.
        study.enqueue_trial(dict(STARTING_RECIPES["latency" if latency else "other"]))
        with one_thread():
            study.optimize(objective, n_trials=trials, show_progress_bar=progress, gc_after_trial=False)
    finally:
        optuna.logging.set_verbosity(previous)
    complete = [t for t in study.trials if t.state == optuna.trial.TrialState.COMPLETE]
    if not complete:
        raise RuntimeError(f"study {name!r}: no trial completed out of {len(study.trials)}")
    best = min(complete, key=lambda t: (t.value, t.number))
    params = dict(best.params)
    estimator = build_estimator(params, offset_column=offset_column, seed=seed)
    with one_thread():
        oof = out_of_fold(estimator, X, y, folds)
    frame = study.trials_dataframe(attrs=("number", "value", "state", "params", "duration"))
    return StudyResult(params, score_oof(oof), oof, frame)


# --- results --------------------------------------------------------------------------------

@dataclass(frozen=True)
class TargetResult:
    """What training did for one target."""

    target: str
    model_name: str
    version: str
    score: float
    cv: Mapping[str, Mapping[str, float]]
    params: Mapping[str, Any]
    alias_moved: bool
    champion_before: str | None
    champion_score: float | None
    reason: str


@dataclass(frozen=True)
class TrainResult:
    """One `train()` call: the training run, the snapshot and what happened per target."""

    run_id: str
    tracking_uri: str
    snapshot_path: Path
    data_digest: str
    n_rows: int
    targets: Mapping[str, TargetResult] = field(default_factory=dict)
    #: "hardware / device name" -> training rows (what the models have seen of each device)
    rows_by_device: Mapping[str, int] = field(default_factory=dict)

    @property
    def versions(self) -> dict[str, str]:
        """target -> registered version."""
        return {t: r.version for t, r in self.targets.items()}

    @property
    def alias_moved(self) -> dict[str, bool]:
        """target -> whether @champion now points at the new version."""
        return {t: r.alias_moved for t, r in self.targets.items()}

    @property
    def cv(self) -> dict[str, Mapping[str, Mapping[str, float]]]:
        """target -> scheme -> metrics."""
        return {t: r.cv for t, r in self.targets.items()}


# --- train ----------------------------------------------------------------------------------

def _default_snapshot_dir(tracking_uri: str) -> Path:
    if tracking_uri.startswith("sqlite:///"):
        db = Path(tracking_uri[len("sqlite:///"):].split("?", 1)[0])
        return db.resolve().parent / "hwsel-snapshots"
    return Path("mlruns") / "hwsel-snapshots"


def _flatten(prefix: str, metrics: Mapping[str, Mapping[str, float]]) -> dict[str, float]:
    return {f"{prefix}.{scheme}.{name}": float(value) for scheme, values in metrics.items()
            for name, value in values.items() if math.isfinite(float(value))}


def train(
    source: str | os.PathLike[str] | Sequence[str | os.PathLike[str]] | None = None,
    *,
    tracking_uri: str | None = None,
    trials: int = 30,
    seed: int = 0,
    experiment: str = DEFAULT_EXPERIMENT,
    progress: bool = True,
    snapshot_dir: str | os.PathLike[str] | None = None,
) -> TrainResult:
    """Train, evaluate and register the latency, throughput and memory predictors.

    Args:
        source: where the runs are (see `hwsel.data.load_runs`), or several places (trains on
            their union, e.g. the committed CPU snapshot and a GPU host's spool file); None: the
            tracking store.
        tracking_uri: MLflow store for the training run and the registry; None:
            ``$MLFLOW_TRACKING_URI``, else ``sqlite:///mlruns/mlflow.db``.
        trials: Optuna trials per learned target (latency, memory).
        seed: seeds the TPE sampler and the estimators; same data + same seed = same models.
        experiment: MLflow experiment holding the benchmark runs (for an MLflow source).
        progress: show Optuna's progress bar.
        snapshot_dir: where the training-table Parquet goes (default: next to the SQLite store,
            else ``mlruns/hwsel-snapshots``); it is also logged as an artifact of the run.
    """

    from hwsel._quiet import quiet_mlflow
    from hwsel.data import default_source, describe_sources, source_list

    if trials < 1:
        raise ValueError(f"trials must be >= 1, got {trials}")
    uri = tracking_uri or default_source()
    sources = source_list(source) or [uri]
    where = describe_sources(sources)
    with quiet_mlflow():
        runs = load_runs(sources[0] if len(sources) == 1 else sources, experiment=experiment)
    table = training_table(runs)
    if table["model"].nunique() < 2 and table["batch_size"].nunique() < 2:
        raise ValueError(f"{where}: need runs of at least two models or two batch sizes, "
                         f"found {len(table)} usable rows")
    table = table.sort_values(["model", "backend", "hardware", "precision", "batch_size", "record_id"],
                              kind="mergesort").reset_index(drop=True)
    digest = frame_digest(table.drop(columns=[c for c in ("extra", "cpu_affinity") if c in table.columns]))
    snap_dir = Path(snapshot_dir) if snapshot_dir is not None else _default_snapshot_dir(uri)
    snap_path = snapshot(table, snap_dir / f"training-{digest[:16]}.parquet")
    X = feature_frame(table)
    with quiet_mlflow():
        return _train_and_register(table, X, digest, snap_path, uri=uri, where=where, experiment=experiment,
                                   trials=trials, seed=seed, progress=progress)


def _train_and_register(table: pd.DataFrame, X: pd.DataFrame, digest: str, snap_path: Path, *, uri: str, where: str,
                        experiment: str, trials: int, seed: int, progress: bool) -> TrainResult:
    from mlflow.entities import Metric, Param, RunTag
    from mlflow.tracking import MlflowClient

    from hwsel import registry

    client = MlflowClient(tracking_uri=uri)
    exp_id = registry.ensure_experiment(client, uri, TRAINING_EXPERIMENT)
    stamp = _dt.datetime.now(_dt.timezone.utc).strftime("%Y-%m-%dT%H:%M:%SZ")
    run = client.create_run(exp_id, run_name=f"train {stamp}", tags={"hwsel.kind": "training"})
    run_id = run.info.run_id
    status = "FAILED"
    results: dict[str, TargetResult] = {}
    try:
        import sklearn

        client.log_batch(run_id, params=[
            Param("source", where[:500]),
            Param("experiment", experiment),
            Param("trials", str(trials)),
            Param("seed", str(seed)),
            Param("n_rows", str(len(table))),
            Param("n_models", str(table["model"].nunique())),
            Param("data_sha256", digest),
            Param("sklearn_version", sklearn.__version__),
            Param("feature_columns", ",".join(FEATURE_COLUMNS)[:6000]),
        ], tags=[RunTag("hwsel.data_sha256", digest)])
        client.log_artifact(run_id, str(snap_path), "data")
        snapshot_uri = f"runs:/{run_id}/data/{snap_path.name}"
        folds = cv_folds(table)
        now = int(time.time() * 1000)

        fitted: dict[str, Any] = {}
        for target, (column, offset_col) in LEARNED.items():
            y_all = np.log(table[column].to_numpy(dtype=float))
            rows = np.isfinite(y_all)
            sub = table.loc[rows].reset_index(drop=True)
            Xs, ys = X.loc[rows].reset_index(drop=True), y_all[rows]
            target_folds = folds if rows.all() else cv_folds(sub)
            study = run_study(Xs, ys, target_folds, offset_column=offset_col, trials=trials, seed=seed,
                              progress=progress, name=f"hwsel-{target}")
            with one_thread():
                model = build_estimator(study.params, offset_column=offset_col, seed=seed).fit(Xs, ys)
            fitted[target] = (model, study, sub, Xs, ys, target_folds)
            _log_study(client, run_id, target, study, sub, now)
            if target == "latency":
                tp_oof = study.oof.copy()
                log_items = _LOG_1000 + Xs["log_batch_size"].to_numpy()[tp_oof["row"].to_numpy()]
                tp_oof["y_true"] = log_items - tp_oof["y_true"]
                tp_oof["y_pred"] = log_items - tp_oof["y_pred"]
                tp_study = dataclasses.replace(study, oof=tp_oof)
                fitted["throughput"] = (ThroughputFromLatency.from_fitted(model), tp_study, sub, Xs,
                                        _LOG_1000 + Xs["log_batch_size"].to_numpy() - ys, target_folds)
                _log_roofline_baseline(client, run_id, sub, Xs, study.oof, now)

        for target in registry.TARGETS:
            model, study, sub, Xs, ys, target_folds = fitted[target]
            cv = scheme_metrics(study.oof)
            # The interval: a nominal 90% split-conformal band from the residuals on models the
            # fold had not seen (what a new model's answer risks); stored under the
            # residual_q10/q90 tag names that `hwsel.registry.ChampionModel.interval` reads.
            q10, q90 = conformal_band(interval_residuals(study.oof), INTERVAL_LEVEL)
            metrics = {**_flatten(target, cv), f"{target}.score": study.score,
                       f"{target}.residual_q10": q10, f"{target}.residual_q90": q90}
            client.log_batch(run_id, metrics=[Metric(k, v, now, 0) for k, v in metrics.items()])
            version = registry.register(
                client, run_id, target, model, Xs,
                tags={"hwsel.data_sha256": digest, "hwsel.snapshot": snapshot_uri,
                      "hwsel.training_run_id": run_id, "hwsel.score": repr(study.score),
                      "hwsel.residual_q10": repr(q10), "hwsel.residual_q90": repr(q90),
                      "hwsel.params": json.dumps(study.params, sort_keys=True),
                      "hwsel.n_rows": str(len(sub))},
            )
            if target == "throughput":
                # Throughput is the latency model seen through batch / latency: its champion
                # follows latency's, so the two champions always agree with each other.
                lat = results["latency"]
                current = registry.champion_version(client, target)
                moved, before = lat.alias_moved or current is None, (
                    str(current.version) if current is not None else None)
                champ_score = lat.champion_score
                reason = f"follows hwsel-latency (throughput derives from it): {lat.reason}"
                if current is None:
                    reason = "no champion yet; " + reason
            else:
                moved, before, champ_score, reason = _decide(client, target, model, study.score, digest,
                                                             Xs, ys, target_folds)
            if moved:
                client.set_registered_model_alias(registry.MODEL_NAMES[target], registry.ALIAS, version)
            client.set_model_version_tag(registry.MODEL_NAMES[target], version, "hwsel.champion_decision",
                                         reason[:5000])
            client.log_batch(run_id, metrics=[Metric(f"{target}.alias_moved", float(moved), now, 0)]
                             + ([Metric(f"{target}.champion_score", champ_score, now, 0)]
                                if champ_score is not None and math.isfinite(champ_score) else []),
                             tags=[RunTag(f"hwsel.{target}.version", version),
                                   RunTag(f"hwsel.{target}.decision", reason[:5000])])
            results[target] = TargetResult(target, registry.MODEL_NAMES[target], version, study.score, cv,
                                           dict(study.params), moved, before, champ_score, reason)
        status = "FINISHED"
    finally:
        client.set_terminated(run_id, status)
    return TrainResult(run_id, uri, snap_path, digest, len(table), results, rows_by_device(table))


def rows_by_device(table: pd.DataFrame) -> dict[str, int]:
    """"hardware / device name" -> rows of a training table (device "unnamed" where records name none)."""
    hardware = table["hardware"].astype(object).fillna("?").astype(str)
    device = table["device_name"].astype(object).where(table["device_name"].notna() & (table["device_name"] != ""),
                                                       "unnamed").astype(str)
    counts = (hardware + " / " + device).value_counts()
    return {str(k): int(v) for k, v in sorted(counts.items())}


def _log_study(client: Any, run_id: str, target: str, study: StudyResult, sub: pd.DataFrame, now: int) -> None:
    from mlflow.entities import Metric, Param

    values = study.trials["value"].to_numpy(dtype=float)
    client.log_batch(run_id, metrics=[Metric(f"{target}.trial_value", float(v), now, int(i))
                                      for i, v in enumerate(values) if math.isfinite(v)],
                     params=[Param(f"{target}.best.{k}", str(v)[:500]) for k, v in study.params.items()])
    with tempfile.TemporaryDirectory(prefix="hwsel-train-") as tmp:
        trials_path = Path(tmp) / f"{target}_trials.csv"
        study.trials.to_csv(trials_path, index=False)
        oof = study.oof.copy()
        rows = oof["row"].to_numpy()
        for col in ("model", "backend", "hardware", "precision", "batch_size"):
            oof[col] = sub[col].to_numpy()[rows]
        oof_path = Path(tmp) / f"{target}_oof.parquet"
        oof.to_parquet(oof_path, index=False)
        client.log_artifact(run_id, str(trials_path), "study")
        client.log_artifact(run_id, str(oof_path), "evaluation")


def _log_roofline_baseline(client: Any, run_id: str, sub: pd.DataFrame, Xs: pd.DataFrame,
                           oof: pd.DataFrame, now: int) -> None:
    from mlflow.entities import Metric

    rows = oof["row"].to_numpy()
    base = oof.assign(y_pred=Xs["log_roofline_ms"].to_numpy()[rows])
    metrics = _flatten("roofline_latency", scheme_metrics(base))
    client.log_batch(run_id, metrics=[Metric(k, v, now, 0) for k, v in metrics.items()])


def _decide(
    client: Any, target: str, model: Any, score: float, digest: str, X: pd.DataFrame, y: np.ndarray,
    folds: Sequence[Fold],
) -> tuple[bool, str | None, float | None, str]:
    """(move alias?, champion version before, its score on this data, why)."""
    from hwsel import registry

    current = registry.champion_version(client, target)
    if current is None:
        return True, None, None, "no champion yet"
    current_version = str(current.version)
    try:
        recipe = clone(registry.load_version_model(client, target, current_version))
    except Exception as exc:  # an unreadable or incompatible champion cannot defend its title
        return True, current_version, None, f"champion v{current_version} unusable ({type(exc).__name__}: {exc})"
    try:
        with one_thread():
            champ_score = score_oof(out_of_fold(recipe, X, y, folds))
    except Exception as exc:
        return True, current_version, None, (
            f"champion v{current_version} cannot be evaluated on this data ({type(exc).__name__}: {exc})")
    if not math.isfinite(champ_score):
        return True, current_version, champ_score, f"champion v{current_version} scores {champ_score}"
    if score < champ_score - SCORE_TOLERANCE:
        return True, current_version, champ_score, (
            f"new score {score:.6f} < champion v{current_version} {champ_score:.6f} on the same folds")
    same_recipe = repr(recipe.get_params(deep=True)) == repr(clone(model).get_params(deep=True))
    old_digest = (current.tags or {}).get("hwsel.data_sha256")
    if abs(score - champ_score) <= SCORE_TOLERANCE and same_recipe and old_digest and old_digest != digest:
        return True, current_version, champ_score, (
            f"same recipe and score as champion v{current_version}, trained on newer data")
    return False, current_version, champ_score, (
        f"new score {score:.6f} does not beat champion v{current_version} {champ_score:.6f} on the same folds")


__all__ = [
    "ESTIMATORS",
    "SCHEMES",
    "STARTING_RECIPES",
    "TRAINING_EXPERIMENT",
    "Fold",
    "OffsetRegressor",
    "StudyResult",
    "TargetResult",
    "ThroughputFromLatency",
    "TrainResult",
    "INTERVAL_LEVEL",
    "OFFSETS",
    "REGIME_POOLS",
    "REGIME_TERMS",
    "RegimeRegressor",
    "ResidualRegressor",
    "build_estimator",
    "conformal_band",
    "interval_residuals",
    "cv_folds",
    "error_metrics",
    "one_thread",
    "out_of_fold",
    "rows_by_device",
    "run_study",
    "scheme_metrics",
    "score_oof",
    "suggest",
    "train",
]
