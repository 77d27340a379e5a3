"""Progress lines of a benchmark run (`Progress`) and how a collected case enters their estimate's
plan (`planned`)."""

from __future__ import annotations

import time
from statistics import fmean
from typing import Any

from ..case import BenchCase


def planned(case: BenchCase | None) -> BenchCase | None:
    """`case` for the progress plan, or None (a plain test) when its model's backend gap will skip it."""
    if case is None:
        return None
    try:
        gap = case.spec().backend_gaps.get(case.backend)
    except KeyError:  # an unknown model fails in its run
        return case
    return None if gap else case


def _duration(seconds: float) -> str:
    minutes, secs = divmod(int(round(seconds)), 60)
    hours, minutes = divmod(minutes, 60)
    return f"{hours}h{minutes:02d}m{secs:02d}s" if hours else f"{minutes}m{secs:02d}s"


class Progress:
    """Lines for the controller's terminal: case k of n, elapsed time and an estimate of what
    remains, at most one per `interval_s` (0: every case); none without benchmark cases.

    The estimate prices each remaining test of the `plan` (nodeid -> its `BenchCase`, None for
    a plain test, in run order) by the finished tests most like it: its model's load where a
    cache of `cache_size` models will not hold it, one measurement times the mean measurements
    per case so far, a backend's first case (its runtime's start) apart; an unseen mode costs an
    inference case times its `MODE_COST`. Without a plan every test costs the average so far.
    """

    #: Relative cost of one measurement by mode before one of its mode has run (inference = 1): what
    #: its loop does beyond the minimum time (a whole generate() call per iteration, train's warm-up).
    MODE_COST: dict[str, float] = {"inference": 1.0, "train": 1.2, "generate": 4.0}
    #: Cases counted as measured once before any has run: a few early retries (the first cases
    #: warm the host) do not price every remaining case as retried.
    TRIES_PRIOR = 10
    #: Seconds from the last case to the process's exit (the sinks closed, the summary, teardown).
    END_COST_S = 5.0

    def __init__(self, interval_s: float, clock: Any = time.monotonic, cache_size: int = 1,
                 min_time_s: float = 0.0) -> None:
        self.interval_s = interval_s
        self.cache_size = max(1, cache_size)
        self.min_time_s = min_time_s
        self._clock = clock
        self.start(0, has_cases=False)
        self.total = None  # not started: `done_one` counts nothing until `start`

    def start(self, total: int, has_cases: bool = True, plan: dict[str, BenchCase | None] | None = None) -> None:
        self.total: int | None = total
        self.done, self.has_cases = 0, has_cases
        self._started = self._last = self._previous = self._clock()
        self._left: dict[str, BenchCase | None] = dict(plan or {})
        self._seen: dict[tuple[str, ...], list[float]] = {}
        self._loads: dict[tuple[str, ...], list[float]] = {}
        self._cached: list[tuple[str, ...]] = []
        self._tries: list[int] = []
        self._backends: set[str] = set()
        self._firsts: list[float] = []

    @staticmethod
    def _kinds(case: BenchCase | None) -> tuple[tuple[str, ...], ...]:
        """The keys the rest of a test is priced by, most specific first."""
        if case is None:
            return (("test",),)
        return ((case.mode, case.model, case.backend, case.precision), (case.mode, case.backend, case.precision),
                (case.mode, case.backend), (case.mode,))

    @staticmethod
    def _load_kinds(case: BenchCase) -> tuple[tuple[str, ...], ...]:
        """The keys a load is priced by, most specific first."""
        return (("model", case.model, case.backend), ("backend", case.backend), ("any",))

    @staticmethod
    def _first_mean(seen: dict[tuple[str, ...], list[float]], kinds: tuple[tuple[str, ...], ...]) -> float | None:
        """The mean time of the first of `kinds` seen, None where none is."""
        return next((fmean(seen[kind]) for kind in kinds if seen.get(kind)), None)

    @staticmethod
    def _use(cached: list[tuple[str, ...]], key: tuple[str, ...], size: int) -> bool:
        """Whether `key` is in the cache of `size` keys, which it then ends (least recent first)."""
        if key in cached:
            cached.remove(key)
            cached.append(key)
            return True
        cached.append(key)
        del cached[:-size]
        return False

    def estimate_left(self, elapsed: float) -> float:
        """Seconds the remaining tests should take, by the pricing above."""
        assert self.total is not None
        remaining = self.total - self.done
        if not self._left:
            return elapsed / max(self.done, 1) * remaining + self.END_COST_S
        # an inference case's worth: each case's time over its mode's cost, the mean of those
        units = sorted(t / self.MODE_COST.get(kind[0], 1.0) for kind, times in self._seen.items()
                       if len(kind) == 1 and kind != ("test",) for t in times)
        typical = fmean(units) if units else elapsed / max(self.done, 1)
        typical = max(typical, self.min_time_s)  # a timed loop lasts at least the minimum time
        # the mean measurements per case so far, starting from TRIES_PRIOR cases measured once
        tries = (sum(self._tries) + self.TRIES_PRIOR) / (len(self._tries) + self.TRIES_PRIOR)
        cached, backends = list(self._cached), set(self._backends)
        priced = 0.0
        for case in self._left.values():
            if case is not None and case.backend not in backends and self._firsts:
                backends.add(case.backend)
                priced += fmean(self._firsts)  # a backend's first case: its start included
            else:
                price = self._first_mean(self._seen, self._kinds(case))
                if price is None:  # nothing like it ran yet: a share of a typical case
                    price = typical * (self.MODE_COST.get(case.mode, 1.0) if case is not None else 0.1)
                priced += price * (tries if case is not None else 1.0)
            if case is not None and not self._use(cached, case.load_key, self.cache_size):
                priced += self._first_mean(self._loads, self._load_kinds(case)) or 0.0
        unplanned = max(0, remaining - len(self._left))
        return priced + unplanned * typical * 0.1 + self.END_COST_S

    def _learn(self, case: BenchCase | None, took: float, load_s: float | None, tries: int | None) -> None:
        """What a finished test of the plan teaches the prices (see the class docstring)."""
        if case is not None:
            self._use(self._cached, case.load_key, self.cache_size)
            if load_s:
                took = max(0.0, took - load_s)
                for kind in self._load_kinds(case):
                    self._loads.setdefault(kind, []).append(load_s)
            if tries:
                self._tries.append(tries)
            if case.backend not in self._backends:  # its runtime's start is in it: priced apart
                self._backends.add(case.backend)
                self._firsts.append(took)
                return
            took /= tries or 1
        for kind in self._kinds(case):
            self._seen.setdefault(kind, []).append(took)

    def done_one(self, nodeid: str | None = None, load_s: float | None = None,
                 tries: int | None = None) -> str | None:
        """Count one finished test (`nodeid`, when the plan names it; `load_s`: its case's model
        load in seconds, 0 from the cache; `tries`: its measurements); the line when one is due."""
        if self.total is None:
            return None
        self.done += 1
        now = self._clock()
        took, self._previous = now - self._previous, now
        if nodeid is not None and nodeid in self._left:
            self._learn(self._left.pop(nodeid), took, load_s, tries)
        if not self.has_cases or self.done >= self.total or now - self._last < self.interval_s:
            return None  # the run's own summary follows the last case
        self._last = now
        elapsed = now - self._started
        left = self.estimate_left(elapsed)
        return (f"hwbench: case {self.done} of {self.total} ({self.done / self.total:.0%}), "
                f"{_duration(elapsed)} elapsed, about {_duration(left)} left")
