"""The words every part of hwbench and hwsel shares: modes, precisions, bytes, defaults.
Imports the standard library only, so anything may use it; the hardware targets are rows of
`pytest_hwbench.facts`.
"""

from __future__ import annotations

import os
from collections.abc import Mapping
from pathlib import Path
from types import MappingProxyType

#: Scenarios the harness runs and records carry, the default first.
MODES: tuple[str, ...] = ("inference", "generate", "train")
DEFAULT_MODE = "inference"
#: What the cases of each mode of `MODES` measure: their scenario's description and marker text.
MODE_DOCS: dict[str, str] = {
    "inference": "forward-pass benchmark cases (mode inference)",
    "generate": "text generation cases: time to first token, per-token decode, tokens/s (mode generate)",
    "train": "training-step cases: forward, backward, optimizer step (mode train)",
}
#: The modes whose cases make tokens, so carry `BenchCase.new_tokens`: ``generate``, and those of
#: scenarios registered since with a ``new_tokens`` option (`register_scenario` adds them).
TOKEN_MODES: set[str] = {"generate"}
TRAIN_MODE = "train"
#: Older or alternative spellings -> the mode name.
MODE_ALIASES: Mapping[str, str] = MappingProxyType({"training": TRAIN_MODE, "fine_tuning": TRAIN_MODE})

#: Numeric precisions a case may run in, widest first.
PRECISIONS: tuple[str, ...] = ("fp32", "fp16", "bf16", "int8")
#: Bytes one weight or activation element takes in each precision.
BYTES_PER_PRECISION: Mapping[str, int] = MappingProxyType({"fp32": 4, "fp16": 2, "bf16": 2, "int8": 1})
#: Floating precision -> the torch dtype's name (int8 is a quantization, not a dtype cast).
TORCH_DTYPES: Mapping[str, str] = MappingProxyType({"fp32": "float32", "fp16": "float16", "bf16": "bfloat16"})

#: A record's interference verdict: nothing else held its cores or device while it was timed, or
#: something did (`pytest_hwbench.interference`). Records before schema 3 have none.
NOISE_VERDICTS: tuple[str, ...] = ("clean", "noisy")

#: Where records go when nothing is configured: the MLflow experiment and the local store folder
#: (``sqlite:///mlruns/mlflow.db`` and ``mlruns/hwbench.duckdb``); the URI itself is resolved
#: in one place, `pytest_hwbench.sinks.resolve_tracking_uri`.
DEFAULT_EXPERIMENT = "hwbench"
DEFAULT_STORE_DIR = "mlruns"


def cache_dir(kind: str) -> Path:
    """Where hwbench keeps its `kind` of cache (``onnx``, ``web``, ``reference``...):
    ``$HWBENCH_CACHE_DIR/<kind>``, else ``$XDG_CACHE_HOME/hwbench/<kind>`` (``~/.cache/hwbench``)."""
    base = os.environ.get("HWBENCH_CACHE_DIR")
    if base:
        return Path(base).expanduser() / kind
    return Path(os.environ.get("XDG_CACHE_HOME") or Path.home() / ".cache") / "hwbench" / kind


def normalise_mode(mode: str) -> str:
    """`mode` in its one spelling (``training`` -> ``train``); other values are returned as given."""
    text = str(mode).strip().lower()
    return MODE_ALIASES.get(text, text)


def check_precision(precision: object) -> str:
    """`precision` lower-cased, or ValueError naming the value and the accepted precisions."""
    text = precision.strip().lower() if isinstance(precision, str) else None
    if text not in PRECISIONS:
        raise ValueError(f"precision {precision!r} is not one of {', '.join(PRECISIONS)}")
    return text


#: Measurements of a noisy case after the first, by default (``--hwbench-noise-retries``).
DEFAULT_NOISE_RETRIES = 2
#: Seconds a sink may spend per session on calls that fail or hang (``--hwbench-sink-timeout``).
DEFAULT_DEADLINE_S = 30.0
#: A sink that failed is tried once more after each further this many records.
DEFAULT_RETRY_EVERY = 20
#: The most timed iterations of one case (`TimingConfig.max_iterations`).
MAX_ITERATIONS = 100_000


def bytes_per_element(precision: str) -> int:
    """Bytes per element of `precision` (4 for a name this module does not know)."""
    return BYTES_PER_PRECISION.get(precision, 4)


__all__ = ["BYTES_PER_PRECISION", "DEFAULT_EXPERIMENT", "DEFAULT_MODE", "DEFAULT_NOISE_RETRIES",
           "DEFAULT_STORE_DIR", "MAX_ITERATIONS", "MODES", "MODE_ALIASES", "NOISE_VERDICTS", "PRECISIONS",
           "TOKEN_MODES", "TORCH_DTYPES", "TRAIN_MODE", "bytes_per_element", "cache_dir", "check_precision",
           "normalise_mode"]
