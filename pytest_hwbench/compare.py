"""Compare two sets of benchmark records case by case: a change, its interval and its verdict.

A side's figure for a case is the median of its rounds. Every verdict is `verdict.judge_interval`'s
on a change and an interval holding every spread the data shows: the rounds, the between-run spread
of the compared cases or of a history's sessions, and the host's change of speed (corrected for only
where the records establish it). Noisy records are left out of a side when clean ones remain.
README.md, "Comparing runs: verdicts that hold", tells the method.
"""

from __future__ import annotations

import dataclasses
import json
import math
from collections import Counter, defaultdict
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np

from .compare_sides import (
    MIN_RUN_CASES,
    UNPROVEN_ELASTICITY_SD,
    HostModel,
    RunSpread,
    Side,
    host_ratio,
    inconclusive_reason,
    learn_host_model,
    learn_run_spread,
    sides_of,
)
from .record import BenchmarkRecord
from .verdict import (
    INTERVAL_Z,
    VERDICTS,
    Verdict,
    check_verdict_settings,
    judge_interval,
    mannwhitney,
    median_of,
    paired_verdict,
    relative_spread,
)


@dataclass(frozen=True)
class Comparison:
    """One case on both sides.

    `change` is the raw ``median_b / median_a - 1`` (positive: B is slower); `corrected_change`
    is it with B corrected for the host's speed, where that correction applies; the verdict judges
    `judged_change` and its interval [`low`, `high`] (None where nothing can be judged). `n_a`/`n_b`
    count rounds; `spread` is both sides' rounds' combined relative spread; `noise` reads
    ``clean/noisy`` (A's, then B's; ``-``: unknown); `p_value` is None when no test ran;
    `host_ratio` is B's reference kernel time over A's; `between_runs` the between-run spread the
    case carries; `uncertainty` the combined relative uncertainty, 1-sigma.
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
    host_ratio: float | None = None
    corrected_change: float | None = None
    uncertainty: float | None = None
    between_runs: float | None = None
    low: float | None = None
    high: float | None = None

    @property
    def judged_change(self) -> float | None:
        """The change the verdict judges: corrected for host speed where a correction applies."""
        return self.corrected_change if self.corrected_change is not None else self.change



def _missing_note(side_a: Side | None, side_b: Side | None) -> str:
    parts = []
    for label, side in (("A", side_a), ("B", side_b)):
        if side is None:
            parts.append(f"absent from {label}")
        elif side.failure:
            parts.append(f"failed in {label}: {' '.join(side.failure.split())[:120]}")
        elif side.median is None:
            parts.append(f"no latency in {label}")
    return "; ".join(parts)


def compare_records(a: Sequence[BenchmarkRecord], b: Sequence[BenchmarkRecord], *, threshold: float = 0.10,
                    alpha: float = 0.05) -> list[Comparison]:
    """One `Comparison` per case_id in A or B: A's cases in A's order, then cases only in B.

    `threshold`: smallest relative change of the median latency that counts (0.10 = 10 %).
    `alpha`: significance level of the two-sided Mann-Whitney U test on the rounds.
    A side may hold several records of a case (repeats, several sessions): their rounds pool.
    """
    for name, records in (("a", a), ("b", b)):
        bad = [type(r).__name__ for r in records if not isinstance(r, BenchmarkRecord)]
        if bad:
            raise TypeError(f"{name} must hold BenchmarkRecords (read them with pytest_hwbench.sinks.read_records "
                            f"or load_records), got {bad[0]}")
    return compare_cases(sides_of(a), sides_of(b), threshold=threshold, alpha=alpha)


def compare_cases(sides_a: Mapping[str, Side], sides_b: Mapping[str, Side], *, threshold: float = 0.10,
                  alpha: float = 0.05) -> list[Comparison]:
    """`compare_records` on what each side holds of each case (case_id -> `Side`, in the side's
    order), for a store that computes the sides itself."""
    check_verdict_settings(threshold, alpha)
    pairs = [(sides_a[c], sides_b[c]) for c in sides_a if c in sides_b]
    host = learn_host_model(pairs)
    runs = learn_run_spread(pairs, host)
    order = list(sides_a) + [c for c in sides_b if c not in sides_a]
    return [_compare_case(case, sides_a.get(case), sides_b.get(case), threshold, alpha, host, runs)
            for case in order]


def host_model_of(sides_a: Mapping[str, Side], sides_b: Mapping[str, Side]) -> HostModel:
    """The `HostModel` that `compare_cases` learns from `sides_a` and `sides_b` (for printing beside it)."""
    return learn_host_model([(sides_a[c], sides_b[c]) for c in sides_a if c in sides_b])


def run_spread_of(sides_a: Mapping[str, Side], sides_b: Mapping[str, Side]) -> RunSpread:
    """The `RunSpread` that `compare_cases` learns from `sides_a` and `sides_b`."""
    pairs = [(sides_a[c], sides_b[c]) for c in sides_a if c in sides_b]
    return learn_run_spread(pairs, learn_host_model(pairs))


def decisiveness(comparisons: Sequence[Comparison]) -> tuple[int, int]:
    """(cases with a verdict: regression, improvement or unchanged; cases compared: not `missing`)."""
    compared = [c for c in comparisons if c.verdict != "missing"]
    return sum(c.verdict in ("regression", "improvement", "unchanged") for c in compared), len(compared)


#: How the note of a case whose interval cannot decide begins.
_INSIDE_NOTE = "cannot tell"
#: Below this share of compared cases with a verdict, `advice` looks for why.
DECISIVE_SHARE = 0.8


def advice(comparisons: Sequence[Comparison]) -> str:
    """One line naming `hwbench ab` when few cases got a verdict because most inconclusive ones sit
    inside a between-run spread wider than their rounds' spread; "" otherwise."""
    decided, total = decisiveness(comparisons)
    if not total or decided / total >= DECISIVE_SHARE:
        return ""
    undecided = [c for c in comparisons if c.verdict == "inconclusive"]
    drift = [c for c in undecided if c.between_runs and c.spread is not None and c.between_runs > c.spread
             and c.note.startswith(_INSIDE_NOTE)]
    if len(drift) * 2 < len(undecided):
        return ""
    typical = float(np.median([c.between_runs for c in drift]))
    return (f"{len(drift)} of {total} cases are inconclusive because separate runs on this host differ by about "
            f"+-{typical:.0%} per case, more than their rounds show: for a decisive A/B, measure both sides in one "
            "job with alternating rounds (`hwbench ab --models ... --b-options ...` or `--b-python ...`)")


def _history_spread(a: Side, b: Side) -> float | None:
    """The between-session spread of a case's change where a side holds several sessions (a
    history): the pooled standard deviation of the session medians' logs, scaled to the difference
    of the two sides' means; None where neither side holds two sessions."""
    logs_a, logs_b = ([math.log(v) for v in side.session_medians if v > 0] for side in (a, b))
    if max(len(logs_a), len(logs_b)) < 2:
        return None
    squares = sum(float(np.sum((np.asarray(g) - np.mean(g)) ** 2)) for g in (logs_a, logs_b) if len(g) > 1)
    dof = sum(len(g) - 1 for g in (logs_a, logs_b) if len(g) > 1)
    sd = math.sqrt(squares / dof)
    return sd * math.sqrt(1 / max(1, len(logs_a)) + 1 / max(1, len(logs_b)))


def _what_decides(between: float | None, spread: float, host_sd: float, history: bool, threshold: float) -> str:
    """What would decide an inconclusive case, from the largest part of its uncertainty."""
    parts = {"rounds": spread, "host": host_sd, "runs": between or 0.0}
    largest = max(parts, key=lambda k: parts[k])
    if largest == "rounds":
        return "longer runs (--hwbench-min-time) or `hwbench ab` would tell"
    if largest == "host":
        return "sessions on a host as fast as A's, or `hwbench ab`, would tell"
    more = "more sessions in the history" if history else "a history of sessions as A (id1,id2,...)"
    return (f"separate runs differ by about +-{parts['runs']:.0%} per case here: {more} or, to tell "
            f"{threshold:.0%}, `hwbench ab`")


def _compare_case(case_id: str, side_a: Side | None, side_b: Side | None, threshold: float,
                  alpha: float, host: HostModel, runs: RunSpread) -> Comparison:
    known_a, known_b = side_a or Side(), side_b or Side()
    med_a, med_b, n_a, n_b = known_a.median, known_b.median, len(known_a.rounds), len(known_b.rounds)
    noise = f"{known_a.noise}/{known_b.noise}"
    if side_a is None or side_b is None or med_a is None or med_b is None or med_a <= 0 or med_b <= 0:
        return Comparison(case_id, med_a, med_b, None, None, "missing", n_a, n_b, _missing_note(side_a, side_b),
                          noise=noise)
    change = med_b / med_a - 1
    spread = math.hypot(relative_spread(side_a.rounds), relative_spread(side_b.rounds))
    ratio = host_ratio(side_a, side_b)
    noisy = "; ".join(f"noisy in {label}: {side.noisy_reason}"
                      for label, side in (("A", side_a), ("B", side_b)) if side.noise == "noisy")
    reason = inconclusive_reason(side_a, side_b)
    corrected = None
    host_sd = 0.0
    if ratio and not reason:
        if host.established:
            corrected = med_b / ratio ** host.elasticity / med_a - 1
            host_sd = abs(math.log(ratio)) * host.elasticity_sd
        else:
            host_sd = abs(math.log(ratio)) * UNPROVEN_ELASTICITY_SD
    history = _history_spread(side_a, side_b)
    between = runs.noisy if noisy else runs.clean
    if history is not None:
        between = max(history, between or 0.0)
    uncertainty = math.hypot(spread, host_sd, between or 0.0)
    base = {"n_a": n_a, "n_b": n_b, "spread": spread, "noise": noise, "host_ratio": ratio,
            "corrected_change": corrected, "uncertainty": uncertainty, "between_runs": between}
    unlearned = (f"fewer than {MIN_RUN_CASES} cases with an interfered side compared to learn how far "
                 "interference moved them") if noisy and between is None else ""
    if reason or unlearned:
        return Comparison(case_id, med_a, med_b, change, None, "inconclusive",
                          note="; ".join(filter(None, [reason, noisy, unlearned])), **base)
    judged = corrected if corrected is not None else change
    centre = math.log1p(judged)
    low, high = math.expm1(centre - INTERVAL_Z * uncertainty), math.expm1(centre + INTERVAL_Z * uncertainty)
    base |= {"low": low, "high": high}
    factor = ratio ** host.elasticity if ratio and corrected is not None else 1.0
    p_value = mannwhitney(side_a.rounds, [r / factor for r in side_b.rounds])
    verdict, why = judge_interval(judged, low, high, threshold)
    if verdict == "unchanged" and between is None:
        verdict, why = "inconclusive", (f"between-run spread unknown: fewer than {MIN_RUN_CASES} cases compared and no "
                                        "history of sessions, so this interval holds the rounds' spread only; "
                                        "compare more cases at once, a history as A, or use `hwbench ab`")
    elif verdict in ("regression", "improvement") and (p_value is None or p_value >= alpha):
        verdict, why = "inconclusive", f"rounds overlap: not significant (p >= {alpha:g})"
    elif verdict == "inconclusive":
        parts = [f"rounds +-{spread:.1%}"]
        if host_sd:
            parts.append(f"host speed +-{host_sd:.1%} (kernel {ratio:.2f}x in B)")
        if between:
            parts.append(f"between runs +-{between:.1%}")
        why = (f"{_INSIDE_NOTE}: {why} ({', '.join(parts)}); "
               f"{_what_decides(between, spread, host_sd, history is not None, threshold)}")
    return Comparison(case_id, med_a, med_b, change, p_value, verdict,
                      note="; ".join(filter(None, [why, noisy])), **base)


def compare_pairs(a: Sequence[BenchmarkRecord], b: Sequence[BenchmarkRecord], *, threshold: float = 0.10,
                  alpha: float = 0.05) -> list[Comparison]:
    """The two sides of an `hwbench ab` pair judged on each case's per-round ratios B / A
    (`paired_verdict`, records paired by ``extra["ab_round"]``); an inconclusive case names its
    first failed round."""
    check_verdict_settings(threshold, alpha)
    rounds_a: dict[str, dict[Any, BenchmarkRecord]] = defaultdict(dict)
    rounds_b: dict[str, dict[Any, BenchmarkRecord]] = defaultdict(dict)
    for rounds, records in ((rounds_a, a), (rounds_b, b)):
        for record in records:
            rounds[record.case_id][record.extra.get("ab_round")] = record
    out = []
    for case in list(rounds_a) + [c for c in rounds_b if c not in rounds_a]:
        side_a, side_b = rounds_a.get(case, {}), rounds_b.get(case, {})
        med_a = median_of([r.latency_ms_median for r in side_a.values() if r.status == "passed"])
        med_b = median_of([r.latency_ms_median for r in side_b.values() if r.status == "passed"])
        ratios = [side_b[k].latency_ms_median / side_a[k].latency_ms_median for k in side_a if k in side_b
                  and side_a[k].latency_ms_median and side_b[k].latency_ms_median]
        failures = [f"failed in {label}: {r.error.splitlines()[0][:120]}"
                    for label, side in (("A", side_a), ("B", side_b)) for r in side.values() if r.error]
        if med_a is None or med_b is None:
            absent = "absent or failed in " + ("A" if med_a is None else "B")
            out.append(Comparison(case, med_a, med_b, None, None, "missing", len(side_a), len(side_b),
                                  "; ".join([absent, *failures[:1]])))
            continue
        v = paired_verdict(case, ratios, threshold=threshold, alpha=alpha)
        note = f"{v.note}; {failures[0]}" if failures and v.verdict == "inconclusive" else v.note
        out.append(Comparison(case, med_a, med_b, med_b / med_a - 1 if v.change is None else v.change, v.p_value,
                              v.verdict, len(ratios), len(ratios), note, low=v.low, high=v.high))
    return out


def exit_code(comparisons: Sequence[Comparison]) -> int:
    """1 when any case regressed, else 0 (inconclusive and missing cases do not fail a gate)."""
    return 1 if any(c.verdict == "regression" for c in comparisons) else 0


def _fmt(value: float | None, spec: str) -> str:
    return "-" if value is None else format(value, spec)


def format_table(comparisons: Sequence[Comparison], *, show_missing: bool = False, verbose: bool = False,
                 width: int = 120, host: HostModel | None = None, advise: bool = True) -> str:
    """Plain text: a line per compared case cut to `width` (`verbose`: whole, with the raw change,
    p-value and rounds); the `missing` cases counted by reason (`show_missing` lists them); the
    counts per verdict, the decisiveness, `host`'s correction when given, and `advice` when `advise`
    (not for an `hwbench ab` pair, which already ran interleaved)."""
    compared = [c for c in comparisons if c.verdict != "missing"]
    missing = [c for c in comparisons if c.verdict == "missing"]
    header = ["case_id", "verdict", "change", "interval", "A ms", "B ms", "host B/A", "noise A/B",
              *(["raw change", "p-value", "rounds A/B"] if verbose else []), "note"]
    listed = compared + (missing if show_missing else [])
    rows: list[list[str]] = []
    for c in listed:
        interval = "-" if c.low is None or c.high is None else f"{c.low:+.0%}..{c.high:+.0%}"
        row = [c.case_id, c.verdict, _fmt(c.judged_change, "+.1%"), interval, _fmt(c.median_a, ".3f"),
               _fmt(c.median_b, ".3f"), _fmt(c.host_ratio, ".2f"), c.noise]
        if verbose:
            p_spec = ".2e" if c.p_value is not None and c.p_value < 1e-3 else ".4f"
            row += [_fmt(c.change, "+.1%"), _fmt(c.p_value, p_spec), f"{c.n_a}/{c.n_b}"]
        rows.append([*row, c.note])
    widths = [max(len(r[i]) for r in [header, *rows]) for i in range(len(header))]
    widths[-1] = len(header[-1])  # the note is last and ragged: no padding, cut to the width
    right = {2, 3, 4, 5, 6} | ({8, 9, 10} if verbose else set())

    def line(row: list[str]) -> str:
        return "  ".join(c.rjust(w) if i in right else c.ljust(w)
                         for i, (c, w) in enumerate(zip(row, widths, strict=True))).rstrip()

    lines = [line(header), "  ".join("-" * w for w in widths), *map(line, rows)] if listed else []
    if missing and not show_missing:
        why = Counter(part.split(":")[0] for c in missing for part in c.note.split("; "))
        parts = ", ".join(f"{n} {reason}" for reason, n in why.most_common())
        lines.append(f"{len(missing)} missing ({parts}); --all lists them")
    if not verbose:
        lines = [text if len(text) <= width else text[: max(0, width - 3)] + "..." for text in lines]
    counts = {v: sum(c.verdict == v for c in comparisons) for v in VERDICTS}
    decided, total = decisiveness(comparisons)
    lines.append("")
    if host is not None and any(c.host_ratio is not None for c in compared):
        lines.append(host.describe())
    spreads = {("interfered" if "noisy" in c.noise else "clean"): c.between_runs for c in compared if c.between_runs}
    if spreads:
        lines.append("between-run spread per case: " + ", ".join(
            f"+-{value:.1%} {kind}" for kind, value in sorted(spreads.items())))
    lines.append(", ".join(f"{n} {v}" for v, n in counts.items()) + f" ({len(comparisons)} cases)")
    share = f"{decided / total:.0%}" if total else "-"
    lines.append(f"decisiveness {share} ({decided} of {total} compared cases have a verdict)")
    if advise and (hint := advice(comparisons)):
        lines.append(hint)
    return "\n".join(lines)


def to_json(comparisons: Sequence[Comparison], host: HostModel | None = None, *, advise: bool = True) -> str:
    """The comparisons, the counts, the decisiveness, the host model and `advice` (when `advise`)
    as one JSON document."""
    decided, total = decisiveness(comparisons)
    return json.dumps({
        "comparisons": [{**dataclasses.asdict(c), "judged_change": c.judged_change} for c in comparisons],
        "counts": {v: sum(c.verdict == v for c in comparisons) for v in VERDICTS},
        "decisiveness": decided / total if total else None,
        "decided": decided,
        "compared": total,
        "advice": (advice(comparisons) if advise else "") or None,
        "host_model": ({**dataclasses.asdict(host), "established": host.established} if host is not None
                       else None),
    }, indent=2, default=str)


__all__ = ["DECISIVE_SHARE", "Comparison", "advice", "compare_cases", "compare_pairs", "compare_records",
           "decisiveness", "exit_code", "format_table", "host_model_of", "run_spread_of", "to_json"]
