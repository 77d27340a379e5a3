"""The ``rules`` layer, the last one: plain heuristics that always answer (no data, no
scikit-learn, no MLflow)."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from types import MappingProxyType

from pytest_hwbench.vocabulary import TRAIN_MODE

from ..memory import memory_breakdown
from ..query import Prediction, Query
from .base import prediction

#: Effective (not peak) TFLOP/s of eager frameworks on a common device of each kind. Seen:
#: BERT-base on a 2-core CPU about 0.1 TFLOP/s, on an H100 fp16 about 160 (FACTS.md).
_RULE_TFLOPS: Mapping[str, Mapping[str, float]] = MappingProxyType({
    "cuda": {"fp32": 20.0, "fp16": 120.0, "bf16": 120.0, "int8": 150.0},
    "rocm": {"fp32": 15.0, "fp16": 90.0, "bf16": 90.0, "int8": 100.0},
    "xpu": {"fp32": 8.0, "fp16": 40.0, "bf16": 40.0, "int8": 50.0},
    "mps": {"fp32": 3.0, "fp16": 5.0, "bf16": 4.0, "int8": 3.0},
    "openvino": {"fp32": 0.3, "fp16": 0.3, "bf16": 0.8, "int8": 1.0},
    "qnn": {"fp32": 1.0, "fp16": 8.0, "bf16": 4.0, "int8": 16.0},
    "cpu": {"fp32": 0.15, "fp16": 0.04, "bf16": 0.35, "int8": 0.4},
})
#: Fixed cost per forward for a 12-layer model, ms: GPUs in eager mode are launch bound
#: (BERT-base on an H100 takes about 7 ms at batch 1 and 8 ms at batch 128, FACTS.md).
_RULE_OVERHEAD_MS = MappingProxyType(
    {"cuda": 6.0, "rocm": 7.0, "xpu": 8.0, "mps": 5.0, "openvino": 0.5, "qnn": 2.0, "cpu": 0.5})
#: What a process holds besides the model (framework, allocator, context), MiB.
RUNTIME_MB = MappingProxyType(
    {"cuda": 500.0, "rocm": 500.0, "xpu": 400.0, "mps": 300.0, "openvino": 150.0, "qnn": 50.0, "cpu": 150.0})
#: A training step costs about three forwards (forward + backward).
TRAIN_FLOPS = 3.0


def runtime_mb(hardware: str) -> float:
    """What a process on `hardware` holds besides the model, MiB (200 for a kind not in the table)."""
    return RUNTIME_MB.get(hardware, 200.0)


def overhead_12_layers_ms(hardware: str) -> float:
    """Fixed cost per forward of a 12-layer model on `hardware`, ms (1 for a kind not in the table)."""
    return _RULE_OVERHEAD_MS.get(hardware, 1.0)


def launch_overhead_ms(q: Query) -> float:
    """Fixed cost per forward (twice per training step) that no FLOP count shows: kernel
    launches and framework dispatch, scaled by depth from a 12-layer model."""
    layers = int(q.model.num_layers or 12)
    return overhead_12_layers_ms(q.hardware) * layers / 12 * (2.0 if q.mode == TRAIN_MODE else 1.0)


def rules_estimate(q: Query) -> tuple[float, float]:
    """(latency ms, memory MiB) from heuristics alone."""
    m = q.model
    tflops = _RULE_TFLOPS.get(q.hardware, _RULE_TFLOPS["cpu"])[q.precision]
    flops = float(m.flops_per_item) * q.batch_size * (TRAIN_FLOPS if q.mode == TRAIN_MODE else 1.0)
    latency = launch_overhead_ms(q) + flops / (tflops * 1e12) * 1e3
    mem = memory_breakdown(m, batch_size=q.batch_size, precision=q.precision, mode=q.mode,
                           runtime_mb=runtime_mb(q.hardware)).total_mb
    return latency, mem


class RulesLayer:
    """Answers every query from `rules_estimate`; the interval is (latency / f, latency * f)."""

    name = "rules"

    def __init__(self, interval_factor: float) -> None:
        self.interval_factor = interval_factor

    def answer(self, queries: Sequence[Query]) -> list[Prediction | None]:
        f = self.interval_factor
        out: list[Prediction | None] = []
        for q in queries:
            latency, memory = rules_estimate(q)
            out.append(prediction(q, "rules", latency, memory, (latency / f, latency * f), "heuristic estimate"))
        return out


__all__ = ["RUNTIME_MB", "RulesLayer", "TRAIN_FLOPS", "launch_overhead_ms", "overhead_12_layers_ms",
           "rules_estimate", "runtime_mb"]
