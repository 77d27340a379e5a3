"""DuckDB sink and readers: sessions, results and raw timings in one local file.

Tables (schema version 3):

- ``sessions``: one row per `SessionInfo` (package versions and extra as JSON text), plus the
  final ``status`` and ``ended_at`` set by `DuckDBSink.close`;
- ``results``: one row per record, every `BenchmarkRecord` field except ``timings_ms`` as a typed
  column named as the field (``extra`` as JSON text, ``cpu_affinity`` as INTEGER[]);
- ``timings``: (record_id, iteration, ms), the raw per-iteration timings;
- ``schema_info``: (version, applied_at), one row per applied upgrade step.

DuckDB lets one process hold a file (FACTS.md: a second one gets ``IOException: Could not set
lock``), so the sink connects per call and closes at once: the file is free between batches.
A held file makes `write` raise; the recorder spools the record and `replay` writes it later.
Rows go in as pandas frames (``INSERT ... SELECT ... FROM df``), never row by row (10 s vs 30 ms
for 10,000 rows).

``duckdb`` and ``pandas`` are imported inside the functions that need them.

Length: over 500 lines because the schema, its migrations, the writer and the readers of one
file layout belong together.
"""

from __future__ import annotations

import json
import math
import os
import time
import warnings
from collections.abc import Iterable, Iterator, Sequence
from contextlib import contextmanager, suppress
from pathlib import Path
from typing import TYPE_CHECKING, Any

from pytest_hwbench.record import BenchmarkRecord, SessionInfo
from pytest_hwbench.sinks._fields import FIELDS
from pytest_hwbench.sinks.base import Sink, normalize_status, register_sink
from pytest_hwbench.vocabulary import DEFAULT_STORE_DIR, normalise_mode

if TYPE_CHECKING:
    import duckdb
    import pandas as pd

DEFAULT_PATH = Path(DEFAULT_STORE_DIR) / "hwbench.duckdb"
SCHEMA_VERSION = 3

#: results columns of schema version 1, in order: (name, SQL type). Named as the record fields.
_RESULTS_V1: tuple[tuple[str, str], ...] = (
    ("record_id", "VARCHAR"),
    ("session_id", "VARCHAR"),
    ("case_id", "VARCHAR"),
    ("status", "VARCHAR"),
    ("model", "VARCHAR"),
    ("family", "VARCHAR"),
    ("model_type", "VARCHAR"),
    ("backend", "VARCHAR"),
    ("hardware", "VARCHAR"),
    ("device_name", "VARCHAR"),
    ("precision", "VARCHAR"),
    ("mode", "VARCHAR"),
    ("batch_size", "BIGINT"),
    ("sequence_length", "BIGINT"),
    ("image_size", "BIGINT"),
    ("audio_samples", "BIGINT"),
    ("param_count", "BIGINT"),
    ("flops_per_forward", "DOUBLE"),
    ("threads", "BIGINT"),
    ("latency_ms_mean", "DOUBLE"),
    ("latency_ms_median", "DOUBLE"),
    ("latency_ms_min", "DOUBLE"),
    ("latency_ms_max", "DOUBLE"),
    ("latency_ms_stddev", "DOUBLE"),
    ("latency_ms_iqr", "DOUBLE"),
    ("latency_ms_p90", "DOUBLE"),
    ("latency_ms_p95", "DOUBLE"),
    ("latency_ms_p99", "DOUBLE"),
    ("iterations", "BIGINT"),
    ("throughput_items_per_s", "DOUBLE"),
    ("load_time_s", "DOUBLE"),
    ("cold_latency_ms", "DOUBLE"),
    ("peak_host_rss_mb", "DOUBLE"),
    ("peak_device_memory_mb", "DOUBLE"),
    ("achieved_tflops", "DOUBLE"),
    ("error", "VARCHAR"),
    ("nodeid", "VARCHAR"),
    ("host", "VARCHAR"),
    ("worker", "VARCHAR"),
    ("cpu_affinity", "INTEGER[]"),
    ("extra", "VARCHAR"),
    ("created_at", "TIMESTAMPTZ"),
    ("schema_version", "INTEGER"),
)

_SESSIONS_V1: tuple[tuple[str, str], ...] = (
    ("session_id", "VARCHAR"),
    ("started_at", "TIMESTAMPTZ"),
    ("host", "VARCHAR"),
    ("git_commit", "VARCHAR"),
    ("git_branch", "VARCHAR"),
    ("runner_label", "VARCHAR"),
    ("hardware_summary", "VARCHAR"),
    ("package_versions", "VARCHAR"),
    ("extra", "VARCHAR"),
    ("status", "VARCHAR"),
    ("ended_at", "TIMESTAMPTZ"),
)


def _create(table: str, columns: tuple[tuple[str, str], ...], key: str | None) -> str:
    cols = ",\n    ".join(f"{name} {sql}{' PRIMARY KEY' if name == key else ''}" for name, sql in columns)
    return f"CREATE TABLE IF NOT EXISTS {table} (\n    {cols}\n)"


#: results columns added by schema version 2 (generate mode, compiled backends, energy).
_RESULTS_V2_ADDED: tuple[tuple[str, str], ...] = (
    ("new_tokens", "BIGINT"),
    ("compile_time_s", "DOUBLE"),
    ("ttft_ms", "DOUBLE"),
    ("decode_ms_per_token", "DOUBLE"),
    ("tokens_per_s", "DOUBLE"),
    ("energy_j_per_item", "DOUBLE"),
    ("avg_power_w", "DOUBLE"),
)

#: results columns added by schema version 3 (the interference verdict and its readings).
_RESULTS_V3_ADDED: tuple[tuple[str, str], ...] = (
    ("noise", "VARCHAR"),
    ("noise_reason", "VARCHAR"),
    ("tries", "BIGINT"),
    ("interference", "VARCHAR"),
)

#: version -> SQL steps that bring the previous version to it. Add a version, never edit one.
UPGRADES: dict[int, tuple[str, ...]] = {
    1: (
        _create("sessions", _SESSIONS_V1, "session_id"),
        _create("results", _RESULTS_V1, "record_id"),
        "CREATE TABLE IF NOT EXISTS timings (record_id VARCHAR NOT NULL, iteration INTEGER NOT NULL, ms DOUBLE)",
    ),
    2: tuple(f"ALTER TABLE results ADD COLUMN IF NOT EXISTS {name} {sql}" for name, sql in _RESULTS_V2_ADDED),
    3: tuple(f"ALTER TABLE results ADD COLUMN IF NOT EXISTS {name} {sql}" for name, sql in _RESULTS_V3_ADDED),
}

#: Current columns (v1 plus later additions, which go here and into UPGRADES together).
RESULT_COLUMNS: tuple[tuple[str, str], ...] = _RESULTS_V1 + _RESULTS_V2_ADDED + _RESULTS_V3_ADDED
SESSION_COLUMNS: tuple[tuple[str, str], ...] = _SESSIONS_V1


def _schema_version(con: duckdb.DuckDBPyConnection) -> int:
    # fetchall, not fetchone: DuckDB 2 refuses register() while a result is unfinished.
    exists = con.execute(
        "SELECT count(*) FROM information_schema.tables WHERE table_name = 'schema_info'"
    ).fetchall()
    if not exists[0][0]:
        return 0
    rows = con.execute("SELECT max(version) FROM schema_info").fetchall()
    return int(rows[0][0]) if rows[0][0] is not None else 0


def _rollback(con: duckdb.DuckDBPyConnection) -> None:
    """Roll back the open transaction, if DuckDB has not already ended it: a failed write (a full
    disk) aborts it, and a second error from ``ROLLBACK`` would hide the one that says why."""
    import duckdb

    with suppress(duckdb.TransactionException):
        con.execute("ROLLBACK")


def upgrade(con: duckdb.DuckDBPyConnection, path: str | os.PathLike[str] = "<connection>") -> int:
    """Bring the database on `con` to `SCHEMA_VERSION` (in one transaction); return the version.

    Raises RuntimeError if the file was written by a newer hwbench (its version is higher).
    """
    current = _schema_version(con)
    if current > SCHEMA_VERSION:
        raise RuntimeError(
            f"{path} has hwbench DuckDB schema version {current}, newer than this hwbench "
            f"understands ({SCHEMA_VERSION}); upgrade pytest-hwbench or use another --hwbench-db"
        )
    if current == SCHEMA_VERSION:
        return current
    con.execute("BEGIN TRANSACTION")
    try:
        con.execute(
            "CREATE TABLE IF NOT EXISTS schema_info (version INTEGER NOT NULL, applied_at TIMESTAMPTZ)"
        )
        for version in range(current + 1, SCHEMA_VERSION + 1):
            for statement in UPGRADES[version]:
                con.execute(statement)
            con.execute("INSERT INTO schema_info VALUES (?, now())", [version])
        con.execute("COMMIT")
    except BaseException:
        _rollback(con)
        raise
    return SCHEMA_VERSION


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
        if kind == "int":
            data[name] = pd.array([None if v is None else int(v) for v in values], dtype="Int64")
        elif kind == "float":
            data[name] = pd.array([None if v is None else float(v) for v in values], dtype="Float64")
        elif kind in ("int_tuple", "float_tuple"):
            data[name] = pd.array([json.dumps(list(v)) for v in values], dtype=object)
        elif kind == "mapping":
            data[name] = pd.array(
                [json.dumps(dict(v), sort_keys=True, default=str) for v in values], dtype=object
            )
        else:
            data[name] = pd.array([None if v is None else str(v) for v in values], dtype=object)
    return pd.DataFrame(data)


def _timings_frame(records: Sequence[BenchmarkRecord]) -> pd.DataFrame:
    import numpy as np
    import pandas as pd

    ids: list[str] = []
    iterations: list[np.ndarray] = []
    for record in records:
        ids.extend([record.record_id] * len(record.timings_ms))
        iterations.append(np.arange(len(record.timings_ms), dtype=np.int32))
    return pd.DataFrame(
        {
            "record_id": pd.array(ids, dtype=object),
            "iteration": np.concatenate(iterations) if iterations else np.array([], dtype=np.int32),
            "ms": np.fromiter((t for r in records for t in r.timings_ms), dtype=np.float64),
        }
    )


def _sessions_frame(session: SessionInfo) -> pd.DataFrame:
    import pandas as pd

    row = {
        "session_id": session.session_id,
        "started_at": session.started_at or None,
        "host": session.host,
        "git_commit": session.git_commit,
        "git_branch": session.git_branch,
        "runner_label": session.runner_label,
        "hardware_summary": session.hardware_summary,
        "package_versions": json.dumps(dict(session.package_versions), sort_keys=True),
        "extra": json.dumps(dict(session.extra), sort_keys=True, default=str),
        "status": None,
        "ended_at": None,
    }
    return pd.DataFrame({key: pd.array([value], dtype=object) for key, value in row.items()})


def _default_path(path: str | os.PathLike[str] | None) -> Path:
    return Path(path if path is not None else DEFAULT_PATH).expanduser().resolve()


#: How long opening a file another process holds is retried before giving up (two runs starting together collide on locks held for milliseconds; a real holder outlasts it).
LOCK_WAIT_S = 2.0
_CORRUPT_SIGNS = ("not a valid duckdb database file", "corrupt", "checksum", "serialization error",
                  "failed to load metadata", "internal error",
                  # a file cut short (a full disk, a copy interrupted): its blocks end early
                  "could not read enough bytes", "truncated")


class DuckDBFileError(RuntimeError):
    """The DuckDB file cannot be used. `kind` is ``locked`` (another process holds it: wait and
    run again) or ``corrupt`` (move it aside and rebuild it from the spool with `hwbench replay`);
    the message says which, and what to do."""

    def __init__(self, path: Path, kind: str, cause: BaseException) -> None:
        self.path, self.kind = path, kind
        detail = f"{type(cause).__name__}: {cause}".strip()
        if kind == "locked":
            message = (f"DuckDB file {path} is locked by another process ({detail}); nothing is lost: "
                       "run again once that process has finished or closed the file")
        else:
            message = (f"DuckDB file {path} is corrupt ({detail}); move it aside and rebuild it from the "
                       f"spool: hwbench replay --store STORE --db {path} --sinks duckdb --move-corrupt "
                       "(or `hwbench import-mlflow` from the MLflow store)")
        super().__init__(message)


def classify_error(exc: BaseException, path: Path) -> DuckDBFileError | None:
    """`exc` as a `DuckDBFileError` when it says the file at `path` is locked or corrupt, else None."""
    import duckdb

    if isinstance(exc, DuckDBFileError):
        return exc
    if not isinstance(exc, duckdb.Error):
        return None
    text = str(exc).lower()
    if isinstance(exc, duckdb.IOException) and "lock" in text:
        return DuckDBFileError(path, "locked", exc)
    if any(sign in text for sign in _CORRUPT_SIGNS):
        return DuckDBFileError(path, "corrupt", exc)
    return None


def _open(path: Path, **kwargs: Any) -> duckdb.DuckDBPyConnection:
    """`duckdb.connect(path)`, retrying a lock for up to `LOCK_WAIT_S` seconds; a file that stays
    locked, or is corrupt, raises `DuckDBFileError`."""
    import duckdb

    deadline = time.monotonic() + LOCK_WAIT_S
    pause = 0.01
    while True:
        try:
            return duckdb.connect(str(path), **kwargs)
        except duckdb.Error as exc:
            problem = classify_error(exc, path)
            if problem is None:
                raise
            if problem.kind != "locked" or time.monotonic() + pause > deadline:
                raise problem from None
        time.sleep(pause)
        pause = min(pause * 2, 0.2)


class DuckDBSink(Sink):
    """Writes sessions, results and timings to the DuckDB file at `path`.

    The file (and its directory) is created on first use, at the current schema version; an
    older file is upgraded. No connection is held between calls.
    """

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
        """A connection at the current schema, closed on exit (duckdb.IOException if held)."""
        import duckdb

        self.path.parent.mkdir(parents=True, exist_ok=True)
        # One thread: these are tiny inserts, and idle worker threads are one more thing running
        # next to the benchmark.
        con = _open(self.path, config={"threads": 1})
        try:
            if not self._ready:
                upgrade(con, self.path)
                self._ready = True
            yield con
        except duckdb.Error as exc:
            problem = classify_error(exc, self.path)
            if problem is None:
                raise
            raise problem from None
        finally:
            con.close()

    def open_session(self, session: SessionInfo) -> None:
        """Insert the session row (kept as is if the session is already there, e.g. on replay)."""
        frame = _sessions_frame(session)
        names = ", ".join(name for name, _ in SESSION_COLUMNS)
        with self._connect() as con:
            con.register("hwbench_sessions_df", frame)
            con.execute(
                f"INSERT OR IGNORE INTO sessions ({names}) SELECT {_cast_list(SESSION_COLUMNS)} FROM hwbench_sessions_df"
            )
        self._session_id = session.session_id

    def write(self, records: Sequence[BenchmarkRecord]) -> None:
        """Insert results and timings of `records` in one transaction; ids already stored are skipped."""
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
                con.execute(
                    "INSERT INTO timings SELECT CAST(record_id AS VARCHAR), CAST(iteration AS INTEGER), "
                    "CAST(ms AS DOUBLE) FROM hwbench_timings_df "
                    "WHERE record_id NOT IN (SELECT record_id FROM results)"
                )
                con.execute(
                    f"INSERT OR IGNORE INTO results ({names}) SELECT {_cast_list(RESULT_COLUMNS)} FROM hwbench_results_df"
                )
                con.execute("COMMIT")
            except BaseException:
                _rollback(con)
                raise

    def read_sessions(self) -> list[tuple[SessionInfo, str]]:
        """(session, status) for every session in the file; ``running`` for one without a status."""
        if not self.path.exists():
            return []
        out = []
        for row in list_sessions(self.path).to_dict("records"):
            text = {name: ("" if _is_missing(row[name]) else row[name]) for name, _ in SESSION_COLUMNS}
            started = text["started_at"]
            out.append((SessionInfo(
                session_id=str(row["session_id"]),
                started_at=started.isoformat() if hasattr(started, "isoformat") else str(started),
                host=str(text["host"]), git_commit=str(text["git_commit"]), git_branch=str(text["git_branch"]),
                runner_label=str(text["runner_label"]), hardware_summary=str(text["hardware_summary"]),
                package_versions=dict(row["package_versions"] or {}), extra=dict(row["extra"] or {})),
                str(text["status"]) or "running"))
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
        import pandas as pd

        wanted = list(dict.fromkeys(record_ids))
        if not wanted or not self.path.exists():
            return set()
        frame = pd.DataFrame({"record_id": pd.array(wanted, dtype=object)})
        with self._connect() as con:
            con.register("hwbench_ids_df", frame)
            rows = con.execute(
                "SELECT r.record_id FROM results r JOIN hwbench_ids_df i ON r.record_id = CAST(i.record_id AS VARCHAR)"
            ).fetchall()
        return {row[0] for row in rows}

    def close(self, status: str) -> None:
        """Set the open session's final status and end time; no-op without an open session."""
        if self._session_id is None:
            return
        canonical = normalize_status(status)
        session_id, self._session_id = self._session_id, None
        with self._connect() as con:
            con.execute(
                "UPDATE sessions SET status = ?, ended_at = now() WHERE session_id = ?",
                [canonical, session_id],
            )


# -- readers ---------------------------------------------------------------------------------
@contextmanager
def _read(path: str | os.PathLike[str]) -> Iterator[duckdb.DuckDBPyConnection]:
    import duckdb

    file = Path(path).expanduser()
    if not file.exists():
        raise FileNotFoundError(
            f"no hwbench DuckDB file at {file}; run benchmarks with --hwbench-db {file} first"
        )
    con = _open(file, read_only=True)
    try:
        version = _schema_version(con)
        if 0 < version < SCHEMA_VERSION:
            # An older file: upgrade it in place (adds columns only), then read it.
            con.close()
            with _open(file) as writer:
                upgrade(writer, file)
            con = _open(file, read_only=True)
            version = _schema_version(con)
        if version != SCHEMA_VERSION:
            raise RuntimeError(
                f"{file} has hwbench DuckDB schema version {version}, this hwbench reads {SCHEMA_VERSION}; "
                "open it once with DuckDBSink (which upgrades it) or use a matching pytest-hwbench"
            )
        yield con
    except duckdb.Error as exc:  # a corrupt block shows when a query reads it
        problem = classify_error(exc, file)
        if problem is None:
            raise
        raise problem from None
    finally:
        con.close()


def check_readable(path: str | os.PathLike[str]) -> None:
    """Read every row of every table of the DuckDB file at `path`, so that a corrupt block
    anywhere raises `DuckDBFileError` (kind ``corrupt``); a listing of the sessions reads only
    the blocks it needs."""
    with _read(path) as con:
        for (table,) in con.execute("SELECT table_name FROM duckdb_tables()").fetchall():
            cursor = con.execute(f'SELECT * FROM "{table}"')
            while cursor.fetchmany(10_000):
                pass


def _frame(con: duckdb.DuckDBPyConnection, sql: str, args: Sequence[Any] = ()) -> pd.DataFrame:
    """Run `sql` and return a DataFrame."""
    with warnings.catch_warnings():
        # duckdb 2.0's DataFrame conversion calls drop(inplace=True), which pandas 3.1 deprecates;
        # not ours to fix, and not worth a warning per query for our users.
        warnings.filterwarnings("ignore", message="The inplace keyword", category=Warning)
        return con.execute(sql, list(args)).df()


def _parse_json(text: Any) -> Any:
    if text is None or (isinstance(text, float) and text != text):
        return {}
    try:
        return json.loads(text)
    except (TypeError, ValueError):
        return {}


def load_results(path: str | os.PathLike[str], session_id: str | None = None) -> pd.DataFrame:
    """The ``results`` table (optionally one session's rows), ordered by created_at.

    Columns are named as the record fields; ``extra`` is parsed back into dicts and
    ``cpu_affinity`` into tuples.
    """
    where, args = ("WHERE session_id = ?", [session_id]) if session_id is not None else ("", [])
    names = ", ".join(name for name, _ in RESULT_COLUMNS)
    with _read(path) as con:
        frame = _frame(con, f"SELECT {names} FROM results {where} ORDER BY created_at, record_id", args)
    for name, _ in RESULT_COLUMNS:
        if FIELDS[name].kind == "mapping":  # extra, interference: JSON text in the file
            frame[name] = [_parse_json(v) for v in frame[name]]
    frame["cpu_affinity"] = [() if _is_missing(v) else tuple(int(c) for c in v) for v in frame["cpu_affinity"]]
    frame["mode"] = [normalise_mode(v) if isinstance(v, str) else v for v in frame["mode"]]
    return frame


def load_timings(path: str | os.PathLike[str], record_ids: Iterable[str]) -> dict[str, list[float]]:
    """record_id -> raw timings in iteration order, for each of `record_ids` that has any."""
    import pandas as pd

    wanted = list(dict.fromkeys(record_ids))
    if not wanted:
        return {}
    ids = pd.DataFrame({"record_id": pd.array(wanted, dtype=object)})
    with _read(path) as con:
        con.register("hwbench_ids_df", ids)
        rows = con.execute(
            "SELECT t.record_id, list(t.ms ORDER BY t.iteration) FROM timings t "
            "JOIN hwbench_ids_df i ON t.record_id = CAST(i.record_id AS VARCHAR) GROUP BY t.record_id"
        ).fetchall()
    return {record_id: [float(v) for v in values] for record_id, values in rows}


def list_sessions(path: str | os.PathLike[str]) -> pd.DataFrame:
    """The ``sessions`` table with a ``records`` count per session, newest first."""
    names = ", ".join(f"s.{name}" for name, _ in SESSION_COLUMNS)
    with _read(path) as con:
        frame = _frame(
            con,
            f"SELECT {names}, count(r.record_id) AS records FROM sessions s "
            "LEFT JOIN results r ON r.session_id = s.session_id "
            "GROUP BY ALL ORDER BY s.started_at DESC NULLS LAST, s.session_id",
        )
    frame["package_versions"] = [_parse_json(v) for v in frame["package_versions"]]
    frame["extra"] = [_parse_json(v) for v in frame["extra"]]
    return frame


def load_records(path: str | os.PathLike[str], session_id: str | None = None) -> list[BenchmarkRecord]:
    """Rebuild `BenchmarkRecord`s (with timings) from the file."""
    import pandas as pd

    frame = load_results(path, session_id)
    timings = load_timings(path, frame["record_id"])
    records: list[BenchmarkRecord] = []
    for row in frame.to_dict("records"):
        data = {key: (None if _is_missing(value) else value) for key, value in row.items()}
        stamp = data.get("created_at")
        data["created_at"] = stamp.isoformat() if isinstance(stamp, pd.Timestamp) else (stamp or "")
        for name, value in list(data.items()):
            if value is not None and FIELDS[name].kind == "int":
                data[name] = int(value)
            elif value is not None and FIELDS[name].kind == "float":
                data[name] = float(value)
        data["extra"] = data.get("extra") or {}
        data["interference"] = data.get("interference") or {}
        data["noise_reason"] = data.get("noise_reason") or ""
        data["timings_ms"] = timings.get(data["record_id"], [])
        records.append(BenchmarkRecord.from_dict(data))
    return records


def _is_missing(value: Any) -> bool:
    """None, NaN, pandas NA or NaT (what a NULL cell becomes in a frame)."""
    import pandas as pd

    if value is None or value is pd.NA or value is pd.NaT:
        return True
    return isinstance(value, float) and math.isnan(value)


def export_parquet(path: str | os.PathLike[str], out_dir: str | os.PathLike[str]) -> list[Path]:
    """Write ``sessions``, ``results`` and ``timings`` as ``<out_dir>/<table>.parquet``; return the paths."""
    out = Path(out_dir).expanduser().resolve()
    out.mkdir(parents=True, exist_ok=True)
    written: list[Path] = []
    with _read(path) as con:
        for table in ("sessions", "results", "timings"):
            target = out / f"{table}.parquet"
            quoted = str(target).replace("'", "''")
            con.execute(f"COPY (SELECT * FROM {table}) TO '{quoted}' (FORMAT parquet)")
            written.append(target)
    return written


def _factory(target: str | None, /, **options: Any) -> DuckDBSink:
    if target is not None and target.startswith("//"):
        target = target[2:]  # duckdb:///abs/path -> /abs/path
    return DuckDBSink(target, **options)


def _reader(target: str | None, /, **options: Any) -> list[BenchmarkRecord]:
    if target is not None and target.startswith("//"):
        target = target[2:]
    return load_records(_default_path(target), options.get("session_id"))


register_sink("duckdb", _factory, suffixes=(".duckdb", ".ddb"), reader=_reader)

__all__ = [
    "LOCK_WAIT_S",
    "SCHEMA_VERSION",
    "UPGRADES",
    "DuckDBFileError",
    "DuckDBSink",
    "classify_error",
    "export_parquet",
    "list_sessions",
    "load_records",
    "load_results",
    "load_timings",
    "upgrade",
]
