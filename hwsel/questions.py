"""Each hwsel question's fields, declared once: name (the REST field and the CLI's ``dest``), CLI
flag, type, default, bounds, choices and help, from which `hwsel.cli_parser.add_fields` and
`hwsel.rest_models.request_model` build the CLI options and the REST request models.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from pytest_hwbench import facts
from pytest_hwbench.models import FAMILIES
from pytest_hwbench.vocabulary import PRECISIONS

from .config import ACCEPTED_MODES, DEFAULT_PRECISION_CHOICES, MAX_HARDWARE_TARGETS, MODES
from .query import TRAIN_PRECISIONS

#: Largest batch size a question may ask about (keeps every request cheap).
MAX_REQUEST_BATCH_SIZE = 65536
#: Longest sequence a question may name; a model's own position limit is checked as well.
MAX_REQUEST_SEQUENCE_LENGTH = 1 << 17


@dataclass(frozen=True)
class Field:
    """One field of a question: a value of `type` (int, float or str), or with `many` a list of
    one to `many` of them; numbers within `ge`/`gt`..`le`, texts of 1..`max_length` characters."""

    name: str
    flag: str
    type: type
    default: Any
    help: str
    ge: float | None = None
    gt: float | None = None
    le: float | None = None
    many: int = 0
    choices: tuple[str, ...] | None = None
    max_length: int = 200


_HARDWARE: dict[str, Any] = {"many": MAX_HARDWARE_TARGETS, "max_length": 64}


def _grid(*fields: Field) -> tuple[Field, ...]:
    """A grid question's fields: `fields`, then the hardware it spans."""
    return (*fields, Field("hardware_platforms", "--hardware", str, None, "hardware targets (default: every "
                                                                          "configured target)", **_HARDWARE))


def _batch_sizes(default: tuple[int, ...]) -> Field:
    return Field("batch_sizes", "--batch-sizes", int, default, "batch sizes", ge=1, le=MAX_REQUEST_BATCH_SIZE,
                 many=16)


#: The runtime a question about hardware asks about (besides its fields, CLI and REST alike).
BACKEND = Field("backend", "--backend", str, None, "runtime the question is about (torch, torch-compile, onnxruntime, "
                "openvino, ...); default: eager torch (openvino on the openvino target, qai_hub on qnn); answers never "
                "come from another backend's measurements", max_length=64)
_PRECISION = Field("precision", "--precision", str, "fp32", "precision", choices=PRECISIONS)
_MODE = Field("mode", "--mode", str, "inference", "mode", choices=ACCEPTED_MODES)
_MODES = Field("modes", "--modes", str, MODES, "modes", many=len(MODES), choices=ACCEPTED_MODES)

#: `hwsel predict` and ``POST /performance/predict`` (besides the model and hardware): one case.
PREDICT = (Field("batch_size", "--batch-size", int, 1, "items per forward", ge=1, le=MAX_REQUEST_BATCH_SIZE),
           Field("sequence_length", "--seq-length", int, None, "tokens per item, for text models; at most the "
                 "model's position limit (default: the zoo model's)", ge=1, le=MAX_REQUEST_SEQUENCE_LENGTH),
           _PRECISION, _MODE)
#: `hwsel select` and ``POST /hardware/select`` (besides the model): the targets to choose among.
SELECT = (*PREDICT, Field("available_hardware", "--hardware", str, None, "targets to choose among (default: those "
                                                                      "detected here)", **_HARDWARE),
          Field("task_type", "--task", str, None, "task profile instead of mode: classification, generation, "
                                                  "embedding, speech_recognition, fine_tuning, training", max_length=64))
#: `hwsel precision` (besides the model): the precisions to choose among on one target.
PRECISION_CHOICE = (Field("hardware", "--hardware", str, "cpu", f"the target; known: {', '.join(facts.fallback_order())}"),
                    Field("precisions", "--precisions", str, DEFAULT_PRECISION_CHOICES, "precisions to choose among",
                          many=len(PRECISIONS), choices=PRECISIONS),
                    *(f for f in PREDICT if f.name != "precision"))

#: `hwsel map` and ``POST /hardware/map``: a selection map (family x batch size x mode).
MAP = _grid(Field("model_families", "--families", str, None, "model families (default: all)", many=len(FAMILIES),
                  choices=FAMILIES), _batch_sizes((1, 4, 16, 32, 64)), _MODES, _PRECISION)
#: `hwsel matrix` and ``POST /performance/matrix``: predictions for every combination.
MATRIX = _grid(Field("models", "--models", str, None, "zoo models (default: the full-tier zoo models)", many=16),
               _batch_sizes((1, 8, 32)),
               Field("precisions", "--precisions", str, ("fp32", "fp16"), "precisions", many=4, choices=PRECISIONS), _MODE)
#: `hwsel analyze` and ``POST /analysis/model`` (besides the model): one model across the grid.
ANALYZE = _grid(_batch_sizes((1, 8, 32)), _MODES, _PRECISION)

#: `hwsel next` and ``POST /measure/next``: which configurations to measure next.
NEXT: tuple[Field, ...] = (
    Field("budget", "--budget", int, 10, "configurations to suggest", ge=1, le=100),
    Field("models", "--models", str, None, "zoo models to consider (default: those in the records plus the zoo "
                                          "models of their tiers)", many=64),
    Field("hardware", "--hardware", str, None, "hardware to consider, among those in the records (default: all)",
          **_HARDWARE),
    Field("backends", "--backends", str, None, "backends, among those in the records (default: all)", many=16,
          max_length=64),
    Field("precisions", "--precisions", str, None, "precisions, among those in the records (default: all)", many=4,
          choices=PRECISIONS),
    Field("batch_sizes", "--batch-sizes", int, None, "batch sizes of inference cases (default: those the records "
                                                    "hold for the hardware)", ge=1, le=MAX_REQUEST_BATCH_SIZE, many=16),
    Field("seed", "--seed", int, 0, "random seed; the same seed gives the same list", ge=0, le=2**31 - 1),
    Field("ensemble", "--ensemble", int, 8, "latency models in the ensemble", ge=2, le=16),
)

#: `hwsel distributed` and ``POST /training/distributed`` (besides the model): a training plan.
DISTRIBUTED: tuple[Field, ...] = (
    Field("gpu_count", "--gpus", int, 8, "number of GPUs", ge=1, le=4096),
    Field("batch_size", "--batch-size", int, 8, "items per GPU per step", ge=1, le=MAX_REQUEST_BATCH_SIZE),
    Field("max_memory_gb", "--max-memory-gb", float, 16.0, "memory per GPU, GiB", gt=0, le=1e5),
    Field("precision", "--precision", str, "bf16", "fp32, or fp16/bf16 mixed precision", choices=TRAIN_PRECISIONS),
)

__all__ = ["ANALYZE", "BACKEND", "DISTRIBUTED", "MAP", "MATRIX", "MAX_REQUEST_BATCH_SIZE", "MAX_REQUEST_SEQUENCE_LENGTH", "NEXT", "PRECISION_CHOICE", "PREDICT",
           "SELECT", "Field"]
