"""One case per invocation: the hwbench command against optimum-benchmark inline, pair by pair.

Two comparisons, each a series of pairs run back to back (the side that goes first alternates
from pair to pair, ABBA, so that a slow stretch of a shared machine hits both sides alike); the
ratio is taken within each pair, and the median and range of the pair ratios are printed:

1. The one-case command

       pytest bench_suites/test_inference.py -m cpu --hwbench-models bert-tiny --hwbench-batch-sizes 1
           --hwbench-backends torch --hwbench-precisions fp32

   (into a store in a temporary folder, not the repository's ``mlruns/``) against
   optimum-benchmark 0.6.0 with its inline launcher on the same case: the zoo's bert-tiny
   (random weights, saved once with ``save_pretrained`` and loaded from disk offline), CPU, fp32,
   batch 1, sequence length 32, with hwbench's default timing policy (3 warm-up runs, at least
   10 timed iterations and 1 s), latency and memory tracked. Each side is a fresh process: wall
   time, CPU time (user + system) and peak RSS, from ``wait4``. Aim: ratio <= 1.0.
2. ``pytest --co -q`` of a one-test folder with the plugin and with every pytest11 plugin of
   pytest-hwbench blocked (``-p no:hwbench -p no:hwbench-recording -p no:hwbench-qai-hub``), in
   the hwbench side's interpreter, with the plug-ins a user's install lacks blocked on both sides
   (hypothesis's, whose terminal summary alone takes 0.3 s here, and the peer's). Aim: ratio <= 1.2.

optimum-benchmark runs in a venv of its own (it needs ``transformers<5``). Without it the first
comparison is skipped and the line says how to make one:

    python -m venv /tmp/ob-venv && /tmp/ob-venv/bin/pip install torch==2.13.0 &&
        /tmp/ob-venv/bin/pip install optimum-benchmark==0.6.0 "transformers<5" "datasets>=4,<5"

(torch first: it resolves from local disk; otherwise pip pulls a multi-GB CUDA build.)

Most of one case's time is importing torch and transformers, and building the model: what that
costs depends on the versions and on what else is installed (transformers 4.x imports
scikit-learn when it is installed, 2 s here; transformers 5 imports ``torch.distributed.tensor``,
1.6 s). Each side's *floor* is printed beside it: a bare script in the same interpreter that
imports torch and transformers, builds the model, warms up 3 times and runs it for 1 s. The fair
figure is the one where both tools run in **one** venv, with one set of libraries:

    python -m venv /tmp/hw-same && /tmp/hw-same/bin/pip install torch==2.13.0 &&
        /tmp/hw-same/bin/pip install -e . optimum-benchmark==0.6.0 "transformers<5" "datasets>=4,<5"
    python benchmarks/one_case.py --hwbench-python /tmp/hw-same/bin/python --ob-python /tmp/hw-same/bin/python

Both sides run as Python runs on a user's machine, with bytecode caches: ``PYTHONDONTWRITEBYTECODE``
is dropped from the children's environment, and one untimed run of each command comes first. With
it set (as on this project's sandbox), the editable hwbench package and pytest's rewritten test
modules compile from source at every start (about 0.2 s here), while the peer's wheel-installed
code reads the caches pip wrote at install time.

Run it under the machine's timing lock, so that no other timing run shares the machine:

    flock /tmp/hwbench-timing.lock python benchmarks/one_case.py [--pairs 5] [--collect-pairs 15] [--ob-python PATH]
        [--hwbench-python PATH]
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent
ONE_CASE = ["bench_suites/test_inference.py", "-m", "cpu", "--hwbench-models", "bert-tiny",
            "--hwbench-batch-sizes", "1", "--hwbench-backends", "torch", "--hwbench-precisions", "fp32"]
BLOCKED = ["-p", "no:hwbench", "-p", "no:hwbench-recording", "-p", "no:hwbench-qai-hub"]
#: pytest plug-ins of this repository's test extra (``pip install -e .[test]``) that a user's
#: ``pip install pytest-hwbench`` does not bring: blocked in the one-case command so that it costs
#: what it costs a user (hypothesis's plug-in alone adds over a second to every pytest start).
TEST_EXTRA_PLUGINS = ["-p", "no:hypothesispytest"]
#: pytest plug-ins that optimum-benchmark's install brings (hydra's costs about 0.8 s at every
#: pytest start): blocked, for the run where both tools share one venv (``--hwbench-python``).
PEER_PLUGINS = ["-p", "no:hydra_pytest"]
DEFAULT_OB_PYTHON = Path("/tmp/ob-venv/bin/python")
INSTALL = ('python -m venv /tmp/ob-venv && /tmp/ob-venv/bin/pip install torch==2.13.0 && '
           '/tmp/ob-venv/bin/pip install optimum-benchmark==0.6.0 "transformers<5" "datasets>=4,<5"')
AIM_ONE_CASE = 1.0
AIM_COLLECT = 1.2

#: Saves the zoo model (config given as JSON) with random weights, in the peer's venv.
SAVE_MODEL = r'''
import json, sys, torch, transformers
spec = json.loads(sys.argv[1])
torch.manual_seed(0)
config = getattr(transformers, spec["config_class"])(**spec["config_kwargs"])
getattr(transformers, spec["auto_class"]).from_config(config).save_pretrained(sys.argv[2])
'''

#: optimum-benchmark 0.6.0, inline launcher, hwbench's default timing policy.
PEER = r'''
import json, sys
from optimum_benchmark import Benchmark, BenchmarkConfig, InferenceConfig, InlineConfig, PyTorchConfig
model, batch, seq = sys.argv[1], int(sys.argv[2]), int(sys.argv[3])
config = BenchmarkConfig(
    name="one-case", launcher=InlineConfig(),
    scenario=InferenceConfig(iterations=10, duration=1, warmup_runs=3, latency=True, memory=True,
                             input_shapes={"batch_size": batch, "sequence_length": seq}),
    backend=PyTorchConfig(model=model, device="cpu", task="feature-extraction", torch_dtype="float32",
                          no_weights=False, library="transformers"),
)
report = Benchmark.launch(config).to_dict()
print(json.dumps({"median_ms": report["forward"]["latency"]["p50"] * 1e3}))
'''

#: The floor of one case in an interpreter: import, build, 3 warm-up calls, 1 s of calls.
FLOOR = r'''
import json, sys, time, torch, transformers
spec = json.loads(sys.argv[1])
config = getattr(transformers, spec["config_class"])(**spec["config_kwargs"])
model = getattr(transformers, spec["auto_class"]).from_config(config).eval()
ids = torch.randint(0, config.vocab_size, (1, spec["sequence_length"]))
with torch.inference_mode():
    for _ in range(3):
        model(input_ids=ids)
    began, n = time.perf_counter(), 0
    while n < 10 or time.perf_counter() - began < 1.0:
        model(input_ids=ids)
        n += 1
'''


@dataclass(frozen=True)
class Run:
    """One process: wall seconds, CPU seconds (user + system), peak RSS in MiB."""

    wall_s: float
    cpu_s: float
    peak_mib: float


def measure(cmd: list[str], cwd: Path, env: dict[str, str]) -> Run:
    """Run `cmd` to its end; raise with its output when it fails."""
    began = time.monotonic()
    with tempfile.TemporaryFile() as out:
        proc = subprocess.Popen(cmd, cwd=cwd, env=env, stdout=out, stderr=subprocess.STDOUT,
                                stdin=subprocess.DEVNULL)
        _, status, usage = os.wait4(proc.pid, 0)
        wall = time.monotonic() - began
        proc.returncode = os.waitstatus_to_exitcode(status)
        if proc.returncode != 0:
            out.seek(0)
            raise SystemExit(f"{' '.join(cmd)} exited {proc.returncode}:\n{out.read().decode(errors='replace')[-3000:]}")
    return Run(wall, usage.ru_utime + usage.ru_stime, usage.ru_maxrss / 1024)


def paired(name_a: str, run_a: Callable[[], Run], name_b: str, run_b: Callable[[], Run], pairs: int) -> list[tuple[Run, Run]]:
    out = []
    for i in range(pairs):
        first_a = i % 2 == 0
        a = b = None
        for side in ((name_a, name_b) if first_a else (name_b, name_a)):
            if side == name_a:
                a = run_a()
            else:
                b = run_b()
        assert a is not None and b is not None
        out.append((a, b))
        print(f"  pair {i + 1} ({'A first' if first_a else 'B first'}): {name_a} {a.wall_s:6.2f} s, "
              f"{name_b} {b.wall_s:6.2f} s, ratio {a.wall_s / b.wall_s:5.2f}", flush=True)
    return out


def summarize(title: str, name_a: str, name_b: str, runs: list[tuple[Run, Run]], aim: float) -> dict[str, float]:
    wall = [a.wall_s / b.wall_s for a, b in runs]
    cpu = [a.cpu_s / b.cpu_s for a, b in runs]
    print(f"\n{title}: {len(runs)} pairs, ratio {name_a} / {name_b} taken pair by pair")
    print(f"  wall  median {statistics.median(wall):.2f} (min {min(wall):.2f}, max {max(wall):.2f}); "
          f"{name_a} median {statistics.median(a.wall_s for a, _ in runs):.2f} s, "
          f"{name_b} median {statistics.median(b.wall_s for _, b in runs):.2f} s; aim <= {aim:g}")
    print(f"  CPU   median {statistics.median(cpu):.2f}; {name_a} {statistics.median(a.cpu_s for a, _ in runs):.2f} s, "
          f"{name_b} {statistics.median(b.cpu_s for _, b in runs):.2f} s")
    print(f"  peak RSS {name_a} {statistics.median(a.peak_mib for a, _ in runs):.0f} MiB, "
          f"{name_b} {statistics.median(b.peak_mib for _, b in runs):.0f} MiB")
    return {"wall_ratio_median": statistics.median(wall), "cpu_ratio_median": statistics.median(cpu)}


def versions(python: Path, env: dict[str, str]) -> str:
    """torch and transformers as `python` imports them."""
    out = subprocess.run([str(python), "-c", "import torch, transformers; print(f'torch {torch.__version__}, "
                          "transformers {transformers.__version__}')"], env=env, capture_output=True, text=True)
    return out.stdout.strip() or f"unknown ({out.stderr.strip().splitlines()[-1:]})"


def load_average() -> str:
    try:
        return " ".join(Path("/proc/loadavg").read_text().split()[:3])
    except OSError:
        return "unknown"


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0],
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--pairs", type=int, default=5, help="pairs of the one-case comparison (default 5)")
    parser.add_argument("--collect-pairs", type=int, default=15,
                        help="pairs of the collection comparison (default 15: a run lasts about a second, and "
                             "this machine's pace swings by more than the plugin's cost from one second to the next)")
    parser.add_argument("--ob-python", type=Path, default=DEFAULT_OB_PYTHON,
                        help=f"the interpreter of optimum-benchmark's venv (default {DEFAULT_OB_PYTHON})")
    parser.add_argument("--hwbench-python", type=Path, default=Path(sys.executable),
                        help="the interpreter whose pytest runs hwbench's case (default: this one); give "
                             "the peer's to compare with one set of libraries")
    parser.add_argument("--skip-peer", action="store_true", help="only the collection comparison")
    parser.add_argument("--json", type=Path, default=None, help="also write the figures to this JSON file")
    args = parser.parse_args(argv)
    if args.pairs < 1 or args.collect_pairs < 1:
        parser.error(f"--pairs and --collect-pairs must be >= 1, got {args.pairs} and {args.collect_pairs}")
    env = {k: v for k, v in os.environ.items()
           if k not in ("MLFLOW_TRACKING_URI", "PYTEST_ADDOPTS", "PYTHONDONTWRITEBYTECODE")}
    figures: dict[str, dict[str, float]] = {}
    print(f"load average at start: {load_average()}; {os.cpu_count()} CPUs", flush=True)
    with tempfile.TemporaryDirectory(prefix="hwbench-one-case-") as tmp:
        work = Path(tmp)
        empty = work / "one-test"
        empty.mkdir()
        (empty / "test_one.py").write_text("def test_one():\n    pass\n")
        collect = [str(args.hwbench_python), "-m", "pytest", "--co", "-q", "-p", "no:cacheprovider",
                   *TEST_EXTRA_PLUGINS, *PEER_PLUGINS, "test_one.py"]
        print("\n`pytest --co -q` of a one-test folder: A with the plugin, B with hwbench's plugins blocked")
        measure(collect, empty, env)  # untimed: writes the bytecode caches, as any earlier run has
        runs = paired("plugin", lambda: measure(collect, empty, env),
                      "blocked", lambda: measure([*collect, *BLOCKED], empty, env), args.collect_pairs)
        figures["collect_only"] = summarize("pytest --co -q, one test", "plugin", "blocked", runs, AIM_COLLECT)

        if args.skip_peer:
            pass
        elif not args.ob_python.exists():
            print(f"\none case vs optimum-benchmark: SKIPPED, no {args.ob_python}; make its venv with:\n  {INSTALL}")
        else:
            from pytest_hwbench.models import get_model

            spec = get_model("bert-tiny")
            model_dir = work / "bert-tiny"
            peer_env = {**env, "HF_HUB_OFFLINE": "1", "TRANSFORMERS_OFFLINE": "1"}
            subprocess.run([str(args.ob_python), "-c", SAVE_MODEL,
                            json.dumps({"config_class": spec.config_class, "config_kwargs": dict(spec.config_kwargs),
                                        "auto_class": spec.auto_class}), str(model_dir)],
                           check=True, env=peer_env, capture_output=True)
            (work / "peer.py").write_text(PEER)
            peer = [str(args.ob_python), str(work / "peer.py"), str(model_dir), "1", str(spec.sequence_length)]
            store = work / "store"
            ours = [str(args.hwbench_python), "-m", "pytest", *ONE_CASE, "-q", "-p", "no:cacheprovider",
                    *TEST_EXTRA_PLUGINS, *PEER_PLUGINS, "--hwbench-store", str(store)]
            (work / "floor.py").write_text(FLOOR)
            spec_json = json.dumps({"config_class": spec.config_class, "config_kwargs": dict(spec.config_kwargs),
                                    "auto_class": spec.auto_class, "sequence_length": spec.sequence_length})
            floors = {"hwbench": [str(args.hwbench_python), str(work / "floor.py"), spec_json],
                      "optimum-benchmark": [str(args.ob_python), str(work / "floor.py"), spec_json]}
            # a venv's python links to the base interpreter: compare the venvs, not where the links lead
            same = args.hwbench_python.absolute() == args.ob_python.absolute()
            print(f"\nlibraries: hwbench side {versions(args.hwbench_python, peer_env)}; "
                  f"optimum-benchmark side {versions(args.ob_python, peer_env)}"
                  f"{' (one interpreter)' if same else ''}")
            print("\nwarm-up: one run of each (fills the store, the page cache and the web of imports)", flush=True)
            measure(ours, REPO, env)
            measure(peer, work, peer_env)
            print(f"\none case per invocation: A = `pytest {' '.join(ONE_CASE)}` (as a user's install runs it: "
                  f"{' '.join(TEST_EXTRA_PLUGINS)}, a plug-in of the test extra, and {' '.join(PEER_PLUGINS)}, "
                  "one of the peer's), B = optimum-benchmark 0.6.0 inline; "
                  "each pair also runs the floor (import, build, 1 s of calls) in each side's interpreter")
            floor_runs: dict[str, list[Run]] = {name: [] for name in floors}

            def with_floor(name: str, cmd: list[str], cwd: Path, side_env: dict[str, str]) -> Callable[[], Run]:
                def run() -> Run:
                    if not same or name == "hwbench":
                        floor_runs[name].append(measure(floors[name], work, peer_env))
                    return measure(cmd, cwd, side_env)
                return run

            runs = paired("hwbench", with_floor("hwbench", ours, REPO, env),
                          "optimum-benchmark", with_floor("optimum-benchmark", peer, work, peer_env), args.pairs)
            figures["one_case"] = summarize("one case", "hwbench", "optimum-benchmark", runs, AIM_ONE_CASE)
            for name, side in (("hwbench", 0), ("optimum-benchmark", 1)):
                own = floor_runs[name] or floor_runs["hwbench"]
                above = [pair[side].wall_s - floor.wall_s for pair, floor in zip(runs, own, strict=True)]
                print(f"  {name}: floor median {statistics.median(r.wall_s for r in own):.2f} s "
                      f"({', '.join(f'{r.wall_s:.2f}' for r in own)}); its own cost above the floor, pair by pair: "
                      f"median {statistics.median(above):.2f} s ({', '.join(f'{a:.2f}' for a in above)})")
                figures["one_case"][f"{name}_over_floor_s"] = statistics.median(above)
            shutil.rmtree(store, ignore_errors=True)
    print(f"\nload average at end: {load_average()}")
    if args.json:
        args.json.write_text(json.dumps(figures, indent=2))
    return 0


if __name__ == "__main__":
    sys.exit(main())
