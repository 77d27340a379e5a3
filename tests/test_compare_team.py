"""`hwbench compare` against a team server (PostgreSQL and `mlflow server` on it) reads only the
sessions it compares: their session runs are listed, their child runs searched session by session
and only their parents' raw-timings artifacts fetched."""

from __future__ import annotations

from pathlib import Path

import pytest
from _postgres import TeamServer
from test_sinks import make_records, make_session
from test_team_server import hwbench

from pytest_hwbench.record import BenchmarkRecord
from pytest_hwbench.sinks import MlflowSink
from pytest_hwbench.sinks.readers import read_records

pytestmark = pytest.mark.e2e


def write_session(uri: str, experiment: str, n: int, label: str) -> tuple[str, list[BenchmarkRecord]]:
    session = make_session(label)
    records = make_records(session, n)
    sink = MlflowSink(uri, experiment)
    sink.open_session(session)
    sink.write(records)
    sink.close("finished")
    with sink._mlflow_env():
        parent = sink._session_parent(session.session_id)
    return parent or "", records


def test_a_filtered_read_returns_exactly_the_sessions_asked_for(
    team_server: TeamServer, team_experiment: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    from mlflow.tracking import MlflowClient

    written = [write_session(team_server.uri, team_experiment, n, f"night-{i}") for i, n in enumerate((9, 6, 7))]
    (_, oldest), (prev_parent, prev), (latest_parent, latest) = written
    searches: list[str] = []
    listed: list[str] = []
    real_search, real_list = MlflowClient.search_runs, MlflowClient.list_artifacts

    def search(self: MlflowClient, experiment_ids: list[str], filter_string: str = "", *args: object,
               **kwargs: object) -> object:
        searches.append(filter_string)
        return real_search(self, experiment_ids, filter_string, *args, **kwargs)

    def list_artifacts(self: MlflowClient, run_id: str, path: str | None = None) -> object:
        listed.append(run_id)
        return real_list(self, run_id, path)

    # spies: the real calls still run against the server
    monkeypatch.setattr(MlflowClient, "search_runs", search)
    monkeypatch.setattr(MlflowClient, "list_artifacts", list_artifacts)
    offered: list[list[str]] = []

    def newest_two(ids: list[str]) -> list[str]:
        offered.append(list(ids))
        return ids[:2]

    records = read_records(team_server.uri, choose=newest_two, experiment=team_experiment, with_timings=True)
    assert offered == [[latest[0].session_id, prev[0].session_id, oldest[0].session_id]]
    assert sorted(r.record_id for r in records) == sorted(r.record_id for r in [*prev, *latest])
    passed = [r for r in records if r.status == "passed"]
    assert passed and all(r.timings_ms for r in passed)  # raw timings from the chosen parents' artifacts
    assert sorted(set(listed)) == sorted({prev_parent, latest_parent})
    # the session runs once, then one search per chosen session; nothing over the whole experiment
    # and nothing naming the session not asked for
    assert searches[0] == "tags.`hwbench.kind` = 'session'"
    assert all("hwbench.session_id" in text for text in searches[1:]) and len(searches) == 3, searches
    assert not any(oldest[0].session_id in text for text in searches)

    monkeypatch.undo()
    cli = hwbench("compare", "--source-a", team_server.uri, "--experiment", team_experiment, "--json",
                  prev[0].session_id[:8], "latest", cwd=tmp_path)
    assert cli.returncode in (0, 1), cli.stderr
    import json

    cases = {c["case_id"] for c in json.loads(cli.stdout)["comparisons"]}
    assert cases == {r.case_id for r in [*prev, *latest]}
