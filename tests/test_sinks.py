"""Sinks against real stores: an MLflow SQLite store, a real `mlflow server`, real DuckDB files.

No mocks. Slow parts are shared: one MLflow SQLite database is created (migrated) once per
session and copied per test, which turns a ~10 s setup into a file copy.
"""

from __future__ import annotations

import dataclasses
import datetime as dt
import json
import os
import random
import shutil
import statistics
import subprocess
import sys
import time
import uuid
from collections.abc import Callable, Iterator, Mapping
from pathlib import Path

import pytest
from _mlflow_server import MlflowServer, free_port

from pytest_hwbench.errors import HwbenchWarning
from pytest_hwbench.record import PARAM_FIELDS, BenchmarkRecord, SessionInfo
from pytest_hwbench.sinks import (
    SINKS,
    DuckDBSink,
    MlflowSink,
    Recorder,
    Sink,
    Spool,
    export_parquet,
    import_mlflow_sessions,
    list_sessions,
    load_records,
    load_results,
    load_timings,
    open_sink,
    ping,
    replay,
    validate_tracking_uri,
)
from pytest_hwbench.sinks._duckdb_schema import SCHEMA_VERSION, upgrade
from pytest_hwbench.sinks._fields import FIELDS, NONE_TEXT, from_text, to_text


# -- realistic hand-built records ----------------------------------------------------------------
def make_session(label: str = "ci-cpu") -> SessionInfo:
    return SessionInfo(
        session_id=uuid.uuid4().hex,
        started_at=dt.datetime.now(dt.timezone.utc).isoformat(),
        host="bench-01",
        git_commit="eeda32c5d1f0a9b8c7d6e5f4a3b2c1d0e9f8a7b6",
        git_branch="main",
        runner_label=label,
        hardware_summary="cpu: Intel Xeon Platinum 8480+ (2 threads)",
        package_versions={"torch": "2.13.0", "transformers": "5.23.0", "mlflow": "3.17.2"},
    )


def make_record(session: SessionInfo, i: int, *, kind: str = "text") -> BenchmarkRecord:
    """BERT-base / ViT-base on CPU around the latencies in FACTS.md, or a failed LLaMA case."""
    rng = random.Random(i)
    if kind == "failed":
        return BenchmarkRecord(
            case_id=f"llama-1b-cuda-fp16-b{i}",
            session_id=session.session_id,
            status="failed",
            model="llama-1b",
            family="llama",
            model_type="llama",
            backend="torch",
            hardware="cuda",
            device_name="NVIDIA H100 80GB HBM3",
            precision="fp16",
            mode="inference",
            batch_size=128,
            sequence_length=2048,
            param_count=1_100_048_384,
            threads=2,
            error="torch.OutOfMemoryError: CUDA out of memory. Tried to allocate 16.00 GiB. " * 200,
            nodeid=f"bench_suites/test_inference.py::test_case[llama-1b-{i}]",
            host=session.host,
        )
    batch = (1, 8, 32)[i % 3]
    if kind == "vision":
        base, model, family, extra_shape = 292.0 * batch**0.8, "vit-base", "vit", {"image_size": 224}
        params, flops = 86_389_248, 35.2e9
    else:
        base, model, family, extra_shape = 234.0 * batch**0.8, "bert-base", "bert", {"sequence_length": 128}
        params, flops = 109_482_240, 22.3e9
    timings = tuple(round(base * (1 + 0.04 * rng.random()), 3) for _ in range(12))
    q = statistics.quantiles(timings, n=100)
    median = statistics.median(timings)
    return BenchmarkRecord(
        case_id=f"{model}-cpu-fp32-b{batch}-{i}",
        session_id=session.session_id,
        status="passed",
        model=model,
        family=family,
        model_type=family,
        backend="torch",
        hardware="cpu",
        device_name="Intel Xeon Platinum 8480+",
        precision="fp32",
        mode="inference",
        batch_size=batch,
        param_count=params,
        flops_per_forward=flops * batch,
        threads=2,
        latency_ms_mean=statistics.fmean(timings),
        latency_ms_median=median,
        latency_ms_min=min(timings),
        latency_ms_max=max(timings),
        latency_ms_stddev=statistics.stdev(timings),
        latency_ms_iqr=q[74] - q[24],
        latency_ms_p90=q[89],
        latency_ms_p95=q[94],
        latency_ms_p99=q[98],
        iterations=len(timings),
        throughput_items_per_s=1000.0 * batch / median,
        load_time_s=0.4 + rng.random(),
        cold_latency_ms=timings[0] * 1.6,
        peak_host_rss_mb=812.5 + 40 * batch,
        achieved_tflops=flops * batch / (median / 1000) / 1e12,
        timings_ms=timings,
        nodeid=f"bench_suites/test_inference.py::test_case[{model}-b{batch}-{i}]",
        host=session.host,
        worker="gw0",
        cpu_affinity=(0, 1),
        extra={"compile": False, "seed": i},
        **extra_shape,
    )


def make_records(session: SessionInfo, n: int) -> list[BenchmarkRecord]:
    kinds = ("text", "vision", "text", "failed")
    return [make_record(session, i, kind=kinds[i % len(kinds)]) for i in range(n)]


def same_except_error(a: BenchmarkRecord, b: BenchmarkRecord) -> bool:
    """Equal, allowing `error` to have been cut to a tag's length."""
    if (a.error is None) != (b.error is None):
        return False
    if (
        a.error is not None
        and b.error is not None
        and not a.error.startswith(b.error.split("...[truncated]")[0])
    ):
        return False
    return dataclasses.replace(a, error=None) == dataclasses.replace(b, error=None)


# -- fixtures -----------------------------------------------------------------------------------
@pytest.fixture(scope="session")
def mlflow_template(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A migrated, empty MLflow SQLite database (creating one costs ~10 s; copying it, nothing)."""
    from mlflow.tracking import MlflowClient

    path = tmp_path_factory.mktemp("mlflow-template") / "mlflow.db"
    MlflowClient(tracking_uri=f"sqlite:///{path}").search_experiments()
    return path


@pytest.fixture
def mlflow_uri(tmp_path: Path, mlflow_template: Path) -> str:
    target = tmp_path / "mlruns" / "mlflow.db"
    target.parent.mkdir()
    shutil.copy(mlflow_template, target)
    return f"sqlite:///{target}"


def child_runs(uri: str, experiment: str = "hwbench") -> list:
    from mlflow.tracking import MlflowClient

    client = MlflowClient(tracking_uri=uri)
    exp = client.get_experiment_by_name(experiment)
    return client.search_runs([exp.experiment_id], "tags.`hwbench.kind` = 'record'", max_results=5000)


def parent_runs(uri: str, experiment: str = "hwbench") -> list:
    from mlflow.tracking import MlflowClient

    client = MlflowClient(tracking_uri=uri)
    exp = client.get_experiment_by_name(experiment)
    return client.search_runs([exp.experiment_id], "tags.`hwbench.kind` = 'session'", max_results=100)


# -- pure parts ---------------------------------------------------------------------------------
def test_importing_sinks_pulls_in_neither_runtimes_nor_stores() -> None:
    code = (
        "import sys, pytest_hwbench.sinks as s\n"
        "s.open_sink('mlflow'); s.open_sink('bench.duckdb'); s.validate_tracking_uri('http://h:5000')\n"
        "heavy = [m for m in ('mlflow', 'duckdb', 'torch', 'pytest') if m in sys.modules]\n"
        "assert not heavy, heavy\n"
    )
    subprocess.run(
        [sys.executable, "-c", code], check=True, timeout=60, env={**os.environ, "MLFLOW_TRACKING_URI": ""}
    )


@pytest.mark.parametrize("name", PARAM_FIELDS)
def test_param_text_keeps_one_type_per_field(name: str) -> None:
    session = make_session()
    values = [
        getattr(make_record(session, i, kind=k), name) for i, k in enumerate(("text", "vision", "failed"))
    ]
    texts = [to_text(name, v) for v in values]
    back = [from_text(name, t) for t in texts]
    assert back == [float(v) if isinstance(v, int) and FIELDS[name].kind == "float" else v for v in values]
    assert {type(v) for v in back if v is not None} <= {int, float, str}
    assert len({type(v) for v in back if v is not None}) <= 1
    assert all(t == NONE_TEXT for t, v in zip(texts, values, strict=True) if v is None)


@pytest.mark.parametrize(
    "uri",
    [
        "sqlite:///mlruns/mlflow.db",
        "sqlite:////tmp/x/mlflow.db",
        "http://127.0.0.1:5000",
        "https://mlflow.example.org",
        "postgresql://bench@db.example.org:5432/mlflow",
        "postgresql+psycopg2://u:p@db/mlflow",
        "databricks",
    ],
)
def test_validate_tracking_uri_accepts(uri: str) -> None:
    assert validate_tracking_uri(f"  {uri} ") == uri


@pytest.mark.parametrize(
    ("uri", "words"),
    [
        ("./mlruns", "file store"),
        ("/abs/mlruns", "file store"),
        ("file:///abs/mlruns", "file store"),
        ("sqlite://", "no database file"),
        ("http://", "no host"),
        ("ftp://host/x", "unsupported scheme"),
        ("", "empty"),
    ],
)
def test_validate_tracking_uri_refuses_naming_uri_and_forms(uri: str, words: str) -> None:
    with pytest.raises(ValueError, match=words) as info:
        validate_tracking_uri(uri)
    assert repr(uri.strip()) in str(info.value) or not uri
    assert "sqlite:///" in str(info.value) and "http(s)://" in str(info.value)


def test_ping_reports_unreachable_server_and_ignores_local_stores() -> None:
    port = free_port()
    reason = ping(f"http://127.0.0.1:{port}", timeout=1.0)
    assert reason is not None and f"127.0.0.1:{port}" in reason
    assert ping("sqlite:///mlruns/mlflow.db") is None
    assert "file store" in (ping("./mlruns") or "")


def test_open_sink_routes_by_name_scheme_and_suffix(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv("MLFLOW_TRACKING_URI", raising=False)
    monkeypatch.chdir(tmp_path)
    assert set(SINKS) >= {"mlflow", "duckdb"}
    default = open_sink("mlflow")
    assert isinstance(default, MlflowSink) and isinstance(default, Sink)
    assert default.tracking_uri == f"sqlite:///{tmp_path / 'mlruns' / 'mlflow.db'}"
    assert default.artifact_location == (tmp_path / "mlruns" / "artifacts").as_uri()
    assert open_sink("sqlite:///x/m.db").tracking_uri == "sqlite:///x/m.db"  # type: ignore[attr-defined]
    assert open_sink("http://127.0.0.1:5000", experiment="e").experiment == "e"  # type: ignore[attr-defined]
    assert open_sink("mlflow:postgresql://u@db/m").tracking_uri == "postgresql://u@db/m"  # type: ignore[attr-defined]
    assert open_sink("duckdb").path == tmp_path / "mlruns" / "hwbench.duckdb"  # type: ignore[attr-defined]
    assert open_sink("duckdb:rel/b.duckdb").path == tmp_path / "rel" / "b.duckdb"  # type: ignore[attr-defined]
    assert open_sink(f"duckdb://{tmp_path}/a.db").path == tmp_path / "a.db"  # type: ignore[attr-defined]
    assert open_sink("results.duckdb").path == tmp_path / "results.duckdb"  # type: ignore[attr-defined]
    with pytest.raises(ValueError, match=r"'nowhere:\?'.*duckdb.*mlflow"):
        open_sink("nowhere:?")
    monkeypatch.setenv("MLFLOW_TRACKING_URI", "./mlruns")
    with pytest.raises(ValueError, match="file store"):
        open_sink("mlflow")
    assert not (tmp_path / "mlruns").exists()  # building sinks touches nothing


# -- spool --------------------------------------------------------------------------------------
def test_spool_round_trip_and_crash_tolerance(tmp_path: Path) -> None:
    session = make_session()
    records = make_records(session, 4)
    spool = Spool(tmp_path / "spool")
    assert list(spool.records()) == [] and not spool.directory.exists()
    spool.append_session(session)
    for record in records[:3]:
        spool.append(record)
    # A crash in the middle of the 4th line: no newline, half the JSON.
    with spool.records_path.open("a", encoding="utf-8") as handle:
        handle.write(records[3].to_json()[:57])
    assert list(spool.records()) == records[:3]  # truncated tail skipped silently
    spool.append(records[3])  # must not be glued onto the partial line
    with pytest.warns(HwbenchWarning, match="line 4"):
        assert list(spool.records()) == records
    spool.append_session_end(session.session_id, "finished")
    assert list(spool.sessions()) == [session]
    assert spool.session_statuses() == {session.session_id: "finished"}


# -- MLflow, local SQLite store -----------------------------------------------------------------
def test_mlflow_sink_writes_parent_and_child_runs(mlflow_uri: str) -> None:
    session = make_session()
    records = make_records(session, 6)
    sink = MlflowSink(mlflow_uri)
    sink.open_session(session)
    sink.write(records[:2])
    sink.write(records[2:])
    sink.close("passed")

    parents = parent_runs(mlflow_uri)
    assert len(parents) == 1
    parent = parents[0]
    assert parent.info.status == "FINISHED"
    assert parent.data.tags["hwbench.session_id"] == session.session_id
    assert parent.data.tags["mlflow.source.git.commit"] == session.git_commit
    assert parent.data.tags["hwbench.runner_label"] == "ci-cpu"
    assert json.loads(parent.data.tags["hwbench.package_versions"])["torch"] == "2.13.0"

    runs = {r.data.tags["hwbench.record_id"]: r for r in child_runs(mlflow_uri)}
    assert set(runs) == {r.record_id for r in records}
    for record in records:
        run = runs[record.record_id]
        assert run.data.tags["mlflow.parentRunId"] == parent.info.run_id
        assert run.data.tags["hwbench.session_id"] == session.session_id
        assert run.info.run_name == record.run_name
        assert set(run.data.params) == set(PARAM_FIELDS)  # same names for every case
        assert run.data.metrics == {k: pytest.approx(v) for k, v in record.metrics().items() if v is not None}
        if record.status == "failed":
            assert run.info.status == "FAILED"
            assert run.data.tags["hwbench.error"].startswith("torch.OutOfMemoryError")
            assert len(run.data.tags["hwbench.error"]) <= 5000 < len(record.error or "")
        else:
            assert run.info.status == "FINISHED" and "hwbench.error" not in run.data.tags
    for name in PARAM_FIELDS:  # one type per param across text, vision and failed cases
        types = {type(from_text(name, r.data.params[name])) for r in runs.values()} - {type(None)}
        assert len(types) <= 1, (name, types)

    # Resuming the session (e.g. a replay) reuses the parent run instead of making a second one.
    again = MlflowSink(mlflow_uri)
    assert again.existing_ids([r.record_id for r in records] + ["nope"]) == {r.record_id for r in records}
    again.open_session(session)
    again.close("finished")
    assert [p.info.run_id for p in parent_runs(mlflow_uri)] == [parent.info.run_id]

    # Read back: params cast back from text, metrics, context tags; timings from the artifact.
    back = {r.record_id: r for r in sink.read_records()}
    assert all(same_except_error(record, back[record.record_id]) for record in records)
    assert [(info, status) for info, status in sink.read_sessions()] == [(session, "finished")]


def test_mlflow_and_duckdb_agree_on_medians(tmp_path: Path, mlflow_uri: str) -> None:
    session = make_session()
    records = make_records(session, 8)
    db = tmp_path / "hwbench.duckdb"
    recorder = Recorder(Spool(tmp_path / "spool"), [MlflowSink(mlflow_uri), DuckDBSink(db)])
    recorder.start(session)
    for record in records:
        recorder.emit(record)
    report = recorder.finish("finished")
    assert report.complete and report.written == {"mlflow": 8, "duckdb": 8} and not report.errors

    mlflow_medians = {
        r.data.tags["hwbench.record_id"]: r.data.metrics.get("latency_ms_median")
        for r in child_runs(mlflow_uri)
    }
    frame = load_results(db, session.session_id)
    duck_medians = dict(zip(frame["record_id"], frame["latency_ms_median"], strict=True))
    timings = load_timings(db, frame["record_id"])
    for record in records:
        if record.status == "failed":
            assert mlflow_medians[record.record_id] is None and record.record_id not in timings
            continue
        assert mlflow_medians[record.record_id] == pytest.approx(duck_medians[record.record_id], rel=1e-12)
        assert statistics.median(timings[record.record_id]) == pytest.approx(duck_medians[record.record_id])

    # MLflow -> DuckDB import rebuilds the same records; importing twice adds nothing.
    imported = tmp_path / "imported.duckdb"
    assert import_mlflow_sessions(mlflow_uri, "hwbench", imported).records == 8
    assert import_mlflow_sessions(mlflow_uri, "hwbench", imported).records == 0
    by_id = {r.record_id: r for r in load_records(imported)}
    assert all(same_except_error(record, by_id[record.record_id]) for record in records)
    assert list_sessions(imported)["status"].tolist() == ["finished"]


# -- DuckDB -------------------------------------------------------------------------------------
def test_duckdb_sink_round_trip_schema_and_export(tmp_path: Path) -> None:
    import duckdb

    session = make_session()
    records = make_records(session, 5)
    db = tmp_path / "sub" / "hwbench.duckdb"
    sink = DuckDBSink(db)
    assert sink.existing_ids([records[0].record_id]) == set() and not db.exists()
    sink.open_session(session)
    sink.write(records[:3])
    sink.write(records[2:])  # overlap: stored once, timings not doubled
    sink.close("failed")

    assert load_records(db) == sorted(records, key=lambda r: (r.created_at, r.record_id))
    frame = load_results(db)
    assert sorted(frame.columns) == sorted(set(FIELDS) - {"timings_ms"})  # named as the record fields
    assert frame["batch_size"].dtype.kind == "i" and frame["created_at"].dt.tz is not None
    assert sink.existing_ids([r.record_id for r in records] + ["x"]) == {r.record_id for r in records}
    assert sum(len(v) for v in load_timings(db, frame["record_id"]).values()) == sum(
        len(r.timings_ms) for r in records
    )
    sessions = list_sessions(db)
    assert sessions["status"].tolist() == ["failed"] and sessions["records"].tolist() == [5]
    assert sessions["package_versions"][0]["torch"] == "2.13.0"

    paths = export_parquet(db, tmp_path / "parquet")
    assert [p.name for p in paths] == ["sessions.parquet", "results.parquet", "timings.parquet"]
    con = duckdb.connect()
    assert con.execute(f"SELECT count(*) FROM '{paths[1]}'").fetchall() == [(5,)]
    con.close()

    con = duckdb.connect(str(db))
    assert con.execute("SELECT max(version) FROM schema_info").fetchall() == [(SCHEMA_VERSION,)]
    con.execute("INSERT INTO schema_info VALUES (?, now())", [SCHEMA_VERSION + 1])
    with pytest.raises(RuntimeError, match="newer"):
        upgrade(con, db)
    con.close()


def test_duckdb_version_1_file_is_upgraded_by_writer_and_reader(tmp_path: Path) -> None:
    """A file written by schema version 1 gains the version-2 columns, keeps its rows, and reads."""
    import duckdb

    from pytest_hwbench.sinks import _duckdb_schema

    session = make_session()
    old, new = make_records(session, 2)
    for opener in ("reader", "writer"):
        db = tmp_path / f"{opener}.duckdb"
        con = duckdb.connect(str(db))
        for statement in _duckdb_schema.UPGRADES[1]:
            con.execute(statement)
        con.execute("CREATE TABLE schema_info (version INTEGER NOT NULL, applied_at TIMESTAMPTZ)")
        con.execute("INSERT INTO schema_info VALUES (1, now())")
        v1 = [name for name, _ in _duckdb_schema._RESULTS_V1]
        values = [getattr(old, name) for name in v1]
        values = [json.dumps(dict(v)) if isinstance(v, Mapping) else list(v) if isinstance(v, tuple) else v
                  for v in values]
        con.execute(f"INSERT INTO results ({', '.join(v1)}) VALUES ({', '.join('?' * len(v1))})", values)
        con.close()
        if opener == "writer":
            sink = DuckDBSink(db)
            sink.open_session(session)
            sink.write([new])
            sink.close("passed")
        frame = load_results(db)
        assert {"new_tokens", "ttft_ms", "energy_j_per_item"} <= set(frame.columns)
        assert old.record_id in set(frame["record_id"])
        assert len(frame) == (2 if opener == "writer" else 1)
        assert frame.loc[frame["record_id"] == old.record_id, "ttft_ms"].isna().all()
        con = duckdb.connect(str(db), read_only=True)
        assert con.execute("SELECT max(version) FROM schema_info").fetchall() == [(SCHEMA_VERSION,)]
        con.close()


@pytest.fixture
def lock_holder() -> Iterator[Callable[[Path], subprocess.Popen[str]]]:
    """Start another process that opens a DuckDB file and keeps it until told to let go."""
    started: list[subprocess.Popen[str]] = []

    def hold(path: Path) -> subprocess.Popen[str]:
        code = (
            "import duckdb, sys\n"
            "con = duckdb.connect(sys.argv[1])\n"
            "print('held', flush=True)\n"
            "sys.stdin.readline()\n"
            "con.close()\n"
        )
        proc = subprocess.Popen(
            [sys.executable, "-c", code, str(path)], stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True
        )
        started.append(proc)
        assert proc.stdout is not None and proc.stdout.readline().strip() == "held"
        return proc

    yield hold
    for proc in started:
        if proc.poll() is None:
            proc.kill()
            proc.wait(timeout=10)


def release(proc: subprocess.Popen[str]) -> None:
    assert proc.stdin is not None
    proc.stdin.write("\n")
    proc.stdin.flush()
    assert proc.wait(timeout=30) == 0


def test_duckdb_held_by_another_process_spools_then_replays(
    tmp_path: Path, lock_holder: Callable[[Path], subprocess.Popen[str]]
) -> None:
    session = make_session()
    records = make_records(session, 7)
    db = tmp_path / "hwbench.duckdb"
    spool = Spool(tmp_path / "spool")
    recorder = Recorder(spool, [DuckDBSink(db)], retry_every=2)
    recorder.start(session)
    for record in records[:3]:
        recorder.emit(record)
    holder = lock_holder(db)
    with pytest.warns(HwbenchWarning, match=r"sink 'duckdb' failed in write: DuckDBFileError: .* is locked by another process \(IOException"):
        for record in records[3:]:
            recorder.emit(record)  # must not raise
    with pytest.warns(
        HwbenchWarning, match=r"records not yet in every sink: \{'duckdb': 4\}.*hwbench replay"
    ):
        report = recorder.finish("finished")
    assert report.records == 7 and report.written == {"duckdb": 3} and report.pending == {"duckdb": 4}
    assert "lock" in report.errors["duckdb"] and not report.complete

    release(holder)
    assert replay(spool, [DuckDBSink(db)]) == {"duckdb": 4}
    assert replay(spool, [DuckDBSink(db)]) == {"duckdb": 0}
    assert {r.record_id for r in load_records(db)} == {r.record_id for r in records}
    assert list_sessions(db)["status"].tolist() == ["finished"]


def test_recorder_catches_up_in_session_once_the_file_is_free(
    tmp_path: Path, lock_holder: Callable[[Path], subprocess.Popen[str]]
) -> None:
    session = make_session()
    records = make_records(session, 6)
    db = tmp_path / "hwbench.duckdb"
    holder = lock_holder(db)
    recorder = Recorder(Spool(tmp_path / "spool"), [DuckDBSink(db)], retry_every=2)
    with pytest.warns(HwbenchWarning, match="open_session"):
        recorder.start(session)  # the file is held from the start
    recorder.emit(records[0])
    recorder.emit(records[1])  # retry while still held: fails again
    assert recorder.report().pending == {"duckdb": 2}
    release(holder)
    for record in records[2:]:
        recorder.emit(record)  # 2 records later: reopen, write the backlog
    report = recorder.finish("finished")
    assert report.pending == {"duckdb": 0} and report.written == {"duckdb": 6}
    assert report.errors["duckdb"].startswith("open_session: DuckDBFileError")  # first error kept
    assert "locked by another process (IOException" in report.errors["duckdb"]
    assert len(load_records(db)) == 6


# -- MLflow over HTTP, server killed mid-way ----------------------------------------------------
@pytest.fixture
def servers() -> Iterator[list[MlflowServer]]:
    started: list[MlflowServer] = []
    yield started
    for server in started:
        server.kill()


def test_mlflow_server_killed_mid_session_then_replayed(
    tmp_path: Path, mlflow_template: Path, servers: list[MlflowServer]
) -> None:
    db = tmp_path / "m.db"
    shutil.copy(mlflow_template, db)
    server = MlflowServer(db, tmp_path / "art", tmp_path / "server.log")
    servers.append(server)
    server.start(timeout=60)
    uri = server.uri
    assert ping(uri) is None

    session = make_session()
    records = make_records(session, 9)
    spool = Spool(tmp_path / "spool")
    duck = tmp_path / "hwbench.duckdb"
    recorder = Recorder(
        spool, [MlflowSink(uri, http_max_retries=0, http_timeout_s=5), DuckDBSink(duck)], retry_every=2
    )
    recorder.start(session)
    for record in records[:4]:
        recorder.emit(record)
    server.kill()
    assert ping(uri, timeout=1.0) is not None

    began = time.monotonic()
    with pytest.warns(HwbenchWarning, match="sink 'mlflow' failed in write"):
        for record in records[4:]:
            recorder.emit(record)  # keeps going; DuckDB still gets every record
    with pytest.warns(HwbenchWarning, match="records not yet in every sink"):
        report = recorder.finish("finished")
    assert time.monotonic() - began < 20  # failing fast, not MLflow's 4-minute retry loop
    assert report.written == {"mlflow": 4, "duckdb": 9}
    assert report.pending == {"mlflow": 5, "duckdb": 0}
    assert "mlflow" in report.errors and "duckdb" not in report.errors

    server.start(timeout=60)  # same port, same database
    assert replay(spool, [MlflowSink(uri), DuckDBSink(duck)]) == {"mlflow": 5, "duckdb": 0}
    assert replay(spool, [MlflowSink(uri), DuckDBSink(duck)]) == {"mlflow": 0, "duckdb": 0}
    runs = child_runs(uri)
    assert sorted(r.data.tags["hwbench.record_id"] for r in runs) == sorted(r.record_id for r in records)
    parents = parent_runs(uri)
    assert len(parents) == 1 and parents[0].info.status == "FINISHED"
    assert {r.data.tags["mlflow.parentRunId"] for r in runs} == {parents[0].info.run_id}


def test_read_records_takes_every_kind_of_source(tmp_path: Path, mlflow_uri: str) -> None:
    from pytest_hwbench.sinks import read_all, read_records, records_frame, source_kind

    session = make_session()
    records = make_records(session, 4)
    by_id = {r.record_id: r for r in records}
    # a DuckDB file, a spool directory, a bare JSON-lines file, an MLflow store: the same records
    db = tmp_path / "hwbench.duckdb"
    sink = DuckDBSink(db)
    sink.open_session(session)
    sink.write(records)
    sink.close("finished")
    spool = Spool(tmp_path / "spool")
    for record in records:
        spool.append(record)
    lines = tmp_path / "evidence_records.jsonl"
    lines.write_text("".join(json.dumps(r.to_dict()) + "\n" for r in records[:2]))
    mlflow = MlflowSink(mlflow_uri, "hwbench")
    mlflow.open_session(session)
    mlflow.write(records)
    mlflow.close("finished")

    assert [source_kind(s) for s in (db, spool.directory, lines, mlflow_uri)] == ["duckdb", "spool", "jsonl", "mlflow"]
    for source in (db, spool.directory, mlflow_uri):
        got = read_records(source)
        assert sorted(r.record_id for r in got) == sorted(by_id), source
        for record in got:
            assert record.latency_ms_median == by_id[record.record_id].latency_ms_median
    assert [r.record_id for r in read_records(lines)] == [r.record_id for r in records[:2]]
    # several sources: each record once
    merged = read_all([lines, db, spool.directory])
    assert sorted(r.record_id for r in merged) == sorted(by_id)
    frame = records_frame(merged)
    assert len(frame) == 4 and "timings_ms" not in frame and set(frame["model"]) == {r.model for r in records}
    with pytest.raises(ValueError, match="not a record source"):
        source_kind(tmp_path / "nothing.txt")
    with pytest.raises(FileNotFoundError, match="missing.duckdb does not exist"):
        read_records(tmp_path / "missing.duckdb")


class _Timed:
    """A real sink's calls, each noted with when it ran (mixed in before the sink's class)."""

    calls: list[tuple[str, str, float, float]]

    def write(self, records):  # type: ignore[no-untyped-def]
        began = time.monotonic()
        super().write(records)  # type: ignore[misc]
        self.calls.append((self.name, "write", began, time.monotonic()))  # type: ignore[attr-defined]

    def close(self, status: str) -> None:
        began = time.monotonic()
        super().close(status)  # type: ignore[misc]
        self.calls.append((self.name, "close", began, time.monotonic()))  # type: ignore[attr-defined]


class _TimedDuckDB(_Timed, DuckDBSink):
    pass


class _TimedMlflow(_Timed, MlflowSink):
    pass


def test_the_recorder_writes_each_record_to_its_sinks_side_by_side(tmp_path: Path, mlflow_uri: str) -> None:
    calls: list[tuple[str, str, float, float]] = []
    session = make_session()
    records = make_records(session, 4)
    sinks = [_TimedMlflow(mlflow_uri), _TimedDuckDB(tmp_path / "hwbench.duckdb")]
    for sink in sinks:
        sink.calls = calls
    recorder = Recorder(Spool(tmp_path / "spool"), sinks)
    recorder.start(session)
    for record in records:
        recorder.emit(record)
    report = recorder.finish("finished")
    assert report.complete and report.written == {"mlflow": 4, "duckdb": 4}
    by_step: dict[tuple[int, str], dict[str, tuple[float, float]]] = {}
    counts: dict[tuple[str, str], int] = {}
    for sink, what, began, ended in calls:
        index = counts[sink, what] = counts.get((sink, what), 0) + 1
        by_step.setdefault((index, what), {})[sink] = (began, ended)
    assert len(by_step) == 5  # four writes and the close, each on both sinks
    for step, spans in by_step.items():
        (a0, a1), (b0, b1) = spans["mlflow"], spans["duckdb"]
        assert a0 < b1 and b0 < a1, f"{step}: the sinks ran one after the other"
    assert len(load_results(tmp_path / "hwbench.duckdb", session.session_id)) == 4
    assert len(child_runs(mlflow_uri)) == 4


def test_a_wait_is_announced_once_a_third_of_its_budget_is_spent() -> None:
    import time

    from pytest_hwbench._deadline import call_with_deadline

    waits: list[float] = []

    def wait(seconds: float) -> int:
        time.sleep(seconds)
        return 7

    # a first write creating a local store: a few seconds of a 30 s budget, said nowhere
    assert call_with_deadline(lambda: wait(1.0), 9.0, name="t", on_wait=waits.append, on_deadline=TimeoutError) == 7
    assert waits == []
    # past a third of the budget: one line, with what is left of it
    assert call_with_deadline(lambda: wait(4.0), 9.0, name="t", on_wait=waits.append, on_deadline=TimeoutError) == 7
    assert len(waits) == 1 and 5.0 < waits[0] <= 6.0
    with pytest.raises(TimeoutError):
        call_with_deadline(lambda: wait(5.0), 1.5, name="t", on_wait=waits.append, on_deadline=TimeoutError)
    assert len(waits) == 2
