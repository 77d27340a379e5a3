"""The REST API's request and response models (pydantic), one per endpoint body, and the field
types they share; requests are strict (no coercion, unknown fields refused).
"""

from __future__ import annotations

import dataclasses
import typing
from collections.abc import Mapping
from typing import Annotated, Any, Literal

from pydantic import AliasChoices, BaseModel, ConfigDict, Field, StrictInt, create_model

from pytest_hwbench.models import FAMILIES

from .config import MAX_HARDWARE_TARGETS
from .distributed import DistributedConfig, MemoryEstimate
from .next import Suggestion
from .query import Prediction
from .questions import ANALYZE, BACKEND, DISTRIBUTED, MAP, MATRIX, NEXT, PREDICT, SELECT
from .questions import Field as QuestionField
from .select import HardwareScore, Recommendation

# One definition per kind of field, shared by every request model, so that an endpoint cannot
# accept what another refuses; what depends on the model or the configured hardware is the
# question builder's to check (`hwsel.query.ask`).


#: A model's or a device's name.
Name = Annotated[str, Field(min_length=1, max_length=200)]
ModelName = Annotated[Name, Field(validation_alias=AliasChoices("model_name", "model"),
                                  description="zoo name or hub-style alias, e.g. bert-base-uncased")]
#: Where a config may stand in for the name: null, or a name as above.
OptionalModelName = Annotated[Name | None, Field(validation_alias=AliasChoices("model_name", "model"),
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
# Hardware stays a string checked against the configured targets, so that a 422 names the
# unknown target and lists the accepted ones.
Family = Literal[FAMILIES]  # type: ignore[valid-type]
#: One device for a request about one hardware target, or hardware -> device.
Device = Annotated[Name | dict[Hardware, Name],
                   Field(description="device asked about: a name ('NVIDIA H100 80GB HBM3') or spec name ('h100') "
                                     "for the one hardware target, or hardware -> device; default: detected here, "
                                     "else the device most benchmark records of that hardware hold")]


class _Request(BaseModel):
    # strict: no coercion, so true, "1" and 1.0 are not the integer 1; a JSON integer
    # still fills a float field such as max_memory_gb.
    model_config = ConfigDict(extra="forbid", protected_namespaces=(), populate_by_name=True, strict=True)


class _Response(BaseModel):
    model_config = ConfigDict(protected_namespaces=())


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
    name: Name
    family: Family | None = None


class BatchEntry(_Response):
    primary: str | None = None
    fallbacks: list[str] = Field(default_factory=list)
    explanation: str
    prediction_source: str | None = None
    error: str | None = None
    tie: list[str] = Field(default_factory=list, description="targets tied for first (empty: decided)")


class MapResponse(_Response):
    timestamp: str
    hardware_platforms: list[str]
    batch_sizes: list[int]
    modes: list[str]
    precision: str
    devices: dict[str, DeviceModel]
    prediction_layers: dict[str, Any]
    model_families: dict[str, Any]


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


def _annotation(f: QuestionField) -> Any:
    """The pydantic type of a question's field (`hwsel.questions`): strict, within its bounds."""
    item: Any
    if f.choices:
        item = Literal[f.choices]
    elif f.type is str:
        item = Annotated[str, Field(min_length=1, max_length=f.max_length)]
    else:
        item = Annotated[StrictInt if f.type is int else float,
                         Field(ge=f.ge, gt=f.gt, le=f.le, **({} if f.type is int else {"allow_inf_nan": False}))]
    if f.many:
        item = Annotated[list[item], Field(min_length=1, max_length=f.many)]
    return item if f.default is not None else item | None


def request_model(name: str, fields: tuple[QuestionField, ...], **more: Any) -> type[BaseModel]:
    """The request model of a question: one pydantic field per declared field, plus `more`."""
    return create_model(name, __base__=_Request, **more, **{
        f.name: (_annotation(f), Field(list(f.default) if isinstance(f.default, tuple) else f.default,
                                       description=f.help)) for f in fields})


def _hardware_question(name: str, fields: tuple[QuestionField, ...], **more: Any) -> type[BaseModel]:
    """The request model of a question about hardware: its fields, the backend and the device."""
    return request_model(name, (*fields, BACKEND), device=(Device | None, None), **more)


_MODEL = {"model_name": (OptionalModelName, None), "config": (ModelConfig | None, None)}
SelectRequest = _hardware_question("SelectRequest", SELECT, **_MODEL, model_family=(
    Family | None, Field(None, description="checked against the model's family when given")))
#: ``POST /hardware/batch``: select's question for several models at once.
BatchRequest = _hardware_question("BatchRequest", tuple(f for f in SELECT if f.name not in {"sequence_length", "task_type"}),
                                  models=(list[BatchModel | Name], Field(..., min_length=1, max_length=64)))
PredictRequest = _hardware_question("PredictRequest", PREDICT, **_MODEL, model_family=(Family | None, None), hardware=(
    HardwareList | Hardware | None, Field(None, description="default: every configured target")))
MapRequest = _hardware_question("MapRequest", MAP)
MatrixRequest = _hardware_question("MatrixRequest", MATRIX)
AnalysisRequest = _hardware_question("AnalysisRequest", ANALYZE, model_name=(ModelName, ...),
                                     model_family=(Family | None, None))
DistributedRequest = request_model("DistributedRequest", DISTRIBUTED, model_name=(ModelName, ...),
                                   model_family=(Family | None, None))


#: `hwsel.distributed.MemoryEstimate.to_dict()`.
MemoryModel = _response_model(MemoryEstimate)
#: `hwsel.distributed.DistributedConfig.to_dict()`, with Hugging Face's name gradient_checkpointing.
DistributedResponse = _response_model(DistributedConfig, types={"estimated_memory": MemoryModel},
                                      extra={"gradient_checkpointing": bool})


NextRequest = request_model("NextRequest", NEXT)


#: `hwsel.next.Suggestion.to_dict()`.
SuggestionModel = _response_model(Suggestion)


class NextResponse(_Response):
    budget: int
    source: str
    suggestions: list[SuggestionModel]  # type: ignore[valid-type]


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
