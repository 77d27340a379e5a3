"""The compatibility matrix (``compatibility.json``): per family and target, what passed, what
failed or crashed, and a performance rating (the method is written into the document itself,
`_write_document`).
"""

from __future__ import annotations

import datetime as _dt
import json
import math
from collections import Counter
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

import pandas as pd

from .data import passed_rows, prepare, short

COMPATIBILITY_SCHEMA_VERSION = 1

#: (rating, minimum median throughput ratio to the best target), checked in order; below the
#: last threshold the rating is "low".
RATING_THRESHOLDS: tuple[tuple[str, float], ...] = (("high", 0.5), ("medium", 0.2))

_ERROR_CHARS_JSON = 200


def compatibility_matrix(results: pd.DataFrame, *, session_id: str | None = None
                         ) -> dict[str, dict[str, dict[str, Any]]]:
    """family -> target (``hardware/backend``) -> compatibility entry, as in ``compatibility.json``.

    Each entry: hardware, backend, compatible (any case passed), performance_rating,
    relative_throughput, cases_compared, passed/failed counts, precisions_passed, models_passed,
    models_failed_only, failures (distinct truncated messages with counts) and per-case results.
    """
    return _compatibility(prepare(results, session_id))


def _compatibility(df: pd.DataFrame) -> dict[str, dict[str, dict[str, Any]]]:
    out: dict[str, dict[str, dict[str, Any]]] = {}
    columns = ["family", "target", "precision", "model", "batch_size", "status", "error", "latency_ms_median",
               "throughput_items_per_s"]  # what the matrix reads: its slices copy these only
    for family, fam in df[columns].groupby("family", sort=True):
        passed = passed_rows(fam).dropna(subset=["throughput_items_per_s"])
        # Step 1: best precision per (target, model, batch); duplicates of one config by median.
        per_config = passed.groupby(["target", "precision", "model", "batch_size"])["throughput_items_per_s"].median()
        best_prec = per_config.groupby(level=["target", "model", "batch_size"]).max()
        # Step 2: ratios to the best target on cases that two or more targets passed.
        table = best_prec.unstack("target") if not best_prec.empty else pd.DataFrame()
        shared = table[(table.count(axis=1) >= 2) & (table.max(axis=1) > 0)]
        ratios = shared.div(shared.max(axis=1), axis=0)
        entries: dict[str, dict[str, Any]] = {}
        for target, rows in fam.groupby("target", sort=True):
            ok = passed_rows(rows)
            failed = rows[rows["status"] != "passed"]  # failed, or crashed with its process
            compatible = not ok.empty
            target_ratios = ratios[target].dropna() if target in ratios else pd.Series(dtype=float)
            relative = float(target_ratios.median()) if len(target_ratios) else None
            rating = ("none" if not compatible else "unrated" if relative is None
                      else next((name for name, least in RATING_THRESHOLDS if relative >= least), "low"))
            failures = Counter(short(message, _ERROR_CHARS_JSON) for message in failed["error"])
            hardware, backend = str(target).split("/", 1)
            results = [{"model": str(model), "precision": str(precision), "batch_size": int(batch), "records": len(cell),
                        "latency_ms_median": _json_float(cell["latency_ms_median"].median()),
                        "throughput_items_per_s": _json_float(cell["throughput_items_per_s"].median())}
                       for (model, precision, batch), cell in ok.groupby(["model", "precision", "batch_size"], sort=True)]
            entries[str(target)] = {
                "hardware": hardware, "backend": backend, "compatible": compatible,
                "performance_rating": rating,
                "relative_throughput": None if relative is None else round(relative, 4),
                "cases_compared": len(target_ratios), "passed": len(ok), "failed": len(failed),
                "precisions_passed": sorted(ok["precision"].unique().tolist()),
                "models_passed": sorted(ok["model"].unique().tolist()),
                "models_failed_only": sorted(set(failed["model"].unique()) - set(ok["model"].unique())),
                "failures": [{"message": m, "count": n}
                             for m, n in sorted(failures.items(), key=lambda kv: (-kv[1], kv[0]))],
                "results": results,
            }
        out[str(family)] = entries
    return out


def _json_float(value: float) -> float | None:
    return round(float(value), 6) if math.isfinite(value) else None


def _write_document(path: Path, matrix: Mapping[str, Mapping[str, Mapping[str, Any]]], sessions: Sequence[str],
                    hardware: Mapping[str, Any] | None) -> None:
    """Write ``compatibility.json``: `matrix` with the method, the sessions and what was detected."""
    document = {
        "schema_version": COMPATIBILITY_SCHEMA_VERSION,
        "generated_at": _dt.datetime.now(_dt.timezone.utc).isoformat(),
        "sessions": sessions,
        "target": "hardware/backend; a target is compatible with a family when any of its cases passed",
        "rating": {
            "method": "median over (model, batch size) cases passed by two or more targets of "
                      "target throughput / best target throughput, each target at its best precision",
            "thresholds": dict(RATING_THRESHOLDS), "below_thresholds": "low", "no_shared_case": "unrated",
            "incompatible": "none",
        },
        "hardware_detected": ({name: bool((info or {}).get("available")) for name, info in hardware.items()}
                              if hardware else None),
        "targets": sorted({t for entries in matrix.values() for t in entries}),
        "families": matrix,
    }
    path.write_text(json.dumps(document, indent=2, sort_keys=False, default=str), encoding="utf-8")
