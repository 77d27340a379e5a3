"""Team scale against a real team server (PostgreSQL and `mlflow server` on it), and the defects a
reliability probe found in the command line, each reproduced as it was reported.

The team-server tests skip, naming the install command, where PostgreSQL's binaries or the SQL
driver are absent (`_postgres.missing`).
"""

from __future__ import annotations

import contextlib
import os
import shlex
import socket
import subprocess
import sys
import threading
import time
from collections import Counter
from pathlib import Path

import pytest
from _postgres import TeamServer
from test_sinks import make_records, make_session

from pytest_hwbench.cli import build_parser
from pytest_hwbench.cli import main as hwbench_main
from pytest_hwbench.record import BenchmarkRecord, SessionInfo
from pytest_hwbench.sinks import (
    DuckDBSink,
    MlflowSink,
    Recorder,
    Spool,
    import_mlflow_sessions,
    replay_command,
)

#: Every test here starts another process, a server or a training: the end-to-end tier.
pytestmark = pytest.mark.e2e

HERE = Path(__file__).resolve().parent
HWBENCH_BIN = Path(sys.executable).with_name("hwbench")
TERMINAL = ("FINISHED", "FAILED", "KILLED")  # a failed case is a record too (its run FAILED)
FOREIGN_ENV = ("MLFLOW_TRACKING_URI", "HWBENCH_EXPERIMENT", "PYTEST_ADDOPTS", "MLFLOW_EXPERIMENT_NAME")


@pytest.fixture(autouse=True)
def _own_stores_only(monkeypatch: pytest.MonkeyPatch) -> None:
    for name in FOREIGN_ENV:
        monkeypatch.delenv(name, raising=False)


def _env() -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if k not in FOREIGN_ENV}
    env["PYTHONPATH"] = os.pathsep.join([str(HERE), env.get("PYTHONPATH", "")]).rstrip(os.pathsep)
    return env


def hwbench(*args: str, cwd: Path, timeout: float = 300) -> subprocess.CompletedProcess[str]:
    return subprocess.run([str(HWBENCH_BIN), *args], cwd=cwd, env=_env(), capture_output=True, text=True,
                          timeout=timeout, stdin=subprocess.DEVNULL)


def spool_of(directory: Path, session: SessionInfo, records: list[BenchmarkRecord]) -> Path:
    """A store whose spool holds `records` of `session`, ended "finished" (what a run that could
    not reach its server leaves behind)."""
    spool = Spool(directory / "spool")
    spool.append_session(session)
    for record in records:
        spool.append(record)
    spool.append_session_end(session.session_id, "finished")
    return directory


def child_runs(uri: str, experiment: str) -> Counter[str]:
    """record_id -> number of ended child runs in the experiment (read through MLflow)."""
    from mlflow.tracking import MlflowClient

    client = MlflowClient(tracking_uri=uri)
    found = client.get_experiment_by_name(experiment)
    assert found is not None, f"experiment {experiment} was never created"
    counts: Counter[str] = Counter()
    token = None
    while True:
        page = client.search_runs([found.experiment_id], "tags.`hwbench.kind` = 'record'", max_results=1000,
                                  page_token=token)
        counts.update(run.data.tags["hwbench.record_id"] for run in page if run.info.status in TERMINAL)
        token = page.token
        if not token:
            return counts


SESSION_SCRIPT = """
import sys
from test_sinks import make_records, make_session
from pytest_hwbench.sinks import MlflowSink, Recorder, Spool
uri, experiment, store, n = sys.argv[1], sys.argv[2], sys.argv[3], int(sys.argv[4])
session = make_session("runner-" + store[-1])
records = make_records(session, n)
recorder = Recorder(Spool(store + "/spool"), [MlflowSink(uri, experiment)], deadline_s=120)
recorder.start(session)
for record in records:
    recorder.emit(record)
report = recorder.finish("finished")
assert report.complete, report
print(" ".join(r.record_id for r in records))
"""


# -- a team server: concurrent runners, replay, import ----------------------------------------------
def test_four_concurrent_sessions_and_four_concurrent_replays_write_every_record_once(
    team_server: TeamServer, team_experiment: str, tmp_path: Path
) -> None:
    per_session, per_replay = 15, 30
    replays = []
    expected: set[str] = set()
    for k in range(4):
        session = make_session(f"replayer-{k}")
        records = make_records(session, per_replay)
        expected.update(r.record_id for r in records)
        replays.append(spool_of(tmp_path / f"spooled{k}", session, records))
    procs = [subprocess.Popen([sys.executable, "-c", SESSION_SCRIPT, team_server.uri, team_experiment,
                               str(tmp_path / f"live{k}"), str(per_session)],
                              cwd=tmp_path, env=_env(), stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
             for k in range(4)]
    # --timeout 120: eight processes share this machine's cores with the server; each call's
    # deadline is tested on its own (test_a_slow_server_...).
    procs += [subprocess.Popen([str(HWBENCH_BIN), "replay", "--store", str(store), "--sinks", "mlflow",
                                "--timeout", "120", "--mlflow-uri", team_server.uri, "--experiment", team_experiment],
                               cwd=tmp_path, env=_env(), stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
              for store in replays]
    outputs = [proc.communicate(timeout=600) for proc in procs]
    for proc, (out, err) in zip(procs, outputs, strict=True):
        assert proc.returncode == 0, f"{proc.args}: {out}\n{err}"
    for out, _ in outputs[:4]:
        expected.update(out.split())
    assert len(expected) == 4 * per_session + 4 * per_replay
    counts = child_runs(team_server.uri, team_experiment)
    assert set(counts) == expected, f"missing: {len(expected - set(counts))}, foreign: {set(counts) - expected}"
    assert [rid for rid, n in counts.items() if n != 1] == [], "records written more than once"
    # Replayed again: everything is there, nothing is written twice.
    again = hwbench("replay", "--store", str(replays[0]), "--sinks", "mlflow", "--mlflow-uri", team_server.uri,
                    "--experiment", team_experiment, cwd=tmp_path)
    assert again.returncode == 0, again.stderr
    assert "mlflow: 0 records written" in again.stdout, again.stdout
    assert f"{per_replay} of {per_replay} records already there; 0 to write" in again.stderr, again.stderr


def test_three_concurrent_replays_of_one_spool_leave_each_record_and_the_session_once(
    team_server: TeamServer, team_experiment: str, tmp_path: Path
) -> None:
    from mlflow.tracking import MlflowClient

    session = make_session("replayed-thrice")
    records = make_records(session, 6)
    store = spool_of(tmp_path / "spooled", session, records)
    for _ in range(2):  # and once more, all three again: still nothing doubled
        procs = [subprocess.Popen([str(HWBENCH_BIN), "replay", "--store", str(store), "--sinks", "mlflow",
                                   "--timeout", "120", "--mlflow-uri", team_server.uri, "--experiment",
                                   team_experiment], cwd=tmp_path, env=_env(), stdout=subprocess.PIPE,
                                  stderr=subprocess.PIPE, text=True) for _ in range(3)]
        for proc in procs:
            out, err = proc.communicate(timeout=600)
            assert proc.returncode == 0, f"{out}\n{err}"
        counts = child_runs(team_server.uri, team_experiment)
        mine = {r.record_id for r in records}
        assert {rid: n for rid, n in counts.items() if rid in mine} == dict.fromkeys(mine, 1)  # before: 12 of 6
        client = MlflowClient(tracking_uri=team_server.uri)
        experiment = client.get_experiment_by_name(team_experiment)
        parents = client.search_runs([experiment.experiment_id], "tags.`hwbench.kind` = 'session' AND "
                                     f"tags.`hwbench.session_id` = '{session.session_id}'")
        assert len(parents) == 1, [p.info.run_id for p in parents]
        children = client.search_runs([experiment.experiment_id], "tags.`hwbench.kind` = 'record' AND "
                                      f"tags.`hwbench.session_id` = '{session.session_id}'")
        assert {c.data.tags["mlflow.parentRunId"] for c in children} == {parents[0].info.run_id}
    # read back through hwbench: every record once, with its raw timings (the kept parent's artifacts)
    from pytest_hwbench.sinks import read_records

    back = [r for r in read_records(team_server.uri, experiment=team_experiment, with_timings=True)
            if r.session_id == session.session_id]
    assert sorted(r.record_id for r in back) == sorted(mine)
    assert {r.record_id: r.timings_ms for r in back} == {r.record_id: r.timings_ms for r in records}


def test_an_sql_store_is_asked_a_query_first_refusals_are_usage_errors_and_silence_is_bounded(
    team_server: TeamServer, tmp_path: Path, silent_port: int
) -> None:
    port = team_server.postgres.port
    wrong = {"database": f"postgresql://hwbench:pw@127.0.0.1:{port}/nosuchdb",
             "user": f"postgresql://nobody:pw@127.0.0.1:{port}/mlflow"}
    silent = f"postgresql://hwbench:pw@127.0.0.1:{silent_port}/mlflow"
    commands = {"--to mlflow": ["export", "--to"], "--mlflow-uri": ["import-mlflow", "--mlflow-uri"],
                "source": ["compare", "latest", "latest", "--source-a"]}
    for option, argv in commands.items():
        for what, uri in wrong.items():
            target = f"mlflow:{uri}" if option == "--to mlflow" else uri
            began = time.monotonic()
            proc = hwbench(*argv, target, "--store", str(tmp_path / "store"), cwd=tmp_path)
            assert proc.returncode == 2 and time.monotonic() - began < 60, (what, proc.stdout + proc.stderr)
            assert f"{option} postgresql://***@127.0.0.1:{port}/" in proc.stderr, proc.stderr
            assert "the server refused: " in proc.stderr and "does not exist" in proc.stderr, proc.stderr
            assert ":pw@" not in proc.stdout + proc.stderr and "Traceback" not in proc.stderr
        # a port that takes the connection and never answers: exit 3 within seconds (before: 1,418 s)
        target = f"mlflow:{silent}" if option == "--to mlflow" else silent
        began = time.monotonic()
        proc = hwbench(*argv, target, "--store", str(tmp_path / "store"), cwd=tmp_path)
        assert proc.returncode == 3 and time.monotonic() - began < 60, proc.stdout + proc.stderr
        assert f"{option} postgresql://***@127.0.0.1:{silent_port}/mlflow: no answer to a query" in proc.stderr, \
            proc.stderr
    # hwsel train's registry: the same probe, the same bounds (before: 1,414 s on a silent port)
    snapshot = Path(__file__).resolve().parents[1] / "benchmarks" / "data" / "cpu_runs.parquet"
    for uri, code, says in ((wrong["database"], 2, "the server refused: "), (silent, 1, "no answer to a query")):
        began = time.monotonic()
        proc = subprocess.run([sys.executable, "-m", "hwsel", "train", "--source", str(snapshot), "--trials", "1",
                               "--tracking-uri", uri], cwd=tmp_path, env=_env(), capture_output=True, text=True,
                              timeout=300)
        assert proc.returncode == code and time.monotonic() - began < 60, proc.stdout + proc.stderr
        assert "--tracking-uri" in proc.stderr and says in proc.stderr and ":pw@" not in proc.stderr, proc.stderr


class LatencyProxy:
    """A TCP proxy on 127.0.0.1 in front of `port` that holds every chunk the client sends for
    `delay_s` before passing it on: a server that answers, slowly."""

    def __init__(self, port: int, delay_s: float) -> None:
        self.upstream, self.delay_s = port, delay_s
        self.listener = socket.socket()
        self.listener.bind(("127.0.0.1", 0))
        self.listener.listen(64)
        self.listener.settimeout(0.2)
        self.port = int(self.listener.getsockname()[1])
        self.stop = threading.Event()
        self.sockets: list[socket.socket] = []
        self.thread = threading.Thread(target=self._accept, daemon=True)

    def _pump(self, source: socket.socket, target: socket.socket, delay: float) -> None:
        with contextlib.suppress(OSError):
            while not self.stop.is_set():
                data = source.recv(65536)
                if not data:
                    break
                if delay:
                    time.sleep(delay)
                target.sendall(data)
        with contextlib.suppress(OSError):
            target.shutdown(socket.SHUT_WR)

    def _accept(self) -> None:
        while not self.stop.is_set():
            try:
                client, _ = self.listener.accept()
            except OSError:
                continue
            server = socket.create_connection(("127.0.0.1", self.upstream))
            self.sockets += [client, server]
            threading.Thread(target=self._pump, args=(client, server, self.delay_s), daemon=True).start()
            threading.Thread(target=self._pump, args=(server, client, 0.0), daemon=True).start()

    def __enter__(self) -> LatencyProxy:
        self.thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self.stop.set()
        self.thread.join(timeout=5)
        for sock in self.sockets:
            with contextlib.suppress(OSError):
                sock.close()
        self.listener.close()


def test_a_slow_server_is_written_to_with_progress_not_given_up_on(
    team_server: TeamServer, team_experiment: str, tmp_path: Path
) -> None:
    session = make_session("slow-link")
    records = make_records(session, 40)
    store = spool_of(tmp_path / "store", session, records)
    with LatencyProxy(team_server.mlflow.port, delay_s=0.15) as proxy:
        began = time.monotonic()
        result = hwbench("replay", "--store", str(store), "--sinks", "mlflow", "--timeout", "30",
                         "--mlflow-uri", f"http://127.0.0.1:{proxy.port}", "--experiment", team_experiment,
                         cwd=tmp_path)
        elapsed = time.monotonic() - began
    assert result.returncode == 0, f"{result.stdout}\n{result.stderr}"
    # Every request waited 0.15 s, so the replay took well over the 3 s after which a call that
    # has not answered yet gets a "waiting for" line; it was written to all the same.
    assert elapsed > 0.15 * 3 * len(records), elapsed
    assert "mlflow: 40 records written" in result.stdout, result.stdout
    assert "hwbench replay: mlflow: 0 of 40 records already there; 40 to write" in result.stderr, result.stderr
    assert "hwbench replay: mlflow: 40 of 40 records written (" in result.stderr, result.stderr
    assert "records/s" in result.stderr
    assert set(child_runs(team_server.uri, team_experiment)) == {r.record_id for r in records}


def write_session(uri: str, experiment: str, n: int, label: str) -> list[BenchmarkRecord]:
    session = make_session(label)
    records = make_records(session, n)
    sink = MlflowSink(uri, experiment)
    sink.open_session(session)
    sink.write(records)
    sink.close("finished")
    return records


def test_existing_ids_asks_about_the_replayed_sessions_only(
    team_server: TeamServer, team_experiment: str
) -> None:
    mine = write_session(team_server.uri, team_experiment, 6, "mine")
    others = write_session(team_server.uri, team_experiment, 30, "others")
    sink = MlflowSink(team_server.uri, team_experiment)
    client = sink._client()
    searches: list[tuple[str, int]] = []
    real_search = client.search_runs

    def counted(experiment_ids: list[str], filter_string: str = "", *args: object, **kwargs: object) -> object:
        page = real_search(experiment_ids, filter_string, *args, **kwargs)
        searches.append((filter_string, len(page)))
        return page

    client.search_runs = counted  # type: ignore[method-assign]  # a spy: the real search still runs
    unknown = make_records(make_session("new"), 3)
    asked = {r.record_id: r for r in [*mine, *unknown]}
    assert sink.existing_ids(asked) == {r.record_id for r in mine}
    # One bounded search per session asked about, none over the whole experiment.
    assert sorted(runs for _, runs in searches) == [0, len(mine)], searches
    assert all("hwbench.session_id" in text for text, _ in searches), searches
    assert not any(others[0].session_id in text for text, _ in searches)


def test_import_fetches_only_the_sessions_the_file_lacks(
    team_server: TeamServer, team_experiment: str, tmp_path: Path
) -> None:
    first = write_session(team_server.uri, team_experiment, 5, "a") + write_session(
        team_server.uri, team_experiment, 7, "b")
    db = tmp_path / "team.duckdb"
    result = import_mlflow_sessions(team_server.uri, team_experiment, db)
    assert (result.sessions, result.fetched, result.records) == (2, 2, 12)
    again = import_mlflow_sessions(team_server.uri, team_experiment, db)
    assert (again.sessions, again.fetched, again.records) == (2, 0, 0)
    later = write_session(team_server.uri, team_experiment, 4, "c")
    third = import_mlflow_sessions(team_server.uri, team_experiment, db)
    assert (third.sessions, third.fetched, third.records) == (3, 1, 4)
    from pytest_hwbench.sinks import load_records

    assert {r.record_id for r in load_records(db)} == {r.record_id for r in [*first, *later]}
    cli = hwbench("import-mlflow", "--db", str(db), "--store", str(tmp_path / "store"), "--mlflow-uri",
                  team_server.uri, "--experiment", team_experiment, cwd=tmp_path)
    assert cli.returncode == 0, cli.stderr
    assert "3 sessions in MLflow, 3 already in team.duckdb; fetching 0" in cli.stdout, cli.stdout
    assert "0 records imported" in cli.stdout


# -- the five defects -------------------------------------------------------------------------------
def filled_db(directory: Path) -> tuple[Path, Path, SessionInfo, list[BenchmarkRecord]]:
    """A store whose spool and DuckDB file hold 4 records of one session."""
    store = directory / "store"
    session = make_session()
    records = make_records(session, 4)
    recorder = Recorder(Spool(store / "spool"), [DuckDBSink(store / "hwbench.duckdb")])
    recorder.start(session)
    for record in records:
        recorder.emit(record)
    assert recorder.finish("finished").complete
    return store, store / "hwbench.duckdb", session, records


def truncate_to_half(path: Path) -> None:
    size = path.stat().st_size
    with path.open("r+b") as handle:
        handle.truncate(size // 2)


@pytest.mark.parametrize("command", [["sessions"], ["report"], ["compare", "latest", "latest"]])
def test_a_duckdb_file_truncated_to_half_gives_a_clear_error(tmp_path: Path, command: list[str]) -> None:
    store, db, _, _ = filled_db(tmp_path)
    truncate_to_half(db)
    result = hwbench(*command, "--store", str(store), "--db", str(db), cwd=tmp_path)
    assert result.returncode == 2, f"{result.stdout}\n{result.stderr}"
    assert "Traceback" not in result.stderr, result.stderr
    assert f"DuckDB file {db} is corrupt" in result.stderr, result.stderr
    assert "--move-corrupt" in result.stderr


def test_replay_move_corrupt_recognises_a_truncated_file_and_rebuilds_it(tmp_path: Path) -> None:
    store, db, _, records = filled_db(tmp_path)
    truncate_to_half(db)
    result = hwbench("replay", "--store", str(store), "--db", str(db), "--sinks", "duckdb", "--move-corrupt",
                     cwd=tmp_path)
    assert result.returncode == 0, f"{result.stdout}\n{result.stderr}"
    assert f"{db} was corrupt: moved to" in result.stdout, result.stdout
    assert "once the store is back" not in result.stderr
    assert len(list(tmp_path.glob("store/hwbench.duckdb.corrupt-*"))) == 1
    from pytest_hwbench.sinks import load_records

    assert {r.record_id for r in load_records(db)} == {r.record_id for r in records}


def test_compare_with_an_unreachable_source_says_so_and_does_not_exit_1(tmp_path: Path) -> None:
    with socket.socket() as sock:  # a port nothing listens on
        sock.bind(("127.0.0.1", 0))
        port = sock.getsockname()[1]
    began = time.monotonic()
    result = hwbench("compare", "x", "y", "--source-a", f"http://127.0.0.1:{port}", cwd=tmp_path)
    assert result.returncode == 3, f"{result.stdout}\n{result.stderr}"
    assert "Traceback" not in result.stderr, result.stderr
    assert f"hwbench compare: error: source http://127.0.0.1:{port}: cannot reach" in result.stderr, result.stderr
    assert time.monotonic() - began < 60


@pytest.mark.parametrize("pair", [("", ""), ("latest", ""), ("latest,", "latest")])
def test_compare_refuses_an_empty_session_naming_it(
    tmp_path: Path, pair: tuple[str, str], capsys: pytest.CaptureFixture[str]
) -> None:
    store, db, _, _ = filled_db(tmp_path)
    code = hwbench_main(["compare", *pair, "--store", str(store), "--db", str(db)])
    err = capsys.readouterr().err
    assert code == 2, err
    bad = pair[0] if "" in pair[0].split(",") else pair[1]
    assert f"session {bad!r} is empty" in err, err


def test_replay_hint_repeats_every_store_option_the_run_was_given(tmp_path: Path) -> None:
    db = tmp_path / "team" / "results.duckdb"
    command = replay_command(tmp_path / "store", db_path=db, mlflow_uri="http://mlflow.internal:5000",
                             experiment="nightly")
    argv = shlex.split(command)
    assert argv[:2] == ["hwbench", "replay"]
    args = build_parser().parse_args(argv[1:])
    assert (Path(args.store), Path(args.db), args.mlflow_uri, args.experiment) == (
        tmp_path / "store", db, "http://mlflow.internal:5000", "nightly")
    secret = replay_command(tmp_path / "store", mlflow_uri="http://alice:s3cret@mlflow.internal:5000")
    assert "s3cret" not in secret


BENCH_FILE = """
def test_inference(hwbench_case, hwbench):
    hwbench.measure(hwbench_case)
"""


def test_a_missing_test_name_under_xdist_says_not_found_as_serially(pytester: pytest.Pytester) -> None:
    pytester.makepyfile(test_inference=BENCH_FILE)
    args = ["--hwbench-store", str(pytester.path / "store"), "--hwbench-models", "bert-tiny", "--hwbench-backends",
            "torch", "--hwbench-precisions", "fp32", "--hwbench-batch-sizes", "1", "-p", "no:cacheprovider"]
    result = pytester.runpytest_subprocess(*args, "test_inference.py::test_nope", "-n", "2", "-m", "cpu",
                                           timeout=300)
    text = "\n".join([*result.outlines, *result.errlines])
    assert result.ret == pytest.ExitCode.USAGE_ERROR, text
    assert "hwbench: no test ran: not found: test_inference.py::test_nope" in text, text
    assert "after selection" not in text, text
    # a test that exists, with a parameter id that names no case of it: as serially, not found (exit 4)
    result = pytester.runpytest_subprocess(*args, "test_inference.py::test_inference[no-such-case]", "-n", "2",
                                           timeout=300)
    text = "\n".join([*result.outlines, *result.errlines])
    assert result.ret == pytest.ExitCode.USAGE_ERROR, text
    assert "hwbench: no test ran: not found: test_inference.py::test_inference[no-such-case]" in text, text
    assert "after selection" not in text, text
