"""Reading the DuckDB file back: the results as a frame (`load_results`), raw timings
(`load_timings`), sessions with their record counts (`list_sessions`), whole records
(`load_records`), every table as Parquet (`export_parquet`), and a full read that finds a corrupt
block anywhere (`check_readable`).

``duckdb`` and ``pandas`` are imported inside the functions that need them.
"""

from __future__ import annotations

import json
import math
import os
import warnings
from collections.abc import Iterable, Sequence
from pathlib import Path
from typing import TYPE_CHECKING, Any

from pytest_hwbench.record import BenchmarkRecord
from pytest_hwbench.sinks._duckdb_file import read_connection
from pytest_hwbench.sinks._duckdb_schema import RESULT_COLUMNS, SESSION_COLUMNS
from pytest_hwbench.sinks._fields import FIELDS
from pytest_hwbench.vocabulary import normalise_mode

if TYPE_CHECKING:
    import duckdb
    import pandas as pd

def check_readable(path: str | os.PathLike[str]) -> None:
    """Read every row of every table of the DuckDB file at `path`, so that a corrupt block
    anywhere raises `DuckDBFileError` (kind ``corrupt``); a listing of the sessions reads only
    the blocks it needs."""
    with read_connection(path) as con:
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
    with read_connection(path) as con:
        frame = _frame(con, f"SELECT {names} FROM results {where} ORDER BY created_at, record_id", args)
    for name, _ in RESULT_COLUMNS:
        if FIELDS[name].kind == "mapping":  # extra, interference: JSON text in the file
            frame[name] = [_parse_json(v) for v in frame[name]]
    frame["cpu_affinity"] = [() if is_missing(v) else tuple(int(c) for c in v) for v in frame["cpu_affinity"]]
    frame["mode"] = [normalise_mode(v) if isinstance(v, str) else v for v in frame["mode"]]
    return frame


def load_timings(path: str | os.PathLike[str], record_ids: Iterable[str]) -> dict[str, list[float]]:
    """record_id -> raw timings in iteration order, for each of `record_ids` that has any."""
    import pandas as pd

    wanted = list(dict.fromkeys(record_ids))
    if not wanted:
        return {}
    ids = pd.DataFrame({"record_id": pd.array(wanted, dtype=object)})
    with read_connection(path) as con:
        con.register("hwbench_ids_df", ids)
        rows = con.execute(
            "SELECT t.record_id, list(t.ms ORDER BY t.iteration) FROM timings t "
            "JOIN hwbench_ids_df i ON t.record_id = CAST(i.record_id AS VARCHAR) GROUP BY t.record_id"
        ).fetchall()
    return {record_id: [float(v) for v in values] for record_id, values in rows}


def list_sessions(path: str | os.PathLike[str]) -> pd.DataFrame:
    """The ``sessions`` table with a ``records`` count per session, newest first."""
    names = ", ".join(f"s.{name}" for name, _ in SESSION_COLUMNS)
    with read_connection(path) as con:
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
        data = {key: (None if is_missing(value) else value) for key, value in row.items()}
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


def is_missing(value: Any) -> bool:
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
    with read_connection(path) as con:
        for table in ("sessions", "results", "timings"):
            target = out / f"{table}.parquet"
            quoted = str(target).replace("'", "''")
            con.execute(f"COPY (SELECT * FROM {table}) TO '{quoted}' (FORMAT parquet)")
            written.append(target)
    return written


__all__ = [
    "check_readable",
    "export_parquet",
    "is_missing",
    "list_sessions",
    "load_records",
    "load_results",
    "load_timings",
]
