"""What selecting among targets and among precisions on one target share: whether an option can
run a question (`incompatibility`, `too_big`), which options tie for first (`tie_for_first`),
whether a target is on this machine (`probed_target`) and how a latency reads (`fmt_ms`).
"""

from __future__ import annotations

import functools
import math
from collections.abc import Callable, Mapping, Sequence
from typing import Any, TypeVar

from pytest_hwbench import facts
from pytest_hwbench.vocabulary import TRAIN_MODE

from .config import SelectionConfig
from .query import Prediction

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
    position = {name(o): i for i, o in enumerate(ranked)}

    def rule(o: T) -> tuple[float, float, int]:
        p = prediction(o)
        assert p is not None  # every tied option has one
        energy = p.energy_j_per_item
        return (float(round(p.memory_mb)), energy if energy is not None else math.inf, position[name(o)])

    first = sorted(tied, key=rule)
    names = {name(o) for o in first}
    return first + [o for o in ranked if name(o) not in names], tuple(name(o) for o in first)


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


__all__ = ["capacity_gb", "device_table", "fmt_ms", "incompatibility", "probed_target", "tie_for_first",
           "too_big"]
