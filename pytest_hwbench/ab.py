"""`hwbench ab`: a paired, interleaved A/B measurement of the same cases on one host.

Each side (an option set, an environment or another python) runs in a long-lived worker
(`ab_worker`); in every round each case runs on A and B back to back, the side going first
alternating, and a case's verdict is a paired test on its per-round ratios B / A (README.md, "A/B
on one host"). Both sides land in the sinks as two sessions tagged as one pair (session ``extra``:
``ab_pair``, ``ab_side``, ``ab_variant``); a side that fails keeps the complete rounds before it.

Exit codes: 0 no regression, 1 a regression in B, 2 bad usage, 3 a side's worker failed.
"""

from __future__ import annotations

import argparse
import os
import shlex
import sys
import time
import uuid
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from .ab_worker import DEFAULT_SIDE, DEFAULT_SIDE_TIMEOUT_S, Side, SideEnvironment, SideWorker
from .cli import EXIT_CHECK_FAILED, EXIT_OK, EXIT_STORE, register_command
from .record import BenchmarkRecord, SessionInfo
from .verdict import DEFAULT_ALPHA, DEFAULT_THRESHOLD, check_verdict_settings
from .vocabulary import DEFAULT_DEADLINE_S

if TYPE_CHECKING:
    from .compare import Comparison

#: `--hwbench-*` options a side's option set may hold: (option, worker setting, type).
SIDE_OPTIONS: dict[str, tuple[str, type]] = {
    "--hwbench-warmup": ("warmup_iterations", int),
    "--hwbench-min-iterations": ("min_iterations", int),
    "--hwbench-min-time": ("min_time_s", float),
    "--hwbench-noise-retries": ("noise_retries", int),
}
#: Rounds unless the command says (with `verdict.DEFAULT_THRESHOLD` and `verdict.DEFAULT_ALPHA`).
DEFAULT_ROUNDS = 18


def parse_side_options(text: str) -> dict[str, Any]:
    """The settings an option set names, over `DEFAULT_SIDE`; ValueError naming an option
    that a side cannot take, with the ones it can."""
    settings = dict(DEFAULT_SIDE)
    words = iter(shlex.split(text or ""))
    for word in words:
        name, _, value = word.partition("=")
        if name not in SIDE_OPTIONS:
            raise ValueError(f"option {word!r} cannot vary between ab sides; accepted: {', '.join(SIDE_OPTIONS)} "
                             "(other variants: --a-env/--b-env NAME=VALUE, --a-python/--b-python PATH)")
        value = value or next(words, "")
        if not value:
            raise ValueError(f"option {name} needs a value")
        key, kind = SIDE_OPTIONS[name]
        try:
            settings[key] = kind(value)
        except ValueError:
            raise ValueError(f"option {name}: {value!r} is not a{'n integer' if kind is int else ' number'}") from None
    return settings


def parse_env(items: Sequence[str]) -> dict[str, str]:
    """``NAME=VALUE`` items as a dict; ValueError naming one without ``=``."""
    out = {}
    for item in items:
        name, sep, value = item.partition("=")
        if not sep or not name:
            raise ValueError(f"environment setting {item!r} is not NAME=VALUE")
        out[name] = value
    return out


class SideFailed(RuntimeError):
    """Side `label`'s worker did not start, answer a case in time, or died; `result` holds the
    complete rounds measured before (None if none ran)."""

    def __init__(self, label: str, side: Side, what: str, result: AbResult | None = None) -> None:
        self.label, self.side, self.result = label, side, result
        super().__init__(f"side {label} ({side.describe()}) {what}")


@dataclass(frozen=True)
class AbResult:
    """What one `run_ab` measured: the pair id, each side's session, environment and records, verdicts."""

    pair: str
    sessions: dict[str, str]
    environments: dict[str, SideEnvironment]
    records: dict[str, list[BenchmarkRecord]]
    verdicts: list[Comparison]


def run_ab(cases: Sequence[Any], a: Side, b: Side, *, rounds: int = DEFAULT_ROUNDS,
           threshold: float = DEFAULT_THRESHOLD, alpha: float = DEFAULT_ALPHA, threads: int | None = None,
           say: Callable[[str], None] = print, max_rounds: int | None = None,
           side_timeout_s: float = DEFAULT_SIDE_TIMEOUT_S) -> AbResult:
    """Measure `cases` (`BenchCase`s) on both sides in `rounds` rounds (each case A B or B A, the
    first side alternating) and judge each case on its per-round ratios; an inconclusive case gets
    further rounds, alone, up to `max_rounds` (default twice `rounds`). `threads`: torch's intra-op
    threads in both workers (None: every core). A side that does not start or answer a case within
    `side_timeout_s`, or dies, raises `SideFailed` holding the complete rounds measured before.
    Writes no sink (`record_pair` does)."""
    import dataclasses

    from .compare import compare_pairs

    check_verdict_settings(threshold, alpha)
    if rounds < 3:
        raise ValueError(f"rounds must be >= 3 (a paired test needs them), got {rounds}")
    max_rounds = 2 * rounds if max_rounds is None else max_rounds
    if max_rounds < rounds:
        raise ValueError(f"max_rounds ({max_rounds}) must be >= rounds ({rounds})")
    pair = uuid.uuid4().hex[:12]
    sessions = {"A": uuid.uuid4().hex, "B": uuid.uuid4().hex}
    payload = [dataclasses.asdict(c) for c in cases]
    started = time.monotonic()
    say(f"hwbench ab: pair {pair}, {len(cases)} cases x {rounds} rounds; starting A ({a.describe()}) and "
        f"B ({b.describe()})")
    sides = {"A": a, "B": b}
    workers: dict[str, SideWorker] = {}
    records: dict[str, list[BenchmarkRecord]] = {"A": [], "B": []}
    # Complete rounds so far, and how many records each side has in them: only complete rounds are
    # judged and kept.
    done = kept = 0

    def call(label: str, fn: Callable[[], Any]) -> Any:
        """`fn()` on side `label`'s worker; its failure becomes `SideFailed` with the rounds so far."""
        try:
            return fn()
        except Exception as exc:  # noqa: BLE001 - execnet's errors, a timeout, a dead process
            what = str(exc) if isinstance(exc, TimeoutError) else f"failed: {type(exc).__name__}: {exc}"
            result = None
            if done:
                result = AbResult(pair, sessions, {k: w.environment for k, w in workers.items()},
                                  {k: v[:kept] for k, v in records.items()}, judge_all())
            raise SideFailed(label, sides[label], f"{what}; after {done} complete round{'s' if done != 1 else ''}",
                             result) from None

    def measure_round(index: int, which_cases: list[int]) -> None:
        nonlocal done, kept
        for which in which_cases:
            # each case on both sides back to back; the side that goes first alternates (ABBA)
            order = ("A", "B") if (index + which) % 2 == 0 else ("B", "A")
            for label in order:
                records[label].append(call(label, lambda label=label, which=which: workers[label].measure(index, which)))
        done, kept = done + 1, len(records["A"])

    def judge_all() -> list[Comparison]:
        return compare_pairs(records["A"][:kept], records["B"][:kept], threshold=threshold, alpha=alpha)

    try:
        for label, side in sides.items():
            workers[label] = call(label, lambda side=side, label=label: SideWorker(
                side, payload, pair, sessions[label], threads, side_timeout_s))
        for index in range(rounds):
            measure_round(index, list(range(len(cases))))
            elapsed = time.monotonic() - started
            left = elapsed / (index + 1) * (rounds - index - 1)
            say(f"hwbench ab: round {index + 1} of {rounds}, {elapsed:.0f} s elapsed, about {left:.0f} s left")
        verdicts = judge_all()
        for index in range(rounds, max_rounds):
            wanting = {v.case_id for v in verdicts if v.verdict == "inconclusive" and v.n_a >= 3}
            undecided = [i for i, case in enumerate(cases) if case.id in wanting]
            if not undecided:
                break
            say(f"hwbench ab: round {index + 1} (of at most {max_rounds}) for {len(undecided)} undecided "
                f"case{'s' if len(undecided) > 1 else ''}")
            measure_round(index, undecided)
            verdicts = judge_all()
    finally:
        for worker in workers.values():
            worker.close()
    return AbResult(pair, sessions, {label: w.environment for label, w in workers.items()}, records, verdicts)


def record_pair(result: AbResult, a: Side, b: Side, sinks: Sequence[Callable[[], Any]],
                spool_dir: Any, *, deadline_s: float | None = DEFAULT_DEADLINE_S) -> dict[str, Any]:
    """Write both sides as two sessions tagged as one pair, each with its side's package versions,
    hardware summary and python, through a `Recorder` each: the spool, then a sink from each
    factory of `sinks` (one that fails or does not answer for `deadline_s` seconds is left to
    ``hwbench replay``). Returns each side's `RecorderReport`."""
    import datetime as _dt
    import socket

    from .sinks import Recorder, Spool

    reports = {}
    for label, side in (("A", a), ("B", b)):
        env = result.environments[label]
        info = SessionInfo(session_id=result.sessions[label],
                           started_at=_dt.datetime.now(_dt.timezone.utc).isoformat(), host=socket.gethostname(),
                           runner_label=f"ab {result.pair} {label}", hardware_summary=env.hardware_summary,
                           package_versions=env.package_versions,
                           extra={"ab_pair": result.pair, "ab_side": label, "ab_variant": side.describe(),
                                  "ab_other_session": result.sessions["B" if label == "A" else "A"],
                                  "python": env.python, "python_version": env.python_version})
        recorder = Recorder(Spool(spool_dir), [make() for make in sinks], deadline_s=deadline_s)
        recorder.start(info)
        for record in result.records[label]:
            recorder.emit(record)
        reports[label] = recorder.finish("finished")
    return reports


def format_versions(environments: Mapping[str, SideEnvironment]) -> str:
    """One line naming what differs between side A's and side B's python and package versions, e.g.
    ``A: onnxruntime 1.32.0 | B: onnxruntime 1.22.1``, or ``same package versions on both sides``."""
    a, b = ({"python": e.python_version, **e.package_versions} for e in (environments["A"], environments["B"]))
    names = sorted(a.keys() | b.keys(), key=lambda name: (name != "python", name))  # python first
    differ = [name for name in names if a.get(name) != b.get(name)]
    if not differ:
        return "same package versions on both sides"
    return " | ".join(f"{label}: " + ", ".join(f"{name} {side.get(name, 'not installed')}" for name in differ)
                      for label, side in (("A", a), ("B", b)))


def _args(parser: argparse.ArgumentParser) -> None:
    from .store_commands import store_args

    store_args(parser, mlflow=True)
    parser.add_argument("--models", required=True, help="comma-separated model names (`hwbench models` lists them)")
    parser.add_argument("--backends", default="torch", help="comma-separated backends (default: torch)")
    parser.add_argument("--hardware", default="cpu", help="comma-separated hardware (default: cpu)")
    parser.add_argument("--precisions", default="fp32", help="comma-separated precisions (default: fp32)")
    parser.add_argument("--batch-sizes", default="1", help="comma-separated batch sizes (default: 1)")
    parser.add_argument("--rounds", type=int, default=DEFAULT_ROUNDS,
                        help=f"alternating rounds; each measures every case on both sides (default {DEFAULT_ROUNDS})")
    parser.add_argument("--threshold", type=float, default=DEFAULT_THRESHOLD,
                        help=f"relative change that counts (default {DEFAULT_THRESHOLD})")
    parser.add_argument("--max-rounds", type=int, default=None, metavar="N",
                        help="rounds a case whose rounds disagree may get in all (default: twice --rounds)")
    parser.add_argument("--alpha", type=float, default=DEFAULT_ALPHA,
                        help=f"significance of the paired t-test on log ratios (default {DEFAULT_ALPHA})")
    for label in ("a", "b"):
        side = label.upper()
        parser.add_argument(f"--{label}-options", default="", metavar="OPTIONS",
                            help=f"side {side}'s measurement options, e.g. \"--hwbench-min-time 0.5\" "
                                 f"(accepted: {', '.join(SIDE_OPTIONS)})")
        parser.add_argument(f"--{label}-env", action="append", default=[], metavar="NAME=VALUE",
                            help=f"an environment variable for side {side}'s worker (repeatable)")
        parser.add_argument(f"--{label}-python", default=sys.executable, metavar="PATH",
                            help=f"the python side {side} runs (another venv; default: this one)")
    parser.add_argument("--threads", type=int, default=None, metavar="N",
                        help="torch intra-op threads in both workers (default: every core); 1 keeps two sides and "
                             "the other work of a shared runner from spinning on each other's cores")
    parser.add_argument("--no-sinks", action="store_true", help="do not write the two sessions to the sinks")
    parser.add_argument("--side-timeout", type=float, default=DEFAULT_SIDE_TIMEOUT_S, metavar="SECONDS",
                        help="give up on a side whose worker does not start, or does not answer one case, in this "
                             f"long (default {DEFAULT_SIDE_TIMEOUT_S:g}); the rounds measured before are kept")
    parser.add_argument("--timeout", type=float, default=DEFAULT_DEADLINE_S, metavar="SECONDS",
                        help="give up on a sink whose store leaves one call unanswered this long and leave its records "
                             f"to `hwbench replay` (default {DEFAULT_DEADLINE_S:g}; 0: wait without limit)")


def _sides(args: argparse.Namespace) -> tuple[Side, Side]:
    sides = []
    for label in ("a", "b"):
        options = getattr(args, f"{label}_options")
        python = getattr(args, f"{label}_python")
        if not (os.path.isfile(python) and os.access(python, os.X_OK)):
            raise ValueError(f"--{label}-python {python}: not an executable file; give a Python interpreter, e.g. "
                             "another venv's bin/python")
        sides.append(Side(label.upper(), python, parse_env(getattr(args, f"{label}_env")),
                          parse_side_options(options), options))
    return sides[0], sides[1]


def _cases(args: argparse.Namespace) -> list[Any]:
    from .case import BenchCase

    def split(text: str) -> list[str]:
        return [p.strip() for p in text.split(",") if p.strip()]

    try:
        sizes = [int(s) for s in split(args.batch_sizes)]
    except ValueError:
        raise ValueError(f"--batch-sizes {args.batch_sizes!r}: give integers joined by commas, e.g. 1,8") from None
    cases = [BenchCase(m, be, hw, p, bs) for m in split(args.models) for be in split(args.backends)
             for hw in split(args.hardware) for p in split(args.precisions) for bs in sizes]
    from .models import MODELS

    unknown = sorted({c.model for c in cases} - MODELS.keys())
    if unknown:
        raise ValueError(f"--models: {', '.join(unknown)} not in the model zoo; `hwbench models` lists them")
    runnable = []
    for case in cases:
        why = case.unavailable()
        if why:
            print(f"hwbench ab: skipping {case.id}: {why}", file=sys.stderr)
        else:
            runnable.append(case)
    if not runnable:
        raise ValueError("no case of the selection can run here; check --models/--backends/--hardware")
    return runnable


def _run(args: argparse.Namespace) -> int:
    a, b = _sides(args)  # a ValueError here is bad usage, which `main` reports
    cases = _cases(args)
    if args.rounds < 3:
        raise ValueError(f"--rounds {args.rounds}: a paired test needs at least 3 rounds")
    check_verdict_settings(args.threshold, args.alpha, prefix="--")
    if args.max_rounds is not None and args.max_rounds < args.rounds:
        raise ValueError(f"--max-rounds {args.max_rounds}: give at least --rounds ({args.rounds})")
    if args.threads is not None and args.threads < 1:
        raise ValueError(f"--threads {args.threads}: give 1 or more")
    if not args.timeout >= 0 or args.timeout == float("inf"):
        raise ValueError(f"--timeout {args.timeout}: accepted: 0 (no limit) or a finite number of seconds")
    if not 0 < args.side_timeout < float("inf"):
        raise ValueError(f"--side-timeout {args.side_timeout}: accepted: a finite number of seconds > 0")
    failed: SideFailed | None = None
    try:
        result: AbResult | None = run_ab(
            cases, a, b, rounds=args.rounds, threshold=args.threshold, alpha=args.alpha, threads=args.threads,
            say=lambda line: print(line, flush=True), max_rounds=args.max_rounds, side_timeout_s=args.side_timeout)
    except SideFailed as exc:
        failed, result = exc, exc.result
        kept = "the rounds before it are judged and written below" if result else "no complete round to keep"
        print(f"hwbench ab: error: {exc}; {kept}", file=sys.stderr, flush=True)
    if result is None:
        return EXIT_STORE
    from .compare import exit_code, format_table

    print(format_versions(result.environments))
    print(format_table(result.verdicts, show_missing=True, verbose=True, advise=False))
    if not args.no_sinks:
        from .sinks import DuckDBSink, MlflowSink
        from .store_commands import tracking

        cfg = tracking(args)
        reports = record_pair(result, a, b, [lambda: MlflowSink(cfg.mlflow_uri, cfg.experiment),
                                             lambda: DuckDBSink(cfg.db_path)], cfg.spool_dir,
                              deadline_s=args.timeout or None)
        pending = sum(n for r in reports.values() for n in r.pending.values())
        print(f"hwbench ab: sessions A {result.sessions['A']} and B {result.sessions['B']} (pair {result.pair}) "
              f"written to MLflow and DuckDB{'' if not pending else f'; {pending} pending, run hwbench replay'}; "
              f"`hwbench compare pair:{result.pair}` compares them again")
    if failed is not None:
        return EXIT_STORE
    return EXIT_CHECK_FAILED if exit_code(result.verdicts) else EXIT_OK


register_command("ab", "paired, interleaved A/B of the same cases on one host (exit 1 on a regression in B)",
                 _args, _run)

__all__ = ["DEFAULT_ROUNDS", "SIDE_OPTIONS", "AbResult", "SideFailed", "format_versions",
           "parse_env", "parse_side_options", "record_pair", "run_ab"]
