"""Prediction intervals that adapt to the question: normalised split-conformal bands (Lei et al.
2018, "Distribution-free predictive inference for regression", 5.2, locally weighted conformal),
wider the farther a model lies from the models learned from (`novelty`), one band per answering
layer (``trained``, ``roofline``, ``blended``, ``measured``)."""

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
#: A configuration needs this many calibration rows for a scale of its own (fewer: the overall one).
MIN_GROUP_ROWS = 10
#: A layer's band is fit on its own residuals only when they come from this many models (fewer
#: are not exchangeable with the next one: the blended answers of two models tell little about a third).
MIN_LAYER_MODELS = 5
#: Distance buckets coverage is reported per (`novelty`: log FLOPs to the nearest measured model,
#: +1 for an unseen model type, +1 for an unseen family, `UNSEEN_CONFIG` for an unseen configuration).
DISTANCE_BUCKETS: tuple[tuple[float, float], ...] = ((0.0, 0.25), (0.25, 1.0), (1.0, 2.0), (2.0, math.inf))
#: Columns `novelty` reads.
NOVELTY_COLUMNS: tuple[str, ...] = ("model", "model_type", "family", "hardware", "backend", "precision",
                                    "log_flops_per_item")


def novelty(rows: pd.DataFrame, known: pd.DataFrame) -> np.ndarray:
    """How far each of `rows` lies from the models of `known` (both with `NOVELTY_COLUMNS`): the
    smallest ``|log FLOPs per item|`` difference to another model of its configuration, plus
    `TYPE_STEP` and `FAMILY_STEP` for an unseen model type and family; `UNSEEN_CONFIG` when the
    configuration holds no other model."""
    out = np.full(len(rows), UNSEEN_CONFIG, dtype=float)
    groups = dict(list(known.assign(model=known["model"].astype(str)).groupby(config_groups(known), sort=False)))
    asked = pd.DataFrame({"key": config_groups(rows), "model": rows["model"].astype(str).to_numpy()})
    for (key, model), idx in asked.groupby(["key", "model"], sort=False).indices.items():
        others = groups.get(key)
        others = others[others["model"] != model] if others is not None else others
        if others is None or not len(others):
            continue
        first = rows.iloc[idx[0]]  # a model's rows in one configuration share its architecture
        flops, own = others["log_flops_per_item"].to_numpy(dtype=float), float(first["log_flops_per_item"])
        d = float(np.nanmin(np.abs(flops - own))) if np.isfinite(flops).any() and math.isfinite(own) else 1.0
        if not (others["model_type"].astype(str) == str(first["model_type"])).any():
            d += TYPE_STEP
            if not (others["family"].astype(str) == str(first["family"])).any():
                d += FAMILY_STEP
        out[idx] = d
    return out


def conformal_band(residuals: np.ndarray, level: float = 0.9) -> tuple[float, float]:
    """Split-conformal (low, high) offsets in log units for a nominal `level` interval, from
    out-of-fold ``log(measured) - log(predicted)`` `residuals` ((0, 0) without any): ``pred *
    exp(low) .. pred * exp(high)`` covers at least `level` of exchangeable new cases."""
    r = np.sort(np.asarray(residuals, dtype=float)[np.isfinite(residuals)])
    n = len(r)
    if n == 0:
        return 0.0, 0.0
    tail = (1.0 - level) / 2.0
    hi_rank = min(n, math.ceil((n + 1) * (1.0 - tail)))
    lo_rank = max(1, math.floor((n + 1) * tail))
    return float(min(r[lo_rank - 1], 0.0)), float(max(r[hi_rank - 1], 0.0))


@dataclass(frozen=True)
class AdaptiveBand:
    """A fitted normalised conformal band: an answer's offsets are `q_low` (<= 0) and `q_high`
    (>= 0) times its difficulty ``g * (1 + slope * d) * (1 + max(0, d - d_max))``, `g` its group's
    scale (`base` for a group with fewer than `MIN_GROUP_ROWS` calibration rows), `d` its
    `novelty`, `d_max` the largest distance calibrated; `n` the calibration rows."""

    base: float
    slope: float
    q_low: float
    q_high: float
    level: float = 0.9
    group_scale: tuple[tuple[str, float], ...] = ()
    d_max: float = math.inf
    n: int = 0

    @classmethod
    def fit(cls, residuals: Sequence[float], distances: Sequence[float], level: float = 0.9,
            groups: Sequence[str] | None = None) -> AdaptiveBand:
        """Calibrate on out-of-fold log residuals (measured - predicted) of held-out models, their
        `novelty` and (optionally) their groups.

        Raises:
            ValueError: fewer than 2 finite residuals.
        """
        r = np.asarray(residuals, dtype=float)
        d = np.asarray(distances, dtype=float)
        g = np.asarray(groups if groups is not None else [""] * len(r), dtype=object)
        ok = np.isfinite(r) & np.isfinite(d)
        r, d, g = r[ok], d[ok], g[ok]
        if len(r) < 2:
            raise ValueError(f"AdaptiveBand.fit needs at least 2 finite residuals, got {len(r)}")
        a = np.abs(r)
        base = max(float(np.median(a)), 1e-3)
        scales = {str(k): max(float(np.median(a[g == k])), 0.2 * base) for k in np.unique(g)
                  if int(np.sum(g == k)) >= MIN_GROUP_ROWS}
        gs = np.array([scales.get(str(k), base) for k in g])
        scaled = a / gs
        slope = float(np.polyfit(d, scaled, 1)[0]) if np.ptp(d) > 0 else 0.0
        slope = max(0.0, slope / max(float(np.median(scaled)), 1e-6))
        lo, hi = conformal_band(r / (gs * (1 + slope * d)), level)
        d_max = float(np.max(d)) if float(np.max(d)) > 0 else math.inf
        return cls(base, slope, lo, hi, level, tuple(sorted(scales.items())), d_max, len(r))

    def offsets(self, distances: Sequence[float] | np.ndarray,
                groups: Sequence[str] | None = None) -> tuple[np.ndarray, np.ndarray]:
        """(low, high) log offsets around the prediction for answers at `distances` (in `groups`)."""
        d = np.asarray(distances, dtype=float)
        scales = dict(self.group_scale)
        g = np.array([scales.get(str(k), self.base) for k in groups]) if groups is not None else self.base
        s = g * (1 + self.slope * d) * (1 + np.maximum(0.0, d - self.d_max))
        return self.q_low * s, self.q_high * s

    def to_dict(self) -> dict[str, Any]:
        """The band as plain JSON values (`from_dict` reads it back)."""
        return {"base": self.base, "slope": self.slope, "q_low": self.q_low, "q_high": self.q_high,
                "level": self.level, "group_scale": dict(self.group_scale),
                "d_max": self.d_max if math.isfinite(self.d_max) else None, "n": self.n}

    @classmethod
    def from_dict(cls, b: Mapping[str, Any]) -> AdaptiveBand:
        """Read `to_dict`'s output (a band stored without ``d_max`` never widens beyond it)."""
        d_max = b.get("d_max")
        return cls(float(b["base"]), float(b["slope"]), float(b["q_low"]), float(b["q_high"]), float(b["level"]),
                   tuple(sorted((str(k), float(v)) for k, v in b["group_scale"].items())),
                   math.inf if d_max is None else float(d_max), int(b.get("n", 0)))


def architecture_keys(frame: pd.DataFrame) -> list[str]:
    """Each row's architecture (``model_type`` and ``log_flops_per_item``) as its model's name."""
    flops = pd.to_numeric(frame["log_flops_per_item"], errors="coerce").to_numpy(dtype=float)
    return [f"{t}|{f:.6f}" if math.isfinite(f) else f"{t}|?" for t, f in zip(frame["model_type"], flops, strict=True)]


def novelty_frame(table: pd.DataFrame, features: pd.DataFrame) -> pd.DataFrame:
    """`NOVELTY_COLUMNS` of a training table and its `hwsel.features.feature_frame`, row for row."""
    out = pd.DataFrame({c: (features if c in ("model_type", "family") else table)[c].astype(str).to_numpy()
                        for c in NOVELTY_COLUMNS[:-1]})
    out["log_flops_per_item"] = features["log_flops_per_item"].to_numpy(dtype=float)
    return out


def config_groups(frame: pd.DataFrame) -> np.ndarray:
    """The configuration of each row (``hardware|backend|precision``): `AdaptiveBand`'s groups."""
    return (frame["hardware"].astype(str) + "|" + frame["backend"].astype(str) + "|"
            + frame["precision"].astype(str)).to_numpy()


def lomo_distances(frame: pd.DataFrame, oof: pd.DataFrame) -> np.ndarray:
    """The `novelty` of each out-of-fold row of `oof` (column ``row`` indexes `frame`, a
    `novelty_frame`), measured against the models other than the row's own."""
    rows = oof["row"].to_numpy()
    model = frame["model"].to_numpy()[rows]
    distance = np.zeros(len(oof))
    for name in np.unique(model):
        here = model == name
        distance[here] = novelty(frame.iloc[rows[here]], frame[frame["model"] != name])
    return distance


def lomo_offsets(frame: pd.DataFrame, oof: pd.DataFrame, level: float = 0.9) -> tuple[np.ndarray, np.ndarray]:
    """(low, high) log offsets of each out-of-fold row of `oof` (columns ``row``, ``y_true``,
    ``y_pred``, rows indexing `frame`, a `novelty_frame`) from a band that has not seen its model.

    Raises:
        ValueError: some model's rows have fewer than 2 other rows to calibrate on.
    """
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


def calibratable(frame: pd.DataFrame, part: pd.DataFrame) -> bool:
    """Whether `part`'s rows (``row`` indexes `frame`) come from at least `MIN_LAYER_MODELS` models."""
    return int(pd.Series(frame["model"].to_numpy()[part["row"].to_numpy()]).nunique()) >= MIN_LAYER_MODELS


def span_offsets(trained: tuple[np.ndarray, np.ndarray], roofline: tuple[np.ndarray, np.ndarray],
                 weight: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """(low, high) log offsets of blended answers without a calibrated blended band: the trained and
    roofline bands blended by each answer's `weight` (0: trained, 1: roofline), as `hwsel.guard.blend` does."""
    w = np.asarray(weight, dtype=float)
    return (1 - w) * trained[0] + w * roofline[0], (1 - w) * trained[1] + w * roofline[1]


def blend_weights(table: pd.DataFrame, oof: pd.DataFrame) -> np.ndarray:
    """How far towards the roofline `hwsel.predict.Predictor` blends each out-of-fold row of `oof`
    (``row`` indexes `table`: ``model``, ``param_count``, ``family``, ``hardware``,
    ``device_name``) when its model is held out: `hwsel.bounds.Coverage.distance` of the row
    against the coverage of the other models' rows (0: inside, answered by the trained model)."""
    from .bounds import Coverage

    rows = oof["row"].to_numpy()
    model = table["model"].astype(str).to_numpy()
    params = pd.to_numeric(table["param_count"], errors="coerce").to_numpy(dtype=float)
    family = table["family"].fillna("").astype(str).to_numpy()
    hardware = table["hardware"].astype(str).to_numpy()
    device = table["device_name"].fillna("").astype(str).to_numpy()
    out = np.zeros(len(oof))
    for name in np.unique(model[rows]):
        other = model != name
        cov = Coverage.from_rows(params[other], family[other], zip(hardware[other], device[other], strict=True))
        if cov is None:
            continue
        for k in np.flatnonzero(model[rows] == name):
            i = rows[k]
            out[k] = cov.distance(params[i], family[i], hardware[i], device[i])[0]
    return out


def layer_oofs(table: pd.DataFrame, features: pd.DataFrame, oof: pd.DataFrame) -> dict[str, pd.DataFrame]:
    """The held-out answers of the ``roofline`` and ``blended`` layers beside the trained model's
    leave-one-model-out `oof` (columns ``row``, ``y_true``, ``y_pred``, rows indexing `table` and
    its `features`), as `hwsel.predict.Predictor` serves them (blended rows with their ``weight``)."""
    from .layers.roofline import layer_log_ms

    roof = layer_log_ms(features)
    rows = oof["row"].to_numpy()
    w = blend_weights(table, oof)
    far = w > 0
    return {"roofline": pd.DataFrame({"row": rows, "y_true": oof["y_true"].to_numpy(), "y_pred": roof[rows]}),
            "blended": pd.DataFrame({"row": rows[far], "y_true": oof["y_true"].to_numpy()[far],
                                     "y_pred": (1 - w[far]) * oof["y_pred"].to_numpy()[far] + w[far] * roof[rows][far],
                                     "weight": w[far]})}


@dataclass(frozen=True)
class AdaptiveIntervals:
    """An `AdaptiveBand` per answering layer: `band` the trained model's, `layers` the others by
    name (``roofline``, ``blended``); `known` the `NOVELTY_COLUMNS` distances are measured against,
    one row per (architecture, configuration), ``model`` being the `architecture_keys`."""

    band: AdaptiveBand
    known: pd.DataFrame = field(repr=False, compare=False)
    layers: tuple[tuple[str, AdaptiveBand], ...] = ()

    @classmethod
    def calibrate(cls, frame: pd.DataFrame, oof: pd.DataFrame, level: float = 0.9,
                  layers: Mapping[str, pd.DataFrame] | None = None) -> AdaptiveIntervals:
        """Fit on leave-one-model-out predictions `oof` (see `lomo_offsets`) of the table whose
        `novelty_frame` is `frame`. `layers`: other layers' held-out answers (same columns), each
        fit into its own band when they come from `MIN_LAYER_MODELS` models (`calibratable`)."""
        def fit(part: pd.DataFrame) -> AdaptiveBand:
            resid = (part["y_true"] - part["y_pred"]).to_numpy(dtype=float)
            return AdaptiveBand.fit(resid, lomo_distances(frame, part), level,
                                    config_groups(frame)[part["row"].to_numpy()])

        extra = tuple((name, fit(part)) for name, part in sorted((layers or {}).items()) if calibratable(frame, part))
        known = frame.assign(model=architecture_keys(frame))
        return cls(fit(oof), known.drop_duplicates().reset_index(drop=True), extra)

    def layer_band(self, layer: str) -> AdaptiveBand | None:
        """The band of `layer` (``trained``, ``roofline``, ``blended``), None where it has none."""
        return self.band if layer == "trained" else dict(self.layers).get(layer)

    def distances(self, features: pd.DataFrame) -> np.ndarray:
        """The `novelty` of rows of `hwsel.features.feature_frame` against the known configurations."""
        rows = pd.DataFrame({c: features[c].to_numpy() for c in NOVELTY_COLUMNS if c != "model"})
        rows["model"] = architecture_keys(rows)
        return novelty(rows, self.known)

    def offsets(self, features: pd.DataFrame, layer: str = "trained") -> tuple[np.ndarray, np.ndarray]:
        """(low, high) log offsets of `layer`'s answers for rows of `hwsel.features.feature_frame`
        (``model_type``, ``family``, ``hardware``, ``backend``, ``precision``,
        ``log_flops_per_item``).

        Raises:
            KeyError: these intervals hold no band for `layer`.
        """
        band = self.layer_band(layer)
        if band is None:
            raise KeyError(f"no {layer!r} band in these intervals; they hold: trained, "
                           + ", ".join(name for name, _ in self.layers))
        return band.offsets(self.distances(features), config_groups(features))

    def to_json(self) -> str:
        """The bands and the known configurations as JSON (`from_json` reads it back)."""
        known = {c: self.known[c].tolist() for c in NOVELTY_COLUMNS}
        return json.dumps({"kind": "hwsel.intervals.AdaptiveIntervals", "band": self.band.to_dict(),
                           "layers": {name: b.to_dict() for name, b in self.layers}, "known": known})

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
        known = pd.DataFrame({c: doc["known"][c] for c in NOVELTY_COLUMNS})
        known["log_flops_per_item"] = known["log_flops_per_item"].astype(float)
        layers = tuple(sorted((str(k), AdaptiveBand.from_dict(v)) for k, v in (doc.get("layers") or {}).items()))
        return cls(AdaptiveBand.from_dict(doc["band"]), known, layers)


__all__ = ["AdaptiveBand", "AdaptiveIntervals", "DISTANCE_BUCKETS", "FAMILY_STEP", "MIN_GROUP_ROWS",
           "MIN_LAYER_MODELS", "NOVELTY_COLUMNS", "TYPE_STEP", "UNSEEN_CONFIG", "architecture_keys",
           "blend_weights", "calibratable", "config_groups", "conformal_band", "layer_oofs", "lomo_distances",
           "lomo_offsets", "novelty", "novelty_frame", "span_offsets"]
