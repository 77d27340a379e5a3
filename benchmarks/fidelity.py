"""Does the harness measure what a careful hand-written loop measures?

For each case (model x hardware x backend x batch, fp32 unless told), one model is loaded once
through the case's backend and all three methods run that very model, on the very callable
`LoadedModel.prepare()` returned (same inputs, device placement, dtype, memory format, grad
mode, cuDNN / TF32 flags, compiled graph):

- harness: `Runner.run`, the code path every benchmark case takes (energy loop off: it is not
  latency, and its busy second would run between the methods);
- plain: a hand-written loop over the callable the harness just timed, with the harness's
  warm-up (one cold call plus `warmup_iterations`, then a sync) and iteration count; CUDA
  events per call and one sync on accelerators, perf_counter elsewhere;
- tub: `torch.utils.benchmark.Timer.blocked_autorange` over the same callable.

The methods alternate in `--rounds` rounds whose order rotates (harness, plain, tub; then plain,
tub, harness; ...), after `--warmup-time` seconds of calls for clocks. Medians pool the rounds;
``h/plain`` is the harness median over the plain one, ``range`` its spread over the rounds.

Whether a case is launch bound is printed beside it: ``host`` is the host time to enqueue one
call on an idle device (perf_counter around the call after a sync, none after it; accelerators
only) and ``x8`` the latency at 8x the batch over the case's latency. On an accelerator a case is ``launch`` bound when enqueueing a call takes 80%
or more of its device time (the device waits on Python), ``latency`` bound when it is not but
8x the batch costs under 2x the time (small kernels, device-side fixed costs), else
``compute`` bound.

Targets for h/plain: 0.97-1.03 on the CPU for cases of 10 ms or more; 0.98-1.02 on an
accelerator for cases of 0.1 ms or more that are not launch bound (torch-compile-ro, CUDA
graphs, is where this is meaningful at small batches). A launch-bound case (eager CUDA at
small batches) is paced by the host: harness and reference time the same Python dispatch,
which moves by tens of percent between loops, so only `--launch-band` (default +-10%) is held
there, and the note says so.

Exit status: 0 when every case with a target met it (skipped cases and cases without a target
do not count), 1 when one missed or failed, 2 for a bad command line.

    python benchmarks/fidelity.py [--rounds 5] [--min-time 1.0] [--cases bert-tiny,bert-base,resnet-50]
        [--backends torch,torch-compile-ro] [--hardware cpu,cuda] [--batch-size 1,8]
"""

from __future__ import annotations

import argparse
import dataclasses
import gc
import statistics
import sys
import time
from collections.abc import Callable
from typing import Any

import torch
import torch.utils.benchmark as tub

from pytest_hwbench import (
    Backend,
    BenchCase,
    LoadedModel,
    Runner,
    TimingConfig,
    WrappedModel,
    detect_hardware,
    get_backend,
    register_backend,
)

METHODS = ("harness", "plain", "tub")
#: h/plain bands: CPU cases of `CPU_FLOOR_MS` or more; accelerator cases of `DEVICE_FLOOR_MS` or
#: more that are not launch bound.
CPU_BAND = (0.97, 1.03)
CPU_FLOOR_MS = 10.0
DEVICE_BAND = (0.98, 1.02)
DEVICE_FLOOR_MS = 0.1
#: Host enqueue time over device time at or above which the device waits on the host.
LAUNCH_BOUND_HOST_SHARE = 0.8
#: Latency at 8x the batch under this multiple of the case's latency: not compute bound.
NOT_COMPUTE_BOUND_SCALE = 2.0
SHIM = "fidelity-shared"


@dataclasses.dataclass
class Shared:
    """The one loaded model every method runs, and the call the harness prepared last."""

    loaded: LoadedModel | None = None
    call: Callable[[], Any] | None = None


class SharedBackend(Backend):
    """Hands `Runner` the model loaded beforehand, so the harness path (prepare, cold call,
    warm-up, tracker, memory) runs on the model the references run; registered through the
    public registry like any backend."""

    name = SHIM
    hardware = ("cpu", "cuda", "rocm", "mps", "xpu")
    precisions = ("fp32", "fp16", "bf16", "int8")

    def __init__(self) -> None:
        self.shared = Shared()

    def markers(self, hardware: str) -> tuple[str, ...]:
        return (hardware,)

    def default_precisions(self, hardware: str, hw: Any) -> tuple[str, ...]:
        return ()

    def unavailable(self, hardware: str, precision: str, hw: Any) -> str | None:
        return None

    def load(self, spec: Any, hardware: str, precision: str, device_index: int = 0) -> LoadedModel:
        loaded = self.shared.loaded
        if loaded is None:
            raise RuntimeError(f"{SHIM}: no model was loaded for {spec.name}")
        shared = self.shared

        def keep(call: Callable[[], Any]) -> Callable[[], Any]:
            shared.call = call
            return call

        return WrappedModel.around(loaded, keep)


#: Registered by `main()`, not on import: an importer's backend registry stays as it was.
SHARED = SharedBackend()


def backend_flags() -> dict[str, Any]:
    """Process-wide torch settings that change what a forward runs (backends set some at load)."""
    return {
        "cudnn.benchmark": torch.backends.cudnn.benchmark,
        "cudnn.allow_tf32": torch.backends.cudnn.allow_tf32,
        "cudnn.deterministic": torch.backends.cudnn.deterministic,
        "matmul.allow_tf32": torch.backends.cuda.matmul.allow_tf32,
        "float32_matmul_precision": torch.get_float32_matmul_precision(),
        "grad_enabled": torch.is_grad_enabled(),
    }


def _events_module(loaded: LoadedModel) -> Any | None:
    """torch.cuda (also ROCm), torch.xpu or torch.mps when the harness times with their events."""
    return None if loaded.timer == "wall" else getattr(torch, loaded.timer)


def warm_up(call: Callable[[], Any], loaded: LoadedModel, calls: int) -> None:
    """As the harness does before its timed loop: `calls` calls, then wait for the device."""
    for _ in range(calls):
        call()
    loaded.sync()


def plain_loop(call: Callable[[], Any], loaded: LoadedModel, iterations: int, warmup: int) -> list[float]:
    """Milliseconds per call: device events around each call and one sync at the end on
    accelerators, perf_counter around call + sync elsewhere."""
    warm_up(call, loaded, warmup)
    clock = time.perf_counter
    module = _events_module(loaded)
    if module is None:
        times = []
        for _ in range(iterations):
            start = clock()
            call()
            loaded.sync()
            times.append((clock() - start) * 1e3)
        return times
    pairs = []
    for _ in range(iterations):
        start, end = module.Event(enable_timing=True), module.Event(enable_timing=True)
        start.record()
        call()
        end.record()
        pairs.append((start, end))
    loaded.sync()
    if hasattr(module, "synchronize"):
        module.synchronize()
    return [float(s.elapsed_time(e)) for s, e in pairs]


def enqueue_time(call: Callable[[], Any], loaded: LoadedModel, iterations: int) -> float | None:
    """Median host milliseconds to enqueue one call on an idle device (a sync before each call,
    none after: what Python and the launches cost); None where the host does the work (CPU).
    Timed apart from the loops: with a backlog, a call blocks on the full launch queue and its
    host time would be the device's."""
    if _events_module(loaded) is None:
        return None
    times = []
    for _ in range(iterations):
        loaded.sync()
        start = time.perf_counter()
        call()
        times.append((time.perf_counter() - start) * 1e3)
    loaded.sync()
    return statistics.median(times)


def torch_benchmark(call: Callable[[], Any], loaded: LoadedModel, min_time: float, warmup: int) -> list[float]:
    """Milliseconds per call, one figure per block, from torch.utils.benchmark (its timer syncs
    the accelerator around each block)."""
    warm_up(call, loaded, warmup)
    timer = tub.Timer(stmt="call()", globals={"call": call}, num_threads=torch.get_num_threads())
    return [t * 1e3 for t in timer.blocked_autorange(min_run_time=min_time).times]


def scale_latency(case: BenchCase, loaded: LoadedModel, factor: int, small_ms: float, min_time: float,
                  warmup: int) -> tuple[float | None, str]:
    """Latency at `factor` x the batch over `small_ms`, and a note (why none, when none)."""
    if factor <= 1:
        return None, ""
    try:
        big = loaded.prepare(case.spec().make_inputs(case.batch_size * factor))
        start = time.perf_counter()
        big()
        loaded.sync()
        one = max(time.perf_counter() - start, 1e-6)
        iterations = max(3, min(200, int(min_time / one)))
        times = plain_loop(big, loaded, iterations, warmup)
    except Exception as exc:  # out of memory, a shape the backend refuses: say so, keep going
        return None, f"x{factor}: {type(exc).__name__}: {str(exc).splitlines()[0][:80] if str(exc) else ''}"
    return statistics.median(times) / small_ms, ""


def bound(hardware: str, device_ms: float, host_ms: float | None, scale: float | None) -> str:
    """``launch``, ``latency`` or ``compute`` on accelerators (see the module docstring);
    ``cpu`` on the CPU, where the host does the work."""
    if hardware == "cpu" or host_ms is None:
        return "cpu"
    if device_ms > 0 and host_ms / device_ms >= LAUNCH_BOUND_HOST_SHARE:
        return "launch"
    if scale is not None and scale < NOT_COMPUTE_BOUND_SCALE:
        return "latency"
    return "compute"


def target(hardware: str, kind: str, reference_ms: float, launch_band: float) -> tuple[tuple[float, float] | None, str]:
    """The h/plain band held for a case, or None, and why."""
    if hardware == "cpu":
        if reference_ms < CPU_FLOOR_MS:
            return None, f"below {CPU_FLOOR_MS:g} ms: no target"
        return CPU_BAND, ""
    if reference_ms < DEVICE_FLOOR_MS:
        return None, f"below {DEVICE_FLOOR_MS:g} ms: no target"
    if kind == "launch":
        return (1 - launch_band, 1 + launch_band), "launch bound (host-paced), wide band"
    return DEVICE_BAND, ""


def fidelity(case: BenchCase, args: argparse.Namespace) -> dict[str, Any]:
    """Measure `case` with the three methods on one loaded model; medians and diagnostics."""
    spec = case.spec()
    timing = TimingConfig(warmup_iterations=3, min_iterations=10, min_time_s=args.min_time)
    warmup = 1 + timing.warmup_iterations  # the harness's cold call, then its warm-up
    loaded = get_backend(case.backend).load(spec, case.hardware, case.precision, 0)
    SHARED.shared = Shared(loaded)
    shim_case = dataclasses.replace(case, backend=SHIM)
    runner = Runner(timing, energy_min_time_s=0)
    flags_seen: list[dict[str, Any]] = []
    try:
        prime = runner.run(shim_case)  # prepares (compiles, records CUDA graphs) and warms up
        call = SHARED.shared.call
        assert call is not None
        deadline = time.perf_counter() + args.warmup_time
        while time.perf_counter() < deadline:  # clocks up, as for a long run
            call()
        loaded.sync()
        iterations = prime.latency.iterations
        per_round: dict[str, list[list[float]]] = {m: [] for m in METHODS}
        timers = set()
        for r in range(args.rounds):
            for method in METHODS[r % 3:] + METHODS[:r % 3]:
                flags_seen.append(backend_flags())
                if method == "harness":
                    result = runner.run(shim_case)
                    per_round["harness"].append(list(result.latency.values_ms))
                    iterations = result.latency.iterations
                    timers.add(result.details.get("timer", loaded.timer))
                elif method == "plain":
                    # The callable the harness prepared and timed last, with its iteration count.
                    per_round["plain"].append(plain_loop(SHARED.shared.call, loaded, iterations, warmup))
                else:
                    per_round["tub"].append(torch_benchmark(SHARED.shared.call, loaded, args.min_time, warmup))
        medians = {m: statistics.median([v for values in per_round[m] for v in values]) for m in METHODS}
        ratios = [statistics.median(h) / statistics.median(p)
                  for h, p in zip(per_round["harness"], per_round["plain"], strict=True)]
        host = enqueue_time(SHARED.shared.call, loaded, max(10, min(iterations, 100)))
        scale, scale_note = scale_latency(case, loaded, args.launch_factor, medians["plain"], args.min_time, warmup)
    finally:
        runner.close()  # closes the shared model (a compiled one resets dynamo)
        SHARED.shared = Shared()
        del loaded
        gc.collect()
        if case.hardware in ("cuda", "rocm") and torch.cuda.is_available():
            torch.cuda.empty_cache()
    changed = [k for k in flags_seen[0] if len({str(f[k]) for f in flags_seen}) > 1] if flags_seen else []
    return {**medians, "host": host, "ratios": ratios, "scale": scale,
            "scale_note": scale_note, "flags": flags_seen[-1] if flags_seen else {}, "flags_changed": changed,
            "timers": timers, "iterations": sum(len(v) for v in per_round["harness"])}


def _batch_sizes(text: str) -> list[int]:
    try:
        sizes = [int(s) for s in text.split(",") if s.strip()]
    except ValueError:
        raise argparse.ArgumentTypeError(f"batch sizes are comma-separated integers, got {text!r}") from None
    if not sizes or min(sizes) < 1:
        raise argparse.ArgumentTypeError(f"batch sizes must be >= 1, got {text!r}")
    return sizes


def _names(text: str) -> list[str]:
    return [s.strip() for s in text.split(",") if s.strip()]


def _positive(text: str) -> float:
    value = float(text)
    if not value >= 0:
        raise argparse.ArgumentTypeError(f"expected a number >= 0, got {text!r}")
    return value


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0],
                                     epilog="Exit status: 0 every held target met, 1 a miss or a failure, "
                                            "2 bad arguments. The module docstring explains the columns.")
    parser.add_argument("--rounds", type=int, default=5, help="interleaved rounds per case, order rotating (default 5)")
    parser.add_argument("--min-time", type=_positive, default=1.0, help="seconds per method per round (default 1.0)")
    parser.add_argument("--warmup-time", type=_positive, default=1.0,
                        help="seconds of calls per case before the first round (default 1.0)")
    parser.add_argument("--cases", type=_names, default=_names("bert-tiny,bert-base,resnet-50"),
                        help="zoo models to check (default bert-tiny,bert-base,resnet-50)")
    parser.add_argument("--backends", type=_names, default=_names("torch,torch-compile-ro"),
                        help="backends (default torch,torch-compile-ro; torch-compile-ro runs on CUDA only)")
    parser.add_argument("--hardware", type=_names, default=_names("cpu,cuda"), help="targets (default cpu,cuda)")
    parser.add_argument("--precision", default="fp32", help="precision of every case (default fp32)")
    parser.add_argument("--batch-size", type=_batch_sizes, default=[1], help="batch sizes, e.g. 1,8 (default 1)")
    parser.add_argument("--launch-factor", type=int, default=8,
                        help="batch multiple for the x8 column (default 8; 0 skips that measurement)")
    parser.add_argument("--launch-band", type=_positive, default=0.10,
                        help="h/plain band held for launch-bound cases: 1 +- this (default 0.10)")
    parser.add_argument("--threads", type=int, default=None,
                        help="torch intra-op threads (default: torch's own; 1 on a shared, busy host)")
    args = parser.parse_args(argv)
    if args.rounds < 1:
        parser.error(f"--rounds must be >= 1, got {args.rounds}")
    if args.threads is not None:
        if args.threads < 1:
            parser.error(f"--threads must be >= 1, got {args.threads}")
        torch.set_num_threads(args.threads)

    register_backend(SHARED)
    hw = detect_hardware()
    print(f"torch {torch.__version__}, threads {torch.get_num_threads()}, available {', '.join(hw.available())}")
    print(f"{args.rounds} round(s), {args.min_time:g} s per method per round, {args.warmup_time:g} s warm-up, "
          f"{args.precision}; flags at start: {backend_flags()}")
    print(f"targets h/plain: cpu {CPU_BAND[0]}-{CPU_BAND[1]} from {CPU_FLOOR_MS:g} ms; accelerators "
          f"{DEVICE_BAND[0]}-{DEVICE_BAND[1]} from {DEVICE_FLOOR_MS:g} ms unless launch bound, then "
          f"{1 - args.launch_band:.2f}-{1 + args.launch_band:.2f} (host-paced: not a harness figure)")
    header = (f"{'case':42s} {'harness ms':>10s} {'plain ms':>9s} {'tub ms':>9s} {'h/plain':>7s} {'range':>11s} "
              f"{'h/tub':>6s} {'host ms':>8s} {'x' + str(args.launch_factor):>5s} {'bound':>7s}  note")
    print(header)
    print("-" * len(header))
    missed = failed = 0
    for hardware in args.hardware:
        for backend in args.backends:
            for name in args.cases:
                for batch in args.batch_size:
                    try:
                        case = BenchCase(name, backend, hardware, args.precision, batch)
                        reason = case.unavailable(hw)
                    except (KeyError, ValueError) as exc:
                        print(f"{name}-{hardware}-{backend}-b{batch}: ERROR {exc}", flush=True)
                        failed += 1
                        continue
                    if reason:
                        print(f"{case.id:42s} skipped: {reason}", flush=True)
                        continue
                    t0 = time.perf_counter()
                    try:
                        m = fidelity(case, args)
                    except Exception as exc:
                        print(f"{case.id:42s} ERROR {type(exc).__name__}: {exc}", flush=True)
                        failed += 1
                        continue
                    r_plain, r_tub = m["harness"] / m["plain"], m["harness"] / m["tub"]
                    kind = bound(hardware, m["plain"], m["host"], m["scale"])
                    band, why = target(hardware, kind, m["plain"], args.launch_band)
                    if band is None:
                        note = why
                    elif band[0] <= r_plain <= band[1]:
                        note = f"ok ({band[0]:.2f}-{band[1]:.2f}{'; ' + why if why else ''})"
                    else:
                        note = f"MISS (target {band[0]:.2f}-{band[1]:.2f}{'; ' + why if why else ''})"
                        missed += 1
                    extras = [m["scale_note"]] if m["scale_note"] else []
                    if m["flags_changed"]:
                        extras.append(f"FLAGS CHANGED between methods: {', '.join(m['flags_changed'])}")
                    if hardware != "cpu" and "wall" in m["timers"]:
                        extras.append("the harness fell back to the wall clock (device events failed)")
                    if hardware != "cpu":
                        flags = m["flags"]
                        extras.append(f"tf32 cudnn/matmul {flags['cudnn.allow_tf32']}/{flags['matmul.allow_tf32']}, "
                                      f"cudnn.benchmark {flags['cudnn.benchmark']}")
                    spread = f"{min(m['ratios']):.3f}-{max(m['ratios']):.3f}"
                    host = f"{m['host']:8.3f}" if m["host"] is not None else f"{'-':>8s}"
                    scale = f"{m['scale']:5.2f}" if m["scale"] is not None else f"{'-':>5s}"
                    print(f"{case.id:42s} {m['harness']:10.3f} {m['plain']:9.3f} {m['tub']:9.3f} {r_plain:7.3f} "
                          f"{spread:>11s} {r_tub:6.3f} {host} {scale} {kind:>7s}  {note}"
                          f"{'; ' + '; '.join(extras) if extras else ''} [{time.perf_counter() - t0:.0f}s]",
                          flush=True)
    print(f"{missed} missed, {failed} failed")
    return 1 if missed or failed else 0


if __name__ == "__main__":
    sys.exit(main())
