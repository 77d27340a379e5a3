"""``hwsel``'s argument parser: `build_parser`, one argparse subcommand per hwsel command and the
options they share; `hwsel.cli` runs the commands it parses.
"""

from __future__ import annotations

import argparse
import datetime as _dt
import math
from collections.abc import Callable
from typing import Any

from pytest_hwbench import facts

from . import questions
from ._reach import DEFAULT_TIMEOUT_S
from .questions import Field


def _checked(f: Field) -> Callable[[str], Any]:
    """The argparse type of field `f`: its type, within its bounds."""
    low = f"> {f.gt:g}" if f.gt is not None else f">= {f.ge:g}" if f.ge is not None else ""
    want = " ".join(x for x in ("a whole number" if f.type is int else "a number", low,
                                 f"and <= {f.le:g}" if f.le is not None and low else "") if x)

    def parse(text: str) -> Any:
        try:
            value = f.type(text)
        except ValueError:
            raise argparse.ArgumentTypeError(f"expected {want}, got {text!r}") from None
        if (not math.isfinite(value) or (f.ge is not None and value < f.ge) or (f.gt is not None and value <= f.gt)
                or (f.le is not None and value > f.le)):
            raise argparse.ArgumentTypeError(f"expected {want}, got {text!r}")
        return value
    return parse


_positive_int = _checked(Field("", "", int, None, "", ge=1))
_positive_float = _checked(Field("", "", float, None, "", gt=0))


def add_fields(p: argparse.ArgumentParser, fields: tuple[Field, ...]) -> None:
    """One option per field of a question (`hwsel.questions`), its help, type and bounds the field's."""
    for f in fields:
        shown = f.default if f.default is None or not isinstance(f.default, tuple) else " ".join(map(str, f.default))
        p.add_argument(f.flag, dest=f.name, nargs="+" if f.many else None, metavar=f.flag[2:].upper().replace("-", "_"),
                       type=None if f.type is str else _checked(f),
                       default=list(f.default) if isinstance(f.default, tuple) else f.default,
                       help=f.help + (f" (one of {', '.join(f.choices)})" if f.choices else "")
                       + ("" if shown is None else f" (default {shown})"))


def _source_option(p: argparse.ArgumentParser | argparse._ArgumentGroup) -> None:
    p.add_argument("--source", action="extend", nargs="+", default=None, metavar="SOURCE",
                   help="benchmark data: MLflow tracking URI, .duckdb, .parquet or .jsonl records file; "
                        "several (repeated or listed) are read as one (default: $MLFLOW_TRACKING_URI or "
                        "mlruns/ here, if present)")


def _since(text: str) -> _dt.datetime:
    from .history import parse_since

    try:
        return parse_since(text)
    except ValueError as exc:
        raise argparse.ArgumentTypeError(str(exc)) from None


def _timeout_option(p: argparse.ArgumentParser | argparse._ArgumentGroup, what: str) -> None:
    p.add_argument("--timeout", type=_positive_float, default=DEFAULT_TIMEOUT_S, metavar="SECONDS",
                   help=f"seconds to wait for {what} (default {DEFAULT_TIMEOUT_S:g})")


def _store_options(p: argparse.ArgumentParser) -> None:
    g = p.add_argument_group("where data and models come from")
    _source_option(g)
    g.add_argument("--tracking-uri", default=None,
                   help="MLflow store holding the registered models (default: $MLFLOW_TRACKING_URI or "
                        "mlruns/mlflow.db)")
    _timeout_option(g, "the records and for the registered models each; a store that does not answer in time is "
                       "left out and the other layers answer")
    g.add_argument("--include-noisy", action="store_true",
                   help="also answer from records measured on a busy machine (left out by default; an answer says "
                        "which records of its case were left out and why)")
    g.add_argument("--selection-config", dest="config", default=None, metavar="FILE",
                   help="selection settings (weights, hardware preferences, thresholds), TOML or JSON "
                        "(default: $HWSEL_CONFIG, else built-in)")


def _model_options(p: argparse.ArgumentParser) -> None:
    p.add_argument("--model", default=None,
                   help="zoo name or hub-style alias (bert-base-uncased, gpt2, ...); with --config, the name to "
                        "give that model (default: the config's own)")
    p.add_argument("--config", dest="model_config", default=None, metavar="PATH",
                   help="a model outside the zoo, no --model needed: a Hugging Face config.json, a directory "
                        "holding one, or a model-set TOML/JSON")


def _answer_options(p: argparse.ArgumentParser, *, hardware_help: str | None = None,
                    json_help: str = "print JSON") -> None:
    """What a question about hardware takes besides its fields: the backend, the device, --json and the store."""
    add_fields(p, (questions.BACKEND,))
    if hardware_help:
        p.add_argument("--hardware", nargs="+", default=None, metavar="HW", help=hardware_help)
    p.add_argument("--device", action="append", default=None, metavar="[HW=]DEVICE",
                   help="the device asked about: a device name ('NVIDIA H100 80GB HBM3') or a spec name (h100, "
                        "a100, l4, ...) for the one --hardware target, or HW=DEVICE per target (repeatable); "
                        "default: the device detected here, else the one most benchmark records of that "
                        "hardware hold")
    p.add_argument("--json", action="store_true", help=json_help)
    _store_options(p)


def build_parser() -> argparse.ArgumentParser:
    """The argument parser (exposed for docs and tests)."""
    parser = argparse.ArgumentParser(
        prog="hwsel",
        description="Hardware selection and performance prediction from hwbench runs. Predictions come "
                    "from measured data, then registered models, then a roofline estimate, then rules; "
                    "each answer says which.")
    parser.add_argument("-v", "--verbose", action="count", default=0, help="more logging (-vv for debug)")
    sub = parser.add_subparsers(dest="command", metavar="COMMAND", required=True)

    p = sub.add_parser("train", help="train and register the latency/throughput/memory predictors",
                       description="Train Optuna-tuned scikit-learn predictors on the benchmark runs, "
                                   "register them in the MLflow Model Registry and move @champion when "
                                   "a new version wins.")
    p.add_argument("--source", action="extend", nargs="+", default=None, metavar="SOURCE",
                   help="benchmark data: MLflow URI, .duckdb, .parquet or .jsonl records file (e.g. a GPU host's "
                        "spool); repeat or list several to train on their union, e.g. --source "
                        "benchmarks/data/cpu_runs.parquet gpu_records.jsonl (default: the tracking store)")
    p.add_argument("--tracking-uri", default=None, help="MLflow store for the training run and the registry")
    p.add_argument("--trials", type=_positive_int, default=30, help="Optuna trials per target (default 30)")
    p.add_argument("--seed", type=int, default=0, help="random seed (default 0)")
    p.add_argument("--experiment", default="hwbench", help="MLflow experiment of the benchmark runs")
    p.add_argument("--no-progress", action="store_true", help="no progress bar")
    p.add_argument("--include-noisy", action="store_true",
                   help="also train on records measured on a busy machine (left out by default, and counted)")
    _timeout_option(p, "the records (a tracking server must answer its /health within 2 s); then training stops")
    p.add_argument("--since", type=_since, default=None, metavar="DATE",
                   help="learn from records created at or after DATE only (YYYY-MM-DD, midnight UTC, or an ISO "
                        "date-time); needs DuckDB or MLflow sources")
    p.add_argument("--sessions", type=_positive_int, default=None, metavar="N",
                   help="learn from the newest N sessions of each configuration only; needs DuckDB or MLflow "
                        "sources")
    p.add_argument("--mirror", default=None, metavar="FILE",
                   help="DuckDB file that MLflow sources are copied into before training, incrementally (only "
                        "sessions it lacks are fetched: a nightly training reads one night); default: one file per "
                        "store and experiment under hwsel-mirrors/ next to the training snapshots")
    p.add_argument("--json", action="store_true", help="print JSON")

    p = sub.add_parser("select", help="recommend hardware for a model",
                       description="Score each hardware target on predicted latency, throughput, memory "
                                   "and compatibility; print the best, the fallbacks and why.")
    _model_options(p)
    add_fields(p, questions.SELECT)
    _answer_options(p)

    p = sub.add_parser("precision", help="choose the precision for a model on one target",
                       description="Predict each precision on one target and choose: the fastest, or, where "
                                   "the difference lies inside the latency intervals, a tie ranked by memory, "
                                   "then measured energy per item.")
    _model_options(p)
    add_fields(p, questions.PRECISION_CHOICE)
    _answer_options(p)

    p = sub.add_parser("predict", help="predict latency, throughput and memory",
                       description="Predict performance of one case on each hardware target, with the "
                                   "source of each prediction and a latency interval.")
    _model_options(p)
    add_fields(p, questions.PREDICT)
    _answer_options(p, hardware_help=f"targets (default: all known: {', '.join(facts.fallback_order())})")

    p = sub.add_parser("map", help="write a selection map (family x size x batch x mode)",
                       description="Recommendations for every model family, size category, batch size and "
                                   "mode, as JSON.")
    p.add_argument("--output", default="selection_map.json", help="JSON file to write ('-' for stdout)")
    add_fields(p, questions.MAP)
    _answer_options(p, json_help="print the map as JSON as well")

    p = sub.add_parser("matrix", help="write a prediction matrix (model x hardware x batch x precision)",
                       description="Predicted throughput, latency and memory for every combination, as JSON.")
    p.add_argument("--output", default="matrix.json", help="JSON file to write ('-' for stdout)")
    add_fields(p, questions.MATRIX)
    _answer_options(p, json_help="print the matrix as JSON as well")

    p = sub.add_parser("distributed", help="plan distributed training (DDP/FSDP, memory)",
                       description="Choose DDP or FSDP and, when memory is short, activation checkpointing, "
                                   "gradient accumulation and CPU offload; print the memory estimate.")
    _model_options(p)
    add_fields(p, questions.DISTRIBUTED)
    p.add_argument("--json", action="store_true", help="print JSON")

    p = sub.add_parser("analyze", help="performance of one model across hardware and batch sizes")
    _model_options(p)
    add_fields(p, questions.ANALYZE)
    _answer_options(p)

    p = sub.add_parser("next", help="which configurations to measure next, as bench-suite command lines",
                       description="Rank the configurations not measured yet (models, hardware, backends and "
                                   "precisions of the records plus zoo models of the same tiers, at the batch "
                                   "sizes the records hold) by how much the latency predictors disagree about "
                                   "them (an ensemble fit on bootstrap resamples over models), spread the picks "
                                   "over models and runtimes, and print each as a runnable pytest command line "
                                   "after a comment saying why. The output runs as a shell script.")
    add_fields(p, questions.NEXT)
    _source_option(p)
    _timeout_option(p, "the records (a tracking server must answer its /health within 2 s); then it stops")
    p.add_argument("--json", action="store_true", help="print JSON")

    p = sub.add_parser("serve", help="serve the REST API (FastAPI + uvicorn)",
                       description="Serve /health, /hardware/*, /performance/*, /training/distributed and "
                                   "/analysis/model. Binds 127.0.0.1 unless --host says otherwise.")
    p.add_argument("--host", default="127.0.0.1", help="address to bind (default 127.0.0.1: this machine only)")
    p.add_argument("--port", type=_checked(Field("", "", int, None, "", ge=1, le=65535)), default=8000,
                   help="port (default 8000)")
    p.add_argument("--log-level", default="info", choices=["critical", "error", "warning", "info", "debug"])
    _store_options(p)
    return parser


__all__ = ["add_fields", "build_parser"]
