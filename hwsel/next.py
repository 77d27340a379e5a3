"""What to measure next (`suggest_measurements`): the unmeasured configurations of the records'
runtimes and tiers (`candidate_grid`) on which an ensemble of latency regressors disagrees most,
spread over models and runtimes, each with the ``pytest bench_suites/...`` line that measures it;
deterministic for a seed. `rank_candidates` ranks any table and candidates (no store).
"""

from __future__ import annotations

import math
import shlex
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import asdict, dataclass
from typing import Any

import numpy as np
import pandas as pd

from hwsel._reach import DEFAULT_TIMEOUT_S, bounded, require_reachable
from hwsel.data import Source
from hwsel.query import MAX_BATCH_SIZE
from pytest_hwbench import facts
from pytest_hwbench.vocabulary import normalise_mode

#: The ensemble's recipe, fixed (no study per call): of the recipes tried, its held-out-model error
#: fell the most as measurements were added, and one that does not gain from data cannot say which
#: data would help.
LATENCY_PARAMS: Mapping[str, Any] = {"estimator": "rf", "offset": "roofline", "batch_curves": False,
                                     "n_estimators": 100, "rf_min_samples_leaf": 3, "max_features": 0.5}
#: The batch sizes a cold start proposes, with eager torch on each target torch runs on here.
COLD_START_BATCH_SIZES: tuple[int, ...] = (1, 8, 32)
#: Score kept by a candidate of the model just picked.
SAME_MODEL_FACTOR = 0.6
#: Further factor for a candidate sharing the pick's model, hardware and backend.
SAME_RUNTIME_FACTOR = 0.5
#: Largest budget and ensemble a call takes (keeps a REST request cheap).
MAX_BUDGET = 1000
MAX_ENSEMBLE = 64

#: The configuration columns of a candidate frame, in order.
CANDIDATE_COLUMNS: tuple[str, ...] = ("model", "hardware", "device_name", "backend", "precision", "mode",
                                      "batch_size", "threads")
#: The suite file that measures each mode (its tests' markers fix the mode).
_SUITE_FILE = {"inference": "bench_suites/test_inference.py", "train": "bench_suites/test_training.py"}


@dataclass(frozen=True)
class Suggestion:
    """One configuration to measure, why, and the command line that measures it.

    Attributes:
        uncertainty: standard deviation of the ensemble's log-latency predictions (about the
            relative spread of the predictions: 0.25 is roughly +-25%), before the diversity
            discount that ordered the picks; None on a cold start (records of fewer than two
            models: nothing to compare, the picks spread the first measurements over the grid).
        predicted_ms: the ensemble's (geometric mean) latency prediction, ms; None when
            nothing is measured yet.
        device: the device the records of this hardware come from (run the command there).
        command: a ``pytest bench_suites/...`` line, runnable as printed from the repository root.
    """

    model: str
    hardware: str
    backend: str
    precision: str
    batch_size: int
    mode: str
    device: str | None
    uncertainty: float | None
    predicted_ms: float | None
    command: str

    def to_dict(self) -> dict[str, Any]:
        """JSON-ready dict."""
        return asdict(self)

    def reason(self) -> str:
        """Why it was picked, in one line."""
        if self.uncertainty is None:
            return ("cold start: fewer than two models measured, so the first measurements are spread over "
                    "models and runtimes")
        spread = math.expm1(self.uncertainty) * 100
        return (f"predictors disagree by about +-{spread:.0f}% (log std {self.uncertainty:.3f}) around "
                f"{self.predicted_ms:.4g} ms")


def _measured(table: pd.DataFrame) -> tuple[pd.DataFrame, np.ndarray]:
    """The rows of `table` with a positive latency, and their log latencies."""
    latency = pd.to_numeric(table["latency_ms"], errors="coerce").to_numpy(dtype=float)
    keep = np.isfinite(latency) & (latency > 0)
    return table.loc[keep].reset_index(drop=True), np.log(latency[keep])


def _measured_models(table: pd.DataFrame) -> int:
    """How many models `table` holds a positive latency of."""
    if not len(table) or "latency_ms" not in table:
        return 0
    return int(_text(_measured(table)[0]["model"]).nunique())


def _number(value: Any) -> float | None:
    """A finite float, else None (JSON has no NaN)."""
    value = float(value)
    return value if math.isfinite(value) else None


def bench_command(*, model: str, hardware: str, backend: str, precision: str, batch_size: int,
                  mode: str = "inference") -> str:
    """The ``pytest bench_suites/...`` line that measures one configuration and nothing else."""
    suite = _SUITE_FILE.get(normalise_mode(mode))
    if suite is None:
        raise ValueError(f"no bench suite measures mode {mode!r}; suggestions cover {', '.join(_SUITE_FILE)}")
    parts = ["pytest", suite, "-m", hardware, "--hwbench-hardware", hardware, "--hwbench-models", model,
             "--hwbench-backends", backend, "--hwbench-precisions", precision,
             "--hwbench-batch-sizes", str(int(batch_size))]
    if hardware != "cpu":
        # bench_suites/conftest.py trims accelerator runs to the CI grid unless told otherwise
        parts += ["--hwbench-grid", "all"]
    return shlex.join(parts)


def _whole(name: str, value: Any, low: int, high: int) -> int:
    if isinstance(value, bool) or not isinstance(value, int | np.integer) or not low <= value <= high:
        raise ValueError(f"{name} must be a whole number from {low} to {high}, got {value!r}")
    return int(value)


def _chosen(what: str, values: Iterable[Any] | None, accepted: Iterable[str]) -> list[str] | None:
    """`values` checked against `accepted` (None stays None); ValueError naming the culprit."""
    if values is None:
        return None
    if isinstance(values, str):
        values = [values]
    accepted = sorted(set(accepted))
    out: list[str] = []
    for value in values:
        if str(value) not in accepted:
            raise ValueError(f"unknown {what} {value!r}: the benchmark records hold {', '.join(accepted) or 'none'}")
        out.append(str(value))
    if not out:
        raise ValueError(f"no {what} given; name at least one of {', '.join(accepted)}")
    return out


def _zoo_name(name: str) -> str:
    """A zoo name for `name` (a zoo name or a hub-style alias); ValueError listing the zoo."""
    from pytest_hwbench.models import MODELS

    from .resolution import zoo_name

    found = zoo_name(str(name))
    if found is None:
        raise ValueError(f"unknown model {name!r}: suggestions are zoo models the suite runs by name; "
                         f"accepted: {', '.join(sorted(MODELS))}")
    return found


def _text(series: pd.Series, default: str = "") -> pd.Series:
    return series.astype(object).where(series.notna(), default).astype(str)


def candidate_grid(
    table: pd.DataFrame,
    *,
    models: Sequence[str] | None = None,
    hardware: Sequence[str] | None = None,
    backends: Sequence[str] | None = None,
    precisions: Sequence[str] | None = None,
    batch_sizes: Sequence[int] | None = None,
) -> pd.DataFrame:
    """Unmeasured configurations worth asking about, one row each (`CANDIDATE_COLUMNS`): `models`
    (else the zoo models in `table` and the rest of their tiers) on the runtimes `table` holds,
    narrowed by `hardware`, `backends` and `precisions`, at the batch sizes `table` holds for the
    hardware and mode (`batch_sizes` replaces them for inference, narrows them for ``train``).

    Raises:
        ValueError: a filter value the records (or, for models, the zoo) do not hold.
    """
    from pytest_hwbench.models import MODELS

    if not len(table):
        raise ValueError("no benchmark records to learn from; run the bench suite first or pass another source")
    frame = pd.DataFrame({
        "model": _text(table["model"]), "hardware": _text(table["hardware"]).str.lower(),
        "device_name": _text(table["device_name"]), "backend": _text(table["backend"], "torch"),
        "precision": _text(table["precision"], "fp32").str.lower(),
        "mode": _text(table["mode"], "inference").map(normalise_mode),
        "batch_size": pd.to_numeric(table["batch_size"], errors="coerce").fillna(1).astype(int),
        "threads": pd.to_numeric(table.get("threads"), errors="coerce") if "threads" in table else np.nan,
    })
    frame = frame.loc[frame["mode"].isin(list(_SUITE_FILE))]
    runtime_keys = list(CANDIDATE_COLUMNS[1:6])
    runtimes = frame[runtime_keys].drop_duplicates()
    for column, values in (("hardware", hardware), ("backend", backends), ("precision", precisions)):
        chosen = _chosen(column, values, frame[column])
        if chosen is not None:
            runtimes = runtimes.loc[runtimes[column].isin(chosen)]
    wanted = None if batch_sizes is None else sorted({_whole("batch size", b, 1, MAX_BATCH_SIZE) for b in batch_sizes})
    if wanted is not None and not wanted:
        raise ValueError("no batch size given; name at least one, e.g. 1 8 32")
    if models is not None:
        if isinstance(models, str):
            models = [models]
        names = sorted({_zoo_name(m) for m in models})
        if not names:
            raise ValueError(f"no model given; name at least one of {', '.join(sorted(MODELS))}")
    else:
        in_zoo = sorted(m for m in frame["model"].unique() if m in MODELS)
        tiers = {MODELS[m].tier for m in in_zoo} or {"quick"}  # a cold start begins with the quick tier
        names = sorted(set(in_zoo) | {m for m, spec in MODELS.items() if spec.tier in tiers})

    # threads: what the records of that device ran with (the predictions are for that machine)
    threads = {key: float(values.mode().iloc[0]) if values.notna().any() else math.nan
               for key, values in frame.groupby(["hardware", "device_name"])["threads"]}
    observed = {key: sorted({int(b) for b in values}) for key, values in frame.groupby(["hardware", "mode"])["batch_size"]}
    measured = set(frame[["model", *runtime_keys, "batch_size"]].itertuples(index=False, name=None))
    # A model measured on a device but never through one of its runtimes was most likely skipped
    # there (e.g. torch int8 quantizes nn.Linear only, so resnet-50 is skipped): records hold no
    # skips, so such a model is proposed only on the runtimes it already ran.
    ran = {key: set(zip(runs["backend"], runs["precision"], strict=True))
           for key, runs in frame.groupby(["model", "hardware", "device_name", "mode"])}

    rows = []
    for rt in runtimes.sort_values(runtime_keys).itertuples(index=False):
        sizes = observed[(rt.hardware, rt.mode)]
        if wanted is not None:
            sizes = wanted if rt.mode == "inference" else [b for b in sizes if b in wanted]
        for model in names:
            known = ran.get((model, rt.hardware, rt.device_name, rt.mode))
            if known is not None and (rt.backend, rt.precision) not in known:
                continue
            for batch in sizes:
                key = (model, rt.hardware, rt.device_name, rt.backend, rt.precision, rt.mode, int(batch))
                if key not in measured:
                    rows.append((*key, threads.get((rt.hardware, rt.device_name), math.nan)))
    return pd.DataFrame(rows, columns=list(CANDIDATE_COLUMNS))


def fit_latency(table: pd.DataFrame, *, seed: int = 0) -> Any:
    """One latency regressor (`LATENCY_PARAMS`, log target) fit on a training table; predicts log ms."""
    from .estimators import build_estimator, one_thread
    from .features import feature_frame

    rows, y = _measured(table)
    with one_thread():
        model = build_estimator(LATENCY_PARAMS, offset_column="log_roofline_ms", seed=seed)
        return model.fit(feature_frame(rows), y)


def ensemble_predictions(table: pd.DataFrame, candidates: pd.DataFrame, *, ensemble: int = 8,
                         seed: int = 0) -> np.ndarray:
    """Log-latency predictions, shape (ensemble, len(candidates)), of `ensemble` regressors each
    fit on a bootstrap of `table`'s models (a model's rows drawn together: the question that
    matters is a model the predictors have not seen)."""
    from .estimators import build_estimator, one_thread
    from .features import feature_frame

    ensemble = _whole("ensemble", ensemble, 2, MAX_ENSEMBLE)
    table, y = _measured(table)
    groups = _text(table["model"]).to_numpy()
    unique = np.unique(groups)
    if len(unique) < 2:
        raise ValueError(f"the records hold {len(unique)} model(s); estimating uncertainty over models needs "
                         "at least 2 (measure another model first)")
    members = [np.flatnonzero(groups == m) for m in unique]
    X = feature_frame(table)
    Xc = feature_frame(candidates.reset_index(drop=True))
    rng = np.random.default_rng(seed)
    out = np.empty((ensemble, len(candidates)))
    with one_thread():
        for k in range(ensemble):
            drawn = rng.integers(0, len(unique), size=len(unique))
            if len(np.unique(drawn)) < 2:  # one model drawn every time: nothing to learn across models
                drawn[0] = (drawn[0] + 1) % len(unique)
            idx = np.concatenate([members[i] for i in drawn])
            model = build_estimator(LATENCY_PARAMS, offset_column="log_roofline_ms", seed=seed * 1009 + k)
            model.fit(X.iloc[idx], y[idx])
            out[k] = np.asarray(model.predict(Xc), dtype=float) if len(Xc) else np.empty(0)
    return out


def greedy_order(candidates: pd.DataFrame, uncertainty: np.ndarray, budget: int) -> list[int]:
    """Positions of `budget` picks: highest score first, neighbours of each pick discounted."""
    score = np.where(np.isfinite(uncertainty), uncertainty, 0.0).astype(float)
    model = _text(candidates["model"]).to_numpy()
    runtime = (model + "|" + _text(candidates["hardware"]).to_numpy() + "|"
               + _text(candidates["backend"]).to_numpy())
    taken = np.zeros(len(score), dtype=bool)
    picks: list[int] = []
    for _ in range(min(budget, len(score))):
        i = int(np.argmax(np.where(taken, -np.inf, score)))  # first of equals: deterministic
        picks.append(i)
        taken[i] = True
        score[model == model[i]] *= SAME_MODEL_FACTOR
        score[runtime == runtime[i]] *= SAME_RUNTIME_FACTOR
    return picks


def rank_candidates(table: pd.DataFrame, candidates: pd.DataFrame, budget: int, *, ensemble: int = 8,
                    seed: int = 0) -> pd.DataFrame:
    """The `budget` candidates to measure, in pick order, with ``uncertainty`` and ``predicted_ms``.

    `table` is a training table (`hwsel.data.training_table`: record fields plus ``latency_ms``);
    `candidates` has record fields (at least model, hardware, backend, precision, mode,
    batch_size; device_name and threads where known). Rows keep `candidates`' index.
    """
    budget = _whole("budget", budget, 1, MAX_BUDGET)
    if not len(candidates):
        return candidates.assign(uncertainty=pd.Series(dtype=float), predicted_ms=pd.Series(dtype=float))
    measured = _measured_models(table)
    if measured < 2:
        # Cold start: no spread to measure; every candidate counts the same and the greedy
        # discount spreads the picks over models and runtimes.
        out = candidates.iloc[greedy_order(candidates, np.ones(len(candidates)), budget)]
        out = out.assign(uncertainty=np.nan, predicted_ms=np.nan)
        if measured:
            from .features import feature_frame

            model = fit_latency(table, seed=seed)
            out["predicted_ms"] = np.exp(model.predict(feature_frame(out.reset_index(drop=True))))
        return out
    logs = ensemble_predictions(table, candidates, ensemble=ensemble, seed=seed)
    uncertainty = logs.std(axis=0, ddof=1)
    picks = greedy_order(candidates, uncertainty, budget)
    predicted = np.exp(logs.mean(axis=0))
    return candidates.iloc[picks].assign(uncertainty=uncertainty[picks], predicted_ms=predicted[picks])


def cold_start_table() -> pd.DataFrame:
    """A training table of this machine's eager-torch runtimes and no latency: what `candidate_grid`
    proposes the quick-tier zoo on before any record."""
    from pytest_hwbench.hardware import detect_hardware

    torch_targets = facts.torch_targets()
    rows = [("", kind, target.devices[0].name if target.devices else "", "torch", precision, "inference", batch,
             np.nan, np.nan)
            for kind, target in detect_hardware().targets.items() if kind in torch_targets and target.available
            for precision in target.precisions for batch in COLD_START_BATCH_SIZES]
    return pd.DataFrame(rows, columns=[*CANDIDATE_COLUMNS, "latency_ms"])


def records_table(source: Source | Sequence[Source], timeout: float | None, *, then: str) -> pd.DataFrame:
    """The training table (`hwsel.data.training_table`) of the records of `source`, read within
    `timeout` seconds, imports aside (a tracking server among the sources must answer its
    ``/health`` within 2 s; None: no limit); `then` says what happens at the deadline."""
    from .data import describe_sources, load_runs, source_list, training_table

    if timeout is None:
        return training_table(load_runs(source))
    require_reachable(((s, "--source") for s in source_list(source) or []), timeout)
    return training_table(bounded(lambda: load_runs(source), timeout, f"the records of {describe_sources(source)}",
                                  then=then))


def suggest_measurements(
    budget: int,
    *,
    source: Source | Sequence[Source] | None = None,
    models: Sequence[str] | None = None,
    hardware: Sequence[str] | None = None,
    backends: Sequence[str] | None = None,
    precisions: Sequence[str] | None = None,
    batch_sizes: Sequence[int] | None = None,
    seed: int = 0,
    ensemble: int = 8,
    table: pd.DataFrame | None = None,
    timeout: float | None = DEFAULT_TIMEOUT_S,
) -> list[Suggestion]:
    """The `budget` configurations whose measurement would most shrink the latency predictors' uncertainty.

    Args:
        budget: how many configurations to suggest (fewer come back when fewer are unmeasured).
        source: the benchmark records (see `hwsel.data.load_runs`); default: the store here
            (`hwsel.data.existing_store`), else a cold start.
        models, hardware, backends, precisions, batch_sizes: narrow the target grid (see
            `candidate_grid`); hardware, backends and precisions must appear in the records.
        seed: seeds the bootstrap and the regressors; the same seed gives the same answer.
        ensemble: number of regressors (at least 2).
        table: a training table to use instead of loading `source`.
        timeout: seconds to wait for the records, imports aside; a tracking server among the
            sources must answer its ``/health`` within 2 s. None: no limit.

    Raises:
        ValueError: a budget below 1, an unknown model, hardware, backend or precision, or
            records of fewer than two models.
        HwselUnreachable, HwselTimeout: a tracking server that does not answer, records that do
            not come within `timeout`.
    """
    from .data import existing_store

    budget = _whole("budget", budget, 1, MAX_BUDGET)
    _whole("ensemble", ensemble, 2, MAX_ENSEMBLE)
    if table is None:
        # no source named: the store here, if there is one (looking creates none); none yet: a cold start
        chosen = source if source is not None else existing_store()
        table = pd.DataFrame()
        if chosen is not None:
            try:
                table = records_table(chosen, timeout, then="hwsel next stops")
            except LookupError:  # the default store holds no benchmark runs yet: a cold start
                if source is not None:
                    raise
    if _measured_models(table) < 2:  # nothing to compare yet: the grid covers this machine too
        table = pd.concat([t for t in (table, cold_start_table()) if len(t)], ignore_index=True)
    candidates = candidate_grid(table, models=models, hardware=hardware, backends=backends,
                                precisions=precisions, batch_sizes=batch_sizes)
    picked = rank_candidates(table, candidates, budget, ensemble=ensemble, seed=seed)
    out = []
    for row in picked.itertuples(index=False):
        config = {"model": row.model, "hardware": row.hardware, "backend": row.backend,
                  "precision": row.precision, "batch_size": int(row.batch_size), "mode": row.mode}
        out.append(Suggestion(**config, device=row.device_name or None, uncertainty=_number(row.uncertainty),
                              predicted_ms=_number(row.predicted_ms), command=bench_command(**config)))
    return out


__all__ = ["LATENCY_PARAMS", "Suggestion", "bench_command", "candidate_grid", "cold_start_table",
           "ensemble_predictions", "fit_latency", "greedy_order", "rank_candidates", "records_table",
           "suggest_measurements"]
