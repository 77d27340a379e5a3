"""Benchmark runs in, one training table out.

`load_runs` reads the records pytest-hwbench wrote, from any of its stores:

- an MLflow tracking URI (default: `pytest_hwbench.sinks.resolve_tracking_uri`, i.e.
  ``$MLFLOW_TRACKING_URI``, else ``sqlite:///mlruns/mlflow.db``):
  the child runs of experiment ``hwbench`` (one per case, tag ``hwbench.record_id``), params cast
  back from strings (``none`` is None) with the record schema's types, metrics as logged;
- a DuckDB file (``*.duckdb``): the ``results`` table;
- a Parquet snapshot (``*.parquet``): what `snapshot` wrote, or any frame with record fields;
- a JSON-lines records file (``*.jsonl``, e.g. GPU evidence spool files) or a spool directory,
  read by `pytest_hwbench.sinks.read_records`.

Several sources (e.g. the committed CPU snapshot and a GPU host's spool) load as their union.

`training_table` adds the targets (latency, throughput derived from it, memory) and drops rows
that cannot teach anything. `snapshot` writes that table to Parquet with a content digest, so a
registered model can say exactly what it learned from.
"""

from __future__ import annotations

import hashlib
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

#: Identity and context columns kept next to params and metrics.
ID_COLUMNS: tuple[str, ...] = ("record_id", "session_id", "case_id", "status", "host", "created_at", "error",
                                "noise", "noise_reason")

#: Columns of a runs frame, in order; ``host_speed`` is the record's (`BenchmarkRecord.host_speed`,
#: NaN where unknown).
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


def default_source() -> str:
    """The harness's tracking URI (`pytest_hwbench.sinks.resolve_tracking_uri`): ``$MLFLOW_TRACKING_URI``,
    else the local store ``sqlite:///<cwd>/mlruns/mlflow.db``."""
    return resolve_tracking_uri()


def existing_store(tracking_uri: str | None = None) -> str | None:
    """The store to read when none is named, or None when there is none here.

    `tracking_uri` when given; else ``$MLFLOW_TRACKING_URI`` or the local ``mlruns/mlflow.db``
    (`default_source`) when that is set or exists, else the DuckDB file ``mlruns/hwbench.duckdb``
    when it exists. We never create a store just by looking (opening a SQLite URI would).
    """
    if tracking_uri:
        return tracking_uri
    store = Path(DEFAULT_STORE_DIR)
    if os.environ.get("MLFLOW_TRACKING_URI") or (store / "mlflow.db").exists():
        return default_source()
    duckdb_file = store / "hwbench.duckdb"
    return str(duckdb_file) if duckdb_file.exists() else None


def _host_speed(value: object) -> float:
    """The host speed a record's ``interference`` readings hold (a mapping or its JSON), else NaN."""
    if isinstance(value, str):
        import json

        try:
            value = json.loads(value)
        except ValueError:
            return float("nan")
    if isinstance(value, dict):
        speed = value.get("host_speed")
        if isinstance(speed, (int, float)) and speed > 0:
            return float(speed)
    return float("nan")


def _normalize(frame: pd.DataFrame) -> pd.DataFrame:
    """Every `RUN_COLUMNS` column present, with schema types (ints as nullable Int64)."""
    out = frame.copy()
    if "interference" in out.columns and ("host_speed" not in out.columns or out["host_speed"].isna().all()):
        out["host_speed"] = [_host_speed(v) for v in out["interference"]]
    for name in RUN_COLUMNS:
        if name not in out.columns:
            out[name] = None
    out["host_speed"] = pd.to_numeric(out["host_speed"], errors="coerce").astype(float)
    for name, kind in FIELD_TYPES.items():
        if kind == "int":
            out[name] = pd.to_numeric(out[name], errors="coerce").round().astype("Int64")
        elif kind == "float":
            out[name] = pd.to_numeric(out[name], errors="coerce").astype(float)
        else:
            out[name] = out[name].astype(object).where(out[name].notna(), None)
    for name in ID_COLUMNS:
        out[name] = out[name].astype(object).where(out[name].notna(), None)
        out[name] = out[name].map(lambda v: None if v is None else str(v))
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
    """One source as a frame: a Parquet snapshot here, everything else through the sinks' reader
    (an MLflow store's records of `experiment`)."""
    from hwsel._quiet import quiet_mlflow
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
            two sources counts once, the later source's copy); None means `default_source()`.
        experiment: MLflow experiment holding the records.
        passed_only: keep passed cases with a positive latency only.
        include_noisy: keep records that were interfered with (``noise == "noisy"``: other processes
            on their cores, stolen time, the host changing speed during the case); by default they
            are left out, counted in ``frame.attrs["noisy"]`` and by reason in
            ``frame.attrs["noisy_reasons"]`` (`usable_rows_text` says it in one line): their figures
            are the load's, not the configuration's. Records older than the verdict are kept. A
            steadily slow host is no interference: its records are clean and carry ``host_speed``,
            which `training_table` corrects for.

    Passed records that cannot be measurements (`drop_impossible`) are dropped whatever
    `passed_only` says, with an `HwselWarning` counting them by reason; the counts are in
    ``frame.attrs["dropped"]``.

    Raises:
        FileNotFoundError: a file source that does not exist.
        LookupError: an MLflow store without the experiment.
    """
    sources = source_list(source) or [default_source()]
    frames = [_normalize(_load_one(os.fspath(s), experiment)) for s in sources]
    frames = [f for f in frames if len(f)] or frames[:1]
    frame = frames[0] if len(frames) == 1 else _normalize(pd.concat(frames, ignore_index=True))
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
    """Per record, why it cannot answer for its configuration; "" for a record that can.

    With `passed_only`: its status where it did not pass (``failed``, ``crashed``; a record
    without a status counts as passed), else ``no latency`` where it has no positive median
    latency. Without `include_noisy`: ``noisy: <kind>`` (`NOISY`, `noise_kind`) for a record
    that was interfered with. The one rule `load_runs` and the measured layer
    (`hwsel.layers.measured.MeasuredIndex`) leave records out by.
    """
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
    """The kind of interference a record's ``noise_reason`` names, for counting: ``other
    processes on our cores``, ``stolen time``, ``host changed speed during the case``, ``GPU
    slowed``, ``other processes on the GPU``, ``a slower host (older records)`` or ``unstated``."""
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
    """What became of a source's records on their way to the training table.

    `records`: usable records (passed, with a latency, not left out as interfered); `dropped`:
    records that cannot be measurements, by reason (`drop_impossible`); `noisy`: interfered
    records left out, and `noisy_reasons` how many of each kind (`noise_kind`); `other_modes`: usable records of modes
    hwsel does not learn, by mode; `outside`: usable records a window left out (the newest N
    sessions per configuration, `hwsel.history.Window`).
    """

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
        modes = runs["mode"].map(lambda v: normalise_mode(v) if isinstance(v, str) else "inference") \
            if "mode" in runs.columns else pd.Series("inference", index=runs.index, dtype=object)
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
    """`frame` without the passed records that cannot be measurements, and reason -> count.

    The check is the harness's own (`pytest_hwbench.record.measurement_problem`): a NaN, zero,
    negative or absurd latency (beyond one day, or faster than any device could run the
    record's FLOPs) would train a model many times worse. Reasons are the
    problem's text before its value, e.g. ``latency_ms_median not finite``.
    """
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


def training_table(runs: pd.DataFrame, *, aggregate: bool = True) -> pd.DataFrame:
    """Runs plus the targets, in natural units.

    - ``latency_ms``: the median latency of a forward (robust to a noisy, shared machine); where
      the record carries a host speed and computes on the host's CPU (a target row `on_host_cpu`;
      an accelerator's latency does not move with a CPU kernel), ``latency x host_speed``, the
      speed clipped to `HOST_SPEED_BOUNDS` (``host_speed_corrected`` says which rows were):
      predictions are for the host at its recent best (host speed 1.0);
    - ``throughput``: ``batch_size / latency_ms * 1000`` items/s, derived so the two always agree;
    - ``memory_mb``: peak device memory where the device reports it, else peak host RSS.

    With `aggregate`, the repeats of one configuration (`CONFIG_KEYS`, the device by its identity
    `hwsel.specs.device_key`) become one row: latency and memory are their medians (not the
    fastest repeat: a median needs more than half the repeats wrong to move), the repeat nearest
    the median gives the other fields, ``repeats`` counts them and ``latency_spread`` is slowest /
    fastest.

    Rows without a positive latency are dropped; a missing memory stays NaN (that target skips
    the row). Modes keep the harness's names (``training`` from older snapshots reads as
    ``train``); ``generate`` rows (whose latency is a whole ``generate()`` call of `new_tokens`
    tokens, not one forward) are left out.
    """
    table = runs.reset_index(drop=True)
    if "mode" in table.columns:
        table["mode"] = table["mode"].map(lambda v: normalise_mode(v) if isinstance(v, str) else v)
        table = table.loc[table["mode"].isin(MODES) | table["mode"].isna()].reset_index(drop=True)
    latency = pd.to_numeric(table["latency_ms_median"], errors="coerce").astype(float)
    batch = pd.to_numeric(table["batch_size"], errors="coerce").astype(float)
    keep = np.isfinite(latency) & (latency > 0) & np.isfinite(batch) & (batch >= 1)
    table = table.loc[keep].copy()
    speed = pd.to_numeric(table["host_speed"], errors="coerce").astype(float) if "host_speed" in table.columns \
        else pd.Series(np.nan, index=table.index)
    # The reference kernel runs on the host's CPU: it speaks for cases that compute there only.
    host_bound = table["hardware"].isin(facts.target_set(host_cpu=True)) if "hardware" in table.columns \
        else pd.Series(False, index=table.index)
    known = np.isfinite(speed) & (speed > 0) & host_bound
    factor = speed.clip(*HOST_SPEED_BOUNDS).where(known, 1.0)
    table["host_speed_corrected"] = known
    latency = latency * factor.reindex(latency.index, fill_value=1.0)
    table["latency_ms"] = latency[keep]
    table["throughput"] = batch[keep] / latency[keep] * 1e3
    device = pd.to_numeric(table["peak_device_memory_mb"], errors="coerce").astype(float)
    host = pd.to_numeric(table["peak_host_rss_mb"], errors="coerce").astype(float)
    memory = device.where(device > 0, host)
    table["memory_mb"] = memory.where(memory > 0)
    table["repeats"] = 1
    table["latency_spread"] = 1.0
    if aggregate and len(table):
        keys = [k for k in CONFIG_KEYS if k in table.columns]
        # groupby drops None keys unless told; text keys as str keep None and NaN apart from values.
        key_frame = table[keys].astype(str)
        if "device_name" in key_frame.columns and "hardware" in table.columns:
            # one device by any of its names (`hwsel.specs.device_key`): H100 and NVIDIA H100 80GB HBM3
            key_frame["device_name"] = [device_key(str(hw), name if isinstance(name, str) else None)
                                        for hw, name in zip(table["hardware"], table["device_name"], strict=True)]
        groups = table.groupby([key_frame[k] for k in keys], sort=False, dropna=False)
        median = groups["latency_ms"].transform("median")
        stats = pd.DataFrame({
            "repeats": groups["latency_ms"].transform("size"),
            "latency_spread": groups["latency_ms"].transform("max") / groups["latency_ms"].transform("min"),
            "memory_mb": groups["memory_mb"].transform("median"),
        })
        table[["repeats", "latency_spread", "memory_mb"]] = stats
        # the representative: the repeat nearest the median (ties: the faster, then the first)
        nearest = (table["latency_ms"] - median).abs().rename("_distance")
        order = pd.concat([nearest, table["latency_ms"]], axis=1).sort_values(
            ["_distance", "latency_ms"], kind="mergesort").index
        first = ~key_frame.loc[order].duplicated(keep="first")
        table = table.loc[order[first.to_numpy()]].copy()
        table["latency_ms"] = median.loc[table.index]
        table["throughput"] = batch.loc[table.index] / table["latency_ms"] * 1e3
        table = table.sort_index(kind="mergesort")
    return table.reset_index(drop=True)


def rows_text(runs: pd.DataFrame | RecordCounts, table: pd.DataFrame) -> str:
    """How the records `runs` (a `load_runs` frame, or their `RecordCounts`) became the rows of
    their `training_table`, in one line: ``192 records became 188 rows: the 8 records of 4
    configurations measured in several sessions are one row each (their median)``, and the
    records no row holds, by mode."""
    counts = RecordCounts.of(runs)
    repeats = pd.to_numeric(table["repeats"], errors="coerce").fillna(1).astype(int) if "repeats" in table.columns \
        else pd.Series(1, index=table.index)
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


def frame_digest(frame: pd.DataFrame) -> str:
    """SHA-256 of a frame's content (row order and column order included)."""
    hashed = pd.util.hash_pandas_object(frame.astype(str), index=False).to_numpy()
    digest = hashlib.sha256(hashed.tobytes())
    digest.update(",".join(map(str, frame.columns)).encode())
    return digest.hexdigest()


def snapshot(frame: pd.DataFrame, path: str | os.PathLike[str]) -> Path:
    """Write `frame` to Parquet (zstd, without the nested ``extra``/``cpu_affinity`` columns)."""
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    flat = frame.drop(columns=[c for c in NESTED_COLUMNS if c in frame.columns])
    flat.to_parquet(path, index=False, compression="zstd")
    return path


__all__ = [
    "CONFIG_KEYS",
    "DEFAULT_EXPERIMENT",
    "HOST_SPEED_BOUNDS",
    "RUN_COLUMNS",
    "default_source",
    "describe_sources",
    "drop_impossible",
    "dropped_text",
    "existing_store",
    "frame_digest",
    "NOISY",
    "RecordCounts",
    "left_out_reasons",
    "load_runs",
    "noise_kind",
    "rows_text",
    "snapshot",
    "usable_rows_text",
    "source_list",
    "training_table",
]
