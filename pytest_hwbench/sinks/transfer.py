"""Copying a store into another: an MLflow experiment into a DuckDB file (`hwbench import-mlflow`).

A feature of its own that uses two sinks, so neither sink module imports the other.
"""

from __future__ import annotations

import os

from pytest_hwbench.record import BenchmarkRecord, SessionInfo
from pytest_hwbench.sinks.duckdb_sink import DuckDBSink
from pytest_hwbench.sinks.mlflow_sink import MlflowSink


def import_mlflow(tracking_uri: str | None, experiment: str, db_path: str | os.PathLike[str]) -> int:
    """Rebuild sessions and results in `db_path` from an MLflow experiment; return records added.

    Child runs give the results (params cast back from text, metrics, context tags); parent runs
    give the sessions; raw timings come from the parents' records artifacts where present.
    Records already in the file are skipped, so importing twice adds nothing.
    """
    source = MlflowSink(tracking_uri, experiment)
    sessions = source.read_sessions()
    records = source.read_records()
    sink = DuckDBSink(db_path)
    have = sink.existing_ids(r.record_id for r in records)
    new = [r for r in records if r.record_id not in have]
    by_session: dict[str, list[BenchmarkRecord]] = {}
    for record in new:
        by_session.setdefault(record.session_id, []).append(record)
    known = {info.session_id: (info, status) for info, status in sessions}
    for session_id in dict.fromkeys([*known, *by_session]):
        info, status = known.get(session_id, (None, "finished"))
        if info is None:
            first = by_session[session_id][0]
            info = SessionInfo(session_id=session_id, started_at=first.created_at, host=first.host)
        sink.open_session(info)
        sink.write(by_session.get(session_id, []))
        if status != "running":  # a session still running in MLflow keeps no status here either
            sink.close(status)
    return len(new)


__all__ = ["import_mlflow"]
