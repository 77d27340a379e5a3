"""Copying a store into another: an MLflow experiment into a DuckDB file (`hwbench import-mlflow`),
and a DuckDB file's records into any sink (`hwbench export --to`).

A feature of its own that uses two sinks, so neither sink module imports the other.

The import is incremental: it lists the experiment's sessions (its parent runs, one per session)
and fetches the child runs of only those sessions the DuckDB file does not hold with the same
final status: one bounded search per such session. A second import of an unchanged server
therefore reads the session list and nothing else.
"""

from __future__ import annotations

import os
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from pytest_hwbench.record import BenchmarkRecord, SessionInfo
from pytest_hwbench.sinks.base import Sink
from pytest_hwbench.sinks.duckdb_sink import DuckDBSink, list_sessions, load_records
from pytest_hwbench.sinks.mlflow_sink import MlflowSink


@dataclass(frozen=True)
class ImportResult:
    """What `import_mlflow_sessions` did: sessions listed in MLflow, sessions fetched (those the
    DuckDB file lacked or held unfinished), records added."""

    sessions: int
    fetched: int
    records: int


def _held_sessions(db_path: Path) -> dict[str, str | None]:
    """session_id -> final status (None while running) of the sessions in the DuckDB file."""
    if not db_path.exists():
        return {}
    frame = list_sessions(db_path)
    return {str(sid): (None if status is None or status != status else str(status))
            for sid, status in zip(frame["session_id"], frame["status"], strict=True)}


def import_mlflow_sessions(tracking_uri: str | None, experiment: str, db_path: str | os.PathLike[str], *,
                           full: bool = False,
                           notify: Callable[[str], None] | None = None) -> ImportResult:
    """Bring `db_path` up to date with an MLflow experiment.

    Parent runs give the sessions; child runs give the results (params cast back from text,
    metrics, context tags); raw timings come from the parents' records artifacts where present.
    Only sessions the file lacks, holds as running, or holds with another final status are
    fetched; `full` fetches every child run of the experiment instead (also records whose parent
    run is gone). Records already in the file are skipped, so importing twice adds nothing.
    `notify` gets one line per step (sessions listed, records fetched).
    """
    say = notify or (lambda line: None)
    source = MlflowSink(tracking_uri, experiment)
    sessions = source.read_sessions()
    path = Path(db_path)
    held = {} if full else _held_sessions(path)
    todo = [(info, status) for info, status in sessions
            if full or info.session_id not in held or held[info.session_id] is None
            or held[info.session_id] != status]
    say(f"{len(sessions)} sessions in MLflow, {len(sessions) - len(todo)} already in {path.name}; "
        f"fetching {len(todo)}")
    if full:
        records = source.read_records()
    elif todo:
        records = source.read_records(session_ids=[info.session_id for info, _ in todo])
    else:
        records = []
    sink = DuckDBSink(path)
    have = sink.existing_ids({r.record_id: r for r in records}) if records else set()
    by_session: dict[str, list[BenchmarkRecord]] = {}
    for record in records:
        if record.record_id not in have:
            by_session.setdefault(record.session_id, []).append(record)
    known = {info.session_id: (info, status) for info, status in todo}
    added = 0
    for session_id in dict.fromkeys([*known, *by_session]):
        info, status = known.get(session_id, (None, "finished"))
        if info is None:
            first = by_session[session_id][0]
            info = SessionInfo(session_id=session_id, started_at=first.created_at, host=first.host)
        sink.open_session(info)
        new = by_session.get(session_id, [])
        sink.write(new)
        added += len(new)
        if status != "running":  # a session still running in MLflow keeps no status here either
            sink.close(status)
    return ImportResult(sessions=len(sessions), fetched=len(todo), records=added)


def import_mlflow(tracking_uri: str | None, experiment: str, db_path: str | os.PathLike[str], *,
                  full: bool = False) -> int:
    """Records added to `db_path` from an MLflow experiment (`import_mlflow_sessions`)."""
    return import_mlflow_sessions(tracking_uri, experiment, db_path, full=full).records


def _text(value: Any) -> str:
    """A cell of the sessions table as text: a timestamp in ISO form, a missing cell as ""."""
    if value is None or value != value:  # NULL, NaN or NaT
        return ""
    return value.isoformat() if hasattr(value, "isoformat") else str(value)


def export_records(db_path: str | os.PathLike[str], sink: Sink, *, chunk: int = 500) -> int:
    """Write every record of the DuckDB file at `db_path` to `sink`, session by session (its
    `SessionInfo` as the file holds it; a session with a final status is closed with it), and
    return how many were written. Records the sink already holds (`Sink.existing_ids`) are
    skipped, so exporting twice writes nothing new. The sink's errors propagate."""
    path = Path(db_path)
    written = 0
    for row in list_sessions(path).to_dict("records"):
        records = load_records(path, str(row["session_id"]))
        have = sink.existing_ids([r.record_id for r in records]) if records else set()
        missing = [r for r in records if r.record_id not in have]
        if not missing:
            continue
        sink.open_session(SessionInfo(
            session_id=str(row["session_id"]), started_at=_text(row["started_at"]) or missing[0].created_at,
            host=_text(row["host"]), git_commit=_text(row["git_commit"]), git_branch=_text(row["git_branch"]),
            runner_label=_text(row["runner_label"]), hardware_summary=_text(row["hardware_summary"]),
            package_versions=dict(row["package_versions"] or {}), extra=dict(row["extra"] or {})))
        for start in range(0, len(missing), chunk):
            sink.write(missing[start:start + chunk])
            written += len(missing[start:start + chunk])
        status = _text(row["status"])
        if status:
            sink.close(status)
    return written


__all__ = ["ImportResult", "export_records", "import_mlflow", "import_mlflow_sessions"]
