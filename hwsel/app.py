"""The REST API: ``create_app()`` returns a FastAPI app over one loaded `Predictor`.

Endpoints (the predecessor's): ``GET /health``, ``GET /hardware/detect``,
``POST /hardware/select``, ``POST /hardware/batch``, ``POST /hardware/map``,
``POST /performance/predict``, ``POST /performance/matrix``, ``POST /training/distributed``,
``POST /analysis/model``, and ``POST /measure/next`` (which configurations to measure next, from
the records of `create_app`'s `source`). ``/hardware/select`` and ``/performance/predict`` take a
model outside the zoo as ``config``: the contents of its Hugging Face config.json (then
``model_name`` is optional; a config hwsel cannot read answers 422 naming ``config``). Bad input answers 4xx with ``{"status": "error", "message": ...}``:
422 for a bad value (batch size 0 or ``true``, unknown hardware or precision, a sequence longer
than the model's position limit), naming the field, 404 for an unknown model. Request sizes are
bounded so that no request can run for long: a body over `MAX_REQUEST_BYTES` answers 413, a
``config`` of more than `MAX_CONFIG_LAYERS` layers or `MAX_CONFIG_PARAMS` parameters 422, each
naming the limit; a deep stack of identical layers is derived from two shallow builds.
Requests about hardware take a ``device`` (one name for one target, or hardware -> name) and a
``backend``; every prediction says which device (``device``, ``device_source``, ``device_spec``)
and backend it is for.

Serve with ``hwsel serve`` (binds 127.0.0.1 by default) or any ASGI server.

Length: over 500 lines, the request and response models of ten endpoints and the endpoints.
"""

from __future__ import annotations

import dataclasses
import logging
import math
import os
import threading
import typing
from collections.abc import Mapping
from typing import Annotated, Any, Literal

from fastapi import FastAPI, Request
from fastapi.exceptions import RequestValidationError
from fastapi.responses import JSONResponse
from pydantic import AliasChoices, BaseModel, ConfigDict, Field, StrictInt, create_model
from starlette.exceptions import HTTPException as StarletteHTTPException

from pytest_hwbench.sinks import redact_uri
from pytest_hwbench.vocabulary import PRECISIONS

from ._reach import DEFAULT_TIMEOUT_S, HwselTimeout, bounded, require_reachable
from .config import ACCEPTED_MODES, FAMILIES, MAX_HARDWARE_TARGETS, MODES, SelectionConfig
from .data import default_source, describe_sources, load_runs, source_list, training_table
from .distributed import DistributedConfig, MemoryEstimate, distributed_training_config
from .matrix import prediction_matrix
from .next import Suggestion, suggest_measurements
from .predict import Predictor
from .query import TRAIN_PRECISIONS, Prediction, QuestionError, UnknownModelError, describe_model, error_text
from .select import (
    HardwareScore,
    Recommendation,
    analyze_model,
    detect_hardware,
    select_hardware,
    select_hardware_for_task,
    selection_map,
)

log = logging.getLogger("hwsel.app")

VERSION = "0.1.0"

# --- request fields ---------------------------------------------------------------------------------
# One definition per kind of field, shared by every request model, so that an endpoint cannot
# accept what another refuses. Requests are strict (`_Request`): ``true`` or ``"1"`` is not a
# batch size. What depends on the model (its position limit, its family) or on the configured
# hardware is checked by the question builder (`hwsel.query.ask`, `describe_model`), whose one
# `QuestionError` answers 422 with the field's name like the rest (404 for an unknown model).

#: Largest batch size a request may ask about (keeps every request cheap).
MAX_REQUEST_BATCH_SIZE = 65536
#: Longest sequence any request may name; a model's own position limit is checked as well.
MAX_REQUEST_SEQUENCE_LENGTH = 1 << 17
#: Largest request body in bytes, answered 413 beyond: a Hugging Face config.json is a few KB
#: (about 40 KB with a 1,000-class label map).
MAX_REQUEST_BYTES = 256 * 1024
#: Most layers a `config` may describe over all its stacks (the deepest published models have
#: about 130), answered 422 beyond. With a deep stack of identical layers extrapolated from two
#: shallow builds (`hwsel.resolution.EXTRAPOLATE_ABOVE`), this bounds what is built whole.
MAX_CONFIG_LAYERS = 256
#: Most parameters a `config` may derive (the largest published models have about 2e12).
MAX_CONFIG_PARAMS = 10**13
#: Config keys that count layers (nested configs, e.g. a text_config, count too).
_LAYER_KEYS = ("num_hidden_layers", "n_layer", "num_layers", "encoder_layers", "decoder_layers",
               "num_decoder_layers", "depths")

ModelName = Annotated[str, Field(min_length=1, max_length=200, validation_alias=AliasChoices("model_name", "model"),
                                 description="zoo name or hub-style alias, e.g. bert-base-uncased")]
#: Where a config may stand in for the name: null, or a name as above.
OptionalModelName = Annotated[Annotated[str, Field(min_length=1, max_length=200)] | None, Field(validation_alias=AliasChoices("model_name", "model"),
                                                description="zoo name or hub-style alias; with `config`, the name to "
                                                            "give that model (default: the config's own)")]
#: The contents of a Hugging Face config.json: a model outside the zoo, its features derived from it.
ModelConfig = Annotated[dict[str, Any], Field(min_length=1, max_length=1000,
                                              description="the contents of a Hugging Face config.json (a JSON "
                                                          "object), for a model outside the zoo")]
Hardware = Annotated[str, Field(min_length=1, max_length=64)]
#: A list of hardware targets: as long as the largest vocabulary a config may hold, no longer.
HardwareList = Annotated[list[Hardware], Field(max_length=MAX_HARDWARE_TARGETS,
                                               description="hardware targets (see GET /health for the configured ones)")]
BatchSize = Annotated[StrictInt, Field(ge=1, le=MAX_REQUEST_BATCH_SIZE)]
BatchSizes = Annotated[list[BatchSize], Field(min_length=1, max_length=16)]
SeqLength = Annotated[StrictInt, Field(ge=1, le=MAX_REQUEST_SEQUENCE_LENGTH,
                                       description="tokens per item; at most the model's position limit")]
# The words come from the vocabulary (`pytest_hwbench.vocabulary`, `hwsel.config`), never retyped
# here. A mode may be spelt the old way (``training``): `ACCEPTED_MODES` lists every spelling, and
# `hwsel.config.check_mode`, behind the question builder, reads them as the mode, as it does for
# the CLI and the Python API. Hardware stays a string checked against the configured targets, so
# that a 422 names the unknown target and lists the accepted ones.
Precision = Literal[PRECISIONS]  # type: ignore[valid-type]
TrainPrecision = Literal[TRAIN_PRECISIONS]  # type: ignore[valid-type]
Mode = Literal[ACCEPTED_MODES]  # type: ignore[valid-type]
Modes = Annotated[list[Mode], Field(min_length=1, max_length=len(MODES))]
Family = Literal[FAMILIES]  # type: ignore[valid-type]
Backend = Annotated[str, Field(min_length=1, max_length=64,
                                description="runtime asked about; default eager torch (openvino on the openvino "
                                            "target, qai_hub on qnn)")]
DeviceName = Annotated[str, Field(min_length=1, max_length=200)]
#: One device for a request about one hardware target, or hardware -> device.
Device = Annotated[DeviceName | dict[Hardware, DeviceName],
                   Field(description="device asked about: a name ('NVIDIA H100 80GB HBM3') or spec name ('h100') "
                                     "for the one hardware target, or hardware -> device; default: detected here, "
                                     "else the device most benchmark records of that hardware hold")]
GpuCount = Annotated[StrictInt, Field(ge=1, le=4096)]


class _Request(BaseModel):
    # strict: no coercion, so true, "1" and 1.0 are not the integer 1; a JSON integer
    # still fills a float field such as max_memory_gb.
    model_config = ConfigDict(extra="forbid", protected_namespaces=(), populate_by_name=True, strict=True)


class _Response(BaseModel):
    model_config = ConfigDict(protected_namespaces=())


class SelectRequest(_Request):
    model_name: OptionalModelName = None
    config: ModelConfig | None = None
    model_family: Family | None = Field(None, description="checked against the model's family when given")
    batch_size: BatchSize = 1
    sequence_length: SeqLength | None = None
    mode: Mode = "inference"
    precision: Precision = "fp32"
    available_hardware: HardwareList | None = Field(None, description="default: detected here")
    task_type: str | None = Field(None, max_length=64, description="task profile; overrides mode")
    backend: Backend | None = None
    device: Device | None = None


def _response_model(cls: type, *, types: Mapping[str, Any] | None = None,
                    extra: Mapping[str, Any] | None = None) -> type[BaseModel]:
    """A response model with the fields of dataclass `cls` (types from its annotations, `types`
    overriding, e.g. a nested dataclass by its response model) plus the `extra` keys its
    ``to_dict`` adds. Every field is required: ``to_dict`` writes each one."""
    hints = typing.get_type_hints(cls)
    types = dict(types or {})
    fields: dict[str, Any] = {f.name: (types.get(f.name, hints[f.name]), ...) for f in dataclasses.fields(cls)}
    fields.update({name: (kind, ...) for name, kind in (extra or {}).items()})
    return create_model(f"{cls.__name__}Model", __base__=_Response, **fields)


#: `hwsel.query.Prediction.to_dict()`, with the predecessor's names latency and memory_usage.
PredictionModel = _response_model(Prediction, extra={"latency": float, "memory_usage": float})


class DeviceModel(_Response):
    device: str | None
    device_source: str
    device_spec: str
    backend: str | None


#: `hwsel.select.HardwareScore.to_dict()`: its prediction, plus the predecessor's source and predictions.
ScoreModel = _response_model(HardwareScore, types={"prediction": PredictionModel | None},
                             extra={"source": str | None, "predictions": dict[str, Any] | None})
#: `hwsel.select.Recommendation.to_dict()`.
RecommendationResponse = _response_model(Recommendation, types={"all_scores": dict[str, ScoreModel],
                                                                "devices": dict[str, DeviceModel]})


class BatchModel(_Request):
    name: Annotated[str, Field(min_length=1, max_length=200)]
    family: Family | None = None


class BatchRequest(_Request):
    models: list[BatchModel | Annotated[str, Field(min_length=1, max_length=200)]] = Field(
        ..., min_length=1, max_length=64)
    batch_size: BatchSize = 1
    mode: Mode = "inference"
    precision: Precision = "fp32"
    available_hardware: HardwareList | None = None
    backend: Backend | None = None
    device: Device | None = None


class BatchEntry(_Response):
    primary: str | None
    fallbacks: list[str]
    explanation: str
    prediction_source: str | None
    error: str | None = None
    tie: list[str] = Field(default_factory=list, description="targets tied for first (empty: decided)")


class MapRequest(_Request):
    model_families: list[Family] | None = Field(None, min_length=1, max_length=5)
    batch_sizes: BatchSizes = [1, 4, 16, 32, 64]
    hardware_platforms: HardwareList | None = None
    modes: Modes = list(MODES)
    precision: Precision = "fp32"
    backend: Backend | None = None
    device: Device | None = None


class MapResponse(_Response):
    timestamp: str
    hardware_platforms: list[str]
    batch_sizes: list[int]
    modes: list[str]
    precision: str
    devices: dict[str, DeviceModel]
    prediction_layers: dict[str, Any]
    model_families: dict[str, Any]


class PredictRequest(_Request):
    model_name: OptionalModelName = None
    config: ModelConfig | None = None
    model_family: Family | None = None
    hardware: HardwareList | Hardware | None = Field(None, description="default: every configured target")
    batch_size: BatchSize = 1
    sequence_length: SeqLength | None = None
    mode: Mode = "inference"
    precision: Precision = "fp32"
    backend: Backend | None = None
    device: Device | None = None


class PredictResponse(_Response):
    model_name: str
    model_family: str
    batch_size: int
    sequence_length: int | None
    mode: str
    precision: str
    backend: str | None = Field(description="the backend every answer is for (null when targets differ: see each "
                                            "prediction's backend)")
    devices: dict[str, str | None]
    predictions: dict[str, PredictionModel]  # type: ignore[valid-type]


class MatrixRequest(_Request):
    models: list[Annotated[str, Field(min_length=1, max_length=200)]] | None = Field(None, min_length=1,
                                                                                    max_length=16)
    hardware_platforms: HardwareList | None = None
    batch_sizes: BatchSizes = [1, 8, 32]
    precisions: list[Precision] = Field(["fp32", "fp16"], min_length=1, max_length=4)
    mode: Mode = "inference"
    backend: Backend | None = None
    device: Device | None = None


class MatrixResponse(_Response):
    timestamp: str
    mode: str
    devices: dict[str, DeviceModel]
    models: dict[str, Any]
    hardware_platforms: list[str]
    batch_sizes: list[int]
    precision_options: list[str]
    sources: dict[str, int]
    configurations: int


class DistributedRequest(_Request):
    model_name: ModelName
    model_family: Family | None = None
    gpu_count: GpuCount = 8
    batch_size: BatchSize = 8
    max_memory_gb: float = Field(16.0, gt=0, le=1e5, allow_inf_nan=False)
    precision: TrainPrecision = "bf16"


#: `hwsel.distributed.MemoryEstimate.to_dict()`.
MemoryModel = _response_model(MemoryEstimate)
#: `hwsel.distributed.DistributedConfig.to_dict()`, with Hugging Face's name gradient_checkpointing.
DistributedResponse = _response_model(DistributedConfig, types={"estimated_memory": MemoryModel},
                                      extra={"gradient_checkpointing": bool})


class NextRequest(_Request):
    budget: Annotated[StrictInt, Field(ge=1, le=100, description="configurations to suggest")] = 10
    models: list[Annotated[str, Field(min_length=1, max_length=200)]] | None = Field(
        None, min_length=1, max_length=64, description="zoo models to consider (default: those in the records plus "
                                                       "the zoo models of their tiers)")
    hardware: HardwareList | None = Field(None, min_length=1, description="among those in the records")
    backends: list[Backend] | None = Field(None, min_length=1, max_length=16, description="among those in the records")
    precisions: list[Precision] | None = Field(None, min_length=1, max_length=4,
                                               description="among those in the records")
    batch_sizes: BatchSizes | None = Field(None, description="inference batch sizes (default: those in the records)")
    seed: Annotated[StrictInt, Field(ge=0, le=2**31 - 1)] = 0
    ensemble: Annotated[StrictInt, Field(ge=2, le=16, description="latency models in the ensemble")] = 8


#: `hwsel.next.Suggestion.to_dict()`.
SuggestionModel = _response_model(Suggestion)


class NextResponse(_Response):
    budget: int
    source: str
    suggestions: list[SuggestionModel]  # type: ignore[valid-type]


class AnalysisRequest(_Request):
    model_name: ModelName
    model_family: Family | None = None
    batch_sizes: BatchSizes = [1, 8, 32]
    hardware_platforms: HardwareList | None = None
    modes: Modes = list(MODES)
    precision: Precision = "fp32"
    backend: Backend | None = None
    device: Device | None = None


class AnalysisResponse(_Response):
    model_name: str
    model_family: str
    model_size: int
    hardware_platforms: list[str]
    batch_sizes: list[int]
    precision: str
    devices: dict[str, DeviceModel]
    timestamp: str
    inference: dict[str, Any] | None = None
    training: dict[str, Any] | None = Field(None, description="the train mode's analysis (the predecessor's name)")


class HealthResponse(_Response):
    status: str
    version: str
    available_components: dict[str, bool]
    database_connected: bool
    prediction_layers: dict[str, Any]
    config_origin: str


class TargetModel(_Response):
    available: bool
    reason: str
    devices: list[str]
    precisions: list[str]


class DetectResponse(_Response):
    hardware: dict[str, bool]
    details: dict[str, TargetModel]


class ErrorResponse(_Response):
    status: Literal["error"] = "error"
    message: str
    errors: list[dict[str, Any]] | None = None


# --- helpers --------------------------------------------------------------------------------------

def _error(status: int, message: str, errors: list[dict[str, Any]] | None = None) -> JSONResponse:
    # A store error may quote a tracking URI with its password: never into a response body.
    body: dict[str, Any] = {"status": "error", "message": redact_uri(message)}
    if errors is not None:
        body["errors"] = errors
    return JSONResponse(status_code=status, content=body)


def _plain(value: Any) -> Any:
    """JSON-safe: non-finite floats become None (JSON has no NaN; a NaN must not become a 500).

    Every text goes through `redact_uri`: a layer's note or a device's source may quote a
    tracking URI, and no password may reach a response body.
    """
    if isinstance(value, float):
        return value if math.isfinite(value) else None
    if isinstance(value, dict):
        return {str(k): _plain(v) for k, v in value.items()}
    if isinstance(value, list | tuple):
        return [_plain(v) for v in value]
    if isinstance(value, str):
        return redact_uri(value)
    if isinstance(value, int | bool) or value is None:
        return value
    return redact_uri(value)


def _invalid(field: str, message: str) -> RequestValidationError:
    """A 422 naming `field`, in the same shape as pydantic's own rejections."""
    return RequestValidationError([{"loc": ("body", field), "msg": message, "type": "value_error"}])


def _config_layers(config: Any) -> int:
    """Layers a config describes: its layer counts (`_LAYER_KEYS`), nested configs included."""
    total = 0
    if isinstance(config, Mapping):
        for key, value in config.items():
            if key in _LAYER_KEYS and isinstance(value, int) and not isinstance(value, bool):
                total += max(value, 0)
            elif key in _LAYER_KEYS and isinstance(value, list):
                total += sum(v for v in value if isinstance(v, int) and not isinstance(v, bool) and v > 0)
            elif isinstance(value, Mapping):
                total += _config_layers(value)
    return total


def _bounded_model(name: str | None, config: Mapping[str, Any] | None = None, *, family: str | None = None,
                   sequence_length: int | None = None) -> Any:
    """`hwsel.query.describe_model` within what one request may cost: a `config` of at most
    `MAX_CONFIG_LAYERS` layers (checked before anything is built) and `MAX_CONFIG_PARAMS`
    parameters. Everything else about the model is the question builder's to check."""
    if config is not None:
        layers = _config_layers(config)
        if layers > MAX_CONFIG_LAYERS:
            raise QuestionError(f"the config describes {layers} layers; at most {MAX_CONFIG_LAYERS} per request "
                                "(MAX_CONFIG_LAYERS)", "config")
    info = describe_model(name, config=config, sequence_length=sequence_length, family=family)
    if config is not None and info.param_count > MAX_CONFIG_PARAMS:
        raise QuestionError(f"the config derives a model of {info.param_count:.3g} parameters; at most "
                            f"{MAX_CONFIG_PARAMS:.0e} per request (MAX_CONFIG_PARAMS)", "config")
    return info


def _hardware(pred: Predictor, field: str, names: Any) -> tuple[str, ...] | None:
    """`names` checked against the configured hardware (None stays None); 422 naming `field`."""
    if names is None:
        return None
    try:
        return pred.config_.check_hardware(names)
    except ValueError as exc:
        raise _invalid(field, str(exc)) from None


class _BodyLimit:
    """ASGI middleware: a request body over `limit` bytes is answered 413 naming the limit, from its
    Content-Length before anything is read, else as soon as the bytes read pass it."""

    def __init__(self, app: Any, limit: int) -> None:
        self.app, self.limit = app, limit

    def _message(self) -> str:
        return (f"request body over {self.limit} bytes ({self.limit // 1024} KiB), the limit per request "
                "(MAX_REQUEST_BYTES); a config.json is a few KB")

    async def __call__(self, scope: Any, receive: Any, send: Any) -> None:
        if scope["type"] != "http":
            await self.app(scope, receive, send)
            return
        length = dict(scope.get("headers") or ()).get(b"content-length")
        if length is not None and length.isdigit() and int(length) > self.limit:
            await JSONResponse(status_code=413, content={"status": "error", "message": self._message()})(
                scope, receive, send)
            return
        seen = 0

        async def limited() -> Any:
            nonlocal seen
            message = await receive()
            if message.get("type") == "http.request":
                seen += len(message.get("body") or b"")
                if seen > self.limit:  # chunked, without a Content-Length
                    raise StarletteHTTPException(413, self._message())
            return message

        await self.app(scope, limited, send)


# --- the app ---------------------------------------------------------------------------------------

def create_app(predictor: Predictor | None = None, *, source: str | os.PathLike[str] | None = None,
               tracking_uri: str | None = None,
               config: SelectionConfig | str | os.PathLike[str] | None = None,
               timeout: float | None = None, include_noisy: bool = False) -> FastAPI:
    """A FastAPI app answering from `predictor` (default: `Predictor.load(source, ...)`, loaded now,
    waiting at most `timeout` seconds per store, answering from interfered records too with
    `include_noisy`: `hwsel.predict.Predictor.load`).

    ``/measure/next`` reads the records of `source` (default `hwsel.data.default_source()`) on its
    first request, within `timeout` seconds (default `hwsel._reach.DEFAULT_TIMEOUT_S`): a source
    that does not answer in time, refuses or holds no records answers 503 naming it.
    """
    pred = predictor.built() if predictor is not None else Predictor.load(
        source, tracking_uri=tracking_uri, config=config, include_noisy=include_noisy,
        **({} if timeout is None else {"timeout": timeout}))
    app = FastAPI(title="hwsel", version=VERSION,
                  description="Hardware selection and performance prediction from hwbench runs.",
                  responses={404: {"model": ErrorResponse}, 422: {"model": ErrorResponse}})
    app.state.predictor = pred
    app.add_middleware(_BodyLimit, limit=MAX_REQUEST_BYTES)
    # /measure/next reads the records itself (a Predictor keeps an index, not the table): once,
    # on first use, and keeps each answer (they are deterministic for a request).
    next_source = source if source is not None else default_source()
    next_timeout = DEFAULT_TIMEOUT_S if timeout is None else timeout
    next_lock = threading.Lock()
    next_table: list[Any] = []
    next_answers: dict[str, list[Suggestion]] = {}

    @app.exception_handler(RequestValidationError)
    async def _invalid(request: Request, exc: RequestValidationError) -> JSONResponse:
        # Only loc/msg/type: the offending input may be NaN or bytes, which JSON cannot carry.
        errors = [{"loc": [str(x) for x in e.get("loc", ())], "msg": str(e.get("msg", "")), "type": str(e.get("type", ""))}
                  for e in exc.errors()]
        first = errors[0] if errors else {"loc": [], "msg": "invalid request"}
        # loc names union members too ("hardware", "list[constrained-str]"): keep the field path
        where = ".".join(x for x in first["loc"] if x != "body" and "[" not in x) or "body"
        return _error(422, f"invalid request: {where}: {first['msg']}", errors)

    @app.exception_handler(StarletteHTTPException)
    async def _http(request: Request, exc: StarletteHTTPException) -> JSONResponse:
        # unknown paths, wrong methods, bodies that are not UTF-8 JSON: our error shape too
        return JSONResponse(status_code=exc.status_code, content={"status": "error", "message": redact_uri(exc.detail)},
                            headers=getattr(exc, "headers", None))

    @app.exception_handler(QuestionError)
    async def _bad_question(request: Request, exc: QuestionError) -> JSONResponse:
        # the question builder's one error: an unknown model is 404, any other bad value 422 naming it
        if isinstance(exc, UnknownModelError):
            return _error(404, str(exc))
        if not exc.field:
            return _error(422, str(exc))
        return _error(422, f"invalid request: {exc.field}: {exc}",
                      [{"loc": ["body", exc.field], "msg": str(exc), "type": "value_error"}])

    @app.exception_handler(KeyError)
    async def _unknown(request: Request, exc: KeyError) -> JSONResponse:
        return _error(404, error_text(exc))

    @app.exception_handler(ValueError)
    async def _bad_value(request: Request, exc: ValueError) -> JSONResponse:
        return _error(422, str(exc))

    @app.exception_handler(Exception)
    async def _internal(request: Request, exc: Exception) -> JSONResponse:
        log.exception("internal error on %s", request.url.path)
        return _error(500, f"internal error: {type(exc).__name__}: {exc}")

    @app.get("/health", response_model=HealthResponse)
    def health() -> dict[str, Any]:
        layers = pred.describe()
        return _plain({
            "status": "healthy", "version": VERSION,
            "available_components": {**{k: v["available"] for k, v in layers.items()}, "fastapi": True},
            "database_connected": bool(layers["measured"]["available"]),
            "prediction_layers": layers, "config_origin": pred.config_.origin,
        })

    @app.get("/hardware/detect", response_model=DetectResponse)
    def detect() -> dict[str, Any]:
        hw = detect_hardware()
        details = {name: {"available": t.available, "reason": t.reason, "devices": [d.name for d in t.devices],
                          "precisions": list(t.precisions)} for name, t in hw.targets.items()}
        return {"hardware": {n: d["available"] for n, d in details.items()}, "details": details}

    @app.post("/hardware/select", response_model=RecommendationResponse)
    def select(req: SelectRequest) -> dict[str, Any]:
        info = _bounded_model(req.model_name, req.config, family=req.model_family,
                              sequence_length=req.sequence_length)
        available = _hardware(pred, "available_hardware", req.available_hardware)  # the request's field
        if req.task_type:
            rec = select_hardware_for_task(req.task_type, info, batch_size=req.batch_size, precision=req.precision,
                                           available_hardware=available, backend=req.backend,
                                           device=req.device, predictor=pred)
        else:
            rec = select_hardware(info, batch_size=req.batch_size, mode=req.mode, precision=req.precision,
                                  available_hardware=available, backend=req.backend, device=req.device,
                                  predictor=pred)
        return _plain(rec.to_dict())

    @app.post("/hardware/batch", response_model=dict[str, BatchEntry])
    def batch(req: BatchRequest) -> dict[str, Any]:
        available = _hardware(pred, "available_hardware", req.available_hardware)  # the request's fault
        out: dict[str, Any] = {}
        for item in req.models:
            name, family = (item, None) if isinstance(item, str) else (item.name, item.family)
            try:
                rec = select_hardware(describe_model(name, family=family), batch_size=req.batch_size, mode=req.mode,
                                      precision=req.precision, available_hardware=available, backend=req.backend,
                                      device=req.device, predictor=pred)
            except (KeyError, ValueError) as exc:
                out[name] = {"primary": None, "fallbacks": [], "explanation": error_text(exc),
                             "prediction_source": None, "error": error_text(exc)}
                continue
            out[name] = {"primary": rec.primary_recommendation, "fallbacks": list(rec.fallback_options),
                         "explanation": rec.explanation, "prediction_source": rec.prediction_source,
                         "tie": list(rec.tie)}
        return _plain(out)

    @app.post("/hardware/map", response_model=MapResponse)
    def hardware_map(req: MapRequest) -> dict[str, Any]:
        hardware = _hardware(pred, "hardware_platforms", req.hardware_platforms)
        return _plain(selection_map(req.model_families, req.batch_sizes, hardware, req.modes, req.precision,
                                    device=req.device, backend=req.backend, predictor=pred))

    @app.post("/performance/predict", response_model=PredictResponse)
    def predict(req: PredictRequest) -> dict[str, Any]:
        info = _bounded_model(req.model_name, req.config, family=req.model_family,
                              sequence_length=req.sequence_length)
        preds = pred.predict(info, req.hardware, batch_size=req.batch_size, precision=req.precision, mode=req.mode,
                             backend=req.backend, device=req.device)
        backends = {p.backend for p in preds.values()}
        return _plain({"model_name": info.name, "model_family": info.family, "batch_size": req.batch_size,
                       "sequence_length": info.sequence_length, "mode": req.mode, "precision": req.precision,
                       "backend": backends.pop() if len(backends) == 1 else None,
                       "devices": {hw: p.device for hw, p in preds.items()},
                       "predictions": {hw: p.to_dict() for hw, p in preds.items()}})

    @app.post("/performance/matrix", response_model=MatrixResponse)
    def matrix(req: MatrixRequest) -> dict[str, Any]:
        hardware = _hardware(pred, "hardware_platforms", req.hardware_platforms)
        return _plain(prediction_matrix(req.models, hardware, req.batch_sizes, req.precisions, req.mode, req.backend,
                                        device=req.device, predictor=pred))

    @app.post("/training/distributed", response_model=DistributedResponse)
    def distributed(req: DistributedRequest) -> dict[str, Any]:
        info = describe_model(req.model_name, family=req.model_family)
        plan = distributed_training_config(info, req.gpu_count, req.batch_size, req.max_memory_gb,
                                           precision=req.precision)
        return _plain(plan.to_dict())

    @app.post("/measure/next", response_model=NextResponse)
    def measure_next(req: NextRequest) -> Any:
        with next_lock:
            if not next_table:
                shown = describe_sources(next_source)
                try:
                    require_reachable(((s, "--source") for s in source_list(next_source) or []), next_timeout)
                    runs = bounded(lambda: load_runs(next_source), next_timeout, f"the records of {shown}",
                                   then="/measure/next answers 503")
                    next_table.append(training_table(runs))
                except Exception as exc:  # noqa: BLE001 - the service is up, its records are not: 503, never 500
                    if not isinstance(exc, LookupError | OSError | ValueError | HwselTimeout):
                        log.warning("cannot read the records of %s", redact_uri(shown), exc_info=True)
                    return _error(503, f"no benchmark records to suggest from ({shown}): {error_text(exc)}")
            key = req.model_dump_json()
            picks = next_answers.get(key)
            if picks is None:
                picks = suggest_measurements(req.budget, models=req.models, hardware=req.hardware,
                                             backends=req.backends, precisions=req.precisions,
                                             batch_sizes=req.batch_sizes, seed=req.seed, ensemble=req.ensemble,
                                             table=next_table[0])
                if len(next_answers) >= 64:
                    next_answers.pop(next(iter(next_answers)))
                next_answers[key] = picks
        return _plain({"budget": req.budget, "source": describe_sources(next_source),
                       "suggestions": [p.to_dict() for p in picks]})

    @app.post("/analysis/model", response_model=AnalysisResponse)
    def analysis(req: AnalysisRequest) -> dict[str, Any]:
        hardware = _hardware(pred, "hardware_platforms", req.hardware_platforms)
        info = describe_model(req.model_name, family=req.model_family)
        data = analyze_model(info, req.batch_sizes, hardware, req.modes, req.precision,
                             device=req.device, backend=req.backend, predictor=pred)
        # hwsel names the mode "train" (pytest_hwbench.vocabulary); this API keeps the predecessor's key
        if "train" in data:
            data["training"] = data.pop("train")
        return _plain(data)

    return app


__all__ = ["MAX_CONFIG_LAYERS", "MAX_CONFIG_PARAMS", "MAX_REQUEST_BYTES", "VERSION", "create_app"]
