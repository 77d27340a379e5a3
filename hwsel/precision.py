"""Selecting the precision to run a model at on one target: `PrecisionChoice`, ranked by
`PRECISION_RULE`, each precision that cannot run there left out with its reason.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass, fields
from types import MappingProxyType
from typing import Any

from .config import SelectionConfig
from .query import Prediction, Query
from .ranking import fmt_ms, incompatibility, probed_target, tie_for_first, too_big

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


__all__ = ["PRECISION_RULE", "PrecisionChoice", "rank_precisions"]
