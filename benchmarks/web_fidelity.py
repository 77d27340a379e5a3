"""Is an hwbench web figure what the browser really does? hwbench against an independent page.

Default: for each model (bert-tiny and vit-tiny, wasm, batch 1), in `--rounds` interleaved rounds
(order alternating, ABBA), two measurements of the same ONNX file (`_onnx_export.export_onnx`):

- **hwbench**: ``pytest bench_suites/test_inference.py -m wasm --hwbench-noise-retries 0`` in a new
  process (a fresh browser, the first model warmed up as hwbench does), medians and recorded
  memory read back from the run's DuckDB file;
- **reference**: a page of this script's own (its own server, its own Chromium started with the
  same flags, one browser per model), loading the file with the same
  onnxruntime-web build and provider, ``performance.now()`` around each ``session.run``, after a
  long warm-up (`--reference-warmup`, 5 s) that leaves V8 time to finish compiling the wasm.
  While it warms up and measures, the browser's processes are sampled: summed PSS and summed RSS.

It prints each round, then per model the median of the rounds' hwbench/reference ratios and the
recorded memory against the reference page's summed PSS (and RSS, for scale). A figure, never an
assertion.

    flock /tmp/hwbench-timing.lock python benchmarks/web_fidelity.py --rounds 3

``--vs-python`` prints another comparison instead: in-page medians (the backend's call) next to
Python onnxruntime on the CPU provider with as many threads, and the page timer's resolution with
and without cross-origin isolation (FACTS.md: 5 us isolated, 100 us not):

    python benchmarks/web_fidelity.py --vs-python --models bert-tiny,vit-tiny --batch-sizes 1,8 --targets wasm,webgpu

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


def python_main(args: argparse.Namespace) -> int:
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




_REFERENCE_HTML = b"""<!doctype html><meta charset="utf-8"><title>reference</title>
<script type="module">
async function post(path, body) {
  await fetch(path, {method: "POST", headers: {"Content-Type": "application/json"}, body: JSON.stringify(body)});
}
const TYPED = {float32: Float32Array, int64: BigInt64Array, int32: Int32Array};
try {
  const ort = await import("/ort/ort.wasm.min.mjs");
  const spec = await (await fetch("/spec.json")).json();
  const model = new Uint8Array(await (await fetch("/model.onnx")).arrayBuffer());
  const session = await ort.InferenceSession.create(model, {executionProviders: ["wasm"],
                                                            graphOptimizationLevel: "all"});
  const blob = await (await fetch("/inputs.bin")).arrayBuffer();
  const feeds = {};
  for (const f of spec.feeds) {
    feeds[f.name] = new ort.Tensor(f.dtype, new TYPED[f.dtype](blob.slice(f.offset, f.offset + f.bytes)), f.dims);
  }
  await post("/measuring", {});
  const warmStart = performance.now();
  while (performance.now() - warmStart < spec.warmup_s * 1000) await session.run(feeds);
  const times = [];
  const start = performance.now();
  while (times.length < 10 || performance.now() - start < spec.min_time_s * 1000) {
    const a = performance.now();
    await session.run(feeds);
    times.push(performance.now() - a);
  }
  await post("/result", {times, threads: ort.env.wasm.numThreads, isolated: self.crossOriginIsolated});
} catch (e) {
  await post("/result", {error: String(e && e.message || e)});
}
</script>"""


def _footprint_mb(pid: int) -> tuple[float, float]:
    """Summed PSS and summed RSS (MiB) of a browser and its child processes."""
    import psutil

    pss = rss = 0
    try:
        procs = [psutil.Process(pid), *psutil.Process(pid).children(recursive=True)]
    except psutil.Error:
        return 0.0, 0.0
    for proc in procs:
        try:
            info = proc.memory_full_info()
        except psutil.Error:
            continue
        pss += info.pss
        rss += info.rss
    return pss / 2**20, rss / 2**20


def _reference(name: str, batch: int, warmup_s: float, min_time_s: float) -> dict[str, Any]:
    """One model in a fresh browser showing this script's own page: median ms, peak summed PSS and RSS."""
    import json
    import os
    import shutil
    import signal
    import subprocess
    import tempfile
    import threading
    from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

    import numpy as np

    from pytest_hwbench.backends._onnx_export import export_onnx
    from pytest_hwbench.models import get_model
    from pytest_hwbench.web import BROWSER_FLAGS, find_browser, find_ort_web

    browser, why = find_browser()
    ort, why_ort = find_ort_web()
    if browser is None or ort is None:
        raise SystemExit(why or why_ort)
    spec = get_model(name)
    path = export_onnx(spec).path
    feeds, chunks, offset = [], [], 0
    for key, tensor in spec.make_inputs(batch).items():
        array = np.ascontiguousarray(tensor.detach().cpu().numpy())
        data = array.tobytes()
        feeds.append({"name": key, "dtype": str(array.dtype), "dims": list(array.shape), "offset": offset,
                      "bytes": len(data)})
        chunks.append(data)
        offset += len(data)
    files = {"/spec.json": json.dumps({"feeds": feeds, "warmup_s": warmup_s, "min_time_s": min_time_s}).encode(),
             "/model.onnx": path.read_bytes(), "/inputs.bin": b"".join(chunks), "/": _REFERENCE_HTML}
    measuring, done = threading.Event(), threading.Event()
    result: dict[str, Any] = {}

    class Handler(BaseHTTPRequestHandler):
        def log_message(self, *args: Any) -> None:
            pass

        def _send(self, body: bytes, kind: str, status: int = 200) -> None:
            self.send_response(status)
            self.send_header("Cross-Origin-Opener-Policy", "same-origin")
            self.send_header("Cross-Origin-Embedder-Policy", "require-corp")
            self.send_header("Content-Type", kind)
            self.send_header("Content-Length", str(len(body)))
            self.end_headers()
            self.wfile.write(body)

        def do_GET(self) -> None:  # noqa: N802
            url = self.path.split("?")[0]
            if url.startswith("/ort/") and "/" not in url[5:]:
                file = ort.dist / url[5:]
                if file.is_file():
                    kind = {".mjs": "text/javascript", ".wasm": "application/wasm"}.get(file.suffix, "text/plain")
                    self._send(file.read_bytes(), kind)
                    return
            if url in files:
                self._send(files[url], "text/html" if url == "/" else "application/octet-stream")
                return
            self._send(b"", "text/plain", 404)

        def do_POST(self) -> None:  # noqa: N802
            body = json.loads(self.rfile.read(int(self.headers.get("Content-Length") or 0)) or b"{}")
            self._send(b"", "text/plain", 200)
            if self.path == "/measuring":
                measuring.set()
            else:
                result.update(body)
                done.set()

    server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    folder = tempfile.mkdtemp(prefix="web-fidelity-", dir="/tmp")
    # The same browser flags as hwbench's (a renderer Chromium deems in the background runs at a
    # lower priority, which on a busy host is a different figure, not a different harness).
    args = [browser.path, *BROWSER_FLAGS, f"--user-data-dir={folder}/profile",
            f"http://127.0.0.1:{server.server_address[1]}/"]
    process = subprocess.Popen(args, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, start_new_session=True,
                               env={**os.environ, "TMPDIR": folder})
    pss_peak = rss_peak = 0.0
    try:
        deadline = time.monotonic() + 120 + warmup_s + min_time_s
        while not done.is_set() and time.monotonic() < deadline:
            if measuring.is_set():
                pss, rss = _footprint_mb(process.pid)
                pss_peak, rss_peak = max(pss_peak, pss), max(rss_peak, rss)
            time.sleep(0.25)
    finally:
        os.killpg(process.pid, signal.SIGKILL)
        process.wait()
        server.shutdown()
        shutil.rmtree(folder, ignore_errors=True)
    if not done.is_set() or "error" in result:
        raise SystemExit(f"reference page for {name}: {result.get('error', 'no result within the time')}")
    return {"median": statistics.median(result["times"]), "n": len(result["times"]), "pss": pss_peak,
            "rss": rss_peak, "threads": result.get("threads"), "isolated": result.get("isolated")}


def _hwbench(models: list[str], batch: int, min_time_s: float) -> dict[str, dict[str, Any]]:
    """One pytest run of the bench suite on wasm in a new process: median ms and recorded memory per model."""
    import subprocess
    import tempfile
    from pathlib import Path

    from pytest_hwbench.sinks import read_records

    root = Path(__file__).resolve().parents[1]
    with tempfile.TemporaryDirectory(prefix="web-fidelity-store-") as store:
        done = subprocess.run([sys.executable, "-m", "pytest", "bench_suites/test_inference.py", "-m", "wasm", "-q",
                               "-p", "no:cacheprovider", "--hwbench-models", ",".join(models),
                               "--hwbench-batch-sizes", str(batch), "--hwbench-noise-retries", "0",
                               "--hwbench-min-time", str(min_time_s), "--hwbench-grid", "all",
                               "--hwbench-store", store], cwd=root, capture_output=True, text=True)
        if done.returncode != 0:
            raise SystemExit(f"the hwbench run failed ({done.returncode}):\n{done.stdout[-3000:]}{done.stderr[-2000:]}")
        records = read_records(Path(store) / "hwbench.duckdb")
    found = {}
    for record in records:
        if record.status == "passed":
            found[record.model] = {"median": record.latency_ms_median, "memory": record.peak_device_memory_mb,
                                   "kind": record.extra.get("web_memory"), "settled": record.extra.get("web_warmup_settled"),
                                   "warmup_ms": record.extra.get("web_warmup_ms")}
    return found


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--models", default="bert-tiny,vit-tiny")
    parser.add_argument("--rounds", type=int, default=3, help="interleaved rounds (default 3)")
    parser.add_argument("--batch-sizes", default=None, help="default: 1 (--vs-python: 1,8)")
    parser.add_argument("--targets", default="wasm,webgpu", help="--vs-python only (the default mode runs wasm)")
    parser.add_argument("--min-time", type=float, default=1.0, help="seconds measured per case (default 1)")
    parser.add_argument("--warmup", type=float, default=1.0, help="--vs-python: seconds of warm-up per case")
    parser.add_argument("--reference-warmup", type=float, default=5.0,
                        help="seconds the reference page warms up (default 5: the wasm is compiled by then)")
    parser.add_argument("--vs-python", action="store_true", help="in-page medians against Python onnxruntime")
    args = parser.parse_args(argv)
    if args.vs_python:
        args.batch_sizes = args.batch_sizes or "1,8"
        return python_main(args)
    if args.rounds < 1:
        parser.error(f"--rounds {args.rounds}: give at least 1")
    models = args.models.split(",")
    batch = int((args.batch_sizes or "1").split(",")[0])
    rows: list[tuple[int, str, dict[str, Any], dict[str, Any]]] = []
    print(f"{'round':>5} {'model':<10} {'hwbench ms':>10} {'reference ms':>12} {'ratio':>6} "
          f"{'recorded MiB':>12} {'ref PSS MiB':>11} {'ref RSS MiB':>11}  first, reference threads/isolated")
    for round_ in range(1, args.rounds + 1):
        first = "hwbench" if round_ % 4 in (1, 0) else "reference"  # ABBA
        ours: dict[str, dict[str, Any]] = {}
        theirs: dict[str, dict[str, Any]] = {}
        for side in ((first, "reference" if first == "hwbench" else "hwbench")):
            if side == "hwbench":
                ours = _hwbench(models, batch, args.min_time)
            else:
                theirs = {name: _reference(name, batch, args.reference_warmup, args.min_time) for name in models}
        for name in models:
            mine, ref = ours.get(name), theirs[name]
            if mine is None:
                print(f"{round_:>5} {name:<10} hwbench recorded no passed case")
                continue
            rows.append((round_, name, mine, ref))
            print(f"{round_:>5} {name:<10} {mine['median']:>10.3f} {ref['median']:>12.3f} "
                  f"{mine['median'] / ref['median']:>6.3f} {mine['memory'] or 0:>12.1f} {ref['pss']:>11.1f} "
                  f"{ref['rss']:>11.1f}  {first}, {ref['threads']}/{ref['isolated']}")
    print()
    print(f"{'model':<10} {'median ratio':>12} {'ratios':<24} {'recorded/PSS':>12} {'recorded/RSS':>12}  memory kind")
    for name in models:
        mine = [(m, r) for _, n, m, r in rows if n == name]
        if not mine:
            continue
        ratios = [m["median"] / r["median"] for m, r in mine]
        memory = [m["memory"] / r["pss"] for m, r in mine if m["memory"] and r["pss"]]
        by_rss = [m["memory"] / r["rss"] for m, r in mine if m["memory"] and r["rss"]]
        print(f"{name:<10} {statistics.median(ratios):>12.3f} {' '.join(f'{x:.3f}' for x in ratios):<24} "
              f"{statistics.median(memory) if memory else float('nan'):>12.2f} "
              f"{statistics.median(by_rss) if by_rss else float('nan'):>12.2f}  {mine[0][0]['kind']}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
