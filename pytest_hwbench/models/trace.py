"""The shape-only trace: one forward on the meta device, no weights allocated, gives a
`ModelArchitecture` (FLOPs per item, peak activations, launches, shape numbers), which
`stored_architecture` keeps on disk.
"""

from __future__ import annotations

import contextlib
import dataclasses
import functools
import hashlib
import json
import os
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any


@dataclass(frozen=True)
class ModelArchitecture:
    """Numbers about a model that need no weights."""

    model_type: str
    param_count: int
    flops_per_item: float
    num_layers: int | None
    hidden_size: int | None
    #: Peak bytes of activations of one fp32 forward at batch 1 (None: not measurable on meta).
    activation_bytes_per_item: float | None = None
    #: Operators one eager forward dispatches that compute (views excluded): about one device
    #: kernel launch each, which is what bounds small-batch GPU latency (None: not measurable).
    launches_per_forward: int | None = None
    num_attention_heads: int | None = None
    #: Key/value heads (grouped-query attention); equal to the attention heads otherwise.
    num_key_value_heads: int | None = None


def _first_attr(config: Any, names: Iterable[str]) -> int | None:
    for cfg in (config, getattr(config, "text_config", None), getattr(config, "vision_config", None)):
        if cfg is None:
            continue
        for name in names:
            value = getattr(cfg, name, None)
            if isinstance(value, int):
                return value
            if isinstance(value, list | tuple) and value:
                # ResNet-style stages: layers add up, the width is the last stage's.
                return int(sum(value)) if name == "depths" else int(value[-1])
    return None


@functools.cache
def _meta_run_mode() -> type:
    """A dispatch mode for a meta-device forward: records peak activation bytes and launches (ops
    that compute), and answers True to a boolean scalar read, which a meta tensor cannot give:
    transformers reads checks out of tensors (`mask.all()`), and the zoo's inputs pass them."""
    import weakref

    import torch
    from torch.utils._python_dispatch import TorchDispatchMode
    from torch.utils._pytree import tree_leaves

    class MetaRun(TorchDispatchMode):
        def __init__(self) -> None:
            super().__init__()
            self.live = 0
            self.peak = 0
            self.launches = 0
            self._refs: dict[int, Any] = {}

        def _free(self, key: int, nbytes: int) -> None:
            self.live -= nbytes
            self._refs.pop(key, None)

        def __torch_dispatch__(self, func: Any, types: Any, args: Any = (), kwargs: Any = None) -> Any:
            if func is torch.ops.aten._local_scalar_dense.default and args[0].is_meta \
                    and args[0].dtype == torch.bool:
                return True
            out = func(*args, **(kwargs or {}))
            aliases = [r.alias_info for r in func._schema.returns]
            if not (aliases and all(a is not None and not a.is_write for a in aliases)):
                self.launches += 1  # computes (views only re-describe memory)
            if any(a is not None for a in aliases):
                return out  # a view or an in-place result: no new memory
            for t in tree_leaves(out):
                if not isinstance(t, torch.Tensor):
                    continue
                storage = t.untyped_storage()
                key = id(storage)
                ref = self._refs.get(key)
                if ref is not None and ref() is storage:
                    continue
                nbytes = int(storage.nbytes())
                self.live += nbytes
                self.peak = max(self.peak, self.live)
                self._refs[key] = weakref.ref(storage, lambda _, k=key, n=nbytes: self._free(k, n))
            return out

    return MetaRun


def dense_flops_estimate(model: Any, tokens: int, num_layers: int | None, hidden_size: int | None) -> float:
    """Forward FLOPs of a dense transformer for one item of `tokens` tokens, from its weights: 2 per
    weight per token (Kaplan et al. 2020) over all but the embedding tables, an output head tied to
    one included (Qwen2-0.5B), plus 4 * layers * tokens^2 * hidden for attention. Within 0.1% of
    FlopCounterMode for the zoo's LLaMA and Qwen2 sizes at 128 tokens."""
    import torch

    embeddings = [m for m in model.modules() if isinstance(m, torch.nn.Embedding)]
    params = sum(p.numel() for p in model.parameters())
    get_head = getattr(model, "get_output_embeddings", None)
    head = getattr(get_head() if callable(get_head) else None, "weight", None)
    tied = int(head.numel()) if head is not None and any(e.weight is head for e in embeddings) else 0
    matmul_weights = params - sum(e.weight.numel() for e in embeddings) + tied
    attention = 4.0 * (num_layers or 0) * tokens * tokens * (hidden_size or 0)
    return 2.0 * matmul_weights * tokens + attention


#: What a meta-device forward raises where it cannot go on (FlopCounterMode's GQA shape assert,
#: `.item()` on a meta tensor, a kernel without a meta implementation, a data-dependent check).
_META_ERRORS = (AssertionError, RuntimeError, NotImplementedError, ValueError)


def trace_architecture(model: Any, inputs: dict[str, Any], config: Any, *, tokens: int) -> ModelArchitecture:
    """The `ModelArchitecture` of a meta-device `model` fed the meta-device `inputs` of one item
    (`tokens` tokens, for an estimate from the weights); `config` is its transformers config."""
    import torch
    from torch.utils.flop_counter import FlopCounterMode

    params = sum(p.numel() for p in model.parameters())
    num_layers = _first_attr(config, ("num_hidden_layers", "n_layer", "num_layers", "encoder_layers", "depths"))
    hidden_size = _first_attr(config, ("hidden_size", "n_embd", "d_model", "hidden_sizes"))
    heads = _first_attr(config, ("num_attention_heads", "n_head", "encoder_attention_heads"))
    kv_heads = _first_attr(config, ("num_key_value_heads",)) or heads
    live = _meta_run_mode()()
    try:
        counter = FlopCounterMode(display=False)
        with live, counter, torch.no_grad():
            model(**inputs)
        flops = float(counter.get_total_flops())
    except _META_ERRORS:
        # FlopCounterMode rejects grouped-query attention shapes on CUDA kernels (FACTS.md), and a
        # model may not run on meta at all: estimate from the weights, measure without the counter.
        flops = dense_flops_estimate(model, tokens, num_layers, hidden_size)
        live = _meta_run_mode()()
        try:
            with live, torch.no_grad():
                model(**inputs)
        except _META_ERRORS:
            live = None
    return ModelArchitecture(
        model_type=str(config.model_type),
        param_count=int(params),
        flops_per_item=flops,
        num_layers=num_layers,
        hidden_size=hidden_size,
        activation_bytes_per_item=float(live.peak) if live is not None else None,
        launches_per_forward=live.launches if live is not None else None,
        num_attention_heads=heads,
        num_key_value_heads=kv_heads,
    )


@functools.cache
def _code_digest() -> str:
    """A digest of the modules whose code decides a trace's answer (besides torch and
    transformers): a change to either makes every stored answer stale."""
    digest = hashlib.sha256()
    for name in ("trace.py", "inputs.py"):
        digest.update((Path(__file__).parent / name).read_bytes())
    return digest.hexdigest()


def stored_architecture(directory: Path, key: Mapping[str, Any],
                        trace: Callable[[], ModelArchitecture]) -> ModelArchitecture:
    """The `ModelArchitecture` stored in `directory` under `key` (JSON-ready: the model's config,
    its input and its build; the torch and transformers versions and the tracing code count too),
    else `trace()`'s, stored there if it can be for the next process."""
    import torch
    import transformers

    full = {**key, "torch": torch.__version__, "transformers": transformers.__version__,
            "code": _code_digest()}
    name = hashlib.sha256(json.dumps(full, sort_keys=True, default=str).encode()).hexdigest()[:32]
    path = directory / f"{name}.json"
    try:
        return ModelArchitecture(**json.loads(path.read_text()))
    except (OSError, ValueError, TypeError):
        pass
    architecture = trace()
    tmp = path.with_name(f".{path.stem}.{os.urandom(8).hex()}.tmp")
    try:
        directory.mkdir(parents=True, exist_ok=True)
        tmp.write_text(json.dumps(dataclasses.asdict(architecture)))
        tmp.replace(path)  # atomic: parallel workers tracing the same model each write whole
    except OSError:
        with contextlib.suppress(OSError):
            tmp.unlink()
    return architecture


__all__ = ["ModelArchitecture", "dense_flops_estimate", "stored_architecture", "trace_architecture"]
