"""Prediction intervals that adapt to the question: normalised split-conformal bands.

A fixed band (one pair of residual quantiles for every answer) cannot tell a confident answer
from a guess. Here each answer gets a difficulty ``s = base + slope * d``, where ``d`` is how far
its model lies from the models the predictor learned from (`novelty`): the distance in log FLOPs
per item to the nearest model measured in the same configuration (hardware, backend, precision),
plus a step when no model of its type, and another when no model of its family, was measured
there. The conformal scores are the log residuals divided by ``s``; their quantiles, calibrated
on leave-one-model-out residuals, give ``pred * exp(q_low * s) .. pred * exp(q_high * s)``:
narrow next to measured neighbours, wide where the answer extrapolates. With exchangeable
calibration rows the band covers at least the nominal level (Lei et al. 2018, "Distribution-free
predictive inference for regression", section 5.2, locally weighted conformal).
"""

from __future__ import annotations

import json
import math
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

import numpy as np
import pandas as pd

#: Added to the distance when no model of the same ``model_type`` was measured in the configuration.
TYPE_STEP = 1.0
#: Added when no model of the same family was measured in the configuration either.
FAMILY_STEP = 1.0
#: The distance of a configuration nothing was measured in.
UNSEEN_CONFIG = 4.0
#: Columns `novelty` reads.
NOVELTY_COLUMNS: tuple[str, ...] = ("model", "model_type", "family", "hardware", "backend", "precision",
                                    "log_flops_per_item")


def novelty(rows: pd.DataFrame, known: pd.DataFrame) -> np.ndarray:
    """How far each of `rows` lies from the models of `known` (both with `NOVELTY_COLUMNS`).

    For each row: among `known` rows of the same hardware, backend and precision and another
    model, the smallest ``|log FLOPs per item|`` difference, plus `TYPE_STEP` when none has its
    ``model_type`` and `FAMILY_STEP` when none has its family; `UNSEEN_CONFIG` when the
    configuration holds no other model.
    """
    out = np.full(len(rows), UNSEEN_CONFIG, dtype=float)
    key_k = known["hardware"].astype(str) + "|" + known["backend"].astype(str) + "|" + known["precision"].astype(str)
    key_r = rows["hardware"].astype(str) + "|" + rows["backend"].astype(str) + "|" + rows["precision"].astype(str)
    groups = {k: g for k, g in known.assign(_key=key_k.to_numpy()).groupby("_key", sort=False)}
    model_r = rows["model"].astype(str).to_numpy()
    flops_r = rows["log_flops_per_item"].to_numpy(dtype=float)
    type_r = rows["model_type"].astype(str).to_numpy()
    fam_r = rows["family"].astype(str).to_numpy()
    cache: dict[tuple[str, str], float] = {}
    for i, key in enumerate(key_r.to_numpy()):
        group = groups.get(key)
        if group is None:
            continue
        memo = (key, model_r[i])
        if memo in cache:
            out[i] = cache[memo]
            continue
        others = group[group["model"].astype(str).to_numpy() != model_r[i]]
        if not len(others):
            cache[memo] = out[i]
            continue
        flops = others["log_flops_per_item"].to_numpy(dtype=float)
        d = float(np.nanmin(np.abs(flops - flops_r[i]))) if np.isfinite(flops).any() and math.isfinite(flops_r[i]) \
            else 1.0
        if not (others["model_type"].astype(str).to_numpy() == type_r[i]).any():
            d += TYPE_STEP
            if not (others["family"].astype(str).to_numpy() == fam_r[i]).any():
                d += FAMILY_STEP
        out[i] = cache[memo] = d
    return out


@dataclass(frozen=True)
class AdaptiveBand:
    """A fitted normalised conformal band. An answer's difficulty is ``g * (1 + slope * d)``: `g`
    the typical ``|residual|`` of its group (configuration: hardware, backend, precision; `base`
    for a group the calibration did not hold) and `d` its `novelty`; `q_low` (<= 0) and `q_high`
    (>= 0) are the quantiles of the residuals divided by their difficulty, at the nominal `level`."""

    base: float
    slope: float
    q_low: float
    q_high: float
    level: float = 0.9
    group_scale: tuple[tuple[str, float], ...] = ()

    @classmethod
    def fit(cls, residuals: Sequence[float], distances: Sequence[float], level: float = 0.9,
            groups: Sequence[str] | None = None) -> AdaptiveBand:
        """Calibrate on out-of-fold log residuals (measured - predicted) of held-out models, their
        `novelty` and (optionally) their groups. Group scales are the median ``|residual|`` per
        group (at least a fifth of the overall one); the slope is the least-squares slope of the
        scaled ``|residual|`` on distance (>= 0); the quantiles are those of the scaled residuals
        with the finite-sample correction ``ceil((n + 1) q) / n``."""
        r = np.asarray(residuals, dtype=float)
        d = np.asarray(distances, dtype=float)
        g = np.asarray(groups if groups is not None else [""] * len(r), dtype=object)
        ok = np.isfinite(r) & np.isfinite(d)
        r, d, g = r[ok], d[ok], g[ok]
        if len(r) < 2:
            raise ValueError(f"AdaptiveBand.fit needs at least 2 finite residuals, got {len(r)}")
        a = np.abs(r)
        base = max(float(np.median(a)), 1e-3)
        scales = {str(k): max(float(np.median(a[g == k])), 0.2 * base) for k in np.unique(g)}
        gs = np.array([scales[str(k)] for k in g])
        scaled = a / gs
        slope = float(np.polyfit(d, scaled, 1)[0]) if np.ptp(d) > 0 else 0.0
        slope = max(0.0, slope / max(float(np.median(scaled)), 1e-6))
        s = np.sort(r / (gs * (1 + slope * d)))
        n = len(s)
        tail = (1.0 - level) / 2.0
        hi = s[min(n, math.ceil((n + 1) * (1.0 - tail))) - 1]
        lo = s[max(1, math.floor((n + 1) * tail)) - 1]
        return cls(base, slope, min(float(lo), 0.0), max(float(hi), 0.0), level, tuple(sorted(scales.items())))

    def offsets(self, distances: Sequence[float] | np.ndarray,
                groups: Sequence[str] | None = None) -> tuple[np.ndarray, np.ndarray]:
        """(low, high) log offsets around the prediction for answers at `distances` (in `groups`)."""
        d = np.asarray(distances, dtype=float)
        scales = dict(self.group_scale)
        g = np.array([scales.get(str(k), self.base) for k in groups]) if groups is not None else self.base
        s = g * (1 + self.slope * d)
        return self.q_low * s, self.q_high * s


def architecture_key(model_type: Any, log_flops_per_item: Any) -> str:
    """One model architecture as a name: its type and log FLOPs per item (a served question is
    the same model as a training one when its architecture is, whatever it is called)."""
    try:
        flops = float(log_flops_per_item)
    except (TypeError, ValueError):
        flops = math.nan
    return f"{model_type}|{flops:.6f}" if math.isfinite(flops) else f"{model_type}|?"


def novelty_frame(table: pd.DataFrame, features: pd.DataFrame) -> pd.DataFrame:
    """`NOVELTY_COLUMNS` of a training table (``model``, ``hardware``, ``backend``, ``precision``)
    and its `hwsel.features.feature_frame` (``model_type``, ``family``, ``log_flops_per_item``),
    row for row."""
    return pd.DataFrame({
        "model": table["model"].astype(str).to_numpy(),
        "model_type": features["model_type"].astype(str).to_numpy(),
        "family": features["family"].astype(str).to_numpy(),
        "hardware": table["hardware"].astype(str).to_numpy(),
        "backend": table["backend"].astype(str).to_numpy(),
        "precision": table["precision"].astype(str).to_numpy(),
        "log_flops_per_item": features["log_flops_per_item"].to_numpy(dtype=float),
    })


def config_groups(frame: pd.DataFrame) -> np.ndarray:
    """The configuration of each row (``hardware|backend|precision``): `AdaptiveBand`'s groups."""
    return (frame["hardware"].astype(str) + "|" + frame["backend"].astype(str) + "|"
            + frame["precision"].astype(str)).to_numpy()


def lomo_offsets(frame: pd.DataFrame, oof: pd.DataFrame, level: float = 0.9) -> tuple[np.ndarray, np.ndarray]:
    """(low, high) log offsets of each out-of-fold row of `oof` (columns ``row``, ``y_true``,
    ``y_pred``; rows index `frame`, a `novelty_frame`): each model's rows get the band calibrated
    on the other models' rows, every distance measured against models other than that one, so no
    interval has seen the model it is scored on."""
    rows = oof["row"].to_numpy()
    resid = (oof["y_true"] - oof["y_pred"]).to_numpy(dtype=float)
    model = frame["model"].to_numpy()[rows]
    group = config_groups(frame)[rows]
    low, high = np.zeros(len(oof)), np.zeros(len(oof))
    for name in np.unique(model):
        here = model == name
        known = frame[frame["model"] != name]
        band = AdaptiveBand.fit(resid[~here], novelty(frame.iloc[rows[~here]], known), level, group[~here])
        low[here], high[here] = band.offsets(novelty(frame.iloc[rows[here]], known), group[here])
    return low, high


@dataclass(frozen=True)
class AdaptiveIntervals:
    """An `AdaptiveBand` with the configurations its distances are measured against: what a
    registered model needs to give each answer its own interval.

    `known` holds `NOVELTY_COLUMNS` of the training table, one row per (architecture,
    configuration), with ``model`` the `architecture_key`.
    """

    band: AdaptiveBand
    known: pd.DataFrame = field(repr=False, compare=False)

    @classmethod
    def calibrate(cls, frame: pd.DataFrame, oof: pd.DataFrame, level: float = 0.9) -> AdaptiveIntervals:
        """Fit on leave-one-model-out predictions `oof` (see `lomo_offsets`) of the table whose
        `novelty_frame` is `frame`; each calibration row's distance excludes its own model."""
        rows = oof["row"].to_numpy()
        resid = (oof["y_true"] - oof["y_pred"]).to_numpy(dtype=float)
        model = frame["model"].to_numpy()[rows]
        distance = np.zeros(len(oof))
        for name in np.unique(model):
            here = model == name
            distance[here] = novelty(frame.iloc[rows[here]], frame[frame["model"] != name])
        band = AdaptiveBand.fit(resid, distance, level, config_groups(frame)[rows])
        known = frame.assign(model=[architecture_key(t, f) for t, f in
                                    zip(frame["model_type"], frame["log_flops_per_item"], strict=True)])
        return cls(band, known.drop_duplicates().reset_index(drop=True))

    def offsets(self, features: pd.DataFrame) -> tuple[np.ndarray, np.ndarray]:
        """(low, high) log offsets for rows of `hwsel.features.feature_frame` (``model_type``,
        ``family``, ``hardware``, ``backend``, ``precision``, ``log_flops_per_item``); a row's
        own architecture never counts as its neighbour, as in calibration."""
        rows = pd.DataFrame({c: features[c].to_numpy() for c in NOVELTY_COLUMNS if c != "model"})
        rows["model"] = [architecture_key(t, f) for t, f in
                         zip(rows["model_type"], rows["log_flops_per_item"], strict=True)]
        return self.band.offsets(novelty(rows, self.known), config_groups(rows))

    def to_json(self) -> str:
        """The band and the known configurations as JSON (`from_json` reads it back)."""
        band = {"base": self.band.base, "slope": self.band.slope, "q_low": self.band.q_low,
                "q_high": self.band.q_high, "level": self.band.level, "group_scale": dict(self.band.group_scale)}
        known = {c: self.known[c].tolist() for c in NOVELTY_COLUMNS}
        return json.dumps({"kind": "hwsel.intervals.AdaptiveIntervals", "band": band, "known": known})

    @classmethod
    def from_json(cls, text: str) -> AdaptiveIntervals:
        """Read `to_json`'s output.

        Raises:
            ValueError: the text is not such a document (naming what is missing).
        """
        doc = json.loads(text)
        if not isinstance(doc, Mapping) or doc.get("kind") != "hwsel.intervals.AdaptiveIntervals":
            raise ValueError("not an hwsel.intervals.AdaptiveIntervals document (no kind "
                             "'hwsel.intervals.AdaptiveIntervals')")
        b = doc["band"]
        band = AdaptiveBand(float(b["base"]), float(b["slope"]), float(b["q_low"]), float(b["q_high"]),
                            float(b["level"]), tuple(sorted((str(k), float(v)) for k, v in b["group_scale"].items())))
        known = pd.DataFrame({c: doc["known"][c] for c in NOVELTY_COLUMNS})
        known["log_flops_per_item"] = known["log_flops_per_item"].astype(float)
        return cls(band, known)


__all__ = ["FAMILY_STEP", "NOVELTY_COLUMNS", "TYPE_STEP", "UNSEEN_CONFIG", "AdaptiveBand", "AdaptiveIntervals",
           "architecture_key", "config_groups", "lomo_offsets", "novelty", "novelty_frame"]
