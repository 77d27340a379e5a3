"""Estimate how long a `pytest bench_suites` grid takes on one GPU, from recorded GPU runs.

The grid is what `pytest bench_suites <ARGS> --collect-only -q` collects here (the default
`-m cuda` grid unless told otherwise); the durations come from the project's own spool records
of real runs (default: ``../shared/gpu-evidence/h100-2026-11-23``). Each record's wall time is
the gap since the previous record of its session (load, compile, warm-up, timed loop, energy
loop, sinks), corrected to the default timing options where its run used shorter ones. A case
without a record of its own takes the median of its (model, backend, mode), else of its (tier,
backend, mode), else of its (backend, mode).

    python benchmarks/cuda_grid_estimate.py                      # the default cuda grid
    python benchmarks/cuda_grid_estimate.py -- -m cuda --hwbench-grid all
    python benchmarks/cuda_grid_estimate.py -- -m "cuda and quick"

Prints the case count, the estimate and its breakdown; exit 0, or 2 on bad input.
"""

from __future__ import annotations

import argparse
import datetime as dt
import json
import re
import statistics
import subprocess
import sys
from collections import defaultdict
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
EVIDENCE = ROOT.parent / "shared" / "gpu-evidence" / "h100-2026-11-23"
#: Timing options of each evidence file's run (its README's commands): (min time s, energy time s).
#: The defaults are (1.0, 1.0); the runs that used less are corrected by the difference.
RUN_OPTIONS: dict[str, tuple[float, float]] = {
    "quick_eager_records.jsonl": (0.3, 0.3),
    "full_eager_sweep_records.jsonl": (0.2, 0.0),
    "compiled_records.jsonl": (1.0, 1.0),
    "train_generate_compiled_tiny_records.jsonl": (1.0, 1.0),
}
DEFAULT_OPTIONS = (1.0, 1.0)
#: Seconds per case of kinds the runs hold no record of, assumed (stated in the output): an
#: ONNX export per model (FACTS.md: 10-16 s for BERT-base) spread over its batch sizes, a
#: TensorRT engine build per case, a static-cache decode graph compiled per case (inference
#: graphs took 8-20 s each on the H100; a decode graph plus its prefill, about 3 of them).
ASSUMED_S: dict[tuple[str, str], float] = {
    ("onnxruntime", "inference"): 8.0,
    ("onnxruntime-trt", "inference"): 60.0,
    ("torch-compile", "generate"): 45.0,
    ("torch-compile-ro", "generate"): 45.0,
}
#: Any other case the runs say nothing of.
FALLBACK_S = 5.0
CASE = re.compile(r"\[(?P<id>[^\]]+)\]$")


def _tier(model: str) -> str:
    from pytest_hwbench import get_model

    try:
        return get_model(model).tier
    except KeyError:
        return "unknown"


def recorded_durations(evidence: Path) -> list[dict]:
    """Every evidence record with its wall time `seconds` at the default timing options."""
    out = []
    for path in sorted(evidence.glob("*_records.jsonl")):
        min_time, energy = RUN_OPTIONS.get(path.name, DEFAULT_OPTIONS)
        correction = (DEFAULT_OPTIONS[0] - min_time) + (DEFAULT_OPTIONS[1] - energy)
        by_session: dict[str, list[dict]] = defaultdict(list)
        for line in path.read_text().splitlines():
            record = json.loads(line)
            by_session[record["session_id"]].append(record)
        for records in by_session.values():
            records.sort(key=lambda r: r["created_at"])
            stamps = [dt.datetime.fromisoformat(r["created_at"]) for r in records]
            for before, now, record in zip(stamps[:-1], stamps[1:], records[1:], strict=True):
                out.append({**record, "seconds": (now - before).total_seconds() + correction})
    return out


def collect(pytest_args: list[str]) -> list[str]:
    """Case ids of the grid `pytest bench_suites ARGS --collect-only -q` collects."""
    cmd = [sys.executable, "-m", "pytest", "bench_suites", *pytest_args, "--collect-only", "-q",
           "-p", "no:cacheprovider"]
    proc = subprocess.run(cmd, cwd=ROOT, capture_output=True, text=True, check=False)
    if proc.returncode not in (0, 5):
        sys.exit(f"collection failed ({' '.join(cmd)}):\n{proc.stdout[-2000:]}{proc.stderr[-2000:]}")
    return [m.group("id") for line in proc.stdout.splitlines() if "::" in line and (m := CASE.search(line))]


def parse_case(case_id: str) -> dict[str, str]:
    """model, hardware, backend, precision, batch and mode of a case id."""
    from pytest_hwbench.backends.base import registered_backends

    backends = sorted(registered_backends(), key=len, reverse=True)
    match = re.match(r"^(?P<model>.+?)-(?P<hw>cpu|cuda|rocm|mps|xpu|gpu|npu|openvino|qnn)-(?P<rest>.+)$", case_id)
    if not match:
        raise ValueError(f"not a case id: {case_id!r}")
    rest = match["rest"]
    backend = next(b for b in backends if rest.startswith(b + "-"))
    tail = rest[len(backend) + 1:].split("-")
    mode = tail[2] if len(tail) > 2 and tail[2] in ("generate", "train") else "inference"
    return {"model": match["model"], "hardware": match["hw"], "backend": backend, "precision": tail[0],
            "batch": tail[1].lstrip("b"), "mode": mode}


def estimate(case_ids: list[str], records: list[dict]) -> tuple[float, dict[str, float], int]:
    """(total seconds, seconds per (backend, mode), cases estimated from a fallback)."""
    exact: dict[tuple, float] = {}
    pools: dict[tuple, list[float]] = defaultdict(list)
    for r in records:
        exact[(r["model"], r["backend"], r["mode"], r["precision"], str(r["batch_size"]))] = r["seconds"]
        pools[(r["model"], r["backend"], r["mode"])].append(r["seconds"])
        pools[(_tier(r["model"]), r["backend"], r["mode"])].append(r["seconds"])
        pools[(r["backend"], r["mode"])].append(r["seconds"])
    total, by_kind, fallbacks = 0.0, defaultdict(float), 0
    for case_id in case_ids:
        c = parse_case(case_id)
        seconds = exact.get((c["model"], c["backend"], c["mode"], c["precision"], c["batch"]))
        if seconds is None:
            for key in ((c["model"], c["backend"], c["mode"]), (_tier(c["model"]), c["backend"], c["mode"]),
                        (c["backend"], c["mode"])):
                if pools.get(key):
                    seconds = statistics.median(pools[key])
                    break
        if seconds is None:
            seconds, fallbacks = ASSUMED_S.get((c["backend"], c["mode"]), FALLBACK_S), fallbacks + 1
        total += seconds
        by_kind[f"{c['backend']} {c['mode']}"] += seconds
    return total, dict(by_kind), fallbacks


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0],
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--evidence", type=Path, default=EVIDENCE, help=f"recorded runs (default {EVIDENCE})")
    parser.add_argument("pytest_args", nargs="*", default=["-m", "cuda"],
                        help="pytest arguments after --, selecting the grid (default: -m cuda)")
    args = parser.parse_args(argv)
    if not args.evidence.is_dir():
        parser.error(f"--evidence: {args.evidence} is not a directory of *_records.jsonl files")
    records = recorded_durations(args.evidence)
    cases = collect(args.pytest_args)
    total, by_kind, fallbacks = estimate(cases, records)
    print(f"grid: pytest bench_suites {' '.join(args.pytest_args)}: {len(cases)} cases")
    print(f"from {len(records)} recorded case durations in {args.evidence}")
    for kind, seconds in sorted(by_kind.items(), key=lambda kv: -kv[1]):
        print(f"  {kind:32s} {seconds / 60:6.1f} min")
    print(f"estimated time on one GPU: {total / 60:.1f} min"
          + (f" ({fallbacks} cases with no comparable record, at the assumed "
             + ", ".join(f"{b} {m} {s:.0f} s" for (b, m), s in ASSUMED_S.items()) + f", else {FALLBACK_S:.0f} s)"
             if fallbacks else ""))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
