"""A cold ``hwsel predict --model bert-tiny --hardware cpu``: wall time and whether a browser starts,
before (an older commit of this repository) and after (the working tree), paired round by round.

Usage::

    flock /tmp/hwbench-timing.lock python benchmarks/hwsel_start.py --before REV [--rounds 5]

``--before`` names a commit; its tree is exported with ``git archive`` to a temporary folder
and run from there with the same interpreter. Each round runs both sides (alternating which goes
first), each with a cold web probe (``HWBENCH_WEB_PROBE=fresh``, an empty cache folder) and
``HWBENCH_BROWSER`` pointing at a sentinel that records every start. It prints each pair, the
median of each side, the median of the per-pair ratios, and how many runs started the browser.
"""

from __future__ import annotations

import argparse
import os
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
COMMAND = ("predict", "--model", "bert-tiny", "--hardware", "cpu")


def export(rev: str, into: Path) -> Path:
    """The tree of `rev` under `into` (``git archive``; nothing in this checkout changes)."""
    archive = subprocess.run(["git", "archive", rev], cwd=ROOT, capture_output=True, check=True).stdout
    into.mkdir(parents=True, exist_ok=True)
    subprocess.run(["tar", "-x", "-C", str(into)], input=archive, check=True)
    return into


def run_once(tree: Path, scratch: Path) -> tuple[float, int]:
    """(wall seconds, browser starts) of one cold run of `COMMAND` from `tree`."""
    scratch.mkdir(parents=True, exist_ok=True)
    log = scratch / "browser-starts"
    log.unlink(missing_ok=True)
    sentinel = scratch / "chromium"
    sentinel.write_text(f"#!/bin/sh\necho started >> {log}\nexit 1\n")
    sentinel.chmod(0o755)
    env = {k: v for k, v in os.environ.items() if not k.startswith(("MLFLOW_TRACKING", "HWSEL_"))}
    env.update(PYTHONPATH=str(tree), HWBENCH_WEB_PROBE="fresh", HWBENCH_BROWSER=str(sentinel),
               XDG_CACHE_HOME=str(scratch / "cache"))
    started = time.perf_counter()
    out = subprocess.run([sys.executable, "-m", "hwsel", *COMMAND], cwd=scratch, env=env, capture_output=True,
                         text=True, check=False)
    elapsed = time.perf_counter() - started
    if out.returncode != 0:
        raise SystemExit(f"{tree}: hwsel exited {out.returncode}: {out.stderr[-2000:]}")
    starts = len(log.read_text().splitlines()) if log.exists() else 0
    return elapsed, starts


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--before", required=True, metavar="REV", help="the commit to compare against")
    parser.add_argument("--rounds", type=int, default=5, help="pairs to run (default 5)")
    args = parser.parse_args(argv)
    if args.rounds < 1:
        parser.error(f"--rounds must be >= 1, got {args.rounds}")
    with tempfile.TemporaryDirectory(prefix="hwsel-start-") as tmp:
        before = export(args.before, Path(tmp) / "before")
        sides = {"before": before, "after": ROOT}
        times: dict[str, list[float]] = {"before": [], "after": []}
        browsers = {"before": 0, "after": 0}
        ratios = []
        print(f"cold `hwsel {' '.join(COMMAND)}`: before = {args.before}, after = working tree")
        for i in range(args.rounds):
            order = ("before", "after") if i % 2 == 0 else ("after", "before")
            got = {}
            for side in order:
                got[side] = run_once(sides[side], Path(tmp) / f"{side}-{i}")
                times[side].append(got[side][0])
                browsers[side] += got[side][1] > 0
            ratios.append(got["after"][0] / got["before"][0])
            print(f"  round {i + 1} ({' then '.join(order)}): before {got['before'][0]:.2f} s "
                  f"(browser starts {got['before'][1]}), after {got['after'][0]:.2f} s "
                  f"(browser starts {got['after'][1]}), after/before {ratios[-1]:.2f}")
        print(f"median: before {statistics.median(times['before']):.2f} s, after {statistics.median(times['after']):.2f} s; "
              f"median after/before per pair {statistics.median(ratios):.2f}")
        print(f"runs that started a browser: before {browsers['before']} of {args.rounds}, "
              f"after {browsers['after']} of {args.rounds}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
