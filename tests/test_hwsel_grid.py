"""hwsel's model questions are typed end to end: grid questions (`selection_map`, `analyze_model`,
`prediction_matrix`) go through one builder whose every bad value is a `QuestionError` naming
its field, `Query.model` is a `ModelInfo`, the zoo's traced table matches the zoo, and a
`Predictor` builds when it first answers, never on attribute access.

A roofline predictor (no data, no champions, no detection) answers: every machine runs it alike.
"""

from __future__ import annotations

import dataclasses
import json
import subprocess
import sys
import textwrap
from pathlib import Path
from typing import Any

import pytest

from hwsel import ModelInfo, Predictor, QuestionError, analyze_model, prediction_matrix, selection_map
from hwsel.query import GridQuestion, Query, ask_grid, model_info

ROOT = Path(__file__).resolve().parents[1]


@pytest.fixture(scope="module")
def roof() -> Predictor:
    return Predictor(layers=("roofline", "rules"), detect=False)


def _field(call: Any) -> tuple[str, str]:
    with pytest.raises(QuestionError) as bad:
        call()
    return bad.value.field, str(bad.value)


@pytest.mark.parametrize(("kwargs", "field", "words"), [
    ({"families": ["robots"]}, "model_family", "unknown model family 'robots'; accepted: "),
    ({"families": []}, "model_families", "selection_map needs at least one family"),
    ({"batch_sizes": []}, "batch_sizes", "selection_map needs at least one batch size"),
    ({"batch_sizes": [0]}, "batch_size", "batch_size must be between 1 and"),
    ({"hardware": ["tpu"]}, "hardware", "unknown hardware 'tpu'; accepted: "),
    ({"modes": ["serving"]}, "mode", "'serving'"),
    ({"modes": []}, "modes", "selection_map needs at least one mode"),
    ({"precision": "fp8"}, "precision", "unknown precision 'fp8'"),
    ({"backend": ""}, "backend", "backend must be a short name"),
    ({"device": "h100", "hardware": ["cpu", "cuda"]}, "device", "one device ('h100') for several hardware"),
])
def test_selection_map_names_the_field_of_each_bad_value(roof: Predictor, kwargs: dict[str, Any], field: str,
                                                         words: str) -> None:
    args = {"families": ["vision"], "batch_sizes": [1], "hardware": ["cpu"], **kwargs}
    got_field, message = _field(lambda: selection_map(**args, predictor=roof))
    assert got_field == field and words in message, (got_field, message)


@pytest.mark.parametrize(("kwargs", "field", "words"), [
    ({"model": "bert-bse"}, "model", "unknown model 'bert-bse'"),
    ({"batch_sizes": []}, "batch_sizes", "analyze_model needs at least one batch size"),
    ({"hardware": ["tpu"]}, "hardware", "unknown hardware 'tpu'"),
    ({"modes": []}, "modes", "analyze_model needs at least one mode"),
    ({"modes": ["serving"]}, "mode", "'serving'"),
    ({"precision": "fp8"}, "precision", "unknown precision 'fp8'"),
])
def test_analyze_model_names_the_field_of_each_bad_value(roof: Predictor, kwargs: dict[str, Any], field: str,
                                                         words: str) -> None:
    args = {"model": "bert-tiny", "batch_sizes": [1], "hardware": ["cpu"], **kwargs}
    got_field, message = _field(lambda: analyze_model(args.pop("model"), **args, predictor=roof))
    assert got_field == field and words in message, (got_field, message)


@pytest.mark.parametrize(("kwargs", "field", "words"), [
    ({"models": []}, "models", "prediction_matrix needs at least one model"),
    ({"models": [{"size": 3}]}, "models", "models[0]: a model given as a mapping needs a 'name'"),
    ({"models": ["bert-bse"]}, "model", "unknown model 'bert-bse'"),
    ({"batch_sizes": []}, "batch_sizes", "prediction_matrix needs at least one batch size"),
    ({"precisions": []}, "precisions", "prediction_matrix needs at least one precision"),
    ({"precisions": ["fp8"]}, "precision", "unknown precision 'fp8'"),
    ({"hardware": ["tpu"]}, "hardware", "unknown hardware 'tpu'"),
    ({"mode": "serving"}, "mode", "'serving'"),
])
def test_prediction_matrix_names_the_field_of_each_bad_value(roof: Predictor, kwargs: dict[str, Any], field: str,
                                                             words: str) -> None:
    args = {"models": ["bert-tiny"], "batch_sizes": [1], "hardware": ["cpu"], "precisions": ["fp32"], **kwargs}
    got_field, message = _field(lambda: prediction_matrix(**args, predictor=roof))
    assert got_field == field and words in message, (got_field, message)


def test_one_grid_builder_checks_once_and_asks_every_target(roof: Predictor) -> None:
    grid = ask_grid(roof.built().config_, what="a test", models=["bert-tiny", {"name": "gpt2-tiny"}],
                    hardware=["cpu", "cuda"], batch_sizes=[1, 8.0], modes=["training", "train", "inference"],
                    precisions=["fp16"], device={"cuda": "h100"})
    assert isinstance(grid, GridQuestion) and [m.name for m in grid.models] == ["bert-tiny", "gpt2-tiny"]
    assert grid.batch_sizes == (1, 8) and grid.modes == ("train", "inference") and grid.hardware == ("cpu", "cuda")
    qs = grid.queries(grid.models[0], 8, "train", "fp16")
    assert qs == [Query(grid.models[0], "cpu", "fp16", 8, "train", None, None),
                  Query(grid.models[0], "cuda", "fp16", 8, "train", None, "h100")]
    # the grid functions answer as before: the matrix's devices are the ones asked for, each target's default else
    out = prediction_matrix(["bert-tiny"], ["cpu", "cuda"], [1], ["fp32"], device={"cuda": "h100"}, predictor=roof)
    assert out["devices"]["cuda"]["device"] == "h100" and out["devices"]["cuda"]["device_source"] == "asked"
    assert out["models"]["bert-tiny"]["predictions"]["cuda"]["1"]["fp32"]["source"] == "roofline"


def test_a_question_holds_a_model_info_and_nothing_else(roof: Predictor) -> None:
    info = model_info("bert-tiny")
    assert isinstance(info, ModelInfo) and model_info(info) is info
    duck = type("Duck", (), {"name": "x", "family": "vision", "param_count": 1, "flops_per_item": 1.0})()
    with pytest.raises(QuestionError, match="model must be a name or a hwsel.ModelInfo, got Duck") as bad:
        roof.predict(duck, "cpu")
    assert bad.value.field == "model"
    assert isinstance(roof.query("bert-tiny", "cpu").model, ModelInfo)
    wider = dataclasses.replace(info, hidden_size=None, num_layers=None)  # unknown sizes still answer
    assert roof.predict(wider, "cpu")["cpu"].latency_ms > 0


def test_the_zoo_table_is_the_zoos_and_traced_from_its_current_specs() -> None:
    """Names and families come from the zoo; each traced row belongs to the zoo's spec of today
    (a spec that changed needs ``python -m hwsel.resolution`` to trace it again)."""
    from hwsel._zoo_table import ZOO_ARCHITECTURES
    from hwsel.resolution import _fingerprint, info_from_spec, resolve_model
    from pytest_hwbench.models import MODELS, ZOO_NAMES

    assert set(ZOO_ARCHITECTURES) == set(ZOO_NAMES)
    stale = [n for n in ZOO_NAMES if ZOO_ARCHITECTURES[n]["fingerprint"] != _fingerprint(MODELS[n])]
    assert not stale, f"re-trace with python -m hwsel.resolution: {stale}"
    assert not {"name", "family"} & {k for row in ZOO_ARCHITECTURES.values() for k in row}
    for name in ZOO_NAMES:
        info = info_from_spec(MODELS[name])
        assert (info.name, info.family) == (name, MODELS[name].family)
    bert = resolve_model("bert-base-uncased")
    assert (bert.name, bert.family, bert.param_count, bert.flops_per_item, bert.launches_per_forward) == (
        "bert-base", "embedding", 109482240, 22348431360.0, 239)


def test_resolving_and_asking_import_neither_numpy_nor_pandas() -> None:
    proc = subprocess.run([sys.executable, "-c", textwrap.dedent("""
        import json, sys
        from hwsel.query import describe_model
        describe_model("bert-base-uncased")
        print(json.dumps(sorted(m for m in ("numpy", "pandas", "torch", "transformers") if m in sys.modules)))
    """)], cwd=ROOT, capture_output=True, text=True, timeout=120, check=True)
    assert json.loads(proc.stdout) == []


def test_a_predictor_builds_when_it_first_answers_never_on_attribute_access() -> None:
    p = Predictor(layers=("roofline",), detect=False)
    with pytest.raises(AttributeError, match=r"no attribute 'config_' before it is built: call \.build\(\)"):
        p.config_  # noqa: B018  (reading an attribute builds nothing)
    assert not hasattr(p, "index_") and not hasattr(p, "nothing")
    assert not [name for name in vars(p) if name.endswith("_")]
    first = p.predict("bert-tiny", "cpu")["cpu"]
    layers = p.layers_
    assert p.built() is p and p.layers_ is layers  # built once, cached
    assert p.predict("bert-tiny", "cpu")["cpu"] == first == Predictor(layers=("roofline",), detect=False).build(
    ).predict("bert-tiny", "cpu")["cpu"]
    fresh = Predictor(layers=("roofline",), detect=False)
    assert fresh.describe()["roofline"]["available"] and fresh.config_.origin == "defaults"
