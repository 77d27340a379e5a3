"""torch.compile backends on a real tiny zoo model on the CPU: compile time kept apart from
latency, one graph per batch size, outputs as torch eager, precision read back, skip reasons.

Compiling is the slow part (seconds per shape): the module compiles bert-tiny at two batch
sizes once, in `compiled`, and the tests check what that run left.
"""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest

from pytest_hwbench.backends._torch import graphs_compiled
from pytest_hwbench.backends.base import get_backend, registered_backends
from pytest_hwbench.case import BenchCase
from pytest_hwbench.errors import UnsupportedCase
from pytest_hwbench.hardware import detect_hardware
from pytest_hwbench.models import MODELS

torch = pytest.importorskip("torch")

MODEL = "bert-tiny"
BATCHES = (1, 2)
#: Largest |compiled - eager| allowed, relative to the largest |eager| (fp32; inductor fuses
#: and reorders reductions, so not bit-equal).
TOLERANCE = 1e-4
RO_ON_CPU = "cpu: reduce-overhead uses CUDA graphs; cpu has none, use torch-compile"


def _graphs_compiled_by(fn: Callable[[], Any], repeats: int = 20) -> int:
    """Graphs dynamo compiled while `fn` ran `repeats` times (what a timed loop would include)."""
    before = graphs_compiled()
    for _ in range(repeats):
        fn()
    return graphs_compiled() - before


@pytest.fixture(scope="module")
def compiled() -> dict[str, Any]:
    """bert-tiny fp32 compiled at batch 1 and 2, compared and timed against eager, then closed."""
    reason = BenchCase(MODEL, "torch-compile", "cpu", "fp32", 1).unavailable(detect_hardware())
    if reason:
        pytest.skip(reason)
    spec = MODELS[MODEL]
    loaded = get_backend("torch-compile").load(spec, "cpu", "fp32")
    eager = spec.build_model("cpu")  # the same seed as the backend's build: the same weights
    seen: dict[str, Any] = {"loaded": loaded, "details": {}, "errors": {}, "compiled_in_calls": {}}
    call: Callable[[], Any] = lambda: None  # noqa: E731
    for batch in BATCHES:
        inputs = spec.make_inputs(batch, seed=batch)
        call = loaded.prepare(inputs)
        seen["details"][batch] = dict(loaded.details or {})
        got = call().last_hidden_state
        with torch.inference_mode():
            want = eager(**inputs).last_hidden_state
        assert got.shape == want.shape
        seen["errors"][batch] = float((got - want).abs().max() / want.abs().max())
        seen["dtype"] = got.dtype
        seen["compiled_in_calls"][batch] = _graphs_compiled_by(call)
    loaded.close()
    # The last timed call, after close dropped every graph: it must not compile silently.
    try:
        call()
    except Exception as exc:
        seen["call_after_close"] = exc
    try:
        loaded.prepare(spec.make_inputs(1))
    except Exception as exc:
        seen["prepare_after_close"] = exc
    return seen


def test_both_backends_are_registered() -> None:
    backends = registered_backends()
    assert backends["torch-compile"].mode == "default"  # type: ignore[attr-defined]
    assert backends["torch-compile-ro"].mode == "reduce-overhead"  # type: ignore[attr-defined]
    for name in ("torch-compile", "torch-compile-ro"):
        assert backends[name].hardware == ("cpu", "cuda", "rocm", "xpu")
        assert backends[name].markers("cuda") == ("cuda",)


def test_compile_time_is_in_details_per_batch_size(compiled: dict[str, Any]) -> None:
    for batch in BATCHES:
        details = compiled["details"][batch]
        assert details["compile_mode"] == "default"
        assert details["compile_time_s"] > 0
        # Each shape compiled on its own (from inductor's on-disk cache or not).
        assert details["compile_cache_hits"] + details["compile_cache_misses"] >= 1


def test_outputs_match_eager(compiled: dict[str, Any]) -> None:
    assert compiled["dtype"] == torch.float32
    for batch in BATCHES:
        assert compiled["errors"][batch] <= TOLERANCE, f"b{batch}: rel err {compiled['errors'][batch]:.2e}"


def test_latency_excludes_compilation(compiled: dict[str, Any]) -> None:
    # prepare() compiled each shape (its time is in details); the calls a timed loop makes
    # compile nothing more. Checked by dynamo's own graph counter, not by a timing bound.
    for batch in BATCHES:
        assert compiled["details"][batch]["compile_time_s"] > 0
        assert compiled["compiled_in_calls"][batch] == 0


def test_close_drops_the_graphs_and_timed_calls_never_compile(compiled: dict[str, Any]) -> None:
    assert "Detected recompile" in str(compiled["call_after_close"])
    assert "was closed" in str(compiled["prepare_after_close"])


def test_loaded_fields_like_torch_eager(compiled: dict[str, Any]) -> None:
    loaded = compiled["loaded"]
    assert loaded.precision == "fp32"
    assert loaded.timer == "wall"
    assert loaded.device_kind == "cpu"
    assert loaded.threads == torch.get_num_threads()
    assert loaded.device_name == detect_hardware()["cpu"].details.get("model", "cpu")
    # The graph is guarded on the thread count: a noisy retry keeps it rather than recompiling
    # (under fail_on_recompile: "GLOBAL_STATE changed: num_threads").
    threads = torch.get_num_threads()
    assert loaded.set_threads(1) is None and torch.get_num_threads() == threads
    assert get_backend("torch").load(MODELS[MODEL], "cpu", "fp32").set_threads(threads) == threads


@pytest.mark.parametrize("precision", ["bf16", "fp16"])
def test_precision_is_read_back(precision: str) -> None:
    """Loading casts and reads back; nothing compiles before prepare()."""
    loaded = get_backend("torch-compile").load(MODELS[MODEL], "cpu", precision)
    try:
        assert loaded.precision == precision
    finally:
        loaded.close()


def test_default_precisions_on_cpu_are_fp32_only() -> None:
    hw = detect_hardware()
    for name in ("torch-compile", "torch-compile-ro"):
        assert get_backend(name).default_precisions("cpu", hw) == ("fp32",)


def test_reduce_overhead_on_cpu_is_a_skip_with_reason() -> None:
    hw = detect_hardware()
    backend = get_backend("torch-compile-ro")
    assert backend.unavailable("cpu", "fp32", hw) == RO_ON_CPU
    assert BenchCase(MODEL, "torch-compile-ro", "cpu", "fp32", 1).unavailable(hw) == RO_ON_CPU
    with pytest.raises(UnsupportedCase, match="reduce-overhead uses CUDA graphs"):
        backend.load(MODELS[MODEL], "cpu", "fp32")


def test_reasons_start_with_what_is_missing() -> None:
    hw = detect_hardware()
    backend = get_backend("torch-compile")
    assert (backend.unavailable("cpu", "int8", hw) or "").startswith("int8: ")
    assert (backend.unavailable("mps", "fp32", hw) or "").startswith("mps: ")
    if not hw["cuda"].available:
        assert (backend.unavailable("cuda", "fp32", hw) or "").startswith("cuda: ")


def test_no_cxx_compiler_is_a_skip_naming_the_fix(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    hw = detect_hardware()  # detection first: it may run tools from PATH
    monkeypatch.setenv("PATH", str(tmp_path))
    monkeypatch.delenv("CXX", raising=False)
    backend = get_backend("torch-compile")
    reason = backend.unavailable("cpu", "fp32", hw) or ""
    assert reason.startswith("C++ compiler: ")
    assert "install" in reason and "CXX" in reason
    with pytest.raises(UnsupportedCase, match="C\\+\\+ compiler"):
        backend.load(MODELS[MODEL], "cpu", "fp32")
