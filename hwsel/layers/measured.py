"""The ``measured`` layer: exact matches in the benchmark data, indexed once. Records of another
backend or named device never answer, nor do those `hwsel.data.left_out_reasons` leaves out; an
answer says which records of its case did not speak for it, and why. The interval is where a
repeat in another session lands."""

from __future__ import annotations

import math
import warnings
from collections import Counter
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from pytest_hwbench import facts
from pytest_hwbench.record import measurement_problem
from pytest_hwbench.sinks import redact_uri
from pytest_hwbench.vocabulary import normalise_mode

from ..query import DEFAULT_BACKEND, HwselWarning, Prediction, Query, default_backend
from .base import prediction
from .rules import rules_estimate


@dataclass(frozen=True)
class Measured:
    """The measurements of one case on one backend (median over repeated runs)."""

    latency_ms: float
    throughput: float
    memory_mb: float | None
    low: float
    high: float
    backend: str
    runs: int
    device: str | None = None
    #: median energy per item over the runs that read a device counter (None: none did)
    energy_j_per_item: float | None = None
    #: runs among `runs` that were interfered with (kept only by an index that includes noisy records)
    noisy: int = 0
    #: whether (low, high) is the calibrated between-session band (else the runs' own spread)
    calibrated: bool = False


def _finite(v: Any) -> float | None:
    try:
        f = float(v)
    except (TypeError, ValueError):
        return None
    return f if math.isfinite(f) and f >= 0 else None


#: A case as the index keys it: (model, hardware, precision, batch size, mode).
Case = tuple[str, str, str, int, str]


@dataclass(frozen=True)
class LeftOut:
    """A record of a case that does not answer for it: its backend, device and why."""

    backend: str
    device_key: str
    why: str


class MeasuredIndex:
    """Benchmark rows indexed by the exact case: (model, hardware, precision, batch, mode) ->
    backend -> device key (`hwsel.specs.device_key`, "" for none) -> Measured. `devices` counts
    the records per hardware and device name and `backends` names their backends (left-out
    records included); records that cannot answer are kept apart per case in `left_out`.
    """

    def __init__(self, runs: Any = None, *, include_noisy: bool = False) -> None:
        self.include_noisy = include_noisy
        self._index: dict[Case, dict[str, dict[str, Measured]]] = {}
        #: case -> the records of it that do not answer
        self.left_out: dict[Case, list[LeftOut]] = {}
        #: why -> records left out for it
        self.left_out_counts: Counter[str] = Counter()
        self.rows = 0
        self.backends: frozenset[str] = frozenset()
        self.devices: dict[str, Counter[str]] = {}
        #: 90% quantile of |log(session i / session j)| over cases measured in several sessions
        self.session_spread = 0.0
        #: the between-session band (`hwsel.intervals.AdaptiveBand`), None with too few repeats
        self.band: Any = None
        if runs is not None and len(runs):
            self._build(runs)

    def _build(self, runs: Any) -> None:
        import pandas as pd

        from ..data import left_out_reasons
        from ..specs import device_key

        df = pd.DataFrame(runs)
        need = ("model", "hardware", "precision", "batch_size", "latency_ms_median")
        missing = [c for c in need if c not in df.columns]
        if missing:
            raise ValueError(f"benchmark data lacks column {missing[0]!r}; got {', '.join(map(str, df.columns))}")
        df = df.assign(**{col: default for col, default in (
            ("backend", DEFAULT_BACKEND), ("mode", "inference"), ("device_name", None)) if col not in df.columns})
        reasons = left_out_reasons(df, include_noisy=self.include_noisy).tolist()
        groups: dict[tuple[Any, ...], list[Mapping[str, Any]]] = {}
        devices: dict[str, Counter[str]] = {}
        backends: set[str] = set()
        # Backends whose records also count as hardware of their name (OpenVINO: its device is cpu/gpu/npu).
        as_hardware = facts.backends_as_hardware()
        usable = 0
        for row, why in zip(df.to_dict("records"), reasons, strict=True):
            problem = None if why else measurement_problem(row)  # runs given directly; load_runs drops them already
            if problem is not None:
                why = f"not a measurement ({problem.split(' (', 1)[0]})"
            usable += not why
            try:
                key = (str(row["model"]), str(row["hardware"]), str(row["precision"]), int(row["batch_size"]),
                       normalise_mode(str(row["mode"])), str(row["backend"]))
            except (TypeError, ValueError):
                continue
            raw = row.get("device_name")
            name = " ".join(raw.split()) if isinstance(raw, str) else ""
            backends.add(key[5])
            if why:
                self.left_out_counts[why] += 1
            for hw in (key[1], key[5]) if key[5] in as_hardware and key[1] != key[5] else (key[1],):
                dkey = device_key(hw, name)
                if dkey:  # every record counts for the device a question most likely means
                    devices.setdefault(hw, Counter())[name] += 1
                if why:
                    self.left_out.setdefault((key[0], hw, *key[2:5]), []).append(LeftOut(key[5], dkey, why))
                    continue
                groups.setdefault((key[0], hw, *key[2:], dkey), []).append(row)
        spread = self.session_spread = _session_spread(groups.values())
        resid, config, _ = session_residuals(groups)
        if len(resid) >= MIN_SESSION_RESIDUALS:
            from ..intervals import AdaptiveBand

            self.band = AdaptiveBand.fit(resid, [0.0] * len(resid), SESSION_SPREAD_LEVEL, config)
        for (model, hw, prec, batch, mode, backend, dkey), rows in groups.items():
            per_backend = self._index.setdefault((model, hw, prec, batch, mode), {}).setdefault(backend, {})
            band = None if self.band is None else \
                tuple(float(v[0]) for v in self.band.offsets([0.0], [f"{hw}|{backend}|{prec}"]))
            per_backend[dkey] = self._summarise(rows, batch, backend, hw if dkey else None, spread, band)
        self.rows = usable
        self.backends, self.devices = frozenset(backends), devices

    @staticmethod
    def _summarise(rows: Sequence[Mapping[str, Any]], batch: int, backend: str, hardware: str | None,
                   spread: float = 0.0, band: tuple[float, ...] | None = None) -> Measured:
        import statistics

        def per_run(*keys: str, zero: bool = False) -> list[float]:
            """Each row's first finite value >= 0 of `keys` (> 0 unless `zero`), rows without one left out."""
            found = (next((v for k in keys if (v := _finite(r.get(k))) is not None and (zero or v)), None)
                     for r in rows)
            return [v for v in found if v is not None]

        median = statistics.median(per_run("latency_ms_median"))
        thr, energy = per_run("throughput_items_per_s"), per_run("energy_j_per_item")
        mem = per_run("peak_device_memory_mb", "peak_host_rss_mb")
        # per run: its fastest iteration .. its p95 (p90, max where p95 is missing)
        lows = per_run("latency_ms_min", "latency_ms_median", zero=True)
        highs = per_run("latency_ms_p95", "latency_ms_p90", "latency_ms_max", "latency_ms_median", zero=True)
        # Between sessions: the case's own session medians, and at least the spread a second
        # session shows across every case measured in several (`session_spread`).
        sessions = [statistics.median(v) for v in _sessions(rows).values()]
        between = [median * math.exp(-spread), median * math.exp(spread), *sessions]
        device = Counter(" ".join(str(r.get("device_name")).split()) for r in rows).most_common(1)[0][0]
        return Measured(
            latency_ms=median, throughput=statistics.median(thr) if thr else batch / median * 1e3,
            memory_mb=statistics.median(mem) if mem else None,
            low=median * math.exp(band[0]) if band else min(lows + [median] + between),
            high=median * math.exp(band[1]) if band else max(highs + [median] + between),
            backend=backend, runs=len(rows), device=device if hardware is not None else None,
            energy_j_per_item=statistics.median(energy) if energy else None,
            noisy=sum(1 for r in rows if r.get("noise") == "noisy"), calibrated=band is not None)

    def __len__(self) -> int:
        return len(self._index)

    def lookup(self, model: str, hardware: str, precision: str, batch_size: int, mode: str,
               backend: str | None = None, device: str | None = None) -> Measured | None:
        """The exact case on `backend` (None: `default_backend(hardware)`; never another backend)
        and `device`: its records, else records that name no device; None when neither exists.
        Records of another named device never answer."""
        from ..specs import device_key

        found = self._index.get((model, hardware, precision, batch_size, normalise_mode(mode)))
        per_device = found.get(backend or default_backend(hardware)) if found else None
        if not per_device:
            return None
        key = device_key(hardware, device)
        return per_device.get(key) if key in per_device else per_device.get("")

    def left_out_note(self, q: Query, *, answered: bool = False) -> str:
        """Which records of `q`'s exact case did not answer for it, and why, in one line ("" when
        none): its left-out ones and, unless `answered` from the records, the usable ones of another
        device or backend."""
        from ..specs import device_key

        case = (q.model.name, q.hardware, q.precision, q.batch_size, normalise_mode(q.mode))
        backend = q.backend or default_backend(q.hardware)
        key = device_key(q.hardware, q.device_name)
        counts = Counter(r.why for r in self.left_out.get(case, ()) if r.backend == backend and r.device_key in (key, ""))
        parts = [(n, _why_text(why)) for why, n in counts.items()]
        if not answered:
            for be, per_device in self._index.get(case, {}).items():
                for dkey, m in per_device.items():
                    if be != backend:
                        parts.append((m.runs, f"on backend {be} (another backend)"))
                    elif dkey not in (key, ""):
                        parts.append((m.runs, f"on {m.device} (another device)"))
        return _left_out_text(parts, "of this case")

    def left_out_summary(self) -> str:
        """Every record the index left out, counted by why, in one line ("" when none)."""
        return _left_out_text([(n, _why_text(why)) for why, n in self.left_out_counts.items()])

    def usable(self, runs: Any) -> Any:
        """The rows of `runs` that can answer (`hwsel.data.left_out_reasons` with this index's
        `include_noisy`), as a frame."""
        import pandas as pd

        from ..data import left_out_reasons

        frame = pd.DataFrame(runs)
        return frame.loc[(left_out_reasons(frame, include_noisy=self.include_noisy) == "").to_numpy()]

    def domain(self) -> frozenset[tuple[str, str, str, str]]:
        """(hardware, backend, precision, mode) of every indexed case, each record under its own
        hardware only (an openvino record also indexed as hardware "openvino" counts as its cpu)."""
        as_hardware = facts.backends_as_hardware()
        return frozenset((hw, be, prec, mode) for (_, hw, prec, _, mode), per in self._index.items()
                         for be in per if not (hw in as_hardware and hw == be))


def _sessions(rows: Sequence[Mapping[str, Any]]) -> dict[str, list[float]]:
    """session -> the latencies of its records among `rows` (rows without a session are one each)."""
    per: dict[str, list[float]] = {}
    for i, r in enumerate(rows):
        v = _finite(r.get("latency_ms_median"))
        if v:
            per.setdefault(str(r.get("session_id") or f"row-{i}"), []).append(v)
    return per


#: Quantile of |log(session i / session j)| that `_session_spread` reports, and the nominal
#: coverage of the calibrated between-session band.
SESSION_SPREAD_LEVEL = 0.9
#: Leave-one-session-out residuals needed to calibrate the between-session band.
MIN_SESSION_RESIDUALS = 10


def session_residuals(groups: Mapping[tuple[Any, ...], Sequence[Mapping[str, Any]]]
                      ) -> tuple[list[float], list[str], list[str]]:
    """(residuals, configurations, models) of every case measured in two or more sessions, one
    per session: ``log(median of one session) - log(median of the other sessions' records)``.
    `groups` maps (model, hardware, precision, batch, mode, backend, ...) to the case's records;
    a configuration is ``hardware|backend|precision`` (`hwsel.intervals.config_groups`)."""
    import statistics

    resid: list[float] = []
    config: list[str] = []
    model: list[str] = []
    for key, rows in groups.items():
        per = _sessions(rows)
        if len(per) < 2:
            continue
        for session, values in per.items():
            rest = [v for other, vs in per.items() if other != session for v in vs]
            resid.append(math.log(statistics.median(values) / statistics.median(rest)))
            config.append(f"{key[1]}|{key[5]}|{key[2]}")
            model.append(str(key[0]))
    return resid, config, model


def _session_spread(groups: Any) -> float:
    """The `SESSION_SPREAD_LEVEL` quantile of ``|log(median of session i / median of session j)|``
    over the session pairs of every case measured in several sessions (0 when none was)."""
    import statistics

    import numpy as np

    gaps: list[float] = []
    for rows in groups:
        sessions = [statistics.median(v) for v in _sessions(rows).values()]
        gaps += [abs(math.log(a / b)) for i, a in enumerate(sessions) for b in sessions[i + 1:]]
    return float(np.quantile(gaps, SESSION_SPREAD_LEVEL, method="inverted_cdf")) if gaps else 0.0


def _why_text(why: str) -> str:
    """``noisy: stolen time`` as ``noisy (stolen time)``; any other reason as it is."""
    head, sep, kind = why.partition(": ")
    return f"{head} ({kind})" if sep else why


def _left_out_text(parts: Sequence[tuple[int, str]], what: str = "") -> str:
    """``left out 3 records of this case: 2 failed, 1 noisy (stolen time); --include-noisy keeps
    the noisy ones`` from (count, reason) pairs; "" when there are none."""
    if not parts:
        return ""
    total = sum(n for n, _ in parts)
    text = f"left out {total} record{'s' if total != 1 else ''}{' ' + what if what else ''}: " \
        + ", ".join(f"{n} {why}" for n, why in parts)
    return text + ("; --include-noisy keeps the noisy ones" if any(why.startswith("noisy") for _, why in parts)
                   else "")


class MeasuredLayer:
    """Answers the queries `index` holds; memory the records lack comes from `rules_estimate`."""

    name = "measured"

    def __init__(self, index: MeasuredIndex) -> None:
        self.index = index

    def answer(self, queries: Sequence[Query]) -> list[Prediction | None]:
        out: list[Prediction | None] = []
        for q in queries:
            m = self.index.lookup(q.model.name, q.hardware, q.precision, q.batch_size, q.mode, q.backend,
                                  q.device_name)
            if m is None:
                out.append(None)
                continue
            memory = m.memory_mb
            detail = f"{m.runs} run(s) on {m.device or 'a device the records do not name'}, backend {m.backend}"
            if not m.calibrated:
                detail += "; interval not calibrated (too few cases measured in two sessions): the runs' own spread"
            if m.noisy:
                detail += f", {m.noisy} of them noisy (kept: --include-noisy)"
            if memory is None:
                memory = rules_estimate(q)[1]
                detail += "; memory estimated by rules (not measured)"
            out.append(prediction(q, "measured", m.latency_ms, memory, (m.low, m.high), detail,
                                  throughput=m.throughput, backend=m.backend, energy_j_per_item=m.energy_j_per_item))
        return out


def load_measured(source: Any, experiment: str) -> tuple[Any, str]:
    """(runs frame or None, why none) from `source` (None: `hwsel.data.existing_store`), every
    record included; a failure turns the layer off with a note (and an `HwselWarning`). A server
    that does not answer is `hwsel.predict.Predictor.load`'s to notice, before this is called."""
    from .. import data

    if source is None:
        source = data.existing_store()
        if source is None:
            return None, "no benchmark data: no mlruns/ store here and no --source given"
    sources = [str(s) for s in data.source_list(source)]
    where = data.describe_sources(sources)  # shown: a tracking URI's password masked
    try:  # every record: the index says which cannot answer, and why (`MeasuredIndex.left_out`)
        runs = data.load_runs(sources, experiment=experiment, passed_only=False, include_noisy=True)
    except Exception as exc:  # any unreadable store: say so and answer from the other layers
        why = redact_uri(str(exc))  # MLflow quotes the URI it was given, password and all
        warnings.warn(f"benchmark data not loaded from {where}: {why}", HwselWarning, stacklevel=3)
        return None, f"benchmark data not loaded: {why}"
    if runs is None or not len(runs):
        return None, f"no benchmark records in {where}"
    return runs, ""


__all__ = ["LeftOut", "MIN_SESSION_RESIDUALS", "Measured", "MeasuredIndex", "MeasuredLayer",
           "SESSION_SPREAD_LEVEL", "load_measured", "session_residuals"]
