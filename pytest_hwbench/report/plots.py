"""The report's PNG plots, per family: hardware comparison, batch scaling, speedup and memory.

Plots draw with ``matplotlib.figure.Figure`` on the Agg canvas, never through pyplot, so
writing a report changes no global matplotlib state (backend, open figures). matplotlib is
imported when the first figure is made, not with this module.
"""

from __future__ import annotations

import math
import re
from collections.abc import Callable, Mapping
from functools import partial
from pathlib import Path
from typing import TYPE_CHECKING, Any

import pandas as pd

from .data import BASELINE, cell_medians, config_order, fmt, fmt_speedup, speedup_cells

if TYPE_CHECKING:
    from matplotlib.axes import Axes


#: Margins around the axes, in inches: (left, right, top, bottom), and the gaps between panels.
#: Fixed rather than computed by a layout engine, which measures every text of a figure twice
#: per save and costs most of a report's time.
_MARGINS_IN = (0.9, 0.25, 0.45, 1.15)
_GAP_IN = (0.9, 1.15)  # (between columns, between rows)


def _new_figure(width: float, height: float, *, rows: int = 1, cols: int = 1) -> Any:
    """A figure of about `width` x `height` inches whose `rows` x `cols` panels leave room
    for tick labels rotated 20 degrees, axis labels and titles."""
    from matplotlib.figure import Figure

    width = min(max(width, 6.0), 40.0)
    left, right, top, bottom = _MARGINS_IN
    fig = Figure(figsize=(width, height))
    panel_w = (width - left - right - _GAP_IN[0] * (cols - 1)) / cols
    panel_h = (height - top - bottom - _GAP_IN[1] * (rows - 1)) / rows
    fig.subplots_adjust(left=left / width, right=1 - right / width, top=1 - top / height, bottom=bottom / height,
                        wspace=_GAP_IN[0] / panel_w, hspace=_GAP_IN[1] / panel_h)
    return fig


def _colors(configs: pd.Series) -> dict[str, str]:
    """One colour per config, the same in every plot of a family."""
    palette = [f"C{i}" for i in range(10)] + ["black", "grey", "olive", "navy", "teal", "maroon"]
    return {c: palette[i % len(palette)] for i, c in enumerate(config_order(configs))}


def _grouped_bars(ax: Axes, models: list[str], series: Mapping[str, list[float]], *,
                  colors: Mapping[str, str], fmt: Any = fmt, ylabel: str, title: str) -> None:
    """Bars grouped by model, one series per config, each bar labelled with its value."""
    n = max(len(series), 1)
    width = 0.8 / n
    values_all = [v for vals in series.values() for v in vals if not math.isnan(v) and v > 0]
    for i, (label, values) in enumerate(series.items()):
        xs = [m + (i - (n - 1) / 2) * width for m in range(len(models))]
        heights = [0.0 if math.isnan(v) else v for v in values]
        bars = ax.bar(xs, heights, width, label=label, color=colors.get(label))
        ax.bar_label(bars, labels=["" if math.isnan(v) else fmt(v) for v in values],
                     fontsize=7, rotation=90 if n * len(models) > 8 else 0, padding=2)
    ax.set_xticks(range(len(models)), models, rotation=20 if len(models) > 3 else 0, ha="right" if len(models) > 3 else "center")
    ax.set_ylabel(ylabel)
    ax.set_title(title, y=1.0)  # a fixed place: placing it by the tick labels measures them all again
    if values_all and max(values_all) / min(values_all) > 100:
        ax.set_yscale("log")
        ax.set_ylim(min(values_all) / 2, max(values_all) * 4)
    else:
        ax.set_ylim(0, max(values_all or [1.0]) * 1.2)
    ax.minorticks_off()  # a log axis's unlabelled minor ticks: dozens of artists each, no values
    ax.legend(fontsize=7)


def _plot_bars(colors: Mapping[str, str], batch: int, *,
               panels: list[tuple[Mapping[tuple[str, int, str], float], list[str], str, str]], height: float,
               fmt: Any = fmt, line_at: float | None = None) -> Any:
    """Grouped bars at `batch`, a panel for each of `panels` (cells, configs, y label, title) that has
    anything to draw, one above the other, and a dashed line at `line_at`; None when none has."""
    drawn = []
    for cells, configs, ylabel, title in panels:
        models = sorted({m for (m, b, _), v in cells.items() if b == batch and not math.isnan(v)})
        # config -> one value per model (NaN: no bar), configs without any value left out
        series = {c: [cells.get((m, batch, c), math.nan) for m in models] for c in configs}
        series = {c: values for c, values in series.items() if any(not math.isnan(v) for v in values)}
        if series:
            drawn.append((models, series, ylabel, title))
    if not drawn:
        return None
    width = 1.5 + 0.5 * max(len(models) * len(series) for models, series, _, _ in drawn)
    fig = _new_figure(width, height * len(drawn), rows=len(drawn))
    axes = fig.subplots(len(drawn), 1, squeeze=False)
    for ax, (models, series, ylabel, title) in zip(axes.flat, drawn, strict=True):
        _grouped_bars(ax, models, series, colors=colors, fmt=fmt, ylabel=ylabel, title=title)
        if line_at is not None:
            ax.axhline(line_at, color="grey", linewidth=0.8, linestyle="--")
    return fig


def _plot_scaling(fam: pd.DataFrame, family: str, colors: Mapping[str, str]) -> Any:
    """Throughput against batch size, a panel per model; None when nothing passed."""
    cells = cell_medians(fam, "throughput_items_per_s")
    models = sorted({m for (m, _, _), v in cells.items() if not math.isnan(v)})
    if not models:
        return None
    cols = min(3, len(models))
    rows = math.ceil(len(models) / cols)
    fig = _new_figure(5.5 * cols, 4.2 * rows, rows=rows, cols=cols)
    axes = fig.subplots(rows, cols, squeeze=False)
    configs = config_order(fam["config"])
    lines: dict[str, Any] = {}
    for ax, model in zip(axes.flat, models, strict=False):
        for config in configs:
            points = sorted((b, v) for (m, b, c), v in cells.items() if m == model and c == config and not math.isnan(v))
            if not points:
                continue
            xs, ys = [p[0] for p in points], [p[1] for p in points]
            lines.setdefault(config, ax.plot(xs, ys, marker="o", label=config, color=colors[config])[0])
            for x, y in points:
                ax.annotate(fmt(y), (x, y), textcoords="offset points", xytext=(0, 5), ha="center", fontsize=7)
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
        ax.minorticks_off()  # a log axis's unlabelled minor ticks: dozens of artists each, no values
        ax.set_xlabel("batch size")
        ax.set_ylabel("throughput (items/s)")
        ax.set_title(f"{family}: {model}", y=1.0)
    # One legend for the figure (a config has one colour in every panel): in the first spare
    # panel, else in the first panel's upper left, where rising throughput leaves room.
    spare = list(axes.flat)[len(models):]
    for ax in spare:
        ax.set_axis_off()
    holder = spare[0] if spare else axes.flat[0]
    holder.legend([lines[c] for c in configs if c in lines], [c for c in configs if c in lines],
                  fontsize=9 if spare else 7, loc="upper left")
    return fig


def draw_family(fam: pd.DataFrame, family: str, batch: int, plot_dir: Path) -> list[tuple[str, str, Path]]:
    """Draw the family's plots under `plot_dir`; (kind, title, path) of each one written, in report order.

    `batch` is the batch size the single-batch plots show; a plot with nothing to draw is not written.
    """
    configs = config_order(fam["config"])
    baseline = "/".join(BASELINE)
    hardware = [(cell_medians(fam, "latency_ms_median"), configs, "median latency (ms)",
                 f"{family}: median latency per model and config, batch size {batch}")]
    speedup = [(speedup_cells(fam), [c for c in configs if c != baseline], f"speedup vs {baseline} (x)",
                 f"{family}: speedup over {baseline}, batch size {batch}")]
    memory = [(cell_medians(fam, metric), configs, label, f"{family}: {label}, batch size {batch}")
              for metric, label in (("peak_host_rss_mb", "peak host RSS (MB)"),
                                    ("peak_device_memory_mb", "peak device memory (MB)"))]
    colors = _colors(fam["config"])
    drawers: tuple[tuple[str, str, Callable[[], Any]], ...] = (
        ("hardware_comparison", "Hardware comparison",
         partial(_plot_bars, colors, batch, panels=hardware, height=5)),
        ("batch_scaling", "Batch scaling", partial(_plot_scaling, fam, family, colors)),
        ("speedup", f"Speedup vs {baseline}",
         partial(_plot_bars, colors, batch, panels=speedup, height=5, fmt=fmt_speedup, line_at=1.0)),
        ("memory", "Memory", partial(_plot_bars, colors, batch, panels=memory, height=4.5)),
    )
    slug = re.sub(r"[^A-Za-z0-9_.-]+", "_", family).strip("_") or "family"
    written = []
    for kind, title, draw in drawers:
        fig = draw()
        if fig is not None:
            path = plot_dir / f"{slug}_{kind}.png"
            fig.savefig(path, dpi=100, pil_kwargs={"compress_level": 1})  # fast: a few percent larger
            written.append((kind, title, path))
    return written
