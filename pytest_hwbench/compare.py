"""Compare two sets of benchmark records case by case, on between-run variation, not iterations.

The iterations of one run are not independent samples of "how fast is this case": load, clocks
and thread placement shift a whole run at once, so a test on iterations calls any such shift
significant (issue 16: 57 % false alarms in an A/A test on a shared runner). Here the unit is a
*round*: the median of one consecutive block of a record's timed iterations (`ROUNDS` blocks per
record). A side's figure for a case is the median of its rounds; its spread is the robust
relative spread of those rounds (1.4826 x MAD / median) or, where a side holds several sessions
(a baseline history), of the sessions' medians, whichever is larger.

Verdicts, per ``case_id``, over passed records only:

- ``missing``: no passed record on a side (the note says which and why);
- ``inconclusive``, with the reason: every record of a side was measured on a busy machine
  (``noise == "noisy"``, its reason quoted), a side has fewer than `MIN_ROUNDS` rounds, the sides
  ran different thread counts or devices, the host ran its reference kernel (recorded beside
  each record, `pytest_hwbench.interference.reference_us`) more than
  `MAX_REFERENCE_SLOWDOWN` times slower on one side, or the change passes the threshold but the
  rounds overlap too much to tell (Mann-Whitney U on rounds, p >= `alpha`), the spread or the
  host's own change of speed is large enough to explain it;
- ``regression`` / ``improvement``: the median moved by more than `threshold` and by more than
  `NOISE_Z` times the two sides' combined spread, plus `HOST_AMPLIFICATION` times what the host's
  reference kernel moved between the sides, and the rounds differ (p < `alpha`);
- ``unchanged``: otherwise.

Records come from anywhere `pytest_hwbench.sinks.read_records` reads (DuckDB, MLflow, spools and
record files replayed from other machines). Noisy records are left out of a side when clean ones
remain; records older than schema 3 carry no verdict and are used as they are.
"""

from __future__ import annotations

import math
import warnings
from collections import defaultdict
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any, Literal

import numpy as np

from .interference import MAX_REFERENCE_SLOWDOWN
from .record import BenchmarkRecord

Verdict = Literal["regression", "improvement", "unchanged", "inconclusive", "missing"]
VERDICTS: tuple[str, ...] = ("regression", "improvement", "unchanged", "inconclusive", "missing")

#: Blocks a record's timed iterations are cut into; each block's median is one round.
ROUNDS = 5
#: Fewer rounds than this on a side: no test is possible (5 vs 5 rounds can reach p = 0.008).
MIN_ROUNDS = 3
#: A change must exceed this many combined spreads (besides the threshold) to count.
NOISE_Z = 3.0
#: How much more a model's latency moves than the host's reference kernel when the host itself
#: slows (seen on the project's runner: onnxruntime bert-tiny +78 % while the kernel ran +31 %).
#: A change must also exceed this times the change of the reference kernel between the sides.
HOST_AMPLIFICATION = 2.5


@dataclass(frozen=True)
class Comparison:
    """One case on both sides.

    `change` is ``(median_b - median_a) / median_a``: positive means B is slower. `n_a`/`n_b` count
    rounds; `spread` is the combined relative spread of both sides (the change needed to count
    is the larger of the threshold and `NOISE_Z` x `spread`); `noise` reads ``clean/noisy``
    (A's verdict, then B's; ``-`` where unknown). `p_value` is None when no test ran.
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
    spread: float | None = None
    noise: str = "-/-"


def round_medians(timings_ms: Sequence[float], rounds: int = ROUNDS) -> list[float]:
    """Medians of `rounds` consecutive, nearly equal blocks of `timings_ms` (one per iteration
    when there are fewer iterations than rounds); non-finite values are left out."""
    values = np.asarray([t for t in timings_ms if math.isfinite(t)], dtype=float)
    if values.size == 0:
        return []
    return [float(np.median(block)) for block in np.array_split(values, min(rounds, values.size))]


def _relative_spread(values: Sequence[float]) -> float:
    """1.4826 x MAD / median: a robust relative standard deviation (0 for fewer than 2 values)."""
    if len(values) < 2:
        return 0.0
    arr = np.asarray(values, dtype=float)
    median = float(np.median(arr))
    return 1.4826 * float(np.median(np.abs(arr - median))) / median if median > 0 else 0.0


@dataclass(frozen=True)
class _Side:
    """What one side knows of one case."""

    rounds: tuple[float, ...] = ()
    sessions: dict[str, list[float]] = field(default_factory=dict)
    threads: frozenset[int] = frozenset()
    devices: frozenset[str] = frozenset()
    #: median time of the host's reference kernel beside these records (None: not read)
    reference_us: float | None = None
    noise: str = "-"
    noisy_reason: str = ""
    failure: str = ""

    @property
    def median(self) -> float | None:
        return float(np.median(self.rounds)) if self.rounds else None

    @property
    def spread(self) -> float:
        between = [float(np.median(v)) for v in self.sessions.values() if v]
        return max(_relative_spread(self.rounds), _relative_spread(between) if len(between) > 1 else 0.0)


def _record_rounds(record: BenchmarkRecord) -> list[float]:
    rounds = round_medians(record.timings_ms)
    if not rounds and record.latency_ms_median is not None and math.isfinite(record.latency_ms_median):
        rounds = [float(record.latency_ms_median)]  # no raw timings kept (e.g. MLflow without artifacts)
    return rounds


def _side(records: Sequence[BenchmarkRecord]) -> _Side:
    passed = [r for r in records if r.status == "passed"]
    if not passed:
        errors = [r.error for r in records if r.error]
        return _Side(failure=errors[0] if errors else f"status {records[0].status}")
    clean = [r for r in passed if r.noise != "noisy"]
    used = clean or passed
    verdicts = {r.noise for r in used}
    noise = "noisy" if not clean else ("clean" if verdicts == {"clean"} else "-" if verdicts == {None} else "mixed")
    sessions: dict[str, list[float]] = defaultdict(list)
    rounds: list[float] = []
    for record in used:
        mine = _record_rounds(record)
        rounds.extend(mine)
        sessions[record.session_id].extend(mine)
    return _Side(
        rounds=tuple(rounds),
        sessions=dict(sessions),
        threads=frozenset(r.threads for r in used if r.threads is not None),
        devices=frozenset(r.device_name for r in used if r.device_name),
        reference_us=_median([r.interference.get("reference_us") for r in used]),
        noise=noise,
        noisy_reason="" if clean else next((r.noise_reason for r in passed if r.noise_reason), "busy machine"),
    )


def _median(values: Sequence[Any]) -> float | None:
    numbers = [float(v) for v in values if isinstance(v, (int, float)) and math.isfinite(v)]
    return float(np.median(numbers)) if numbers else None


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


def _inconclusive_reason(a: _Side, b: _Side) -> str:
    """Why the two sides cannot be compared at all, or ""."""
    reasons = [f"noisy in {label}: {side.noisy_reason}" for label, side in (("A", a), ("B", b))
               if side.noise == "noisy"]
    if a.threads and b.threads and not a.threads & b.threads:
        reasons.append(f"threads {'/'.join(map(str, sorted(a.threads)))} in A, "
                       f"{'/'.join(map(str, sorted(b.threads)))} in B")
    if a.devices and b.devices and not a.devices & b.devices:
        reasons.append(f"device {', '.join(sorted(a.devices))} in A, {', '.join(sorted(b.devices))} in B")
    if a.reference_us and b.reference_us:
        ratio = b.reference_us / a.reference_us
        if max(ratio, 1 / ratio) > MAX_REFERENCE_SLOWDOWN:
            slower, by = ("B", ratio) if ratio > 1 else ("A", 1 / ratio)
            reasons.append(f"the host ran its reference kernel {by:.2f}x slower in {slower}")
    short = [f"{len(side.rounds)} in {label}" for label, side in (("A", a), ("B", b)) if len(side.rounds) < MIN_ROUNDS]
    if short:
        reasons.append(f"too few rounds ({', '.join(short)}; need {MIN_ROUNDS})")
    return "; ".join(reasons)


def compare_records(a: Sequence[BenchmarkRecord], b: Sequence[BenchmarkRecord], *, threshold: float = 0.10,
                    alpha: float = 0.05) -> list[Comparison]:
    """One `Comparison` per case_id in A or B: A's cases in A's order, then cases only in B.

    `threshold`: smallest relative change of the median latency that counts (0.10 = 10 %).
    `alpha`: significance level of the two-sided Mann-Whitney U test on the rounds.
    A side may hold several records of a case (repeats, several sessions): their rounds pool.
    """
    if not (threshold >= 0 and math.isfinite(threshold)):
        raise ValueError(f"threshold must be a finite number >= 0, got {threshold!r}")
    if not 0 < alpha < 1:
        raise ValueError(f"alpha must be in (0, 1), got {alpha!r}")
    for name, records in (("a", a), ("b", b)):
        bad = [type(r).__name__ for r in records if not isinstance(r, BenchmarkRecord)]
        if bad:
            raise TypeError(f"{name} must hold BenchmarkRecords (read them with pytest_hwbench.sinks.read_records "
                            f"or load_records), got {bad[0]}")
    grouped: list[dict[str, list[BenchmarkRecord]]] = []
    for records in (a, b):
        by_case: dict[str, list[BenchmarkRecord]] = {}
        for record in records:
            by_case.setdefault(record.case_id, []).append(record)
        grouped.append(by_case)
    sides_a = {case: _side(recs) for case, recs in grouped[0].items()}
    sides_b = {case: _side(recs) for case, recs in grouped[1].items()}
    order = list(sides_a) + [c for c in sides_b if c not in sides_a]
    return [_compare_case(case, sides_a.get(case), sides_b.get(case), threshold, alpha) for case in order]


def _compare_case(case_id: str, side_a: _Side | None, side_b: _Side | None, threshold: float,
                  alpha: float) -> Comparison:
    med_a = side_a.median if side_a else None
    med_b = side_b.median if side_b else None
    n_a = len(side_a.rounds) if side_a else 0
    n_b = len(side_b.rounds) if side_b else 0
    noise = f"{side_a.noise if side_a else '-'}/{side_b.noise if side_b else '-'}"
    if side_a is None or side_b is None or med_a is None or med_b is None:
        return Comparison(case_id, med_a, med_b, None, None, "missing", n_a, n_b, _missing_note(side_a, side_b),
                          noise=noise)
    change = (med_b - med_a) / med_a if med_a > 0 else None
    spread = math.hypot(side_a.spread, side_b.spread)
    base = {"n_a": n_a, "n_b": n_b, "spread": spread, "noise": noise}
    reason = _inconclusive_reason(side_a, side_b)
    if reason:
        return Comparison(case_id, med_a, med_b, change, None, "inconclusive", note=reason, **base)
    p_value = _mannwhitney(side_a.rounds, side_b.rounds)
    host = abs(side_b.reference_us / side_a.reference_us - 1) if side_a.reference_us and side_b.reference_us else 0.0
    if change is None or abs(change) <= threshold:
        return Comparison(case_id, med_a, med_b, change, p_value, "unchanged", **base)
    if abs(change) <= NOISE_Z * spread:
        note = f"change within {NOISE_Z:g} x the rounds' spread (+-{spread:.1%})"
        return Comparison(case_id, med_a, med_b, change, p_value, "inconclusive", note=note, **base)
    if abs(change) <= max(threshold, NOISE_Z * spread) + HOST_AMPLIFICATION * host:
        note = (f"change within what the host's own speed explains (its reference kernel moved {host:.1%} "
                f"between the sides)")
        return Comparison(case_id, med_a, med_b, change, p_value, "inconclusive", note=note, **base)
    if p_value is None or p_value >= alpha:
        return Comparison(case_id, med_a, med_b, change, p_value, "inconclusive",
                          note=f"rounds overlap: not significant (p >= {alpha:g})", **base)
    verdict: Verdict = "regression" if change > 0 else "improvement"
    return Comparison(case_id, med_a, med_b, change, p_value, verdict, **base)


def exit_code(comparisons: Sequence[Comparison]) -> int:
    """1 when any case regressed, else 0 (inconclusive and missing cases do not fail a gate)."""
    return 1 if any(c.verdict == "regression" for c in comparisons) else 0


def _fmt_ms(value: float | None) -> str:
    return "-" if value is None else f"{value:.3f}"


def _fmt_p(value: float | None) -> str:
    if value is None:
        return "-"
    return f"{value:.2e}" if value < 1e-3 else f"{value:.4f}"


def format_table(comparisons: Sequence[Comparison]) -> str:
    """Plain-text table, one line per case, then a count per verdict."""
    header = ["case_id", "median A (ms)", "median B (ms)", "change", "spread", "p-value", "rounds A", "rounds B",
              "noise A/B", "verdict", "note"]
    rows: list[list[Any]] = [
        [c.case_id, _fmt_ms(c.median_a), _fmt_ms(c.median_b),
         "-" if c.change is None else f"{c.change * 100:+.1f}%",
         "-" if c.spread is None else f"{c.spread * 100:.1f}%", _fmt_p(c.p_value), c.n_a, c.n_b, c.noise,
         c.verdict, c.note]
        for c in comparisons
    ]
    cells = [[str(x) for x in row] for row in [header, *rows]]
    widths = [max(len(r[i]) for r in cells) for i in range(len(header))]
    right = {1, 2, 3, 4, 5, 6, 7}

    def line(row: list[str]) -> str:
        return "  ".join(c.rjust(w) if i in right else c.ljust(w)
                         for i, (c, w) in enumerate(zip(row, widths, strict=True))).rstrip()

    lines = [line(cells[0]), "  ".join("-" * w for w in widths)]
    lines += [line(r) for r in cells[1:]]
    counts = {v: sum(c.verdict == v for c in comparisons) for v in VERDICTS}
    lines.append("")
    lines.append(", ".join(f"{n} {v}" for v, n in counts.items()) + f" ({len(comparisons)} cases)")
    return "\n".join(lines)


__all__ = ["HOST_AMPLIFICATION", "MIN_ROUNDS", "NOISE_Z", "ROUNDS", "VERDICTS", "Comparison", "Verdict", "compare_records",
           "exit_code", "format_table", "round_medians"]
