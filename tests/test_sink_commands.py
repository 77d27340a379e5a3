"""`hwbench replay` and `hwbench export` reach any sink registered through the
``pytest_hwbench.sinks`` entry-point group: a throwaway distribution on PYTHONPATH registers a sink
that writes real files, and the commands, run in a subprocess, write to it like to ours."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest
from test_sinks import make_records, make_session

from pytest_hwbench.sinks import DuckDBSink, Recorder, Spool

#: Every test here starts another process, a server or a training: the end-to-end tier.
pytestmark = pytest.mark.e2e

#: A third party's sink: one JSON line per record in its file, one line per session event beside it.
PACKAGE = '''
"""Sink "lines": records as JSON lines in PATH, session opens and closes in PATH.sessions."""
import json
from pathlib import Path

from pytest_hwbench.record import BenchmarkRecord
from pytest_hwbench.sinks import Sink, register_sink


class LinesSink(Sink):
    name = "lines"

    def __init__(self, target):
        if target is None:
            raise ValueError("sink 'lines' needs a file: lines:PATH")
        self.path = Path(target)
        self.events = Path(f"{target}.sessions")

    def _append(self, path, rows):
        with path.open("a", encoding="utf-8") as out:
            for row in rows:
                out.write(json.dumps(row) + "\\n")

    def open_session(self, session):
        self._append(self.events, [{"open": session.to_dict()}])

    def write(self, records):
        self._append(self.path, [record.to_dict() for record in records])

    def existing_ids(self, record_ids):
        held = set()
        if self.path.exists():
            held = {json.loads(line)["record_id"] for line in self.path.read_text().splitlines()}
        return held & set(record_ids)

    def close(self, status):
        self._append(self.events, [{"close": status}])

    def where(self):
        return str(self.path)


def _read(target, **options):
    return [BenchmarkRecord.from_dict(json.loads(line)) for line in Path(target).read_text().splitlines()]


register_sink("lines", lambda target, **options: LinesSink(target), reader=_read)
'''

CLI = "import sys; from pytest_hwbench.cli import main; sys.exit(main(sys.argv[1:]))"
#: Settings of the calling shell that would point the commands at another store.
FOREIGN_ENV = ("MLFLOW_TRACKING_URI", "HWBENCH_EXPERIMENT", "PYTEST_ADDOPTS", "MLFLOW_EXPERIMENT_NAME")


@pytest.fixture
def site(tmp_path: Path) -> Path:
    """An installed throwaway distribution: its module and its dist-info with the entry point."""
    root = tmp_path / "site"
    (root / "hwbench_lines").mkdir(parents=True)
    (root / "hwbench_lines" / "__init__.py").write_text(PACKAGE)
    info = root / "hwbench_lines-0.1.dist-info"
    info.mkdir()
    (info / "METADATA").write_text("Metadata-Version: 2.1\nName: hwbench-lines\nVersion: 0.1\n")
    (info / "entry_points.txt").write_text("[pytest_hwbench.sinks]\nlines = hwbench_lines\n")
    return root


@pytest.fixture
def store(tmp_path: Path) -> tuple[Path, str, list[str]]:
    """A store whose spool and DuckDB file hold 4 records of one finished session (real files):
    (store folder, session id, record ids)."""
    folder = tmp_path / "store"
    session = make_session()
    records = make_records(session, 4)
    recorder = Recorder(Spool(folder / "spool"), [DuckDBSink(folder / "hwbench.duckdb")])
    recorder.start(session)
    for record in records:
        recorder.emit(record)
    assert recorder.finish("finished").complete
    return folder, session.session_id, [r.record_id for r in records]


def hwbench(site: Path, *args: str, cwd: Path) -> subprocess.CompletedProcess[str]:
    env = {k: v for k, v in os.environ.items() if k not in FOREIGN_ENV}
    env["PYTHONPATH"] = os.pathsep.join([str(site), os.environ.get("PYTHONPATH", "")])
    return subprocess.run([sys.executable, "-c", CLI, *args], cwd=cwd, env=env, capture_output=True, text=True,
                          timeout=240, stdin=subprocess.DEVNULL)


def _ids(path: Path) -> list[str]:
    return [json.loads(line)["record_id"] for line in path.read_text().splitlines()]


def test_replay_writes_the_spool_to_a_third_party_sink(site: Path, store: tuple[Path, str, list[str]],
                                                       tmp_path: Path) -> None:
    folder, session_id, ids = store
    out = tmp_path / "replayed.jsonl"
    proc = hwbench(site, "replay", "--store", str(folder), "--sinks", f"duckdb,lines:{out}", cwd=tmp_path)
    assert proc.returncode == 0, proc.stdout + proc.stderr
    assert f"-> DuckDB {folder / 'hwbench.duckdb'}, lines {out}" in proc.stdout.splitlines()[0], proc.stdout
    assert "  duckdb: 0 records written" in proc.stdout.splitlines(), proc.stdout  # DuckDB had them
    assert "  lines: 4 records written" in proc.stdout.splitlines(), proc.stdout
    assert sorted(_ids(out)) == sorted(ids)
    events = [json.loads(line) for line in Path(f"{out}.sessions").read_text().splitlines()]
    assert events == [{"open": events[0]["open"]}, {"close": "finished"}]
    assert events[0]["open"]["session_id"] == session_id and events[0]["open"]["runner_label"] == "ci-cpu"

    again = hwbench(site, "replay", "--store", str(folder), "--sinks", f"lines:{out}", cwd=tmp_path)
    assert again.returncode == 0 and "  lines: 0 records written" in again.stdout.splitlines(), again.stdout
    assert len(_ids(out)) == 4

    unknown = hwbench(site, "replay", "--store", str(folder), "--sinks", "nosuch", cwd=tmp_path)
    assert unknown.returncode == 2, unknown.stdout + unknown.stderr
    assert "'nosuch' not accepted; accepted: mlflow, duckdb, lines, or NAME:TARGET" in unknown.stderr, unknown.stderr


def test_a_third_party_sink_that_fails_stays_pending_and_the_hint_names_it(
        site: Path, store: tuple[Path, str, list[str]], tmp_path: Path) -> None:
    folder, _, _ = store
    spec = f"lines:{tmp_path / 'missing-dir' / 'out.jsonl'}"
    proc = hwbench(site, "replay", "--store", str(folder), "--sinks", spec, cwd=tmp_path)
    assert proc.returncode == 3, proc.stdout + proc.stderr
    assert "  lines: not replayed (0 records written before): " in proc.stdout, proc.stdout
    assert f"run `hwbench replay --store {folder} --sinks {spec}` once the store is back" in proc.stderr, proc.stderr


def test_export_writes_the_duckdb_records_to_a_third_party_sink(site: Path, store: tuple[Path, str, list[str]],
                                                                tmp_path: Path) -> None:
    folder, session_id, ids = store
    out = tmp_path / "exported.jsonl"
    proc = hwbench(site, "export", "--store", str(folder), "--to", f"lines:{out}", cwd=tmp_path)
    assert proc.returncode == 0, proc.stdout + proc.stderr
    assert proc.stdout.splitlines() == [f"lines {out}: 4 records written"], proc.stdout
    assert sorted(_ids(out)) == sorted(ids)
    events = [json.loads(line) for line in Path(f"{out}.sessions").read_text().splitlines()]
    assert [e.get("close") for e in events] == [None, "finished"]
    opened = events[0]["open"]
    assert (opened["session_id"], opened["host"], opened["git_branch"]) == (session_id, "bench-01", "main")
    assert opened["package_versions"]["torch"] == "2.13.0"

    again = hwbench(site, "export", "--store", str(folder), "--to", f"lines:{out}", "--parquet", "pq", cwd=tmp_path)
    assert again.returncode == 0, again.stdout + again.stderr
    assert again.stdout.splitlines()[-1] == f"lines {out}: 0 records written", again.stdout
    assert (tmp_path / "pq" / "results.parquet").exists()
    assert len(_ids(out)) == 4

    nothing = hwbench(site, "export", "--store", str(folder), cwd=tmp_path)
    assert nothing.returncode == 2 and "give --parquet DIR, --to SINK, or both" in nothing.stderr, nothing.stderr


def test_import_mlflow_copies_an_experiment_into_a_third_party_sink(site: Path, tmp_path: Path) -> None:
    """The MLflow store is read through the registered mlflow sink and written through the one
    `--to` names; a sink that cannot list its sessions still gets each record once."""
    from pytest_hwbench.sinks import MlflowSink

    folder = tmp_path / "store"
    uri = f"sqlite:///{folder / 'mlflow.db'}"
    session = make_session()
    records = make_records(session, 3)
    recorder = Recorder(Spool(folder / "spool"), [MlflowSink(uri, "hwbench")])
    recorder.start(session)
    for record in records:
        recorder.emit(record)
    assert recorder.finish("finished").complete
    out = tmp_path / "imported.jsonl"
    proc = hwbench(site, "import-mlflow", "--store", str(folder), "--to", f"lines:{out}", cwd=tmp_path)
    assert proc.returncode == 0, proc.stdout + proc.stderr
    assert proc.stdout.splitlines()[0].endswith(f"(experiment 'hwbench') -> lines {out}"), proc.stdout
    assert "  3 records imported" in proc.stdout.splitlines(), proc.stdout
    assert sorted(_ids(out)) == sorted(r.record_id for r in records)
    events = [json.loads(line) for line in Path(f"{out}.sessions").read_text().splitlines()]
    assert events[0]["open"]["session_id"] == session.session_id and events[-1] == {"close": "finished"}

    again = hwbench(site, "import-mlflow", "--store", str(folder), "--to", f"lines:{out}", cwd=tmp_path)
    assert again.returncode == 0 and "  0 records imported" in again.stdout.splitlines(), again.stdout
    assert len(_ids(out)) == 3

    wrong = hwbench(site, "import-mlflow", "--store", str(folder), "--to", "nosuch", cwd=tmp_path)
    assert wrong.returncode == 2 and "--to: " in wrong.stderr, wrong.stdout + wrong.stderr
