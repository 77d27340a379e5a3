"""hwsel's training table asked of DuckDB (`hwsel.history`) equals the one built in pandas from
every record (`hwsel.data.training_table(load_runs(...))`), on real DuckDB files of several
sessions: same rows, same medians, same left-out counts; windows narrow it by date and sessions."""

from __future__ import annotations

import dataclasses
import datetime as dt
import random
import uuid
from pathlib import Path

import numpy as np
import pandas as pd
import pytest

from hwsel.data import RecordCounts, load_runs, rows_text, training_table
from hwsel.history import History, Window, history_table, parse_since
from pytest_hwbench.record import BenchmarkRecord, SessionInfo
from pytest_hwbench.sinks import DuckDBSink, read_records

DATA = Path(__file__).parent / "data"
NIGHT0 = dt.datetime(2026, 1, 1, 2, 0, tzinfo=dt.timezone.utc)


def night_records(base: list[BenchmarkRecord], session: SessionInfo, night: int) -> list[BenchmarkRecord]:
    """One night's copy of `base`: new ids, latencies moved by a seeded few percent, and the
    records hwsel must leave out or treat apart (failed, interfered, impossible, generate mode,
    a CPU host running slow, memory missing)."""
    rng = random.Random(night)
    created = NIGHT0 + dt.timedelta(days=night)
    out = []
    for i, record in enumerate(base):
        factor = 1.0 + rng.uniform(-0.05, 0.05)
        median = (record.latency_ms_median or 1.0) * factor
        changes: dict[str, object] = {
            "record_id": uuid.uuid4().hex, "session_id": session.session_id,
            "created_at": (created + dt.timedelta(seconds=i)).isoformat(),
            "latency_ms_median": median, "latency_ms_mean": median,
            "latency_ms_min": median * 0.9, "latency_ms_max": median * 1.2,
            "latency_ms_p90": median * 1.1, "latency_ms_p95": median * 1.15, "latency_ms_p99": median * 1.19,
            "throughput_items_per_s": record.batch_size / median * 1e3, "timings_ms": (),
        }
        if i % 7 == night % 7:
            changes["status"] = "failed"
        elif i % 11 == night % 5:
            changes |= {"noise": "noisy", "noise_reason": "host busy with other processes (load 3.1)"}
        elif i % 13 == night % 3:
            changes |= {"hardware": "cpu", "device_name": "Intel Xeon", "backend": "torch",
                        "interference": {"host_speed": (0.4, 0.8, 1.0, 1.5)[night % 4]}}
        if i % 17 == night:
            changes["peak_device_memory_mb"] = None
        out.append(dataclasses.replace(record, **changes))
    # a record that cannot be a measurement (latency beyond one day), and a generate-mode one
    out.append(dataclasses.replace(out[0], record_id=uuid.uuid4().hex, status="passed", noise=None,
                                   latency_ms_median=1e9, latency_ms_max=1e9 * 1.2, latency_ms_mean=1e9))
    out.append(dataclasses.replace(out[1], record_id=uuid.uuid4().hex, mode="generate", new_tokens=16,
                                   status="passed", noise=None))
    return out


def build_store(path: Path, nights: int) -> Path:
    base = read_records(DATA / "h100_subset.jsonl") + read_records(DATA / "h100_quick_session.jsonl")
    sink = DuckDBSink(path)
    for night in range(nights):
        started = NIGHT0 + dt.timedelta(days=night)
        session = SessionInfo(session_id=f"night-{night:03d}-{uuid.uuid4().hex[:6]}", started_at=started.isoformat(),
                              host="h100-runner")
        sink.open_session(session)
        sink.write(night_records(base, session, night))
        sink.close("finished")
    return path


@pytest.fixture(scope="module")
def store(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return build_store(tmp_path_factory.mktemp("history") / "nights.duckdb", 6)


def same_table(sql: pd.DataFrame, pandas: pd.DataFrame) -> None:
    order = ["model", "backend", "hardware", "precision", "batch_size", "record_id"]
    a = sql.sort_values(order, kind="mergesort").reset_index(drop=True)
    b = pandas.sort_values(order, kind="mergesort").reset_index(drop=True)
    assert list(a.columns) == list(b.columns)
    assert list(a["record_id"]) == list(b["record_id"])  # same representatives
    for column in ("latency_ms", "throughput", "memory_mb", "latency_spread"):
        np.testing.assert_array_equal(a[column].to_numpy(dtype=float), b[column].to_numpy(dtype=float), err_msg=column)
    assert list(a["repeats"]) == list(b["repeats"])
    flat = [c for c in a.columns if c not in ("extra", "cpu_affinity", "interference")]
    pd.testing.assert_frame_equal(a[flat].astype(str), b[flat].astype(str))


def test_history_equals_training_table_of_every_record(store: Path) -> None:
    with pytest.warns(Warning, match="cannot be measurements"):
        runs = load_runs(store)
    expected = training_table(runs)
    found = history_table([store])
    assert isinstance(found, History)
    assert (found.table["repeats"] > 1).any() and found.table["host_speed_corrected"].any()
    same_table(found.table, expected)
    assert found.counts == RecordCounts.of(runs)
    assert sum(found.counts.dropped.values()) == 6 and found.counts.noisy == runs.attrs["noisy"] > 0
    assert found.counts.other_modes == {"generate": 6}
    assert rows_text(runs, expected) == rows_text(found.counts, found.table)


def test_history_with_noisy_records_equals_pandas(store: Path) -> None:
    with pytest.warns(Warning):
        runs = load_runs(store, include_noisy=True)
    found = history_table([store], include_noisy=True)
    same_table(found.table, training_table(runs))
    assert found.counts.noisy == 0 and found.counts.records == len(runs)


def test_two_files_are_their_union(store: Path, tmp_path: Path) -> None:
    other = build_store(tmp_path / "more.duckdb", 2)
    with pytest.warns(Warning):
        runs = load_runs([store, other])
    same_table(history_table([store, other]).table, training_table(runs))


def test_since_keeps_the_newer_nights(store: Path, tmp_path: Path) -> None:
    """--since is the table of the records created since then: the same as a store holding only
    those nights."""
    since = parse_since("2026-01-04")
    assert since == dt.datetime(2026, 1, 4, tzinfo=dt.timezone.utc)
    found = history_table([store], window=Window(since=since))
    with pytest.warns(Warning):
        runs = load_runs(store)
    newer = runs.loc[pd.to_datetime(runs["created_at"], utc=True) >= since].reset_index(drop=True)
    same_table(found.table, training_table(newer))
    assert found.table["repeats"].max() == 3


def test_sessions_keeps_the_newest_per_configuration(store: Path) -> None:
    found = history_table([store], window=Window(sessions=2))
    assert found.table["repeats"].max() == 2 and found.counts.outside > 0
    full = history_table([store])
    assert len(found.table) == len(full.table)  # every configuration, from its two newest sessions
    with pytest.warns(Warning):
        runs = load_runs(store)
    newest = runs["session_id"].isin(sorted(set(runs["session_id"]))[-2:])
    two_nights = training_table(runs.loc[newest].reset_index(drop=True))
    # configurations measured (usable) in both of the last two nights: their median is those two nights'
    both = found.table.merge(two_nights[two_nights["repeats"] == 2][["record_id", "latency_ms"]], on="record_id",
                             suffixes=("", "_two"))
    assert len(both) > 10
    np.testing.assert_array_equal(both["latency_ms"].to_numpy(), both["latency_ms_two"].to_numpy())


@pytest.mark.parametrize("text", ["yesterday", "2026-13-01", ""])
def test_since_names_a_bad_date(text: str) -> None:
    with pytest.raises(ValueError, match="YYYY-MM-DD"):
        parse_since(text)


def test_window_checks_its_values() -> None:
    with pytest.raises(ValueError, match="sessions must be >= 1"):
        Window(sessions=0)
    with pytest.raises(ValueError, match="time zone"):
        Window(since=dt.datetime(2026, 1, 1))
