#!/usr/bin/env python3
"""Run the README's runnable code blocks, command by command, as a newcomer would.

A block is runnable when the line before its opening fence is ``<!-- runnable -->``. Each
command runs through bash in the working directory (the checkout, or ``--workdir DIR``, which
gets a link to the checkout's ``bench_suites``), in order; the first failure stops the run and
exits 1 naming the command. Exit 0: every command succeeded; 2: no runnable block was found.
"""

from __future__ import annotations

import argparse
import os
import re
import subprocess
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
MARK = "<!-- runnable -->"


def runnable_commands(readme: str) -> list[str]:
    """The commands of the runnable blocks, in order (comments and blank lines dropped)."""
    commands: list[str] = []
    for match in re.finditer(re.escape(MARK) + r"\s*\n```(?:bash|sh)?\n(.*?)\n```", readme, re.DOTALL):
        for line in match.group(1).splitlines():
            command = line.split("  #", 1)[0].strip()
            if command and not command.startswith("#"):
                commands.append(command)
    return commands


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--readme", type=Path, default=ROOT / "README.md", help="the README to read")
    parser.add_argument("--workdir", type=Path, default=None,
                        help="run there instead of the checkout (bench_suites is linked in)")
    parser.add_argument("--list", action="store_true", help="print the commands without running them")
    args = parser.parse_args(argv)
    commands = runnable_commands(args.readme.read_text(encoding="utf-8"))
    if not commands:
        print(f"readme_blocks: no block marked {MARK} in {args.readme}", file=sys.stderr)
        return 2
    if args.list:
        print("\n".join(commands))
        return 0
    workdir = ROOT
    if args.workdir is not None:
        workdir = args.workdir.resolve()
        workdir.mkdir(parents=True, exist_ok=True)
        link = workdir / "bench_suites"
        if not link.exists():
            link.symlink_to(ROOT / "bench_suites", target_is_directory=True)
    for number, command in enumerate(commands, 1):
        print(f"readme_blocks: [{number}/{len(commands)}] $ {command}", flush=True)
        began = time.monotonic()
        proc = subprocess.run(["bash", "-o", "pipefail", "-c", command], cwd=workdir, env=os.environ.copy(),
                              check=False)
        print(f"readme_blocks: [{number}/{len(commands)}] exit {proc.returncode} in "
              f"{time.monotonic() - began:.1f} s", flush=True)
        if proc.returncode != 0:
            print(f"readme_blocks: FAILED: {command!r} exited {proc.returncode}", file=sys.stderr)
            return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
