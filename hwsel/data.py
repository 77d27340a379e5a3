"""Benchmark runs in, one training table out: `load_runs` reads any store pytest-hwbench writes
(an MLflow URI, ``.duckdb``, ``.parquet``, ``.jsonl`` or a spool directory; several load as their
union), `training_table` adds the targets, and `snapshot` writes it to Parquet.
"""

from __future__ import annotations

import os
import typing
from collections import Counter
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np
import pandas as pd

from pytest_hwbench import facts
from pytest_hwbench.record import METRIC_FIELDS, PARAM_FIELDS, BenchmarkRecord, measurement_problem
from pytest_hwbench.sinks import redact_uri, resolve_tracking_uri
from pytest_hwbench.vocabulary import DEFAULT_EXPERIMENT, DEFAULT_STORE_DIR, normalise_mode

from .config import MODES
from .specs import device_key

if typing.TYPE_CHECKING:
    import duckdb

#: Identity and context columns kept next to params and metrics.
ID_COLUMNS: tuple[str, ...] = ("record_id", "session_id", "case_id", "status", "host", "created_at", "error",
                                "noise", "noise_reason")

#: Columns of a runs frame, in order; ``host_speed`` is `BenchmarkRecord.host_speed` (NaN where unknown).
RUN_COLUMNS: tuple[str, ...] = ID_COLUMNS + PARAM_FIELDS + METRIC_FIELDS + ("host_speed",)

#: `training_table` corrects a latency for host speed within these bounds only: a reading outside
#: them (a kernel timed while the host was overloaded) says more about that instant than the host.
HOST_SPEED_BOUNDS: tuple[float, float] = (0.5, 1.2)

#: Record fields that hold lists or mappings: not training data, and not storable as Parquet columns.
NESTED_COLUMNS: tuple[str, ...] = ("extra", "cpu_affinity", "timings_ms", "interference")

#: Record field -> "int" | "float" | "str", from the record's own type hints.
FIELD_TYPES: dict[str, str] = {
    name: "int" if "int" in (text := str(hint)) and "float" not in text else "float" if "float" in text else "str"
    for name, hint in typing.get_type_hints(BenchmarkRecord).items() if name in PARAM_FIELDS + METRIC_FIELDS}


def existing_store(tracking_uri: str | None = None) -> str | None:
    """The store to read when none is named, or None when there is none here: `tracking_uri`,
    else the harness's tracking URI when ``$MLFLOW_TRACKING_URI`` is set or ``mlruns/mlflow.db``
    exists, else ``mlruns/hwbench.duckdb`` when it exists (looking never creates a store)."""
    if tracking_uri:
        return tracking_uri
    store = Path(DEFAULT_STORE_DIR)
    if os.environ.get("MLFLOW_TRACKING_URI") or (store / "mlflow.db").exists():
        return resolve_tracking_uri()
    duckdb_file = store / "hwbench.duckdb"
    return str(duckdb_file) if duckdb_file.exists() else None


def _normalize(frame: pd.DataFrame) -> pd.DataFrame:
    """Every `RUN_COLUMNS` column present, with schema types (ints as nullable Int64)."""
    out = frame.copy()
    if "interference" in out.columns and ("host_speed" not in out.columns or out["host_speed"].isna().all()):
        # `BenchmarkRecord.host_speed`, read from the frame's readings
        out["host_speed"] = [v.get("host_speed") if isinstance(v, dict) else None for v in out["interference"]]
    for name in RUN_COLUMNS:
        if name not in out.columns:
            out[name] = None
    speed = pd.to_numeric(out["host_speed"], errors="coerce").astype(float)
    out["host_speed"] = speed.where(speed > 0)
    for name, kind in FIELD_TYPES.items():
        if kind == "int":
            out[name] = pd.to_numeric(out[name], errors="coerce").round().astype("Int64")
        elif kind == "float":
            out[name] = pd.to_numeric(out[name], errors="coerce").astype(float)
        else:
            out[name] = out[name].astype(object).where(out[name].notna(), None)
    for name in ID_COLUMNS:
        out[name] = out[name].map(lambda v: None if pd.isna(v) else str(v))
    # older snapshots say "training"; records are normalised by their readers
    out["mode"] = out["mode"].map(lambda v: normalise_mode(v) if isinstance(v, str) else v)
    extra = [c for c in out.columns if c not in RUN_COLUMNS]
    return out.loc[:, list(RUN_COLUMNS) + extra].reset_index(drop=True)


Source = str | os.PathLike[str]


def source_list(source: Source | Sequence[Source] | None) -> list[Source] | None:
    """`source` as a list of sources (None stays None; a single one becomes a list of one)."""
    if source is None:
        return None
    if isinstance(source, str | os.PathLike):
        return [source]
    sources = list(source)
    if not sources:
        raise ValueError("no benchmark data source given; name a store, a .duckdb, .parquet or .jsonl file")
    return sources


def describe_sources(source: Source | Sequence[Source] | None) -> str:
    """The sources as one line for messages and params, passwords redacted."""
    sources = source_list(source)
    return "the default store" if sources is None else ", ".join(redact_uri(os.fspath(s)) for s in sources)


def _load_one(text: str, experiment: str) -> pd.DataFrame:
    """One source as a frame (an MLflow store's records of `experiment`)."""
    from hwsel._reach import quiet_mlflow
    from pytest_hwbench.sinks import read_records, records_frame, source_kind

    if text.lower().endswith(".parquet"):
        path = Path(text)
        if not path.exists():
            raise FileNotFoundError(f"Parquet snapshot {path} does not exist")
        return pd.read_parquet(path)
    if source_kind(text) != "mlflow":
        return records_frame(read_records(text))
    with quiet_mlflow():
        records = read_records(text, experiment=experiment)
        if not records:
            from mlflow.tracking import MlflowClient

            if MlflowClient(tracking_uri=text).get_experiment_by_name(experiment) is None:
                raise LookupError(
                    f"MLflow store {redact_uri(text)} has no experiment {experiment!r}; run the bench suite "
                    "first (pytest bench_suites -m cpu ...) or pass another source (a .duckdb or .parquet path)"
                )
    return records_frame(records)


def load_runs(
    source: Source | Sequence[Source] | None = None,
    *,
    experiment: str = DEFAULT_EXPERIMENT,
    passed_only: bool = True,
    include_noisy: bool = False,
) -> pd.DataFrame:
    """Benchmark records as a frame with `RUN_COLUMNS`.

    Args:
        source: MLflow tracking URI, a ``.duckdb`` file, a ``.parquet`` snapshot, a ``.jsonl``
            records file or a spool directory, or a list of those (their union; a record held by
            two sources counts once, the later source's copy); None means the harness's tracking URI
            (`pytest_hwbench.sinks.resolve_tracking_uri`).
        experiment: MLflow experiment holding the records.
        passed_only: keep passed cases with a positive latency only.
        include_noisy: keep records that were interfered with (``noise == "noisy"``); by default
            they are left out, counted in ``frame.attrs["noisy"]`` and by reason in
            ``frame.attrs["noisy_reasons"]`` (`usable_rows_text` says it in one line).

    Passed records that cannot be measurements (`drop_impossible`) are dropped, counted in an
    `HwselWarning` and ``frame.attrs["dropped"]``.

    Raises:
        FileNotFoundError: a file source that does not exist.
        LookupError: an MLflow store without the experiment.
    """
    sources = source_list(source) or [resolve_tracking_uri()]
    frames = [_load_one(os.fspath(s), experiment) for s in sources]
    frame = _normalize(pd.concat([f for f in frames if len(f)] or frames[:1], ignore_index=True))
    if len(frame) and frame["record_id"].notna().any():
        frame = frame.drop_duplicates("record_id", keep="last")
    frame, dropped = drop_impossible(frame)
    if dropped:
        _warn_dropped(dropped, describe_sources(sources))
    why = left_out_reasons(frame, passed_only=passed_only, include_noisy=include_noisy)
    reasons = Counter(text.removeprefix(NOISY) for text in why[why.str.startswith(NOISY)])
    frame = frame.loc[(why == "").to_numpy()].reset_index(drop=True)
    frame.attrs["dropped"] = dropped
    frame.attrs["noisy"] = sum(reasons.values())
    frame.attrs["noisy_reasons"] = dict(sorted(reasons.items(), key=lambda kv: (-kv[1], kv[0])))
    return frame


#: How `left_out_reasons` starts the reason of an interfered record: ``noisy: <noise_kind>``.
NOISY = "noisy: "


def left_out_reasons(frame: pd.DataFrame, *, passed_only: bool = True, include_noisy: bool = False) -> pd.Series:
    """Per record, why it cannot answer for its configuration ("" where it can): with
    `passed_only` its status where it did not pass (none counts as passed), else ``no latency``;
    without `include_noisy`, ``noisy: <kind>`` (`NOISY`, `noise_kind`) where it was interfered with."""
    why = pd.Series("", index=frame.index, dtype=object)
    if not include_noisy and "noise" in frame.columns:
        noisy = (frame["noise"] == "noisy").to_numpy()
        kinds = frame["noise_reason"] if "noise_reason" in frame.columns else pd.Series("", index=frame.index)
        why[noisy] = [NOISY + noise_kind(text) for text in kinds[noisy]]
    if passed_only:
        latency = pd.to_numeric(frame["latency_ms_median"], errors="coerce").to_numpy(dtype=float) \
            if "latency_ms_median" in frame.columns else np.full(len(frame), np.nan)
        why[~(np.isfinite(latency) & (latency > 0))] = "no latency"
        if "status" in frame.columns:
            status = frame["status"].astype(object).where(frame["status"].notna(), "passed").astype(str)
            failed = (status != "passed").to_numpy()
            why[failed] = status[failed]
    return why


def noise_kind(reason: object) -> str:
    """The kinds of interference a record's ``noise_reason`` names, joined by `` + ``, for counting
    (``unstated`` when it names none)."""
    text = str(reason or "")
    kinds = [kind for needle, kind in (
        ("busy with other processes", "other processes on our cores"),
        ("stolen by the hypervisor", "stolen time"),
        ("changed speed during the case", "host changed speed during the case"),
        ("GPU clocks reduced", "GPU slowed"),
        ("on the GPU", "other processes on the GPU"),
        ("than this host's best", "a slower host (older records)"),
    ) if needle in text]
    return " + ".join(kinds) or "unstated"


@dataclass(frozen=True)
class RecordCounts:
    """What became of a source's records on their way to the training table: `records` usable,
    `dropped` by reason (`drop_impossible`), `noisy` interfered ones left out (`noisy_reasons`:
    how many of each kind), `other_modes` usable ones of modes hwsel does not learn, and `outside`
    usable ones a window left out (`hwsel.history.Window`)."""

    records: int
    dropped: Mapping[str, int] = field(default_factory=dict)
    noisy: int = 0
    noisy_reasons: Mapping[str, int] = field(default_factory=dict)
    other_modes: Mapping[str, int] = field(default_factory=dict)
    outside: int = 0

    @classmethod
    def of(cls, runs: pd.DataFrame | RecordCounts) -> RecordCounts:
        """The counts of a `load_runs` frame (its length, its ``attrs``, its modes)."""
        if isinstance(runs, RecordCounts):
            return runs
        modes = runs["mode"].map(lambda v: normalise_mode(v) if isinstance(v, str) else "inference")
        other = modes[~modes.isin(MODES)].value_counts()
        noisy = int(runs.attrs.get("noisy") or 0)
        return cls(len(runs), dict(runs.attrs.get("dropped") or {}), noisy,
                   dict(runs.attrs.get("noisy_reasons") or {}) if noisy else {},
                   {str(mode): int(n) for mode, n in other.items()})


def usable_rows_text(runs: pd.DataFrame | RecordCounts, rows: int) -> str:
    """``found N usable rows``, with what was left out and why where anything was (never a bare 0):
    the interfered records, how many of each kind and the flag that keeps them, and the dropped ones."""
    counts = RecordCounts.of(runs)
    parts = [f"found {rows} usable row{'s' if rows != 1 else ''}"]
    if counts.noisy:
        why = ", ".join(f"{n} {reason}" for reason, n in counts.noisy_reasons.items()) or "interfered with"
        parts.append(f"left out {counts.noisy} interfered record{'s' if counts.noisy != 1 else ''} ({why}); "
                     "--include-noisy keeps them")
    if counts.dropped:
        parts.append(dropped_text(dict(counts.dropped)))
    if rows == 0 and not counts.noisy and not counts.dropped:
        parts.append("the source holds no passed record with a latency; run the benchmarks first")
    return "; ".join(parts)


def drop_impossible(frame: pd.DataFrame) -> tuple[pd.DataFrame, dict[str, int]]:
    """`frame` without the passed records that cannot be measurements
    (`pytest_hwbench.record.measurement_problem`), and reason -> count (e.g. ``latency_ms_median not finite``)."""
    if not len(frame):
        return frame, {}
    problems = [measurement_problem(row) for row in frame.to_dict("records")]
    bad = np.array([p is not None for p in problems], dtype=bool)
    if not bad.any():
        return frame, {}
    counts = Counter(p.split(" (", 1)[0] for p in problems if p is not None)
    return frame.loc[~bad], dict(sorted(counts.items(), key=lambda kv: (-kv[1], kv[0])))


def dropped_text(dropped: dict[str, int]) -> str:
    """"dropped 3 records that cannot be measurements: 2 latency_ms_median not finite, 1 ..."."""
    total = sum(dropped.values())
    return (f"dropped {total} record{'s' if total != 1 else ''} that cannot be measurements: "
            + ", ".join(f"{n} {reason}" for reason, n in dropped.items()))


def _warn_dropped(dropped: dict[str, int], where: str) -> None:
    import warnings

    from .query import HwselWarning

    warnings.warn(f"{where}: {dropped_text(dropped)}", HwselWarning, stacklevel=3)


#: What makes two records measurements of the same configuration.
CONFIG_KEYS: tuple[str, ...] = (
    "model", "backend", "hardware", "device_name", "precision", "mode", "batch_size",
    "sequence_length", "image_size", "audio_samples", "threads",
)


def training_table(runs: pd.DataFrame) -> pd.DataFrame:
    """Runs plus the targets, in natural units, one row per configuration.

    - ``latency_ms``: the median latency of a forward; for a record computing on the host's CPU
      with a host speed, ``latency x host_speed`` (clipped to `HOST_SPEED_BOUNDS`;
      ``host_speed_corrected`` says which rows were): answers are for the host at its best;
    - ``throughput``: ``batch_size / latency_ms * 1000`` items/s, derived so the two always agree;
    - ``memory_mb``: the median peak device memory where the device reports it, else host RSS
      (NaN where neither is known).

    A configuration is `CONFIG_KEYS`, the device by its identity (`hwsel.specs.device_key`); the
    repeat nearest the median gives the other fields, ``repeats`` counts the repeats and
    ``latency_spread`` is slowest / fastest. Rows without a positive latency, and ``generate``
    rows (a whole ``generate()`` call, not one forward), are left out; ``training`` reads as ``train``.
    """
    import duckdb

    table = runs.reset_index(drop=True)
    if "mode" in table.columns:
        table["mode"] = table["mode"].map(lambda v: normalise_mode(v) if isinstance(v, str) else v)
    inputs = table.reindex(columns=list(TARGET_INPUTS)).assign(
        _src=0, _row=np.arange(len(table)), _speed=table["host_speed"] if "host_speed" in table.columns else np.nan)
    with duckdb.connect() as con:
        con.register("runs_frame", inputs)
        _target_rows(con, "runs_frame", "runs_rows")
        stats = _configuration_stats(con, "runs_rows")
    return _with_targets(table.iloc[stats["_row"].to_numpy()], stats)


#: The record fields `_target_rows` reads.
TARGET_INPUTS: tuple[str, ...] = ("record_id", "session_id", "created_at", *CONFIG_KEYS, "latency_ms_median",
                                  "peak_device_memory_mb", "peak_host_rss_mb")


def _sql_text(values: Sequence[str]) -> str:
    return ", ".join("'" + v.replace("'", "''") + "'" for v in values) or "NULL"


def _frame(con: duckdb.DuckDBPyConnection, sql: str) -> pd.DataFrame:
    import warnings

    with warnings.catch_warnings():
        # duckdb's DataFrame conversion calls drop(inplace=True), which pandas deprecates
        warnings.filterwarnings("ignore", message="The inplace keyword", category=Warning)
        return con.execute(sql).df()


def _target_rows(con: duckdb.DuckDBPyConnection, relation: str, into: str) -> None:
    """Table `into`: the records of `relation` (`TARGET_INPUTS`, ``_src``, ``_row`` and the host
    speed ``_speed``) that can train, with their configuration ``_gid`` (its mode's one spelling
    also in table ``mode_names``), corrected latency ``_lat`` (``_corrected``) and memory ``_mem``."""
    modes = con.execute(f"SELECT DISTINCT mode FROM {relation} WHERE mode IS NOT NULL").fetchall()
    con.register("mode_names", pd.DataFrame([(m, normalise_mode(m)) for (m,) in modes], columns=["raw", "norm"],
                                            dtype=object))
    devices = con.execute(f"SELECT DISTINCT hardware, device_name FROM {relation}").fetchall()
    con.register("device_keys", pd.DataFrame([(h, d, device_key(str(h), d if isinstance(d, str) else None))
                                              for h, d in devices], columns=["hardware", "device_name", "device"],
                                             dtype=object))
    low, high = HOST_SPEED_BOUNDS
    keys = ", ".join({"mode": "_mode", "device_name": "_device"}.get(k, k) for k in CONFIG_KEYS)
    con.execute(f"""
        CREATE TEMP TABLE {into} AS
        WITH keyed AS (
            SELECT r.*, m.norm AS _mode, d.device AS _device, coalesce(isfinite(_speed) AND _speed > 0
                       AND r.hardware IN ({_sql_text(sorted(facts.target_set(host_cpu=True)))}), false) AS _corrected
            FROM {relation} r
            LEFT JOIN mode_names m ON r.mode = m.raw
            LEFT JOIN device_keys d ON r.hardware IS NOT DISTINCT FROM d.hardware
                                   AND r.device_name IS NOT DISTINCT FROM d.device_name
            WHERE (m.norm IN ({_sql_text(MODES)}) OR m.norm IS NULL) AND r.batch_size >= 1
                  AND coalesce(isfinite(r.latency_ms_median) AND r.latency_ms_median > 0, false))
        SELECT _src, _row, record_id, session_id, created_at, _corrected, {keys},
            latency_ms_median * CASE WHEN _corrected THEN least(greatest(_speed, {low!r}), {high!r}) ELSE 1.0 END AS _lat,
            CASE WHEN NOT isnan(peak_device_memory_mb) AND peak_device_memory_mb > 0 THEN peak_device_memory_mb
                 WHEN NOT isnan(peak_host_rss_mb) AND peak_host_rss_mb > 0 THEN peak_host_rss_mb END AS _mem,
            dense_rank() OVER (ORDER BY {keys}) AS _gid
        FROM keyed""")


def _configuration_stats(con: duckdb.DuckDBPyConnection, rows: str) -> pd.DataFrame:
    """Per configuration of `rows` (`_target_rows`' columns), in ``_row`` order: its representative
    (the repeat nearest the median; ties: the faster, then the first), ``repeats``,
    ``latency_spread``, and the medians ``_median`` (latency) and ``_memory``."""
    return _frame(con, f"""
        WITH med AS (
            SELECT _gid, count(*) AS repeats, max(_lat) / min(_lat) AS latency_spread, median(_lat) AS _median,
                   median(_mem) AS _memory
            FROM {rows} GROUP BY _gid)
        SELECT r._src, r._row, r.record_id, r._corrected, m.repeats, m.latency_spread, m._median, m._memory
        FROM {rows} r JOIN med m USING (_gid)
        QUALIFY row_number() OVER (PARTITION BY r._gid ORDER BY abs(r._lat - m._median), r._lat, r._row) = 1
        ORDER BY r._row""")


def _with_targets(rows: pd.DataFrame, stats: pd.DataFrame) -> pd.DataFrame:
    """The representative records `rows` with the targets of their configurations (`stats`, row for row)."""
    table = rows.reset_index(drop=True)
    table["host_speed_corrected"] = stats["_corrected"].to_numpy(dtype=bool)
    table["latency_ms"] = stats["_median"].to_numpy(dtype=float)
    table["throughput"] = pd.to_numeric(table["batch_size"]).astype(float) / table["latency_ms"] * 1e3
    table["memory_mb"] = pd.to_numeric(stats["_memory"], errors="coerce").to_numpy(dtype=float)
    table["repeats"] = stats["repeats"].to_numpy(dtype=np.int64)
    table["latency_spread"] = stats["latency_spread"].to_numpy(dtype=float)
    return table


def rows_text(runs: pd.DataFrame | RecordCounts, table: pd.DataFrame) -> str:
    """How the records `runs` (a `load_runs` frame, or their `RecordCounts`) became the rows of
    their `training_table`, in one line (``192 records became 188 rows: ...``)."""
    counts = RecordCounts.of(runs)
    repeats = table["repeats"].astype(int)
    several = repeats[repeats > 1]
    parts = []
    if len(several):
        parts.append(f"the {int(several.sum())} records of {len(several)} configuration{'s' if len(several) != 1 else ''}"
                     " measured in several sessions are one row each (their median)")
    for mode, n in counts.other_modes.items():
        parts.append(f"{n} {mode} record{'s are' if n != 1 else ' is'} in no row (hwsel learns {' and '.join(MODES)})")
    if counts.outside:
        parts.append(f"{counts.outside} record{'s' if counts.outside != 1 else ''} of older sessions "
                     f"{'are' if counts.outside != 1 else 'is'} in no row (the window's newest sessions only)")
    unused = counts.records - int(repeats.sum()) - sum(counts.other_modes.values()) - counts.outside
    if unused > 0:
        parts.append(f"{unused} record{'s' if unused != 1 else ''} without a latency {'are' if unused != 1 else 'is'} "
                     "in no row")
    n = counts.records
    head = f"{n} record{'s' if n != 1 else ''} became {len(table)} row{'s' if len(table) != 1 else ''}"
    return f"{head}: {'; '.join(parts)}" if parts else head


def snapshot(frame: pd.DataFrame, path: str | os.PathLike[str]) -> Path:
    """Write `frame` to Parquet (zstd, without the nested ``extra``/``cpu_affinity`` columns)."""
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    flat = frame.drop(columns=[c for c in NESTED_COLUMNS if c in frame.columns])
    flat.to_parquet(path, index=False, compression="zstd")
    return path


__all__ = ["CONFIG_KEYS", "HOST_SPEED_BOUNDS", "RUN_COLUMNS", "describe_sources", "drop_impossible",
           "dropped_text", "existing_store", "NOISY", "RecordCounts", "left_out_reasons", "load_runs",
           "noise_kind", "rows_text", "snapshot", "usable_rows_text", "source_list", "training_table"]
