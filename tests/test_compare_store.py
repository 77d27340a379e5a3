"""`hwbench compare` asks the DuckDB file: `case_summaries` computes in SQL what each side holds of
each case (rounds, session medians, threads, devices, smoothed host speed, noise, failure), the same
`Side` that `sides_of` builds from every record, so the verdicts are those of `compare_records`."""

from __future__ import annotations

import dataclasses
import datetime as dt
import math

import numpy as np
import pytest
from test_compare import failed, record

from pytest_hwbench.compare import compare_cases, compare_records
from pytest_hwbench.compare_sides import Side, side_of_summary, sides_of
from pytest_hwbench.record import BenchmarkRecord, SessionInfo
from pytest_hwbench.sinks import DuckDBSink
from pytest_hwbench.sinks._duckdb_read import case_summaries, load_records

START = dt.datetime(2026, 3, 1, tzinfo=dt.timezone.utc)


def session(index: int) -> SessionInfo:
    return SessionInfo(session_id=f"s{index:02d}" + "0" * 30, started_at=(START + dt.timedelta(days=index)).isoformat(),
                       host="bench-01", git_commit="", git_branch="main", runner_label="nightly",
                       hardware_summary="cpu", package_versions={})


def night(index: int, rng: np.random.Generator) -> list[BenchmarkRecord]:
    """A session's records: clean and noisy cases, a failure, a case without raw timings, short and
    non-finite timings, host speed on some records, thread counts that change."""
    sid = session(index).session_id
    out: list[BenchmarkRecord] = []
    for m in range(8):
        timings = list(rng.normal(10.0 + m, 0.2, 20 + m + index))
        if m == 3:
            timings[4] = math.nan
        noise = "noisy" if (m + index) % 5 == 0 else ("clean" if m != 6 else None)
        out.append(record(sid, f"m{m}", timings, noise=noise, reason="steal 12%" if noise == "noisy" else "",
                          threads=2 if m != 7 or index % 2 else 4))
    out.append(record(sid, "short", [5.0, 5.1, 4.9]))
    out.append(dataclasses.replace(record(sid, "kept-median", [7.0] * 10), timings_ms=()))
    out.append(failed(sid, "broken", f"boom {index}") if index % 2 else record(sid, "broken", [3.0] * 12))
    out.append(failed(sid, "never", ""))
    for i, r in enumerate(out):
        interference = {"host_speed": 0.8 + 0.05 * ((i + index) % 4), "reference_us": 100.0 + 7 * ((i * 3 + index) % 5)}
        out[i] = dataclasses.replace(r, created_at=(START + dt.timedelta(days=index, seconds=i)).isoformat(),
                                     interference=interference if i % 3 else {})
    return out


@pytest.fixture(scope="module")
def store(tmp_path_factory: pytest.TempPathFactory) -> str:
    path = tmp_path_factory.mktemp("compare-store") / "hwbench.duckdb"
    sink = DuckDBSink(path)
    rng = np.random.default_rng(7)
    for index in range(5):
        sink.open_session(session(index))
        sink.write(night(index, rng))
        sink.close("finished")
    return str(path)


def same_side(got: Side, want: Side) -> bool:
    def close(x: tuple[float, ...], y: tuple[float, ...]) -> bool:
        return len(x) == len(y) and all(math.isclose(a, b) for a, b in zip(sorted(x), sorted(y), strict=True))

    return (close(got.rounds, want.rounds) and close(got.session_medians, want.session_medians)
            and (got.threads, got.devices, got.noise, got.noisy_reason, got.failure)
            == (want.threads, want.devices, want.noise, want.noisy_reason, want.failure)
            and (got.reference_us is None) == (want.reference_us is None)
            and (got.reference_us is None or math.isclose(got.reference_us, want.reference_us or 0)))


@pytest.mark.parametrize("chosen", [None, [4], [3, 1]], ids=["all", "one", "two"])
def test_case_summaries_are_the_sides_of_the_records(store: str, chosen: list[int] | None) -> None:
    ids = None if chosen is None else [session(i).session_id for i in chosen]
    records = load_records(store) if ids is None else [r for sid in ids for r in load_records(store, sid)]
    want = sides_of(records)
    got = {s["case_id"]: side_of_summary(s) for s in case_summaries(store, ids)}
    assert list(got) == list(want)
    assert [c for c in want if not same_side(got[c], want[c])] == []


def test_verdicts_from_the_store_are_those_of_the_records(store: str) -> None:
    latest = session(4).session_id
    history = [session(i).session_id for i in range(4)]
    a_records = [r for sid in history for r in load_records(store, sid)]
    b_records = load_records(store, latest)
    by_records = compare_records(a_records, b_records)
    by_store = compare_cases({s["case_id"]: side_of_summary(s) for s in case_summaries(store, history)},
                             {s["case_id"]: side_of_summary(s) for s in case_summaries(store, [latest])})
    assert [(c.case_id, c.verdict, c.note) for c in by_store] == [(c.case_id, c.verdict, c.note) for c in by_records]
    for got, want in zip(by_store, by_records, strict=True):
        for name in ("median_a", "median_b", "change", "p_value", "low", "high", "between_runs", "host_ratio"):
            x, y = getattr(got, name), getattr(want, name)
            assert (x is None) == (y is None) and (x is None or math.isclose(x, y, rel_tol=1e-9)), (got.case_id, name)
    assert {c.verdict for c in by_store} - {"missing"}  # something was compared
    assert any(c.host_ratio is not None for c in by_store)


def stored_rounds(path: str) -> dict[str, list[float]]:
    import duckdb

    with duckdb.connect(path, read_only=True) as con:
        return dict(con.execute("SELECT record_id, ms FROM rounds").fetchall())


def test_each_record_is_written_with_the_rounds_of_its_timings_once(store: str, tmp_path) -> None:
    from pytest_hwbench.trackers import round_medians

    records = load_records(store)
    stored = stored_rounds(store)
    # a record with finite timings has its rounds, as trackers computes them; one without has none
    want = {r.record_id: round_medians(r.timings_ms) for r in records if round_medians(r.timings_ms)}
    assert set(stored) == set(want)
    assert all(np.allclose(stored[rid], want[rid]) for rid in want)
    assert any(len(v) < 5 for v in want.values()) and any(len(v) == 5 for v in want.values())
    # writing the same records again adds no rounds
    again = tmp_path / "again.duckdb"
    sink = DuckDBSink(again)
    sink.open_session(session(0))
    sink.write(records[:6])
    sink.write(records[:8])
    sink.close("finished")
    assert sorted(stored_rounds(str(again))) == sorted(r.record_id for r in records[:8] if round_medians(r.timings_ms))


def test_a_file_written_before_stored_rounds_gets_them_when_first_read(store: str, tmp_path) -> None:
    import shutil

    import duckdb

    old = tmp_path / "v3.duckdb"
    shutil.copy(store, old)
    with duckdb.connect(str(old)) as con:  # the file as schema version 3 left it: no rounds table
        con.execute("DROP TABLE rounds")
        con.execute("DELETE FROM schema_info WHERE version = 4")
    ids = [session(i).session_id for i in (3, 1)]
    got = {s["case_id"]: side_of_summary(s) for s in case_summaries(str(old), ids)}
    want = {s["case_id"]: side_of_summary(s) for s in case_summaries(store, ids)}
    assert list(got) == list(want) and all(same_side(got[c], want[c]) for c in want)
    assert stored_rounds(str(old)) == stored_rounds(store)


def test_a_comparison_that_needs_more_memory_than_it_may_take_is_refused_naming_the_fix(
        store: str, monkeypatch: pytest.MonkeyPatch) -> None:
    from pytest_hwbench.sinks import _duckdb_read

    monkeypatch.setattr(_duckdb_read, "SUMMARY_MEMORY_LIMIT", "256KB")
    with pytest.raises(ValueError, match=r"comparing every session needs more than the 256KB .* compare fewer sessions"):
        case_summaries(store, None)
