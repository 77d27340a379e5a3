"""The predecessor's key model set: tiny variants run, real sizes match the published counts on the
meta device, FLOPs stay right for grouped-query attention, and cases that do not fit skip."""

from __future__ import annotations

import dataclasses

import pytest
import torch
import transformers

from pytest_hwbench.case import BenchCase
from pytest_hwbench.device_memory import MEMORY_USABLE_SHARE
from pytest_hwbench.hardware import DeviceInfo, HardwareInfo, TargetInfo, detect_hardware
from pytest_hwbench.models import KEY_MODELS, MODELS, TIERS, dense_flops_estimate, get_model

#: The tiny variants this key set added (the others are covered by tests/test_models.py too).
NEW_TINY = ("llama-tiny", "qwen2-tiny", "llava-tiny", "clap-tiny", "detr-tiny", "xclip-tiny")

#: Published parameter counts: LLaMA-2-7B, Qwen2-7B, llava-1.5-7b-hf, TinyLlama-1.1B, Qwen2-0.5B
#: (model cards, safetensors metadata), laion/clap-htsat-unfused, microsoft/xclip-base-patch32,
#: facebook/detr-resnet-50 (Hub model pages).
PUBLISHED_PARAMS_B = {
    "llama-7b": 6.74,
    "qwen2-7b": 7.62,
    "llava-7b": 7.06,
    "tinyllama-1.1b": 1.10,
    "qwen2-0.5b": 0.494,
    "clap-htsat-unfused": 0.153,
    "xclip-base-p32": 0.197,
    "detr-resnet-50": 0.0416,
}

LLAMA_LIKE = ("tinyllama-1.1b", "llama-7b", "qwen2-0.5b", "qwen2-7b")

#: This machine's kind of host: 23.5 GiB of RAM (what detect_hardware reports here).
HOST_MB = 24106


@pytest.fixture
def offline(monkeypatch):
    monkeypatch.setenv("HF_HUB_OFFLINE", "1")
    monkeypatch.setenv("TRANSFORMERS_OFFLINE", "1")


def _cpu(memory_mb: float) -> TargetInfo:
    precisions = ("fp32", "bf16", "int8")
    return TargetInfo("cpu", True, "", (DeviceInfo(0, "Test CPU", memory_mb, None, precisions),), precisions,
                      {"memory_mb": memory_mb})


def _hw(host_mb: float = HOST_MB, gpu_mb: float | None = None) -> HardwareInfo:
    """This machine's detection with the host RAM (and a CUDA GPU) replaced: deterministic figures."""
    targets = dict(detect_hardware().targets)
    targets["cpu"] = _cpu(host_mb)
    if gpu_mb is not None:
        gpu = ("fp32", "fp16", "bf16")
        targets["cuda"] = TargetInfo("cuda", True, "", (DeviceInfo(0, "Test GPU", gpu_mb, "9.0", gpu),), gpu, {})
    return HardwareInfo(targets)


def _gib(mb: float) -> str:
    return f"{mb / 1024:.1f} GiB"


# --- the set ----------------------------------------------------------------------------------

def test_key_set_is_complete_and_in_the_zoo():
    assert set(KEY_MODELS) == {"BERT", "CLAP", "CLIP", "DETR", "LLaMA", "LLaVA", "Qwen2", "T5", "ViT", "Wav2Vec2",
                               "Whisper", "XCLIP"}
    assert "large" in TIERS
    for arch, names in KEY_MODELS.items():
        assert all(n in MODELS for n in names), arch
        tiers = [MODELS[n].tier for n in names]
        assert tiers[0] == "quick", arch  # every architecture has a CI variant
        assert "full" in tiers, arch  # and a real size
    for arch in ("LLaMA", "Qwen2", "LLaVA"):
        assert [MODELS[n].tier for n in KEY_MODELS[arch]] == ["quick", "full", "large"]
    families = {n: MODELS[n].family for n in ("llama-7b", "qwen2-7b", "llava-7b", "xclip-tiny", "clap-tiny",
                                               "detr-tiny")}
    assert families == {"llama-7b": "text_generation", "qwen2-7b": "text_generation", "llava-7b": "multimodal",
                        "xclip-tiny": "multimodal", "clap-tiny": "multimodal", "detr-tiny": "vision"}


@pytest.mark.parametrize("name", ["llama-tiny", "qwen2-tiny", "tinyllama-1.1b", "qwen2-0.5b", "qwen2-7b"])
def test_llama_style_models_use_grouped_query_attention(name):
    config = get_model(name).build_config()
    assert config.num_key_value_heads < config.num_attention_heads


# --- tiny variants ----------------------------------------------------------------------------

@pytest.mark.parametrize("name", NEW_TINY)
def test_tiny_variant_builds_offline_and_runs_batch_2(name, offline):
    spec = get_model(name)
    assert spec.tier == "quick"
    assert hasattr(transformers, spec.config_class)
    config = spec.build_config()
    model = spec.build_model("cpu")
    params = sum(p.numel() for p in model.parameters())
    assert params == spec.architecture.param_count
    assert params < 1_000_000
    inputs = spec.make_inputs(2)
    assert all(v.shape[0] == 2 for v in inputs.values())
    if spec.modality == "video_text":
        assert inputs["pixel_values"].shape == (2, config.vision_config.num_frames, 3, 64, 64)
    if spec.modality == "audio_text":
        assert inputs["input_features"].shape[:2] == (2, 1)
        assert inputs["input_features"].shape[3] == config.audio_config.num_mel_bins
    if spec.modality == "image_text_tokens":
        image_tokens = (inputs["input_ids"] == config.image_token_index).sum(dim=1)
        assert image_tokens.tolist() == [16, 16]  # (64 px / patch 16)^2, CLS dropped
        assert inputs["input_ids"].shape[1] == spec.input_shape()["sequence_length"] == 16 + 32
    with torch.inference_mode():
        out = model(**inputs)
    first = out[0]
    assert first.shape[0] == 2
    assert torch.isfinite(first).all()


# --- real sizes on the meta device ------------------------------------------------------------

@pytest.mark.parametrize(("name", "billions"), sorted(PUBLISHED_PARAMS_B.items()))
def test_real_size_param_count_matches_published(name, billions):
    arch = get_model(name).architecture  # meta device: nothing allocated
    assert arch.param_count / 1e9 == pytest.approx(billions, rel=0.02)
    assert arch.flops_per_item > 0
    assert arch.activation_bytes_per_item  # the forward ran on meta


def test_llava_7b_feeds_576_image_tokens():
    spec = get_model("llava-7b")
    assert spec.tier == "large"
    assert spec.input_shape() == {"sequence_length": 576 + 128, "image_size": 336, "audio_samples": None}
    ids = spec.make_inputs(1, device="meta")["input_ids"]
    assert ids.shape == (1, 704)


@pytest.mark.parametrize("name", LLAMA_LIKE)
def test_llama_flops_near_2_params_tokens(name):
    spec = get_model(name)
    arch = spec.architecture
    tokens = spec.input_shape()["sequence_length"]
    assert 0.9 <= arch.flops_per_item / (2 * arch.param_count * tokens) <= 1.1
    # the fallback used where FlopCounterMode fails on grouped-query attention agrees with the count
    estimate = dense_flops_estimate(spec.build_model("meta"), tokens, arch.num_layers, arch.hidden_size)
    assert estimate == pytest.approx(arch.flops_per_item, rel=0.005)


class _GQAFailingCounter:
    """FlopCounterMode as it fails on GQA models with CUDA attention kernels (FACTS.md)."""

    def __init__(self, display: bool = False) -> None:
        pass

    def __enter__(self) -> None:
        raise AssertionError("sdpa_flop_count: query/key/value shapes are incompatible")

    def __exit__(self, *exc: object) -> bool:
        return False


@pytest.mark.parametrize("name", ["llama-tiny", "tinyllama-1.1b"])
def test_flops_fallback_when_the_counter_asserts(name, monkeypatch, tmp_path):
    counted = get_model(name).architecture
    monkeypatch.setenv("HWBENCH_CACHE_DIR", str(tmp_path))  # traced again, not read from the store
    monkeypatch.setattr("torch.utils.flop_counter.FlopCounterMode", _GQAFailingCounter)
    fresh = dataclasses.replace(get_model(name))  # its own cached architecture
    fallback = fresh.architecture
    assert fallback.param_count == counted.param_count
    assert fallback.flops_per_item == pytest.approx(counted.flops_per_item, rel=0.01)
    assert fallback.activation_bytes_per_item == counted.activation_bytes_per_item  # still measured


# --- memory estimate and skips ----------------------------------------------------------------

def test_memory_estimate_adds_weights_and_activations():
    spec = get_model("llama-7b")
    arch = spec.architecture
    assert spec.weights_memory_mb("fp32") == pytest.approx(arch.param_count * 4 / 2**20)
    assert spec.weights_memory_mb("bf16") == pytest.approx(spec.weights_memory_mb("fp32") / 2)
    assert spec.activation_memory_mb("fp32", 8) == pytest.approx(8 * spec.activation_memory_mb("fp32", 1))
    assert spec.activation_memory_mb("fp16", 4) == pytest.approx(spec.activation_memory_mb("fp32", 4) / 2)
    assert spec.activation_memory_mb("int8", 4) == spec.activation_memory_mb("fp32", 4)  # dynamic int8
    assert spec.estimated_memory_mb("fp16", 8) == pytest.approx(
        spec.weights_memory_mb("fp16") + spec.activation_memory_mb("fp16", 8))
    # one fp32 item holds at least its KV cache (2 x layers x tokens x hidden) and logits
    tokens, layers, hidden = 128, 32, 4096
    floor = 4 * (2 * layers * tokens * hidden + tokens * 32000)
    assert floor <= arch.activation_bytes_per_item <= 1.25 * floor
    with pytest.raises(ValueError, match="'fp8'"):
        spec.estimated_memory_mb("fp8", 1)


@pytest.mark.parametrize("name", ["llama-7b", "qwen2-7b", "llava-7b"])
def test_large_models_skip_on_a_24gb_cpu_naming_the_figures(name):
    spec = get_model(name)
    hw = _hw()
    reason = BenchCase(name, "torch", "cpu", "fp32", 1).unavailable(hw)
    need = spec.estimated_memory_mb("fp32", 1)
    assert need > HOST_MB * MEMORY_USABLE_SHARE
    assert reason is not None
    assert reason.startswith(f"needs ~{_gib(need)} for {name} fp32 at batch 1")
    assert f"{_gib(spec.weights_memory_mb('fp32'))} weights" in reason
    assert "cpu has 23.5 GiB" in reason
    # bf16 would fit, but the model is built in fp32 on the host first
    reason = BenchCase(name, "torch", "cpu", "bf16", 1).unavailable(hw)
    assert reason is not None
    assert f"needs ~{_gib(spec.weights_memory_mb('fp32'))} of host memory to build {name} in fp32" in reason


def test_cpu_sizes_fit_a_24gb_cpu_at_every_default_batch():
    hw = _hw()
    for name in ("tinyllama-1.1b", "qwen2-0.5b", "llava-tinyllama-1.4b", *NEW_TINY):
        for precision in ("fp32", "bf16", "int8"):
            for batch in (1, 8, 32):
                assert BenchCase(name, "torch", "cpu", precision, batch).unavailable(hw) is None, (name, batch)


def test_every_cpu_case_of_the_large_tier_skips_here():
    """`pytest bench_suites -m cpu` never builds a 7B model on a 24 GB host, on any backend."""
    from pytest_hwbench.backends.base import registered_backends

    hw = _hw()
    large = [n for n, s in MODELS.items() if s.tier == "large"]
    assert sorted(large) == ["llama-7b", "llava-7b", "qwen2-7b"]
    checked = 0
    for backend in registered_backends().values():
        if "cpu" not in backend.hardware:
            continue
        for name in large:
            for precision in backend.precisions:
                for batch in (1, 8, 32):
                    assert BenchCase(name, backend.name, "cpu", precision, batch).unavailable(hw)
                    checked += 1
    assert checked


def test_gpu_memory_decides_gpu_cases_and_the_host_still_builds_in_fp32():
    big_gpu = _hw(host_mb=128 * 1024, gpu_mb=81559)  # an H100 80GB box
    assert BenchCase("llama-7b", "torch", "cuda", "fp16", 32).unavailable(big_gpu) is None
    assert BenchCase("llava-7b", "torch", "cuda", "fp32", 32).unavailable(big_gpu) is None

    small_gpu = _hw(host_mb=128 * 1024, gpu_mb=16 * 1024)
    assert BenchCase("llama-7b", "torch", "cuda", "fp16", 1).unavailable(small_gpu) is None
    reason = BenchCase("llama-7b", "torch", "cuda", "fp16", 32).unavailable(small_gpu)  # activations tip it
    assert reason is not None and "at batch 32" in reason and "cuda has 16.0 GiB" in reason

    small_host = _hw(host_mb=16 * 1024, gpu_mb=81559)
    reason = BenchCase("llama-7b", "torch", "cuda", "fp16", 1).unavailable(small_host)
    assert reason is not None and "of host memory to build llama-7b in fp32" in reason and "cpu has 16.0 GiB" in reason


def test_backend_reasons_come_before_memory():
    hw = _hw()
    reason = BenchCase("llama-7b", "torch", "cpu", "fp16", 1).unavailable(hw)  # no native fp16 on this CPU
    assert reason is not None and "fp16 unsupported" in reason and "GiB" not in reason


def test_llava_skips_onnx_backends_with_the_exporter_gap():
    pytest.importorskip("onnxruntime")
    hw = detect_hardware()
    reason = BenchCase("llava-tiny", "onnxruntime", "cpu", "fp32", 1).unavailable(hw)
    assert reason is not None
    assert reason.startswith("llava-tiny on onnxruntime: no dynamic-batch ONNX export of LLaVA")
    assert BenchCase("llava-tiny", "torch", "cpu", "fp32", 1).unavailable(hw) is None
