"""The built-in model zoo: config arguments of some 30 models in three tiers (`TIERS`; the quick
tier has two layers of hidden 64), among them the predecessor's key model set (`KEY_MODELS`), and
the zoo registry `MODELS` (`register_model`, `get_model`).
"""

from __future__ import annotations

import difflib
from collections.abc import Mapping
from types import MappingProxyType

from .spec import ModelSpec

_TINY = {"num_hidden_layers": 2, "hidden_size": 64, "num_attention_heads": 2, "intermediate_size": 128}
_TINY_TEXT = {**_TINY, "vocab_size": 1000}
#: Decoder-only LMs: grouped-query attention as in the real ones (4 query heads, 2 KV heads).
_TINY_LM = {**_TINY_TEXT, "num_attention_heads": 4, "num_key_value_heads": 2, "max_position_embeddings": 256}
_TINY_VISION = {**_TINY, "image_size": 64, "patch_size": 16}

# Real sizes, written out rather than left to config defaults, which move between releases.
#: LLaMA-7B (Llama-2-7b dims: multi-head attention, no GQA): 6.74B parameters.
_LLAMA_7B = {"hidden_size": 4096, "intermediate_size": 11008, "num_hidden_layers": 32, "num_attention_heads": 32,
             "num_key_value_heads": 32, "vocab_size": 32000, "max_position_embeddings": 4096}
#: TinyLlama-1.1B: LLaMA-2 layout at 22 layers, hidden 2048, GQA with 4 KV heads: 1.10B parameters.
_TINYLLAMA = {"hidden_size": 2048, "intermediate_size": 5632, "num_hidden_layers": 22, "num_attention_heads": 32,
              "num_key_value_heads": 4, "vocab_size": 32000, "max_position_embeddings": 2048}
#: CLIP ViT-L/14 at 336 px, LLaVA-1.5's vision tower: 304M parameters, 576 patches.
_CLIP_L336 = {"hidden_size": 1024, "intermediate_size": 4096, "num_hidden_layers": 24, "num_attention_heads": 16,
              "image_size": 336, "patch_size": 14, "projection_dim": 768}
#: LLaVA-1.5 pads the LLaMA vocabulary to 32064 and puts <image> at 32000.
_LLAVA = {"image_token_index": 32000, "vision_feature_layer": -2, "vision_feature_select_strategy": "default"}
#: Seen with torch 2.13 / transformers 5.23 (with TRANSFORMERS_DISABLE_TORCH_CHECK=1 the dynamo
#: exporter gives a graph fixed at batch 2 too).
_LLAVA_ONNX_GAP = ("no dynamic-batch ONNX export of LLaVA: transformers' LlavaModel.get_image_features "
                   "splits the image batch into a Python list, so the TorchScript exporter fixes the batch "
                   "at 2 (a Split node) and the dynamo exporter has no ONNX function for aten._is_all_true")
#: backend -> why a LLaVA model cannot run there (model sets of model_type llava carry it too).
LLAVA_GAPS: Mapping[str, str] = dict.fromkeys(
    ("onnxruntime", "onnxruntime-trt", "openvino", "onnxruntime-web"), _LLAVA_ONNX_GAP)
#: DETR's ResNet-50 backbone built by transformers (not timm), without pretrained weights.
_DETR = {"use_timm_backbone": False, "use_pretrained_backbone": False}

ZOO_SPECS: tuple[ModelSpec, ...] = (
    ModelSpec("bert-base", "embedding", "BertConfig", "text"),
    ModelSpec("gpt2", "text_generation", "GPT2Config", "text", auto_class="AutoModelForCausalLM"),
    ModelSpec("t5-small", "text_generation", "T5Config", "text2text", auto_class="AutoModelForSeq2SeqLM"),
    ModelSpec("vit-base", "vision", "ViTConfig", "image"),
    ModelSpec("resnet-50", "vision", "ResNetConfig", "image"),
    ModelSpec("whisper-tiny", "audio", "WhisperConfig", "audio_features", sequence_length=32),
    ModelSpec("wav2vec2-base", "audio", "Wav2Vec2Config", "audio_waveform"),
    ModelSpec("clip-vit-b32", "multimodal", "CLIPConfig", "image_text", sequence_length=77,
              config_kwargs={"vision_config": {"patch_size": 32}}),
    # CLAP consumes audio and text, as CLIP consumes images and text: multimodal, like CLIP here
    # (the predecessor filed it under audio). laion/clap-htsat-unfused: HTSAT + RoBERTa, 153M.
    ModelSpec("clap-htsat-unfused", "multimodal", "ClapConfig", "audio_text"),
    # DETR-ResNet-50 (41.5M) at 800 x 800: its processor resizes the short side to 800.
    ModelSpec("detr-resnet-50", "vision", "DetrConfig", "image",
              {**_DETR, "backbone_config": {"model_type": "resnet",
                                            "out_features": ["stage1", "stage2", "stage3", "stage4"]},
               "num_labels": 91, "image_size": 800},
              auto_class="AutoModelForObjectDetection"),
    # microsoft/xclip-base-patch32: 8 frames of 224 px, 197M.
    ModelSpec("xclip-base-p32", "multimodal", "XCLIPConfig", "video_text", sequence_length=77),
    ModelSpec("tinyllama-1.1b", "text_generation", "LlamaConfig", "text", _TINYLLAMA,
              auto_class="AutoModelForCausalLM"),
    # Qwen2-0.5B: GQA (14 query, 2 KV heads), output head tied to the embedding: 494M.
    ModelSpec("qwen2-0.5b", "text_generation", "Qwen2Config", "text",
              {"hidden_size": 896, "intermediate_size": 4864, "num_hidden_layers": 24, "num_attention_heads": 14,
               "num_key_value_heads": 2, "vocab_size": 151936, "max_position_embeddings": 32768,
               "tie_word_embeddings": True},
              auto_class="AutoModelForCausalLM"),
    # A LLaVA that fits a CPU host: LLaVA-1.5's vision tower and projector on TinyLlama-1.1B
    # (the TinyLLaVA recipe), 1.41B.
    ModelSpec("llava-tinyllama-1.4b", "multimodal", "LlavaConfig", "image_text_tokens",
              {**_LLAVA, "vision_config": {"model_type": "clip_vision_model", **_CLIP_L336},
               "text_config": {"model_type": "llama", **_TINYLLAMA, "vocab_size": 32064}},
              auto_class="AutoModelForImageTextToText", backend_gaps=LLAVA_GAPS),
    # the large tier: real sizes for GPU runners
    ModelSpec("llama-7b", "text_generation", "LlamaConfig", "text", _LLAMA_7B,
              auto_class="AutoModelForCausalLM", tier="large"),
    # Qwen2-7B: GQA (28 query, 4 KV heads), untied head: 7.62B.
    ModelSpec("qwen2-7b", "text_generation", "Qwen2Config", "text",
              {"hidden_size": 3584, "intermediate_size": 18944, "num_hidden_layers": 28, "num_attention_heads": 28,
               "num_key_value_heads": 4, "vocab_size": 152064, "max_position_embeddings": 32768,
               "tie_word_embeddings": False},
              auto_class="AutoModelForCausalLM", tier="large"),
    # llava-hf/llava-1.5-7b-hf: CLIP ViT-L/14-336 + Vicuna-7B (LLaMA-7B dims), 7.06B.
    ModelSpec("llava-7b", "multimodal", "LlavaConfig", "image_text_tokens",
              {**_LLAVA, "vision_config": {"model_type": "clip_vision_model", **_CLIP_L336},
               "text_config": {"model_type": "llama", **_LLAMA_7B, "vocab_size": 32064}},
              auto_class="AutoModelForImageTextToText", tier="large", backend_gaps=LLAVA_GAPS),
    # the quick tier: same architectures, two layers, hidden 64
    ModelSpec("bert-tiny", "embedding", "BertConfig", "text", _TINY_TEXT, tier="quick", sequence_length=32),
    ModelSpec("gpt2-tiny", "text_generation", "GPT2Config", "text",
              {"n_layer": 2, "n_embd": 64, "n_head": 2, "n_positions": 128},
              auto_class="AutoModelForCausalLM", tier="quick", sequence_length=32),
    ModelSpec("t5-tiny", "text_generation", "T5Config", "text2text",
              {"num_layers": 2, "num_decoder_layers": 2, "d_model": 64, "d_kv": 32, "d_ff": 128, "num_heads": 2,
               "vocab_size": 1000}, auto_class="AutoModelForSeq2SeqLM", tier="quick", sequence_length=32),
    ModelSpec("vit-tiny", "vision", "ViTConfig", "image", _TINY_VISION, tier="quick"),
    ModelSpec("resnet-tiny", "vision", "ResNetConfig", "image",
              {"embedding_size": 16, "hidden_sizes": [16, 32], "depths": [1, 1], "layer_type": "basic",
               "image_size": 64}, tier="quick"),
    ModelSpec("whisper-micro", "audio", "WhisperConfig", "audio_features",
              {"d_model": 64, "encoder_layers": 2, "decoder_layers": 2, "encoder_attention_heads": 2,
               "decoder_attention_heads": 2, "encoder_ffn_dim": 128, "decoder_ffn_dim": 128,
               "num_mel_bins": 80, "max_source_positions": 100, "max_target_positions": 64},
              tier="quick", sequence_length=16),
    ModelSpec("wav2vec2-tiny", "audio", "Wav2Vec2Config", "audio_waveform",
              {**_TINY, "vocab_size": 32, "conv_dim": [32, 32, 32], "conv_stride": [5, 4, 4],
               "conv_kernel": [10, 8, 8], "num_conv_pos_embeddings": 16, "num_conv_pos_embedding_groups": 2},
              tier="quick"),
    ModelSpec("clip-tiny", "multimodal", "CLIPConfig", "image_text",
              {"text_config": {**_TINY, "max_position_embeddings": 77},
               "vision_config": _TINY_VISION, "projection_dim": 32},
              tier="quick", sequence_length=32),
    ModelSpec("clap-tiny", "multimodal", "ClapConfig", "audio_text",
              {"text_config": {**_TINY_TEXT, "max_position_embeddings": 66},
               # two Swin stages: 16 -> 32 channels, spec 64 x 64 from 256 frames of 16 mel bins
               "audio_config": {"spec_size": 64, "num_mel_bins": 16, "patch_embeds_hidden_size": 32,
                                "hidden_size": 64, "depths": [1, 1], "num_attention_heads": [2, 2],
                                "window_size": 4},
               "projection_dim": 32},
              tier="quick", sequence_length=32),
    ModelSpec("detr-tiny", "vision", "DetrConfig", "image",
              {**_DETR, "backbone_config": {"model_type": "resnet", "embedding_size": 16, "hidden_sizes": [16, 32],
                                            "depths": [1, 1], "layer_type": "basic",
                                            "out_features": ["stage1", "stage2"]},
               "d_model": 64, "encoder_layers": 2, "decoder_layers": 2, "encoder_attention_heads": 2,
               "decoder_attention_heads": 2, "encoder_ffn_dim": 128, "decoder_ffn_dim": 128, "num_queries": 10,
               "num_labels": 91, "image_size": 64},
              auto_class="AutoModelForObjectDetection", tier="quick"),
    ModelSpec("xclip-tiny", "multimodal", "XCLIPConfig", "video_text",
              {"text_config": {**_TINY_TEXT, "max_position_embeddings": 77},
               "vision_config": {**_TINY_VISION, "num_frames": 4, "mit_hidden_size": 64, "mit_intermediate_size": 128,
                                 "mit_num_hidden_layers": 1, "mit_num_attention_heads": 2},
               "projection_dim": 64, "prompt_num_attention_heads": 2},
              tier="quick", sequence_length=32),
    ModelSpec("llama-tiny", "text_generation", "LlamaConfig", "text", _TINY_LM,
              auto_class="AutoModelForCausalLM", tier="quick", sequence_length=32),
    ModelSpec("qwen2-tiny", "text_generation", "Qwen2Config", "text", _TINY_LM,
              auto_class="AutoModelForCausalLM", tier="quick", sequence_length=32),
    # 16 image tokens (64 px, patch 16) + 32 text tokens; <image> is id 1000 of 1024
    ModelSpec("llava-tiny", "multimodal", "LlavaConfig", "image_text_tokens",
              {"image_token_index": 1000, "vision_feature_layer": -2, "vision_feature_select_strategy": "default",
               "vision_config": {"model_type": "clip_vision_model", **_TINY_VISION, "projection_dim": 32},
               "text_config": {"model_type": "llama", **_TINY_LM, "vocab_size": 1024}},
              auto_class="AutoModelForImageTextToText", tier="quick", sequence_length=32,
              backend_gaps=LLAVA_GAPS),
)

#: The predecessor's key model set (model-benchmarking-guide, but LLaVA-Next, which is LLaVA with
#: image tiling): architecture -> its zoo variants, smallest first.
KEY_MODELS: dict[str, tuple[str, ...]] = {
    "BERT": ("bert-tiny", "bert-base"),
    "CLAP": ("clap-tiny", "clap-htsat-unfused"),
    "CLIP": ("clip-tiny", "clip-vit-b32"),
    "DETR": ("detr-tiny", "detr-resnet-50"),
    "LLaMA": ("llama-tiny", "tinyllama-1.1b", "llama-7b"),
    "LLaVA": ("llava-tiny", "llava-tinyllama-1.4b", "llava-7b"),
    "Qwen2": ("qwen2-tiny", "qwen2-0.5b", "qwen2-7b"),
    "T5": ("t5-tiny", "t5-small"),
    "ViT": ("vit-tiny", "vit-base"),
    "Wav2Vec2": ("wav2vec2-tiny", "wav2vec2-base"),
    "Whisper": ("whisper-micro", "whisper-tiny"),
    "XCLIP": ("xclip-tiny", "xclip-base-p32"),
}


#: The built-in entries, by name.
BUILT_IN: Mapping[str, ModelSpec] = MappingProxyType({s.name: s for s in ZOO_SPECS})
#: name -> spec. `register_model` adds to it; users rarely touch it directly.
MODELS: dict[str, ModelSpec] = dict(BUILT_IN)


def register_model(spec: ModelSpec, *, replace_existing: bool = False) -> ModelSpec:
    """Add a model to the zoo; a clashing name is an error unless `replace_existing`."""
    if spec.name in MODELS and not replace_existing and MODELS[spec.name] != spec:
        raise ValueError(f"model {spec.name!r} is already in the zoo; pick another name")
    MODELS[spec.name] = spec
    return spec


def get_model(name: str) -> ModelSpec:
    """The zoo entry named `name`; an unknown name lists close matches."""
    try:
        return MODELS[name]
    except KeyError:
        close = difflib.get_close_matches(name, MODELS, n=3, cutoff=0.4)
        hint = f" Did you mean {', '.join(close)}?" if close else ""
        raise KeyError(
            f"unknown model {name!r}.{hint} Known: {', '.join(sorted(MODELS))}. "
            "Add your own with --hwbench-model-set FILE.toml|DIR (see README)."
        ) from None


#: The built-in zoo's names: a model set may reuse one only for the same architecture.
ZOO_NAMES: frozenset[str] = frozenset(BUILT_IN)


__all__ = ["BUILT_IN", "KEY_MODELS", "LLAVA_GAPS", "MODELS", "ZOO_NAMES", "ZOO_SPECS", "get_model", "register_model"]
