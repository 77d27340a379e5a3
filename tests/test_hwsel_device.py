"""Issue 10, part 0: a hardware question names a kind *and* a device, and a backend.

Real parts only: `tests/data/h100_subset.jsonl` holds 32 spool records measured on an NVIDIA H100
80GB HBM3 (from the evidence run of 2026-11-23: eager fp32 sweeps of five models, and bert-base
and gpt2 at fp16 on torch, torch-compile and torch-compile-ro); the CPU side is a slice of the
committed `benchmarks/data/cpu_runs.parquet`. `hwsel train` runs as a real process on both at
once and registers real champions in a SQLite MLflow store in a temporary directory.
"""

from __future__ import annotations

import dataclasses
import json
import math
import os
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

from hwsel import Predictor, predict_performance, prediction_matrix, select_hardware, selection_map
from hwsel.cli import main as cli_main
from hwsel.cli_parser import build_parser
from hwsel.data import CONFIG_KEYS, load_runs, rows_text, snapshot, training_table
from hwsel.features import query_frame
from hwsel.resolution import resolve_model

REPO = Path(__file__).resolve().parents[1]
H100_RECORDS = REPO / "tests" / "data" / "h100_subset.jsonl"
CPU_SNAPSHOT = REPO / "benchmarks" / "data" / "cpu_runs.parquet"
H100 = "NVIDIA H100 80GB HBM3"
#: Median latencies (ms) of records in h100_subset.jsonl.
GPT2_FP32_B128 = 104.60511779785156
TINYLLAMA_FP32_B128 = 774.5848693847656
BERT_FP16_B1 = {"torch": 7.19, "torch-compile-ro": 0.57}
#: Noise MLflow and SQLAlchemy printed on every `hwsel train` / load before issue 10.
NOISE = ("pickle or cloudpickle", "noload", "Downloading artifacts", "SADeprecationWarning")


def _env() -> dict[str, str]:
    return {k: v for k, v in os.environ.items() if k not in ("MLFLOW_TRACKING_URI", "HWSEL_CONFIG")}


def _cuda_here() -> str | None:
    """The CUDA device this machine has, if any (the default device then)."""
    from pytest_hwbench.hardware import detect_hardware

    cuda = detect_hardware().targets.get("cuda")
    return cuda.devices[0].name if cuda is not None and cuda.available and cuda.devices else None


@pytest.fixture(scope="module")
def cpu_parquet(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """Eager CPU runs of three tiny models at batch 1, 4 and 16, one repeat each."""
    runs = load_runs(CPU_SNAPSHOT)
    runs = runs[runs["model"].isin(["bert-tiny", "gpt2-tiny", "resnet-tiny"]) & runs["batch_size"].isin([1, 4, 16])
                & (runs["backend"] == "torch")]
    keys = [runs[k].map(repr) for k in CONFIG_KEYS]
    runs = runs.sort_values("created_at").groupby(keys, sort=False).head(1)
    return snapshot(runs, tmp_path_factory.mktemp("cpu") / "cpu_runs.parquet")


@pytest.fixture(scope="module")
def trained(tmp_path_factory: pytest.TempPathFactory, cpu_parquet: Path) -> dict[str, Any]:
    """`hwsel train --source CPU --source H100` in a process of its own: its JSON, stderr and store."""
    root = tmp_path_factory.mktemp("registry")
    uri = f"sqlite:///{root / 'mlflow.db'}"
    out = subprocess.run([sys.executable, "-m", "hwsel", "train", "--source", str(cpu_parquet), "--source",
                          str(H100_RECORDS), "--tracking-uri", uri, "--trials", "2", "--seed", "0", "--no-progress",
                          "--json"], cwd=root, env=_env(), capture_output=True, text=True, timeout=600)
    assert out.returncode == 0, out.stderr
    return {"uri": uri, "data": json.loads(out.stdout), "stderr": out.stderr, "root": root}



@pytest.fixture(scope="module")
def h100_measured() -> Predictor:
    """The H100 records as the measured layer; detection off, so answers are the same on any machine."""
    return Predictor.load(H100_RECORDS, layers=("measured", "roofline", "rules"), detect=False)


# --- (a) the device is part of the question --------------------------------------------------------

def test_an_h100_question_reads_the_h100_records_and_says_so(h100_measured: Predictor) -> None:
    for device in (H100, "h100", "h100-sxm"):  # its name, its spec name, a spelling of the spec
        pred = predict_performance("gpt2", "cuda", batch_size=128, device=device, predictor=h100_measured)["cuda"]
        assert pred.source == "measured" and pred.latency_ms == pytest.approx(GPT2_FP32_B128)
        assert pred.device == device and pred.device_source == "asked" and pred.device_spec == "h100"
        assert H100 in pred.detail  # the records it read
        assert pred.to_dict()["device"] == device and pred.to_dict()["device_spec"] == "h100"
    # another device: the H100's records do not answer for it; its own spec does
    a100 = predict_performance("gpt2", "cuda", batch_size=128, device="NVIDIA A100-SXM4-80GB",
                               predictor=h100_measured)["cuda"]
    assert a100.source == "roofline" and a100.device_spec == "a100"
    roof = Predictor(layers=("roofline", "rules"), detect=False)
    on = {d: predict_performance("gpt2", "cuda", batch_size=128, device=d, predictor=roof)["cuda"]
          for d in ("h100", "t4")}
    generic = predict_performance("gpt2", "cuda", batch_size=128, predictor=roof)["cuda"]
    assert on["h100"].latency_ms < generic.latency_ms < on["t4"].latency_ms  # 67 > 20 > 8.1 fp32 TFLOP/s
    assert generic.device is None and generic.device_source == "none" and generic.device_spec == "cuda-generic"
    assert "generic cuda spec" in generic.device_text()


def test_without_a_device_the_answer_names_the_default_it_took(h100_measured: Predictor) -> None:
    pred = predict_performance("gpt2", ["cuda", "mps"], batch_size=128, predictor=h100_measured)
    cuda = pred["cuda"]
    assert cuda.device == H100 and cuda.device_source == "records" and cuda.device_spec == "h100"
    assert cuda.source == "measured" and cuda.latency_ms == pytest.approx(GPT2_FP32_B128)
    assert cuda.device_text() == f"{H100} (default: most benchmark records of cuda; spec h100)"
    assert pred["mps"].device is None and pred["mps"].device_source == "none"
    # with detection on, a CUDA device here comes first; without one the records decide
    detecting = Predictor.load(H100_RECORDS, layers=("measured", "roofline", "rules"))
    here = _cuda_here()
    found = detecting.predict("gpt2", "cuda", batch_size=128)["cuda"]
    assert (found.device, found.device_source) == ((here, "detected") if here else (H100, "records"))


def test_the_registered_model_answers_for_the_h100_it_was_trained_on(empty_cwd: Path, trained: dict[str, Any]) -> None:
    """An architecture the data never named (so nothing is measured) on the H100: the champion
    reads the H100's spec, where the generic CUDA spec made it miss its own rows by 2-4x."""
    predictor = Predictor.load(tracking_uri=trained["uri"], detect=False)
    assert not predictor.describe()["measured"]["available"]
    unseen = dataclasses.replace(resolve_model("tinyllama-1.1b"), name="my-llama")
    pred = predict_performance(unseen, "cuda", batch_size=128, predictor=predictor)["cuda"]
    assert pred.source == "registered"
    # no device given: the one the champion's training snapshot holds for cuda, and it says so
    assert (pred.device, pred.device_source, pred.device_spec) == (H100, "records", "h100")
    row = query_frame(unseen, hardware="cuda", backend="torch", precision="fp32", batch_size=128, device_name=H100)
    assert row["device"].iloc[0] == "h100"
    assert pred.latency_ms == pytest.approx(float(predictor.champions["latency"].predict(row)[0]))
    assert abs(math.log(pred.latency_ms / TINYLLAMA_FP32_B128)) < math.log(1.5)
    # a device name that names no device ("cuda"): the generic CUDA spec, which misses by far
    generic = predict_performance(unseen, "cuda", batch_size=128, device="cuda", predictor=predictor)["cuda"]
    assert generic.device_spec == "cuda-generic" and generic.latency_ms > 2 * TINYLLAMA_FP32_B128


def test_every_name_of_the_h100_is_one_device_to_the_registered_layer(empty_cwd: Path,
                                                                     trained: dict[str, Any]) -> None:
    """Issue 41: the spec name, the marketing name, torch's name, with or without the memory size,
    in any case, are the one device the champion was trained on: the same answer from the same
    layer, none of them "not in the training data" and blended towards the roofline."""
    predictor = Predictor.load(tracking_uri=trained["uri"], detect=False)
    unseen = dataclasses.replace(resolve_model("tinyllama-1.1b"), name="my-llama")
    recorded = predict_performance(unseen, "cuda", batch_size=128, device=H100, predictor=predictor)["cuda"]
    assert recorded.source == "registered" and "extrapolates" not in recorded.detail, recorded.detail
    for name in ("h100", "H100", "nvidia h100 80gb hbm3", "NVIDIA H100", "H100 SXM5", "NVIDIA H100 80GB"):
        pred = predict_performance(unseen, "cuda", batch_size=128, device=name, predictor=predictor)["cuda"]
        assert (pred.source, pred.latency_ms, pred.interval, pred.memory_mb) == (
            recorded.source, recorded.latency_ms, recorded.interval, recorded.memory_mb), (name, pred.detail)
        assert pred.detail == recorded.detail and pred.device == name and pred.device_spec == "h100"
    # another device is another device: the A100 is outside what the champion saw, and says so
    a100 = predict_performance(unseen, "cuda", batch_size=128, device="NVIDIA A100-SXM4-80GB",
                               predictor=predictor)["cuda"]
    assert "device NVIDIA A100-SXM4-80GB not in the training data" in a100.detail


def test_records_count_one_device_under_all_its_names() -> None:
    """The default device is the device most records hold, counting every name of it together;
    two spellings of one configuration's device are one training row."""
    import pandas as pd

    runs = load_runs(H100_RECORDS)
    runs.loc[runs.index[:14], "device_name"] = "h100-sxm"
    a100 = runs.iloc[:20].assign(device_name="NVIDIA A100-SXM4-80GB", record_id=lambda f: f["record_id"] + "-a100")
    mixed = pd.concat([runs, a100], ignore_index=True)  # by name: A100 20, H100 18, h100-sxm 14
    predictor = Predictor(runs=mixed, layers=("measured", "roofline", "rules"), detect=False)
    assert predictor.default_device("cuda") == (H100, "records")
    one = load_runs(H100_RECORDS).iloc[[0, 0]].reset_index(drop=True)
    one.loc[1, ["device_name", "session_id", "record_id"]] = ["H100 SXM5", "another-session", "another-record"]
    table = training_table(one)
    assert len(table) == 1 and int(table["repeats"].iloc[0]) == 2


def test_unknown_backends_and_devices_are_refused_naming_the_known_ones(
        h100_measured: Predictor, empty_cwd: Path, capsys: pytest.CaptureFixture[str]) -> None:
    from hwsel import QuestionError

    with pytest.raises(QuestionError) as backend:
        predict_performance("gpt2", "cuda", batch_size=128, backend="nosuch", predictor=h100_measured)
    assert backend.value.field == "backend" and "'nosuch'" in str(backend.value)
    for known in ("torch", "torch-compile-ro", "onnxruntime", "openvino", "qai_hub"):  # the facts table's
        assert known in str(backend.value)
    with pytest.raises(QuestionError) as device:
        predict_performance("gpt2", "cuda", batch_size=128, device="some other gpu", predictor=h100_measured)
    message = str(device.value)
    assert device.value.field == "device" and "'some other gpu'" in message
    assert "h100" in message and "a100" in message and H100 in message  # the specs' names and the records'
    # a backend or a device only the records know is known
    import pandas as pd

    runs = load_runs(H100_RECORDS)
    runs = pd.concat([runs, runs.iloc[:1].assign(backend="my-runtime", device_name="NVIDIA B200", record_id="b200")],
                     ignore_index=True)
    own = Predictor(runs=runs, layers=("measured", "roofline", "rules"), detect=False)
    first = runs.iloc[-1]
    pred = predict_performance(first["model"], "cuda", batch_size=int(first["batch_size"]),
                               precision=first["precision"], backend="my-runtime", device="nvidia b200",
                               predictor=own)["cuda"]
    assert pred.source == "measured" and pred.backend == "my-runtime"
    # the CLI: exit 2 naming what is known; REST answers 422 (tests/test_hwsel_rest.py)
    code, _, err = _cli(capsys, "predict", "--model", "gpt2", "--hardware", "cuda", "--source", str(H100_RECORDS),
                        "--backend", "nosuch")
    assert code == 2 and "unknown backend 'nosuch'" in err and "torch-compile" in err, err
    code, _, err = _cli(capsys, "predict", "--model", "gpt2", "--hardware", "cuda", "--source", str(H100_RECORDS),
                        "--device", "some other gpu")
    assert code == 2 and "unknown device 'some other gpu' for cuda" in err and H100 in err, err


def test_loading_champions_through_the_api_prints_nothing(empty_cwd: Path, trained: dict[str, Any]) -> None:
    """No "Downloading artifacts" bar (the champion's snapshot was fetched without one) and no
    warnings on stderr: the library keeps MLflow's noise at debug level, not only the CLI."""
    script = ("import sys\nfrom hwsel import Predictor\n"
              "p = Predictor.load(tracking_uri=sys.argv[1], detect=False)\n"
              "print(p.predict('gpt2', 'cuda', batch_size=128)['cuda'].device)\n")
    out = subprocess.run([sys.executable, "-c", script, trained["uri"]], cwd=empty_cwd, env=_env(),
                         capture_output=True, text=True, timeout=300)
    assert out.returncode == 0, out.stderr
    assert out.stdout.strip() == H100
    for noise in (*NOISE, "Warning", "%|"):  # "%|": a tqdm bar
        assert noise not in out.stderr, out.stderr


def test_selection_map_and_matrix_carry_devices(h100_measured: Predictor) -> None:
    rec = select_hardware("gpt2", batch_size=128, available_hardware=["cpu", "cuda"], device={"cuda": "h100"},
                          predictor=h100_measured)
    assert rec.all_scores["cuda"].prediction.source == "measured"
    assert rec.devices["cuda"] == {"device": "h100", "device_source": "asked", "device_spec": "h100",
                                   "backend": "torch"}
    assert rec.to_dict()["devices"]["cuda"]["device"] == "h100"
    assert "cuda h100 (asked for), backend torch" in rec.explanation
    with pytest.raises(ValueError, match="several hardware targets.*cuda="):
        select_hardware("gpt2", available_hardware=["cpu", "cuda"], device="h100", predictor=h100_measured)
    with pytest.raises(ValueError, match="'rocm', which is not among"):
        select_hardware("gpt2", available_hardware=["cpu", "cuda"], device={"rocm": "mi300x"}, predictor=h100_measured)
    matrix = prediction_matrix(["gpt2"], ["cuda"], [128], ["fp32"], device="h100", predictor=h100_measured)
    assert matrix["devices"]["cuda"] == {"device": "h100", "device_source": "asked", "device_spec": "h100",
                                         "backend": "torch"}
    assert matrix["models"]["gpt2"]["predictions"]["cuda"]["128"]["fp32"]["latency_mean"] == pytest.approx(
        GPT2_FP32_B128)
    smap = selection_map(["embedding"], [1], ["cuda", "mps"], ["inference"], predictor=h100_measured)
    assert smap["devices"]["cuda"]["device"] == H100 and smap["devices"]["cuda"]["device_source"] == "records"
    assert smap["devices"]["mps"]["device"] is None


# --- (b) the backend is part of the question --------------------------------------------------------

def test_without_a_backend_the_answer_is_eager_torch(h100_measured: Predictor) -> None:
    eager = predict_performance("bert-base", "cuda", batch_size=1, precision="fp16", predictor=h100_measured)["cuda"]
    assert eager.source == "measured" and eager.backend == "torch"
    assert eager.latency_ms == pytest.approx(BERT_FP16_B1["torch"], rel=0.01)  # not the compiled 0.57 ms
    assert "backend torch" in eager.detail
    ro = predict_performance("bert-base", "cuda", batch_size=1, precision="fp16", backend="torch-compile-ro",
                             predictor=h100_measured)["cuda"]
    assert ro.backend == "torch-compile-ro" and ro.latency_ms == pytest.approx(BERT_FP16_B1["torch-compile-ro"],
                                                                                rel=0.01)
    # a backend never measured for this case is not answered from another backend's records
    other = predict_performance("gpt2", "cuda", batch_size=128, backend="torch-compile-ro",
                                predictor=h100_measured)["cuda"]
    assert other.source != "measured" and other.backend == "torch-compile-ro"
    rec = select_hardware("bert-base", precision="fp16", available_hardware=["cuda"], predictor=h100_measured)
    assert rec.backend == "torch" and rec.to_dict()["all_scores"]["cuda"]["prediction"]["backend"] == "torch"


# --- (c) training on several stores ----------------------------------------------------------------------

def test_train_takes_several_sources_and_trains_on_their_union(trained: dict[str, Any], cpu_parquet: Path) -> None:
    data = trained["data"]
    union = training_table(load_runs([cpu_parquet, H100_RECORDS]))
    assert data["rows"] == len(union) == len(training_table(load_runs(cpu_parquet))) + len(
        training_table(load_runs(H100_RECORDS)))
    runs = load_runs([cpu_parquet, H100_RECORDS])
    assert data["records"] == len(runs) and data["rows_from_records"] == rows_text(runs, union)
    assert data["rows_from_records"].startswith(f"{len(runs)} records became {len(union)} rows")
    assert data["rows_by_device"] == {"cpu / AMD EPYC": len(union[union["hardware"] == "cpu"]),
                                      f"cuda / {H100}": len(union[union["hardware"] == "cuda"])}
    assert data["sources"] == [str(cpu_parquet), str(H100_RECORDS)]
    import pandas as pd

    snap = pd.read_parquet(data["snapshot"])
    assert set(snap["hardware"]) == {"cpu", "cuda"} and set(snap["device_name"]) == {"AMD EPYC", H100}
    # training prints none of MLflow's or SQLAlchemy's noise
    for noise in NOISE:
        assert noise not in trained["stderr"], trained["stderr"]
    # both spellings: repeated, or listed after one --source
    for argv in (["--source", "a.parquet", "--source", "b.jsonl"], ["--source", "a.parquet", "b.jsonl"]):
        assert build_parser().parse_args(["train", *argv]).source == ["a.parquet", "b.jsonl"]
        assert build_parser().parse_args(["predict", "--model", "gpt2", *argv]).source == ["a.parquet", "b.jsonl"]


# --- (d) the CLI and the REST app carry device and backend ------------------------------------------------

def _cli(capsys: pytest.CaptureFixture[str], *args: str) -> tuple[int, str, str]:
    code = cli_main(list(args))
    out = capsys.readouterr()
    return code, out.out, out.err


def test_cli_predict_json_and_text_carry_device_and_backend(empty_cwd: Path, capsys: pytest.CaptureFixture[str],
                                                            monkeypatch: pytest.MonkeyPatch) -> None:
    code, out, err = _cli(capsys, "predict", "--model", "gpt2", "--hardware", "cuda", "--batch-size", "128",
                          "--source", str(H100_RECORDS), "--device", "h100", "--json")
    assert code == 0, err
    data = json.loads(out)
    cuda = data["predictions"]["cuda"]
    assert (cuda["device"], cuda["device_source"], cuda["device_spec"]) == ("h100", "asked", "h100")
    assert cuda["backend"] == "torch" and data["backend"] == "torch" and data["devices"] == {"cuda": "h100"}
    assert cuda["source"] == "measured" and cuda["latency_ms"] == pytest.approx(GPT2_FP32_B128)
    code, out, err = _cli(capsys, "predict", "--model", "gpt2", "--hardware", "cuda", "mps", "--batch-size", "128",
                          "--source", str(H100_RECORDS), "--device", f"cuda={H100}")
    assert code == 0, err
    assert f"device: {H100} (asked for; spec h100); backend: torch" in out
    assert "device: no device given, none detected or recorded: generic mps spec; backend: torch" in out
    code, _, err = _cli(capsys, "predict", "--model", "gpt2", "--hardware", "cuda", "mps", "--device", "h100")
    assert code == 2 and "several hardware targets" in err and "--device cuda=" in err


def test_cli_predict_of_an_unseen_config_through_the_registry(empty_cwd: Path, trained: dict[str, Any]) -> None:
    """The issue's own command: a model outside the zoo (--config), on cuda with no device named,
    answered by the registered model for the H100 it was trained on; no progress bars, no warnings."""
    unseen = empty_cwd / "unseen.toml"
    unseen.write_text('[[models]]\nname = "my-llama"\nfamily = "text_generation"\nconfig_class = "LlamaConfig"\n'
                      'modality = "text"\nsequence_length = 128\n[models.config_kwargs]\nhidden_size = 2048\n'
                      'intermediate_size = 5632\nnum_hidden_layers = 22\nnum_attention_heads = 32\n'
                      'num_key_value_heads = 4\nvocab_size = 32000\nmax_position_embeddings = 2048\n')
    out = subprocess.run([sys.executable, "-m", "hwsel", "predict", "--model", "my-llama", "--config", str(unseen),
                          "--hardware", "cuda", "--batch-size", "128", "--precision", "fp32", "--tracking-uri",
                          trained["uri"], "--json"], cwd=empty_cwd, env=_env(), capture_output=True, text=True,
                         timeout=300)
    assert out.returncode == 0, out.stderr
    cuda = json.loads(out.stdout)["predictions"]["cuda"]
    here = _cuda_here()
    assert cuda["source"] == "registered" and cuda["backend"] == "torch"
    assert (cuda["device"], cuda["device_source"]) == ((here, "detected") if here else (H100, "records"))
    if here is None or "H100" in here:
        assert abs(math.log(cuda["latency_ms"] / TINYLLAMA_FP32_B128)) < math.log(1.5)
    for noise in NOISE:
        assert noise not in out.stderr, out.stderr
