"""The pytest plugin, exercised through real pytest runs (pytester) on the real tiny zoo models.

In-process runs (`runpytest`) where only per-config state is touched; subprocess runs where the
plugin's process-global state would leak (`--hwbench-model-set` registers models in the zoo) or
where xdist needs its own processes.
"""

from __future__ import annotations

import json
import os
import re
import statistics

import pytest

from pytest_hwbench import MODELS, BenchmarkRecord, detect_hardware, get_model, load_model_set

# Keep every run fast: one tiny model, one backend, two batch sizes, two timed iterations, and no
# MLflow/DuckDB writes (the sinks have their own tests).
ANY_HARDWARE = (
    "--hwbench-no-track",
    "--hwbench-models", "bert-tiny",
    "--hwbench-backends", "torch",
    "--hwbench-batch-sizes", "1,2",
    "--hwbench-min-time", "0",
    "--hwbench-min-iterations", "2",
    "--hwbench-warmup", "0",
)
# The grid this module means: the host CPU, also on a GPU host (issue 9, part 2).
FAST = (*ANY_HARDWARE, "--hwbench-hardware", "cpu")
FP32 = ("--hwbench-precisions", "fp32")

BENCH_TEST = """
def test_bench(hwbench_case, hwbench):
    result = hwbench.measure(hwbench_case)
    assert result.precision == hwbench_case.precision
"""

#: Writes what the plugin's hooks deliver, and in which process, into the pytester directory.
RECORDING_CONFTEST = """
import json
import os


def _append(config, name, data):
    with open(config.rootpath / name, "a") as f:
        f.write(json.dumps(data) + "\\n")


def pytest_configure(config):
    if not hasattr(config, "workerinput"):
        (config.rootpath / "controller.json").write_text(json.dumps({"pid": os.getpid()}))


def pytest_hwbench_session_start(config, session):
    _append(config, "sessions.jsonl", {"event": "start", "session_id": session.session_id, "pid": os.getpid()})


def pytest_hwbench_record(config, record):
    _append(config, "records.jsonl", {"pid": os.getpid(), "is_worker": hasattr(config, "workerinput"),
                                      "record": record.to_dict()})


def pytest_hwbench_session_finish(config, session, exitstatus):
    _append(config, "sessions.jsonl", {"event": "finish", "session_id": session.session_id,
                                       "exitstatus": exitstatus})
"""

CASE_ID = re.compile(r"^(?P<model>[\w.-]+)-(?P<hw>cpu|cuda|rocm|mps|xpu)-(?P<backend>\w+)-(?P<precision>fp32|fp16|bf16|int8)"
                     r"-b(?P<batch>\d+)$")

CUSTOM_MODEL_SET = """
[[models]]
name = "bert-custom"
family = "embedding"
config_class = "BertConfig"
modality = "text"
tier = "quick"
sequence_length = 16
config_kwargs = { num_hidden_layers = 1, hidden_size = 32, num_attention_heads = 2, intermediate_size = 48, vocab_size = 300 }
"""

# A BERT fed images: it builds and loads, and its forward raises.
BROKEN_MODEL_SET = """
[[models]]
name = "bert-fed-images"
family = "embedding"
config_class = "BertConfig"
modality = "image"
config_kwargs = { num_hidden_layers = 1, hidden_size = 32, num_attention_heads = 2, intermediate_size = 48, vocab_size = 300 }
"""

ON_CUDA = detect_hardware()["cuda"].available


@pytest.fixture(scope="module", autouse=True)
def _import_bert_here():
    """Build and run bert-tiny in this process before any in-process pytester run.

    An in-process run restores `sys.modules` when it ends, dropping the transformers modules it
    imported lazily; transformers then fails to import them again ("Could not import module
    'BertModel'") in this process and in every later test file.
    """
    import torch

    spec = get_model("bert-tiny")
    with torch.inference_mode():
        spec.build_model()(**spec.make_inputs(1))
    assert spec.architecture.param_count > 0


@pytest.fixture
def bench(pytester):
    """A pytester dir with a benchmark test and a conftest recording every hook call."""
    pytester.makepyfile(test_bench=BENCH_TEST)
    pytester.makeconftest(RECORDING_CONFTEST)
    return pytester


def _records(pytester) -> list[dict]:
    path = pytester.path / "records.jsonl"
    if not path.exists():
        return []
    return [json.loads(line) for line in path.read_text().splitlines()]


def _sessions(pytester) -> list[dict]:
    path = pytester.path / "sessions.jsonl"
    return [json.loads(line) for line in path.read_text().splitlines()] if path.exists() else []


def _case_ids(result) -> list[str]:
    return [m.group(1) for line in result.stdout.lines if (m := re.search(r"::test_\w+\[(.+)\]$", line))]


# --- (a), (b): markers and skipping ----------------------------------------------------------

@pytest.mark.skipif(ON_CUDA, reason="checks skipping where no CUDA device exists")
def test_cuda_cases_are_skipped_at_collection_naming_cuda(bench):
    result = bench.runpytest("-m", "cuda", "-rs", *ANY_HARDWARE)
    assert result.ret == pytest.ExitCode.OK
    outcomes = result.parseoutcomes()
    assert outcomes.get("skipped", 0) >= 2
    assert "passed" not in outcomes and "failed" not in outcomes
    skip_lines = [line for line in result.stdout.lines if line.startswith("SKIPPED")]
    assert skip_lines
    assert all(re.search(r"\bcuda\b", line) for line in skip_lines), skip_lines
    result.stdout.fnmatch_lines(["SKIPPED [[]*[]] test_bench.py: cuda: *"])
    # Skipped before fixture set-up: no case was loaded or measured, so no record exists.
    reports = [r for r in result.reprec.getreports("pytest_runtest_logreport") if r.skipped]
    assert {r.when for r in reports} == {"setup"}
    assert not any(hasattr(r, "hwbench_record") for r in reports)
    assert _records(bench) == []


# Marker checks run in a subprocess: pytest's global `pytest.mark` caches the marker names of
# every config it has seen, so in-process it would accept what this outer session registered.
def test_strict_markers_accept_every_plugin_marker(bench):
    expr = "cuda or rocm or mps or xpu or openvino or qnn or quick or inference or generate or train"
    result = bench.runpytest_subprocess("--strict-markers", "-m", expr, "--collect-only", "-q", *FAST)
    assert result.ret == pytest.ExitCode.OK, result.stdout.str()
    assert "not found in `markers`" not in result.stdout.str()
    assert len(_case_ids(result)) >= 2  # every case is an inference case


def test_strict_markers_without_xdist(bench):
    result = bench.runpytest_subprocess("-p", "no:xdist", "--strict-markers", "--collect-only", "-q", *FAST)
    assert result.ret == pytest.ExitCode.OK, result.stdout.str()


def test_quick_and_cpu_markers_select_cases(bench):
    result = bench.runpytest("-m", "cpu and quick", "--collect-only", "-q", *FP32, *FAST,
                             "--hwbench-models", "bert-tiny,bert-base")
    ids = _case_ids(result)
    assert sorted(ids) == ["bert-tiny-cpu-torch-fp32-b1", "bert-tiny-cpu-torch-fp32-b2"]


# --- (c): option validation ------------------------------------------------------------------

@pytest.mark.parametrize(
    ("args", "fragments"),
    [
        (("--hwbench-batch-sizes", "0"), ["--hwbench-batch-sizes", "0 is not a valid batch size", "positive integers"]),
        (("--hwbench-batch-sizes", "-3"), ["--hwbench-batch-sizes", "-3 is not a valid batch size"]),
        (("--hwbench-batch-sizes", "1,x"), ["--hwbench-batch-sizes", "'x' is not an integer", "positive integers"]),
        (("--hwbench-precisions", "fp32,fp8"), ["--hwbench-precisions", "'fp8'", "accepted: fp32, fp16, bf16, int8"]),
        (("--hwbench-models", "nosuchmodel"), ["--hwbench-models", "'nosuchmodel'", "Known:", "bert-tiny"]),
        (("--hwbench-backends", "nosuch"), ["--hwbench-backends", "'nosuch'", "accepted:", "torch"]),
        (("--hwbench-families", "nosuch"),
         ["--hwbench-families", "'nosuch'", "accepted: embedding, text_generation, vision, audio, multimodal"]),
        (("--hwbench-min-time", "-1"), ["--hwbench-min-time", "'-1'", "accepted: 0 to 3600"]),
        (("--hwbench-model-set", "missing.toml"), ["--hwbench-model-set", "missing.toml", "does not exist"]),
        # An empty list is refused like any other bad value, never read as "everything" (issue 12).
        (("--hwbench-models=",), ["--hwbench-models: empty list", "zoo models"]),
        (("--hwbench-backends=",), ["--hwbench-backends: empty list"]),
        (("--hwbench-hardware=",), ["--hwbench-hardware: empty list"]),
        (("--hwbench-batch-sizes=",), ["--hwbench-batch-sizes: empty list"]),
        (("--hwbench-experiment=",), ["--hwbench-experiment: empty value", "experiment name"]),
        (("--hwbench-hardware", "nosuch"), ["--hwbench-hardware", "'nosuch'", "accepted:", "cpu, cuda"]),
        # Errors name the option given.
        (("--hwbench-new-tokens=0",), ["--hwbench-new-tokens: 0 is not a valid number of new tokens"]),
        (("--hwbench-input-lengths=-5",), ["--hwbench-input-lengths: -5 is not a valid input length"]),
    ],
    ids=["batch-0", "batch-neg", "batch-x", "fp8", "model", "backend", "family", "min-time", "model-set",
         "empty-models", "empty-backends", "empty-hardware", "empty-batch-sizes", "empty-experiment", "hardware",
         "new-tokens-0", "input-lengths-neg"],
)
def test_bad_option_stops_the_run_naming_value_and_choices(bench, args, fragments):
    # FAST first: argparse keeps the last value given, so `args` wins.
    result = bench.runpytest(*FAST, *args)
    assert result.ret == pytest.ExitCode.USAGE_ERROR
    err = result.stderr.str()
    for fragment in fragments:
        assert fragment in err, err
    assert "passed" not in result.stdout.str()
    assert _records(bench) == []


# --- (d), (e): case ids and records ----------------------------------------------------------

def test_case_ids_are_readable(bench):
    result = bench.runpytest("--collect-only", "-q", *FAST)
    result.stdout.fnmatch_lines(["test_bench.py::test_bench[[]bert-tiny-cpu-torch-fp32-b1[]]"])
    ids = _case_ids(result)
    assert ids
    for case_id in ids:
        match = CASE_ID.match(case_id)
        assert match, case_id
        assert match["model"] == "bert-tiny" and match["backend"] == "torch" and match["batch"] in {"1", "2"}


def test_record_hook_gets_one_record_per_passed_case(bench):
    result = bench.runpytest("-v", *FAST, *FP32)
    assert result.ret == pytest.ExitCode.OK
    passed = sorted(_case_ids_with(result, "PASSED"))
    assert passed == ["bert-tiny-cpu-torch-fp32-b1", "bert-tiny-cpu-torch-fp32-b2"]
    result.stdout.fnmatch_lines(["hwbench: 2 records (0 failed, * noisy), session *"])
    assert not (bench.path / "mlruns").exists()  # --hwbench-no-track: no store was created

    lines = _records(bench)
    records = [BenchmarkRecord.from_dict(line["record"]) for line in lines]  # round-trips the schema
    assert sorted(r.case_id for r in records) == passed
    sessions = _sessions(bench)
    assert [s["event"] for s in sessions] == ["start", "finish"]
    assert sessions[1]["exitstatus"] == 0
    arch = get_model("bert-tiny").architecture
    for record in records:
        assert record.status == "passed"
        assert record.session_id == sessions[0]["session_id"]
        assert (record.model, record.backend, record.hardware, record.precision) == ("bert-tiny", "torch", "cpu", "fp32")
        assert record.case_id.endswith(f"-b{record.batch_size}")
        assert record.nodeid == f"test_bench.py::test_bench[{record.case_id}]"
        assert record.worker == "main"
        assert record.iterations >= 2
        assert len(record.timings_ms) == record.iterations
        assert record.latency_ms_median > 0
        assert record.latency_ms_median == pytest.approx(statistics.median(record.timings_ms))
        assert record.latency_ms_min == min(record.timings_ms)
        assert record.throughput_items_per_s == pytest.approx(record.batch_size / (record.latency_ms_median / 1e3))
        assert record.param_count == arch.param_count
        assert record.flops_per_forward == pytest.approx(arch.flops_per_item * record.batch_size)
        assert record.sequence_length == 32
        assert record.peak_host_rss_mb > 0
        assert record.peak_device_memory_mb is None


def _case_ids_with(result, outcome: str) -> list[str]:
    pattern = re.compile(r"::test_\w+\[(.+)\] " + outcome)
    return [m.group(1) for line in result.stdout.lines if (m := pattern.search(line))]


def test_a_crashing_case_still_yields_a_failed_record(bench):
    bench.makefile(".toml", broken=BROKEN_MODEL_SET)
    result = bench.runpytest_subprocess(*FAST, *FP32, "-m", "cpu", "--hwbench-batch-sizes", "1",
                                        "--hwbench-model-set", "broken.toml",
                                        "--hwbench-models", "bert-fed-images", timeout=300)
    assert result.ret == pytest.ExitCode.TESTS_FAILED
    lines = _records(bench)
    assert len(lines) == 1, result.stdout.str()
    record = BenchmarkRecord.from_dict(lines[0]["record"])
    assert record.status == "failed"
    assert record.case_id == "bert-fed-images-cpu-torch-fp32-b1"
    assert "ValueError" in record.error
    assert record.iterations is None


# --- (f): pytest-benchmark -------------------------------------------------------------------

def test_pytest_benchmark_json_holds_our_timings(bench):
    result = bench.runpytest(*FAST, *FP32, "-m", "cpu", "--benchmark-json", "out.json")
    assert result.ret == pytest.ExitCode.OK
    records = {r["record"]["case_id"]: r["record"] for r in _records(bench)}
    assert len(records) == 2
    out = bench.path / "out.json"
    assert out.exists(), result.stdout.str()
    benchmarks = json.loads(out.read_text())["benchmarks"]
    by_case = {re.search(r"\[(.+)\]", b["name"]).group(1): b for b in benchmarks}
    assert set(by_case) == set(records)
    for case_id, b in by_case.items():
        record = records[case_id]
        info = b["extra_info"]
        assert (info["model"], info["backend"], info["precision"], info["batch_size"]) == (
            "bert-tiny", "torch", "fp32", record["batch_size"])
        stats = b["stats"]
        assert stats["rounds"] == record["iterations"]
        assert stats["min"] == pytest.approx(min(record["timings_ms"]) / 1e3)
        assert stats["max"] == pytest.approx(max(record["timings_ms"]) / 1e3)
        assert stats["median"] == pytest.approx(record["latency_ms_median"] / 1e3)


# --- (g): xdist ------------------------------------------------------------------------------

def test_records_reach_the_xdist_controller(bench):
    # -m cpu leaves exactly two cases, which xdist's load scheduler deals one to each worker.
    result = bench.runpytest_subprocess("-n", "2", "-m", "cpu", *FAST, *FP32, "--hwbench-progress-interval", "0",
                                        timeout=300)
    assert result.ret == pytest.ExitCode.OK, result.stdout.str()
    result.assert_outcomes(passed=2)
    # The controller counts the cases the workers collected and prints progress as reports arrive.
    result.stdout.fnmatch_lines(["hwbench: case 1 of 2 (50%), *m*s elapsed, about *m*s left"])

    controller = json.loads((bench.path / "controller.json").read_text())["pid"]
    lines = _records(bench)
    assert len(lines) == 2
    assert all(line["pid"] == controller and not line["is_worker"] for line in lines)
    records = [BenchmarkRecord.from_dict(line["record"]) for line in lines]
    assert sorted(r.case_id for r in records) == ["bert-tiny-cpu-torch-fp32-b1", "bert-tiny-cpu-torch-fp32-b2"]
    assert all(r.status == "passed" and r.iterations >= 2 for r in records)
    # One session across processes: the controller handed its id to the workers.
    (start,) = [s for s in _sessions(bench) if s["event"] == "start"]
    assert {r.session_id for r in records} == {start["session_id"]}
    assert sorted(r.worker for r in records) == ["gw0", "gw1"]
    if len(os.sched_getaffinity(0)) >= 2:
        first, second = (set(r.cpu_affinity) for r in records)
        assert first and second
        assert not first & second
        # Each worker's first try runs on all of its cores; a retry after interference (a busy
        # host: other processes on its cores) may run on fewer.
        assert all(r.threads == len(r.cpu_affinity) or ((r.tries or 1) > 1 and r.threads < len(r.cpu_affinity))
                   for r in records), [(r.threads, r.cpu_affinity, r.tries, r.noise_reason) for r in records]


def test_loadgroup_keeps_the_batch_sizes_of_one_loaded_model_on_one_worker(bench):
    # Both cases load one model (bert-tiny, torch, cpu, fp32): one xdist_group, so one worker runs both.
    result = bench.runpytest_subprocess("-n", "2", "--dist", "loadgroup", "-v", "-m", "cpu", *FAST, *FP32,
                                        "--hwbench-progress-interval", "0", timeout=300)
    assert result.ret == pytest.ExitCode.OK, result.stdout.str()
    result.assert_outcomes(passed=2)
    result.stdout.fnmatch_lines(["*PASSED test_bench.py::test_bench?bert-tiny-cpu-torch-fp32-b1?@*"])
    records = [BenchmarkRecord.from_dict(line["record"]) for line in _records(bench)]
    assert len(records) == 2 and len({r.worker for r in records}) == 1, [r.worker for r in records]


# --- (h): the hwbench marker -----------------------------------------------------------------

NARROWED = """
import pytest


@pytest.mark.hwbench(models=["bert-tiny"], batch_sizes=[2])
def test_narrow(hwbench_case):
    pass


@pytest.mark.hwbench(models=["gpt2-tiny"], hardware=["cpu"], batch_sizes=[4])
def test_narrowest(hwbench_case):
    pass


def test_wide(hwbench_case):
    pass
"""


def test_hwbench_marker_narrows_the_grid_of_its_test(pytester):
    pytester.makepyfile(test_narrowed=NARROWED)
    result = pytester.runpytest("--collect-only", "-q", "--hwbench-backends", "torch", *FP32)
    assert result.ret == pytest.ExitCode.OK
    nodes = [line for line in result.stdout.lines if "::test_" in line]
    narrow = sorted(n.split("[")[1].rstrip("]") for n in nodes if "::test_narrow[" in n)
    assert narrow and all(c.startswith("bert-tiny-") and c.endswith("-b2") for c in narrow)
    assert "bert-tiny-cpu-torch-fp32-b2" in narrow
    assert [n for n in nodes if "::test_narrowest[" in n] == [
        "test_narrowed.py::test_narrowest[gpt2-tiny-cpu-torch-fp32-b4]"]
    wide = [n for n in nodes if "::test_wide[" in n]
    assert len(wide) > len(narrow)  # the marker touches only its own test
    assert any("bert-base-cpu-torch-fp32-b32" in n for n in wide)


def test_hwbench_marker_unknown_kwarg_is_named(pytester):
    pytester.makepyfile(test_typo="""
        import pytest

        @pytest.mark.hwbench(modles=["bert-tiny"])
        def test_typo(hwbench_case):
            pass
    """)
    result = pytester.runpytest("--collect-only", "-q", "--hwbench-backends", "torch", *FP32)
    assert result.ret != pytest.ExitCode.OK
    out = result.stdout.str()
    assert "got modles" in out
    assert "batch_sizes, families, hardware, input_lengths, models, modes, new_tokens, precisions" in out
    assert _case_ids(result) == []


def test_hwbench_marker_still_narrows_under_command_line_options(pytester):
    pytester.makepyfile(test_narrowed=NARROWED)
    result = pytester.runpytest("--collect-only", "-q", *FAST, *FP32)
    assert result.ret == pytest.ExitCode.OK
    narrow = [n for n in result.stdout.lines if "::test_narrow[" in n]
    assert narrow
    assert all(n.endswith("-b2]") for n in narrow), narrow


# --- (i): model sets -------------------------------------------------------------------------

def test_model_set_adds_a_runnable_model(bench):
    path = bench.makefile(".toml", models=CUSTOM_MODEL_SET)
    (spec,) = load_model_set(path)  # read only: this process's zoo stays untouched
    result = bench.runpytest_subprocess("-v", "-m", "cpu", "--hwbench-model-set", str(path), *FAST, *FP32,
                                        "--hwbench-models", "bert-custom,bert-tiny", "--hwbench-batch-sizes", "1",
                                        timeout=300)
    assert result.ret == pytest.ExitCode.OK, result.stdout.str()
    result.stdout.fnmatch_lines(["*test_bench.py::test_bench[[]bert-custom-cpu-torch-fp32-b1[]] PASSED*"])
    records = {r["record"]["case_id"]: r["record"] for r in _records(bench)}
    assert set(records) == {"bert-custom-cpu-torch-fp32-b1", "bert-tiny-cpu-torch-fp32-b1"}
    custom = records["bert-custom-cpu-torch-fp32-b1"]
    assert custom["param_count"] == spec.architecture.param_count
    assert custom["param_count"] != records["bert-tiny-cpu-torch-fp32-b1"]["param_count"]
    assert custom["sequence_length"] == 16
    assert "bert-custom" not in MODELS


def test_qai_hub_device_option_reaches_the_backend(pytester, monkeypatch):
    monkeypatch.delenv("HWBENCH_QAI_HUB_DEVICE", raising=False)
    pytester.makepyfile(test_device="""
        from pytest_hwbench.backends import qai_hub

        def test_device():
            assert qai_hub.BACKEND.device_name() == "Google Pixel 8"
    """)
    result = pytester.runpytest_subprocess("-p", "no:cacheprovider", "--hwbench-qai-hub-device", "Google Pixel 8",
                                           "--hwbench-no-track")
    result.assert_outcomes(passed=1)
    bad = pytester.runpytest_subprocess("--hwbench-qai-hub-device", " ", "--hwbench-no-track")
    assert bad.ret == pytest.ExitCode.USAGE_ERROR
    bad.stderr.fnmatch_lines(["*--hwbench-qai-hub-device: empty device name*"])


def test_opt_in_hardware_runs_only_when_the_backend_is_named(bench):
    common = ("--collect-only", "-q", "--hwbench-no-track", "--hwbench-models", "bert-tiny", *FP32,
              "--hwbench-batch-sizes", "1")
    default = set(_case_ids(bench.runpytest(*common)))
    # torch.compile on cpu is opt-in (minutes of C++ compilation per model); on GPUs it is in the grid
    assert "bert-tiny-cpu-torch-fp32-b1" in default and "bert-tiny-cuda-torch-compile-fp32-b1" in default
    assert not {c for c in default if c.startswith("bert-tiny-cpu-torch-compile")}
    named = set(_case_ids(bench.runpytest(*common, "--hwbench-backends", "torch,torch-compile")))
    assert {"bert-tiny-cpu-torch-fp32-b1", "bert-tiny-cpu-torch-compile-fp32-b1"} <= named


def test_the_hwbench_summary_is_the_last_thing_on_the_console(bench):
    """pytest-benchmark's wide table and pytest's short summary print above hwbench's summary, so
    the records/noisy line is what a reader sees last (before pytest's own final line)."""
    result = bench.runpytest(*FAST, *FP32, "-m", "cpu", "-rA")
    assert result.ret == pytest.ExitCode.OK
    lines = result.stdout.lines
    table = max(i for i, line in enumerate(lines) if "benchmark:" in line and "tests" in line)
    short = max(i for i, line in enumerate(lines) if "short test summary info" in line)
    summary = max(i for i, line in enumerate(lines) if re.match(r"hwbench: \d+ records \(", line))
    assert table < summary and short < summary, "\n".join(lines[-40:])
    assert all(not line.strip() or line.startswith(("hwbench: ", "=")) for line in lines[summary:]), lines[summary:]


# --- progress, pytest-benchmark quiet, marker values (issues 9 and 12) -------------------------

def test_long_runs_print_progress_with_an_estimate_of_what_remains(bench):
    result = bench.runpytest(*FAST, "--hwbench-batch-sizes", "1,2,3", *FP32, "--hwbench-progress-interval", "0")
    assert result.ret == pytest.ExitCode.OK
    lines = [line for line in result.stdout.lines if line.startswith("hwbench: case ")]
    assert [line.split(" (")[0] for line in lines] == ["hwbench: case 1 of 3", "hwbench: case 2 of 3"]
    assert all(re.search(r"\d+m\d\ds elapsed, about \d+m\d\ds left$", line) for line in lines), lines
    # The default interval is a minute: a run of a few seconds prints no progress line.
    quiet = bench.runpytest(*FAST, *FP32)
    assert not [line for line in quiet.stdout.lines if line.startswith("hwbench: case ")]


def test_progress_estimate_counts_what_remains():
    from pytest_hwbench.plugin.progress import Progress

    now = [0.0]
    progress = Progress(60.0, clock=lambda: now[0])
    progress.start(10)
    now[0] = 30.0
    assert progress.done_one() is None  # within the first minute: no line yet
    now[0] = 120.0
    # 8 tests at the 60 s each took so far, and the run's end (Progress.END_COST_S = 5 s)
    assert progress.done_one() == "hwbench: case 2 of 10 (20%), 2m00s elapsed, about 8m05s left"
    now[0] = 150.0
    assert progress.done_one() is None  # at most one line a minute


def test_benchmark_disable_prints_no_warning_per_case(bench):
    result = bench.runpytest(*FAST, *FP32, "--benchmark-disable", "-W", "error::Warning")
    assert result.ret == pytest.ExitCode.OK, result.stdout.str()
    result.assert_outcomes(passed=2)
    assert "Benchmark fixture was not used" not in result.stdout.str()


@pytest.mark.parametrize(
    ("marker", "fragments"),
    [
        ("batch_sizes=[-1]", ["batch_sizes=...", "-1 is not accepted", "positive integers"]),
        ("batch_sizes=[True]", ["batch_sizes=...", "True is not accepted"]),
        ("precisions=['fp8']", ["precisions=...", "'fp8' is not accepted", "fp32, fp16, bf16, int8"]),
        ("modes=['nosuch']", ["modes=...", "'nosuch' is not accepted", "inference, generate, train"]),
        ("models=['bert-tinyy']", ["models=...", "unknown model 'bert-tinyy'", "did you mean bert-tiny"]),
        ("backends=['nosuch']", ["backends=...", "'nosuch' is not accepted", "torch"]),
        ("hardware=['nosuch']", ["hardware=...", "'nosuch' is not accepted", "cpu, cuda"]),
        ("families=['nosuch']", ["families=...", "'nosuch' is not accepted", "embedding"]),
        ("new_tokens=[0]", ["new_tokens=...", "0 is not accepted"]),
        ("models=[]", ["models=...", "empty list"]),
    ],
    ids=["batch-neg", "batch-bool", "fp8", "mode", "model", "backend", "hardware", "family", "new-tokens", "empty"],
)
def test_bad_marker_value_is_a_usage_error_naming_test_value_and_choices(pytester, marker, fragments):
    pytester.makepyfile(test_marked=f"""
        import pytest

        @pytest.mark.hwbench({marker})
        def test_marked(hwbench_case):
            pass
    """)
    result = pytester.runpytest("--collect-only", "-q", *FAST)
    assert result.ret != pytest.ExitCode.OK
    out = result.stdout.str() + result.stderr.str()
    assert "test_marked.py::test_marked: @pytest.mark.hwbench(" in out, out
    for fragment in fragments:
        assert fragment in out, out
    assert "KeyError" not in out
    assert _case_ids(result) == []


def test_marker_value_the_command_line_narrows_to_nothing_is_named_in_the_summary(pytester):
    pytester.makepyfile(test_marked="""
        import pytest

        @pytest.mark.hwbench(models=["gpt2-tiny"], batch_sizes=[4])
        def test_marked(hwbench_case, hwbench):
            hwbench.measure(hwbench_case)

        def test_other():
            pass
    """)
    result = pytester.runpytest(*FAST)
    result.stdout.fnmatch_lines([
        "hwbench: test_marked.py::test_marked: its marker's models=['gpt2-tiny'] and --hwbench-models bert-tiny "
        "leave no case"])


def test_a_case_whose_xdist_worker_dies_leaves_a_crashed_record(pytester, tmp_path):
    import duckdb
    import mlflow

    pytester.makepyfile(test_killed="""
        import os
        import signal

        def test_bench(hwbench_case, hwbench):
            if hwbench_case.batch_size == 2:
                os.kill(os.getpid(), signal.SIGKILL)  # the worker dies mid-case, as on a segfault
            hwbench.measure(hwbench_case)
    """)
    store = tmp_path / "store"
    args = [a for a in FAST if a != "--hwbench-no-track"]
    result = pytester.runpytest_subprocess("-n", "2", *args, *FP32, "--hwbench-store", str(store), timeout=300)
    result.assert_outcomes(passed=1, failed=1)
    with duckdb.connect(str(store / "hwbench.duckdb"), read_only=True) as db:
        rows = dict(db.execute("SELECT case_id, status FROM results").fetchall())
        (error,) = db.execute("SELECT error FROM results WHERE status = 'crashed'").fetchone()
    assert rows == {"bert-tiny-cpu-torch-fp32-b1": "passed", "bert-tiny-cpu-torch-fp32-b2": "crashed"}
    assert re.search(r"xdist worker gw\d died running test_killed.py::test_bench\[bert-tiny-cpu-torch-fp32-b2\] "
                     r"\(killed by signal 9 \(SIGKILL\)\)", error), error
    # MLflow keeps it as a killed child run, read back as crashed.
    client = mlflow.MlflowClient(f"sqlite:///{store / 'mlflow.db'}")
    (experiment,) = [e for e in client.search_experiments() if e.name == "hwbench"]
    runs = client.search_runs([experiment.experiment_id], "tags.`hwbench.kind` = 'record'")
    assert sorted((r.info.run_name, r.info.status) for r in runs) == [
        ("bert-tiny/cpu/torch/fp32/b1", "FINISHED"), ("bert-tiny/cpu/torch/fp32/b2", "KILLED")]


def test_an_xdist_run_that_runs_nothing_says_why(bench):
    result = bench.runpytest_subprocess("-n", "2", "-m", "cpu and not quick", *FAST, *FP32, timeout=300)
    assert result.ret == pytest.ExitCode.NO_TESTS_COLLECTED
    result.stdout.fnmatch_lines([
        "hwbench: no test ran: gw? generated 2 cases and kept 0 after selection (-m 'cpu and not quick')",
        "hwbench: no test ran: gw? generated 2 cases and kept 0 after selection (-m 'cpu and not quick')",
    ])


def test_pytest_benchmarks_gate_raising_does_not_stop_the_hwbench_summary(bench):
    """pytest-benchmark's ``--benchmark-compare-fail`` raises ``PerformanceRegression`` from its
    terminal summary; hwbench's summary still prints, naming what was raised, and the run fails."""
    saved = bench.runpytest(*FAST, *FP32, "-m", "cpu", "--benchmark-autosave", "--benchmark-storage", "bm")
    assert saved.ret == pytest.ExitCode.OK
    (path,) = bench.path.glob("bm/*/0001_*.json")
    data = json.loads(path.read_text())
    for bench_json in data["benchmarks"]:  # a saved run 1000x faster than any: every case regressed
        bench_json["stats"] = {k: v / 1000 if isinstance(v, float) else v for k, v in bench_json["stats"].items()}
    path.write_text(json.dumps(data))
    result = bench.runpytest(*FAST, *FP32, "-m", "cpu", "--benchmark-storage", "bm", "--benchmark-compare",
                             "--benchmark-compare-fail", "min:5%")
    assert result.ret != pytest.ExitCode.OK
    text = result.stdout.str()
    assert re.search(r"hwbench: \d+ records \(", text), text[-3000:]
    assert "hwbench: another plug-in's summary raised PerformanceRegression: Performance has regressed." in text
