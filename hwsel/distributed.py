"""Distributed training configuration: DDP or FSDP, and what to turn on when memory is short
(activation checkpointing, gradient accumulation, CPU offload, in that order), from a memory
estimate per GPU (`hwsel.memory.memory_breakdown`); a plan that cannot fit says so.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field, fields
from typing import Any

from pytest_hwbench.vocabulary import TRAIN_MODE

from .memory import memory_breakdown
from .query import ModelRef, check_batch_size, check_precision, check_train_precision, describe_model

#: Part of each GPU's memory kept free for the allocator, NCCL buffers and fragmentation.
RESERVE = 0.10
#: CUDA context and framework overhead per GPU, GiB.
RUNTIME_GB = 0.5
MAX_GPUS = 65536


@dataclass(frozen=True)
class MemoryEstimate:
    """GiB per replica (parameters .. activations), the whole job (total) and one GPU."""

    parameters_gb: float
    gradients_gb: float
    optimizer_gb: float
    activations_gb: float
    total_gb: float
    per_gpu_gb: float

    def to_dict(self) -> dict[str, float]:
        return {k: round(v, 4) for k, v in self.__dict__.items()}


@dataclass(frozen=True)
class DistributedConfig:
    """A training plan for `gpu_count` GPUs of `max_memory_gb` each."""

    model_name: str
    model_family: str
    param_count: int
    distributed_strategy: str  # "single" | "DDP" | "FSDP"
    gpu_count: int
    per_gpu_batch_size: int
    micro_batch_size: int
    gradient_accumulation_steps: int
    global_batch_size: int
    mixed_precision: bool
    precision: str
    activation_checkpointing: bool
    cpu_offload: bool
    sharding_strategy: str | None
    fits: bool
    max_memory_gb: float
    estimated_memory: MemoryEstimate
    explanation: str
    steps: tuple[str, ...] = field(default=())

    def to_dict(self) -> dict[str, Any]:
        """JSON-ready, in the predecessor's shape (with Hugging Face's name gradient_checkpointing)."""
        return {**{f.name: getattr(self, f.name) for f in fields(self)},
                "estimated_memory": self.estimated_memory.to_dict(), "steps": list(self.steps),
                "gradient_checkpointing": self.activation_checkpointing}


def distributed_training_config(model: ModelRef, gpus: int = 8, batch_size: int = 8, max_memory_gb: float = 16.0, *,
                                precision: str = "bf16") -> DistributedConfig:
    """A DDP/FSDP plan for training `model` with `batch_size` items per GPU per optimizer step.

    `precision` is the compute precision: fp32, or fp16/bf16 as mixed precision (fp32 master
    weights and optimizer states). Raises ValueError/KeyError for bad input.
    """
    if isinstance(gpus, bool) or not isinstance(gpus, int) or not 1 <= gpus <= MAX_GPUS:
        raise ValueError(f"gpus must be a whole number between 1 and {MAX_GPUS}, got {gpus!r}")
    batch_size = check_batch_size(batch_size)
    if isinstance(max_memory_gb, bool) or not isinstance(max_memory_gb, int | float) \
            or not math.isfinite(max_memory_gb) or not 0 < max_memory_gb <= 1e6:
        raise ValueError(f"max_memory_gb must be a number of GiB in (0, 1e6], got {max_memory_gb!r}")
    budget_total = float(max_memory_gb)
    precision = check_train_precision(check_precision(precision))
    info = describe_model(model)
    budget = budget_total * (1 - RESERVE)
    gib = 1024.0

    def per_gpu(strategy: str, micro: int, ckpt: bool, offload: bool) -> tuple[float, Any]:
        bd = memory_breakdown(info, batch_size=micro, precision=precision, mode=TRAIN_MODE, checkpointing=ckpt)
        states = (bd.parameters_mb + bd.gradients_mb + bd.optimizer_mb) / gib
        if strategy == "FSDP":  # FULL_SHARD; on one GPU it only helps through CPU offload
            # with offload, parameters and optimizer states live on the CPU; a GPU holds its gradient
            # shard and the gathered parameters of the layer being computed
            states = (bd.gradients_mb / gib if offload else states) / gpus
            layers = max(1, int(info.num_layers or 12))
            states += 2 * bd.parameters_mb / gib / layers  # one layer all-gathered (and the prefetched next)
        return states + bd.activations_mb / gib + RUNTIME_GB, bd

    def micro_sizes() -> list[int]:
        """Divisors of batch_size below it, largest first: micro-batch x steps == batch_size exactly."""
        small = [d for d in range(1, math.isqrt(batch_size) + 1) if batch_size % d == 0]
        return sorted({*small, *(batch_size // d for d in small)} - {batch_size}, reverse=True)

    sharded = "single" if gpus == 1 else "FSDP"
    attempts: list[tuple[str, int, bool, bool]] = (
        [("single", batch_size, False, False), ("single", batch_size, True, False)] if gpus == 1 else
        [("DDP", batch_size, False, False), ("FSDP", batch_size, False, False), ("FSDP", batch_size, True, False)])
    attempts += [(sharded, m, True, False) for m in micro_sizes()]
    attempts += [("FSDP", m, True, True) for m in [batch_size, *micro_sizes()]]
    steps: list[str] = []
    fits = False
    for strategy, micro, ckpt, offload in attempts:  # the last one stands when none fits
        need, bd = per_gpu(strategy, micro, ckpt, offload)
        if need <= budget:
            fits = True
            break
        label = " + ".join(x for x, on in ((strategy, True), ("activation checkpointing", ckpt),
                                             ("CPU offload", offload)) if on)
        steps.append(f"{label} at micro-batch {micro}: {need:.3g} GiB per GPU > {budget:.3g} GiB usable")
    accumulation = batch_size // micro
    replica_gb = (bd.parameters_mb + bd.gradients_mb + bd.optimizer_mb) / gib
    estimate = MemoryEstimate(
        parameters_gb=bd.parameters_mb / gib, gradients_gb=bd.gradients_mb / gib,
        optimizer_gb=bd.optimizer_mb / gib, activations_gb=bd.activations_mb / gib,
        total_gb=replica_gb * (1 if strategy == "FSDP" else gpus) + (bd.activations_mb / gib + RUNTIME_GB) * gpus,
        per_gpu_gb=need)
    if fits:
        what = {"single": "one GPU holds the model", "DDP": "each GPU holds a full replica (DDP)",
                "FSDP": "parameters, gradients and optimizer states are sharded over the GPUs (FSDP)"}[strategy]
        extras = [x for x, on in (("activation checkpointing", ckpt), (f"gradient accumulation x{accumulation}",
                                  accumulation > 1), ("CPU offload", offload)) if on]
        explanation = (f"{info.name} ({info.param_count / 1e6:.4g}M parameters) needs about {need:.3g} GiB per GPU "
                       f"of {budget_total:g} GiB: {what}" + (f", with {', '.join(extras)}" if extras else "") + ".")
    else:
        explanation = (f"{info.name} does not fit: even FSDP with checkpointing, micro-batch 1 and CPU offload needs "
                       f"about {need:.3g} GiB per GPU, more than {budget:.3g} GiB usable of {budget_total:g} GiB. "
                       f"Use more GPUs (--gpus), GPUs with more memory (--max-memory-gb) or a smaller model.")
    return DistributedConfig(
        model_name=info.name, model_family=info.family, param_count=int(info.param_count),
        distributed_strategy=strategy, gpu_count=gpus, per_gpu_batch_size=batch_size, micro_batch_size=micro,
        gradient_accumulation_steps=accumulation, global_batch_size=micro * accumulation * gpus,
        mixed_precision=precision in ("fp16", "bf16"), precision=precision, activation_checkpointing=ckpt,
        cpu_offload=offload, sharding_strategy="FULL_SHARD" if strategy == "FSDP" else None, fits=fits,
        max_memory_gb=budget_total, estimated_memory=estimate, explanation=explanation, steps=tuple(steps))


__all__ = ["DistributedConfig", "MemoryEstimate", "distributed_training_config"]
