"""One case's path through pytest_hwbench, counted from a trace: the functions, call edges and
files that `Runner.run` and `CaseResult.to_record` walk through for one warm case.

    python benchmarks/case_path.py [--model bert-tiny] [--backend torch] [-v]

The case runs twice: the first run imports, detects and fills the model cache; the second, with
the cache warm, is traced with `sys.setprofile`. Only calls into pytest_hwbench count, and
comprehensions and lambdas are folded into the function that holds them. ``-v`` prints each edge.
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path
from types import FrameType
from typing import Any

import pytest_hwbench
from pytest_hwbench import BenchCase, Runner, TimingConfig

ROOT = Path(pytest_hwbench.__file__).parent


def _ours(frame: FrameType | None) -> FrameType | None:
    """The nearest frame, from `frame` outwards, of a named pytest_hwbench function."""
    while frame is not None:
        code = frame.f_code
        if code.co_filename.startswith(str(ROOT)) and not code.co_name.startswith("<"):
            return frame
        frame = frame.f_back
    return None


def _name(frame: FrameType) -> str:
    return f"{Path(frame.f_code.co_filename).relative_to(ROOT).as_posix()}:{frame.f_code.co_qualname}"


def trace(case: BenchCase) -> set[tuple[str, str]]:
    """Caller -> callee edges between pytest_hwbench functions while `case` runs on a warm cache."""
    runner = Runner(TimingConfig(warmup_iterations=0, min_iterations=1, min_time_s=0), noise_retries=0,
                    cache_size=1)
    runner.run(case)  # imports, detection, the model cache's first fill
    edges: set[tuple[str, str]] = set()

    def profile(frame: FrameType, event: str, arg: Any) -> None:
        if event != "call" or _ours(frame) is not frame:
            return
        caller = _ours(frame.f_back)
        edges.add((_name(caller) if caller is not None else "", _name(frame)))

    sys.setprofile(profile)
    try:
        runner.run(case).to_record("trace")
    finally:
        sys.setprofile(None)
        runner.close()
    return edges


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--model", default="bert-tiny")
    parser.add_argument("--backend", default="torch")
    parser.add_argument("-v", "--verbose", action="store_true", help="print every call edge")
    args = parser.parse_args()
    case = BenchCase(args.model, args.backend, "cpu", "fp32", 1)
    edges = trace(case)
    functions = {f for edge in edges for f in edge if f}
    files = sorted({f.split(":")[0] for f in functions})
    inner = [e for e in edges if e[0]]
    print(f"{case.id}: {len(functions)} functions, {len(inner)} call edges, {len(files)} files")
    print("files:", ", ".join(files))
    if args.verbose:
        for caller, callee in sorted(inner):
            print(f"  {caller} -> {callee}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
