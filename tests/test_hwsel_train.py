"""hwsel training, registry, features and data loading, on real runs in a real MLflow store.

The store is a SQLite MLflow store in a temporary directory, filled by `MlflowSink` (the sink the
pytest plugin uses) with records from the committed snapshot of real CPU runs
(`benchmarks/data/cpu_runs.parquet`). Nothing is mocked.
"""

from __future__ import annotations

import math
import time
import uuid
from pathlib import Path

import numpy as np
import pandas as pd
import pytest

from hwsel.data import CONFIG_KEYS, load_runs, training_table
from hwsel.features import FEATURE_COLUMNS, feature_frame, query_frame
from hwsel.registry import MODEL_NAMES, PREDICTED_METRICS, load_champion
from hwsel.resolution import ModelInfo, resolve_model
from hwsel.specs import spec_for
from hwsel.train import train
from pytest_hwbench.record import BenchmarkRecord, SessionInfo
from pytest_hwbench.sinks import MlflowSink

#: Every test here starts another process, a server or a training: the end-to-end tier.
pytestmark = pytest.mark.e2e

SNAPSHOT = Path(__file__).resolve().parents[1] / "benchmarks" / "data" / "cpu_runs.parquet"
#: A slice of the snapshot that keeps the test fast: three architectures, three batch sizes.
TEST_MODELS = ("bert-tiny", "resnet-tiny", "gpt2-tiny")


def _records(frame: pd.DataFrame) -> list[BenchmarkRecord]:
    fields = set(BenchmarkRecord.__dataclass_fields__)
    records = []
    for row in frame.to_dict(orient="records"):
        data = {k: (None if isinstance(v, float) and math.isnan(v) else v) for k, v in row.items()
                if k in fields and v is not pd.NA}
        data = {k: v for k, v in data.items() if v is not None or k not in ("timings_ms", "extra")}
        records.append(BenchmarkRecord.from_dict(data))
    return records


@pytest.fixture(scope="module")
def snapshot_runs() -> pd.DataFrame:
    runs = load_runs(SNAPSHOT)
    runs = runs[runs["model"].isin(TEST_MODELS) & runs["batch_size"].isin([1, 4, 16])]
    # Two repeats per configuration at most: enough to exercise the aggregation, fewer runs to log.
    keys = [runs[k].map(repr) for k in CONFIG_KEYS]
    return runs.sort_values("created_at").groupby(keys, sort=False).head(2).reset_index(drop=True)


@pytest.fixture(scope="module")
def store(tmp_path_factory: pytest.TempPathFactory, snapshot_runs: pd.DataFrame) -> str:
    """A SQLite MLflow store holding the slice as one real hwbench session (parent + child runs)."""
    root = tmp_path_factory.mktemp("mlflow")
    uri = f"sqlite:///{root / 'mlflow.db'}"
    session = SessionInfo(session_id=uuid.uuid4().hex, started_at="2026-11-23T00:00:00+00:00", host="test")
    records = _records(snapshot_runs.assign(session_id=session.session_id))
    sink = MlflowSink(uri)
    sink.open_session(session)
    sink.write(records)
    sink.close("finished")
    return uri


def test_load_runs_from_mlflow_matches_the_snapshot(store: str, snapshot_runs: pd.DataFrame) -> None:
    runs = load_runs(store)
    assert len(runs) == len(snapshot_runs)
    assert runs["batch_size"].dtype.name == "Int64"  # params cast back from strings
    assert runs["image_size"].isna().sum() == snapshot_runs["image_size"].isna().sum()  # "none" -> None
    mine = runs.set_index("record_id").sort_index()
    theirs = snapshot_runs.set_index("record_id").sort_index()
    np.testing.assert_allclose(mine["latency_ms_median"], theirs["latency_ms_median"])
    assert (mine["backend"] == theirs["backend"]).all()


def test_train_registers_champions_and_keeps_them_on_a_rerun(store: str, tmp_path: Path) -> None:
    first = train(tracking_uri=store, trials=3, seed=0, progress=False, snapshot_dir=tmp_path)
    assert {t: r.version for t, r in first.targets.items()} == {t: "1" for t in PREDICTED_METRICS}
    assert all(r.alias_moved for r in first.targets.values())
    assert first.snapshot_path.exists()
    assert pd.read_parquet(first.snapshot_path).shape[0] == first.n_rows
    for target in PREDICTED_METRICS:
        assert set(first.targets[target].cv) == {"heldout_batch", "heldout_model"}
        assert 0 < first.targets[target].cv["heldout_model"]["mape"] < 10

    from mlflow.tracking import MlflowClient

    client = MlflowClient(tracking_uri=store)
    for target in PREDICTED_METRICS:
        mv = client.get_model_version_by_alias(MODEL_NAMES[target], "champion")
        assert str(mv.version) == "1"
        assert mv.tags["hwsel.data_sha256"] == first.data_digest
        assert client.list_artifacts(first.run_id, "data")  # the snapshot travels with the run

    second = train(tracking_uri=store, trials=3, seed=0, progress=False, snapshot_dir=tmp_path)
    assert {t: r.version for t, r in second.targets.items()} == {t: "2" for t in PREDICTED_METRICS}
    assert second.data_digest == first.data_digest
    # Same data, same seed: the same recipe scores the same, so the champion stays.
    assert not any(r.alias_moved for r in second.targets.values()), {t: r.reason for t, r in second.targets.items()}
    for target in PREDICTED_METRICS:
        assert str(client.get_model_version_by_alias(MODEL_NAMES[target], "champion").version) == "1"
        assert second.targets[target].champion_score == pytest.approx(second.targets[target].score)

    # Champions predict positive, finite values in natural units; throughput agrees with latency.
    latency, throughput, memory = (load_champion(t, tracking_uri=store) for t in PREDICTED_METRICS)
    assert latency is not None and throughput is not None and memory is not None
    assert latency.version == "1" and "heldout_model.mape" in latency.metrics
    queries = pd.concat([
        query_frame(resolve_model(name), hardware="cpu", backend=backend, precision="fp32", batch_size=batch)
        for name in ("bert-tiny", "bert-base", "vit-base") for backend in ("torch", "onnxruntime")
        for batch in (1, 8, 64)
    ], ignore_index=True)
    lat, tp, mem = latency.predict(queries), throughput.predict(queries), memory.predict(queries)
    for values in (lat, tp, mem):
        assert np.all(np.isfinite(values)) and np.all(values > 0)
    np.testing.assert_allclose(tp, 1e3 * queries["batch_size"].to_numpy() / lat, rtol=1e-9)
    low, high = latency.interval(queries)
    assert np.all(low <= lat) and np.all(lat <= high)


def test_load_champion_is_none_without_a_champion(tmp_path: Path) -> None:
    assert load_champion("latency", tracking_uri=f"sqlite:///{tmp_path / 'none.db'}") is None
    started = time.perf_counter()
    assert load_champion("memory", tracking_uri="http://127.0.0.1:9") is None  # nothing listens
    assert time.perf_counter() - started < 10
    with pytest.raises(ValueError, match="latency, throughput, memory"):
        load_champion("energy")


def test_resolve_model_zoo_aliases_and_close_matches() -> None:
    bert = resolve_model("bert-base")
    assert bert.family == "embedding" and bert.model_type == "bert" and bert.param_count > 100e6
    assert resolve_model("bert-base-uncased") == bert
    assert resolve_model("google/vit-base-patch16-224").name == "vit-base"
    assert resolve_model("openai/clip-vit-base-patch32").name == "clip-vit-b32"
    assert resolve_model("microsoft/resnet-50").image_size == 224
    with pytest.raises(KeyError) as info:
        resolve_model("bert-bse")
    message = str(info.value)
    assert "bert-base" in message and "--config" in message and "config=" in message


def test_resolve_model_from_a_config_directory(tmp_path: Path) -> None:
    (tmp_path / "config.json").write_text(
        '{"model_type": "bert", "num_hidden_layers": 1, "hidden_size": 32, "num_attention_heads": 2,'
        ' "intermediate_size": 64, "vocab_size": 100}')
    info = resolve_model("my-bert", config=tmp_path)
    assert info.name == "my-bert" and info.num_layers == 1 and info.hidden_size == 32
    assert 0 < info.param_count < 1e6 and info.flops_per_item > 0


def test_feature_frame_columns(snapshot_runs: pd.DataFrame) -> None:
    table = training_table(snapshot_runs)
    features = feature_frame(table)
    assert tuple(features.columns) == FEATURE_COLUMNS
    assert len(features) == len(table)
    assert "model" not in features.columns  # architecture, not names
    numeric = features.select_dtypes("number")
    assert np.isfinite(numeric["log_roofline_ms"]).all()
    one = query_frame(resolve_model("bert-tiny"), hardware="cpu", backend="torch", precision="fp32",
                      batch_size=4)
    assert tuple(one.columns) == FEATURE_COLUMNS and len(one) == 1


@pytest.mark.parametrize(("hardware", "device", "precision"),
                         [("cpu", None, "fp32"), ("cuda", "NVIDIA H100 80GB HBM3", "fp16"),
                          ("cuda", "Tesla T4", "int8"), ("mps", "Apple M2", "fp32")])
def test_roofline_is_monotone_in_batch(hardware: str, device: str | None, precision: str) -> None:
    from hwsel.features import query_row

    model = resolve_model("bert-base")
    rows = [query_row(model, hardware=hardware, backend="torch", precision=precision, batch_size=b, device_name=device)
            for b in (1, 2, 4, 8, 16, 32, 64, 128)]
    roof = feature_frame(pd.DataFrame(rows))
    latencies = roof["log_roofline_ms"].tolist()
    memories = roof["log_roofline_memory_mb"].tolist()
    assert all(a < b for a, b in zip(latencies, latencies[1:], strict=False))
    assert all(a <= b for a, b in zip(memories, memories[1:], strict=False))
    assert np.allclose(roof["log_roofline_ms"], np.maximum(roof["log_roofline_compute_ms"],
                                                           roof["log_roofline_memory_ms"]))


def test_device_specs() -> None:
    assert spec_for("cuda", "NVIDIA H100 80GB HBM3").name == "h100"
    assert spec_for("cuda", "NVIDIA H200").memory_gb == 141
    assert spec_for("cuda", "NVIDIA A100-SXM4-40GB").name == "a100-40gb"
    assert spec_for("cuda", "Tesla T4").tflops("bf16") == spec_for("cuda", "Tesla T4").tflops("fp32")
    assert not spec_for("cuda", "Some Future GPU").known
    cpu = spec_for("cpu")
    assert cpu.kind == "cpu" and cpu.tflops("fp32") > 0
    small = ModelInfo("x", "embedding", "bert", 1000, 1e6)
    one = query_frame(small, hardware="cpu", backend="torch", precision="fp32", batch_size=1)
    assert np.isfinite(one["log_roofline_ms"]).all()  # a latency > 0


def test_zoo_table_matches_a_fresh_meta_build() -> None:
    from hwsel.resolution import _measure_spec
    from pytest_hwbench.models import get_model

    fresh = _measure_spec(get_model("bert-tiny"))
    assert resolve_model("bert-tiny") == fresh


def test_batch_curves_follow_each_configuration_and_defer_to_the_general_model() -> None:
    """Latency that really is ``a + b * batch`` per configuration is recovered at unmeasured batch
    sizes; a configuration seen at one batch size is shifted through it; an unseen one is general."""
    from sklearn.base import clone
    from sklearn.linear_model import LinearRegression

    from hwsel.estimators import BatchCurveRegressor, config_keys
    from hwsel.features import query_row

    truth = {("bert-tiny", "fp32"): (2.0, 0.5), ("bert-tiny", "bf16"): (3.0, 0.2), ("gpt2-tiny", "fp32"): (1.0, 1.5)}
    rows, values = [], []
    for (model, precision), (a, b) in truth.items():
        for batch in (1, 2, 8, 16):
            rows.append(query_row(resolve_model(model), hardware="cpu", backend="torch", precision=precision,
                                  batch_size=batch))
            values.append(a + b * batch)
    rows.append(query_row(resolve_model("vit-tiny"), hardware="cpu", backend="torch", precision="fp32", batch_size=4))
    values.append(7.0)  # one batch size only
    X = feature_frame(pd.DataFrame(rows))
    general = _ColumnRegressor(LinearRegression(), "log_batch_size")
    model = BatchCurveRegressor(clone(general)).fit(X, np.log(values))
    assert len(set(config_keys(X))) == 4 and len(model.curves_) == 3 and len(model.shifts_) == 1

    def predict(name: str, precision: str, batch: int) -> float:
        row = query_row(resolve_model(name), hardware="cpu", backend="torch", precision=precision, batch_size=batch)
        return float(np.exp(model.predict(feature_frame(pd.DataFrame([row])))[0]))

    for (name, precision), (a, b) in truth.items():
        for batch in (4, 32):  # between and beyond the measured batch sizes
            assert predict(name, precision, batch) == pytest.approx(a + b * batch, rel=1e-6)
    assert predict("vit-tiny", "fp32", 4) == pytest.approx(7.0)  # shifted through its measurement
    unseen = feature_frame(pd.DataFrame([query_row(resolve_model("resnet-tiny"), hardware="cpu", backend="torch",
                                                   precision="fp32", batch_size=4)]))
    assert model.predict(unseen)[0] == pytest.approx(model.general_.predict(unseen)[0])


class _ColumnRegressor:
    """A scikit-learn regressor on one feature column (the general model of the test above)."""

    def __init__(self, model: object = None, column: str = "log_batch_size") -> None:
        self.model, self.column = model, column

    def get_params(self, deep: bool = True) -> dict[str, object]:
        return {"model": self.model, "column": self.column}

    def set_params(self, **params: object) -> _ColumnRegressor:
        for key, value in params.items():
            setattr(self, key, value)
        return self

    def fit(self, X: pd.DataFrame, y: np.ndarray) -> _ColumnRegressor:
        from sklearn.base import clone

        self.fitted_ = clone(self.model).fit(X[[self.column]].to_numpy(dtype=float), y)
        return self

    def predict(self, X: pd.DataFrame) -> np.ndarray:
        return self.fitted_.predict(X[[self.column]].to_numpy(dtype=float))
