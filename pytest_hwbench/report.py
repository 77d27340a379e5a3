"""Markdown report, PNG plots and the compatibility matrix, from measured benchmark rows.

Input is a pandas DataFrame with one row per `BenchmarkRecord` and the record's field names as
columns (what ``sinks.duckdb_sink.load_results`` returns, or
``pd.DataFrame([r.to_dict() for r in records])``). Every number written comes from those rows;
nothing is estimated.

Vocabulary used in the outputs:

- **config**: ``hardware/backend/precision`` (e.g. ``cuda/torch/fp16``), one column of the
  latency and throughput tables.
- **target**: ``hardware/backend`` (e.g. ``cuda/torch``), one column of the compatibility
  matrix. Precision is folded in: a target is compatible with a family when any of its
  precisions passed a case of that family.
- **baseline**: ``cpu/torch/fp32``; speedup = baseline median latency / config median latency
  for the same model and batch size (equal to the throughput ratio).
- **compiled**: a record with a ``compile_time_s`` (its backend compiled the model apart from the
  timed calls, e.g. ``torch-compile``); it is compared with eager ``torch`` on the same case
  (model, hardware, precision, batch size, mode, new tokens): the report names every compiled
  case slower than eager on a line of its own, and the Generation section puts eager and compiled
  tokens/s side by side.

Performance ratings (``compatibility.json``), per family:

1. For each (target, model, batch size) take the best throughput over the target's
   precisions (the median when several records measured the same config).
2. Keep the (model, batch size) cases that at least two targets passed; on each, divide every
   target's throughput by the best target's throughput (the best gets 1.0).
3. A target's ``relative_throughput`` is the median of its ratios; the rating is ``high`` when
   it is >= 0.5, ``medium`` when >= 0.2, else ``low`` (see `RATING_THRESHOLDS`). A compatible
   target that shares no case with another target is ``unrated``; an incompatible one is
   ``none``.

Plots draw with ``matplotlib.figure.Figure`` on the Agg canvas, never through pyplot, so
writing a report changes no global matplotlib state (backend, open figures).
"""

from __future__ import annotations

import datetime as _dt
import json
import math
import re
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from functools import partial
from pathlib import Path
from typing import TYPE_CHECKING, Any

import pandas as pd

if TYPE_CHECKING:
    from matplotlib.axes import Axes

COMPATIBILITY_SCHEMA_VERSION = 1

#: The speedup baseline: (hardware, backend, precision).
BASELINE: tuple[str, str, str] = ("cpu", "torch", "fp32")
#: The backend compiled records are compared with, case by case.
EAGER_BACKEND = "torch"
#: What makes one case, for comparing backends on it.
_CASE_KEYS: tuple[str, ...] = ("model", "hardware", "precision", "batch_size", "mode", "tokens", "length")

#: (rating, minimum median throughput ratio to the best target), checked in order; below the
#: last threshold the rating is "low".
RATING_THRESHOLDS: tuple[tuple[str, float], ...] = (("high", 0.5), ("medium", 0.2))

#: Columns `write_report` cannot do without.
REQUIRED_COLUMNS: tuple[str, ...] = (
    "status", "family", "model", "hardware", "backend", "precision", "batch_size",
    "latency_ms_median", "throughput_items_per_s",
)

_NUMERIC = ("latency_ms_median", "throughput_items_per_s", "peak_host_rss_mb", "peak_device_memory_mb",
            "achieved_tflops", "compile_time_s", "energy_j_per_item", "ttft_ms", "decode_ms_per_token",
            "tokens_per_s", "new_tokens")
#: Optional inference tables: (metric, title), each written where any record measured it.
_EXTRA_TABLES: tuple[tuple[str, str], ...] = (
    ("achieved_tflops", "Achieved TFLOP/s"),
    ("compile_time_s", "Compile time (s), per input shape, not in the latency"),
    ("energy_j_per_item", "Energy per item (J)"),
)
#: Tables of the generate and train modes: (metric, title).
_MODE_TABLES: dict[str, tuple[tuple[str, str], ...]] = {
    "generate": (("ttft_ms", "Time to first token (ms)"), ("decode_ms_per_token", "Decode, per token (ms)"),
                 ("tokens_per_s", "Generated tokens/s"), ("latency_ms_median", "Whole generate() call (ms)"),
                 ("peak_device_memory_mb", "Peak device memory (MB)")),
    "train": (("latency_ms_median", "Optimizer step (ms)"), ("throughput_items_per_s", "Samples/s"),
              ("peak_host_rss_mb", "Peak host RSS (MB)"), ("peak_device_memory_mb", "Peak device memory (MB)")),
}
_ERROR_CHARS_MD = 300
_ERROR_CHARS_JSON = 200


@dataclass(frozen=True)
class ReportPaths:
    """What `write_report` wrote.

    `plots` maps ``"<family>/<kind>"`` (kind: ``hardware_comparison``, ``batch_scaling``,
    ``speedup``, ``memory``) to the PNG; a plot with nothing to draw is not written.
    """

    out_dir: Path
    markdown: Path
    compatibility: Path
    plots: Mapping[str, Path] = field(default_factory=dict)

    def all(self) -> tuple[Path, ...]:
        """Every file written."""
        return (self.markdown, self.compatibility, *self.plots.values())


# --- formatting -------------------------------------------------------------------------------

def _fmt(value: float | None) -> str:
    """Numbers as the report prints them: 2 decimals (thousands separated) from 1 up, else 3 digits."""
    if value is None or (isinstance(value, float) and math.isnan(value)):
        return "n/a"
    if math.isinf(value):
        return "inf"
    if abs(value) >= 1:
        return f"{value:,.2f}"
    return f"{value:.3g}"


def _fmt_speedup(value: float | None) -> str:
    return "n/a" if value is None or math.isnan(value) else f"{value:.2f}x"


def _short(message: Any, limit: int) -> str:
    """One line, whitespace collapsed, at most `limit` characters."""
    text = re.sub(r"\s+", " ", str(message if message is not None else "")).strip() or "(no error message)"
    return text if len(text) <= limit else text[: limit - 1] + "…"


def _md_cell(text: Any) -> str:
    return str(text).replace("|", "\\|").replace("\n", " ")


def _md_table(header: Sequence[str], rows: Iterable[Sequence[Any]]) -> list[str]:
    lines = ["| " + " | ".join(_md_cell(h) for h in header) + " |",
             "|" + "|".join("---" for _ in header) + "|"]
    lines += ["| " + " | ".join(_md_cell(c) for c in row) + " |" for row in rows]
    return lines


def _slug(text: str) -> str:
    return re.sub(r"[^A-Za-z0-9_.-]+", "_", text).strip("_") or "family"


# --- data preparation -------------------------------------------------------------------------

def _prepare(results: pd.DataFrame, session_id: str | None) -> pd.DataFrame:
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
    df = frame.copy()
    for name in _NUMERIC:
        df[name] = pd.to_numeric(df[name], errors="coerce") if name in df.columns else float("nan")
    for name in ("error", "case_id", "session_id"):
        if name not in df.columns:
            df[name] = None
    df["mode"] = df["mode"].fillna("inference").astype(str) if "mode" in df.columns else "inference"
    df["batch_size"] = pd.to_numeric(df["batch_size"], errors="raise").astype(int)
    for name in ("family", "model", "hardware", "backend", "precision", "status"):
        df[name] = df[name].astype(str)
    df["tokens"] = df["new_tokens"].fillna(0).astype(int)  # 0: not a generate case
    lengths = pd.to_numeric(df["sequence_length"], errors="coerce") if "sequence_length" in df.columns else None
    df["length"] = lengths.fillna(0).astype(int) if lengths is not None else 0  # 0: no token input
    df["config"] = df["hardware"] + "/" + df["backend"] + "/" + df["precision"]
    df["target"] = df["hardware"] + "/" + df["backend"]
    return df.reset_index(drop=True)


def _config_order(configs: Iterable[str]) -> list[str]:
    baseline = "/".join(BASELINE)
    return sorted(set(configs), key=lambda c: (c != baseline, c.split("/")))


def _passed(df: pd.DataFrame) -> pd.DataFrame:
    return df[df["status"] == "passed"]


def _cells(df: pd.DataFrame, metric: str) -> dict[tuple[str, int, str], float]:
    """(model, batch, config) -> median over the passed records of that cell (NaN if unmeasured)."""
    passed = _passed(df)
    if passed.empty:
        return {}
    grouped = passed.groupby(["model", "batch_size", "config"])[metric].median()
    return {(str(m), int(b), str(c)): float(v) for (m, b, c), v in grouped.items()}


def _reference_batch(df: pd.DataFrame) -> int | None:
    """The batch size with the most passed records (smallest on ties): what single-batch plots show."""
    passed = _passed(df)
    if passed.empty:
        return None
    counts = passed.groupby("batch_size").size()
    best = counts.max()
    return int(min(b for b, n in counts.items() if n == best))


# --- compatibility ----------------------------------------------------------------------------

def _rating(relative: float | None) -> str:
    if relative is None:
        return "unrated"
    for name, minimum in RATING_THRESHOLDS:
        if relative >= minimum:
            return name
    return "low"


def _failure_summary(rows: pd.DataFrame, limit: int) -> list[dict[str, Any]]:
    counts: dict[str, int] = {}
    for message in rows["error"]:
        key = _short(message, limit)
        counts[key] = counts.get(key, 0) + 1
    return [{"message": m, "count": n} for m, n in sorted(counts.items(), key=lambda kv: (-kv[1], kv[0]))]


def compatibility_matrix(results: pd.DataFrame, *, session_id: str | None = None
                         ) -> dict[str, dict[str, dict[str, Any]]]:
    """family -> target (``hardware/backend``) -> compatibility entry, as in ``compatibility.json``.

    Each entry: hardware, backend, compatible (any case passed), performance_rating,
    relative_throughput, cases_compared, passed/failed counts, precisions_passed, models_passed,
    models_failed_only, failures (distinct truncated messages with counts) and per-case results.
    """
    return _compatibility(_prepare(results, session_id))


def _compatibility(df: pd.DataFrame) -> dict[str, dict[str, dict[str, Any]]]:
    out: dict[str, dict[str, dict[str, Any]]] = {}
    for family, fam in df.groupby("family", sort=True):
        passed = _passed(fam).dropna(subset=["throughput_items_per_s"])
        # Step 1: best precision per (target, model, batch); duplicates of one config by median.
        per_config = passed.groupby(["target", "precision", "model", "batch_size"])["throughput_items_per_s"].median()
        best_prec = per_config.groupby(level=["target", "model", "batch_size"]).max()
        # Step 2: ratios to the best target on cases that two or more targets passed.
        ratios: dict[str, list[float]] = {}
        if not best_prec.empty:
            table = best_prec.unstack("target")
            for _, row in table.iterrows():
                measured = row.dropna()
                if len(measured) < 2 or measured.max() <= 0:
                    continue
                top = measured.max()
                for target, value in measured.items():
                    ratios.setdefault(str(target), []).append(float(value) / float(top))
        entries: dict[str, dict[str, Any]] = {}
        for target, rows in fam.groupby("target", sort=True):
            ok = _passed(rows)
            failed = rows[rows["status"] != "passed"]  # failed, or crashed with its process
            compatible = not ok.empty
            target_ratios = ratios.get(str(target), [])
            relative = float(pd.Series(target_ratios).median()) if target_ratios else None
            hardware, backend = str(target).split("/", 1)
            results = []
            for (model, precision, batch), cell in ok.groupby(["model", "precision", "batch_size"], sort=True):
                results.append({
                    "model": str(model), "precision": str(precision), "batch_size": int(batch),
                    "records": len(cell),
                    "latency_ms_median": _json_float(cell["latency_ms_median"].median()),
                    "throughput_items_per_s": _json_float(cell["throughput_items_per_s"].median()),
                })
            entries[str(target)] = {
                "hardware": hardware,
                "backend": backend,
                "compatible": compatible,
                "performance_rating": _rating(relative) if compatible else "none",
                "relative_throughput": None if relative is None else round(relative, 4),
                "cases_compared": len(target_ratios),
                "passed": len(ok),
                "failed": len(failed),
                "precisions_passed": sorted(ok["precision"].unique().tolist()),
                "models_passed": sorted(ok["model"].unique().tolist()),
                "models_failed_only": sorted(set(failed["model"]) - set(ok["model"])),
                "failures": _failure_summary(failed, _ERROR_CHARS_JSON),
                "results": results,
            }
        out[str(family)] = entries
    return out


def _json_float(value: Any) -> float | None:
    try:
        number = float(value)
    except (TypeError, ValueError):
        return None
    return None if math.isnan(number) or math.isinf(number) else round(number, 6)


# --- plots ------------------------------------------------------------------------------------

def _new_figure(width: float, height: float) -> Any:
    from matplotlib.figure import Figure

    return Figure(figsize=(min(max(width, 6.0), 40.0), height), layout="constrained")


def _colors(configs: Iterable[str]) -> dict[str, str]:
    """One colour per config, the same in every plot of a family."""
    palette = [f"C{i}" for i in range(10)] + ["black", "grey", "olive", "navy", "teal", "maroon"]
    return {c: palette[i % len(palette)] for i, c in enumerate(_config_order(configs))}


def _grouped_bars(ax: Axes, models: list[str], series: Mapping[str, list[float]], *,
                  colors: Mapping[str, str], fmt: Any = _fmt, ylabel: str, title: str) -> bool:
    """Bars grouped by model, one series per config, each bar labelled with its value."""
    drawn = False
    n = max(len(series), 1)
    width = 0.8 / n
    values_all = [v for vals in series.values() for v in vals if not math.isnan(v) and v > 0]
    for i, (label, values) in enumerate(series.items()):
        xs = [m + (i - (n - 1) / 2) * width for m in range(len(models))]
        heights = [0.0 if math.isnan(v) else v for v in values]
        bars = ax.bar(xs, heights, width, label=label, color=colors.get(label))
        ax.bar_label(bars, labels=["" if math.isnan(v) else fmt(v) for v in values],
                     fontsize=7, rotation=90 if n * len(models) > 8 else 0, padding=2)
        drawn = drawn or any(not math.isnan(v) for v in values)
    ax.set_xticks(range(len(models)), models, rotation=20 if len(models) > 3 else 0, ha="right" if len(models) > 3 else "center")
    ax.set_ylabel(ylabel)
    ax.set_title(title)
    if values_all and max(values_all) / min(values_all) > 100:
        ax.set_yscale("log")
        ax.set_ylim(min(values_all) / 2, max(values_all) * 4)
    else:
        ax.set_ylim(0, max(values_all or [1.0]) * 1.2)
    ax.legend(fontsize=7)
    return drawn


def _bar_series(cells: Mapping[tuple[str, int, str], float], models: list[str], configs: list[str],
                batch: int) -> dict[str, list[float]]:
    """config -> one value per model at `batch` (NaN: no bar); configs without any value dropped."""
    series = {c: [cells.get((m, batch, c), math.nan) for m in models] for c in configs}
    return {c: vals for c, vals in series.items() if any(not math.isnan(v) for v in vals)}


def _models_at(cells: Mapping[tuple[str, int, str], float], batch: int) -> list[str]:
    """Models with a measured value at `batch`, sorted."""
    return sorted({m for (m, b, _), v in cells.items() if b == batch and not math.isnan(v)})


def _plot_hardware(fam: pd.DataFrame, family: str, batch: int, path: Path) -> bool:
    cells = _cells(fam, "latency_ms_median")
    models = _models_at(cells, batch)
    series = _bar_series(cells, models, _config_order(fam["config"]), batch)
    if not series:
        return False
    fig = _new_figure(1.5 + 0.5 * len(models) * len(series), 5)
    ax = fig.add_subplot()
    _grouped_bars(ax, models, series, colors=_colors(fam["config"]), ylabel="median latency (ms)",
                  title=f"{family}: median latency per model and config, batch size {batch}")
    fig.savefig(path, dpi=100)
    return True


def _plot_scaling(fam: pd.DataFrame, family: str, path: Path) -> bool:
    cells = _cells(fam, "throughput_items_per_s")
    models = sorted({m for (m, _, _), v in cells.items() if not math.isnan(v)})
    if not models:
        return False
    cols = min(3, len(models))
    rows = math.ceil(len(models) / cols)
    fig = _new_figure(5.5 * cols, 4.2 * rows)
    axes = fig.subplots(rows, cols, squeeze=False)
    colors = _colors(fam["config"])
    for ax, model in zip(axes.flat, models, strict=False):
        for config in _config_order(fam["config"]):
            points = sorted((b, v) for (m, b, c), v in cells.items() if m == model and c == config and not math.isnan(v))
            if not points:
                continue
            xs, ys = [p[0] for p in points], [p[1] for p in points]
            ax.plot(xs, ys, marker="o", label=config, color=colors[config])
            for x, y in points:
                ax.annotate(_fmt(y), (x, y), textcoords="offset points", xytext=(0, 5), ha="center", fontsize=7)
        batches = sorted({b for (m, b, _), v in cells.items() if m == model and not math.isnan(v)})
        if len(batches) > 1 and batches[-1] / batches[0] >= 8:
            ax.set_xscale("log", base=2)
        ax.set_xticks(batches, [str(b) for b in batches])
        values = [v for (m, _, _), v in cells.items() if m == model and not math.isnan(v) and v > 0]
        if values and max(values) / min(values) > 20:
            # Spread lines that differ by orders of magnitude, so their labels do not overlap.
            ax.set_yscale("log")
            ax.set_ylim(min(values) / 2, max(values) * 3)
        elif values:
            ax.set_ylim(0, max(values) * 1.2)
        ax.set_xlabel("batch size")
        ax.set_ylabel("throughput (items/s)")
        ax.set_title(f"{family}: {model}")
        ax.legend(fontsize=7)
    for ax in list(axes.flat)[len(models):]:
        ax.set_visible(False)
    fig.savefig(path, dpi=100)
    return True


def _speedups(fam: pd.DataFrame) -> dict[tuple[str, int, str], float]:
    """(model, batch, config) -> baseline latency / config latency, where both were measured."""
    cells = _cells(fam, "latency_ms_median")
    baseline = "/".join(BASELINE)
    out: dict[tuple[str, int, str], float] = {}
    for (model, batch, config), value in cells.items():
        base = cells.get((model, batch, baseline), math.nan)
        if config != baseline and not math.isnan(base) and not math.isnan(value) and value > 0:
            out[(model, batch, config)] = base / value
    return out


def _plot_speedup(fam: pd.DataFrame, family: str, batch: int, path: Path) -> bool:
    speedups = _speedups(fam)
    models = sorted({m for (m, b, _) in speedups if b == batch})
    configs = [c for c in _config_order(fam["config"]) if c != "/".join(BASELINE)]
    series = _bar_series(speedups, models, configs, batch)
    if not series:
        return False
    fig = _new_figure(1.5 + 0.5 * len(models) * len(series), 5)
    ax = fig.add_subplot()
    _grouped_bars(ax, models, series, colors=_colors(fam["config"]), fmt=_fmt_speedup, ylabel=f"speedup vs {'/'.join(BASELINE)} (x)",
                  title=f"{family}: speedup over {'/'.join(BASELINE)}, batch size {batch}")
    ax.axhline(1.0, color="grey", linewidth=0.8, linestyle="--")
    fig.savefig(path, dpi=100)
    return True


def _plot_memory(fam: pd.DataFrame, family: str, batch: int, path: Path) -> bool:
    panels = []
    configs = _config_order(fam["config"])
    for metric, label in (("peak_host_rss_mb", "peak host RSS (MB)"), ("peak_device_memory_mb", "peak device memory (MB)")):
        cells = _cells(fam, metric)
        models = _models_at(cells, batch)
        series = _bar_series(cells, models, configs, batch)
        if series:
            panels.append((label, models, series))
    if not panels:
        return False
    width = 1.5 + 0.5 * max(len(m) * len(s) for _, m, s in panels)
    fig = _new_figure(width, 4.5 * len(panels))
    axes = fig.subplots(len(panels), 1, squeeze=False)
    for ax, (label, models, series) in zip(axes.flat, panels, strict=True):
        _grouped_bars(ax, models, series, colors=_colors(fam["config"]), ylabel=label, title=f"{family}: {label}, batch size {batch}")
    fig.savefig(path, dpi=100)
    return True


# --- markdown ---------------------------------------------------------------------------------

def _value_table(fam: pd.DataFrame, metric: str, configs: list[str]) -> list[str]:
    cells = _cells(fam, metric)
    status = fam.groupby(["model", "batch_size", "config"])["status"].agg(set)
    rows = []
    for model, batch in sorted({(str(m), int(b)) for m, b in zip(fam["model"], fam["batch_size"], strict=True)}):
        row: list[str] = [model, str(batch)]
        for config in configs:
            key = (model, batch, config)
            seen = status.get(key, set())
            if "passed" in seen:
                row.append(_fmt(cells.get(key)))
            elif seen - {"passed"}:
                row.append("crashed" if seen == {"crashed"} else "failed")
            else:
                row.append("–")
        rows.append(row)
    return _md_table(["model", "batch", *configs], rows)


def _speedup_table(fam: pd.DataFrame, configs: list[str]) -> list[str]:
    baseline = "/".join(BASELINE)
    others = [c for c in configs if c != baseline]
    speedups = _speedups(fam)
    base_cells = _cells(fam, "latency_ms_median")
    rows = []
    for model, batch in sorted({(m, b) for (m, b, _) in speedups}):
        rows.append([model, str(batch), _fmt(base_cells.get((model, batch, baseline))),
                     *[_fmt_speedup(speedups.get((model, batch, c))) for c in others]])
    return _md_table(["model", "batch", f"{baseline} latency (ms)", *others], rows)


def _scaling_table(fam: pd.DataFrame, configs: list[str]) -> list[str]:
    cells = _cells(fam, "throughput_items_per_s")
    batches = sorted({b for (_, b, _) in cells})
    rows = []
    for model in sorted({m for (m, _, _) in cells}):
        for config in configs:
            points = {b: v for (m, b, c), v in cells.items() if m == model and c == config and not math.isnan(v)}
            if not points:
                continue
            lo, hi = min(points), max(points)
            scale = (f"{points[hi] / points[lo]:.2f}x (b{lo}→b{hi})"
                     if hi != lo and points[lo] > 0 else "–")
            rows.append([model, config, *[_fmt(points[b]) if b in points else "–" for b in batches], scale])
    return _md_table(["model", "config", *[f"b{b}" for b in batches], "largest/smallest batch"], rows)


def _memory_table(fam: pd.DataFrame, configs: list[str]) -> list[str] | None:
    rss, dev = _cells(fam, "peak_host_rss_mb"), _cells(fam, "peak_device_memory_mb")
    if all(math.isnan(v) for v in [*rss.values(), *dev.values()]):
        return None
    rows = []
    for model, batch in sorted({(m, b) for (m, b, _) in rss}):
        row = [model, str(batch)]
        for config in configs:
            key = (model, batch, config)
            if key not in rss:
                row.append("–")
            else:
                row.append(f"{_fmt(rss.get(key))} / {_fmt(dev.get(key))}")
        rows.append(row)
    return _md_table(["model", "batch", *configs], rows)


def _system_section(df: pd.DataFrame, system_info: Mapping[str, Any] | None) -> list[str]:
    lines = ["## System information", ""]
    if system_info:
        for key, value in system_info.items():
            text = json.dumps(value, default=str, sort_keys=True) if isinstance(value, Mapping | list | tuple) else value
            lines.append(f"- **{key}**: {text}")
    else:
        lines.append("- system information: not provided")
    for column, label in (("host", "hosts"), ("device_name", "devices measured")):
        if column in df.columns:
            values = sorted({str(v) for v in df[column].dropna() if str(v)})
            if values:
                lines.append(f"- **{label}** (from the records): {', '.join(values)}")
    return [*lines, ""]


def _hardware_section(df: pd.DataFrame, hardware: Mapping[str, Any] | None) -> list[str]:
    lines = ["## Available hardware", ""]
    measured = df.groupby("hardware")["status"].value_counts().unstack(fill_value=0)

    def counts(name: str) -> str:
        if name not in measured.index:
            return "0 / 0"
        row = measured.loc[name]
        return f"{int(row.get('passed', 0))} / {int(row.get('failed', 0))}"

    if not hardware:
        lines += ["Hardware detection not provided; hardware measured in these records:", ""]
        lines += _md_table(["hardware", "cases passed / failed"], [[h, counts(h)] for h in measured.index])
        return [*lines, ""]
    rows = []
    for name, info in hardware.items():
        info = info if isinstance(info, Mapping) else {}
        available = bool(info.get("available"))
        devices = []
        for device in info.get("devices") or ():
            if isinstance(device, Mapping):
                mem = device.get("memory_mb")
                devices.append(f"{device.get('name', '?')}" + (f" ({_fmt(float(mem))} MB)" if mem else ""))
        rows.append([name, "yes" if available else "no", "; ".join(devices) or "–",
                     ", ".join(info.get("precisions") or ()) or "–",
                     "" if available else _short(info.get("reason") or "", 200), counts(name)])
    for name in measured.index:
        if name not in hardware:
            rows.append([name, "not detected", "–", "–", "measured but absent from the detection", counts(name)])
    lines += _md_table(["target", "available", "devices", "precisions", "reason", "cases passed / failed"], rows)
    return [*lines, ""]


def _compat_section(matrix: Mapping[str, Mapping[str, Mapping[str, Any]]]) -> list[str]:
    targets = sorted({t for entries in matrix.values() for t in entries})
    rows = []
    for family, entries in matrix.items():
        row = [family]
        for target in targets:
            entry = entries.get(target)
            if entry is None:
                row.append("–")
                continue
            rel = entry["relative_throughput"]
            rating = entry["performance_rating"] + (f" ({rel:.2f})" if rel is not None else "")
            row.append(f"{rating}, {entry['passed']} passed / {entry['failed']} failed")
        rows.append(row)
    thresholds = ", ".join(f"{name} >= {limit}" for name, limit in RATING_THRESHOLDS)
    return [
        "## Compatibility matrix", "",
        "Per family and target (hardware/backend): the rating and, in brackets, the median ratio of the "
        "target's throughput to the best target's on the (model, batch size) cases both passed, each "
        f"target at its best precision. {thresholds}, else low; unrated: no case shared with another "
        "target; none: no case passed. Full detail in `compatibility.json`.", "",
        *_md_table(["family", *targets], rows), "",
    ]


def _failures_section(df: pd.DataFrame) -> list[str]:
    failed = df[df["status"] != "passed"]
    lines = ["## Failures", ""]
    if failed.empty:
        return [*lines, "No failed cases.", ""]
    lines += [f"{len(failed)} failed case(s):", ""]
    for _, row in failed.sort_values(["family", "model", "config", "batch_size"]).iterrows():
        case = f" (`{row['case_id']}`)" if row["case_id"] else ""
        lines.append(f"- **{row['family']}** {row['model']} {row['config']} b{row['batch_size']}{case}: "
                     f"{_short(row['error'], _ERROR_CHARS_MD)}")
    return [*lines, ""]


# --- compiled vs eager ------------------------------------------------------------------------

def _compiled_pairs(df: pd.DataFrame, metric: str) -> list[dict[str, Any]]:
    """One entry per passed compiled (case, backend) with a passed eager ``torch`` record of the
    same case: the case, the backend, both medians of `metric` and the compile time."""
    passed = _passed(df).dropna(subset=[metric])
    compiled = passed[passed["compile_time_s"].notna() & (passed["backend"] != EAGER_BACKEND)]
    eager = passed[passed["backend"] == EAGER_BACKEND]
    if compiled.empty or eager.empty:
        return []
    keys = list(_CASE_KEYS)
    eager_values = eager.groupby(keys)[metric].median()
    grouped = compiled.groupby([*keys, "backend"]).agg(value=(metric, "median"), compile_s=("compile_time_s", "median"))
    pairs = []
    for (*case, backend), row in grouped.iterrows():
        key = tuple(case)
        if key in eager_values.index:
            pairs.append({**dict(zip(keys, key, strict=True)), "backend": str(backend), "value": float(row["value"]),
                          "eager": float(eager_values[key]), "compile_s": float(row["compile_s"])})
    return sorted(pairs, key=lambda p: (p["model"], p["hardware"], p["precision"], p["batch_size"], p["mode"],
                                        p["tokens"], p["length"], p["backend"]))


def _case_label(pair: Mapping[str, Any], with_length: bool = False) -> str:
    """``vit-base cuda fp16 b64`` (``... generate out32`` in generate mode, ``... in512`` where
    the same model ran at several input lengths)."""
    label = f"{pair['model']} {pair['hardware']} {pair['precision']} b{pair['batch_size']}"
    if pair["mode"] != "inference":
        label += f" {pair['mode']}"
    if with_length and pair["length"]:
        label += f" in{pair['length']}"
    if pair["tokens"]:
        label += f" out{pair['tokens']}"
    return label


def _compiled_section(df: pd.DataFrame) -> list[str]:
    """Every compiled case slower than eager torch on the same case, a line each with both medians."""
    pairs = _compiled_pairs(df, "latency_ms_median")
    if not pairs:
        return []
    lines = ["## Compiled vs eager", "",
             f"Median latency of each compiled case against eager {EAGER_BACKEND} on the same case (model, hardware, "
             "precision, batch size, mode, input length, new tokens); compile time is not in either figure.", ""]
    slower = [p for p in pairs if p["value"] > p["eager"]]
    several = {m for m in {p["model"] for p in pairs} if len({p["length"] for p in pairs if p["model"] == m}) > 1}
    for pair in slower:
        label = _case_label(pair, with_length=pair["model"] in several)
        lines.append(f"- {label}: {pair['backend']} {_fmt(pair['value'])} ms is slower than eager "
                     f"{EAGER_BACKEND} {_fmt(pair['eager'])} ms ({pair['value'] / pair['eager']:.2f}x)")
    if not slower:
        lines.append(f"- no compiled case is slower than eager {EAGER_BACKEND} ({len(pairs)} compared)")
    return [*lines, ""]


def _generation_speedup_table(rows: pd.DataFrame) -> list[str]:
    """Eager and compiled tokens/s side by side, per case and compiled backend."""
    pairs = _compiled_pairs(rows, "tokens_per_s")
    if not pairs:
        return []
    table = [[p["model"], p["hardware"], p["precision"], str(p["batch_size"]), str(p["tokens"]), _fmt(p["eager"]),
              p["backend"], _fmt(p["value"]), _fmt_speedup(p["value"] / p["eager"] if p["eager"] > 0 else None),
              _fmt(p["compile_s"])] for p in pairs]
    return ["#### Eager vs compiled decoding: generated tokens/s", "",
            f"Speed-up = compiled tokens/s / eager {EAGER_BACKEND} tokens/s on the same case; compile time "
            "(static KV cache, decode step compiled) is apart from both.", "",
            *_md_table(["model", "hardware", "precision", "batch", "new tokens", f"eager {EAGER_BACKEND} tokens/s",
                        "compiled", "compiled tokens/s", "speed-up", "compile (s)"], table), ""]


# --- entry point ------------------------------------------------------------------------------

def _mode_sections(df: pd.DataFrame) -> list[str]:
    """Generate- and train-mode tables (and the inference extras) by model x batch x config."""
    md: list[str] = []
    for mode, tables in _MODE_TABLES.items():
        rows = df[df["mode"] == mode]
        if rows.empty:
            continue
        title = {"generate": "Generation", "train": "Training"}[mode]
        md += [f"## {title}", ""]
        if mode == "generate":
            tokens = sorted({int(t) for t in rows["new_tokens"].dropna()})
            md += [f"Every call generates exactly {', '.join(map(str, tokens)) or '?'} new tokens per sequence "
                   "(min_new_tokens = max_new_tokens); batch = sequences.", ""]
        else:
            md += ["One optimizer step (forward, backward, step) per iteration; fp16/bf16 are autocast over fp32 "
                   "weights.", ""]
        configs = _config_order(rows["config"])
        if mode == "generate":
            md += _generation_speedup_table(rows)
        for metric, heading in tables:
            if rows[metric].notna().any():
                md += [f"#### {heading}", "", *_value_table(rows, metric, configs), ""]
    inference = df[df["mode"] == "inference"]
    for metric, heading in _EXTRA_TABLES:
        if not inference.empty and inference[metric].notna().any():
            md += [f"## {heading} (inference)", "", *_value_table(inference, metric, _config_order(inference["config"])),
                   ""]
    return md


def write_report(results: pd.DataFrame, out_dir: Path, *, system_info: dict[str, Any] | None = None,
                 hardware: dict[str, Any] | None = None, session_id: str | None = None) -> ReportPaths:
    """Write ``report.md``, ``compatibility.json`` and ``plots/*.png`` under `out_dir`.

    `results`: one row per record, columns named as the `BenchmarkRecord` fields.
    `system_info`: free-form facts shown at the top (platform, versions, ...).
    `hardware`: ``detect_hardware().to_dict()`` (target -> available, reason, devices, precisions).
    `session_id`: report only that session's rows.
    Raises ValueError when no rows are left (naming the session filter) or columns are missing.
    """
    df = _prepare(results, session_id)
    out_dir = Path(out_dir)
    plot_dir = out_dir / "plots"
    plot_dir.mkdir(parents=True, exist_ok=True)

    passed, failed = int((df["status"] == "passed").sum()), int((df["status"] != "passed").sum())
    sessions = sorted({str(s) for s in df["session_id"].dropna()})
    duplicate_cells = int((df[df["status"] == "passed"]
                           .groupby(["family", "model", "batch_size", "config"]).size() > 1).sum())
    md: list[str] = ["# Hardware benchmark report", ""]
    md += [f"- **records**: {len(df)} ({passed} passed, {failed} failed"
           + (f", {len(df) - passed - failed} other" if len(df) - passed - failed else "") + ")",
           f"- **sessions**: {', '.join(sessions) or 'unknown'}",
           f"- **families**: {', '.join(sorted(df['family'].unique()))}",
           f"- **configs** (hardware/backend/precision): {', '.join(_config_order(df['config']))}"]
    if "created_at" in df.columns and df["created_at"].notna().any():
        stamps = sorted(str(s) for s in df["created_at"].dropna())
        md.append(f"- **measured**: {stamps[0]} … {stamps[-1]}")
    if duplicate_cells:
        md.append(f"- {duplicate_cells} table cell(s) aggregate several passed records: the median of their values")
    md.append("")
    md += _system_section(df, system_info)
    md += _hardware_section(df, hardware)

    matrix = _compatibility(df)
    md += _compat_section(matrix)

    plots: dict[str, Path] = {}
    modes = df
    df = df[df["mode"] == "inference"]
    md += ["## Results by family (inference)", "",
           f"Columns are configs (hardware/backend/precision). Speedup = median latency of "
           f"{'/'.join(BASELINE)} / median latency of the config, same model and batch size. "
           "`failed`: every record of that cell failed (see Failures); `–`: not run.", ""]
    for family, fam in df.groupby("family", sort=True):
        family = str(family)
        configs = _config_order(fam["config"])
        batch = _reference_batch(fam)
        md += [f"### {family}", "", "#### Latency, median (ms)", "", *_value_table(fam, "latency_ms_median", configs), ""]
        md += ["#### Throughput (items/s)", "", *_value_table(fam, "throughput_items_per_s", configs), ""]
        md += [f"#### Speedup vs {'/'.join(BASELINE)}", ""]
        if _speedups(fam):
            md += [*_speedup_table(fam, configs), ""]
        else:
            md += [f"No speedup: no (model, batch size) has both a passed {'/'.join(BASELINE)} record and "
                   "another passed config.", ""]
        md += ["#### Batch-size scaling: throughput (items/s) per batch size", ""]
        if _cells(fam, "throughput_items_per_s"):
            md += [*_scaling_table(fam, configs), ""]
        else:
            md += ["No passed cases.", ""]
        memory = _memory_table(fam, configs)
        if memory:
            md += ["#### Peak memory (MB): host RSS / device", "", *memory, ""]
        if batch is None:
            md += ["No passed cases in this family: no plots.", ""]
            continue
        drawers: tuple[tuple[str, str, Callable[[Path], bool]], ...] = (
            ("hardware_comparison", "Hardware comparison", partial(_plot_hardware, fam, family, batch)),
            ("batch_scaling", "Batch scaling", partial(_plot_scaling, fam, family)),
            ("speedup", f"Speedup vs {'/'.join(BASELINE)}", partial(_plot_speedup, fam, family, batch)),
            ("memory", "Memory", partial(_plot_memory, fam, family, batch)),
        )
        for kind, title, draw in drawers:
            path = plot_dir / f"{_slug(family)}_{kind}.png"
            if draw(path):
                plots[f"{family}/{kind}"] = path
                md += [f"![{family}: {title}](plots/{path.name})", ""]
        md += [f"Single-batch plots show batch size {batch}, the batch size with the most passed records.", ""]
    md += _mode_sections(modes)
    md += _compiled_section(modes)
    md += _failures_section(modes)

    markdown = out_dir / "report.md"
    markdown.write_text("\n".join(md), encoding="utf-8")
    compatibility = out_dir / "compatibility.json"
    document = {
        "schema_version": COMPATIBILITY_SCHEMA_VERSION,
        "generated_at": _dt.datetime.now(_dt.timezone.utc).isoformat(),
        "sessions": sessions,
        "target": "hardware/backend; a target is compatible with a family when any of its cases passed",
        "rating": {
            "method": "median over (model, batch size) cases passed by two or more targets of "
                      "target throughput / best target throughput, each target at its best precision",
            "thresholds": dict(RATING_THRESHOLDS),
            "below_thresholds": "low",
            "no_shared_case": "unrated",
            "incompatible": "none",
        },
        "hardware_detected": ({name: bool((info or {}).get("available")) for name, info in hardware.items()}
                              if hardware else None),
        "targets": sorted({t for entries in matrix.values() for t in entries}),
        "families": matrix,
    }
    compatibility.write_text(json.dumps(document, indent=2, sort_keys=False, default=str), encoding="utf-8")
    return ReportPaths(out_dir=out_dir, markdown=markdown, compatibility=compatibility, plots=plots)


__all__ = [
    "BASELINE",
    "COMPATIBILITY_SCHEMA_VERSION",
    "EAGER_BACKEND",
    "RATING_THRESHOLDS",
    "REQUIRED_COLUMNS",
    "ReportPaths",
    "compatibility_matrix",
    "write_report",
]
