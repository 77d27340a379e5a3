"""How good is `hwbench compare` as a regression gate? Figures, not assertions.

Four real runs of a subset of the quick tier (inference, fp32, tiny models on torch, onnxruntime
and a third-party backend ``gate-torch``), each a fresh ``pytest bench_suites`` process writing one
session to a throwaway store, and one ``hwbench ab`` job:

1. quiet;  2. quiet again;  3. with a background process spinning on one core for the whole run;
4. quiet, with ``gate-torch`` doing 1.3x the work of a call (a planted 30 % slowdown);
5. ``hwbench ab`` of ``gate-torch`` against itself doing 1.1x the work (a planted 10 % slowdown),
   one core kept busy for the whole job.

``gate-torch`` is registered the way a third party does it, through the
``pytest_hwbench.backends`` entry-point group of a distribution put on PYTHONPATH
(``benchmarks/gate_site``; ``tests/test_ab.py`` uses it too): it runs
torch eager and then busy-works 0.3x of the call's own duration when ``HWBENCH_GATE_WORK=1.3``.

Printed:
- (a) A/A quiet, runs 1 vs 2: false alarms (regression or improvement) per case, inconclusive;
- (b) A/A under load, runs 1 vs 3: the same, plus how many loaded records were judged noisy, any
  record without a verdict, and torch eager cases within 2x of their quiet figure or marked noisy;
- (c) A/B, runs 1 vs 4 on ``gate-torch``: detection (the share of cases called a regression);
- (d) ``hwbench ab``, run 5: detection, false alarms (improvements), decisiveness.
Each line has false alarms, detection where a change was planted, and decisiveness (the share of
compared cases with a verdict). Beside (a)-(c), the verdicts of a plain Mann-Whitney gate (U on
iterations) on the same records, as a baseline. The aims: false alarms <= 5 % in every run, detection >= 90 %
in (c) and (d), decisiveness >= 80 % in (a) and (b) and >= 90 % in (d).

    python benchmarks/gate_quality.py                    # a few minutes on 2 cores
    python benchmarks/gate_quality.py --models bert-tiny,vit-tiny --min-time 0.5
"""

from __future__ import annotations

import argparse
import contextlib
import math
import os
import subprocess
import sys
import tempfile
import textwrap
import time
from collections import Counter
from collections.abc import Iterator
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
DEFAULT_MODELS = "bert-tiny,gpt2-tiny,vit-tiny,resnet-tiny,t5-tiny,clip-tiny"

#: A distribution holding the third-party backend ``gate-torch`` (its package says what it does):
#: on PYTHONPATH, it registers through the ``pytest_hwbench.backends`` entry-point group.
GATE_SITE = ROOT / "benchmarks" / "gate_site"


@contextlib.contextmanager
def _busy(core: int | None) -> Iterator[None]:
    """A process spinning on `core` for the duration (nothing where `core` is None)."""
    if core is None:
        yield
        return
    spin = f"import os\nos.sched_setaffinity(0, {{{core}}})\nwhile True:\n    pass\n"
    spinner = subprocess.Popen([sys.executable, "-c", spin])
    try:
        yield
    finally:
        spinner.kill()
        spinner.wait()


def _run(label: str, store: Path, args: argparse.Namespace, backends: str, *, work: float | str = 1.0,
         load_core: int | None = None) -> str:
    """One pytest session into `store`; returns its session id."""
    from pytest_hwbench.sinks import list_sessions

    env = {k: v for k, v in os.environ.items() if k not in ("MLFLOW_TRACKING_URI", "PYTEST_ADDOPTS")}
    env["PYTHONPATH"] = os.pathsep.join([str(GATE_SITE), env.get("PYTHONPATH", "")])
    env["HWBENCH_GATE_WORK"] = str(work)
    cmd = [sys.executable, "-m", "pytest", "bench_suites/test_inference.py", "-m", "cpu and quick", "-q",
           "-p", "no:cacheprovider", "--benchmark-disable", "--hwbench-store", str(store),
           "--hwbench-models", args.models, "--hwbench-backends", backends, "--hwbench-precisions", "fp32",
           "--hwbench-batch-sizes", args.batch_sizes, "--hwbench-hardware", "cpu",
           "--hwbench-min-time", str(args.min_time), "--hwbench-progress-interval", "30"]
    began = time.monotonic()
    with _busy(load_core):
        proc = subprocess.run(cmd, cwd=ROOT, env=env, capture_output=True, text=True)
    summary = [ln for ln in proc.stdout.splitlines() if ln.startswith("hwbench: ") or " passed" in ln]
    print(f"  run {label}: exit {proc.returncode} in {time.monotonic() - began:.0f} s; " + " | ".join(summary[-3:]),
          flush=True)
    if proc.returncode != 0:
        print(textwrap.indent(proc.stdout[-3000:] + proc.stderr[-2000:], "    "))
    sessions = list_sessions(store / "hwbench.duckdb")
    return str(sessions["session_id"].iloc[0])  # newest first


def _mann_whitney_gate(a, b) -> str:
    """The verdict of a plain Mann-Whitney gate: median change > 10 % and Mann-Whitney U on the
    iterations, p < 0.05."""
    from scipy.stats import mannwhitneyu

    ta, tb = list(a.timings_ms), list(b.timings_ms)
    if len(ta) < 2 or len(tb) < 2 or not a.latency_ms_median or not b.latency_ms_median:
        return "unchanged"
    change = b.latency_ms_median / a.latency_ms_median - 1
    p = mannwhitneyu(ta, tb, alternative="two-sided").pvalue
    if abs(change) > 0.10 and p < 0.05:
        return "regression" if change > 0 else "improvement"
    return "unchanged"


def _records(db: Path, session: str, backends: set[str] | None = None):
    from pytest_hwbench.sinks import load_records

    return [r for r in load_records(db, session) if backends is None or r.backend in backends]


def _line(name: str, comps, old: Counter) -> None:
    counts = Counter(c.verdict for c in comps)
    alarms = counts["regression"] + counts["improvement"]
    compared = len(comps) - counts["missing"]
    decided = compared - counts["inconclusive"]
    reasons = Counter(c.note.split(":")[0].split(" (")[0] for c in comps if c.verdict == "inconclusive")
    old_alarms = old["regression"] + old["improvement"]
    print(f"{name}: {compared} cases | false alarms {alarms} ({alarms / max(compared, 1):.1%}: "
          f"{counts['regression']} regression, {counts['improvement']} improvement) | decisiveness "
          f"{decided / max(compared, 1):.0%} | inconclusive {counts['inconclusive']} "
          f"({', '.join(f'{n} {r}' for r, n in reasons.most_common()) or '-'}) | unchanged {counts['unchanged']}")
    print(f"    Mann-Whitney on iterations: false alarms {old_alarms} ({old_alarms / max(compared, 1):.1%})")


#: Kinds of comparison the calibration mode judges, in the order printed.
KINDS = ("separate sessions", "history of 5 sessions", "hwbench ab")


def _tally(table: dict, kind: str, comparisons, planted: dict[str, float]) -> None:
    """Add each compared case's verdict to `table[kind][planted share]` (0.0: nothing planted)."""
    for c in comparisons:
        if c.verdict == "missing":
            continue
        table.setdefault(kind, {}).setdefault(planted.get(c.case_id, 0.0), Counter())[c.verdict] += 1


def _print_calibration(table: dict) -> None:
    for kind in KINDS:
        for size, verdicts in sorted(table.get(kind, {}).items()):
            n = sum(verdicts.values())
            decided = n - verdicts["inconclusive"]
            if size == 0.0:
                alarms = verdicts["regression"] + verdicts["improvement"]
                what = f"A/A: false alarms {alarms} of {n} ({alarms / n:.1%})"
            else:
                what = (f"planted +{size:.0%}: detection {verdicts['regression']} of {n} "
                        f"({verdicts['regression'] / n:.0%}), called unchanged {verdicts['unchanged']}, "
                        f"improvement {verdicts['improvement']}")
            print(f"  {kind:<22} {what} | decisiveness {decided / n:.0%} | {dict(sorted(verdicts.items()))}")


def calibrate(args: argparse.Namespace) -> int:
    """`--trials N`: N pairs of separate sessions (a baseline of every backend; then the same
    code, but ``gate-torch`` doing 1.1x the work in half the models and 1.3x in the other half),
    a history of the 5 baseline sessions nearest each B against it, and `--ab-trials` ``hwbench
    ab`` jobs (gate-torch 1.1x in B): every torch and onnxruntime case is an A/A case, every
    gate-torch case a planted one. Odd trials keep one core busy throughout."""
    from pytest_hwbench.compare import compare_pairs, compare_records
    from pytest_hwbench.sinks import list_sessions, load_records

    models = [m for m in args.models.split(",") if m]
    half = len(models) // 2
    plan = {m: (1.1 if i < half else 1.3) for i, m in enumerate(models)}
    work = ",".join(f"{m}={f}" for m, f in plan.items())
    load_core = max(os.sched_getaffinity(0))
    table: dict = {}
    with tempfile.TemporaryDirectory(prefix="hwbench-gate-") as tmp:
        root = Path(args.keep or tmp)
        store = root / "store"
        db = store / "hwbench.duckdb"
        print(f"gate calibration: {args.trials} pairs of sessions and {args.ab_trials} ab jobs; models "
              f"{args.models}; gate-torch planted {work}; one core busy in odd trials", flush=True)
        pairs: list[tuple[str, str]] = []
        for t in range(args.trials):
            busy = load_core if t % 2 else None
            h = _run(f"H{t + 1}{' (one core busy)' if busy is not None else ''}", store, args,
                     "torch,onnxruntime,gate-torch", load_core=busy)
            b = _run(f"B{t + 1}{' (one core busy)' if busy is not None else ''}", store, args,
                     "torch,onnxruntime,gate-torch", work=work, load_core=busy)
            pairs.append((h, b))
        records = {sid: load_records(db, sid) for sid in list_sessions(db)["session_id"]}

        def planted(recs) -> dict[str, float]:
            return {r.case_id: plan[r.model] - 1 for r in recs if r.backend == "gate-torch"}

        for t, (h, b) in enumerate(pairs):
            _tally(table, KINDS[0], compare_records(records[h], records[b]), planted(records[b]))
            if len(pairs) >= 5:
                near = sorted(range(len(pairs)), key=lambda i: (abs(i - t), i))[:5]
                history = [r for i in near for r in records[pairs[i][0]]]
                _tally(table, KINDS[1], compare_records(history, records[b]), planted(records[b]))
        for t in range(args.ab_trials):
            ab_store = root / f"ab-store-{t}"
            _ab_job(ab_store, args, load_core if t % 2 else None)
            frame = list_sessions(ab_store / "hwbench.duckdb")
            sides = {(e or {}).get("ab_side"): sid for sid, e in zip(frame["session_id"], frame["extra"], strict=True)}
            if set(sides) >= {"A", "B"}:
                a_recs = load_records(ab_store / "hwbench.duckdb", sides["A"])
                b_recs = load_records(ab_store / "hwbench.duckdb", sides["B"])
                gate = {r.case_id: 0.1 for r in b_recs if r.backend == "gate-torch"}
                _tally(table, KINDS[2], compare_pairs(a_recs, b_recs, threshold=0.05), gate)
        print()
        _print_calibration(table)
        if args.keep:
            print(f"stores kept under {root}")
    return 0


def _ab_job(store: Path, args: argparse.Namespace, load_core: int | None) -> None:
    """One ``hwbench ab`` job: torch, onnxruntime and gate-torch on both sides, gate-torch doing
    1.1x the work in B, written to `store`."""
    env = {k: v for k, v in os.environ.items() if k not in ("MLFLOW_TRACKING_URI", "PYTEST_ADDOPTS")}
    env["PYTHONPATH"] = os.pathsep.join([str(GATE_SITE), env.get("PYTHONPATH", "")])
    cmd = [sys.executable, "-c", "import sys; from pytest_hwbench.cli import main; sys.exit(main(sys.argv[1:]))",
           "ab", "--models", args.models, "--backends", "torch,onnxruntime,gate-torch", "--batch-sizes",
           args.batch_sizes, "--threads", "1", "--store", str(store), "--b-env", "HWBENCH_GATE_WORK=1.1"]
    if args.ab_rounds is not None:
        cmd += ["--rounds", str(args.ab_rounds)]
    began = time.monotonic()
    store.mkdir(parents=True, exist_ok=True)
    with _busy(load_core):
        proc = subprocess.run(cmd, cwd=store, env=env, capture_output=True, text=True)
    summary = [ln for ln in proc.stdout.splitlines() if "decisiveness" in ln]
    print(f"  ab job{' (one core busy)' if load_core is not None else ''}: exit {proc.returncode} in "
          f"{time.monotonic() - began:.0f} s; {' | '.join(summary[-1:])}", flush=True)
    if proc.returncode not in (0, 1):
        print(textwrap.indent(proc.stdout[-3000:] + proc.stderr[-2000:], "    "))


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--models", default=DEFAULT_MODELS, help=f"quick-tier models (default {DEFAULT_MODELS})")
    parser.add_argument("--batch-sizes", default="1", help="batch sizes (default 1)")
    parser.add_argument("--min-time", type=float, default=0.5, help="--hwbench-min-time per case (default 0.5)")
    parser.add_argument("--ab-rounds", type=int, default=None,
                        help="rounds of the hwbench ab job (default: hwbench ab's own)")
    parser.add_argument("--ab-min-time", type=float, default=None,
                        help="--hwbench-min-time of each side of the hwbench ab job (default: hwbench ab's own)")
    parser.add_argument("--keep", default=None, metavar="DIR", help="keep the store here (default: a temp dir)")
    parser.add_argument("--trials", type=int, default=0, metavar="N",
                        help="calibration mode: N pairs of separate sessions with planted 10 %% and 30 %% slowdowns, "
                             "histories of 5 sessions, and --ab-trials ab jobs; prints per kind of comparison "
                             "false alarms, detection, decisiveness and planted changes called unchanged")
    parser.add_argument("--ab-trials", type=int, default=5, metavar="M",
                        help="hwbench ab jobs in calibration mode (default 5)")
    args = parser.parse_args(argv)
    if args.trials < 0 or args.ab_trials < 0:
        parser.error(f"--trials and --ab-trials must be >= 0, got {args.trials} and {args.ab_trials}")
    if args.trials:
        return calibrate(args)

    from pytest_hwbench.compare import compare_records

    with tempfile.TemporaryDirectory(prefix="hwbench-gate-") as tmp:
        root = Path(args.keep or tmp)
        root.mkdir(parents=True, exist_ok=True)
        store = root / "store"
        db = store / "hwbench.duckdb"
        all_backends = "torch,onnxruntime,gate-torch"
        load_core = max(os.sched_getaffinity(0))
        print(f"gate quality: models {args.models}, batch sizes {args.batch_sizes}, fp32, min time "
              f"{args.min_time} s, {len(os.sched_getaffinity(0))} cores; load on core {load_core} in run 3", flush=True)
        s1 = _run("1 (quiet)", store, args, all_backends)
        s2 = _run("2 (quiet)", store, args, all_backends)
        s3 = _run("3 (one core loaded)", store, args, all_backends, load_core=load_core)
        s4 = _run("4 (quiet, gate-torch 1.3x work)", store, args, "gate-torch", work=1.3)

        r1, r2, r3 = _records(db, s1), _records(db, s2), _records(db, s3)
        r4 = _records(db, s4, {"gate-torch"})

        def old(a, b) -> Counter:
            by_a = {r.case_id: r for r in a if r.status == "passed"}
            return Counter(_mann_whitney_gate(by_a[r.case_id], r) for r in b if r.status == "passed" and r.case_id in by_a)

        print()
        for label, records in (("run 1", r1), ("run 2", r2), ("run 3", r3), ("run 4", r4)):
            noise = Counter(r.noise for r in records)
            print(f"{label}: {len(records)} records, {noise['clean']} clean, {noise['noisy']} noisy, "
                  f"{noise[None]} without a verdict; tries {dict(sorted(Counter(r.tries for r in records).items()))}")
        print()
        _line("(a) A/A quiet, runs 1 vs 2", compare_records(r1, r2), old(r1, r2))
        _line("(b) A/A one core loaded, runs 1 vs 3", compare_records(r1, r3), old(r1, r3))
        quiet = {r.case_id: r for r in r1 if r.status == "passed"}
        torch3 = [r for r in r3 if r.backend == "torch" and r.status == "passed" and r.case_id in quiet]
        within = [r for r in torch3 if r.latency_ms_median <= 2 * quiet[r.case_id].latency_ms_median]
        ok = [r for r in torch3 if r in within or r.noise == "noisy"]
        ratios = sorted(r.latency_ms_median / quiet[r.case_id].latency_ms_median for r in torch3)
        median_ratio = ratios[len(ratios) // 2] if ratios else math.nan
        print(f"    torch eager under load: {len(within)} of {len(torch3)} within 2x of run 1, {len(ok)} of "
              f"{len(torch3)} within 2x or marked noisy; median ratio to run 1 {median_ratio:.2f}, max "
              f"{max(ratios, default=math.nan):.2f}; threads {dict(Counter(r.threads for r in torch3))}")
        gate1 = [r for r in r1 if r.backend == "gate-torch"]
        ab = compare_records(gate1, r4)
        clean = [c for c in ab if c.noise == "clean/clean"]
        counts = Counter(c.verdict for c in ab)
        compared = len(ab) - counts["missing"]
        changes = sorted(c.change for c in ab if c.change is not None)
        print(f"(c) A/B planted 30 % slowdown, runs 1 vs 4 on gate-torch: {compared} cases ({len(clean)} clean on both "
              f"sides) | detection {counts['regression']} ({counts['regression'] / max(compared, 1):.0%}) | false "
              f"alarms {counts['improvement']} ({counts['improvement'] / max(compared, 1):.0%}) | decisiveness "
              f"{(compared - counts['inconclusive']) / max(compared, 1):.0%} | all verdicts {dict(counts)}; median "
              f"measured change {changes[len(changes) // 2] if changes else math.nan:+.1%}")
        old_ab = old(gate1, r4)
        print(f"    Mann-Whitney on iterations: regression in {old_ab['regression']} of {len(ab)}", flush=True)
        _ab_line(root, args, load_core)
        if args.keep:
            print(f"store kept at {store}")
    return 0


def _ab_line(root: Path, args: argparse.Namespace, load_core: int) -> None:
    """(d): ``hwbench ab`` of gate-torch against itself with 1.1x the work, one core busy throughout."""
    env = {k: v for k, v in os.environ.items() if k not in ("MLFLOW_TRACKING_URI", "PYTEST_ADDOPTS")}
    env["PYTHONPATH"] = os.pathsep.join([str(GATE_SITE), env.get("PYTHONPATH", "")])
    cmd = [sys.executable, "-c", "import sys; from pytest_hwbench.cli import main; sys.exit(main(sys.argv[1:]))",
           "ab", "--models", args.models, "--backends", "gate-torch", "--batch-sizes", args.batch_sizes,
           "--threads", "1", "--store", str(root / "ab-store"), "--b-env", "HWBENCH_GATE_WORK=1.1"]
    if args.ab_rounds is not None:
        cmd += ["--rounds", str(args.ab_rounds)]
    if args.ab_min_time is not None:
        cmd += ["--a-options", f"--hwbench-min-time {args.ab_min_time}",
                "--b-options", f"--hwbench-min-time {args.ab_min_time}"]
    began = time.monotonic()
    with _busy(load_core):
        # not from the repository root: a stale *.egg-info there would hide the commands' entry points
        proc = subprocess.run(cmd, cwd=root, env=env, capture_output=True, text=True)
    verdicts = Counter(line.split()[1] for line in proc.stdout.splitlines()
                       if "-cpu-gate-torch-" in line and len(line.split()) > 1)
    cases = sum(verdicts.values())
    print(f"(d) hwbench ab, planted 10 % slowdown, one core busy throughout ({time.monotonic() - began:.0f} s, exit "
          f"{proc.returncode}): {cases} cases | detection {verdicts['regression']} "
          f"({verdicts['regression'] / max(cases, 1):.0%}) | false alarms {verdicts['improvement']} "
          f"({verdicts['improvement'] / max(cases, 1):.0%}) | decisiveness "
          f"{(cases - verdicts['inconclusive']) / max(cases, 1):.0%} | all verdicts {dict(verdicts)}")
    if not cases:
        print(textwrap.indent(proc.stdout[-3000:] + proc.stderr[-2000:], "    "))


if __name__ == "__main__":
    sys.exit(main())
