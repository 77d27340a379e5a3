"""Inputs per modality (`MODALITIES` in `spec`): deterministic random forward() kwargs, the size
of one item, the longest text. torch is imported inside `make_inputs`.
"""

from __future__ import annotations

from typing import Any

#: Samples of one waveform item: one second at 16 kHz.
AUDIO_SAMPLES = 16_000
#: CLAP's feature extractor works at 48 kHz with a hop of 480 samples (ClapFeatureExtractor).
CLAP_HOP = 480


def position_limit(config: Any) -> int | None:
    """Positions the (text) model embeds; None for relative positions (T5) or no text model."""
    cfg = getattr(config, "text_config", config)
    limit = getattr(cfg, "max_position_embeddings", None) or getattr(cfg, "n_positions", None)
    return int(limit) if limit else None


def _image_size(config: Any) -> int:
    cfg = getattr(config, "vision_config", config)
    return int(getattr(cfg, "image_size", 224) or 224)


def _audio_frames(config: Any) -> int:
    # Whisper's encoder needs exactly 2 * max_source_positions mel frames.
    return 2 * int(config.max_source_positions)


def _clap_frames(config: Any) -> int:
    # ClapAudioEncoder.reshape_mel2img folds (time, mel) into a spec_size x spec_size image:
    # time is stretched to spec_size * (spec_size // num_mel_bins) frames (1024 for HTSAT, about
    # 10 s at 48 kHz). Feed exactly that many, so the encoder does no resampling of its own.
    audio = config.audio_config
    return int(audio.spec_size) * (int(audio.spec_size) // int(audio.num_mel_bins))


def _image_tokens(config: Any) -> int:
    """Placeholder tokens one image takes in a LLaVA prompt: one per image feature.

    LlavaModel.get_image_features keeps every patch of the chosen vision layer, and the CLS
    token too only under the "full" strategy; get_placeholder_mask then wants exactly that many
    image tokens in input_ids (576 for LLaVA-1.5's 336 px, patch 14).
    """
    vision = config.vision_config
    patches = (int(vision.image_size) // int(vision.patch_size)) ** 2
    return patches + (1 if config.vision_feature_select_strategy == "full" else 0)


def make_inputs(modality: str, length: int, config: Any, batch: int, gen: Any) -> dict[str, Any]:
    """Forward() kwargs on the CPU for `batch` items of `modality` (`length`: the sequence length),
    drawn from the torch generator `gen`."""
    import torch

    vision = getattr(config, "vision_config", config)

    def randn(*shape: int) -> Any:
        return torch.randn(shape, generator=gen)

    def ids(n: int) -> Any:
        vocab = int(getattr(config, "text_config", config).vocab_size)
        return torch.randint(0, vocab, (batch, n), generator=gen)

    def text(token_ids: Any) -> dict[str, Any]:
        return {"input_ids": token_ids, "attention_mask": torch.ones_like(token_ids)}

    def pixels(*frames: int) -> Any:
        size = _image_size(config)
        return randn(batch, *frames, int(getattr(vision, "num_channels", 3)), size, size)

    if modality == "image":
        return {"pixel_values": pixels()}
    if modality == "audio_features":
        return {"input_features": randn(batch, int(config.num_mel_bins), _audio_frames(config)),
                "decoder_input_ids": ids(_text_len(modality, length, config))}
    if modality == "audio_waveform":
        return {"input_values": randn(batch, AUDIO_SAMPLES)}
    if modality == "image_text_tokens":
        # LLaVA-style prompt: the image's placeholder tokens, then `length` text tokens
        # (random ids that never collide with the image token).
        image_token = int(config.image_token_index)
        prompt = ids(_text_len(modality, length, config))
        prompt = torch.where(prompt == image_token, torch.zeros_like(prompt), prompt)
        image = torch.full((batch, _image_tokens(config)), image_token, dtype=prompt.dtype)
        return {**text(torch.cat([image, prompt], dim=1)), "pixel_values": pixels()}
    inputs = text(ids(_text_len(modality, length, config)))
    if modality == "text2text":
        inputs["decoder_input_ids"] = ids(_text_len(modality, length, config))
    elif modality == "image_text":
        inputs["pixel_values"] = pixels()
    elif modality == "audio_text":
        # ClapModel: input_features is (batch, 1, time, mel) log-mel (4 channels only with fusion).
        mel = int(config.audio_config.num_mel_bins)
        inputs["input_features"] = randn(batch, 1, _clap_frames(config), mel)
    elif modality == "video_text":
        # XCLIPModel: pixel_values is (batch, frames, channels, H, W) with frames == vision num_frames.
        inputs["pixel_values"] = pixels(int(vision.num_frames))
    return inputs


def max_length(modality: str, config: Any) -> int | None:
    """The longest text a model of `modality` takes (None: no limit, or no text)."""
    if modality in ("image", "audio_waveform"):
        return None
    if modality == "audio_features":
        return int(config.max_target_positions)
    if modality == "image_text_tokens":  # the text after the image's placeholders
        return max(1, int(config.text_config.max_position_embeddings) - _image_tokens(config))
    return position_limit(config)


def _text_len(modality: str, length: int, config: Any) -> int:
    limit = max_length(modality, config)
    return min(length, limit) if limit else length


def input_shape(modality: str, length: int, config: Any) -> dict[str, int | None]:
    """The size of one item of `modality` as `BenchmarkRecord` fields: the tokens the (language)
    model sees, the image size (a video's frame size; its frame count is in the config) and the
    audio samples."""
    placeholders = _image_tokens(config) if modality == "image_text_tokens" else 0
    text = modality not in ("image", "audio_waveform")
    tokens = placeholders + _text_len(modality, length, config) if text else None
    hop = int(getattr(config, "hop_length", 160) or 160)  # Whisper's feature extractor
    samples = {"audio_features": lambda: _audio_frames(config) * hop, "audio_waveform": lambda: AUDIO_SAMPLES,
               "audio_text": lambda: _clap_frames(config) * CLAP_HOP}.get(modality)
    image = modality in ("image", "image_text", "video_text", "image_text_tokens")
    return {"sequence_length": tokens, "image_size": _image_size(config) if image else None,
            "audio_samples": samples() if samples else None}


__all__ = ["AUDIO_SAMPLES", "CLAP_HOP", "input_shape", "make_inputs", "max_length", "position_limit"]
