"""The pytest plugin: options, markers, case generation, skipping, measurement, record flow.

A test that asks for the ``hwbench_case`` fixture is parametrized over models x backends x
hardware x precisions x batch sizes; the ``hwbench`` fixture measures a case. Each finished case
becomes a `BenchmarkRecord` attached to its test report, so under pytest-xdist it streams to the
controller with the report, and `pytest_hwbench_record` fires there (or in the serial process).
"""

from __future__ import annotations

import dataclasses
import datetime as _dt
import difflib
import math
import os
import re
import signal
import socket
import subprocess
import time
import uuid
from collections.abc import Generator, Iterable
from dataclasses import dataclass
from importlib import metadata
from typing import Any

import pytest

from . import hookspecs
from .backends.base import registered_backends
from .errors import OutOfMemory, UnsupportedCase
from .hardware import PRECISIONS, HardwareInfo, detect_hardware
from .models import FAMILIES, MODELS, ModelSpec, get_model, load_model_set, register_model
from .record import BenchmarkRecord, SessionInfo
from .runner import DEFAULT_NEW_TOKENS, BenchCase, CaseResult, Runner, failed_record, takes_new_tokens
from .scenarios import DEFAULT_MODE, get_scenario, registered_modes, registered_scenarios
from .trackers import TimingConfig
from .tracking import Tracker, TrackingConfig

HARDWARE_MARKERS: dict[str, str] = {
    "cpu": "cases that run on the host CPU (any backend)",
    "cuda": "cases that need an NVIDIA GPU (torch.cuda, or ORT's CUDA/TensorRT providers)",
    "rocm": "cases that need an AMD GPU through torch's ROCm build",
    "mps": "cases that need an Apple GPU (torch.backends.mps)",
    "xpu": "cases that need an Intel GPU (torch.xpu)",
    "openvino": "cases that run through OpenVINO (any OpenVINO device)",
    "qnn": "cases that run on a Qualcomm NPU through Qualcomm AI Hub",
}
OTHER_MARKERS: dict[str, str] = {
    "quick": "tiny model variants, for CI smoke runs",
    "hwbench(models=, families=, backends=, precisions=, batch_sizes=, hardware=, modes=, new_tokens=, "
    "input_lengths=)": "narrow the hwbench_case grid of one test",
}
HWBENCH_MARKER_KWARGS = frozenset({"models", "families", "backends", "precisions", "batch_sizes", "hardware",
                                   "modes", "new_tokens", "input_lengths"})
DEFAULT_BATCH_SIZES: tuple[int, ...] = (1, 8, 32)
RECORD_ATTR = "hwbench_record"  # attribute on TestReport; xdist serialises it with the report
CASE_ATTR = "hwbench_case"  # the case id on every report of a case


# --- option parsing ---------------------------------------------------------------------------

def _split(value: str) -> list[str]:
    return [v.strip() for v in value.split(",") if v.strip()]


def _names(option: str, what: str) -> Any:
    """A parser of a comma-separated list of names that refuses an empty one: an empty value
    would otherwise mean the whole default grid."""

    def parse(value: str) -> tuple[str, ...]:
        items = _split(value)
        if not items:
            raise pytest.UsageError(f"{option}: empty list; name one or more {what}, comma-separated")
        return tuple(dict.fromkeys(items))

    return parse


def _text(option: str, what: str) -> Any:
    """A parser of one non-empty value (a name, a path, a URI)."""

    def parse(value: str) -> str:
        if not value.strip():
            raise pytest.UsageError(f"{option}: empty value; give {what}")
        return value.strip()

    return parse


def _positive_ints(option: str, what: str, example: str) -> Any:
    """A parser of a comma-separated list of positive integers; errors name `option`."""

    def parse(value: str) -> tuple[int, ...]:
        numbers = []
        for item in _split(value):
            try:
                number = int(item)
            except ValueError:
                raise pytest.UsageError(
                    f"{option}: {item!r} is not an integer; give positive integers, e.g. {example}"
                ) from None
            if number < 1:
                raise pytest.UsageError(
                    f"{option}: {number} is not a valid {what}; give positive integers, e.g. {example}"
                )
            numbers.append(number)
        if not numbers:
            raise pytest.UsageError(f"{option}: empty list; give positive integers, e.g. {example}")
        return tuple(dict.fromkeys(numbers))

    return parse


def _choices(option: str, allowed: Iterable[str]) -> Any:
    allowed = tuple(allowed)

    def parse(value: str) -> tuple[str, ...]:
        items = _split(value)
        bad = [v for v in items if v not in allowed]
        if bad or not items:
            raise pytest.UsageError(
                f"{option}: {', '.join(map(repr, bad)) or 'empty list'} not accepted; accepted: {', '.join(allowed)}"
            )
        return tuple(dict.fromkeys(items))

    return parse


def _positive(option: str, kind: type) -> Any:
    def parse(value: str) -> Any:
        try:
            number = kind(value)
        except ValueError:
            raise pytest.UsageError(f"{option}: {value!r} is not a number") from None
        if not math.isfinite(number) or number < 0:
            raise pytest.UsageError(f"{option}: {value!r} must be a finite number >= 0")
        return number

    return parse


def hardware_targets() -> tuple[str, ...]:
    """Every hardware value a registered backend addresses (``cpu``, ``cuda``, ``qnn``...)."""
    return tuple(dict.fromkeys(h for backend in registered_backends().values() for h in backend.hardware))


def pytest_addhooks(pluginmanager: pytest.PytestPluginManager) -> None:
    pluginmanager.add_hookspecs(hookspecs)


def pytest_addoption(parser: pytest.Parser) -> None:
    group = parser.getgroup("hwbench", "hardware benchmarks (pytest-hwbench)")
    group.addoption("--hwbench-models", dest="hwbench_models", type=_names("--hwbench-models", "zoo models"),
                    default=None, metavar="NAMES",
                    help="comma-separated zoo models to run (default: all; see `hwbench models`)")
    group.addoption("--hwbench-families", dest="hwbench_families", type=_choices("--hwbench-families", FAMILIES),
                    default=None, metavar="NAMES", help=f"model families to run: {', '.join(FAMILIES)}")
    group.addoption("--hwbench-batch-sizes", dest="hwbench_batch_sizes",
                    type=_positive_ints("--hwbench-batch-sizes", "batch size", "1,8,32"), default=None,
                    metavar="N,..", help="batch sizes (default: 1,8,32)")
    group.addoption("--hwbench-hardware", dest="hwbench_hardware", type=_names("--hwbench-hardware", "hardware"),
                    default=None, metavar="NAMES",
                    help="hardware targets to run, e.g. cpu or cuda (default: every target the backends address)")
    group.addoption("--hwbench-precisions", dest="hwbench_precisions",
                    type=_choices("--hwbench-precisions", PRECISIONS), default=None, metavar="P,..",
                    help=f"precisions: {', '.join(PRECISIONS)} (default: fp32 plus what the hardware runs natively)")
    modes = registered_modes()
    group.addoption("--hwbench-modes", dest="hwbench_modes", type=_choices("--hwbench-modes", modes),
                    default=None, metavar="M,..",
                    help=f"modes: {', '.join(modes)} (default: {DEFAULT_MODE}, or what the test's hwbench marker names)")
    group.addoption("--hwbench-new-tokens", dest="hwbench_new_tokens",
                    type=_positive_ints("--hwbench-new-tokens", "number of new tokens", "32,128"), default=None,
                    metavar="N,..", help=f"generate mode: tokens generated per sequence (default {DEFAULT_NEW_TOKENS})")
    group.addoption("--hwbench-input-lengths", dest="hwbench_input_lengths",
                    type=_positive_ints("--hwbench-input-lengths", "input length", "128,512"), default=None,
                    metavar="N,..", help="text input (prompt) lengths in tokens (default: each model's own)")
    group.addoption("--hwbench-backends", dest="hwbench_backends", type=_names("--hwbench-backends", "backends"),
                    default=None, metavar="NAMES",
                    help="backends to run (default: all installed: torch, onnxruntime, openvino, ...)")
    group.addoption("--hwbench-model-set", dest="hwbench_model_sets", action="append", default=[],
                    metavar="PATH", help="add models from a TOML/JSON model-set file or a directory with config.json")
    group.addoption("--hwbench-warmup", dest="hwbench_warmup", type=_positive("--hwbench-warmup", int),
                    default=3, metavar="N", help="warm-up iterations per case (default 3)")
    group.addoption("--hwbench-min-iterations", dest="hwbench_min_iterations",
                    type=_positive("--hwbench-min-iterations", int), default=10, metavar="N",
                    help="minimum timed iterations per case (default 10)")
    group.addoption("--hwbench-min-time", dest="hwbench_min_time", type=_positive("--hwbench-min-time", float),
                    default=1.0, metavar="SECONDS", help="minimum timed duration per case (default 1.0)")
    group.addoption("--hwbench-energy-time", dest="hwbench_energy_time",
                    type=_positive("--hwbench-energy-time", float), default=1.0, metavar="SECONDS",
                    help="seconds of an extra loop that reads the GPU energy counter (NVML) per case; 0 turns "
                         "energy off (default 1.0; CPU cases never measure energy)")
    group.addoption("--hwbench-cache-size", dest="hwbench_cache_size",
                    type=_positive("--hwbench-cache-size", int), default=1, metavar="N",
                    help="loaded models kept for reuse across batch sizes (default 1)")
    group.addoption("--hwbench-qai-hub-device", dest="hwbench_qai_hub_device", default=None, metavar="NAME",
                    help="Qualcomm AI Hub device for qnn cases (`qai-hub list-devices`; default: "
                         "$HWBENCH_QAI_HUB_DEVICE, else Samsung Galaxy S24 (Family))")
    group.addoption("--hwbench-store", dest="hwbench_store", type=_text("--hwbench-store", "a directory"),
                    default=None, metavar="DIR",
                    help="local store: MLflow SQLite db, DuckDB file and spool (default: <rootdir>/mlruns)")
    group.addoption("--hwbench-mlflow-uri", dest="hwbench_mlflow_uri",
                    type=_text("--hwbench-mlflow-uri", "a tracking URI, e.g. http://127.0.0.1:5000"),
                    default=None, metavar="URI",
                    help="MLflow tracking URI (default: $MLFLOW_TRACKING_URI, else sqlite:///<store>/mlflow.db)")
    group.addoption("--hwbench-db", dest="hwbench_db", type=_text("--hwbench-db", "a DuckDB file path"),
                    default=None, metavar="PATH",
                    help="DuckDB results file (default: <store>/hwbench.duckdb)")
    group.addoption("--hwbench-experiment", dest="hwbench_experiment",
                    type=_text("--hwbench-experiment", "an MLflow experiment name, e.g. hwbench"),
                    default=None, metavar="NAME",
                    help="MLflow experiment (default: $HWBENCH_EXPERIMENT, else hwbench)")
    group.addoption("--hwbench-progress-interval", dest="hwbench_progress_interval",
                    type=_positive("--hwbench-progress-interval", float), default=60.0, metavar="SECONDS",
                    help="print 'case k of n, elapsed, about T left' at most once per SECONDS (default 60; 0: "
                         "after every case)")
    group.addoption("--hwbench-sink", dest="hwbench_sinks", action="append", default=[], metavar="SPEC",
                    help="also write every record to this sink (repeatable): NAME, NAME:TARGET, a URI or a file "
                         "a registered sink takes, e.g. duckdb:/shared/bench.duckdb")
    group.addoption("--hwbench-no-track", dest="hwbench_no_track", action="store_true",
                    help="record nothing: no spool, no MLflow, no DuckDB")


def pytest_configure(config: pytest.Config) -> None:
    modes = {mode: scenario.description for mode, scenario in registered_scenarios().items()}
    for name, doc in {**HARDWARE_MARKERS, **modes, **OTHER_MARKERS}.items():
        config.addinivalue_line("markers", f"{name}: {doc}")
    if not config.pluginmanager.hasplugin("xdist"):
        # Cases carry xdist_group for `--dist loadgroup`; without xdist nobody registers it.
        config.addinivalue_line("markers", "xdist_group(name): keep cases of one loaded model on one xdist worker")
    device = config.getoption("hwbench_qai_hub_device")
    if device is not None:
        if not device.strip():
            raise pytest.UsageError("--hwbench-qai-hub-device: empty device name; see `qai-hub list-devices`")
        # The qai_hub backend reads the device from the environment, which xdist workers inherit.
        os.environ["HWBENCH_QAI_HUB_DEVICE"] = device.strip()
    for path in config.getoption("hwbench_model_sets"):
        try:
            for spec in load_model_set(path):
                register_model(spec, replace_existing=True)
        except ValueError as exc:
            raise pytest.UsageError(f"--hwbench-model-set: {exc}") from None
    for name in config.getoption("hwbench_models") or ():
        try:
            get_model(name)
        except KeyError as exc:
            raise pytest.UsageError(f"--hwbench-models: {exc.args[0]}") from None
    backends = registered_backends()
    for name in config.getoption("hwbench_backends") or ():
        if name not in backends:
            raise pytest.UsageError(f"--hwbench-backends: unknown backend {name!r}; accepted: {', '.join(backends)}")
    targets = hardware_targets()
    for name in config.getoption("hwbench_hardware") or ():
        if name not in targets:
            raise pytest.UsageError(f"--hwbench-hardware: unknown hardware {name!r}; accepted: {', '.join(targets)}")
    state = HwbenchState(config)
    config.stash[STATE] = state
    config.pluginmanager.register(state, "hwbench-state")
    if not state.is_worker and not config.getoption("hwbench_no_track"):
        try:
            tracking = TrackingConfig.resolve(
                config.getoption("hwbench_store"), config.getoption("hwbench_mlflow_uri"),
                config.getoption("hwbench_db"), config.getoption("hwbench_experiment"), config.rootpath,
                tuple(config.getoption("hwbench_sinks")),
            )
        except ValueError as exc:
            raise pytest.UsageError(str(exc)) from None
        config.pluginmanager.register(Tracker(tracking), "hwbench-tracker")


# --- per-process state ------------------------------------------------------------------------

def _git(*args: str) -> str:
    try:
        return subprocess.run(["git", *args], capture_output=True, text=True, timeout=5, check=False).stdout.strip()
    except (OSError, subprocess.SubprocessError):
        return ""


def runner_label() -> str:
    """The CI runner's label: HWBENCH_RUNNER, else the usual CI variables, else ''."""
    for var in ("HWBENCH_RUNNER", "RUNNER_NAME", "CI_RUNNER_DESCRIPTION", "BUILDKITE_AGENT_NAME", "NODE_NAME"):
        if os.environ.get(var):
            return os.environ[var]
    return ""


def _versions() -> dict[str, str]:
    out = {}
    for dist in ("pytest-hwbench", "torch", "transformers", "onnxruntime", "openvino", "pytest", "pytest-benchmark",
                 "pytest-xdist", "mlflow", "duckdb"):
        try:
            out[dist] = metadata.version(dist)
        except metadata.PackageNotFoundError:
            pass
    return out


def _worker_slot(config: pytest.Config) -> tuple[str, int, int]:
    """(worker id, worker index, worker count) from xdist's workerinput, or ('main', 0, 1)."""
    workerinput = getattr(config, "workerinput", None)
    if workerinput is None:
        return "main", 0, 1
    wid = str(workerinput["workerid"])
    return wid, int(wid.lstrip("gw") or 0), int(workerinput.get("workercount", 1))


@dataclass(frozen=True)
class Placement:
    """Where this process runs cases: device index for accelerators, CPU cores for the host."""

    worker: str
    device_index: int
    cpu_affinity: tuple[int, ...]


def place_worker(worker: str, index: int, count: int, hw: HardwareInfo) -> Placement:
    """Give worker `index` of `count` its own GPU and a disjoint slice of the usable cores."""
    cores: tuple[int, ...] = tuple(sorted(os.sched_getaffinity(0))) if hasattr(os, "sched_getaffinity") else ()
    if count > 1 and cores:
        share = max(1, len(cores) // count)
        mine = cores[(index * share) % len(cores):][:share]
        os.sched_setaffinity(0, mine)
        cores = mine
    gpus = max((len(hw[t].devices) for t in ("cuda", "rocm", "xpu") if hw[t].available), default=0)
    return Placement(worker, index % gpus if gpus else 0, cores)


def _duration(seconds: float) -> str:
    minutes, secs = divmod(int(round(seconds)), 60)
    hours, minutes = divmod(minutes, 60)
    return f"{hours}h{minutes:02d}m{secs:02d}s" if hours else f"{minutes}m{secs:02d}s"


class Progress:
    """Progress of a benchmark run, as lines for the controller's terminal: case k of n,
    elapsed time and an estimate of what remains, at most one line per `interval_s` (0: every
    case). Runs without benchmark cases (`has_cases` False) print none."""

    def __init__(self, interval_s: float, clock: Any = time.monotonic) -> None:
        self.interval_s = interval_s
        self.total: int | None = None
        self.done = 0
        self.has_cases = False
        self._clock = clock
        self._started = 0.0
        self._last = 0.0

    def start(self, total: int, has_cases: bool = True) -> None:
        self.total, self.done, self.has_cases = total, 0, has_cases
        self._started = self._last = self._clock()

    def done_one(self) -> str | None:
        """Count one finished test; the progress line when one is due, else None."""
        if self.total is None:
            return None
        self.done += 1
        now = self._clock()
        if not self.has_cases or self.done >= self.total or now - self._last < self.interval_s:
            return None  # the run's own summary follows the last case
        self._last = now
        elapsed = now - self._started
        left = elapsed / self.done * (self.total - self.done)
        return (f"hwbench: case {self.done} of {self.total} ({self.done / self.total:.0%}), "
                f"{_duration(elapsed)} elapsed, about {_duration(left)} left")


def _exit_reason(gateway: Any) -> str:
    """How a worker's process ended, e.g. ``killed by signal 9 (SIGKILL)``, from its exit status."""
    popen = getattr(getattr(gateway, "_io", None), "popen", None)  # execnet's popen gateway
    code = None
    if popen is not None:
        try:
            code = popen.wait(timeout=5)
        except Exception:  # noqa: BLE001 - still running or not a process: say what is known
            code = None
    if code is None:
        return "exit status unknown"
    if code < 0:
        try:
            name = signal.Signals(-code).name
        except ValueError:
            name = "unknown signal"
        return f"killed by signal {-code} ({name})"
    return f"exit status {code}"


def case_from_id(case_id: str) -> BenchCase | None:
    """The case whose `BenchCase.id` is `case_id`, or None when it is none of this run's cases."""
    def alternatives(names: Iterable[str]) -> str:
        return "|".join(re.escape(n) for n in sorted(names, key=len, reverse=True))

    pattern = (rf"^(?P<model>{alternatives(MODELS)})-(?P<hardware>{alternatives(hardware_targets())})"
               rf"-(?P<backend>{alternatives(registered_backends())})-(?P<precision>{alternatives(PRECISIONS)})"
               rf"-b(?P<batch>\d+)(?:-(?P<mode>{alternatives(m for m in registered_modes() if m != DEFAULT_MODE)}))?"
               rf"(?:-in(?P<input>\d+))?(?:-out(?P<tokens>\d+))?$")
    match = re.match(pattern, case_id)
    if match is None:
        return None
    try:
        case = BenchCase(match["model"], match["backend"], match["hardware"], match["precision"],
                         int(match["batch"]), match["mode"] or DEFAULT_MODE,
                         int(match["tokens"]) if match["tokens"] else None,
                         int(match["input"]) if match["input"] else None)
    except ValueError:
        return None
    return case if case.id == case_id else None


def _note(config: pytest.Config, line: str) -> None:
    """Keep `line` for the run's hwbench summary."""
    state = config.stash.get(STATE, None)
    if state is not None:
        state.notes.append(line)


STATE = pytest.StashKey["HwbenchState"]()


class HwbenchState:
    """One per process: session id, hardware, runner, and (on the controller) the session info."""

    def __init__(self, config: pytest.Config) -> None:
        self.config = config
        workerinput = getattr(config, "workerinput", None)
        self.is_worker = workerinput is not None
        self.session_id: str = (workerinput or {}).get("hwbench_session_id") or uuid.uuid4().hex
        self.timing = TimingConfig(
            warmup_iterations=config.getoption("hwbench_warmup"),
            min_iterations=max(1, config.getoption("hwbench_min_iterations")),
            min_time_s=config.getoption("hwbench_min_time"),
        )
        self._runner: Runner | None = None
        self._placement: Placement | None = None
        self.session_info: SessionInfo | None = None
        self.records: list[BenchmarkRecord] = []
        #: lines for the run's summary (e.g. a marker value the command line narrowed to nothing)
        self.notes: list[str] = []
        self.progress = Progress(config.getoption("hwbench_progress_interval"))
        #: cases this process generated and kept after -m/-k deselection (per xdist worker)
        self.collection: dict[str, int] = {"generated": 0, "selected": 0}
        self.worker_collections: dict[str, dict[str, int]] = {}

    @property
    def hw(self) -> HardwareInfo:
        return detect_hardware()

    @property
    def placement(self) -> Placement:
        if self._placement is None:
            worker, index, count = _worker_slot(self.config)
            self._placement = place_worker(worker, index, count, self.hw)
            if self._placement.cpu_affinity:
                import torch

                torch.set_num_threads(len(self._placement.cpu_affinity))
        return self._placement

    @property
    def runner(self) -> Runner:
        if self._runner is None:
            self._runner = Runner(self.timing, self.config.getoption("hwbench_cache_size"),
                                  self.config.getoption("hwbench_energy_time"))
        return self._runner

    # xdist: hand the session id to every worker (only called when xdist is active).
    @pytest.hookimpl(optionalhook=True)
    def pytest_configure_node(self, node: Any) -> None:
        node.workerinput["hwbench_session_id"] = self.session_id

    @pytest.hookimpl(trylast=True)
    def pytest_sessionstart(self, session: pytest.Session) -> None:
        if self.is_worker:
            return
        self.session_info = SessionInfo(
            session_id=self.session_id,
            started_at=_dt.datetime.now(_dt.timezone.utc).isoformat(),
            host=socket.gethostname(),
            git_commit=_git("rev-parse", "HEAD"),
            git_branch=_git("rev-parse", "--abbrev-ref", "HEAD"),
            runner_label=runner_label(),
            hardware_summary=detect_hardware().summary(),
            package_versions=_versions(),
        )
        self.config.hook.pytest_hwbench_session_start(config=self.config, session=self.session_info)

    def pytest_collection_finish(self, session: pytest.Session) -> None:
        if not self.is_worker and session.items and not self.config.option.collectonly:
            self.progress.start(len(session.items), has_cases=any(map(_case_of, session.items)))

    @pytest.hookimpl(optionalhook=True)
    def pytest_xdist_node_collection_finished(self, node: Any, ids: list[str]) -> None:
        # Every worker collects the same tests: count them once. Whether any is a case shows
        # when the first case's report arrives.
        if self.progress.total is None:
            self.progress.start(len(ids), has_cases=False)

    def _show_progress(self, report: pytest.TestReport) -> None:
        """Count a finished test; print the progress line of a benchmark run when one is due."""
        if getattr(report, CASE_ATTR, None):
            self.progress.has_cases = True
        line = self.progress.done_one()
        reporter = self.config.pluginmanager.get_plugin("terminalreporter")
        if line and reporter is not None:
            if reporter._tw.width_of_current_line:  # after pytest's progress dots: a line of its own
                reporter._tw.line()
            reporter.write_line(line)

    def pytest_runtest_logreport(self, report: pytest.TestReport) -> None:
        if not self.is_worker and report.when == "teardown":  # every test ends with one, skipped ones too
            self._show_progress(report)
        data = getattr(report, RECORD_ATTR, None)
        if data is None or self.is_worker:
            return
        record = BenchmarkRecord.from_dict(data)
        self.records.append(record)
        self.config.hook.pytest_hwbench_record(config=self.config, record=record)

    @pytest.hookimpl(optionalhook=True)
    def pytest_handlecrashitem(self, crashitem: str, report: pytest.TestReport, sched: Any) -> None:
        """An xdist worker died running `crashitem`: the controller writes the case's record
        (status ``crashed``), attached to the report xdist makes for it and logs next."""
        match = re.search(r"\[(.+)\]$", crashitem)
        case = case_from_id(match.group(1)) if match else None
        if case is None:
            return  # not a benchmark case
        worker = getattr(getattr(report, "node", None), "gateway", None)
        worker_id = getattr(worker, "id", "?")
        error = f"crashed: xdist worker {worker_id} died running {crashitem} ({_exit_reason(worker)})"
        record = dataclasses.replace(failed_record(case, self.session_id, error, nodeid=crashitem, worker=worker_id),
                                     status="crashed")
        setattr(report, RECORD_ATTR, record.to_dict())

    @pytest.hookimpl(optionalhook=True)
    def pytest_testnodedown(self, node: Any, error: Any) -> None:
        output = getattr(node, "workeroutput", None) or {}
        self.notes.extend(output.get("hwbench_notes", ()))
        worker = getattr(getattr(node, "gateway", None), "id", "?")
        if "hwbench_collection" in output:
            self.worker_collections[worker] = output["hwbench_collection"]
        elif error:
            self.worker_collections[worker] = {"error": str(error)}  # type: ignore[dict-item]

    def _explain_empty_run(self) -> None:
        """A run that collected no test says why, per process: no case generated (the grid
        options and markers), every case deselected (-m/-k), or a worker that never reported."""
        accounts = self.worker_collections or ({"this process": self.collection} if self.collection["generated"]
                                               else {})
        for who, account in accounts.items():
            if "error" in account:
                self.notes.append(f"no test ran: xdist worker {who} went down before reporting its collection "
                                  f"({account['error']})")
            elif not account.get("generated"):
                self.notes.append(f"no test ran: {who} generated no case (check --hwbench-* options, hwbench "
                                  "markers and the model sets)")
            else:
                selection = " ".join(f"{flag} {value!r}" for flag, value in
                                     (("-m", self.config.option.markexpr), ("-k", self.config.option.keyword))
                                     if value)
                self.notes.append(f"no test ran: {who} generated {account['generated']} cases and kept "
                                  f"{account.get('selected', 0)} after selection ({selection or 'no -m/-k'})")

    @pytest.hookimpl(trylast=True)
    def pytest_sessionfinish(self, session: pytest.Session, exitstatus: int) -> None:
        if self._runner is not None:
            self._runner.close()
        if self.is_worker:  # the controller prints the summary: hand it this worker's notes
            output = self.config.workeroutput  # type: ignore[attr-defined]
            output["hwbench_notes"] = list(dict.fromkeys(self.notes))
            output["hwbench_collection"] = dict(self.collection)
        elif not session.testscollected:
            self._explain_empty_run()
        if not self.is_worker and self.session_info is not None:
            self.config.hook.pytest_hwbench_session_finish(
                config=self.config, session=self.session_info, exitstatus=int(exitstatus)
            )

    def pytest_terminal_summary(self, terminalreporter: Any) -> None:
        if self.is_worker or not (self.records or self.notes):
            return
        failed = sum(r.status != "passed" for r in self.records)
        terminalreporter.write_sep("-", "hwbench")
        for note in dict.fromkeys(self.notes):
            terminalreporter.write_line(f"hwbench: {note}")
        terminalreporter.write_line(
            f"hwbench: {len(self.records)} records ({failed} failed), session {self.session_id}"
        )


# --- case generation --------------------------------------------------------------------------

def _marker_choices(key: str) -> tuple[str, ...] | None:
    """The values a name-valued hwbench marker keyword accepts (None: positive integers)."""
    if key == "models":
        return tuple(MODELS)
    return {"families": FAMILIES, "backends": tuple(registered_backends()), "precisions": PRECISIONS,
            "modes": registered_modes(), "hardware": hardware_targets()}.get(key)


def _check_marker_values(nodeid: str, key: str, value: Any) -> tuple[Any, ...]:
    """`value` of marker keyword `key` as a tuple, or a usage error naming the test, the value
    and what is accepted."""
    values = tuple(value) if isinstance(value, (list, tuple, set, frozenset)) else (value,)
    where = f"{nodeid}: @pytest.mark.hwbench({key}=...)"
    if not values:
        raise pytest.UsageError(f"{where}: empty list; leave the keyword out to keep the whole grid")
    allowed = _marker_choices(key)
    for item in values:
        if allowed is None:
            if isinstance(item, bool) or not isinstance(item, int) or item < 1:
                raise pytest.UsageError(f"{where}: {item!r} is not accepted; accepted: positive integers")
        elif item not in allowed:
            if key == "models":
                close = difflib.get_close_matches(str(item), allowed, n=3)
                hint = f"did you mean {', '.join(close)}? " if close else ""
                raise pytest.UsageError(f"{where}: unknown model {item!r}; {hint}`hwbench models` lists the zoo")
            raise pytest.UsageError(f"{where}: {item!r} is not accepted; accepted: {', '.join(allowed)}")
    return values


def _marker_filter(metafunc: pytest.Metafunc) -> dict[str, Any]:
    narrowed: dict[str, Any] = {}
    nodeid = metafunc.definition.nodeid
    for mark in metafunc.definition.iter_markers("hwbench"):
        unknown = set(mark.kwargs) - HWBENCH_MARKER_KWARGS
        if unknown or mark.args:
            raise pytest.UsageError(
                f"{nodeid}: @pytest.mark.hwbench takes keyword arguments "
                f"{', '.join(sorted(HWBENCH_MARKER_KWARGS))}; got {', '.join(sorted(unknown)) or mark.args}"
            )
        for key, value in mark.kwargs.items():
            narrowed.setdefault(key, _check_marker_values(nodeid, key, value))
    return narrowed


def generate_cases(config: pytest.Config, narrowed: dict[str, Any] | None = None,
                   test: str = "") -> list[BenchCase]:
    """The grid of cases this run asks for, in an order that reuses loaded models.

    `narrowed` holds the hwbench marker's keywords of `test`; a marker value that a command-line
    option narrows to nothing is noted for the run's summary.
    """
    narrowed = narrowed or {}
    hw = detect_hardware()

    def pick(option: str, key: str, default: Any) -> Any:
        # A marker narrows the test, the command line narrows the run: both apply (and may
        # leave nothing, e.g. a generate-only test under --hwbench-modes inference).
        from_option, from_marker = config.getoption(option), narrowed.get(key)
        if from_option and from_marker:
            both = tuple(v for v in from_marker if v in from_option)
            if not both:
                _note(config, f"{test or 'a test'}: its marker's {key}={list(from_marker)} and "
                              f"--{option.replace('_', '-')} {','.join(map(str, from_option))} leave no case")
            return both
        chosen = from_option or from_marker
        return tuple(chosen) if chosen else default

    backends = registered_backends()
    models = pick("hwbench_models", "models", tuple(MODELS))
    families = pick("hwbench_families", "families", None)
    batch_sizes = pick("hwbench_batch_sizes", "batch_sizes", DEFAULT_BATCH_SIZES)
    precisions = pick("hwbench_precisions", "precisions", None)
    named_backends = pick("hwbench_backends", "backends", None)
    wanted_backends = named_backends if named_backends is not None else tuple(backends)
    wanted_hardware = pick("hwbench_hardware", "hardware", None)
    modes = pick("hwbench_modes", "modes", (DEFAULT_MODE,))
    new_tokens = pick("hwbench_new_tokens", "new_tokens", (DEFAULT_NEW_TOKENS,))
    input_lengths = pick("hwbench_input_lengths", "input_lengths", (None,))
    cases = []
    for mode in modes:
        scenario = get_scenario(mode)
        tokens_per_case = new_tokens if takes_new_tokens(mode) else (None,)
        for name in models:
            spec: ModelSpec = get_model(name)
            if families is not None and spec.family not in families:
                continue
            if not scenario.supports(spec):
                continue  # e.g. generate on an encoder: no case, rather than a skip per grid point
            lengths = input_lengths if spec.modality in _TEXT_MODALITIES else (None,)
            for backend_name in wanted_backends:
                if backend_name not in scenario.backends:
                    continue  # e.g. train on onnxruntime: no case
                backend = backends[backend_name]
                for hardware in backend.hardware:
                    if wanted_hardware is not None and hardware not in wanted_hardware:
                        continue
                    if named_backends is None and hardware in getattr(backend, "opt_in_hardware", ()):
                        continue  # e.g. torch.compile on cpu: only when asked for by name
                    defaults = backend.default_precisions(hardware, hw)
                    # asked-for precisions the mode lacks skip with its reason
                    defaults = tuple(p for p in defaults if p in scenario.precisions)
                    for precision in (precisions if precisions is not None else defaults):
                        for length in lengths:
                            for tokens in tokens_per_case:
                                for batch in batch_sizes:
                                    cases.append(BenchCase(name, backend_name, hardware, precision, int(batch),
                                                           mode, tokens, length))
    config.hook.pytest_hwbench_modify_cases(config=config, cases=cases)
    return cases


#: Modalities whose main input is a token sequence, which ``input_lengths`` sets.
_TEXT_MODALITIES = frozenset({"text", "text2text"})


def _param(case: BenchCase) -> Any:
    backend = registered_backends()[case.backend]
    spec = get_model(case.model)
    marks = [getattr(pytest.mark, m) for m in backend.markers(case.hardware)]
    marks.append(getattr(pytest.mark, case.mode))
    if spec.tier == "quick":
        marks.append(pytest.mark.quick)
    # `--dist loadgroup` keeps the batch sizes of one loaded model on one worker.
    marks.append(pytest.mark.xdist_group("-".join(case.load_key)))
    return pytest.param(case, id=case.id, marks=marks)


def pytest_generate_tests(metafunc: pytest.Metafunc) -> None:
    if "hwbench_case" not in metafunc.fixturenames:
        return
    cases = generate_cases(metafunc.config, _marker_filter(metafunc), metafunc.definition.nodeid)
    state = metafunc.config.stash.get(STATE, None)
    if state is not None:
        state.collection["generated"] += len(cases)
    metafunc.parametrize("hwbench_case", [_param(c) for c in cases])


def _case_of(item: pytest.Item) -> BenchCase | None:
    """The case `item` measures, or None for other tests."""
    callspec = getattr(item, "callspec", None)
    case = callspec.params.get("hwbench_case") if callspec else None
    return case if isinstance(case, BenchCase) else None


@pytest.hookimpl(trylast=True)  # after `-m`/`-k` deselection: check only the cases that will run
def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    # Skip by capability at collection, so absent hardware costs no fixture set-up.
    hw = None
    state = config.stash.get(STATE, None)
    for item in items:
        case = _case_of(item)
        if case is None:
            continue
        if state is not None:
            state.collection["selected"] += 1
        hw = hw or detect_hardware()
        reason = case.unavailable(hw)
        if reason:
            item.add_marker(pytest.mark.skip(reason=reason))


# --- fixtures ---------------------------------------------------------------------------------

@pytest.fixture
def hwbench_case(request: pytest.FixtureRequest) -> BenchCase:
    """The case this test measures (parametrized by the plugin)."""
    return request.param  # type: ignore[no-any-return]


class Hwbench:
    """The ``hwbench`` fixture: measures cases and hands their records on."""

    def __init__(self, state: HwbenchState, request: pytest.FixtureRequest) -> None:
        self._state = state
        self._request = request
        self.result: CaseResult | None = None
        self.record: BenchmarkRecord | None = None

    def measure(self, case: BenchCase) -> CaseResult:
        """Measure `case`; skip when the backend cannot run it here; a crash is a failed record.

        Running out of memory is an outcome, not a bug: the failed record keeps the error (data
        for the compatibility matrix), the memory is freed and the test is reported xfailed.
        """
        state, node = self._state, self._request.node
        placement = state.placement
        common = {"nodeid": node.nodeid, "worker": placement.worker, "cpu_affinity": placement.cpu_affinity}
        try:
            result = state.runner.run(case, placement.device_index)
        except UnsupportedCase as exc:
            pytest.skip(str(exc))
        except OutOfMemory as exc:
            self.record = failed_record(case, state.session_id, exc, **common)
            node.stash[_RECORD] = self.record
            pytest.xfail(f"{case.id}: {exc} (recorded as a failed case)")
        except Exception as exc:
            self.record = failed_record(case, state.session_id, exc, **common)
            node.stash[_RECORD] = self.record
            raise
        self.result = result
        self.record = result.to_record(state.session_id, **common)
        node.stash[_RECORD] = self.record
        self._feed_pytest_benchmark(result, self.record)
        return result

    def _feed_pytest_benchmark(self, result: CaseResult, record: BenchmarkRecord) -> None:
        if not self._request.config.pluginmanager.hasplugin("benchmark"):
            return
        bench = self._request.getfixturevalue("benchmark")
        bench.extra_info.update({**record.params(), **{k: v for k, v in record.metrics().items() if v is not None}})
        # The fixture was used, by us: without a mode pytest-benchmark warns "Benchmark fixture was
        # not used at all" for every case when it is disabled (--benchmark-disable, xdist).
        bench._mode = "hwbench"
        if bench.disabled:  # pytest-benchmark turns itself off under xdist (FACTS.md)
            return
        # pytest-benchmark has no public way to take timings measured elsewhere; pedantic() would
        # time the call itself with perf_counter and a sync per round. _make_stats is what
        # pedantic uses internally (pinned to pytest-benchmark 5.x in pyproject.toml).
        stats = bench._make_stats(1)
        for value in result.latency.values_ms:
            stats.update(value / 1e3)


_RECORD = pytest.StashKey[BenchmarkRecord]()


@pytest.fixture
def hwbench(request: pytest.FixtureRequest) -> Hwbench:
    """Measures benchmark cases: ``hwbench.measure(hwbench_case)``."""
    return Hwbench(request.config.stash[STATE], request)


@pytest.hookimpl(wrapper=True)
def pytest_runtest_makereport(item: pytest.Item, call: pytest.CallInfo[None]) -> Generator[None, Any, Any]:
    report = yield
    case = _case_of(item)
    if case is not None:
        setattr(report, CASE_ATTR, case.id)
    if call.when == "call" and _RECORD in item.stash:
        setattr(report, RECORD_ATTR, item.stash[_RECORD].to_dict())
    return report
