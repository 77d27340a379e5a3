"""Every answer within physics, from every layer (`hwsel.bounds`).

1,000 random configurations (1-256 layers, hidden 64-16384, batch 1-1024, every precision and
hardware target) asked of a predictor whose layers all answer: the committed CPU records
(measured), two real scikit-learn champions (a ridge trained on those records, and a constant
regressor that says 1 ms and 100 MiB for anything, the worst a champion can do), the roofline and
the rules. No answer is below its device's floors or above one day; a clamped or blended answer
says so.
"""

from __future__ import annotations

import math
import random
from pathlib import Path

import numpy as np
import pytest
from sklearn.dummy import DummyRegressor

from hwsel.bounds import floor_of
from hwsel.data import load_runs, training_table
from hwsel.features import FEATURE_COLUMNS, feature_frame
from hwsel.predict import Predictor
from hwsel.query import Query
from hwsel.registry import ChampionModel
from hwsel.resolution import ModelInfo
from pytest_hwbench.facts import fallback_order
from pytest_hwbench.record import MAX_LATENCY_MS
from pytest_hwbench.vocabulary import PRECISIONS

#: Every test here starts another process, a server or a training: the end-to-end tier.
pytestmark = pytest.mark.e2e

SNAPSHOT = Path(__file__).resolve().parents[1] / "benchmarks" / "data" / "cpu_runs.parquet"


def _champion(target: str, model: object) -> ChampionModel:
    return ChampionModel(target=target, name=f"hwsel-{target}", version="1", run_id="local", metrics={}, tags={},
                         model=model, residual_q10=-0.2, residual_q90=0.2)


@pytest.fixture(scope="module")
def runs():  # type: ignore[no-untyped-def]
    return load_runs(str(SNAPSHOT))


def _predictor(runs, constant: bool) -> Predictor:  # type: ignore[no-untyped-def]
    table = training_table(runs)
    X = feature_frame(table).loc[:, list(FEATURE_COLUMNS)]
    if constant:  # a champion that answers 1 ms and 100 MiB whatever it is asked
        lat = DummyRegressor(strategy="constant", constant=0.0).fit(X, np.zeros(len(X)))
        mem = DummyRegressor(strategy="constant", constant=math.log(100.0)).fit(X, np.zeros(len(X)))
    else:
        from hwsel.estimators import build_estimator

        lat = build_estimator({"estimator": "ridge", "alpha": 1.0}, offset_column="log_roofline_ms")
        lat.fit(X, np.log(table["latency_ms"].to_numpy(dtype=float)))
        mem = DummyRegressor(strategy="median").fit(X, np.log(table["memory_mb"].fillna(100.0).to_numpy(dtype=float)))
    champions = {"latency": _champion("latency", lat), "memory": _champion("memory", mem)}
    # an open domain: the champions answer for every hardware, backend and precision asked
    return Predictor(runs=runs, champions=champions, detect=False,
                     champion_domain=[(hw, be, p, m) for hw in fallback_order() for be in ("torch", "openvino", "qai_hub",
                                                                                  "onnxruntime-web")
                                      for p in PRECISIONS for m in ("inference", "train")]).build()


def _random_model(rng: random.Random, i: int) -> ModelInfo:
    layers = rng.randint(1, 256)
    hidden = int(round(math.exp(rng.uniform(math.log(64), math.log(16384)))))
    seq = rng.choice([16, 128, 512, 2048])
    params = 12 * layers * hidden * hidden + 32_000 * hidden
    return ModelInfo(name=f"random-{i}", family=rng.choice(["embedding", "text_generation", "vision"]),
                     model_type="bert", param_count=params, flops_per_item=2.0 * params * seq, num_layers=layers,
                     hidden_size=hidden, sequence_length=seq)


@pytest.mark.parametrize("constant", [True, False], ids=["constant-champion", "ridge-champion"])
def test_no_answer_below_the_physical_floor(runs, constant: bool) -> None:  # type: ignore[no-untyped-def]
    predictor = _predictor(runs, constant)
    rng = random.Random(25)
    queries = []
    for i in range(1000):
        queries.append(predictor.resolve(Query(
            _random_model(rng, i), rng.choice(fallback_order()), rng.choice(PRECISIONS), rng.randint(1, 1024),
            rng.choice(["inference", "train"]))))
    answers = predictor.predict_many(queries)
    sources = {p.source for p in answers}
    assert "registered" in sources  # the champion answered (the roofline/rules the rest)
    below = []
    for q, p in zip(queries, answers, strict=True):
        assert p.source != "measured"  # random models were never measured: every answer is an estimate
        f = floor_of(q)
        if p.latency_ms < f.latency_ms * (1 - 1e-9) or p.memory_mb < f.memory_mb * (1 - 1e-9):
            below.append((q, p, f))
        assert p.latency_ms <= max(MAX_LATENCY_MS, f.latency_ms)
        assert p.interval[0] <= p.latency_ms <= p.interval[1]
        assert p.throughput == pytest.approx(p.batch_size / p.latency_ms * 1e3, rel=1e-6)
    assert below == []
    if constant:  # the constant champion is below the floor for many: each says it was raised
        raised = [p for p in answers if "raised to" in p.detail]
        assert len(raised) > 100


def test_llama_7b_on_cpu_holds_its_weights(runs) -> None:  # type: ignore[no-untyped-def]
    predictor = _predictor(runs, constant=True)
    p = predictor.predict("llama-7b", "cpu")["cpu"]
    weights_mib = 6738415616 * 4 / 2**20
    assert p.memory_mb >= weights_mib
    assert "extrapolates" in p.detail  # 1.7 decades beyond the records' largest model: the roofline's answer
    inside = predictor.predict("gpt2", "cpu", batch_size=3)["cpu"]  # inside the size range: clamped, and says so
    assert inside.source == "registered"
    assert inside.memory_mb >= 124e6 * 4 / 2**20
    assert "memory 100 MiB raised to the weights'" in inside.detail


def test_a_far_extrapolation_says_so_and_blends_towards_the_roofline(runs) -> None:  # type: ignore[no-untyped-def]
    predictor = _predictor(runs, constant=False)
    big = ModelInfo(name="big", family="text_generation", model_type="llama", param_count=12 * 256 * 8192**2,
                    flops_per_item=2.0 * 12 * 256 * 8192**2 * 128, num_layers=256, hidden_size=8192,
                    sequence_length=128)
    p = predictor.predict(big, "cpu")["cpu"]
    # the roofline of the device the answer is for (the records' CPU)
    roof = Predictor(layers=("roofline",), detect=False).predict(big, "cpu", device=p.device)["cpu"]
    assert p.source == "registered"
    assert "extrapolates" in p.detail and "decade(s) outside the training models'" in p.detail
    assert "blended 100% towards the roofline" in p.detail
    assert p.latency_ms == pytest.approx(roof.latency_ms, rel=1e-6)
    assert p.latency_ms < MAX_LATENCY_MS
    # the interval spans both the champion's own answer and the roofline's
    assert p.interval[0] <= p.latency_ms <= p.interval[1]
    near = predictor.predict("bert-tiny", "cpu", batch_size=3)["cpu"]  # inside the data: no blend
    assert near.source == "registered" and "extrapolates" not in near.detail


def test_measured_interval_says_where_a_second_session_lands(runs) -> None:  # type: ignore[no-untyped-def]
    """Cases measured in two sessions, split in halves: the index holds both sessions of half A
    (its between-session spread) and only the first session of half B; B's second measurements
    must fall inside B's intervals about 90% of the time (the iteration spread alone: about half)."""
    from hwsel.layers.measured import MeasuredIndex

    keys = ["model", "hardware", "backend", "precision", "batch_size"]
    torch = runs[runs["backend"] == "torch"]
    per_case = torch.groupby(keys)["session_id"].nunique()
    repeated = sorted(per_case[per_case >= 2].index)
    assert len(repeated) >= 40
    half_b = set(repeated[1::2])
    first_session = torch.sort_values("created_at").groupby(keys)["session_id"].first()
    case = list(zip(*(torch[k] for k in keys), strict=True))
    in_b = [c in half_b for c in case]
    first = [s == first_session[c] for c, s in zip(case, torch["session_id"], strict=True)]
    keep = [not b or f for b, f in zip(in_b, first, strict=True)]
    index = MeasuredIndex(torch[keep])
    assert index.session_spread > 0
    later = torch[[b and not f for b, f in zip(in_b, first, strict=True)]]
    inside = []
    for row in later.to_dict("records"):
        m = index.lookup(row["model"], row["hardware"], row["precision"], int(row["batch_size"]), "inference",
                         "torch", row["device_name"])
        assert m is not None
        inside.append(m.low <= row["latency_ms_median"] <= m.high)
    assert sum(inside) / len(inside) >= 0.8, sum(inside) / len(inside)
