"""The `hwbench` command line: detect hardware, list models, and work with stored results.

Exit codes: 0 success, 1 a check failed (e.g. `compare` found a regression), 2 bad usage or
input (also a corrupt DuckDB file: move it aside and rebuild it with `hwbench replay --sinks duckdb
--move-corrupt`), 3 a store could not be reached (also a DuckDB file another process holds).
"""

from __future__ import annotations

import argparse
import json
import sys
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import TYPE_CHECKING

from .sinks.redact import redact_uri

if TYPE_CHECKING:
    from .record import BenchmarkRecord
    from .sinks.recording import TrackingConfig

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

    from .sinks.recording import TrackingConfig

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


#: Sinks `hwbench replay` knows, in the order it replays them.
REPLAY_SINKS = ("mlflow", "duckdb")


def _replay_args(parser: argparse.ArgumentParser) -> None:
    from .sinks import DEFAULT_DEADLINE_S

    _store_args(parser, mlflow=True)
    parser.add_argument("--sinks", default=",".join(REPLAY_SINKS), metavar="NAMES",
                        help=f"comma-separated sinks to replay, each on its own: {', '.join(REPLAY_SINKS)} "
                             "(default: all)")
    parser.add_argument("--timeout", type=float, default=DEFAULT_DEADLINE_S, metavar="SECONDS",
                        help="give up on a sink whose store leaves one call unanswered this long "
                             f"(default {DEFAULT_DEADLINE_S:g}; 0: wait without limit)")
    parser.add_argument("--move-corrupt", action="store_true",
                        help="a DuckDB file that is corrupt is renamed to NAME.corrupt-TIME and rebuilt "
                             "from the spool")


def _wanted_sinks(text: str) -> list[str]:
    names = [n.strip() for n in text.split(",") if n.strip()]
    unknown = [n for n in names if n not in REPLAY_SINKS]
    if unknown or not names:
        raise ValueError(f"--sinks: {', '.join(map(repr, unknown)) or 'empty list'} not accepted; "
                         f"accepted: {', '.join(REPLAY_SINKS)}")
    return list(dict.fromkeys(names))


def _move_aside_if_corrupt(path: Path) -> Path | None:
    """Rename the DuckDB file at `path` if it cannot be read as one; the new name, or None."""
    import time

    from .sinks.duckdb_sink import DuckDBFileError, list_sessions

    if not path.exists():
        return None
    try:
        list_sessions(path)
    except DuckDBFileError as exc:
        if exc.kind != "corrupt":
            return None
        aside = path.with_name(f"{path.name}.corrupt-{time.strftime('%Y%m%dT%H%M%S')}")
        path.rename(aside)
        wal = path.with_name(path.name + ".wal")
        if wal.exists():
            wal.rename(aside.with_name(aside.name + ".wal"))
        return aside
    except Exception:  # noqa: BLE001 - not corrupt in the way we can tell: let the replay say what it is
        return None
    return None


def _replay(args: argparse.Namespace) -> int:
    from .sinks import DuckDBSink, MlflowSink, ReplayProgress, Spool, replay_each

    cfg = _tracking(args)
    wanted = _wanted_sinks(args.sinks)
    if args.timeout < 0:
        raise ValueError(f"--timeout: {args.timeout} is out of range; accepted: 0 (no limit) or more seconds")
    spool = Spool(cfg.spool_dir)
    if args.move_corrupt and "duckdb" in wanted:
        aside = _move_aside_if_corrupt(cfg.db_path)
        if aside is not None:
            print(f"hwbench replay: {cfg.db_path} was corrupt: moved to {aside}; rebuilding it from the spool")
    if not spool.records_path.exists():
        print(f"hwbench replay: nothing spooled in {cfg.spool_dir}")
        return EXIT_OK
    sinks = {"mlflow": lambda: MlflowSink(cfg.mlflow_uri, cfg.experiment), "duckdb": lambda: DuckDBSink(cfg.db_path)}
    shown = {"mlflow": f"MLflow {redact_uri(cfg.mlflow_uri)}", "duckdb": f"DuckDB {cfg.db_path}"}
    print(f"hwbench replay: {spool.records_path} -> {', '.join(shown[n] for n in wanted)}", flush=True)
    if "mlflow" in wanted:
        # Imported before the first call's deadline starts: importing MLflow takes seconds (tens on
        # a busy runner), and that is not the store failing to answer.
        import mlflow.tracking  # noqa: F401

    def say(line: str) -> None:
        print(line, file=sys.stderr, flush=True)

    # Progress per sink (written of N, rate); a replay run again resumes where this one stopped.
    progress = [ReplayProgress(sinks[n](), lambda line: say(f"hwbench replay: {line}")) for n in wanted]
    results = replay_each(spool, progress, deadline_s=args.timeout or None, notify=say)
    for result in results:
        if result.ok:
            print(f"  {result.name}: {result.written} records written")
        else:
            print(f"  {result.name}: not replayed ({result.written} records written before): "
                  f"{redact_uri(result.error or '')}")
    if results and results[0].refused:
        print(f"  {results[0].refused} spooled records refused: not measurements (see the warnings)")
    failed = [r.name for r in results if not r.ok]
    if failed:
        print(f"hwbench replay: error: {', '.join(failed)} not replayed; their records stay spooled, run "
              f"`hwbench replay --sinks {','.join(failed)}` once the store is back", file=sys.stderr)
        corrupt = any("is corrupt" in (r.error or "") for r in results if not r.ok)
        return EXIT_USAGE if corrupt else EXIT_STORE
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
    parser.add_argument("--out", default=None, metavar="DIR",
                        help="output directory (default: STORE/report, beside the records it reports on)")


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
    out = Path(args.out) if args.out else Path(args.store) / "report"
    paths = write_report(results, out, system_info=system, hardware=detect_hardware().to_dict(),
                         session_id=session)
    print(f"hwbench report: {paths.markdown}, {paths.compatibility}, {len(paths.plots)} plots in {paths.out_dir}")
    return EXIT_OK


def _compare_args(parser: argparse.ArgumentParser) -> None:
    _store_args(parser)
    parser.add_argument("session_a", metavar="SESSION_A",
                        help="baseline: a session id, a unique prefix, 'latest', 'all', or several ids joined by "
                             "commas (a history of sessions: their spread is the baseline's noise)")
    parser.add_argument("session_b", metavar="SESSION_B", nargs="?", default=None,
                        help="candidate, in the same forms; left out when SESSION_A is 'pair:ID' (the two sessions "
                             "of one `hwbench ab` pair, A then B, from the DuckDB file)")
    parser.add_argument("--source-a", default=None, metavar="SOURCE",
                        help="where A's records are: a DuckDB file, an MLflow tracking URI, a spool directory or a "
                             ".jsonl record file (e.g. replayed from another machine); default: the DuckDB file")
    parser.add_argument("--source-b", default=None, metavar="SOURCE", help="where B's records are (default: as A)")
    parser.add_argument("--experiment", default=None, metavar="NAME",
                        help="MLflow experiment of an MLflow source (default: $HWBENCH_EXPERIMENT, else hwbench)")
    parser.add_argument("--threshold", type=float, default=0.10,
                        help="relative change of the median that counts (default 0.10)")
    parser.add_argument("--alpha", type=float, default=0.05,
                        help="significance of the Mann-Whitney U test on rounds (default 0.05)")
    parser.add_argument("--all", action="store_true", dest="show_missing",
                        help="list the missing cases too (default: one line counting them by reason)")
    parser.add_argument("--verbose", "-v", action="store_true",
                        help="whole notes, p-values, rounds and the uncorrected change (lines may pass 120 columns)")
    parser.add_argument("--json", action="store_true", help="print every comparison, the counts and the "
                        "decisiveness as JSON instead of the table")


def _pick_sessions(records: list[BenchmarkRecord], wanted: str, where: str) -> list[BenchmarkRecord]:
    """The records of the sessions `wanted` names (see `_compare_args`) among `records`."""
    newest: dict[str, str] = {}
    for record in records:
        newest[record.session_id] = max(newest.get(record.session_id, ""), record.created_at)
    ids = sorted(newest, key=newest.__getitem__, reverse=True)
    if not ids:
        raise ValueError(f"{where} holds no records; run the benchmarks first")
    if wanted == "all":
        return records
    chosen: list[str] = []
    for part in (p.strip() for p in wanted.split(",")):
        if part == "latest":
            chosen.append(ids[0])
            continue
        matches = [i for i in ids if i.startswith(part)] if part else []
        if len(matches) != 1:
            what = "matches no" if not matches else f"matches {len(matches)}"
            raise ValueError(f"session {part!r} {what} session in {where}; `hwbench sessions` lists them")
        chosen.append(matches[0])
    return [r for r in records if r.session_id in set(chosen)]


def _session_parts(wanted: str) -> list[str]:
    """The comma-separated session names of `wanted`; ValueError naming an empty one."""
    parts = [part.strip() for part in str(wanted).split(",")]
    if not all(parts):
        raise ValueError(f"session {wanted!r} is empty or has an empty part; give a session id, a unique prefix, "
                         "'latest', 'all', or several ids joined by commas (`hwbench sessions` lists them)")
    return parts


def _compare_side(args: argparse.Namespace, source: str | None, wanted: str) -> list[BenchmarkRecord]:
    from .sinks import MlflowStoreError, load_records, ping, read_records, source_kind

    parts = _session_parts(wanted)
    if source is None:  # the DuckDB file: read only the sessions asked for
        db = _db(args)
        if wanted == "all":
            return load_records(db)
        return [r for part in parts for r in load_records(db, _session_id(db, part))]
    shown = redact_uri(source)
    remote = source_kind(source) == "mlflow"
    if remote:
        problem = ping(source, timeout=10.0)  # refused at once, silent within 10 s: not after MLflow's retries
        if problem is not None:
            raise ConnectionError(f"source {shown}: {problem}; check the address and that the server runs")
    try:
        records = read_records(source, experiment=args.experiment, with_timings=True)
    except (ValueError, FileNotFoundError):
        raise
    except (OSError, MlflowStoreError) as exc:
        raise ConnectionError(f"source {shown} cannot be read: {redact_uri(str(exc))}") from None
    except Exception as exc:
        if not remote:
            raise
        raise ConnectionError(f"source {shown} cannot be read: {redact_uri(f'{type(exc).__name__}: {exc}')}") from None
    return _pick_sessions(records, wanted, shown)


def _compare(args: argparse.Namespace) -> int:
    from .compare import compare_records, exit_code, format_table, host_model_of, to_json

    if args.session_a.startswith("pair:"):
        from .sinks import list_sessions

        pair = args.session_a[len("pair:"):]
        frame = list_sessions(_db(args))
        sides = {(e or {}).get("ab_side"): sid for sid, e in zip(frame["session_id"], frame["extra"], strict=True)
                 if (e or {}).get("ab_pair") == pair}
        if set(sides) != {"A", "B"}:
            raise ValueError(f"pair {pair!r} has sessions {sorted(k for k in sides if k)} in the DuckDB file, not A "
                             "and B; `hwbench sessions` lists them")
        args.session_a, args.session_b, args.source_a, args.source_b = sides["A"], sides["B"], None, None
    elif args.session_b is None:
        raise ValueError("SESSION_B is missing: give two sessions, or one 'pair:ID' of `hwbench ab`")
    a = _compare_side(args, args.source_a, args.session_a)
    b = _compare_side(args, args.source_b or args.source_a, args.session_b)
    comparisons = compare_records(a, b, threshold=args.threshold, alpha=args.alpha)
    host = host_model_of(a, b)
    if getattr(args, "json", False):
        print(to_json(comparisons, host))
    else:
        print(format_table(comparisons, show_missing=getattr(args, "show_missing", False),
                           verbose=getattr(args, "verbose", False), host=host))
    return EXIT_CHECK_FAILED if exit_code(comparisons) else EXIT_OK


def _export_args(parser: argparse.ArgumentParser) -> None:
    _store_args(parser)
    parser.add_argument("--parquet", required=True, metavar="DIR", help="write one Parquet file per table here")


def _export(args: argparse.Namespace) -> int:
    from .sinks import export_parquet

    for path in export_parquet(_db(args), args.parquet):
        print(path)
    return EXIT_OK


def _import_mlflow_args(parser: argparse.ArgumentParser) -> None:
    _store_args(parser, mlflow=True)
    parser.add_argument("--full", action="store_true",
                        help="fetch every child run of the experiment, not only the sessions the DuckDB file lacks "
                             "(also finds records whose parent run is gone)")


def _import_mlflow(args: argparse.Namespace) -> int:
    from .sinks import MlflowStoreError, import_mlflow_sessions

    cfg = _tracking(args)
    print(f"hwbench import-mlflow: {redact_uri(cfg.mlflow_uri)} (experiment {cfg.experiment!r}) -> {cfg.db_path}",
          flush=True)
    from mlflow.exceptions import MlflowException

    try:
        result = import_mlflow_sessions(cfg.mlflow_uri, cfg.experiment, cfg.db_path, full=args.full,
                                        notify=lambda line: print(f"  {line}", flush=True))
    except (OSError, MlflowException, MlflowStoreError) as exc:  # the store is down or refuses us
        print(f"hwbench import-mlflow: error: {redact_uri(f'{type(exc).__name__}: {exc}')}", file=sys.stderr)
        return EXIT_STORE
    print(f"  {result.records} records imported")
    return EXIT_OK


register_command("replay", "push spooled records that a sink could not take, each sink on its own (idempotent)",
                 _replay_args, _replay)
register_command("sessions", "list the sessions in the DuckDB file", _store_args, _sessions)
register_command("report", "Markdown report, PNG plots and compatibility matrix from DuckDB", _report_args, _report)
register_command("compare", "regressions between two sessions, tested on rounds (exit 1 on a regression only)",
                 _compare_args, _compare)
register_command("export", "export the DuckDB tables to Parquet", _export_args, _export)
register_command("import-mlflow", "rebuild the DuckDB results from an MLflow server's runs",
                 _import_mlflow_args, _import_mlflow)


def build_parser() -> argparse.ArgumentParser:
    """The argument parser with every registered subcommand (ours, and those the modules of the
    ``pytest_hwbench.commands`` entry-point group register on import)."""
    from ._plugins import COMMANDS_GROUP, load_group

    load_group(COMMANDS_GROUP, kind="command")
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
    from .sinks.duckdb_sink import DuckDBFileError

    try:
        return run(args)
    except DuckDBFileError as exc:  # locked: the store is unreachable for now; corrupt: bad input
        print(f"hwbench {args.command}: error: {redact_uri(str(exc))}", file=sys.stderr)
        return EXIT_STORE if exc.kind == "locked" else EXIT_USAGE
    except (ValueError, KeyError, FileNotFoundError) as exc:
        message = exc.args[0] if isinstance(exc, KeyError) and exc.args else str(exc)
        print(f"hwbench {args.command}: error: {redact_uri(message)}", file=sys.stderr)
        return EXIT_USAGE
    except ConnectionError as exc:  # a store that does not answer: not a failed check, not bad usage
        print(f"hwbench {args.command}: error: {redact_uri(str(exc))}", file=sys.stderr)
        return EXIT_STORE


if __name__ == "__main__":
    sys.exit(main())
