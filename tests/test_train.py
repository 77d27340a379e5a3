"""The train scenario on real tiny zoo models on the CPU: steps that really train, mixed
precision that really runs at low precision, no graph kept between steps, records end to end."""

from __future__ import annotations

import dataclasses
import gc
import math
import weakref
from pathlib import Path
from typing import Any

import pytest
import torch

from pytest_hwbench import BenchCase, get_model
from pytest_hwbench.errors import UnsupportedCase
from pytest_hwbench.hardware import detect_hardware
from pytest_hwbench.runner import Runner
from pytest_hwbench.scenarios import Scenario, get_scenario
from pytest_hwbench.scenarios.train import SCENARIO, TrainStep, loss_kind, synthetic_loss
from pytest_hwbench.trackers import TimingConfig

FAST_TIMING = TimingConfig(warmup_iterations=0, min_iterations=3, min_time_s=0.0)

#: The loss each quick-tier model trains on (see pytest_hwbench.scenarios.train).
EXPECTED_LOSS = {
    "bert-tiny": "synthetic", "vit-tiny": "synthetic", "resnet-tiny": "synthetic", "whisper-micro": "synthetic",
    "wav2vec2-tiny": "synthetic", "detr-tiny": "synthetic",
    "clip-tiny": "contrastive", "clap-tiny": "contrastive", "xclip-tiny": "contrastive",
    "gpt2-tiny": "causal_lm", "llama-tiny": "causal_lm", "qwen2-tiny": "causal_lm", "llava-tiny": "causal_lm",
    "t5-tiny": "seq2seq_lm",
}


def _step(model: str, precision: str = "fp32", batch: int = 2) -> TrainStep:
    spec = get_model(model)
    step = SCENARIO.load(spec, "cpu", precision).prepare(spec.make_inputs(batch))
    assert isinstance(step, TrainStep)
    return step


def _snapshot(model: Any) -> dict[str, torch.Tensor]:
    return {name: p.detach().clone() for name, p in model.named_parameters()}


def _changed(before: dict[str, torch.Tensor], model: Any) -> set[str]:
    return {name for name, p in model.named_parameters() if not torch.equal(before[name], p.detach())}


def test_scenario_is_registered_for_train_on_torch() -> None:
    scenario = get_scenario("train")
    assert scenario is SCENARIO and isinstance(scenario, Scenario)
    assert scenario.mode == "train" and scenario.backends == ("torch",)
    assert scenario.precisions == ("fp32", "fp16", "bf16")
    assert all(scenario.supports(get_model(name)) for name in EXPECTED_LOSS)


@pytest.mark.parametrize("model", sorted(EXPECTED_LOSS))
def test_every_quick_model_takes_a_step_on_its_loss(model: str) -> None:
    step = _step(model)
    assert loss_kind(get_model(model), step.trainer.model) == EXPECTED_LOSS[model]
    assert step.trainer.model.training
    before = _snapshot(step.trainer.model)
    loss = step()
    assert loss.dim() == 0 and math.isfinite(float(loss))
    with_grad = {name for name, p in step.trainer.model.named_parameters() if p.grad is not None}
    net = step.trainer.model
    nonzero = {name for name, p in net.named_parameters() if p.grad is not None and bool(p.grad.any())}
    assert nonzero, "the loss reached no parameter"
    # AdamW moves every parameter with a gradient, and none without (weight decay is part of the
    # step); a zero gradient (DETR's first decoder q/k biases) leaves a zero parameter as it was.
    assert nonzero <= _changed(before, step.trainer.model) <= with_grad


@pytest.mark.parametrize("precision", ["fp32", "bf16", "fp16"])
def test_step_updates_fp32_master_weights_under_autocast(precision: str) -> None:
    step = _step("llama-tiny", precision)
    linear = next(m for m in step.trainer.model.modules() if isinstance(m, torch.nn.Linear))
    seen: list[torch.dtype] = []
    hook = linear.register_forward_hook(lambda _m, _i, out: seen.append(out.dtype))
    before = _snapshot(step.trainer.model)
    for _ in range(3):  # fp16: the grad scaler may skip a first step whose gradients overflow
        loss = step()
    hook.remove()
    assert math.isfinite(float(loss))
    assert _changed(before, step.trainer.model)
    # The matmuls ran at the case's precision, the weights and gradients stay fp32.
    assert set(seen) == {{"fp32": torch.float32, "bf16": torch.bfloat16, "fp16": torch.float16}[precision]}
    assert {p.dtype for p in step.trainer.model.parameters()} == {torch.float32}
    assert {p.grad.dtype for p in step.trainer.model.parameters() if p.grad is not None} == {torch.float32}
    assert (step.trainer.scaler is not None) == (precision == "fp16")
    if step.trainer.scaler is not None:
        assert step.trainer.scaler.get_scale() <= 2.0**16


def test_details_say_what_ran() -> None:
    spec = get_model("bert-tiny")
    loaded = SCENARIO.load(spec, "cpu", "bf16")
    assert loaded.precision == "bf16" and loaded.device_kind == "cpu" and loaded.timer == "wall"
    assert loaded.details == {"amp": True, "amp_dtype": "bfloat16", "master_weights": "fp32", "grad_scaler": False,
                              "optimizer": "AdamW", "optimizer_impl": "fused", "learning_rate": 1e-4,
                              "loss": "synthetic"}
    fp16 = SCENARIO.load(spec, "cpu", "fp16").details
    assert fp16 is not None and fp16["grad_scaler"] is True and fp16["amp_dtype"] == "float16"
    fp32 = SCENARIO.load(spec, "cpu", "fp32").details
    assert fp32 is not None and fp32["amp"] is False and fp32["amp_dtype"] is None


def test_steps_keep_no_graph() -> None:
    step = _step("bert-tiny", "bf16")
    # Weak references to every tensor autograd saves for a backward, except the weights and the
    # inputs (which live on anyway): a step that kept its graph (retain_graph, a loss held with
    # its grad_fn) would keep them alive.
    tensors = [*step.trainer.model.parameters(), *step.inputs.values()]
    owned = {t.untyped_storage().data_ptr() for t in tensors}
    saved: list[weakref.ref[torch.Tensor]] = []

    def pack(t: torch.Tensor) -> torch.Tensor:
        if t.untyped_storage().data_ptr() not in owned:
            saved.append(weakref.ref(t))
        return t

    with torch.autograd.graph.saved_tensors_hooks(pack, lambda t: t):
        losses = [step() for _ in range(3)]  # a caller holding the losses holds no graph
    assert all(loss.grad_fn is None and not loss.requires_grad for loss in losses)
    gc.collect()
    assert saved and all(ref() is None for ref in saved)
    trainer = step.trainer
    assert len(trainer.optimizer.state) == sum(1 for p in trainer.model.parameters() if p.grad is not None)


def test_synthetic_loss_sums_every_floating_output_and_needs_one() -> None:
    a = torch.ones(2, 3, requires_grad=True)
    b = torch.full((4,), 2.0, requires_grad=True)
    out = {"last_hidden_state": a, "pooler_output": b, "ids": torch.ones(2, dtype=torch.long),
           "frozen": torch.zeros(3)}
    assert synthetic_loss(out).item() == 3.0
    with pytest.raises(UnsupportedCase, match="no floating output"):
        synthetic_loss({"ids": torch.ones(2, dtype=torch.long)})


def test_close_releases_the_model_and_optimizer_state() -> None:
    spec = get_model("bert-tiny")
    loaded = SCENARIO.load(spec, "cpu", "fp32")
    step = loaded.prepare(spec.make_inputs(1))
    step()
    model = weakref.ref(step.trainer.model)
    assert step.trainer.optimizer.state
    optimizer = step.trainer.optimizer
    loaded.close()
    gc.collect()
    assert model() is None and not optimizer.state
    with pytest.raises(RuntimeError, match="closed"):
        step()


def test_int8_and_other_backends_are_unavailable_with_reasons() -> None:
    hw = detect_hardware()
    spec = get_model("bert-tiny")
    reason = SCENARIO.unavailable(spec, "torch", "cpu", "int8", hw)
    assert reason is not None and reason.startswith("int8:") and "inference-only" in reason
    assert BenchCase("bert-tiny", "torch", "cpu", "int8", 1, mode="train").unavailable(hw) == reason
    with pytest.raises(UnsupportedCase, match="int8"):
        SCENARIO.load(spec, "cpu", "int8")
    other = BenchCase("bert-tiny", "onnxruntime", "cpu", "fp32", 1, mode="train").unavailable(hw)
    assert other is not None and "train" in other and "torch" in other
    assert SCENARIO.unavailable(spec, "torch", "cpu", "bf16", hw) is None


def test_training_memory_beyond_the_quick_tier_is_checked_before_the_build() -> None:
    hw = detect_hardware()
    cpu = dataclasses.replace(hw["cpu"], details={**hw["cpu"].details, "memory_mb": 1024})
    small = dataclasses.replace(hw, targets={**hw.targets, "cpu": cpu})
    spec = get_model("bert-base")  # 110M parameters: 1.6 GiB of weights, gradients and AdamW moments
    reason = SCENARIO.unavailable(spec, "torch", "cpu", "fp32", small)
    assert reason is not None and reason.startswith("train needs ~1.6 GiB for bert-base") and "1.0 GiB" in reason
    assert "autocast copies" in (SCENARIO.unavailable(spec, "torch", "cpu", "bf16", small) or "")
    assert SCENARIO.unavailable(spec, "torch", "cpu", "fp32", hw) is None


def test_runner_runs_a_train_case_to_a_record() -> None:
    runner = Runner(timing=FAST_TIMING)
    try:
        first = runner.run(BenchCase("bert-tiny", "torch", "cpu", "bf16", 4, mode="train"))
        second = runner.run(BenchCase("bert-tiny", "torch", "cpu", "bf16", 2, mode="train"))
    finally:
        runner.close()
    assert second.load_cached and not first.load_cached  # one load across batch sizes
    record = first.to_record("session")
    assert record.mode == "train" and record.case_id == "bert-tiny-cpu-torch-bf16-b4-train"
    assert record.precision == "bf16" and record.status == "passed"
    assert record.iterations == 3 and len(record.timings_ms) == 3
    assert record.throughput_items_per_s == pytest.approx(4 / (record.latency_ms_median / 1e3))
    # a step is forward + backward: about three forwards' FLOPs
    forward_flops = first.spec.architecture.flops_per_item * 4
    assert record.achieved_tflops == pytest.approx(3 * forward_flops / (record.latency_ms_median / 1e3) / 1e12)
    assert record.peak_host_rss_mb is not None and record.peak_host_rss_mb > 0
    assert record.extra["amp"] is True and record.extra["optimizer"] == "AdamW"
    assert record.extra["loss"] == "synthetic" and record.extra["grad_scaler"] is False


TRAIN_TEST = """
import pytest


@pytest.mark.hwbench(modes=["train"], batch_sizes=[2])
def test_train(hwbench_case, hwbench):
    result = hwbench.measure(hwbench_case)
    assert result.precision == hwbench_case.precision
"""


def test_plugin_collects_train_cases_and_stores_their_records(pytester: pytest.Pytester, tmp_path: Path) -> None:
    from pytest_hwbench.sinks import load_results

    pytester.makepyfile(test_train=TRAIN_TEST)
    store = tmp_path / "store"
    result = pytester.runpytest_subprocess(
        "-v", "-rs", "-m", "cpu", "--hwbench-store", str(store), "--hwbench-models", "bert-tiny",
        "--hwbench-precisions", "fp32,bf16,int8", "--hwbench-min-time", "0", "--hwbench-min-iterations", "2",
        "--hwbench-warmup", "0", timeout=300,
    )
    # bf16 runs where this CPU has it natively (avx512_bf16/AMX); elsewhere it skips with the reason.
    bf16 = "bf16" in detect_hardware()["cpu"].precisions
    result.stdout.fnmatch_lines([
        "*test_train[[]bert-tiny-cpu-torch-fp32-b2-train[]] PASSED*",
        f"*test_train[[]bert-tiny-cpu-torch-bf16-b2-train[]] {'PASSED' if bf16 else 'SKIPPED'}*",
        "*test_train[[]bert-tiny-cpu-torch-int8-b2-train[]] SKIPPED*",
    ])
    result.stdout.fnmatch_lines(["SKIPPED*int8: training runs fp32, or autocast fp16/bf16*"])
    if not bf16:
        result.stdout.fnmatch_lines(["SKIPPED*bf16 unsupported on this cpu device*"])
    assert result.ret == pytest.ExitCode.OK
    frame = load_results(store / "hwbench.duckdb")
    rows = {row["case_id"]: row for row in frame.to_dict("records")}
    assert set(rows) == {"bert-tiny-cpu-torch-fp32-b2-train"} | ({"bert-tiny-cpu-torch-bf16-b2-train"} if bf16 else set())
    for case_id, row in rows.items():
        assert row["mode"] == "train" and row["status"] == "passed" and row["batch_size"] == 2
        assert row["precision"] == case_id.split("-")[4]
        assert row["throughput_items_per_s"] == pytest.approx(2 / (row["latency_ms_median"] / 1e3))
        assert row["extra"]["optimizer"] == "AdamW" and row["extra"]["amp"] == (row["precision"] == "bf16")
