"""Compare two benchmark sessions case by case: median latency change and a Mann-Whitney U test.

Inputs are the results DataFrames of two sessions (one row per `BenchmarkRecord`, columns named
as its fields) and their raw timings (``record_id -> per-iteration milliseconds``). Cases are
matched by ``case_id``. Only passed records count: a case that failed (or is absent) in one
session is ``missing`` there, never a regression, and the note says which side and why.

A change is a regression only when the median latency grew by more than `threshold` (relative)
AND the two samples differ significantly (two-sided Mann-Whitney U, p < `alpha`); the same with
a drop is an improvement. Everything else is unchanged: a large shift on a handful of noisy
iterations is not evidence, and a significant shift below the threshold is not worth acting on.
"""

from __future__ import annotations

import math
import warnings
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any, Literal

import numpy as np
import pandas as pd

Verdict = Literal["regression", "improvement", "unchanged", "missing"]
VERDICTS: tuple[str, ...] = ("regression", "improvement", "unchanged", "missing")


@dataclass(frozen=True)
class Comparison:
    """One case in both sessions.

    `change` is ``(median_b - median_a) / median_a``: positive means B is slower. `p_value` is
    None when either side has fewer than 2 raw timings (no test possible) or the case is missing.
    """

    case_id: str
    median_a: float | None
    median_b: float | None
    change: float | None
    p_value: float | None
    verdict: Verdict
    n_a: int = 0
    n_b: int = 0
    note: str = ""


def _check_frame(frame: pd.DataFrame, name: str) -> None:
    if not isinstance(frame, pd.DataFrame):
        raise TypeError(f"{name} must be a pandas DataFrame, got {type(frame).__name__}")
    missing = [c for c in ("case_id", "record_id", "status") if c not in frame.columns]
    if missing:
        raise ValueError(f"{name} lacks the columns {', '.join(missing)}; pass load_results() output "
                         "or pd.DataFrame([r.to_dict() for r in records])")


@dataclass(frozen=True)
class _Side:
    timings: tuple[float, ...]
    median: float | None
    records: int
    failure: str = ""


def _sides(frame: pd.DataFrame, timings: Mapping[str, Sequence[float]]) -> dict[str, _Side]:
    """case_id -> pooled raw timings and median of that session's passed records."""
    out: dict[str, _Side] = {}
    for case_id, rows in frame.groupby("case_id", sort=False):
        passed = rows[rows["status"] == "passed"]
        if passed.empty:
            errors = [str(e) for e in rows.get("error", pd.Series(dtype=object)).dropna()]
            out[str(case_id)] = _Side((), None, 0, errors[0] if errors else f"status {rows['status'].iloc[0]}")
            continue
        values = tuple(float(v) for rid in passed["record_id"] for v in timings.get(str(rid), ()))
        values = tuple(v for v in values if math.isfinite(v))
        if values:
            median: float | None = float(np.median(values))
        elif "latency_ms_median" in passed.columns:
            medians = pd.to_numeric(passed["latency_ms_median"], errors="coerce").dropna()
            median = float(medians.median()) if not medians.empty else None
        else:
            median = None
        out[str(case_id)] = _Side(values, median, len(passed))
    return out


def _mannwhitney(a: Sequence[float], b: Sequence[float]) -> float | None:
    if len(a) < 2 or len(b) < 2:
        return None
    from scipy.stats import mannwhitneyu

    if len(set(a) | set(b)) == 1:
        return 1.0  # identical constant samples: no difference, and scipy would divide by zero
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", RuntimeWarning)
        result = mannwhitneyu(a, b, alternative="two-sided")
    p = float(result.pvalue)
    return None if math.isnan(p) else p


def _missing_note(side_a: _Side | None, side_b: _Side | None) -> str:
    parts = []
    for label, side in (("A", side_a), ("B", side_b)):
        if side is None:
            parts.append(f"absent from {label}")
        elif side.failure:
            parts.append(f"failed in {label}: {' '.join(side.failure.split())[:120]}")
        elif side.median is None:
            parts.append(f"no latency in {label}")
    return "; ".join(parts)


def compare_sessions(a: pd.DataFrame, b: pd.DataFrame, timings_a: Mapping[str, Sequence[float]],
                     timings_b: Mapping[str, Sequence[float]], *, threshold: float = 0.10,
                     alpha: float = 0.05) -> list[Comparison]:
    """One `Comparison` per case_id in A or B: A's cases in A's order, then cases only in B.

    `threshold`: smallest relative change of the median latency that counts (0.10 = 10 %).
    `alpha`: significance level of the two-sided Mann-Whitney U test on the raw timings.
    Several passed records of one case in one session are pooled.
    """
    if not (threshold >= 0 and math.isfinite(threshold)):
        raise ValueError(f"threshold must be a finite number >= 0, got {threshold!r}")
    if not 0 < alpha < 1:
        raise ValueError(f"alpha must be in (0, 1), got {alpha!r}")
    _check_frame(a, "a")
    _check_frame(b, "b")
    sides_a, sides_b = _sides(a, timings_a), _sides(b, timings_b)
    order = list(sides_a) + [c for c in sides_b if c not in sides_a]
    out: list[Comparison] = []
    for case_id in order:
        side_a, side_b = sides_a.get(case_id), sides_b.get(case_id)
        n_a = len(side_a.timings) if side_a else 0
        n_b = len(side_b.timings) if side_b else 0
        med_a = side_a.median if side_a else None
        med_b = side_b.median if side_b else None
        if med_a is None or med_b is None:
            out.append(Comparison(case_id, med_a, med_b, None, None, "missing", n_a, n_b,
                                  _missing_note(side_a, side_b)))
            continue
        change = (med_b - med_a) / med_a if med_a > 0 else None
        p_value = _mannwhitney(side_a.timings if side_a else (), side_b.timings if side_b else ())
        significant = p_value is not None and p_value < alpha
        verdict: Verdict = "unchanged"
        note = ""
        if change is not None and significant and abs(change) > threshold:
            verdict = "regression" if change > 0 else "improvement"
        elif p_value is None:
            note = "fewer than 2 raw timings on a side: no test"
        elif change is not None and abs(change) > threshold:
            note = f"not significant (p >= {alpha:g})"
        out.append(Comparison(case_id, med_a, med_b, change, p_value, verdict, n_a, n_b, note))
    return out


def _fmt_ms(value: float | None) -> str:
    return "-" if value is None else f"{value:.3f}"


def _fmt_p(value: float | None) -> str:
    if value is None:
        return "-"
    return f"{value:.2e}" if value < 1e-3 else f"{value:.4f}"


def format_table(comparisons: Sequence[Comparison]) -> str:
    """Plain-text table, one line per case, then a count per verdict."""
    header = ["case_id", "median A (ms)", "median B (ms)", "change", "p-value", "n A", "n B", "verdict", "note"]
    rows: list[list[Any]] = [
        [c.case_id, _fmt_ms(c.median_a), _fmt_ms(c.median_b),
         "-" if c.change is None else f"{c.change * 100:+.1f}%", _fmt_p(c.p_value), c.n_a, c.n_b,
         c.verdict, c.note]
        for c in comparisons
    ]
    cells = [[str(x) for x in row] for row in [header, *rows]]
    widths = [max(len(r[i]) for r in cells) for i in range(len(header))]
    right = {1, 2, 3, 4, 5, 6}

    def line(row: list[str]) -> str:
        return "  ".join(c.rjust(w) if i in right else c.ljust(w)
                         for i, (c, w) in enumerate(zip(row, widths, strict=True))).rstrip()

    lines = [line(cells[0]), "  ".join("-" * w for w in widths)]
    lines += [line(r) for r in cells[1:]]
    counts = {v: sum(c.verdict == v for c in comparisons) for v in VERDICTS}
    lines.append("")
    lines.append(", ".join(f"{n} {v}" for v, n in counts.items()) + f" ({len(comparisons)} cases)")
    return "\n".join(lines)


__all__ = ["VERDICTS", "Comparison", "Verdict", "compare_sessions", "format_table"]
