"""Ranking options: what selecting among targets and among precisions on one target share (whether
an option can run a question, which options tie for first), and the precision to run a model at on
one target (`rank_precisions`)."""

from __future__ import annotations

import functools
import math
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, fields
from types import MappingProxyType
from typing import Any, TypeVar

from pytest_hwbench import facts
from pytest_hwbench.vocabulary import TRAIN_MODE

from .config import SelectionConfig
from .query import Prediction, Query

T = TypeVar("T")


def tie_for_first(ranked: Sequence[T], prediction: Callable[[T], Prediction | None], name: Callable[[T], str],
                  same_preference: Callable[[T, T], bool] = lambda a, b: True) -> tuple[list[T], tuple[str, ...]]:
    """(`ranked` with a tie for first ordered by memory, then energy, then rank; the tied names,
    empty when the first is decided). An option ties with the first when their latency intervals
    overlap and `same_preference` holds for the two."""
    if len(ranked) < 2 or prediction(ranked[0]) is None:
        return list(ranked), ()
    best = ranked[0]
    lo, hi = prediction(best).interval  # type: ignore[union-attr]
    tied = [o for o in ranked if (p := prediction(o)) is not None and p.interval[0] <= hi and lo <= p.interval[1]
            and same_preference(o, best)]
    if len(tied) < 2:
        return list(ranked), ()

    def rule(o: T) -> tuple[float, float]:
        p = prediction(o)
        assert p is not None  # every tied option has one
        return float(round(p.memory_mb)), p.energy_j_per_item if p.energy_j_per_item is not None else math.inf

    first = sorted(tied, key=rule)  # stable: `tied` is in rank order
    names = tuple(name(o) for o in first)
    return first + [o for o in ranked if name(o) not in names], names


def device_table(resolved: Mapping[str, tuple[str, str | None, str]]) -> dict[str, dict[str, Any]]:
    """hardware -> the device, why, its spec and the backend answers for it are for, from each
    target's (backend, device, why) as `hwsel.predict.Predictor.resolve_target` gives them."""
    from .specs import spec_for

    return {hw: {"device": name, "device_source": why, "device_spec": spec_for(hw, name).name, "backend": backend}
            for hw, (backend, name, why) in resolved.items()}


def probed_target(hardware: str) -> Any:
    """This machine's `hardware` target as detection finds it (its ``available`` says whether it
    is here). Only that target is probed; None for a web target this process has not probed yet
    (probing one starts a browser)."""
    from pytest_hwbench.hardware import detect_hardware, not_available, probed_hardware

    if hardware in facts.target_set("web"):
        return probed_hardware().targets.get(hardware)
    try:
        found = detect_hardware(targets=(hardware,)).targets.get(hardware)
    except Exception:  # a target the harness does not probe
        found = None
    return found or not_available(hardware, "the harness does not probe it")


def fmt_ms(ms: float) -> str:
    return f"{ms:.3g} ms" if ms < 1000 else f"{ms / 1000:.3g} s"


def incompatibility(cfg: SelectionConfig, family: str, hw: str, precision: str, mode: str) -> str:
    if cfg.rating(family, hw) == "none":
        return f"{family} models are marked incompatible with {hw} (compatibility.{family}.{hw} = none)"
    supported = cfg.precision_support.get(hw)
    if supported is not None and precision not in supported:
        return f"{hw} does not run {precision} (runs {', '.join(supported)})"
    if mode == TRAIN_MODE and hw in cfg.inference_only:
        return f"{hw} is an inference runtime; training needs autograd"
    return ""


@functools.cache
def _host_memory_gb() -> float:
    """This host's memory (the capacity of cpu and openvino unless the config names one)."""
    import psutil

    return float(psutil.virtual_memory().total) / 2**30


def capacity_gb(cfg: SelectionConfig, hw: str) -> float:
    cap = cfg.hardware[hw].memory_gb
    return cap if cap is not None else _host_memory_gb()


def too_big(cfg: SelectionConfig, hw: str, p: Prediction) -> str:
    """Why `p` does not fit in `hw`'s memory; "" when it does."""
    cap = capacity_gb(cfg, hw)
    if p.memory_mb <= cap * 1024:
        return ""
    where = f"hardware.{hw}.memory_gb" if cfg.hardware[hw].memory_gb is not None else "this host's memory"
    return (f"needs about {p.memory_mb / 1024:.3g} GiB ({p.source}), {hw} has {cap:.3g} GiB ({where}); lower the "
            "batch size or precision")


#: How a precision is chosen, and how a tie is ranked.
PRECISION_RULE = ("the precision with the lowest predicted latency is first; another ties with it when their "
                  "latency intervals overlap (the predicted difference lies inside their intervals); tied "
                  "precisions are ranked by predicted memory (less first, in whole MiB), then by measured energy "
                  "per item (less first; unmeasured last), then by predicted latency")


@dataclass(frozen=True)
class PrecisionChoice:
    """The precision to run a model at on one target: the best, the others in order, and each
    precision's prediction (or why it cannot run there)."""

    model_name: str
    hardware: str
    batch_size: int
    mode: str
    backend: str
    #: the best precision (None: none runs here)
    primary: str | None
    #: the precisions that run here, best first (the tied ones first, in `rule`'s order)
    ranked: tuple[str, ...]
    predictions: Mapping[str, Prediction]
    #: precision -> why it cannot run on `hardware` (not supported, or too big)
    incompatible: Mapping[str, str]
    #: the precisions tied for first (empty: the first is decided)
    tie: tuple[str, ...]
    explanation: str
    rule: str = PRECISION_RULE

    def to_dict(self) -> dict[str, Any]:
        """JSON-ready dict."""
        return {**{f.name: getattr(self, f.name) for f in fields(self)}, "ranked": list(self.ranked),
                "tie": list(self.tie), "incompatible": dict(self.incompatible),
                "predictions": {k: p.to_dict() for k, p in self.predictions.items()}}


def _explain_precision(ranked: Sequence[str], preds: Mapping[str, Prediction], tie: Sequence[str],
                       incompatible: Mapping[str, str]) -> str:
    parts = []
    if not ranked:
        parts.append("No precision runs here.")
    elif tie:
        parts.append(f"Tie between {', '.join(tie)}: their latency intervals overlap (the predicted difference "
                     f"is inside them), so {tie[0]} is first by memory ({preds[tie[0]].memory_mb:.4g} MiB), then "
                     "energy.")
    else:
        best = preds[ranked[0]]
        lo, hi = best.interval
        parts.append(f"{ranked[0]} is {'fastest' if len(ranked) > 1 else 'the only one that runs here'}: {fmt_ms(best.latency_ms)} ({fmt_ms(lo)}-{fmt_ms(hi)}, "
                     f"{best.source})" + (f", clear of {ranked[1]}'s {fmt_ms(preds[ranked[1]].interval[0])}-"
                                          f"{fmt_ms(preds[ranked[1]].interval[1])}." if len(ranked) > 1 else "."))
    parts += [f"{prec}: {why}." for prec, why in incompatible.items()]
    return " ".join(parts)


def rank_precisions(cfg: SelectionConfig, queries: Sequence[Query], predictions: Sequence[Prediction], *,
                    on_this_machine: bool) -> PrecisionChoice:
    """The `PrecisionChoice` among `queries` (one question per precision, on one target) given
    their `predictions`. A precision the target does not run (its configured precision support
    or, `on_this_machine`, what was detected here) or whose predicted memory exceeds the
    target's is left out with its reason."""
    first = queries[0]
    preds = {q.precision: pred for q, pred in zip(queries, predictions, strict=True)}
    target = probed_target(first.hardware) if on_this_machine else None
    here = target if target is not None and target.available else None
    incompatible = {q.precision: why for q in queries
                    if (why := incompatibility(cfg, first.model.family, first.hardware, q.precision, first.mode)
                        or (here.unsupported_precision(q.precision) if here is not None else None)
                        or too_big(cfg, first.hardware, preds[q.precision]))}
    fits = sorted((prec for prec in preds if prec not in incompatible), key=lambda prec: preds[prec].latency_ms)
    ranked, tie = tie_for_first(fits, preds.get, lambda prec: prec)
    return PrecisionChoice(
        model_name=first.model.name, hardware=first.hardware, batch_size=first.batch_size, mode=first.mode,
        backend=preds[first.precision].backend, primary=ranked[0] if ranked else None, ranked=tuple(ranked),
        predictions=MappingProxyType(preds), incompatible=MappingProxyType(incompatible), tie=tie,
        explanation=_explain_precision(ranked, preds, tie, incompatible))


__all__ = ["PRECISION_RULE", "PrecisionChoice", "capacity_gb", "device_table", "fmt_ms", "incompatibility",
           "probed_target", "rank_precisions", "tie_for_first", "too_big"]
