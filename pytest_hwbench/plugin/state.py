"""The per-process state of a run (`HwbenchState`, registered at `pytest_configure`): it fires the
session and record hooks, records a case whose xdist worker died, prints progress lines and the
run's summary, and says why a run ran nothing."""

from __future__ import annotations

import contextlib
import dataclasses
import functools
import gc
import re
import signal
import uuid
from collections.abc import Iterator
from typing import TYPE_CHECKING, Any

import pytest

from ..backends.base import registered_backends
from ..case import BenchCase
from ..plugin_api import STATE_PLUGIN, case_of, terminal_line
from ..record import BenchmarkRecord, SessionInfo
from .grid import Selection, case_from_id
from .options import apply_options, register_markers
from .progress import Progress, planned
from .session import Placement, describe_session, missing_paths, place_worker

if TYPE_CHECKING:  # the measuring side (numpy, trackers) is imported when a case runs
    from ..runner import Runner

RECORD_ATTR = "hwbench_record"  # attribute on TestReport; xdist serialises it with the report
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


def _freeze_gc() -> bool:
    """`gc.freeze` the heap until the state's `pytest_unconfigure` unfreezes it; True when it froze.
    Why: pytest's unraisable-exception check collects twice at the end, each time walking torch's
    millions of objects; now the first pass skips them and the second collects what it skipped."""
    if gc.get_freeze_count():  # someone else froze it: theirs to undo
        return False
    gc.freeze()
    return True


def _exit_reason(gateway: Any) -> str:
    """How a worker's process ended, e.g. ``killed by signal 9 (SIGKILL)``, from its exit status."""
    try:
        code = gateway._io.popen.wait(timeout=5)  # execnet's popen gateway
    except Exception:  # still running, or not a process: say what is known
        code = None
    if code is None:
        return "exit status unknown"
    if code < 0:
        name = {s.value: s.name for s in signal.Signals}.get(-code, "unknown signal")
        return f"killed by signal {-code} ({name})"
    return f"exit status {code}"


class HwbenchState:
    """One per process: session id, hardware, runner, and (on the controller) the session info."""

    def __init__(self, config: pytest.Config) -> None:
        self.config = config
        workerinput = getattr(config, "workerinput", None)
        self.is_worker = workerinput is not None
        self.session_id: str = (workerinput or {}).get("hwbench_session_id") or uuid.uuid4().hex
        self.session_info: SessionInfo | None = None
        self.selection = Selection.from_options(config.getoption)
        self.records: list[BenchmarkRecord] = []
        #: lines for the run's summary (e.g. a marker value the command line narrowed to nothing)
        self.notes: list[str] = []
        option = config.getoption
        self.progress = Progress(option("hwbench_progress_interval"), cache_size=option("hwbench_cache_size"),
                                 min_time_s=option("hwbench_min_time"))
        #: nodeid -> (its model's load seconds, 0 from the cache; its tries), for the progress estimate
        self.measured: dict[str, tuple[float | None, int | None]] = {}
        #: cases this process generated and kept after -m/-k deselection (per xdist worker)
        self.collection: dict[str, int] = {"generated": 0, "matched": 0, "selected": 0}
        self.worker_collections: dict[str, dict[str, int]] = {}
        #: whether `_freeze_gc` froze the heap at the session's end (until this state's unconfigure)
        self._gc_frozen = False

    @functools.cached_property
    def placement(self) -> Placement:
        placement = place_worker(self.config)
        if placement.cpu_affinity:
            import torch

            torch.set_num_threads(len(placement.cpu_affinity))
        return placement

    @functools.cached_property
    def runner(self) -> Runner:
        from ..runner import Runner
        from ..trackers import TimingConfig

        option = self.config.getoption
        timing = TimingConfig(option("hwbench_warmup"), max(1, option("hwbench_min_iterations")),
                              option("hwbench_min_time"))
        return Runner(timing, option("hwbench_cache_size"), option("hwbench_energy_time"),
                      noise_retries=option("hwbench_noise_retries"), timed_window=self._timed_window)

    @contextlib.contextmanager
    def _timed_window(self, case: BenchCase) -> Iterator[None]:
        """Each timed window of `case`, announced to the plug-ins so their own work stays out of it."""
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

    def _collected(self, cases: dict[str, BenchCase | None]) -> None:
        """The controller or the serial process collected `cases` (nodeid -> its case, None for a
        plain test): fire `pytest_hwbench_session_start` once, when they hold hwbench cases, and
        start the progress count. A run without cases and ``--co`` probe and open nothing."""
        if self.config.option.collectonly:
            return
        found = [case for case in cases.values() if case is not None]
        if found and self.session_info is None:
            self.session_info = describe_session(self.config, self.session_id, (case.hardware for case in found))
            self.config.hook.pytest_hwbench_session_start(config=self.config, session=self.session_info)
        if self.progress.total is None:  # every xdist worker collects the same tests: count them once
            self.progress.start(len(cases), has_cases=bool(found), plan={i: planned(c) for i, c in cases.items()})

    def pytest_collection_finish(self, session: pytest.Session) -> None:
        if session.items and not self.is_worker:
            self._collected({item.nodeid: case_of(item) for item in session.items})

    @pytest.hookimpl(optionalhook=True)
    def pytest_xdist_node_collection_finished(self, node: Any, ids: list[str]) -> None:
        self._collected({i: _case_of_nodeid(i) for i in ids})

    def pytest_runtest_logreport(self, report: pytest.TestReport) -> None:
        if self.is_worker:
            return
        if report.when == "teardown":  # every test ends with one, skipped ones too: count it
            line = self.progress.done_one(report.nodeid, *self.measured.pop(report.nodeid, (None, None)))
            if line and self.config.pluginmanager.has_plugin("terminalreporter"):
                terminal_line(self.config, line)
        data = getattr(report, RECORD_ATTR, None)  # from this process, an xdist worker, or its crash
        if data is None:
            return
        record = BenchmarkRecord.from_dict(data)
        self.records.append(record)
        cached = record.load_time_s is not None and record.extra.get("load_cached")
        self.measured[report.nodeid] = (0.0 if cached else record.load_time_s, record.tries or None)
        self.config.hook.pytest_hwbench_record(config=self.config, record=record)

    @pytest.hookimpl(optionalhook=True)
    def pytest_handlecrashitem(self, crashitem: str, report: pytest.TestReport, sched: Any) -> None:
        """An xdist worker died running `crashitem`: its case's ``crashed`` record rides on the report."""
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

    def _explain_empty_run(self) -> bool:
        """Note why a run collected no test: paths or node ids that name nothing (then True), else per
        process: no case generated, every case deselected (-m/-k), or a worker that never reported."""
        missing = missing_paths(self.config)
        accounts = self.worker_collections or ({"this process": self.collection} if self.collection["generated"]
                                               else {})
        if not missing and accounts and all(a.get("generated") and not a.get("matched") for a in accounts.values()):
            # every process generated cases and no node id matched one: a parameter id names no case
            missing = [arg for arg in map(str, self.config.args) if "::" in arg and "[" in arg]
        if missing:
            for what, node_ids in (("file or directory not found", False), ("not found", True)):
                if args := [arg for arg in missing if ("::" in arg) == node_ids]:
                    self.notes.append(f"no test ran: {what}: {', '.join(args)}")
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
        if "runner" in vars(self):  # a case ran in this process
            self.runner.close(collect=False)
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
            self.config.hook.pytest_hwbench_session_finish(config=self.config, session=self.session_info,
                                                           exitstatus=int(exitstatus))

    @pytest.hookimpl(trylast=True)
    def pytest_unconfigure(self, config: pytest.Config) -> None:
        if self._gc_frozen:
            gc.unfreeze()
            self._gc_frozen = False

    @pytest.hookimpl(wrapper=True, tryfirst=True)
    def pytest_terminal_summary(self, terminalreporter: Any) -> Any:
        """The hwbench section, last; also when another plug-in's summary raises (pytest-benchmark's
        ``--benchmark-compare-fail``), naming what it raised."""
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


