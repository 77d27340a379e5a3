"""Training: Optuna-tuned scikit-learn regressors for latency and memory (throughput derives from
latency), scored on grouped cross-validation (`hwsel.evaluation.cv_folds`), registered in MLflow
with their training snapshot and intervals; @champion moves only for a version that beats the
champion's recipe on the same folds (`hwsel.promotion`). Logged through one `MlflowClient`."""

from __future__ import annotations

import dataclasses
import datetime as _dt
import hashlib
import json
import os
import time
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np
import pandas as pd

from hwsel._reach import DEFAULT_TIMEOUT_S, bounded, quiet_mlflow, require_reachable
from hwsel.data import (
    NESTED_COLUMNS,
    RecordCounts,
    _warn_dropped,
    dropped_text,
    load_runs,
    rows_text,
    snapshot,
    training_table,
    usable_rows_text,
)
from hwsel.estimators import (
    LATENCY_OFFSETS,
    STARTING_RECIPES,
    ThroughputFromLatency,
    build_estimator,
    one_thread,
    suggest,
)
from hwsel.evaluation import Fold, cv_folds, out_of_fold, scheme_metrics, score_oof
from hwsel.features import FEATURE_COLUMNS, feature_frame
from hwsel.history import Window, history_table, mirror, mirror_path
from hwsel.intervals import conformal_band
from hwsel.promotion import Candidate, promote
from hwsel.training_log import flatten, log_decision, log_intervals, log_roofline_baseline, log_study
from pytest_hwbench.vocabulary import DEFAULT_EXPERIMENT

TRAINING_EXPERIMENT = "hwsel-training"
#: Nominal coverage of the prediction intervals the registered models carry.
INTERVAL_LEVEL = 0.9

#: target -> (table column, roofline offset feature). Throughput derives from latency.
LEARNED: dict[str, tuple[str, str]] = {"latency": ("latency_ms", "log_roofline_ms"),
                                       "memory": ("memory_mb", "log_roofline_memory_mb")}


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

    Trial 0 is the target's `STARTING_RECIPES` entry; latency (`offset_column` is latency's
    roofline column) always learns on top of the regime (`LATENCY_OFFSETS`), other targets on the
    roofline or nothing.
    """
    import optuna

    latency = offset_column == LEARNED["latency"][1]
    offsets = LATENCY_OFFSETS if latency else ("roofline", "none")

    def objective(trial: optuna.Trial) -> float:
        params = suggest(trial, offsets)
        estimator = build_estimator(params, offset_column=offset_column, seed=seed)

        def report(step: int, value: float) -> None:
            trial.report(value, step)
            if trial.should_prune():
                raise optuna.TrialPruned()

        oof = out_of_fold(estimator, X, y, folds, report=report)
        trial.set_user_attr("oof", oof)  # the best trial's out-of-fold predictions are the study's
        return score_oof(oof)

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
    frame = study.trials_dataframe(attrs=("number", "value", "state", "params", "duration"))
    return StudyResult(dict(best.params), float(best.value), best.user_attrs["oof"], frame)


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
    #: records dropped on read as no measurement, reason -> count (`hwsel.data.drop_impossible`)
    dropped: Mapping[str, int] = field(default_factory=dict)
    #: records left out because they were measured on a busy machine (``noise == "noisy"``)
    noisy_left_out: int = 0
    #: records the training table was built from (`n_rows` rows: repeats of a configuration are one)
    n_records: int = 0
    #: how the records became the rows, in one line (`hwsel.data.rows_text`)
    rows_text: str = ""
    #: records this training copied from MLflow sources into their DuckDB mirror (`hwsel.history.mirror`)
    mirrored: int = 0
    #: seconds spent reading the records and building the training table (the mirror's copy included)
    read_s: float = 0.0


def train(
    source: str | os.PathLike[str] | Sequence[str | os.PathLike[str]] | None = None,
    *,
    tracking_uri: str | None = None,
    trials: int = 30,
    seed: int = 0,
    experiment: str = DEFAULT_EXPERIMENT,
    progress: bool = True,
    snapshot_dir: str | os.PathLike[str] | None = None,
    include_noisy: bool = False,
    timeout: float | None = DEFAULT_TIMEOUT_S,
    window: Window | None = None,
    mirror_file: str | os.PathLike[str] | None = None,
) -> TrainResult:
    """Train, evaluate and register the latency, throughput and memory predictors.

    Args:
        source: where the runs are (see `hwsel.data.load_runs`), or several places (trains on
            their union); None: the tracking store.
        tracking_uri: MLflow store for the training run and the registry; None:
            ``$MLFLOW_TRACKING_URI``, else ``sqlite:///mlruns/mlflow.db``.
        trials: Optuna trials per learned target (latency, memory).
        seed: seeds the TPE sampler and the estimators; same data + same seed = same models.
        experiment: MLflow experiment holding the benchmark runs (for an MLflow source).
        progress: show Optuna's progress bar.
        snapshot_dir: where the training-table Parquet goes (default: next to the SQLite store,
            else ``mlruns/hwsel-snapshots``); it is also logged as an artifact of the run.
        include_noisy: also train on records measured on a busy machine (left out by default,
            counted in `TrainResult.noisy_left_out`).
        timeout: seconds to wait for the records, imports aside; a tracking server among the
            sources or at `tracking_uri` must answer its ``/health`` within 2 s. None: no limit.
        window: which records to learn from (`hwsel.history.Window`; needs DuckDB or MLflow
            sources). None: every record.
        mirror_file: the DuckDB file MLflow sources are mirrored into before training
            (`hwsel.history.mirror`); default: one file per store and experiment under
            ``hwsel-mirrors`` next to the snapshot folder.

    Raises:
        HwselUnreachable: a tracking server named does not answer (before any training).
        HwselTimeout: the records did not come within `timeout`.
    """

    from hwsel.data import describe_sources, source_list
    from pytest_hwbench.sinks import resolve_sink, resolve_tracking_uri, source_kind
    from pytest_hwbench.sinks.mlflow_uri import sqlite_path, validate_tracking_uri

    if trials < 1:
        raise ValueError(f"trials must be >= 1, got {trials}")
    uri = validate_tracking_uri(tracking_uri or resolve_tracking_uri())
    sources = source_list(source) or [uri]
    where = describe_sources(sources)
    if timeout is not None:
        require_reachable([*((s, "--source") for s in sources), (uri, "--tracking-uri")], timeout)

    window = window or Window()
    snap_dir = Path(snapshot_dir) if snapshot_dir is not None else \
        (sqlite_path(uri).resolve().parent if uri.startswith("sqlite:///") else Path("mlruns")) / "hwsel-snapshots"
    kinds = ["parquet" if os.fspath(s).lower().endswith(".parquet") else source_kind(s) for s in sources]
    asked = all(kind in ("duckdb", "mlflow") for kind in kinds)
    if not asked and not window.empty:
        raise ValueError(f"{window.text()}: a window needs DuckDB files or MLflow stores as sources, got {where}; "
                         "import the records into a DuckDB file (hwbench replay --db FILE) or leave out "
                         "--since/--sessions")
    mirrored = 0

    def ask() -> tuple[pd.DataFrame, RecordCounts]:
        nonlocal mirrored
        files = []
        for source_, kind in zip(sources, kinds, strict=True):
            text = resolve_sink(os.fspath(source_))[1] or os.fspath(source_)
            file = Path(text)
            if kind != "duckdb":
                file = Path(mirror_file) if mirror_file is not None else \
                    mirror_path(text, experiment, snap_dir.parent / "hwsel-mirrors")
                mirrored += mirror(text, experiment, file)
            files.append(file)
        found = history_table(list(dict.fromkeys(files)), include_noisy=include_noisy, window=window)
        if found.counts.dropped:
            _warn_dropped(dict(found.counts.dropped), where)
        return found.table, found.counts

    def read() -> tuple[pd.DataFrame, RecordCounts]:
        runs = load_runs(sources, experiment=experiment, include_noisy=include_noisy)
        return training_table(runs), RecordCounts.of(runs)

    step = ask if asked else read
    began = time.perf_counter()
    with quiet_mlflow():
        table, counts = step() if timeout is None else bounded(step, timeout, f"the records of {where}",
                                                              then="hwsel train stops")
    read_s = time.perf_counter() - began
    dropped = dict(counts.dropped)
    if table["model"].nunique() < 2 and table["batch_size"].nunique() < 2:
        raise ValueError(f"{where}: need runs of at least two models or two batch sizes, "
                         f"{usable_rows_text(counts, len(table))}")
    table = table.sort_values(["model", "backend", "hardware", "precision", "batch_size", "record_id"],
                              kind="mergesort").reset_index(drop=True)
    flat = table.drop(columns=[c for c in NESTED_COLUMNS if c in table.columns])
    # the content, row and column order included
    hashed = pd.util.hash_pandas_object(flat.astype(str), index=False).to_numpy()
    digest = hashlib.sha256(hashed.tobytes() + ",".join(map(str, flat.columns)).encode()).hexdigest()
    snap_path = snapshot(flat, snap_dir / f"training-{digest[:16]}.parquet")
    with quiet_mlflow():
        result = _train_and_register(table, digest, snap_path, uri=uri, where=where, experiment=experiment,
                                     trials=trials, seed=seed, progress=progress, dropped=dropped)
    return dataclasses.replace(result, dropped=dropped, noisy_left_out=counts.noisy, n_records=counts.records,
                               rows_text=rows_text(counts, table), mirrored=mirrored, read_s=read_s)


def _train_and_register(table: pd.DataFrame, digest: str, snap_path: Path, *, uri: str, where: str,
                        experiment: str, trials: int, seed: int, progress: bool, dropped: Mapping[str, int]) -> TrainResult:
    from mlflow.entities import Metric, Param, RunTag
    from mlflow.tracking import MlflowClient

    from hwsel import registry
    from pytest_hwbench.sinks.mlflow_migration import retry_migration, store_init_lock
    from pytest_hwbench.sinks.mlflow_uri import sqlite_path

    X = feature_frame(table)
    if uri.startswith("sqlite:///"):
        # a new SQLite store is created and migrated by one process at a time, so two trainings
        # that start together on it both succeed
        sqlite_path(uri).parent.mkdir(parents=True, exist_ok=True)
        with store_init_lock(sqlite_path(uri).parent):
            client = retry_migration(lambda: MlflowClient(tracking_uri=uri))
    else:
        client = MlflowClient(tracking_uri=uri)
    exp_id = registry.ensure_experiment(client, uri, TRAINING_EXPERIMENT)
    stamp = _dt.datetime.now(_dt.timezone.utc).strftime("%Y-%m-%dT%H:%M:%SZ")
    run_id = client.create_run(exp_id, run_name=f"train {stamp}", tags={"hwsel.kind": "training"}).info.run_id
    status = "FAILED"
    results: dict[str, TargetResult] = {}
    try:
        import sklearn

        params = {"source": where[:500], "experiment": experiment, "trials": trials, "seed": seed,
                  "n_rows": len(table), "n_models": table["model"].nunique(), "data_sha256": digest,
                  "n_dropped": sum(dropped.values()), "sklearn_version": sklearn.__version__,
                  "feature_columns": ",".join(FEATURE_COLUMNS)[:6000]}
        client.log_batch(run_id, params=[Param(k, str(v)) for k, v in params.items()],
                         tags=[RunTag("hwsel.data_sha256", digest)]
                         + ([RunTag("hwsel.dropped", dropped_text(dict(dropped))[:5000])] if dropped else []))
        client.log_artifact(run_id, str(snap_path), "data")
        snapshot_uri = f"runs:/{run_id}/data/{snap_path.name}"
        folds = cv_folds(table)
        now = int(time.time() * 1000)

        fitted: dict[str, tuple[Any, StudyResult, int, pd.DataFrame]] = {}  # target -> model, study, rows, X
        candidates: dict[str, Candidate] = {}
        intervals: dict[str, str] = {}
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
            fitted[target] = (model, study, len(sub), Xs)
            candidates[target] = (study.score, Xs, ys, target_folds)
            log_study(client, run_id, target, study.params, study.trials, study.oof, sub, now)
            if target == "latency":
                at = ThroughputFromLatency.log_items(Xs)[study.oof["row"].to_numpy()]
                tp_oof = study.oof.assign(y_true=at - study.oof["y_true"], y_pred=at - study.oof["y_pred"])
                fitted["throughput"] = (ThroughputFromLatency.from_fitted(model), dataclasses.replace(study, oof=tp_oof),
                                        len(sub), Xs)
                log_roofline_baseline(client, run_id, Xs, study.oof, now)
                found = log_intervals(client, run_id, study.params, offset_col, seed, sub, Xs, ys, now, INTERVAL_LEVEL)
                intervals = {"hwsel.intervals": found} if found else {}

        versions: dict[str, str] = {}
        for target in registry.PREDICTED_METRICS:
            model, study, n_rows, Xs = fitted[target]
            # The fixed interval: a split-conformal band from the residuals on models the fold had
            # not seen (what a new model's answer risks), read by `hwsel.registry.ChampionModel`.
            held_out = study.oof[study.oof["scheme"] == "heldout_model"]
            held_out = held_out if len(held_out) else study.oof
            q10, q90 = conformal_band((held_out["y_true"] - held_out["y_pred"]).to_numpy(dtype=float), INTERVAL_LEVEL)
            metrics = {**flatten(target, scheme_metrics(study.oof)), f"{target}.score": study.score,
                       f"{target}.residual_q10": q10, f"{target}.residual_q90": q90}
            client.log_batch(run_id, metrics=[Metric(k, v, now, 0) for k, v in metrics.items()])
            versions[target] = registry.register(
                client, run_id, target, model, Xs,
                tags={"hwsel.data_sha256": digest, "hwsel.snapshot": snapshot_uri,
                      "hwsel.training_run_id": run_id, "hwsel.score": repr(study.score),
                      "hwsel.residual_q10": repr(q10), "hwsel.residual_q90": repr(q90),
                      "hwsel.params": json.dumps(study.params, sort_keys=True), "hwsel.n_rows": str(n_rows)}
                | (intervals if target == "latency" else {}),
            )

        decisions = promote(client, run_id, digest, versions, candidates)
        for target, (_, study, _, _) in fitted.items():
            log_decision(client, run_id, target, versions[target], decisions[target], now)
            results[target] = TargetResult(target, registry.MODEL_NAMES[target], versions[target], study.score,
                                           scheme_metrics(study.oof), dict(study.params), *decisions[target])
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


__all__ = ["INTERVAL_LEVEL", "LEARNED", "TRAINING_EXPERIMENT", "StudyResult", "TargetResult", "TrainResult",
           "rows_by_device", "run_study", "train"]
