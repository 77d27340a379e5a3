"""What the test suite costs: the README's `pytest tests` and the end-to-end tier, timed on a fresh
clone, with the slowest tests and the time per tier. Figures, not assertions.

The tiers (`tests/conftest.py`): ``e2e`` tests start a nested measured pytest session, a server,
a browser or another process; the README's ``pytest tests`` leaves them out (``-m "not e2e"`` in
``pyproject.toml``'s addopts) and ``.ci/run`` runs them after it (``pytest tests -m e2e``).

    python benchmarks/test_time.py                 # both tiers on a fresh clone of HEAD, this venv
    python benchmarks/test_time.py --here          # this working tree instead of a clone
    python benchmarks/test_time.py --coverage      # also line coverage of pytest_hwbench and hwsel
    python benchmarks/test_time.py --coverage --missed missed.txt   # and the lines no test ran
    python benchmarks/test_time.py --tiers fast    # only the README's command

Printed: per tier its wall time, the number of tests by outcome and the summed test time; the 20
slowest tests over both tiers (setup, call and teardown together) with their tier; the xdist
groups with the most summed test time (a group runs on one worker, so the longest one bounds the
tier's wall time); with
``--coverage``, the line coverage of ``pytest_hwbench`` and ``hwsel`` over the tiers run
(subprocesses included: coverage's ``patch = subprocess``).
"""

from __future__ import annotations

import argparse
import importlib.util
import os
import subprocess
import sys
import tempfile
import time
import xml.etree.ElementTree as ET
from collections import defaultdict
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
#: tier -> the pytest arguments that select it (after ``pytest tests``)
TIERS = {"fast": [], "e2e": ["-m", "e2e", "-n", "3", "--dist", "loadgroup"]}


def _durations(junit: Path) -> dict[str, tuple[float, str]]:
    """test id -> (seconds, outcome) from a JUnit XML file."""
    out: dict[str, tuple[float, str]] = {}
    for case in ET.parse(junit).getroot().iter("testcase"):
        outcome = "passed"
        for child in case:
            if child.tag in ("failure", "error"):
                outcome = "failed"
            elif child.tag == "skipped":
                outcome = "skipped"
        name = f"{case.get('classname', '')}::{case.get('name', '')}"
        seconds, _ = out.get(name, (0.0, outcome))
        out[name] = (seconds + float(case.get("time") or 0.0), outcome)
    return out


def _run_tier(tier: str, workdir: Path, out: Path, coverage: bool) -> tuple[float, int, dict[str, tuple[float, str]]]:
    junit = out / f"{tier}.xml"
    cmd = [sys.executable, "-m", "pytest", "tests", *TIERS[tier], "-q", "-p", "no:cacheprovider",
           f"--junitxml={junit}"]
    if coverage:
        cmd = [sys.executable, "-m", "coverage", "run", f"--rcfile={out / 'coveragerc'}", "-m", *cmd[2:]]
    env = {k: v for k, v in os.environ.items() if k not in ("PYTEST_ADDOPTS", "MLFLOW_TRACKING_URI")}
    if workdir != ROOT:
        # This venv's editable install finds the packages in ROOT after sys.path: the clone's come
        # first for every process, the nested sessions in temporary folders included.
        env["PYTHONPATH"] = os.pathsep.join(x for x in (str(workdir), env.get("PYTHONPATH")) if x)
    began = time.monotonic()
    print(f"test time: {tier} tier: {' '.join(cmd[2:])} (in {workdir})", flush=True)
    proc = subprocess.run(cmd, cwd=workdir, env=env, capture_output=True, text=True)
    wall = time.monotonic() - began
    last = [ln for ln in (proc.stdout or proc.stderr).splitlines() if ln.strip()][-1:] or ["(no output)"]
    print(f"  exit {proc.returncode} in {wall:.0f} s: {last[0]}", flush=True)
    if junit.exists():  # which tests failed, and the first line of why
        for case in ET.parse(junit).getroot().iter("testcase"):
            for child in case:
                if child.tag in ("failure", "error"):
                    why = (child.get("message") or "").strip().splitlines()[:1] or ["(no message)"]
                    print(f"  {child.tag}: {case.get('classname')}::{case.get('name')}: {why[0][:300]}", flush=True)
    return wall, proc.returncode, _durations(junit) if junit.exists() else {}


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--here", action="store_true", help="time this working tree instead of a fresh clone")
    parser.add_argument("--coverage", action="store_true",
                        help="measure line coverage of pytest_hwbench and hwsel (needs coverage>=7.10)")
    parser.add_argument("--missed", type=Path, metavar="FILE",
                        help="with --coverage: write the lines no test ran, file by file, to FILE")
    parser.add_argument("--tiers", default="fast,e2e", help="comma-separated tiers to run (default fast,e2e)")
    parser.add_argument("--slowest", type=int, default=20, help="how many of the slowest tests to list (default 20)")
    args = parser.parse_args(argv)
    tiers = [t for t in args.tiers.split(",") if t]
    unknown = [t for t in tiers if t not in TIERS]
    if unknown:
        parser.error(f"--tiers: {', '.join(unknown)} unknown; accepted: {', '.join(TIERS)}")
    if args.missed and not args.coverage:
        parser.error("--missed needs --coverage")
    if args.coverage and importlib.util.find_spec("coverage") is None:
        parser.error("--coverage needs coverage>=7.10 in this environment: pip install -e '.[test]'")

    with tempfile.TemporaryDirectory(prefix="hwbench-test-time-") as tmp:
        out = Path(tmp)
        workdir = ROOT
        if not args.here:
            workdir = out / "clone"
            subprocess.run(["git", "clone", "-q", str(ROOT), str(workdir)], check=True)
        if args.coverage:
            (out / "coveragerc").write_text(
                f"[run]\nsource = pytest_hwbench, hwsel\nparallel = true\npatch = subprocess\n"
                f"data_file = {out / '.coverage'}\n")
        results = {}
        for tier in tiers:
            results[tier] = _run_tier(tier, workdir, out, args.coverage)
        print()
        every: list[tuple[float, str, str]] = []
        for tier, (wall, code, tests) in results.items():
            outcomes: dict[str, int] = defaultdict(int)
            for _seconds, outcome in tests.values():
                outcomes[outcome] += 1
            summed = sum(s for s, _ in tests.values())
            print(f"{tier:>5} tier: wall {wall / 60:.1f} min, exit {code}, {len(tests)} tests "
                  f"({', '.join(f'{n} {k}' for k, n in sorted(outcomes.items()))}), test time summed {summed / 60:.1f} min")
            every += [(s, name, tier) for name, (s, _) in tests.items()]
        total = sum(wall for wall, _, _ in results.values())
        print(f"all tiers: wall {total / 60:.1f} min")
        print(f"\nthe {args.slowest} slowest tests (setup + call + teardown):")
        for seconds, name, tier in sorted(every, reverse=True)[: args.slowest]:
            print(f"  {seconds:7.1f} s  {tier:>4}  {name}")
        groups: dict[str, float] = defaultdict(float)
        for seconds, name, tier in every:
            if "--dist" in TIERS[tier] and "@" in name:  # xdist writes the group after the last @
                groups[f"{tier} {name.rsplit('@', 1)[1]}"] += seconds
        if groups:
            print("\nthe xdist groups with the most test time (each runs on one worker; the longest bounds "
                  "its tier's wall time):")
            for name, seconds in sorted(groups.items(), key=lambda kv: -kv[1])[:8]:
                print(f"  {seconds:7.1f} s  {name}")
        if args.coverage:
            rc = ["--rcfile", str(out / "coveragerc")]
            subprocess.run([sys.executable, "-m", "coverage", "combine", "-q", *rc], cwd=workdir, check=False)
            report = subprocess.run([sys.executable, "-m", "coverage", "report", *rc, "--format=total"],
                                    cwd=workdir, capture_output=True, text=True)
            print(f"\nline coverage of pytest_hwbench and hwsel over tiers {','.join(tiers)}: "
                  f"{report.stdout.strip() or report.stderr.strip()}%")
            if args.missed:
                missed = subprocess.run([sys.executable, "-m", "coverage", "report", *rc, "-m", "--skip-covered"],
                                        cwd=workdir, capture_output=True, text=True)
                args.missed.write_text(missed.stdout + missed.stderr)
                print(f"lines no test ran, file by file: {args.missed}")
    return 0 if all(code == 0 for _, code, _ in results.values()) else 1


if __name__ == "__main__":
    sys.exit(main())
