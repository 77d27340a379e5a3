"""Architecture features of models outside the zoo, the launch regime and the prediction intervals.

Real parts only: transformers config classes built on the meta device, the project's own H100
records (`tests/data/h100_subset.jsonl`, 32 cases from `../shared/gpu-evidence`) and the committed
CPU snapshot.
"""

from __future__ import annotations

import json
import re
from pathlib import Path

import numpy as np
import pandas as pd
import pytest

from hwsel.data import load_runs, training_table
from hwsel.estimators import RegimeRegressor
from hwsel.evaluation import error_metrics
from hwsel.features import feature_frame, query_frame, query_row
from hwsel.intervals import conformal_band
from hwsel.resolution import resolve_model
from pytest_hwbench.models import load_model_set, spec_from_config

DATA = Path(__file__).resolve().parent / "data"
SNAPSHOT = Path(__file__).resolve().parents[1] / "benchmarks" / "data" / "cpu_runs.parquet"
#: A BERT that is in no zoo: 4 layers, hidden 256.
SMALL_BERT = {"model_type": "bert", "hidden_size": 256, "num_hidden_layers": 4, "num_attention_heads": 4,
              "intermediate_size": 1024, "vocab_size": 3000, "transformers_version": "5.0.0",
              "architectures": ["BertModel"]}


def test_launches_and_heads_come_from_the_architecture() -> None:
    tiny, base = resolve_model("bert-tiny"), resolve_model("bert-base")
    assert tiny.launches_per_forward is not None and base.launches_per_forward is not None
    # same layout, more layers: more operators per forward
    assert 20 < tiny.launches_per_forward < base.launches_per_forward
    llama = resolve_model("tinyllama-1.1b")
    assert (llama.num_attention_heads, llama.num_key_value_heads) == (32, 4)  # grouped-query attention
    assert resolve_model("resnet-50").num_attention_heads is None


def test_a_config_json_file_dict_or_folder_gives_the_same_architecture(tmp_path: Path) -> None:
    folder = tmp_path / "my-bert"
    folder.mkdir()
    (folder / "config.json").write_text(json.dumps(SMALL_BERT), encoding="utf-8")
    from_file = resolve_model(None, folder / "config.json")
    from_folder = resolve_model(None, folder)
    from_dict = resolve_model(None, {**SMALL_BERT, "_name_or_path": "acme/my-bert"})
    assert from_file.name == from_folder.name == from_dict.name == "my-bert"
    assert from_file == from_folder == from_dict
    assert from_file.num_layers == 4 and from_file.hidden_size == 256 and from_file.num_attention_heads == 4
    assert 3e6 < from_file.param_count < 6e6 and from_file.flops_per_item > 0
    assert from_file.launches_per_forward is not None
    assert resolve_model("tuned", SMALL_BERT).name == "tuned"
    assert resolve_model(None, SMALL_BERT).name == "bert-custom"
    # the harness reads the same file as a one-model set
    (spec,) = load_model_set(folder / "config.json")
    assert spec.name == "my-bert" and spec.config_class == "BertConfig" and spec.family == "embedding"


def test_bad_configs_name_the_value_and_what_is_accepted() -> None:
    with pytest.raises(ValueError, match=r"model 'mamba9-custom'.*model_type 'mamba9'.*known: .*bert") as bad:
        resolve_model(None, {"model_type": "mamba9"})
    assert not isinstance(bad.value, KeyError)  # a config that describes no model is no unknown name
    with pytest.raises(ValueError, match="hidden_size"):
        spec_from_config({**SMALL_BERT, "hidden_size": "wide"})
    with pytest.raises(KeyError, match="config=PATH"):
        resolve_model(None)


#: A LLaMA config.json with -3 layers.
MINUS_THREE = {"model_type": "llama", "num_hidden_layers": -3, "hidden_size": 64, "num_attention_heads": 4,
               "intermediate_size": 128, "vocab_size": 100}


def test_a_config_with_minus_three_layers_is_a_question_error_naming_model_field_and_file(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]) -> None:
    """The API raises the documented ValueError subclass (`QuestionError`, field ``config``), never
    a KeyError, naming the model (the name given, else the one the config gives it) and the field;
    the CLI names the file."""
    import hwsel
    from hwsel.cli import main

    for name, shown in ((None, "'llama-custom'"), ("my-llama", "'my-llama'")):
        with pytest.raises(hwsel.QuestionError) as info:
            hwsel.model_info(name, MINUS_THREE)
        message = str(info.value)
        assert isinstance(info.value, ValueError) and not isinstance(info.value, KeyError)
        assert info.value.field == "config" and shown in message and "num_hidden_layers" in message, message
        assert "-3" in message and "None" not in message, message
    folder = tmp_path / "my-llama"
    folder.mkdir()
    path = folder / "config.json"
    path.write_text(json.dumps(MINUS_THREE), encoding="utf-8")
    with pytest.raises(hwsel.QuestionError, match=r"config .*config\.json: field 'num_hidden_layers'.*-3"):
        hwsel.model_info(None, path)
    monkeypatch.chdir(tmp_path)
    monkeypatch.delenv("MLFLOW_TRACKING_URI", raising=False)
    monkeypatch.delenv("HWSEL_CONFIG", raising=False)
    capsys.readouterr()
    assert main(["predict", "--config", str(path), "--hardware", "cpu"]) == 2
    err = capsys.readouterr().err
    assert f"hwsel predict: error: config {path}: field 'num_hidden_layers'" in err and "got -3" in err, err
    assert "None" not in err, err


def test_a_query_for_a_config_model_carries_its_launches() -> None:
    info = resolve_model(None, SMALL_BERT)
    row = query_row(info, hardware="cuda", backend="torch", precision="fp16", batch_size=8,
                    device_name="NVIDIA H100 80GB HBM3")
    features = feature_frame(pd.DataFrame([row]))
    assert features["log_launches"].iloc[0] == pytest.approx(np.log(info.launches_per_forward))
    assert np.isfinite(features["log_regime_ms"].iloc[0])
    assert features["log_regime_ms"].iloc[0] >= features["log_roofline_ms"].iloc[0]


def test_the_calibrated_regime_beats_the_roofline_on_held_out_h100_models() -> None:
    """Leave one model out on real H100 records: the regime model's error is far below the roofline's."""
    table = training_table(load_runs(str(DATA / "h100_subset.jsonl")))
    X = feature_frame(table)
    y = np.log(table["latency_ms"].to_numpy(dtype=float))
    pred = np.full(len(y), np.nan)
    for model in table["model"].unique():
        held = (table["model"] == model).to_numpy()
        pred[held] = RegimeRegressor(min_rows=3).fit(X[~held], y[~held]).predict(X[held])
    regime, roof = error_metrics(y, pred), error_metrics(y, X["log_roofline_ms"].to_numpy())
    assert np.isfinite(pred).all()
    assert regime["log_mae"] < 0.5 * roof["log_mae"]
    assert regime["median_ape"] < 0.5


def test_a_device_without_records_borrows_its_kinds_coefficients() -> None:
    table = training_table(load_runs(str(DATA / "h100_subset.jsonl")))
    X = feature_frame(table)
    model = RegimeRegressor(min_rows=3).fit(X, np.log(table["latency_ms"].to_numpy(dtype=float)))
    rows = [query_row(resolve_model("bert-base"), hardware="cuda", backend="torch", precision="fp32", batch_size=8,
                      device_name=name) for name in ("NVIDIA H100 80GB HBM3", "NVIDIA A100-SXM4-80GB")]
    h100, a100 = np.exp(model.predict(feature_frame(pd.DataFrame(rows))))
    measured = float(table.query("model == 'bert-base' and backend == 'torch' and precision == 'fp32' "
                                 "and batch_size == 8")["latency_ms"].iloc[0])
    assert h100 == pytest.approx(measured, rel=0.5)
    assert np.isfinite(a100) and a100 >= 0.8 * h100  # a slower device, the same efficiencies


def test_conformal_band_covers_new_draws_at_its_level() -> None:
    rng = np.random.default_rng(0)
    residuals = rng.standard_t(4, size=400) * 0.3
    low, high = conformal_band(residuals, 0.9)
    assert low < 0 < high
    fresh = rng.standard_t(4, size=20000) * 0.3
    coverage = float(np.mean((fresh >= low) & (fresh <= high)))
    assert 0.87 <= coverage <= 0.95
    assert conformal_band(np.array([]), 0.9) == (0.0, 0.0)
    # few residuals: the band widens to the extremes rather than under-cover
    assert conformal_band(np.array([-0.1, 0.2, 0.05]), 0.9) == (-0.1, 0.2)


def test_a_cpus_features_come_from_its_name_and_are_the_same_on_every_host() -> None:
    """The records of a CPU get one set of features wherever hwsel runs: this host's own CPU gets
    the same physics as any other CPU name, every spelling of one CPU gets one spec, and the clock
    is the one the name states."""
    from hwsel.specs import GENERIC_CPU_CORES, cpu_spec, spec_for
    from pytest_hwbench.hardware import detect_hardware

    here = str(dict(detect_hardware(targets=("cpu",))["cpu"].details).get("model") or "cpu")
    clock = re.search(r"@\s*[0-9.]+\s*ghz", here, re.IGNORECASE)  # a clock in this CPU's name is its own
    other = "AMD EPYC" + (f" {clock.group(0)}" if clock else "")
    base = resolve_model("bert-base")
    rows = {name: query_frame(base, hardware="cpu", backend="torch", precision="fp32", batch_size=8, device_name=name,
                              threads=2).iloc[0] for name in (here, other)}
    physics = ["log_peak_tflops", "log_memory_bandwidth_gbs", "device_memory_gb", "spec_known", "log_roofline_ms"]
    assert rows[here][physics].tolist() == rows[other][physics].tolist()
    assert rows[here]["device"] == f"cpu:{' '.join(here.split()).lower()}" and rows[other]["device"] == f"cpu:{other.lower()}"
    assert spec_for("cpu", "AMD EPYC") == spec_for("onnxruntime", "cpu:amd  EPYC") == cpu_spec("Amd Epyc")
    clocked = spec_for("cpu", "Intel(R) Xeon(R) CPU E5-2686 v4 @ 2.30GHz")
    assert clocked.tflops("fp32") == pytest.approx(GENERIC_CPU_CORES * 8 * 2 * 2 * 2.3 / 1e3)
    assert spec_for("cpu", "") == spec_for("cpu", None) and spec_for("cpu").name == "cpu-generic"


def test_no_cpu_record_is_below_its_floor() -> None:
    """A CPU known by name is bounded by the fastest CPU (`hwsel.specs.CPU_CEILING`), so no real
    record of the committed CPU snapshot lies below its physical floor, whatever host asks."""
    from hwsel.bounds import floor_of
    from hwsel.query import Query

    runs = training_table(load_runs(SNAPSHOT))
    assert len(runs) > 100
    models = {name: resolve_model(name) for name in runs["model"].unique()}
    for row in runs.itertuples():
        q = Query(models[row.model], "cpu", row.precision, int(row.batch_size), row.mode, row.backend, row.device_name)
        floor = floor_of(q)
        assert floor.device_spec == "cpu-ceiling" and row.latency_ms >= floor.latency_ms, row
