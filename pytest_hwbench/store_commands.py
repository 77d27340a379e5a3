"""The store's ``hwbench`` subcommands (entry point ``store`` of ``pytest_hwbench.commands``):
``replay``, ``sessions``, ``report``, ``compare``, ``export`` and ``import-mlflow``.

Sinks are built through the registry (`open_sink`), so a third party's registered sink is replayed
and exported to like ours. A DuckDB file that is locked exits 3, one that is corrupt exits 2.
"""

from __future__ import annotations

import argparse
import contextlib
import math
import os
import sys
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import TYPE_CHECKING

from .cli import EXIT_CHECK_FAILED, EXIT_OK, EXIT_STORE, EXIT_USAGE, Command, register_command, table
from .recording import STORE_SINK_NAMES, StoreSink, TrackingConfig
from .sinks import _duckdb_read
from .sinks._duckdb_file import DuckDBFileError
from .sinks._recorder import replay_each
from .sinks.base import SessionSource, registered_sinks, resolve_sink
from .sinks.duckdb_sink import DuckDBSink
from .sinks.mlflow_uri import require_answer
from .sinks.redact import redact_uri
from .sinks.transfer import copy_sessions
from .vocabulary import DEFAULT_DEADLINE_S, DEFAULT_EXPERIMENT

if TYPE_CHECKING:
    from collections.abc import Sequence

    from .compare_sides import Side

def store_args(parser: argparse.ArgumentParser, *, mlflow: bool = False) -> None:
    """The store's options: ``--store``, ``--db`` and, with `mlflow`, ``--mlflow-uri`` and
    ``--experiment``."""
    parser.add_argument("--store", default="mlruns", metavar="DIR",
                        help="local store holding the spool and default files (default: ./mlruns)")
    parser.add_argument("--db", default=None, metavar="PATH", help="DuckDB file (default: STORE/hwbench.duckdb)")
    if mlflow:
        parser.add_argument("--mlflow-uri", default=None, metavar="URI",
                            help="MLflow tracking URI (default: $MLFLOW_TRACKING_URI, else sqlite:///STORE/mlflow.db)")
        parser.add_argument("--experiment", default=None, metavar="NAME",
                            help="MLflow experiment (default: $HWBENCH_EXPERIMENT, else hwbench)")


def tracking(args: argparse.Namespace) -> TrackingConfig:
    """The store the options of `store_args` name (defaults filled, checked)."""
    return TrackingConfig.resolve(args.store, getattr(args, "mlflow_uri", None), args.db,
                                  getattr(args, "experiment", None), Path.cwd(), flags=("--store", "--db"))


def _db(args: argparse.Namespace) -> str:
    path = tracking(args).db_path
    if not path.exists():
        raise FileNotFoundError(f"no DuckDB file at {path}; run the benchmarks first or pass --db PATH")
    return str(path)


def _match(ids: Sequence[str], wanted: str, where: str) -> str:
    """The one of `ids` (newest first) that `wanted` names: 'latest', a full id or a unique prefix;
    ValueError when it matches no session or several."""
    if wanted == "latest":
        return ids[0]
    matches = [i for i in ids if i.startswith(wanted)] if wanted else []
    if len(matches) != 1:
        what = "matches no" if not matches else f"matches {len(matches)}"
        raise ValueError(f"session {wanted!r} {what} session in {where}; `hwbench sessions` lists them")
    return matches[0]


def _session_id(db: str, wanted: str) -> str:
    """Resolve 'latest', a full id or a unique prefix against the sessions in `db`."""
    ids = _duckdb_read.session_ids(db)
    if not ids:
        raise ValueError(f"{db} holds no sessions; run the benchmarks first")
    if not wanted.strip():
        raise ValueError("the session is empty; give a session id, a unique prefix of one, 'latest' or 'all' "
                         "(`hwbench sessions` lists them)")
    return _match(ids, wanted, db)


def _request_timeout_arg(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--timeout", type=float, default=None, metavar="SECONDS", dest="request_timeout",
                        help="seconds each request to a tracking server may take; a request is tried 3 times "
                             "(default: $MLFLOW_HTTP_REQUEST_TIMEOUT, else 30). Whether the store answers at all is "
                             "asked first, within 5 s")


@contextlib.contextmanager
def _request_timeout(seconds: float | None) -> Iterator[None]:
    """MLflow's requests wait at most `seconds` each (``--timeout``; None: as they would) while the
    command runs, through MLflow's own ``MLFLOW_HTTP_REQUEST_TIMEOUT``; ValueError for a value
    out of range."""
    if seconds is not None and not 1 <= seconds <= 3600:
        raise ValueError(f"--timeout: {seconds:g} is out of range; accepted: 1 to 3600 seconds")
    before = os.environ.get("MLFLOW_HTTP_REQUEST_TIMEOUT")
    if seconds is not None:
        os.environ["MLFLOW_HTTP_REQUEST_TIMEOUT"] = str(math.ceil(seconds))
    try:
        yield
    finally:
        if before is None:
            os.environ.pop("MLFLOW_HTTP_REQUEST_TIMEOUT", None)
        else:
            os.environ["MLFLOW_HTTP_REQUEST_TIMEOUT"] = before


def _replay_args(parser: argparse.ArgumentParser) -> None:
    store_args(parser, mlflow=True)
    names = ", ".join(_accepted())
    parser.add_argument("--sinks", default=None, metavar="NAMES",
                        help=f"comma-separated sinks to replay, each on its own: a registered sink ({names}) or "
                             "NAME:TARGET (default: the store's sinks, MLflow and DuckDB)")
    parser.add_argument("--timeout", type=float, default=DEFAULT_DEADLINE_S, metavar="SECONDS",
                        help="give up on a sink whose store leaves one call unanswered this long "
                             f"(default {DEFAULT_DEADLINE_S:g}; 0: wait without limit)")
    parser.add_argument("--move-corrupt", action="store_true",
                        help="a DuckDB file that is corrupt is renamed to NAME.corrupt-TIME and rebuilt "
                             "from the spool")


def _accepted() -> list[str]:
    """The sink names ``--sinks`` takes: the store's first, in their order, then every other
    registered sink."""
    return list(dict.fromkeys([*STORE_SINK_NAMES, *registered_sinks()]))


def _sink_of(spec: str, store: dict[str, StoreSink]) -> StoreSink:
    """The sink `spec` names: one of `store`'s by name, else what `open_sink` takes; ValueError
    for anything else."""
    if spec in store:
        return store[spec]
    name, target = resolve_sink(spec)
    return StoreSink(name, spec, f"{name} {redact_uri(target)}" if target else name)


def chosen_sinks(option: str, text: str | None, cfg: TrackingConfig) -> list[tuple[str, StoreSink]]:
    """(how `text` names it, the sink) for each sink a comma-separated `text` names (`_sink_of`),
    each once (None: the store's sinks); ValueError naming `option`, what it refused and accepts."""
    store = {sink.name: sink for sink in cfg.store_sinks()}
    if text is None:
        return [(name, sink) for name, sink in store.items()]
    specs = list(dict.fromkeys(n.strip() for n in text.split(",") if n.strip()))
    chosen: list[tuple[str, StoreSink]] = []
    unknown: list[str] = []
    for spec in specs:
        try:
            chosen.append((spec, _sink_of(spec, store)))
        except ValueError:
            unknown.append(spec)
    if unknown or not specs:
        raise ValueError(f"{option}: {', '.join(map(repr, unknown)) or 'empty list'} not accepted; "
                         f"accepted: {', '.join(_accepted())}, or NAME:TARGET (e.g. duckdb:other.duckdb)")
    return chosen


def _move_aside_if_corrupt(path: Path) -> Path | None:
    """Rename the DuckDB file at `path` if any of its blocks cannot be read; the new name, or None."""
    import time

    if not path.exists():
        return None
    try:
        _duckdb_read.check_readable(path)
    except DuckDBFileError as exc:
        if exc.kind == "corrupt":
            aside = path.with_name(f"{path.name}.corrupt-{time.strftime('%Y%m%dT%H%M%S')}")
            path.rename(aside)
            wal = path.with_name(path.name + ".wal")
            if wal.exists():
                wal.rename(aside.with_name(aside.name + ".wal"))
            return aside
    except Exception:  # noqa: BLE001 - not corrupt in the way we can tell: let the replay say what it is
        pass
    return None


def _replay(args: argparse.Namespace) -> int:
    from .sinks.spool import Spool, replay_command

    cfg = tracking(args)
    chosen = chosen_sinks("--sinks", args.sinks, cfg)
    wanted = [sink for _, sink in chosen]
    if args.timeout < 0:
        raise ValueError(f"--timeout: {args.timeout} is out of range; accepted: 0 (no limit) or more seconds")
    spool = Spool(cfg.spool_dir)
    if args.move_corrupt and any(sink.name == "duckdb" for sink in wanted):
        aside = _move_aside_if_corrupt(cfg.db_path)
        if aside is not None:
            print(f"hwbench replay: {cfg.db_path} was corrupt: moved to {aside}; rebuilding it from the spool")
    if not spool.records_path.exists():
        print(f"hwbench replay: nothing spooled in {cfg.spool_dir}")
        return EXIT_OK
    print(f"hwbench replay: {spool.records_path} -> {', '.join(sink.shown for sink in wanted)}", flush=True)
    if any(sink.name == "mlflow" for sink in wanted):
        # Imported before the first call's deadline starts: importing MLflow takes seconds (tens on
        # a busy runner), and that is not the store failing to answer.
        import mlflow.tracking  # noqa: F401

    def say(line: str) -> None:
        print(line, file=sys.stderr, flush=True)

    results = replay_each(spool, [sink.open() for sink in wanted], deadline_s=args.timeout or None, notify=say,
                          progress=lambda line: say(f"hwbench replay: {line}"))
    for result in results:
        if result.ok:
            print(f"  {result.name}: {result.written} records written")
        else:
            print(f"  {result.name}: not replayed ({result.written} records written before): "
                  f"{redact_uri(result.error or '')}")
    if results and results[0].refused:
        print(f"  {results[0].refused} spooled records refused: not measurements (see the warnings)")
    failed = [(result, named) for result, (named, _) in zip(results, chosen, strict=True) if not result.ok]
    if failed:
        again = replay_command(args.store, db_path=args.db, mlflow_uri=args.mlflow_uri, experiment=args.experiment,
                               sinks=[redact_uri(n) for _, n in failed])
        print(f"hwbench replay: error: {', '.join(r.name for r, _ in failed)} not replayed; their records stay "
              f"spooled, run `{again}` once the store is back", file=sys.stderr)
        corrupt = any("is corrupt" in (r.error or "") for r, _ in failed)
        return EXIT_USAGE if corrupt else EXIT_STORE
    return EXIT_OK


def _sessions(args: argparse.Namespace) -> int:
    frame = _duckdb_read.list_sessions(_db(args))
    rows = [[str(r.session_id), str(r.started_at)[:19], str(r.host), str(r.runner_label), str(r.records),
             str(r.git_commit)[:10]] for r in frame.itertuples()]
    print(table(rows, ["session", "started", "host", "runner", "records", "commit"]))
    return EXIT_OK


def _report_args(parser: argparse.ArgumentParser) -> None:
    store_args(parser)
    parser.add_argument("--session", default="latest", metavar="ID",
                        help="session id or unique prefix, 'latest' (default) or 'all'")
    parser.add_argument("--out", default=None, metavar="DIR",
                        help="output directory (default: STORE/report, beside the records it reports on)")


def _output_dir(option: str, value: str) -> Path:
    """`value` as the folder that `option` writes into; ValueError when it is empty or a file."""
    if not value.strip():
        raise ValueError(f"{option} is empty: give a folder to write into")
    path = Path(value).expanduser()
    if path.exists() and not path.is_dir():
        raise ValueError(f"{option} {value}: is a file, not a folder; give a folder (made when missing)")
    return path


def _report(args: argparse.Namespace) -> int:
    import platform

    from .hardware import detect_hardware
    from .report import REPORT_COLUMNS, write_report

    out = _output_dir("--out", args.out) if args.out is not None else Path(args.store) / "report"
    db = _db(args)
    session = None if args.session == "all" else _session_id(db, args.session)
    results = _duckdb_read.load_results(db, session, columns=REPORT_COLUMNS, categorical=True)
    system = {"host": platform.node(), "python": platform.python_version(), "platform": platform.platform()}
    paths = write_report(results, out, system_info=system, hardware=detect_hardware().to_dict(),
                         session_id=session)
    print(f"hwbench report: {paths.markdown}, {paths.compatibility}, {len(paths.plots)} plots in {paths.out_dir}")
    return EXIT_OK


def _compare_args(parser: argparse.ArgumentParser) -> None:
    store_args(parser)
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
    _request_timeout_arg(parser)


def _chosen(ids: Sequence[str], wanted: str, where: str) -> list[str] | None:
    """The session ids `wanted` names (see `_compare_args`) among `ids`, newest first; None for
    'all'. ValueError when a name matches no session or several."""
    if not ids:
        raise ValueError(f"{where} holds no records; run the benchmarks first")
    if wanted == "all":
        return None
    return [_match(ids, part.strip(), where) for part in wanted.split(",")]


def _compare_side(args: argparse.Namespace, source: str | None, wanted: str) -> dict[str, Side]:
    """What the side holds of each case of the sessions asked for: computed in the file for a
    DuckDB side (the store's, or a DuckDB file's path), else built from their records."""
    from .compare_sides import side_of_summary, sides_of
    from .sinks.mlflow_sink import MlflowStoreError
    from .sinks.readers import is_local_path, read_records, source_kind

    parts = [part.strip() for part in str(wanted).split(",")]
    if not all(parts):
        raise ValueError(f"session {wanted!r} is empty or has an empty part; give a session id, a unique prefix, "
                         "'latest', 'all', or several ids joined by commas (`hwbench sessions` lists them)")
    if source is None or (is_local_path(source) and Path(source).exists() and source_kind(source) == "duckdb"):
        db = _db(args) if source is None else source
        ids = None if wanted == "all" else [_session_id(db, part) for part in parts]
        return {s["case_id"]: side_of_summary(s) for s in _duckdb_read.case_summaries(db, ids)}
    assert source is not None
    shown = redact_uri(source)
    remote = source_kind(source) == "mlflow"
    if remote:
        require_answer(source, "source")
    experiment = args.experiment or os.environ.get("HWBENCH_EXPERIMENT") or DEFAULT_EXPERIMENT
    where = f"{shown} (experiment {experiment!r})" if remote else shown
    try:
        records = read_records(source, choose=lambda ids: _chosen(ids, wanted, where), experiment=args.experiment,
                               with_timings=True)
    except (ValueError, FileNotFoundError):
        raise
    except (OSError, MlflowStoreError) as exc:
        raise ConnectionError(f"source {shown} cannot be read: {redact_uri(str(exc))}") from None
    except Exception as exc:
        if not remote:
            raise
        raise ConnectionError(f"source {shown} cannot be read: {redact_uri(f'{type(exc).__name__}: {exc}')}") from None
    return sides_of(records)


def _compare(args: argparse.Namespace) -> int:
    from . import compare
    from .compare_sides import sides_of

    of_pair = args.session_a.startswith("pair:")  # its sides ran interleaved: no advice to do so
    if of_pair:
        pair = args.session_a[len("pair:"):]
        db = _db(args)
        frame = _duckdb_read.list_sessions(db)
        sides = {(e or {}).get("ab_side"): sid for sid, e in zip(frame["session_id"], frame["extra"], strict=True)
                 if (e or {}).get("ab_pair") == pair}
        if set(sides) != {"A", "B"}:
            raise ValueError(f"pair {pair!r} has sessions {sorted(k for k in sides if k)} in the DuckDB file, not A "
                             "and B; `hwbench sessions` lists them")
        a, b = _duckdb_read.load_records(db, sides["A"]), _duckdb_read.load_records(db, sides["B"])
        # judged round by round
        comparisons = compare.compare_pairs(a, b, threshold=args.threshold, alpha=args.alpha)
        host = compare.host_model_of(sides_of(a), sides_of(b))
    elif args.session_b is None:
        raise ValueError("SESSION_B is missing: give two sessions, or one 'pair:ID' of `hwbench ab`")
    else:
        sides_a = _compare_side(args, args.source_a, args.session_a)
        sides_b = _compare_side(args, args.source_b or args.source_a, args.session_b)
        comparisons = compare.compare_cases(sides_a, sides_b, threshold=args.threshold, alpha=args.alpha)
        host = compare.host_model_of(sides_a, sides_b)
    if args.json:
        print(compare.to_json(comparisons, host, advise=not of_pair))
    else:
        print(compare.format_table(comparisons, show_missing=args.show_missing, verbose=args.verbose,
                                   host=host, advise=not of_pair))
    return EXIT_CHECK_FAILED if compare.exit_code(comparisons) else EXIT_OK


def _export_args(parser: argparse.ArgumentParser) -> None:
    store_args(parser)
    parser.add_argument("--parquet", default=None, metavar="DIR", help="write one Parquet file per table here")
    parser.add_argument("--to", dest="to", action="append", default=[], metavar="SINK",
                        help="also write every record of the DuckDB file, session by session, to this sink "
                             "(repeatable): a registered sink's NAME, NAME:TARGET, a URI or a file it takes, "
                             "e.g. mlflow:http://127.0.0.1:5000; records the sink holds are skipped")
    _request_timeout_arg(parser)


def _export(args: argparse.Namespace) -> int:
    if args.parquet is None and not args.to:
        raise ValueError("give --parquet DIR, --to SINK, or both")
    try:  # every sink checked before anything is written
        targets = [_sink_of(spec, {}) for spec in args.to]
    except ValueError as exc:
        raise ValueError(f"--to: {exc}") from None
    for target in targets:
        require_answer(resolve_sink(target.spec)[1], f"--to {target.name}")
    parquet = _output_dir("--parquet", args.parquet) if args.parquet is not None else None
    db = _db(args)
    if parquet is not None:
        for path in _duckdb_read.export_parquet(db, parquet):
            print(path)
    failed = []
    for target in targets:
        try:
            written = copy_sessions(DuckDBSink(db), target.open(), full=True).records
        except (ValueError, FileNotFoundError):
            raise
        except Exception as exc:  # noqa: BLE001 - a sink that fails is reported, the others still run
            print(f"hwbench export: error: {target.shown}: {redact_uri(f'{type(exc).__name__}: {exc}')}",
                  file=sys.stderr)
            failed.append(target)
            continue
        print(f"{target.shown}: {written} records written")
    return EXIT_STORE if failed else EXIT_OK


def _import_mlflow_args(parser: argparse.ArgumentParser) -> None:
    store_args(parser, mlflow=True)
    parser.add_argument("--full", action="store_true",
                        help="fetch every child run of the experiment, not only the sessions the target lacks "
                             "(also finds records whose parent run is gone)")
    parser.add_argument("--to", dest="to", default=None, metavar="SINK",
                        help="write into this sink instead of the store's DuckDB file: a registered sink's NAME, "
                             "NAME:TARGET, a URI or a file it takes; records it holds are skipped")
    _request_timeout_arg(parser)


def _import_mlflow(args: argparse.Namespace) -> int:
    from .sinks.mlflow_sink import MlflowSink, MlflowStoreError
    from .sinks.mlflow_uri import sqlite_path

    cfg = tracking(args)
    store = {sink.name: sink for sink in cfg.store_sinks()}
    try:
        target = _sink_of(args.to or "duckdb", store)
    except ValueError as exc:
        raise ValueError(f"--to: {exc}") from None
    require_answer(cfg.mlflow_uri, "--mlflow-uri")
    if args.to is not None:
        require_answer(resolve_sink(target.spec)[1], f"--to {target.name}")
    print(f"hwbench import-mlflow: {redact_uri(cfg.mlflow_uri)} (experiment {cfg.experiment!r}) -> {target.shown}",
          flush=True)
    from mlflow.exceptions import MlflowException
    from sqlalchemy.exc import SQLAlchemyError

    uri = cfg.mlflow_uri
    if uri.startswith("sqlite:///") and not sqlite_path(uri).exists():  # reading must not make a new store
        raise FileNotFoundError(f"--mlflow-uri {redact_uri(uri)}: no MLflow store at {sqlite_path(uri)}; check the path")
    source = store["mlflow"].open()
    if not isinstance(source, SessionSource):
        raise ValueError(f"the registered mlflow sink ({type(source).__name__}) cannot list its sessions")
    try:
        if isinstance(source, MlflowSink) and not source.has_experiment():
            raise ValueError(f"--experiment {cfg.experiment!r}: no such experiment in {redact_uri(uri)}; the "
                             "benchmarks log to 'hwbench' unless --hwbench-experiment or $HWBENCH_EXPERIMENT says "
                             "otherwise")
        shown = cfg.db_path.name if args.to is None else target.shown
        result = copy_sessions(source, target.open(), full=args.full, names=("MLflow", shown),
                               notify=lambda line: print(f"  {line}", flush=True))
    except (OSError, MlflowException, MlflowStoreError, SQLAlchemyError) as exc:  # the store is down or refuses us
        print(f"hwbench import-mlflow: error: {redact_uri(f'{type(exc).__name__}: {exc}')}", file=sys.stderr)
        return EXIT_STORE
    print(f"  {result.records} records imported")
    return EXIT_OK


def _register(name: str, help: str, add_args: Callable[[argparse.ArgumentParser], None], run: Command) -> None:
    """Register `run` under its ``--timeout`` per MLflow request (where it has one), a DuckDB file
    that cannot be used turned into its exit code: locked 3 (unreachable for now), corrupt 2."""

    def guarded(args: argparse.Namespace) -> int:
        try:
            with _request_timeout(getattr(args, "request_timeout", None)):
                return run(args)
        except DuckDBFileError as exc:
            print(f"hwbench {args.command}: error: {redact_uri(str(exc))}", file=sys.stderr)
            return EXIT_STORE if exc.kind == "locked" else EXIT_USAGE

    register_command(name, help, add_args, guarded)


_register("replay", "push spooled records that a sink could not take, each sink on its own (idempotent)",
          _replay_args, _replay)
_register("sessions", "list the sessions in the DuckDB file", store_args, _sessions)
_register("report", "Markdown report, PNG plots and compatibility matrix from DuckDB", _report_args, _report)
_register("compare", "regressions between two sessions, tested on rounds (exit 1 on a regression only)",
          _compare_args, _compare)
_register("export", "export the DuckDB tables to Parquet, or its records to any registered sink",
          _export_args, _export)
_register("import-mlflow", "rebuild the DuckDB results (or another sink's) from an MLflow server's runs",
          _import_mlflow_args, _import_mlflow)

__all__ = ["chosen_sinks", "store_args", "tracking"]
