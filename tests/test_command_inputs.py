"""The store commands and ``hwbench ab`` refuse bad input before any work, naming the option, and
never wait on a tracking server that does not answer:

- ``report --out`` and ``export --parquet`` given a file, or nothing, are usage errors (exit 2);
- ``export --to``, ``import-mlflow`` and ``compare --source-a`` on a server that refuses, that
  accepts and never answers, or whose ``/health`` answers while its API hangs, or on an SQL store
  whose port takes no connection, stop within seconds with exit 3 naming the option (not after
  MLflow's retries), the password masked; ``--timeout`` bounds each later request;
- a store file that SQLite cannot read is a usage error (exit 2) naming it, left as it was;
- ``ab --threshold``/``--alpha`` out of range and an ``--a-python`` that is no interpreter are
  usage errors before any worker starts;
- ``ab``'s sinks are bounded like the harness's: a silent server leaves the pair in the spool.
"""

from __future__ import annotations

import json
import os
import socket
import subprocess
import sys
import time
from collections import Counter
from pathlib import Path

import pytest
from _hanging import PROBE, HangingServer

from pytest_hwbench.cli import main

SECRET = "s3cret-pw"


@pytest.fixture(autouse=True)
def _own_stores_only(monkeypatch: pytest.MonkeyPatch) -> None:
    for name in ("MLFLOW_TRACKING_URI", "HWBENCH_EXPERIMENT", "MLFLOW_TRACKING_USERNAME", "MLFLOW_TRACKING_PASSWORD"):
        monkeypatch.delenv(name, raising=False)


def _closed_port() -> int:
    sock = socket.socket()
    sock.bind(("127.0.0.1", 0))
    port = int(sock.getsockname()[1])
    sock.close()
    return port


@pytest.mark.parametrize("args, option", [
    (["report", "--out", "{file}"], "--out"),
    (["export", "--parquet", "{file}"], "--parquet"),
])
def test_an_output_folder_that_is_a_file_is_a_usage_error(tmp_path: Path, capsys: pytest.CaptureFixture[str],
                                                           args: list[str], option: str) -> None:
    file = tmp_path / "taken"
    file.write_text("not a folder")
    argv = [a.format(file=file) for a in args] + ["--store", str(tmp_path / "store")]
    assert main(argv) == 2
    err = capsys.readouterr().err
    assert f"{option} {file}: is a file, not a folder; give a folder" in err, err
    assert main([args[0], option, "", "--store", str(tmp_path / "store")]) == 2
    assert f"{option} is empty: give a folder to write into" in capsys.readouterr().err
    assert file.read_text() == "not a folder"


@pytest.mark.e2e
@pytest.mark.parametrize("silent", [True, False], ids=["never-answers", "refuses"])
def test_export_and_import_stop_at_once_on_a_server_that_does_not_answer(
        tmp_path: Path, capsys: pytest.CaptureFixture[str], silent_port: int, silent: bool) -> None:
    port = silent_port if silent else _closed_port()
    uri = f"http://user:{SECRET}@127.0.0.1:{port}"
    for argv, option in ((["export", "--to", f"mlflow:{uri}"], "--to mlflow"),
                         (["import-mlflow", "--mlflow-uri", uri], "--mlflow-uri")):
        assert main([*argv, "--store", str(tmp_path / "store")]) == 3
        err = capsys.readouterr().err
        assert f"{option} http://***@127.0.0.1:{port}: cannot reach http://***@127.0.0.1:{port}/health" in err, err
        assert "check the address and that the server runs" in err
        assert SECRET not in err
        assert "Retrying" not in err and "MlflowException" not in err  # stopped before MLflow's retries
    assert not (tmp_path / "store" / "hwbench.duckdb").exists()  # nothing was written before the check


def test_export_and_import_stop_at_once_on_an_sql_store_that_takes_no_connection(
        tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    port = _closed_port()
    uri = f"postgresql://user:{SECRET}@127.0.0.1:{port}/mlflow"
    for argv, option in ((["export", "--to", f"mlflow:{uri}"], "--to mlflow"),
                         (["import-mlflow", "--mlflow-uri", uri], "--mlflow-uri")):
        assert main([*argv, "--store", str(tmp_path / "store")]) == 3
        err = capsys.readouterr().err
        assert f"{option} postgresql://***@127.0.0.1:{port}/mlflow: cannot connect to 127.0.0.1:{port}" in err, err
        assert SECRET not in err and "Operation will be retried" not in err


@pytest.mark.e2e
def test_store_commands_stop_within_seconds_on_a_server_whose_api_hangs(
        tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    """``/health`` answers, the tracking API never does: the probe's API call catches it (before:
    MLflow's 30 s timeout times 3 tries, about 95 s per command)."""
    server = HangingServer(answers_probe=False)
    try:
        for argv, option in ((["export", "--to", f"mlflow:{server.uri}"], "--to mlflow"),
                             (["import-mlflow", "--mlflow-uri", server.uri], "--mlflow-uri"),
                             (["compare", "latest", "latest", "--source-a", server.uri], "source")):
            began = time.monotonic()
            assert main([*argv, "--store", str(tmp_path / "store")]) == 3, argv
            err = capsys.readouterr().err
            assert time.monotonic() - began < 15, argv
            assert f"{option} {server.uri}: cannot reach {server.uri}{PROBE} within 5 s" in err, err
    finally:
        server.close()


@pytest.mark.e2e
def test_timeout_bounds_each_request_of_a_server_that_hangs_after_its_probe(
        tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    """The probe passes, then every request hangs: ``--timeout 1`` bounds each (3 tries), the
    command exits 3 naming the request, without a traceback, and the setting does not outlive it."""
    server = HangingServer(answers_probe=True)
    try:
        for argv in (["import-mlflow", "--mlflow-uri", server.uri], ["compare", "latest", "latest", "--source-a",
                                                                      server.uri]):
            began = time.monotonic()
            assert main([*argv, "--timeout", "1", "--store", str(tmp_path / "store")]) == 3, argv
            err = capsys.readouterr().err
            assert time.monotonic() - began < 25, argv
            assert "experiments/get-by-name" in err and "read timeout=1" in err, err
            assert "Traceback" not in err
            assert "MLFLOW_HTTP_REQUEST_TIMEOUT" not in os.environ
    finally:
        server.close()
    assert main(["compare", "a", "b", "--timeout", "nan", "--store", str(tmp_path / "store")]) == 2
    assert "--timeout: nan is out of range; accepted: 1 to 3600 seconds" in capsys.readouterr().err


def test_a_store_file_that_sqlite_cannot_read_is_a_usage_error(tmp_path: Path,
                                                               capsys: pytest.CaptureFixture[str]) -> None:
    """A damaged ``mlflow.db`` (here: an SQLite header over random bytes) stops every command that
    would read or write it with exit 2 naming the file, and leaves the file as it was."""
    from hwsel.cli import main as hwsel_main

    bad = tmp_path / "mlflow.db"
    bad.write_bytes(b"SQLite format 3\x00" + os.urandom(20_000))
    before = bad.read_bytes()
    uri = f"sqlite:///{bad}"
    for argv, option in ((["import-mlflow", "--mlflow-uri", uri], "--mlflow-uri"),
                         (["export", "--to", f"mlflow:{uri}"], "--to mlflow"),
                         (["compare", "latest", "latest", "--source-a", uri], "source")):
        assert main([*argv, "--store", str(tmp_path / "store")]) == 2, argv
        err = capsys.readouterr().err
        assert f"{option} {uri}: {bad} is not a readable SQLite database" in err, err
        assert "Traceback" not in err
    assert hwsel_main(["train", "--source", uri, "--trials", "1", "--tracking-uri",
                       f"sqlite:///{tmp_path / 'reg.db'}"]) == 2
    err = capsys.readouterr().err
    assert f"--source {uri}: {bad} is not a readable SQLite database" in err, err
    assert bad.read_bytes() == before


def test_ab_refuses_bad_settings_and_interpreters_before_any_worker(tmp_path: Path,
                                                                     capsys: pytest.CaptureFixture[str]) -> None:
    import pytest_hwbench.ab  # noqa: F401 - registers the command

    base = ["ab", "--models", "bert-tiny", "--no-sinks"]
    assert main([*base, "--threshold", "nan"]) == 2
    assert "--threshold must be a finite number >= 0" in capsys.readouterr().err
    assert main([*base, "--alpha", "0"]) == 2
    assert "--alpha must be in (0, 1), e.g. 0.05, got 0.0" in capsys.readouterr().err
    for timeout in ("-1", "nan", "inf"):
        assert main([*base, "--timeout", timeout]) == 2
        assert f"--timeout {float(timeout)}: accepted: 0 (no limit) or a finite number of seconds" in \
            capsys.readouterr().err
    for python in (tmp_path / "nope" / "python", tmp_path):
        assert main([*base, "--a-python", str(python)]) == 2
        assert f"--a-python {python}: not an executable file; give a Python interpreter" in capsys.readouterr().err


@pytest.mark.e2e
def test_ab_leaves_the_pair_in_the_spool_when_the_tracking_server_never_answers(tmp_path: Path,
                                                                               silent_port: int) -> None:
    uri = f"http://user:{SECRET}@127.0.0.1:{silent_port}"
    store = tmp_path / "store"
    env = {k: v for k, v in os.environ.items() if k not in ("MLFLOW_TRACKING_URI", "PYTEST_ADDOPTS")}
    env["HWBENCH_CACHE_DIR"] = str(tmp_path / "cache")
    code = "import sys; from pytest_hwbench.cli import main; sys.exit(main(sys.argv[1:]))"
    proc = subprocess.run([sys.executable, "-c", code, "ab", "--models", "bert-tiny", "--rounds", "3", "--threads", "1",
                           "--a-options", "--hwbench-min-time 0.05", "--b-options", "--hwbench-min-time 0.05",
                           "--store", str(store), "--mlflow-uri", uri, "--timeout", "5"],
                          cwd=tmp_path, env=env, capture_output=True, text=True, timeout=600)
    out = proc.stdout + proc.stderr
    assert proc.returncode in (0, 1), out  # a verdict, not a hang or a crash
    assert "hwbench: waiting for sink 'mlflow'" in proc.stderr, out
    assert "pending, run hwbench replay" in proc.stdout, out
    assert SECRET not in out
    spooled = [json.loads(line) for line in (store / "spool" / "records.jsonl").read_text().splitlines()]
    sides = Counter(r["extra"]["ab_side"] for r in spooled)
    # one case, three rounds or more (a case whose rounds disagree gets more), both sides: all kept
    assert sides["A"] == sides["B"] >= 3 and set(sides) == {"A", "B"}, sides


def test_a_sqlite_tracking_uri_naming_a_non_database_or_a_folder_is_a_usage_error(
        tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    from hwsel.cli import main as hwsel_main

    text = tmp_path / "notes.db"
    text.write_text("not a database")
    snapshot = Path(__file__).resolve().parents[1] / "benchmarks" / "data" / "cpu_runs.parquet"
    for uri, says in ((f"sqlite:///{text}", f"{text} is not an SQLite database; name another file"),
                      (f"sqlite:///{tmp_path}", f"names a directory; use sqlite:///{tmp_path / 'mlflow.db'}")):
        assert main(["import-mlflow", "--mlflow-uri", uri, "--store", str(tmp_path / "store")]) == 2
        assert says in capsys.readouterr().err
        assert hwsel_main(["train", "--source", str(snapshot), "--trials", "1", "--tracking-uri", uri]) == 2
        assert says in capsys.readouterr().err
    assert hwsel_main(["train", "--source", str(snapshot), "--trials", "1", "--tracking-uri", "notascheme://x"]) == 2
    assert "unsupported scheme 'notascheme'; accepted forms: sqlite:///PATH/mlflow.db" in capsys.readouterr().err
    assert text.read_text() == "not a database"


def test_hwsel_serve_refuses_an_address_it_cannot_listen_on_before_building_the_app(
        capsys: pytest.CaptureFixture[str]) -> None:
    from hwsel.cli import main as hwsel_main

    held = socket.socket()
    held.bind(("127.0.0.1", 0))
    held.listen(1)
    port = held.getsockname()[1]
    try:
        assert hwsel_main(["serve", "--port", str(port)]) == 2
        assert f"cannot listen on 127.0.0.1:{port}: Address already in use; pass another --port" in \
            capsys.readouterr().err
    finally:
        held.close()
    assert hwsel_main(["serve", "--host", "", "--port", str(port)]) == 2
    assert "--host is empty, which would listen on every interface" in capsys.readouterr().err
    assert hwsel_main(["serve", "--host", "no-such-host.invalid", "--port", str(port)]) == 2
    assert "--host 'no-such-host.invalid': not an address of this machine" in capsys.readouterr().err


def test_store_command_errors_name_the_commands_own_flags(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    taken = tmp_path / "taken"
    taken.write_text("a file")
    assert main(["sessions", "--db", str(tmp_path)]) == 2
    assert f"--db {tmp_path} is a directory; give a file path such as {tmp_path / 'hwbench.duckdb'}" in \
        capsys.readouterr().err
    assert main(["sessions", "--store", str(taken)]) == 2
    err = capsys.readouterr().err
    assert f"--store {taken}: cannot be created, {taken} is a file; choose another path" in err, err
    assert "--hwbench-" not in err


def test_hwsel_calls_a_corrupt_duckdb_source_bad_input_as_hwbench_does(tmp_path: Path,
                                                                      capsys: pytest.CaptureFixture[str]) -> None:
    from hwsel.cli import main as hwsel_main

    bad = tmp_path / "records.duckdb"
    bad.write_text("not a database")
    assert main(["sessions", "--db", str(bad)]) == 2
    assert f"DuckDB file {bad} is corrupt" in capsys.readouterr().err
    for argv in (["next", "--budget", "1"], ["train", "--trials", "1", "--tracking-uri", f"sqlite:///{tmp_path / 'm.db'}"]):
        assert hwsel_main([*argv, "--source", str(bad)]) == 2
        err = capsys.readouterr().err
        assert f"hwsel {argv[0]}: error: DuckDB file {bad} is corrupt" in err and "--move-corrupt" in err, err
        assert "Traceback" not in err


def test_hwsel_select_refuses_a_mode_that_its_task_would_override(capsys: pytest.CaptureFixture[str]) -> None:
    from hwsel.cli import main as hwsel_main

    assert hwsel_main(["select", "--model", "bert-tiny", "--task", "classification", "--mode", "train",
                       "--hardware", "cpu"]) == 2
    assert "task classification sets the mode itself (inference); mode train would be ignored" in capsys.readouterr().err


def test_import_mlflow_names_a_missing_store_or_experiment_and_makes_neither(
        tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    import mlflow

    missing = tmp_path / "typo" / "mlflow.db"
    assert main(["import-mlflow", "--mlflow-uri", f"sqlite:///{missing}", "--store", str(tmp_path / "store")]) == 2
    assert f"no MLflow store at {missing}; check the path" in capsys.readouterr().err
    assert not missing.parent.exists()
    uri = f"sqlite:///{tmp_path / 'mlflow.db'}"
    mlflow.MlflowClient(uri).create_experiment("hwbench")
    assert main(["import-mlflow", "--mlflow-uri", uri, "--experiment", "nosuch", "--store", str(tmp_path / "store")]) == 2
    assert "--experiment 'nosuch': no such experiment in" in capsys.readouterr().err
    assert mlflow.MlflowClient(uri).get_experiment_by_name("nosuch") is None


def test_a_missing_selection_config_is_named_by_its_own_flag(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    from hwsel.cli import main as hwsel_main

    for path, what in ((tmp_path / "nope.toml", "does not exist"), (tmp_path, "is a folder")):
        assert hwsel_main(["predict", "--model", "bert-tiny", "--hardware", "cpu", "--selection-config", str(path)]) == 2
        err = capsys.readouterr().err
        assert f"selection config '{path}' {what}; pass a .toml or .json file (CLI --selection-config" in err, err


def test_an_empty_session_is_refused_not_matched_to_every_session(tmp_path: Path,
                                                                  capsys: pytest.CaptureFixture[str]) -> None:
    from test_sinks import make_records, make_session

    from pytest_hwbench.sinks import DuckDBSink, Recorder, Spool

    folder = tmp_path / "store"
    for _ in range(2):
        session = make_session()
        recorder = Recorder(Spool(folder / "spool"), [DuckDBSink(folder / "hwbench.duckdb")])
        recorder.start(session)
        for record in make_records(session, 2):
            recorder.emit(record)
        assert recorder.finish("finished").complete
    assert main(["report", "--store", str(folder), "--session", ""]) == 2
    assert "the session is empty; give a session id, a unique prefix of one, 'latest' or 'all'" in \
        capsys.readouterr().err
    assert not (folder / "report").exists()


def test_a_reader_given_a_missing_sqlite_store_says_so_and_creates_nothing(
        tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    from hwsel.cli import main as hwsel_main

    missing = tmp_path / "nonexistent" / "dir" / "m.db"
    uri = f"sqlite:///{missing}"
    says = f"{missing} does not exist; name an existing store (a session writes one)"
    assert main(["compare", "latest", "latest", "--source-a", uri, "--store", str(tmp_path / "store")]) == 2
    assert says in capsys.readouterr().err
    assert hwsel_main(["train", "--source", uri, "--trials", "1",
                       "--tracking-uri", f"sqlite:///{tmp_path / 'registry' / 'mlflow.db'}"]) == 2
    assert says in capsys.readouterr().err
    assert not (tmp_path / "nonexistent").exists()  # before: the folders and a 954 KB database
