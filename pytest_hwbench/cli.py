"""The `hwbench` command line: detect hardware, list models, and work with stored results.

Exit codes: 0 success, 1 a check failed (e.g. `compare` found a regression), 2 bad usage or
input, 3 a store could not be reached.
"""

from __future__ import annotations

import argparse
import json
import sys
from collections.abc import Callable, Sequence
from typing import TYPE_CHECKING

from .sinks.redact import redact_uri

if TYPE_CHECKING:
    from .plugin import TrackingConfig

EXIT_OK, EXIT_CHECK_FAILED, EXIT_USAGE, EXIT_STORE = 0, 1, 2, 3

Command = Callable[[argparse.Namespace], int]
_COMMANDS: dict[str, tuple[Command, Callable[[argparse.ArgumentParser], None], str]] = {}


def register_command(name: str, help: str, add_args: Callable[[argparse.ArgumentParser], None],
                     run: Command) -> None:
    """Add a subcommand: `add_args` fills its parser, `run` executes it and returns the exit code."""
    _COMMANDS[name] = (run, add_args, help)


def _table(rows: Sequence[Sequence[str]], header: Sequence[str]) -> str:
    widths = [max(len(str(r[i])) for r in [header, *rows]) for i in range(len(header))]
    lines = ["  ".join(str(c).ljust(w) for c, w in zip(header, widths, strict=True)).rstrip()]
    lines.append("  ".join("-" * w for w in widths))
    lines += ["  ".join(str(c).ljust(w) for c, w in zip(row, widths, strict=True)).rstrip() for row in rows]
    return "\n".join(lines)


# --- detect -----------------------------------------------------------------------------------

def _detect_args(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--json", action="store_true", help="print JSON (one entry per hardware target)")


def _detect(args: argparse.Namespace) -> int:
    from .hardware import detect_hardware

    info = detect_hardware()
    if args.json:
        print(json.dumps(info.to_dict(), indent=2, default=str))
        return EXIT_OK
    rows = []
    for target in info.targets.values():
        devices = "; ".join(d.name for d in target.devices) or "-"
        rows.append([target.name, "yes" if target.available else "no", ",".join(target.precisions) or "-",
                     devices if target.available else target.reason])
    print(_table(rows, ["target", "available", "precisions", "devices / reason"]))
    return EXIT_OK


register_command("detect", "what hardware and runtimes this machine has", _detect_args, _detect)


# --- models -----------------------------------------------------------------------------------

def _models_args(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--json", action="store_true", help="print JSON")
    parser.add_argument("--model-set", action="append", default=[], metavar="PATH",
                        help="also list models from a TOML/JSON model-set file or a config.json directory")


def _models(args: argparse.Namespace) -> int:
    from .models import MODELS, load_model_set, register_model

    for path in args.model_set:
        for spec in load_model_set(path):
            register_model(spec, replace_existing=True)
    rows = []
    for spec in MODELS.values():
        arch = spec.architecture
        rows.append({"name": spec.name, "family": spec.family, "tier": spec.tier, "config": spec.config_class,
                     "params_m": round(arch.param_count / 1e6, 2), "gflops_per_item": round(arch.flops_per_item / 1e9, 3)})
    if args.json:
        print(json.dumps(rows, indent=2))
    else:
        print(_table([[str(v) for v in r.values()] for r in rows], list(rows[0])))
    return EXIT_OK


register_command("models", "list the model zoo (params and FLOPs per item, from config)", _models_args, _models)


# --- stored results ---------------------------------------------------------------------------

def _store_args(parser: argparse.ArgumentParser, *, mlflow: bool = False) -> None:
    parser.add_argument("--store", default="mlruns", metavar="DIR",
                        help="local store holding the spool and default files (default: ./mlruns)")
    parser.add_argument("--db", default=None, metavar="PATH", help="DuckDB file (default: STORE/hwbench.duckdb)")
    if mlflow:
        parser.add_argument("--mlflow-uri", default=None, metavar="URI",
                            help="MLflow tracking URI (default: $MLFLOW_TRACKING_URI, else sqlite:///STORE/mlflow.db)")
        parser.add_argument("--experiment", default=None, metavar="NAME",
                            help="MLflow experiment (default: $HWBENCH_EXPERIMENT, else hwbench)")


def _tracking(args: argparse.Namespace) -> TrackingConfig:
    from pathlib import Path

    from .plugin import TrackingConfig

    return TrackingConfig.resolve(args.store, getattr(args, "mlflow_uri", None), args.db,
                                  getattr(args, "experiment", None), Path.cwd())


def _db(args: argparse.Namespace) -> str:
    path = _tracking(args).db_path
    if not path.exists():
        raise FileNotFoundError(f"no DuckDB file at {path}; run the benchmarks first or pass --db PATH")
    return str(path)


def _session_id(db: str, wanted: str | None) -> str:
    """Resolve 'latest', a full id or a unique prefix against the sessions in `db`."""
    from .sinks import list_sessions

    ids = list(list_sessions(db)["session_id"])
    if not ids:
        raise ValueError(f"{db} holds no sessions; run the benchmarks first")
    if wanted in (None, "latest"):
        return str(ids[0])
    matches = [i for i in ids if i.startswith(wanted)]
    if len(matches) != 1:
        what = "matches no" if not matches else f"matches {len(matches)}"
        raise ValueError(f"session {wanted!r} {what} session in {db}; `hwbench sessions` lists them")
    return str(matches[0])


def _replay(args: argparse.Namespace) -> int:
    from .sinks import DuckDBSink, MlflowSink, Spool, replay

    cfg = _tracking(args)
    spool = Spool(cfg.spool_dir)
    if not spool.records_path.exists():
        print(f"hwbench replay: nothing spooled in {cfg.spool_dir}")
        return EXIT_OK
    sinks = [MlflowSink(cfg.mlflow_uri, cfg.experiment), DuckDBSink(cfg.db_path)]
    print(f"hwbench replay: {spool.records_path} -> MLflow {redact_uri(cfg.mlflow_uri)}, DuckDB {cfg.db_path}",
          flush=True)
    try:
        counts = replay(spool, sinks)
    except Exception as exc:  # a sink that is still down
        print(f"hwbench replay: error: {redact_uri(f'{type(exc).__name__}: {exc}')}; records stay spooled, "
              "try again later", file=sys.stderr)
        return EXIT_STORE
    for name, count in counts.items():
        print(f"  {name}: {count} records written")
    return EXIT_OK


def _sessions(args: argparse.Namespace) -> int:
    from .sinks import list_sessions

    frame = list_sessions(_db(args))
    rows = [[str(r.session_id), str(r.started_at)[:19], str(r.host), str(r.runner_label), str(r.records),
             str(r.git_commit)[:10]] for r in frame.itertuples()]
    print(_table(rows, ["session", "started", "host", "runner", "records", "commit"]))
    return EXIT_OK


def _report_args(parser: argparse.ArgumentParser) -> None:
    _store_args(parser)
    parser.add_argument("--session", default="latest", metavar="ID",
                        help="session id or unique prefix, 'latest' (default) or 'all'")
    parser.add_argument("--out", default="hwbench-report", metavar="DIR", help="output directory")


def _report(args: argparse.Namespace) -> int:
    import platform
    from pathlib import Path

    from .hardware import detect_hardware
    from .report import write_report
    from .sinks import load_results

    db = _db(args)
    session = None if args.session == "all" else _session_id(db, args.session)
    results = load_results(db, session)
    system = {"host": platform.node(), "python": platform.python_version(), "platform": platform.platform()}
    paths = write_report(results, Path(args.out), system_info=system, hardware=detect_hardware().to_dict(),
                         session_id=session)
    print(f"hwbench report: {paths.markdown}, {paths.compatibility}, {len(paths.plots)} plots in {paths.out_dir}")
    return EXIT_OK


def _compare_args(parser: argparse.ArgumentParser) -> None:
    _store_args(parser)
    parser.add_argument("session_a", metavar="SESSION_A", help="baseline session (id, prefix or 'latest')")
    parser.add_argument("session_b", metavar="SESSION_B", help="candidate session (id, prefix or 'latest')")
    parser.add_argument("--threshold", type=float, default=0.10, help="relative change that counts (default 0.10)")
    parser.add_argument("--alpha", type=float, default=0.05, help="Mann-Whitney U significance (default 0.05)")


def _compare(args: argparse.Namespace) -> int:
    from .compare import compare_sessions, format_table
    from .sinks import load_results, load_timings

    db = _db(args)
    frames, timings = [], []
    for wanted in (args.session_a, args.session_b):
        frame = load_results(db, _session_id(db, wanted))
        frames.append(frame)
        timings.append(load_timings(db, list(frame["record_id"])))
    comparisons = compare_sessions(frames[0], frames[1], timings[0], timings[1],
                                   threshold=args.threshold, alpha=args.alpha)
    print(format_table(comparisons))
    return EXIT_CHECK_FAILED if any(c.verdict == "regression" for c in comparisons) else EXIT_OK


def _export_args(parser: argparse.ArgumentParser) -> None:
    _store_args(parser)
    parser.add_argument("--parquet", required=True, metavar="DIR", help="write one Parquet file per table here")


def _export(args: argparse.Namespace) -> int:
    from .sinks import export_parquet

    for path in export_parquet(_db(args), args.parquet):
        print(path)
    return EXIT_OK


def _import_mlflow(args: argparse.Namespace) -> int:
    from .sinks import MlflowStoreError, import_mlflow

    cfg = _tracking(args)
    print(f"hwbench import-mlflow: {redact_uri(cfg.mlflow_uri)} (experiment {cfg.experiment!r}) -> {cfg.db_path}",
          flush=True)
    from mlflow.exceptions import MlflowException

    try:
        count = import_mlflow(cfg.mlflow_uri, cfg.experiment, cfg.db_path)
    except (OSError, MlflowException, MlflowStoreError) as exc:  # the store is down or refuses us
        print(f"hwbench import-mlflow: error: {redact_uri(f'{type(exc).__name__}: {exc}')}", file=sys.stderr)
        return EXIT_STORE
    print(f"  {count} records imported")
    return EXIT_OK


register_command("replay", "push spooled records that a sink could not take (idempotent)",
                 lambda p: _store_args(p, mlflow=True), _replay)
register_command("sessions", "list the sessions in the DuckDB file", _store_args, _sessions)
register_command("report", "Markdown report, PNG plots and compatibility matrix from DuckDB", _report_args, _report)
register_command("compare", "regressions between two sessions (exit 1 on a significant one)", _compare_args,
                 _compare)
register_command("export", "export the DuckDB tables to Parquet", _export_args, _export)
register_command("import-mlflow", "rebuild the DuckDB results from an MLflow server's runs",
                 lambda p: _store_args(p, mlflow=True), _import_mlflow)


def build_parser() -> argparse.ArgumentParser:
    """The argument parser with every registered subcommand."""
    parser = argparse.ArgumentParser(prog="hwbench", description=__doc__.splitlines()[0],
                                     epilog=__doc__.split("\n\n", 1)[1].strip())
    sub = parser.add_subparsers(dest="command", required=True, metavar="COMMAND")
    for name, (_, add_args, help_text) in _COMMANDS.items():
        add_args(sub.add_parser(name, help=help_text, description=help_text))
    return parser


def main(argv: Sequence[str] | None = None) -> int:
    """Entry point of the `hwbench` console script."""
    parser = build_parser()
    args = parser.parse_args(argv)
    run = _COMMANDS[args.command][0]
    try:
        return run(args)
    except (ValueError, KeyError, FileNotFoundError) as exc:
        message = exc.args[0] if isinstance(exc, KeyError) and exc.args else str(exc)
        print(f"hwbench {args.command}: error: {redact_uri(message)}", file=sys.stderr)
        return EXIT_USAGE


if __name__ == "__main__":
    sys.exit(main())
