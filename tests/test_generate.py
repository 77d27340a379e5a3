"""The generate scenario on real tiny zoo models on the CPU: which models generate, exactly N new
tokens per sequence, the metrics it adds, a plugin run into a real DuckDB store, and compiled
decoding (static KV cache, decode step compiled) on ``torch-compile``."""

from __future__ import annotations

import dataclasses
import math
import re

import pytest

from pytest_hwbench import BenchCase, Runner, TimingConfig, detect_hardware, get_model
from pytest_hwbench.backends._torch import graphs_compiled
from pytest_hwbench.backends.base import get_backend
from pytest_hwbench.errors import UnsupportedCase
from pytest_hwbench.scenarios import get_scenario
from pytest_hwbench.scenarios.generate import GenerateCall, generation_class
from pytest_hwbench.trackers import LatencyTracker

SCENARIO = get_scenario("generate")
#: Short timed loops: the assertions are about what is measured, not how precisely.
QUICK_TIMING = TimingConfig(warmup_iterations=0, min_iterations=5, min_time_s=0)

GENERATIVE = {
    "gpt2-tiny": "AutoModelForCausalLM",
    "llama-tiny": "AutoModelForCausalLM",
    "qwen2-tiny": "AutoModelForCausalLM",
    "t5-tiny": "AutoModelForSeq2SeqLM",
    "whisper-micro": "AutoModelForSpeechSeq2Seq",
    "llava-tiny": "AutoModelForImageTextToText",
}
#: Encoders and backbones. BERT's config maps to a causal-LM head too (an encoder's), DETR's
#: config is an encoder-decoder without a token head: neither generates.
NOT_GENERATIVE = ("bert-tiny", "vit-tiny", "resnet-tiny", "wav2vec2-tiny", "clip-tiny", "clap-tiny", "detr-tiny",
                  "xclip-tiny")


@pytest.mark.parametrize("name", [*GENERATIVE, *NOT_GENERATIVE])
def test_supports_models_that_generate_tokens(name: str) -> None:
    spec = get_model(name)
    assert generation_class(spec) == GENERATIVE.get(name)
    assert SCENARIO.supports(spec) is (name in GENERATIVE)


def test_full_and_large_tiers_generate_by_architecture_not_name() -> None:
    for name in ("gpt2", "t5-small", "whisper-tiny", "tinyllama-1.1b", "qwen2-0.5b", "llama-7b", "qwen2-7b",
                 "llava-7b"):
        assert SCENARIO.supports(get_model(name)), name
    for name in ("bert-base", "vit-base", "clip-vit-b32", "wav2vec2-base", "detr-resnet-50"):
        assert not SCENARIO.supports(get_model(name)), name


def test_int8_and_encoders_are_unavailable_with_a_reason() -> None:
    hw = detect_hardware()
    reason = SCENARIO.unavailable(get_model("gpt2-tiny"), "torch", "cpu", "int8", hw)
    assert reason is not None and reason.startswith("int8: generate runs fp32, fp16, bf16")
    case = BenchCase("gpt2-tiny", "torch", "cpu", "int8", 1, mode="generate", new_tokens=4)
    assert case.unavailable(hw) == reason
    assert SCENARIO.unavailable(get_model("gpt2-tiny"), "torch", "cpu", "fp32", hw) is None
    encoder = SCENARIO.unavailable(get_model("bert-tiny"), "torch", "cpu", "fp32", hw)
    assert encoder is not None and "bert-tiny has no generation head" in encoder
    other_backend = BenchCase("gpt2-tiny", "onnxruntime", "cpu", "fp32", 1, mode="generate").unavailable(hw)
    assert other_backend is not None and other_backend.startswith("generate: runs on torch")
    with pytest.raises(UnsupportedCase, match="int8"):
        SCENARIO.load(get_model("gpt2-tiny"), "cpu", "int8", new_tokens=4)


def _generated(name: str, out: object, inputs: dict, new_tokens: int) -> int:
    """Tokens per sequence that `generate()` returned beyond its prompt."""
    length = out.shape[-1]  # type: ignore[attr-defined]
    if name == "whisper-micro":
        return length  # Whisper's generate() returns the transcript without its decoder start token
    if name == "t5-tiny":
        return length - 1  # the decoder start token, then the new tokens
    return length - inputs["input_ids"].shape[-1]  # decoder-only: the prompt, then the new tokens


@pytest.mark.parametrize("name", ["gpt2-tiny", "t5-tiny", "llama-tiny", "qwen2-tiny", "whisper-micro", "llava-tiny"])
def test_every_call_makes_exactly_n_tokens_per_sequence(name: str) -> None:
    spec, n = get_model(name), 6
    loaded = SCENARIO.load(spec, "cpu", "fp32", new_tokens=n)
    call = loaded.prepare(spec.make_inputs(3))
    assert isinstance(call, GenerateCall) and not call.checked
    assert loaded.precision == "fp32"
    assert loaded.details == {"generation_class": type(call.model).__name__}
    assert type(call.model).__name__.endswith(("LMHeadModel", "ForCausalLM", "ForConditionalGeneration"))
    out = call()  # the first call counts the decoding steps and checks for early EOS
    assert call.checked
    assert out.shape[0] == 3 and _generated(name, out, call.inputs, n) == n
    out = call()
    assert _generated(name, out, call.inputs, n) == n
    assert _generated(name, call.prefill(), call.inputs, 1) == 1


def test_min_new_tokens_keeps_a_model_that_would_stop_at_once_going() -> None:
    # Make the token gpt2-tiny greedily picks first its end-of-sequence token: plain generate()
    # stops after one token; the scenario's call still makes all N.
    spec, n = get_model("gpt2-tiny"), 5
    call = SCENARIO.load(spec, "cpu", "fp32", new_tokens=n).prepare(spec.make_inputs(2))
    prompt = call.inputs["input_ids"].shape[-1]
    first = call.prefill()[:, prompt:]
    assert first.shape == (2, 1)
    eos = int(first[0, 0])
    call.model.generation_config.eos_token_id = eos
    call.eos_token_ids = (eos,)
    import torch

    with torch.inference_mode():
        plain = call.model.generate(**call.inputs, max_new_tokens=n, do_sample=False)
    assert bool((plain[0, prompt + 1:] == call.model.generation_config.pad_token_id).all()), plain
    assert call().shape[-1] == prompt + n  # the first call also verifies: no sequence ended early


def test_a_generate_that_stops_short_raises_naming_the_counts() -> None:
    # A generation config may carry a stopping rule of its own (here a time limit, as a
    # checkpoint's generation_config.json can): the first call notices and names the counts.
    spec = get_model("llama-tiny")
    call = SCENARIO.load(spec, "cpu", "fp32", new_tokens=4).prepare(spec.make_inputs(1))
    call.model.generation_config.max_time = 1e-9
    with pytest.raises(RuntimeError, match=r"llama-tiny ran 1 decoding steps for 4 new tokens per sequence"):
        call()
    assert not call.checked


def test_prompt_plus_new_tokens_beyond_the_decoder_positions_is_a_skip_reason() -> None:
    spec = get_model("whisper-micro")  # decoder: 64 positions, prompt: the decoder start token
    with pytest.raises(UnsupportedCase, match=r"64 positions, a 1-token prompt plus 64 new tokens needs 65"):
        SCENARIO.load(spec, "cpu", "fp32", new_tokens=64).prepare(spec.make_inputs(1))
    SCENARIO.load(spec, "cpu", "fp32", new_tokens=63).prepare(spec.make_inputs(1))
    spec = get_model("gpt2-tiny")  # 128 positions, a 32-token prompt
    with pytest.raises(UnsupportedCase, match=r"a 32-token prompt plus 97 new tokens needs 129"):
        SCENARIO.load(spec, "cpu", "fp32", new_tokens=97).prepare(spec.make_inputs(1))


def test_early_end_of_sequence_is_an_error() -> None:
    import torch

    call = GenerateCall(model=None, inputs={}, new_tokens=4, batch_size=2, eos_token_ids=(7,), name="m")
    ids = torch.tensor([[1, 2, 3, 4, 5, 7], [1, 2, 7, 0, 0, 0]])  # row 1 ended after its first new token
    with pytest.raises(RuntimeError, match=r"m ended sequences \[1\] of 2 with an end-of-sequence token before 4"):
        call._verify(4, ids)
    call._verify(4, torch.tensor([[1, 2, 3, 4, 5, 7]]))  # EOS as the last token is the N-th token: fine


@pytest.mark.parametrize("name", ["llama-tiny", "t5-tiny"])
def test_runner_measures_ttft_decode_and_tokens_per_second(name: str) -> None:
    runner = Runner(QUICK_TIMING)
    case = BenchCase(name, "torch", "cpu", "fp32", 2, mode="generate", new_tokens=8)
    try:
        result = runner.run(case)
    finally:
        runner.close()
    full, metrics = result.latency.median, result.metrics
    assert set(metrics) == {"ttft_ms", "decode_ms_per_token", "tokens_per_s"}
    assert 0 < metrics["ttft_ms"] < full
    assert metrics["decode_ms_per_token"] > 0
    assert math.isclose(metrics["decode_ms_per_token"], (full - metrics["ttft_ms"]) / 7, rel_tol=1e-9)
    assert math.isclose(metrics["tokens_per_s"], 2 * 8 / (full / 1e3), rel_tol=1e-9)
    record = result.to_record("session")
    assert (record.mode, record.new_tokens, record.batch_size, record.sequence_length) == ("generate", 8, 2, 32)
    assert record.case_id == f"{name}-cpu-torch-fp32-b2-generate-out8"
    assert record.ttft_ms == metrics["ttft_ms"] and record.tokens_per_s == metrics["tokens_per_s"]
    assert math.isclose(record.throughput_items_per_s, 2 / (full / 1e3), rel_tol=1e-9)  # sequences per second
    assert record.extra["generation_class"] in {"LlamaForCausalLM", "T5ForConditionalGeneration"}


def test_one_new_token_has_no_decode_latency() -> None:
    runner = Runner(TimingConfig(warmup_iterations=0, min_iterations=2, min_time_s=0))
    try:
        result = runner.run(BenchCase("qwen2-tiny", "torch", "cpu", "fp32", 1, mode="generate", new_tokens=1))
    finally:
        runner.close()
    assert "decode_ms_per_token" not in result.metrics
    assert result.metrics["ttft_ms"] > 0


def test_each_number_of_new_tokens_gets_its_own_loaded_model() -> None:
    runner = Runner(TimingConfig(warmup_iterations=0, min_iterations=1, min_time_s=0), cache_size=2)
    try:
        results = [runner.run(BenchCase("qwen2-tiny", "torch", "cpu", "fp32", 1, mode="generate", new_tokens=n))
                   for n in (2, 5, 2)]
    finally:
        runner.close()
    assert [r.load_cached for r in results] == [False, False, True]
    for result, n in zip(results, (2, 5, 2), strict=True):
        assert math.isclose(result.metrics["tokens_per_s"], n / (result.latency.median / 1e3), rel_tol=1e-9)


GENERATE_TEST = """
import pytest


@pytest.mark.hwbench(modes=["generate"], new_tokens=[8])
def test_generation(hwbench_case, hwbench):
    hwbench.measure(hwbench_case)
"""


def test_plugin_generates_cases_for_generative_models_only_and_stores_ttft(pytester: pytest.Pytester) -> None:
    from pytest_hwbench.sinks import load_results

    pytester.makepyfile(test_gen=GENERATE_TEST)
    store = pytester.path / "store"
    result = pytester.runpytest_subprocess(
        "-v", "-p", "no:cacheprovider", "-m", "cpu",
        "--hwbench-store", str(store),
        "--hwbench-models", "gpt2-tiny,t5-tiny,bert-tiny,vit-tiny",  # every installed backend, too
        "--hwbench-precisions", "fp32", "--hwbench-batch-sizes", "1",
        "--hwbench-warmup", "0", "--hwbench-min-iterations", "2", "--hwbench-min-time", "0",
        timeout=300,
    )  # fmt: skip
    assert result.ret == pytest.ExitCode.OK, result.stdout.str() + result.stderr.str()
    passed = sorted(m.group(1) for line in result.stdout.lines
                    if (m := re.search(r"::test_generation\[(.+)\] PASSED", line)))
    assert passed == ["gpt2-tiny-cpu-torch-fp32-b1-generate-out8", "t5-tiny-cpu-torch-fp32-b1-generate-out8"]
    assert "bert-tiny" not in result.stdout.str() and "vit-tiny" not in result.stdout.str()

    frame = load_results(store / "hwbench.duckdb")
    rows = {row["case_id"]: row for row in frame.to_dict("records")}
    assert sorted(rows) == passed
    for row in rows.values():
        assert (row["status"], row["mode"], row["new_tokens"]) == ("passed", "generate", 8)
        assert 0 < row["ttft_ms"] < row["latency_ms_median"]
        assert row["decode_ms_per_token"] > 0
        assert math.isclose(row["tokens_per_s"], 8 / (row["latency_ms_median"] / 1e3), rel_tol=1e-9)



# --- compiled decoding on torch-compile ----------------------------------------------------------

COMPILED = "torch-compile"
#: The tiniest LLaMA-style decoder, a few tokens: compiling its decode step takes 10-40 s on the CPU.
COMPILED_MODEL, COMPILED_TOKENS = "llama-tiny", 4


def _compiler_missing() -> str | None:
    return get_backend(COMPILED).unavailable("cpu", "fp32", detect_hardware())


@pytest.fixture(scope="module")
def compiled_generate():
    """llama-tiny fp32 b1, 4 new tokens on torch-compile: loaded, prepared (compiled), then measured
    as the runner measures (cold call, timed loop, time to first token), counting dynamo's graphs."""
    missing = _compiler_missing()
    if missing:
        pytest.skip(missing)
    spec = get_model(COMPILED_MODEL)
    loaded = SCENARIO.load(spec, "cpu", "fp32", backend=COMPILED, new_tokens=COMPILED_TOKENS)
    start = graphs_compiled()
    call = loaded.prepare(spec.make_inputs(1))
    seen = {"loaded": loaded, "call": call, "details": dict(loaded.details or {}), "checked": call.checked,
            "graphs_in_prepare": graphs_compiled() - start}
    prepared = graphs_compiled()
    tracker = LatencyTracker(loaded.timer, loaded.sync, loaded.device_index)
    seen["cold_ms"] = tracker.time_once(call)
    seen["latency"] = tracker.run(call, QUICK_TIMING)
    seen["metrics"] = call.measure_more(tracker, QUICK_TIMING, seen["latency"])
    seen["out"] = call()
    seen["graphs_in_timed_calls"] = graphs_compiled() - prepared
    yield seen
    loaded.close()


def test_compiled_generate_is_a_case_where_torch_compile_runs():
    hw = detect_hardware()
    case = BenchCase(COMPILED_MODEL, COMPILED, "cpu", "fp32", 1, mode="generate", new_tokens=COMPILED_TOKENS)
    assert COMPILED in SCENARIO.backends and "torch-compile-ro" in SCENARIO.backends
    assert case.unavailable(hw) == _compiler_missing()  # None where a C++ compiler is installed
    # reduce-overhead needs CUDA graphs: on the CPU its reason is the backend's own.
    ro = BenchCase(COMPILED_MODEL, "torch-compile-ro", "cpu", "fp32", 1, mode="generate", new_tokens=4)
    assert ro.unavailable(hw) == "cpu: reduce-overhead uses CUDA graphs; cpu has none, use torch-compile"
    with pytest.raises(UnsupportedCase, match="reduce-overhead uses CUDA graphs"):
        SCENARIO.load(get_model(COMPILED_MODEL), "cpu", "fp32", backend="torch-compile-ro", new_tokens=4)
    if _compiler_missing() is None:
        # One new token is the eager prefill alone: nothing would be compiled.
        with pytest.raises(UnsupportedCase, match="1 new token has none"):
            SCENARIO.load(get_model(COMPILED_MODEL), "cpu", "fp32", backend=COMPILED, new_tokens=1)


def test_compiled_generate_makes_exactly_n_tokens_the_same_as_eager(compiled_generate):
    call, n = compiled_generate["call"], COMPILED_TOKENS
    assert compiled_generate["checked"]  # prepare()'s first call counted the decoding steps
    prompt = call.inputs["input_ids"].shape[-1]
    assert compiled_generate["out"].shape == (1, prompt + n)
    spec = get_model(COMPILED_MODEL)
    eager = SCENARIO.load(spec, "cpu", "fp32", new_tokens=n).prepare(spec.make_inputs(1))
    # Greedy decoding of the same weights: the static cache and the compiled step change no token.
    assert compiled_generate["out"].tolist() == eager().tolist()


def test_compiled_generate_keeps_compile_time_apart_from_latency(compiled_generate):
    details, latency = compiled_generate["details"], compiled_generate["latency"]
    assert details["generation_class"] == "LlamaForCausalLM"
    assert (details["compile_mode"], details["cache_implementation"]) == ("default", "static")
    assert compiled_generate["graphs_in_prepare"] >= 1  # the decode step compiled, in prepare()
    assert details["compile_cache_hits"] + details["compile_cache_misses"] >= 1
    assert details["compile_time_s"] > latency.median / 1e3
    metrics = compiled_generate["metrics"]
    # time to first token holds no compilation (seconds) either; how it compares with the full
    # call's median, both timed one after the other, is the host's to decide on a busy machine
    assert 0 < metrics["ttft_ms"] < details["compile_time_s"] * 1e3 / 10
    assert math.isclose(metrics["tokens_per_s"], COMPILED_TOKENS / (latency.median / 1e3), rel_tol=1e-9)
    if latency.median > metrics["ttft_ms"]:
        assert math.isclose(metrics["decode_ms_per_token"],
                            (latency.median - metrics["ttft_ms"]) / (COMPILED_TOKENS - 1), rel_tol=1e-9)
    else:  # too few iterations to tell prefill and decode apart: no decode figure rather than a negative one
        assert "decode_ms_per_token" not in metrics


def test_timed_calls_of_compiled_generate_never_recompile(compiled_generate):
    assert compiled_generate["graphs_in_timed_calls"] == 0
    # A call that would need another graph (another batch size: another decode input and static
    # cache shape) raises instead of timing a compilation.
    call = compiled_generate["call"]
    wider = dataclasses.replace(call, inputs={k: v.repeat(2, 1) for k, v in call.inputs.items()}, batch_size=2)
    before = graphs_compiled()
    with pytest.raises(Exception, match="recompile"):
        wider.generate(COMPILED_TOKENS)
    assert graphs_compiled() == before


def test_compiled_generate_checks_the_token_count_as_eager_does(compiled_generate):
    # A stopping rule of the generation config's own (a time limit) stops generate() after the
    # prefill: the compiled call's first call names the counts, as eager's does.
    call = compiled_generate["call"]
    limited = dataclasses.replace(call, generate_kwargs={**call.generate_kwargs, "max_time": 1e-9})
    assert not limited.checked
    with pytest.raises(RuntimeError, match=r"llama-tiny ran 1 decoding steps for 4 new tokens per sequence"):
        limited()


@pytest.mark.e2e  # torch.compile of a generate loop: tens of seconds
def test_runner_records_compiled_generate_with_compile_time_apart():
    if _compiler_missing():
        pytest.skip(_compiler_missing())
    runner = Runner(QUICK_TIMING)
    case = BenchCase(COMPILED_MODEL, COMPILED, "cpu", "fp32", 1, mode="generate", new_tokens=COMPILED_TOKENS)
    try:
        first = runner.run(case)
        graphs = graphs_compiled()
        again = runner.run(case)
    finally:
        runner.close()
    assert again.load_cached and graphs_compiled() == graphs  # the cached case compiles nothing more
    record = first.to_record("s")
    assert record.backend == COMPILED and record.compile_time_s > 0
    assert record.extra["cache_implementation"] == "static"


@pytest.mark.parametrize("module", ["generate", "train"])
def test_the_torch_scenarios_import_no_backend_plug_in(module: str) -> None:
    """They build on the torch helpers the backends share (``backends._torch``), not on a backend."""
    import ast
    from importlib.metadata import distribution
    from pathlib import Path

    import pytest_hwbench

    plugins = {ep.value.split(":")[0] for ep in distribution("pytest-hwbench").entry_points
               if ep.group == "pytest_hwbench.backends"}
    assert "pytest_hwbench.backends.torch_eager" in plugins
    path = Path(pytest_hwbench.__file__).parent / "scenarios" / f"{module}.py"
    imported = set()
    for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
        if isinstance(node, ast.ImportFrom) and node.level:
            base = ["pytest_hwbench", "scenarios"][: 2 - (node.level - 1)]
            imported.add(".".join([*base, *([node.module] if node.module else [])]))
        elif isinstance(node, ast.ImportFrom | ast.Import):
            imported |= {node.module} if isinstance(node, ast.ImportFrom) else {a.name for a in node.names}
    assert "pytest_hwbench.backends._torch" in imported
    assert not imported & plugins, imported & plugins
