"""Reading the DuckDB ``results`` table into pandas a few vectors at a time gives the frame one
conversion of the whole answer gives: the same rows, order, values and column types."""

from __future__ import annotations

from pathlib import Path

import duckdb
import pandas as pd
import pytest
from test_sinks import make_records, make_session

from pytest_hwbench.report import REPORT_COLUMNS
from pytest_hwbench.sinks import DuckDBSink, _duckdb_read
from pytest_hwbench.sinks._duckdb_read import list_sessions, load_results


@pytest.fixture(scope="module")
def many_rows(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A DuckDB file of 40 records written by the sink, copied in SQL to 4,840 rows (more than
    two 2,048-row vectors), failed records and their errors included."""
    path = tmp_path_factory.mktemp("frame") / "hwbench.duckdb"
    session = make_session()
    sink = DuckDBSink(path)
    sink.open_session(session)
    sink.write(make_records(session, 40))
    sink.close("finished")
    with duckdb.connect(str(path)) as con:
        con.execute("INSERT INTO results SELECT results.* REPLACE (md5(record_id || n.range::VARCHAR) AS record_id, "
                    "created_at + n.range * INTERVAL 1 SECOND AS created_at) FROM results, range(1, 121) n")
    return path


def test_results_read_in_vectors_equal_one_conversion(many_rows: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(_duckdb_read, "FRAME_VECTORS", 1)
    chunked = load_results(many_rows, columns=REPORT_COLUMNS)
    with duckdb.connect(str(many_rows), read_only=True) as con:
        whole = _duckdb_read.typed_results(
            con.execute(f"SELECT {', '.join(REPORT_COLUMNS)} FROM results ORDER BY created_at, record_id").df())
    assert len(chunked) == 40 * 121
    pd.testing.assert_frame_equal(chunked, whole)
    assert (chunked["status"] == "failed").sum() == 10 * 121
    assert chunked["error"].notna().sum() == 10 * 121


def test_an_empty_answer_keeps_its_columns(many_rows: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(_duckdb_read, "FRAME_VECTORS", 1)
    empty = load_results(many_rows, "no-such-session", columns=["record_id", "latency_ms_median"])
    assert list(empty.columns) == ["record_id", "latency_ms_median"] and empty.empty
    assert len(list_sessions(many_rows)) == 1


def test_a_categorical_read_holds_the_same_rows_with_each_text_once(many_rows: Path,
                                                                     monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(_duckdb_read, "FRAME_VECTORS", 1)  # 3 batches, each with its own dictionaries
    plain = load_results(many_rows, columns=REPORT_COLUMNS)
    compact = load_results(many_rows, columns=REPORT_COLUMNS, categorical=True)
    texts = [c for c in compact.columns if isinstance(compact[c].dtype, pd.CategoricalDtype)]
    assert {"model", "status", "error", "session_id", "nodeid"} <= set(texts)
    assert compact["model"].cat.categories.size == plain["model"].nunique()
    def values(frame: pd.DataFrame) -> pd.DataFrame:  # every cell as a Python value, a missing one as None
        return frame.astype(object).where(frame.notna(), None)

    pd.testing.assert_frame_equal(values(compact), values(plain))
    assert compact.memory_usage(deep=True).sum() < plain.memory_usage(deep=True).sum() / 2


def test_a_categorical_read_of_no_rows_keeps_its_columns(many_rows: Path) -> None:
    empty = load_results(many_rows, "no-such-session", columns=["record_id", "latency_ms_median"], categorical=True)
    assert list(empty.columns) == ["record_id", "latency_ms_median"] and empty.empty


def test_the_report_of_a_categorical_read_is_the_report_of_the_plain_one(many_rows: Path, tmp_path: Path) -> None:
    from pytest_hwbench.report import write_report

    written = []
    for categorical in (False, True):
        out = tmp_path / str(categorical)
        paths = write_report(load_results(many_rows, columns=REPORT_COLUMNS, categorical=categorical), out)
        written.append((paths.markdown.read_text(), sorted(p.name for p in paths.plots.values())))
    assert written[0] == written[1]
    assert "failed case(s)" in written[0][0]
