"""Session wiring: per-process state, configure/start/finish, records to hooks, xdist, progress.

`pytest_configure` checks the options and creates one `HwbenchState` per process (registered as
plugin `plugin_api.STATE_PLUGIN`); the records are written by the recording plug-in
(`pytest_hwbench.sinks.recording`), which implements the hooks the state fires. The state fires
`pytest_hwbench_session_start`, `pytest_hwbench_record` and `pytest_hwbench_session_finish`,
give each xdist worker the session id, its GPU and a slice of the cores, write a ``crashed``
record for a case whose worker died, print progress lines and the run's hwbench summary.
"""

from __future__ import annotations

import contextlib
import dataclasses
import datetime as _dt
import gc
import os
import re
import signal
import socket
import subprocess
import time
import uuid
from collections.abc import Iterable, Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any

import pytest

from ..backends.base import registered_backends
from ..case import BenchCase
from ..hardware import HardwareInfo, detect_hardware
from ..plugin_api import STATE_PLUGIN, case_of, installed_versions
from ..record import BenchmarkRecord, SessionInfo
from .grid import case_from_id
from .options import apply_options, register_markers

if TYPE_CHECKING:  # the measuring side (numpy, trackers) is imported when a case runs
    from ..runner import Runner

RECORD_ATTR = "hwbench_record"  # attribute on TestReport; xdist serialises it with the report
CASE_ATTR = "hwbench_case"  # the case id on every report of a case
STATE = pytest.StashKey["HwbenchState"]()


def pytest_configure(config: pytest.Config) -> None:
    register_markers(config)
    apply_options(config)
    state = HwbenchState(config)
    config.stash[STATE] = state
    config.pluginmanager.register(state, STATE_PLUGIN)


def _case_of_nodeid(nodeid: str) -> BenchCase | None:
    """The case a collected test id measures (``path::test[<case id>]``), or None for other tests."""
    match = re.search(r"\[(.+)\]$", nodeid)
    return case_from_id(match.group(1)) if match else None


def _measured(case: BenchCase | None) -> BenchCase | None:
    """`case` for the progress plan, or None (priced as a plain test) when its model has a known
    gap on its backend, so that its run is a skip (`pytest_hwbench.availability.unavailable`)."""
    if case is None:
        return None
    try:
        gap = case.spec().backend_gaps.get(case.backend)
    except KeyError:  # an unknown model fails in its run
        return case
    return None if gap else case


def note(config: pytest.Config, line: str) -> None:
    """Keep `line` for the run's hwbench summary."""
    state = config.stash.get(STATE, None)
    if state is not None:
        state.notes.append(line)


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


#: Distributions every session reports, whatever runs.
CORE_DISTRIBUTIONS = ("pytest-hwbench", "torch", "transformers", "pytest", "pytest-benchmark", "pytest-xdist")


def core_versions() -> dict[str, str]:
    """The versions every session reports: `CORE_DISTRIBUTIONS` and each registered backend's
    distributions, as installed in this interpreter."""
    return installed_versions(dict.fromkeys(
        [*CORE_DISTRIBUTIONS, *(d for b in registered_backends().values() for d in b.distributions)]))


def pytest_hwbench_package_versions(config: pytest.Config) -> dict[str, str]:
    return core_versions()


def _what_runs(config: pytest.Config) -> dict[str, str]:
    """What the session runs, for names people read (the MLflow parent run): ``suite``, the test
    paths asked for relative to the rootdir, and ``markers``, the ``-m`` expression."""
    paths = []
    for arg in config.args:
        path, sep, rest = str(arg).partition("::")
        try:
            shown = Path(path).resolve().relative_to(config.rootpath).as_posix()
        except (ValueError, OSError):
            shown = path
        paths.append(shown + sep + rest)
    out = {"suite": ",".join(paths) or "."}
    if config.option.markexpr:
        out["markers"] = str(config.option.markexpr)
    return out


def _freeze_gc() -> bool:
    """Move what the heap holds at the session's end out of the cyclic collector's sight
    (`gc.freeze`), until the state's `pytest_unconfigure` moves it back; True when it froze.

    After a case ran, the heap holds torch's and transformers' millions of objects, and each full
    collection walks them all (0.3 s on the CI runner). pytest's unraisable-exception check
    collects once in its `pytest_unconfigure` and once more in its cleanup, which runs after every
    plug-in's unconfigure. The first pass then skips the frozen heap; the second, after the heap
    is back, collects whatever the first skipped, while pytest's unraisable hook still reports it.
    Nothing is collected later than without the freeze, and the interpreter's own shutdown sees an
    unfrozen heap."""
    if gc.get_freeze_count():  # someone else froze it: theirs to undo
        return False
    gc.freeze()
    return True


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


#: The torch runtimes whose devices xdist workers share out, one device per worker.
MULTI_DEVICE_TARGETS = ("cuda", "rocm", "xpu")


def place_worker(worker: str, index: int, count: int, hw: HardwareInfo | None = None) -> Placement:
    """Give worker `index` of `count` its own GPU and a disjoint slice of the usable cores. A lone
    process uses device 0 and all its cores, and probes nothing; several workers probe the torch
    GPU runtimes (or read `hw`) to share their devices out."""
    cores: tuple[int, ...] = tuple(sorted(os.sched_getaffinity(0))) if hasattr(os, "sched_getaffinity") else ()
    if count <= 1:
        return Placement(worker, 0, cores)
    if cores:
        share = max(1, len(cores) // count)
        mine = cores[(index * share) % len(cores):][:share]
        os.sched_setaffinity(0, mine)
        cores = mine
    hw = hw or detect_hardware(targets=MULTI_DEVICE_TARGETS)
    gpus = max((len(hw[t].devices) for t in MULTI_DEVICE_TARGETS if t in hw.targets and hw[t].available), default=0)
    return Placement(worker, index % gpus if gpus else 0, cores)


def _duration(seconds: float) -> str:
    minutes, secs = divmod(int(round(seconds)), 60)
    hours, minutes = divmod(minutes, 60)
    return f"{hours}h{minutes:02d}m{secs:02d}s" if hours else f"{minutes}m{secs:02d}s"


class Progress:
    """Progress of a benchmark run, as lines for the controller's terminal: case k of n,
    elapsed time and an estimate of what remains, at most one line per `interval_s` (0: every
    case). Runs without benchmark cases (`has_cases` False) print none.

    The estimate prices each remaining test by what the grid knows of it (`plan`: nodeid -> its
    `BenchCase`, None for a plain test, in run order) as two parts:

    - its model's load, where the runner will load one: the remaining cases are walked in order
      through a cache of `cache_size` loaded models, as the runner keeps them, and each load is
      priced by the loads seen so far (same model and backend; else same backend; else any);
    - the rest of the case (warm-up, timed loop): one measurement by the tests of the same kind
      so far (same mode, model, backend and precision; else same mode, backend and precision;
      else same mode and backend; else same mode), each divided by the measurements it took (a
      skipped test's few milliseconds price the cases of its kind that will skip alike; a case
      whose model has a known gap on its backend is planned as a skip); a mode not seen yet
      costs an inference case's worth (the mean of the measurements seen, each divided by
      `MODE_COST` of its mode, and never less than `min_time_s`, the timed loop's minimum) times
      its own `MODE_COST`; a plain test a tenth of that;
    - retries: one measurement times the measurements a case has taken on average so far in
      this run, `TRIES_PRIOR` cases measured once counted in (a retried case is not a dearer
      kind: the host was busy, and may be again);
    - a backend's first case in the run also starts its runtime (imports, an export cache):
      it prices nothing else, and the first case of each backend still to come costs the mean
      of the first cases seen.

    The end of the run (`END_COST_S`) is added to every estimate. A finished case's load time
    and measurement count come with it (`done_one`'s `load_s`, 0 for a model taken from the
    cache, and `tries`); without them the whole time counts as one measurement. Without a plan
    every test costs the average so far. Times between reports are the wall time per finished
    test, so parallel workers are priced as they run. Each price is a mean: what is estimated is
    a sum (a first case's one-time costs are kept apart above).
    """

    #: Relative cost of one measurement by mode before one of its mode has run (inference = 1).
    #: Every timed loop lasts at least the minimum time, so a mode costs more only by what its
    #: loop does beyond it: a whole generate() call per iteration, train's backward warm-up.
    MODE_COST: dict[str, float] = {"inference": 1.0, "train": 1.2, "generate": 4.0}
    #: Cases counted as measured once before any has run: a few early retries (the first cases
    #: warm the host) do not price every remaining case as retried.
    TRIES_PRIOR = 10
    #: Seconds from the last case to the process's exit: the sinks closed, the summary, the
    #: interpreter's teardown (3.6 s after 19 cases, 6.1 s after the quick tier's 278 tests,
    #: measured on the project's 2-core runner).
    END_COST_S = 5.0

    def __init__(self, interval_s: float, clock: Any = time.monotonic, cache_size: int = 1,
                 min_time_s: float = 0.0) -> None:
        self.interval_s = interval_s
        self.cache_size = max(1, cache_size)
        self.min_time_s = min_time_s
        self.total: int | None = None
        self.done = 0
        self.has_cases = False
        self._clock = clock
        self._started = 0.0
        self._last = 0.0
        self._previous = 0.0
        self._left: dict[str, BenchCase | None] = {}
        self._seen: dict[tuple[str, ...], list[float]] = {}
        self._loads: dict[tuple[str, ...], list[float]] = {}
        self._cached: list[tuple[str, ...]] = []
        self._tries: list[int] = []
        self._backends: set[str] = set()
        self._firsts: list[float] = []

    def start(self, total: int, has_cases: bool = True, plan: dict[str, BenchCase | None] | None = None) -> None:
        self.total, self.done, self.has_cases = total, 0, has_cases
        self._started = self._last = self._previous = self._clock()
        self._left = dict(plan or {})
        self._seen, self._loads, self._cached, self._tries = {}, {}, [], []
        self._backends, self._firsts = set(), []

    @staticmethod
    def _kinds(case: BenchCase | None) -> tuple[tuple[str, ...], ...]:
        """The keys the rest of a test is priced by, most specific first."""
        if case is None:
            return (("test",),)
        return ((case.mode, case.model, case.backend, case.precision), (case.mode, case.backend, case.precision),
                (case.mode, case.backend), (case.mode,))

    @staticmethod
    def _load_kinds(case: BenchCase) -> tuple[tuple[str, ...], ...]:
        """The keys a load is priced by, most specific first."""
        return (("model", case.model, case.backend), ("backend", case.backend), ("any",))

    @staticmethod
    def _mean(times: list[float]) -> float:
        return sum(times) / len(times)

    def _price(self, case: BenchCase | None, fallback: float) -> float:
        for kind in self._kinds(case):
            times = self._seen.get(kind)
            if times:
                return self._mean(times)
        return fallback * (self.MODE_COST.get(case.mode, 1.0) if case is not None else 0.1)

    def _price_load(self, case: BenchCase) -> float:
        for kind in self._load_kinds(case):
            times = self._loads.get(kind)
            if times:
                return self._mean(times)
        return 0.0

    @staticmethod
    def _use(cached: list[tuple[str, ...]], key: tuple[str, ...], size: int) -> bool:
        """Whether `key` is in the cache (moved to its end); otherwise it is added (the oldest
        evicted beyond `size`)."""
        if key in cached:
            cached.remove(key)
            cached.append(key)
            return True
        cached.append(key)
        del cached[:-size]
        return False

    def estimate_left(self, elapsed: float) -> float:
        """Seconds the remaining tests should take, by the pricing above."""
        assert self.total is not None
        remaining = self.total - self.done
        if not self._left:
            return elapsed / max(self.done, 1) * remaining + self.END_COST_S
        # an inference case's worth: each case's time over its mode's cost, the mean of those
        units = sorted(t / self.MODE_COST.get(kind[0], 1.0) for kind, times in self._seen.items()
                       if len(kind) == 1 and kind != ("test",) for t in times)
        typical = self._mean(units) if units else elapsed / max(self.done, 1)
        typical = max(typical, self.min_time_s)  # a timed loop lasts at least the minimum time
        # the mean measurements per case so far, starting from TRIES_PRIOR cases measured once
        tries = (sum(self._tries) + self.TRIES_PRIOR) / (len(self._tries) + self.TRIES_PRIOR)
        cached, backends = list(self._cached), set(self._backends)
        priced = 0.0
        for case in self._left.values():
            if case is not None and case.backend not in backends and self._firsts:
                backends.add(case.backend)
                priced += self._mean(self._firsts)  # a backend's first case: its start included
            else:
                priced += self._price(case, typical) * (tries if case is not None else 1.0)
            if case is not None and not self._use(cached, case.load_key, self.cache_size):
                priced += self._price_load(case)
        unplanned = max(0, remaining - len(self._left))
        return priced + unplanned * typical * 0.1 + self.END_COST_S

    def _learn(self, case: BenchCase | None, took: float, load_s: float | None, tries: int | None) -> None:
        """What a finished test of the plan teaches the prices (see the class docstring)."""
        if case is not None:
            self._use(self._cached, case.load_key, self.cache_size)
            if load_s:
                took = max(0.0, took - load_s)
                for kind in self._load_kinds(case):
                    self._loads.setdefault(kind, []).append(load_s)
            if tries:
                self._tries.append(tries)
            if case.backend not in self._backends:  # its runtime's start is in it: priced apart
                self._backends.add(case.backend)
                self._firsts.append(took)
                return
            took /= tries or 1
        for kind in self._kinds(case):
            self._seen.setdefault(kind, []).append(took)

    def done_one(self, nodeid: str | None = None, load_s: float | None = None,
                 tries: int | None = None) -> str | None:
        """Count one finished test (`nodeid`, when the plan names it; `load_s`: the seconds its
        case spent loading its model, 0 when the model came from the cache; `tries`: the
        measurements its case took); the progress line when one is due, else None."""
        if self.total is None:
            return None
        self.done += 1
        now = self._clock()
        took, self._previous = now - self._previous, now
        if nodeid is not None and nodeid in self._left:
            self._learn(self._left.pop(nodeid), took, load_s, tries)
        if not self.has_cases or self.done >= self.total or now - self._last < self.interval_s:
            return None  # the run's own summary follows the last case
        self._last = now
        elapsed = now - self._started
        left = self.estimate_left(elapsed)
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


class HwbenchState:
    """One per process: session id, hardware, runner, and (on the controller) the session info."""

    def __init__(self, config: pytest.Config) -> None:
        self.config = config
        workerinput = getattr(config, "workerinput", None)
        self.is_worker = workerinput is not None
        self.session_id: str = (workerinput or {}).get("hwbench_session_id") or uuid.uuid4().hex
        self._runner: Runner | None = None
        self._placement: Placement | None = None
        self.session_info: SessionInfo | None = None
        self.records: list[BenchmarkRecord] = []
        #: serial run: nodeid -> the record its test just finished, until its report is logged
        self.finished: dict[str, BenchmarkRecord] = {}
        #: lines for the run's summary (e.g. a marker value the command line narrowed to nothing)
        self.notes: list[str] = []
        self.progress = Progress(config.getoption("hwbench_progress_interval"),
                                 cache_size=config.getoption("hwbench_cache_size"),
                                 min_time_s=config.getoption("hwbench_min_time"))
        #: nodeid -> seconds its case spent loading its model (0: from the cache), until its teardown
        self.load_seconds: dict[str, float] = {}
        #: nodeid -> the measurements its case took, for the progress estimate
        self.tries: dict[str, int] = {}
        #: cases this process generated and kept after -m/-k deselection (per xdist worker)
        self.collection: dict[str, int] = {"generated": 0, "matched": 0, "selected": 0}
        self.worker_collections: dict[str, dict[str, int]] = {}
        #: whether `_freeze_gc` froze the heap at the session's end (until this state's unconfigure)
        self._gc_frozen = False

    @property
    def placement(self) -> Placement:
        if self._placement is None:
            worker, index, count = _worker_slot(self.config)
            self._placement = place_worker(worker, index, count)
            if self._placement.cpu_affinity:
                import torch

                torch.set_num_threads(len(self._placement.cpu_affinity))
        return self._placement

    @property
    def runner(self) -> Runner:
        if self._runner is None:
            from ..runner import Runner
            from ..trackers import TimingConfig

            timing = TimingConfig(
                warmup_iterations=self.config.getoption("hwbench_warmup"),
                min_iterations=max(1, self.config.getoption("hwbench_min_iterations")),
                min_time_s=self.config.getoption("hwbench_min_time"),
            )
            self._runner = Runner(timing, self.config.getoption("hwbench_cache_size"),
                                  self.config.getoption("hwbench_energy_time"),
                                  noise_retries=self.config.getoption("hwbench_noise_retries"),
                                  timed_window=self._timed_window)
        return self._runner

    @contextlib.contextmanager
    def _timed_window(self, case: BenchCase) -> Iterator[None]:
        """Announces each timed window of `case` to the plug-ins (`pytest_hwbench_timing_starts`
        and `_ends`), so their own work stays out of it."""
        hook = self.config.hook
        hook.pytest_hwbench_timing_starts(config=self.config, case=case)
        try:
            yield
        finally:
            hook.pytest_hwbench_timing_ends(config=self.config, case=case)

    # xdist: hand the session id to every worker (only called when xdist is active).
    @pytest.hookimpl(optionalhook=True)
    def pytest_configure_node(self, node: Any) -> None:
        node.workerinput["hwbench_session_id"] = self.session_id

    def _start_session(self, hardware: Iterable[str]) -> None:
        """Fire `pytest_hwbench_session_start` (once, on the controller or the serial process) now
        that the session is known to hold hwbench cases on `hardware`; a run without any (the
        project's own tests, ``--co``) never probes hardware, imports torch or opens a store."""
        if self.is_worker or self.session_info is not None or self.config.option.collectonly:
            return
        self.session_info = SessionInfo(
            session_id=self.session_id,
            started_at=_dt.datetime.now(_dt.timezone.utc).isoformat(),
            host=socket.gethostname(),
            git_commit=_git("rev-parse", "HEAD"),
            git_branch=_git("rev-parse", "--abbrev-ref", "HEAD"),
            runner_label=runner_label(),
            hardware_summary=detect_hardware(targets=["cpu", *sorted(set(hardware))]).summary(),
            package_versions={k: v for answer in self.config.hook.pytest_hwbench_package_versions(config=self.config)
                              for k, v in answer.items()},
            extra=_what_runs(self.config),
        )
        self.config.hook.pytest_hwbench_session_start(config=self.config, session=self.session_info)

    def pytest_collection_finish(self, session: pytest.Session) -> None:
        if self.is_worker or not session.items:
            return
        cases = [case for case in map(case_of, session.items) if case is not None]
        if cases:
            self._start_session(case.hardware for case in cases)
        if not self.config.option.collectonly:
            self.progress.start(len(session.items), has_cases=bool(cases),
                                plan={item.nodeid: _measured(case_of(item)) for item in session.items})

    @pytest.hookimpl(optionalhook=True)
    def pytest_xdist_node_collection_finished(self, node: Any, ids: list[str]) -> None:
        # Every worker collects the same tests: count them once. Whether any is a case shows
        # when the first case's report arrives.
        if self.progress.total is None:
            self.progress.start(len(ids), has_cases=False, plan={i: _measured(_case_of_nodeid(i)) for i in ids})
        if self.session_info is None:
            cases = [case for case in map(_case_of_nodeid, ids) if case is not None]
            if cases:
                self._start_session(case.hardware for case in cases)

    def _show_progress(self, report: pytest.TestReport) -> None:
        """Count a finished test; print the progress line of a benchmark run when one is due."""
        if getattr(report, CASE_ATTR, None):
            self.progress.has_cases = True
        line = self.progress.done_one(report.nodeid, self.load_seconds.pop(report.nodeid, None),
                                      self.tries.pop(report.nodeid, None))
        reporter = self.config.pluginmanager.get_plugin("terminalreporter")
        if line and reporter is not None:
            if reporter._tw.width_of_current_line:  # after pytest's progress dots: a line of its own
                reporter._tw.line()
            reporter.write_line(line)

    def pytest_runtest_logreport(self, report: pytest.TestReport) -> None:
        if not self.is_worker and report.when == "teardown":  # every test ends with one, skipped ones too
            self._show_progress(report)
        if self.is_worker:
            return
        record = self.finished.pop(report.nodeid, None) if report.when == "call" else None
        if record is None:
            data = getattr(report, RECORD_ATTR, None)  # from an xdist worker, or its crash
            if data is None:
                return
            record = BenchmarkRecord.from_dict(data)
        self.records.append(record)
        if record.load_time_s is not None:
            self.load_seconds[report.nodeid] = 0.0 if record.extra.get("load_cached") else record.load_time_s
        if record.tries:
            self.tries[report.nodeid] = record.tries
        self.config.hook.pytest_hwbench_record(config=self.config, record=record)

    @pytest.hookimpl(optionalhook=True)
    def pytest_handlecrashitem(self, crashitem: str, report: pytest.TestReport, sched: Any) -> None:
        """An xdist worker died running `crashitem`: the controller writes the case's record
        (status ``crashed``), attached to the report xdist makes for it and logs next."""
        case = _case_of_nodeid(crashitem)
        if case is None:
            return  # not a benchmark case
        worker = getattr(getattr(report, "node", None), "gateway", None)
        worker_id = getattr(worker, "id", "?")
        from ..result import failed_record

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

    def _missing_paths(self) -> list[str]:
        """The test paths and node ids on the command line that name nothing. Serial pytest
        refuses them (``file or directory not found``, ``not found: FILE::NAME``); an xdist
        controller collects nothing itself and its workers reported an empty collection instead.
        A node id is missing when its file exists but defines no class or
        function of each ``::`` name (parameter ids in brackets left out)."""
        if self.config.option.pyargs:  # arguments may be module names, not paths
            return []
        here = Path(self.config.invocation_params.dir)
        missing: list[str] = []
        for arg in map(str, self.config.args):
            path, _, names = arg.partition("::")
            file = here / path
            if not file.exists():
                missing.append(arg)
            elif names and file.is_file() and file.suffix == ".py":
                import ast

                try:
                    tree = ast.parse(file.read_text(encoding="utf-8", errors="replace"))
                except SyntaxError:
                    continue  # pytest reports the collection error itself
                defined = {node.name for node in ast.walk(tree)
                           if isinstance(node, ast.FunctionDef | ast.AsyncFunctionDef | ast.ClassDef)}
                if any(name.partition("[")[0] not in defined for name in names.split("::") if name):
                    missing.append(arg)
        return missing

    def _explain_empty_run(self) -> bool:
        """A run that collected no test says why: test paths or node ids that name nothing (True
        is returned then), else per process: no case generated (the grid options and markers),
        every case deselected (-m/-k), or a worker that never reported."""
        missing = self._missing_paths()
        accounts = self.worker_collections or ({"this process": self.collection} if self.collection["generated"]
                                               else {})
        if not missing and accounts and all(a.get("generated") and not a.get("matched") for a in accounts.values()):
            # every process generated cases and no node id matched one: a parameter id names no case
            missing = [arg for arg in map(str, self.config.args) if "::" in arg and "[" in arg]
        if missing:
            files = [arg for arg in missing if "::" not in arg]
            nodes = [arg for arg in missing if "::" in arg]
            if files:
                self.notes.append(f"no test ran: file or directory not found: {', '.join(files)}")
            if nodes:
                self.notes.append(f"no test ran: not found: {', '.join(nodes)}")
            return True
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
        return False

    @pytest.hookimpl(trylast=True)
    def pytest_sessionfinish(self, session: pytest.Session, exitstatus: int) -> None:
        if self._runner is not None:
            self._runner.close(collect=False)
            # Backends that hold a process-wide resource (a browser) end it here: also after a
            # failure or Ctrl-C, which still finish the session.
            for backend in registered_backends().values():
                backend.shutdown()
            self._gc_frozen = _freeze_gc()
        if self.is_worker:  # the controller prints the summary: hand it this worker's notes
            output = self.config.workeroutput  # type: ignore[attr-defined]
            output["hwbench_notes"] = list(dict.fromkeys(self.notes))
            output["hwbench_collection"] = dict(self.collection)
        elif not session.testscollected and self._explain_empty_run():
            session.exitstatus = pytest.ExitCode.USAGE_ERROR  # as serial pytest ends on a missing path
        if not self.is_worker and self.session_info is not None:
            self.config.hook.pytest_hwbench_session_finish(
                config=self.config, session=self.session_info, exitstatus=int(exitstatus)
            )

    @pytest.hookimpl(trylast=True)
    def pytest_unconfigure(self, config: pytest.Config) -> None:
        if self._gc_frozen:
            gc.unfreeze()
            self._gc_frozen = False

    @pytest.hookimpl(wrapper=True, tryfirst=True)
    def pytest_terminal_summary(self, terminalreporter: Any) -> Any:
        """The hwbench section comes last, after every other plugin's summary (pytest-benchmark's
        table) and pytest's short test summary: it is what a benchmark run's reader looks for. It
        prints also when another plug-in's summary raises (pytest-benchmark's
        ``--benchmark-compare-fail`` raises ``PerformanceRegression``), naming what it raised,
        which then goes on."""
        try:
            result = yield
        except BaseException as exc:
            self._write_summary(terminalreporter, raised=exc)
            raise
        self._write_summary(terminalreporter)
        return result

    def _write_summary(self, terminalreporter: Any, raised: BaseException | None = None) -> None:
        if self.is_worker or not (self.records or self.notes):
            return
        terminalreporter.write_sep("-", "hwbench")
        for line in self.summary_lines():
            terminalreporter.write_line(f"hwbench: {line}")
        if raised is not None:
            origin = type(raised).__module__.split(".")[0]
            terminalreporter.write_line(
                f"hwbench: another plug-in's summary raised {type(raised).__name__}: {raised} (from {origin}); "
                "its gate judges this run's iterations against a saved run, which a shared host's drift "
                "moves: `hwbench compare` or `hwbench ab` judge rounds and runs")
        self.config.hook.pytest_hwbench_terminal_summary(config=self.config, terminalreporter=terminalreporter)

    def summary_lines(self) -> list[str]:
        """The run's hwbench summary: notes, then records and noisy counts."""
        failed = sum(r.status != "passed" for r in self.records)
        noisy = [r for r in self.records if r.noise == "noisy"]
        lines = list(dict.fromkeys(self.notes))
        lines.append(f"{len(self.records)} records ({failed} failed, {len(noisy)} noisy), session {self.session_id}")
        speeds = sorted(r.host_speed for r in self.records if r.host_speed is not None and r.host_bound)
        if speeds:  # the host against its recent best: a steady slow host is measured, not noisy
            lines.append(f"host speed {speeds[len(speeds) // 2]:.2f}x of its recent best (median of {len(speeds)} "
                         f"records on the host's CPU, {speeds[0]:.2f}-{speeds[-1]:.2f}); hwsel corrects for it, "
                         "compare where the records show how this host's models follow it")
        if noisy:  # the figures of these were taken while other work held the machine
            worst = max(noisy, key=lambda r: r.interference.get("other_cores") or 0.0)
            lines.append(f"noisy records were measured on a busy machine, e.g. {worst.case_id}: {worst.noise_reason} "
                         "(`hwbench report` lists them; `hwbench compare` compares them once 5 or more such cases show "
                         "how far interference moved them, else calls them inconclusive)")
        return lines

