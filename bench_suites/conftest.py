"""The suites' default grid on accelerators: what one GPU runner measures in CI.

`pytest bench_suites -m cuda` runs the CI grid below: every eager case of the quick and full
tiers, and slices of the compiled and ONNX Runtime cases. It was sized to take at most 30 minutes
on one H100 (estimated by `python benchmarks/cuda_grid_estimate.py` from the recorded H100 runs;
the figure is in the README). `--hwbench-grid all` runs every case the zoo, the backends and the
hardware allow (about three hours on one H100). CPU cases are not trimmed: `-m cpu` is the whole
CPU grid and `-m "cpu and quick"` the CI smoke tier. Web cases (`-m wasm`, `-m webgpu`, `-m webnn`,
onnxruntime-web in a headless Chromium) are trimmed to a few quick models at batch 1 (`WEB_CI_GRID`):
WebGPU without a GPU runs on SwiftShader, 50 ms to seconds a forward.
"""

from __future__ import annotations

from dataclasses import dataclass

import pytest

from pytest_hwbench import BenchCase, get_model

#: Hardware whose cases the CI grid trims.
ACCELERATORS = frozenset({"cuda", "rocm", "xpu", "mps"})
GRIDS = ("ci", "all")


@dataclass(frozen=True)
class Slice:
    """Cases of these backends and model tiers, and (where given) modes, precisions, batch sizes
    and models."""

    backends: frozenset[str]
    tiers: frozenset[str]
    modes: frozenset[str] | None = None
    precisions: frozenset[str] | None = None
    batch_sizes: frozenset[int] | None = None
    models: frozenset[str] | None = None

    def holds(self, case: BenchCase, tier: str) -> bool:
        return (case.backend in self.backends and tier in self.tiers
                and (self.models is None or case.model in self.models)
                and (self.modes is None or case.mode in self.modes)
                and (self.precisions is None or case.precision in self.precisions)
                and (self.batch_sizes is None or case.batch_size in self.batch_sizes))


#: The CI grid on accelerators: a case runs when a slice holds it. The large tier (7B models) and
#: most compiled and ONNX Runtime cases (8-20 s of compile or export each) wait for `all`.
CI_GRID: tuple[Slice, ...] = (
    # torch eager inference: the full tier at every precision, at the launch-bound batch 1 and a
    # compute-bound 32 (hwsel's data); the quick tier as smoke, at batch 1
    Slice(frozenset({"torch"}), frozenset({"full"}), frozenset({"inference"}), batch_sizes=frozenset({1, 32})),
    Slice(frozenset({"torch"}), frozenset({"quick"}), frozenset({"inference"}), batch_sizes=frozenset({1})),
    # generation and training: at bf16 (the quick tier at every precision, batch 1 / 8 as smoke)
    Slice(frozenset({"torch"}), frozenset({"full"}), frozenset({"generate", "train"}), frozenset({"bf16"})),
    Slice(frozenset({"torch"}), frozenset({"quick"}), frozenset({"generate"}), batch_sizes=frozenset({1})),
    Slice(frozenset({"torch"}), frozenset({"quick"}), frozenset({"train"}), batch_sizes=frozenset({8})),
    # compiled inference at bf16: CUDA graphs at the launch-bound batch 1 and a compute-bound 32;
    # one smoke case per quick model (torch-compile's default mode waits for `all`)
    Slice(frozenset({"torch-compile-ro"}), frozenset({"full"}), frozenset({"inference"}), frozenset({"bf16"}),
          frozenset({1, 32})),
    Slice(frozenset({"torch-compile-ro"}), frozenset({"quick"}), frozenset({"inference"}), frozenset({"bf16"}),
          frozenset({1})),
    # compiled decode (static KV cache + CUDA graphs), where eager generate is host bound
    Slice(frozenset({"torch-compile-ro"}), frozenset({"full"}), frozenset({"generate"}), frozenset({"bf16"}),
          frozenset({1}), frozenset({"gpt2", "tinyllama-1.1b", "qwen2-0.5b"})),
    # ONNX Runtime's CUDA provider: a smoke case per quick model (TensorRT engine builds wait for `all`)
    Slice(frozenset({"onnxruntime"}), frozenset({"quick"}), frozenset({"inference"}), frozenset({"fp16"}),
          frozenset({1})),
)


#: The CI grid on the web targets, per target: quick models at batch 1, one per modality on wasm,
#: text and vision on webgpu (software WebGPU is slow); `--hwbench-grid all` runs every case.
_WEB_SMOKE = frozenset({"onnxruntime-web"}), frozenset({"quick"}), frozenset({"inference"})
WEB_CI_GRID: dict[str, tuple[Slice, ...]] = {
    "wasm": (Slice(*_WEB_SMOKE, batch_sizes=frozenset({1}),
                   models=frozenset({"bert-tiny", "vit-tiny", "whisper-micro", "gpt2-tiny"})),),
    "webgpu": (Slice(*_WEB_SMOKE, batch_sizes=frozenset({1}), models=frozenset({"bert-tiny", "vit-tiny"})),),
    "webnn": (Slice(*_WEB_SMOKE, batch_sizes=frozenset({1}), models=frozenset({"bert-tiny", "vit-tiny"})),),
}


def in_ci_grid(case: BenchCase) -> bool:
    """Whether `case` is in the CI grid (every case off the accelerators and the web targets is)."""
    if case.hardware in WEB_CI_GRID:
        tier = get_model(case.model).tier
        return any(piece.holds(case, tier) for piece in WEB_CI_GRID[case.hardware])
    if case.hardware not in ACCELERATORS:
        return True
    tier = get_model(case.model).tier
    return any(piece.holds(case, tier) for piece in CI_GRID)


def pytest_addoption(parser: pytest.Parser) -> None:
    parser.getgroup("hwbench").addoption(
        "--hwbench-grid", dest="hwbench_grid", choices=GRIDS, default="ci",
        help="ci: on accelerators, the grid one GPU runner measures in at most ~30 min on an H100 (default); "
             "all: every case (about 8 h on an H100, `benchmarks/cuda_grid_estimate.py`)")


def pytest_hwbench_modify_cases(config: pytest.Config, cases: list[BenchCase]) -> None:
    if config.getoption("hwbench_grid") == "ci":
        cases[:] = [case for case in cases if in_ci_grid(case)]
