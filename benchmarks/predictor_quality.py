"""How good are the hwsel latency predictors on real runs, on CPU and on an H100?

Usage::

    python benchmarks/predictor_quality.py                 # both committed snapshots (~6 min on 2 cores)
    python benchmarks/predictor_quality.py --trials 5 --no-api     # a quick look
    python benchmarks/predictor_quality.py --data runs.parquet|hwbench.duckdb|sqlite:///mlflow.db
    python benchmarks/predictor_quality.py --data-h100 other_gpu.parquet
    python benchmarks/predictor_quality.py --regenerate    # measure this CPU again (~15 min here)
    python benchmarks/predictor_quality.py --regenerate-h100 ../shared/gpu-evidence/h100-2026-11-23

The data:

- CPU (`benchmarks/data/cpu_runs.parquet`): real pytest-hwbench runs on a 2-thread AMD EPYC runner, the
  14 quick-tier models at batch sizes 1-32 and seven full-size models (ResNet-50, BERT-base,
  T5-small, ViT-base, GPT-2, Whisper-tiny, Wav2Vec2-base) at batches 1-4, on torch, ONNX Runtime
  and OpenVINO in fp32/bf16/int8 (`SESSIONS` says exactly how).
- H100 (`benchmarks/data/h100_runs.parquet`): the project's own records from one NVIDIA H100
  80GB HBM3 on 2026-11-23, the `*_records.jsonl` spool files of
  `../shared/gpu-evidence/h100-2026-11-23/` (its README.md gives the commands), loaded with
  `hwsel.data.load_runs` and written with `hwsel.data.snapshot` by ``--regenerate-h100``. The
  file keeps every passed record (training and generation too); the tables here use the
  inference records: eager torch over 28 models at fp32/fp16/bf16 and batch 1/8/32/128, and
  `torch-compile` / `torch-compile-ro` at fp16 for some (so top-1 includes the backend choice).

For each data set separately, from one recipe (the Optuna study's best on `hwsel.evaluation.cv_folds`,
the folds `hwsel train` uses), it prints:

- held-out batch sizes (each batch size predicted by a model that never saw it): MAPE, median
  and p90 absolute percentage error, share within 10%; beside it the roofline layer as it answers
  (roofline plus launch overhead, `hwsel.layers.roofline.layer_log_ms`) and that answer times one
  efficiency factor per configuration (hardware, backend, precision) learned on the training fold;
- leave one model out (one fold per model): the same baselines, and the nearest other model
  measured in the same configuration scaled by the roofline layer's ratio of the two (`nearest_zoo`);
- nominal 90% intervals per answering layer, each calibrated on that layer's own held-out answers
  of the other models (`layer_answers`): ``measured`` (a case's median against a repeat of it in
  another session), ``trained`` (leave one model out), ``blended`` (trained answers of models
  outside the other models' coverage, moved towards the roofline) and ``roofline``. Printed as
  served (the layer `hwsel.predict.Predictor` would answer each configuration from, its model held
  out: `served_layer`; share of answers, coverage, width p10/median/p90, MAPE), on every row each
  layer can answer, and per distance bucket (`hwsel.intervals.novelty`); one fixed band beside them;
- hardware selection per model x batch size across the hardware/backend/precision options
  measured: top-1 accuracy and mean regret (how much slower the chosen one measured than the best);
- then training on the CPU records alone and predicting the H100 records (no GPU row in training);
- the timings of `hwsel.select_hardware` and `hwsel.prediction_matrix` on the CPU snapshot.

Every aim (`LOMO_MAPE_AIM` and the constants after it) is printed next to its figure with "met" or "NOT met", and a closing list
repeats them. Each section prints its wall time.

Caveats: the recipe is chosen on folds that overlap the scored ones (no nested CV: it would
multiply the cost by the number of folds), so the figures are slightly optimistic. The default of
10 Optuna trials per data set (`hwsel train` uses 30) keeps a run at about 5 CPU-minutes: about 6
minutes on 2 idle cores, twice that on a busy machine (12 trials took 5.8 CPU-minutes and 13.6
minutes of wall time with five other jobs on the 2 cores); the API timings take about a third.
"""

from __future__ import annotations

import argparse
import contextlib
import math
import statistics
import subprocess
import sys
import tempfile
import time
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import numpy as np
import pandas as pd

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from hwsel.data import CONFIG_KEYS, RUN_COLUMNS, load_runs, snapshot, training_table  # noqa: E402
from hwsel.estimators import ThroughputFromLatency, build_estimator, one_thread  # noqa: E402
from hwsel.evaluation import Fold, cv_folds, error_metrics, out_of_fold, scheme_metrics  # noqa: E402
from hwsel.features import feature_frame  # noqa: E402
from hwsel.intervals import conformal_band  # noqa: E402
from hwsel.train import LEARNED, StudyResult, run_study  # noqa: E402

DEFAULT_DATA = ROOT / "benchmarks" / "data" / "cpu_runs.parquet"
DEFAULT_H100 = ROOT / "benchmarks" / "data" / "h100_runs.parquet"
DEFAULT_TRIALS = 10

QUICK_MODELS = ("bert-tiny,gpt2-tiny,t5-tiny,vit-tiny,resnet-tiny,whisper-micro,wav2vec2-tiny,clip-tiny,"
                "clap-tiny,detr-tiny,xclip-tiny,llama-tiny,qwen2-tiny,llava-tiny")
FULL_MODELS = "resnet-50,bert-base,t5-small,vit-base,gpt2,whisper-tiny,wav2vec2-base"
#: (models, backends, batch sizes, warm-up, min iterations, min time), run in this order, serially
#: (each case on both cores). Every quick-tier configuration on torch is measured twice, in two
#: sessions, to show the measurement noise; `hwsel.data.training_table` keeps the fastest repeat.
#: This made the committed snapshot in 14 minutes (4.6 + 7.6 + 2.1) on a 2-core machine.
ALL = "torch,onnxruntime,openvino"
SESSIONS = (
    (QUICK_MODELS, ALL, "1,2,4,8,16,32", "3", "7", "0.3"),
    (FULL_MODELS, ALL, "1,2,4", "2", "5", "0.5"),
    (QUICK_MODELS, "torch", "1,2,4,8,16,32", "3", "7", "0.3"),
)

#: The predictors' aims. LOMO MAPE differs per data set; the rest hold for both.
LOMO_MAPE_AIM = {"CPU": 0.15, "H100": 0.20}
HELDOUT_BATCH_AIM = 0.06
ROOFLINE_RATIO_AIM = 3.0
NEAREST_RATIO_AIM = 2.0
TOP1_AIM = 0.90
REGRET_AIM = 0.03
COVERAGE_AIM = 0.85
COVERAGE_MAX = 0.95
SPREAD_AIM = 1.5
LEVEL = 0.9

#: A training row stands in for a held-out one when these match (the "same configuration").
SAME_CONFIG = ("hardware", "device_name", "backend", "precision", "mode", "batch_size")


# --- data -----------------------------------------------------------------------------------

def regenerate(out: Path) -> Path:
    """Run the CPU bench suite into a temporary store and snapshot the passed runs to `out`."""
    with tempfile.TemporaryDirectory(prefix="hwsel-quality-") as tmp:
        store = Path(tmp) / "store"
        for models, backends, batches, warmup, iters, min_time in SESSIONS:
            cmd = [sys.executable, "-m", "pytest", str(ROOT / "bench_suites" / "test_inference.py"), "-m", "cpu", "-q",
                   "-p", "no:cacheprovider", "--benchmark-disable", "--hwbench-models", models,
                   "--hwbench-backends", backends, "--hwbench-batch-sizes", batches, "--hwbench-store", str(store),
                   "--hwbench-warmup", warmup, "--hwbench-min-iterations", iters, "--hwbench-min-time", min_time]
            print("$", " ".join(cmd), flush=True)
            started = time.perf_counter()
            subprocess.run(cmd, cwd=ROOT, check=False)
            print(f"  {time.perf_counter() - started:.0f} s", flush=True)
        runs = load_runs(store / "hwbench.duckdb")
    return snapshot(runs.loc[:, list(RUN_COLUMNS)], out)


def regenerate_h100(evidence: Path, out: Path) -> Path:
    """Snapshot the passed records of `evidence`/*_records.jsonl (GPU spool files) to `out`."""
    paths = sorted(evidence.glob("*_records.jsonl"))
    if not paths:
        raise SystemExit(f"--regenerate-h100: no *_records.jsonl in {evidence}; pass the evidence folder, "
                         "e.g. ../shared/gpu-evidence/h100-2026-11-23")
    runs = load_runs([str(p) for p in paths])
    path = snapshot(runs.loc[:, list(RUN_COLUMNS)], out)
    print(f"snapshot: {path} ({path.stat().st_size / 1024:.0f} KiB): {len(runs)} passed records from "
          f"{', '.join(p.name for p in paths)}")
    return path


@dataclass(frozen=True)
class Dataset:
    """One data set's inference configurations, their features and log latency."""

    name: str
    source: str
    runs: pd.DataFrame
    table: pd.DataFrame
    X: pd.DataFrame
    y: np.ndarray


def load_dataset(name: str, source: str | Path) -> Dataset:
    """Inference configurations of `source` (fastest repeat of each), in a fixed order."""
    runs = load_runs(str(source))
    mode = runs["mode"].astype(object)
    runs = runs.loc[(mode.isna() | (mode == "inference")).to_numpy()].reset_index(drop=True)
    table = training_table(runs)
    table = table.sort_values(["model", "backend", "hardware", "precision", "batch_size", "record_id"],
                              kind="mergesort").reset_index(drop=True)
    return Dataset(name, str(source), runs, table, feature_frame(table),
                   np.log(table["latency_ms"].to_numpy(dtype=float)))


def describe(ds: Dataset) -> None:
    """Where the rows came from: runs, configurations, models, devices, backends, batch sizes."""
    t = ds.table
    devices = sorted((t["hardware"].astype(str) + " " + t["device_name"].fillna("").astype(str)).str.strip().unique())
    combos = t.groupby(["backend", "precision"]).size()
    print(f"data: {ds.source}: {len(ds.runs)} passed inference runs in {ds.runs['session_id'].nunique()} sessions "
          f"-> {len(t)} configurations, {t['model'].nunique()} models, {t['backend'].nunique()} backends "
          f"on {', '.join(devices)}")
    print(f"  batch sizes {sorted(int(b) for b in t['batch_size'].unique())}; rows per backend/precision: "
          + ", ".join(f"{b}/{p} {n}" for (b, p), n in combos.items()))


# --- output helpers -------------------------------------------------------------------------

@dataclass
class Aims:
    """Every aim checked, for the closing list."""

    rows: list[tuple[str, str, str, bool]]

    def check(self, label: str, value: float, aim: float, *, at_most: bool, fmt: str = "pct") -> str:
        """`label`'s verdict against `aim` ("met" / "NOT met"), remembered for `summary`."""
        ok = math.isfinite(value) and (value <= aim if at_most else value >= aim)
        shown = _pct(value).strip() if fmt == "pct" else f"{value:.1f}x" if math.isfinite(value) else "n/a"
        target = (_pct(aim).strip() if fmt == "pct" else f"{aim:g}x")
        aim_text = f"aim {'<=' if at_most else '>='} {target}"
        self.rows.append((label, shown, aim_text, ok))
        return f"{aim_text}: {'met' if ok else 'NOT met'}"

    def summary(self) -> None:
        print("\n== aims ==")
        for label, shown, aim_text, ok in self.rows:
            print(f"  {label:<40}{shown:>8}  {aim_text:<13}  {'met' if ok else 'NOT met'}")
        print(f"  {sum(ok for *_, ok in self.rows)} of {len(self.rows)} met")


@contextlib.contextmanager
def section(title: str) -> Iterator[None]:
    """Print `title`, then the section's wall time when it ends."""
    print(f"\n== {title} ==", flush=True)
    started = time.perf_counter()
    yield
    print(f"  [{time.perf_counter() - started:.0f} s]", flush=True)


def _pct(value: float, width: int = 8) -> str:
    return f"{100 * value:{width - 1}.1f}%" if math.isfinite(value) else f"{'n/a':>{width}}"


def _ratio(base: float, model: float) -> float:
    return base / model if model > 0 and math.isfinite(base) else math.nan


ERR_HEADER = f"  {'predictor':<30}{'MAPE':>9}{'median':>8}{'p90':>10}{'<=10%':>8}{'x off':>9}{'n':>6}"


def _err_line(who: str, m: dict[str, float], note: str = "") -> str:
    # x off: exp(mean |log(pred / measured)|), symmetric where MAPE caps under-estimates at 100%.
    return (f"  {who:<30}{_pct(m['mape'], 9)}{_pct(m['median_ape'])}{_pct(m['p90_ape'], 10)}"
            f"{_pct(m['within_10pct'])}{math.exp(m['log_mae']):>8.2f}x{int(m['n']):>6}{note}")


# --- predictions ----------------------------------------------------------------------------

def choose_recipe(ds: Dataset, trials: int, seed: int) -> StudyResult:
    """The Optuna study of `hwsel train` on the default folds (held-out batches and models)."""
    return run_study(ds.X, ds.y, cv_folds(ds.table), offset_column=LEARNED["latency"][1], trials=trials,
                     seed=seed, progress=False, name=f"quality-{ds.name}")


def lomo_folds(ds: Dataset) -> list[Fold]:
    """Leave one model out: one fold per model (`hwsel.evaluation.lomo_folds`, as `hwsel train`
    calibrates its intervals)."""
    from hwsel.evaluation import lomo_folds as folds_of

    return folds_of(ds.table)


def lomo_oof(ds: Dataset, params: dict, seed: int) -> tuple[pd.DataFrame, list[Fold]]:
    """Out-of-fold log predictions of the recipe `params`, one model held out at a time."""
    folds = lomo_folds(ds)
    estimator = build_estimator(params, offset_column=LEARNED["latency"][1], seed=seed)
    with one_thread():
        oof = out_of_fold(estimator, ds.X, ds.y, folds)
    oof["model"] = ds.table["model"].astype(str).to_numpy()[oof["row"].to_numpy()]
    return oof, folds


def roofline_layer(ds: Dataset) -> np.ndarray:
    """Log latency the roofline layer answers for each row (`hwsel.layers.roofline.layer_log_ms`:
    the roofline plus the launch overhead it adds, as served)."""
    from hwsel.layers.roofline import layer_log_ms

    return np.asarray(layer_log_ms(ds.X), dtype=float)


def calibrated_roofline(ds: Dataset, oof: pd.DataFrame, folds: list[Fold]) -> pd.DataFrame:
    """The roofline layer times one efficiency factor per configuration (hardware, backend,
    precision): the median measured/roofline ratio of that configuration's rows in each training
    fold (of all its rows where the fold holds none of that configuration)."""
    from hwsel.intervals import config_groups

    roof = roofline_layer(ds)
    config = config_groups(ds.table)
    pred = np.full(len(oof), np.nan)
    for fold in folds:
        gap = ds.y[fold.train] - roof[fold.train]
        shift = {c: float(np.nanmedian(gap[config[fold.train] == c])) for c in np.unique(config[fold.train])}
        overall = float(np.nanmedian(gap))
        mask = ((oof["scheme"] == fold.scheme) & (oof["fold"] == fold.index)).to_numpy()
        rows = oof.loc[mask, "row"].to_numpy()
        pred[mask] = roof[rows] + np.array([shift.get(c, overall) for c in config[rows]])
    return oof.assign(y_pred=pred)


def nearest_zoo(ds: Dataset, *, architecture_first: bool = True) -> tuple[np.ndarray, dict[str, int]]:
    """Log latency of the nearest other model measured in the same configuration, scaled by the
    roofline layer's ratio of the two (compute, memory traffic and launch overhead: a launch-bound
    GPU case scales by about 1, not by its FLOPs ratio).

    For each row: among rows of other models with the same `SAME_CONFIG`, with
    `architecture_first` those of the same model_type if any, else of the same family, else all;
    of those the closest in log FLOPs per item; its latency times the roofline layer's ratio. NaN
    where no other model was measured in that configuration (or FLOPs are unknown). Also returns
    how many rows used each tier.
    """
    t, X = ds.table, ds.X
    key = t[list(SAME_CONFIG)].astype(str).agg("|".join, axis=1).to_numpy()
    model = t["model"].astype(str).to_numpy()
    mtype = X["model_type"].astype(str).to_numpy()
    family = X["family"].astype(str).to_numpy()
    flops = X["log_flops_per_item"].to_numpy(dtype=float)
    roof = roofline_layer(ds)
    pred = np.full(len(t), np.nan)
    tiers = {"same model_type": 0, "same family": 0, "nearest FLOPs only": 0, "no neighbour": 0}
    for rows in pd.Series(np.arange(len(t))).groupby(key).groups.values():
        rows = np.asarray(rows)
        for i in rows:
            others = rows[(model[rows] != model[i]) & np.isfinite(flops[rows])]
            if len(others) == 0 or not np.isfinite(flops[i]):
                tiers["no neighbour"] += 1
                continue
            tier, pool = "nearest FLOPs only", others
            narrowing = (("same family", family), ("same model_type", mtype)) if architecture_first else ()
            for label, arch in narrowing:  # the narrower wins
                same = others[(arch[others] == arch[i]) & (arch[others] != "unknown")]
                if len(same):
                    tier, pool = label, same
            j = pool[np.argmin(np.abs(flops[pool] - flops[i]))]
            pred[i] = ds.y[j] + roof[i] - roof[j]
            tiers[tier] += 1
    return pred, tiers


def coverage(oof: pd.DataFrame, level: float = LEVEL) -> dict[str, float]:
    """Share of held-out rows inside their fold's conformal band, and the median width factor.

    Each held-out model's band is `conformal_band` of the other models' out-of-fold residuals
    (log measured - log predicted).
    """
    resid = (oof["y_true"] - oof["y_pred"]).to_numpy()
    model = oof["model"].to_numpy()
    inside = np.zeros(len(oof), dtype=bool)
    width = np.zeros(len(oof))
    for name in np.unique(model):
        here = model == name
        low, high = conformal_band(resid[~here], level)
        inside[here] = (resid[here] >= low) & (resid[here] <= high)
        width[here] = math.exp(high - low)
    return {"coverage": float(inside.mean()), "width": float(np.median(width)), "n": len(oof)}


def selection(table: pd.DataFrame, oof: pd.DataFrame, scheme: str) -> dict[str, float]:
    """Top-1 accuracy and regret of choosing hardware/backend/precision by predicted latency."""
    part = oof[oof["scheme"] == scheme]
    rows = part["row"].to_numpy()
    frame = pd.DataFrame({
        "model": table["model"].to_numpy()[rows],
        "batch_size": table["batch_size"].to_numpy()[rows],
        "config": (table["hardware"].astype(str) + "/" + table["backend"].astype(str) + "/"
                   + table["precision"].astype(str)).to_numpy()[rows],
        "measured": np.exp(part["y_true"].to_numpy()),
        "predicted": np.exp(part["y_pred"].to_numpy()),
    })
    # Several records of one configuration (repeated sessions): average them.
    frame = frame.groupby(["model", "batch_size", "config"], as_index=False).mean()
    hits, regrets, near = [], [], []
    for _, group in frame.groupby(["model", "batch_size"]):
        if len(group) < 2:
            continue
        chosen = group.loc[group["predicted"].idxmin()]
        best = group["measured"].min()
        hits.append(chosen["measured"] == best)
        regrets.append(chosen["measured"] / best - 1.0)
        near.append(chosen["measured"] <= 1.05 * best)
    if not hits:
        return {"top1": math.nan, "regret": math.nan, "within5": math.nan, "max_regret": math.nan, "n": 0}
    return {"top1": float(np.mean(hits)), "regret": float(np.mean(regrets)), "within5": float(np.mean(near)),
            "max_regret": float(np.max(regrets)), "n": len(hits)}


def noise_floor(runs: pd.DataFrame) -> dict[str, float]:
    """How well one session's measurement predicts another's for the same configuration.

    No predictor scored against single measurements can beat this by much: it is the error of a
    perfect memory of one earlier measurement.
    """
    key = runs[list(CONFIG_KEYS)].map(repr).agg("|".join, axis=1)
    apes, logs = [], []
    for _, values in runs["latency_ms_median"].groupby(key):
        v = values.to_numpy(dtype=float)
        for i in range(len(v)):
            for j in range(len(v)):
                if i != j:
                    apes.append(abs(v[i] - v[j]) / v[j])
                    logs.append(abs(math.log(v[i] / v[j])))
    if not apes:
        return {"mape": math.nan, "median_ape": math.nan, "within_10pct": math.nan, "pairs": 0,
                "band90_width": math.nan}
    a = np.asarray(apes)
    # One measurement's log noise sigma, from the pairs' log differences (sd sqrt(2) sigma; the
    # median of a half-normal is 0.674 sd), and the width of a 90% band that a perfect predictor
    # of the mean needs to cover one measurement: exp(2 x 1.645 sigma).
    sigma = float(np.median(logs)) / (0.6745 * math.sqrt(2.0))
    return {"mape": float(a.mean()), "median_ape": float(np.median(a)), "within_10pct": float((a <= 0.1).mean()),
            "pairs": len(a), "band90_width": math.exp(2 * 1.645 * sigma)}


# --- tables ---------------------------------------------------------------------------------

def data_table(ds: Dataset) -> None:
    """What the data set holds and how much its repeated measurements disagree."""
    describe(ds)
    floor = noise_floor(ds.runs)
    if floor["pairs"]:
        print(f"  measurement noise: {floor['pairs']} pairs of repeated measurements of one configuration in "
              f"different sessions differ by MAPE {_pct(floor['mape']).strip()}, median "
              f"{_pct(floor['median_ape']).strip()}, within 10% {_pct(floor['within_10pct']).strip()}")
        print(f"  so a 90% interval that only had to cover one measurement around a perfectly predicted mean "
              f"would be {floor['band90_width']:.2f}x wide (high/low): the floor under the interval width aim")
    else:
        print("  measurement noise: no configuration measured twice")


def recipe_table(ds: Dataset, trials: int, seed: int) -> StudyResult:
    """Run the study; print the recipe and that derived throughput agrees with latency."""
    started = time.perf_counter()
    study = choose_recipe(ds, trials, seed)
    print(f"  {trials} trials in {time.perf_counter() - started:.0f} s on {len(cv_folds(ds.table))} default folds; "
          f"best {study.params}")
    model = build_estimator(study.params, offset_column=LEARNED["latency"][1], seed=seed)
    with one_thread():
        model.fit(ds.X, ds.y)
    tp = np.exp(ThroughputFromLatency.from_fitted(model).predict(ds.X))
    lat = np.exp(model.predict(ds.X))
    gap = float(np.max(np.abs(tp * lat / (1e3 * ds.X["batch_size"].to_numpy()) - 1)))
    print(f"  throughput = 1000 * batch / latency for every row: max relative gap {gap:.1e}")
    return study


def _steady_line(ds: Dataset, oof: pd.DataFrame) -> None:
    """The model's errors on configurations whose repeats agree within 25% (if any were repeated)."""
    rows = oof["row"].to_numpy()
    keep = (ds.table["repeats"].to_numpy()[rows] >= 2) & (ds.table["latency_spread"].to_numpy()[rows] <= 1.25)
    if keep.sum() >= 10:
        m = error_metrics(oof["y_true"].to_numpy()[keep], oof["y_pred"].to_numpy()[keep])
        print(_err_line("model, repeats within 25%", m))


def heldout_batch_table(ds: Dataset, study: StudyResult, aims: Aims) -> None:
    """Each batch size predicted by a model that never saw it (the study's own folds)."""
    oof = study.oof[study.oof["scheme"] == "heldout_batch"]
    if not len(oof):
        print("  skipped: a single batch size")
        return
    rows = oof["row"].to_numpy()
    model = scheme_metrics(oof)["heldout_batch"]
    verdict = aims.check(f"{ds.name} held-out batch MAPE", model["mape"], HELDOUT_BATCH_AIM, at_most=True)
    print(ERR_HEADER)
    print(_err_line("model", model, f"   {verdict}"))
    print(_err_line("roofline layer (as served)", error_metrics(oof["y_true"], roofline_layer(ds)[rows])))
    folds = [f for f in cv_folds(ds.table) if f.scheme == "heldout_batch"]
    cal = calibrated_roofline(ds, oof, folds)
    print(_err_line("roofline x factor per config", error_metrics(cal["y_true"], cal["y_pred"])))
    _steady_line(ds, oof)
    s = selection(ds.table, study.oof, "heldout_batch")
    print(f"  selection: top-1 {_pct(s['top1']).strip()}, mean regret {_pct(s['regret']).strip()} "
          f"({s['n']} model x batch cases with 2+ options)")


def lomo_table(ds: Dataset, oof: pd.DataFrame, folds: list[Fold], aims: Aims) -> None:
    """Leave one model out: the recipe against the roofline and the nearest zoo model."""
    rows = oof["row"].to_numpy()
    y_true, y_pred = oof["y_true"].to_numpy(), oof["y_pred"].to_numpy()
    model = scheme_metrics(oof)["lomo"]
    roof = error_metrics(y_true, roofline_layer(ds)[rows])
    cal = calibrated_roofline(ds, oof, folds)
    name = ds.name
    print(f"  {len(folds)} folds, one per model")
    print(ERR_HEADER)
    verdict = aims.check(f"{name} LOMO MAPE", model["mape"], LOMO_MAPE_AIM[name], at_most=True)
    print(_err_line("model", model, f"   {verdict}"))
    print(_err_line("roofline layer (as served)", roof))
    print(_err_line("roofline x factor per config", error_metrics(cal["y_true"], cal["y_pred"])))
    # Two nearest-zoo baselines: the architecture-first one and the nearest in FLOPs,
    # which is stronger where the only sibling of a full-size model is its tiny test version.
    near: dict[str, tuple[dict[str, float], dict[str, float], dict[str, int]]] = {}
    for label, arch_first in (("nearest zoo, arch first", True), ("nearest zoo, FLOPs only", False)):
        pred, tiers = nearest_zoo(ds, architecture_first=arch_first)
        pred = pred[rows]
        has = np.isfinite(pred)
        near[label] = (error_metrics(y_true[has], pred[has]), error_metrics(y_true[has], y_pred[has]), tiers)
        missing = f"   ({tiers['no neighbour']} rows without a neighbour left out)" if tiers["no neighbour"] else ""
        print(_err_line(label, near[label][0], missing))
        if not has.all():
            print(_err_line("model on those rows", near[label][1]))
    _steady_line(ds, oof)
    r_roof = _ratio(roof["mape"], model["mape"])
    print(f"  roofline MAPE / model MAPE: {r_roof:.1f}x   "
          f"{aims.check(f'{name} LOMO roofline/model MAPE', r_roof, ROOFLINE_RATIO_AIM, at_most=False, fmt='x')}")
    ratios = {label: _ratio(base["mape"], mine["mape"]) for label, (base, mine, _) in near.items()}
    for label, (_, _, tiers) in near.items():
        print(f"  {label} MAPE / model MAPE: {ratios[label]:.1f}x; neighbours: "
              + ", ".join(f"{k} {v}" for k, v in tiers.items() if v))
    # The aim is judged against the stronger (lower-MAPE) of the two baselines.
    strong = min(ratios, key=lambda k: ratios[k] if math.isfinite(ratios[k]) else math.inf)
    print(f"  against the stronger ({strong}): {ratios[strong]:.1f}x   "
          f"{aims.check(f'{name} LOMO nearest-zoo/model MAPE', ratios[strong], NEAREST_RATIO_AIM, at_most=False, fmt='x')}")


#: A layer's coverage aim is judged where it answers at least this many rows.
LAYER_MIN_ROWS = 20


def measured_answers(ds: Dataset, level: float = LEVEL) -> pd.DataFrame:
    """The measured layer's answers to a repeat: for every case measured in two or more sessions,
    each session's median against the median of the other sessions' records
    (`hwsel.layers.measured.session_residuals`, as the layer serves them), with the between-session
    band calibrated on the other models' cases only (columns model, config, resid, low, high)."""
    from hwsel.intervals import AdaptiveBand
    from hwsel.layers.measured import session_residuals

    runs = ds.runs.assign(device_name=ds.runs["device_name"].fillna(""))
    keys = ["model", "hardware", "precision", "batch_size", "mode", "backend", "device_name"]
    runs = runs.assign(mode=runs["mode"].fillna("inference"))
    groups = {k: g.to_dict("records") for k, g in runs.groupby(keys, sort=True, dropna=False)}
    resid, config, model = (np.asarray(v) for v in session_residuals(groups))
    low, high = np.zeros(len(resid)), np.zeros(len(resid))
    for name in np.unique(model):
        here = model == name
        if (~here).sum() < 2:
            low[here], high[here] = -np.inf, np.inf
            continue
        band = AdaptiveBand.fit(resid[~here], np.zeros((~here).sum()), level, config[~here])
        low[here], high[here] = band.offsets(np.zeros(here.sum()), config[here])
    return pd.DataFrame({"model": model, "config": config, "resid": resid.astype(float), "low": low, "high": high})


def layer_answers(ds: Dataset, oof: pd.DataFrame, level: float = LEVEL) -> dict[str, pd.DataFrame]:
    """Every held-out answer of each layer, with its band calibrated on the other models' answers
    of that layer (columns row, resid, low, high, distance; measured: see `measured_answers`)."""
    from hwsel.intervals import (
        MIN_LAYER_MODELS,
        AdaptiveBand,
        config_groups,
        layer_oofs,
        lomo_distances,
        lomo_offsets,
        novelty_frame,
        span_offsets,
    )

    frame = novelty_frame(ds.table, ds.X)
    parts = {"trained": oof, **layer_oofs(ds.table, ds.X, oof)}
    out = {"measured": measured_answers(ds, level).assign(distance=0.0)}
    for name, part in parts.items():
        if not len(part):
            continue
        distance = lomo_distances(frame, part)
        if name == "blended":
            # as `hwsel train` stores it: a band of its own only from the blended answers of
            # MIN_LAYER_MODELS other models or more, else the trained and roofline bands blended by its weight
            low, high = (np.zeros(len(part)) for _ in range(2))
            model = frame["model"].to_numpy()[part["row"].to_numpy()]
            resid = (part["y_true"] - part["y_pred"]).to_numpy()
            group = config_groups(frame)[part["row"].to_numpy()]
            at = {r: k for k, r in enumerate(oof["row"].to_numpy())}
            k = np.array([at[r] for r in part["row"]])
            t, f = out["trained"], out["roofline"]
            for m in np.unique(model):
                here = model == m
                if len(np.unique(model[~here])) >= MIN_LAYER_MODELS:
                    band = AdaptiveBand.fit(resid[~here], distance[~here], level, group[~here])
                    low[here], high[here] = band.offsets(distance[here], group[here])
                else:
                    kk = k[here]
                    low[here], high[here] = span_offsets(
                        (t["low"].to_numpy()[kk], t["high"].to_numpy()[kk]), (f["low"].to_numpy()[kk], f["high"].to_numpy()[kk]),
                        part["weight"].to_numpy()[here])
        else:
            low, high = lomo_offsets(frame, part, level)
        out[name] = pd.DataFrame({"row": part["row"].to_numpy(), "resid": (part["y_true"] - part["y_pred"]).to_numpy(),
                                  "low": low, "high": high, "distance": distance,
                                  "y_true": part["y_true"].to_numpy(), "y_pred": part["y_pred"].to_numpy()})
    return out


def served_layer(ds: Dataset, oof: pd.DataFrame, answers: dict[str, pd.DataFrame]) -> np.ndarray:
    """Which layer `hwsel.predict.Predictor` answers each configuration of `oof` from, its model
    held out: ``measured`` where the configuration was measured in another session too, else
    ``roofline`` where no other model was measured in its configuration (outside the champion's
    domain), ``blended`` where its model lies outside the other models' coverage, else ``trained``."""
    from hwsel.intervals import UNSEEN_CONFIG

    t = ds.table
    rows = oof["row"].to_numpy()
    repeated = t["repeats"].to_numpy()[rows] >= 2
    layer = np.where(repeated, "measured", "trained").astype(object)
    for name in ("blended", "roofline"):
        part = answers.get(name)
        if part is None:
            continue
        hit = np.isin(rows, part["row"].to_numpy())
        if name == "roofline":
            far = dict(zip(part["row"], part["distance"], strict=True))
            hit &= np.array([far.get(r, 0.0) >= UNSEEN_CONFIG for r in rows])
        layer[hit & ~repeated] = name
    return layer


def _layer_line(label: str, part: pd.DataFrame, share: str = "") -> tuple[str, float, int]:
    inside = (part["resid"] >= part["low"]) & (part["resid"] <= part["high"])
    n = len(part)
    if not n:
        return f"  {label:<10}{share:>7}{0:>7}{'n/a':>10}", math.nan, 0
    width = np.exp(part["high"] - part["low"]).to_numpy()
    p10, med, p90 = (float(np.quantile(width, q)) for q in (0.1, 0.5, 0.9))
    ape = np.abs(np.expm1(-part["resid"].to_numpy()))  # |pred - measured| / measured
    cov = float(inside.mean())
    return (f"  {label:<10}{share:>7}{n:>7}{_pct(cov, 10)}{p10:>9.2f}x{med:>8.2f}x{p90:>8.2f}x{p90 / p10:>9.2f}"
            f"{_pct(float(np.mean(ape)), 9)}"), cov, n


LAYER_HEADER = (f"  {'layer':<10}{'share':>7}{'rows':>7}{'coverage':>10}{'width p10':>10}{'median':>9}{'p90':>9}"
                f"{'p90/p10':>9}{'MAPE':>9}")


def coverage_table(ds: Dataset, oof: pd.DataFrame, aims: Aims) -> pd.DataFrame:
    """Nominal 90% bands on held-out models, per answering layer: each layer's band calibrated on
    its own held-out answers of the other models (`layer_answers`); as served (the layer
    `served_layer` picks for each configuration) and on every row each layer can answer, and per
    distance bucket. Returns the trained answers with their offsets (for the precision choice)."""
    c = coverage(oof)
    print(f"  one fixed band for every answer: {c['n']} held-out-model rows inside: "
          f"{_pct(c['coverage']).strip()}; width {c['width']:.2f}x")
    answers = layer_answers(ds, oof)
    served = served_layer(ds, oof, answers)
    rows = oof["row"].to_numpy()
    print(f"  as served ({len(rows)} configurations, each model held out; measured where another session measured "
          "the configuration, its rows one per session):")
    print(LAYER_HEADER)
    widths = []
    for name in ("measured", "trained", "blended", "roofline"):
        share = float(np.mean(served == name))
        part = answers.get(name)
        if part is None:
            print(f"  {name:<10}{_pct(share, 7)}{0:>7}  (no answers to calibrate on)")
            continue
        if name != "measured":  # every repeated case is served by the measured layer
            part = part[np.isin(part["row"].to_numpy(), rows[served == name])]
        line, cov, n = _layer_line(name, part, _pct(share, 7).strip())
        widths.append(np.exp(part["high"] - part["low"]).to_numpy())
        verdict = ""
        if n >= LAYER_MIN_ROWS:
            verdict = (f"   {aims.check(f'{ds.name} {name} coverage as served', cov, COVERAGE_AIM, at_most=False)}; "
                       f"{aims.check(f'{ds.name} {name} coverage as served (upper)', cov, COVERAGE_MAX, at_most=True)}")
        print(line + verdict)
    unseen = [answers[n][np.isin(answers[n]["row"].to_numpy(), rows[served == n])]
              for n in ("trained", "blended", "roofline") if n in answers]
    both = pd.concat(unseen, ignore_index=True)
    served_m = error_metrics(both["y_true"].to_numpy(), both["y_pred"].to_numpy())
    t = answers["trained"]
    alone = t[np.isin(t["row"].to_numpy(), both["row"].to_numpy())]
    alone_m = error_metrics(alone["y_true"].to_numpy(), alone["y_pred"].to_numpy())
    print(f"  held-out models as served (trained, blended and roofline answers, {int(served_m['n'])} configurations): "
          f"MAPE {_pct(served_m['mape']).strip()}; the trained model alone on them {_pct(alone_m['mape']).strip()}")
    all_w = np.concatenate(widths) if widths else np.array([math.nan])
    spread = float(np.quantile(all_w, 0.9) / np.quantile(all_w, 0.1))
    print(f"  every answer: {_width_line(all_w)}   "
          f"{aims.check(f'{ds.name} width p90/p10 as served', spread, SPREAD_AIM, at_most=False, fmt='x')}")
    print("  every row each layer can answer (its model held out; measured: every repeat):")
    print(LAYER_HEADER)
    for name in ("measured", "trained", "blended", "roofline"):
        part = answers.get(name)
        if part is None:
            continue
        line, cov, n = _layer_line(name, part)
        verdict = ""
        if n >= LAYER_MIN_ROWS:
            verdict = (f"   {aims.check(f'{ds.name} {name} coverage', cov, COVERAGE_AIM, at_most=False)}; "
                       f"{aims.check(f'{ds.name} {name} coverage (upper)', cov, COVERAGE_MAX, at_most=True)}")
        print(line + verdict)
    print("  coverage by distance to the other models (every row; rows, coverage, median width):")
    from hwsel.intervals import DISTANCE_BUCKETS

    head = "".join(f"{f'{lo:g}-{hi:g}' if math.isfinite(hi) else f'>={lo:g}':>24}" for lo, hi in DISTANCE_BUCKETS)
    print(f"  {'layer':<10}{head}")
    for name in ("trained", "blended", "roofline"):
        part = answers.get(name)
        if part is None:
            continue
        cells = []
        for lo, hi in DISTANCE_BUCKETS:
            b = part[(part["distance"] >= lo) & (part["distance"] < hi)]
            if not len(b):
                cells.append(f"{'-':>24}")
                continue
            cov = float(((b["resid"] >= b["low"]) & (b["resid"] <= b["high"])).mean())
            med = float(np.median(np.exp(b["high"] - b["low"])))
            cells.append(f"{len(b):>8}{_pct(cov, 9)}{med:>6.2f}x")
        print(f"  {name:<10}" + "".join(cells))
    trained = answers["trained"]
    return oof.assign(low=trained["low"].to_numpy(), high=trained["high"].to_numpy(),
                      resid=trained["resid"].to_numpy())


def _width_line(width: np.ndarray) -> str:
    p10, med, p90 = (float(np.quantile(width, q)) for q in (0.1, 0.5, 0.9))
    return f"width high/low: median {med:.2f}x, p10 {p10:.2f}x, p90 {p90:.2f}x, p90/p10 {p90 / p10:.2f}"


def precision_choice(ds: Dataset, bands: pd.DataFrame) -> dict[str, float]:
    """Choosing the precision of each (model, batch size, hardware, backend) by predicted latency,
    models held out, with ties: an option whose predicted latency is within the 90% bound of a
    predicted difference (calibrated on the other models' pairs) of the fastest one's ties with
    it; a tie is resolved by the stated secondary rule (less memory: fewer bytes per element,
    then energy: none recorded, so the prediction decides) and counted apart."""
    from pytest_hwbench.vocabulary import bytes_per_element

    t = ds.table
    rows = bands["row"].to_numpy()
    frame = pd.DataFrame({
        "case": (t["model"].astype(str) + "|" + t["batch_size"].astype(str) + "|" + t["hardware"].astype(str) + "|"
                 + t["backend"].astype(str)).to_numpy()[rows],
        "precision": t["precision"].astype(str).to_numpy()[rows],
        "measured": bands["y_true"].to_numpy(), "predicted": bands["y_pred"].to_numpy(),
        "low": bands["y_pred"].to_numpy() + bands["low"].to_numpy(),
        "high": bands["y_pred"].to_numpy() + bands["high"].to_numpy(),
    }).groupby(["case", "precision"], as_index=False).mean()
    # The uncertainty of a difference between two precisions of one case is that of their ratio:
    # their errors share the model, so it is much smaller than either interval. Its 90% bound is
    # the 90% quantile of |residual_i - residual_j| over the pairs of the other models' cases.
    frame["model"] = frame["case"].str.split("|").str[0]
    frame["resid"] = frame["measured"] - frame["predicted"]
    pairs: list[tuple[str, float]] = []
    for _, g in frame.groupby("case"):
        r = g["resid"].to_numpy()
        pairs += [(g["model"].iloc[0], abs(r[i] - r[j])) for i in range(len(r)) for j in range(i + 1, len(r))]
    pair_model = np.array([m for m, _ in pairs])
    pair_diff = np.array([v for _, v in pairs])
    bound = {m: float(np.quantile(pair_diff[pair_model != m], LEVEL)) if (pair_model != m).any() else math.inf
             for m in frame["model"].unique()}
    decided, decided_hits, ties, tie_hits, regrets, n = 0, 0, 0, 0, [], 0
    plain_hits, plain_regrets = 0, []
    for _, g in frame.groupby("case"):
        if len(g) < 2:
            continue
        n += 1
        best = float(g["measured"].min())
        top = g.loc[g["predicted"].idxmin()]
        plain_hits += bool(top["measured"] == best)
        plain_regrets.append(math.exp(float(top["measured"]) - best) - 1.0)
        tied = g[g["predicted"] - top["predicted"] <= bound[top["model"]]]
        if len(tied) > 1:
            ties += 1
            tie_hits += bool((tied["measured"] == best).any())
            choice = tied.assign(nbytes=tied["precision"].map(bytes_per_element)).sort_values(
                ["nbytes", "predicted"], kind="mergesort").iloc[0]
        else:
            decided += 1
            decided_hits += bool(top["measured"] == best)
            choice = top
        regrets.append(math.exp(float(choice["measured"]) - best) - 1.0)
    return {"n": n, "decided": decided, "top1_decided": decided_hits / decided if decided else math.nan,
            "ties": ties, "tie_holds_best": tie_hits / ties if ties else math.nan,
            "top1_strict": decided_hits / n if n else math.nan,
            "regret": float(np.mean(regrets)) if regrets else math.nan,
            "plain_top1": plain_hits / n if n else math.nan,
            "plain_regret": float(np.mean(plain_regrets)) if plain_regrets else math.nan,
            "bound": float(np.median(list(bound.values()))) if bound else math.nan}


def precision_table(ds: Dataset, bands: pd.DataFrame) -> None:
    """Precision choice on held-out models, ties counted as ties."""
    s = precision_choice(ds, bands)
    print(f"  {s['n']} model x batch x hardware x backend cases with 2+ precisions")
    print(f"  decided {s['decided']}: top-1 {_pct(s['top1_decided']).strip()}; ties {s['ties']} "
          f"(the measured best inside the tie: {_pct(s['tie_holds_best']).strip()}); top-1 counting every tie as a "
          f"miss {_pct(s['top1_strict']).strip()}")
    print(f"  mean regret {_pct(s['regret']).strip()} (ties resolved by less memory, then energy); a tie is a predicted "
          f"difference under {math.exp(s['bound']):.2f}x (median over folds)")
    print(f"  for comparison, the fastest prediction alone (no ties): top-1 {_pct(s['plain_top1']).strip()}, "
          f"mean regret {_pct(s['plain_regret']).strip()}")


def selection_table(ds: Dataset, oof: pd.DataFrame, aims: Aims) -> None:
    """Top-1 choice and regret across the options of each (model, batch size), models held out."""
    options = (ds.table["hardware"].astype(str) + "/" + ds.table["backend"].astype(str) + "/"
               + ds.table["precision"].astype(str))
    s = selection(ds.table, oof, "lomo")
    print(f"  {s['n']} model x batch cases with 2+ of {options.nunique()} options "
          f"({', '.join(sorted(options.unique()))})")
    print(f"  top-1 {_pct(s['top1']).strip()}   "
          f"{aims.check(f'{ds.name} LOMO top-1', s['top1'], TOP1_AIM, at_most=False)}")
    print(f"  mean regret {_pct(s['regret']).strip()}   "
          f"{aims.check(f'{ds.name} LOMO mean regret', s['regret'], REGRET_AIM, at_most=True)}")
    print(f"  within 5% of best {_pct(s['within5']).strip()}, max regret {_pct(s['max_regret']).strip()}")


def cpu_to_gpu_table(cpu: Dataset, gpu: Dataset, params: dict, seed: int) -> None:
    """The CPU recipe trained on CPU records alone, predicting every GPU record."""
    estimator = build_estimator(params, offset_column=LEARNED["latency"][1], seed=seed)
    with one_thread():
        estimator.fit(cpu.X, cpu.y)
        pred = np.asarray(estimator.predict(gpu.X), dtype=float)
    model = error_metrics(gpu.y, pred)
    roof = error_metrics(gpu.y, roofline_layer(gpu))
    print(f"  trained on {len(cpu.table)} {cpu.name} rows (0 GPU rows), predicting {len(gpu.table)} {gpu.name} rows")
    print(ERR_HEADER)
    print(_err_line(f"{cpu.name}-trained model", model))
    print(_err_line("roofline layer (as served)", roof))
    eager = (gpu.table["backend"] == "torch").to_numpy()
    if eager.any() and not eager.all():
        print(_err_line("model, eager torch rows", error_metrics(gpu.y[eager], pred[eager])))
    better = model["mape"] < roof["mape"]
    print(f"  roofline MAPE / model MAPE: {_ratio(roof['mape'], model['mape']):.1f}x "
          f"({'model better' if better else 'roofline better'})")


def api_timings(table: pd.DataFrame, trials: int, seed: int) -> None:
    """Median latency of hwsel.select_hardware and time of hwsel.prediction_matrix, with champions."""
    try:
        import hwsel

        select_hardware = hwsel.select_hardware
        prediction_matrix = hwsel.prediction_matrix
        clear = getattr(hwsel, "clear_predictors", lambda: None)
    except (ImportError, AttributeError) as exc:
        print(f"  skipped (hwsel.select_hardware / prediction_matrix not importable: {exc})")
        return
    from hwsel.train import train

    with tempfile.TemporaryDirectory(prefix="hwsel-api-") as tmp:
        uri = f"sqlite:///{Path(tmp) / 'mlflow.db'}"
        snap = Path(tmp) / "runs.parquet"
        table.loc[:, list(RUN_COLUMNS)].to_parquet(snap, index=False)
        started = time.perf_counter()
        train(str(snap), tracking_uri=uri, trials=trials, seed=seed, progress=False)
        print(f"  champions trained ({trials} trials) and registered in {time.perf_counter() - started:.0f} s")
        where = {"source": str(snap), "tracking_uri": uri}
        clear()
        try:
            started = time.perf_counter()
            select_hardware("bert-base", batch_size=8, **where)
            first = time.perf_counter() - started
            times = []
            for name in ("bert-base", "gpt2", "resnet-50"):
                for batch in range(1, 11):  # distinct queries: nothing answered from a cache
                    started = time.perf_counter()
                    select_hardware(name, batch_size=batch, **where)
                    times.append(time.perf_counter() - started)
            print(f"  select_hardware: first call {1e3 * first:.0f} ms (loads data and champions), "
                  f"then median {1e3 * statistics.median(times):.2f} ms over {len(times)} distinct queries")
        except Exception as exc:
            print(f"  select_hardware: failed ({type(exc).__name__}: {exc})")
        try:
            from pytest_hwbench.models import MODELS

            # 16 zoo models and 4 hub-style aliases: 20 x 25 x 5 x 4 = 10,000 configurations.
            models = (sorted(MODELS)[:16] + ["bert-base-uncased", "google/vit-base-patch16-224",
                                              "openai/whisper-tiny", "microsoft/resnet-50"])[:20]
            batches = list(range(1, 26))
            hardware = ["cpu", "cuda", "openvino", "mps", "rocm"]
            precisions = ["fp32", "fp16", "bf16", "int8"]
            n = len(models) * len(batches) * len(hardware) * len(precisions)
            started = time.perf_counter()
            prediction_matrix(models=models, batch_sizes=batches, hardware=hardware, precisions=precisions, **where)
            elapsed = time.perf_counter() - started
            print(f"  prediction_matrix: {elapsed:.2f} s for {n:,} configurations ({len(models)} models x "
                  f"{len(batches)} batch sizes x {len(hardware)} hardware x {len(precisions)} precisions)")
        except Exception as exc:
            print(f"  prediction_matrix: failed ({type(exc).__name__}: {exc})")
        clear()


def report(ds: Dataset, trials: int, seed: int, aims: Aims) -> StudyResult:
    """Every table of one data set; returns its study (the recipe)."""
    with section(f"{ds.name}: data"):
        data_table(ds)
    with section(f"{ds.name}: recipe (Optuna study on the default folds)"):
        study = recipe_table(ds, trials, seed)
    with section(f"{ds.name}: held-out batch sizes"):
        heldout_batch_table(ds, study, aims)
    with section(f"{ds.name}: leave one model out"):
        oof, folds = lomo_oof(ds, study.params, seed)
        lomo_table(ds, oof, folds, aims)
    with section(f"{ds.name}: nominal 90% intervals on held-out models"):
        bands = coverage_table(ds, oof, aims)
    with section(f"{ds.name}: selection on held-out models"):
        selection_table(ds, oof, aims)
    with section(f"{ds.name}: precision choice on held-out models (ties counted as ties)"):
        precision_table(ds, bands)
    return study


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0],
                                     formatter_class=argparse.RawDescriptionHelpFormatter,
                                     epilog="\n".join(__doc__.split("\n")[2:11]))
    parser.add_argument("--data", default=str(DEFAULT_DATA),
                        help="CPU runs: .parquet snapshot, .duckdb file or MLflow tracking URI "
                             f"(default {DEFAULT_DATA.relative_to(ROOT)})")
    parser.add_argument("--data-h100", default=str(DEFAULT_H100),
                        help=f"H100 runs, same kinds (default {DEFAULT_H100.relative_to(ROOT)}); 'none' skips them")
    parser.add_argument("--regenerate", action="store_true",
                        help=f"measure this CPU again and overwrite {DEFAULT_DATA.relative_to(ROOT)}")
    parser.add_argument("--regenerate-h100", metavar="DIR", type=Path,
                        help="rebuild the H100 snapshot from DIR/*_records.jsonl "
                             "(e.g. ../shared/gpu-evidence/h100-2026-11-23)")
    parser.add_argument("--trials", type=int, default=DEFAULT_TRIALS,
                        help=f"Optuna trials per data set (default {DEFAULT_TRIALS}; hwsel train uses 30)")
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--no-api", action="store_true", help="skip the select_hardware/prediction_matrix timings")
    args = parser.parse_args(argv)

    started = time.perf_counter()
    data = Path(args.data) if "://" not in args.data else args.data
    if args.regenerate:
        out = Path(args.data) if args.data.endswith(".parquet") else DEFAULT_DATA
        data = regenerate(out)
        print(f"snapshot: {data} ({Path(data).stat().st_size / 1024:.0f} KiB)")
    h100: str | Path | None = None if args.data_h100.lower() == "none" else args.data_h100
    if args.regenerate_h100 is not None:
        out = Path(args.data_h100) if args.data_h100.endswith(".parquet") else DEFAULT_H100
        h100 = regenerate_h100(args.regenerate_h100, out)

    aims = Aims([])
    cpu = load_dataset("CPU", data)
    cpu_study = report(cpu, args.trials, args.seed, aims)

    gpu = None
    if h100 is not None and "://" not in str(h100) and not Path(h100).exists():
        print(f"\nH100: {h100} does not exist; build it with --regenerate-h100 "
              "../shared/gpu-evidence/h100-2026-11-23 (or pass --data-h100 none)")
    elif h100 is not None:
        gpu = load_dataset("H100", h100)
        report(gpu, args.trials, args.seed, aims)
        with section("CPU-only training predicting the H100 records"):
            cpu_to_gpu_table(cpu, gpu, cpu_study.params, args.seed)

    if not args.no_api:
        with section("API timings on the CPU snapshot"):
            api_timings(cpu.table, trials=max(3, args.trials // 4), seed=args.seed)

    aims.summary()
    print(f"\ntotal {time.perf_counter() - started:.0f} s")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
