"""The DuckDB file's tables and their versions: the columns of each schema version, the SQL steps
that bring a file from one version to the next (`UPGRADES`), and `upgrade`, which applies them.

Tables (schema version 4):

- ``sessions``: one row per `SessionInfo` (package versions and extra as JSON text), plus the
  final ``status`` and ``ended_at`` set when the session closes;
- ``results``: one row per record, every `BenchmarkRecord` field except ``timings_ms`` as a typed
  column named as the field (``extra`` as JSON text, ``cpu_affinity`` as INTEGER[]);
- ``timings``: (record_id, iteration, ms), the raw per-iteration timings;
- ``rounds``: (record_id, ms), each record's `ROUNDS` round medians of its timings (`rounds_of`),
  written with them: a comparison reads 5 numbers per record, not its every timing;
- ``schema_info``: (version, applied_at), one row per applied upgrade step.
"""

from __future__ import annotations

import os
from contextlib import suppress
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    import duckdb

SCHEMA_VERSION = 4

#: Consecutive blocks of a record's timings whose medians the ``rounds`` table holds: the
#: ``trackers.ROUNDS`` of the records stored (another count is another schema version).
ROUNDS = 5


def _columns(*runs: tuple[str, str]) -> tuple[tuple[str, str], ...]:
    """(name, SQL type) of each column, in order, from runs of (SQL type, the names of that type)."""
    return tuple((name, sql) for sql, names in runs for name in names.split())


#: results columns of schema version 1, in order: (name, SQL type). Named as the record fields.
_RESULTS_V1 = _columns(
    ("VARCHAR", "record_id session_id case_id status model family model_type backend hardware"),
    ("VARCHAR", "device_name precision mode"),
    ("BIGINT", "batch_size sequence_length image_size audio_samples param_count"),
    ("DOUBLE", "flops_per_forward"),
    ("BIGINT", "threads"),
    ("DOUBLE", "latency_ms_mean latency_ms_median latency_ms_min latency_ms_max latency_ms_stddev"),
    ("DOUBLE", "latency_ms_iqr latency_ms_p90 latency_ms_p95 latency_ms_p99"),
    ("BIGINT", "iterations"),
    ("DOUBLE", "throughput_items_per_s load_time_s cold_latency_ms peak_host_rss_mb peak_device_memory_mb"),
    ("DOUBLE", "achieved_tflops"),
    ("VARCHAR", "error nodeid host worker"),
    ("INTEGER[]", "cpu_affinity"),
    ("VARCHAR", "extra"),
    ("TIMESTAMPTZ", "created_at"),
    ("INTEGER", "schema_version"),
)

_SESSIONS_V1 = _columns(
    ("VARCHAR", "session_id"),
    ("TIMESTAMPTZ", "started_at"),
    ("VARCHAR", "host git_commit git_branch runner_label hardware_summary package_versions extra status"),
    ("TIMESTAMPTZ", "ended_at"),
)


def _create(table: str, columns: tuple[tuple[str, str], ...], key: str | None) -> str:
    cols = ",\n    ".join(f"{name} {sql}{' PRIMARY KEY' if name == key else ''}" for name, sql in columns)
    return f"CREATE TABLE IF NOT EXISTS {table} (\n    {cols}\n)"


#: results columns added by schema version 2 (generate mode, compiled backends, energy).
_RESULTS_V2_ADDED = _columns(
    ("BIGINT", "new_tokens"),
    ("DOUBLE", "compile_time_s ttft_ms decode_ms_per_token tokens_per_s energy_j_per_item avg_power_w"),
)

#: results columns added by schema version 3 (the interference verdict and its readings).
_RESULTS_V3_ADDED = _columns(("VARCHAR", "noise noise_reason"), ("BIGINT", "tries"), ("VARCHAR", "interference"))


def rounds_of(source: str, where: str = "true") -> str:
    """A SELECT of (record_id, ms): each record's rounds from the (record_id, iteration, ms) rows
    of `source` that `where` keeps: the medians of numpy.array_split's `ROUNDS` blocks (the first
    n % k hold one more; one per timing below `ROUNDS`) of its finite timings in iteration order,
    as ``trackers.round_medians`` computes them. A record without a finite timing has no row."""
    return f"""SELECT record_id, [list_median(v[k * q + least(k, rem) + 1 : (k + 1) * q + least(k + 1, rem)])
                       FOR k IN range(least(len(v), {ROUNDS}))] AS ms
    FROM (SELECT record_id, v, len(v) // least(len(v), {ROUNDS}) AS q, len(v) % least(len(v), {ROUNDS}) AS rem
          FROM (SELECT CAST(record_id AS VARCHAR) AS record_id, list(CAST(ms AS DOUBLE) ORDER BY iteration) AS v
                FROM {source} WHERE ms IS NOT NULL AND isfinite(ms) AND ({where}) GROUP BY record_id))"""


#: version -> SQL steps that bring the previous version to it. Add a version, never edit one.
UPGRADES: dict[int, tuple[str, ...]] = {
    1: (
        _create("sessions", _SESSIONS_V1, "session_id"),
        _create("results", _RESULTS_V1, "record_id"),
        "CREATE TABLE IF NOT EXISTS timings (record_id VARCHAR NOT NULL, iteration INTEGER NOT NULL, ms DOUBLE)",
    ),
    2: tuple(f"ALTER TABLE results ADD COLUMN IF NOT EXISTS {name} {sql}" for name, sql in _RESULTS_V2_ADDED),
    3: tuple(f"ALTER TABLE results ADD COLUMN IF NOT EXISTS {name} {sql}" for name, sql in _RESULTS_V3_ADDED),
    4: ("CREATE TABLE IF NOT EXISTS rounds (record_id VARCHAR NOT NULL, ms DOUBLE[] NOT NULL)",
        f"INSERT INTO rounds {rounds_of('timings')}"),
}

#: Current columns (v1 plus later additions, which go here and into UPGRADES together).
RESULT_COLUMNS: tuple[tuple[str, str], ...] = _RESULTS_V1 + _RESULTS_V2_ADDED + _RESULTS_V3_ADDED
SESSION_COLUMNS: tuple[tuple[str, str], ...] = _SESSIONS_V1


def schema_version(con: duckdb.DuckDBPyConnection) -> int:
    # fetchall, not fetchone: DuckDB 2 refuses register() while a result is unfinished.
    sql = "SELECT count(*) FROM information_schema.tables WHERE table_name = 'schema_info'"
    exists = con.execute(sql).fetchall()
    if not exists[0][0]:
        return 0
    rows = con.execute("SELECT max(version) FROM schema_info").fetchall()
    return int(rows[0][0]) if rows[0][0] is not None else 0


def rollback(con: duckdb.DuckDBPyConnection) -> None:
    """Roll back the open transaction, if DuckDB has not already ended it: a failed write (a full
    disk) aborts it, and a second error from ``ROLLBACK`` would hide the one that says why."""
    import duckdb

    with suppress(duckdb.TransactionException):
        con.execute("ROLLBACK")


def upgrade(con: duckdb.DuckDBPyConnection, path: str | os.PathLike[str] = "<connection>") -> int:
    """Bring the database on `con` to `SCHEMA_VERSION` (in one transaction); return the version.
    Raises RuntimeError if the file was written by a newer hwbench (its version is higher)."""
    current = schema_version(con)
    if current > SCHEMA_VERSION:
        raise RuntimeError(f"{path} has hwbench DuckDB schema version {current}, newer than this hwbench "
                           f"understands ({SCHEMA_VERSION}); upgrade pytest-hwbench or use another "
                           "--hwbench-db")
    if current == SCHEMA_VERSION:
        return current
    con.execute("BEGIN TRANSACTION")
    try:
        con.execute("CREATE TABLE IF NOT EXISTS schema_info (version INTEGER NOT NULL, "
                    "applied_at TIMESTAMPTZ)")
        for version in range(current + 1, SCHEMA_VERSION + 1):
            for statement in UPGRADES[version]:
                con.execute(statement)
            con.execute("INSERT INTO schema_info VALUES (?, now())", [version])
        con.execute("COMMIT")
    except BaseException:
        rollback(con)
        raise
    return SCHEMA_VERSION


__all__ = ["RESULT_COLUMNS", "ROUNDS", "SCHEMA_VERSION", "SESSION_COLUMNS", "UPGRADES", "rollback",
           "rounds_of", "schema_version", "upgrade"]
