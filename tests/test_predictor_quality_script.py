"""benchmarks/predictor_quality.py: each layer's band on held-out answers never saw the model it
is scored on, and the per-layer table prints every layer, on a slice of the committed CPU
snapshot of real runs (two sessions of the quick tier on torch). Nothing is mocked."""

from __future__ import annotations

import math
from pathlib import Path

import numpy as np
import pytest
from _scripts import script_module

ROOT = Path(__file__).resolve().parents[1]
SCRIPT = ROOT / "benchmarks" / "predictor_quality.py"
#: The script's cross-validation fits a model per held-out model: the end-to-end tier.
pytestmark = pytest.mark.e2e

MODELS = ("bert-tiny", "gpt2-tiny", "resnet-tiny", "vit-tiny", "t5-tiny", "whisper-micro", "llama-tiny")


@pytest.fixture(scope="module")
def pq():
    with script_module(SCRIPT, "hwbench_predictor_quality_script") as module:
        yield module


@pytest.fixture(scope="module")
def dataset(pq, tmp_path_factory: pytest.TempPathFactory):
    from hwsel.data import load_runs, snapshot

    runs = load_runs(ROOT / "benchmarks" / "data" / "cpu_runs.parquet")
    runs = runs[runs["model"].isin(MODELS) & runs["backend"].isin(["torch"]) & runs["batch_size"].isin([1, 4, 16])]
    path = snapshot(runs.reset_index(drop=True), tmp_path_factory.mktemp("pq") / "runs.parquet")
    return pq.load_dataset("CPU", path)


def test_the_measured_band_of_a_model_never_saw_its_repeats(pq, dataset) -> None:
    first = pq.measured_answers(dataset)
    assert len(first) >= 20 and set(first["model"]) <= set(MODELS)
    assert np.all(first["low"] < 0) and np.all(first["high"] > 0)
    # one model's repeats made 10x worse: its own band stays, the others' widen
    runs = dataset.runs.copy()
    odd = (runs["model"] == "bert-tiny") & (runs["session_id"] == runs["session_id"].iloc[0])
    runs.loc[odd, "latency_ms_median"] *= 10
    second = pq.measured_answers(pq.Dataset(dataset.name, dataset.source, runs, dataset.table, dataset.X, dataset.y))
    own = (first["model"] == "bert-tiny").to_numpy()
    assert own.any() and np.allclose(first["high"][own], second["high"][own])
    assert np.all(second["high"][~own].to_numpy() >= first["high"][~own].to_numpy())
    assert (second["high"][~own].to_numpy() > first["high"][~own].to_numpy()).any()


def test_the_layer_table_prints_every_layer_with_share_coverage_and_widths(pq, dataset, capsys) -> None:
    params = {"estimator": "ridge", "offset": "regime", "batch_curves": True, "alpha": 10.0}
    oof, _ = pq.lomo_oof(dataset, params, 0)
    aims = pq.Aims([])
    bands = pq.coverage_table(dataset, oof, aims)
    out = capsys.readouterr().out
    assert "as served" in out and "every row each layer can answer" in out and "by distance" in out
    for layer in ("measured", "trained", "blended", "roofline"):
        assert f"  {layer}" in out
    assert len(bands) == len(oof) and np.all(bands["low"] <= 0) and np.all(bands["high"] >= 0)
    answers = pq.layer_answers(dataset, oof)
    served = pq.served_layer(dataset, oof, answers)
    assert set(served) <= {"measured", "trained", "blended", "roofline"} and "measured" in set(served)
    # every aim judged is a coverage of 20 rows or more, or the width spread
    assert aims.rows and all(("coverage" in label or "p90/p10" in label) for label, *_ in aims.rows)
    roof = answers["roofline"]
    cov = float(((roof["resid"] >= roof["low"]) & (roof["resid"] <= roof["high"])).mean())
    assert 0.5 < cov <= 1.0 and math.isfinite(float(np.median(np.exp(roof["high"] - roof["low"]))))
