"""Whether a newly trained version takes a target's @champion: the champion's recipe is
cross-validated on the new data's folds and keeps its title unless beaten by more than
`SCORE_TOLERANCE`; the alias moves compare-and-set under `hwsel.registry.promotion_lock`, and
``hwsel-throughput`` follows ``hwsel-latency``."""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from typing import Any

import numpy as np
import pandas as pd
from sklearn.base import clone

from hwsel.estimators import one_thread
from hwsel.evaluation import Fold, out_of_fold, score_oof

#: Lower by more than this (mean absolute log error) to beat the champion.
SCORE_TOLERANCE = 1e-9
#: (move the alias?, the champion's version before, its score on this data, why)
Decision = tuple[bool, str | None, float | None, str]
#: A learned target's new model's score, and the table, targets and folds it was scored on.
Candidate = tuple[float, pd.DataFrame, np.ndarray, Sequence[Fold]]


def decide(client: Any, target: str, score: float, X: pd.DataFrame, y: np.ndarray, folds: Sequence[Fold]) -> Decision:
    """Whether a new model (score `score` on `folds` of `X`, `y`) should take `target`'s @champion:
    the champion's recipe, as read now, is cross-validated on the same folds."""
    from hwsel import registry

    current = registry.champion_version(client, target)
    if current is None:
        return True, None, None, "no champion yet"
    current_version = str(current.version)
    try:
        recipe = clone(registry.load_model(client.tracking_uri, current.source))
        with one_thread():
            champ_score = score_oof(out_of_fold(recipe, X, y, folds))
    except Exception as exc:  # an unreadable, incompatible or failing champion cannot defend its title
        return True, current_version, None, (
            f"champion v{current_version} unusable on this data ({type(exc).__name__}: {exc})")
    if not math.isfinite(champ_score):
        return True, current_version, champ_score, f"champion v{current_version} scores {champ_score}"
    if score < champ_score - SCORE_TOLERANCE:
        return True, current_version, champ_score, (
            f"new score {score:.6f} < champion v{current_version} {champ_score:.6f} on the same folds")
    # A tie keeps the champion, however new the data: newer data may be poisoned records.
    return False, current_version, champ_score, (
        f"new score {score:.6f} does not beat champion v{current_version} {champ_score:.6f} on the same folds")


def compare_and_set(client: Any, target: str, version: str, score: float, digest: str,
                    decision: Decision) -> Decision:
    """Move `target`'s alias to `version` if `decision` says so and the alias still points where
    `decide` read it, or where another run moved it on the same data (digest) with a worse score;
    call under `hwsel.registry.promotion_lock`. Returns the final decision."""
    from hwsel import registry

    moved, before, champ_score, reason = decision
    if not moved:
        return decision
    current = registry.champion_version(client, target)
    now = str(current.version) if current is not None else None
    if now == before:
        client.set_registered_model_alias(registry.MODEL_NAMES[target], registry.ALIAS, version)
        return decision
    assert current is not None  # the alias can be moved, not removed, by a training run
    tags = dict(current.tags or {})
    by = tags.get("hwsel.training_run_id") or "another run"
    other = registry._float(tags.get("hwsel.score"), math.nan)
    same_data = tags.get("hwsel.data_sha256") == digest and math.isfinite(other)
    if same_data and score < other - SCORE_TOLERANCE:
        client.set_registered_model_alias(registry.MODEL_NAMES[target], registry.ALIAS, version)
        return True, now, other, (f"{reason}; and v{now}, promoted meanwhile by training run {by} on the same data, "
                                  f"scores {other:.6f} on the same folds")
    why = (f"new score {score:.6f} does not beat its {other:.6f} on the same data" if same_data
           else "it was trained on other data; train again to compare against it")
    return False, now, other if same_data else champ_score, (
        f"not promoted: @champion moved from {'v' + before if before else 'none'} to v{now} (training run {by}) "
        f"while this run trained, and {why}")


def promote(client: Any, run_id: str, digest: str, versions: Mapping[str, str],
            candidates: Mapping[str, Candidate]) -> dict[str, Decision]:
    """The decision for each target: whether its new version (`versions`) takes @champion, moved
    compare-and-set under the registry's promotion lock; ``throughput`` follows ``latency``."""
    from hwsel import registry

    # Each learned target's champion, as read now, scored on this data (outside the lock:
    # cross-validating its recipe takes as long as a trial).
    decisions = {target: decide(client, target, *candidate) for target, candidate in candidates.items()}
    # Then move the aliases, compare-and-set against the champion as read, under the lock.
    with registry.promotion_lock(client, f"training run {run_id}"):
        for target, candidate in candidates.items():
            decisions[target] = compare_and_set(client, target, versions[target], candidate[0], digest,
                                                decisions[target])
        # Throughput is the latency model seen through batch / latency: its champion moves with
        # latency's, so the two champions always agree with each other.
        moved, _, champ_score, why = decisions["latency"]
        current = registry.champion_version(client, "throughput")
        if moved or current is None:
            client.set_registered_model_alias(registry.MODEL_NAMES["throughput"], registry.ALIAS,
                                              versions["throughput"])
        why = f"follows hwsel-latency (throughput derives from it): {why}"
        before = None if current is None else str(current.version)
        decisions["throughput"] = (moved or current is None, before, champ_score,
                                   why if current is not None else "no champion yet; " + why)
    return decisions


__all__ = ["SCORE_TOLERANCE", "Candidate", "Decision", "compare_and_set", "decide", "promote"]
