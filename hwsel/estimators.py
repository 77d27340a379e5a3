"""The regressors hwsel trains: scikit-learn estimators over `hwsel.features` columns, log targets;
`build_estimator` turns a recipe an Optuna trial draws (`suggest`) into an unfitted one."""

from __future__ import annotations

import contextlib
import math
from collections.abc import Iterator, Mapping, Sequence
from typing import Any

import numpy as np
import pandas as pd
from sklearn.base import BaseEstimator, RegressorMixin, clone
from sklearn.compose import ColumnTransformer
from sklearn.ensemble import HistGradientBoostingRegressor, RandomForestRegressor
from sklearn.impute import SimpleImputer
from sklearn.linear_model import Ridge
from sklearn.pipeline import Pipeline
from sklearn.preprocessing import OneHotEncoder, StandardScaler

from hwsel.features import CATEGORICAL_FEATURES, NUMERIC_FEATURES

ESTIMATORS: tuple[str, ...] = ("hgb", "rf", "ridge")
_LOG_1000 = math.log(1000.0)


# --- estimators (scikit-learn rules: __init__ stores, fit returns self, fitted state ends in _) ---

class OffsetRegressor(RegressorMixin, BaseEstimator):
    """Fits `estimator` to ``y - X[offset]`` and adds the offset back when predicting (``offset=None``:
    none); on the roofline column it learns an efficiency, which varies far less across model
    sizes than latency does."""

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
    """Log throughput (items/s) from a log-latency (ms) regressor: log(1000 * batch) - log latency;
    `from_fitted` wraps a fitted latency model, so ``throughput == batch / latency`` exactly."""

    def __init__(self, latency: Any = None) -> None:
        self.latency = latency

    @staticmethod
    def log_items(X: pd.DataFrame) -> np.ndarray:
        """log(1000 * batch size) of each row: log throughput plus log latency (ms)."""
        return _LOG_1000 + np.asarray(X["log_batch_size"], dtype=float)

    def fit(self, X: pd.DataFrame, y: Any) -> ThroughputFromLatency:
        self.latency_ = clone(self.latency).fit(X, self.log_items(X) - np.asarray(y, dtype=float))
        return self

    def predict(self, X: pd.DataFrame) -> np.ndarray:
        return self.log_items(X) - np.asarray(self.latency_.predict(X), dtype=float)

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
    ("device", "backend", "precision", "mode"), ("device", "backend", "mode"),
    ("device_kind", "backend", "precision", "mode"), ("device_kind", "backend", "mode"), ("device_kind", "mode"),
    ("mode",), (),
)


class RegimeRegressor(RegressorMixin, BaseEstimator):
    """latency ~ a * launch floor + b * compute time + c * memory time (`REGIME_TERMS`), (a, b, c)
    >= 0 per pool of rows: a configuration takes the coefficients of the most specific pool
    (`REGIME_POOLS`) with at least `min_rows` rows from at least `min_models` models. Log targets."""

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
            fitted = {}
            for key, idx in _rows_by(self._keys(X, pool)).items():
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


def _rows_by(keys: Sequence[tuple[Any, ...]]) -> dict[tuple[Any, ...], list[int]]:
    """key -> the indexes of the rows that have it."""
    rows: dict[tuple[Any, ...], list[int]] = {}
    for i, key in enumerate(keys):
        rows.setdefault(key, []).append(i)
    return rows


class BatchCurveRegressor(RegressorMixin, BaseEstimator):
    """A measured configuration's own batch curve, `general` for everything else (log targets).

    A configuration (`config_keys`) measured at two or more batch sizes gets its own ``a + b *
    batch`` (a, b >= 0); one measured at one batch size takes `general`'s curve shifted through
    its measurement; others get `general`'s prediction.
    """

    def __init__(self, general: Any = None, floor: float = 1e-3) -> None:
        self.general = general
        self.floor = floor

    def fit(self, X: pd.DataFrame, y: Any) -> BatchCurveRegressor:
        from scipy.optimize import nnls

        y = np.asarray(y, dtype=float)
        self.general_ = clone(self.general).fit(X, y)
        value = np.exp(y)
        batch = X["batch_size"].to_numpy(dtype=float)
        curves: dict[tuple[Any, ...], tuple[float, float]] = {}
        shifts: dict[tuple[Any, ...], float] = {}
        for key, idx in _rows_by(config_keys(X)).items():
            if len(np.unique(batch[idx])) >= 2:
                # (a, b) >= 0 with a + b * batch closest to the values in relative error
                (a, b), _ = nnls(np.column_stack([1.0 / value[idx], batch[idx] / value[idx]]), np.ones(len(idx)))
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


#: recipe key -> the estimator's keyword argument, per estimator (`suggest` draws them).
_HYPERPARAMETERS: Mapping[str, Mapping[str, str]] = {
    "hgb": {k: k for k in ("loss", "learning_rate", "max_iter", "max_leaf_nodes", "min_samples_leaf",
                           "l2_regularization")},
    "rf": {"n_estimators": "n_estimators", "rf_min_samples_leaf": "min_samples_leaf", "max_features": "max_features"},
    "ridge": {"alpha": "alpha"},
}


def build_estimator(params: Mapping[str, Any], *, offset_column: str, seed: int = 0) -> BaseEstimator:
    """The unfitted log-target regressor that `params` (an Optuna trial's choice) describes."""
    kind = params["estimator"]
    if kind not in ESTIMATORS:
        raise ValueError(f"unknown estimator {kind!r}; choose one of {', '.join(ESTIMATORS)}")
    # the recipe's hyperparameters are the estimator's own keyword arguments (rf's leaf size aside)
    given = {name: params[key] for key, name in _HYPERPARAMETERS[kind].items() if key in params}
    numeric: Any = "passthrough"  # both tree models take NaN natively
    if kind == "ridge":
        numeric = Pipeline([("impute", SimpleImputer(strategy="constant", fill_value=0.0, add_indicator=True,
                                                     keep_empty_features=True)),
                            ("scale", StandardScaler())])
        model: Any = Ridge(**given)
    elif kind == "hgb":
        # ... but HistGradientBoosting (scikit-learn 1.9) fails on a column that is NaN in every
        # row (audio length on a table without audio models): a value below any real one stands
        # for "missing" instead, in a bin of its own.
        numeric = SimpleImputer(strategy="constant", fill_value=-1e9, keep_empty_features=True)
        model = HistGradientBoostingRegressor(**{"max_iter": 200, **given}, early_stopping=False, random_state=seed)
    else:
        model = RandomForestRegressor(**given, n_jobs=1, random_state=seed)
    onehot = OneHotEncoder(handle_unknown="ignore", sparse_output=False)
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
    return BatchCurveRegressor(general) if params.get("batch_curves") else general


#: Offsets the search may choose: the roofline column, the calibrated regime model (latency only,
#: `RegimeRegressor`) or none.
OFFSETS: tuple[str, ...] = ("roofline", "regime", "none")
#: Latency always learns on top of the calibrated regime: on the data it scores as the roofline
#: offset does, but only the regime carries over to a device the data never held.
LATENCY_OFFSETS: tuple[str, ...] = ("regime",)


#: The first trial of each study: for latency the calibrated regime with a ridge over its
#: residual and each configuration's own batch curve (best or near it on the CPU snapshot and
#: the H100 records); for other targets a ridge over the roofline.
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
    """Run OpenMP/BLAS code (HistGradientBoosting, Ridge) on one thread inside the block: the
    tables are small, and on a shared 2-core machine HistGradientBoosting's OpenMP threads stall."""
    from threadpoolctl import threadpool_limits

    with threadpool_limits(limits=1):
        yield


__all__ = ["BATCH_COLUMNS", "BatchCurveRegressor", "ESTIMATORS", "LATENCY_OFFSETS", "OFFSETS",
           "OffsetRegressor", "REGIME_POOLS", "REGIME_TERMS", "RegimeRegressor", "ResidualRegressor",
           "STARTING_RECIPES", "ThroughputFromLatency", "build_estimator", "config_keys", "one_thread",
           "suggest"]
