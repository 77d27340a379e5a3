"""hwsel train from a real team server (PostgreSQL and `mlflow server` on it): the records are
mirrored into a DuckDB file incrementally and asked there; the table it trains on equals the one
built from every record read the old way, and a second night's training copies only that night."""

from __future__ import annotations

import datetime as dt
import uuid
from pathlib import Path

import pandas as pd
import pytest
from _postgres import TeamServer
from test_hwsel_history import DATA, NIGHT0, night_records, same_table

from hwsel.data import load_runs, training_table
from hwsel.history import Window, history_table
from hwsel.train import train
from pytest_hwbench.record import SessionInfo
from pytest_hwbench.sinks import DuckDBSink, MlflowSink, read_records

#: Every test here starts a server and trains: the end-to-end tier.
pytestmark = pytest.mark.e2e


def log_night(uri: str, experiment: str, db: Path, night: int) -> int:
    """One night's records into the server and the same records into the DuckDB file at `db`."""
    base = read_records(DATA / "h100_subset.jsonl")
    session = SessionInfo(session_id=f"night-{night:03d}-{uuid.uuid4().hex[:6]}",
                          started_at=(NIGHT0 + dt.timedelta(days=night)).isoformat(), host="h100-runner")
    records = night_records(base, session, night)
    for sink in (MlflowSink(uri, experiment), DuckDBSink(db)):
        sink.open_session(session)
        sink.write(records)
        sink.close("finished")
    return len(records)


def trained_table(result_path: Path) -> pd.DataFrame:
    return pd.read_parquet(result_path)


def test_train_from_the_server_mirrors_each_night_once(team_server: TeamServer, team_experiment: str,
                                                       tmp_path: Path) -> None:
    uri, reference = team_server.uri, tmp_path / "reference.duckdb"
    first = sum(log_night(uri, team_experiment, reference, night) for night in range(2))
    mirror, registry = tmp_path / "mirror.duckdb", f"sqlite:///{tmp_path / 'registry.db'}"

    one = train(uri, tracking_uri=registry, experiment=team_experiment, trials=1, progress=False,
                snapshot_dir=tmp_path / "snap1", mirror_file=mirror, timeout=120)
    assert one.mirrored == first  # the first training copies every record once
    with pytest.warns(Warning, match="cannot be measurements"):
        runs = load_runs(uri, experiment=team_experiment)  # the old way: every record into Python
    old = training_table(runs)
    snap = trained_table(one.snapshot_path)
    same_table(snap, old.drop(columns=["extra", "cpu_affinity", "interference"]))
    assert one.n_records == len(runs) and one.n_rows == len(old)
    same_table(history_table([reference]).table, old)  # the DuckDB file written alongside agrees

    added = log_night(uri, team_experiment, reference, 2)
    two = train(uri, tracking_uri=registry, experiment=team_experiment, trials=1, progress=False,
                snapshot_dir=tmp_path / "snap2", mirror_file=mirror, timeout=120)
    assert two.mirrored == added  # the second night's training reads that night only
    with pytest.warns(Warning):
        runs = load_runs(uri, experiment=team_experiment)
    same_table(trained_table(two.snapshot_path), training_table(runs).drop(columns=["extra", "cpu_affinity",
                                                                                     "interference"]))
    assert int(trained_table(two.snapshot_path)["repeats"].max()) == 3

    # the newest two sessions per configuration, asked of the mirror
    windowed = train(uri, tracking_uri=registry, experiment=team_experiment, trials=1, progress=False,
                     snapshot_dir=tmp_path / "snap3", mirror_file=mirror, timeout=120, window=Window(sessions=2))
    assert windowed.mirrored == 0 and int(trained_table(windowed.snapshot_path)["repeats"].max()) == 2
