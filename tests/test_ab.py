"""`hwbench ab`: the paired verdict, the side options, and a real A/B job of two worker processes
(one with a planted slowdown through a third-party backend) whose two sessions land in DuckDB and
MLflow tagged as one pair and compare again as a pair."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from pytest_hwbench.ab import paired_verdict, parse_env, parse_side_options

#: The third-party backend ``gate-torch`` that plants a slowdown (``HWBENCH_GATE_WORK``), as a
#: distribution to put on PYTHONPATH: the one `benchmarks/gate_quality.py` plants its slowdowns with.
GATE_SITE = Path(__file__).resolve().parents[1] / "benchmarks" / "gate_site"


def test_the_paired_verdict_judges_per_round_ratios() -> None:
    slower = paired_verdict("c", [1.31, 1.28, 1.33, 1.30, 1.29])
    assert slower.verdict == "regression" and slower.change == pytest.approx(0.30, abs=0.02) and slower.p_value < 0.05
    assert paired_verdict("c", [0.80, 0.79, 0.81]).verdict == "improvement"
    assert paired_verdict("c", [1.01, 0.99, 1.00, 1.02]).verdict == "unchanged"
    wild = paired_verdict("c", [0.5, 2.5, 1.4, 0.9])
    assert wild.verdict == "inconclusive" and "the rounds disagree" in wild.note
    assert paired_verdict("c", [1.5, 1.5]).note == "2 paired rounds; need 3"


def test_side_options_and_environments_are_checked() -> None:
    settings = parse_side_options("--hwbench-min-time 0.5 --hwbench-warmup=1")
    assert settings["min_time_s"] == 0.5 and settings["warmup_iterations"] == 1
    with pytest.raises(ValueError, match=r"option '--hwbench-models' cannot vary between ab sides; accepted: "):
        parse_side_options("--hwbench-models bert-tiny")
    with pytest.raises(ValueError, match="--hwbench-min-iterations: 'x' is not an integer"):
        parse_side_options("--hwbench-min-iterations x")
    with pytest.raises(ValueError, match="'FOO' is not NAME=VALUE"):
        parse_env(["FOO"])


def test_ab_refuses_bad_usage_with_exit_2(capsys) -> None:
    import pytest_hwbench.ab  # noqa: F401 - registers the command
    from pytest_hwbench.cli import main

    assert main(["ab", "--models", "bert-tiny", "--a-options", "--hwbench-models x", "--no-sinks"]) == 2
    assert "cannot vary between ab sides" in capsys.readouterr().err
    assert main(["ab", "--models", "nope-model", "--no-sinks"]) == 2
    assert "nope-model not in the model zoo" in capsys.readouterr().err
    assert main(["ab", "--models", "bert-tiny", "--rounds", "2", "--no-sinks"]) == 2
    assert "at least 3 rounds" in capsys.readouterr().err
    assert main(["ab", "--models", "bert-tiny", "--threshold", "-1", "--no-sinks"]) == 2
    assert "--threshold must be a finite number >= 0 (0.10 = 10 %), got -1.0" in capsys.readouterr().err
    assert main(["ab", "--models", "bert-tiny", "--alpha", "5", "--no-sinks"]) == 2
    assert "--alpha must be in (0, 1), e.g. 0.05, got 5.0" in capsys.readouterr().err


def _hwbench(args: list[str], env: dict[str, str], cwd: Path) -> subprocess.CompletedProcess[str]:
    code = "import sys; from pytest_hwbench.cli import main; sys.exit(main(sys.argv[1:]))"
    return subprocess.run([sys.executable, "-c", code, *args], env=env, cwd=cwd, capture_output=True, text=True,
                          timeout=900)


def test_ab_finds_a_planted_slowdown_and_lands_the_pair_in_duckdb_and_mlflow(tmp_path: Path) -> None:
    env = {k: v for k, v in os.environ.items() if k not in ("MLFLOW_TRACKING_URI", "PYTEST_ADDOPTS")}
    env["PYTHONPATH"] = os.pathsep.join([str(GATE_SITE), env.get("PYTHONPATH", "")])
    env["HWBENCH_CACHE_DIR"] = str(tmp_path / "cache")
    store = tmp_path / "store"
    # Two option sets; B's worker also does 3x the work of each call (a planted slowdown).
    proc = _hwbench(["ab", "--models", "bert-tiny", "--backends", "gate-torch", "--rounds", "5", "--threads", "1",
                     "--store", str(store),
                     "--a-options", "--hwbench-min-time 0.1 --hwbench-warmup 2",
                     "--b-options", "--hwbench-min-time=0.1 --hwbench-warmup 1", "--b-env", "HWBENCH_GATE_WORK=3"],
                    env, tmp_path)
    out = proc.stdout
    assert proc.returncode == 1, out + proc.stderr  # a regression in B
    assert "hwbench ab: round 5 of 5" in out
    line = next(ln for ln in out.splitlines() if ln.startswith("bert-tiny-cpu-gate-torch-fp32-b1"))
    assert " regression " in line, out
    pair = out.split("`hwbench compare pair:")[1].split("`")[0]

    from pytest_hwbench.sinks import list_sessions, load_records, read_records

    sessions = list_sessions(store / "hwbench.duckdb")
    sides = {e["ab_side"]: sid for sid, e in zip(sessions["session_id"], sessions["extra"], strict=True)
             if e.get("ab_pair") == pair}
    assert set(sides) == {"A", "B"}
    records = load_records(store / "hwbench.duckdb")
    assert sorted((r.extra["ab_side"], r.extra["ab_round"]) for r in records) == [
        (side, n) for side in "AB" for n in range(5)]
    assert {r.session_id for r in records if r.extra["ab_side"] == "B"} == {sides["B"]}

    uri = f"sqlite:///{store / 'mlflow.db'}"
    in_mlflow = read_records(uri, experiment="hwbench")
    assert {r.session_id for r in in_mlflow} == set(sides.values()) and len(in_mlflow) == 10
    import mlflow

    client = mlflow.MlflowClient(uri)
    experiment = client.get_experiment_by_name("hwbench")
    parents = client.search_runs([experiment.experiment_id], "tags.`hwbench.kind` = 'session'")
    tagged = [json.loads(run.data.tags["hwbench.extra"]) for run in parents]
    assert sorted(t["ab_side"] for t in tagged if t.get("ab_pair") == pair) == ["A", "B"]

    again = _hwbench(["compare", f"pair:{pair}", "--store", str(store)], env, tmp_path)
    assert again.returncode in (0, 1), again.stderr
    assert "bert-tiny-cpu-gate-torch-fp32-b1" in again.stdout and "decisiveness" in again.stdout
