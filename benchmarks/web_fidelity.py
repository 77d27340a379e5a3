"""What an in-browser figure means: onnxruntime-web timed in the page next to Python onnxruntime.

For each model and batch size, the same ONNX graph (`_onnx_export.export_onnx`) is timed twice:
in headless Chromium by onnxruntime-web (the `onnxruntime-web` backend: ``performance.now()``
around each ``session.run``, warm-up by time, then at least `--min-time` seconds) and in
Python onnxruntime on the CPU provider with as many intra-op threads as the page's wasm
provider got (``perf_counter`` around each ``session.run``, the same warm-up and minimum). It
prints both medians and their ratio, and the page timer's resolution with and without
cross-origin isolation (FACTS.md: 5 us isolated, 100 us not), so a reader knows how finely an
in-page median can resolve. A figure, never an assertion.

    python benchmarks/web_fidelity.py --models bert-tiny,vit-tiny --batch-sizes 1,8 --targets wasm,webgpu

Needs a Chromium (`apt-get install chromium`) and onnxruntime-web (`hwbench web install`).
"""

from __future__ import annotations

import argparse
import statistics
import sys
import time
from typing import Any


def _ort_median(path: str, feeds: dict[str, Any], threads: int, warmup_s: float, min_time_s: float,
                min_iterations: int) -> tuple[float, int]:
    import onnxruntime as ort

    options = ort.SessionOptions()
    options.intra_op_num_threads = threads
    options.inter_op_num_threads = 1
    options.graph_optimization_level = ort.GraphOptimizationLevel.ORT_ENABLE_ALL
    session = ort.InferenceSession(path, options, providers=["CPUExecutionProvider"])
    end = time.perf_counter() + warmup_s
    while time.perf_counter() < end:
        session.run(None, feeds)
    times: list[float] = []
    start = time.perf_counter()
    while len(times) < min_iterations or time.perf_counter() - start < min_time_s:
        a = time.perf_counter()
        session.run(None, feeds)
        times.append((time.perf_counter() - a) * 1e3)
    return statistics.median(times), len(times)


def _timer_resolution(isolate: bool) -> float | None:
    from pytest_hwbench.web import WebDriver, find_browser

    browser, _ = find_browser()
    if browser is None:
        return None
    driver = WebDriver(browser.path, isolate=isolate)
    try:
        return float(driver.call("probe", timeout_s=60)["timerResolutionMs"])
    finally:
        driver.close()


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--models", default="bert-tiny,vit-tiny")
    parser.add_argument("--batch-sizes", default="1,8")
    parser.add_argument("--targets", default="wasm,webgpu")
    parser.add_argument("--min-time", type=float, default=1.0, help="seconds measured per case (default 1)")
    parser.add_argument("--warmup", type=float, default=1.0, help="seconds of warm-up per case (default 1)")
    args = parser.parse_args(argv)

    import os

    os.environ["HWBENCH_WEB_WARMUP_S"] = str(args.warmup)
    from pytest_hwbench.backends.base import get_backend
    from pytest_hwbench.backends.onnxruntime_web import BUNDLES
    from pytest_hwbench.hardware import detect_hardware
    from pytest_hwbench.models import get_model
    from pytest_hwbench.trackers import TimingConfig
    from pytest_hwbench.web import close_shared_driver

    hw = detect_hardware()
    backend = get_backend("onnxruntime-web")
    timing = TimingConfig(warmup_iterations=1, min_iterations=10, min_time_s=args.min_time)
    rows = []
    for target in args.targets.split(","):
        reason = backend.unavailable(target, "fp32", hw)
        if reason:
            print(f"{target}: skipped: {reason}")
            continue
        for name in args.models.split(","):
            spec = get_model(name)
            loaded = backend.load(spec, target, "fp32")
            try:
                for batch in (int(b) for b in args.batch_sizes.split(",")):
                    inputs = spec.make_inputs(batch)
                    call = loaded.prepare(inputs)
                    measured = call.measure_remote(timing)  # type: ignore[attr-defined]
                    page = statistics.median(measured.timings_ms)
                    threads = loaded.threads or 1
                    feeds = {k: v.detach().cpu().numpy() for k, v in inputs.items()}
                    native, count = _ort_median(loaded.details["onnx_file"], feeds, threads, args.warmup,  # type: ignore[index]
                                                args.min_time, 10)
                    rows.append((name, batch, target, loaded.device_name, page, len(measured.timings_ms),
                                 native, count, threads))
            finally:
                loaded.close()
    close_shared_driver()

    web = hw["wasm"].details if "wasm" in hw.targets else {}
    print(f"browser: {web.get('browser_version')}; onnxruntime-web {web.get('ort_web_version')} "
          f"(bundles {', '.join(f'{t}: {b}' for t, b in BUNDLES.items())})")
    header = (f"{'model':<10} {'batch':>5} {'target':<7} {'page median ms':>14} {'n':>5} "
              f"{'ORT CPU median ms':>17} {'n':>5} {'page/ORT':>8}  device (wasm threads = ORT threads)")
    print(header)
    print("-" * len(header))
    for name, batch, target, device, page, n_page, native, n_native, threads in rows:
        print(f"{name:<10} {batch:>5} {target:<7} {page:>14.3f} {n_page:>5} {native:>17.3f} {n_native:>5} "
              f"{page / native:>8.2f}  {device} ({threads} thread{'s' if threads > 1 else ''})")
    isolated, plain = _timer_resolution(True), _timer_resolution(False)
    fmt = lambda v: f"{v * 1e3:.1f} us" if v is not None else "n/a"  # noqa: E731
    print(f"in-page timer resolution: {fmt(isolated)} cross-origin isolated (what hwbench serves), "
          f"{fmt(plain)} without isolation")
    return 0


if __name__ == "__main__":
    sys.exit(main())
