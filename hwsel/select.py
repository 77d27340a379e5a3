"""Hardware selection: each target checked for compatibility, then scored on predicted latency,
throughput, memory and compatibility with the mode's (or task's) weights, times its preference;
every answer says where its predictions came from and which device and backend they are for.
Also the selection map (its rows stand for the models `representative_models` picks) and the
analysis of one model across the grid.
"""

from __future__ import annotations

import dataclasses
import datetime as _dt
import math
import os
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from types import MappingProxyType
from typing import Any

from pytest_hwbench import facts

from . import ranking
from .config import (
    DEFAULT_PRECISION_CHOICES,
    FAMILIES,
    MODES,
    RATINGS,
    SIZE_CATEGORIES,
    ModeKeyed,
    SelectionConfig,
    Weights,
    check_mode,
    load_config,
)
from .predict import Predictor, predictor_for
from .query import DEFAULT_BACKEND, ModelRef, Prediction, Query, QuestionError, ask, ask_grid, model_info
from .ranking import capacity_gb, device_table, fmt_ms, incompatibility, tie_for_first, too_big
from .resolution import ModelInfo


def detect_hardware() -> Any:
    """This machine's hardware (`pytest_hwbench.hardware.detect_hardware`, probed once per process)."""
    from pytest_hwbench.hardware import detect_hardware as _detect

    return _detect()


def available_hardware(config: SelectionConfig | None = None) -> tuple[str, ...]:
    """Configured targets that `detect_hardware()` finds here (cpu at least), in fallback order.
    The web targets (wasm, webgpu, webnn) are left out: they answer when a question names them."""
    cfg = config or load_config()
    try:
        web = facts.target_set("web")
        found = {hw for hw in detect_hardware().available() if hw not in web}
    except Exception:  # detection is best effort: the CPU is always there
        found = set()
    found.add("cpu")
    return tuple(hw for hw in cfg.hardware_names if hw in found)


@dataclass(frozen=True)
class HardwareScore:
    """How one target scored (0 when incompatible, with the reason)."""

    hardware: str
    compatible: bool
    score: float
    latency_score: float = 0.0
    throughput_score: float = 0.0
    memory_score: float = 0.0
    compatibility_score: float = 0.0
    preference_factor: float = 1.0
    prediction: Prediction | None = None
    reason: str = ""

    def to_dict(self) -> dict[str, Any]:
        """JSON-ready; ``predictions`` keeps the predecessor's keys (latency, throughput, memory_usage)."""
        p = self.prediction
        return {
            **{f.name: getattr(self, f.name) for f in dataclasses.fields(self) if f.name != "prediction"},
            "source": p.source if p else None,
            "predictions": {"latency": p.latency_ms, "throughput": p.throughput, "memory_usage": p.memory_mb,
                            "interval": list(p.interval)} if p else None,
            "prediction": p.to_dict() if p else None,
        }


@dataclass(frozen=True)
class Recommendation:
    """A hardware recommendation: the best target, fallbacks in order, and every target's score."""

    model_name: str
    model_family: str
    model_size: int
    model_size_category: str
    batch_size: int
    batch_size_category: str
    mode: str
    precision: str
    primary_recommendation: str | None
    fallback_options: tuple[str, ...]
    compatible_hardware: tuple[str, ...]
    all_scores: Mapping[str, HardwareScore]
    explanation: str
    prediction_source: str | None
    prediction_sources: Mapping[str, str]
    task_type: str | None = None
    backend: str | None = None
    sequence_length: int | None = None
    weights: Mapping[str, float] = dataclasses.field(default_factory=dict)
    #: hardware -> {"device", "device_source", "device_spec", "backend"}: what each answer is for
    devices: Mapping[str, Mapping[str, Any]] = dataclasses.field(default_factory=dict)
    #: the targets tied for first (empty: the first is decided), in the order `tie_rule` ranks them
    tie: tuple[str, ...] = ()
    #: how a tie is decided (`TIE_RULE`)
    tie_rule: str = ""

    def to_dict(self) -> dict[str, Any]:
        """JSON-ready dict in the predecessor's shape (plus our extra fields)."""
        return {
            **{f.name: getattr(self, f.name) for f in dataclasses.fields(self)},
            "fallback_options": list(self.fallback_options),
            "compatible_hardware": list(self.compatible_hardware),
            "all_scores": {hw: s.to_dict() for hw, s in self.all_scores.items()},
            "prediction_sources": dict(self.prediction_sources),
            "weights": dict(self.weights),
            "devices": {hw: dict(d) for hw, d in self.devices.items()},
            "tie": list(self.tie),
        }

    def summary(self) -> dict[str, Any]:
        """The primary target, the fallbacks, where the primary's answer came from and the tie."""
        return {"primary": self.primary_recommendation, "fallbacks": list(self.fallback_options),
                "source": self.prediction_source, "tie": list(self.tie)}


#: When targets tie and how a tie is ranked.
TIE_RULE = ("a target ties with the best-scored one when their latency intervals overlap (the predicted "
            "difference lies inside their intervals) and the configuration prefers neither (the same "
            "availability / cost factor); tied targets are ranked by predicted memory (less first, "
            "in whole MiB), then by measured energy per item (less first; unmeasured last), then by score")


def _score(cfg: SelectionConfig, weights: Weights, family: str, preds: Mapping[str, Prediction],
           reasons: dict[str, str]) -> dict[str, HardwareScore]:
    """Scores in [0, 1] per criterion (latency and throughput relative to the best candidate,
    memory the share of the target's memory left free), weighted, times the preference factor."""
    # Memory is not compared across targets: host RSS of a whole process on a CPU and allocator
    # peaks on a GPU differ in kind.
    ok = {hw: p for hw, p in preds.items() if not reasons.get(hw)}
    scores: dict[str, HardwareScore] = {}
    if ok:
        best_lat = min(p.latency_ms for p in ok.values())
        best_thr = max(p.throughput for p in ok.values())
    for hw, p in preds.items():
        factor = cfg.hardware[hw].factor
        if reasons.get(hw):
            scores[hw] = HardwareScore(hw, False, 0.0, preference_factor=factor, prediction=p, reason=reasons[hw])
            continue
        lat = best_lat / p.latency_ms if p.latency_ms > 0 else 1.0
        thr = p.throughput / best_thr if best_thr > 0 else 1.0
        mem = min(1.0, max(0.0, 1.0 - p.memory_mb / (capacity_gb(cfg, hw) * 1024)))
        compat = RATINGS[cfg.rating(family, hw)]
        total = (weights.latency * lat + weights.throughput * thr + weights.memory * mem
                 + weights.compatibility * compat) * factor
        scores[hw] = HardwareScore(hw, True, total, lat, thr, mem, compat, factor, p)
    return scores


def _explain(primary: str | None, ranked: Sequence[HardwareScore], scores: Mapping[str, HardwareScore],
             mode: str, task: str | None, predictor: Predictor, tie: Sequence[str] = ()) -> str:
    parts: list[str] = []
    goal = f"task {task} ({mode})" if task else mode
    if primary is None:
        why = "; ".join(f"{hw}: {s.reason}" for hw, s in scores.items())
        return f"No compatible hardware for {goal}. {why}."
    best = scores[primary]
    p = best.prediction
    assert p is not None
    what = {"measured": f"measured ({p.detail})", "registered": f"predicted by the registered model ({p.detail})",
            "roofline": "estimated by the roofline model (device peaks, no usable benchmark data for this case)",
            "rules": "estimated by heuristic rules (no usable benchmark data or registered model)"}[p.source]
    if p.source in ("roofline", "rules") and "left out " in p.detail:  # the case's records that did not answer
        what += "; " + "left out " + p.detail.split("left out ", 1)[1]
    if tie:
        parts.append(f"Tie between {', '.join(tie)} for {goal}: their latency intervals overlap, so the "
                     f"prediction cannot tell them apart; ranked by predicted memory, then measured "
                     f"energy per item.")
    lead = f"{primary} is first" if tie else f"{primary} scores best"
    parts.append(f"{lead} for {goal}: {fmt_ms(p.latency_ms)} latency "
                 f"({fmt_ms(p.interval[0])}-{fmt_ms(p.interval[1])}), {p.throughput:.4g} items/s, "
                 f"{p.memory_mb:.4g} MiB; {what}.")
    if len(ranked) > 1:
        others = ", ".join(f"{s.hardware} {s.score:.2f} ({fmt_ms(s.prediction.latency_ms)}, {s.prediction.source})"
                           for s in ranked[1:] if s.prediction)
        parts.append(f"Score {best.score:.2f}; fallbacks: {others}.")
    bad = [f"{hw} ({s.reason})" for hw, s in scores.items() if not s.compatible]
    if bad:
        parts.append("Incompatible: " + "; ".join(bad) + ".")
    off = [f"{name}: {st.note}" for name, st in predictor.status_.items()
           if not st.available and st.note and name in ("measured", "registered")]
    if off:
        parts.append("Note: " + "; ".join(off) + ".")
    on = "; ".join(f"{hw} {s.prediction.device_text()}, backend {s.prediction.backend}"
                   for hw, s in scores.items() if s.prediction is not None)
    parts.append(f"Answers are for: {on}.")
    return " ".join(parts)


def _select(predictor: Predictor, cfg: SelectionConfig, queries: Sequence[Query], *,
            weights: Weights | None = None, task: str | None = None) -> Recommendation:
    """The recommendation among `queries`: one question (model, batch, precision, mode, backend)
    asked of each hardware target, scored by `weights` (default: the mode's)."""
    first = queries[0]
    info, batch_size, mode, precision, backend = first.model, first.batch_size, first.mode, first.precision, \
        first.backend
    hardware = [q.hardware for q in queries]
    reasons = {hw: incompatibility(cfg, info.family, hw, precision, mode) for hw in hardware}
    preds = dict(zip(hardware, predictor.predict_many(queries), strict=True))
    for hw, p in preds.items():
        reasons[hw] = reasons[hw] or too_big(cfg, hw, p)
    weights = weights or cfg.weights[mode]
    scores = _score(cfg, weights, info.family, preds, reasons)
    order = {hw: i for i, hw in enumerate(cfg.hardware_names)}
    ranked = sorted((s for s in scores.values() if s.compatible), key=lambda s: (-s.score, order[s.hardware]))
    ranked, tie = tie_for_first(ranked, lambda s: s.prediction, lambda s: s.hardware,  # by `TIE_RULE`
                                lambda a, b: a.preference_factor == b.preference_factor)
    primary = ranked[0].hardware if ranked else None
    return Recommendation(
        model_name=info.name,
        model_family=info.family,
        model_size=int(info.param_count),
        model_size_category=cfg.thresholds.model_size_category(int(info.param_count)),
        batch_size=batch_size,
        batch_size_category=cfg.thresholds.batch_size_category(batch_size),
        mode=mode,
        precision=precision,
        primary_recommendation=primary,
        fallback_options=tuple(s.hardware for s in ranked[1:]),
        compatible_hardware=tuple(s.hardware for s in ranked),
        all_scores=MappingProxyType(scores),
        explanation=_explain(primary, ranked, scores, mode, task, predictor, tie),
        prediction_source=scores[primary].prediction.source if primary else None,  # type: ignore[union-attr]
        prediction_sources=MappingProxyType({hw: p.source for hw, p in preds.items()}),
        task_type=task,
        backend=backend or (preds[primary].backend if primary else DEFAULT_BACKEND),
        sequence_length=info.sequence_length,
        weights=MappingProxyType(weights.as_dict()),
        devices=MappingProxyType({hw: {"device": p.device, "device_source": p.device_source,
                                       "device_spec": p.device_spec, "backend": p.backend} for hw, p in preds.items()}),
        tie=tie,
        tie_rule=TIE_RULE,
    )


def _predictor_config(predictor: Predictor | None, source: str | os.PathLike[str] | None, tracking_uri: str | None,
                      config: SelectionConfig | str | os.PathLike[str] | None) -> tuple[Predictor, SelectionConfig]:
    """The predictor a selection asks and the settings it selects by (`config`, else the predictor's)."""
    p = predictor_for(predictor, source, tracking_uri, config)
    return p, p.config_ if config is None or predictor is None else load_config(config)


def select_hardware(model: ModelRef, batch_size: int = 1, mode: str = "inference", precision: str = "fp32",
                    available_hardware: Sequence[str] | str | None = None, *, task_type: str | None = None,
                    backend: str | None = None, device: str | Mapping[str, str] | None = None,
                    predictor: Predictor | None = None, source: str | os.PathLike[str] | None = None,
                    tracking_uri: str | None = None,
                    config: SelectionConfig | str | os.PathLike[str] | None = None) -> Recommendation:
    """The best hardware for `model` (a zoo name, hub-style alias or ModelInfo) at this batch size.

    `available_hardware` defaults to what `detect_hardware()` finds here. `task_type` names a task
    profile (classification, generation, embedding, speech_recognition, fine_tuning, training, or
    one from the config) whose mode and weights replace `mode`'s (`mode` then stays at its default
    or names the task's mode). `device` names the device of one target (``"h100"``) or maps
    targets to devices. Predictions come from the shared predictor for (source, tracking_uri,
    config) unless `predictor` is given. Invalid input raises `QuestionError` naming the field
    (`UnknownModelError`, a KeyError, for an unknown model).
    """
    p, cfg = _predictor_config(predictor, source, tracking_uri, config)
    weights = None
    if task_type is not None:
        if task_type not in cfg.tasks:
            raise QuestionError(f"unknown task {task_type!r}; accepted: {', '.join(cfg.tasks)} (add one under "
                                "[tasks] in the config)", "task_type")
        profile = cfg.tasks[task_type]
        if check_mode(mode) not in ("inference", profile.mode):
            raise QuestionError(f"task {task_type} sets the mode itself ({profile.mode}); mode {mode} would be "
                                "ignored: give one of them", "mode")
        mode, weights = profile.mode, profile.weights
    hardware = available_hardware if available_hardware is not None else _detected(cfg)
    queries = ask(cfg, model, hardware, batch_size=batch_size, precision=precision, mode=mode, backend=backend,
                  device=device)
    return _select(p, cfg, queries, weights=weights, task=task_type)


def select_precision(model: ModelRef, hardware: str = "cpu", batch_size: int = 1, mode: str = "inference",
                     precisions: Sequence[str] = DEFAULT_PRECISION_CHOICES, *, backend: str | None = None,
                     device: str | None = None, predictor: Predictor | None = None,
                     source: str | os.PathLike[str] | None = None, tracking_uri: str | None = None,
                     config: SelectionConfig | str | os.PathLike[str] | None = None) -> ranking.PrecisionChoice:
    """The precision to run `model` (a zoo name, hub-style alias or ModelInfo) at on `hardware`,
    among `precisions`, by `hwsel.ranking.PRECISION_RULE` (`hwsel.ranking.rank_precisions`).

    `backend`, `device`, `predictor`, `source`, `tracking_uri` and `config` as in
    `select_hardware`. Invalid input raises `QuestionError` naming the field.
    """
    if isinstance(precisions, str) or not precisions:
        raise QuestionError(f"precisions must be a non-empty list of precisions, got {precisions!r}", "precisions")
    p, cfg = _predictor_config(predictor, source, tracking_uri, config)
    queries = [ask(cfg, model, hardware, batch_size=batch_size, precision=prec, mode=mode, backend=backend,
                   device=device)[0] for prec in dict.fromkeys(precisions)]
    return ranking.rank_precisions(cfg, queries, p.predict_many(queries), on_this_machine=device is None)


def _detected(cfg: SelectionConfig) -> tuple[str, ...]:
    # the selection functions' parameter `available_hardware` hides the function
    return available_hardware(cfg)


#: Zoo models considered as a family's representative of a size category; the first is the
#: family's base model, which its map rows start from.
_FAMILY_MODELS: Mapping[str, tuple[str, ...]] = MappingProxyType({
    "embedding": ("bert-base",), "text_generation": ("gpt2", "t5-small"), "vision": ("vit-base", "resnet-50"),
    "audio": ("whisper-tiny", "wav2vec2-base"), "multimodal": ("clip-vit-b32",)})


def _scaled(info: ModelInfo, params: int, name: str) -> ModelInfo:
    """`info` grown or shrunk to `params` parameters (depth and width each by the cube root)."""
    ratio = params / max(int(info.param_count), 1)
    change: dict[str, Any] = {"name": name, "param_count": int(params),
                              "flops_per_item": float(info.flops_per_item) * ratio}
    if info.num_layers:
        change["num_layers"] = max(1, round(info.num_layers * ratio ** (1 / 3)))
    if info.hidden_size:
        change["hidden_size"] = max(8, round(info.hidden_size * ratio ** (1 / 3)))
    return dataclasses.replace(info, **change)


def representative_models(config: SelectionConfig, families: Sequence[str]) -> dict[str, dict[str, ModelInfo]]:
    """family -> size category -> a ModelInfo: a zoo model of that size, else the base model scaled."""
    th = config.thresholds.model_size
    lows = {"small": 1, "medium": th["small"] + 1, "large": th["medium"] + 1}
    targets = {"small": th["small"] // 2, "medium": int(math.sqrt(th["small"] * th["medium"])),
               "large": int(math.sqrt(th["medium"] * th["large"]))}
    out: dict[str, dict[str, ModelInfo]] = {}
    for fam in families:
        infos = [model_info(n) for n in _FAMILY_MODELS[fam]]
        sizes: dict[str, ModelInfo] = {}
        for cat in SIZE_CATEGORIES:
            fit = [i for i in infos if lows[cat] <= i.param_count <= th[cat]]
            sizes[cat] = fit[0] if fit else _scaled(infos[0], targets[cat], f"{fam}-{cat}-scaled")
        out[fam] = sizes
    return out


def selection_map(families: Sequence[str] | None = None, batch_sizes: Sequence[int] = (1, 4, 16, 32, 64),
                  hardware: Sequence[str] | None = None, modes: Sequence[str] = MODES, precision: str = "fp32", *,
                  device: str | Mapping[str, str] | None = None, backend: str | None = None,
                  predictor: Predictor | None = None, source: str | os.PathLike[str] | None = None,
                  tracking_uri: str | None = None,
                  config: SelectionConfig | str | os.PathLike[str] | None = None) -> dict[str, Any]:
    """Recommendations per family x model size x batch size x mode, in the predecessor's shape.

    ``model_families[fam]["model_sizes"][size][mode]`` holds the primary and fallbacks at the
    first batch size and ``["batch_sizes"][b]`` per batch size; ``model_families[fam][mode]
    ["batch_sizes"][b]`` the family's base zoo model's (a mode answers to its older spelling too).
    `hardware` defaults to every configured target; `device`, `backend` as in `select_hardware`.
    """
    p, cfg = _predictor_config(predictor, source, tracking_uri, config)
    grid = ask_grid(cfg, what="selection_map", families=list(families) if families is not None else list(FAMILIES),
                    hardware=hardware, batch_sizes=batch_sizes, modes=modes, precisions=[precision], backend=backend,
                    device=device)
    fams, batches, mode_list, hws = list(grid.families), list(grid.batch_sizes), list(grid.modes), grid.hardware
    precision, backend = grid.precisions[0], grid.backend
    reps = representative_models(cfg, fams)

    def per_batch(info: ModelInfo, mode: str) -> dict[str, Any]:
        return {str(b): _select(p, cfg, grid.queries(info, b, mode, precision)).summary() for b in batches}

    families_out: dict[str, Any] = {}
    for fam in fams:
        sizes_out: dict[str, Any] = {}
        for cat, info in reps[fam].items():
            per_mode: dict[str, Any] = ModeKeyed({"model": info.name, "param_count": int(info.param_count)})
            for mode in mode_list:
                answers = per_batch(info, mode)
                first = answers[str(batches[0])]
                per_mode[mode] = {"primary": first["primary"], "fallbacks": first["fallbacks"], "batch_sizes": answers}
            sizes_out[cat] = per_mode
        base = model_info(_FAMILY_MODELS[fam][0])
        families_out[fam] = ModeKeyed({"model_sizes": sizes_out, "base_model": base.name,
                                       **{mode: {"batch_sizes": per_batch(base, mode)} for mode in mode_list}})
    return {
        "timestamp": _dt.datetime.now(_dt.timezone.utc).isoformat(),
        "hardware_platforms": list(hws),
        "batch_sizes": batches,
        "modes": mode_list,
        "precision": precision,
        "devices": device_table({hw: p.resolve_target(hw, backend, grid.devices.get(hw)) for hw in hws}),
        "prediction_layers": p.describe(),
        "model_families": families_out,
    }


def analyze_model(model: ModelRef, batch_sizes: Sequence[int] = (1, 8, 32), hardware: Sequence[str] | None = None,
                  modes: Sequence[str] = MODES, precision: str = "fp32", *,
                  device: str | Mapping[str, str] | None = None, backend: str | None = None,
                  predictor: Predictor | None = None,
                  source: str | os.PathLike[str] | None = None, tracking_uri: str | None = None,
                  config: SelectionConfig | str | os.PathLike[str] | None = None) -> dict[str, Any]:
    """Performance of one model on each target per batch size and mode, with the recommendation.

    ``result[mode]["performance"][str(batch)][hardware]`` holds throughput, latency, memory_usage,
    source and interval, ``result[mode]["recommendations"][str(batch)]`` the primary and
    fallbacks (a mode answers to its older spelling too). `hardware`, `device`, `backend` as in
    `selection_map`.
    """
    p, cfg = _predictor_config(predictor, source, tracking_uri, config)
    grid = ask_grid(cfg, what="analyze_model", models=[model], hardware=hardware, batch_sizes=batch_sizes,
                    modes=modes, precisions=[precision], backend=backend, device=device)
    info, batches, mode_list, hws = grid.models[0], list(grid.batch_sizes), list(grid.modes), grid.hardware
    precision, backend = grid.precisions[0], grid.backend
    out: dict[str, Any] = ModeKeyed({
        "model_name": info.name, "model_family": info.family, "model_size": int(info.param_count),
        "hardware_platforms": list(hws), "batch_sizes": batches, "precision": precision,
        "devices": device_table({hw: p.resolve_target(hw, backend, grid.devices.get(hw)) for hw in hws}),
        "timestamp": _dt.datetime.now(_dt.timezone.utc).isoformat(),
    })
    for mode in mode_list:
        recs = {str(b): _select(p, cfg, grid.queries(info, b, mode, precision)) for b in batches}
        performance = {b: {hw: {"throughput": s.prediction.throughput, "latency": s.prediction.latency_ms,
                                "memory_usage": s.prediction.memory_mb, "source": s.prediction.source,
                                "interval": list(s.prediction.interval), "compatible": s.compatible,
                                "reason": s.reason}
                           for hw, s in rec.all_scores.items() if s.prediction is not None}
                       for b, rec in recs.items()}
        out[mode] = {"performance": performance, "recommendations": {b: rec.summary() for b, rec in recs.items()}}
    return out


__all__ = ["TIE_RULE", "HardwareScore", "Recommendation", "analyze_model", "available_hardware", "detect_hardware",
           "select_hardware", "select_precision", "selection_map"]
