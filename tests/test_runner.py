"""The runner outside pytest: remote-timed backends, measurement strategies and the model cache."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

import pytest

from pytest_hwbench import Backend, BenchCase, LoadedModel, RemoteMeasurement, Runner, TimingConfig
from pytest_hwbench.backends.base import BACKENDS, register_backend
from pytest_hwbench.trackers import Latency, Memory, RemoteCall, Sample

REMOTE_TIMES = [4.0, 5.0, 6.0, 5.5, 4.5]


class _PhoneCall:
    """A prepared call measured on a phone: it reports the phone's times and refuses a local clock."""

    def __call__(self):
        raise AssertionError("a remote-timed call must not be timed locally")

    def measure_remote(self, timing):
        return RemoteMeasurement(tuple(REMOTE_TIMES), peak_device_memory_mb=12.5, on_this_host=False)


class _PhoneModel(LoadedModel):
    """A model measured elsewhere: its measurement is a `RemoteCall`."""

    def prepare(self, inputs):
        return _PhoneCall()

    def measurement(self, inputs, foreign_mb=None):
        return RemoteCall(self.prepare(inputs))


class _RemoteBackend(Backend):
    """A backend whose device is measured elsewhere (the shape Qualcomm AI Hub results take)."""

    name = "remote-test"
    hardware = ("cpu",)
    precisions = ("fp32",)

    def __init__(self) -> None:
        self.loads = 0

    def markers(self, hardware: str) -> tuple[str, ...]:
        return ("cpu",)

    def default_precisions(self, hardware, hw):
        return ("fp32",)

    def unavailable(self, hardware, precision, hw):
        return None

    def load(self, spec, hardware, precision, device_index=0):
        self.loads += 1
        return _PhoneModel("fp32", "remote phone", details={"job": "j1"}, timer="remote")


@pytest.fixture
def remote_backend():
    backend = _RemoteBackend()
    register_backend(backend)
    yield backend
    BACKENDS.items.pop(backend.name, None)


def test_remote_timer_takes_the_backends_timings(remote_backend):
    runner = Runner(TimingConfig(warmup_iterations=0, min_iterations=1, min_time_s=0))
    result = runner.run(BenchCase("bert-tiny", "remote-test", "cpu", "fp32", 2))
    assert result.latency.values_ms == tuple(REMOTE_TIMES)
    assert result.latency.median == 5.0
    assert result.memory.peak_device_mb == 12.5
    assert result.memory.peak_host_rss_mb is None
    record = result.to_record("s1")
    assert record.timings_ms == tuple(REMOTE_TIMES)
    assert "remote_timings_ms" not in record.extra and record.extra["job"] == "j1"
    assert record.throughput_items_per_s == pytest.approx(2 / 0.005)


def test_model_is_loaded_once_across_batch_sizes(remote_backend):
    runner = Runner(TimingConfig(warmup_iterations=0, min_iterations=1, min_time_s=0))
    first = runner.run(BenchCase("bert-tiny", "remote-test", "cpu", "fp32", 1))
    second = runner.run(BenchCase("bert-tiny", "remote-test", "cpu", "fp32", 8))
    assert remote_backend.loads == 1
    assert (first.load_cached, second.load_cached) == (False, True)
    assert first.load_time_s == second.load_time_s


class _HungryBackend(Backend):
    """A torch backend whose forward at batch >= 4 allocates ``batch_size`` x 256 PiB: the real CPU
    allocator fails, as a device does when activations outgrow its memory.

    The request exceeds any x86-64/arm64 virtual address space (128 TiB, or 128 PiB with 5-level
    paging), so it fails whatever the host's overcommit policy: a host that overcommits
    (vm.overcommit_memory=1) grants a request of a few TiB, and filling it gets the process
    OOM-killed."""

    name = "hungry-test"
    hardware = ("cpu",)
    precisions = ("fp32",)

    def __init__(self) -> None:
        self.closed = 0

    def markers(self, hardware: str) -> tuple[str, ...]:
        return ("cpu",)

    def default_precisions(self, hardware, hw):
        return ("fp32",)

    def unavailable(self, hardware, precision, hw):
        return None

    def load(self, spec, hardware, precision, device_index=0):
        return _HungryModel("fp32", "cpu", backend=self)


@dataclass(frozen=True, kw_only=True)
class _HungryModel(LoadedModel):
    backend: Any

    def prepare(self, inputs):
        import torch

        batch = next(iter(inputs.values())).shape[0]
        size = 2**58 if batch >= 4 else 1024

        def call():
            return torch.ones(batch * size, dtype=torch.uint8).sum()
        return call

    def close(self):
        self.backend.closed += 1


@pytest.fixture
def hungry_backend():
    backend = _HungryBackend()
    register_backend(backend)
    yield backend
    BACKENDS.items.pop(backend.name, None)


def test_out_of_memory_frees_the_cache_and_the_next_case_runs(hungry_backend):
    from pytest_hwbench.errors import OutOfMemory
    from pytest_hwbench.result import failed_record
    from pytest_hwbench.runner import is_out_of_memory

    runner = Runner(TimingConfig(warmup_iterations=0, min_iterations=2, min_time_s=0), cache_size=2)
    runner.run(BenchCase("bert-tiny", "hungry-test", "cpu", "fp32", 1))
    with pytest.raises(OutOfMemory, match="out of memory on cpu .*can't allocate memory") as info:
        runner.run(BenchCase("bert-tiny", "hungry-test", "cpu", "fp32", 8))
    assert hungry_backend.closed == 1 and not runner._cache  # released before the error left run()
    assert is_out_of_memory(info.value)
    record = failed_record(BenchCase("bert-tiny", "hungry-test", "cpu", "fp32", 8), "s1", info.value)
    assert record.status == "failed" and "out of memory" in (record.error or "")
    after = runner.run(BenchCase("bert-tiny", "hungry-test", "cpu", "fp32", 2))  # loads afresh and runs
    assert not after.load_cached and after.latency.iterations >= 2


@pytest.mark.e2e
def test_out_of_memory_is_an_xfailed_case_with_a_failed_record(pytester, tmp_path):
    from pytest_hwbench.sinks import load_results

    pytester.makeconftest(f"""
        import sys
        sys.path.insert(0, {str(__import__("pathlib").Path(__file__).parent)!r})
        from test_runner import _HungryBackend
        from pytest_hwbench.backends.base import register_backend
        register_backend(_HungryBackend())
    """)
    pytester.makepyfile(test_oom="""
        def test_case(hwbench_case, hwbench):
            hwbench.measure(hwbench_case)
    """)
    store = tmp_path / "store"
    result = pytester.runpytest_subprocess(
        "-p", "no:cacheprovider", "--hwbench-models", "bert-tiny", "--hwbench-backends", "hungry-test",
        "--hwbench-batch-sizes", "1,8,2", "--hwbench-warmup", "0", "--hwbench-min-iterations", "1",
        "--hwbench-min-time", "0", "--hwbench-store", str(store), "-rx")
    result.assert_outcomes(passed=2, xfailed=1)
    result.stdout.fnmatch_lines(["*bert-tiny-cpu-hungry-test-fp32-b8*out of memory on cpu*recorded as a failed case*"])
    frame = load_results(store / "hwbench.duckdb").set_index("batch_size")
    assert frame.loc[8, "status"] == "failed" and "can't allocate memory" in frame.loc[8, "error"]
    assert (frame.loc[[1, 2], "status"] == "passed").all()


class _Ballast:
    """A large object a weak reference can watch (a tensor would do on a device)."""

    def __init__(self) -> None:
        self.payload = bytearray(64 * 2**20)


#: Weak references to the ballast of `_LeakyOomBackend`'s failing calls.
BALLAST: list = []


class _LeakyOomBackend(_HungryBackend):
    """Runs out of memory at batch >= 4 from a frame whose locals hold a large object, the way a
    forward holds its activations when the allocator fails."""

    name = "leaky-oom-test"

    def load(self, spec, hardware, precision, device_index=0):
        return _LeakyModel("fp32", "cpu")


class _LeakyModel(LoadedModel):
    def prepare(self, inputs):
        import weakref

        batch = next(iter(inputs.values())).shape[0]

        def call():
            activations = _Ballast()
            BALLAST.append(weakref.ref(activations))
            if batch >= 4:
                raise RuntimeError("CUDA out of memory. Tried to allocate 20.00 GiB")
            return len(activations.payload)
        return call


@pytest.fixture
def leaky_backend():
    backend = _LeakyOomBackend()
    register_backend(backend)
    BALLAST.clear()
    yield backend
    BACKENDS.items.pop(backend.name, None)


def test_out_of_memory_leaves_nothing_of_the_failed_case_alive(leaky_backend):
    from pytest_hwbench.errors import OutOfMemory

    runner = Runner(TimingConfig(warmup_iterations=0, min_iterations=1, min_time_s=0))
    with pytest.raises(OutOfMemory) as info:
        runner.run(BenchCase("bert-tiny", "leaky-oom-test", "cpu", "fp32", 8))
    # The error is still held here (as pytest holds a failed case's), and yet the object the
    # failing frame held is gone: nothing chains the original error or its frames.
    assert len(BALLAST) == 1 and BALLAST[0]() is None
    assert info.value.__context__ is None and info.value.__cause__ is None
    assert "CUDA out of memory" in str(info.value)


@pytest.mark.e2e
def test_the_case_after_an_out_of_memory_case_starts_with_its_memory_free(pytester, tmp_path):
    pytester.makeconftest(f"""
        import sys
        sys.path.insert(0, {str(__import__("pathlib").Path(__file__).parent)!r})
        from test_runner import _LeakyOomBackend
        from pytest_hwbench.backends.base import register_backend
        register_backend(_LeakyOomBackend())
    """)
    pytester.makepyfile(test_oom="""
        import gc
        from test_runner import BALLAST

        def test_case(hwbench_case, hwbench):
            # Before this case runs: every earlier case's ballast, the failed one's too, is gone.
            alive = [ref for ref in BALLAST if ref() is not None]
            assert not alive, f"{len(alive)} objects of earlier cases alive"
            hwbench.measure(hwbench_case)
    """)
    result = pytester.runpytest_subprocess(
        "-p", "no:cacheprovider", "--hwbench-models", "bert-tiny", "--hwbench-backends", "leaky-oom-test",
        "--hwbench-batch-sizes", "1,8,2", "--hwbench-warmup", "0", "--hwbench-min-iterations", "1",
        "--hwbench-min-time", "0", "--hwbench-no-track", "-rx")
    result.assert_outcomes(passed=2, xfailed=1)


@dataclass(frozen=True)
class _CountingModel(LoadedModel):
    """A model that counts the runner's calls of its sync and close and names a process of its own."""

    syncs: list[int] = field(default_factory=list)
    closed: list[int] = field(default_factory=list)

    def prepare(self, inputs):
        return lambda: sum(range(100))

    def sync(self):
        self.syncs.append(1)

    def close(self):
        self.closed.append(1)

    def set_threads(self, count):
        return count

    def own_pids(self):
        return (12345,)


class _SubclassBackend(_RemoteBackend):
    """A third party's backend: a local model on fp32, one measured elsewhere on fp16."""

    name = "subclass-test"

    def load(self, spec, hardware, precision, device_index=0):
        self.loads += 1
        if precision == "fp16":
            return _PhoneModel("fp16", "remote phone", details={"job": "j2"}, timer="remote")
        return _CountingModel("fp32", "kw cpu", threads=3)


def test_the_runner_syncs_closes_and_measures_a_subclassed_model():
    backend = _SubclassBackend()
    backend.precisions = ("fp32", "fp16")
    register_backend(backend)
    try:
        # no retries: a retry on a busy machine would size the threads to the cores left free
        runner = Runner(TimingConfig(warmup_iterations=0, min_iterations=3, min_time_s=0), energy_min_time_s=0,
                        noise_retries=0)
        local = runner.run(BenchCase("bert-tiny", backend.name, "cpu", "fp32", 1))
        assert local.device_name == "kw cpu" and local.latency.iterations == 3 and local.threads == 3
        loaded = next(iter(runner._cache.values()))[0]
        assert isinstance(loaded, _CountingModel) and loaded.own_pids() == (12345,) and loaded.set_threads(2) == 2
        assert len(loaded.syncs) >= 2 * 3  # sync around each timed call and the cold call
        runner.close()
        assert loaded.closed == [1]
        remote = runner.run(BenchCase("bert-tiny", backend.name, "cpu", "fp16", 2))
        assert remote.latency.values_ms == tuple(REMOTE_TIMES) and remote.noise is None
    finally:
        BACKENDS.items.pop(backend.name, None)


@dataclass
class _FixedMeasurement:
    """A third party's measurement strategy: fixed figures, judged, with a metric and a detail."""

    tries: list[bool]

    def measure(self, timing, window, first):
        with window:
            self.tries.append(first)
        return Sample(Latency.from_values([2.0, 3.0, 4.0]), Memory(None, 7.0), 9.0 if first else float("nan"),
                      metrics={"ttft_ms": 1.5}, details={"strategy": "fixed"})

    def energy(self, batch_size, min_time_s, details):
        details["energy"] = "not measured by the fixed strategy"
        return {}


class _StrategyModel(LoadedModel):
    def prepare(self, inputs):
        return lambda: None

    def measurement(self, inputs, foreign_mb=None):
        return _FixedMeasurement(self.details["tries"])


class _StrategyBackend(_RemoteBackend):
    name = "strategy-test"

    def load(self, spec, hardware, precision, device_index=0):
        return _StrategyModel("fp32", "fixed", details={"tries": []})


def test_the_runner_measures_through_whatever_strategy_the_model_gives():
    backend = register_backend(_StrategyBackend())
    try:
        result = Runner(TimingConfig(warmup_iterations=0, min_iterations=1, min_time_s=0), noise_retries=0).run(
            BenchCase("bert-tiny", backend.name, "cpu", "fp32", 1))
    finally:
        BACKENDS.items.pop(backend.name, None)
    assert result.latency.median == 3.0 and result.cold_latency_ms == 9.0 and result.memory.peak_device_mb == 7.0
    assert result.metrics == {"ttft_ms": 1.5}
    assert result.details["strategy"] == "fixed" and result.details["energy"].startswith("not measured")
    assert result.details["tries"] == [True] and result.noise in ("clean", "noisy") and result.tries == 1


def test_a_result_built_by_hand_asks_its_scenario_for_the_forwards_per_iteration():
    from pytest_hwbench import CaseResult, Latency, Memory, get_model

    def record(mode: str, **extra):
        case = BenchCase("gpt2-tiny", "torch", "cpu", "fp32", 1, mode=mode)
        return CaseResult(case=case, spec=get_model("gpt2-tiny"), precision="fp32", device_name="cpu", threads=1,
                          latency=Latency.from_values([1.0, 2.0]), cold_latency_ms=2.0, load_time_s=0.1,
                          memory=Memory(None, None), load_cached=False, **extra).to_record("s")

    assert record("generate").achieved_tflops is None  # generate has no single FLOP figure
    inference = record("inference").achieved_tflops
    assert inference is not None and inference > 0
    assert record("train").achieved_tflops == pytest.approx(3 * inference)  # a step is about 3 forwards
    assert record("inference", forwards_per_iteration=None).achieved_tflops is None


def test_progress_prices_each_case_by_its_kind_not_by_the_average_so_far() -> None:
    # 4 generate cases run first (100 s each), then 36 inference cases (10 s each): pricing by
    # the average so far said 36 x 100 s left after the generate cases; by kind it is 36 x 10 s
    # once one inference case has run, and a first guess from the mode before that.
    from pytest_hwbench.plugin.progress import Progress

    plan = {f"g{i}": BenchCase("gpt2-tiny", "torch", "cpu", "fp32", 1, mode="generate", new_tokens=8)
            for i in range(4)}
    plan |= {f"i{i}": BenchCase("bert-tiny", "torch", "cpu", "fp32", 1) for i in range(36)}
    plan["plain"] = None
    now = [0.0]
    progress = Progress(0.0, clock=lambda: now[0])
    progress.start(len(plan), plan=plan)
    for i in range(4):
        now[0] += 100.0
        progress.done_one(f"g{i}")
    # no inference case seen yet: a generate case is worth MODE_COST["generate"] inference cases,
    # a plain test a tenth of one
    end = Progress.END_COST_S  # the sinks closed and the interpreter's teardown, after the last case
    assert progress.estimate_left(now[0]) == pytest.approx(36 * 100.0 / 4.0 + 0.1 * 25.0 + end)
    now[0] += 10.0
    line = progress.done_one("i0")
    # the plain test: a tenth of the mean inference measurement, (3 x 100 / 4 + 10) / 4
    assert progress.estimate_left(now[0]) == pytest.approx(35 * 10.0 + 0.1 * (3 * 25.0 + 10.0) / 4 + end)
    assert line == "hwbench: case 5 of 41 (12%), 6m50s elapsed, about 5m57s left"
    unplanned = Progress(0.0, clock=lambda: now[0])
    unplanned.start(10)
    now[0] += 20.0
    assert unplanned.done_one() == "hwbench: case 1 of 10 (10%), 0m20s elapsed, about 3m05s left"


def test_progress_prices_a_model_load_where_the_runner_will_load_one() -> None:
    # bert-tiny's first case loads its model (8 s of its 10 s); later batch sizes take it from
    # the cache (2 s each). Each model still to come costs one load plus its cases' own time,
    # walked through a cache of one model as the runner keeps them.
    from pytest_hwbench.plugin.progress import Progress

    def case(model: str, backend: str, batch: int) -> BenchCase:
        return BenchCase(model, backend, "cpu", "fp32", batch)

    plan = {f"{m}-{b}-{n}": case(m, b, n) for m, b in (("bert-tiny", "torch"), ("vit-tiny", "torch"),
                                                       ("bert-tiny", "onnxruntime")) for n in (1, 2, 3)}
    now = [0.0]
    progress = Progress(0.0, clock=lambda: now[0], cache_size=1)
    progress.start(len(plan), plan=plan)
    now[0] += 10.0
    progress.done_one("bert-tiny-torch-1", load_s=8.0)
    now[0] += 2.0
    progress.done_one("bert-tiny-torch-2", load_s=0.0)
    # bert-tiny b3: 2 s; vit-tiny: a torch load (8 s) + 3 x 2 s; bert-tiny on onnxruntime: a load
    # priced by any load seen (8 s) + 3 x the inference median (2 s)
    end = Progress.END_COST_S
    assert progress.estimate_left(now[0]) == pytest.approx(2.0 + (8.0 + 6.0) + (8.0 + 6.0) + end)
    # the same plan without load times: every case costs the median case (2 s), loads unseen
    blind = Progress(0.0, clock=lambda: now[0], cache_size=1)
    blind.start(len(plan), plan=plan)
    now[0] += 10.0
    blind.done_one("bert-tiny-torch-1")
    now[0] += 2.0
    blind.done_one("bert-tiny-torch-2")
    # torch's first case (10 s, its load in it) prices onnxruntime's first; every other case the
    # 2 s bert-tiny b2 took
    assert blind.estimate_left(now[0]) == pytest.approx(2.0 + 3 * 2.0 + (10.0 + 2 * 2.0) + end)


def test_progress_prices_a_measurement_and_retries_by_the_runs_rate() -> None:
    # After torch's first case (its runtime's start in it, 30 s), bert-tiny b2 was measured twice
    # (20 s) and b3 once (10 s): one measurement costs 10 s whichever case was retried, and every
    # remaining case is priced at the run's measurements per case, counted from TRIES_PRIOR cases
    # measured once: (4 + 10) / (3 + 10).
    from pytest_hwbench.plugin.progress import Progress

    plan = {f"i{i}": BenchCase("bert-tiny", "torch", "cpu", "fp32", i + 1) for i in range(7)}
    plan["t0"] = BenchCase("bert-tiny", "torch", "cpu", "fp32", 2, mode="train")
    plan["o0"] = BenchCase("bert-tiny", "onnxruntime", "cpu", "fp32", 1)

    def run(counts: bool) -> Progress:
        now = [0.0]
        progress = Progress(0.0, clock=lambda: now[0], min_time_s=12.0)
        progress.start(len(plan), plan=plan)
        for nodeid, took, tries in (("i0", 30.0, 1), ("i1", 20.0, 2), ("i2", 10.0, 1)):
            now[0] += took
            progress.done_one(nodeid, load_s=0.0, tries=tries if counts else None)
        return progress

    rate = (4 + Progress.TRIES_PRIOR) / (3 + Progress.TRIES_PRIOR)
    # 4 inference cases at 10 s a measurement; train unseen: the inference measurement (10 s) is
    # below the timed loop's minimum (12 s), so one train measurement costs 12 s x MODE_COST;
    # onnxruntime's first case costs what torch's did (30 s), its runtime's start in it
    assert run(counts=True).estimate_left(60.0) == pytest.approx(
        rate * (4 * 10.0 + 12.0 * Progress.MODE_COST["train"]) + 30.0 + Progress.END_COST_S)
    # without the counts, the retried case's 20 s is one measurement: the mean of (20, 10), no rate
    blind = run(counts=False)
    assert blind.estimate_left(60.0) == pytest.approx(
        4 * 15.0 + 15.0 * Progress.MODE_COST["train"] + 30.0 + Progress.END_COST_S)


def test_progress_plans_a_case_with_a_known_gap_as_a_skip() -> None:
    # llava-tiny has no ONNX export (its spec's backend_gaps): its onnxruntime cases will skip, so
    # the plan prices them as plain tests, not as measured cases; its torch cases are measured
    from pytest_hwbench.models import get_model
    from pytest_hwbench.plugin.progress import planned

    assert get_model("llava-tiny").backend_gaps.get("onnxruntime")
    on_ort = BenchCase("llava-tiny", "onnxruntime", "cpu", "fp32", 1)
    on_torch = BenchCase("llava-tiny", "torch", "cpu", "fp32", 1)
    assert planned(on_ort) is None and planned(on_torch) == on_torch and planned(None) is None


def test_retries_stop_when_a_try_agrees_with_the_one_before() -> None:
    from pytest_hwbench.runner import _Try
    from pytest_hwbench.trackers import Latency, Memory, Sample

    def attempt(center: float, threads: int = 1, spread: float = 0.001) -> _Try:
        values = [center * (1 + spread * k) for k in (-2, -1, 0, 1, 2)]
        return _Try(Sample(Latency.from_values(values), Memory(None, None), float("nan")), threads=threads)

    assert attempt(10.0).agrees_with(attempt(10.3))  # within 5 %: a third try would say the same
    assert not attempt(10.0).agrees_with(attempt(11.0))
    assert not attempt(10.0, threads=2).agrees_with(attempt(10.0, threads=1))  # not the same measurement
    assert attempt(10.0, spread=0.05).agrees_with(attempt(11.0, spread=0.05))  # wide tries: within their IQR
