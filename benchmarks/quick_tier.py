"""The quick tier's wall time with retries as shipped beside ``--hwbench-noise-retries 0``, the
share of records judged noisy, and how true the progress line's ETA was. Figures, not assertions.

Runs ``pytest bench_suites -m "cpu and quick"`` twice, each a fresh process into a throwaway
store, alternating which goes first when ``--pairs`` > 1, with ``--hwbench-progress-interval 0``
so every finished case prints its progress line. Each line is stamped on arrival; from the
10th case on, the ETA it gave is set against the time the run really took to end, and the worst
ratio (the larger of predicted/real and real/predicted) is printed. The aims: shipped / no
retries <= 1.2x; worst ETA ratio <= 1.5x.

    flock /tmp/hwbench-timing.lock python benchmarks/quick_tier.py            # two quick tiers: long
    python benchmarks/quick_tier.py --select "-k bert-tiny"                  # a slice, to try it out
    python benchmarks/quick_tier.py --replay mlruns                          # today's ETA on a finished run
"""

from __future__ import annotations

import argparse
import os
import re
import shlex
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
PROGRESS = re.compile(r"hwbench: case (\d+) of (\d+) .*about (?:(\d+)h)?(\d+)m(\d+)s left")


def _seconds(hours: str | None, minutes: str, seconds: str) -> float:
    return int(hours or 0) * 3600 + int(minutes) * 60 + int(seconds)


def run_tier(store: Path, extra: list[str]) -> dict[str, object]:
    """One quick tier into `store`: wall time, its progress lines (arrival time, case, ETA s)
    and the records' noise verdicts."""
    env = {k: v for k, v in os.environ.items() if k not in ("MLFLOW_TRACKING_URI", "PYTEST_ADDOPTS")}
    cmd = [sys.executable, "-m", "pytest", "bench_suites", "-m", "cpu and quick", "-q", "-p", "no:cacheprovider",
           "--hwbench-store", str(store), "--hwbench-progress-interval", "0", *extra]
    began = time.monotonic()
    lines: list[tuple[float, int, int, float]] = []
    tail: list[str] = []
    with subprocess.Popen(cmd, cwd=ROOT, env=env, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True) as proc:
        assert proc.stdout is not None
        for line in proc.stdout:
            tail = (tail + [line])[-40:]
            match = PROGRESS.search(line)
            if match:
                done, total = int(match.group(1)), int(match.group(2))
                lines.append((time.monotonic() - began, done, total, _seconds(*match.group(3, 4, 5))))
        code = proc.wait()
    wall = time.monotonic() - began
    from pytest_hwbench.sinks import Spool

    records = list(Spool(store / "spool").records())
    return {"wall": wall, "progress": lines, "records": records, "exit": code, "tail": "".join(tail)}


def worst_eta_ratio(progress: list[tuple[float, int, int, float]], wall: float,
                    first_case: int = 10) -> tuple[float, str] | None:
    """The worst of predicted/real and real/predicted remaining time over the progress lines
    from case `first_case` on, and where (``case k: said Xs left, was Ys``); None when there
    are none."""
    worst = None
    for at, done, _total, predicted in progress:
        real = wall - at
        if done < first_case or real <= 1.0:
            continue
        ratio = max(predicted, 1.0) / real if predicted > real else real / max(predicted, 1.0)
        if worst is None or ratio > worst[0]:
            worst = (ratio, f"case {done}: said {predicted:.0f} s left, was {real:.0f} s")
    return worst


def _worst_text(worst: tuple[float, str] | None) -> str:
    return "-" if worst is None else f"{worst[0]:.2f}x ({worst[1]})"


def replay_eta(store: Path, cache_size: int = 1, first_case: int = 10,
               min_time_s: float = 1.0) -> tuple[tuple[float, str] | None, int]:
    """The worst ETA ratio (as `worst_eta_ratio`) today's estimator gives on a finished run's
    records (the session with the most records in the store), replayed in the order they were
    made (each case's time: from the record before it; skipped cases are not in the plan; the
    run's end after its last case is neither in the records nor in the estimate), and how many
    records were replayed. Compares estimators on one recorded run."""
    import datetime as dt

    from pytest_hwbench.plugin.grid import case_from_id
    from pytest_hwbench.plugin.progress import Progress
    from pytest_hwbench.sinks import Spool

    everything = list(Spool(store / "spool").records())
    sessions = [r.session_id for r in everything]
    largest = max(set(sessions), key=sessions.count, default=None)  # the run, not a later smoke tier
    records = sorted((r for r in everything if r.session_id == largest), key=lambda r: r.created_at)
    stamps = [dt.datetime.fromisoformat(r.created_at).timestamp() for r in records]
    if len(records) < 2:
        return None, len(records)
    now = [stamps[0]]
    progress = Progress(0.0, clock=lambda: now[0], cache_size=cache_size, min_time_s=min_time_s)
    progress.END_COST_S = 0.0  # the records end with the last case: no sinks closing, no teardown
    plan = {r.record_id: case_from_id(r.case_id) for r in records[1:]}
    progress.start(len(plan), plan=plan)
    lines = []
    for record, stamp in zip(records[1:], stamps[1:], strict=True):
        now[0] = stamp
        load = 0.0 if record.extra.get("load_cached") else record.load_time_s
        progress.done_one(record.record_id, load, record.tries)
        if progress.done < progress.total:
            lines.append((stamp - stamps[0], progress.done, progress.total,
                          progress.estimate_left(stamp - stamps[0])))
    return worst_eta_ratio(lines, stamps[-1] - stamps[0], first_case), len(records)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--select", default="", help="extra pytest arguments for both runs, e.g. \"-k bert-tiny\"")
    parser.add_argument("--pairs", type=int, default=1, help="shipped/no-retries pairs, alternating order (default 1)")
    parser.add_argument("--replay", type=Path, default=None, metavar="STORE",
                        help="instead of running: replay a finished run's spool (STORE/spool) through today's "
                             "progress estimator and print its worst ETA ratio")
    parser.add_argument("--min-time", type=float, default=1.0, metavar="SECONDS",
                        help="with --replay: the run's --hwbench-min-time (default 1.0)")
    parser.add_argument("--keep", type=Path, default=None, metavar="DIR",
                        help="keep each run's store (and its progress lines, progress-*.txt) under DIR, for --replay")
    args = parser.parse_args(argv)
    if args.replay is not None:
        worst, count = replay_eta(args.replay, min_time_s=args.min_time)
        print(f"replayed {count} records of {args.replay}: worst ETA ratio from case 10 "
              f"{_worst_text(worst)} (aim <= 1.5x)")
        return 0
    extra = shlex.split(args.select)
    print(f"quick tier: pytest bench_suites -m 'cpu and quick' {args.select}; {os.cpu_count()} cores; "
          f"load average at start {os.getloadavg()[0]:.1f}", flush=True)
    with tempfile.TemporaryDirectory(prefix="hwbench-quick-") as scratch:
        tmp = args.keep or Path(scratch)
        for pair in range(args.pairs):
            order = [("shipped", []), ("no retries", ["--hwbench-noise-retries", "0"])]
            if pair % 2:
                order.reverse()
            result = {}
            for label, options in order:
                got = run_tier(Path(tmp) / f"{label.replace(' ', '-')}-{pair}", [*extra, *options])
                if args.keep:
                    (Path(tmp) / f"progress-{label.replace(' ', '-')}-{pair}.txt").write_text(
                        "".join(f"{at:.1f} {done} {total} {left:.0f}\n" for at, done, total, left in got["progress"])
                        + f"wall {got['wall']:.1f}\n")
                result[label] = got
                records = got["records"]
                noisy = sum(r.noise == "noisy" for r in records)
                tries = sum(r.tries or 0 for r in records)
                worst = worst_eta_ratio(got["progress"], got["wall"])
                speeds = sorted(r.host_speed for r in records if r.host_speed is not None)
                print(f"  {label}: exit {got['exit']}, {got['wall'] / 60:.1f} min, {len(records)} records, {noisy} noisy "
                      f"({noisy / max(len(records), 1):.0%}), {tries} measurements; worst ETA ratio from case 10 "
                      f"{_worst_text(worst)}; host speed median "
                      f"{speeds[len(speeds) // 2] if speeds else float('nan'):.2f}; load average now "
                      f"{os.getloadavg()[0]:.1f}", flush=True)
                if got["exit"] not in (0, 1):
                    print(got["tail"])
            ratio = result["shipped"]["wall"] / result["no retries"]["wall"]
            print(f"pair {pair + 1}: shipped / no retries = {ratio:.2f}x (aim <= 1.2x)", flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
