"""Performance prediction with a layered fallback, every answer saying where it came from: the
`Predictor` asks `hwsel.layers` in order (measured, registered, roofline, rules) and the first
that can answers, for the device asked about or `Predictor.default_device`.
"""

from __future__ import annotations

import contextlib
import dataclasses
import gc
import importlib
import logging
import os
import warnings
from collections import Counter
from collections.abc import Iterable, Iterator, Mapping, Sequence
from typing import Any

from pytest_hwbench import facts
from pytest_hwbench.sinks.mlflow_uri import is_http, ping
from pytest_hwbench.vocabulary import DEFAULT_EXPERIMENT

from ._reach import DEFAULT_TIMEOUT_S, HwselTimeout, bounded
from .bounds import Coverage, floor_of
from .config import ENV_VAR, SOURCES, SelectionConfig, load_config
from .guard import blend, clamp
from .layers.base import Layer
from .layers.measured import MeasuredIndex, MeasuredLayer, load_measured
from .layers.registered import (
    RegisteredLayer,
    champion_summary,
    load_champions,
    snapshot_coverage,
    snapshot_facts,
    snapshot_frame,
)
from .layers.roofline import RooflineLayer, calibrated_offsets
from .layers.rules import RulesLayer
from .query import HwselWarning, Prediction, Query, QuestionError, ask, check_device, default_backend
from .specs import device_key, known_device_names, knows_device

log = logging.getLogger("hwsel")


@contextlib.contextmanager
def bulk(size: int) -> Iterator[None]:
    """Pause the cyclic GC while building `size` small objects that form no cycles (with torch's
    objects in memory, the collections 10,000 results trigger cost up to a second)."""
    paused = size >= 1000 and gc.isenabled()
    if paused:
        gc.disable()
    try:
        yield
    finally:
        if paused:
            gc.enable()


@dataclasses.dataclass
class LayerStatus:
    """Whether a layer is on, and why not."""

    available: bool
    note: str = ""
    details: dict[str, Any] = dataclasses.field(default_factory=dict)


def _check_layers(layers: Iterable[str]) -> tuple[str, ...]:
    names = tuple(layers)
    bad = [s for s in names if s not in SOURCES]
    if bad:
        raise ValueError(f"unknown layer {bad[0]!r}; accepted: {', '.join(SOURCES)}")
    return names


class Predictor:
    """Answers performance queries from the first layer that can.

    Build with `Predictor.load(...)` (reads data and champions once) or directly from a runs
    DataFrame and champion objects. `layers` limits which layers may answer (checked here);
    `training_devices` (hardware -> device name -> rows) adds devices the champion was trained on
    to those of `runs` when choosing a default device, and `detect` False leaves this machine's
    hardware out of that choice (see `default_device`). `champion_modes` maps a mode to the
    spelling the champions were trained with (`hwsel.layers.registered.snapshot_facts`).
    `champion_domain` is the (hardware, backend, precision, mode) combinations the champions
    answer for (default: the loaded data's, else any). `runs` may hold every record: those that
    cannot answer (failed, without a latency, interfered with unless `include_noisy`) are left
    out, and each answer says which of its case were, and why.

    Built state (by `build`, or `built` in the first method that answers; never by reading an
    attribute) ends in ``_``: ``config_``, ``index_``, ``status_`` (layer -> `LayerStatus`),
    ``record_devices_``, ``backends_``, ``layers_`` (name -> `Layer`, in the order asked) and the caches.
    """

    def __init__(self, *, runs: Any = None, champions: Mapping[str, Any] | None = None,
                 config: SelectionConfig | str | os.PathLike[str] | None = None,
                 layers: Iterable[str] = SOURCES, notes: Mapping[str, str] | None = None,
                 champion_domain: Iterable[tuple[str, str, str, str]] | None = None,
                 training_devices: Mapping[str, Mapping[str, int]] | None = None,
                 detect: bool = True, champion_modes: Mapping[str, str] | None = None,
                 champion_coverage: Coverage | None = None, include_noisy: bool = False) -> None:
        self.runs = runs
        self.champions = champions
        self.config = config
        self.layers = _check_layers(layers)
        self.notes = notes
        self.champion_domain = champion_domain
        self.training_devices = training_devices
        self.detect = detect
        self.champion_modes = champion_modes
        self.champion_coverage = champion_coverage
        self.include_noisy = include_noisy

    def built(self) -> Predictor:
        """Self, built (`build`) on the first call; every method that answers calls it."""
        if "layers_" not in self.__dict__:
            self.build()
        return self

    def __getattr__(self, name: str) -> Any:
        # Reached only for an attribute that is not there: it builds nothing, it names the fix.
        if name.endswith("_") and not name.startswith("__"):
            raise AttributeError(f"{type(self).__name__!r} object has no attribute {name!r} before it is built: "
                                 "call .build() (or .built()), or make it with Predictor.load(...)")
        raise AttributeError(f"{type(self).__name__!r} object has no attribute {name!r}")

    # -- loading ------------------------------------------------------------------------------

    @classmethod
    def load(cls, source: str | os.PathLike[str] | None = None, *, tracking_uri: str | None = None,
             config: SelectionConfig | str | os.PathLike[str] | None = None, layers: Iterable[str] = SOURCES,
             experiment: str = DEFAULT_EXPERIMENT, detect: bool = True,
             timeout: float = DEFAULT_TIMEOUT_S, include_noisy: bool = False) -> Predictor:
        """A built predictor from the benchmark data and the registered champions, read once;
        failures turn a layer off with a note.

        `source` is an MLflow tracking URI, a ``.duckdb``, ``.parquet`` or ``.jsonl`` file, or a
        list of those (their union; None: the default store, if there is one here). `detect`
        False leaves this machine's hardware out of the default device. `timeout`: seconds to wait
        for the records and for the champions each, imports aside; a store that does not answer
        in time turns its layer off. `include_noisy`: the measured layer also answers from
        records that were interfered with.
        """
        layers = _check_layers(layers)
        settings = load_config(config)
        notes: dict[str, str] = {}
        runs = None

        def off(layer: str, what: str, why: object) -> None:
            warnings.warn(f"{what} not loaded: {why}", HwselWarning, stacklevel=3)
            notes[layer] = f"{what} not loaded: {why}"

        # A server is asked first, in a second at most, before anything heavy (MLflow) is imported:
        # one that does not answer turns its layer off at once. Credentials travel as MLflow sends them.
        servers = [u for u in (source if isinstance(source, list | tuple) else [source])
                   if isinstance(u, str) and is_http(u)]
        unreachable = {u: why for u in {*servers, tracking_uri} if u and is_http(u)
                       for why in [ping(str(u), timeout=min(2.0, timeout))] if why is not None}
        down = next((unreachable[u] for u in servers if u in unreachable), None)
        if "measured" in layers and down is not None:
            off("measured", "benchmark data", down)
        elif "measured" in layers:
            importlib.import_module("hwsel.data")  # imported here: the deadline is the store's, not the import's
            try:
                runs, notes["measured"] = bounded(lambda: load_measured(source, experiment), timeout,
                                                  f"the benchmark records ({source or 'the default store'})")
            except HwselTimeout as exc:
                off("measured", "benchmark data", exc)
        champions: dict[str, Any] = {}
        frame = None  # the latency champion's training snapshot (`snapshot_frame`)
        if "registered" in layers and tracking_uri in unreachable:
            off("registered", "registered models", unreachable[tracking_uri])
        elif "registered" in layers:
            def champions_and_snapshot() -> tuple[dict[str, Any], str, Any]:
                found, note = load_champions(tracking_uri)
                frame = snapshot_frame(found["latency"], tracking_uri) if "latency" in found else None
                return found, note, frame

            importlib.import_module("hwsel.registry")  # MLflow imported here: the deadline is the server's, not the import's
            try:
                champions, notes["registered"], frame = bounded(
                    champions_and_snapshot, timeout, f"the registered models ({tracking_uri or 'the default store'})")
            except HwselTimeout as exc:
                off("registered", "registered models", exc)
        return cls(runs=runs, champions=champions, config=settings, layers=layers, notes=notes, detect=detect,
                   include_noisy=include_noisy, **snapshot_facts(frame)).build()

    def build(self) -> Predictor:
        """Build the layers from the parameters (the measured index, the champions' domain, each
        layer's status); returns self. Raises ValueError when no layer can answer."""
        config = load_config(self.config)
        notes = dict(self.notes or {})
        index = MeasuredIndex(self.runs if "measured" in self.layers else None, include_noisy=self.include_noisy)
        champions = {t: c for t, c in (self.champions or {}).items() if c is not None} \
            if "registered" in self.layers else {}
        # Champions answer only for (hardware, backend, precision, mode) combinations their training
        # data had: a regression extrapolated to an unseen device or precision is worse than the roofline.
        domain = None if self.champion_domain is None else frozenset(self.champion_domain)
        if champions and domain is None and index.rows:
            domain = index.domain()
        # What the champions learned from (sizes, families, devices): a question outside it is
        # blended towards the roofline (`_guard`). From the snapshot, else from the loaded data.
        coverage = self.champion_coverage
        if champions and coverage is None and self.runs is not None and len(self.runs):
            coverage = snapshot_coverage(index.usable(self.runs))
        # hardware -> device name -> records: the loaded data's and the champion's training rows
        counts: dict[str, Counter[str]] = {}
        for source in (index.devices, self.training_devices or {}):
            for hw, per in source.items():
                counts.setdefault(hw, Counter()).update({name: int(n) for name, n in per.items()})
        left_out = index.left_out_summary()
        unused = notes.get("measured") or (f"no benchmark record to answer from: {left_out}" if left_out
                                           else "no usable benchmark rows")
        status = {
            "measured": LayerStatus(bool(len(index)), "" if len(index) else unused,
                                    {"rows": index.rows, "cases": len(index), "left_out": dict(index.left_out_counts)}),
            "registered": LayerStatus("latency" in champions, "" if "latency" in champions
                                      else notes.get("registered", "no registered latency model"),
                                      {**{t: champion_summary(c) for t, c in champions.items()},
                                       "domain": None if domain is None else sorted("/".join(d) for d in domain)}),
            "roofline": LayerStatus(True),
            "rules": LayerStatus(True),
        } | {name: LayerStatus(False, "layer turned off") for name in SOURCES if name not in self.layers}
        if not any(s.available for s in status.values()):
            raise ValueError(f"no prediction layer is on; enable at least one of {', '.join(SOURCES)}")
        intervals = getattr(champions.get("latency"), "intervals", None)
        factor = config.thresholds.interval_factor
        self.config_ = config
        self.index_ = index
        self.record_devices_ = counts
        #: backends a question may name: the facts table's, the records', the champions'
        self.backends_ = frozenset({b.name for b in facts.backend_rows()} | index.backends
                                   | {b for _, b, _, _ in domain or ()})
        self.targets_: dict[tuple[str, str | None, str | None], tuple[str, str | None, str]] = {}
        self.status_ = status
        self.coverage_ = coverage
        #: the latency champion's calibrated bands (`hwsel.intervals.AdaptiveIntervals`), None without
        self.intervals_ = intervals
        self.registered_ = RegisteredLayer(champions, domain, self.champion_modes)
        #: layer name -> layer, in the order they are asked (`SOURCES`)
        self.layers_: dict[str, Layer] = {
            "measured": MeasuredLayer(index),
            "registered": self.registered_,
            "roofline": RooflineLayer(factor["roofline"], intervals),
            "rules": RulesLayer(factor["rules"]),
        }
        self.default_devices_: dict[str, tuple[str | None, str]] = {}
        self.answers_: dict[Query, Prediction] = {}
        return self

    @property
    def scored_rows(self) -> int:
        """Rows the registered models have scored so far (each grid point once)."""
        return self.built().registered_.scored_rows

    def describe(self) -> dict[str, Any]:
        """Which layers answer, with row counts, champion versions and why a layer is off."""
        return {name: {"available": s.available, "note": s.note, **s.details}
                for name, s in self.built().status_.items()}

    # -- devices -------------------------------------------------------------------------------

    def default_device(self, hardware: str) -> tuple[str | None, str]:
        """(device name or None, why) for a question about `hardware` that names no device: the one
        detected here, else the one most records of that kind hold (loaded data and the champion's
        training snapshot), else None (the generic spec)."""
        cache = self.built().default_devices_
        if hardware not in cache:
            detected = _detected_device(hardware) if self.detect else None
            counts = self.record_devices_.get(hardware)
            cache[hardware] = (detected, "detected") if detected else (None, "none")
            if not detected and counts:
                # one device by any of its names: the device with the most records, by the name most give
                per_device: Counter[str] = Counter()
                for name, n in counts.items():
                    per_device[device_key(hardware, name)] += n
                best = max(sorted(per_device), key=per_device.__getitem__)
                names = sorted(n for n in counts if device_key(hardware, n) == best)
                cache[hardware] = (max(names, key=counts.__getitem__), "records")
        return cache[hardware]

    def resolve(self, q: Query) -> Query:
        """`q` with its backend and device filled in (see `default_backend`, `default_device`)."""
        if q.device_source:
            return q if q.backend is not None else dataclasses.replace(q, backend=default_backend(q.hardware))
        backend, name, source = self.resolve_target(q.hardware, q.backend, q.device_name)
        return dataclasses.replace(q, backend=backend, device_name=name, device_source=source)

    def resolve_target(self, hardware: str, backend: str | None = None,
                       device_name: str | None = None) -> tuple[str, str | None, str]:
        """(backend, device name or None, why that device) a question about `hardware` means:
        `backend` or the hardware's default, the device asked for or `default_device`.

        Raises `QuestionError` naming the field and the known ones for a backend neither
        `pytest_hwbench.facts` nor the data knows, and for a device no `hwsel.specs` entry, record
        or detection here knows (devices compared by `hwsel.specs.device_key`).
        """
        cache = self.built().targets_
        key = (hardware, backend, device_name)
        if key not in cache:
            if backend is not None and backend not in self.backends_:
                raise QuestionError(f"unknown backend {backend!r}; known: {', '.join(sorted(self.backends_))} (the "
                                    "backends of pytest_hwbench.facts and of the loaded records and champions)",
                                    "backend")
            if len(cache) > 10_000:
                cache.clear()
            chosen = backend if backend is not None else default_backend(hardware)
            if device_name:
                name = check_device(device_name)
                self._check_device(hardware, name)
                cache[key] = (chosen, name, "asked")
            else:
                cache[key] = (chosen, *self.default_device(hardware))
        return cache[key]

    def _check_device(self, hardware: str, name: str) -> None:
        """QuestionError unless `name` is a device on `hardware` that hwsel knows (see `resolve_target`)."""
        key = device_key(hardware, name)
        recorded = self.record_devices_.get(hardware, {})
        if knows_device(hardware, name) or key in {device_key(hardware, n) for n in recorded}:
            return
        here = _detected_device(hardware) if self.detect else None
        if here and device_key(hardware, here) == key:
            return
        held = ", ".join(sorted(recorded)) or "none"
        raise QuestionError(f"unknown device {name!r} for {hardware}: no hwsel.specs entry matches it (known: "
                            f"{', '.join(known_device_names())}), the records hold none of that name for {hardware} "
                            f"(they hold: {held}) and it is not detected here; name one of those, or leave the device "
                            "out (default: the device detected here, else the one most records hold)", "device")

    # -- prediction --------------------------------------------------------------------------

    def query(self, model: Any, hardware: str, *, batch_size: int = 1, precision: str = "fp32",
              mode: str = "inference", backend: str | None = None, device: str | None = None) -> Query:
        """A validated, resolved `Query` (`hwsel.query.ask`; raises `QuestionError` naming the bad value)."""
        return self.resolve(ask(self.built().config_, model, [hardware], batch_size=batch_size,
                                precision=precision, mode=mode, backend=backend, device=device)[0])

    def predict(self, model: Any, hardware: str | Sequence[str] | None = None, *, batch_size: int = 1,
                precision: str = "fp32", mode: str = "inference", backend: str | None = None,
                device: str | Mapping[str, str] | None = None,
                sequence_length: int | None = None) -> dict[str, Prediction]:
        """hardware -> `Prediction` for one model and case (`hardware` None: every configured target).

        `device`: one device name or spec name (with one hardware target), or hardware -> device;
        targets without one get `default_device`. `sequence_length`: another input length in
        tokens (`hwsel.query.describe_model`). Each answer says which device it is for.
        """
        queries = ask(self.built().config_, model, hardware, batch_size=batch_size, precision=precision, mode=mode,
                      backend=backend, device=device, sequence_length=sequence_length)
        return {q.hardware: p for q, p in zip(queries, self.predict_many(queries), strict=True)}

    def predict_many(self, queries: Sequence[Query]) -> list[Prediction]:
        """Predictions for many validated queries, each from the first layer that can answer (one
        `Layer.answer` call per layer); answers are cached by query."""
        cache = self.built().answers_
        if len(cache) > 100_000:
            cache.clear()
        with bulk(len(queries)):
            queries = [self.resolve(q) for q in queries]
            todo = list(dict.fromkeys(q for q in queries if q not in cache))
            if todo:
                cache.update(zip(todo, self._run_layers(todo), strict=True))
            return [cache[q] for q in queries]

    def _run_layers(self, queries: Sequence[Query]) -> list[Prediction]:
        out: list[Prediction | None] = [None] * len(queries)
        todo = list(range(len(queries)))
        for name, layer in self.layers_.items():
            if todo and self.status_[name].available:
                for i, pred in zip(todo, layer.answer([queries[i] for i in todo]), strict=True):
                    out[i] = pred
                todo = [i for i in todo if out[i] is None]
        if todo:  # only when the rules layer is off
            q = queries[todo[0]]
            raise ValueError(f"no enabled layer can predict {q.model.name} on {q.hardware}; "
                             f"enable the rules layer (layers={self.layers})")
        return self._say_left_out(queries, self._guard(queries, out))  # type: ignore[arg-type]

    def _say_left_out(self, queries: Sequence[Query], out: list[Prediction]) -> list[Prediction]:
        """Each answer with `MeasuredIndex.left_out_note` in its detail."""
        index = self.index_
        if not index.left_out and not len(index):
            return out
        for i, (q, p) in enumerate(zip(queries, out, strict=True)):
            note = index.left_out_note(q, answered=p.source == "measured")
            if note:
                out[i] = dataclasses.replace(p, detail=f"{p.detail}; {note}" if p.detail else note)
        return out

    def _guard(self, queries: Sequence[Query], out: list[Prediction]) -> list[Prediction]:
        """Every estimate within physics (`hwsel.guard`): a registered answer outside its champion's
        coverage blended towards the roofline, then every one clamped, each saying so."""
        coverage = self.coverage_
        far: list[tuple[int, float, list[str]]] = []
        if coverage is not None:
            for i, (q, p) in enumerate(zip(queries, out, strict=True)):
                if p.source == "registered":
                    weight, reasons = coverage.distance(q.model.param_count, q.model.family, q.hardware, q.device_name)
                    if weight > 0:
                        far.append((i, weight, reasons))
        if far:
            asked = [queries[i] for i, _, _ in far]
            roof = self.layers_["roofline"].answer(asked)  # built whether or not the layer answers
            band = calibrated_offsets(self.intervals_, "blended", asked, self.champion_modes)
            for k, ((i, weight, reasons), r) in enumerate(zip(far, roof, strict=True)):
                if r is not None:
                    out[i] = blend(out[i], r, weight, reasons,
                                    None if band is None else (float(band[0][k]), float(band[1][k])))
        return [clamp(p, floor_of(q)) for p, q in zip(out, queries, strict=True)]


def _detected_device(hardware: str) -> str | None:
    """The first device `pytest_hwbench.detect_hardware` finds for `hardware`, if it is here; only
    that target is probed (a CPU question starts no GPU runtime and no browser)."""
    try:
        from pytest_hwbench.hardware import detect_hardware

        target = detect_hardware(targets=(hardware,)).targets.get(hardware)  # only this target is probed
    except Exception as exc:  # detection is best effort: without it the records decide
        log.debug("hardware detection failed: %s", exc)
        return None
    if target is None or not target.available or not target.devices:
        return None
    name = " ".join(str(target.devices[0].name).split())
    return name or None


# --- the process's shared predictors ------------------------------------------------------------

_PREDICTORS: dict[tuple[Any, ...], Predictor] = {}


def get_predictor(source: str | os.PathLike[str] | None = None, *, tracking_uri: str | None = None,
                  config: SelectionConfig | str | os.PathLike[str] | None = None,
                  layers: Iterable[str] = SOURCES) -> Predictor:
    """The shared `Predictor` for these arguments, loaded on first use and kept for the process.

    `clear_predictors()` forgets them (e.g. after `hwsel train` registered a new champion).
    """
    cfg_key = config if config is None or isinstance(config, str | os.PathLike) else id(config)
    src_key = None if source is None else str(source) if isinstance(source, str | os.PathLike) \
        else tuple(map(str, source))
    key = (src_key, tracking_uri, cfg_key, tuple(layers), os.environ.get(ENV_VAR))
    predictor = _PREDICTORS.get(key)
    if predictor is None:
        predictor = _PREDICTORS[key] = Predictor.load(source, tracking_uri=tracking_uri, config=config,
                                                      layers=layers)
    return predictor


def clear_predictors() -> None:
    """Forget the shared predictors; the next call loads data and champions again."""
    _PREDICTORS.clear()


def predictor_for(predictor: Predictor | None, source: Any = None, tracking_uri: str | None = None,
                  config: Any = None) -> Predictor:
    """`predictor` when given (built: `Predictor.built`), else the shared one for (source,
    tracking_uri, config)."""
    if predictor is not None:
        return predictor.built()
    return get_predictor(source, tracking_uri=tracking_uri, config=config)


__all__ = ["Predictor", "bulk", "clear_predictors", "get_predictor", "predictor_for"]
