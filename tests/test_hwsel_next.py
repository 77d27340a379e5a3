"""Issue 10, part 5 (what to measure next) and part 1's CLI/REST surface (any model, by its config).

Real parts only: a slice of the committed CPU snapshot (`benchmarks/data/cpu_runs.parquet`:
eight quick-tier models on torch and ONNX Runtime at batch 1, 4 and 16, batch 16 left out for
three of them) written to a Parquet file, real random-forest ensembles, the real CLI, the real
FastAPI app, pytest collecting a printed command line, and a config.json written by transformers.
"""

from __future__ import annotations

import dataclasses
import json
import os
import shlex
import subprocess
import sys
from pathlib import Path

import numpy as np
import pandas as pd
import pytest

import hwsel
from hwsel import Suggestion, suggest_measurements
from hwsel.cli import main as cli_main
from hwsel.data import load_runs, training_table
from hwsel.next import bench_command, candidate_grid, ensemble_predictions, greedy_order, rank_candidates

REPO = Path(__file__).resolve().parents[1]
CPU_SNAPSHOT = REPO / "benchmarks" / "data" / "cpu_runs.parquet"
MODELS = ["bert-tiny", "gpt2-tiny", "t5-tiny", "vit-tiny", "resnet-tiny", "whisper-micro", "llama-tiny", "qwen2-tiny"]
PARTLY = ["bert-tiny", "vit-tiny", "llama-tiny"]  # measured without batch 16


@pytest.fixture(scope="module")
def runs_file(tmp_path_factory: pytest.TempPathFactory) -> Path:
    runs = pd.read_parquet(CPU_SNAPSHOT)
    keep = runs["model"].isin(MODELS) & runs["backend"].isin(["torch", "onnxruntime"]) & runs["batch_size"].isin(
        [1, 4, 16])
    keep &= ~(runs["model"].isin(PARTLY) & (runs["batch_size"] == 16))
    path = tmp_path_factory.mktemp("next") / "runs.parquet"
    runs.loc[keep].to_parquet(path)
    return path


@pytest.fixture(scope="module")
def table(runs_file: Path) -> pd.DataFrame:
    return training_table(load_runs(runs_file))


@pytest.fixture(scope="module")
def picks(table: pd.DataFrame) -> list[Suggestion]:
    return suggest_measurements(8, table=table, seed=0, ensemble=6)


@pytest.fixture(scope="module")
def config_dir(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A BERT that is not in the zoo, as transformers writes its config.json."""
    transformers = pytest.importorskip("transformers")
    path = tmp_path_factory.mktemp("cfg") / "my-bert"
    path.mkdir()
    transformers.BertConfig(hidden_size=256, num_hidden_layers=4, num_attention_heads=4,
                            intermediate_size=1024).to_json_file(path / "config.json")
    return path


# --- the suggestions ----------------------------------------------------------------------------

def test_suggestions_are_unmeasured_observed_runtimes_spread_over_models(table: pd.DataFrame,
                                                                         picks: list[Suggestion]) -> None:
    assert len(picks) == 8 and all(isinstance(p, Suggestion) for p in picks)
    measured = set(zip(table["model"], table["backend"], table["precision"], table["batch_size"].astype(int),
                       strict=True))
    runtimes = set(zip(table["hardware"], table["backend"], table["precision"], strict=True))
    for p in picks:
        assert (p.model, p.backend, p.precision, p.batch_size) not in measured
        assert (p.hardware, p.backend, p.precision) in runtimes
        assert p.device == "AMD EPYC" and p.mode == "inference"
        assert p.uncertainty > 0 and p.predicted_ms > 0
        assert p.command == bench_command(model=p.model, hardware=p.hardware, backend=p.backend,
                                          precision=p.precision, batch_size=p.batch_size)
        assert f"--hwbench-models {p.model} " in p.command and p.command.endswith(f"--hwbench-batch-sizes {p.batch_size}")
        assert f"--hwbench-precisions {p.precision} " in p.command and "-m cpu " in p.command
    # diversity: eight picks over at least four models, no model more than three times
    counts = pd.Series([p.model for p in picks]).value_counts()
    assert len(counts) >= 4 and counts.max() <= 3
    assert json.loads(json.dumps(picks[0].to_dict()))["command"] == picks[0].command


def test_same_seed_same_answer_and_filters_hold(table: pd.DataFrame, picks: list[Suggestion]) -> None:
    assert suggest_measurements(8, table=table, seed=0, ensemble=6) == picks
    narrow = suggest_measurements(3, table=table, models=["bert-tiny", "vit-tiny"], backends=["onnxruntime"],
                                  batch_sizes=[16], ensemble=3)
    assert {(p.model, p.backend, p.batch_size) for p in narrow} == {("bert-tiny", "onnxruntime", 16),
                                                                     ("vit-tiny", "onnxruntime", 16)}


def test_models_never_measured_are_the_uncertain_ones(table: pd.DataFrame) -> None:
    """The ensemble is bootstrapped over models: a model no resample can hold disagrees most."""
    candidates = candidate_grid(table)
    assert set(MODELS) - set(PARTLY) - set(candidates["model"]) == set(MODELS) - set(PARTLY)  # measured in full
    assert set(PARTLY) <= set(candidates["model"])
    assert {"llava-tiny", "clip-tiny"} <= set(candidates["model"])  # zoo models of the same (quick) tier
    assert not {"bert-base", "llama-7b"} & set(candidates["model"])
    std = ensemble_predictions(table, candidates, ensemble=6, seed=1).std(axis=0, ddof=1)
    seen = candidates["model"].isin(table["model"]).to_numpy()
    assert std[~seen].mean() > 1.2 * std[seen].mean()


def test_greedy_pick_spreads_over_models_and_runtimes() -> None:
    candidates = pd.DataFrame({"model": ["a", "a", "a", "b", "b", "c"], "hardware": "cpu",
                               "backend": ["torch", "torch", "onnxruntime", "torch", "torch", "torch"]})
    # "a"/torch is the most uncertain, but after it the other "a" rows are discounted
    order = greedy_order(candidates, np.array([1.0, 0.99, 0.9, 0.8, 0.79, 0.5]), 4)
    assert order == [0, 3, 2, 5]
    assert rank_candidates(pd.DataFrame(), candidates.iloc[:0], 3).empty


@pytest.mark.parametrize(("kwargs", "words"), [
    ({"budget": 0}, ["budget", "0"]),
    ({"budget": 2, "models": ["no-such-model"]}, ["no-such-model", "bert-tiny", "accepted"]),
    ({"budget": 2, "hardware": ["cuda"]}, ["'cuda'", "records hold cpu"]),
    ({"budget": 2, "precisions": ["fp16"]}, ["'fp16'", "fp32"]),
    ({"budget": 2, "ensemble": 1}, ["ensemble", "2"]),
])
def test_bad_input_names_the_value_and_what_is_accepted(table: pd.DataFrame, kwargs: dict, words: list[str]) -> None:
    with pytest.raises(ValueError) as err:
        suggest_measurements(**kwargs, table=table)
    for word in words:
        assert word in str(err.value)


def test_a_printed_command_collects_exactly_that_case(picks: list[Suggestion]) -> None:
    argv = shlex.split(picks[0].command)
    assert argv[0] == "pytest"
    out = subprocess.run([sys.executable, "-m", *argv, "--collect-only", "-q", "-p", "no:cacheprovider",
                          "--hwbench-no-track"], cwd=REPO, capture_output=True, text=True, timeout=300)
    assert out.returncode == 0, out.stdout + out.stderr
    p = picks[0]
    assert f"test_inference[{p.model}-cpu-{p.backend}-{p.precision}-b{p.batch_size}]" in out.stdout
    assert "1 test collected" in out.stdout


# --- CLI and REST ---------------------------------------------------------------------------------

def test_cli_next_prints_runnable_lines_and_why(runs_file: Path, capsys: pytest.CaptureFixture[str]) -> None:
    assert cli_main(["next", "--budget", "3", "--ensemble", "3", "--source", str(runs_file)]) == 0
    out = capsys.readouterr()
    lines = out.out.strip().splitlines()
    assert len(lines) == 6
    assert all(line.startswith("# ") and "predictors disagree" in line for line in lines[::2])
    assert all(line.startswith("pytest bench_suites/test_inference.py -m cpu ") for line in lines[1::2])
    assert "fitting 3 latency models" in out.err

    assert cli_main(["next", "--budget", "3", "--ensemble", "3", "--source", str(runs_file), "--json"]) == 0
    data = json.loads(capsys.readouterr().out)
    assert [s["command"] for s in data["suggestions"]] == lines[1::2]


@pytest.mark.e2e
def test_cold_start_spreads_the_first_measurements_over_this_machine(tmp_path: Path) -> None:
    """No store at all (a clean checkout): ten runnable lines for the hardware detected here."""
    env = {k: v for k, v in os.environ.items() if k not in ("MLFLOW_TRACKING_URI", "HWSEL_CONFIG")}
    out = subprocess.run([sys.executable, "-m", "hwsel", "next", "--budget", "10", "--json"], cwd=tmp_path, env=env,
                         capture_output=True, text=True, timeout=300)
    assert out.returncode == 0, out.stderr
    assert list(tmp_path.iterdir()) == []  # looking for a store made none (no ./mlruns/mlflow.db)
    picks = json.loads(out.stdout)["suggestions"]
    assert len(picks) == 10
    assert all(p["uncertainty"] is None and p["predicted_ms"] is None for p in picks)
    assert len({p["model"] for p in picks}) == 10  # spread over models first
    assert all(p["command"].startswith("pytest bench_suites/test_inference.py -m ") for p in picks)
    cpu = next(p for p in picks if p["hardware"] == "cpu")
    collected = subprocess.run([sys.executable, "-m", *shlex.split(cpu["command"]), "--collect-only", "-q", "-p",
                                "no:cacheprovider", "--hwbench-no-track"], cwd=REPO, capture_output=True, text=True,
                               timeout=300)
    assert "1 test collected" in collected.stdout, collected.stdout + collected.stderr


@pytest.mark.parametrize(("args", "words"), [
    (["--models", "nope"], ["nope", "accepted"]),
    (["--hardware", "cuda"], ["cuda", "cpu"]),
])
def test_cli_next_bad_input_exits_2(runs_file: Path, capsys: pytest.CaptureFixture[str], args: list[str],
                                    words: list[str]) -> None:
    assert cli_main(["next", *args, "--source", str(runs_file)]) == 2
    err = capsys.readouterr().err
    for word in words:
        assert word in err
    with pytest.raises(SystemExit) as stop:
        cli_main(["next", "--budget", "0", "--source", str(runs_file)])
    assert stop.value.code == 2 and "--budget" in capsys.readouterr().err


def test_rest_measure_next(runs_file: Path) -> None:
    from fastapi.testclient import TestClient

    from hwsel import Predictor
    from hwsel.app import create_app

    predictor = Predictor.load(runs_file, tracking_uri=f"sqlite:///{runs_file.parent / 'none.db'}", detect=False)
    client = TestClient(create_app(predictor, source=runs_file))
    r = client.post("/measure/next", json={"budget": 2, "ensemble": 3, "models": ["bert-tiny", "clip-tiny"]})
    assert r.status_code == 200, r.text
    body = r.json()
    assert body["budget"] == 2 and len(body["suggestions"]) == 2
    assert {s["model"] for s in body["suggestions"]} <= {"bert-tiny", "clip-tiny"}
    assert set(body["suggestions"][0]) == {f.name for f in dataclasses.fields(Suggestion)}
    bad = client.post("/measure/next", json={"budget": 0})
    assert bad.status_code == 422 and "budget" in bad.json()["message"]
    bad = client.post("/measure/next", json={"budget": 2, "hardware": ["cuda"]})
    assert bad.status_code == 422 and "'cuda'" in bad.json()["message"]
    gone = TestClient(create_app(predictor, source=runs_file.parent / "missing.parquet"))
    r = gone.post("/measure/next", json={"budget": 2})
    assert r.status_code == 503 and "missing.parquet" in r.json()["message"]


def test_rest_measure_next_answers_503_within_its_timeout_from_a_source_that_never_answers(
        runs_file: Path, silent_port: int) -> None:
    import time

    from fastapi.testclient import TestClient

    from hwsel import Predictor
    from hwsel.app import create_app

    predictor = Predictor.load(runs_file, tracking_uri=f"sqlite:///{runs_file.parent / 'none.db'}", detect=False)
    source = f"http://user:secret@127.0.0.1:{silent_port}"
    client = TestClient(create_app(predictor, source=source, timeout=3))
    began = time.monotonic()
    r = client.post("/measure/next", json={"budget": 2})
    assert time.monotonic() - began < 30  # before: HTTP 500 after 93 s
    message = r.json()["message"]
    assert r.status_code == 503, r.text
    assert f"no benchmark records to suggest from (http://***@127.0.0.1:{silent_port})" in message, message
    assert f"cannot reach http://***@127.0.0.1:{silent_port}/health within 2 s" in message, message
    assert "secret" not in r.text


def test_public_api_exports_next() -> None:
    assert {"Suggestion", "suggest_measurements"} <= set(hwsel.__all__)
    assert hwsel.suggest_measurements is suggest_measurements


# --- any model by its config.json (part 1) -----------------------------------------------------------

def test_cli_predict_and_select_take_a_config_without_model(config_dir: Path, runs_file: Path,
                                                            capsys: pytest.CaptureFixture[str]) -> None:
    store = ["--source", str(runs_file), "--tracking-uri", f"sqlite:///{runs_file.parent / 'none.db'}"]
    code = cli_main(["predict", "--config", str(config_dir / "config.json"), "--hardware", "cuda", "cpu",
                     "--batch-size", "8", "--json", *store])
    assert code == 0
    data = json.loads(capsys.readouterr().out)
    assert data["model_name"] == "my-bert" and data["model_family"] == "embedding"
    assert set(data["predictions"]) == {"cuda", "cpu"}
    for p in data["predictions"].values():
        low, high = p["interval"]
        assert 0 < low <= p["latency_ms"] <= high and p["throughput"] > 0 and p["memory_mb"] > 0 and p["source"]

    assert cli_main(["select", "--config", str(config_dir), "--hardware", "cpu", "cuda", "--json", *store]) == 0
    rec = json.loads(capsys.readouterr().out)
    assert rec["model_name"] == "my-bert" and rec["primary_recommendation"] in ("cpu", "cuda")

    assert cli_main(["predict", "--hardware", "cpu", *store]) == 2
    err = capsys.readouterr().err
    assert "--model" in err and "--config" in err


def test_rest_predict_and_select_take_a_config(config_dir: Path, runs_file: Path) -> None:
    from fastapi.testclient import TestClient

    from hwsel import Predictor
    from hwsel.app import create_app
    from hwsel.predict import Prediction
    from hwsel.rest_models import PredictionModel

    predictor = Predictor.load(runs_file, tracking_uri=f"sqlite:///{runs_file.parent / 'none.db'}", detect=False)
    client = TestClient(create_app(predictor))
    config = json.loads((config_dir / "config.json").read_text())
    r = client.post("/performance/predict", json={"config": config, "hardware": ["cuda", "cpu"], "batch_size": 8})
    assert r.status_code == 200, r.text
    body = r.json()
    assert body["model_family"] == "embedding" and set(body["predictions"]) == {"cuda", "cpu"}
    for p in body["predictions"].values():
        assert {"latency_ms", "throughput", "memory_mb", "interval", "source"} <= set(p)
    r = client.post("/hardware/select", json={"config": config, "model": "mine", "available_hardware": ["cpu"]})
    assert r.status_code == 200 and r.json()["model_name"] == "mine"
    bad = client.post("/performance/predict", json={"config": {"hidden_size": 8}})
    assert bad.status_code == 422 and bad.json()["errors"][0]["loc"] == ["body", "config"]
    neither = client.post("/hardware/select", json={"batch_size": 2})
    assert neither.status_code == 422 and "model_name" in neither.json()["message"]
    assert "config" in neither.json()["message"]
    # the response model is the dataclass's fields plus to_dict's extras, not a copy of them
    sample = Prediction("cpu", 1.0, 1000.0, 10.0, "roofline", (0.5, 2.0))
    assert list(PredictionModel.model_fields) == list(sample.to_dict())
