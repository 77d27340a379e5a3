"""Inputs per modality: deterministic random forward() kwargs, the size of one item, the longest
text; tables keyed by modality (`MODALITIES` in `spec`). torch is imported inside the builders.
"""

from __future__ import annotations

from collections.abc import Callable
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


def _text_len(length: int, config: Any) -> int:
    limit = position_limit(config)
    return min(length, limit) if limit else length


def _image_size(config: Any) -> int:
    cfg = getattr(config, "vision_config", config)
    return int(getattr(cfg, "image_size", 224) or 224)


def _audio_frames(config: Any) -> int:
    # Whisper's encoder needs exactly 2 * max_source_positions mel frames.
    return 2 * int(config.max_source_positions)


def _ids(config: Any, shape: tuple[int, ...], gen: Any) -> Any:
    import torch

    cfg = getattr(config, "text_config", config)
    return torch.randint(0, int(cfg.vocab_size), shape, generator=gen)


def _in_text(length: int, config: Any, batch: int, gen: Any) -> dict[str, Any]:
    import torch

    ids = _ids(config, (batch, _text_len(length, config)), gen)
    return {"input_ids": ids, "attention_mask": torch.ones_like(ids)}


def _in_text2text(length: int, config: Any, batch: int, gen: Any) -> dict[str, Any]:
    inputs = _in_text(length, config, batch, gen)
    inputs["decoder_input_ids"] = _ids(config, (batch, _text_len(length, config)), gen)
    return inputs


def _in_image(length: int, config: Any, batch: int, gen: Any) -> dict[str, Any]:
    import torch

    size = _image_size(config)
    channels = int(getattr(getattr(config, "vision_config", config), "num_channels", 3))
    return {"pixel_values": torch.randn((batch, channels, size, size), generator=gen)}


def _in_audio_features(length: int, config: Any, batch: int, gen: Any) -> dict[str, Any]:
    import torch

    feats = torch.randn((batch, int(config.num_mel_bins), _audio_frames(config)), generator=gen)
    decoder_len = min(length, int(config.max_target_positions))
    return {"input_features": feats, "decoder_input_ids": _ids(config, (batch, decoder_len), gen)}


def _in_audio_waveform(length: int, config: Any, batch: int, gen: Any) -> dict[str, Any]:
    import torch

    return {"input_values": torch.randn((batch, AUDIO_SAMPLES), generator=gen)}


def _in_image_text(length: int, config: Any, batch: int, gen: Any) -> dict[str, Any]:
    inputs = _in_text(length, config, batch, gen)
    inputs.update(_in_image(length, config, batch, gen))
    return inputs


def _clap_frames(config: Any) -> int:
    # ClapAudioEncoder.reshape_mel2img folds (time, mel) into a spec_size x spec_size image:
    # time is stretched to spec_size * (spec_size // num_mel_bins) frames (1024 for HTSAT, about
    # 10 s at 48 kHz). Feed exactly that many, so the encoder does no resampling of its own.
    audio = config.audio_config
    return int(audio.spec_size) * (int(audio.spec_size) // int(audio.num_mel_bins))


def _in_audio_text(length: int, config: Any, batch: int, gen: Any) -> dict[str, Any]:
    import torch

    # ClapModel: input_features is (batch, 1, time, mel) log-mel (4 channels only with fusion).
    mel = int(config.audio_config.num_mel_bins)
    inputs = _in_text(length, config, batch, gen)
    inputs["input_features"] = torch.randn((batch, 1, _clap_frames(config), mel), generator=gen)
    return inputs


def _in_video_text(length: int, config: Any, batch: int, gen: Any) -> dict[str, Any]:
    import torch

    # XCLIPModel: pixel_values is (batch, frames, channels, H, W) with frames == vision num_frames.
    vision = config.vision_config
    size = _image_size(config)
    shape = (batch, int(vision.num_frames), int(getattr(vision, "num_channels", 3)), size, size)
    inputs = _in_text(length, config, batch, gen)
    inputs["pixel_values"] = torch.randn(shape, generator=gen)
    return inputs


def _image_tokens(config: Any) -> int:
    """Placeholder tokens one image takes in a LLaVA prompt: one per image feature.

    LlavaModel.get_image_features keeps every patch of the chosen vision layer, and the CLS
    token too only under the "full" strategy; get_placeholder_mask then wants exactly that many
    image tokens in input_ids (576 for LLaVA-1.5's 336 px, patch 14).
    """
    vision = config.vision_config
    patches = (int(vision.image_size) // int(vision.patch_size)) ** 2
    return patches + (1 if config.vision_feature_select_strategy == "full" else 0)


def _tokens_text_len(length: int, config: Any) -> int:
    limit = int(config.text_config.max_position_embeddings) - _image_tokens(config)
    return max(1, min(length, limit))


def _in_image_text_tokens(length: int, config: Any, batch: int, gen: Any) -> dict[str, Any]:
    import torch

    # LLaVA-style prompt: the image's placeholder tokens, then `length` text tokens
    # (random ids that never collide with the image token).
    image_token = int(config.image_token_index)
    text = _ids(config, (batch, _tokens_text_len(length, config)), gen)
    text = torch.where(text == image_token, torch.zeros_like(text), text)
    image = torch.full((batch, _image_tokens(config)), image_token, dtype=text.dtype)
    ids = torch.cat([image, text], dim=1)
    inputs = {"input_ids": ids, "attention_mask": torch.ones_like(ids)}
    inputs.update(_in_image(length, config, batch, gen))
    return inputs


#: modality -> builder(sequence_length, config, batch, generator) -> forward() kwargs on the CPU.
INPUTS: dict[str, Callable[[int, Any, int, Any], dict[str, Any]]] = {
    "text": _in_text,
    "text2text": _in_text2text,
    "image": _in_image,
    "audio_features": _in_audio_features,
    "audio_waveform": _in_audio_waveform,
    "image_text": _in_image_text,
    "audio_text": _in_audio_text,
    "video_text": _in_video_text,
    "image_text_tokens": _in_image_text_tokens,
}


def _shape(sequence_length: int | None = None, image_size: int | None = None,
           audio_samples: int | None = None) -> dict[str, int | None]:
    return {"sequence_length": sequence_length, "image_size": image_size, "audio_samples": audio_samples}


#: modality -> the longest text a model of that modality takes (None: no limit or no text).
MAX_LENGTH: dict[str, Callable[[Any], int | None]] = {
    "text": position_limit,
    "text2text": position_limit,
    "image": lambda c: None,
    "audio_features": lambda c: int(c.max_target_positions),
    "audio_waveform": lambda c: None,
    "image_text": position_limit,
    "audio_text": position_limit,
    "video_text": position_limit,
    "image_text_tokens": lambda c: max(1, int(c.text_config.max_position_embeddings) - _image_tokens(c)),
}

#: modality -> the size of one item, from (sequence_length, config). Keys are `BenchmarkRecord`
#: fields: video frames have none, so a video item reports its frame size only (the frame count
#: is in the config).
SHAPES: dict[str, Callable[[int, Any], dict[str, int | None]]] = {
    "text": lambda n, c: _shape(_text_len(n, c)),
    "text2text": lambda n, c: _shape(_text_len(n, c)),
    "image": lambda n, c: _shape(image_size=_image_size(c)),
    "audio_features": lambda n, c: _shape(
        min(n, int(c.max_target_positions)),
        audio_samples=_audio_frames(c) * int(getattr(c, "hop_length", 160) or 160),
    ),
    "audio_waveform": lambda n, c: _shape(audio_samples=AUDIO_SAMPLES),
    "image_text": lambda n, c: _shape(_text_len(n, c), _image_size(c)),
    "audio_text": lambda n, c: _shape(_text_len(n, c), audio_samples=_clap_frames(c) * CLAP_HOP),
    "video_text": lambda n, c: _shape(_text_len(n, c), _image_size(c)),
    # the tokens the language model sees: the image's placeholders plus the text
    "image_text_tokens": lambda n, c: _shape(_image_tokens(c) + _tokens_text_len(n, c), _image_size(c)),
}

__all__ = ["AUDIO_SAMPLES", "CLAP_HOP", "INPUTS", "MAX_LENGTH", "SHAPES", "position_limit"]
