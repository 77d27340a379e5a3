"""``hwsel``: train predictors, select hardware, predict performance, plan distributed training, serve.

Exit codes: 0 ok, 1 failure while running, 2 bad input (a question, a config file or a data
source), 3 a DuckDB file held by another process (as for hwbench). The parser is `hwsel.cli_parser`'s.
"""

from __future__ import annotations

import argparse
import json
import logging
import os
import sys
import warnings
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from pytest_hwbench import facts
from pytest_hwbench.sinks import redact_uri

from .cli_parser import build_parser
from .query import HwselWarning, QuestionError, describe_model, error_text
from .questions import NEXT

EXIT_OK, EXIT_FAILED, EXIT_USAGE, EXIT_STORE = 0, 1, 2, 3


class UsageError(Exception):
    """Bad input from the command line: exit code 2."""


def _json(data: Any) -> str:
    return json.dumps(data, indent=2, sort_keys=False, default=str, allow_nan=False)


def _emit(data: Any, text: str, as_json: bool) -> None:
    print(_json(data) if as_json else text)


def _devices(args: argparse.Namespace) -> str | dict[str, str] | None:
    """--device values as one device name or hardware -> device (the API's `device`)."""
    values = getattr(args, "device", None)
    if not values:
        return None
    named: dict[str, str] = {}
    plain: list[str] = []
    for value in values:
        hw, sep, name = value.partition("=")
        if sep and hw.strip() in facts.fallback_order():
            named[hw.strip()] = name
        else:
            plain.append(value)
    if plain and (named or len(plain) > 1):
        raise UsageError(f"--device {plain[0]!r} names no hardware; with several devices write each as HW=DEVICE, "
                         f"e.g. --device cuda={plain[0]!r}")
    return plain[0] if plain else named


def _predictor(args: argparse.Namespace) -> Any:
    from .predict import Predictor

    return Predictor.load(args.source, tracking_uri=args.tracking_uri, config=args.config, timeout=args.timeout,
                          include_noisy=args.include_noisy)


#: What `hwsel train`'s score is (`hwsel.evaluation.score_oof`); lower is better.
SCORE_METRIC = ("mean |log(predicted / measured)| over held-out folds (batch sizes, models, devices "
                "averaged per scheme); lower is better")


def cmd_train(args: argparse.Namespace) -> int:
    try:
        from .train import train
    except ImportError as exc:
        raise UsageError(f"training needs scikit-learn, optuna and mlflow ({exc}); "
                         "pip install 'pytest-hwbench'") from None
    from .history import Window

    window = Window(since=args.since, sessions=args.sessions)
    result = train(args.source, tracking_uri=args.tracking_uri, trials=args.trials, seed=args.seed,
                   experiment=args.experiment, progress=not args.no_progress, include_noisy=args.include_noisy,
                   timeout=args.timeout, window=window, mirror_file=args.mirror)
    store = redact_uri(result.tracking_uri)  # shown, never with its password
    sources = [redact_uri(str(s)) for s in args.source] if args.source else [store]
    data = {"run_id": result.run_id, "tracking_uri": store, "sources": sources, "records": result.n_records,
            "rows": result.n_rows, "rows_from_records": result.rows_text, "rows_by_device": dict(result.rows_by_device),
            "data_sha256": result.data_digest, "snapshot": str(result.snapshot_path),
            "dropped": dict(result.dropped), "noisy_left_out": result.noisy_left_out, "window": window.text(),
            "mirrored": result.mirrored, "read_s": round(result.read_s, 3),
            "score_metric": SCORE_METRIC,
            "targets": {t: {"model": r.model_name, "version": r.version, "score": r.score,
                            "champion": r.alias_moved, "decision": r.reason} for t, r in result.targets.items()}}
    lines = [f"trained on {result.n_rows} rows from {', '.join(sources)} (run {result.run_id}, store {store})",
             f"  {result.rows_text}" + ("" if window.empty else f" ({window.text()})"),
             "  rows per device: " + ", ".join(f"{k} {v}" for k, v in result.rows_by_device.items())]
    if result.mirrored:
        lines.append(f"  copied {result.mirrored} new record{'s' if result.mirrored != 1 else ''} from MLflow into "
                     "the DuckDB mirror")
    if result.dropped:
        from .data import dropped_text

        lines.append(f"  {dropped_text(dict(result.dropped))}")
    if result.noisy_left_out:
        lines.append(f"  left out {result.noisy_left_out} noisy record{'s' if result.noisy_left_out != 1 else ''} "
                     "(measured on a busy machine; --include-noisy keeps them)")
    for t, r in result.targets.items():
        state = "now @champion" if r.alias_moved else "champion unchanged"
        lines.append(f"  {t:<10} {r.model_name} v{r.version}: score {r.score:.4g} ({SCORE_METRIC}), {state} "
                     f"({r.reason})")
    _emit(data, "\n".join(lines), args.json)
    return EXIT_OK


def _fmt_pred(hw: str, p: Any, mark: str = "") -> str:
    """Two lines: the numbers and where they came from (and `mark`), then device and backend."""
    lo, hi = p.interval
    return (f"  {hw:<9} {p.latency_ms:>10.4g} ms  [{lo:.4g}, {hi:.4g}]  {p.throughput:>10.4g} items/s  "
            f"{p.memory_mb:>9.4g} MiB  {p.source}" + (f" ({p.detail})" if p.detail else "") + mark
            + f"\n  {'':<9} device: {p.device_text()}; backend: {p.backend}")


def _absent_here(hardware: str, prediction: Any) -> str:
    """``not on this machine: roofline for h100`` when this machine lacks `hardware`, else ""."""
    from .ranking import probed_target

    target = probed_target(hardware)
    if target is None or target.available:
        return ""
    device = prediction.device or prediction.device_spec or f"a generic {hardware}"
    return f"not on this machine: {prediction.source} for {device}"


def _tie_line(tie: Sequence[str]) -> str:
    return (f"tie:       {', '.join(tie)} (latency intervals overlap; ranked by memory, then measured energy "
            "per item)")


def cmd_select(args: argparse.Namespace) -> int:
    from .select import select_hardware

    model = describe_model(args.model, config=args.model_config, sequence_length=args.sequence_length)
    rec = select_hardware(model, batch_size=args.batch_size, mode=args.mode, precision=args.precision,
                          available_hardware=args.available_hardware, task_type=args.task_type, backend=args.backend,
                          device=_devices(args), predictor=_predictor(args))
    absent = {hw: _absent_here(hw, s.prediction) for hw, s in rec.all_scores.items() if s.prediction is not None}

    def named(hw: str | None) -> str:
        return f"{hw} ({absent[hw]})" if hw and absent.get(hw) else (hw or "none compatible")

    lines = [f"{rec.model_name} ({rec.model_family}, {rec.model_size / 1e6:.4g}M params), batch {rec.batch_size}, "
             f"{rec.precision}, {rec.mode}",
             f"primary:   {named(rec.primary_recommendation)}",
             f"fallbacks: {', '.join(named(hw) for hw in rec.fallback_options) or '-'}"]
    if rec.tie:
        lines.insert(1, _tie_line(rec.tie))
    for hw, s in rec.all_scores.items():
        if s.prediction is not None:
            mark = f"score {s.score:.3f}" if s.compatible else f"incompatible: {s.reason}"
            lines.append(_fmt_pred(hw, s.prediction, f"  {mark}" + (f"  [{absent[hw]}]" if absent.get(hw) else "")))
    lines.append(rec.explanation)
    _emit(rec.to_dict(), "\n".join(lines), args.json)
    return EXIT_OK


def cmd_precision(args: argparse.Namespace) -> int:
    from .select import select_precision

    model = describe_model(args.model, config=args.model_config, sequence_length=args.sequence_length)
    device = _devices(args)
    choice = select_precision(model, args.hardware, batch_size=args.batch_size, mode=args.mode,
                              precisions=args.precisions, backend=args.backend,
                              device=device.get(args.hardware) if isinstance(device, dict) else device,
                              predictor=_predictor(args))
    absent = _absent_here(choice.hardware, next(iter(choice.predictions.values())))
    lines = [f"{choice.model_name} on {choice.hardware}" + (f" ({absent})" if absent else "")
             + f", batch {choice.batch_size}, {choice.mode}, backend {choice.backend}",
             f"primary:   {choice.primary or 'no precision runs here'}",
             f"order:     {', '.join(choice.ranked) or '-'}"]
    if choice.tie:
        lines.insert(1, _tie_line(choice.tie))
    for precision, prediction in choice.predictions.items():
        why = choice.incompatible.get(precision)
        lines.append(_fmt_pred(precision, prediction, f"  incompatible: {why}" if why else ""))
    lines.append(choice.explanation)
    _emit(choice.to_dict(), "\n".join(lines), args.json)
    return EXIT_OK


def cmd_predict(args: argparse.Namespace) -> int:
    from .performance import prediction_report

    predictor = _predictor(args)
    model = describe_model(args.model, config=args.model_config, sequence_length=args.sequence_length)
    preds = predictor.predict(model, args.hardware, batch_size=args.batch_size, precision=args.precision,
                              mode=args.mode, backend=args.backend, device=_devices(args))
    data = prediction_report(model, preds, batch_size=args.batch_size, precision=args.precision, mode=args.mode)
    lines = [f"{model.name}, batch {args.batch_size}, {args.precision}, {args.mode}"
             + (f", backend {data['backend']}:" if data["backend"] else ":")]
    lines += [_fmt_pred(hw, p) for hw, p in preds.items()]
    _emit(data, "\n".join(lines), args.json)
    return EXIT_OK


def _devices_text(devices: dict[str, Any]) -> str:
    from .query import describe_device

    return "\n".join(f"  {hw:<9} device: {describe_device(hw, d['device'], d['device_source'], d['device_spec'])}; "
                     f"backend: {d['backend']}" for hw, d in devices.items())


def _write_grid(data: dict[str, Any], args: argparse.Namespace, what: str) -> int:
    """Write a map or matrix to --output (``-``: stdout); say `what` was written where, and to which
    devices it answers."""
    text = _json(data)
    if args.output == "-":
        print(text)
        return EXIT_OK
    path = Path(args.output)
    try:
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(text + "\n")
    except OSError as exc:
        raise UsageError(f"cannot write {args.output}: {exc.strerror or exc}; pass another --output") from None
    print(text if args.json else f"{what} written to {path}\n{_devices_text(data['devices'])}")
    return EXIT_OK


def cmd_map(args: argparse.Namespace) -> int:
    from .select import selection_map

    data = selection_map(args.model_families, args.batch_sizes, args.hardware_platforms, args.modes, args.precision,
                         device=_devices(args), backend=args.backend, predictor=_predictor(args))
    return _write_grid(data, args, f"selection map for {len(data['model_families'])} families x "
                       f"{len(data['batch_sizes'])} batch sizes x {len(data['modes'])} modes")


def cmd_matrix(args: argparse.Namespace) -> int:
    from .performance import prediction_matrix

    data = prediction_matrix(args.models, args.hardware_platforms, args.batch_sizes, args.precisions, args.mode, args.backend,
                             device=_devices(args), predictor=_predictor(args))
    sources = ", ".join(f"{k} {v}" for k, v in data["sources"].items())
    return _write_grid(data, args, f"{data['configurations']} predictions ({sources})")


def cmd_distributed(args: argparse.Namespace) -> int:
    from .distributed import distributed_training_config

    plan = distributed_training_config(describe_model(args.model, config=args.model_config), args.gpu_count,
                                       args.batch_size, args.max_memory_gb,
                                       precision=args.precision)
    m = plan.estimated_memory
    lines = [f"strategy: {plan.distributed_strategy} on {plan.gpu_count} GPU(s)"
             + (f" ({plan.sharding_strategy})" if plan.sharding_strategy else ""),
             f"batch: {plan.micro_batch_size} per GPU x {plan.gradient_accumulation_steps} accumulation step(s) "
             f"x {plan.gpu_count} GPU(s) = {plan.global_batch_size} per optimizer step",
             f"precision: {plan.precision}{' (mixed)' if plan.mixed_precision else ''}; activation checkpointing: "
             f"{'on' if plan.activation_checkpointing else 'off'}; CPU offload: {'on' if plan.cpu_offload else 'off'}",
             f"memory per replica: parameters {m.parameters_gb:.3g} GiB, gradients {m.gradients_gb:.3g}, optimizer "
             f"{m.optimizer_gb:.3g}, activations {m.activations_gb:.3g}; per GPU {m.per_gpu_gb:.3g} of "
             f"{plan.max_memory_gb:g} GiB",
             plan.explanation]
    _emit(plan.to_dict(), "\n".join(lines), args.json)
    return EXIT_OK if plan.fits else EXIT_FAILED


def cmd_analyze(args: argparse.Namespace) -> int:
    from .select import analyze_model

    data = analyze_model(describe_model(args.model, config=args.model_config), args.batch_sizes,
                         args.hardware_platforms, args.modes, args.precision,
                         device=_devices(args), backend=args.backend, predictor=_predictor(args))
    lines = [f"{data['model_name']} ({data['model_family']})", _devices_text(data["devices"])]
    for mode in args.modes:
        for b, rec in data[mode]["recommendations"].items():
            lines.append(f"  {mode:<9} batch {b:>4}: {rec['primary']} (fallbacks {', '.join(rec['fallbacks']) or '-'};"
                         f" {rec['source']})")
    _emit(data, "\n".join(lines), args.json)
    return EXIT_OK


def cmd_next(args: argparse.Namespace) -> int:
    from .data import describe_sources
    from .next import suggest_measurements

    print(f"hwsel next: reading the records of {describe_sources(args.source)} and fitting {args.ensemble} latency "
          "models ...",
          file=sys.stderr, flush=True)
    picks = suggest_measurements(**{f.name: getattr(args, f.name) for f in NEXT}, source=args.source,
                                 timeout=args.timeout)
    if len(picks) < args.budget:
        print(f"hwsel next: only {len(picks)} configuration(s) of that grid are not measured yet", file=sys.stderr)
    lines = [line for i, s in enumerate(picks, 1)
             for line in (f"# {i}. {s.model} on {s.hardware}" + (f" ({s.device})" if s.device else "")
                          + f", {s.backend} {s.precision}, batch {s.batch_size}, {s.mode}: {s.reason()}", s.command)]
    data = {"budget": args.budget, "sources": None if args.source is None else [redact_uri(str(x)) for x in args.source],
            "suggestions": [s.to_dict() for s in picks]}
    _emit(data, "\n".join(lines), args.json)
    return EXIT_OK


def _check_listen(host: str, port: int) -> None:
    """UsageError naming the option unless `host`:`port` can be listened on now (before the
    seconds that building the app takes)."""
    import socket

    if not host.strip():
        raise UsageError("--host is empty, which would listen on every interface; give 127.0.0.1 (this machine "
                         "only) or 0.0.0.0 (every interface)")
    try:
        infos = socket.getaddrinfo(host, port, type=socket.SOCK_STREAM)
    except socket.gaierror as exc:
        raise UsageError(f"--host {host!r}: not an address of this machine ({exc.strerror}); give 127.0.0.1 "
                         "or 0.0.0.0") from None
    family, kind, proto, _, address = infos[0]
    with socket.socket(family, kind, proto) as probe:
        probe.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)  # as uvicorn binds
        try:
            probe.bind(address)
        except OSError as exc:
            raise UsageError(f"cannot listen on {host}:{port}: {exc.strerror}; pass another --port (or --host), "
                             "or stop what holds it") from None


def cmd_serve(args: argparse.Namespace) -> int:
    try:
        import uvicorn
    except ImportError:
        raise UsageError("serving needs uvicorn and fastapi: pip install 'pytest-hwbench[serve]'") from None
    from .app import create_app

    _check_listen(args.host, args.port)
    app = create_app(source=args.source, tracking_uri=args.tracking_uri, config=args.config, timeout=args.timeout,
                     include_noisy=args.include_noisy)
    uvicorn.run(app, host=args.host, port=args.port, log_level=args.log_level)
    return EXIT_OK


COMMANDS = {"train": cmd_train, "select": cmd_select, "precision": cmd_precision, "predict": cmd_predict, "map": cmd_map, "matrix": cmd_matrix,
            "distributed": cmd_distributed, "analyze": cmd_analyze, "next": cmd_next,
            "serve": cmd_serve}


class _RedactingFormatter(logging.Formatter):
    """A log line (traceback included) with every URI's password masked (`redact_uri`)."""

    def format(self, record: logging.LogRecord) -> str:
        return redact_uri(super().format(record))


def _redact_output() -> None:
    """Every log line and warning this process prints goes through `redact_uri`: MLflow
    and our own layers quote the tracking URI they were given, password and all."""
    for handler in logging.getLogger().handlers:
        shape = handler.formatter
        if shape is None or type(shape) is logging.Formatter:  # ours (basicConfig's); leave others' alone
            handler.setFormatter(_RedactingFormatter(shape._fmt if shape else None, shape.datefmt if shape else None))
    shown = warnings.formatwarning
    if not getattr(shown, "_hwsel_redacts", False):
        def formatwarning(message: Warning | str, category: type[Warning], filename: str, lineno: int,
                          line: str | None = None) -> str:
            if issubclass(category, HwselWarning):  # ours say what and why: the line that warned says nothing
                return redact_uri(f"hwsel: warning: {message}\n")
            return redact_uri(shown(message, category, filename, lineno, line))

        formatwarning._hwsel_redacts = True  # type: ignore[attr-defined]
        warnings.formatwarning = formatwarning


def main(argv: Sequence[str] | None = None) -> int:
    """Entry point of ``hwsel``; returns the exit code."""
    parser = build_parser()
    args = parser.parse_args(argv)
    level = logging.WARNING - 10 * min(args.verbose, 2)
    logging.basicConfig(level=level, format="%(levelname)s %(name)s: %(message)s")
    _redact_output()
    if args.verbose == 0:
        # our warnings say which layer is off and why; once is enough
        warnings.filterwarnings("once")
        # MLflow draws a progress bar per downloaded model; noise on a terminal that asked for JSON
        os.environ.setdefault("MLFLOW_ENABLE_ARTIFACTS_PROGRESS_BAR", "false")
    try:
        return COMMANDS[args.command](args)
    except (QuestionError, UsageError, ValueError, LookupError, FileNotFoundError) as exc:
        # a question hwsel cannot answer as asked (`hwsel.query.QuestionError`), bad settings or data
        print(f"hwsel {args.command}: error: {redact_uri(error_text(exc))}", file=sys.stderr)
        return EXIT_USAGE
    except KeyboardInterrupt:
        return 130
    except Exception as exc:  # a failure while running: say what, exit 1
        from pytest_hwbench.sinks import DuckDBFileError

        if isinstance(exc, DuckDBFileError):
            # as for hwbench: a corrupt records file is bad input (the message says how to rebuild
            # it), a locked one a store to ask again later
            print(f"hwsel {args.command}: error: {redact_uri(str(exc))}", file=sys.stderr)
            return EXIT_USAGE if exc.kind == "corrupt" else EXIT_STORE
        if args.verbose:
            raise
        print(f"hwsel {args.command}: failed: {redact_uri(f'{type(exc).__name__}: {exc}')} "
              "(run with -v for the traceback)", file=sys.stderr)
        return EXIT_FAILED


__all__ = ["main"]
