"""What each side of a comparison holds of one case (`Side`), how latency follows the host's
reference kernel (`HostModel`) and how far two sessions of the same code differ per case
(`RunSpread`), both learned from the compared cases; `pytest_hwbench.compare` judges from these.
"""

from __future__ import annotations

import dataclasses
import math
from collections import defaultdict
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np

from .record import BenchmarkRecord
from .trackers import round_medians
from .verdict import MIN_ROUNDS, median_of

#: How far a model's latency may move with the reference kernel (log over log, 1-sigma) where the
#: records do not establish it: the interval widens by ``|log kernel B / kernel A| x`` this.
UNPROVEN_ELASTICITY_SD = 0.6
#: A case teaches the elasticity only when the host's speed differs by at least this share between
#: the sides (below it, a change of the code under test would pass for elasticity); at least
#: `MIN_LEARNING_CASES` such cases are needed to learn it.
MIN_HOST_CHANGE = 0.15
MIN_LEARNING_CASES = 3
#: The learned elasticity's spread is never taken below this (a handful of cases can agree by luck).
MIN_ELASTICITY_SD = 0.15
#: The learned elasticity is applied only when its interval (median +- this many standard errors)
#: excludes zero: otherwise the records do not show that latency follows the kernel on this host.
ELASTICITY_Z = 2.0
#: Fewest compared cases from which the between-run spread is learned (`learn_run_spread`).
MIN_RUN_CASES = 5
#: Host speeds further apart than this factor are not corrected for (an overloaded instant more
#: than the host): the case is inconclusive.
MAX_HOST_RATIO = 2.0


@dataclass(frozen=True)
class HostModel:
    """``latency ~ kernel ** elasticity`` on this host, `elasticity_sd` the spread of the per-case
    figures, learned from `learned_from` cases; applied only where `established`."""

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


@dataclass(frozen=True)
class Side:
    """What one side knows of one case."""

    rounds: tuple[float, ...] = ()
    #: per session, the median of its rounds (a history's sessions, one for a single session)
    session_medians: tuple[float, ...] = ()
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


def side_of(records: Sequence[BenchmarkRecord]) -> Side:
    passed = [r for r in records if r.status == "passed"]
    if not passed:
        errors = [r.error for r in records if r.error]
        return Side(failure=errors[0] if errors else f"status {records[0].status}")
    clean = [r for r in passed if r.noise != "noisy"]
    used = clean or passed
    verdicts = {r.noise for r in used}
    noise = "noisy" if not clean else ("clean" if verdicts == {"clean"} else "-" if verdicts == {None} else "mixed")
    sessions: dict[str, list[float]] = defaultdict(list)
    rounds: list[float] = []
    for record in used:
        mine = round_medians(record.timings_ms)
        if not mine and record.latency_ms_median is not None and math.isfinite(record.latency_ms_median):
            mine = [float(record.latency_ms_median)]  # no raw timings kept (e.g. MLflow without artifacts)
        rounds.extend(mine)
        sessions[record.session_id].extend(mine)
    return Side(
        rounds=tuple(rounds),
        session_medians=tuple(float(np.median(v)) for v in sessions.values() if v),
        threads=frozenset(r.threads for r in used if r.threads is not None),
        devices=frozenset(r.device_name for r in used if r.device_name),
        reference_us=median_of([r.interference.get("reference_us") for r in used
                              if r.host_speed is not None and r.host_bound]),
        noise=noise,
        noisy_reason="" if clean else next((r.noise_reason for r in passed if r.noise_reason), "busy machine"),
    )


def side_of_summary(summary: Mapping[str, Any]) -> Side:
    """The `Side` `side_of` builds, from what a store computed of the case
    (``sinks._duckdb_read.case_summaries``)."""
    return Side(rounds=tuple(summary["rounds"]), session_medians=tuple(summary["session_medians"]),
                threads=frozenset(summary["threads"]), devices=frozenset(summary["devices"]),
                reference_us=summary["reference_us"], noise=summary["noise"],
                noisy_reason=summary["noisy_reason"], failure=summary["failure"])


def inconclusive_reason(a: Side, b: Side) -> str:
    """Why the two sides cannot be compared at all (different things measured, too few rounds, a
    host speed beyond `MAX_HOST_RATIO`), or ""."""
    reasons: list[str] = []
    if a.threads and b.threads and not a.threads & b.threads:
        reasons.append(f"threads {'/'.join(map(str, sorted(a.threads)))} in A, "
                       f"{'/'.join(map(str, sorted(b.threads)))} in B")
    if a.devices and b.devices and not a.devices & b.devices:
        reasons.append(f"device {', '.join(sorted(a.devices))} in A, {', '.join(sorted(b.devices))} in B")
    short = [f"{len(side.rounds)} in {label}" for label, side in (("A", a), ("B", b)) if len(side.rounds) < MIN_ROUNDS]
    if short:
        reasons.append(f"too few rounds ({', '.join(short)}; need {MIN_ROUNDS})")
    ratio = host_ratio(a, b)
    if ratio and max(ratio, 1 / ratio) > MAX_HOST_RATIO:
        reasons.append(f"the host ran {max(ratio, 1 / ratio):.1f}x slower in {'B' if ratio > 1 else 'A'}: "
                       f"beyond the {MAX_HOST_RATIO:g}x a correction can carry")
    return "; ".join(reasons)


#: Records on each side of a record, in its session's order, whose reference kernel readings are
#: pooled into the host speed it is corrected for (`sides_of`).
HOST_WINDOW = 2


def sides_of(records: Sequence[BenchmarkRecord]) -> dict[str, Side]:
    """case_id -> its `Side` in `records`, in their order. Each record's reference kernel time is
    first the median over it and the `HOST_WINDOW` records on each side of it in its session: one
    kernel reading of a few milliseconds is noisy, while host speed holds over a stretch of time."""
    by_session: dict[str, list[int]] = defaultdict(list)
    for index, record in enumerate(records):
        if record.host_speed is not None and isinstance(record.interference.get("reference_us"), (int, float)):
            by_session[record.session_id].append(index)
    smoothed = list(records)
    for indices in by_session.values():
        values = [float(records[i].interference["reference_us"]) for i in indices]
        for position, index in enumerate(indices):
            window = values[max(0, position - HOST_WINDOW): position + HOST_WINDOW + 1]
            record = records[index]
            smoothed[index] = dataclasses.replace(
                record, interference={**record.interference, "reference_us": float(np.median(window))})
    by_case: dict[str, list[BenchmarkRecord]] = defaultdict(list)
    for record in smoothed:
        by_case[record.case_id].append(record)
    return {case: side_of(recs) for case, recs in by_case.items()}


def learn_host_model(pairs: Sequence[tuple[Side, Side]]) -> HostModel:
    """The elasticity of latency against the reference kernel: the median, clamped to [0, 3], of
    ``log(latency B / latency A) / log(kernel B / kernel A)`` over the cases whose host speed
    differs by at least `MIN_HOST_CHANGE`, its spread 1.4826 x MAD (at least `MIN_ELASTICITY_SD`);
    no such case: `HostModel()`."""
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
    (relative, 1-sigma; None where fewer than `MIN_RUN_CASES` cases teach it: a clean case is then
    judged on its rounds and never called unchanged, an interfered one not at all), and how many
    cases taught each."""

    clean: float | None = None
    noisy: float | None = None
    clean_cases: int = 0
    noisy_cases: int = 0


def host_ratio(a: Side, b: Side) -> float | None:
    """B's reference kernel time over A's, or None where a side carries no host speed."""
    return b.reference_us / a.reference_us if a.reference_us and b.reference_us else None


def learn_run_spread(pairs: Sequence[tuple[Side, Side]], host: HostModel) -> RunSpread:
    """The between-run spread of the comparable cases: 1.4826 x the MAD of their log changes (B
    corrected for host speed where `host` is established), clean cases' around their median,
    interfered ones' around no change."""
    groups: dict[bool, list[float]] = {False: [], True: []}
    for a, b in pairs:
        med_a, med_b = a.median, b.median
        if not (med_a and med_b and med_a > 0 and med_b > 0) or inconclusive_reason(a, b):
            continue
        ratio = host_ratio(a, b)
        applied = host.elasticity * math.log(ratio) if ratio and host.established else 0.0
        groups[a.noise == "noisy" or b.noise == "noisy"].append(math.log(med_b / med_a) - applied)

    def spread(values: list[float], centre: bool) -> float | None:
        if len(values) < MIN_RUN_CASES:
            return None
        arr = np.asarray(values)
        return 1.4826 * float(np.median(np.abs(arr - (np.median(arr) if centre else 0.0))))

    return RunSpread(spread(groups[False], True), spread(groups[True], False), len(groups[False]),
                     len(groups[True]))


__all__ = ["ELASTICITY_Z", "HOST_WINDOW", "MAX_HOST_RATIO", "MIN_ELASTICITY_SD", "MIN_HOST_CHANGE",
           "MIN_LEARNING_CASES", "MIN_RUN_CASES", "UNPROVEN_ELASTICITY_SD", "HostModel", "RunSpread", "Side",
           "host_ratio", "inconclusive_reason", "learn_host_model", "learn_run_spread", "side_of", "side_of_summary",
           "sides_of"]
