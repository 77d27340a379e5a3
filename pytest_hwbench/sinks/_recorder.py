"""`Recorder` (spool first, then the sinks, never raising for a sink) and `replay`.

Failure policy of the recorder, per sink:

- A sink whose `open_session` or `write` raises is marked failed; the error is kept (the first
  one, which is usually the cause) and an `HwbenchWarning` is issued once.
- Every record emitted while it is failed is spooled as usual and counted as pending for it.
- After each further `retry_every` records (default 20) the recorder tries once to bring it back:
  open the session if that had failed, then write the pending records one at a time (so a sink
  that fails half-way through does not get the first ones twice). ``retry_every=0`` never
  retries during the session. Why not retry on every record: a dead MLflow server costs a
  connection attempt (and a timeout when a host does not answer) per call, on the benchmark's
  critical path; once per 20 records bounds that cost while a briefly restarted server still
  catches up before the session ends.
- `finish` tries once more (unless ``retry_every=0``), closes the sinks that have an open
  session, and reports what is still pending. Pending records are in the spool; `replay` (the
  ``hwbench replay`` command) pushes them later and is idempotent.

With ``defer=True`` the sinks see nothing until `finish`, which writes every record in one batch
per sink: the spool (a few ms per record) is then the only per-case cost, so sink I/O (about
130 ms per MLflow run on SQLite) never runs between two measurements. The plugin defers in a
serial session and writes as records arrive on an xdist controller, which measures nothing.

The recorder is used from one thread of one process (the controller under xdist).
"""

from __future__ import annotations

import warnings
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field

from pytest_hwbench.errors import HwbenchWarning
from pytest_hwbench.record import BenchmarkRecord, SessionInfo
from pytest_hwbench.sinks._fields import truncate
from pytest_hwbench.sinks.base import Sink, normalize_status
from pytest_hwbench.sinks.redact import redact_uri
from pytest_hwbench.sinks.spool import Spool

DEFAULT_RETRY_EVERY = 20
_REPLAY_BATCH = 500


def _describe(exc: BaseException) -> str:
    # Sink errors may quote a store URI with its password (MLflow's do): masked before they are
    # kept in the report, warned about or printed.
    return truncate(redact_uri(f"{type(exc).__name__}: {exc}"), 1000)


def _unique_names(sinks: Iterable[Sink]) -> list[str]:
    """Sink names, with ``#2``, ``#3`` appended where two sinks share one."""
    seen: dict[str, int] = {}
    names: list[str] = []
    for sink in sinks:
        base = getattr(sink, "name", type(sink).__name__)
        seen[base] = seen.get(base, 0) + 1
        names.append(base if seen[base] == 1 else f"{base}#{seen[base]}")
    return names


@dataclass(frozen=True)
class RecorderReport:
    """What a recording session achieved.

    Attributes:
        records: records emitted (each spooled first).
        written: records each sink stored during the session.
        pending: records each sink does not have yet (they are in the spool; replay them).
        errors: the first error of each sink that failed at any point (also if it recovered).
        spool_dir: where the spool is.
        spool_error: the error if the spool itself could not be written (records may be lost
            for sinks that also failed).
    """

    records: int
    written: Mapping[str, int]
    pending: Mapping[str, int]
    errors: Mapping[str, str]
    spool_dir: str
    spool_error: str | None = None

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


class Recorder:
    """Spools every record, then hands it to each healthy sink; sink failures never raise.

    See the module docstring for the failure policy. Call `start` once, `emit` per record,
    `finish` once.
    """

    def __init__(
        self,
        spool: Spool,
        sinks: Sequence[Sink],
        *,
        retry_every: int = DEFAULT_RETRY_EVERY,
        defer: bool = False,
    ) -> None:
        if retry_every < 0:
            raise ValueError(f"retry_every must be >= 0 (0 = never retry), got {retry_every}")
        self.spool = spool
        self.retry_every = retry_every
        self._states = [
            _SinkState(name, sink) for name, sink in zip(_unique_names(sinks), sinks, strict=True)
        ]
        self._session: SessionInfo | None = None
        self._records = 0
        self._spool_error: str | None = None
        self._finished = False
        self.defer = defer
        self._deferred: list[BenchmarkRecord] = []

    @property
    def session(self) -> SessionInfo | None:
        """The session given to `start`, if any."""
        return self._session

    def start(self, session: SessionInfo) -> None:
        """Spool the session and open it on every sink (a sink that raises is marked failed)."""
        if self._session is not None:
            raise RuntimeError("Recorder.start called twice; use one Recorder per session")
        self._session = session
        try:
            self.spool.append_session(session)
        except OSError as exc:
            self._spool_failed(exc)
        if not self.defer:  # deferred sinks open at finish, off the measurement path
            self._open_all()

    def _open_all(self) -> None:
        assert self._session is not None
        for state in self._states:
            if state.opened or state.failed:
                continue
            try:
                state.sink.open_session(self._session)
                state.opened = True
            except Exception as exc:
                self._mark_failed(state, exc, "open_session")

    def emit(self, record: BenchmarkRecord) -> None:
        """Spool `record`, then write it to each healthy sink. Raises only on misuse."""
        if self._session is None or self._finished:
            raise RuntimeError("Recorder.emit needs start() first and no finish() yet")
        if record.session_id != self._session.session_id:
            raise ValueError(
                f"record {record.record_id} has session_id {record.session_id!r}, "
                f"the recorder's session is {self._session.session_id!r}"
            )
        self._records += 1
        try:
            self.spool.append(record)
        except OSError as exc:
            self._spool_failed(exc)
        if self.defer:
            self._deferred.append(record)
            return
        for state in self._states:
            if state.failed:
                state.pending.append(record)
                state.since_failure += 1
                if self.retry_every and state.since_failure >= self.retry_every:
                    self._recover(state)
                continue
            try:
                state.sink.write([record])
                state.written += 1
            except Exception as exc:
                state.pending.append(record)
                self._mark_failed(state, exc, "write")

    def finish(self, status: str = "finished") -> RecorderReport:
        """Retry failed sinks once, close every open sink with `status`, spool the end; report."""
        canonical = normalize_status(status)  # misuse raises before anything is closed
        if self._session is None:
            raise RuntimeError("Recorder.finish called without start()")
        if not self._finished:
            self._finished = True
            self._flush_deferred()
            for state in self._states:
                if state.failed and self.retry_every:
                    self._recover(state)
                if state.opened:
                    try:
                        state.sink.close(canonical)
                    except Exception as exc:
                        self._mark_failed(state, exc, "close")
                    state.opened = False
            try:
                self.spool.append_session_end(self._session.session_id, canonical)
            except OSError as exc:
                self._spool_failed(exc)
            pending = {s.name: len(s.pending) for s in self._states if s.pending}
            if pending:
                warnings.warn(
                    f"hwbench: records not yet in every sink: {pending}; they are in the spool "
                    f"{self.spool.directory}; run `hwbench replay` to send them",
                    HwbenchWarning,
                    stacklevel=2,
                )
        return self.report()

    def report(self) -> RecorderReport:
        """The state so far (what `finish` returns)."""
        return RecorderReport(
            records=self._records,
            written={s.name: s.written for s in self._states},
            pending={s.name: len(s.pending) for s in self._states},
            errors={s.name: s.error for s in self._states if s.error is not None},
            spool_dir=str(self.spool.directory),
            spool_error=self._spool_error,
        )

    # -- internals ----------------------------------------------------------------------------
    def _flush_deferred(self) -> None:
        if not self.defer:
            return
        batch, self._deferred = self._deferred, []
        self._open_all()
        for state in self._states:
            if state.failed:
                state.pending.extend(batch)
                continue
            if not batch:
                continue
            try:
                state.sink.write(batch)
                state.written += len(batch)
            except Exception as exc:
                # A batch write may have stored part of the batch; replay skips what is there.
                state.pending.extend(batch)
                self._mark_failed(state, exc, "write")

    def _mark_failed(self, state: _SinkState, exc: BaseException, during: str) -> None:
        first = state.error is None
        if first:
            state.error = f"{during}: {_describe(exc)}"
        state.failed = True
        state.since_failure = 0
        if first:
            later = (
                f"retrying every {self.retry_every} records"
                if self.retry_every
                else "not retrying during this session"
            )
            warnings.warn(
                f"hwbench: sink {state.name!r} failed in {during}: {_describe(exc)}. Records stay in "
                f"the spool {self.spool.directory}; {later}; `hwbench replay` sends what is pending",
                HwbenchWarning,
                stacklevel=3,
            )

    def _recover(self, state: _SinkState) -> None:
        """One attempt to reopen the sink and write its pending records (one at a time)."""
        assert self._session is not None
        state.since_failure = 0
        try:
            if not state.opened:
                state.sink.open_session(self._session)
                state.opened = True
            while state.pending:
                state.sink.write([state.pending[0]])
                state.pending.pop(0)
                state.written += 1
        except Exception:
            return  # still down; the first error is kept, the next attempt is retry_every away
        state.failed = False

    def _spool_failed(self, exc: OSError) -> None:
        if self._spool_error is None:
            self._spool_error = _describe(exc)
            warnings.warn(
                f"hwbench: cannot write the spool {self.spool.directory}: {_describe(exc)}; "
                "records reach only the sinks that work",
                HwbenchWarning,
                stacklevel=3,
            )


def replay(spool: Spool, sinks: Sequence[Sink]) -> dict[str, int]:
    """Push every spooled record each sink does not hold yet; return records written per sink.

    Idempotent: what a sink already has (by record id, via `Sink.existing_ids`) is skipped, so a
    second replay writes nothing. Records are grouped by session: the sink opens the session
    (resuming it where it exists), writes the missing records and closes it with the spooled
    final status (``killed`` if the session never spooled an end). A sink that raises stops the
    replay with that error; run it again once the sink is back.
    """
    records: dict[str, BenchmarkRecord] = {}
    for record in spool.records():
        records.setdefault(record.record_id, record)
    sessions: dict[str, SessionInfo] = {}
    for info in spool.sessions():
        sessions.setdefault(info.session_id, info)
    statuses = spool.session_statuses()
    counts: dict[str, int] = {}
    for name, sink in zip(_unique_names(sinks), sinks, strict=True):
        have = sink.existing_ids(records) if records else set()
        by_session: dict[str, list[BenchmarkRecord]] = {}
        for record in records.values():
            if record.record_id not in have:
                by_session.setdefault(record.session_id, []).append(record)
        for session_id, missing in by_session.items():
            info = sessions.get(session_id) or SessionInfo(
                session_id=session_id, started_at=missing[0].created_at, host=missing[0].host
            )
            sink.open_session(info)
            for start in range(0, len(missing), _REPLAY_BATCH):
                sink.write(missing[start : start + _REPLAY_BATCH])
            sink.close(statuses.get(session_id, "killed"))
        counts[name] = sum(len(v) for v in by_session.values())
    return counts


__all__ = ["DEFAULT_RETRY_EVERY", "Recorder", "RecorderReport", "replay"]
