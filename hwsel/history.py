"""The training table asked of DuckDB files: what ``training_table(load_runs(paths))`` answers
(`hwsel.data`), aggregated where the records are, so time and memory grow with the configurations,
not the records; a `Window` narrows it, and `mirror` keeps a DuckDB copy of an MLflow experiment.
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

import pandas as pd

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

from .config import MODES
from .data import (
    TARGET_INPUTS,
    RecordCounts,
    _configuration_stats,
    _frame,
    _normalize,
    _sql_text,
    _target_rows,
    _with_targets,
    drop_impossible,
    noise_kind,
)

if TYPE_CHECKING:
    import duckdb


@dataclass(frozen=True)
class Window:
    """Which records of the history to learn from: those created at or after `since`, and/or those of
    the newest `sessions` sessions of each configuration (by their newest usable record); None: no limit."""

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


def _records_frame(con: duckdb.DuckDBPyConnection, relation: str) -> pd.DataFrame:
    """The records of `relation` (results rows plus ``_src``), as `load_runs` frames them (through
    `BenchmarkRecord`, so every field reads as the record reader reads it), in `load_runs`'s order."""
    from pytest_hwbench.sinks import RESULT_COLUMNS, records_frame, records_from_results, typed_results

    names = [name for name, _ in RESULT_COLUMNS]
    frame = _frame(con, f"SELECT {', '.join(names)} FROM {relation} ORDER BY {_ORDER}")
    return records_frame(records_from_results(typed_results(frame)))


#: The ``results`` columns the aggregation reads (the rest stays in the file; whole records are
#: read for the suspects and the representatives only).
_COLUMNS: tuple[str, ...] = ("status", "noise", "noise_reason", *TARGET_INPUTS)

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
    """View ``hist_base``: the columns the aggregation needs of the records of every file of `paths`
    (the first is `con`'s own) created since `since`, each record once (the last file's copy), with
    ``_src`` (its file), ``_speed`` and ``_suspect`` (`_maybe_impossible`)."""
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
    """What ``training_table(load_runs(paths, include_noisy=...))`` returns (`hwsel.data`) for the
    DuckDB files at `paths`, aggregated in DuckDB and narrowed to `window` (None: every record).

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
    suspects = _normalize(_records_frame(con, _whole("(SELECT _src, record_id FROM hist_base WHERE _suspect)", files)))
    kept, dropped = drop_impossible(suspects)
    bad_ids = sorted(set(suspects["record_id"]) - set(kept["record_id"]))
    con.register("hist_bad", pd.DataFrame({"record_id": pd.Series(bad_ids, dtype=object)}))

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

    # 3. the usable records, in the order `load_runs` reads them, and what each can teach
    con.execute(f"CREATE TEMP VIEW hist_usable AS SELECT *, row_number() OVER (ORDER BY {_ORDER}) AS _row "
                "FROM hist_why WHERE _why = ''")
    records = int(con.execute("SELECT count(*) FROM hist_usable").fetchone()[0])  # type: ignore[index]
    _target_rows(con, "hist_usable", "hist_rows")
    other_modes = {str(mode): int(n) for mode, n in con.execute(
        f"SELECT m.norm, count(*) FROM hist_usable u JOIN mode_names m ON u.mode = m.raw "
        f"WHERE m.norm NOT IN ({_sql_text(MODES)}) GROUP BY m.norm ORDER BY count(*) DESC, m.norm").fetchall()}

    # 4. the window's newest sessions per configuration
    rows, outside = "hist_rows", 0
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

    # 5. per configuration: medians, repeats, spread and the representative, whose record is read whole
    stats = _configuration_stats(con, rows)
    con.register("hist_reps", stats[["_src", "record_id"]])
    frame = _normalize(_records_frame(con, _whole("hist_reps", files)))
    frame = frame.set_index("record_id", drop=False).loc[stats["record_id"].to_numpy()]
    return History(_with_targets(frame, stats),
                   RecordCounts(records, dropped, sum(noisy_reasons.values()), noisy_reasons, other_modes, outside))


def mirror_path(source: str, experiment: str, directory: str | os.PathLike[str]) -> Path:
    """The DuckDB file that mirrors MLflow `source`'s `experiment`: one per store and experiment
    under `directory` (named by a digest of both, the password left out)."""
    digest = hashlib.sha256(f"{redact_uri(source)}\n{experiment}".encode()).hexdigest()[:16]
    return Path(directory) / f"mirror-{digest}.duckdb"


def mirror(source: str, experiment: str, path: str | os.PathLike[str]) -> int:
    """Bring the DuckDB file at `path` up to date with MLflow `source`'s `experiment` (only the
    sessions it lacks or holds unfinished are fetched; two trainings take turns) and return how
    many records were added.

    Raises:
        FileNotFoundError: a SQLite store that does not exist (nothing is created).
        LookupError: a store without a session in `experiment`.
    """
    from pytest_hwbench.sinks import import_mlflow_sessions
    from pytest_hwbench.sinks.mlflow_migration import store_init_lock
    from pytest_hwbench.sinks.mlflow_uri import require_existing

    require_existing(source)
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
