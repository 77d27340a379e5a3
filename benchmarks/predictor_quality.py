"""How good are the hwsel predictors on real runs? Latency errors, selection accuracy, API timings.

Usage::

    python benchmarks/predictor_quality.py                 # the committed snapshot
    python benchmarks/predictor_quality.py --data runs.parquet|hwbench.duckdb|sqlite:///mlflow.db
    python benchmarks/predictor_quality.py --regenerate    # measure this CPU again (~15 min here)

The data: real pytest-hwbench runs on this machine's CPU, the 14 quick-tier models at batch
sizes 1-32 and seven full-size models (ResNet-50, BERT-base, T5-small, ViT-base, GPT-2,
Whisper-tiny, Wav2Vec2-base) at batches 1-4, on torch, ONNX Runtime and OpenVINO in
fp32/bf16/int8 (`benchmarks/data/cpu_runs.parquet`; `SESSIONS` says exactly how).

What it prints, for latency, from out-of-fold predictions of the study's best recipe:

- held-out batch sizes (each batch size predicted by a model that never saw it) and held-out
  models (GroupKFold over models): MAPE, median and p90 absolute percentage error, share within
  10%; the same for the roofline baseline (`hwsel.features.roofline`);
- hardware selection: per model x batch size, the backend/precision/hardware with the lowest
  predicted latency against the measured best: top-1 accuracy and mean regret (how much slower
  the chosen configuration measured than the best one);
- timings of `hwsel.select_hardware` and `hwsel.prediction_matrix` (10,000 configurations) when
  that API is importable.

Caveat: the hyperparameters are chosen on the same folds that are scored, so the figures are
slightly optimistic (no nested CV: it would multiply the cost by the number of folds).
"""

from __future__ import annotations

import argparse
import math
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import numpy as np
import pandas as pd

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from hwsel.data import RUN_COLUMNS, load_runs, snapshot, training_table  # noqa: E402
from hwsel.features import feature_frame  # noqa: E402
from hwsel.train import (  # noqa: E402
    LEARNED,
    ThroughputFromLatency,
    build_estimator,
    cv_folds,
    run_study,
    scheme_metrics,
)

DEFAULT_DATA = ROOT / "benchmarks" / "data" / "cpu_runs.parquet"

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
AIMS = {"heldout_batch": 0.06, "heldout_model": 0.10}


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


def _pct(value: float) -> str:
    return f"{100 * value:6.1f}%" if math.isfinite(value) else "   n/a"


def print_errors(title: str, rows: dict[str, dict[str, dict[str, float]]]) -> None:
    """One line per (split, predictor): MAPE, median/p90 APE, share within 10%, typical factor off."""
    print(f"\n{title}")
    print(f"  {'split':<15}{'predictor':<20}{'MAPE':>8}{'median':>8}{'p90':>8}{'<=10%':>8}{'x off':>7}{'n':>6}")
    for scheme in ("heldout_batch", "heldout_model"):
        for who, table in rows.items():
            m = table.get(scheme)
            if m is None:
                continue
            # x off: exp(mean |log(pred / measured)|), symmetric where MAPE caps under-estimates at 100%.
            print(f"  {scheme:<15}{who:<20}{_pct(m['mape'])}{_pct(m['median_ape'])}{_pct(m['p90_ape'])}"
                  f"{_pct(m['within_10pct'])}{math.exp(m['log_mae']):>6.2f}x{int(m['n']):>6}")
        model, base = rows.get("model", {}).get(scheme), rows.get("roofline", {}).get(scheme)
        if model and base and model["mape"] > 0:
            aim = AIMS.get(scheme)
            met = "met" if aim is not None and model["mape"] <= aim else "NOT met"
            verdict = "" if aim is None else f"; aim MAPE <= {100 * aim:.0f}%: {met}"
            print(f"  {'':<15}roofline/model: MAPE {base['mape'] / model['mape']:.1f}x, "
                  f"typical factor off {math.exp(base['log_mae']) / math.exp(model['log_mae']):.1f}x{verdict}")


def calibrated_roofline(X: pd.DataFrame, y: np.ndarray, oof: pd.DataFrame, folds: list) -> pd.DataFrame:
    """Roofline times one efficiency factor (the median measured/roofline ratio of each training fold)."""
    roof = X["log_roofline_ms"].to_numpy()
    pred = np.empty(len(oof))
    for fold in folds:
        shift = float(np.median(y[fold.train] - roof[fold.train]))
        mask = ((oof["scheme"] == fold.scheme) & (oof["fold"] == fold.index)).to_numpy()
        pred[mask] = roof[oof.loc[mask, "row"].to_numpy()] + shift
    return oof.assign(y_pred=pred)


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
        return {"top1": math.nan, "regret": math.nan, "within5": math.nan, "n": 0}
    return {"top1": float(np.mean(hits)), "regret": float(np.mean(regrets)), "within5": float(np.mean(near)),
            "max_regret": float(np.max(regrets)), "n": len(hits)}


def noise_floor(runs: pd.DataFrame) -> dict[str, float]:
    """How well one session's measurement predicts another's for the same configuration.

    No predictor scored against single measurements can beat this by much: it is the error of a
    perfect memory of one earlier measurement.
    """
    from hwsel.data import CONFIG_KEYS

    key = runs[list(CONFIG_KEYS)].map(repr).agg("|".join, axis=1)
    apes = []
    for _, values in runs["latency_ms_median"].groupby(key):
        v = values.to_numpy(dtype=float)
        for i in range(len(v)):
            for j in range(len(v)):
                if i != j:
                    apes.append(abs(v[i] - v[j]) / v[j])
    if not apes:
        return {"mape": math.nan, "median_ape": math.nan, "within_10pct": math.nan, "pairs": 0}
    a = np.asarray(apes)
    return {"mape": float(a.mean()), "median_ape": float(np.median(a)), "within_10pct": float((a <= 0.1).mean()),
            "pairs": len(a)}


def api_timings(table: pd.DataFrame, trials: int, seed: int) -> None:
    """Median latency of hwsel.select_hardware and time of hwsel.prediction_matrix, with champions."""
    try:
        import hwsel

        select_hardware = hwsel.select_hardware
        prediction_matrix = hwsel.prediction_matrix
        clear = getattr(hwsel, "clear_predictors", lambda: None)
    except (ImportError, AttributeError) as exc:
        print(f"\nAPI timings: skipped (hwsel.select_hardware / prediction_matrix not importable: {exc})")
        return
    from hwsel.train import train

    with tempfile.TemporaryDirectory(prefix="hwsel-api-") as tmp:
        uri = f"sqlite:///{Path(tmp) / 'mlflow.db'}"
        snap = Path(tmp) / "runs.parquet"
        table.loc[:, list(RUN_COLUMNS)].to_parquet(snap, index=False)
        started = time.perf_counter()
        train(str(snap), tracking_uri=uri, trials=trials, seed=seed, progress=False)
        print(f"\nAPI timings (champions trained and registered in {time.perf_counter() - started:.0f} s)")
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


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--data", default=str(DEFAULT_DATA),
                        help="runs: .parquet snapshot, .duckdb file or MLflow tracking URI")
    parser.add_argument("--regenerate", action="store_true",
                        help=f"measure this CPU again and overwrite {DEFAULT_DATA.relative_to(ROOT)}")
    parser.add_argument("--trials", type=int, default=30, help="Optuna trials (default 30)")
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--no-api", action="store_true", help="skip the select_hardware/prediction_matrix timings")
    args = parser.parse_args(argv)

    data = Path(args.data) if "://" not in args.data else args.data
    if args.regenerate:
        out = Path(args.data) if args.data.endswith(".parquet") else DEFAULT_DATA
        data = regenerate(out)
        print(f"snapshot: {data} ({Path(data).stat().st_size / 1024:.0f} KiB)")
    runs = load_runs(str(data))
    table = training_table(runs)
    table = table.sort_values(["model", "backend", "hardware", "precision", "batch_size", "record_id"],
                              kind="mergesort").reset_index(drop=True)
    print(f"data: {data}: {len(runs)} passed runs in {runs['session_id'].nunique()} sessions -> "
          f"{len(table)} configurations, {table['model'].nunique()} models, batch sizes "
          f"{sorted(int(b) for b in table['batch_size'].unique())}, "
          f"{', '.join(sorted((table['backend'] + '/' + table['precision']).unique()))}")

    floor = noise_floor(runs)
    print(f"measurement noise: {floor['pairs']} pairs of repeated measurements of one configuration in "
          f"different sessions differ by MAPE {_pct(floor['mape']).strip()}, median "
          f"{_pct(floor['median_ape']).strip()}, within 10% {_pct(floor['within_10pct']).strip()}")

    X = feature_frame(table)
    folds = cv_folds(table)
    y = np.log(table["latency_ms"].to_numpy(dtype=float))
    started = time.perf_counter()
    study = run_study(X, y, folds, offset_column=LEARNED["latency"][1], trials=args.trials, seed=args.seed,
                      progress=False, name="quality-latency")
    print(f"\nlatency study: {args.trials} trials in {time.perf_counter() - started:.0f} s; best {study.params}")
    rows = study.oof["row"].to_numpy()
    errors = {
        "model": scheme_metrics(study.oof),
        "roofline": scheme_metrics(study.oof.assign(y_pred=X["log_roofline_ms"].to_numpy()[rows])),
        "roofline calibrated": scheme_metrics(calibrated_roofline(X, y, study.oof, folds)),
    }
    print_errors("latency, out of fold, against the fastest repeat of each configuration", errors)
    spread = table["latency_spread"].to_numpy()[rows]
    steady = study.oof[(table["repeats"].to_numpy()[rows] >= 2) & (spread <= 1.25)]
    if len(steady):
        srows = steady["row"].to_numpy()
        print_errors(
            f"the same, on the {len(np.unique(srows))} configurations whose repeats agree within 25%",
            {"model": scheme_metrics(steady),
             "roofline": scheme_metrics(steady.assign(y_pred=X["log_roofline_ms"].to_numpy()[srows]))})

    # Throughput is derived from latency (same errors in log space); show it agrees exactly.
    model = build_estimator(study.params, offset_column=LEARNED["latency"][1], seed=args.seed).fit(X, y)
    tp = np.exp(ThroughputFromLatency.from_fitted(model).predict(X))
    lat = np.exp(model.predict(X))
    gap = float(np.max(np.abs(tp * lat / (1e3 * X["batch_size"].to_numpy()) - 1)))
    print(f"\nthroughput = 1000 * batch / latency for every row: max relative gap {gap:.1e}")

    print("\nselection: lowest predicted latency per model x batch vs measured best")
    for scheme in ("heldout_batch", "heldout_model"):
        s = selection(table, study.oof, scheme)
        print(f"  {scheme:<16} top-1 {_pct(s['top1'])}  within 5% of best {_pct(s['within5'])}  "
              f"mean regret {_pct(s['regret'])}  max regret {_pct(s.get('max_regret', math.nan))}  "
              f"({s['n']} choices)")

    mem_rows = table["memory_mb"].notna().to_numpy()
    if mem_rows.sum() > 10:
        sub = table.loc[mem_rows].reset_index(drop=True)
        mstudy = run_study(X.loc[mem_rows].reset_index(drop=True), np.log(sub["memory_mb"].to_numpy(dtype=float)),
                           cv_folds(sub), offset_column=LEARNED["memory"][1], trials=max(5, args.trials // 3),
                           seed=args.seed, progress=False, name="quality-memory")
        mm = scheme_metrics(mstudy.oof)
        print("\npeak memory (host RSS on CPU), out of fold: " + ", ".join(
            f"{k} MAPE {_pct(v['mape']).strip()}" for k, v in mm.items()))

    if not args.no_api:
        api_timings(table, trials=max(3, args.trials // 5), seed=args.seed)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
