// hwbench's page: asks the local server for commands (long poll), runs them, posts the results.
// Python drives it (pytest_hwbench/web/_driver.py); the page never decides what to measure.
// Every time is performance.now() in this page: the server's clock plays no part.

const params = new URLSearchParams(location.search);
const PAGE = params.get("page");
const BUNDLE = params.get("bundle");  // "" for the probe page: no onnxruntime-web loaded
let ort = null;
const sessions = new Map();
let pageSteady = false;  // set by the first measurement, which warms up until steady

function median(values) {
  const sorted = Array.from(values).sort((x, y) => x - y);
  const mid = sorted.length >> 1;
  return sorted.length % 2 ? sorted[mid] : (sorted[mid - 1] + sorted[mid]) / 2;
}

async function post(path, body) {
  await fetch(path, {method: "POST", headers: {"Content-Type": "application/json"}, body: JSON.stringify(body)});
}

function message(err) {
  if (err === undefined || err === null) return "unknown error";
  if (typeof err === "string") return err;
  const name = err.name && err.name !== "Error" ? err.name + ": " : "";
  return name + (err.message || String(err));
}

// Errors outside a command (a failed import, a rejected promise nobody awaited) still reach Python.
window.addEventListener("error", (e) => post("/page-error", {page: PAGE, error: message(e.error || e.message)}));
window.addEventListener("unhandledrejection", (e) => post("/page-error", {page: PAGE, error: message(e.reason)}));

function timerResolutionMs() {
  // The smallest non-zero step performance.now() takes (100 us without cross-origin isolation).
  let smallest = Infinity;
  for (let i = 0; i < 50; i++) {
    const a = performance.now();
    let b = performance.now();
    while (b === a) b = performance.now();
    smallest = Math.min(smallest, b - a);
  }
  return smallest;
}

async function probe() {
  const out = {
    userAgent: navigator.userAgent,
    crossOriginIsolated: self.crossOriginIsolated === true,
    sharedArrayBuffer: typeof SharedArrayBuffer !== "undefined",
    hardwareConcurrency: navigator.hardwareConcurrency,
    webassembly: typeof WebAssembly === "object",
    timerResolutionMs: timerResolutionMs(),
    webgpu: {present: !!navigator.gpu},
    webnn: {present: !!navigator.ml, contexts: {}},
  };
  if (navigator.userAgentData && navigator.userAgentData.getHighEntropyValues) {
    try {
      const ua = await navigator.userAgentData.getHighEntropyValues(["fullVersionList"]);
      out.brands = ua.fullVersionList;
    } catch (e) { /* optional */ }
  }
  if (navigator.gpu) {
    try {
      const adapter = await navigator.gpu.requestAdapter();
      if (!adapter) {
        out.webgpu.error = "navigator.gpu.requestAdapter() returned null (no WebGPU adapter)";
      } else {
        const info = adapter.info || {};
        out.webgpu.adapter = {vendor: info.vendor || "", architecture: info.architecture || "",
                              device: info.device || "", description: info.description || "",
                              isFallbackAdapter: !!(adapter.isFallbackAdapter || info.isFallbackAdapter)};
        out.webgpu.features = Array.from(adapter.features || []).sort();
        out.webgpu.maxBufferSize = adapter.limits ? Number(adapter.limits.maxBufferSize) : null;
      }
    } catch (e) {
      out.webgpu.error = message(e);
    }
  } else {
    out.webgpu.error = "navigator.gpu is undefined (WebGPU is off in this browser)";
  }
  if (navigator.ml) {
    for (const deviceType of ["cpu", "gpu", "npu"]) {
      try {
        await navigator.ml.createContext({deviceType});
        out.webnn.contexts[deviceType] = {ok: true};
      } catch (e) {
        out.webnn.contexts[deviceType] = {ok: false, error: message(e)};
      }
    }
  } else {
    out.webnn.error = "navigator.ml is undefined (WebNN is not supported in this browser)";
  }
  return out;
}

async function fetchBytes(url) {
  const response = await fetch(url);
  if (!response.ok) throw new Error(`fetching ${url}: HTTP ${response.status}`);
  return await response.arrayBuffer();
}

const TYPED = {float32: Float32Array, float16: Uint16Array, int64: BigInt64Array, int32: Int32Array,
               bool: Uint8Array, uint8: Uint8Array, int8: Int8Array};

function outputTypes(outputs) {
  const types = {};
  for (const [name, tensor] of Object.entries(outputs)) types[name] = tensor.type;
  return types;
}

function dispose(outputs) {
  for (const tensor of Object.values(outputs)) if (tensor && tensor.dispose) tensor.dispose();
}

async function load(cmd) {
  const options = {executionProviders: cmd.executionProviders, graphOptimizationLevel: "all"};
  if (cmd.numThreads) ort.env.wasm.numThreads = cmd.numThreads;
  const bytes = new Uint8Array(await fetchBytes(cmd.model));
  const started = performance.now();
  const session = await ort.InferenceSession.create(bytes, options);
  const createMs = performance.now() - started;
  sessions.set(cmd.key, session);
  return {inputNames: session.inputNames, outputNames: session.outputNames, createMs,
          numThreads: ort.env.wasm.numThreads, ortVersion: ort.env.versions ? ort.env.versions.web : null};
}

async function feedsOf(cmd) {
  const blob = await fetchBytes(cmd.inputs);
  const feeds = {};
  for (const spec of cmd.feeds) {
    const Typed = TYPED[spec.dtype];
    if (!Typed) throw new Error(`input ${spec.name}: dtype ${spec.dtype} is not supported by the page`);
    const data = new Typed(blob.slice(spec.offset, spec.offset + spec.bytes));
    feeds[spec.name] = new ort.Tensor(spec.dtype, data, spec.dims);
  }
  return feeds;
}

async function measure(cmd) {
  const session = sessions.get(cmd.key);
  if (!session) throw new Error(`no session ${cmd.key} in this page (was it released?)`);
  const feeds = await feedsOf(cmd);
  const t = cmd.timing;
  // Cold call: the first run after load (kernel compilation, buffer allocation).
  let a = performance.now();
  let outputs = await session.run(feeds);
  const coldMs = performance.now() - a;
  const types = outputTypes(outputs);
  const shapes = {};
  for (const [name, tensor] of Object.entries(outputs)) shapes[name] = Array.from(tensor.dims);
  const sample = {};
  for (const [name, tensor] of Object.entries(outputs)) {
    if (tensor.location === "cpu" || tensor.location === undefined) {
      sample[name] = Array.from(tensor.data.slice(0, 8), Number);
    }
  }
  dispose(outputs);
  // Warm-up by time as well as by count: V8 keeps compiling the large wasm module in the
  // background, so a few runs are not enough (FACTS.md, "Web platforms"). The first measurement
  // in this page goes on until the medians of two consecutive windows agree (or settle_s passes).
  let warm = 0;
  let settled = !(t.settle_s > 0) || pageSteady;
  let settleWindows = 0;
  let previous = null;
  let window = [];
  const warmStart = performance.now();
  let windowStart = warmStart;
  for (;;) {
    a = performance.now();
    dispose(await session.run(feeds));
    const now = performance.now();
    window.push(now - a);
    warm++;
    if (!settled && now - windowStart >= t.settle_window_s * 1000) {
      const current = median(window);
      if (previous !== null && Math.abs(current - previous) <= t.settle_tolerance * previous) settled = true;
      previous = current;
      window = [];
      windowStart = now;
      settleWindows++;
    }
    const basic = warm >= t.warmup_iterations && now - warmStart >= t.warmup_s * 1000;
    if (settled) {
      if (basic || warm >= t.max_iterations) break;
    } else if (basic && now - warmStart >= t.settle_s * 1000) {
      break;  // the bound: not steady, measured anyway (the result says so)
    }
  }
  const steady = settled;
  pageSteady = true;
  const warmupMs = performance.now() - warmStart;
  const times = [];
  const start = performance.now();
  while (times.length < t.min_iterations || performance.now() - start < t.min_time_s * 1000) {
    if (times.length >= t.max_iterations) break;
    a = performance.now();
    outputs = await session.run(feeds);
    times.push(performance.now() - a);
    dispose(outputs);
  }
  return {timesMs: times, coldMs, warmupIterations: warm, warmupMs, settled: steady, settleWindows,
          outputTypes: types, outputShapes: shapes, outputSample: sample};
}

async function release(cmd) {
  const session = sessions.get(cmd.key);
  sessions.delete(cmd.key);
  if (session) await session.release();
  return {released: !!session};
}

const OPS = {
  probe: () => probe(),
  load, measure, release,
  sleep: (cmd) => new Promise((resolve) => setTimeout(() => resolve({slept: cmd.ms}), cmd.ms)),
  navigate: (cmd) => { setTimeout(() => { location.href = cmd.url; }, 0); return {navigating: cmd.url}; },
};

async function main() {
  const hello = {page: PAGE, bundle: BUNDLE, userAgent: navigator.userAgent,
                 crossOriginIsolated: self.crossOriginIsolated === true};
  if (BUNDLE) {
    try {
      ort = await import(`/ort/${BUNDLE}`);
      ort.env.logLevel = "error";
      hello.ortVersion = ort.env.versions ? ort.env.versions.web : null;
    } catch (e) {
      hello.error = `loading onnxruntime-web bundle ${BUNDLE}: ${message(e)}`;
    }
  }
  await post("/hello", hello);
  for (;;) {
    let response;
    try {
      response = await fetch(`/cmd?page=${PAGE}`);
    } catch (e) {
      return;  // the server is gone: the run is over
    }
    if (response.status === 204) continue;
    if (response.status !== 200) return;
    const cmd = await response.json();
    const op = OPS[cmd.op];
    let result;
    try {
      if (!op) throw new Error(`unknown op ${cmd.op}`);
      result = {id: cmd.id, ok: true, value: await op(cmd)};
    } catch (e) {
      result = {id: cmd.id, ok: false, error: message(e)};
    }
    await post("/result", result);
    if (cmd.op === "navigate") return;
  }
}

main();
