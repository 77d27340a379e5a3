"""Inputs checked where they enter (issue 12, items 1, 3 and 7), against the real parts.

1. A password in the MLflow tracking URI never leaves the process: not on the console of a
   pytest run (summary, warnings), not in `hwbench replay` / `hwbench import-mlflow` output,
   not in the spool, DuckDB or MLflow (a real `mlflow server` the password is sent to).
3. A bad `--hwbench-model-set` stops the run at start-up, naming file, model and field, before
   anything is measured or stored.
7. The REST API is strict: ``true`` or ``"1"`` is no batch size, a sequence longer than the
   model's position limit and an endless hardware list are refused, each with a 422 naming the
   field, the same way on every endpoint that has the field.
"""

from __future__ import annotations

import json
import re
import uuid
from collections.abc import Iterator
from pathlib import Path

import pytest
from _mlflow_server import MlflowServer, free_port

from pytest_hwbench import get_model, load_model_set

#: Variables that would point a run or the CLI elsewhere than the test's own store.
FOREIGN_ENV = ("MLFLOW_TRACKING_URI", "HWBENCH_EXPERIMENT", "PYTEST_ADDOPTS", "MLFLOW_EXPERIMENT_NAME")

#: One case, the same on a GPU host: bert-tiny, torch on the CPU, fp32, batch 1.
BENCH_FILE = """
import pytest


@pytest.mark.hwbench(models=["bert-tiny"], hardware=["cpu"], backends=["torch"], precisions=["fp32"],
                     batch_sizes=[1])
def test_bench(hwbench_case, hwbench):
    hwbench.measure(hwbench_case)
"""
FAST = ("--hwbench-warmup", "0", "--hwbench-min-iterations", "1", "--hwbench-min-time", "0",
        "-p", "no:cacheprovider")


@pytest.fixture(autouse=True)
def _own_stores_only(monkeypatch: pytest.MonkeyPatch) -> None:
    for name in FOREIGN_ENV:
        monkeypatch.delenv(name, raising=False)


@pytest.fixture(scope="module")
def _imported_here() -> None:
    """Import what an in-process pytester run would import, before its `sys.modules` snapshot.

    The run drops modules first imported inside it; transformers then fails to import its lazy
    modules again ("Could not import module 'BertModel'"), as tests/test_plugin.py explains.
    """
    import mlflow.store.tracking.rest_store  # noqa: F401
    import mlflow.tracking  # noqa: F401
    import torch

    spec = get_model("bert-tiny")
    with torch.inference_mode():
        spec.build_model()(**spec.make_inputs(1))


def _output(result: pytest.RunResult) -> str:
    return "\n".join([*result.outlines, *result.errlines])


def _files_holding(root: Path, needle: str) -> list[str]:
    """Every file under `root` whose bytes contain `needle` (spool, DuckDB, SQLite, artifacts)."""
    data = needle.encode()
    return [str(p) for p in root.rglob("*") if p.is_file() and data in p.read_bytes()]


# --- 1. a password in the tracking URI ---------------------------------------------------------------

def test_password_in_tracking_uri_is_masked_in_messages_and_stores(
    pytester: pytest.Pytester, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str],
    _imported_here: None,
) -> None:
    from mlflow.tracking import MlflowClient

    from pytest_hwbench.cli import main as hwbench

    secret = f"pw-{uuid.uuid4().hex}"
    port = free_port()
    uri = f"http://alice:{secret}@127.0.0.1:{port}"
    shown = f"http://***@127.0.0.1:{port}"
    store = pytester.path / "store"

    # (a) Nothing listens on the port: the MLflow sink fails, the record is spooled, and the
    # summary, the sink's error and the warnings all quote the URI.
    pytester.makepyfile(test_bench=BENCH_FILE)
    result = pytester.runpytest("--hwbench-store", str(store), "--hwbench-mlflow-uri", uri, *FAST)
    text = _output(result)
    assert result.ret == 0, text
    result.assert_outcomes(passed=1)
    assert f"hwbench: MLflow {shown} (experiment 'hwbench')" in text
    assert "hwbench: WARNING 1 records spooled, not yet delivered (1 for mlflow)" in text
    assert f"API request to {shown}/api/" in text  # MLflow's own message, masked
    assert secret not in text
    assert (store / "spool" / "records.jsonl").exists() and (store / "hwbench.duckdb").exists()
    assert _files_holding(pytester.path, secret) == []

    # (b) The store comes back (a real server on that port, which ignores the credentials); the
    # URI now comes from $MLFLOW_TRACKING_URI.
    home = pytester.path / "server"
    home.mkdir()
    server = MlflowServer(home / "server.db", home / "artifacts", home / "server.log", port=port)
    server.start()
    try:
        monkeypatch.setenv("MLFLOW_TRACKING_URI", uri)
        capsys.readouterr()
        assert hwbench(["replay", "--store", str(store)]) == 0
        out = capsys.readouterr()
        assert f"-> MLflow {shown}, DuckDB" in out.out and "mlflow: 1 records written" in out.out, out
        assert secret not in out.out + out.err

        monkeypatch.delenv("MLFLOW_TRACKING_URI")
        imported = pytester.path / "imported.duckdb"
        assert hwbench(["import-mlflow", "--store", str(store), "--db", str(imported), "--mlflow-uri", uri]) == 0
        out = capsys.readouterr()
        assert f"hwbench import-mlflow: {shown} (experiment 'hwbench')" in out.out and "1 records imported" in out.out
        assert secret not in out.out + out.err

        runs = MlflowClient(tracking_uri=server.uri).search_runs(
            [MlflowClient(tracking_uri=server.uri).get_experiment_by_name("hwbench").experiment_id])
        assert len(runs) == 2  # the session's parent run and the record's child run
        for run in runs:
            assert secret not in json.dumps([run.data.params, run.data.tags, run.info.artifact_uri])
    finally:
        server.kill()
    assert _files_holding(pytester.path, secret) == []  # spool, both DuckDB files, server DB, artifacts

    # (c) The server is gone again: the import fails at its /health, with a masked message, not a traceback.
    assert hwbench(["import-mlflow", "--store", str(store), "--db", str(imported), "--mlflow-uri", uri]) == 3
    out = capsys.readouterr()
    assert f"hwbench import-mlflow: error: --mlflow-uri {shown}: cannot reach {shown}/health" in out.err, out
    assert secret not in out.out + out.err


def test_password_in_a_malformed_tracking_uri_is_masked_in_the_usage_error(tmp_path: Path) -> None:
    from pytest_hwbench.recording import TrackingConfig

    secret = f"pw-{uuid.uuid4().hex}"
    for uri in (f"http://alice:{secret}@127.0.0.1:port", f"ftp://alice:{secret}@host/x"):
        with pytest.raises(ValueError) as exc:
            TrackingConfig.resolve(tmp_path / "store", uri, None, None, tmp_path)
        assert secret not in str(exc.value)
        assert "'" + uri.replace(f"alice:{secret}", "***") + "'" in str(exc.value)
    config = TrackingConfig.resolve(tmp_path / "store", f"postgresql://bob:{secret}@db/mlflow", None, None, tmp_path)
    assert config.mlflow_uri == f"postgresql://bob:{secret}@db/mlflow"  # the real one, for connecting
    assert secret not in repr(config) and "postgresql://***@db/mlflow" in repr(config)


# --- 3. a bad model set stops the run at start-up ------------------------------------------------------

_BERT = 'family = "embedding"\nmodality = "text"\n'
_SMALL = "num_hidden_layers = 1, hidden_size = 32, num_attention_heads = 2, intermediate_size = 48, vocab_size = 300"


@pytest.mark.parametrize(("body", "fragments"), [
    (f'[[models]]\nname = "fine"\nconfig_class = "BertConfig"\n{_BERT}config_kwargs = {{ {_SMALL} }}\n'
     f'[[models]]\nname = "ghost"\nconfig_class = "NoSuchConfig"\n{_BERT}',
     ["entry 1 (model 'ghost')", "field 'config_class'", "'NoSuchConfig'"]),
    (f'[[models]]\nname = "stringly"\nconfig_class = "BertConfig"\n{_BERT}config_kwargs = {{ hidden_size = "x" }}\n',
     ["entry 0 (model 'stringly')", "field 'config_kwargs.hidden_size'", "expected int"]),
    (f'[[models]]\nname = "negative"\nconfig_class = "BertConfig"\n{_BERT}'
     'config_kwargs = { num_hidden_layers = -2, hidden_size = 32, num_attention_heads = 2 }\n',
     ["entry 0 (model 'negative')", "field 'config_kwargs.num_hidden_layers'", "whole number >= 1, got -2"]),
    (f'[[models]]\nname = "bert-tiny"\nconfig_class = "BertConfig"\n{_BERT}',
     ["entry 0 (model 'bert-tiny')", "field 'name'", "built-in zoo model", "replace = true"]),
], ids=["config-class", "config-kwargs", "negative-layers", "zoo-name-taken"])
def test_bad_model_set_is_a_usage_error_before_any_case(
    pytester: pytest.Pytester, body: str, fragments: list[str], _imported_here: None
) -> None:
    path = pytester.makefile(".toml", models=body)
    model = re.findall(r'name = "([\w-]+)"', body)[-1]  # the bad one: were it let through, its case would run
    pytester.makepyfile(test_bench=BENCH_FILE.replace('"bert-tiny"', f'"{model}"'))
    store = pytester.path / "store"
    result = pytester.runpytest("--hwbench-store", str(store), "--hwbench-model-set", str(path), *FAST)
    text = _output(result)
    assert result.ret == pytest.ExitCode.USAGE_ERROR, text
    assert f"--hwbench-model-set: model set {path}, " in text
    for fragment in fragments:
        assert fragment in text, text
    assert not re.search(r"\d+ (passed|failed|error)", text), text
    assert not store.exists()  # nothing measured, nothing in MLflow or DuckDB


@pytest.mark.parametrize(("name", "body", "fragments"), [
    ("broken.toml", '[[models]\nname = "x"\n', ["broken.toml", "not valid TOML", "line 1"]),
    ("numbers.json", '{"models": [1, 2]}', ["numbers.json", "entry 0 of 'models' is not a table but int 1"]),
    ("mixed.json", json.dumps({"models": [{"name": "a", "family": "embedding", "config_class": "BertConfig",
                                           "modality": "text"}, "b"]}),
     ["mixed.json", "entry 1 of 'models' is not a table but str 'b'"]),
    ("whisper-ish.toml", '[[models]]\nname = "w"\nconfig_class = "BertConfig"\nfamily = "audio"\n'
                         'modality = "audio_features"\n',
     ["whisper-ish.toml", "model 'w'", "field 'modality'", "'audio_features' does not fit BertConfig"]),
    ("auto.toml", f'[[models]]\nname = "a"\nconfig_class = "BertConfig"\n{_BERT}auto_class = "AutoModelForMagic"\n',
     ["auto.toml", "model 'a'", "field 'auto_class'", "'AutoModelForMagic'"]),
    ("twice.toml", f'[[models]]\nname = "a"\nconfig_class = "BertConfig"\n{_BERT}'
                   f'[[models]]\nname = "a"\nconfig_class = "BertConfig"\n{_BERT}',
     ["twice.toml", "entry 1 (model 'a')", "field 'name'", "already entry 0"]),
])
def test_model_set_errors_name_file_model_and_field(tmp_path: Path, name: str, body: str,
                                                    fragments: list[str]) -> None:
    path = tmp_path / name
    path.write_text(body)
    with pytest.raises(ValueError) as exc:
        load_model_set(path)
    for fragment in fragments:
        assert fragment in str(exc.value), str(exc.value)


def test_model_set_config_is_built_once_at_load(tmp_path: Path) -> None:
    path = tmp_path / "set.toml"
    path.write_text(f'[[models]]\nname = "fine"\nconfig_class = "BertConfig"\n{_BERT}'
                    f'config_kwargs = {{ {_SMALL}, max_position_embeddings = 40 }}\n')
    (spec,) = load_model_set(path)
    config = spec.build_config()
    assert spec._config() is spec._config()  # built by load_model_set, reused by every case
    assert (spec._config().hidden_size, spec.max_sequence_length) == (config.hidden_size, 40)


# --- 7. REST bounds ---------------------------------------------------------------------------------

@pytest.fixture(scope="module")
def rest() -> Iterator[object]:
    pytest.importorskip("fastapi")
    from fastapi.testclient import TestClient

    from hwsel import Predictor
    from hwsel.app import create_app

    # Estimates only (no benchmark data, no registry): the checks run before any layer answers.
    with TestClient(create_app(Predictor.load(None, layers=("roofline", "rules")))) as client:
        yield client


def _post(client: object, path: str, body: dict[str, object]) -> tuple[int, dict[str, object]]:
    response = client.post(path, json=body)  # type: ignore[attr-defined]
    return response.status_code, response.json()


#: Every endpoint, a good body for it and the fields it takes.
ENDPOINTS: dict[str, dict[str, object]] = {
    "/hardware/select": {"model_name": "bert-tiny", "available_hardware": ["cpu"]},
    "/hardware/batch": {"models": ["bert-tiny"], "available_hardware": ["cpu"]},
    "/hardware/map": {"model_families": ["embedding"], "batch_sizes": [1], "hardware_platforms": ["cpu"],
                      "modes": ["inference"]},
    "/performance/predict": {"model_name": "bert-tiny", "hardware": ["cpu"]},
    "/performance/matrix": {"models": ["bert-tiny"], "hardware_platforms": ["cpu"], "batch_sizes": [1],
                            "precisions": ["fp32"]},
    "/training/distributed": {"model_name": "bert-tiny", "gpu_count": 2, "batch_size": 8, "max_memory_gb": 16},
    "/analysis/model": {"model_name": "bert-tiny", "batch_sizes": [1], "hardware_platforms": ["cpu"],
                        "modes": ["inference"]},
}
#: (endpoint, field, how a value goes in: a number or a list of them)
NUMBER_FIELDS = [
    ("/hardware/select", "batch_size", False), ("/hardware/select", "sequence_length", False),
    ("/hardware/batch", "batch_size", False), ("/hardware/map", "batch_sizes", True),
    ("/performance/predict", "batch_size", False), ("/performance/predict", "sequence_length", False),
    ("/performance/matrix", "batch_sizes", True), ("/training/distributed", "batch_size", False),
    ("/training/distributed", "gpu_count", False), ("/analysis/model", "batch_sizes", True),
]
HARDWARE_FIELDS = [("/hardware/select", "available_hardware"), ("/hardware/batch", "available_hardware"),
                   ("/hardware/map", "hardware_platforms"), ("/performance/predict", "hardware"),
                   ("/performance/matrix", "hardware_platforms"), ("/analysis/model", "hardware_platforms")]


@pytest.mark.parametrize("value", [True, "1", 1.0], ids=["true", "string", "float"])
def test_rest_numbers_are_strict_on_every_endpoint(rest: object, value: object) -> None:
    for path, body in ENDPOINTS.items():
        status, payload = _post(rest, path, body)
        assert status == 200, (path, payload)  # the good body is answered: only the field is wrong below
    for path, field, as_list in NUMBER_FIELDS:
        body = {**ENDPOINTS[path], field: [value] if as_list else value}
        status, payload = _post(rest, path, body)
        assert status == 422, (path, field, value, payload)
        assert payload["status"] == "error" and str(payload["message"]).startswith(f"invalid request: {field}"), \
            (path, payload)


@pytest.mark.parametrize("path", ["/hardware/select", "/performance/predict"])
def test_rest_sequence_length_is_bounded_by_the_model(rest: object, path: str) -> None:
    limit = get_model("bert-tiny").max_sequence_length
    assert limit == 512  # BertConfig's max_position_embeddings
    # (name asked for, zoo model it resolves to, length): a hub alias gets its zoo model's limit
    for model, zoo, length in (("bert-tiny", "bert-tiny", 65537), ("bert-tiny", "bert-tiny", limit + 1),
                               ("bert-base-uncased", "bert-base", 513), ("gpt2-tiny", "gpt2-tiny", 129)):
        status, payload = _post(rest, path, {**ENDPOINTS[path], "model_name": model, "sequence_length": length})
        assert status == 422, (path, model, length, payload)
        message = str(payload["message"])
        assert message.startswith("invalid request: sequence_length: "), payload
        assert f"at most {get_model(zoo).max_sequence_length} tokens" in message, payload
    status, payload = _post(rest, path, {**ENDPOINTS[path], "sequence_length": limit})
    assert status == 200 and payload["sequence_length"] == limit, payload


def test_rest_hardware_lists_are_bounded_and_checked_on_every_endpoint(rest: object) -> None:
    for path, field in HARDWARE_FIELDS:
        # (a list of 200,000 is a body over MAX_REQUEST_BYTES: 413 before any field is read, issue 18)
        for value, words in ((["cpu"] * 2_000, ["at most 32 items"]),
                             (["cpu", "tpu"], ["unknown hardware 'tpu'", "accepted: ", "cpu"])):
            status, payload = _post(rest, path, {**ENDPOINTS[path], field: value})
            assert status == 422, (path, field, payload)
            message = str(payload["message"])
            assert message.startswith(f"invalid request: {field}: "), (path, message)
            for word in words:
                assert word in message, (path, message)


# --- a model set may not take a zoo name; sizes are positive everywhere -----------------------------

def test_zoo_name_is_kept_for_the_same_architecture_or_taken_over_with_replace(tmp_path: Path) -> None:
    from pytest_hwbench.models import MODELS

    zoo = MODELS["bert-tiny"]
    kwargs = ", ".join(f"{k} = {v}" for k, v in zoo.config_kwargs.items())
    same = tmp_path / "same.toml"
    same.write_text(f'[[models]]\nname = "bert-tiny"\nconfig_class = "BertConfig"\n{_BERT}config_kwargs = {{ {kwargs} }}\n')
    (spec,) = load_model_set(same)  # the zoo's own architecture under its own name: fine
    assert spec.name == "bert-tiny"
    base = tmp_path / "base.toml"  # BERT-base's defaults under the tiny model's name
    base.write_text(f'[[models]]\nname = "bert-tiny"\nconfig_class = "BertConfig"\n{_BERT}')
    with pytest.raises(ValueError, match="field 'name': 'bert-tiny' is a built-in zoo model"):
        load_model_set(base)
    base.write_text(f'[[models]]\nname = "bert-tiny"\nconfig_class = "BertConfig"\n{_BERT}replace = true\n')
    (spec,) = load_model_set(base)  # said out loud: taken over
    assert spec.config_kwargs == {}
    bad = tmp_path / "bad.toml"
    bad.write_text(f'[[models]]\nname = "x"\nconfig_class = "BertConfig"\n{_BERT}replace = "yes"\n')
    with pytest.raises(ValueError, match="field 'replace': expected true or false"):
        load_model_set(bad)


@pytest.mark.parametrize("layers", [-3, 0])
def test_rest_refuses_a_config_with_non_positive_layers(rest: object, layers: int) -> None:
    config = {"model_type": "bert", "num_hidden_layers": layers, "hidden_size": 64, "num_attention_heads": 2,
              "intermediate_size": 128, "vocab_size": 1000}
    for path in ("/performance/predict", "/hardware/select"):
        status, payload = _post(rest, path, {"config": config, "hardware" if "perf" in path else "available_hardware":
                                             ["cpu"]})
        assert status == 422, (path, payload)
        message = str(payload["message"])
        assert message.startswith("invalid request: config: "), payload
        assert "'num_hidden_layers'" in message and f"got {layers}" in message, payload


def test_python_api_refuses_non_positive_sizes_naming_the_field() -> None:
    import dataclasses

    from hwsel import predict_performance
    from hwsel.predict import Predictor
    from hwsel.query import QuestionError, describe_model

    predictor = Predictor(layers=("roofline", "rules"), detect=False)
    config = {"model_type": "gpt2", "n_layer": 2, "n_embd": -64, "n_head": 2, "vocab_size": 100}
    with pytest.raises(QuestionError, match="'n_embd'.*got -64") as exc:
        describe_model(config=config)
    assert exc.value.field == "config"
    zero = dataclasses.replace(describe_model("bert-tiny"), num_layers=0)
    with pytest.raises(QuestionError, match="num_layers must be a number > 0, got 0") as exc:
        predict_performance(zero, "cpu", predictor=predictor)
    assert exc.value.field == "model"


def test_predict_performance_takes_a_documented_seq_length() -> None:
    import inspect

    from hwsel import predict_performance
    from hwsel.predict import Predictor
    from hwsel.query import QuestionError

    assert "seq_length" in inspect.signature(predict_performance).parameters
    assert "`seq_length`" in (predict_performance.__doc__ or "")
    predictor = Predictor(layers=("roofline", "rules"), detect=False)
    short = predict_performance("bert-tiny", "cpu", batch_size=8, predictor=predictor)["cpu"]
    long = predict_performance("bert-tiny", "cpu", batch_size=8, predictor=predictor, seq_length=512)["cpu"]
    assert long.latency_ms > short.latency_ms  # 16x the tokens of bert-tiny's 32
    with pytest.raises(QuestionError, match="at most 512 tokens") as exc:
        predict_performance("bert-tiny", "cpu", predictor=predictor, seq_length=513)
    assert exc.value.field == "sequence_length"
