"""Tracking end to end: real pytest runs of a benchmark file into real MLflow and DuckDB stores.

Every benchmark run is a fresh `python -m pytest` process (pytester's `runpytest_subprocess`), so
the plugin's configure-time validation, the serial deferral, the xdist controller and the
terminal summary all run as a user sees them. No mocks: SQLite MLflow stores, a real
`mlflow server` killed and restarted, a DuckDB file locked by another process, and the `hwbench`
console script on the stores these runs leave behind.

Time savers: the read-only CLI tests share one store filled by one serial run (module-scoped, so
it runs the same command pytester would, without pytester, which is function-scoped); runs other
than that first one start from a copy of an already migrated MLflow database (creating one costs
about 10 s), and the two team-server tests share one server.
"""

from __future__ import annotations

import contextlib
import math
import os
import re
import shutil
import signal
import subprocess
import sys
import threading
import time
from collections.abc import Iterable, Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest
from _mlflow_server import MlflowServer

#: Every test here starts another process, a server or a training: the end-to-end tier.
pytestmark = pytest.mark.e2e

HWBENCH_BIN = Path(sys.executable).with_name("hwbench")

BENCH_FILE = """
def test_inference(hwbench_case, hwbench):
    hwbench.measure(hwbench_case)
"""
BATCHES = (1, 2, 3, 4, 5, 6)
PARENT_TAG = "mlflow.parentRunId"
#: The summary line the tracker writes when records did not reach every sink.
WARNING_LINE = re.compile(
    r"hwbench: WARNING (?P<count>\d+) records spooled, not yet delivered \((?P<detail>[^)]*)\); "
    r"run `(?P<command>hwbench replay --store (?P<store>\S+)[^`]*)` once the store is back"
)
#: Variables that would point a run or the CLI elsewhere than the test's own store.
FOREIGN_ENV = ("MLFLOW_TRACKING_URI", "HWBENCH_EXPERIMENT", "PYTEST_ADDOPTS", "MLFLOW_EXPERIMENT_NAME")


def bench_args(store: Path, batch_sizes: Iterable[int] = BATCHES, min_time: float = 0) -> list[str]:
    """The fast benchmark options: one tiny model, torch on the CPU, fp32, 3 timed iterations."""
    return [
        "--hwbench-store", str(store),
        "--hwbench-models", "bert-tiny", "--hwbench-backends", "torch", "--hwbench-precisions", "fp32",
        "--hwbench-batch-sizes", ",".join(str(b) for b in batch_sizes),
        "--hwbench-warmup", "0", "--hwbench-min-iterations", "3", "--hwbench-min-time", str(min_time),
        "-p", "no:cacheprovider",
        # Only the CPU cases: the counts below then hold on a machine with a GPU too.
        "-m", "cpu",
    ]  # fmt: skip


def clean_env(**extra: str) -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if k not in FOREIGN_ENV}
    env.update(extra)
    return env


@pytest.fixture(autouse=True)
def _own_stores_only(monkeypatch: pytest.MonkeyPatch) -> None:
    for name in FOREIGN_ENV:
        monkeypatch.delenv(name, raising=False)


# -- reading the stores --------------------------------------------------------------------------
def output(result: pytest.RunResult) -> str:
    return "\n".join([*result.outlines, *result.errlines])


def warning_of(result: pytest.RunResult) -> re.Match[str] | None:
    matches = [m for m in map(WARNING_LINE.search, result.outlines) if m]
    assert len(matches) <= 1, output(result)
    return matches[0] if matches else None


def spool_lines(store: Path) -> int:
    path = store / "spool" / "records.jsonl"
    try:
        return sum(1 for line in path.read_text().splitlines() if line.strip())
    except FileNotFoundError:
        return 0


def spool_ids(store: Path) -> set[str]:
    from pytest_hwbench.sinks import Spool

    return {r.record_id for r in Spool(store / "spool").records()}


def sqlite_uri(store: Path) -> str:
    return f"sqlite:///{store / 'mlflow.db'}"


@dataclass
class MlflowRuns:
    parents: list[Any]
    children: list[Any]

    def by_record(self) -> dict[str, Any]:
        out = {r.data.tags["hwbench.record_id"]: r for r in self.children}
        assert len(out) == len(self.children), "two child runs for one record"
        return out


def mlflow_runs(uri: str, experiment: str = "hwbench") -> MlflowRuns:
    """Every active run of `experiment` (none if it does not exist), split by whether it has a parent."""
    from mlflow.tracking import MlflowClient

    client = MlflowClient(tracking_uri=uri)
    exp = client.get_experiment_by_name(experiment)
    runs = client.search_runs([exp.experiment_id], max_results=5000) if exp is not None else []
    return MlflowRuns(
        parents=[r for r in runs if PARENT_TAG not in r.data.tags],
        children=[r for r in runs if PARENT_TAG in r.data.tags],
    )


def duck_query(db: Path, sql: str) -> list[dict[str, Any]]:
    import duckdb

    con = duckdb.connect(str(db), read_only=True)  # closed at once: the CLI needs the file next
    try:
        cursor = con.execute(sql)
        names = [d[0] for d in cursor.description]
        return [dict(zip(names, row, strict=True)) for row in cursor.fetchall()]
    finally:
        con.close()


def duck_results(db: Path) -> list[dict[str, Any]]:
    # created_at (TIMESTAMPTZ) left out: fetching one in Python needs pytz, which is not installed.
    return duck_query(db, "SELECT * EXCLUDE (created_at) FROM results ORDER BY batch_size")


def hwbench_cli(*args: str, cwd: Path, env: dict[str, str] | None = None) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [str(HWBENCH_BIN), *args], cwd=cwd, env=env if env is not None else clean_env(),
        capture_output=True, text=True, timeout=240, stdin=subprocess.DEVNULL,
    )  # fmt: skip


def replay_counts(proc: subprocess.CompletedProcess[str]) -> dict[str, int]:
    """{sink: records written} from `hwbench replay`'s output (asserting it succeeded)."""
    assert proc.returncode == 0, proc.stdout + proc.stderr
    return {m["sink"]: int(m["n"]) for m in re.finditer(r"^\s+(?P<sink>\w+): (?P<n>\d+) records written$",
                                                       proc.stdout, re.MULTILINE)}


def assert_same_measurements(children: dict[str, Any], rows: list[dict[str, Any]]) -> None:
    """Each DuckDB row has a child run with the same id and the same medians (1e-9 relative)."""
    assert set(children) == {r["record_id"] for r in rows}
    for row in rows:
        metrics = children[row["record_id"]].data.metrics
        for name in ("latency_ms_median", "throughput_items_per_s"):
            assert math.isclose(metrics[name], row[name], rel_tol=1e-9), (name, metrics[name], row[name])


def assert_case_runs(runs: MlflowRuns, batch_sizes: Iterable[int]) -> None:
    """One parent, one finished child run per case under it, carrying the case params and metrics."""
    assert len(runs.parents) == 1, [r.info.run_name for r in runs.parents]
    parent = runs.parents[0]
    assert parent.data.tags["hwbench.kind"] == "session"
    assert parent.info.status == "FINISHED"
    assert {r.data.tags[PARENT_TAG] for r in runs.children} == {parent.info.run_id}
    assert sorted(int(r.data.params["batch_size"]) for r in runs.children) == sorted(batch_sizes)
    for run in runs.children:
        params, metrics = run.data.params, run.data.metrics
        assert run.info.status == "FINISHED"
        assert run.data.tags["hwbench.session_id"] == parent.data.tags["hwbench.session_id"]
        assert {k: params[k] for k in ("model", "backend", "hardware", "precision", "mode")} == {
            "model": "bert-tiny", "backend": "torch", "hardware": "cpu", "precision": "fp32", "mode": "inference",
        }  # fmt: skip
        assert {"family", "param_count", "sequence_length", "threads"} <= set(params)
        assert metrics["latency_ms_median"] > 0 and metrics["throughput_items_per_s"] > 0
        assert metrics["iterations"] >= 3
        assert metrics["latency_ms_min"] <= metrics["latency_ms_median"] <= metrics["latency_ms_max"]


# -- shared fixtures -----------------------------------------------------------------------------
@pytest.fixture(scope="module")
def mlflow_template(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A migrated, empty MLflow SQLite database, copied into stores that need not test migration."""
    from mlflow.tracking import MlflowClient

    path = tmp_path_factory.mktemp("mlflow-template") / "mlflow.db"
    MlflowClient(tracking_uri=sqlite_uri(path.parent)).search_experiments()
    return path


def seeded_store(directory: Path, template: Path) -> Path:
    store = directory / "store"
    store.mkdir(parents=True)
    shutil.copy(template, store / "mlflow.db")
    return store


@dataclass
class FilledStore:
    directory: Path
    store: Path
    result: pytest.RunResult

    @property
    def db(self) -> Path:
        return self.store / "hwbench.duckdb"


@pytest.fixture(scope="module")
def filled_store(tmp_path_factory: pytest.TempPathFactory) -> FilledStore:
    """One serial session into a store that does not exist yet (the CLI tests only read it).

    The same command `pytester.runpytest_subprocess` runs; pytester itself is function-scoped.
    """
    directory = tmp_path_factory.mktemp("serial")
    (directory / "test_inference.py").write_text(BENCH_FILE)
    store = directory / "store"
    cmd = [sys.executable, "-m", "pytest", f"--basetemp={directory / 'basetemp'}", *bench_args(store)]
    began = time.monotonic()
    proc = subprocess.run(
        cmd, cwd=directory, env=clean_env(), capture_output=True, text=True, timeout=300, stdin=subprocess.DEVNULL
    )
    result = pytest.RunResult(proc.returncode, proc.stdout.splitlines(), proc.stderr.splitlines(),
                              time.monotonic() - began)
    assert result.ret == 0, output(result)
    return FilledStore(directory, store, result)


# -- 1. serial ------------------------------------------------------------------------------------
def test_serial_session_lands_in_mlflow_and_duckdb_alike(filled_store: FilledStore) -> None:
    result, store = filled_store.result, filled_store.store
    result.assert_outcomes(passed=len(BATCHES))
    rows = duck_results(filled_store.db)
    session_id = rows[0]["session_id"]
    # Each line on its own: which of the two the summary prints first is the plug-ins' order.
    result.stdout.fnmatch_lines([f"hwbench: {len(BATCHES)} records (0 failed, * noisy), session {session_id}"])
    result.stdout.fnmatch_lines(
        [f"hwbench: MLflow sqlite:///*/store/mlflow.db (experiment 'hwbench'), DuckDB {filled_store.db}"])
    assert warning_of(result) is None, output(result)

    runs = mlflow_runs(sqlite_uri(store))
    assert_case_runs(runs, BATCHES)
    assert runs.parents[0].data.tags["hwbench.session_id"] == session_id
    assert len(rows) == len(BATCHES)
    assert {r["session_id"] for r in rows} == {session_id}
    assert {r["worker"] for r in rows} == {"main"}
    assert [r["batch_size"] for r in rows] == list(BATCHES)
    assert_same_measurements(runs.by_record(), rows)
    sessions = duck_query(filled_store.db, "SELECT session_id, status FROM sessions")
    assert sessions == [{"session_id": session_id, "status": "finished"}]
    assert spool_ids(store) == {r["record_id"] for r in rows}


# -- 2. xdist -------------------------------------------------------------------------------------
def test_xdist_session_has_one_parent_and_both_workers(pytester: pytest.Pytester, mlflow_template: Path) -> None:
    pytester.makepyfile(test_inference=BENCH_FILE)
    store = seeded_store(pytester.path, mlflow_template)
    result = pytester.runpytest_subprocess(*bench_args(store), "-n", "2", timeout=300)
    assert result.ret == 0, output(result)
    result.assert_outcomes(passed=len(BATCHES))
    assert warning_of(result) is None, output(result)

    runs = mlflow_runs(sqlite_uri(store))
    assert_case_runs(runs, BATCHES)  # one parent for the session, not one per worker
    rows = duck_results(store / "hwbench.duckdb")
    assert len(rows) == len(BATCHES)
    assert {r["worker"] for r in rows} == {"gw0", "gw1"}
    assert {r["session_id"] for r in rows} == {runs.parents[0].data.tags["hwbench.session_id"]}
    assert_same_measurements(runs.by_record(), rows)


# -- 3. a team MLflow server ------------------------------------------------------------------------
@pytest.fixture(scope="module")
def team_server(tmp_path_factory: pytest.TempPathFactory, mlflow_template: Path) -> Iterator[MlflowServer]:
    home = tmp_path_factory.mktemp("mlflow-server")
    shutil.copy(mlflow_template, home / "server.db")
    server = MlflowServer(home / "server.db", home / "artifacts", home / "server.log")
    server.start()
    try:
        yield server
    finally:
        server.kill()


def test_xdist_session_to_team_server_delivers_every_record(
    pytester: pytest.Pytester, monkeypatch: pytest.MonkeyPatch, team_server: MlflowServer
) -> None:
    if not team_server.running:
        team_server.start()
    pytester.makepyfile(test_inference=BENCH_FILE)
    store = pytester.path / "store"
    monkeypatch.setenv("MLFLOW_TRACKING_URI", team_server.uri)
    result = pytester.runpytest_subprocess(*bench_args(store), "-n", "2", timeout=300)
    assert result.ret == 0, output(result)
    result.assert_outcomes(passed=len(BATCHES))
    assert warning_of(result) is None, output(result)
    result.stdout.fnmatch_lines([f"hwbench: MLflow {team_server.uri} (experiment 'hwbench'), DuckDB *"])

    runs = mlflow_runs(team_server.uri)
    assert_case_runs(runs, BATCHES)
    rows = duck_results(store / "hwbench.duckdb")
    assert_same_measurements(runs.by_record(), rows)
    assert not (store / "mlflow.db").exists()  # the server is the MLflow store, not a local file


def test_team_server_killed_mid_session_then_replayed(
    pytester: pytest.Pytester, monkeypatch: pytest.MonkeyPatch, team_server: MlflowServer
) -> None:
    if not team_server.running:
        team_server.start()
    cases = tuple(range(1, 9))
    experiment = "hwbench-kill"  # its own experiment: the other server test's runs do not count here
    pytester.makepyfile(test_inference=BENCH_FILE)
    store = pytester.path / "store"
    monkeypatch.setenv("MLFLOW_TRACKING_URI", team_server.uri)
    monkeypatch.setenv("HWBENCH_EXPERIMENT", experiment)
    # A killed server refuses at once; without MLflow's retries each refused call is over at once
    # instead of after its backoff (1 + 2 s), which is not what this test is about.
    monkeypatch.setenv("MLFLOW_HTTP_REQUEST_MAX_RETRIES", "0")

    seen: dict[str, Any] = {}

    def kill_after_first_records() -> None:
        try:
            deadline = time.monotonic() + 280
            while time.monotonic() < deadline:
                # A controller that writes as records arrive has stored record k in MLflow before
                # it spools record k+1: at 2 spooled records the server holds at least one.
                if spool_lines(store) >= 2:
                    seen["spooled"] = spool_lines(store)
                    seen["on_server"] = sum(
                        r.info.status == "FINISHED" for r in mlflow_runs(team_server.uri, experiment).children
                    )
                    team_server.kill(signal.SIGTERM)
                    seen["spooled_when_gone"] = spool_lines(store)
                    return
                time.sleep(0.05)
        except Exception as exc:  # reported by the test, not lost in the thread
            seen["error"] = exc

    killer = threading.Thread(target=kill_after_first_records, daemon=True)
    killer.start()
    result = pytester.runpytest_subprocess(*bench_args(store, cases, min_time=0.2), "-n", "2", timeout=300)
    killer.join(timeout=60)
    assert "spooled_when_gone" in seen, f"server not killed ({seen}); spool has {spool_lines(store)} lines"

    assert result.ret == 0, output(result)  # the tests' own status: a dead store fails no case
    result.assert_outcomes(passed=len(cases))
    warning = warning_of(result)
    assert warning is not None, output(result)
    pending = int(warning["count"])
    assert warning["detail"] == f"{pending} for mlflow", warning[0]  # DuckDB got everything
    assert Path(warning["store"]) == store
    rows = duck_results(store / "hwbench.duckdb")
    assert len(rows) == len(cases) == spool_lines(store)
    print(f"kill scenario: {seen}; {pending} records pending")  # shown with -rP, for timing margins

    team_server.start()  # same port, same database
    before = mlflow_runs(team_server.uri, experiment)
    delivered = [r for r in before.children if r.info.status == "FINISHED"]
    assert len(delivered) == len(cases) - pending, (pending, [r.info.status for r in before.children])

    replay = hwbench_cli("replay", "--store", str(store), cwd=pytester.path, env=dict(os.environ))
    assert replay_counts(replay) == {"mlflow": pending, "duckdb": 0}, replay.stdout
    after = mlflow_runs(team_server.uri, experiment)
    assert_case_runs(after, cases)  # also: one parent, finished, none duplicated
    assert set(after.by_record()) == spool_ids(store) == {r["record_id"] for r in rows}
    assert_same_measurements(after.by_record(), rows)

    again = hwbench_cli("replay", "--store", str(store), cwd=pytester.path, env=dict(os.environ))
    assert replay_counts(again) == {"mlflow": 0, "duckdb": 0}, again.stdout
    assert len(mlflow_runs(team_server.uri, experiment).children) == len(cases)

    # Last, so that a failure here still leaves the replay above checked.
    assert seen["on_server"] >= 1 and pending < len(cases), (
        f"an xdist controller must write each record to MLflow as it arrives, but when the server was "
        f"killed {seen['spooled']} records were spooled and the server held {seen['on_server']}; "
        f"{pending} of {len(cases)} records were left pending"
    )
    assert seen["spooled_when_gone"] < len(cases), f"the run ended before the server did: {seen}"


# -- 4. DuckDB held by another process ---------------------------------------------------------------
@contextlib.contextmanager
def duckdb_held(path: Path) -> Iterator[subprocess.Popen[str]]:
    """Another process holds `path` open until the block ends (or `release` is called)."""
    code = (
        "import duckdb, sys\n"
        "con = duckdb.connect(sys.argv[1])\n"
        "print('ready', flush=True)\n"
        "sys.stdin.readline()\n"
        "con.close()\n"
    )
    proc = subprocess.Popen(
        [sys.executable, "-c", code, str(path)], stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True
    )
    try:
        assert proc.stdout is not None and proc.stdout.readline().strip() == "ready"
        yield proc
    finally:
        release(proc)


def release(proc: subprocess.Popen[str]) -> None:
    if proc.poll() is None:
        assert proc.stdin is not None
        proc.stdin.write("\n")
        proc.stdin.flush()
        proc.wait(timeout=30)


def test_duckdb_held_by_another_process_is_spooled_then_replayed(
    pytester: pytest.Pytester, mlflow_template: Path
) -> None:
    pytester.makepyfile(test_inference=BENCH_FILE)
    store = seeded_store(pytester.path, mlflow_template)
    db = store / "hwbench.duckdb"
    with duckdb_held(db) as holder:
        result = pytester.runpytest_subprocess(*bench_args(store), timeout=300)
        release(holder)
    assert holder.returncode == 0
    assert result.ret == 0, output(result)
    result.assert_outcomes(passed=len(BATCHES))
    warning = warning_of(result)
    assert warning is not None, output(result)
    assert int(warning["count"]) == len(BATCHES)
    assert warning["detail"] == f"{len(BATCHES)} for duckdb"
    result.stdout.fnmatch_lines(["hwbench:   duckdb: *IOException*lock*"])
    assert len(mlflow_runs(sqlite_uri(store)).children) == len(BATCHES)  # MLflow is unaffected

    replay = hwbench_cli("replay", "--store", str(store), cwd=pytester.path)
    assert replay_counts(replay) == {"mlflow": 0, "duckdb": len(BATCHES)}, replay.stdout
    rows = duck_results(db)
    assert {r["record_id"] for r in rows} == spool_ids(store)
    assert [r["batch_size"] for r in rows] == list(BATCHES)
    assert_same_measurements(mlflow_runs(sqlite_uri(store)).by_record(), rows)
    assert [s["status"] for s in duck_query(db, "SELECT status FROM sessions")] == ["finished"]

    again = hwbench_cli("replay", "--store", str(store), cwd=pytester.path)
    assert replay_counts(again) == {"mlflow": 0, "duckdb": 0}, again.stdout
    assert len(duck_results(db)) == len(BATCHES)


# -- 5. usage errors --------------------------------------------------------------------------------
@pytest.mark.parametrize(
    ("option", "value"),
    [
        ("--hwbench-db", "{tmp}/a-directory"),
        ("--hwbench-db", "/proc/nonexistent/x.duckdb"),
        ("--hwbench-mlflow-uri", "file:///tmp/x"),
        ("--hwbench-mlflow-uri", "http://:80"),
        ("--hwbench-mlflow-uri", "notascheme://x"),
        ("--hwbench-mlflow-uri", "sqlite:///{tmp}/a-directory"),
        ("--hwbench-mlflow-uri", "sqlite:///{tmp}/test_inference.py"),
    ],
    ids=["db-is-directory", "db-uncreatable", "mlflow-file-store", "mlflow-no-host", "mlflow-bad-scheme",
         "mlflow-sqlite-directory", "mlflow-sqlite-not-a-database"],
)
def test_bad_store_settings_are_usage_errors_before_any_case(
    pytester: pytest.Pytester, option: str, value: str
) -> None:
    pytester.makepyfile(test_inference=BENCH_FILE)
    (pytester.path / "a-directory").mkdir()
    value = value.format(tmp=pytester.path)
    store = pytester.path / "store"
    # One case only: if validation lets a bad setting through, the run is short all the same.
    result = pytester.runpytest_subprocess(*bench_args(store, batch_sizes=(1,)), option, value, timeout=300)
    text = output(result)
    assert result.ret == pytest.ExitCode.USAGE_ERROR, text
    assert value in text
    assert not re.search(r"\d+ (passed|failed|error)", text), text
    assert not store.exists()  # nothing measured, nothing recorded


# -- 6. the CLI on a filled store -------------------------------------------------------------------
def report_number(value: float) -> str:
    """How the report prints a number (`pytest_hwbench.report.data.fmt`): 2 decimals with separators from 1 up, else 3 digits."""
    return f"{value:,.2f}" if abs(value) >= 1 else f"{value:.3g}"


def test_cli_sessions_and_compare_a_session_with_itself(filled_store: FilledStore) -> None:
    session_id = duck_results(filled_store.db)[0]["session_id"]
    proc = hwbench_cli("sessions", "--store", str(filled_store.store), cwd=filled_store.directory)
    assert proc.returncode == 0, proc.stderr
    header, _, *lines = proc.stdout.splitlines()
    (line,) = [line for line in lines if line.startswith(session_id)]
    assert line[header.index("records"):].split()[0] == str(len(BATCHES)), proc.stdout

    compare = hwbench_cli("compare", "--store", str(filled_store.store), session_id, session_id,
                          cwd=filled_store.directory)
    assert compare.returncode == 0, compare.stdout + compare.stderr
    # Against itself nothing moved: never a regression or an improvement. Too few cases to learn how
    # far separate runs differ, so none is called unchanged: each says why, under --verbose in full.
    counts = re.search(r"\b0 regression, 0 improvement, (\d+) unchanged, (\d+) inconclusive, 0 missing", compare.stdout)
    assert counts and int(counts[1]) + int(counts[2]) == len(BATCHES), compare.stdout
    verbose = hwbench_cli("compare", "--store", str(filled_store.store), session_id, session_id, "--verbose",
                          cwd=filled_store.directory)
    assert all("noisy in A" in line or "between-run spread unknown" in line or "cannot tell" in line
               for line in verbose.stdout.splitlines() if " inconclusive " in line), verbose.stdout


def test_cli_report_shows_each_case_median(filled_store: FilledStore, tmp_path: Path) -> None:
    out = tmp_path / "report"
    proc = hwbench_cli("report", "--store", str(filled_store.store), "--out", str(out), cwd=filled_store.directory)
    assert proc.returncode == 0, proc.stdout + proc.stderr
    markdown = (out / "report.md").read_text(encoding="utf-8")
    latency = markdown.split("#### Latency, median (ms)", 1)[1].split("####", 1)[0]
    for row in duck_results(filled_store.db):
        expected = f"| bert-tiny | {row['batch_size']} | {report_number(row['latency_ms_median'])} |"
        assert expected in latency.splitlines(), (expected, latency)
    images = re.findall(r"!\[[^]]*\]\((plots/[^)]+\.png)\)", markdown)
    assert images, markdown
    for image in images:
        assert (out / image).read_bytes()[:8] == b"\x89PNG\r\n\x1a\n", image
    assert (out / "compatibility.json").exists()


def test_cli_export_parquet_has_every_row(filled_store: FilledStore, tmp_path: Path) -> None:
    import duckdb

    out = tmp_path / "parquet"
    proc = hwbench_cli("export", "--store", str(filled_store.store), "--parquet", str(out),
                       cwd=filled_store.directory)
    assert proc.returncode == 0, proc.stdout + proc.stderr
    rows = duck_results(filled_store.db)
    exported = duckdb.sql(f"SELECT record_id, latency_ms_median FROM read_parquet('{out / 'results.parquet'}')")
    assert dict(exported.fetchall()) == {r["record_id"]: r["latency_ms_median"] for r in rows}
    timings = duckdb.sql(f"SELECT count(*) FROM read_parquet('{out / 'timings.parquet'}')").fetchall()[0][0]
    assert timings == sum(r["iterations"] for r in rows)


def test_cli_import_mlflow_rebuilds_the_results(filled_store: FilledStore, tmp_path: Path) -> None:
    proc = hwbench_cli("import-mlflow", "--store", str(filled_store.store), "--db", "other.duckdb", cwd=tmp_path)
    assert proc.returncode == 0, proc.stdout + proc.stderr
    assert f"  {len(BATCHES)} records imported" in proc.stdout.splitlines(), proc.stdout
    imported = duck_results(tmp_path / "other.duckdb")
    original = duck_results(filled_store.db)
    assert [(r["record_id"], r["batch_size"], r["latency_ms_median"]) for r in imported] == [
        (r["record_id"], r["batch_size"], r["latency_ms_median"]) for r in original
    ]


def test_cli_replay_on_a_complete_store_writes_nothing(filled_store: FilledStore) -> None:
    proc = hwbench_cli("replay", "--store", str(filled_store.store), cwd=filled_store.directory)
    assert replay_counts(proc) == {"mlflow": 0, "duckdb": 0}, proc.stdout
    assert len(mlflow_runs(sqlite_uri(filled_store.store)).children) == len(BATCHES)
    assert len(duck_results(filled_store.db)) == len(BATCHES)
