"""The ``generate`` scenario: one fixed-length greedy ``generate()`` call per iteration (KV cache,
``min_new_tokens == max_new_tokens == N``), on torch eager and, with the decode step compiled
(static KV cache and a ``CompileConfig``), on the torch.compile backends.

Measured (medians, over the batch): ``latency_ms_*``, the whole call; ``ttft_ms``, the call with
one new token (the eager prefill); ``decode_ms_per_token``, ``(full - ttft) / (N - 1)``;
``tokens_per_s``, ``batch * N / full``. The first call checks that each sequence got N tokens.
"""

from __future__ import annotations

import contextlib
import functools
import logging
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

from ..backends._torch import (
    COMPILE_MODES,
    EAGER,
    CompileMode,
    TorchModel,
    graphs_compiled,
    load_model,
    move_inputs,
    no_recompile,
    torch_fields,
    warm_up,
)
from ..errors import UnsupportedCase
from ..torch_device import device_string
from ..vocabulary import MODE_DOCS, TORCH_DTYPES
from . import Scenario, register_scenario

if TYPE_CHECKING:
    from ..backends.base import LoadedModel
    from ..hardware import HardwareInfo
    from ..models import ModelSpec
    from ..trackers import Latency, LatencyTracker, TimingConfig

#: Zoo modalities whose inputs are a generation prompt: token ids (decoders; T5's encoder),
#: log-mel features (Whisper's encoder), an image and its placeholder tokens (LLaVA).
GENERATE_MODALITIES = frozenset({"text", "text2text", "audio_features", "image_text_tokens"})
#: (auto class, transformers mapping) in order of preference, for encoder-decoder configs.
_ENCODER_DECODER_HEADS = (
    ("AutoModelForSpeechSeq2Seq", "MODEL_FOR_SPEECH_SEQ_2_SEQ_MAPPING"),
    ("AutoModelForSeq2SeqLM", "MODEL_FOR_SEQ_TO_SEQ_CAUSAL_LM_MAPPING"),
)
#: The same for decoder-only configs. Whisper's config also maps to a causal LM (its decoder
#: alone): encoder-decoder configs never reach this list.
_DECODER_HEADS = (
    ("AutoModelForImageTextToText", "MODEL_FOR_IMAGE_TEXT_TO_TEXT_MAPPING"),
    ("AutoModelForCausalLM", "MODEL_FOR_CAUSAL_LM_MAPPING"),
)
#: Decoder inputs the zoo makes for a forward pass; generate() starts from the decoder start token.
_DECODER_INPUTS = ("decoder_input_ids", "decoder_attention_mask")


def generation_class(spec: ModelSpec) -> str | None:
    """The transformers auto class that builds `spec` with a generation head: seq2seq (Whisper, T5),
    image-text-to-text (LLaVA) or causal-LM (GPT-2, LLaMA); None when the model does not generate
    tokens (BERT's masked-LM causal head included) or its config cannot be built."""
    if spec.modality not in GENERATE_MODALITIES:
        return None
    try:
        config = spec._config()
    except Exception:  # noqa: BLE001 - an unbuildable config fails in its inference cases instead
        return None
    import transformers

    def maps(mapping: str) -> bool:
        return type(config) in getattr(transformers, mapping)

    heads = _ENCODER_DECODER_HEADS if getattr(config, "is_encoder_decoder", False) else _DECODER_HEADS
    for auto_class, mapping in heads:
        if maps(mapping):
            if auto_class == "AutoModelForCausalLM" and maps("MODEL_FOR_MASKED_LM_MAPPING"):
                return None
            return auto_class
    return None


def _not_length_clash(record: logging.LogRecord) -> bool:
    """False for the warning "Both `max_new_tokens` (=N) and `max_length`(=20) seem to have been
    set" and its min_ twin, which Whisper's generate() gives on every call (transformers 5.23,
    ``GenerationMixin._prepare_generated_length``)."""
    starts = ("Both `max_new_tokens`", "Both `min_new_tokens`")
    return not (isinstance(record.msg, str) and record.msg.startswith(starts))


@contextlib.contextmanager
def _without_length_clash_warnings() -> Iterator[None]:
    """`_not_length_clash` filters generate()'s logger for one call only."""
    logger = logging.getLogger("transformers.generation.utils")
    logger.addFilter(_not_length_clash)
    try:
        yield
    finally:
        logger.removeFilter(_not_length_clash)


@functools.cache
def _step_counter_class() -> type:
    """A stopping criterion that never stops and counts decoding steps (defined on first use)."""
    import torch
    from transformers import StoppingCriteria

    class StepCounter(StoppingCriteria):
        """Counts ``generate()``'s decoding steps and keeps the last token ids it saw."""

        def __init__(self) -> None:
            self.steps = 0
            self.last_ids: Any = None

        def __call__(self, input_ids: Any, scores: Any, **kwargs: Any) -> Any:
            self.steps += 1
            self.last_ids = input_ids
            return torch.zeros(input_ids.shape[0], dtype=torch.bool, device=input_ids.device)

    return StepCounter


def _token_ids(value: Any) -> tuple[int, ...]:
    """The token ids of a config value that may be an int, a list of ints or None."""
    if value is None:
        return ()
    return tuple(int(v) for v in value) if isinstance(value, list | tuple) else (int(value),)


def _first_id(*values: Any) -> int | None:
    """The first token id of the first of `values` (config values, as `_token_ids`) that has one."""
    return next((token for value in values for token in _token_ids(value)), None)


def _set_special_tokens(model: Any) -> None:
    """Fill in what random-init configs leave out: a pad token (generate() pads finished rows
    and warns without one) and, for encoder-decoder models, the decoder start token (T5's
    config has none; generate() raises without it). T5 starts decoding from its pad token."""
    gen = model.generation_config
    text = model.config.get_text_config(decoder=True)
    if gen.pad_token_id is None:
        eos = _first_id(gen.eos_token_id, getattr(text, "eos_token_id", None))
        gen.pad_token_id = _first_id(getattr(text, "pad_token_id", None), eos, 0)
    if model.config.is_encoder_decoder and gen.decoder_start_token_id is None:
        gen.decoder_start_token_id = _first_id(getattr(model.config, "decoder_start_token_id", None),
                                               gen.bos_token_id, gen.pad_token_id)


def _position_limit(model: Any) -> int | None:
    """Positions the generating decoder has (None: unbounded, e.g. T5's relative positions)."""
    text = model.config.get_text_config(decoder=True)
    for name in ("max_target_positions", "n_positions", "max_position_embeddings"):
        value = getattr(text, name, None)
        if isinstance(value, int) and value > 0:
            return value
    return None


@dataclass
class GenerateCall:
    """One timed iteration of a generate case: ``generate()`` of exactly `new_tokens` tokens for
    each of `batch_size` sequences. The runner times calls of it, then `measure_more`."""

    model: Any
    inputs: dict[str, Any]
    new_tokens: int
    batch_size: int
    eos_token_ids: tuple[int, ...]
    name: str
    #: further ``generate()`` arguments (compiled decoding: the static cache and the compile config)
    generate_kwargs: dict[str, Any] = field(default_factory=dict)
    #: context around every call: compiled decoding enters `no_recompile` once its graphs are warm
    guard: Callable[[], contextlib.AbstractContextManager[Any]] = contextlib.nullcontext
    #: whether a call has verified that generate() makes exactly `new_tokens` tokens per sequence
    checked: bool = field(default=False, init=False)

    def generate(self, new_tokens: int, stopping_criteria: Any = None) -> Any:
        """``generate()`` of exactly `new_tokens` greedy tokens per sequence, with the KV cache."""
        import torch

        extra = {"stopping_criteria": stopping_criteria} if stopping_criteria is not None else {}
        with torch.inference_mode(), _without_length_clash_warnings(), self.guard():
            return self.model.generate(
                **self.inputs, max_new_tokens=new_tokens, min_new_tokens=new_tokens, do_sample=False,
                num_beams=1, use_cache=True, **self.generate_kwargs, **extra,
            )

    def __call__(self) -> Any:
        """The full call; the first one (the runner's cold call) also verifies the token count."""
        if self.checked:
            return self.generate(self.new_tokens)
        from transformers import StoppingCriteriaList

        counter = _step_counter_class()()
        out = self.generate(self.new_tokens, StoppingCriteriaList([counter]))
        self._verify(counter.steps, counter.last_ids)
        self.checked = True
        return out

    def _verify(self, steps: int, ids: Any) -> None:
        """Raise unless generate() ran `new_tokens` steps and no sequence ended before the last."""
        import torch

        n = self.new_tokens
        if steps != n:
            raise RuntimeError(
                f"generate: {self.name} ran {steps} decoding steps for {n} new tokens per sequence "
                f"(min_new_tokens == max_new_tokens == {n}): its generate() stops on a criterion of its own "
                "(a length or time limit in its generation config) or calls the decoder loop more than once; "
                f"the case would not measure {n} tokens"
            )
        if self.eos_token_ids and n > 1 and ids is not None:
            eos = torch.tensor(self.eos_token_ids, device=ids.device)
            early = torch.isin(ids[:, -n:-1], eos).any(dim=1)
            if bool(early.any()):
                rows = early.nonzero().flatten().tolist()
                raise RuntimeError(
                    f"generate: {self.name} ended sequences {rows} of {self.batch_size} with an end-of-sequence "
                    f"token before {n} tokens, although min_new_tokens={n} should forbid it; the case would "
                    "measure padding, not decoding"
                )

    def prefill(self) -> Any:
        """The call with one new token (time to first token)."""
        return self.generate(1)

    def measure_more(self, tracker: LatencyTracker, timing: TimingConfig, latency: Latency) -> dict[str, float]:
        """Time to first token (the prefill call timed like the full one), per-token decode latency
        (left out where the full call's median `latency` is not above the prefill's) and generated
        tokens per second, from medians."""
        self.prefill()  # its cold call, untimed, as the full call had one before its loop
        prefill = tracker.run(self.prefill, timing)
        full_ms = latency.median
        metrics = {"ttft_ms": prefill.median, "tokens_per_s": self.batch_size * self.new_tokens / (full_ms / 1e3)}
        if self.new_tokens > 1 and full_ms > prefill.median:
            metrics["decode_ms_per_token"] = (full_ms - prefill.median) / (self.new_tokens - 1)
        return metrics


class GenerateScenario(Scenario):
    """Fixed-length greedy ``generate()`` on torch eager, and with its decode step compiled on the
    torch.compile backends (see the module docstring)."""

    mode = "generate"
    description = MODE_DOCS["generate"]
    #: No single FLOPs figure (prefill and per-token decode differ): no achieved TFLOP/s.
    forwards_per_iteration = None
    #: Case options of this mode: each sequence makes `BenchCase.new_tokens` tokens.
    options = ("new_tokens",)
    backends = (EAGER, *COMPILE_MODES)
    precisions = ("fp32", "fp16", "bf16")

    def supports(self, spec: ModelSpec) -> bool:
        """Whether `spec` generates tokens (`generation_class`)."""
        return generation_class(spec) is not None

    def unavailable(self, spec: ModelSpec, backend: str, hardware: str, precision: str,
                    hw: HardwareInfo) -> str | None:
        """A reason for int8, for models that do not generate and, on a compiled backend, for
        models whose decode step does not compile in one graph (the rest is the backend's)."""
        compiled = backend != EAGER
        return self._reason(spec, precision) or (self._compile_reason(spec, backend) if compiled else None)

    def _reason(self, spec: ModelSpec, precision: str) -> str | None:
        if precision not in self.precisions:
            return (f"{precision}: generate runs {', '.join(self.precisions)} on torch eager (dynamic int8 "
                    "quantization is an inference backend's; quantized generation needs its own runtime)")
        if not self.supports(spec):
            return (f"generate: {spec.name} has no generation head (its config maps to no seq2seq, "
                    "image-text-to-text or decoder causal-LM class)")
        return None

    def _compile_reason(self, spec: ModelSpec, backend: str) -> str | None:
        """Why the decode step of `spec` (which `_reason` passed) does not compile, or None."""
        import transformers

        cls = getattr(transformers, str(generation_class(spec)))._model_mapping[type(spec._config())]
        if not getattr(cls, "_can_compile_fullgraph", False):
            return (f"generate on {backend}: {cls.__name__} does not compile its decode step in one graph with a "
                    "static KV cache (transformers' _can_compile_fullgraph is False); use torch")
        return None

    def load(self, spec: ModelSpec, hardware: str, precision: str, device_index: int = 0, *,
             backend: str = EAGER, **options: Any) -> LoadedModel:
        """Build `spec` with its generation head at `precision` on the device; ``new_tokens``
        (required): the tokens each sequence generates; a torch.compile `backend` compiles the
        decode step in ``prepare()``."""
        new_tokens = options["new_tokens"]  # checked by `BenchCase`
        # the torch.compile mode that compiles the decode step (`backends` holds every case's backend)
        compiler = None if backend == EAGER else COMPILE_MODES[backend]
        reason = self._reason(spec, precision)
        if compiler is not None and not reason:
            reason = compiler.missing(hardware) or self._compile_reason(spec, backend)
            if not reason and new_tokens < 2:
                reason = (f"generate on {backend}: compiles the decode steps, and 1 new token has none "
                          "(generate() makes it in the eager prefill); use torch or "
                          "--hwbench-new-tokens >= 2")
        if reason:
            raise UnsupportedCase(reason)
        import torch

        model = load_model(spec, hardware, precision, device_index, auto_class=generation_class(spec))
        _set_special_tokens(model)
        details: dict[str, Any] = {"generation_class": type(model).__name__}
        generate_kwargs: dict[str, Any] = {}
        if compiler is not None:
            from transformers import CompileConfig

            # mode None on the CPU: torch.compile takes inductor options or a mode, not both.
            compile_config = CompileConfig(fullgraph=True, dynamic=False,
                                           **{"mode": None, **compiler.compile_kwargs(hardware)})
            # transformers compiles the decode step on cuda/xpu by itself; this flag asks it to on
            # every device (CompileConfig._compile_all_devices, "useful for testing", i.e. the CPU).
            compile_config._compile_all_devices = True
            generate_kwargs = {"cache_implementation": "static", "compile_config": compile_config}
            details |= {"compile_mode": compiler.mode, "cache_implementation": "static"}
        return GenerateModel(**torch_fields(hardware, device_index, precision, details), compiled=compiler is not None,
                             model=model, model_name=spec.name, backend=backend, compiler=compiler,
                             dtype=getattr(torch, TORCH_DTYPES[precision]), new_tokens=new_tokens,
                             generate_kwargs=generate_kwargs)


@dataclass(frozen=True, kw_only=True)
class GenerateModel(TorchModel):
    """A model loaded with its generation head: each `prepare` gives a `GenerateCall`, whose
    decode step `compiler` compiles first (None: eager), measured with its time to first token."""

    model: Any
    model_name: str
    backend: str
    compiler: CompileMode | None
    dtype: Any
    new_tokens: int
    generate_kwargs: dict[str, Any]
    #: input shapes whose decode graphs prepare() compiled
    warm: set[tuple[Any, ...]] = field(default_factory=set, repr=False, compare=False)

    def prepare(self, inputs: dict[str, Any]) -> GenerateCall:
        new_tokens, limit, name = self.new_tokens, _position_limit(self.model), self.model_name
        encoder_decoder = bool(self.model.config.is_encoder_decoder)
        kept = {k: v for k, v in inputs.items() if not (encoder_decoder and k in _DECODER_INPUTS)}
        moved = move_inputs(kept, device_string(self.device_kind, self.device_index), self.dtype)
        # decoder-only: the prompt is the input ids; encoder-decoder: the decoder start token
        prompt = 1 if encoder_decoder else int(moved["input_ids"].shape[-1])
        if limit is not None and prompt + new_tokens > limit:
            raise UnsupportedCase(
                f"generate: {name}'s decoder has {limit} positions, a {prompt}-token prompt plus "
                f"{new_tokens} new tokens needs {prompt + new_tokens}; lower --hwbench-new-tokens or "
                "--hwbench-input-lengths"
            )
        batch = int(next(iter(moved.values())).shape[0])
        eos_ids = _token_ids(self.model.generation_config.eos_token_id)
        call = GenerateCall(self.model, moved, new_tokens, batch, eos_ids, name, self.generate_kwargs)
        if self.compiler is None:
            return call
        shapes = tuple(sorted((k, tuple(v.shape)) for k, v in moved.items()))
        # generate() sizes the static cache for the longest prompt any earlier call of this model
        # had (transformers 5.23, GenerationMixin._get_static_cache): each case gets its own.
        vars(self.model).pop("_previous_max_cache_length", None)
        before = graphs_compiled()
        warm_up(call, mode=self.compiler.mode, sync=self.sync, details=self.details, name=name)
        # No new graph is fine when dynamo reuses one compiled for an earlier model of the same
        # architecture; transformers then keeps the compiled call on the model (transformers 5.23).
        if shapes not in self.warm and graphs_compiled() == before and "_compiled_call" not in vars(self.model):
            raise RuntimeError(
                f"generate on {self.backend}: {name}'s generate() compiled no graph for its decode steps "
                "(transformers' auto-compile criteria were not met: a static cache and a compile_config); "
                "the case would measure eager decoding under a compiled backend's name"
            )
        self.warm.add(shapes)
        call.guard = no_recompile
        return call

    def close(self) -> None:
        # As the inference backend: drop the compiled graphs (and CUDA graph pools).
        if self.compiler is not None:
            import torch

            torch._dynamo.reset()


SCENARIO = register_scenario(GenerateScenario())

__all__ = ["GENERATE_MODALITIES", "SCENARIO", "GenerateCall", "GenerateModel", "GenerateScenario", "generation_class"]
