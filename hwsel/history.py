"""The training table asked of DuckDB: one row per configuration, computed where the records are.

`history_table` answers what ``training_table(load_runs(source))`` answers (`hwsel.data`), for
DuckDB files, in SQL: the same records left out (impossible measurements, failed and interfered
records, modes hwsel does not learn), the same configuration keys (the device by
`hwsel.specs.device_key`), the same host-speed correction, the same median, repeat count, spread
and representative record. Python only sees the per-configuration answer (and the few records
whose values might be impossible, judged by `pytest_hwbench.record.measurement_problem` itself),
so time and memory grow with the configurations, not with the records.

`mirror` brings a DuckDB copy of an MLflow experiment up to date incrementally
(`pytest_hwbench.sinks.import_mlflow_sessions`: only sessions the copy lacks are fetched), so
training from a tracking server reads each night once.

A `Window` narrows the history: records created since a date, and/or the newest N sessions of
each configuration.
"""

from __future__ import annotations

import datetime as _dt
import hashlib
import os
from collections import Counter
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING

import numpy as np
import pandas as pd

from pytest_hwbench import facts
from pytest_hwbench.record import (
    _DISPERSIONS,
    _LATENCIES,
    _MEMORIES,
    MAX_DEVICE_FLOPS,
    MAX_LATENCY_MS,
    MAX_MEMORY_MB,
    MIN_LATENCY_MS,
)
from pytest_hwbench.sinks import redact_uri
from pytest_hwbench.vocabulary import normalise_mode

from .config import MODES
from .data import (
    CONFIG_KEYS,
    HOST_SPEED_BOUNDS,
    RecordCounts,
    _normalize,
    drop_impossible,
    noise_kind,
    training_table,
)
from .specs import device_key

if TYPE_CHECKING:
    import duckdb


@dataclass(frozen=True)
class Window:
    """Which records of the history to learn from.

    `since`: records created at or after this instant only (a date means its midnight, UTC).
    `sessions`: the newest N sessions of each configuration only (sessions ordered by their
    newest usable record of that configuration). None: no limit.
    """

    since: _dt.datetime | None = None
    sessions: int | None = None

    def __post_init__(self) -> None:
        if self.sessions is not None and self.sessions < 1:
            raise ValueError(f"sessions must be >= 1 (the newest N sessions per configuration), got {self.sessions}")
        if self.since is not None and self.since.tzinfo is None:
            raise ValueError(f"since {self.since.isoformat()} has no time zone; give an aware datetime (UTC)")

    @property
    def empty(self) -> bool:
        """Whether the window keeps every record."""
        return self.since is None and self.sessions is None

    def text(self) -> str:
        """The window in words, for messages: ``since 2026-01-01, newest 30 sessions per configuration``."""
        parts = []
        if self.since is not None:
            parts.append(f"since {self.since.isoformat()}")
        if self.sessions is not None:
            parts.append(f"newest {self.sessions} session{'s' if self.sessions != 1 else ''} per configuration")
        return ", ".join(parts) or "all records"


def parse_since(text: str) -> _dt.datetime:
    """``YYYY-MM-DD`` (midnight UTC) or an ISO date-time (UTC when it names no zone), as an aware
    datetime; ValueError naming the text and the accepted forms otherwise."""
    try:
        stamp = _dt.datetime.fromisoformat(text.strip())
    except ValueError:
        raise ValueError(f"since {text!r} is not a date; give YYYY-MM-DD or an ISO date-time "
                         "(e.g. 2026-01-31 or 2026-01-31T18:00:00+00:00)") from None
    return stamp if stamp.tzinfo is not None else stamp.replace(tzinfo=_dt.timezone.utc)


@dataclass(frozen=True)
class History:
    """What `history_table` found: the training table, and what became of the records on their
    way to it (`hwsel.data.RecordCounts`: the records a date window left out are not counted)."""

    table: pd.DataFrame
    counts: RecordCounts


def _sql_text(values: Sequence[str]) -> str:
    return ", ".join("'" + v.replace("'", "''") + "'" for v in values) or "NULL"


def _maybe_impossible() -> str:
    """A SQL condition true for every passed record `measurement_problem` might reject (and a
    few more): those are judged in Python by the harness's own check."""
    m = "latency_ms_median"
    terms = [f"{m} IS NULL", f"NOT isfinite({m})", f"{m} < {MIN_LATENCY_MS!r}", f"{m} > {MAX_LATENCY_MS!r}",
             f"(isfinite(flops_per_forward) AND flops_per_forward > 0 "
             f"AND {m} < flops_per_forward / {MAX_DEVICE_FLOPS!r} * 1e3)",
             f"latency_ms_min > {m}", f"latency_ms_max < {m}", "iterations < 1"]
    for name in (*_LATENCIES, "throughput_items_per_s"):
        terms.append(f"({name} IS NOT NULL AND (NOT isfinite({name}) OR {name} <= 0"
                     + (f" OR {name} > {MAX_LATENCY_MS!r}))" if name in _LATENCIES else "))"))
    for name in (*_DISPERSIONS, *_MEMORIES):
        terms.append(f"({name} IS NOT NULL AND (NOT isfinite({name}) OR {name} < 0"
                     + (f" OR {name} > {MAX_MEMORY_MB!r}))" if name in _MEMORIES else "))"))
    return "status = 'passed' AND (" + " OR ".join(f"coalesce({t}, false)" for t in terms) + ")"


def _frame(con: duckdb.DuckDBPyConnection, sql: str) -> pd.DataFrame:
    import warnings

    with warnings.catch_warnings():
        # duckdb's DataFrame conversion calls drop(inplace=True), which pandas deprecates
        warnings.filterwarnings("ignore", message="The inplace keyword", category=Warning)
        return con.execute(sql).df()


def _records_frame(con: duckdb.DuckDBPyConnection, relation: str) -> pd.DataFrame:
    """The records of `relation` (results rows plus ``_src``), as `load_runs` frames them (through
    `BenchmarkRecord`, so every field reads as the record reader reads it), in `load_runs`'s order."""
    from pytest_hwbench.sinks import RESULT_COLUMNS, records_frame, records_from_results, typed_results

    names = [name for name, _ in RESULT_COLUMNS]
    frame = _frame(con, f"SELECT {', '.join(names)} FROM {relation} ORDER BY {_ORDER}")
    return records_frame(records_from_results(typed_results(frame)))


#: The ``results`` columns the aggregation reads (the rest stays in the file; whole records are
#: read for the suspects and the representatives only).
_COLUMNS: tuple[str, ...] = ("record_id", "session_id", "created_at", "status", "noise", "noise_reason",
                             *CONFIG_KEYS, "latency_ms_median", "peak_device_memory_mb", "peak_host_rss_mb")

#: A record's host speed as `hwsel.data` reads it: ``interference.host_speed`` when a positive
#: number in a record of schema 4 or later (`pytest_hwbench.record.normalize_record` drops older ones).
_SPEED = ("CASE WHEN coalesce(nullif(schema_version, 0), 1) >= 4 AND json_valid(interference) "
          "AND json_type(interference, '$.host_speed') IN ('UBIGINT', 'BIGINT', 'DOUBLE', 'BOOLEAN') "
          "THEN CAST(json_extract(interference, '$.host_speed') AS DOUBLE) END")


#: The order `load_runs` reads records in: by file, then created_at, then record_id.
_ORDER = "_src, created_at NULLS LAST, record_id"


def _table(i: int) -> str:
    return f"hist{i}.results" if i else "results"


def _attach(con: duckdb.DuckDBPyConnection, paths: Sequence[Path], since: _dt.datetime | None) -> None:
    """``hist_base``: the columns the aggregation needs of the records of every file of `paths`
    (the first is `con`'s own) created since `since`, each record once (the last file's copy, as
    `load_runs` keeps it), with ``_src`` (its file), ``_speed`` and ``_suspect`` (it might be no
    measurement, `_maybe_impossible`). A view: each question reads the file again, which costs
    less than holding every record."""
    parts = []
    for i, path in enumerate(paths):
        if i:
            con.execute(f"ATTACH '{str(path).replace(chr(39), chr(39) * 2)}' AS hist{i} (READ_ONLY)")
        parts.append(f"SELECT {i} AS _src, {', '.join(_COLUMNS)}, {_SPEED} AS _speed, "
                     f"coalesce({_maybe_impossible()}, false) AS _suspect FROM {_table(i)}"
                     + ("" if since is None else f" WHERE created_at >= '{since.isoformat()}'::TIMESTAMPTZ"))
    union = " UNION ALL ".join(parts)
    once = " QUALIFY row_number() OVER (PARTITION BY record_id ORDER BY _src DESC) = 1" if len(paths) > 1 else ""
    con.execute(f"CREATE TEMP VIEW hist_base AS SELECT * FROM ({union}){once}")


def _whole(ids: str, files: int) -> str:
    """The whole ``results`` rows (plus ``_src``) of the records in relation `ids` (``_src``,
    ``record_id``), each from its own file."""
    return "(" + " UNION ALL ".join(
        f"SELECT r.*, k._src FROM {_table(i)} r JOIN {ids} k ON k.record_id = r.record_id AND k._src = {i}"
        for i in range(files)) + ")"


def history_table(
    paths: Sequence[str | os.PathLike[str]],
    *,
    include_noisy: bool = False,
    window: Window | None = None,
) -> History:
    """The training table of the DuckDB files at `paths` (their union; a record in two files
    counts once, the later file's copy), aggregated in DuckDB: what
    ``training_table(load_runs(paths, include_noisy=...))`` returns (`hwsel.data`), one row per
    configuration, narrowed to `window` (None: every record).

    Raises:
        FileNotFoundError: a file that does not exist.
        DuckDBFileError: a file that is locked or corrupt.
    """
    from pytest_hwbench.sinks import read_connection

    window = window or Window()
    files = [Path(p).expanduser() for p in paths]
    if not files:
        raise ValueError("no DuckDB file given; name at least one .duckdb file")
    for extra in files[1:]:  # each at the current schema (an older file is upgraded in place)
        with read_connection(extra):
            pass
    with read_connection(files[0]) as con:
        _attach(con, files, window.since)
        return _history(con, len(files), include_noisy=include_noisy, window=window)


def _history(con: duckdb.DuckDBPyConnection, files: int, *, include_noisy: bool, window: Window) -> History:
    # 1. records that cannot be measurements: judged by the harness's check, on the few suspects
    suspects = _records_frame(con, _whole("(SELECT _src, record_id FROM hist_base WHERE _suspect)", files))
    bad_ids: list[str] = []
    dropped: dict[str, int] = {}
    if len(suspects):
        normal = _normalize(suspects)
        kept, dropped = drop_impossible(normal)
        bad_ids = sorted(set(normal["record_id"]) - set(kept["record_id"]))
    con.execute("CREATE TEMP TABLE hist_bad (record_id VARCHAR)")
    if bad_ids:
        con.executemany("INSERT INTO hist_bad VALUES (?)", [[i] for i in bad_ids])

    # 2. why each other record cannot answer for its configuration ("" when it can)
    noisy = "false" if include_noisy else "coalesce(noise = 'noisy', false)"
    con.execute(f"""
        CREATE TEMP VIEW hist_why AS SELECT *,
            CASE WHEN coalesce(status, 'passed') <> 'passed' THEN coalesce(status, 'passed')
                 WHEN NOT coalesce(isfinite(latency_ms_median) AND latency_ms_median > 0, false) THEN 'no latency'
                 WHEN {noisy} THEN 'noisy'
                 ELSE '' END AS _why
        FROM hist_base WHERE NOT _suspect OR record_id NOT IN (SELECT record_id FROM hist_bad)""")
    kinds: Counter[str] = Counter()
    for reason, n in con.execute(
            "SELECT noise_reason, count(*) FROM hist_why WHERE _why = 'noisy' GROUP BY noise_reason").fetchall():
        kinds[noise_kind(reason)] += int(n)
    noisy_reasons = dict(sorted(kinds.items(), key=lambda kv: (-kv[1], kv[0])))

    # 3. keys: the mode in its one spelling, the device by its identity
    modes = [m for (m,) in con.execute("SELECT DISTINCT mode FROM hist_why WHERE _why = '' AND mode IS NOT NULL").fetchall()]
    con.register("hist_modes", pd.DataFrame({"raw": pd.array(modes, dtype=object),
                                             "norm": pd.array([normalise_mode(m) for m in modes], dtype=object)}))
    devices = con.execute("SELECT DISTINCT hardware, device_name FROM hist_why WHERE _why = ''").fetchall()
    con.register("hist_devices", pd.DataFrame({
        "hardware": pd.array([h for h, _ in devices], dtype=object),
        "device_name": pd.array([d for _, d in devices], dtype=object),
        "device": pd.array([device_key(str(h), d if isinstance(d, str) else None) for h, d in devices], dtype=object)}))
    con.execute("""
        CREATE TEMP VIEW hist_usable AS SELECT w.*, m.norm AS _mode, d.device AS _device
        FROM hist_why w
        LEFT JOIN hist_modes m ON w.mode = m.raw
        LEFT JOIN hist_devices d ON w.hardware IS NOT DISTINCT FROM d.hardware
                                AND w.device_name IS NOT DISTINCT FROM d.device_name
        WHERE w._why = ''""")
    records = int(con.execute("SELECT count(*) FROM hist_usable").fetchone()[0])  # type: ignore[index]
    other_modes = {str(mode): int(n) for mode, n in con.execute(
        f"SELECT _mode, count(*) FROM hist_usable WHERE _mode IS NOT NULL AND _mode NOT IN ({_sql_text(MODES)}) "
        "GROUP BY _mode ORDER BY count(*) DESC, _mode").fetchall()}

    # 4. targets per record: host-speed-corrected latency, memory
    low, high = HOST_SPEED_BOUNDS
    host_cpu = _sql_text(sorted(facts.target_set(host_cpu=True)))
    keys = [{"mode": "_mode", "device_name": "_device"}.get(k, k) for k in CONFIG_KEYS]
    key_list = ", ".join(keys)
    con.execute(f"""
        CREATE TEMP TABLE hist_rows AS
        WITH speeds AS (SELECT * FROM hist_usable
                        WHERE (_mode IN ({_sql_text(MODES)}) OR _mode IS NULL) AND batch_size >= 1)
        SELECT _src, record_id, session_id, created_at, {key_list},
            latency_ms_median * CASE WHEN isfinite(_speed) AND _speed > 0 AND hardware IN ({host_cpu})
                                     THEN least(greatest(_speed, {low!r}), {high!r}) ELSE 1.0 END AS _lat,
            CASE WHEN NOT isnan(_dev) AND _dev > 0 THEN _dev
                 WHEN NOT isnan(_host) AND _host > 0 THEN _host END AS _mem,
            dense_rank() OVER (ORDER BY {key_list}) AS _gid
        FROM (SELECT *, peak_device_memory_mb AS _dev, peak_host_rss_mb AS _host FROM speeds)""")

    # 5. the window's newest sessions per configuration
    outside = 0
    if window.sessions is not None:
        con.execute(f"""
            CREATE TEMP TABLE hist_window AS SELECT * EXCLUDE (_session_time, _rank) FROM (
                SELECT *, dense_rank() OVER (PARTITION BY _gid ORDER BY _session_time DESC NULLS LAST,
                                                                     session_id DESC) AS _rank
                FROM (SELECT *, max(created_at) OVER (PARTITION BY _gid, session_id) AS _session_time
                      FROM hist_rows))
            WHERE _rank <= {int(window.sessions)}""")
        outside = int(con.execute("SELECT (SELECT count(*) FROM hist_rows) - (SELECT count(*) FROM hist_window)")
                      .fetchone()[0])  # type: ignore[index]
        rows = "hist_window"
    else:
        rows = "hist_rows"

    # 6. per configuration: the median (as pandas computes it), repeats, spread, memory median,
    #    and the representative: the repeat nearest the median (ties: the faster, then the first)
    def median(values: str) -> str:
        n = f"len({values})"
        return (f"CASE WHEN {n} = 0 THEN NULL WHEN {n} % 2 = 1 THEN {values}[{n} // 2 + 1] "
                f"ELSE ({values}[{n} // 2] + {values}[{n} // 2 + 1]) / 2 END")

    order = _ORDER.replace("_src", "r._src").replace("created_at", "r.created_at").replace("record_id", "r.record_id")
    stats = _frame(con, f"""
        WITH agg AS (
            SELECT _gid, count(*) AS repeats, max(_lat) / min(_lat) AS latency_spread,
                   list_sort(list(_lat)) AS _lats,
                   list_sort(list(_mem) FILTER (WHERE _mem IS NOT NULL)) AS _mems
            FROM {rows} GROUP BY _gid),
        med AS (SELECT _gid, repeats, latency_spread, {median('_lats')} AS _median,
                       {median('_mems')} AS _memory FROM agg)
        SELECT r._src, r.record_id, m.repeats, m.latency_spread, m._median, m._memory
        FROM {rows} r JOIN med m USING (_gid)
        QUALIFY row_number() OVER (PARTITION BY r._gid ORDER BY abs(r._lat - m._median), r._lat, {order}) = 1
        ORDER BY {order}""")
    con.register("hist_reps", stats[["_src", "record_id"]])
    frame = _normalize(_records_frame(
        con, _whole("hist_reps", files)))
    frame = frame.set_index("record_id", drop=False).loc[stats["record_id"].to_numpy()].reset_index(drop=True)
    table = training_table(frame, aggregate=False)
    if len(table) != len(stats):
        raise RuntimeError(f"history: {len(stats)} configurations but {len(table)} representative rows; "
                           "the SQL and hwsel.data.training_table disagree on which records can train")
    table["latency_ms"] = stats["_median"].to_numpy(dtype=float)
    table["throughput"] = pd.to_numeric(table["batch_size"]).astype(float) / table["latency_ms"] * 1e3
    table["memory_mb"] = pd.to_numeric(stats["_memory"], errors="coerce").to_numpy(dtype=float)
    table["repeats"] = stats["repeats"].to_numpy(dtype=np.int64)
    table["latency_spread"] = stats["latency_spread"].to_numpy(dtype=float)
    return History(table, RecordCounts(records, dropped, sum(noisy_reasons.values()), noisy_reasons, other_modes, outside))


def mirror_path(source: str, experiment: str, directory: str | os.PathLike[str]) -> Path:
    """The DuckDB file that mirrors MLflow `source`'s `experiment`: one per store and experiment
    under `directory` (named by a digest of both, the password left out)."""
    digest = hashlib.sha256(f"{redact_uri(source)}\n{experiment}".encode()).hexdigest()[:16]
    return Path(directory) / f"mirror-{digest}.duckdb"


def mirror(source: str, experiment: str, path: str | os.PathLike[str]) -> int:
    """Bring the DuckDB file at `path` up to date with MLflow `source`'s `experiment`
    (`pytest_hwbench.sinks.import_mlflow_sessions`: only sessions it lacks or holds unfinished
    are fetched) and return how many records were added. Two trainings mirroring into one file
    take turns (a lock on its folder).

    Raises:
        FileNotFoundError: a SQLite store that does not exist (nothing is created).
        LookupError: a store without a session in `experiment`.
    """
    from pytest_hwbench.sinks import import_mlflow_sessions
    from pytest_hwbench.sinks.mlflow_migration import store_init_lock
    from pytest_hwbench.sinks.mlflow_uri import sqlite_path

    if source.lower().startswith("sqlite:///") and not sqlite_path(source).is_file():
        # a reader never makes a store: MLflow would create the folders and an empty database
        raise FileNotFoundError(f"{redact_uri(source)}: {sqlite_path(source)} does not exist; name an existing store "
                                "(a session writes one)")
    file = Path(path)
    file.parent.mkdir(parents=True, exist_ok=True)
    with store_init_lock(file.parent):
        added = import_mlflow_sessions(source, experiment, file).records
    if not file.exists():
        raise LookupError(f"MLflow store {redact_uri(source)} holds no session in experiment {experiment!r}; run the "
                          "bench suite first (pytest bench_suites -m cpu ...) or pass another source (a .duckdb or "
                          ".parquet path)")
    return added


__all__ = ["History", "Window", "history_table", "mirror", "mirror_path", "parse_since"]
