"""`write_report`: ``report.md``, its plots and ``compatibility.json``.

A table cell is the median of the passed records of that (model, batch size, config); a cell
whose records all failed reads ``failed`` (``crashed`` when all crashed), one never run ``–``.
"""

from __future__ import annotations

import json
import math
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import pandas as pd

from pytest_hwbench.vocabulary import DEFAULT_MODE, TRAIN_MODE

from .compatibility import RATING_THRESHOLDS, _compatibility, _write_document
from .data import (
    BASELINE,
    EAGER_BACKEND,
    cell_medians,
    compiled_pairs,
    config_order,
    fmt,
    fmt_speedup,
    prepare,
    reference_batch,
    short,
    speedup_cells,
)
from .plots import draw_family

#: The generate mode, one of `vocabulary.MODES` (which names no constant for it).
_GENERATE_MODE = "generate"
#: Optional inference tables: (metric, title), each written where any record measured it.
_EXTRA_TABLES: tuple[tuple[str, str], ...] = (
    ("achieved_tflops", "Achieved TFLOP/s"),
    ("compile_time_s", "Compile time (s), per input shape, not in the latency"),
    ("energy_j_per_item", "Energy per item (J)"),
)
#: The sections of the generate and train modes: title, and their tables' (metric, title).
_MODE_TABLES: dict[str, tuple[str, tuple[tuple[str, str], ...]]] = {
    _GENERATE_MODE: ("Generation", (
        ("ttft_ms", "Time to first token (ms)"), ("decode_ms_per_token", "Decode, per token (ms)"),
        ("tokens_per_s", "Generated tokens/s"), ("latency_ms_median", "Whole generate() call (ms)"),
        ("peak_device_memory_mb", "Peak device memory (MB)"))),
    TRAIN_MODE: ("Training", (
        ("latency_ms_median", "Optimizer step (ms)"), ("throughput_items_per_s", "Samples/s"),
        ("peak_host_rss_mb", "Peak host RSS (MB)"), ("peak_device_memory_mb", "Peak device memory (MB)"))),
}
_ERROR_CHARS_MD = 300


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


def _md_table(header: Sequence[str], rows: Iterable[Sequence[Any]]) -> list[str]:
    def line(cells: Iterable[Any]) -> str:
        return "| " + " | ".join(str(c).replace("|", "\\|").replace("\n", " ") for c in cells) + " |"

    return [line(header), "|" + "|".join("---" for _ in header) + "|", *map(line, rows)]


# --- tables and sections ----------------------------------------------------------------------

def _by_model_and_batch(cells: Mapping[tuple[str, int, str], str], configs: Sequence[str],
                        missing: str = "–") -> list[list[str]]:
    """A row per (model, batch size) of `cells`, sorted: a cell per config, `missing` where it has none."""
    return [[model, str(batch), *(cells.get((model, batch, config), missing) for config in configs)]
            for model, batch in sorted({(m, b) for m, b, _ in cells})]


def _value_table(fam: pd.DataFrame, metric: str, configs: list[str]) -> list[str]:
    crashed = (fam["status"] == "crashed").groupby([fam["model"], fam["batch_size"], fam["config"]]).all()
    cells = {(str(m), int(b), str(c)): "crashed" if every else "failed" for (m, b, c), every in crashed.items()}
    cells |= {key: fmt(value) for key, value in cell_medians(fam, metric).items()}  # a cell with a passed record
    return _md_table(["model", "batch", *configs], _by_model_and_batch(cells, configs))


def _speedup_table(fam: pd.DataFrame, configs: list[str]) -> list[str]:
    """The baseline's latency, then the speedup of every other config (`configs` starts with the baseline)."""
    baseline = "/".join(BASELINE)
    speedups = speedup_cells(fam)
    if not speedups:
        return [f"No speedup: no (model, batch size) has both a passed {baseline} record and another passed "
                "config."]
    latencies = cell_medians(fam, "latency_ms_median")
    cells = {key: fmt_speedup(value) for key, value in speedups.items()}
    cells |= {(m, b, baseline): fmt(latencies.get((m, b, baseline))) for m, b, _ in speedups}
    return _md_table(["model", "batch", f"{baseline} latency (ms)", *configs[1:]],
                     _by_model_and_batch(cells, configs, missing="n/a"))


def _scaling_table(fam: pd.DataFrame, configs: list[str]) -> list[str]:
    cells = cell_medians(fam, "throughput_items_per_s")
    if not cells:
        return ["No passed cases."]
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
            rows.append([model, config, *[fmt(points[b]) if b in points else "–" for b in batches], scale])
    return _md_table(["model", "config", *[f"b{b}" for b in batches], "largest/smallest batch"], rows)


def _memory_table(fam: pd.DataFrame, configs: list[str]) -> list[str] | None:
    rss, dev = cell_medians(fam, "peak_host_rss_mb"), cell_medians(fam, "peak_device_memory_mb")
    if all(math.isnan(v) for v in [*rss.values(), *dev.values()]):
        return None
    cells = {key: f"{fmt(value)} / {fmt(dev.get(key))}" for key, value in rss.items()}
    return _md_table(["model", "batch", *configs], _by_model_and_batch(cells, configs))


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
            values = sorted({str(v) for v in df[column].dropna().unique() if str(v)})
            if values:
                lines.append(f"- **{label}** (from the records): {', '.join(values)}")
    return [*lines, ""]


#: Why records share a table cell, by the column that tells them apart.
_AGGREGATE_REASONS = (("session_id", "sessions"), ("nodeid", "tests"), ("length", "input lengths"),
                      ("tokens", "new-token counts"))
#: Aggregated cells named one by one in the report's header (the rest are counted).
_AGGREGATES_SHOWN = 10


def _aggregated_cells(df: pd.DataFrame) -> list[str]:
    """Header lines for the table cells (mode, model, batch size, config) that show the median of
    several passed records, each with why (`_AGGREGATE_REASONS`, or repeats of one case)."""
    passed = df[df["status"] == "passed"]
    if passed.empty:
        return []
    keys = ["mode", "model", "batch_size", "config"]
    columns = [(column, label) for column, label in _AGGREGATE_REASONS if column in passed.columns]
    grouped = passed.groupby(keys, sort=True)
    counts = grouped[[column for column, _ in columns]].nunique().assign(records=grouped.size())
    counts = counts[counts["records"] > 1]
    if counts.empty:
        return []
    described = []
    for (mode, model, batch, config), row in counts.iterrows():
        why = [f"{row[column]} {label}" for column, label in columns if row[column] > 1]
        described.append(f"{model} b{batch} {config} ({mode}): {row['records']} records, "
                         + (", ".join(why) if why else "repeats of one case"))
    lines = [f"- {len(counts)} table cell(s) aggregate several passed records: the median of their values",
             *(f"  - {text}" for text in described[:_AGGREGATES_SHOWN])]
    if len(described) > _AGGREGATES_SHOWN:
        lines.append(f"  - and {len(described) - _AGGREGATES_SHOWN} more")
    return lines


def _hardware_section(df: pd.DataFrame, hardware: Mapping[str, Any] | None) -> list[str]:
    lines = ["## Available hardware", ""]
    measured = sorted(df["hardware"].unique())

    def counts(name: str) -> str:
        rows, where = df[df["hardware"] == name], ""
        if rows.empty and (df["backend"] == name).any():
            # A runtime target (e.g. an inference engine on the host) runs its cases on another
            # target's hardware: its records carry it as their backend.
            rows = df[df["backend"] == name]
            where = f" (its backend, on {', '.join(sorted({str(h) for h in rows['hardware']}))})"
        return f"{int((rows['status'] == 'passed').sum())} / {int((rows['status'] == 'failed').sum())}{where}"

    if not hardware:
        lines += ["Hardware detection not provided; hardware measured in these records:", ""]
        lines += _md_table(["hardware", "cases passed / failed"], [[h, counts(h)] for h in measured])
        return [*lines, ""]
    rows = []
    for name, info in hardware.items():
        info = info if isinstance(info, Mapping) else {}
        available = bool(info.get("available"))
        devices = [f"{d.get('name', '?')}"
                   + (f" ({fmt(float(d['memory_mb']))} MB)" if d.get("memory_mb") else "")
                   for d in info.get("devices") or () if isinstance(d, Mapping)]
        rows.append([name, "yes" if available else "no", "; ".join(devices) or "–",
                     ", ".join(info.get("precisions") or ()) or "–",
                     "" if available else short(info.get("reason") or "", 200), counts(name)])
    for name in measured:
        if name not in hardware:
            rows.append([name, "not detected", "–", "–", "measured but absent from the detection", counts(name)])
    lines += _md_table(["target", "available", "devices", "precisions", "reason", "cases passed / failed"], rows)
    return [*lines, ""]


def _compat_section(matrix: Mapping[str, Mapping[str, Mapping[str, Any]]]) -> list[str]:
    targets = sorted({t for entries in matrix.values() for t in entries})

    def cell(entry: Mapping[str, Any] | None) -> str:
        if entry is None:
            return "–"
        rel = entry["relative_throughput"]
        rating = entry["performance_rating"] + (f" ({rel:.2f})" if rel is not None else "")
        return f"{rating}, {entry['passed']} passed / {entry['failed']} failed"

    rows = [[family, *(cell(entries.get(target)) for target in targets)]
            for family, entries in matrix.items()]
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
    lines += [f"- **{row['family']}** {row['model']} {row['config']} b{row['batch_size']}"
              + (f" (`{row['case_id']}`)" if row["case_id"] else "")
              + f": {short(row['error'], _ERROR_CHARS_MD)}"
              for _, row in failed.sort_values(["family", "model", "config", "batch_size"]).iterrows()]
    return [*lines, ""]


def _noise_section(df: pd.DataFrame) -> list[str]:
    """Records measured while other work held the machine, with the reason each was judged noisy."""
    lines = ["## Noisy records", ""]
    if "noise" not in df.columns or df["noise"].isna().all():
        return [*lines, "No interference readings: these records predate them (schema 3).", ""]
    noisy = df[df["noise"] == "noisy"]
    judged = int(df["noise"].notna().sum())
    if noisy.empty:
        return [*lines, f"None: all {judged} judged records were measured on a quiet machine.", ""]
    lines += [f"{len(noisy)} of {judged} judged records were measured while other work held the machine: their "
              "figures are slower or more spread than this configuration runs, `hwbench compare` calls them "
              "inconclusive and `hwsel train` leaves them out.", ""]
    rows = [[f"`{row['case_id']}`", fmt(row.get("latency_ms_median")),
             *("–" if pd.isna(row.get(k)) else str(int(row[k])) for k in ("tries", "threads")),
             short(row.get("noise_reason") or "", _ERROR_CHARS_MD)]
            for _, row in noisy.sort_values(["family", "model", "config", "batch_size"]).iterrows()]
    return [*lines, *_md_table(["case", "median (ms)", "tries", "threads", "why noisy"], rows), ""]


# --- compiled vs eager ------------------------------------------------------------------------

def _case_label(pair: Mapping[str, Any], with_length: bool = False) -> str:
    """``vit-base cuda fp16 b64`` (``... generate out32`` in generate mode, ``... in512`` where
    the same model ran at several input lengths)."""
    label = f"{pair['model']} {pair['hardware']} {pair['precision']} b{pair['batch_size']}"
    if pair["mode"] != DEFAULT_MODE:
        label += f" {pair['mode']}"
    if with_length and pair["length"]:
        label += f" in{pair['length']}"
    if pair["tokens"]:
        label += f" out{pair['tokens']}"
    return label


def _compiled_section(df: pd.DataFrame) -> list[str]:
    """Every compiled case slower than eager torch on the same case, a line each with both medians."""
    pairs = compiled_pairs(df, "latency_ms_median")
    if not pairs:
        return []
    lines = ["## Compiled vs eager", "",
             f"Median latency of each compiled case against eager {EAGER_BACKEND} on the same case (model, hardware, "
             "precision, batch size, mode, input length, new tokens); compile time is not in either figure.", ""]
    slower = [p for p in pairs if p["value"] > p["eager"]]
    several = {m for m in {p["model"] for p in pairs} if len({p["length"] for p in pairs if p["model"] == m}) > 1}
    for pair in slower:
        label = _case_label(pair, with_length=pair["model"] in several)
        lines.append(f"- {label}: {pair['backend']} {fmt(pair['value'])} ms is slower than eager "
                     f"{EAGER_BACKEND} {fmt(pair['eager'])} ms ({pair['value'] / pair['eager']:.2f}x)")
    if not slower:
        lines.append(f"- no compiled case is slower than eager {EAGER_BACKEND} ({len(pairs)} compared)")
    return [*lines, ""]


def _generation_speedup_table(rows: pd.DataFrame) -> list[str]:
    """Eager and compiled tokens/s side by side, per case and compiled backend."""
    pairs = compiled_pairs(rows, "tokens_per_s")
    if not pairs:
        return []
    table = [[p["model"], p["hardware"], p["precision"], str(p["batch_size"]), str(p["tokens"]), fmt(p["eager"]),
              p["backend"], fmt(p["value"]), fmt_speedup(p["value"] / p["eager"] if p["eager"] > 0 else None),
              fmt(p["compile_s"])] for p in pairs]
    return ["#### Eager vs compiled decoding: generated tokens/s", "",
            f"Speed-up = compiled tokens/s / eager {EAGER_BACKEND} tokens/s on the same case; compile time "
            "(static KV cache, decode step compiled) is apart from both.", "",
            *_md_table(["model", "hardware", "precision", "batch", "new tokens", f"eager {EAGER_BACKEND} tokens/s",
                        "compiled", "compiled tokens/s", "speed-up", "compile (s)"], table), ""]


# --- generate and train ------------------------------------------------------------------------

def _mode_sections(df: pd.DataFrame) -> list[str]:
    """Generate- and train-mode tables (and the inference extras) by model x batch x config."""
    md: list[str] = []
    for mode, (title, tables) in _MODE_TABLES.items():
        rows = df[df["mode"] == mode]
        if rows.empty:
            continue
        md += [f"## {title}", ""]
        if mode == _GENERATE_MODE:
            tokens = sorted({int(t) for t in rows["new_tokens"].dropna().unique()})
            md += [f"Every call generates exactly {', '.join(map(str, tokens)) or '?'} new tokens per sequence "
                   "(min_new_tokens = max_new_tokens); batch = sequences.", "", *_generation_speedup_table(rows)]
        else:
            md += ["One optimizer step (forward, backward, step) per iteration; fp16/bf16 are autocast over fp32 "
                   "weights.", ""]
        configs = config_order(rows["config"])
        for metric, heading in tables:
            if rows[metric].notna().any():
                md += [f"#### {heading}", "", *_value_table(rows, metric, configs), ""]
    inference = df[df["mode"] == DEFAULT_MODE]
    for metric, heading in _EXTRA_TABLES:
        if not inference.empty and inference[metric].notna().any():
            md += [f"## {heading} (inference)", "", *_value_table(inference, metric, config_order(inference["config"])),
                   ""]
    return md


# --- entry point ------------------------------------------------------------------------------

def write_report(results: pd.DataFrame, out_dir: Path, *, system_info: dict[str, Any] | None = None,
                 hardware: dict[str, Any] | None = None, session_id: str | None = None) -> ReportPaths:
    """Write ``report.md``, ``compatibility.json`` and ``plots/*.png`` under `out_dir`.

    `results`: one row per record, columns named as the `BenchmarkRecord` fields.
    `system_info`: free-form facts shown at the top (platform, versions, ...).
    `hardware`: ``detect_hardware().to_dict()`` (target -> available, reason, devices, precisions).
    `session_id`: report only that session's rows.
    Raises ValueError when no rows are left (naming the session filter) or columns are missing.
    """
    df = prepare(results, session_id)
    out_dir = Path(out_dir)
    plot_dir = out_dir / "plots"
    plot_dir.mkdir(parents=True, exist_ok=True)

    passed, failed = int((df["status"] == "passed").sum()), int((df["status"] != "passed").sum())
    sessions = sorted({str(s) for s in df["session_id"].dropna().unique()})
    md: list[str] = ["# Hardware benchmark report", ""]
    noisy = int((df["noise"] == "noisy").sum()) if "noise" in df.columns else 0
    md += [f"- **records**: {len(df)} ({passed} passed, {failed} failed"
           + (f"; {noisy} noisy, see Noisy records" if noisy else "") + ")",
           f"- **sessions**: {', '.join(sessions) or 'unknown'}",
           f"- **families**: {', '.join(sorted(df['family'].unique()))}",
           f"- **configs** (hardware/backend/precision): {', '.join(config_order(df['config']))}"]
    if "created_at" in df.columns and df["created_at"].notna().any():
        stamps = df["created_at"].dropna()
        try:
            first, last = str(stamps.min()), str(stamps.max())
        except TypeError:  # times and text mixed: the order of their text
            ordered = sorted(str(s) for s in stamps.unique())
            first, last = ordered[0], ordered[-1]
        md.append(f"- **measured**: {first} … {last}")
    matrix = _compatibility(df)
    md += [*_aggregated_cells(df), "", *_system_section(df, system_info), *_hardware_section(df, hardware),
           *_compat_section(matrix)]
    plots: dict[str, Path] = {}
    md += ["## Results by family (inference)", "",
           f"Columns are configs (hardware/backend/precision). Speedup = median latency of "
           f"{'/'.join(BASELINE)} / median latency of the config, same model and batch size. "
           "`failed`: every record of that cell failed (see Failures); `–`: not run.", ""]
    for family, fam in df[df["mode"] == DEFAULT_MODE].groupby("family", sort=True):
        family = str(family)
        configs = config_order(fam["config"])
        batch = reference_batch(fam)
        md += [f"### {family}", "", "#### Latency, median (ms)", "", *_value_table(fam, "latency_ms_median", configs), ""]
        md += ["#### Throughput (items/s)", "", *_value_table(fam, "throughput_items_per_s", configs), ""]
        md += [f"#### Speedup vs {'/'.join(BASELINE)}", "", *_speedup_table(fam, configs), ""]
        md += ["#### Batch-size scaling: throughput (items/s) per batch size", "",
               *_scaling_table(fam, configs), ""]
        if memory := _memory_table(fam, configs):
            md += ["#### Peak memory (MB): host RSS / device", "", *memory, ""]
        if batch is None:
            md += ["No passed cases in this family: no plots.", ""]
            continue
        for kind, title, path in draw_family(fam, family, batch, plot_dir):
            plots[f"{family}/{kind}"] = path
            md += [f"![{family}: {title}](plots/{path.name})", ""]
        md += [f"Single-batch plots show batch size {batch}, the batch size with the most passed records.", ""]
    md += [*_mode_sections(df), *_compiled_section(df), *_noise_section(df), *_failures_section(df)]

    markdown = out_dir / "report.md"
    markdown.write_text("\n".join(md), encoding="utf-8")
    compatibility = out_dir / "compatibility.json"
    _write_document(compatibility, matrix, sessions, hardware)
    return ReportPaths(out_dir=out_dir, markdown=markdown, compatibility=compatibility, plots=plots)


__all__ = ["ReportPaths", "write_report"]
