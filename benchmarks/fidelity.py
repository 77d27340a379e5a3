"""Does the harness measure what a careful hand-written loop measures?

For a few cases, alternate in one process: the harness (`Runner.run`, the code path every
benchmark case takes), a plain loop over a plain model (perf_counter on CPU, CUDA events on
CUDA) and `torch.utils.benchmark.Timer`. Prints harness median / reference median per case.
Target: within 0.97-1.03 on CPU for cases of 10 ms or more.

    python benchmarks/fidelity.py [--rounds 5] [--min-time 1.0] [--cases bert-tiny,bert-base,resnet-50]
"""

from __future__ import annotations

import argparse
import statistics
import sys
import time
from typing import Any

import torch
import torch.utils.benchmark as tub

from pytest_hwbench import BenchCase, Runner, TimingConfig, detect_hardware, get_model


def plain_loop(model: Any, inputs: dict[str, Any], iterations: int, device: str) -> list[float]:
    """Milliseconds per forward: perf_counter on CPU, CUDA events and one sync on CUDA."""
    times = []
    with torch.inference_mode():
        if device.startswith("cuda"):
            pairs = []
            for _ in range(iterations):
                start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
                start.record()
                model(**inputs)
                end.record()
                pairs.append((start, end))
            torch.cuda.synchronize()
            return [s.elapsed_time(e) for s, e in pairs]
        for _ in range(iterations):
            start = time.perf_counter()
            model(**inputs)
            times.append((time.perf_counter() - start) * 1e3)
    return times


def torch_benchmark(model: Any, inputs: dict[str, Any], min_time: float) -> list[float]:
    """Milliseconds per forward from torch.utils.benchmark (it syncs CUDA itself)."""
    timer = tub.Timer(stmt="model(**inputs)", setup="torch.set_grad_enabled(False)",
                      globals={"model": model, "inputs": inputs, "torch": torch},
                      num_threads=torch.get_num_threads())
    measurement = timer.blocked_autorange(min_run_time=min_time)
    per_call = measurement.times  # seconds per call, one entry per block
    return [t * 1e3 for t in per_call]


def fidelity(case: BenchCase, rounds: int, min_time: float) -> dict[str, float]:
    """Median latencies (ms) of the three methods, interleaved over `rounds`."""
    spec = get_model(case.model)
    runner = Runner(TimingConfig(warmup_iterations=3, min_iterations=10, min_time_s=min_time))
    device = "cuda:0" if case.hardware == "cuda" else "cpu"
    model = spec.build_model(device)
    inputs = spec.make_inputs(case.batch_size, device=device)
    with torch.inference_mode():
        for _ in range(3):  # warm-up of the reference model
            model(**inputs)
    harness, plain, tbench = [], [], []
    for _ in range(rounds):
        result = runner.run(case)
        harness += result.latency.values_ms
        plain += plain_loop(model, inputs, result.latency.iterations, device)
        tbench += torch_benchmark(model, inputs, min_time)
    runner.close()
    return {"harness": statistics.median(harness), "plain": statistics.median(plain),
            "torch.utils.benchmark": statistics.median(tbench), "iterations": len(harness)}


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rounds", type=int, default=5, help="interleaved rounds per case (default 5)")
    parser.add_argument("--min-time", type=float, default=1.0, help="seconds per method per round (default 1.0)")
    parser.add_argument("--cases", default="bert-tiny,bert-base,resnet-50", help="zoo models to check")
    parser.add_argument("--batch-size", type=int, default=1)
    args = parser.parse_args(argv)
    hardware = ["cpu"] + (["cuda"] if detect_hardware()["cuda"].available else [])
    print(f"torch {torch.__version__}, threads {torch.get_num_threads()}, hardware {', '.join(hardware)}")
    header = f"{'case':34s} {'harness ms':>11s} {'plain ms':>9s} {'tub ms':>9s} {'h/plain':>8s} {'h/tub':>7s}  note"
    print(header)
    print("-" * len(header))
    for hw in hardware:
        for name in args.cases.split(","):
            case = BenchCase(name, "torch", hw, "fp32", args.batch_size)
            t0 = time.perf_counter()
            m = fidelity(case, args.rounds, args.min_time)
            r_plain, r_tub = m["harness"] / m["plain"], m["harness"] / m["torch.utils.benchmark"]
            band = (0.97, 1.03) if hw == "cpu" else (0.98, 1.02)
            floor = 10.0 if hw == "cpu" else 1.0
            if m["plain"] < floor:
                note = f"below {floor:g} ms: no target"
            else:
                note = "ok" if band[0] <= r_plain <= band[1] else f"MISS (target {band[0]}-{band[1]})"
            print(f"{case.id:34s} {m['harness']:11.3f} {m['plain']:9.3f} {m['torch.utils.benchmark']:9.3f} "
                  f"{r_plain:8.3f} {r_tub:7.3f}  {note} [{time.perf_counter() - t0:.0f}s]", flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
