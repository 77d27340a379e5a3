"""DuckDB sink: sessions, results and raw timings in one local file, in the tables that
`_duckdb_schema` describes, connected per call so the file is free between batches (a held file
makes `write` raise; the record stays spooled). Imports ``duckdb`` and ``pandas`` lazily."""

from __future__ import annotations

import json
import os
from collections.abc import Callable, Iterable, Iterator, Sequence
from contextlib import contextmanager
from pathlib import Path
from typing import TYPE_CHECKING, Any

from pytest_hwbench.record import BenchmarkRecord, SessionInfo
from pytest_hwbench.sinks._duckdb_file import checked
from pytest_hwbench.sinks._duckdb_read import is_missing, list_sessions, load_records
from pytest_hwbench.sinks._duckdb_schema import RESULT_COLUMNS, SESSION_COLUMNS, rollback, rounds_of, upgrade
from pytest_hwbench.sinks._fields import FIELDS, SESSION_TEXT, to_text
from pytest_hwbench.sinks.base import SessionSource, Sink, normalize_status, open_sink, register_sink
from pytest_hwbench.sinks.transfer import ImportResult, copy_sessions
from pytest_hwbench.vocabulary import DEFAULT_STORE_DIR

if TYPE_CHECKING:
    import duckdb
    import pandas as pd

DEFAULT_PATH = Path(DEFAULT_STORE_DIR) / "hwbench.duckdb"


def _cast_list(columns: tuple[tuple[str, str], ...]) -> str:
    # TRY_CAST for timestamps: an odd created_at becomes NULL instead of blocking the batch
    # (and with it every later replay) forever.
    return ", ".join(
        f"{'TRY_CAST' if sql == 'TIMESTAMPTZ' else 'CAST'}({name} AS {sql}) AS {name}"
        for name, sql in columns
    )


def _results_frame(records: Sequence[BenchmarkRecord]) -> pd.DataFrame:
    import pandas as pd

    data: dict[str, Any] = {}
    for name, _ in RESULT_COLUMNS:
        values = [getattr(record, name) for record in records]
        kind = FIELDS[name].kind
        if kind in ("int", "float"):
            cast, dtype = (int, "Int64") if kind == "int" else (float, "Float64")
            data[name] = pd.array([None if v is None else cast(v) for v in values], dtype=dtype)
        else:  # text; tuples and mappings as JSON text
            data[name] = pd.array([None if v is None else to_text(name, v) for v in values], dtype=object)
    return pd.DataFrame(data)


def _timings_frame(records: Sequence[BenchmarkRecord]) -> pd.DataFrame:
    import numpy as np
    import pandas as pd

    return pd.DataFrame(
        {
            "record_id": pd.array([r.record_id for r in records for _ in r.timings_ms], dtype=object),
            "iteration": np.fromiter((i for r in records for i in range(len(r.timings_ms))), dtype=np.int32),
            "ms": np.fromiter((t for r in records for t in r.timings_ms), dtype=np.float64),
        }
    )


def _sessions_frame(session: SessionInfo) -> pd.DataFrame:
    import pandas as pd

    row = {**session.to_dict(), "started_at": session.started_at or None,
           "package_versions": json.dumps(dict(session.package_versions), sort_keys=True),
           "extra": json.dumps(dict(session.extra), sort_keys=True, default=str), "status": None, "ended_at": None}
    return pd.DataFrame({key: pd.array([value], dtype=object) for key, value in row.items()})


def _default_path(path: str | os.PathLike[str] | None) -> Path:
    if isinstance(path, str) and path.startswith("//"):
        path = path[2:]  # duckdb:///abs/path -> /abs/path
    return Path(path if path is not None else DEFAULT_PATH).expanduser().resolve()


class DuckDBSink(Sink):
    """Writes sessions, results and timings to the DuckDB file at `path`, created (with its folder)
    on first use at the current schema version; an older file is upgraded. No connection is held
    between calls."""

    name = "duckdb"

    def __init__(self, path: str | os.PathLike[str] | None = None) -> None:
        self.path = _default_path(path)
        self._ready = False
        self._session_id: str | None = None

    def __repr__(self) -> str:
        return f"DuckDBSink({str(self.path)!r})"

    def where(self) -> str:
        return str(self.path)

    @contextmanager
    def _connect(self) -> Iterator[duckdb.DuckDBPyConnection]:
        """A connection at the current schema, closed on exit (`_duckdb_file.checked`)."""
        self.path.parent.mkdir(parents=True, exist_ok=True)
        # One thread: these are tiny inserts, and idle worker threads are one more thing running
        # next to the benchmark.
        with checked(self.path, config={"threads": 1}) as con:
            if not self._ready:
                upgrade(con, self.path)
                self._ready = True
            yield con

    def open_session(self, session: SessionInfo) -> None:
        """Insert the session row (kept as is if the session is already there, e.g. on replay)."""
        frame = _sessions_frame(session)
        names = ", ".join(name for name, _ in SESSION_COLUMNS)
        with self._connect() as con:
            con.register("hwbench_sessions_df", frame)
            con.execute(f"INSERT OR IGNORE INTO sessions ({names}) SELECT {_cast_list(SESSION_COLUMNS)} "
                        "FROM hwbench_sessions_df")
        self._session_id = session.session_id

    def write(self, records: Sequence[BenchmarkRecord]) -> None:
        """Insert results, timings and rounds of `records` in one transaction; ids already stored are skipped."""
        if not records:
            return
        results = _results_frame(records)
        timings = _timings_frame(records)
        names = ", ".join(name for name, _ in RESULT_COLUMNS)
        with self._connect() as con:
            con.register("hwbench_results_df", results)
            con.register("hwbench_timings_df", timings)
            con.execute("BEGIN TRANSACTION")
            try:
                # Timings first, filtered by what results already hold, so a repeated write
                # neither duplicates timings nor trips the primary key.
                con.execute("INSERT INTO timings SELECT CAST(record_id AS VARCHAR), CAST(iteration AS INTEGER), "
                            "CAST(ms AS DOUBLE) FROM hwbench_timings_df WHERE record_id NOT IN "
                            "(SELECT record_id FROM results)")
                con.execute("INSERT INTO rounds " + rounds_of(
                    "hwbench_timings_df", "CAST(record_id AS VARCHAR) NOT IN (SELECT record_id FROM results)"))
                con.execute(f"INSERT OR IGNORE INTO results ({names}) SELECT {_cast_list(RESULT_COLUMNS)} "
                            "FROM hwbench_results_df")
                con.execute("COMMIT")
            except BaseException:
                rollback(con)
                raise

    def read_sessions(self) -> list[tuple[SessionInfo, str]]:
        """(session, status) for every session in the file; ``running`` for one without a status."""
        if not self.path.exists():
            return []
        out = []
        for row in list_sessions(self.path).to_dict("records"):
            text = {name: ("" if is_missing(row[name]) else row[name]) for name, _ in SESSION_COLUMNS}
            started = text["started_at"]
            text["started_at"] = started.isoformat() if hasattr(started, "isoformat") else str(started)
            fields = {name: str(text[name]) for name in SESSION_TEXT}
            out.append((SessionInfo(**fields, package_versions=dict(row["package_versions"] or {}),
                                    extra=dict(row["extra"] or {})), str(text["status"]) or "running"))
        return out

    def read_records(self, *, with_timings: bool = True,
                     session_ids: Iterable[str] | None = None) -> list[BenchmarkRecord]:
        """The file's records (with timings), of `session_ids` only where given."""
        if not self.path.exists():
            return []
        if session_ids is None:
            return load_records(self.path)
        return [r for sid in dict.fromkeys(session_ids) for r in load_records(self.path, sid)]

    def existing_ids(self, record_ids: Iterable[str]) -> set[str]:
        """Which of `record_ids` are in ``results`` (empty if the file does not exist yet)."""
        wanted = list(dict.fromkeys(record_ids))
        if not wanted or not self.path.exists():
            return set()
        with self._connect() as con:
            rows = con.execute("SELECT record_id FROM results JOIN (SELECT unnest(?::VARCHAR[]) AS record_id) "
                               "USING (record_id)", [wanted]).fetchall()
        return {row[0] for row in rows}

    def close(self, status: str) -> None:
        """Set the open session's final status and end time; no-op without an open session."""
        if self._session_id is None:
            return
        canonical = normalize_status(status)
        session_id, self._session_id = self._session_id, None
        with self._connect() as con:
            con.execute("UPDATE sessions SET status = ?, ended_at = now() WHERE session_id = ?",
                        [canonical, session_id])


def _reader(target: str | None, /, **options: Any) -> list[BenchmarkRecord]:
    return load_records(_default_path(target), options.get("session_id"))


register_sink("duckdb", DuckDBSink, suffixes=(".duckdb", ".ddb"), reader=_reader)

# -- a DuckDB file as the mirror of other stores ----------------------------------------------
def import_mlflow_sessions(tracking_uri: str | None, experiment: str, db_path: str | os.PathLike[str], *,
                           full: bool = False,
                           notify: Callable[[str], None] | None = None) -> ImportResult:
    """Bring the DuckDB file at `db_path` up to date with an MLflow experiment: `copy_sessions`
    between the registered ``mlflow`` and ``duckdb`` sinks (raw timings from the parent runs'
    records artifacts where present)."""
    source = open_sink(f"mlflow:{tracking_uri}" if tracking_uri else "mlflow", experiment=experiment)
    if not isinstance(source, SessionSource):
        raise TypeError(f"the registered mlflow sink ({type(source).__name__}) cannot list its sessions")
    return copy_sessions(source, open_sink(f"duckdb:{os.fspath(db_path)}"), full=full, notify=notify,
                         names=("MLflow", Path(db_path).name))


__all__ = ["DEFAULT_PATH", "DuckDBSink", "import_mlflow_sessions"]
