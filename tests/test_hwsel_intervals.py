"""Adaptive prediction intervals: calibrated on leave-one-model-out folds by `hwsel train`, stored
with the registered latency model, and carried by the registered layer's answers.

Training runs on a slice of the committed snapshot of real CPU runs
(`benchmarks/data/cpu_runs.parquet`) into a real SQLite MLflow store. Nothing is mocked.
"""

from __future__ import annotations

import json
import math
import warnings
from pathlib import Path

import numpy as np
import pandas as pd
import pytest

from hwsel import Predictor
from hwsel.data import load_runs, snapshot
from hwsel.features import query_frame
from hwsel.intervals import AdaptiveBand, AdaptiveIntervals, lomo_offsets, novelty_frame
from hwsel.registry import MODEL_NAMES, load_champion
from hwsel.resolution import resolve_model

SNAPSHOT = Path(__file__).resolve().parents[1] / "benchmarks" / "data" / "cpu_runs.parquet"
MODELS = ("bert-tiny", "gpt2-tiny", "resnet-tiny", "vit-tiny", "t5-tiny")


def test_band_widens_with_distance_and_keeps_its_level() -> None:
    """Residuals that grow with the distance to measured models give a band that grows with it,
    and covers about the nominal share of new rows drawn the same way."""
    rng = np.random.default_rng(0)
    d = rng.uniform(0, 3, 4000)
    r = rng.normal(0, 0.1 * (1 + 2 * d))
    band = AdaptiveBand.fit(r[:2000], d[:2000], 0.9)
    low, high = band.offsets(np.array([0.0, 3.0]))
    assert band.slope > 0 and high[1] - low[1] > 2 * (high[0] - low[0])
    lo, hi = band.offsets(d[2000:])
    inside = float(np.mean((r[2000:] >= lo) & (r[2000:] <= hi)))
    assert 0.87 <= inside <= 0.93


@pytest.fixture(scope="module")
def trained(tmp_path_factory: pytest.TempPathFactory) -> tuple[str, pd.DataFrame]:
    """A registry with champions trained (2 trials) on five tiny models of the CPU snapshot."""
    from hwsel.train import train

    runs = load_runs(SNAPSHOT)
    runs = runs[runs["model"].isin(MODELS) & runs["batch_size"].isin([1, 4, 16])
                & runs["backend"].isin(["torch", "onnxruntime"])].reset_index(drop=True)
    root = tmp_path_factory.mktemp("intervals")
    path = snapshot(runs, root / "runs.parquet")
    uri = f"sqlite:///{root / 'mlflow.db'}"
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        train(str(path), tracking_uri=uri, trials=2, seed=0, progress=False, snapshot_dir=root / "snapshots")
    return uri, runs


def test_training_stores_adaptive_intervals_with_the_latency_champion(trained: tuple[str, pd.DataFrame]) -> None:
    from mlflow.tracking import MlflowClient

    uri, _ = trained
    champion = load_champion("latency", uri)
    assert champion is not None and isinstance(champion.intervals, AdaptiveIntervals)
    artifact = champion.tags["hwsel.intervals"]
    assert artifact == f"runs:/{champion.run_id}/intervals/latency_intervals.json"
    # the stored document is the band the champion uses, with every training configuration
    doc = json.loads(Path(MlflowClient(uri).download_artifacts(champion.run_id, "intervals/latency_intervals.json"))
                     .read_text())
    assert doc["band"]["level"] == 0.9 and doc["band"]["q_low"] <= 0 <= doc["band"]["q_high"]
    assert set(doc["known"]["backend"]) == {"torch", "onnxruntime"}
    assert champion.intervals.band == AdaptiveIntervals.from_json(json.dumps(doc)).band
    # the nested leave-one-model-out figures of that calibration are logged with the run
    metrics = MlflowClient(uri).get_run(champion.run_id).data.metrics
    assert 0.0 < metrics["latency.lomo_interval_coverage"] <= 1.0
    assert metrics["latency.lomo_interval_width_p90"] >= metrics["latency.lomo_interval_width_median"] > 1.0
    # throughput and memory versions carry no adaptive intervals (the latency champion's serve them)
    for target in ("throughput", "memory"):
        other = load_champion(target, uri)
        assert other is not None and other.intervals is None, MODEL_NAMES[target]


def test_registered_answers_carry_intervals_of_their_own_width(trained: tuple[str, pd.DataFrame]) -> None:
    uri, _ = trained
    predictor = Predictor.load(tracking_uri=uri, layers=("registered", "rules"))
    champion = predictor.champions["latency"]
    widths = {}
    for model in ("bert-tiny", "t5-tiny", "resnet-tiny"):
        for backend in ("torch", "onnxruntime"):
            pred = predictor.predict(model, "cpu", batch_size=8, backend=backend)["cpu"]
            assert pred.source == "registered"
            row = query_frame(resolve_model(model), hardware="cpu", backend=backend, precision="fp32", batch_size=8,
                              device_name=pred.device)
            low, high = champion.interval(row)
            assert pred.interval[0] <= pred.latency_ms <= pred.interval[1]
            if "physical floor" in pred.detail:  # raised to the device's floor (`hwsel.bounds`), band with it
                assert pred.interval[1] == pytest.approx(max(float(high[0]), pred.latency_ms))
                continue
            assert pred.interval == pytest.approx((float(low[0]), float(high[0]))), (model, backend, pred.detail)
            widths[model, backend] = pred.interval[1] / pred.interval[0]
    # one width per answer, not one band for all
    assert len(widths) >= 3 and len({round(w, 6) for w in widths.values()}) > 1
    # a model far from every measured one (another family, 1000x the FLOPs) gets a wider band than
    # a measured architecture's neighbour in the same configuration
    near = query_frame(resolve_model("bert-tiny"), hardware="cpu", backend="torch", precision="fp32", batch_size=8)
    far = near.assign(family="unknown-family", model_type="unknown-type",
                      log_flops_per_item=near["log_flops_per_item"] + math.log(1000.0))
    (nl, nh), (fl, fh) = champion.log_offsets(near), champion.log_offsets(far)
    assert fh[0] - fl[0] > nh[0] - nl[0]


def test_lomo_offsets_never_see_the_held_out_model(trained: tuple[str, pd.DataFrame]) -> None:
    """The held-out model's band is the same whatever its own residuals are."""
    from hwsel.data import training_table
    from hwsel.features import feature_frame

    _, runs = trained
    table = training_table(runs).reset_index(drop=True)
    frame = novelty_frame(table, feature_frame(table))
    rng = np.random.default_rng(1)
    y = rng.normal(0, 0.3, len(table))
    oof = pd.DataFrame({"row": np.arange(len(table)), "y_true": y, "y_pred": np.zeros(len(table))})
    low, high = lomo_offsets(frame, oof)
    held = (frame["model"] == "bert-tiny").to_numpy()
    oof2 = oof.assign(y_true=np.where(held, y * 50, y))
    low2, high2 = lomo_offsets(frame, oof2)
    assert np.allclose(low[held], low2[held]) and np.allclose(high[held], high2[held])
    assert not np.allclose(high[~held], high2[~held])


def test_band_widens_beyond_the_distances_it_was_calibrated_on() -> None:
    """Inside the calibrated distances the band is the fitted one; beyond the largest, where its
    coverage is unknown, it widens by one scale per unit of distance."""
    rng = np.random.default_rng(2)
    d = rng.uniform(0, 1, 500)
    band = AdaptiveBand.fit(rng.normal(0, 0.2, 500), d, 0.9)
    assert band.d_max == pytest.approx(float(d.max())) and band.n == 500
    low, high = band.offsets(np.array([band.d_max, band.d_max + 1.0, band.d_max + 3.0]))
    width = high - low
    inside = band.base * (1 + band.slope * band.d_max) * (band.q_high - band.q_low)
    assert width[0] == pytest.approx(inside)
    assert width[1] > 2 * width[0] * (1 + band.slope * (band.d_max + 1)) / (1 + band.slope * band.d_max) - 1e-9
    assert width[2] > width[1]
    # a stored band reads back the same, and one stored without d_max never widens beyond it
    assert AdaptiveBand.from_dict(band.to_dict()) == band
    old = {k: v for k, v in band.to_dict().items() if k not in ("d_max", "n")}
    assert AdaptiveBand.from_dict(old).d_max == math.inf


def test_a_configuration_with_few_rows_takes_the_overall_scale() -> None:
    rng = np.random.default_rng(3)
    r = np.concatenate([rng.normal(0, 0.1, 200), rng.normal(0, 3.0, 3)])
    groups = ["a"] * 200 + ["rare"] * 3
    band = AdaptiveBand.fit(r, np.zeros(len(r)), 0.9, groups)
    assert dict(band.group_scale).keys() == {"a"}
    assert band.offsets([0.0], ["rare"])[1][0] == pytest.approx(band.q_high * band.base)


def test_training_stores_a_roofline_band_that_the_roofline_layer_serves(trained: tuple[str, pd.DataFrame]) -> None:
    from mlflow.tracking import MlflowClient

    from hwsel.layers.roofline import RooflineLayer

    uri, _ = trained
    champion = load_champion("latency", uri)
    assert champion is not None
    band = champion.intervals.layer_band("roofline")
    # a fitted band: the roofline of the snapshot's CPU (`hwsel.specs.cpu_spec` of its name) may err
    # to one side only, so its lower quantile may be the answer itself
    assert band is not None and band.n > 0 and band.q_low <= 0 < band.q_high
    # the blended answers of fewer than MIN_LAYER_MODELS models get no band of their own
    metrics = MlflowClient(uri).get_run(champion.run_id).data.metrics
    assert 0.0 < metrics["latency.roofline_interval_coverage"] <= 1.0
    assert metrics["latency.roofline_interval_rows"] == metrics["latency.lomo_interval_rows"]
    # and per distance bucket (hwsel.intervals.DISTANCE_BUCKETS)
    buckets = [k for k in metrics if k.startswith("latency.lomo_interval_coverage.d")]
    assert buckets and all(0.0 <= metrics[k] <= 1.0 for k in buckets)
    predictor = Predictor.load(tracking_uri=uri, layers=("registered", "roofline", "rules"))
    q = predictor.query("bert-base", "cpu", batch_size=8)
    pred = RooflineLayer(4.0, intervals=champion.intervals).answer([q])[0]
    assert pred is not None
    row = query_frame(resolve_model("bert-base"), hardware="cpu", backend="torch", precision="fp32", batch_size=8,
                      device_name=q.device_name)
    low, high = champion.intervals.offsets(row, "roofline")
    assert pred.interval == pytest.approx((pred.latency_ms * math.exp(low[0]), pred.latency_ms * math.exp(high[0])))
    assert predictor.layers_["roofline"].intervals is champion.intervals
    # without intervals, the fixed factor
    plain = RooflineLayer(4.0).answer([q])[0]
    assert plain is not None and plain.interval == pytest.approx((plain.latency_ms / 4, plain.latency_ms * 4))
    with pytest.raises(KeyError, match="no 'nonsense' band"):
        champion.intervals.offsets(row, "nonsense")


def test_measured_band_is_calibrated_on_repeats_in_other_sessions() -> None:
    """The measured layer's band is the conformal quantile of leave-one-session-out residuals;
    records without any repeated case answer with the runs' own spread and say so."""
    from hwsel.layers.measured import MeasuredIndex, MeasuredLayer, session_residuals

    runs = load_runs(SNAPSHOT)
    index = MeasuredIndex(runs)
    assert index.band is not None and index.band.n >= 100 and index.band.q_low < 0 < index.band.q_high
    predictor = Predictor(runs=runs, layers=("measured", "rules"), detect=False)
    pred = predictor.predict("bert-tiny", "cpu", batch_size=4)["cpu"]
    assert pred.source == "measured" and "not calibrated" not in pred.detail
    m = index.lookup("bert-tiny", "cpu", "fp32", 4, "inference", device=pred.device)
    assert m is not None and m.calibrated
    low, high = index.band.offsets([0.0], ["cpu|torch|fp32"])
    assert (m.low, m.high) == pytest.approx((m.latency_ms * math.exp(low[0]), m.latency_ms * math.exp(high[0])))
    # one residual per session of each repeated case: its median against the others' records
    resid, config, model = session_residuals({("x", "cpu", "fp32", 1, "inference", "torch", ""): [
        {"latency_ms_median": 2.0, "session_id": "a"}, {"latency_ms_median": 4.0, "session_id": "b"},
        {"latency_ms_median": 4.0, "session_id": "b"}]})
    assert resid == pytest.approx([math.log(0.5), math.log(2.0)]) and config == ["cpu|torch|fp32"] * 2
    assert model == ["x", "x"]
    once = runs.drop_duplicates(["model", "backend", "precision", "batch_size"]).reset_index(drop=True)
    single = MeasuredIndex(once)
    assert single.band is None
    answer = MeasuredLayer(single).answer([predictor.query("bert-tiny", "cpu", batch_size=4)])[0]
    assert answer is not None and "interval not calibrated" in answer.detail


def test_a_blended_answer_carries_its_band_or_both_bands_blended_as_the_answers_are() -> None:
    """Without a blended band of its own, a blended answer's interval is the registered and
    roofline intervals (relative to their answers) blended by the answer's own weight: the
    registered band at weight 0, the roofline band at 1; with a band, that band around the blend."""
    import dataclasses

    from hwsel.guard import blend
    from hwsel.intervals import span_offsets

    p = Predictor(layers=("rules",), detect=False).predict("bert-tiny", "cpu", batch_size=4)["cpu"]
    reg = dataclasses.replace(p, latency_ms=10.0, interval=(8.0, 12.0))  # 0.8x-1.2x
    roof = dataclasses.replace(p, latency_ms=40.0, interval=(5.0, 200.0))  # 0.125x-5x
    out = blend(reg, roof, 0.5, ["far"])
    assert out.latency_ms == pytest.approx(20.0)
    assert out.interval == pytest.approx((20.0 * math.sqrt(0.8 * 0.125), 20.0 * math.sqrt(1.2 * 5.0)))
    near, far = blend(reg, roof, 0.01, ["near"]), blend(reg, roof, 0.99, ["far"])
    assert near.interval[1] / near.latency_ms == pytest.approx(1.2, rel=0.03)
    assert far.interval[0] / far.latency_ms == pytest.approx(0.125, rel=0.03)
    banded = blend(reg, roof, 0.5, ["far"], (-0.5, 0.5))
    assert banded.interval == pytest.approx((20.0 * math.exp(-0.5), 20.0 * math.exp(0.5)))
    # the benchmark's log-space rule is the same
    low, high = span_offsets((np.log([0.8]), np.log([1.2])), (np.log([5 / 40]), np.log([5.0])), np.array([0.5]))
    assert (20.0 * math.exp(low[0]), 20.0 * math.exp(high[0])) == pytest.approx(out.interval)
