"""The MLflow Model Registry side: register predictors, find and load the champions.

One registered model per target (``hwsel-latency``, ``hwsel-throughput``, ``hwsel-memory``); each
version predicts the log of its target from `hwsel.features.FEATURE_COLUMNS` (`ChampionModel`
answers in natural units) and carries tags saying what it learned from (``hwsel.training_run_id``,
``hwsel.data_sha256``, ``hwsel.snapshot``, ``hwsel.params``, ``hwsel.score``,
``hwsel.residual_q10``/``q90`` and, for latency, ``hwsel.intervals``). No fluent run is started
(mlflow #159, #9235)."""

from __future__ import annotations

import contextlib
import functools
import math
import tempfile
import time
import warnings
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, TypeVar

import numpy as np
import pandas as pd

from hwsel._reach import quiet_mlflow
from pytest_hwbench.sinks import redact_uri
from pytest_hwbench.sinks.mlflow_uri import ping, sqlite_path

#: What the registry holds a champion for: the metrics hwsel predicts.
PREDICTED_METRICS: tuple[str, ...] = ("latency", "throughput", "memory")
#: The registered model name of each metric's champion.
MODEL_NAMES: dict[str, str] = {metric: f"hwsel-{metric}" for metric in PREDICTED_METRICS}
ALIAS = "champion"
UNITS: dict[str, str] = {"latency": "ms", "throughput": "items/s", "memory": "MiB"}

#: Serialization: cloudpickle, not MLflow's default skops, which would need every hwsel class
#: listed as trusted and imports torch on save (FACTS.md: 15 s for the first log_model).
SERIALIZATION = "cloudpickle"

T = TypeVar("T")


def ensure_experiment(client: Any, tracking_uri: str, name: str) -> str:
    """The id of experiment `name`, created if missing (artifacts next to a SQLite store)."""
    from mlflow.exceptions import MlflowException

    found = client.get_experiment_by_name(name)
    if found is not None:
        if found.lifecycle_stage == "deleted":
            raise RuntimeError(f"MLflow experiment {name!r} at {redact_uri(str(tracking_uri))} is deleted; restore it "
                               f"(mlflow experiments restore --experiment-id {found.experiment_id})")
        return str(found.experiment_id)
    location = (sqlite_path(tracking_uri).resolve().parent / "artifacts").as_uri() \
        if tracking_uri.startswith("sqlite:///") else None
    try:
        return str(client.create_experiment(name, artifact_location=location))
    except MlflowException:
        again = client.get_experiment_by_name(name)  # created meanwhile by another process
        if again is None:
            raise
        return str(again.experiment_id)


def register(client: Any, run_id: str, target: str, model: Any, X: pd.DataFrame,
             tags: dict[str, str] | None = None) -> str:
    """Log `model` under ``<target>/model`` of `run_id` and register it; returns the version."""
    import cloudpickle
    import mlflow.sklearn
    import sklearn
    from mlflow.exceptions import MlflowException
    from mlflow.models import infer_signature

    name = MODEL_NAMES[target]
    sample = X.head(50)
    signature = infer_signature(sample, np.asarray(model.predict(sample), dtype=float))
    with tempfile.TemporaryDirectory(prefix="hwsel-model-") as tmp, quiet_mlflow():
        path = Path(tmp) / "model"
        mlflow.sklearn.save_model(
            model, str(path), serialization_format=SERIALIZATION, signature=signature,
            # explicit: MLflow's inference of them takes ~7 s (FACTS.md); the pipelines hold hwsel classes
            pip_requirements=[f"scikit-learn=={sklearn.__version__}", f"numpy=={np.__version__}",
                              f"pandas=={pd.__version__}", f"cloudpickle=={cloudpickle.__version__}", "pytest-hwbench"],
            metadata={"target": target, "units": UNITS[target], "predicts": f"log({UNITS[target]})"},
        )
        client.log_artifacts(run_id, str(path), f"{target}/model")
    with contextlib.suppress(MlflowException):  # already registered
        client.create_registered_model(
            name, description=f"hwsel {target} predictor: log({UNITS[target]}) from hwsel.features.FEATURE_COLUMNS")
    artifact_uri = client.get_run(run_id).info.artifact_uri
    version = client.create_model_version(name, f"{artifact_uri}/{target}/model", run_id=run_id,
                                          tags=dict(tags or {}))
    return str(version.version)


#: The registry's promotion lock: a registered model that exists while one training run moves
#: aliases (creating one is atomic in every MLflow store, a SQLite file and a server alike).
LOCK_MODEL = "hwsel-promotion-lock"
#: How long a training run waits for the lock (moving aliases takes a few calls, well under 1 s).
LOCK_WAIT_S = 90.0
#: A lock older than this is left over by a run that died while holding it, and is taken over.
LOCK_STALE_S = 60.0


@contextlib.contextmanager
def promotion_lock(client: Any, owner: str, *, wait_s: float = LOCK_WAIT_S) -> Iterator[None]:
    """Hold the registry's promotion lock (`LOCK_MODEL`) for the block; `owner` names the holder.

    Waits up to `wait_s` for another holder, takes over a lock older than `LOCK_STALE_S`.

    Raises:
        TimeoutError: the lock stayed held for `wait_s`; the message names its holder.
    """
    from mlflow.exceptions import MlflowException

    deadline = time.monotonic() + wait_s
    while True:
        try:
            client.create_registered_model(
                LOCK_MODEL, tags={"hwsel.owner": owner, "hwsel.since": repr(time.time())},
                description="held while an hwsel training run moves @champion aliases; delete it only if no "
                            "`hwsel train` is running")
            break
        except MlflowException as exc:
            if exc.error_code != "RESOURCE_ALREADY_EXISTS":
                raise
        holder, since = _lock_holder(client)
        if holder is not None and time.time() - since > LOCK_STALE_S:
            again, _ = _lock_holder(client)
            if again == holder:  # still the stale one: take it over
                with contextlib.suppress(MlflowException):
                    client.delete_registered_model(LOCK_MODEL)
            continue
        if time.monotonic() > deadline:
            raise TimeoutError(f"the registry's promotion lock {LOCK_MODEL!r} is held by {holder or 'another run'} "
                               f"for {time.time() - since:.0f} s; if no `hwsel train` runs on this store, delete "
                               f"the registered model {LOCK_MODEL!r}")
        time.sleep(0.2)
    try:
        yield
    finally:
        with contextlib.suppress(MlflowException):
            client.delete_registered_model(LOCK_MODEL)


def _lock_holder(client: Any) -> tuple[str | None, float]:
    """(owner, since) of the promotion lock; (None, now) when it is gone."""
    from mlflow.exceptions import MlflowException

    try:
        model = client.get_registered_model(LOCK_MODEL)
    except MlflowException:
        return None, time.time()
    tags = dict(model.tags or {})
    since = _float(tags.get("hwsel.since"), (model.creation_timestamp or 0) / 1000.0)
    return tags.get("hwsel.owner") or "another run", since


def champion_version(client: Any, target: str) -> Any | None:
    """The ModelVersion behind ``@champion`` of `target`, or None if there is none."""
    from mlflow.exceptions import MlflowException

    try:
        return client.get_model_version_by_alias(MODEL_NAMES[target], ALIAS)
    except MlflowException:
        return None


def read_artifact(artifact_uri: str, tracking_uri: str | None, read: Callable[[str], T]) -> T:
    """`read` of the local path of the artifact at `artifact_uri`, downloaded to a temporary folder."""
    import mlflow.artifacts

    with tempfile.TemporaryDirectory(prefix="hwsel-") as tmp, quiet_mlflow():
        return read(mlflow.artifacts.download_artifacts(artifact_uri=artifact_uri, dst_path=tmp,
                                                        tracking_uri=tracking_uri))


@functools.lru_cache(maxsize=32)
def load_model(tracking_uri: str, source: str) -> Any:
    """The fitted pipeline (predicts log units) at a model version's `source` (its artifact URI),
    cached per (store, source)."""
    import mlflow.sklearn

    return read_artifact(source, tracking_uri, mlflow.sklearn.load_model)


def _float(text: Any, default: float) -> float:
    try:
        value = float(text)
    except (TypeError, ValueError):
        return default
    return value if math.isfinite(value) else default


@dataclass(frozen=True)
class ChampionModel:
    """The registered version behind ``@champion`` for one target, loaded.

    `predict` and `interval` take a frame of `hwsel.features.FEATURE_COLUMNS` (from
    `feature_frame` or `query_frame`) and return natural units: ms, items/s or MiB.
    """

    target: str
    name: str
    version: str
    run_id: str
    metrics: dict[str, float]
    tags: dict[str, str]
    model: Any = field(repr=False, compare=False)
    residual_q10: float = 0.0
    residual_q90: float = 0.0
    #: `hwsel.intervals.AdaptiveIntervals` stored with the version (None: the fixed band)
    intervals: Any = field(default=None, repr=False, compare=False)

    def predict_log(self, features: pd.DataFrame) -> np.ndarray:
        """Natural log of the prediction."""
        from hwsel.features import FEATURE_COLUMNS

        missing = [c for c in FEATURE_COLUMNS if c not in features.columns]
        if missing:
            raise ValueError(f"{self.name} v{self.version}: features lack columns {missing}; "
                             "build them with hwsel.features.feature_frame or query_frame")
        return np.asarray(self.model.predict(features.loc[:, list(FEATURE_COLUMNS)]), dtype=float)

    def predict(self, features: pd.DataFrame) -> np.ndarray:
        """Predictions in natural units (ms, items/s, MiB)."""
        return np.exp(self.predict_log(features))

    def log_offsets(self, features: pd.DataFrame) -> tuple[np.ndarray, np.ndarray]:
        """(low, high) log offsets of the nominal 90% interval around `predict_log`: the adaptive
        intervals' (each row's own width) when the version has them, else the fixed band."""
        if self.intervals is not None:
            return self.intervals.offsets(features)
        n = len(features)
        return np.full(n, self.residual_q10), np.full(n, self.residual_q90)

    def interval(self, features: pd.DataFrame) -> tuple[np.ndarray, np.ndarray]:
        """(low, high) around `predict`: nominal 90%, from leave-one-model-out residuals
        (`log_offsets`)."""
        log = self.predict_log(features)
        low, high = self.log_offsets(features)
        return np.exp(log + low), np.exp(log + high)


def load_champion(target: str, tracking_uri: str | None = None) -> ChampionModel | None:
    """The champion of `target` ("latency", "throughput" or "memory"), or None (never an
    exception) when there is none to load; an `HwbenchWarning` when its version cannot be loaded.
    Loaded pipelines are cached per (store, version).

    Raises:
        ValueError: `target` is not one of `PREDICTED_METRICS`.
    """
    if target not in MODEL_NAMES:
        raise ValueError(f"unknown target {target!r}; choose one of {', '.join(PREDICTED_METRICS)}")
    from pytest_hwbench.sinks import resolve_tracking_uri

    uri = tracking_uri or resolve_tracking_uri()
    try:
        from mlflow.tracking import MlflowClient

        if ping(uri) is not None:  # a bad URI or a silent server; credentials sent as MLflow sends them
            return None
        if uri.startswith("sqlite:///") and not sqlite_path(uri).exists():
            return None  # do not create an empty store just by asking
        client = MlflowClient(tracking_uri=uri)
        mv = champion_version(client, target)
        if mv is None:
            return None
    except Exception:  # unreachable, bad URI, schema error: no champion to offer
        return None
    try:
        model = load_model(uri, mv.source)
    except Exception as exc:
        from pytest_hwbench.errors import HwbenchWarning

        warnings.warn(f"hwsel: cannot load {mv.name} v{mv.version} from {redact_uri(str(uri))}: "
                      f"{redact_uri(repr(exc))}", HwbenchWarning, stacklevel=2)
        return None
    tags = dict(mv.tags or {})
    prefix = f"{target}."
    try:
        metrics = {k[len(prefix):]: float(v) for k, v in client.get_run(mv.run_id).data.metrics.items()
                   if k.startswith(prefix)}
    except Exception:
        metrics = {}
    return ChampionModel(target, mv.name, str(mv.version), str(mv.run_id), metrics, tags, model,
                         residual_q10=_float(tags.get("hwsel.residual_q10"), 0.0),
                         residual_q90=_float(tags.get("hwsel.residual_q90"), 0.0),
                         intervals=_load_intervals(uri, tags.get("hwsel.intervals")))


@functools.lru_cache(maxsize=32)
def _load_intervals(tracking_uri: str, artifact_uri: str | None) -> Any:
    """The `hwsel.intervals.AdaptiveIntervals` at `artifact_uri` (a version's ``hwsel.intervals``
    tag), or None without one; an unreadable one gives an `HwbenchWarning` and None (the fixed
    band answers)."""
    if not artifact_uri:
        return None
    try:
        from hwsel.intervals import AdaptiveIntervals

        return read_artifact(artifact_uri, tracking_uri,
                             lambda local: AdaptiveIntervals.from_json(Path(local).read_text(encoding="utf-8")))
    except Exception as exc:
        from pytest_hwbench.errors import HwbenchWarning

        warnings.warn(f"hwsel: cannot read the adaptive intervals {artifact_uri} from {redact_uri(str(tracking_uri))}: "
                      f"{redact_uri(repr(exc))}; answers carry the fixed band", HwbenchWarning, stacklevel=3)
        return None


__all__ = ["ALIAS", "LOCK_MODEL", "MODEL_NAMES", "PREDICTED_METRICS", "UNITS", "ChampionModel",
           "champion_version", "ensure_experiment", "load_champion", "load_model", "promotion_lock",
           "read_artifact", "register"]
