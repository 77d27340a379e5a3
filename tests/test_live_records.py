"""Records reach the stores between cases, while the run goes on, from the sink writer process.

Real pytest runs in subprocesses, a real SQLite MLflow store and DuckDB file read from inside a
later case, the PostgreSQL-backed team server for the run killed with SIGKILL, and `hwbench replay` after
the writer itself was killed. Cases are pinned to the CPU (``-m cpu``) so that the counts hold on
a GPU host too.
"""

from __future__ import annotations

import json
import os
import re
import shlex
import signal
import sqlite3
import subprocess
import sys
import time
from pathlib import Path

import pytest
from _postgres import TeamServer

#: Every test here starts another process, a server or a training: the end-to-end tier.
pytestmark = pytest.mark.e2e

HWBENCH_BIN = Path(sys.executable).with_name("hwbench")
FOREIGN_ENV = ("MLFLOW_TRACKING_URI", "HWBENCH_EXPERIMENT", "PYTEST_ADDOPTS", "MLFLOW_EXPERIMENT_NAME")

#: Three cases, then a fourth case that reads both stores once it was measured (before its timed
#: window the writer was idle: every earlier record is in them) and says whether this process
#: imported a sink library.
LIVE_FILE = """
import json, sqlite3, sys
from pathlib import Path

import pytest

MARK = dict(models=["bert-tiny"], hardware=["cpu"], backends=["torch"], precisions=["fp32"])


@pytest.mark.hwbench(batch_sizes=[1, 2, 3], **MARK)
def test_case(hwbench_case, hwbench):
    hwbench.measure(hwbench_case)


@pytest.mark.hwbench(batch_sizes=[4], **MARK)
def test_reader(hwbench_case, hwbench, request):
    hwbench.measure(hwbench_case)  # the writer was idle before it was timed; its own record comes later
    heavy = sorted(m for m in ("mlflow", "duckdb", "sqlalchemy") if m in sys.modules)
    store = Path(request.config.getoption("hwbench_store"))
    with sqlite3.connect(store / "mlflow.db") as con:
        children = con.execute(
            "select count(*) from runs r join tags t on t.run_uuid = r.run_uuid "
            "where t.key = 'hwbench.kind' and t.value = 'record' and r.status = 'FINISHED'").fetchone()[0]
    import duckdb

    with duckdb.connect(str(store / "hwbench.duckdb"), read_only=True) as con:
        rows = con.execute("select count(*) from results").fetchone()[0]
    Path("seen.json").write_text(json.dumps({"children": children, "rows": rows, "heavy": heavy}))
"""

#: Cases 1-3 measure; case 4 says it started (its pid) and blocks until the test kills the run.
KILL_FILE = """
import os, time
from pathlib import Path

import pytest


@pytest.mark.hwbench(models=["bert-tiny"], hardware=["cpu"], backends=["torch"], precisions=["fp32"],
                     batch_sizes=[1, 2, 3, 4, 5])
def test_case(hwbench_case, hwbench):
    if hwbench_case.batch_size == 4:
        Path("blocked").write_text(str(os.getpid()))
        time.sleep(600)
    hwbench.measure(hwbench_case)
"""

#: The second case kills the writer process (SIGKILL): records stay in the spool.
WRITER_KILL_FILE = """
import os, signal, time

import pytest


@pytest.mark.hwbench(models=["bert-tiny"], hardware=["cpu"], backends=["torch"], precisions=["fp32"],
                     batch_sizes=[1, 2, 3])
def test_case(hwbench_case, hwbench, request):
    hwbench.measure(hwbench_case)  # the writer was idle before it was timed: every earlier record is written
    if hwbench_case.batch_size == 2:
        writer = request.config.pluginmanager.get_plugin("hwbench-tracker").writer
        os.kill(writer.proc.pid, signal.SIGKILL)
        writer.proc.wait()
"""

FAST = ["--hwbench-warmup", "0", "--hwbench-min-iterations", "3", "--hwbench-min-time", "0",
        "--hwbench-noise-retries", "0", "-p", "no:cacheprovider", "-p", "no:benchmark", "-m", "cpu"]


def clean_env(**extra: str) -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if k not in FOREIGN_ENV}
    env.update(extra)
    return env


def run_pytest(cwd: Path, *args: str, env: dict[str, str] | None = None) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, "-m", "pytest", *FAST, *args], cwd=cwd, env=env or clean_env(),
                          capture_output=True, text=True, timeout=600, stdin=subprocess.DEVNULL)


def spooled_ids(store: Path) -> list[str]:
    lines = (store / "spool" / "records.jsonl").read_text().splitlines()
    return [json.loads(line)["record_id"] for line in lines if line.strip()]


def sqlite_children(db: Path) -> dict[str, str]:
    """record id -> run status of every record child run in a SQLite MLflow store."""
    with sqlite3.connect(db) as con:
        rows = con.execute(
            "select t.value, r.status from runs r join tags t on t.run_uuid = r.run_uuid "
            "where t.key = 'hwbench.record_id' and r.lifecycle_stage = 'active'").fetchall()
    return dict(rows)


def duck_ids(path: Path, wait_s: float = 0.0) -> set[str]:
    """Record ids in a DuckDB file; waits up to `wait_s` for a writer that still holds its lock."""
    import duckdb

    deadline = time.monotonic() + wait_s
    while True:
        try:
            with duckdb.connect(str(path), read_only=True) as con:
                return {row[0] for row in con.execute("select record_id from results").fetchall()}
        except duckdb.IOException:
            if time.monotonic() > deadline:
                raise
            time.sleep(0.5)


def test_records_are_in_both_stores_while_the_run_goes_on(tmp_path: Path) -> None:
    (tmp_path / "test_live.py").write_text(LIVE_FILE)
    store = tmp_path / "store"
    result = run_pytest(tmp_path, "--hwbench-store", str(store), "-v", "-W", "error::ResourceWarning")
    out = result.stdout + result.stderr
    assert result.returncode == 0, out[-4000:]
    seen = json.loads((tmp_path / "seen.json").read_text())
    # Read by the fourth case, before its own record: the first three are in both stores.
    assert seen == {"children": 3, "rows": 3, "heavy": []}, out[-3000:]
    ids = spooled_ids(store)
    assert len(ids) == 4
    assert set(sqlite_children(store / "mlflow.db")) == set(ids) == duck_ids(store / "hwbench.duckdb")
    assert set(sqlite_children(store / "mlflow.db").values()) == {"FINISHED"}
    # The writer never worked while a case was timed (its own report, against the timed windows).
    assert "busy during 0 of 4 timed windows" in out, out[-3000:]
    assert "WARNING" not in out


def server_runs(uri: str, experiment: str) -> tuple[list[object], list[object]]:
    from mlflow.tracking import MlflowClient

    client = MlflowClient(tracking_uri=uri)
    found = client.get_experiment_by_name(experiment)
    if found is None:
        return [], []
    runs = client.search_runs([found.experiment_id], max_results=1000)
    parents = [r for r in runs if r.data.tags.get("hwbench.kind") == "session"]
    children = [r for r in runs if r.data.tags.get("hwbench.kind") == "record"]
    return parents, children


def test_a_run_killed_after_three_cases_has_three_child_runs(tmp_path: Path, team_server: TeamServer,
                                                             team_experiment: str) -> None:
    """Against the team server (PostgreSQL + `mlflow server`): the three finished cases are child
    runs there, not only in the spool."""
    (tmp_path / "test_kill.py").write_text(KILL_FILE)
    store = tmp_path / "store"
    experiment = team_experiment
    env = clean_env(MLFLOW_TRACKING_URI=team_server.uri, HWBENCH_EXPERIMENT=experiment)
    with (tmp_path / "pytest.log").open("w") as log:
        proc = subprocess.Popen([sys.executable, "-m", "pytest", *FAST, "--hwbench-store", str(store)],
                                cwd=tmp_path, env=env, stdout=log, stderr=subprocess.STDOUT,
                                stdin=subprocess.DEVNULL)
    try:
        deadline = time.monotonic() + 400
        while not (tmp_path / "blocked").exists():
            assert proc.poll() is None and time.monotonic() < deadline, (tmp_path / "pytest.log").read_text()
            time.sleep(0.2)
        os.kill(proc.pid, signal.SIGKILL)
        proc.wait(timeout=30)
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait()
    assert proc.returncode == -signal.SIGKILL
    ids = spooled_ids(store)
    assert len(ids) == 3
    # The child runs were written between cases, before the kill; the orphaned writer then closes
    # the session as killed once it reads the end of its input.
    deadline = time.monotonic() + 120
    while True:
        parents, children = server_runs(team_server.uri, experiment)
        if parents and parents[0].info.status == "KILLED" or time.monotonic() > deadline:  # type: ignore[attr-defined]
            break
        time.sleep(0.5)
    assert sorted(r.data.tags["hwbench.record_id"] for r in children) == sorted(ids)  # type: ignore[attr-defined]
    assert {r.info.status for r in children} == {"FINISHED"}  # type: ignore[attr-defined]
    assert [p.info.status for p in parents] == ["KILLED"]  # type: ignore[attr-defined]
    assert duck_ids(store / "hwbench.duckdb", wait_s=120) == set(ids)  # the writer closes DuckDB last


def test_a_killed_writer_loses_nothing_and_replay_delivers(tmp_path: Path) -> None:
    (tmp_path / "test_writer_kill.py").write_text(WRITER_KILL_FILE)
    store = tmp_path / "store"
    result = run_pytest(tmp_path, "--hwbench-store", str(store))
    out = result.stdout + result.stderr
    assert result.returncode == 0, out[-4000:]  # a dead writer fails no case
    assert "passed" in out and "3 passed" in out, out[-3000:]
    ids = spooled_ids(store)
    assert len(ids) == 3
    delivered = set(sqlite_children(store / "mlflow.db"))
    assert delivered == set(ids[:1]), out[-3000:]  # the first case's record, written before the kill
    assert "records spooled, not yet delivered (2 for mlflow, 2 for duckdb)" in out, out[-3000:]
    assert "the writer process ended" in out

    replay = subprocess.run([str(HWBENCH_BIN), "replay", "--store", str(store)], cwd=tmp_path, env=clean_env(),
                            capture_output=True, text=True, timeout=300, stdin=subprocess.DEVNULL)
    assert replay.returncode == 0, replay.stdout + replay.stderr
    assert set(sqlite_children(store / "mlflow.db")) == set(ids) == duck_ids(store / "hwbench.duckdb")


ONE_CASE_FILE = """
import pytest


@pytest.mark.hwbench(models=["bert-tiny"], hardware=["cpu"], backends=["torch"], precisions=["fp32"], batch_sizes=[1])
def test_case(hwbench_case, hwbench):
    hwbench.measure(hwbench_case)
"""


def test_the_spooled_warning_names_every_store_option_of_the_run(tmp_path: Path) -> None:
    """A run whose team server is down ends with the replay command for *its* stores: the DuckDB
    file and the tracking URI it was given, so following the hint never fills a new local store."""
    import socket

    with socket.socket() as sock:  # a port nobody listens on: connections are refused at once
        sock.bind(("127.0.0.1", 0))
        port = sock.getsockname()[1]
    uri, db = f"http://127.0.0.1:{port}", tmp_path / "elsewhere" / "team.duckdb"
    db.parent.mkdir()
    (tmp_path / "test_one.py").write_text(ONE_CASE_FILE)
    result = run_pytest(tmp_path, "--hwbench-store", str(tmp_path / "store"), "--hwbench-db", str(db),
                        "--hwbench-mlflow-uri", uri, "--hwbench-experiment", "team-exp", "--hwbench-sink-timeout", "5")
    out = result.stdout + result.stderr
    assert result.returncode == 0, out[-4000:]
    hint = re.search(r"run `(hwbench replay [^`]+)` once the store is back", out)
    assert hint, out[-3000:]
    args = shlex.split(hint.group(1))
    assert args[args.index("--db") + 1] == str(db)
    assert args[args.index("--mlflow-uri") + 1] == uri
    assert args[args.index("--experiment") + 1] == "team-exp"
    assert args[args.index("--store") + 1] == str(tmp_path / "store")
    # Followed to the letter while the server is still down: the record stays pending for that
    # server (exit 3 names it), and no local MLflow store appears.
    replay = subprocess.run([str(Path(sys.executable).with_name("hwbench")), *args[1:], "--timeout", "5"],
                            cwd=tmp_path, env=clean_env(), capture_output=True, text=True, timeout=300)
    assert replay.returncode == 3, replay.stdout + replay.stderr
    assert f"127.0.0.1:{port}" in replay.stdout + replay.stderr
    assert not (tmp_path / "store" / "mlflow.db").exists()


def test_the_writer_closes_the_session_while_pytest_prints_and_also_without_a_terminal(tmp_path: Path) -> None:
    """The writer closes the session on its sinks while pytest prints its summaries; the hwbench
    summary waits for its answer. With no terminal (``-p no:terminal``) nobody asks, and the
    session is still closed before pytest ends."""
    (tmp_path / "test_one.py").write_text(ONE_CASE_FILE)
    for label, extra in (("terminal", []), ("no-terminal", ["-p", "no:terminal"])):
        store = tmp_path / label
        result = run_pytest(tmp_path, "--hwbench-store", str(store), *extra)
        out = result.stdout + result.stderr
        assert result.returncode == 0, out[-4000:]
        ids = spooled_ids(store)
        assert len(ids) == 1
        assert set(sqlite_children(store / "mlflow.db")) == set(ids) == duck_ids(store / "hwbench.duckdb")
        with sqlite3.connect(store / "mlflow.db") as con:
            sessions = con.execute(
                "select r.status from runs r join tags t on t.run_uuid = r.run_uuid "
                "where t.key = 'hwbench.kind' and t.value = 'session'").fetchall()
        assert sessions == [("FINISHED",)], (label, out[-3000:])
        if label == "terminal":
            assert "hwbench: MLflow sqlite:///" in out and "WARNING" not in out, out[-3000:]
        else:
            assert "hwbench: MLflow" not in out, out[-3000:]  # no summary without a terminal
