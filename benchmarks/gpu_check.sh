#!/usr/bin/env bash
# The CUDA checks that need a GPU, in one short run: the paths ../shared/gpu-evidence's README
# lists under "What went wrong", compiled generation and the fidelity command, each narrowed.
#
#   bash benchmarks/gpu_check.sh [STEP...]   # steps: generate oom fidelity tests (default: all)
#
# Logs and the spooled records go to $OUT (default /tmp/gpu-check).
#
# A machine without mlflow, duckdb or optuna gets them from wheels in .whl/ (../shared/FACTS.md).
# Every step has its own time limit and its log; the script goes on after a failed step and exits
# with the number of failed steps.
set -u
OUT=${OUT:-/tmp/gpu-check}
mkdir -p "$OUT"
export PYTHONUNBUFFERED=1 PYTHONPATH=/tmp/site
failed=0
steps=" ${*:-generate oom fidelity tests} "

step() {  # step NAME LIMIT_S COMMAND...: the command's output in $OUT/NAME.log, its tail shown
    local name=$1 limit=$2 start rc
    shift 2
    [ "$name" = setup ] || [[ $steps == *" $name "* ]] || return 0
    echo "=== $name (limit ${limit}s): $*"
    start=$(date +%s)
    timeout -k 5 "$limit" bash -c '"$@"' "$name" "$@" >"$OUT/$name.log" 2>&1
    rc=$?
    echo "=== $name: exit $rc after $(($(date +%s) - start)) s"
    tail -n "${TAIL:-12}" "$OUT/$name.log" | cut -c1-200
    [ "$rc" = 0 ] || failed=$((failed + 1))
    return "$rc"
}

setup() {
    if ! python3 -c "import mlflow, duckdb, optuna" 2>/dev/null; then
        python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade \
            --target /tmp/site .whl/*.whl || return 1
    fi
    python3 -m pip install -q --no-index --no-deps --no-build-isolation -e . || return 1
    nvidia-smi --query-gpu=name,memory.total,driver_version --format=csv
    python3 -c "import torch, transformers, mlflow, duckdb, optuna, pytest_benchmark
print('torch', torch.__version__, 'transformers', transformers.__version__, 'mlflow', mlflow.__version__,
      'duckdb', duckdb.__version__, 'optuna', optuna.__version__, 'pytest-benchmark', pytest_benchmark.__version__)"
    hwbench detect
}

# A pytest plug-in that caps this process's CUDA memory, so a case runs out of memory on any card.
mkdir -p /tmp/gpu-check-plugins
cat >/tmp/gpu-check-plugins/memcap.py <<'EOF'
import torch


def pytest_configure(config):
    if not torch.cuda.is_available():
        return
    total = torch.cuda.get_device_properties(0).total_memory
    torch.cuda.set_per_process_memory_fraction(6 * 2**30 / total)
EOF

records() {  # records STORE: the figures of the records spooled there
    python3 - "$1" <<'EOF'
import json, pathlib, sys
for path in sorted(pathlib.Path(sys.argv[1]).glob("spool/*.jsonl")):
    for line in path.read_text().splitlines():
        r = json.loads(line)
        if "case_id" not in r:
            continue
        print(f"{r['case_id']:48} {r['status']:8} median {r['latency_ms_median']} ms  peak device "
              f"{r['peak_device_memory_mb']} MiB  compile {r['compile_time_s']} s  tokens/s {r['tokens_per_s']}  "
              f"ttft {r['ttft_ms']}  decode/token {r['decode_ms_per_token']}  extra {json.dumps(r['extra'])[:300]}")
EOF
}

bench() {  # bench NAME PYTEST_ARGS...: one pytest session of bench cases into a fresh store
    local store=/tmp/gpu-check-store/$1 rc
    shift
    rm -rf "$store"
    python3 -m pytest -p no:cacheprovider -rA --hwbench-store "$store" --hwbench-min-time 0.3 \
        --hwbench-energy-time 0 "$@"
    rc=$?
    records "$store"
    return $rc
}
export -f setup records bench

TAIL=20 step setup 120 setup || exit 1
# The project's tests on a CUDA host (the CPU grid pinned where a test means "no CUDA here"),
# serial as CI runs them (under xdist, pytest-benchmark turns itself off in the tests' inner
# pytest runs). They run beside the measuring steps below and are awaited before the fidelity
# step, which runs alone: it is the one whose figures are timings.
tests_pid=""
if [[ $steps == *" tests "* ]]; then
    TAIL=25 step tests 280 python3 -m pytest -p no:cacheprovider -q -rfE --timeout 120 \
        tests/test_plugin.py tests/test_accelerators.py &
    tests_pid=$!
fi
# compiled decode (static KV cache + CUDA graphs) beside eager generate
TAIL=30 step generate 150 bench generate bench_suites/test_generation.py -m cuda --hwbench-grid all \
    --hwbench-models gpt2 --hwbench-batch-sizes 1 --hwbench-backends torch,torch-compile-ro --hwbench-precisions bf16
# device memory after an out-of-memory case: the next case's peak is its own
TAIL=30 step oom 120 env PYTHONPATH=/tmp/site:/tmp/gpu-check-plugins bash -c 'bench "$@"' oom oom -p memcap \
    bench_suites/test_training.py bench_suites/test_generation.py -m cuda --hwbench-grid all \
    --hwbench-models llava-tinyllama-1.4b,gpt2 --hwbench-precisions bf16 --hwbench-batch-sizes 1,32 \
    -k "llava-tinyllama-1.4b-cuda-torch-bf16-b32-train or gpt2-cuda-torch-bf16-b1-generate-out32"
if [ -n "$tests_pid" ]; then
    wait "$tests_pid" || failed=$((failed + 1))
fi
# harness against a plain loop and torch.utils.benchmark, eager and CUDA graphs
TAIL=16 step fidelity 150 python3 benchmarks/fidelity.py --hardware cuda --cases resnet-50,gpt2 \
    --rounds 3 --min-time 0.3 --warmup-time 0.5 --launch-factor 0
tar czf "$OUT/stores.tgz" -C /tmp/gpu-check-store . 2>/dev/null
echo "=== $failed step(s) failed"
exit "$failed"
