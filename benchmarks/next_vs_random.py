"""Does measuring what ``hwsel next`` suggests lower held-out error more than measuring at random?

Usage::

    python benchmarks/next_vs_random.py                   # the committed CPU snapshot, seeds 0-4
    python benchmarks/next_vs_random.py --seeds 10 --budget 40 --initial 0.2

Per seed, on the measured configurations of `benchmarks/data/cpu_runs.parquet` (one row per
model x backend x precision x batch size, `hwsel.data.training_table`):

1. hold out a quarter of the models: their configurations are the test set;
2. of the other models' configurations, a random `--initial` share is "already measured"; the
   rest is the pool of configurations one could measure next;
3. the *suggest* arm picks `--budget` configurations from the pool the way ``hwsel next`` does
   (`hwsel.next.rank_candidates`: group-bootstrap ensemble uncertainty, greedy with diversity);
   the *random* arm draws the same number uniformly (same seed);
4. each arm fits one latency predictor (the same recipe, `hwsel.next.LATENCY_PARAMS`) on
   initial + picked rows and is scored on the held-out models: MAPE and median APE.

The pool holds real measurements, so "measuring" a pick is looking its latency up. Takes about
5 s per seed on two cores. The last line gives the mean paired gain (random MAPE - suggest MAPE,
same split per seed) and its standard error, to tell a difference from seed-to-seed noise.
"""

from __future__ import annotations

import argparse
import math
import sys
import time
from pathlib import Path

import numpy as np
import pandas as pd

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from hwsel.data import load_runs, training_table  # noqa: E402
from hwsel.estimators import one_thread  # noqa: E402
from hwsel.features import feature_frame  # noqa: E402
from hwsel.next import fit_latency, rank_candidates  # noqa: E402

DEFAULT_DATA = ROOT / "benchmarks" / "data" / "cpu_runs.parquet"
#: Columns the suggest arm may see of a pool row: the configuration, never its measurement.
CONFIG_COLUMNS = ("model", "hardware", "device_name", "backend", "precision", "mode", "batch_size", "threads",
                  "sequence_length", "image_size", "audio_samples")


def test_errors(train: pd.DataFrame, test: pd.DataFrame, seed: int) -> tuple[float, float]:
    """(MAPE, median APE) on `test` of the fixed latency recipe fit on `train`."""
    model = fit_latency(train, seed=seed)
    with one_thread():
        pred = np.exp(model.predict(feature_frame(test)))
    true = test["latency_ms"].to_numpy(dtype=float)
    ape = np.abs(pred - true) / true
    return float(np.mean(ape)), float(np.median(ape))


def one_seed(table: pd.DataFrame, seed: int, *, budget: int, initial: float, holdout: float,
             ensemble: int) -> dict[str, float]:
    """Both arms' test errors for one seed."""
    rng = np.random.default_rng(seed)
    models = np.array(sorted(table["model"].astype(str).unique()))
    n_test = max(1, round(holdout * len(models)))
    test_models = set(rng.choice(models, size=n_test, replace=False))
    is_test = table["model"].astype(str).isin(test_models).to_numpy()
    test, rest = table.loc[is_test], table.loc[~is_test]
    order = rng.permutation(len(rest))
    n_initial = max(2, round(initial * len(rest)))
    measured, pool = rest.iloc[order[:n_initial]], rest.iloc[order[n_initial:]]
    n = min(budget, len(pool))

    candidates = pool.loc[:, [c for c in CONFIG_COLUMNS if c in pool.columns]]
    picked = rank_candidates(measured, candidates, n, ensemble=ensemble, seed=seed).index
    drawn = pool.index[rng.choice(len(pool), size=n, replace=False)]
    out: dict[str, float] = {"seed": seed, "test_models": len(test_models), "test_rows": len(test),
                             "initial": len(measured), "pool": len(pool), "picked": n}
    for arm, index in (("suggest", picked), ("random", drawn)):
        mape, median = test_errors(pd.concat([measured, pool.loc[index]]), test, seed)
        out[f"{arm}_mape"], out[f"{arm}_median"] = mape, median
    out["initial_mape"], out["initial_median"] = test_errors(measured, test, seed)
    return out


def _fraction(text: str) -> float:
    value = float(text)
    if not 0 < value < 1:
        raise argparse.ArgumentTypeError(f"expected a fraction between 0 and 1, got {text!r}")
    return value


def _positive(text: str) -> int:
    value = int(text)
    if value < 1:
        raise argparse.ArgumentTypeError(f"expected a whole number >= 1, got {text!r}")
    return value


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0],
                                     formatter_class=argparse.RawDescriptionHelpFormatter, epilog=__doc__)
    parser.add_argument("--data", nargs="+", default=[str(DEFAULT_DATA)],
                        help="benchmark records (.parquet, .duckdb, .jsonl or MLflow URI; default the CPU snapshot)")
    parser.add_argument("--seeds", type=_positive, default=5, help="repeats, seeds 0..N-1 (default 5)")
    parser.add_argument("--budget", type=_positive, default=40, help="configurations each arm measures (default 40)")
    parser.add_argument("--initial", type=_fraction, default=0.2,
                        help="share of the training models' configurations already measured (default 0.2)")
    parser.add_argument("--holdout", type=_fraction, default=0.25, help="share of models held out (default 0.25)")
    parser.add_argument("--ensemble", type=_positive, default=8, help="regressors in the suggest ensemble (default 8)")
    args = parser.parse_args(argv)

    table = training_table(load_runs(args.data if len(args.data) > 1 else args.data[0]))
    print(f"{len(table)} configurations of {table['model'].nunique()} models; budget {args.budget}, "
          f"initial {args.initial:.0%}, held-out models {args.holdout:.0%}, ensemble {args.ensemble}")
    header = (f"{'seed':>4} {'test':>5} {'init':>5} {'pool':>5}  {'initial only':>17}  {'suggest':>17}  "
              f"{'random':>17}  winner (MAPE)")
    print(header)
    print(f"{'':>4} {'rows':>5} {'rows':>5} {'rows':>5}  " + "  ".join([f"{'MAPE':>8} {'median':>8}"] * 3))
    rows = []
    for seed in range(args.seeds):
        start = time.perf_counter()
        r = one_seed(table, seed, budget=args.budget, initial=args.initial, holdout=args.holdout,
                     ensemble=args.ensemble)
        rows.append(r)
        winner = "suggest" if r["suggest_mape"] < r["random_mape"] else "random"
        print(f"{seed:>4} {r['test_rows']:>5} {r['initial']:>5} {r['pool']:>5}  "
              + "  ".join(f"{r[f'{arm}_mape']:>8.1%} {r[f'{arm}_median']:>8.1%}"
                          for arm in ("initial", "suggest", "random"))
              + f"  {winner}  ({time.perf_counter() - start:.0f} s)", flush=True)
    mean = {k: float(np.mean([r[k] for r in rows])) for k in rows[0] if k.endswith(("_mape", "_median"))}
    print(f"{'mean':>4} {'':>5} {'':>5} {'':>5}  "
          + "  ".join(f"{mean[f'{arm}_mape']:>8.1%} {mean[f'{arm}_median']:>8.1%}"
                      for arm in ("initial", "suggest", "random")))
    wins = sum(r["suggest_mape"] < r["random_mape"] for r in rows)
    # paired by seed: same split, same initial rows, same pool; only the picks differ
    gain = np.array([r["random_mape"] - r["suggest_mape"] for r in rows])
    se = float(gain.std(ddof=1) / math.sqrt(len(gain))) if len(gain) > 1 else math.nan
    better = "suggest" if mean["suggest_mape"] < mean["random_mape"] else "random"
    ratio = mean["random_mape"] / mean["suggest_mape"] if mean["suggest_mape"] > 0 else math.inf
    print(f"on average {better} wins: MAPE suggest {mean['suggest_mape']:.1%} vs random {mean['random_mape']:.1%} "
          f"(random / suggest = {ratio:.2f}); median APE {mean['suggest_median']:.1%} vs "
          f"{mean['random_median']:.1%}; suggest wins {wins} of {len(rows)} seeds")
    print(f"paired MAPE gain of suggest over random: {gain.mean():+.1%} points per seed (standard error {se:.1%})")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
