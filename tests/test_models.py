"""The model zoo: real tiny builds, meta-device numbers, full-size parameter counts, model sets."""

from __future__ import annotations

import functools
import json
from pathlib import Path

import pytest
import torch
import transformers
from torch.nn.attention import SDPBackend, sdpa_kernel
from torch.utils.flop_counter import FlopCounterMode

from pytest_hwbench.models import MODELS, ModelSpec, get_model, load_model_set, register_model

QUICK = sorted(name for name, spec in MODELS.items() if spec.tier == "quick")

#: Parameter counts seen with AutoModel*.from_config on real-size configs (/work/shared/FACTS.md).
FULL_SIZE_PARAMS_M = {
    "bert-base": 109.5,
    "gpt2": 124.4,
    "t5-small": 60.5,
    "vit-base": 86.4,
    "resnet-50": 23.5,
    "whisper-tiny": 37.8,
    "wav2vec2-base": 94.4,
    "clip-vit-b32": 151.3,
}


@pytest.fixture
def offline(monkeypatch):
    monkeypatch.setenv("HF_HUB_OFFLINE", "1")
    monkeypatch.setenv("TRANSFORMERS_OFFLINE", "1")


@functools.cache
def _real(name: str):
    """A real (random-weight) build of a zoo model, shared by the tests of this module."""
    torch.manual_seed(0)
    return get_model(name).build_model("cpu")


def _flops(model, inputs) -> int:
    # The math kernel spells attention as matmuls the counter sees; torch's fused CPU kernel
    # (_scaled_dot_product_flash_attention_for_cpu) has no FLOP formula and would count 0.
    counter = FlopCounterMode(display=False)
    with sdpa_kernel(SDPBackend.MATH), counter, torch.no_grad():
        model(**inputs)
    return counter.get_total_flops()


def test_quick_tier_covers_every_family():
    assert len(QUICK) >= 8
    assert {MODELS[n].family for n in QUICK} == {"embedding", "text_generation", "vision", "audio", "multimodal"}


@pytest.mark.parametrize("name", QUICK)
def test_quick_model_builds_offline_and_runs_batch_2(name, offline):
    spec = get_model(name)
    assert hasattr(transformers, spec.config_class)  # a config class, never a hub id
    model = _real(name)
    assert not model.training
    params = sum(p.numel() for p in model.parameters())
    assert params == spec.architecture.param_count  # the meta build counts the same weights
    assert params < 5_000_000  # tiny really is tiny

    inputs = spec.make_inputs(2)
    assert all(v.shape[0] == 2 for v in inputs.values())
    with torch.inference_mode():
        out = model(**inputs)
    first = out[0]
    assert first.shape[0] == 2
    assert torch.isfinite(first).all()


@pytest.mark.parametrize("name", QUICK)
def test_quick_model_flops_are_linear_in_batch(name):
    spec = get_model(name)
    flops_1 = _flops(_real(name), spec.make_inputs(1))
    flops_2 = _flops(_real(name), spec.make_inputs(2))
    assert spec.architecture.flops_per_item > 0
    assert flops_1 > 0
    assert flops_2 / flops_1 == pytest.approx(2.0, rel=0.05)


@pytest.mark.parametrize(
    "name", QUICK,
)
def test_architecture_flops_match_a_real_count(name):
    spec = get_model(name)
    assert spec.architecture.flops_per_item == pytest.approx(_flops(_real(name), spec.make_inputs(1)), rel=0.02)


def test_make_inputs_are_deterministic_per_seed():
    spec = get_model("bert-tiny")
    a, b, c = spec.make_inputs(2, seed=0), spec.make_inputs(2, seed=0), spec.make_inputs(2, seed=1)
    assert torch.equal(a["input_ids"], b["input_ids"])
    assert not torch.equal(a["input_ids"], c["input_ids"])
    assert a["input_ids"].shape == (2, spec.input_shape()["sequence_length"])


@pytest.mark.parametrize(("name", "millions"), sorted(FULL_SIZE_PARAMS_M.items()))
def test_full_size_param_count_matches_facts(name, millions):
    spec = get_model(name)
    assert spec.tier == "full"
    arch = spec.architecture  # meta device: no weights allocated
    assert arch.param_count / 1e6 == pytest.approx(millions, rel=0.01)
    assert arch.flops_per_item > 2 * arch.param_count  # at least one multiply-add per weight


def test_get_model_typo_suggests_close_match():
    with pytest.raises(KeyError) as exc:
        get_model("bert-bse")
    message = exc.value.args[0]
    assert "'bert-bse'" in message
    assert "Did you mean" in message
    assert "bert-base" in message.split("Known:")[0]  # suggested, not only listed
    assert "--hwbench-model-set" in message


def test_register_model_refuses_a_clashing_name():
    clash = ModelSpec("bert-tiny", "embedding", "BertConfig", "text", {"num_hidden_layers": 1})
    with pytest.raises(ValueError, match="'bert-tiny' is already in the zoo"):
        register_model(clash)
    assert MODELS["bert-tiny"].config_kwargs["num_hidden_layers"] == 2


# --- model sets -------------------------------------------------------------------------------

_TINY_BERT = {"num_hidden_layers": 1, "hidden_size": 32, "num_attention_heads": 2, "intermediate_size": 64,
              "vocab_size": 500}

TOML_SET = """
[[models]]
name = "bert-mini-set"
family = "embedding"
config_class = "BertConfig"
modality = "text"
tier = "quick"
sequence_length = 16
config_kwargs = { num_hidden_layers = 1, hidden_size = 32, num_attention_heads = 2, intermediate_size = 64, vocab_size = 500 }

[[models]]
name = "gpt2-mini-set"
family = "text_generation"
config_class = "GPT2Config"
modality = "text"
auto_class = "AutoModelForCausalLM"
config_kwargs = { n_layer = 1, n_embd = 32, n_head = 2, n_positions = 64 }
"""


def _runs(spec: ModelSpec, batch: int = 1) -> None:
    model = spec.build_model("cpu")
    with torch.inference_mode():
        out = model(**spec.make_inputs(batch))
    assert out[0].shape[0] == batch


def test_load_model_set_from_toml(tmp_path, offline):
    path = tmp_path / "set.toml"
    path.write_text(TOML_SET)
    specs = load_model_set(path)
    assert [s.name for s in specs] == ["bert-mini-set", "gpt2-mini-set"]
    bert, gpt2 = specs
    assert (bert.family, bert.modality, bert.tier, bert.sequence_length) == ("embedding", "text", "quick", 16)
    assert bert.config_kwargs == _TINY_BERT
    assert gpt2.auto_class == "AutoModelForCausalLM"
    assert gpt2.tier == "full"  # the default
    assert bert.build_config().hidden_size == 32
    _runs(bert, 2)
    _runs(gpt2)


def test_load_model_set_from_json(tmp_path, offline):
    path = tmp_path / "set.json"
    entry = {"name": "vit-mini-set", "family": "vision", "config_class": "ViTConfig", "modality": "image",
             "config_kwargs": {**_TINY_BERT, "image_size": 32, "patch_size": 16}}
    del entry["config_kwargs"]["vocab_size"]
    path.write_text(json.dumps({"models": [entry]}))
    (spec,) = load_model_set(str(path))
    assert spec.name == "vit-mini-set"
    assert spec.input_shape()["image_size"] == 32
    _runs(spec, 2)


def test_load_model_set_from_directory_with_config_json(tmp_path, offline):
    model_dir = tmp_path / "my-bert"
    transformers.BertConfig(**_TINY_BERT).save_pretrained(model_dir)
    assert (model_dir / "config.json").exists()
    (spec,) = load_model_set(model_dir)
    assert spec.name == "my-bert"
    assert (spec.family, spec.modality, spec.auto_class) == ("embedding", "text", "AutoModel")
    assert Path(spec.config_class) == model_dir.resolve()
    config = spec.build_config()
    assert (config.hidden_size, config.num_hidden_layers, config.vocab_size) == (32, 1, 500)
    assert spec.architecture.param_count == sum(p.numel() for p in spec.build_model().parameters())
    _runs(spec)


@pytest.mark.parametrize(
    ("entry", "fragments"),
    [
        ({"family": "cooking"}, ["'cooking'", "embedding", "multimodal"]),
        ({"modality": "smell"}, ["'smell'", "text2text", "audio_waveform"]),
        ({"tier": "huge"}, ["'huge'", "quick"]),
        ({"sequence_length": 0}, ["sequence_length", "got 0"]),
        ({"famly": "vision"}, ["entry 0", "famly"]),
    ],
)
def test_invalid_model_set_entry_names_the_bad_value(tmp_path, entry, fragments):
    good = {"name": "x", "family": "embedding", "config_class": "BertConfig", "modality": "text"}
    path = tmp_path / "bad.json"
    path.write_text(json.dumps({"models": [{**good, **entry}]}))
    with pytest.raises(ValueError) as exc:
        load_model_set(path)
    for fragment in fragments:
        assert fragment in str(exc.value)


def test_model_set_with_unknown_suffix_names_it(tmp_path):
    path = tmp_path / "set.yaml"
    path.write_text("models: []\n")
    with pytest.raises(ValueError) as exc:
        load_model_set(path)
    assert "'.yaml'" in str(exc.value)
    assert ".toml" in str(exc.value) and ".json" in str(exc.value)


def test_model_set_errors_for_missing_and_empty_sources(tmp_path):
    with pytest.raises(ValueError, match="does not exist"):
        load_model_set(tmp_path / "nope.toml")
    with pytest.raises(ValueError, match="has no config.json"):
        load_model_set(tmp_path)
    empty = tmp_path / "empty.toml"
    empty.write_text("models = []\n")
    with pytest.raises(ValueError, match="non-empty 'models' list"):
        load_model_set(empty)


def test_a_model_set_that_is_no_regular_file_or_too_big_is_refused_without_reading_it(tmp_path):
    import os

    fifo = tmp_path / "set.toml"
    os.mkfifo(fifo)  # opening it for reading would wait for a writer forever
    zero = tmp_path / "zero.json"
    zero.symlink_to("/dev/zero")  # reading it would never end
    folder = tmp_path / "model"
    folder.mkdir()
    os.mkfifo(folder / "config.json")
    for path, what in ((fifo, "model set"), (zero, "model set"), (folder, "config")):
        with pytest.raises(ValueError, match=f"{what} .*: not a regular file; name a .toml/.json file"):
            load_model_set(path)
    big = tmp_path / "big.json"
    big.write_text(" " * (4 * 2**20 + 1))
    with pytest.raises(ValueError, match="big.json: 4194305 bytes, more than a model set or config holds"):
        load_model_set(big)


def test_directory_with_unknown_model_type_names_it(tmp_path):
    (tmp_path / "config.json").write_text(json.dumps({"model_type": "frobnicator"}))
    with pytest.raises(ValueError) as exc:
        load_model_set(tmp_path)
    assert "'frobnicator'" in str(exc.value)
    assert "bert" in str(exc.value)  # lists the known model types


def test_unknown_config_class_names_it():
    spec = ModelSpec("ghost", "embedding", "NoSuchConfig", "text")
    with pytest.raises(ValueError, match="'NoSuchConfig'"):
        spec.build_config()


def test_a_model_directory_is_refused_for_a_size_below_one_like_its_config_json(tmp_path):
    import json

    folder = tmp_path / "zero-width"
    folder.mkdir()
    config = {"model_type": "bert", "hidden_size": 0, "num_attention_heads": 2, "num_hidden_layers": 1,
              "intermediate_size": 8, "vocab_size": 100}
    (folder / "config.json").write_text(json.dumps(config))
    for path in (folder, folder / "config.json"):
        with pytest.raises(ValueError, match=r"config\.json: field 'hidden_size': a size must be a whole number >= 1, "
                                             r"got 0"):
            load_model_set(path)
