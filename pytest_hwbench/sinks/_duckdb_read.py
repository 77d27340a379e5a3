"""Reading the DuckDB file back: results as a frame, raw timings, sessions, whole records, what a
comparison needs of each case, every table as Parquet. Imports ``duckdb`` and ``pandas`` lazily."""

from __future__ import annotations

import math
import os
import warnings
from collections.abc import Iterable, Sequence
from pathlib import Path
from typing import TYPE_CHECKING, Any

from pytest_hwbench.record import BenchmarkRecord
from pytest_hwbench.sinks._duckdb_file import read_connection
from pytest_hwbench.sinks._duckdb_schema import RESULT_COLUMNS, SESSION_COLUMNS
from pytest_hwbench.sinks._fields import FIELDS, parse_json
from pytest_hwbench.vocabulary import normalise_mode

if TYPE_CHECKING:
    import duckdb
    import pandas as pd

def check_readable(path: str | os.PathLike[str]) -> None:
    """Read every row of every table of the DuckDB file at `path`, so that a corrupt block
    anywhere raises `DuckDBFileError` (kind ``corrupt``)."""
    with read_connection(path) as con:
        for (table,) in con.execute("SELECT table_name FROM duckdb_tables()").fetchall():
            cursor = con.execute(f'SELECT * FROM "{table}"')
            while cursor.fetchmany(10_000):
                pass


#: Vectors (2,048 rows each) of an answer that `_frame` converts to pandas at a time.
FRAME_VECTORS = 8


def _frame(con: duckdb.DuckDBPyConnection, sql: str, args: Sequence[Any] = ()) -> pd.DataFrame:
    """Run `sql` and return a DataFrame, converted `FRAME_VECTORS` vectors at a time and then
    joined: converting a large answer at once holds each of its texts as a Python object too,
    twice the memory of the frame."""
    import pandas as pd

    with warnings.catch_warnings():
        # duckdb 2.0's DataFrame conversion calls drop(inplace=True), which pandas 3.1 deprecates;
        # not ours to fix, and not worth a warning per query for our users.
        warnings.filterwarnings("ignore", message="The inplace keyword", category=Warning)
        cursor = con.execute(sql, list(args))
        parts = [cursor.fetch_df_chunk(FRAME_VECTORS)]
        while not parts[-1].empty:
            parts.append(cursor.fetch_df_chunk(FRAME_VECTORS))
    if len(parts) <= 2:  # one part, or only the empty end (which keeps the columns)
        return parts[0]
    return pd.concat(parts[:-1], ignore_index=True)


def load_results(path: str | os.PathLike[str], session_id: str | None = None, *,
                 columns: Sequence[str] | None = None, categorical: bool = False) -> pd.DataFrame:
    """The ``results`` table (optionally one session's rows) ordered by created_at, its columns
    (only `columns` where given) read as the record fields (`typed_results`). `categorical`: text
    columns as pandas categoricals (a year of nights repeats a few hundred texts, which a
    categorical holds once) and integer columns as nullable ``Int64``."""
    known = [name for name, _ in RESULT_COLUMNS]
    if columns is not None:
        unknown = [name for name in columns if name not in known]
        if unknown:
            raise ValueError(f"columns {', '.join(map(repr, unknown))} are not results columns; known: {', '.join(known)}")
    chosen = known if columns is None else list(dict.fromkeys(columns))
    where, args = ("WHERE session_id = ?", [session_id]) if session_id is not None else ("", [])
    with read_connection(path) as con:
        if categorical:
            frame = _categorical_frame(con, chosen, where, args)
        else:
            frame = _frame(con, f"SELECT {', '.join(chosen)} FROM results {where} ORDER BY {', '.join(_RESULTS_ORDER)}", args)
    return typed_results(frame)


#: The columns `load_results` orders its rows by.
_RESULTS_ORDER: tuple[str, ...] = ("created_at", "record_id")


def _categorical_frame(con: duckdb.DuckDBPyConnection, columns: list[str], where: str,
                       args: Sequence[Any]) -> pd.DataFrame:
    """`columns` of the ``results`` rows that `where` keeps, in `_RESULTS_ORDER`, text columns as
    categoricals: read as Arrow `FRAME_VECTORS` vectors at a time, each text column dictionary-
    encoded as it arrives, then sorted in Arrow (a sort in the file holds every text of every row)."""
    import pandas as pd
    import pyarrow as pa
    import pyarrow.compute as pc

    keys = _RESULTS_ORDER
    selected = list(dict.fromkeys([*columns, *keys]))
    reader = con.sql(f"SELECT {', '.join(selected)} FROM results {where}", params=list(args)).to_arrow_reader(
        FRAME_VECTORS * 2048)
    batches = []
    for batch in reader:
        arrays = [pc.dictionary_encode(array) if pa.types.is_string(array.type) and name not in keys else array
                  for name, array in zip(batch.schema.names, batch.columns, strict=True)]
        batches.append(pa.RecordBatch.from_arrays(arrays, names=batch.schema.names))
    table = pa.Table.from_batches(batches) if batches else reader.schema.empty_table()
    del batches
    table = table.unify_dictionaries().sort_by([(key, "ascending") for key in keys]).select(columns)
    integers = {t: pd.Int64Dtype() for t in (pa.int8(), pa.int16(), pa.int32(), pa.int64())}
    return table.to_pandas(types_mapper=integers.get)


def typed_results(frame: pd.DataFrame) -> pd.DataFrame:
    """`frame` (rows of the ``results`` table, any of its columns) with each column read as its
    record field: JSON text back into dicts, ``cpu_affinity`` into tuples, old mode spellings
    into today's; changed in place and returned."""
    for name in frame.columns:
        if name in FIELDS and FIELDS[name].kind == "mapping":  # extra, interference: JSON text in the file
            frame[name] = [parse_json(v) for v in frame[name]]
    if "cpu_affinity" in frame.columns:
        frame["cpu_affinity"] = [() if is_missing(v) else tuple(int(c) for c in v) for v in frame["cpu_affinity"]]
    if "mode" in frame.columns:
        frame["mode"] = frame["mode"].map(lambda v: normalise_mode(v) if isinstance(v, str) else v)
    return frame


def records_from_results(frame: pd.DataFrame,
                         timings: dict[str, list[float]] | None = None) -> list[BenchmarkRecord]:
    """The `BenchmarkRecord` of each row of `frame` (rows of the ``results`` table as
    `typed_results` reads them; other columns are ignored), with its timings from `timings`."""
    import pandas as pd

    casts: dict[str, Any] = {"int": int, "float": float}
    records: list[BenchmarkRecord] = []
    for row in frame.to_dict("records"):
        data = {key: None if is_missing(value) else casts.get(FIELDS[key].kind, lambda v: v)(value)
                for key, value in row.items() if key in FIELDS}
        stamp = data.get("created_at")
        data["created_at"] = stamp.isoformat() if isinstance(stamp, pd.Timestamp) else (stamp or "")
        data["timings_ms"] = (timings or {}).get(data["record_id"], [])
        records.append(BenchmarkRecord.from_dict(data))
    return records


def load_timings(path: str | os.PathLike[str], record_ids: Iterable[str]) -> dict[str, list[float]]:
    """record_id -> raw timings in iteration order (NaN for NULL, a non-finite timing), for each of
    `record_ids` that has any."""
    wanted = list(dict.fromkeys(record_ids))
    if not wanted:
        return {}
    with read_connection(path) as con:
        rows = con.execute(
            "SELECT record_id, list(ms ORDER BY iteration) FROM timings "
            "JOIN (SELECT unnest(?::VARCHAR[]) AS record_id) USING (record_id) GROUP BY record_id", [wanted]
        ).fetchall()
    return {record_id: [math.nan if v is None else float(v) for v in values] for record_id, values in rows}


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
    frame["package_versions"] = [parse_json(v) for v in frame["package_versions"]]
    frame["extra"] = [parse_json(v) for v in frame["extra"]]
    return frame


def session_ids(path: str | os.PathLike[str]) -> list[str]:
    """The ids of the ``sessions`` table, newest first (the order of `list_sessions`), without
    counting their records."""
    with read_connection(path) as con:
        rows = con.execute("SELECT session_id FROM sessions ORDER BY started_at DESC NULLS LAST, session_id").fetchall()
    return [str(sid) for (sid,) in rows]


def load_records(path: str | os.PathLike[str], session_id: str | None = None) -> list[BenchmarkRecord]:
    """Rebuild `BenchmarkRecord`s (with timings) from the file."""
    frame = load_results(path, session_id)
    return records_from_results(frame, load_timings(path, frame["record_id"]))


#: Records on each side of a record in its session whose reference kernel readings are pooled
#: into its host speed (`compare_sides.HOST_WINDOW`).
REFERENCE_WINDOW = 2

#: DuckDB's memory while `case_summaries` runs (by default DuckDB keeps the blocks it scans up to
#: most of the machine's memory): 170k records (a year of nightly quick-tier runs) need between 64
#: and 96 MB, and what DuckDB is given it fills; a comparison that needs more is refused.
SUMMARY_MEMORY_LIMIT = "160MB"

#: The steps of `case_summaries`: temporary tables (and a view) that `_CASE_SUMMARY` and
#: `_CASE_ROUNDS` read, each dropped once no later step reads it.
_CASE_SUMMARY_STEPS = (
    # the order a comparison reads the records of the sessions asked for in (sorted apart from the
    # records' other columns, which a sort would hold all at once)
    """CREATE TEMP TABLE o AS
    SELECT res.record_id, row_number() OVER (ORDER BY w.part, res.created_at, res.record_id) AS ord
    FROM results res JOIN wanted w ON res.session_id = w.session_id""",
    # those records, read where a step reads them (a view: never held whole)
    """CREATE TEMP VIEW r AS
    SELECT res.record_id, res.session_id, res.case_id, res.status, res.error, res.noise, res.noise_reason,
           res.threads, res.device_name, res.hardware, res.latency_ms_median, o.ord,
           coalesce(json_type(res.interference, '$.host_speed') IN ('DOUBLE', 'BIGINT', 'UBIGINT')
               AND CAST(json_extract(res.interference, '$.host_speed') AS DOUBLE) > 0, false) AS has_speed,
           CASE WHEN json_type(res.interference, '$.reference_us') IN ('DOUBLE', 'BIGINT', 'UBIGINT')
                THEN CAST(json_extract(res.interference, '$.reference_us') AS DOUBLE) END AS reference
    FROM results res JOIN o ON res.record_id = o.record_id""",
    # per case: whether any record passed, any passed clean, its first error, status and noise reason
    """CREATE TEMP TABLE c AS
    SELECT case_id, bool_or(status = 'passed') AS any_passed,
           bool_or(status = 'passed' AND coalesce(noise, '') <> 'noisy') AS any_clean, min(ord) AS first,
           arg_min(error, ord) FILTER (coalesce(error, '') <> '') AS error, arg_min(status, ord) AS status,
           arg_min(noise_reason, ord) FILTER (status = 'passed' AND coalesce(noise_reason, '') <> '') AS reason
    FROM r GROUP BY case_id""",
    # the records a side is judged on (passed, and clean where any passed clean), with the reference
    # kernel's time smoothed over the records around each one in its session
    """CREATE TEMP TABLE u AS
    SELECT s.record_id, s.session_id, s.case_id, s.noise, s.threads, s.device_name, s.hardware,
           s.latency_ms_median, s.has_speed, s.smoothed FROM (
        SELECT record_id, session_id, case_id, status, noise, threads, device_name, hardware, latency_ms_median,
               has_speed, CASE WHEN has_speed AND reference IS NOT NULL THEN median(reference) OVER (
                      PARTITION BY session_id, has_speed AND reference IS NOT NULL ORDER BY ord
                      ROWS BETWEEN {window} PRECEDING AND {window} FOLLOWING) END AS smoothed
        FROM r) s JOIN c USING (case_id)
    WHERE s.status = 'passed' AND (NOT c.any_clean OR coalesce(s.noise, '') <> 'noisy')""",
    "DROP VIEW r",
    "DROP TABLE o",
    # per case: its judged records' threads, devices, smoothed host-CPU reference time and noise
    """CREATE TEMP TABLE k AS
    SELECT case_id,
           list(DISTINCT threads) FILTER (threads IS NOT NULL) AS threads,
           list(DISTINCT device_name) FILTER (coalesce(device_name, '') <> '') AS devices,
           median(smoothed) FILTER (has_speed AND hardware IN (SELECT name FROM host_cpu)
                                    AND smoothed IS NOT NULL AND isfinite(smoothed)) AS reference_us,
           bool_and(noise = 'clean') AS all_clean, bool_and(noise IS NULL) AS all_unknown
    FROM u GROUP BY case_id""",
    # per case and session, its judged records' stored rounds (a record without timings: its median)
    """CREATE TEMP TABLE per_session AS
    SELECT u.case_id, u.session_id, flatten(list(coalesce(s.ms, [u.latency_ms_median]))) AS values
    FROM u LEFT JOIN rounds s USING (record_id)
    WHERE s.ms IS NOT NULL OR (u.latency_ms_median IS NOT NULL AND isfinite(u.latency_ms_median))
    GROUP BY u.case_id, u.session_id""",
    "DROP TABLE u",
    # per case: its sessions' medians (its rounds are read apart, as numbers, by `_CASE_ROUNDS`)
    """CREATE TEMP TABLE p AS
    SELECT case_id, list(list_median(values)) AS session_medians FROM per_session GROUP BY case_id""",
)

#: The answer of `case_summaries`: one row per case, in the order of its first record.
_CASE_SUMMARY = """SELECT c.first, c.case_id, c.any_passed, c.any_clean, c.error, c.status, c.reason,
       coalesce(p.session_medians, []), coalesce(k.threads, []), coalesce(k.devices, []), k.reference_us,
       k.all_clean, k.all_unknown
FROM c LEFT JOIN k USING (case_id) LEFT JOIN p USING (case_id)
ORDER BY c.first"""

#: Every judged round of the cases of `_CASE_SUMMARY`, one row each, by the case's first record.
_CASE_ROUNDS = """SELECT c.first, unnest(s.values) AS ms FROM per_session s JOIN c USING (case_id) ORDER BY c.first"""


def case_summaries(path: str | os.PathLike[str], session_ids: Sequence[str] | None = None) -> list[dict[str, Any]]:
    """What a comparison needs of each case of the sessions `session_ids` (None: every session),
    computed in the file: one dict per case, in the order of its first record (sessions in the
    order given, then by time). Its keys: ``case_id``; ``failure`` (the first error, or ``status
    X`` of its first record, where no record passed, else ""); ``rounds`` (each judged record's
    stored rounds, or its median where it kept no finite timing; judged: passed, and clean where
    any passed clean); ``session_medians`` (per session, the median of its rounds); ``threads``, ``devices``; ``reference_us`` (the median of
    the judged host-CPU records' reference kernel times, each smoothed over `REFERENCE_WINDOW`
    records on each side in its session; None where none carries host speed); ``noise``
    (``clean``, ``noisy``, ``mixed`` or ``-``) and ``noisy_reason``."""
    import duckdb
    import numpy as np

    from pytest_hwbench.facts import target_set

    targets = sorted(target_set(host_cpu=True))
    with read_connection(path) as con:
        con.execute(f"SET memory_limit = '{SUMMARY_MEMORY_LIMIT}'")
        try:
            if session_ids is None:
                con.execute("CREATE TEMP TABLE wanted AS SELECT session_id, 0 AS part FROM sessions "
                            "UNION SELECT DISTINCT session_id, 0 FROM results")
            else:
                con.execute("CREATE TEMP TABLE wanted (session_id VARCHAR, part INTEGER)")
                con.executemany("INSERT INTO wanted VALUES (?, ?)", [[sid, i] for i, sid in enumerate(session_ids)])
            con.execute("CREATE TEMP TABLE host_cpu (name VARCHAR)")
            if targets:
                con.executemany("INSERT INTO host_cpu VALUES (?)", [[name] for name in targets])
            for step in _CASE_SUMMARY_STEPS:
                con.execute(step.format(window=REFERENCE_WINDOW))
            rows = con.execute(_CASE_SUMMARY).fetchall()
            rounds = con.execute(_CASE_ROUNDS).fetchnumpy()  # ~8 bytes a round, where a list of floats takes 32
        except duckdb.OutOfMemoryException:
            asked = "every session" if session_ids is None else f"{len(session_ids)} session(s)"
            raise ValueError(f"{path}: comparing {asked} needs more than the {SUMMARY_MEMORY_LIMIT} of memory a "
                             "comparison may take; compare fewer sessions (a history of ids joined by commas, "
                             "`hwbench sessions` lists them)") from None
    firsts, values = rounds["first"], rounds["ms"]
    out = []
    for (first, case_id, any_passed, any_clean, error, status, reason, medians, threads, devices, reference,
         all_clean, all_unknown) in rows:
        noise = "noisy" if not any_clean else "clean" if all_clean else "-" if all_unknown else "mixed"
        mine = values[np.searchsorted(firsts, first, "left"):np.searchsorted(firsts, first, "right")]
        out.append({
            "case_id": case_id,
            "failure": "" if any_passed else (error or f"status {status}"),
            "rounds": tuple(mine.tolist()), "session_medians": tuple(medians),
            "threads": frozenset(threads), "devices": frozenset(devices), "reference_us": reference,
            "noise": noise if any_passed else "-",
            "noisy_reason": "" if any_clean or not any_passed else (reason or "busy machine"),
        })
    return out


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


__all__ = ["REFERENCE_WINDOW", "case_summaries", "check_readable", "export_parquet", "is_missing",
           "list_sessions", "load_records", "load_results", "load_timings", "session_ids"]
