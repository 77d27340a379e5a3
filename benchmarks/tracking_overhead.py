"""What does recording cost per case? The same trivial cases with tracking on and off.

Runs pytest on 200 trivial cases (a backend whose forward is a fixed pure-Python kernel of about
0.2 ms, so the record flow is nearly all there is) alternately with `--hwbench-no-track` and with
the local SQLite MLflow store + DuckDB, written live by the sink writer process. Prints, per
mode, the critical path (first case start to last case end: what tracking adds between
measurements, the waits for the writer included), the whole session (to the end of the last
sink write), in milliseconds per case, and the ratio on/off; then what the measurements saw:
the median of the cases' timed medians in each mode, and the writer's own account against the
timed windows (``-v`` line: timed windows it was busy in, CPU it used while they ran).

    python benchmarks/tracking_overhead.py [--cases 200] [--repeats 2]
"""

from __future__ import annotations

import argparse
import json
import re
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

CONFTEST = '''
import json, time
import pytest
from pytest_hwbench.backends.base import Backend, LoadedModel, register_backend


class NoopModel(LoadedModel):
    def prepare(self, inputs): return _kernel


class NoopBackend(Backend):
    """A backend whose forward is a fixed small kernel: what remains is the harness and the record flow."""
    name = "noop"
    hardware = ("cpu",)
    precisions = ("fp32",)
    def markers(self, hardware): return ("cpu",)
    def default_precisions(self, hardware, hw): return ("fp32",)
    def unavailable(self, hardware, precision, hw): return None
    def load(self, spec, hardware, precision, device_index=0):
        return NoopModel(precision="fp32", device_name="noop")


def _kernel():
    return sum(range(5000))


register_backend(NoopBackend())
_marks = []
_medians = []

def pytest_hwbench_record(config, record):
    _medians.append(record.latency_ms_median)

def pytest_runtest_logstart(nodeid, location):
    _marks.append(("start", time.perf_counter()))

def pytest_runtest_logfinish(nodeid, location):
    _marks.append(("end", time.perf_counter()))

@pytest.hookimpl(tryfirst=True)
def pytest_sessionfinish(session):
    session.config._overhead_marks = list(_marks)

@pytest.hookimpl(trylast=True)
def pytest_unconfigure(config):
    marks = getattr(config, "_overhead_marks", _marks)
    starts = [t for k, t in marks if k == "start"]
    ends = [t for k, t in marks if k == "end"]
    with open("timing.json", "w") as fh:
        json.dump({"first_start": starts[0], "last_end": ends[-1], "unconfigure": time.perf_counter(),
                   "cases": len(ends), "medians": _medians}, fh)
'''

#: The tracker's ``-v`` line on the writer against the timed windows.
WRITER_LINE = re.compile(r"busy during (?P<busy>\d+) of (?P<calls>\d+) timed windows, CPU used while they ran "
                         r"(?P<cpu>[\d.]+) ms; the cases waited (?P<waited>[\d.]+) s")

TEST = '''
def test_case(hwbench_case, hwbench):
    hwbench.measure(hwbench_case)
'''


def run_once(workdir: Path, cases: int, track: bool) -> dict[str, float]:
    """One pytest session in a subprocess; returns critical-path and total seconds."""
    sizes = ",".join(str(i) for i in range(1, cases + 1))
    args = [sys.executable, "-m", "pytest", "-v", "-p", "no:cacheprovider", "-p", "no:benchmark",
            "--hwbench-backends", "noop", "--hwbench-models", "bert-tiny", "--hwbench-batch-sizes", sizes,
            "--hwbench-warmup", "0", "--hwbench-min-iterations", "5", "--hwbench-min-time", "0",
            "--hwbench-store", str(workdir / "store")]
    if not track:
        args.append("--hwbench-no-track")
    start = time.perf_counter()
    proc = subprocess.run(args, cwd=workdir, capture_output=True, text=True, check=False)
    wall = time.perf_counter() - start
    if proc.returncode != 0:
        raise SystemExit(f"pytest failed ({proc.returncode}):\n{proc.stdout[-3000:]}\n{proc.stderr[-3000:]}")
    t = json.loads((workdir / "timing.json").read_text())
    if t["cases"] != cases:
        raise SystemExit(f"expected {cases} cases, pytest ran {t['cases']}")
    out = {"critical": t["last_end"] - t["first_start"], "session": t["unconfigure"] - t["first_start"],
           "wall": wall, "median_ms": statistics.median(m for m in t["medians"] if m is not None)}
    found = WRITER_LINE.search(proc.stdout)
    if track:
        if found is None:
            raise SystemExit(f"no sink writer line in the output:\n{proc.stdout[-3000:]}")
        out.update(overlaps=int(found["busy"]), calls=int(found["calls"]), writer_cpu_ms=float(found["cpu"]),
                   waited_s=float(found["waited"]))
    return out


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--cases", type=int, default=200, help="trivial cases per session (default 200)")
    parser.add_argument("--repeats", type=int, default=2, help="sessions per mode, alternated (default 2)")
    args = parser.parse_args(argv)
    results: dict[bool, list[dict[str, float]]] = {False: [], True: []}
    with tempfile.TemporaryDirectory(prefix="hwbench-overhead-") as tmp:
        workdir = Path(tmp)
        (workdir / "conftest.py").write_text(CONFTEST)
        (workdir / "test_overhead.py").write_text(TEST)
        for i in range(args.repeats):
            for track in (False, True):
                r = run_once(workdir, args.cases, track)
                results[track].append(r)
                extra = (f"; writer busy in {r['overlaps']} of {r['calls']} timed windows, {r['writer_cpu_ms']:.0f} ms "
                         f"CPU during them, waited for {r['waited_s']:.2f} s" if track else "")
                print(f"  run {i + 1} tracking={'on ' if track else 'off'}: critical path {r['critical']:.2f} s, "
                      f"session {r['session']:.2f} s, process {r['wall']:.2f} s, median of timed medians "
                      f"{r['median_ms'] * 1e3:.1f} us{extra}", flush=True)
    n = args.cases
    print(f"\n{n} trivial cases per session, median of {args.repeats} sessions per mode (local SQLite MLflow + DuckDB)")
    print(f"{'':28s} {'off ms/case':>12s} {'on ms/case':>11s} {'added ms/case':>14s} {'ratio':>7s}")
    for key, label in (("critical", "critical path (in session)"), ("session", "whole session (+flush)")):
        off = statistics.median(r[key] for r in results[False]) / n * 1e3
        on = statistics.median(r[key] for r in results[True]) / n * 1e3
        print(f"{label:28s} {off:12.2f} {on:11.2f} {on - off:14.2f} {on / off:7.2f}")
    off = statistics.median(r["median_ms"] for r in results[False]) * 1e3
    on = statistics.median(r["median_ms"] for r in results[True]) * 1e3
    print(f"{'timed median of a case (us)':28s} {off:12.1f} {on:11.1f} {on - off:14.1f} {on / off:7.2f}")
    overlaps = sum(r["overlaps"] for r in results[True])
    calls = sum(r["calls"] for r in results[True])
    cpu = sum(r["writer_cpu_ms"] for r in results[True])
    print(f"\nsink writer: busy during {overlaps} of {calls} timed windows; {cpu:.0f} ms of its CPU fell "
          "inside them (it writes between cases, idle while a case runs)")
    return 0


if __name__ == "__main__":
    sys.exit(main())
