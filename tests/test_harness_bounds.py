"""Issue 18, items 5-13: every wait bounded, every bad input refused early, every message exact.

Against the real parts, no mocks: a socket that accepts and never answers (item 5), real `pytest`
runs in subprocesses, the `hwbench` console script, real DuckDB files (corrupt ones and ones
another process holds), real MLflow SQLite stores created by processes starting together, a real
ONNX export of a model with a 300-character name.
"""

from __future__ import annotations

import contextlib
import dataclasses
import json
import math
import os
import re
import shutil
import socket
import subprocess
import sys
import threading
import time
from collections.abc import Iterator
from pathlib import Path

import pytest
from test_sinks import make_records, make_session

from pytest_hwbench.errors import HwbenchWarning
from pytest_hwbench.sinks import DuckDBSink, Recorder, Spool, replay_each

#: Every test here starts another process, a server or a training: the end-to-end tier.
pytestmark = pytest.mark.e2e

HWBENCH_BIN = Path(sys.executable).with_name("hwbench")
BENCH_FILE = """
def test_inference(hwbench_case, hwbench):
    hwbench.measure(hwbench_case)
"""
FOREIGN_ENV = ("MLFLOW_TRACKING_URI", "HWBENCH_EXPERIMENT", "PYTEST_ADDOPTS", "MLFLOW_EXPERIMENT_NAME")


@pytest.fixture(autouse=True)
def _own_stores_only(monkeypatch: pytest.MonkeyPatch) -> None:
    for name in FOREIGN_ENV:
        monkeypatch.delenv(name, raising=False)


def bench_args(store: Path, batch_sizes: str = "1,2") -> list[str]:
    return [
        "--hwbench-store", str(store), "--hwbench-models", "bert-tiny", "--hwbench-backends", "torch",
        "--hwbench-precisions", "fp32", "--hwbench-batch-sizes", batch_sizes, "--hwbench-warmup", "0",
        "--hwbench-min-iterations", "3", "--hwbench-min-time", "0", "-p", "no:cacheprovider", "-m", "cpu",
    ]  # fmt: skip


def output(result: pytest.RunResult) -> str:
    return "\n".join([*result.outlines, *result.errlines])


def hwbench_cli(*args: str, cwd: Path, timeout: float = 240) -> subprocess.CompletedProcess[str]:
    env = {k: v for k, v in os.environ.items() if k not in FOREIGN_ENV}
    return subprocess.run([str(HWBENCH_BIN), *args], cwd=cwd, env=env, capture_output=True, text=True,
                          timeout=timeout, stdin=subprocess.DEVNULL)


@contextlib.contextmanager
def silent_server() -> Iterator[int]:
    """A TCP server on 127.0.0.1 that accepts every connection and never sends a byte."""
    listener = socket.socket()
    listener.bind(("127.0.0.1", 0))
    listener.listen(64)
    listener.settimeout(0.2)
    held: list[socket.socket] = []
    stop = threading.Event()

    def accept() -> None:
        while not stop.is_set():
            with contextlib.suppress(OSError):
                conn, _ = listener.accept()
                held.append(conn)  # kept open, never answered

    thread = threading.Thread(target=accept, daemon=True)
    thread.start()
    try:
        yield int(listener.getsockname()[1])
    finally:
        stop.set()
        thread.join(timeout=5)
        for conn in held:
            conn.close()
        listener.close()


def closed_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


def filled_store(directory: Path, n: int = 4) -> tuple[Path, list[str]]:
    """A store whose spool and DuckDB file hold `n` records of one session (real files)."""
    store = directory / "store"
    session = make_session()
    records = make_records(session, n)
    recorder = Recorder(Spool(store / "spool"), [DuckDBSink(store / "hwbench.duckdb")])
    recorder.start(session)
    for record in records:
        recorder.emit(record)
    assert recorder.finish("finished").complete
    return store, [r.record_id for r in records]


# -- 5. a tracking server that accepts and never answers ------------------------------------------
def test_silent_tracking_server_costs_one_deadline_then_spools(pytester: pytest.Pytester) -> None:
    pytester.makepyfile(test_inference=BENCH_FILE)
    store = pytester.path / "store"
    with silent_server() as port:
        uri = f"http://127.0.0.1:{port}"
        began = time.monotonic()
        result = pytester.runpytest_subprocess(*bench_args(store), "--hwbench-mlflow-uri", uri,
                                               "--hwbench-sink-timeout", "8", timeout=300)
        took = time.monotonic() - began
        text = output(result)
        assert result.ret == 0, text
        result.assert_outcomes(passed=2)
        # Before: 192 s in silence (30 s x 3 tries, twice); now one deadline, announced.
        assert took < 60, f"{took:.0f} s\n{text}"
        assert f"hwbench: waiting for sink 'mlflow' ({uri}) to answer open_session" in text, text
        assert re.search(r"hwbench: WARNING 2 records spooled, not yet delivered \(2 for mlflow\)", text), text
        assert re.search(r"mlflow: open_session: SinkTimeout: no answer within 8 s", text), text

        began = time.monotonic()
        proc = hwbench_cli("replay", "--store", str(store), "--mlflow-uri", uri, "--timeout", "5",
                           cwd=pytester.path)
        took = time.monotonic() - began
    assert proc.returncode == 3, proc.stdout + proc.stderr
    assert took < 40, f"replay took {took:.0f} s (93 s before)"
    assert "hwbench: waiting for sink 'mlflow'" in proc.stderr, proc.stderr
    assert "  duckdb: 0 records written" in proc.stdout.splitlines(), proc.stdout  # DuckDB already had them


# -- 6. replay each sink on its own ------------------------------------------------------------------
def test_replay_rebuilds_duckdb_while_mlflow_is_down_and_reports_each(tmp_path: Path) -> None:
    store, ids = filled_store(tmp_path)
    (store / "hwbench.duckdb").unlink()
    down = f"http://127.0.0.1:{closed_port()}"
    proc = hwbench_cli("replay", "--store", str(store), "--mlflow-uri", down, cwd=tmp_path)
    assert proc.returncode == 3, proc.stdout + proc.stderr
    lines = proc.stdout.splitlines()
    assert f"  duckdb: {len(ids)} records written" in lines, proc.stdout
    assert any(line.startswith("  mlflow: not replayed (0 records written before): ") for line in lines), proc.stdout
    # the hint repeats the stores it was given: run as printed, it writes to the same server
    assert f"run `hwbench replay --store {store} --mlflow-uri {down} --sinks mlflow` once the store is back" \
        in proc.stderr, proc.stderr
    from pytest_hwbench.sinks import load_records

    assert sorted(r.record_id for r in load_records(store / "hwbench.duckdb")) == sorted(ids)

    # --sinks names what to replay: MLflow (down) is not even tried.
    (store / "hwbench.duckdb").unlink()
    only = hwbench_cli("replay", "--store", str(store), "--mlflow-uri", down, "--sinks", "duckdb", cwd=tmp_path)
    assert only.returncode == 0, only.stdout + only.stderr
    assert "mlflow" not in only.stdout.split("\n", 1)[1], only.stdout
    assert f"  duckdb: {len(ids)} records written" in only.stdout.splitlines()
    bad = hwbench_cli("replay", "--store", str(store), "--sinks", "duckdb,nosuch", cwd=tmp_path)
    assert bad.returncode == 2 and "'nosuch' not accepted; accepted: mlflow, duckdb" in bad.stderr, bad.stderr


# -- 7. read commands on a corrupt or a locked DuckDB file -------------------------------------------
READ_COMMANDS = (["sessions"], ["report", "--out", "rep"], ["compare", "latest", "latest"], ["export", "--parquet", "pq"])


def corrupt(path: Path) -> None:
    """Overwrite the file's header block with junk, as a crash or a bad disk leaves it."""
    with path.open("r+b") as handle:
        handle.write(os.urandom(4096))


@pytest.mark.parametrize("command", READ_COMMANDS, ids=[c[0] for c in READ_COMMANDS])
def test_read_commands_on_a_corrupt_file_exit_2_and_say_how_to_rebuild(tmp_path: Path, command: list[str]) -> None:
    store, _ = filled_store(tmp_path, 2)
    corrupt(store / "hwbench.duckdb")
    proc = hwbench_cli(*command, "--store", str(store), cwd=tmp_path)
    assert proc.returncode == 2, proc.stdout + proc.stderr
    assert "Traceback" not in proc.stderr, proc.stderr
    assert f"DuckDB file {store / 'hwbench.duckdb'} is corrupt" in proc.stderr, proc.stderr
    assert "--sinks duckdb --move-corrupt" in proc.stderr, proc.stderr


def test_read_commands_on_a_locked_file_exit_3_and_say_it_is_locked(tmp_path: Path) -> None:
    store, _ = filled_store(tmp_path, 2)
    code = ("import duckdb, sys\ncon = duckdb.connect(sys.argv[1])\nprint('held', flush=True)\n"
            "sys.stdin.readline()\n")
    holder = subprocess.Popen([sys.executable, "-c", code, str(store / "hwbench.duckdb")], stdin=subprocess.PIPE,
                              stdout=subprocess.PIPE, text=True)
    try:
        assert holder.stdout is not None and holder.stdout.readline().strip() == "held"
        for command in READ_COMMANDS:
            proc = hwbench_cli(*command, "--store", str(store), cwd=tmp_path)
            assert proc.returncode == 3, (command, proc.stdout + proc.stderr)
            assert "Traceback" not in proc.stderr, proc.stderr
            assert "is locked by another process" in proc.stderr and "corrupt" not in proc.stderr, proc.stderr
        # hwsel reading the same file: the same exit code and words
        proc = subprocess.run([sys.executable, "-m", "hwsel", "train", "--source", str(store / "hwbench.duckdb"),
                               "--trials", "1", "--tracking-uri", f"sqlite:///{tmp_path / 'registry.db'}"],
                              cwd=tmp_path, capture_output=True, text=True, timeout=300)
        assert proc.returncode == 3, proc.stdout + proc.stderr
        assert "hwsel train: error: DuckDB file" in proc.stderr and "is locked by another process" in proc.stderr
    finally:
        holder.communicate("\n", timeout=30)


def test_a_corrupt_file_is_moved_aside_and_rebuilt_by_replay(tmp_path: Path) -> None:
    store, ids = filled_store(tmp_path, 3)
    db = store / "hwbench.duckdb"
    corrupt(db)
    plain = hwbench_cli("replay", "--store", str(store), "--sinks", "duckdb", cwd=tmp_path)
    assert plain.returncode == 2, plain.stdout + plain.stderr
    assert "is corrupt" in plain.stdout and "try again later" not in plain.stdout + plain.stderr, plain.stdout

    proc = hwbench_cli("replay", "--store", str(store), "--sinks", "duckdb", "--move-corrupt", cwd=tmp_path)
    assert proc.returncode == 0, proc.stdout + proc.stderr
    (aside,) = store.glob("hwbench.duckdb.corrupt-*")
    assert f"{db} was corrupt: moved to {aside}" in proc.stdout, proc.stdout
    assert f"  duckdb: {len(ids)} records written" in proc.stdout.splitlines(), proc.stdout
    sessions = hwbench_cli("sessions", "--store", str(store), cwd=tmp_path)
    assert sessions.returncode == 0, sessions.stderr
    assert re.search(rf"\s{len(ids)}\s", sessions.stdout.splitlines()[2]), sessions.stdout


def test_move_corrupt_finds_a_corrupt_block_that_listing_the_sessions_does_not_read(tmp_path: Path) -> None:
    from pytest_hwbench.sinks import DuckDBFileError, list_sessions

    store, ids = filled_store(tmp_path, 3)
    db = store / "hwbench.duckdb"
    good = db.read_bytes()
    block = 256 * 1024  # DuckDB's block size
    # 20 KB of random bytes inside one block after another, until one that `hwbench sessions` reads past
    for start in range(block, len(good), block):
        damaged = bytearray(good)
        damaged[start + 4096:start + 4096 + 20480] = os.urandom(20480)
        db.write_bytes(bytes(damaged))
        try:
            list_sessions(db)
        except DuckDBFileError:
            continue
        break
    else:
        pytest.fail("every damaged block shows in the session listing: nothing left to check")
    proc = hwbench_cli("replay", "--store", str(store), "--sinks", "duckdb", "--move-corrupt", cwd=tmp_path)
    assert proc.returncode == 0, proc.stdout + proc.stderr  # before: exit 2 "is corrupt", the file left in place
    (aside,) = store.glob("hwbench.duckdb.corrupt-*")
    assert f"{db} was corrupt: moved to {aside}" in proc.stdout, proc.stdout
    assert f"  duckdb: {len(ids)} records written" in proc.stdout.splitlines(), proc.stdout


# -- 8. option bounds ----------------------------------------------------------------------------------
@pytest.mark.parametrize(
    ("option", "value", "accepted"),
    [
        ("--hwbench-min-iterations", "200000", "accepted: 0 to 100000"),
        ("--hwbench-warmup", "1000000000", "accepted: 0 to 100000"),
        ("--hwbench-min-time", "1e9", "accepted: 0 to 3600"),
    ],
)
def test_out_of_range_options_are_usage_errors_naming_the_range(
    pytester: pytest.Pytester, option: str, value: str, accepted: str
) -> None:
    pytester.makepyfile(test_inference=BENCH_FILE)
    store = pytester.path / "store"
    result = pytester.runpytest_subprocess(*bench_args(store, "1"), option, value, timeout=120)
    text = output(result)
    assert result.ret == pytest.ExitCode.USAGE_ERROR, text
    assert f"{option}: {value!r} is out of range; {accepted}" in text, text
    assert "INTERNALERROR" not in text and not store.exists(), text


# -- 9. a case runs what its id says, or skips saying why -------------------------------------------------
def test_input_length_beyond_the_model_skips_with_the_limit(pytester: pytest.Pytester) -> None:
    pytester.makepyfile(test_inference=BENCH_FILE)
    store = pytester.path / "store"
    result = pytester.runpytest_subprocess(*bench_args(store, "1"), "--hwbench-input-lengths", "100000000,16",
                                           "-rs", timeout=300)
    text = output(result)
    assert result.ret == 0, text
    result.assert_outcomes(passed=1, skipped=1)
    assert re.search(r"SKIPPED .*bert-tiny takes at most 512 tokens, not 100000000; give --hwbench-input-lengths "
                     r"up to 512", text), text
    lines = (store / "spool" / "records.jsonl").read_text().splitlines()
    (record,) = [json.loads(line) for line in lines]
    assert record["case_id"].endswith("-in16") and record["sequence_length"] == 16, record


# -- 10. long model names ---------------------------------------------------------------------------------
def test_onnx_cache_paths_stay_short_for_a_300_character_model_name(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    from pytest_hwbench.backends._onnx_export import export_onnx
    from pytest_hwbench.models import get_model

    monkeypatch.setenv("HWBENCH_CACHE_DIR", str(tmp_path / "cache"))
    spec = dataclasses.replace(get_model("bert-tiny"), name="a-very-long-model-name-" + "x" * 277)
    other = dataclasses.replace(spec, name=spec.name[:-1] + "y")  # same start, another model
    assert len(spec.name) == 300
    exported = export_onnx(spec)
    assert exported.path.exists()
    for part in exported.path.relative_to(tmp_path).parts:
        assert len(part) <= 80, part
    from pytest_hwbench.backends._onnx_export import _key

    assert _key(other) != _key(spec) and _key(other)[:40] == _key(spec)[:40]
    assert _key(get_model("bert-tiny")).startswith("bert-tiny-")  # short names keep their form


# -- 11. two runs starting together on a new store ------------------------------------------------------
RACE = """
import sys, time
from pytest_hwbench.record import SessionInfo
from pytest_hwbench.sinks import MlflowSink
start = float(sys.argv[2])
while time.time() < start:
    time.sleep(0.001)
sink = MlflowSink("sqlite:///" + sys.argv[1])
sink.open_session(SessionInfo(session_id=sys.argv[3], started_at="2026-11-24T12:00:00+00:00", host="h"))
sink.close("finished")
print("ok")
"""


def test_processes_opening_one_new_mlflow_store_together_all_succeed(tmp_path: Path) -> None:
    """Before: MLflow migrates a new SQLite store without a lock, and of processes starting
    together all but one failed ("Online migration expected to match one row", "duplicate column")."""
    for trial in range(2):
        db = tmp_path / f"store{trial}" / "mlflow.db"
        start = time.time() + 4
        procs = [subprocess.Popen([sys.executable, "-c", RACE, str(db), str(start), f"s{trial}{i}"],
                                  stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True) for i in range(3)]
        outs = [p.communicate(timeout=240) for p in procs]
        for proc, (out, err) in zip(procs, outs, strict=True):
            assert proc.returncode == 0 and out.strip() == "ok", err[-3000:]
        from mlflow.tracking import MlflowClient

        client = MlflowClient(tracking_uri=f"sqlite:///{db}")
        experiment = client.get_experiment_by_name("hwbench")
        assert len(client.search_runs([experiment.experiment_id])) == 3


def test_processes_starting_together_on_a_fresh_mlflow_server_share_one_experiment(tmp_path: Path) -> None:
    """A real `mlflow server` on 127.0.0.1 with a new database: three sinks open their sessions
    at the same instant; each creates the experiment or finds the one another just made."""
    from _mlflow_server import MlflowServer
    from mlflow.tracking import MlflowClient

    server = MlflowServer(tmp_path / "server.db", tmp_path / "artifacts", tmp_path / "server.log")
    server.start()
    try:
        start = time.time() + 4
        code = RACE.replace('MlflowSink("sqlite:///" + sys.argv[1])', "MlflowSink(sys.argv[1])")
        procs = [subprocess.Popen([sys.executable, "-c", code, server.uri, str(start), f"srv{i}"],
                                  stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True) for i in range(3)]
        for proc in procs:
            out, err = proc.communicate(timeout=240)
            assert proc.returncode == 0 and out.strip() == "ok", err[-3000:]
        client = MlflowClient(tracking_uri=server.uri)
        (experiment,) = [e for e in client.search_experiments() if e.name == "hwbench"]
        assert experiment.tags.get("mlflow.experimentKind") == "custom_model_development"
        assert len(client.search_runs([experiment.experiment_id])) == 3
    finally:
        server.kill()


def test_duckdb_sink_waits_out_a_lock_held_for_milliseconds(tmp_path: Path) -> None:
    db = tmp_path / "hwbench.duckdb"
    session = make_session()
    records = make_records(session, 3)
    sink = DuckDBSink(db)
    sink.open_session(session)
    code = ("import duckdb, sys, time\ncon = duckdb.connect(sys.argv[1])\nprint('held', flush=True)\n"
            "time.sleep(0.3)\ncon.close()\n")
    holder = subprocess.Popen([sys.executable, "-c", code, str(db)], stdout=subprocess.PIPE, text=True)
    assert holder.stdout is not None and holder.stdout.readline().strip() == "held"
    sink.write(records)  # before: IOException "Could not set lock", and the records went to the spool
    sink.close("finished")
    assert holder.wait(timeout=30) == 0
    from pytest_hwbench.sinks import load_records

    assert len(load_records(db)) == 3


# -- 12. a missing test path under xdist -------------------------------------------------------------------
def test_missing_test_path_under_xdist_is_named(pytester: pytest.Pytester) -> None:
    pytester.makepyfile(test_inference=BENCH_FILE)
    result = pytester.runpytest_subprocess(*bench_args(pytester.path / "store", "1"), "-n", "2",
                                           "no_such_suite.py", timeout=300)
    text = output(result)
    assert result.ret == pytest.ExitCode.USAGE_ERROR, text
    assert "hwbench: no test ran: file or directory not found: no_such_suite.py" in text, text
    assert "generated no case" not in text, text


# -- 13. MLflow as a person sees it ------------------------------------------------------------------------
def test_experiment_is_a_model_development_one_and_parent_runs_say_what_they_hold(pytester: pytest.Pytester) -> None:
    import socket as _socket

    from mlflow.tracking import MlflowClient

    pytester.makepyfile(test_inference=BENCH_FILE)
    store = pytester.path / "store"
    result = pytester.runpytest_subprocess(*bench_args(store, "1"), "test_inference.py", timeout=300)
    assert result.ret == 0, output(result)
    client = MlflowClient(tracking_uri=f"sqlite:///{store / 'mlflow.db'}")
    experiment = client.get_experiment_by_name("hwbench")
    assert experiment.tags.get("mlflow.experimentKind") == "custom_model_development", experiment.tags
    runs = client.search_runs([experiment.experiment_id], "tags.`hwbench.kind` = 'session'")
    (parent,) = runs
    name = parent.info.run_name
    assert name.startswith(f"test_inference.py -m cpu · {_socket.gethostname()} · "), name
    assert re.search(r" · \d{4}-\d\d-\d\d \d\d:\d\d UTC$", name), name
    # MLflow 3.17's UI lands on the GenAI overview whatever the tag, unless the address asks for
    # the model-training view: the run prints that address, its table filtered to the session runs.
    result.stdout.fnmatch_lines([
        f"hwbench: runs table: `mlflow ui --backend-store-uri sqlite:///*/store/mlflow.db`, then "
        f"http://127.0.0.1:5000/#/experiments/{experiment.experiment_id}?workflowType=machine_learning"
        "&searchFilter=tags.%60hwbench.kind%60%20%3D%20%27session%27",
    ])  # fmt: skip


# -- item 2, harness side: no passed record without a finite median ---------------------------------------
def test_spool_recorder_and_replay_refuse_a_passed_record_with_a_nan_median(tmp_path: Path) -> None:
    session = make_session()
    good, bad = make_records(session, 2)
    bad = dataclasses.replace(bad, latency_ms_median=math.nan)
    spool = Spool(tmp_path / "spool")
    with pytest.raises(ValueError, match="record refused.*latency_ms_median not finite"):
        spool.append(bad)
    recorder = Recorder(spool, [DuckDBSink(tmp_path / "a.duckdb")])
    recorder.start(session)
    recorder.emit(good)
    with pytest.warns(HwbenchWarning, match="record refused, not stored"):
        recorder.emit(bad)
    report = recorder.finish("finished")
    assert report.records == 1 and report.refused == 1 and report.written == {"duckdb": 1}
    # An older spool that holds one: replay sends it nowhere and counts it.
    with spool.records_path.open("a") as handle:
        handle.write(bad.to_json() + "\n")
    with pytest.warns(HwbenchWarning, match="spooled record refused, not replayed"):
        (result,) = replay_each(spool, [DuckDBSink(tmp_path / "b.duckdb")])
    assert result.ok and result.written == 1 and result.refused == 1
    shutil.rmtree(tmp_path / "spool")


# -- a DuckDB file that cannot grow ---------------------------------------------------------------
def test_a_duckdb_file_that_cannot_grow_says_why_and_keeps_the_records_spooled(tmp_path: Path) -> None:
    """The write fails inside its transaction (here the file size limit, as a full disk would):
    replay names the cause, not the rollback of a transaction DuckDB had already ended, and the
    records stay spooled for a later replay."""
    import resource

    store, ids = filled_store(tmp_path, n=40)
    db = tmp_path / "small" / "hwbench.duckdb"
    db.parent.mkdir()
    argv = [str(HWBENCH_BIN), "replay", "--store", str(store), "--sinks", "duckdb", "--db", str(db)]

    def limit() -> None:
        resource.setrlimit(resource.RLIMIT_FSIZE, (16_000, 16_000))  # the header (12 KB) fits, the records do not

    out = subprocess.run(argv, cwd=tmp_path, capture_output=True, text=True, timeout=240, preexec_fn=limit,
                         check=False)
    assert out.returncode == 3, out.stdout + out.stderr
    assert "File too large" in out.stdout, out.stdout
    assert "cannot rollback" not in out.stdout + out.stderr
    assert sorted(r.record_id for r in Spool(store / "spool").records()) == sorted(ids)
    again = subprocess.run(argv, cwd=tmp_path, capture_output=True, text=True, timeout=240, check=False)
    assert again.returncode == 0, again.stdout + again.stderr
    assert "40 records written" in again.stdout, again.stdout
