"""The report's rows: the checked, typed frame every section reads (`prepare`: numbers coerced, a
missing mode read as the default mode, and the derived columns ``config``, ``target``, ``tokens``
and ``length``), the cells, speedups and compiled/eager pairs its tables show, and how numbers print.
"""

from __future__ import annotations

import math
import re
from typing import Any

import pandas as pd

from pytest_hwbench.vocabulary import DEFAULT_MODE

#: The speedup baseline: (hardware, backend, precision).
BASELINE: tuple[str, str, str] = ("cpu", "torch", "fp32")
#: The backend compiled records are compared with, case by case.
EAGER_BACKEND = "torch"
#: What makes one case, for comparing backends on it.
_CASE_KEYS: tuple[str, ...] = ("model", "hardware", "precision", "batch_size", "mode", "tokens", "length")

#: Columns `write_report` cannot do without.
REQUIRED_COLUMNS: tuple[str, ...] = (
    "status", "family", "model", "hardware", "backend", "precision", "batch_size",
    "latency_ms_median", "throughput_items_per_s",
)
#: Columns read as numbers (NaN where absent or not a number).
_NUMERIC = ("latency_ms_median", "throughput_items_per_s", "peak_host_rss_mb", "peak_device_memory_mb",
            "achieved_tflops", "compile_time_s", "energy_j_per_item", "ttft_ms", "decode_ms_per_token",
            "tokens_per_s", "new_tokens", "sequence_length")
#: Every column the report reads (what a store needs to load for it; the rest it never shows).
REPORT_COLUMNS: tuple[str, ...] = tuple(dict.fromkeys((
    *REQUIRED_COLUMNS, *_NUMERIC, "error", "case_id", "session_id", "mode", "host",
    "device_name", "noise", "noise_reason", "tries", "threads", "created_at", "nodeid",
)))


# --- formatting -------------------------------------------------------------------------------

def fmt(value: float | None) -> str:
    """Numbers as the report prints them: 2 decimals (thousands separated) from 1 up, else 3 digits."""
    if value is None or (isinstance(value, float) and math.isnan(value)):
        return "n/a"
    if math.isinf(value):
        return "inf"
    if abs(value) >= 1:
        return f"{value:,.2f}"
    return f"{value:.3g}"


def fmt_speedup(value: float | None) -> str:
    return "n/a" if value is None or math.isnan(value) else f"{value:.2f}x"


def short(message: Any, limit: int) -> str:
    """One line, whitespace collapsed, at most `limit` characters."""
    text = re.sub(r"\s+", " ", str(message if message is not None else "")).strip() or "(no error message)"
    return text if len(text) <= limit else text[: limit - 1] + "…"


# --- data preparation -------------------------------------------------------------------------

def prepare(results: pd.DataFrame, session_id: str | None) -> pd.DataFrame:
    if not isinstance(results, pd.DataFrame):
        raise TypeError(f"results must be a pandas DataFrame, got {type(results).__name__}")
    frame = results
    if session_id is not None:
        if "session_id" not in frame.columns:
            raise ValueError(f"session_id={session_id!r} given but the results have no 'session_id' column")
        frame = frame[frame["session_id"] == session_id]
        if frame.empty:
            present = sorted(str(s) for s in results["session_id"].dropna().unique())
            raise ValueError(
                f"no benchmark records for session_id={session_id!r} ({len(results)} rows in other sessions: "
                f"{', '.join(present[:10]) or 'none'}); pass one of those, or session_id=None for all rows"
            )
    if frame.empty:
        raise ValueError(
            "no benchmark records to report: the results DataFrame is empty. If it came from "
            "load_results(path, session_id=...), check that session_id filter (None loads every session) "
            "and that the database path holds results."
        )
    missing = [c for c in REQUIRED_COLUMNS if c not in frame.columns]
    if missing:
        raise ValueError(
            f"results lack the columns {', '.join(missing)}; build them with "
            "pd.DataFrame([r.to_dict() for r in records]) or load_results()"
        )
    df = frame.copy(deep=False)  # copy on write (pandas 3): new columns here leave the caller's frame as it was
    for name in _NUMERIC:
        df[name] = pd.to_numeric(df[name], errors="coerce") if name in df.columns else float("nan")
    for name in ("error", "case_id", "session_id"):
        if name not in df.columns:
            df[name] = None
    df["mode"] = df["mode"].fillna(DEFAULT_MODE).astype(str) if "mode" in df.columns else DEFAULT_MODE
    df["batch_size"] = pd.to_numeric(df["batch_size"], errors="raise").astype(int)
    for name in ("family", "model", "hardware", "backend", "precision", "status"):
        df[name] = df[name].astype(str)
    df["tokens"] = df["new_tokens"].fillna(0).astype(int)  # 0: not a generate case
    df["length"] = df["sequence_length"].fillna(0).astype(int)  # 0: no token input
    df["config"] = df["hardware"] + "/" + df["backend"] + "/" + df["precision"]
    df["target"] = df["hardware"] + "/" + df["backend"]
    return df.reset_index(drop=True)


def config_order(configs: pd.Series) -> list[str]:
    """The distinct configs of the column `configs`, the baseline first, then by hardware, backend
    and precision."""
    baseline = "/".join(BASELINE)
    return sorted({str(c) for c in configs.unique()}, key=lambda c: (c != baseline, c.split("/")))


def passed_rows(df: pd.DataFrame) -> pd.DataFrame:
    return df[df["status"] == "passed"]


def cell_medians(df: pd.DataFrame, metric: str) -> dict[tuple[str, int, str], float]:
    """(model, batch, config) -> median over the passed records of that cell (NaN if unmeasured)."""
    grouped = passed_rows(df).groupby(["model", "batch_size", "config"])[metric].median()
    return {(str(m), int(b), str(c)): float(v) for (m, b, c), v in grouped.items()}


def reference_batch(df: pd.DataFrame) -> int | None:
    """The batch size with the most passed records (smallest on ties): what single-batch plots show."""
    passed = passed_rows(df)
    if passed.empty:
        return None
    return int(passed.groupby("batch_size").size().idxmax())  # batch sizes ascend: the first is the smallest


def speedup_cells(fam: pd.DataFrame) -> dict[tuple[str, int, str], float]:
    """(model, batch, config) -> baseline latency / config latency, where both were measured."""
    cells = cell_medians(fam, "latency_ms_median")
    baseline = "/".join(BASELINE)
    bases = {(m, b): v for (m, b, c), v in cells.items() if c == baseline and not math.isnan(v)}
    return {(m, b, c): bases[(m, b)] / v for (m, b, c), v in cells.items()
            if c != baseline and (m, b) in bases and not math.isnan(v) and v > 0}


def compiled_pairs(df: pd.DataFrame, metric: str) -> list[dict[str, Any]]:
    """One entry per passed compiled (case, backend) with a passed eager ``torch`` record of the
    same case: the case, the backend, both medians of `metric` and the compile time."""
    passed = passed_rows(df[[*_CASE_KEYS, "status", "backend", "compile_time_s", metric]]).dropna(subset=[metric])
    compiled = passed[passed["compile_time_s"].notna() & (passed["backend"] != EAGER_BACKEND)]
    eager = passed[passed["backend"] == EAGER_BACKEND]
    keys = list(_CASE_KEYS)
    eager_values = eager.groupby(keys)[metric].median()
    grouped = compiled.groupby([*keys, "backend"]).agg(value=(metric, "median"), compile_s=("compile_time_s", "median"))
    pairs = []
    for (*case, backend), row in grouped.iterrows():  # sorted by the case's keys, then the backend
        key = tuple(case)
        if key in eager_values.index:
            pairs.append({**dict(zip(keys, key, strict=True)), "backend": str(backend), "value": float(row["value"]),
                          "eager": float(eager_values[key]), "compile_s": float(row["compile_s"])})
    return pairs
