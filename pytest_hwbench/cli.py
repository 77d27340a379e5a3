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

from .sinks.redact import redact_uri

EXIT_OK, EXIT_CHECK_FAILED, EXIT_USAGE, EXIT_STORE = 0, 1, 2, 3

Command = Callable[[argparse.Namespace], int]
_COMMANDS: dict[str, tuple[Command, Callable[[argparse.ArgumentParser], None], str]] = {}


def register_command(name: str, help: str, add_args: Callable[[argparse.ArgumentParser], None],
                     run: Command) -> None:
    """Add a subcommand: `add_args` fills its parser, `run` executes it and returns the exit code
    (the modules of the ``pytest_hwbench.commands`` entry-point group call it at import)."""
    _COMMANDS[name] = (run, add_args, help)


def table(rows: Sequence[Sequence[str]], header: Sequence[str]) -> str:
    """`rows` under `header` as left-aligned columns, with a dashed rule below the header."""
    widths = [max(len(str(r[i])) for r in [header, *rows]) for i in range(len(header))]
    lines = ["  ".join(str(c).ljust(w) for c, w in zip(row, widths, strict=True)).rstrip() for row in [header, *rows]]
    lines.insert(1, "  ".join("-" * w for w in widths))
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
    rows = [[t.name, "yes" if t.available else "no", ",".join(t.precisions) or "-",
             ("; ".join(d.name for d in t.devices) or "-") if t.available else t.reason]
            for t in info.targets.values()]
    print(table(rows, ["target", "available", "precisions", "devices / reason"]))
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
    rows = [{"name": s.name, "family": s.family, "tier": s.tier, "config": s.config_class,
             "params_m": round(s.architecture.param_count / 1e6, 2),
             "gflops_per_item": round(s.architecture.flops_per_item / 1e9, 3)} for s in MODELS.values()]
    if args.json:
        print(json.dumps(rows, indent=2))
    else:
        print(table([[str(v) for v in r.values()] for r in rows], list(rows[0])))
    return EXIT_OK


register_command("models", "list the model zoo (params and FLOPs per item, from config)", _models_args, _models)


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
    args = build_parser().parse_args(argv)
    try:
        return _COMMANDS[args.command][0](args)
    except (ValueError, KeyError, FileNotFoundError, ConnectionError) as exc:
        message = exc.args[0] if isinstance(exc, KeyError) and exc.args else str(exc)
        print(f"hwbench {args.command}: error: {redact_uri(message)}", file=sys.stderr)
        # a store that does not answer: not a failed check, not bad usage
        return EXIT_STORE if isinstance(exc, ConnectionError) else EXIT_USAGE


__all__ = ["EXIT_CHECK_FAILED", "EXIT_OK", "EXIT_STORE", "EXIT_USAGE", "Command", "build_parser", "main",
           "register_command", "table"]


if __name__ == "__main__":
    # The command modules register with `pytest_hwbench.cli`, not with this ``__main__`` copy of it.
    from pytest_hwbench.cli import main as _main

    sys.exit(_main())
