"""The spool: an append-only JSONL journal of records and sessions, written (and fsynced) before
any sink sees a record, so that `replay` can send later what a sink missed. One process writes a
spool; each line is one ``write`` on an ``O_APPEND`` descriptor, so no two records interleave."""

from __future__ import annotations

import datetime
import json
import os
import shlex
import warnings
from collections.abc import Iterator, Sequence
from pathlib import Path
from typing import Any

from pytest_hwbench.errors import HwbenchWarning
from pytest_hwbench.record import BenchmarkRecord, SessionInfo, measurement_problem
from pytest_hwbench.sinks.redact import redact_uri


def _append_line(path: Path, line: str) -> None:
    """Append `line` and a newline to `path`, durably (fsync) and as one write."""
    path.parent.mkdir(parents=True, exist_ok=True)
    data = line.encode("utf-8") + b"\n"
    with path.open("a+b", buffering=0) as handle:  # O_APPEND, unbuffered: one write per line
        if handle.seek(0, os.SEEK_END):
            handle.seek(-1, os.SEEK_END)
            if handle.read(1) != b"\n":
                # A crash mid-write left a partial last line: end it, or this record would be
                # glued onto it and lost with it.
                data = b"\n" + data
        view = memoryview(data)
        while view:  # a full disk may take part of it, then raise
            view = view[os.write(handle.fileno(), view) :]
        os.fsync(handle.fileno())


def _read_lines(path: Path) -> Iterator[tuple[int, dict[str, Any]]]:
    """(line number, parsed object) for each JSON line of `path`; a bad line is skipped with an
    `HwbenchWarning` naming file and line, silently where it is a last line cut short by a crash."""
    if not path.exists():
        return
    with path.open("r", encoding="utf-8", errors="replace") as handle:
        for number, raw in enumerate(handle, 1):
            if not raw.strip():
                continue
            try:
                data = json.loads(raw)
                if not isinstance(data, dict):
                    raise ValueError(f"expected a JSON object, got {type(data).__name__}")
            except ValueError as exc:
                if raw.endswith("\n"):  # only the last line can lack one: a cut-off tail
                    warnings.warn(f"hwbench: skipping unreadable line {number} of {path}: {exc}", HwbenchWarning,
                                  stacklevel=3)
                continue
            yield number, data


def read_records_file(path: Path) -> Iterator[BenchmarkRecord]:
    """Every record of the JSON-lines file at `path`, in order (old schema versions upgraded);
    a line that is no record is skipped with an `HwbenchWarning` (a cut-off last line silently)."""
    for number, data in _read_lines(path):
        try:
            yield BenchmarkRecord.from_dict(data)
        except (TypeError, ValueError) as exc:
            warnings.warn(f"hwbench: line {number} of {path} is not a valid record: {exc}", HwbenchWarning,
                          stacklevel=2)


def refusal(record: BenchmarkRecord) -> str | None:
    """Why `record` cannot be stored as a measurement (`pytest_hwbench.record.measurement_problem`
    of a passed record), or None."""
    if record.status != "passed":
        return None
    problem = measurement_problem(record)
    return None if problem is None else f"record {record.record_id} ({record.case_id}): {problem}"


class Spool:
    """Append-only JSONL journal of records and sessions in `directory`, made on the first append."""

    def __init__(self, directory: str | os.PathLike[str]) -> None:
        self.directory = Path(directory)
        #: the records journal and the sessions journal
        self.records_path = self.directory / "records.jsonl"
        self.sessions_path = self.directory / "sessions.jsonl"

    def __repr__(self) -> str:
        return f"Spool({str(self.directory)!r})"

    def append(self, record: BenchmarkRecord) -> None:
        """Write `record` as one line, durable (fsynced) when this returns; ValueError for a record
        that cannot be a measurement (`refusal`): a journal replayed into every store carries none."""
        problem = refusal(record)
        if problem is not None:
            raise ValueError(f"hwbench spool: record refused: {problem}")
        _append_line(self.records_path, record.to_json())

    def append_session(self, info: SessionInfo) -> None:
        """Write the start line of a session."""
        line = {"event": "start", "session": info.to_dict()}
        _append_line(self.sessions_path, json.dumps(line, sort_keys=True, default=str))

    def append_session_end(self, session_id: str, status: str) -> None:
        """Write the end line of a session with its final status."""
        ended = datetime.datetime.now(datetime.timezone.utc).isoformat()
        line = {"event": "end", "session_id": session_id, "status": status, "ended_at": ended}
        _append_line(self.sessions_path, json.dumps(line, sort_keys=True))

    def records(self) -> Iterator[BenchmarkRecord]:
        """Every spooled record, in the order written (old schema versions upgraded on read)."""
        return read_records_file(self.records_path)

    def sessions(self) -> Iterator[SessionInfo]:
        """Every spooled session start, in the order written."""
        for number, data in _read_lines(self.sessions_path):
            if data.get("event") != "start":
                continue
            try:
                yield SessionInfo.from_dict(data["session"])
            except (KeyError, TypeError, ValueError) as exc:
                warnings.warn(f"hwbench: line {number} of {self.sessions_path} is not a valid session: "
                              f"{exc!r}", HwbenchWarning, stacklevel=2)

    def session_statuses(self) -> dict[str, str]:
        """session_id -> final status, for sessions whose end was spooled (the last end wins)."""
        return {
            str(data["session_id"]): str(data["status"])
            for _, data in _read_lines(self.sessions_path)
            if data.get("event") == "end" and "session_id" in data and "status" in data
        }


def replay_command(store_dir: str | os.PathLike[str], *, db_path: str | os.PathLike[str] | None = None,
                   mlflow_uri: str | None = None, experiment: str | None = None,
                   sinks: Sequence[str] = ()) -> str:
    """The `hwbench replay` command line that sends this run's spool to the stores the run used:
    every store option it was given repeated (``--store``, ``--db``, ``--mlflow-uri``,
    ``--experiment``), so that following the hint never fills a different store. The MLflow URI
    is shown with its credentials masked."""
    parts = ["hwbench", "replay", "--store", os.fspath(store_dir)]
    if db_path is not None:
        parts += ["--db", os.fspath(db_path)]
    if mlflow_uri:
        parts += ["--mlflow-uri", redact_uri(mlflow_uri)]
    if experiment:
        parts += ["--experiment", experiment]
    if sinks:
        parts += ["--sinks", ",".join(sinks)]
    return shlex.join(parts)


__all__ = ["Spool", "read_records_file", "refusal", "replay_command"]
