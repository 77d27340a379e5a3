"""hwsel's shape: nothing of pytest_hwbench imports it, one model description, a predictor whose
``__init__`` only stores its parameters, one model build per question. (Import cycles and floors:
`test_structure` and `test_floors`, which read imports the same way.)"""

from __future__ import annotations

import pytest
from test_structure import import_graph


def test_hwsel_imports_nothing_of_pytest_hwbench_that_imports_hwsel() -> None:
    """hwsel may import pytest_hwbench (record, zoo, vocabulary, detection, readers), never the
    reverse: a pytest_hwbench module importing hwsel would close a cycle across the packages.
    (hwsel's own cycles: `test_structure`; which floors it reads: `test_floors`.)"""
    graph = import_graph("pytest_hwbench", "hwsel")
    back = {name: sorted(t for t in targets if t.split(".")[0] == "hwsel")
            for name, targets in graph.items() if name.split(".")[0] == "pytest_hwbench"}
    assert not {k: v for k, v in back.items() if v}, back


# --- one model description -----------------------------------------------------------------------

def test_model_info_takes_the_architecture_fields_by_name_from_the_zoo() -> None:
    """`hwsel.resolution.ModelInfo` is hwsel's one model description: each architecture number is
    `pytest_hwbench.models.ModelArchitecture`'s field of that name and type (copied generically by
    `ModelInfo.from_architecture`), so the two cannot drift apart."""
    import dataclasses

    from hwsel.resolution import ModelInfo
    from pytest_hwbench.models import ModelArchitecture

    arch = {f.name: f.type for f in dataclasses.fields(ModelArchitecture)}
    info = {f.name: f.type for f in dataclasses.fields(ModelInfo)}
    unused = {"activation_bytes_per_item"}  # hwsel's memory model derives activations itself
    assert set(arch) - unused <= set(info), set(arch) - unused - set(info)
    assert {k: info[k] for k in set(arch) - unused} == {k: arch[k] for k in set(arch) - unused}
    built = ModelInfo.from_architecture(
        ModelArchitecture(model_type="bert", param_count=10, flops_per_item=2, num_layers=2, hidden_size=8,
                          activation_bytes_per_item=1.0, launches_per_forward=5, num_attention_heads=2,
                          num_key_value_heads=1),
        name="toy", family="embedding", shape={"sequence_length": 16})
    assert built == ModelInfo("toy", "embedding", "bert", 10, 2.0, 2, 8, 16, launches_per_forward=5,
                              num_attention_heads=2, num_key_value_heads=1)
    assert isinstance(built.flops_per_item, float)


# --- the Predictor stores, build() builds; one question builder ----------------------------------

class _Untouchable:
    """A parameter value that fails on any use: `Predictor.__init__` may only store it."""

    def __getattr__(self, name: str) -> None:
        raise AssertionError(f"__init__ used its parameter ({name})")

    def __iter__(self) -> None:
        raise AssertionError("__init__ iterated its parameter")


def test_predictor_init_only_stores_its_parameters() -> None:
    from hwsel.predict import Predictor

    params = {"runs": _Untouchable(), "champions": _Untouchable(), "config": _Untouchable(), "layers": ("rules",),
              "notes": _Untouchable(), "champion_domain": _Untouchable(), "training_devices": _Untouchable(),
              "detect": False, "champion_modes": _Untouchable()}
    predictor = Predictor(**params)
    assert {name: getattr(predictor, name) for name in params} == params
    assert not [name for name in vars(predictor) if name.endswith("_")]  # nothing built yet
    with pytest.raises(ValueError, match="unknown layer 'oracle'"):
        Predictor(layers=("oracle",))  # a typo fails at once, without side effects
    built = Predictor(layers=("rules",), detect=False)
    assert built.build() is built and built.config_.origin == "defaults" and built.status_["rules"].available


def test_one_question_builds_the_model_once(monkeypatch: pytest.MonkeyPatch) -> None:
    """However many targets, `hwsel.query.ask` resolves the model once, for every front door."""
    import hwsel.query
    from hwsel.performance import predict_performance
    from hwsel.predict import Predictor
    from hwsel.select import select_hardware

    calls: list[object] = []
    real = hwsel.query.model_info

    def counting(model: object, config: object = None) -> object:
        calls.append(model)
        return real(model, config)  # type: ignore[arg-type]

    monkeypatch.setattr(hwsel.query, "model_info", counting)
    predictor = Predictor(layers=("rules",), detect=False)
    preds = predict_performance("bert-tiny", ["cpu", "cuda", "mps"], predictor=predictor)
    assert set(preds) == {"cpu", "cuda", "mps"} and calls == ["bert-tiny"]
    calls.clear()
    select_hardware("bert-tiny", available_hardware=["cpu", "cuda"], mode="training", predictor=predictor)
    assert calls == ["bert-tiny"]
    with pytest.raises(hwsel.query.QuestionError) as bad:
        predict_performance("bert-tiny", "cpu", mode="serving", predictor=predictor)
    assert bad.value.field == "mode" and "'serving'" in str(bad.value) and "inference, train" in str(bad.value)
    with pytest.raises(KeyError) as unknown:  # UnknownModelError is a QuestionError and a KeyError
        predict_performance("bert-bse", "cpu", predictor=predictor)
    assert isinstance(unknown.value, hwsel.query.QuestionError) and str(unknown.value).startswith("unknown model")
