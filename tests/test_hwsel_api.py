"""hwsel's serving side: selection, prediction, fallback layers, config, distributed plans, CLI.

Every layer is exercised with real parts: benchmark records are real `BenchmarkRecord`s written
to a real DuckDB file (the sink the plugin uses) and to a Parquet snapshot; the registered layer
trains real champions (`hwsel.train`, 2 Optuna trials) into a SQLite MLflow registry in a
temporary directory. The records' numbers are made up on purpose (a CPU faster than a GPU at
small batches, as eager GPUs are launch bound) so the tests can say which answer is right.
"""

from __future__ import annotations

import json
import math
import os
import subprocess
import sys
import uuid
import warnings
from pathlib import Path

import pandas as pd
import pytest

import hwsel
from hwsel import (
    Predictor,
    analyze_model,
    distributed_training_config,
    load_config,
    predict_performance,
    prediction_matrix,
    select_hardware,
    selection_map,
)
from hwsel.cli import main as cli_main
from hwsel.layers.registered import GRID_BATCH_SIZES
from hwsel.resolution import ModelInfo, resolve_model
from pytest_hwbench.record import BenchmarkRecord, SessionInfo

REPO = Path(__file__).resolve().parents[1]
MODELS = ("bert-tiny", "gpt2-tiny", "vit-tiny")
BATCHES = (1, 4, 16)
SESSION = SessionInfo(session_id=uuid.uuid4().hex, started_at="2026-11-23T00:00:00+00:00", host="test")


def _latency(model: str, hardware: str, precision: str, batch: int) -> float:
    """Made-up but shaped like FACTS.md: the GPU is launch bound (flat ~6 ms), the CPU linear."""
    scale = {"bert-tiny": 1.0, "gpt2-tiny": 1.3, "vit-tiny": 0.8}[model]
    if hardware == "cuda":
        return (6.0 + 0.01 * batch) * (0.9 if precision == "fp16" else 1.0)
    return (0.5 + 0.6 * batch) * scale


def _records() -> list[BenchmarkRecord]:
    records = []
    for model in MODELS:
        info = resolve_model(model)
        for hardware, precisions, device in (("cpu", ("fp32",), "cpu"),
                                             ("cuda", ("fp32", "fp16"), "NVIDIA H100 80GB HBM3")):
            for precision in precisions:
                for batch in BATCHES:
                    for run, jitter in enumerate((0.97, 1.03)):
                        lat = _latency(model, hardware, precision, batch) * jitter
                        records.append(BenchmarkRecord(
                            case_id=f"{model}-{hardware}-{precision}-b{batch}", session_id=SESSION.session_id,
                            status="passed", model=model, family=info.family, model_type=info.model_type,
                            backend="torch", hardware=hardware, device_name=device, precision=precision,
                            mode="inference", batch_size=batch, sequence_length=info.sequence_length,
                            image_size=info.image_size, param_count=info.param_count,
                            flops_per_forward=info.flops_per_item * batch, threads=2 if hardware == "cpu" else None,
                            latency_ms_mean=lat, latency_ms_median=lat, latency_ms_min=lat * 0.9,
                            latency_ms_max=lat * 1.5, latency_ms_p90=lat * 1.2, latency_ms_p95=lat * 1.3,
                            iterations=50, throughput_items_per_s=batch / lat * 1e3,
                            peak_host_rss_mb=600.0 + batch, peak_device_memory_mb=(80.0 + batch)
                            if hardware == "cuda" else None, host=f"run{run}"))
    return records


@pytest.fixture(scope="module")
def records() -> list[BenchmarkRecord]:
    return _records()


@pytest.fixture(scope="module")
def duckdb_file(tmp_path_factory: pytest.TempPathFactory, records: list[BenchmarkRecord]) -> Path:
    from pytest_hwbench.sinks import DuckDBSink

    path = tmp_path_factory.mktemp("duck") / "hwbench.duckdb"
    sink = DuckDBSink(path)
    sink.open_session(SESSION)
    sink.write(records)
    sink.close("finished")
    return path


@pytest.fixture(scope="module")
def parquet_file(tmp_path_factory: pytest.TempPathFactory, records: list[BenchmarkRecord]) -> Path:
    from hwsel.data import snapshot

    return snapshot(pd.DataFrame([r.to_dict() for r in records]),
                    tmp_path_factory.mktemp("parquet") / "runs.parquet")


@pytest.fixture(scope="module")
def registry_uri(tmp_path_factory: pytest.TempPathFactory, parquet_file: Path) -> str:
    """A SQLite MLflow registry holding champions trained by `hwsel.train` (2 trials)."""
    from hwsel.train import train

    root = tmp_path_factory.mktemp("registry")
    uri = f"sqlite:///{root / 'mlflow.db'}"
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        result = train(str(parquet_file), tracking_uri=uri, trials=2, seed=0, progress=False,
                       snapshot_dir=root / "snapshots")
    assert set(result.targets) == {"latency", "throughput", "memory"}
    return uri



# --- the layers -------------------------------------------------------------------------------------

def test_rules_without_data_sklearn_mlflow_torch_or_pytest(tmp_path: Path) -> None:
    """The last layer needs nothing: run hwsel where sklearn, MLflow, torch and pytest are absent."""
    script = """
import sys
for name in ("pytest", "sklearn", "mlflow", "optuna", "torch", "transformers", "duckdb"):
    sys.modules[name] = None  # import fails as if not installed
import json
import math
from hwsel import Predictor, select_hardware, predict_performance
from hwsel.resolution import ModelInfo
info = ModelInfo("toy-bert", "embedding", "bert", 110_000_000, 2.2e10, 12, 768, 128)
rules = Predictor.load(layers=("measured", "registered", "rules"))
rec = select_hardware(info, batch_size=4, available_hardware=["cpu", "cuda"], predictor=rules)
pred = predict_performance(info, ["cpu"], batch_size=4, predictor=Predictor.load())["cpu"]
print(json.dumps({"rec": rec.to_dict(), "default_source": pred.source, "layers": rules.describe()}))
"""
    env = {k: v for k, v in os.environ.items() if k not in ("MLFLOW_TRACKING_URI", "HWSEL_CONFIG")}
    out = subprocess.run([sys.executable, "-c", script], cwd=tmp_path, env=env, capture_output=True, text=True,
                         timeout=120)
    assert out.returncode == 0, out.stderr
    data = json.loads(out.stdout.strip().splitlines()[-1])
    rec = data["rec"]
    assert rec["prediction_source"] == "rules"
    assert set(rec["prediction_sources"].values()) == {"rules"}
    assert rec["primary_recommendation"] in ("cpu", "cuda")
    assert "heuristic rules" in rec["explanation"] and "no benchmark data" in rec["explanation"]
    low, high = rec["all_scores"]["cpu"]["prediction"]["interval"]
    # an answer clamped up to this host's physical floor has the floor as its lower end too
    assert low <= rec["all_scores"]["cpu"]["prediction"]["latency_ms"] < high
    assert data["default_source"] == "roofline"  # no data, no registry: the roofline answers
    assert data["layers"]["measured"]["available"] is False and data["layers"]["registered"]["available"] is False


def test_roofline_layer_when_there_is_no_data_or_registry(empty_cwd: Path) -> None:
    predictor = Predictor.load()
    status = predictor.describe()
    assert not status["measured"]["available"] and "no mlruns/" in status["measured"]["note"]
    assert not status["registered"]["available"]
    preds = predict_performance("bert-base-uncased", ["cpu", "cuda"], batch_size=8, precision="fp16",
                                predictor=predictor)
    for hw, p in preds.items():
        assert p.source == "roofline" and p.hardware == hw
        assert p.interval[0] < p.latency_ms < p.interval[1]
        assert p.throughput == pytest.approx(8 / p.latency_ms * 1e3)
        assert p.memory_mb > resolve_model("bert-base").param_count * 2 / 2**20  # fp16 weights at least
    assert preds["cuda"].latency_ms < preds["cpu"].latency_ms
    assert not list(empty_cwd.iterdir()), "looking for a store must not create one"


def test_measured_layer_answers_exact_cases_from_duckdb(empty_cwd: Path, duckdb_file: Path) -> None:
    predictor = Predictor.load(duckdb_file)
    assert predictor.describe()["measured"]["rows"] == len(MODELS) * 3 * len(BATCHES) * 2
    pred = predict_performance("gpt2-tiny", ["cpu", "cuda"], batch_size=4, predictor=predictor)
    cpu = pred["cpu"]
    expected = _latency("gpt2-tiny", "cpu", "fp32", 4)
    assert cpu.source == "measured" and cpu.backend == "torch"
    assert cpu.latency_ms == pytest.approx(expected)  # median of the two runs (x0.97, x1.03)
    assert cpu.interval == pytest.approx((expected * 0.97 * 0.9, expected * 1.03 * 1.3))  # min .. p95
    assert cpu.memory_mb == pytest.approx(604.0)  # host RSS on the CPU
    assert pred["cuda"].memory_mb == pytest.approx(84.0)  # device peak on the GPU
    assert "2 run(s)" in cpu.detail
    # not measured: batch 2, and mps -> the next layers
    other = predict_performance("gpt2-tiny", ["cpu", "mps"], batch_size=2, predictor=predictor)
    assert {p.source for p in other.values()} == {"roofline"}


def test_measured_layer_reads_parquet_too(empty_cwd: Path, parquet_file: Path) -> None:
    predictor = Predictor.load(parquet_file)
    pred = predictor.predict("vit-tiny", "cuda", batch_size=16, precision="fp16")["cuda"]
    assert pred.source == "measured"
    assert pred.latency_ms == pytest.approx(_latency("vit-tiny", "cuda", "fp16", 16))


def test_select_prefers_the_measured_faster_hardware(empty_cwd: Path, duckdb_file: Path) -> None:
    predictor = Predictor.load(duckdb_file)
    small = select_hardware("bert-tiny", batch_size=1, available_hardware=["cpu", "cuda"], predictor=predictor)
    assert small.primary_recommendation == "cpu" and small.fallback_options == ("cuda",)
    assert small.prediction_source == "measured"
    assert small.all_scores["cpu"].score > small.all_scores["cuda"].score
    assert "cpu scores best" in small.explanation and "measured" in small.explanation
    big = select_hardware("bert-tiny", batch_size=16, available_hardware=["cpu", "cuda"], predictor=predictor)
    assert big.primary_recommendation == "cuda"  # 6.2 ms on the GPU vs 10.1 ms on the CPU
    assert big.compatible_hardware == ("cuda", "cpu")
    assert big.to_dict()["all_scores"]["cuda"]["predictions"]["latency"] == pytest.approx(
        _latency("bert-tiny", "cuda", "fp32", 16))


def _tie_records() -> list[BenchmarkRecord]:
    """bert-tiny measured on cpu and cuda: at batch 8 the CPU is faster (5.0 ms, 4.5-6.0) than the GPU
    (5.5 ms, 5.0-6.6) within their spreads and needs more memory (600 MiB against 90 MiB); at
    batch 1 the CPU's 1.0 ms (0.9-1.2) is clearly faster than the GPU's 5.0 ms (4.5-6.0)."""
    info = resolve_model("bert-tiny")
    out = []
    for hardware, device, latency, memory in (("cpu", "cpu", {1: 1.0, 8: 5.0}, 600.0),
                                              ("cuda", "NVIDIA H100 80GB HBM3", {1: 5.0, 8: 5.5}, 90.0)):
        for batch, lat in latency.items():
            out.append(BenchmarkRecord(
                case_id=f"bert-tiny-{hardware}-fp32-b{batch}", session_id=SESSION.session_id, status="passed",
                model="bert-tiny", family=info.family, model_type=info.model_type, backend="torch",
                hardware=hardware, device_name=device, precision="fp32", mode="inference", batch_size=batch,
                param_count=info.param_count, flops_per_forward=info.flops_per_item * batch,
                latency_ms_median=lat, latency_ms_min=lat * 0.9, latency_ms_p95=lat * 1.2,
                throughput_items_per_s=batch / lat * 1e3, iterations=50,
                peak_host_rss_mb=memory if hardware == "cpu" else 700.0,
                peak_device_memory_mb=memory if hardware == "cuda" else None))
    return out


def test_select_says_tie_when_the_difference_lies_inside_the_intervals(empty_cwd: Path,
                                                                       capsys: pytest.CaptureFixture[str]) -> None:
    """A tie is ranked by predicted memory (then energy), not by the faster prediction; a clear
    difference is decided as before."""
    from hwsel.data import snapshot
    from hwsel.select import TIE_RULE

    path = snapshot(pd.DataFrame([r.to_dict() for r in _tie_records()]), empty_cwd / "tie.parquet")
    predictor = Predictor.load(path)
    decided = select_hardware("bert-tiny", batch_size=1, available_hardware=["cpu", "cuda"], predictor=predictor)
    assert decided.tie == () and decided.primary_recommendation == "cpu" and "Tie" not in decided.explanation
    rec = select_hardware("bert-tiny", batch_size=8, available_hardware=["cpu", "cuda"], predictor=predictor)
    cpu, cuda = rec.all_scores["cpu"].prediction, rec.all_scores["cuda"].prediction
    assert cpu is not None and cuda is not None and {cpu.source, cuda.source} == {"measured"}
    assert cpu.latency_ms < cuda.latency_ms and cuda.interval[0] <= cpu.interval[1]  # the difference is inside
    assert rec.all_scores["cpu"].score > rec.all_scores["cuda"].score  # the score alone would say cpu
    assert rec.tie == ("cuda", "cpu") and rec.primary_recommendation == "cuda" and rec.fallback_options == ("cpu",), rec.all_scores
    assert rec.tie_rule == TIE_RULE and "memory" in TIE_RULE and "energy" in TIE_RULE
    assert rec.explanation.startswith("Tie between cuda, cpu") and rec.to_dict()["tie"] == ["cuda", "cpu"]
    # a preference the configuration states is not a tie to break: a CPU 100x as expensive is decided
    costly = empty_cwd / "costly.toml"
    costly.write_text("[hardware.cpu]\ncost_factor = 100.0\n")
    rec = select_hardware("bert-tiny", batch_size=8, available_hardware=["cpu", "cuda"], predictor=predictor,
                          config=costly)
    assert rec.tie == () and rec.primary_recommendation == "cuda"
    code, out, _ = _cli(capsys, "select", "--model", "bert-tiny", "--batch-size", "8", "--hardware", "cpu", "cuda",
                        "--source", str(path))
    assert code == 0 and "tie:       cuda, cpu" in out and "primary:   cuda" in out
    code, out, _ = _cli(capsys, "select", "--model", "bert-tiny", "--batch-size", "8", "--hardware", "cpu", "cuda",
                        "--source", str(path), "--json")
    assert code == 0 and json.loads(out)["tie"] == ["cuda", "cpu"]


def _precision_records() -> list[BenchmarkRecord]:
    """bert-tiny measured on an H100 at three precisions: at batch 8, fp16 (4.8 ms, 4.3-5.8, 120 MiB)
    and bf16 (5.0 ms, 4.5-6.0, 100 MiB) lie within each other's spread and fp32 (20 ms) is clearly
    slower; at batch 1, fp16's 1.0 ms (0.9-1.2) is clearly faster than bf16's 3.0 and fp32's 6.0."""
    info = resolve_model("bert-tiny")
    out = []
    for precision, latency, memory in (("fp32", {1: 6.0, 8: 20.0}, 200.0), ("fp16", {1: 1.0, 8: 4.8}, 120.0),
                                       ("bf16", {1: 3.0, 8: 5.0}, 100.0)):
        for batch, lat in latency.items():
            out.append(BenchmarkRecord(
                case_id=f"bert-tiny-cuda-{precision}-b{batch}", session_id=SESSION.session_id, status="passed",
                model="bert-tiny", family=info.family, model_type=info.model_type, backend="torch",
                hardware="cuda", device_name="NVIDIA H100 80GB HBM3", precision=precision, mode="inference",
                batch_size=batch, param_count=info.param_count, flops_per_forward=info.flops_per_item * batch,
                latency_ms_median=lat, latency_ms_min=lat * 0.9, latency_ms_p95=lat * 1.2,
                throughput_items_per_s=batch / lat * 1e3, iterations=50, peak_host_rss_mb=700.0,
                peak_device_memory_mb=memory))
    return out


def test_select_precision_decides_or_says_tie(empty_cwd: Path, capsys: pytest.CaptureFixture[str]) -> None:
    """The fastest precision when the difference is clear; a tie ranked by memory when the
    difference lies inside the intervals; a precision the target does not run is left out with
    its reason; bad input names the field."""
    from hwsel.data import snapshot
    from hwsel.ranking import PRECISION_RULE

    path = snapshot(pd.DataFrame([r.to_dict() for r in _precision_records()]), empty_cwd / "precisions.parquet")
    predictor = Predictor.load(path)
    h100 = "NVIDIA H100 80GB HBM3"  # named, so that a GPU this test runs on is not asked
    decided = hwsel.select_precision("bert-tiny", "cuda", batch_size=1, device=h100, predictor=predictor)
    assert {p.source for p in decided.predictions.values()} == {"measured"}
    assert decided.primary == "fp16" and decided.ranked == ("fp16", "bf16", "fp32") and decided.tie == ()
    assert decided.explanation.startswith("fp16 is fastest")
    tied = hwsel.select_precision("bert-tiny", "cuda", batch_size=8, device=h100, predictor=predictor)
    fp16, bf16 = tied.predictions["fp16"], tied.predictions["bf16"]
    assert fp16.latency_ms < bf16.latency_ms and bf16.interval[0] <= fp16.interval[1]  # the difference is inside
    assert tied.tie == ("bf16", "fp16") and tied.primary == "bf16" and tied.ranked == ("bf16", "fp16", "fp32")
    assert tied.rule == PRECISION_RULE and "memory" in PRECISION_RULE and "energy" in PRECISION_RULE
    assert tied.explanation.startswith("Tie between bf16, fp16") and tied.to_dict()["tie"] == ["bf16", "fp16"]
    # a target configured without bf16: bf16 is left out, and fp16 is decided
    narrow = empty_cwd / "narrow.toml"
    narrow.write_text('[precision_support]\ncuda = ["fp32", "fp16"]\n')
    choice = hwsel.select_precision("bert-tiny", "cuda", batch_size=8, device=h100, predictor=predictor,
                                    config=narrow)
    assert choice.primary == "fp16" and choice.ranked == ("fp16", "fp32") and choice.tie == ()
    assert "cuda does not run bf16" in choice.incompatible["bf16"] and "bf16: cuda does not run bf16" in choice.explanation
    with pytest.raises(hwsel.QuestionError, match="precision") as bad:
        hwsel.select_precision("bert-tiny", "cuda", precisions=["fp32", "fp8"], predictor=predictor)
    assert "'fp8'" in str(bad.value)
    with pytest.raises(hwsel.QuestionError, match="precisions must be a non-empty list"):
        hwsel.select_precision("bert-tiny", "cuda", precisions=[], predictor=predictor)
    code, out, _ = _cli(capsys, "precision", "--model", "bert-tiny", "--hardware", "cuda", "--batch-size", "8",
                        "--device", h100, "--source", str(path))
    assert code == 0 and "tie:       bf16, fp16" in out and "primary:   bf16" in out, out
    code, out, _ = _cli(capsys, "precision", "--model", "bert-tiny", "--hardware", "cuda", "--batch-size", "1",
                        "--device", h100, "--precisions", "fp32", "fp16", "--source", str(path), "--json")
    assert code == 0 and json.loads(out)["primary"] == "fp16" and json.loads(out)["ranked"] == ["fp16", "fp32"]


def test_select_precision_on_this_machine_keeps_to_what_was_detected(empty_cwd: Path) -> None:
    """Asked about this machine's CPU (no device named), a precision its detection does not list
    is left out with the detection's reason; the answer is one of those detected."""
    from pytest_hwbench.hardware import detect_hardware

    cpu = detect_hardware(targets=("cpu",)).targets["cpu"]
    choice = hwsel.select_precision("bert-tiny", "cpu", batch_size=1, precisions=("fp32", "fp16", "bf16", "int8"))
    for precision in ("fp32", "fp16", "bf16", "int8"):
        if precision in cpu.precisions:
            assert precision not in choice.incompatible, choice.incompatible
        else:
            assert choice.incompatible[precision] == cpu.unsupported_precision(precision)
    assert choice.primary in cpu.precisions and set(choice.ranked) <= set(cpu.precisions)


@pytest.mark.e2e
def test_registered_layer_answers_unmeasured_cases_in_its_domain(empty_cwd: Path, registry_uri: str,
                                                                  duckdb_file: Path) -> None:
    predictor = Predictor.load(duckdb_file, tracking_uri=registry_uri)
    status = predictor.describe()
    assert status["registered"]["available"] and status["registered"]["latency"]["version"] == "1"
    preds = predictor.predict("gpt2-tiny", ["cpu", "cuda", "mps"], batch_size=8)
    assert preds["cpu"].source == "registered" and preds["cuda"].source == "registered"
    assert preds["mps"].source == "roofline"  # the champion never saw mps: it does not guess
    for p in (preds["cpu"], preds["cuda"]):
        assert p.interval[0] <= p.latency_ms <= p.interval[1]
        assert p.throughput == pytest.approx(8 / p.latency_ms * 1e3)
        assert "champion model version 1" in p.detail
    # exactly what the champion says for that case on the device the answer names (issue 10: the
    # device is part of the case; its accuracy is hwsel.train's business)
    from hwsel.features import query_frame

    for hw in ("cpu", "cuda"):
        row = query_frame(resolve_model("gpt2-tiny"), hardware=hw, backend="torch", precision="fp32", batch_size=8,
                          device_name=preds[hw].device)
        champion = predictor.champions["latency"]
        assert preds[hw].latency_ms == pytest.approx(float(champion.predict(row)[0]))
        low, high = champion.interval(row)
        assert preds[hw].interval == pytest.approx((float(low[0]), float(high[0])))
    # an exact case is still measured, and precision outside the training data is not registered
    assert predictor.predict("gpt2-tiny", "cpu", batch_size=4)["cpu"].source == "measured"
    assert predictor.predict("gpt2-tiny", "cpu", batch_size=8, precision="bf16")["cpu"].source == "roofline"

    rec = select_hardware("bert-tiny", batch_size=8, available_hardware=["cpu", "cuda"], predictor=predictor)
    assert rec.prediction_source == "registered" and "registered model" in rec.explanation
    # after the first question about a case, the registered models never score again: grid batch
    # sizes are looked up, others interpolate between their grid neighbours (log-log)
    scored = predictor.scored_rows
    for batch in list(GRID_BATCH_SIZES) + [3, 5, 6, 7, 12, 100, 1000]:
        select_hardware("bert-tiny", batch_size=batch, available_hardware=["cpu", "cuda"], predictor=predictor)
    assert predictor.scored_rows == scored
    registered = Predictor(champions=predictor.champions, champion_domain=predictor.built().registered_.domain,
                           layers=("registered", "rules"))  # no measured answers at the grid points
    two, three, four = (registered.predict("gpt2-tiny", "cuda", batch_size=b)["cuda"] for b in (2, 3, 4))
    assert {two.source, four.source} == {"registered"}
    assert three.source == "registered" and "interpolated" in three.detail
    t = math.log(3 / 2) / math.log(2)
    assert math.log(three.latency_ms) == pytest.approx((1 - t) * math.log(two.latency_ms) + t * math.log(four.latency_ms))
    far = registered.predict("gpt2-tiny", "cuda", batch_size=2048)["cuda"]
    row = query_frame(resolve_model("gpt2-tiny"), hardware="cuda", backend="torch", precision="fp32", batch_size=2048,
                      device_name=far.device)
    raw = float(predictor.champions["latency"].predict(row)[0])  # beyond the grid: scored as asked ...
    assert far.latency_ms == pytest.approx(min(raw, 86_400_000.0))  # ... within the one-day ceiling
    assert (raw > 86_400_000.0) == ("capped at" in far.detail)


def test_registered_layer_without_measured_data(empty_cwd: Path, registry_uri: str) -> None:
    predictor = Predictor.load(tracking_uri=registry_uri)
    assert not predictor.describe()["measured"]["available"]
    pred = predictor.predict("bert-tiny", "cuda", batch_size=4)["cuda"]
    assert pred.source == "registered"  # the domain comes from the training snapshot, not from loaded data


# --- invalid input ------------------------------------------------------------------------------

@pytest.mark.parametrize(("kwargs", "error", "words"), [
    ({"batch_size": 0}, ValueError, ["batch_size", "0"]),
    ({"batch_size": 2.5}, ValueError, ["batch_size", "2.5"]),
    ({"available_hardware": ["cpu", "tpu"]}, ValueError, ["'tpu'", "cuda", "cpu"]),
    ({"available_hardware": []}, ValueError, ["no hardware", "accepted"]),
    ({"precision": "fp8"}, ValueError, ["'fp8'", "fp32, fp16, bf16, int8"]),
    ({"mode": "serving"}, ValueError, ["'serving'", "inference, train"]),
    ({"model": "bert-bse"}, KeyError, ["'bert-bse'", "bert-base", "--config"]),
])
def test_invalid_input_names_the_value_and_what_is_accepted(empty_cwd: Path, kwargs: dict, error: type,
                                                             words: list[str]) -> None:
    predictor = Predictor.load(layers=("rules",))
    args = {"model": "bert-tiny", "available_hardware": ["cpu"], **kwargs}
    with pytest.raises(error) as info:
        select_hardware(args.pop("model"), predictor=predictor, **args)
    message = str(info.value.args[0])
    for word in words:
        assert word in message, message


def test_invalid_task_layer_and_distributed_input(empty_cwd: Path) -> None:
    predictor = Predictor.load(layers=("rules",))
    with pytest.raises(ValueError, match="unknown task 'dance'.*classification"):
        select_hardware("bert-tiny", available_hardware=["cpu"], task_type="dance", predictor=predictor)
    with pytest.raises(ValueError, match="unknown layer 'oracle'.*measured, registered, roofline, rules"):
        Predictor(layers=("oracle",))
    with pytest.raises(ValueError, match="gpus must be.*got 0"):
        distributed_training_config("gpt2", 0, 8, 16)
    with pytest.raises(ValueError, match="max_memory_gb.*nan"):
        distributed_training_config("gpt2", 8, 8, float("nan"))
    with pytest.raises(ValueError, match="int8 is not a training precision"):
        distributed_training_config("gpt2", 8, 8, 16, precision="int8")
    # int8 is inference-only quantization: no training step to predict or to place
    for ask in (lambda: predict_performance("bert-tiny", hardware=["cpu"], precision="int8", mode="train",
                                            predictor=predictor),
                lambda: select_hardware("bert-tiny", available_hardware=["cpu"], precision="int8", mode="training",
                                        predictor=predictor)):
        with pytest.raises(ValueError, match="int8 is not a training precision .*inference-only.*fp32, fp16 or bf16"):
            ask()
    assert predict_performance("bert-tiny", hardware=["cpu"], precision="int8", predictor=predictor)


# --- config -------------------------------------------------------------------------------------

def test_config_from_toml_argument_and_env(empty_cwd: Path, monkeypatch: pytest.MonkeyPatch,
                                           duckdb_file: Path) -> None:
    assert load_config().origin == "defaults"
    path = empty_cwd / "hwsel.toml"
    path.write_text('[weights.inference]\nlatency = 2\nthroughput = 1\nmemory = 1\ncompatibility = 0\n'
                    '[hardware.cpu]\ncost_factor = 100.0\n'
                    '[thresholds]\nbatch_size = { medium = 4 }\n')
    cfg = load_config(path)
    assert cfg.weights["inference"].latency == pytest.approx(0.5)  # normalised
    assert cfg.weights["training"] == load_config().weights["training"]  # untouched defaults stay
    assert cfg.thresholds.batch_size_category(4) == "medium"
    # a CPU 100x as expensive loses although it is measured faster
    predictor = Predictor.load(duckdb_file, config=path)
    rec = select_hardware("bert-tiny", batch_size=1, available_hardware=["cpu", "cuda"], predictor=predictor)
    assert rec.primary_recommendation == "cuda"
    assert rec.all_scores["cpu"].preference_factor == pytest.approx(0.01)
    monkeypatch.setenv("HWSEL_CONFIG", str(path))
    assert load_config().origin == str(path)


def test_config_accepts_the_predecessors_json(empty_cwd: Path) -> None:
    path = empty_cwd / "old.json"
    path.write_text(json.dumps({
        "selection_criteria": {"inference": {"latency_weight": 0.4, "throughput_weight": 0.3, "memory_weight": 0.2,
                                             "compatibility_weight": 0.1},
                               "training": {"throughput_weight": 0.4, "convergence_weight": 0.3,
                                            "memory_weight": 0.2, "compatibility_weight": 0.1}},
        "hardware_preferences": {"cuda": {"cost_factor": 0.7, "availability_factor": 0.8, "power_factor": 0.4}},
        "batch_size_thresholds": {"small": 1, "medium": 8, "large": 32},
        "model_size_categories": {"small": 100000000, "medium": 1000000000, "large": 10000000000},
    }))
    cfg = load_config(path)
    assert cfg.hardware["cuda"].factor == pytest.approx(0.8 / 0.7)
    # keys a file leaves out keep their defaults (training latency 0.1), the rest are normalised
    assert cfg.weights["training"].throughput == pytest.approx(0.4 / 0.8)


@pytest.mark.parametrize(("text", "words"), [
    ('[weights.inference]\nlatncy = 1\n', ["latncy", "accepted: latency, throughput, memory, compatibility"]),
    ('[weights.serving]\nlatency = 1\n', ["'serving'", "inference, train"]),
    ('[weights.inference]\nlatency = -1\n', ["weights.inference", "latency", ">= 0", "-1"]),
    ('[hardware.cuda]\ncost_factor = 0\n', ["hardware.cuda.cost_factor", "> 0"]),
    ('[hardware.cuda]\nspeed = 2\n', ["hardware.cuda", "'speed'", "cost_factor"]),
    ('[compatibility.vision]\ncuda = "great"\n', ["compatibility.vision.cuda", "'great'", "high, medium, low, none"]),
    ('[thresholds]\nbatch_size = { small = 64 }\n', ["thresholds.batch_size", "small <= medium <= large"]),
    ('colour = "red"\n', ["unknown key 'colour'", "weights, hardware"]),
    ('[weights\n', ["not valid TOML"]),
])
def test_config_errors_name_the_key_and_what_is_accepted(empty_cwd: Path, text: str, words: list[str]) -> None:
    path = empty_cwd / "bad.toml"
    path.write_text(text)
    with pytest.raises(ValueError) as info:
        load_config(path)
    for word in words:
        assert word in str(info.value), str(info.value)
    assert "bad.toml" in str(info.value)


def test_compatibility_precision_memory_and_training_rules(empty_cwd: Path) -> None:
    predictor = Predictor.load(layers=("rules",))
    rec = select_hardware("bert-base", batch_size=8, mode="training", available_hardware=["cpu", "qnn", "openvino"],
                          predictor=predictor)
    assert rec.compatible_hardware == ("cpu",)
    assert "inference runtime" in rec.all_scores["qnn"].reason
    rec = select_hardware("bert-base", precision="bf16", available_hardware=["qnn", "cpu"], predictor=predictor)
    assert "qnn does not run bf16" in rec.all_scores["qnn"].reason
    huge = ModelInfo("huge", "text_generation", "llama", 70_000_000_000, 1.4e11, 80, 8192, 128)
    rec = select_hardware(huge, batch_size=1, available_hardware=["cuda", "mps"], precision="fp16",
                          predictor=predictor)
    assert rec.primary_recommendation is None
    assert "needs about" in rec.all_scores["cuda"].reason and "80 GiB" in rec.all_scores["cuda"].reason
    assert "No compatible hardware" in rec.explanation


# --- distributed --------------------------------------------------------------------------------

def test_distributed_uses_ddp_when_a_replica_fits() -> None:
    plan = distributed_training_config("gpt2", gpus=8, batch_size=16, max_memory_gb=16)
    assert plan.distributed_strategy == "DDP" and plan.fits
    assert not plan.activation_checkpointing and plan.gradient_accumulation_steps == 1
    assert plan.global_batch_size == 128 and plan.mixed_precision
    m = plan.estimated_memory
    params = resolve_model("gpt2").param_count
    assert m.parameters_gb == pytest.approx(params * 2 / 2**30)  # bf16 weights
    assert m.optimizer_gb == pytest.approx(params * 12 / 2**30)  # fp32 master + two Adam moments
    assert m.per_gpu_gb == pytest.approx(m.parameters_gb + m.gradients_gb + m.optimizer_gb + m.activations_gb + 0.5)
    assert m.per_gpu_gb < 16 * 0.9
    assert plan.to_dict()["estimated_memory"]["per_gpu_gb"] == pytest.approx(m.per_gpu_gb, abs=1e-3)


def test_distributed_switches_to_fsdp_and_checkpointing_when_memory_is_short() -> None:
    seven_b = ModelInfo("llama-7b-like", "text_generation", "llama", 6_700_000_000, 1.34e10 * 128, 32, 4096, 2048)
    plan = distributed_training_config(seven_b, gpus=8, batch_size=8, max_memory_gb=80)
    assert plan.distributed_strategy == "FSDP" and plan.sharding_strategy == "FULL_SHARD" and plan.fits
    assert plan.activation_checkpointing  # 2048 tokens x 32 layers of activations do not fit otherwise
    assert any(step.startswith("DDP") for step in plan.steps)  # it says what did not fit
    tight = distributed_training_config(seven_b, gpus=8, batch_size=8, max_memory_gb=24)
    assert tight.distributed_strategy == "FSDP" and tight.gradient_accumulation_steps > 1
    assert tight.micro_batch_size * tight.gradient_accumulation_steps == 8
    assert tight.global_batch_size == 64 and tight.fits
    single = distributed_training_config(seven_b, gpus=1, batch_size=1, max_memory_gb=8)
    assert not single.fits and "does not fit" in single.explanation and "--gpus" in single.explanation


# --- bulk predictions (their speed is printed by benchmarks/predictor_quality.py) -------------------

def test_prediction_matrix_of_10000_configurations(empty_cwd: Path, duckdb_file: Path) -> None:
    predictor = Predictor.load(duckdb_file)
    models = ["bert-tiny", "gpt2-tiny", "vit-tiny", "bert-base", "gpt2"]
    # the native targets (7): the web ones (wasm, webgpu, webnn; issue 17) would make it 14400
    hardware = [hw for hw in predictor.config.hardware_names if hw not in ("wasm", "webgpu", "webnn")]
    batches = list(range(1, 73))
    precisions = ["fp32", "fp16", "bf16", "int8"]
    matrix = prediction_matrix(models, hardware, batches, precisions, predictor=predictor)
    assert matrix["configurations"] == 10080
    assert matrix["sources"]["measured"] == len(MODELS) * 3 * len(BATCHES)  # cpu fp32, cuda fp32 and fp16
    cell = matrix["models"]["bert-tiny"]["predictions"]["cuda"]["16"]["fp16"]
    assert cell["source"] == "measured" and cell["latency_mean"] == pytest.approx(
        _latency("bert-tiny", "cuda", "fp16", 16))


def test_selection_map_analysis_and_task(empty_cwd: Path, duckdb_file: Path) -> None:
    predictor = Predictor.load(duckdb_file)
    smap = selection_map(["embedding", "vision"], [1, 16], ["cpu", "cuda"], predictor=predictor)
    emb = smap["model_families"]["embedding"]
    assert set(emb["model_sizes"]) == {"small", "medium", "large"}
    assert emb["model_sizes"]["large"]["param_count"] > 1_000_000_000
    assert emb["model_sizes"]["small"]["inference"]["primary"] in ("cpu", "cuda")
    assert set(emb["model_sizes"]["medium"]["training"]["batch_sizes"]) == {"1", "16"}
    assert emb["inference"]["batch_sizes"]["16"]["fallbacks"]
    json.dumps(smap, allow_nan=False)

    report = analyze_model("bert-tiny", [1, 16], ["cpu", "cuda"], predictor=predictor)
    assert report["inference"]["recommendations"]["1"]["primary"] == "cpu"
    assert report["inference"]["performance"]["1"]["cpu"]["source"] == "measured"
    assert report["training"]["performance"]["16"]["cuda"]["source"] == "roofline"

    rec = select_hardware("bert-tiny", batch_size=4, available_hardware=["cpu", "cuda"], task_type="fine_tuning",
                          predictor=predictor)
    assert rec.mode == "train" and rec.task_type == "fine_tuning" and "task fine_tuning" in rec.explanation
    # a task sets the mode: naming its own mode is the same question, another one is refused
    assert select_hardware("bert-tiny", batch_size=4, mode="training", available_hardware=["cpu", "cuda"],
                           task_type="fine_tuning", predictor=predictor).to_dict() == rec.to_dict()
    with pytest.raises(ValueError, match=r"task classification sets the mode itself \(inference\); mode train would"):
        select_hardware("bert-tiny", mode="train", task_type="classification", predictor=predictor)


def test_public_api_is_declared() -> None:
    for name in hwsel.__all__:
        assert hasattr(hwsel, name), name
    from pytest_hwbench.hardware import detect_hardware

    # probed once per process and target: the same findings, whichever door asks
    assert hwsel.detect_hardware().targets == detect_hardware().targets
    assert all(a is b for a, b in zip(hwsel.detect_hardware().targets.values(),
                                      detect_hardware().targets.values(), strict=True))


# --- CLI ----------------------------------------------------------------------------------------

def _cli(capsys: pytest.CaptureFixture[str], *args: str) -> tuple[int, str, str]:
    code = cli_main(list(args))
    out = capsys.readouterr()
    return code, out.out, out.err


def test_cli_commands(empty_cwd: Path, duckdb_file: Path, capsys: pytest.CaptureFixture[str]) -> None:
    code, out, _ = _cli(capsys, "select", "--model", "bert-tiny", "--batch-size", "1", "--hardware", "cpu", "cuda",
                        "--source", str(duckdb_file), "--json")
    assert code == 0 and json.loads(out)["primary_recommendation"] == "cpu"
    code, out, _ = _cli(capsys, "select", "--model", "bert-tiny", "--hardware", "cpu", "cuda",
                        "--source", str(duckdb_file))
    assert code == 0 and "primary:   cpu" in out and "measured" in out
    code, out, _ = _cli(capsys, "predict", "--model", "t5-small", "--hardware", "cuda", "--batch-size", "16",
                        "--precision", "fp16", "--json")
    data = json.loads(out)
    assert code == 0 and data["predictions"]["cuda"]["source"] == "roofline"
    assert data["predictions"]["cuda"]["interval"][0] < data["predictions"]["cuda"]["latency_ms"]
    code, out, _ = _cli(capsys, "map", "--output", "selection_map.json", "--families", "audio", "--batch-sizes", "1",
                        "8")
    assert code == 0 and json.loads((empty_cwd / "selection_map.json").read_text())["model_families"]["audio"]
    code, out, _ = _cli(capsys, "matrix", "--output", "out/matrix.json", "--models", "bert-tiny", "gpt2-tiny")
    matrix = json.loads((empty_cwd / "out" / "matrix.json").read_text())
    assert code == 0 and set(matrix["models"]) == {"bert-tiny", "gpt2-tiny"}
    code, out, _ = _cli(capsys, "distributed", "--model", "gpt2", "--gpus", "8", "--batch-size", "16",
                        "--max-memory-gb", "16", "--json")
    assert code == 0 and json.loads(out)["distributed_strategy"] == "DDP"
    code, out, _ = _cli(capsys, "analyze", "--model", "bert-tiny", "--hardware", "cpu", "--modes", "inference",
                        "--json")
    assert code == 0 and json.loads(out)["inference"]["recommendations"]["1"]["primary"] == "cpu"


@pytest.mark.parametrize(("args", "words"), [
    (["select", "--model", "bert-bse"], ["unknown model 'bert-bse'", "bert-base"]),
    (["select", "--model", "bert-tiny", "--hardware", "tpu"], ["unknown hardware 'tpu'", "accepted"]),
    (["predict", "--model", "bert-tiny", "--precision", "fp8"], ["unknown precision 'fp8'"]),
    (["select", "--model", "bert-tiny", "--selection-config", "missing.toml"], ["missing.toml", "does not exist"]),
    (["distributed", "--model", "gpt2", "--gpus", "0"], ["--gpus", "0"]),
    (["select", "--model", "bert-tiny", "--batch-size", "0"], ["--batch-size", "0"]),
])
def test_cli_bad_input_exits_2_and_names_the_fix(empty_cwd: Path, capsys: pytest.CaptureFixture[str],
                                                 args: list[str], words: list[str]) -> None:
    try:
        code, _, err = _cli(capsys, *args)
    except SystemExit as exc:  # argparse's own checks
        code, err = exc.code, capsys.readouterr().err
    assert code == 2
    for word in words:
        assert word in err, err


@pytest.mark.parametrize("command", ["train", "select", "predict", "map", "matrix", "distributed", "analyze",
                                     "serve"])
def test_cli_help(command: str, capsys: pytest.CaptureFixture[str]) -> None:
    with pytest.raises(SystemExit) as info:
        cli_main([command, "--help"])
    assert info.value.code == 0
    assert "usage: hwsel " + command in capsys.readouterr().out


@pytest.mark.e2e
def test_cli_train_registers_new_versions(empty_cwd: Path, registry_uri: str, parquet_file: Path,
                                          capsys: pytest.CaptureFixture[str]) -> None:
    # a copy of the registry, so the other tests keep version 1 as champion
    db = Path(registry_uri.removeprefix("sqlite:///"))
    copy = empty_cwd / "mlflow.db"
    copy.write_bytes(db.read_bytes())
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        code, out, err = _cli(capsys, "train", "--source", str(parquet_file), "--tracking-uri", f"sqlite:///{copy}",
                              "--trials", "1", "--no-progress", "--json")
    assert code == 0, err
    data = json.loads(out)
    assert 0 < data["rows"] <= len(MODELS) * 3 * len(BATCHES) * 2  # hwsel.train may pool repeated runs
    assert {t: r["version"] for t, r in data["targets"].items()} == {"latency": "2", "throughput": "2", "memory": "2"}
    code, _, err = _cli(capsys, "train", "--source", "missing.parquet", "--tracking-uri", f"sqlite:///{copy}")
    assert code == 2 and "missing.parquet" in err


@pytest.mark.e2e
def test_cli_runs_as_a_module(empty_cwd: Path) -> None:
    env = {k: v for k, v in os.environ.items() if k not in ("MLFLOW_TRACKING_URI", "HWSEL_CONFIG")}
    ok = subprocess.run([sys.executable, "-m", "hwsel", "select", "--model", "bert-tiny", "--hardware", "cpu", "qnn",
                         "--json"], cwd=empty_cwd, env=env, capture_output=True, text=True, timeout=120)
    assert ok.returncode == 0, ok.stderr
    assert json.loads(ok.stdout)["primary_recommendation"] in ("cpu", "qnn")
    bad = subprocess.run([sys.executable, "-m", "hwsel", "select", "--model", "nope-model"], cwd=empty_cwd, env=env,
                         capture_output=True, text=True, timeout=120)
    assert bad.returncode == 2 and "unknown model 'nope-model'" in bad.stderr
