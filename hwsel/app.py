"""The REST API: ``create_app()`` returns a FastAPI app over one loaded `Predictor`, its
endpoints the predecessor's plus ``POST /measure/next``; the request and response models are
`hwsel.rest_models`'. Bad input answers 4xx with ``{"status": "error", "message": ...}``: 422 for
a bad value naming the field, 404 for an unknown model, 413 for a body over `MAX_REQUEST_BYTES`;
a ``config`` is bounded too (`MAX_CONFIG_LAYERS`, `MAX_CONFIG_PARAMS`), so no request runs long.
"""

from __future__ import annotations

import functools
import logging
import math
import os
import threading
from collections.abc import Mapping
from typing import Any

from fastapi import FastAPI, Request
from fastapi.exceptions import RequestValidationError
from fastapi.responses import JSONResponse
from starlette.exceptions import HTTPException as StarletteHTTPException

from pytest_hwbench.sinks import redact_uri, resolve_tracking_uri

from ._reach import DEFAULT_TIMEOUT_S, HwselTimeout
from .config import SelectionConfig
from .data import describe_sources
from .distributed import distributed_training_config
from .next import Suggestion, records_table, suggest_measurements
from .performance import prediction_matrix, prediction_report
from .predict import Predictor
from .query import QuestionError, UnknownModelError, describe_model, error_text
from .rest_models import (
    AnalysisRequest,
    AnalysisResponse,
    BatchEntry,
    BatchRequest,
    DetectResponse,
    DistributedRequest,
    DistributedResponse,
    ErrorResponse,
    HealthResponse,
    MapRequest,
    MapResponse,
    MatrixRequest,
    MatrixResponse,
    NextRequest,
    NextResponse,
    PredictRequest,
    PredictResponse,
    RecommendationResponse,
    SelectRequest,
)
from .select import analyze_model, detect_hardware, select_hardware, selection_map

log = logging.getLogger("hwsel.app")

VERSION = "0.1.0"

#: Largest request body in bytes, answered 413 beyond: a Hugging Face config.json is a few KB
#: (about 40 KB with a 1,000-class label map).
MAX_REQUEST_BYTES = 256 * 1024
#: Most layers a `config` may describe over all its stacks (the deepest published models have
#: about 130), answered 422 beyond.
MAX_CONFIG_LAYERS = 256
#: Most parameters a `config` may derive (the largest published models have about 2e12).
MAX_CONFIG_PARAMS = 10**13
#: Config keys that count layers (nested configs, e.g. a text_config, count too).
_LAYER_KEYS = ("num_hidden_layers", "n_layer", "num_layers", "encoder_layers", "decoder_layers",
               "num_decoder_layers", "depths")


def _error(status: int, message: str, errors: list[dict[str, Any]] | None = None,
           headers: Mapping[str, str] | None = None) -> JSONResponse:
    # A store error may quote a tracking URI with its password: never into a response body.
    body: dict[str, Any] = {"status": "error", "message": redact_uri(message)}
    if errors is not None:
        body["errors"] = errors
    return JSONResponse(status_code=status, content=body, headers=headers)


def _plain(value: Any) -> Any:
    """JSON-safe: non-finite floats become None, and every text goes through `redact_uri` (a
    layer's note may quote a tracking URI, and no password may reach a response body)."""
    if isinstance(value, float):
        return value if math.isfinite(value) else None
    if isinstance(value, dict):
        return {str(k): _plain(v) for k, v in value.items()}
    if isinstance(value, list | tuple):
        return [_plain(v) for v in value]
    if isinstance(value, int | bool) or value is None:
        return value
    return redact_uri(value)


def _config_layers(config: Any) -> int:
    """Layers a config describes: its layer counts (`_LAYER_KEYS`), nested configs included."""
    total = 0
    if isinstance(config, Mapping):
        for key, value in config.items():
            if key in _LAYER_KEYS and isinstance(value, int | list):  # a count, or one per stack
                total += sum(v for v in (value if isinstance(value, list) else [value])
                             if isinstance(v, int) and not isinstance(v, bool) and v > 0)
            elif isinstance(value, Mapping):
                total += _config_layers(value)
    return total


def _bounded_model(req: Any) -> Any:
    """`hwsel.query.describe_model` of a request's model (its ``model_name`` or ``config``, at its
    ``sequence_length``, checked against its ``model_family``); a ``config`` of at most
    `MAX_CONFIG_LAYERS` layers (checked before anything is built) and `MAX_CONFIG_PARAMS` parameters."""
    config = req.config
    if config is not None:
        layers = _config_layers(config)
        if layers > MAX_CONFIG_LAYERS:
            raise QuestionError(f"the config describes {layers} layers; at most {MAX_CONFIG_LAYERS} per request "
                                "(MAX_CONFIG_LAYERS)", "config")
    info = describe_model(req.model_name, config=config, sequence_length=req.sequence_length, family=req.model_family)
    if config is not None and info.param_count > MAX_CONFIG_PARAMS:
        raise QuestionError(f"the config derives a model of {info.param_count:.3g} parameters; at most "
                            f"{MAX_CONFIG_PARAMS:.0e} per request (MAX_CONFIG_PARAMS)", "config")
    return info


def _hardware(pred: Predictor, field: str, names: Any) -> tuple[str, ...] | None:
    """`names` checked against the configured hardware (None stays None); a `QuestionError` (422)
    naming the request's `field`."""
    if names is None:
        return None
    try:
        return pred.config_.check_hardware(names)
    except ValueError as exc:
        raise QuestionError(str(exc), field) from None


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
            await _error(413, self._message())(scope, receive, send)
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


def create_app(predictor: Predictor | None = None, *, source: str | os.PathLike[str] | None = None,
               tracking_uri: str | None = None,
               config: SelectionConfig | str | os.PathLike[str] | None = None,
               timeout: float | None = None, include_noisy: bool = False) -> FastAPI:
    """A FastAPI app answering from `predictor` (default: `hwsel.predict.Predictor.load` of the
    other arguments, now). ``/measure/next`` reads the records of `source` on its first request,
    within `timeout` seconds; a source that does not answer in time or holds no records answers 503.
    """
    timeout = DEFAULT_TIMEOUT_S if timeout is None else timeout
    pred = predictor.built() if predictor is not None else Predictor.load(
        source, tracking_uri=tracking_uri, config=config, include_noisy=include_noisy, timeout=timeout)
    app = FastAPI(title="hwsel", version=VERSION,
                  description="Hardware selection and performance prediction from hwbench runs.",
                  responses={404: {"model": ErrorResponse}, 422: {"model": ErrorResponse}})
    app.state.predictor = pred
    app.add_middleware(_BodyLimit, limit=MAX_REQUEST_BYTES)
    # a Predictor keeps an index, not the table: /measure/next reads the records once, on first use
    next_source = source if source is not None else resolve_tracking_uri()
    next_lock = threading.Lock()

    @functools.cache  # a failed read is not cached: the next request reads again
    def next_table() -> Any:
        return records_table(next_source, timeout, then="/measure/next answers 503")

    @functools.lru_cache(maxsize=64)
    def next_picks(asked: str) -> list[Suggestion]:
        return suggest_measurements(**NextRequest.model_validate_json(asked).model_dump(), table=next_table())

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
        return _error(exc.status_code, exc.detail, headers=exc.headers)

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
        info = _bounded_model(req)
        available = _hardware(pred, "available_hardware", req.available_hardware)  # the request's field
        rec = select_hardware(info, batch_size=req.batch_size, mode=req.mode, precision=req.precision,
                              available_hardware=available, task_type=req.task_type, backend=req.backend,
                              device=req.device, predictor=pred)
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
            except (KeyError, ValueError) as exc:  # this model's entry says why; the others answer
                out[name] = {"explanation": error_text(exc), "error": error_text(exc)}
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
        info = _bounded_model(req)
        preds = pred.predict(info, req.hardware, batch_size=req.batch_size, precision=req.precision, mode=req.mode,
                             backend=req.backend, device=req.device)
        return _plain(prediction_report(info, preds, batch_size=req.batch_size, precision=req.precision, mode=req.mode))

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
            try:
                next_table()
            except Exception as exc:  # noqa: BLE001 - the service is up, its records are not: 503, never 500
                shown = describe_sources(next_source)
                if not isinstance(exc, LookupError | OSError | ValueError | HwselTimeout):
                    log.warning("cannot read the records of %s", redact_uri(shown), exc_info=True)
                return _error(503, f"no benchmark records to suggest from ({shown}): {error_text(exc)}")
            picks = next_picks(req.model_dump_json())
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
