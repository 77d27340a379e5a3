"""Compare two sets of benchmark records case by case, on between-run variation, not iterations.

The iterations of one run are not independent samples of "how fast is this case": load, clocks
and thread placement shift a whole run at once, so a test on iterations calls any such shift
significant (a test on iterations raised false alarms on most cases of an A/A pair on a shared runner). Here the unit is a
*round*: the median of one consecutive block of a record's timed iterations (`ROUNDS` blocks per
record). A side's figure for a case is the median of its rounds; its spread is the robust
relative spread of those rounds (1.4826 x MAD / median) or, where a side holds several sessions
(a baseline history), of the sessions' medians, whichever is larger.

Host speed: a record of schema 4 carries the time of a fixed reference kernel beside its case
(``interference["reference_us"]``, with ``host_speed``). The kernel runs on the host's CPU, so it
speaks for cases that compute there (`BenchmarkRecord.host_bound`: cpu, onnxruntime, openvino,
wasm), not for an accelerator's. Where both sides of such a case carry it, each case's
B side is corrected for the host's change of speed, ``h = reference_B / reference_A``: latency is
taken to move as ``h ** k``. The elasticity ``k`` (how this host's models move against the kernel)
is learned from the records being compared (`learn_host_model`: the median over the cases whose
host speed differs, of log latency change over log kernel change), and so is its uncertainty (the
spread of those per-case figures); with too few such cases a wide prior is used
(`PRIOR_ELASTICITY` +- `PRIOR_ELASTICITY_SD`). The correction's uncertainty, ``|log h| x sd(k)``,
joins the two sides' spreads in the combined uncertainty.

Between runs: two sessions of the same code on the same host differ by more than the rounds of
one record show (thread placement, caches, clocks). That between-run spread is learned from the
compared cases (`learn_run_spread`) and joins each case's combined uncertainty:

- cases clean on both sides: 1.4826 x the MAD of their corrected log changes around their median,
  so a change that moves every case alike (the regression a gate is for) does not widen it;
- cases with an interfered side (``noise == "noisy"``): 1.4826 x the median of the corrected log
  changes' size, around zero, since a shift common to every interfered case is what interference
  does.

Each needs at least `MIN_RUN_CASES` cases of its kind. Interfered records are thus compared, not
refused, where enough of them teach how far interference moved them; a case with an interfered
side among fewer is inconclusive. Either way its note says ``noisy in A/B`` with the reason.

Verdicts, per ``case_id``, over passed records only:

- ``missing``: no passed record on a side (the note says which and why);
- ``inconclusive``, with the reason: a side has fewer than `MIN_ROUNDS` rounds, the sides ran
  different thread counts or devices (they measured different configurations), the host speeds
  differ by more than `MAX_HOST_RATIO`, the corrected change passes the threshold but lies inside
  `NOISE_Z` times the combined uncertainty, or the rounds overlap too much to tell (Mann-Whitney U
  on rounds, p >= `alpha`);
- ``regression`` / ``improvement``: the corrected median moved by more than `threshold` and by
  more than `NOISE_Z` times the combined uncertainty, and the rounds differ (p < `alpha`);
- ``unchanged``: otherwise.

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
#: A change must exceed this many combined spreads (besides the threshold) to count.
NOISE_Z = 3.0
#: How a model's latency moves against the reference kernel (log over log) when nothing else can
#: be learned, and the uncertainty of that guess: on the project's runner models moved from about
#: as much as the kernel to about twice as much (onnxruntime bert-tiny +78 % while the kernel ran
#: +31 %: 2.1x in logs).
PRIOR_ELASTICITY = 1.3
PRIOR_ELASTICITY_SD = 0.6
#: A case teaches the elasticity only when the host's speed differs by at least this share between
#: the sides (below it, the slope divides by a kernel change no larger than its own noise, and a
#: change of the code under test would pass for elasticity); and at least `MIN_LEARNING_CASES`
#: such cases are needed to replace the prior.
MIN_HOST_CHANGE = 0.15
MIN_LEARNING_CASES = 3
#: The learned elasticity's spread is never taken below this (a handful of cases can agree by luck).
MIN_ELASTICITY_SD = 0.15
#: Fewest compared cases from which the between-run spread is learned (`learn_run_spread`).
MIN_RUN_CASES = 5
#: Host speeds further apart than this factor are not corrected for: such a reading says more about
#: an overloaded instant than about the host, and the case is inconclusive.
MAX_HOST_RATIO = 2.0


@dataclass(frozen=True)
class Comparison:
    """One case on both sides.

    `change` is ``(median_b - median_a) / median_a``: positive means B is slower. `n_a`/`n_b` count
    rounds; `spread` is the combined relative spread of both sides' rounds; `noise` reads
    ``clean/noisy`` (A's verdict, then B's; ``-`` where unknown). `p_value` is None when no test
    ran. `host_ratio` is B's reference kernel time over A's (None: a side carries no host speed);
    `corrected_change` is `change` with B corrected for it (equal to `change` without one) and is
    what the verdict judges; `between_runs` is the between-run spread learned for cases like this
    one (`learn_run_spread`); `uncertainty` is the combined relative uncertainty (rounds' spreads,
    the correction's and the between-run spread), the change needed to count being `NOISE_Z`
    times it.
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

    @property
    def decided(self) -> bool:
        """Whether the case got a verdict (regression, improvement or unchanged)."""
        return self.verdict in ("regression", "improvement", "unchanged")

    def to_dict(self) -> dict[str, Any]:
        """JSON-ready dict of every field."""
        return dataclasses.asdict(self)


@dataclass(frozen=True)
class HostModel:
    """How latency moves against the reference kernel on this host: ``latency ~ kernel ** elasticity``,
    with `elasticity_sd` its uncertainty; `learned_from` cases taught it (0: the prior)."""

    elasticity: float = PRIOR_ELASTICITY
    elasticity_sd: float = PRIOR_ELASTICITY_SD
    learned_from: int = 0

    def describe(self) -> str:
        """One line for people."""
        source = (f"learned from {self.learned_from} cases" if self.learned_from
                  else f"a prior: fewer than {MIN_LEARNING_CASES} cases whose host speed differed")
        return (f"host-speed correction: latency ~ reference kernel ^ {self.elasticity:.2f} "
                f"(+-{self.elasticity_sd:.2f}, {source})")


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
    `MIN_ELASTICITY_SD`), clamped to [0, 3]. Fewer than `MIN_LEARNING_CASES` such cases: the prior."""
    slopes = []
    for a, b in pairs:
        med_a, med_b = a.median, b.median
        if not (a.reference_us and b.reference_us and med_a and med_b) or a.noise == "noisy" or b.noise == "noisy":
            continue
        x = math.log(b.reference_us / a.reference_us)
        if abs(x) < math.log1p(MIN_HOST_CHANGE):
            continue
        slopes.append(math.log(med_b / med_a) / x)
    if len(slopes) < MIN_LEARNING_CASES:
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
        """The between-run spread a case carries: its kind's; a clean case without one, 0 (its
        rounds' spread stands alone); an interfered case without one, None (it cannot be judged)."""
        if noisy:
            return self.noisy
        return self.clean if self.clean is not None else 0.0


def _corrected_log_change(a: _Side, b: _Side, host: HostModel) -> float | None:
    """log(B corrected for host speed / A) for a pair that can be compared at all, else None."""
    med_a, med_b = a.median, b.median
    if not (med_a and med_b and med_a > 0 and med_b > 0) or _inconclusive_reason(a, b):
        return None
    ratio = b.reference_us / a.reference_us if a.reference_us and b.reference_us else None
    if ratio and max(ratio, 1 / ratio) > MAX_HOST_RATIO:
        return None
    return math.log(med_b / med_a) - (host.elasticity * math.log(ratio) if ratio else 0.0)


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


#: How the note of a case whose change lies inside the combined uncertainty begins.
_INSIDE_NOTE = "change inside"
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


def _compare_case(case_id: str, side_a: _Side | None, side_b: _Side | None, threshold: float,
                  alpha: float, host: HostModel | None = None, runs: RunSpread | None = None) -> Comparison:
    host = host or HostModel()
    runs = runs or RunSpread()
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
    ratio = side_b.reference_us / side_a.reference_us if side_a.reference_us and side_b.reference_us else None
    factor = ratio ** host.elasticity if ratio else 1.0  # what the host's change of speed did to B
    corrected = (med_b / factor - med_a) / med_a if med_a > 0 else None
    correction_sd = abs(math.log(ratio)) * host.elasticity_sd if ratio else 0.0
    noisy = _noisy_note(side_a, side_b)
    between = runs.for_case(bool(noisy))
    uncertainty = math.hypot(spread, correction_sd, between or 0.0)
    base = {"n_a": n_a, "n_b": n_b, "spread": spread, "noise": noise, "host_ratio": ratio,
            "corrected_change": corrected, "uncertainty": uncertainty, "between_runs": between}
    reason = _inconclusive_reason(side_a, side_b)
    unlearned = (f"fewer than {MIN_RUN_CASES} cases with an interfered side compared to learn how far "
                 "interference moved them") if noisy and between is None else ""
    if ratio and max(ratio, 1 / ratio) > MAX_HOST_RATIO:
        slower = "B" if ratio > 1 else "A"
        reason = "; ".join(filter(None, [reason, f"the host ran {max(ratio, 1 / ratio):.1f}x slower in {slower}: "
                                         f"beyond the {MAX_HOST_RATIO:g}x a correction can carry"]))
    if reason or unlearned:
        return Comparison(case_id, med_a, med_b, change, None, "inconclusive",
                          note="; ".join(filter(None, [reason, noisy, unlearned])), **base)
    rounds_b = [r / factor for r in side_b.rounds]
    p_value = _mannwhitney(side_a.rounds, rounds_b)
    if corrected is None or abs(corrected) <= threshold:
        return Comparison(case_id, med_a, med_b, change, p_value, "unchanged", note=noisy, **base)
    if abs(corrected) <= NOISE_Z * uncertainty:
        what = f"the rounds' spread +-{spread:.1%}"
        if ratio:
            what += f", the host-speed correction +-{correction_sd:.1%} (kernel {ratio:.2f}x in B)"
        if between:
            what += f", between runs +-{between:.1%}"
        note = f"{_INSIDE_NOTE} {NOISE_Z:g} x the combined uncertainty ({what})"
        return Comparison(case_id, med_a, med_b, change, p_value, "inconclusive",
                          note="; ".join(filter(None, [note, noisy])), **base)
    if p_value is None or p_value >= alpha:
        return Comparison(case_id, med_a, med_b, change, p_value, "inconclusive",
                          note="; ".join(filter(None, [f"rounds overlap: not significant (p >= {alpha:g})", noisy])),
                          **base)
    verdict: Verdict = "regression" if corrected > 0 else "improvement"
    return Comparison(case_id, med_a, med_b, change, p_value, verdict, note=noisy, **base)


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


def _fit(text: str, width: int) -> str:
    return text if len(text) <= width else text[: max(0, width - 3)] + "..."


def format_table(comparisons: Sequence[Comparison], *, show_missing: bool = False, verbose: bool = False,
                 width: int = 120, host: HostModel | None = None, advise: bool = True) -> str:
    """Plain text: the compared cases first, one line each within `width` columns (case, verdict,
    the corrected change and the change needed to count, medians, host speed B/A, noise, the note cut
    to fit; `verbose` keeps it whole and adds the p-value, rounds and the raw change); the
    `missing` cases folded into one count line by reason (`show_missing` lists them); then a
    count per verdict with the decisiveness, `host`'s correction when given, and `advice` when
    `advise` (not for the two sides of an `hwbench ab` pair, which already ran interleaved)."""
    compared = [c for c in comparisons if c.verdict != "missing"]
    missing = [c for c in comparisons if c.verdict == "missing"]
    header = ["case_id", "verdict", "change", "+-", "A ms", "B ms", "host B/A", "noise A/B"]
    if verbose:
        header += ["raw change", "p-value", "rounds A/B"]
    header.append("note")
    listed = compared + (missing if show_missing else [])
    rows: list[list[str]] = []
    for c in listed:
        row = [c.case_id, c.verdict, _fmt_change(c.corrected_change if c.corrected_change is not None else c.change),
               "-" if c.uncertainty is None else f"{NOISE_Z * c.uncertainty * 100:.0f}%",
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
        "host_model": dataclasses.asdict(host) if host is not None else None,
    }, indent=2, default=str)


__all__ = ["DECISIVE_SHARE", "MAX_HOST_RATIO", "MIN_ROUNDS", "MIN_RUN_CASES", "NOISE_Z", "PRIOR_ELASTICITY",
           "PRIOR_ELASTICITY_SD", "ROUNDS", "VERDICTS", "Comparison", "HostModel", "RunSpread", "Verdict",
           "advice", "check_verdict_settings", "compare_records", "decisiveness", "exit_code", "format_table", "host_model_of", "learn_host_model",
           "learn_run_spread", "round_medians", "run_spread_of", "to_json"]
