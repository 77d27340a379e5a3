"""Performance prediction with a layered fallback; every answer says where it came from.

For one case (model, hardware kind and device, precision, batch size, mode, backend) a `Predictor`
answers from the first layer that can (`hwsel.layers`, each behind the `Layer` protocol):

1. ``measured``   an exact match in the benchmark data (`hwsel.data.load_runs`), indexed once
                  into a dict keyed by the case; the interval is the measured spread.
2. ``registered`` the registered champion models (`hwsel.registry.load_champion`), loaded once;
                  only for (hardware, backend, precision, mode) combinations their training
                  snapshot holds; the interval is the champion's residual band.
3. ``roofline``   a compute/memory-bound estimate from the device's peak FLOP/s and bandwidth
                  (`hwsel.features`' roofline) plus a launch overhead per forward.
4. ``rules``      plain heuristics (a table of effective FLOP/s and overheads per hardware); no
                  data, no scikit-learn, no MLflow.

The question (`hwsel.query.Query`) names a device as well as a kind (``cuda`` + ``NVIDIA H100
80GB HBM3``, or a spec name from `hwsel.specs` such as ``h100``): the measured layer answers from
that device's records (or records that name no device), the others from its spec. With none
given, the device is the one detected here when this machine has that kind of hardware, else the
one most benchmark records of that kind hold (loaded data and the champion's training snapshot),
else none (the kind's generic spec); every answer says which device it used and why
(`Prediction.device`, `Prediction.device_source`). The backend is part of the question too: eager
``torch`` unless one is asked for (``openvino`` on the openvino target, ``qai_hub`` on qnn); the
measured layer never answers with another backend's numbers. Modes are ``inference`` and
``train`` (``training`` is accepted and read as ``train``).

Loading is the only step that touches MLflow or DuckDB. After it, predictions are dict lookups
or in-memory arithmetic; many rows of one layer go to one vectorised call
(`Predictor.predict_many`), and answers are cached by case. The registered layer scores each
case at the batch sizes of `Predictor.GRID_BATCH_SIZES` once and interpolates between them.

Everything this module offered before it was split stays importable from here: the values and
checks (`hwsel.query`), the memory model (`hwsel.memory`), the layers (`hwsel.layers`) and the
matrix (`hwsel.matrix`).
"""

from __future__ import annotations

import contextlib
import dataclasses
import gc
import logging
import os
from collections.abc import Iterable, Iterator, Mapping, Sequence
from typing import Any

from pytest_hwbench.vocabulary import DEFAULT_EXPERIMENT

from .config import SOURCES, SelectionConfig, load_config
from .layers import (
    GRID_BATCH_SIZES,
    DeviceFields,
    Layer,
    LayerStatus,
    Measured,
    MeasuredIndex,
    MeasuredLayer,
    RegisteredLayer,
    RooflineLayer,
    RulesLayer,
    launch_overhead_ms,
    roofline_arrays,
    rules_estimate,
)
from .layers.measured import load_measured
from .layers.registered import (
    TARGETS,
    champion_domain,
    champion_summary,
    load_champions,
    snapshot_devices,
    snapshot_domain,
    snapshot_frame,
    snapshot_mode_names,
)
from .matrix import DEFAULT_MATRIX_MODELS, prediction_matrix
from .memory import MemoryBreakdown, memory_breakdown
from .query import (
    DEFAULT_BACKEND,
    DEVICE_SOURCES,
    MAX_BATCH_SIZE,
    HwselWarning,
    Prediction,
    Query,
    check_backend,
    check_batch_size,
    check_device,
    check_mode,
    check_precision,
    default_backend,
    describe_device,
    device_map,
    model_info,
    with_sequence_length,
)

log = logging.getLogger("hwsel")


@contextlib.contextmanager
def _bulk(size: int) -> Iterator[None]:
    """Pause the cyclic GC while building many small objects.

    With torch's object graph in memory, the generation-2 collections that 10,000 new results
    trigger cost up to a second (seen on a loaded 2-core machine); none of these objects form
    cycles, so pausing loses nothing.
    """
    if size < 1000 or not gc.isenabled():
        yield
        return
    gc.disable()
    try:
        yield
    finally:
        gc.enable()


class Predictor:
    """Answers performance queries from the first layer that can (see the module docstring).

    Build with `Predictor.load(...)` (reads data and champions once) or directly from a runs
    DataFrame and champion objects. `layers` limits which layers may answer;
    `training_devices` (hardware -> device name -> rows) adds devices the champion was trained on
    to those of `runs` when choosing a default device, and `detect` False leaves this machine's
    hardware out of that choice (see `default_device`). `champion_modes` maps a mode to the
    spelling the champions were trained with (`hwsel.layers.registered.snapshot_mode_names`).
    """

    #: Batch sizes the registered models score for every case key they are asked about; batch
    #: sizes between them interpolate (log-log), larger ones are scored as asked.
    GRID_BATCH_SIZES: tuple[int, ...] = GRID_BATCH_SIZES

    def __init__(self, *, runs: Any = None, champions: Mapping[str, Any] | None = None,
                 config: SelectionConfig | str | os.PathLike[str] | None = None,
                 layers: Iterable[str] = SOURCES, notes: Mapping[str, str] | None = None,
                 champion_domain: Iterable[tuple[str, str, str, str]] | None = None,
                 training_devices: Mapping[str, Mapping[str, int]] | None = None,
                 detect: bool = True, champion_modes: Mapping[str, str] | None = None) -> None:
        self.config = load_config(config)
        self.layers = tuple(layers)
        bad = [s for s in self.layers if s not in SOURCES]
        if bad:
            raise ValueError(f"unknown layer {bad[0]!r}; accepted: {', '.join(SOURCES)}")
        notes = dict(notes or {})
        self.index = MeasuredIndex(runs if "measured" in self.layers else None)
        self.champions = {t: c for t, c in (champions or {}).items() if c is not None} \
            if "registered" in self.layers else {}
        # Champions answer only for (hardware, backend, precision, mode) combinations their training
        # data had: a regression extrapolated to an unseen device or precision is worse than the
        # roofline estimate. The domain comes from the training snapshot (`champion_domain`, see
        # `Predictor.load`), else from the loaded benchmark data; with neither it is open.
        domain = None if champion_domain is None else frozenset(champion_domain)
        if self.champions and domain is None and self.index.rows:
            domain = self.index.domain()
        # hardware -> device name -> records: the loaded data's and the champion's training rows
        counts: dict[str, dict[str, int]] = {}
        for source in (self.index.devices, training_devices or {}):
            for hw, per in source.items():
                for name, n in per.items():
                    counts.setdefault(hw, {})[name] = counts.setdefault(hw, {}).get(name, 0) + int(n)
        self.record_devices: dict[str, dict[str, int]] = counts
        self.detect = detect
        self._defaults: dict[str, tuple[str | None, str]] = {}
        self.status: dict[str, LayerStatus] = {
            "measured": LayerStatus(bool(len(self.index)),
                                    "" if len(self.index) else notes.get("measured") or "no usable benchmark rows",
                                    {"rows": self.index.rows, "cases": len(self.index)}),
            "registered": LayerStatus("latency" in self.champions,
                                      "" if "latency" in self.champions else notes.get(
                                          "registered", "no registered latency model"),
                                      {**{t: champion_summary(c) for t, c in self.champions.items()},
                                       "domain": None if domain is None else sorted("/".join(d) for d in domain)}),
            "roofline": LayerStatus("roofline" in self.layers, ""),
            "rules": LayerStatus("rules" in self.layers, ""),
        }
        for name in SOURCES:
            if name not in self.layers:
                self.status[name] = LayerStatus(False, "layer turned off")
        if not any(s.available for s in self.status.values()):
            raise ValueError(f"no prediction layer is on; enable at least one of {', '.join(SOURCES)}")
        where = DeviceFields()  # one device description per device, shared by the layers
        factor = self.config.thresholds.interval_factor
        self._registered = RegisteredLayer(self.champions, domain, where, champion_modes)
        #: layer name -> layer, in the order they are asked (`SOURCES`)
        self._layers: dict[str, Layer] = {
            "measured": MeasuredLayer(self.index, where),
            "registered": self._registered,
            "roofline": RooflineLayer(factor["roofline"], where),
            "rules": RulesLayer(factor["rules"], where),
        }
        self._cache: dict[Query, Prediction] = {}

    @property
    def _domain(self) -> frozenset[tuple[str, str, str, str]] | None:
        """(hardware, backend, precision, mode) the champions answer for (None: any)."""
        return self._registered.domain

    @property
    def scored_rows(self) -> int:
        """Rows the registered models have scored so far (each grid point once)."""
        return self._registered.scored_rows

    # -- loading ------------------------------------------------------------------------------

    @classmethod
    def load(cls, source: str | os.PathLike[str] | None = None, *, tracking_uri: str | None = None,
             config: SelectionConfig | str | os.PathLike[str] | None = None, layers: Iterable[str] = SOURCES,
             experiment: str = DEFAULT_EXPERIMENT, detect: bool = True) -> Predictor:
        """Read the benchmark data and the registered champions once; failures turn a layer off.

        `source` is an MLflow tracking URI, a ``.duckdb``, ``.parquet`` or ``.jsonl`` file, or a
        list of those (their union). With neither a source nor a default store here (``mlruns/``),
        the data layer is off and says so. `detect` False leaves this machine's hardware out of
        the default device (answers then depend on the records alone, wherever they run).
        """
        layers = tuple(layers)
        notes: dict[str, str] = {}
        runs = None
        if "measured" in layers:
            runs, notes["measured"] = load_measured(source, experiment)
        champions: dict[str, Any] = {}
        domain, devices, modes = None, None, None
        if "registered" in layers:
            champions, notes["registered"] = load_champions(tracking_uri)
            if "latency" in champions:
                frame = snapshot_frame(champions["latency"], tracking_uri)
                domain, devices, modes = snapshot_domain(frame), snapshot_devices(frame), snapshot_mode_names(frame)
        return cls(runs=runs, champions=champions, config=config, layers=layers, notes=notes,
                   champion_domain=domain, training_devices=devices, detect=detect, champion_modes=modes)

    def describe(self) -> dict[str, Any]:
        """Which layers answer, with row counts, champion versions and why a layer is off."""
        return {name: {"available": s.available, "note": s.note, **s.details} for name, s in self.status.items()}

    # -- devices -------------------------------------------------------------------------------

    def default_device(self, hardware: str) -> tuple[str | None, str]:
        """(device name or None, why) for a question about `hardware` that names no device.

        The device detected here when this machine has that kind of hardware
        (`pytest_hwbench.detect_hardware`), else the device most benchmark records of that kind
        hold (loaded data plus the champion's training snapshot), else None: the generic spec.
        """
        found = self._defaults.get(hardware)
        if found is None:
            found = self._defaults[hardware] = self._default_device(hardware)
        return found

    def _default_device(self, hardware: str) -> tuple[str | None, str]:
        if self.detect:
            name = _detected_device(hardware)
            if name:
                return name, "detected"
        counts = self.record_devices.get(hardware)
        if counts:
            return max(sorted(counts), key=lambda n: counts[n]), "records"
        return None, "none"

    def resolve(self, q: Query) -> Query:
        """`q` with its backend and device filled in (see `default_backend`, `default_device`)."""
        if q.device_source and q.backend is not None:
            return q
        backend = q.backend if q.backend is not None else default_backend(q.hardware)
        if q.device_source:
            name, source = q.device_name, q.device_source
        elif q.device_name:
            name, source = check_device(q.device_name), "asked"
        else:
            name, source = self.default_device(q.hardware)
        return dataclasses.replace(q, backend=backend, device_name=name, device_source=source)

    # -- prediction --------------------------------------------------------------------------

    def query(self, model: Any, hardware: str, *, batch_size: int = 1, precision: str = "fp32",
              mode: str = "inference", backend: str | None = None, device: str | None = None) -> Query:
        """A validated, resolved `Query` (raises ValueError/KeyError naming the bad value)."""
        info = model_info(model)
        hw = self.config.check_hardware([hardware])[0]
        return self.resolve(Query(info, hw, check_precision(precision), check_batch_size(batch_size),
                                  check_mode(mode), check_backend(backend),
                                  None if device is None else check_device(device)))

    def predict(self, model: Any, hardware: str | Sequence[str], *, batch_size: int = 1, precision: str = "fp32",
                mode: str = "inference", backend: str | None = None,
                device: str | Mapping[str, str] | None = None) -> dict[str, Prediction]:
        """hardware -> `Prediction` for one model and case.

        `device`: one device name or spec name (with one hardware target), or hardware -> device;
        targets without one get `default_device`. Each answer says which device it is for.
        """
        names = self.config.check_hardware(hardware)
        devices = device_map(names, device)
        queries = [self.query(model, hw, batch_size=batch_size, precision=precision, mode=mode, backend=backend,
                              device=devices.get(hw)) for hw in names]
        return dict(zip(names, self.predict_many(queries), strict=True))

    def predict_many(self, queries: Sequence[Query]) -> list[Prediction]:
        """Predictions for many validated queries, each from the first layer that can answer.

        Each layer gets the rows the layers before it left, in one `Layer.answer` call (the
        registered models score all of theirs in one ``predict`` call per target). Answers are
        cached by query.
        """
        with _bulk(len(queries)):
            return self._predict_many(queries)

    def _predict_many(self, queries: Sequence[Query]) -> list[Prediction]:
        queries = [self.resolve(q) for q in queries]
        out: list[Prediction | None] = [self._cache.get(q) for q in queries]
        todo = [i for i, p in enumerate(out) if p is None]
        if not todo:
            return out  # type: ignore[return-value]
        work = [queries[i] for i in todo]
        preds = self._run_layers(work)
        if len(self._cache) > 100_000:
            self._cache.clear()
        for q, p in zip(work, preds, strict=True):
            self._cache[q] = p
        for i, p in zip(todo, preds, strict=False):
            out[i] = p
        return out  # type: ignore[return-value]

    def _run_layers(self, queries: Sequence[Query]) -> list[Prediction]:
        out: list[Prediction | None] = [None] * len(queries)
        todo = list(range(len(queries)))
        for name, layer in self._layers.items():
            if todo and self.status[name].available:
                todo = self._fill(out, todo, layer.answer([queries[i] for i in todo]))
        if todo:  # only when the rules layer is off
            q = queries[todo[0]]
            raise ValueError(f"no enabled layer can predict {q.model.name} on {q.hardware}; "
                             f"enable the rules layer (layers={self.layers})")
        return out  # type: ignore[return-value]

    @staticmethod
    def _fill(out: list[Prediction | None], todo: list[int], answered: Sequence[Prediction | None]) -> list[int]:
        rest = []
        for i, pred in zip(todo, answered, strict=True):
            if pred is None:
                rest.append(i)
            else:
                out[i] = pred
        return rest


def _detected_device(hardware: str) -> str | None:
    """The first device `pytest_hwbench.detect_hardware()` finds for `hardware`, if it is here."""
    try:
        from pytest_hwbench.hardware import detect_hardware

        target = detect_hardware().targets.get(hardware)
    except Exception as exc:  # detection is best effort: without it the records decide
        log.debug("hardware detection failed: %s", exc)
        return None
    if target is None or not target.available or not target.devices:
        return None
    name = " ".join(str(target.devices[0].name).split())
    return name or None


# --- module-level API ---------------------------------------------------------------------------------

_PREDICTORS: dict[tuple[Any, ...], Predictor] = {}


def get_predictor(source: str | os.PathLike[str] | None = None, *, tracking_uri: str | None = None,
                  config: SelectionConfig | str | os.PathLike[str] | None = None,
                  layers: Iterable[str] = SOURCES) -> Predictor:
    """The shared `Predictor` for these arguments, loaded on first use and kept for the process.

    `clear_predictors()` forgets them (e.g. after `hwsel train` registered a new champion).
    """
    from .config import ENV_VAR

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


def _predictor(predictor: Predictor | None, source: Any, tracking_uri: str | None, config: Any) -> Predictor:
    if predictor is not None:
        return predictor
    return get_predictor(source, tracking_uri=tracking_uri, config=config)


def predict_performance(model: Any, hardware: str | Sequence[str] | None = None, batch_size: int = 1,
                        precision: str = "fp32", mode: str = "inference", backend: str | None = None, *,
                        device: str | Mapping[str, str] | None = None,
                        predictor: Predictor | None = None, source: str | os.PathLike[str] | None = None,
                        tracking_uri: str | None = None,
                        config: SelectionConfig | str | os.PathLike[str] | None = None) -> dict[str, Prediction]:
    """hardware -> `Prediction` (latency_ms, throughput, memory_mb, source, interval) for one case.

    `hardware` defaults to every configured target: prediction is for hardware you may not have.
    `device` names the device (``"NVIDIA H100 80GB HBM3"`` or a spec name such as ``"h100"``) for
    one target, or maps targets to devices; otherwise each target gets `Predictor.default_device`.
    `backend` defaults to eager ``torch`` (`default_backend`). Each `Prediction` says which device
    and backend it is for.
    """
    p = _predictor(predictor, source, tracking_uri, config)
    return p.predict(model, hardware if hardware is not None else p.config.hardware_names, batch_size=batch_size,
                     precision=precision, mode=mode, backend=backend, device=device)


__all__ = [
    "DEFAULT_BACKEND",
    "DEFAULT_MATRIX_MODELS",
    "DEVICE_SOURCES",
    "MAX_BATCH_SIZE",
    "TARGETS",
    "HwselWarning",
    "Layer",
    "LayerStatus",
    "Measured",
    "MeasuredIndex",
    "MemoryBreakdown",
    "Prediction",
    "Predictor",
    "Query",
    "champion_domain",
    "check_backend",
    "check_batch_size",
    "check_device",
    "check_mode",
    "check_precision",
    "clear_predictors",
    "default_backend",
    "describe_device",
    "device_map",
    "get_predictor",
    "launch_overhead_ms",
    "memory_breakdown",
    "model_info",
    "predict_performance",
    "prediction_matrix",
    "roofline_arrays",
    "rules_estimate",
    "with_sequence_length",
]
