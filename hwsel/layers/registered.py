"""The ``registered`` layer: the champion models of the MLflow Model Registry (`hwsel.registry`),
answering only for the (hardware, backend, precision, mode) combinations their training snapshot
holds, each case scored once on `GRID_BATCH_SIZES` (batch sizes between interpolate)."""

from __future__ import annotations

import dataclasses
import logging
import math
import warnings
from collections.abc import Mapping, Sequence
from typing import Any

from pytest_hwbench.record import MAX_DEVICE_FLOPS, MIN_LATENCY_MS
from pytest_hwbench.sinks import redact_uri
from pytest_hwbench.vocabulary import normalise_mode

from ..bounds import Coverage
from ..query import DEFAULT_BACKEND, HwselWarning, Prediction, Query, default_backend
from .base import prediction, query_features
from .rules import rules_estimate

log = logging.getLogger("hwsel")

#: Batch sizes the registered models score for every case key they are asked about; batch
#: sizes between them interpolate (log-log), larger ones are scored as asked.
GRID_BATCH_SIZES: tuple[int, ...] = (1, 2, 4, 8, 16, 32, 64, 128, 256, 512, 1024)


class RegisteredLayer:
    """Answers queries inside the champions' `domain` (None: open) from their predictions.

    `champions` maps a target (``latency``, ``memory``) to its `hwsel.registry.ChampionModel`;
    `mode_names` maps a mode to the spelling the champion was trained with (``{"train":
    "training"}`` for one trained on records of the older spelling), so its encoders see the
    categories they learned.
    """

    name = "registered"

    def __init__(self, champions: Mapping[str, Any], domain: frozenset[tuple[str, str, str, str]] | None = None,
                 mode_names: Mapping[str, str] | None = None) -> None:
        self.champions = dict(champions)
        self.domain = domain
        self.mode_names = dict(mode_names or {})
        #: (model, hardware, precision, mode, backend, device) -> `_score`'s rows on the grid
        self._grid: dict[tuple[Any, ...], Any] = {}
        #: rows the registered models have scored so far (each grid point once)
        self.scored_rows = 0

    @staticmethod
    def _grid_key(q: Query) -> tuple[Any, ...]:
        return (q.model, q.hardware, q.precision, q.mode, q.backend, q.device_name)

    def _score(self, queries: Sequence[Query]) -> Any:
        """The champions' log latency, log interval (low, high) and log memory (NaN without a memory
        champion) for `queries` (one call each), as the rows of one array."""
        import numpy as np

        sub = query_features(queries, self.mode_names)
        lat_log = self.champions["latency"].predict_log(sub)
        low, high = self.champions["latency"].log_offsets(sub)
        mem = self.champions["memory"].predict_log(sub) if "memory" in self.champions else np.full(len(sub), np.nan)
        self.scored_rows += len(queries)
        return np.vstack([lat_log, lat_log + low, lat_log + high, mem])

    def answer(self, queries: Sequence[Query]) -> list[Prediction | None]:
        import numpy as np

        out: list[Prediction | None] = [None] * len(queries)
        dom = self.domain
        idx = [i for i, q in enumerate(queries)
               if dom is None or (q.hardware, q.backend or default_backend(q.hardware), q.precision, q.mode) in dom]
        if not idx:
            return out
        grid = GRID_BATCH_SIZES
        top = grid[-1]
        beyond = [i for i in idx if queries[i].batch_size > top]
        missing = {self._grid_key(queries[i]): queries[i] for i in idx  # grid key -> a query of it
                   if queries[i].batch_size <= top and self._grid_key(queries[i]) not in self._grid}
        try:
            if missing:
                scored = self._score([dataclasses.replace(q, batch_size=b) for q in missing.values() for b in grid])
                if len(self._grid) > 100_000:
                    self._grid.clear()
                for k, key in enumerate(missing):
                    self._grid[key] = scored[:, k * len(grid):(k + 1) * len(grid)]
            far = dict(zip(beyond, self._score([queries[i] for i in beyond]).T, strict=True)) if beyond else {}
        except Exception as exc:  # a champion that cannot score these rows hands them to the next layer
            warnings.warn(redact_uri(f"registered model failed ({type(exc).__name__}: {exc}); using the next layer"),
                          HwselWarning, stacklevel=3)
            return out
        version = champion_summary(self.champions["latency"]).get("version")
        log_grid = np.log(np.asarray(grid, dtype=float))
        for i in idx:
            q = queries[i]
            if i in far:
                values = far[i]
            else:  # linear in log batch between the grid neighbours (exact on the grid)
                values = [np.interp(math.log(q.batch_size), log_grid, row) for row in self._grid[self._grid_key(q)]]
            lat_log, low_log, high_log, mem_log = map(float, values)
            latency = math.exp(lat_log) if math.isfinite(lat_log) else math.nan
            if not _possible(latency, q):
                continue  # no device runs it that fast (or slow): the next layer answers
            memory = math.exp(mem_log) if math.isfinite(mem_log) else math.nan
            detail = ""
            if not (math.isfinite(memory) and memory > 0):
                memory, detail = rules_estimate(q)[1], "; memory estimated by rules"
            lo = math.exp(low_log) if math.isfinite(low_log) else latency
            hi = math.exp(high_log) if math.isfinite(high_log) else latency
            if q.batch_size not in grid and q.batch_size <= top:
                detail += "; interpolated between the model's grid batch sizes"
            # throughput derived, as hwsel.train derives it
            out[i] = prediction(q, "registered", latency, memory, (max(0.0, min(lo, latency)), max(hi, latency)),
                                f"champion model version {version}{detail}")
        return out


def _possible(latency_ms: float, q: Query) -> bool:
    """Whether a champion's latency is not faster than any measurement can be (`pytest_hwbench.record`'s
    lower bounds): a champion trained on records older than that check may answer 3e-9 ms.
    How slow a champion may say a case runs is its accuracy, `hwsel.train`'s business."""
    if not math.isfinite(latency_ms) or latency_ms < MIN_LATENCY_MS:
        return False
    flops = float(q.model.flops_per_item or 0) * q.batch_size
    return not (math.isfinite(flops) and flops > 0 and latency_ms < flops / MAX_DEVICE_FLOPS * 1e3)


def champion_summary(champion: Any) -> dict[str, Any]:
    """The champion's registry version and training run id (None where it has none)."""
    return {"version": getattr(champion, "version", None), "run_id": getattr(champion, "run_id", None)}


# --- the training snapshot: what a champion may answer for ---------------------------------------

def snapshot_frame(champion: Any, tracking_uri: str | None = None) -> Any | None:
    """The (hardware, backend, precision, mode, device_name, param_count, family) columns of a
    champion's training snapshot, read once at load from the Parquet artifact its ``hwsel.snapshot`` tag names; None
    when it cannot be read. Modes are as the snapshot spells them."""
    uri = (getattr(champion, "tags", None) or {}).get("hwsel.snapshot")
    if not uri:
        return None
    try:
        import pandas as pd

        from pytest_hwbench.sinks import resolve_tracking_uri

        from ..registry import read_artifact

        frame = read_artifact(uri, resolve_tracking_uri(tracking_uri), pd.read_parquet)
    except Exception as exc:  # the snapshot is a nicety: without it the data decides
        log.debug("champion snapshot unreadable: %s", exc)
        return None
    cols = [c for c in ("hardware", "backend", "precision", "mode", "device_name", "param_count", "family")
            if c in frame.columns]
    return frame.loc[:, cols]


def snapshot_facts(frame: Any | None) -> dict[str, Any]:
    """What a training snapshot (`snapshot_frame`, None: none) says, as `hwsel.predict.Predictor`'s
    arguments: ``champion_domain`` (its (hardware, backend, precision, mode) combinations, modes by
    their one name), ``training_devices`` (hardware -> device name -> rows), ``champion_modes``
    (mode -> the older spelling it holds it under, ``{"train": "training"}``), ``champion_coverage``."""
    from ..specs import device_key

    cols = set(getattr(frame, "columns", ()))
    domain = None
    if {"hardware", "precision"} <= cols:
        keys = frame.reindex(columns=["hardware", "backend", "precision", "mode"])
        keys = keys.fillna({"backend": DEFAULT_BACKEND, "mode": "inference"}).astype(str)
        keys["mode"] = keys["mode"].map(normalise_mode)
        domain = frozenset(map(tuple, keys.drop_duplicates().to_numpy().tolist()))
    devices: dict[str, dict[str, int]] = {}
    if {"hardware", "device_name"} <= cols:
        for (hw, raw), n in frame.groupby(["hardware", "device_name"], dropna=True).size().items():
            name = " ".join(str(raw).split())
            if device_key(str(hw), name):
                devices.setdefault(str(hw), {})[name] = int(n)
    spelt = [str(m) for m in frame["mode"].dropna().unique()] if "mode" in cols else []
    return {"champion_domain": domain, "training_devices": devices,
            "champion_modes": {normalise_mode(m): m for m in spelt if normalise_mode(m) != m},
            "champion_coverage": snapshot_coverage(frame)}


def snapshot_coverage(frame: Any | None) -> Coverage | None:
    """What a snapshot (or runs) frame covers: sizes, families, devices (`hwsel.bounds.Coverage`);
    None without a ``param_count`` column."""
    if frame is None or "param_count" not in getattr(frame, "columns", ()):
        return None
    import pandas as pd

    params = pd.to_numeric(frame["param_count"], errors="coerce").dropna()
    families = frame["family"].dropna().astype(str).unique() if "family" in frame.columns else ()
    devices = set(zip(frame["hardware"].astype(str), frame["device_name"].fillna("").astype(str), strict=True)) \
        if {"hardware", "device_name"} <= set(frame.columns) else set()
    return Coverage.from_rows(params.tolist(), families, devices)


def load_champions(tracking_uri: str | None) -> tuple[dict[str, Any], str]:
    """(target -> champion, why none) from the registry at `tracking_uri` (None: the default store,
    when there is one here); an unreadable champion is left out with the warning
    `hwsel.registry.load_champion` gives."""
    from .. import registry
    from .._reach import quiet_mlflow
    from ..data import existing_store

    if existing_store(tracking_uri) is None:
        return {}, "no registry: no mlruns/ store here and no --tracking-uri given"

    with quiet_mlflow():
        found = {target: registry.load_champion(target, tracking_uri) for target in registry.PREDICTED_METRICS}
    champions = {target: champion for target, champion in found.items() if champion is not None}
    return champions, "" if champions else "no champion registered (run `hwsel train`)"


__all__ = ["GRID_BATCH_SIZES", "RegisteredLayer", "champion_summary", "load_champions", "snapshot_coverage",
           "snapshot_facts", "snapshot_frame"]
