"""`Recorder` (spool first, then the sinks, never raising for a sink) and `replay`."""

from __future__ import annotations

import collections
import sys
import threading
import time
import warnings
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any, TypeVar

from pytest_hwbench._deadline import call_with_deadline
from pytest_hwbench.errors import HwbenchWarning
from pytest_hwbench.record import BenchmarkRecord, SessionInfo
from pytest_hwbench.sinks._fields import truncate
from pytest_hwbench.sinks.base import Sink, normalize_status
from pytest_hwbench.sinks.redact import redact_uri
from pytest_hwbench.sinks.spool import Spool, refusal
from pytest_hwbench.vocabulary import DEFAULT_RETRY_EVERY

#: Records per sink call when replaying: small enough that one call stays well inside the
#: deadline, large enough that DuckDB inserts frames, not rows.
_CHUNK = 25
#: Seconds between two progress lines of one sink's replay.
PROGRESS_EVERY_S = 2.0

_T = TypeVar("_T")


class SinkTimeout(TimeoutError):
    """A sink spent its session's time (`Recorder` ``deadline_s``) without answering."""


def _stderr_line(line: str) -> None:
    print(line, file=sys.stderr, flush=True)


def sink_call(fn: Callable[[], _T], budget_s: float, waiting: str,
              notify: Callable[[str], None] | None = None) -> _T:
    """`fn()` within `budget_s` seconds (`call_with_deadline`), `notify` (stderr by default) told
    what is awaited (`waiting`) once the wait is long; `SinkTimeout` at the deadline."""
    def waited(left: float) -> None:
        (notify or _stderr_line)(
            f"hwbench: waiting for {waiting} (at most {left:.0f} s more; then its records stay in the "
            "spool for `hwbench replay`)"
        )

    return call_with_deadline(
        fn, budget_s, name=f"hwbench-sink ({waiting})", on_wait=waited,
        on_deadline=lambda: SinkTimeout(f"no answer within {budget_s:.0f} s while waiting for {waiting}"),
    )


def _describe(exc: BaseException) -> str:
    # Sink errors may quote a store URI with its password (MLflow's do): masked before they are
    # kept in the report, warned about or printed.
    return truncate(redact_uri(f"{type(exc).__name__}: {exc}"), 1000)


def unique_names(sinks: Iterable[Sink]) -> list[str]:
    """Sink names, with ``#2``, ``#3`` appended where two sinks share one."""
    seen: collections.Counter[str] = collections.Counter()
    names: list[str] = []
    for sink in sinks:
        seen[sink.name] += 1
        names.append(sink.name if seen[sink.name] == 1 else f"{sink.name}#{seen[sink.name]}")
    return names


def _where(name: str, sink: Sink) -> str:
    target = sink.where()
    return f"sink {name!r}" + (f" ({redact_uri(target)})" if target else "")


@dataclass(frozen=True)
class RecorderReport:
    """What a recording session achieved: records emitted (each spooled first), records each sink
    `written` and still `pending` (in the spool; replay them), the first error of each sink that
    failed at any point (also if it recovered), where the spool is, its error if it could not be
    written (records may be lost for sinks that also failed), and records `refused` as no
    measurement (`refusal`: neither spooled nor sent)."""

    records: int
    written: Mapping[str, int]
    pending: Mapping[str, int]
    errors: Mapping[str, str]
    spool_dir: str
    spool_error: str | None = None
    refused: int = 0

    @property
    def complete(self) -> bool:
        """True when every sink has every record and the spool had no error."""
        return not any(self.pending.values()) and self.spool_error is None


@dataclass
class _SinkState:
    name: str
    sink: Sink
    opened: bool = False
    failed: bool = False
    written: int = 0
    pending: list[BenchmarkRecord] = field(default_factory=list)
    error: str | None = None
    since_failure: int = 0
    #: seconds spent in calls that failed or hung this session (`Recorder` ``deadline_s``)
    waited: float = 0.0
    #: True once the sink spent its time: no further call this session
    given_up: bool = False


class Recorder:
    """Spools every record, then hands it to each healthy sink; sink failures never raise.

    A sink whose call raises is marked failed (its first error kept, one `HwbenchWarning`); what
    it misses stays in the spool, pending. After every `retry_every` further records (0: never)
    and at `finish`, a failed sink gets one attempt to reopen and write its pending records. With
    `deadline_s`, each sink may spend that many seconds per session on calls that fail or hang,
    then it is given up for the session. A `refusal` is neither spooled nor sent. Used from one
    thread (each call works on the sinks side by side); `start` once, `emit` per record, `finish`.
    """

    def __init__(self, spool: Spool, sinks: Sequence[Sink], *, retry_every: int = DEFAULT_RETRY_EVERY,
                 deadline_s: float | None = None, notify: Callable[[str], None] | None = None) -> None:
        if retry_every < 0:
            raise ValueError(f"retry_every must be >= 0 (0 = never retry), got {retry_every}")
        if deadline_s is not None and not deadline_s > 0:
            raise ValueError(f"deadline_s must be > 0 seconds (None: no deadline), got {deadline_s}")
        self.deadline_s = deadline_s
        lock = threading.Lock()

        def said(line: str) -> None:  # sinks' threads may wait at once: one line at a time
            with lock:
                (notify or _stderr_line)(line)

        self.notify: Callable[[str], None] = said
        self._refused = 0
        self.spool = spool
        self.retry_every = retry_every
        self._states = [_SinkState(name, sink) for name, sink in zip(unique_names(sinks), sinks, strict=True)]
        #: the session given to `start`, if any
        self.session: SessionInfo | None = None
        self._records = 0
        self._spool_error: str | None = None
        self._finished = False

    @property
    def sinks(self) -> tuple[Sink, ...]:
        """The sinks, in the order given."""
        return tuple(state.sink for state in self._states)

    def start(self, session: SessionInfo) -> None:
        """Spool the session and open it on every sink (a sink that raises is marked failed)."""
        if self.session is not None:
            raise RuntimeError("Recorder.start called twice; use one Recorder per session")
        self.session = session
        try:
            self.spool.append_session(session)
        except OSError as exc:
            self._spool_failed(exc)

        def open_one(state: _SinkState) -> None:
            try:
                self._call(state, "open_session", state.sink.open_session, session)
                state.opened = True
            except Exception as exc:
                self._mark_failed(state, exc, "open_session")

        self._each(open_one)

    def _each(self, work: Callable[[_SinkState], None]) -> None:
        """`work(state)` for every sink's state, side by side (a thread each where there are
        several); what `work` raises is raised here once all are done."""
        if len(self._states) <= 1:
            for state in self._states:
                work(state)
            return
        errors: list[BaseException] = []

        # Plain threads, not a pool: a warning `work` gives is attributed to this module, and an
        # interrupt of the joins returns at once.
        def run(state: _SinkState) -> None:
            try:
                work(state)
            except BaseException as exc:  # handed to the caller's thread
                errors.append(exc)

        threads = [threading.Thread(target=run, args=(s,), name=f"hwbench-sink {s.name}") for s in self._states]
        for thread in threads:
            thread.start()
        for thread in threads:
            thread.join()
        if errors:
            raise errors[0]

    def emit(self, record: BenchmarkRecord) -> bool:
        """Spool `record`, then write it to each healthy sink; False when it is refused (`refusal`).
        Raises only on misuse."""
        if self.session is None or self._finished:
            raise RuntimeError("Recorder.emit needs start() first and no finish() yet")
        if record.session_id != self.session.session_id:
            raise ValueError(f"record {record.record_id} has session_id {record.session_id!r}, "
                             f"the recorder's session is {self.session.session_id!r}")
        problem = refusal(record)
        if problem is not None:
            self._refused += 1
            warnings.warn(f"hwbench: record refused, not stored: {problem}", HwbenchWarning, stacklevel=2)
            return False
        self._records += 1
        try:
            self.spool.append(record)
        except OSError as exc:
            self._spool_failed(exc)

        def write_one(state: _SinkState) -> None:
            if state.failed:
                state.pending.append(record)
                state.since_failure += 1
                # Not on every record: a dead server costs a connection attempt (or a timeout) per
                # call, on the benchmark's critical path.
                if self.retry_every and state.since_failure >= self.retry_every:
                    self._recover(state)
                return
            try:
                self._call(state, "write", state.sink.write, [record])
                state.written += 1
            except Exception as exc:
                state.pending.append(record)
                self._mark_failed(state, exc, "write")

        self._each(write_one)
        return True

    def finish(self, status: str = "finished") -> RecorderReport:
        """Retry failed sinks once, close every open sink with `status`, spool the end; report."""
        canonical = normalize_status(status)  # misuse raises before anything is closed
        if self.session is None:
            raise RuntimeError("Recorder.finish called without start()")
        if not self._finished:
            self._finished = True

            def close_one(state: _SinkState) -> None:
                if state.failed and self.retry_every:
                    self._recover(state)
                if state.opened and not state.given_up:
                    try:
                        self._call(state, "close", state.sink.close, canonical)
                    except Exception as exc:
                        self._mark_failed(state, exc, "close")
                    state.opened = False

            self._each(close_one)
            try:
                self.spool.append_session_end(self.session.session_id, canonical)
            except OSError as exc:
                self._spool_failed(exc)
            pending = {s.name: len(s.pending) for s in self._states if s.pending}
            if pending:
                warnings.warn(f"hwbench: records not yet in every sink: {pending}; they are in the spool "
                              f"{self.spool.directory}; run `hwbench replay` to send them", HwbenchWarning,
                              stacklevel=2)
        return self.report()

    def report(self) -> RecorderReport:
        """The state so far (what `finish` returns)."""
        states = self._states
        return RecorderReport(records=self._records, written={s.name: s.written for s in states},
                              pending={s.name: len(s.pending) for s in states},
                              errors={s.name: s.error for s in states if s.error is not None},
                              spool_dir=str(self.spool.directory), spool_error=self._spool_error,
                              refused=self._refused)

    # -- internals ----------------------------------------------------------------------------
    def _call(self, state: _SinkState, during: str, fn: Callable[..., Any], *args: Any) -> Any:
        """`fn(*args)` of `state`'s sink, within what is left of its session's time."""
        if state.given_up:
            raise SinkTimeout(f"{_where(state.name, state.sink)} was given up earlier in this session")
        if self.deadline_s is None:
            return fn(*args)
        budget = self.deadline_s - state.waited
        waiting = f"{_where(state.name, state.sink)} to answer {during}"
        try:
            return sink_call(lambda: fn(*args), budget, waiting, self.notify)
        except SinkTimeout:
            state.waited, state.given_up = self.deadline_s, True
            raise
        except Exception as exc:
            state.waited += float(getattr(exc, "hwbench_elapsed_s", 0.0))
            if state.waited >= self.deadline_s:
                state.given_up = True
            raise

    def _mark_failed(self, state: _SinkState, exc: BaseException, during: str) -> None:
        state.failed = True
        state.since_failure = 0
        if state.error is None:  # the first error, which is usually the cause
            state.error = f"{during}: {_describe(exc)}"
            later = ("given up for this session (its time, --hwbench-sink-timeout, is spent)" if state.given_up
                     else f"retrying every {self.retry_every} records" if self.retry_every
                     else "not retrying during this session")
            warnings.warn(f"hwbench: sink {state.name!r} failed in {during}: {_describe(exc)}. Records stay in "
                          f"the spool {self.spool.directory}; {later}; `hwbench replay` sends what is pending",
                          HwbenchWarning, stacklevel=3)

    def _recover(self, state: _SinkState) -> None:
        """One attempt to reopen the sink and write its pending records (one at a time)."""
        assert self.session is not None
        state.since_failure = 0
        if state.given_up:
            return  # its time is spent: the spool and `hwbench replay` take it from here
        try:
            if not state.opened:
                self._call(state, "open_session", state.sink.open_session, self.session)
                state.opened = True
            while state.pending:
                self._call(state, "write", state.sink.write, [state.pending[0]])
                state.pending.pop(0)
                state.written += 1
        except Exception:
            return  # still down; the first error is kept, the next attempt is retry_every away
        state.failed = False

    def _spool_failed(self, exc: OSError) -> None:
        if self._spool_error is None:
            self._spool_error = _describe(exc)
            warnings.warn(f"hwbench: cannot write the spool {self.spool.directory}: {_describe(exc)}; "
                          "records reach only the sinks that work", HwbenchWarning, stacklevel=3)


@dataclass(frozen=True)
class SinkReplay:
    """What `replay_each` did for one sink: records written, and the error that stopped it."""

    name: str
    written: int
    error: str | None = None
    #: spooled records refused as no measurement (`refusal`), sent to no sink
    refused: int = 0

    @property
    def ok(self) -> bool:
        return self.error is None


def replay_each(spool: Spool, sinks: Sequence[Sink], *, deadline_s: float | None = None,
                notify: Callable[[str], None] | None = None,
                progress: Callable[[str], None] | None = None) -> list[SinkReplay]:
    """Push every spooled record each sink does not hold yet (by record id: a second replay writes
    nothing), each sink on its own: one that fails, or leaves a call unanswered for `deadline_s`
    seconds (None: no limit), gets its error in its `SinkReplay`. Each session is opened, given
    its missing records and closed with its spooled final status (``killed`` without one); a
    `refusal` goes to no sink. `progress` gets each sink's count to write, then those written and
    the rate, at most every `PROGRESS_EVERY_S` seconds and at the end."""
    say = progress or (lambda line: None)
    records: dict[str, BenchmarkRecord] = {}
    refused = 0
    for record in spool.records():
        problem = refusal(record)
        if problem is not None:
            refused += 1
            warnings.warn(f"hwbench: spooled record refused, not replayed: {problem}", HwbenchWarning,
                          stacklevel=2)
            continue
        records.setdefault(record.record_id, record)
    sessions = {info.session_id: info for info in reversed(list(spool.sessions()))}  # the first start wins
    statuses = spool.session_statuses()

    def replay_one(name: str, sink: Sink) -> SinkReplay:
        written = 0
        where = _where(name, sink)

        def call(during: str, fn: Callable[..., _T], *args: Any) -> _T:
            if deadline_s is None:
                return fn(*args)
            return sink_call(lambda: fn(*args), deadline_s, f"{where} to answer {during}", notify)

        try:
            have = call("existing_ids", sink.existing_ids, records) if records else set()
            total = len(records) - len(have)
            if records:
                say(f"{name}: {len(have)} of {len(records)} records already there; {total} to write")
            began = last = time.monotonic()
            by_session: dict[str, list[BenchmarkRecord]] = {}
            for record in records.values():
                if record.record_id not in have:
                    by_session.setdefault(record.session_id, []).append(record)
            for session_id, missing in by_session.items():
                info = sessions.get(session_id) or SessionInfo(session_id, missing[0].created_at, missing[0].host)
                call("open_session", sink.open_session, info)
                for start in range(0, len(missing), _CHUNK):
                    batch = missing[start : start + _CHUNK]
                    call("write", sink.write, batch)
                    written += len(batch)
                    now = time.monotonic()
                    if now - last >= PROGRESS_EVERY_S or written >= total:
                        last, elapsed = now, max(now - began, 1e-9)
                        say(f"{name}: {written} of {total} records written ({written / elapsed:.1f} records/s, "
                            f"{elapsed:.0f} s)")
                call("close", sink.close, statuses.get(session_id, "killed"))
        except Exception as exc:
            return SinkReplay(name, written, _describe(exc), refused)
        return SinkReplay(name, written, refused=refused)

    return [replay_one(name, sink) for name, sink in zip(unique_names(sinks), sinks, strict=True)]


def replay(spool: Spool, sinks: Sequence[Sink]) -> dict[str, int]:
    """Records written per sink by `replay_each`; raises the first sink's error, after every
    sink had its turn (so one sink that is down does not keep the others from catching up)."""
    results = replay_each(spool, sinks)
    failed = [r for r in results if not r.ok]
    if failed:
        raise RuntimeError(f"replay to sink {failed[0].name!r} failed: {failed[0].error}")
    return {r.name: r.written for r in results}


__all__ = ["Recorder", "RecorderReport", "SinkReplay", "SinkTimeout", "replay", "replay_each", "unique_names"]
