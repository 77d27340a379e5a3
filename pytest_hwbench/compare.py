"""Compare two sets of benchmark records case by case: a change, its interval, and one verdict contract.

The iterations of one run are not independent samples of "how fast is this case": load, clocks
and thread placement shift a whole run at once. Here the unit is a *round*: the median of one
consecutive block of a record's timed iterations (`ROUNDS` blocks per record). A side's figure
for a case is the median of its rounds.

Every verdict, here and in `hwbench ab` (`compare_pairs`, `paired_interval`), is one contract on a
change and its interval (`judge_interval`):

- ``regression`` / ``improvement``: the interval excludes no change and the change passes the
  threshold (and here the rounds differ: Mann-Whitney U on rounds, p < `alpha`);
- ``unchanged``: the whole interval lies inside +-threshold (an equivalence test);
- ``inconclusive`` otherwise, with the reason and what would decide it;
- ``missing``: no passed record on a side (the note says which and why).

The interval is the change +- `INTERVAL_Z` combined uncertainties (log scale), the combined
uncertainty holding every source of spread the data shows:

- the rounds: each side's robust relative spread (1.4826 x MAD / median), combined;
- between runs: two sessions of the same code on the same host differ by more than one record's
  rounds show. Learned from the compared cases (`learn_run_spread`): for cases clean on both
  sides, 1.4826 x the MAD of their log changes around their median (a change that moves every
  case alike, the regression a gate is for, does not widen it); for cases with an interfered side
  (``noise == "noisy"``), 1.4826 x the median of their size around zero. Each needs at least
  `MIN_RUN_CASES` cases of its kind. Where a side holds several sessions (a baseline history),
  the case's own spread across sessions (the standard deviation of the session medians' logs, so
  a bimodal history counts in full) scaled to the difference of the means, where it is larger.
  A case with no between-run spread at all (too few cases, no history) is never ``unchanged``;
- host speed: a record of schema 4 carries the time of a fixed reference kernel beside its case
  (``interference["reference_us"]``). The kernel runs on the host's CPU, so it speaks for cases
  that compute there (`BenchmarkRecord.host_bound`), not an accelerator's. ``h = reference_B /
  reference_A``. How this host's models move against the kernel (latency ~ ``h ** k``) is learned
  from the records compared (`learn_host_model`), and B is corrected only where that is
  established (`HostModel.established`: at least `MIN_LEARNING_CASES` cases whose host speed
  differs by `MIN_HOST_CHANGE` or more, and an interval of ``k`` that excludes zero); the
  correction then adds ``|log h| x sd(k)``. Otherwise the raw change is judged and the host-speed
  difference widens the interval by ``|log h| x`` `UNPROVEN_ELASTICITY_SD`. Host speeds further
  apart than `MAX_HOST_RATIO` are inconclusive, and no corrected figure is given.

Also inconclusive: fewer than `MIN_ROUNDS` rounds on a side, different thread counts or devices,
an interfered side among fewer than `MIN_RUN_CASES` such cases.

**Decisiveness** is the share of the compared cases (those on both sides) with a verdict
(regression, improvement or unchanged), reported beside the verdicts. Where it is low because
separate runs differ by more than their rounds show, `advice` says so and names `hwbench ab`.

Records come from anywhere `pytest_hwbench.sinks.read_records` reads (DuckDB, MLflow, spools and
record files replayed from other machines). Noisy records are left out of a side when clean ones
remain; records older than schema 3 carry no verdict and are used as they are; records older
than schema 4 carry no host speed and are compared uncorrected.
"""

from __future__ import annotations

import dataclasses
import math
import warnings
from collections import defaultdict
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any, Literal

import numpy as np

from .record import BenchmarkRecord
from .trackers import ROUNDS, round_medians

Verdict = Literal["regression", "improvement", "unchanged", "inconclusive", "missing"]
VERDICTS: tuple[str, ...] = ("regression", "improvement", "unchanged", "inconclusive", "missing")

#: Fewer rounds than this on a side: no test is possible (5 vs 5 rounds can reach p = 0.008).
MIN_ROUNDS = 3
#: A change's interval is its point estimate +- this many combined uncertainties (1-sigma, log scale):
#: the spreads are robust estimates from a handful of rounds, sessions or cases, so a wide factor.
INTERVAL_Z = 3.0
#: How far a model's latency may move with the reference kernel (log over log, 1-sigma) where this
#: host's records do not establish it: the host-speed difference between the sides widens the
#: interval by ``|log kernel B / kernel A| x`` this, and no correction is applied.
UNPROVEN_ELASTICITY_SD = 0.6
#: A case teaches the elasticity only when the host's speed differs by at least this share between
#: the sides (below it, the slope divides by a kernel change no larger than its own noise, and a
#: change of the code under test would pass for elasticity); and at least `MIN_LEARNING_CASES`
#: such cases are needed to learn it at all.
MIN_HOST_CHANGE = 0.15
MIN_LEARNING_CASES = 3
#: The learned elasticity's spread is never taken below this (a handful of cases can agree by luck).
MIN_ELASTICITY_SD = 0.15
#: The learned elasticity is applied only when its interval (median +- this many standard errors)
#: excludes zero: otherwise the records do not show that latency follows the kernel on this host.
ELASTICITY_Z = 2.0
#: Fewest compared cases from which the between-run spread is learned (`learn_run_spread`).
MIN_RUN_CASES = 5
#: Host speeds further apart than this factor are not corrected for: such a reading says more about
#: an overloaded instant than about the host, and the case is inconclusive.
MAX_HOST_RATIO = 2.0


def judge_interval(change: float, low: float, high: float, threshold: float) -> tuple[Verdict, str]:
    """The verdict every comparison shares, on a relative change and its interval [`low`, `high`]:

    - ``regression`` / ``improvement``: the interval excludes no change and `change` passes `threshold`;
    - ``unchanged``: the whole interval lies inside +-`threshold` (an equivalence test);
    - ``inconclusive`` otherwise, with the reason (the second item; "" for a firm verdict).
    """
    span = f"interval {low * 100:+.1f}% to {high * 100:+.1f}%"
    if (low > 0 or high < 0) and abs(change) > threshold:
        return ("regression" if change > 0 else "improvement"), ""
    if -threshold <= low and high <= threshold:
        return "unchanged", ""
    if low > 0 or high < 0:
        return "inconclusive", (f"{span}: a real change, but whether it passes +-{threshold:.0%} cannot be "
                                "told")
    return "inconclusive", f"{span} reaches past +-{threshold:.0%}: no change and a change both fit"


def paired_interval(ratios: Sequence[float], alpha: float) -> tuple[float, float, float, float] | None:
    """(change, low, high, p-value) of per-round ratios B / A: the geometric mean change and its
    1 - `alpha` Student-t interval from the log ratios, with the one-sample t-test's p-value; None
    for fewer than 3 usable ratios."""
    logs = [math.log(r) for r in ratios if r > 0 and math.isfinite(r)]
    if len(logs) < 3:
        return None
    from scipy.stats import t as student

    n = len(logs)
    mean = sum(logs) / n
    sd = math.sqrt(sum((x - mean) ** 2 for x in logs) / (n - 1))
    if sd == 0:
        p = 0.0 if mean != 0 else 1.0
        half = 0.0
    else:
        se = sd / math.sqrt(n)
        p = float(2 * student.sf(abs(mean / se), n - 1))
        half = float(student.ppf(1 - alpha / 2, n - 1)) * se
    return math.expm1(mean), math.expm1(mean - half), math.expm1(mean + half), p


@dataclass(frozen=True)
class Comparison:
    """One case on both sides.

    `change` is the raw ``(median_b - median_a) / median_a``: positive means B is slower.
    `corrected_change` is `change` with B corrected for the host's change of speed, set only where
    the correction is applied (the host model is established and the host moved less than
    `MAX_HOST_RATIO`); the verdict judges `judged_change`, the corrected change where there is one
    and the raw change otherwise. [`low`, `high`] is its interval (the judged change +- `INTERVAL_Z`
    combined uncertainties, on the log scale; None where nothing can be judged). `n_a`/`n_b` count
    rounds; `spread` is the combined relative spread of both sides' rounds; `noise` reads
    ``clean/noisy`` (A's verdict, then B's; ``-`` where unknown). `p_value` is None when no test
    ran. `host_ratio` is B's reference kernel time over A's (None: a side carries no host speed);
    `between_runs` is the between-run spread this case carries (learned from the compared cases,
    or from the baseline's sessions); `uncertainty` is the combined relative uncertainty (rounds,
    host speed, between runs), 1-sigma.
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

    @property
    def decided(self) -> bool:
        """Whether the case got a verdict (regression, improvement or unchanged)."""
        return self.verdict in ("regression", "improvement", "unchanged")

    def to_dict(self) -> dict[str, Any]:
        """JSON-ready dict of every field, with `judged_change`."""
        return {**dataclasses.asdict(self), "judged_change": self.judged_change}


@dataclass(frozen=True)
class HostModel:
    """How latency moves against the reference kernel on this host: ``latency ~ kernel ** elasticity``,
    with `elasticity_sd` the spread of the per-case figures, learned from `learned_from` cases (0:
    nothing to learn from). `established` says whether the records show it (at least
    `MIN_LEARNING_CASES` cases, and an interval that excludes zero); only then is it applied."""

    elasticity: float = 0.0
    elasticity_sd: float = UNPROVEN_ELASTICITY_SD
    learned_from: int = 0

    @property
    def standard_error(self) -> float:
        """Standard error of the learned elasticity (a median of `learned_from` figures)."""
        return 1.2533 * self.elasticity_sd / math.sqrt(self.learned_from) if self.learned_from else math.inf

    @property
    def established(self) -> bool:
        """Whether the records establish the relation: enough cases, and an interval above zero."""
        return (self.learned_from >= MIN_LEARNING_CASES
                and self.elasticity - ELASTICITY_Z * self.standard_error > 0)

    def describe(self) -> str:
        """One line for people."""
        if not self.learned_from:
            return (f"host-speed correction: none (fewer than {MIN_LEARNING_CASES} cases whose host speed differed "
                    f"by {MIN_HOST_CHANGE:.0%} or more); a host-speed difference widens the interval instead")
        low = self.elasticity - ELASTICITY_Z * self.standard_error
        high = self.elasticity + ELASTICITY_Z * self.standard_error
        learned = f"^ {self.elasticity:.2f} ({low:.2f} to {high:.2f}, from {self.learned_from} cases)"
        if self.established:
            return f"host-speed correction: latency ~ reference kernel {learned}"
        return (f"host-speed correction: none; the records do not establish it (latency ~ reference kernel "
                f"{learned}, an interval that reaches zero); a host-speed difference widens the interval instead")


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
    #: median time of the host's reference kernel beside these records, from records that carry
    #: host speed (schema 4); None where none does
    reference_us: float | None = None
    noise: str = "-"
    noisy_reason: str = ""
    failure: str = ""

    @property
    def median(self) -> float | None:
        return float(np.median(self.rounds)) if self.rounds else None

    @property
    def spread(self) -> float:
        """The robust relative spread of the rounds."""
        return _relative_spread(self.rounds)

    @property
    def session_logs(self) -> list[float]:
        """The log of each session's median round."""
        return [math.log(float(np.median(v))) for v in self.sessions.values() if v and float(np.median(v)) > 0]


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
        reference_us=_median([r.interference.get("reference_us") for r in used
                              if r.host_speed is not None and r.host_bound]),
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


def _noisy_note(a: _Side, b: _Side) -> str:
    """Which side was measured under interference, and why, or ""."""
    return "; ".join(f"noisy in {label}: {side.noisy_reason}" for label, side in (("A", a), ("B", b))
                     if side.noise == "noisy")


def _inconclusive_reason(a: _Side, b: _Side) -> str:
    """Why the two sides measured different things and cannot be compared at all, or ""."""
    reasons: list[str] = []
    if a.threads and b.threads and not a.threads & b.threads:
        reasons.append(f"threads {'/'.join(map(str, sorted(a.threads)))} in A, "
                       f"{'/'.join(map(str, sorted(b.threads)))} in B")
    if a.devices and b.devices and not a.devices & b.devices:
        reasons.append(f"device {', '.join(sorted(a.devices))} in A, {', '.join(sorted(b.devices))} in B")
    short = [f"{len(side.rounds)} in {label}" for label, side in (("A", a), ("B", b)) if len(side.rounds) < MIN_ROUNDS]
    if short:
        reasons.append(f"too few rounds ({', '.join(short)}; need {MIN_ROUNDS})")
    return "; ".join(reasons)


def check_verdict_settings(threshold: float, alpha: float, *, prefix: str = "") -> None:
    """Raise ValueError unless `threshold` is a finite number >= 0 and `alpha` lies in (0, 1);
    `prefix` comes before the names (``"--"`` for the command-line flags)."""
    if not (threshold >= 0 and math.isfinite(threshold)):
        raise ValueError(f"{prefix}threshold must be a finite number >= 0 (0.10 = 10 %), got {threshold!r}")
    if not 0 < alpha < 1:
        raise ValueError(f"{prefix}alpha must be in (0, 1), e.g. 0.05, got {alpha!r}")


def compare_records(a: Sequence[BenchmarkRecord], b: Sequence[BenchmarkRecord], *, threshold: float = 0.10,
                    alpha: float = 0.05) -> list[Comparison]:
    """One `Comparison` per case_id in A or B: A's cases in A's order, then cases only in B.

    `threshold`: smallest relative change of the median latency that counts (0.10 = 10 %).
    `alpha`: significance level of the two-sided Mann-Whitney U test on the rounds.
    A side may hold several records of a case (repeats, several sessions): their rounds pool.
    """
    check_verdict_settings(threshold, alpha)
    for name, records in (("a", a), ("b", b)):
        bad = [type(r).__name__ for r in records if not isinstance(r, BenchmarkRecord)]
        if bad:
            raise TypeError(f"{name} must hold BenchmarkRecords (read them with pytest_hwbench.sinks.read_records "
                            f"or load_records), got {bad[0]}")
    sides_a, sides_b = _sides(a), _sides(b)
    pairs = [(sides_a[c], sides_b[c]) for c in sides_a if c in sides_b]
    host = learn_host_model(pairs)
    runs = learn_run_spread(pairs, host)
    order = list(sides_a) + [c for c in sides_b if c not in sides_a]
    return [_compare_case(case, sides_a.get(case), sides_b.get(case), threshold, alpha, host, runs)
            for case in order]


#: Records on each side of a record, in its session's order, whose reference kernel readings are
#: pooled into the host speed it is corrected for (`_smoothed_references`).
HOST_WINDOW = 2


def _smoothed_references(records: Sequence[BenchmarkRecord]) -> list[BenchmarkRecord]:
    """`records` with each one's ``reference_us`` replaced by the median over it and the
    `HOST_WINDOW` records on each side of it in its session (in the order given): one kernel
    reading of a few milliseconds is noisy, while host speed holds over a stretch of time."""
    by_session: dict[str, list[int]] = defaultdict(list)
    for index, record in enumerate(records):
        if record.host_speed is not None and isinstance(record.interference.get("reference_us"), (int, float)):
            by_session[record.session_id].append(index)
    out = list(records)
    for indices in by_session.values():
        values = [float(records[i].interference["reference_us"]) for i in indices]
        for position, index in enumerate(indices):
            window = values[max(0, position - HOST_WINDOW): position + HOST_WINDOW + 1]
            smoothed = float(np.median(window))
            record = records[index]
            out[index] = dataclasses.replace(record, interference={**record.interference, "reference_us": smoothed})
    return out


def _sides(records: Sequence[BenchmarkRecord]) -> dict[str, _Side]:
    by_case: dict[str, list[BenchmarkRecord]] = {}
    for record in _smoothed_references(records):
        by_case.setdefault(record.case_id, []).append(record)
    return {case: _side(recs) for case, recs in by_case.items()}


def host_model_of(a: Sequence[BenchmarkRecord], b: Sequence[BenchmarkRecord]) -> HostModel:
    """The `HostModel` that `compare_records` learns from `a` and `b` (for printing beside it)."""
    sides_a, sides_b = _sides(a), _sides(b)
    return learn_host_model([(sides_a[c], sides_b[c]) for c in sides_a if c in sides_b])


def learn_host_model(pairs: Sequence[tuple[_Side, _Side]]) -> HostModel:
    """The elasticity of latency against the reference kernel, from the cases whose host speed
    differs by at least `MIN_HOST_CHANGE` between the sides: the median of their
    ``log(latency B / latency A) / log(kernel B / kernel A)``, its spread 1.4826 x MAD (at least
    `MIN_ELASTICITY_SD`), clamped to [0, 3]; no such case: `HostModel()`, which corrects nothing.
    Whether it is applied is `HostModel.established`."""
    slopes = []
    for a, b in pairs:
        med_a, med_b = a.median, b.median
        if not (a.reference_us and b.reference_us and med_a and med_b) or a.noise == "noisy" or b.noise == "noisy":
            continue
        x = math.log(b.reference_us / a.reference_us)
        if abs(x) < math.log1p(MIN_HOST_CHANGE):
            continue
        slopes.append(math.log(med_b / med_a) / x)
    if not slopes:
        return HostModel()
    arr = np.asarray(slopes)
    k = float(np.median(arr))
    sd = 1.4826 * float(np.median(np.abs(arr - k)))
    return HostModel(min(3.0, max(0.0, k)), max(MIN_ELASTICITY_SD, sd), len(slopes))


@dataclass(frozen=True)
class RunSpread:
    """How far two sessions of the same code differ per case beyond what the host's speed explains:
    `clean` for cases measured clean on both sides, `noisy` for cases with an interfered side
    (relative, 1-sigma; None where fewer than `MIN_RUN_CASES` cases teach it), and how many cases
    taught each."""

    clean: float | None = None
    noisy: float | None = None
    clean_cases: int = 0
    noisy_cases: int = 0

    def for_case(self, noisy: bool) -> float | None:
        """The between-run spread a case of this kind carries, None where too few cases taught it
        (a clean case is then judged on its rounds, and never called unchanged; an interfered
        case cannot be judged)."""
        return self.noisy if noisy else self.clean


def _host_ratio(a: _Side, b: _Side) -> float | None:
    """B's reference kernel time over A's, or None where a side carries no host speed."""
    return b.reference_us / a.reference_us if a.reference_us and b.reference_us else None


def _corrected_log_change(a: _Side, b: _Side, host: HostModel) -> float | None:
    """log(B / A), B corrected for host speed where `host` is established, for a pair that can be
    compared at all; else None."""
    med_a, med_b = a.median, b.median
    if not (med_a and med_b and med_a > 0 and med_b > 0) or _inconclusive_reason(a, b):
        return None
    ratio = _host_ratio(a, b)
    if ratio and max(ratio, 1 / ratio) > MAX_HOST_RATIO:
        return None
    applied = host.elasticity * math.log(ratio) if ratio and host.established else 0.0
    return math.log(med_b / med_a) - applied


def learn_run_spread(pairs: Sequence[tuple[_Side, _Side]], host: HostModel) -> RunSpread:
    """The between-run spread of the compared cases (see `RunSpread`): 1.4826 x the MAD of their
    corrected log changes around their median, per kind (clean on both sides, or not), from at
    least `MIN_RUN_CASES` cases of that kind."""
    groups: dict[bool, list[float]] = {False: [], True: []}
    for a, b in pairs:
        value = _corrected_log_change(a, b, host)
        if value is not None:
            groups[a.noise == "noisy" or b.noise == "noisy"].append(value)

    def spread(values: list[float], centre: bool) -> float | None:
        if len(values) < MIN_RUN_CASES:
            return None
        arr = np.asarray(values)
        return 1.4826 * float(np.median(np.abs(arr - (np.median(arr) if centre else 0.0))))

    return RunSpread(spread(groups[False], True), spread(groups[True], False), len(groups[False]),
                     len(groups[True]))


def run_spread_of(a: Sequence[BenchmarkRecord], b: Sequence[BenchmarkRecord]) -> RunSpread:
    """The `RunSpread` that `compare_records` learns from `a` and `b` (for printing beside it)."""
    sides_a, sides_b = _sides(a), _sides(b)
    pairs = [(sides_a[c], sides_b[c]) for c in sides_a if c in sides_b]
    return learn_run_spread(pairs, learn_host_model(pairs))


def decisiveness(comparisons: Sequence[Comparison]) -> tuple[int, int]:
    """(cases with a verdict, cases compared): `missing` cases are not compared."""
    compared = [c for c in comparisons if c.verdict != "missing"]
    return sum(c.decided for c in compared), len(compared)


#: How the note of a case whose interval cannot decide begins.
_INSIDE_NOTE = "cannot tell"
#: How the note of a case without a between-run spread to judge "unchanged" by begins.
_UNKNOWN_RUNS_NOTE = "between-run spread unknown"
#: Below this share of compared cases with a verdict, `advice` looks for why.
DECISIVE_SHARE = 0.8


def advice(comparisons: Sequence[Comparison]) -> str:
    """What to do when few cases got a verdict because runs differ by more than the rounds show,
    in one line; "" otherwise. When most inconclusive cases sit inside a between-run spread wider
    than their own rounds' spread, two separate runs on this host cannot tell the change: measuring
    both sides in one job, alternating rounds (`hwbench ab`), lets drift hit both alike."""
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


def _history_spread(a: _Side, b: _Side) -> float | None:
    """The between-session spread of a case's change where a side holds several sessions (a
    history): the sample standard deviation of the session medians' logs (bimodal runs included),
    pooled over both sides, scaled to the difference of the two sides' means; None with fewer
    than two sessions on each side together beyond one."""
    logs_a, logs_b = a.session_logs, b.session_logs
    if max(len(logs_a), len(logs_b)) < 2:
        return None
    squares = sum((x - float(np.mean(g))) ** 2 for g in (logs_a, logs_b) if len(g) > 1 for x in g)
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


def _compare_case(case_id: str, side_a: _Side | None, side_b: _Side | None, threshold: float,
                  alpha: float, host: HostModel | None = None, runs: RunSpread | None = None) -> Comparison:
    host = host or HostModel()
    runs = runs or RunSpread()
    med_a = side_a.median if side_a else None
    med_b = side_b.median if side_b else None
    n_a = len(side_a.rounds) if side_a else 0
    n_b = len(side_b.rounds) if side_b else 0
    noise = f"{side_a.noise if side_a else '-'}/{side_b.noise if side_b else '-'}"
    if side_a is None or side_b is None or med_a is None or med_b is None or med_a <= 0 or med_b <= 0:
        return Comparison(case_id, med_a, med_b, None, None, "missing", n_a, n_b, _missing_note(side_a, side_b),
                          noise=noise)
    change = med_b / med_a - 1
    spread = math.hypot(side_a.spread, side_b.spread)
    ratio = _host_ratio(side_a, side_b)
    noisy = _noisy_note(side_a, side_b)
    reason = _inconclusive_reason(side_a, side_b)
    if ratio and max(ratio, 1 / ratio) > MAX_HOST_RATIO:
        slower = "B" if ratio > 1 else "A"
        reason = "; ".join(filter(None, [reason, f"the host ran {max(ratio, 1 / ratio):.1f}x slower in {slower}: "
                                         f"beyond the {MAX_HOST_RATIO:g}x a correction can carry"]))
    corrected = None
    host_sd = 0.0
    if ratio and not reason:
        if host.established:
            corrected = med_b / ratio ** host.elasticity / med_a - 1
            host_sd = abs(math.log(ratio)) * host.elasticity_sd
        else:
            host_sd = abs(math.log(ratio)) * UNPROVEN_ELASTICITY_SD
    history = _history_spread(side_a, side_b)
    between = runs.for_case(bool(noisy))
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
    p_value = _mannwhitney(side_a.rounds, [r / factor for r in side_b.rounds])
    verdict, why = judge_interval(judged, low, high, threshold)
    if verdict == "unchanged" and between is None:
        verdict, why = "inconclusive", (f"{_UNKNOWN_RUNS_NOTE}: fewer than {MIN_RUN_CASES} cases compared and no "
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
    """The two sides of an interleaved pair (`hwbench ab`), judged as `hwbench ab` judges them: per
    case, the per-round ratios B / A of the records that share ``extra["ab_round"]``, their
    geometric mean change and its Student-t interval (`paired_interval`), then `judge_interval`."""
    check_verdict_settings(threshold, alpha)

    def by_round(records: Sequence[BenchmarkRecord]) -> dict[str, dict[Any, BenchmarkRecord]]:
        out: dict[str, dict[Any, BenchmarkRecord]] = defaultdict(dict)
        for record in records:
            out[record.case_id][record.extra.get("ab_round")] = record
        return out

    rounds_a, rounds_b = by_round(a), by_round(b)
    out = []
    for case in list(rounds_a) + [c for c in rounds_b if c not in rounds_a]:
        side_a, side_b = rounds_a.get(case, {}), rounds_b.get(case, {})
        med_a = _median([r.latency_ms_median for r in side_a.values() if r.status == "passed"])
        med_b = _median([r.latency_ms_median for r in side_b.values() if r.status == "passed"])
        ratios = [side_b[k].latency_ms_median / side_a[k].latency_ms_median for k in side_a if k in side_b
                  and side_a[k].latency_ms_median and side_b[k].latency_ms_median]
        if med_a is None or med_b is None:
            out.append(Comparison(case, med_a, med_b, None, None, "missing", len(side_a), len(side_b),
                                  "absent or failed in " + ("A" if med_a is None else "B")))
            continue
        result = paired_interval(ratios, alpha)
        if result is None:
            out.append(Comparison(case, med_a, med_b, med_b / med_a - 1, None, "inconclusive", len(ratios),
                                  len(ratios), f"{len(ratios)} paired rounds; need 3"))
            continue
        change, low, high, p_value = result
        verdict, why = judge_interval(change, low, high, threshold)
        out.append(Comparison(case, med_a, med_b, change, p_value, verdict, len(ratios), len(ratios),
                              f"{why}; more rounds would tell" if why else "", low=low, high=high))
    return out


def exit_code(comparisons: Sequence[Comparison]) -> int:
    """1 when any case regressed, else 0 (inconclusive and missing cases do not fail a gate)."""
    return 1 if any(c.verdict == "regression" for c in comparisons) else 0


def _fmt_ms(value: float | None) -> str:
    return "-" if value is None else f"{value:.3f}"


def _fmt_p(value: float | None) -> str:
    if value is None:
        return "-"
    return f"{value:.2e}" if value < 1e-3 else f"{value:.4f}"


def _fmt_change(value: float | None) -> str:
    return "-" if value is None else f"{value * 100:+.1f}%"


def _fmt_interval(low: float | None, high: float | None) -> str:
    return "-" if low is None or high is None else f"{low * 100:+.0f}%..{high * 100:+.0f}%"


def _fit(text: str, width: int) -> str:
    return text if len(text) <= width else text[: max(0, width - 3)] + "..."


def format_table(comparisons: Sequence[Comparison], *, show_missing: bool = False, verbose: bool = False,
                 width: int = 120, host: HostModel | None = None, advise: bool = True) -> str:
    """Plain text: the compared cases first, one line each within `width` columns (case, verdict,
    the judged change and its interval, medians, host speed B/A, noise, the note cut to fit;
    `verbose` keeps it whole and adds the raw change, the p-value and the rounds); the
    `missing` cases folded into one count line by reason (`show_missing` lists them); then a
    count per verdict with the decisiveness, `host`'s correction when given, and `advice` when
    `advise` (not for the two sides of an `hwbench ab` pair, which already ran interleaved)."""
    compared = [c for c in comparisons if c.verdict != "missing"]
    missing = [c for c in comparisons if c.verdict == "missing"]
    header = ["case_id", "verdict", "change", "interval", "A ms", "B ms", "host B/A", "noise A/B"]
    if verbose:
        header += ["raw change", "p-value", "rounds A/B"]
    header.append("note")
    listed = compared + (missing if show_missing else [])
    rows: list[list[str]] = []
    for c in listed:
        row = [c.case_id, c.verdict, _fmt_change(c.judged_change), _fmt_interval(c.low, c.high),
               _fmt_ms(c.median_a), _fmt_ms(c.median_b),
               "-" if c.host_ratio is None else f"{c.host_ratio:.2f}", c.noise]
        if verbose:
            row += [_fmt_change(c.change), _fmt_p(c.p_value), f"{c.n_a}/{c.n_b}"]
        row.append(c.note)
        rows.append(row)
    cells = [header, *rows]
    widths = [max(len(r[i]) for r in cells) for i in range(len(header))]
    widths[-1] = len(header[-1])  # the note is last and ragged: no padding, cut to the width
    right = {2, 3, 4, 5, 6} | ({8, 9, 10} if verbose else set())

    def line(row: list[str]) -> str:
        text = "  ".join(c.rjust(w) if i in right else c.ljust(w)
                         for i, (c, w) in enumerate(zip(row, widths, strict=True))).rstrip()
        return text if verbose else _fit(text, width)

    lines = [line(cells[0]), "  ".join("-" * w for w in widths)] if listed else []
    if lines and not verbose:
        lines[1] = lines[1][:width]
    lines += [line(r) for r in cells[1:]]
    if missing and not show_missing:
        why: dict[str, int] = defaultdict(int)
        for c in missing:
            for part in c.note.split("; "):
                why[part.split(":")[0]] += 1
        parts = ", ".join(f"{n} {reason}" for reason, n in sorted(why.items(), key=lambda kv: -kv[1]))
        lines.append(_fit(f"{len(missing)} missing ({parts}); --all lists them", width) if not verbose
                     else f"{len(missing)} missing ({parts}); --all lists them")
    counts = {v: sum(c.verdict == v for c in comparisons) for v in VERDICTS}
    decided, total = decisiveness(comparisons)
    share = f"{decided / total:.0%}" if total else "-"
    lines.append("")
    if host is not None and any(c.host_ratio is not None for c in compared):
        lines.append(host.describe())
    spreads = {("interfered" if "noisy" in c.noise else "clean"): c.between_runs for c in compared if c.between_runs}
    if spreads:
        lines.append("between-run spread per case: " + ", ".join(
            f"+-{value:.1%} {kind}" for kind, value in sorted(spreads.items())))
    lines.append(", ".join(f"{n} {v}" for v, n in counts.items()) + f" ({len(comparisons)} cases)")
    lines.append(f"decisiveness {share} ({decided} of {total} compared cases have a verdict)")
    hint = advice(comparisons) if advise else ""
    if hint:
        lines.append(hint)
    return "\n".join(lines)


def to_json(comparisons: Sequence[Comparison], host: HostModel | None = None, *, advise: bool = True) -> str:
    """The comparisons, the counts, the decisiveness, the host model and `advice` (when `advise`)
    as one JSON document."""
    import json

    decided, total = decisiveness(comparisons)
    return json.dumps({
        "comparisons": [c.to_dict() for c in comparisons],
        "counts": {v: sum(c.verdict == v for c in comparisons) for v in VERDICTS},
        "decisiveness": decided / total if total else None,
        "decided": decided,
        "compared": total,
        "advice": (advice(comparisons) if advise else "") or None,
        "host_model": ({**dataclasses.asdict(host), "established": host.established} if host is not None
                       else None),
    }, indent=2, default=str)


__all__ = ["DECISIVE_SHARE", "INTERVAL_Z", "MAX_HOST_RATIO", "MIN_ROUNDS", "MIN_RUN_CASES", "ROUNDS",
           "UNPROVEN_ELASTICITY_SD", "VERDICTS", "Comparison", "HostModel", "RunSpread", "Verdict", "advice",
           "check_verdict_settings", "compare_pairs", "compare_records", "decisiveness", "exit_code",
           "format_table", "host_model_of", "judge_interval", "learn_host_model", "learn_run_spread",
           "paired_interval", "round_medians", "run_spread_of", "to_json"]
