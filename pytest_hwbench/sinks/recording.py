"""The recording plug-in (``pytest11`` entry point ``hwbench-recording``): every record to the
spool first, then to the default sinks (the store's MLflow tracking URI and DuckDB file) and
``--hwbench-sink``, on the controller or the serial process.

The base plugin measures and fires ``pytest_hwbench_session_start``, ``pytest_hwbench_record`` and
``pytest_hwbench_session_finish``; the `Tracker` here implements them, as a third party's
recorder would. The sinks come from ``pytest_hwbench_default_sinks`` (ours is ``trylast``: a
conftest that answers it replaces MLflow and DuckDB and keeps the spool). `TrackingConfig.resolve`
validates the store settings before any case runs. ``-p no:hwbench-recording`` records nothing.
"""

from __future__ import annotations

import os
import sys
import tempfile
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest

from ..plugin.options import MAX_CASE_SECONDS, positive_option, text_option
from ..plugin.session import STATE, installed_versions
from ..record import BenchmarkRecord, SessionInfo
from ..vocabulary import DEFAULT_EXPERIMENT, DEFAULT_STORE_DIR
from . import DEFAULT_DEADLINE_S, Recorder, RecorderReport, Spool, open_sink, redact_uri, resolve_sink
from .base import Sink, check_sink
from .mlflow_sink import resolve_tracking_uri, validate_tracking_uri


def pytest_addoption(parser: pytest.Parser) -> None:
    group = parser.getgroup("hwbench")
    group.addoption("--hwbench-store", dest="hwbench_store", type=text_option("--hwbench-store", "a directory"),
                    default=None, metavar="DIR",
                    help="local store: MLflow SQLite db, DuckDB file and spool (default: <rootdir>/mlruns)")
    group.addoption("--hwbench-mlflow-uri", dest="hwbench_mlflow_uri",
                    type=text_option("--hwbench-mlflow-uri", "a tracking URI, e.g. http://127.0.0.1:5000"),
                    default=None, metavar="URI",
                    help="MLflow tracking URI (default: $MLFLOW_TRACKING_URI, else sqlite:///<store>/mlflow.db)")
    group.addoption("--hwbench-db", dest="hwbench_db", type=text_option("--hwbench-db", "a DuckDB file path"),
                    default=None, metavar="PATH",
                    help="DuckDB results file (default: <store>/hwbench.duckdb)")
    group.addoption("--hwbench-experiment", dest="hwbench_experiment",
                    type=text_option("--hwbench-experiment", "an MLflow experiment name, e.g. hwbench"),
                    default=None, metavar="NAME",
                    help="MLflow experiment (default: $HWBENCH_EXPERIMENT, else hwbench)")
    group.addoption("--hwbench-sink", dest="hwbench_sinks", action="append", default=[], metavar="SPEC",
                    help="also write every record to this sink (repeatable): NAME, NAME:TARGET, a URI or a file "
                         "a registered sink takes, e.g. duckdb:/shared/bench.duckdb")
    group.addoption("--hwbench-sink-timeout", dest="hwbench_sink_timeout",
                    type=positive_option("--hwbench-sink-timeout", float, MAX_CASE_SECONDS), default=DEFAULT_DEADLINE_S,
                    metavar="SECONDS",
                    help="seconds each sink (MLflow, DuckDB, ...) may spend per session on calls that fail or do "
                         "not answer, then its records stay in the spool for `hwbench replay`; 0 waits without "
                         f"limit (default {DEFAULT_DEADLINE_S:g})")
    group.addoption("--hwbench-no-track", dest="hwbench_no_track", action="store_true",
                    help="record nothing: no spool, no MLflow, no DuckDB")


@pytest.hookimpl(trylast=True)  # after the base plugin made the process's state
def pytest_configure(config: pytest.Config) -> None:
    state = config.stash.get(STATE, None)
    if state is None or state.is_worker or config.getoption("hwbench_no_track"):
        return  # workers measure, the controller writes (xdist); or the base plugin is off
    try:
        tracking = TrackingConfig.resolve(
            config.getoption("hwbench_store"), config.getoption("hwbench_mlflow_uri"),
            config.getoption("hwbench_db"), config.getoption("hwbench_experiment"), config.rootpath,
            tuple(config.getoption("hwbench_sinks")), config.getoption("hwbench_sink_timeout"),
        )
    except ValueError as exc:
        raise pytest.UsageError(str(exc)) from None
    config.pluginmanager.register(Tracker(tracking), "hwbench-tracker")


@pytest.hookimpl(optionalhook=True)
def pytest_hwbench_package_versions(config: pytest.Config) -> dict[str, str]:
    return installed_versions(("mlflow", "duckdb"))


@pytest.hookimpl(trylast=True, optionalhook=True)
def pytest_hwbench_default_sinks(config: pytest.Config, tracking: TrackingConfig) -> list[Sink]:
    return [open_sink(f"mlflow:{tracking.mlflow_uri}", experiment=tracking.experiment),
            open_sink(f"duckdb:{tracking.db_path}")]


@dataclass(frozen=True)
class TrackingConfig:
    """Resolved store locations for one session.

    `mlflow_uri` is the real URI, credentials included, for connecting; show
    `redact_uri(mlflow_uri)` (what `__repr__` does) wherever it is printed or logged.
    """

    store_dir: Path
    mlflow_uri: str
    db_path: Path
    experiment: str
    #: further sinks every record also goes to (`open_sink` specs, ``--hwbench-sink``)
    extra_sinks: tuple[str, ...] = ()
    #: seconds each sink may spend per session on calls that fail or hang (None: no limit)
    sink_timeout_s: float | None = DEFAULT_DEADLINE_S

    def __repr__(self) -> str:
        return (f"TrackingConfig(store_dir={str(self.store_dir)!r}, mlflow_uri={redact_uri(self.mlflow_uri)!r}, "
                f"db_path={str(self.db_path)!r}, experiment={self.experiment!r}, "
                f"extra_sinks={tuple(redact_uri(s) for s in self.extra_sinks)!r})")

    @property
    def spool_dir(self) -> Path:
        """The append-only record journal (written before any sink)."""
        return self.store_dir / "spool"

    @classmethod
    def resolve(cls, store_dir: str | os.PathLike[str] | None, mlflow_uri: str | None, db_path: str | None,
                experiment: str | None, root: Path, extra_sinks: tuple[str, ...] = (),
                sink_timeout_s: float | None = DEFAULT_DEADLINE_S) -> TrackingConfig:
        """Fill defaults and validate; raises ValueError naming the bad setting and the fix."""
        store = Path(store_dir) if store_dir else root / DEFAULT_STORE_DIR
        store = store if store.is_absolute() else (root / store)
        uri = validate_tracking_uri(resolve_tracking_uri(mlflow_uri, store))
        db = Path(db_path) if db_path else store / "hwbench.duckdb"
        db = db if db.is_absolute() else Path.cwd() / db
        if db.is_dir():
            raise ValueError(f"--hwbench-db {db} is a directory; give a file path such as {db / 'hwbench.duckdb'}")
        _check_creatable("--hwbench-db", db.parent, db)
        _check_creatable("--hwbench-store", store, store)
        name = experiment or os.environ.get("HWBENCH_EXPERIMENT") or DEFAULT_EXPERIMENT
        for spec in extra_sinks:
            try:
                resolve_sink(spec)
            except ValueError as exc:
                raise ValueError(f"--hwbench-sink: {redact_uri(str(exc))}") from None
        return cls(store, uri, db, name, tuple(extra_sinks), sink_timeout_s or None)


def _check_creatable(option: str, directory: Path, shown: Path) -> None:
    """Raise ValueError unless `directory` exists writable or can be made.

    Probes with a real temporary directory in the nearest existing ancestor (removed again):
    `os.access` says yes to root even on /proc.
    """
    probe = directory
    while not probe.exists():
        probe = probe.parent
    if not probe.is_dir():
        raise ValueError(f"{option} {shown}: cannot be created, {probe} is a file; choose another path")
    try:
        os.rmdir(tempfile.mkdtemp(prefix=".hwbench-probe-", dir=probe))
    except OSError as exc:
        raise ValueError(
            f"{option} {shown}: cannot be created in {probe} ({exc.strerror}); choose another path"
        ) from None


def _status(exitstatus: int) -> str:
    if exitstatus in (pytest.ExitCode.OK, pytest.ExitCode.NO_TESTS_COLLECTED):
        return "finished"
    if exitstatus == pytest.ExitCode.INTERRUPTED:
        return "killed"
    return "failed"


class Tracker:
    """Controller-side plugin: session start -> records -> finish, through a `Recorder`.

    A serial session defers: it writes the sinks once at the end, so that no sink I/O runs
    between two measurements; an xdist controller measures nothing and writes as records arrive.
    """

    def __init__(self, config: TrackingConfig) -> None:
        self.config = config
        self.defer = True
        self.recorder: Recorder | None = None
        self.report: RecorderReport | None = None
        self._session: SessionInfo | None = None
        self._reporter: Any = None
        self._pytest_config: pytest.Config | None = None

    def _notify(self, line: str) -> None:
        """A line for the terminal now (a sink that keeps the run waiting says so)."""
        reporter = self._reporter
        if reporter is None:
            print(line, file=sys.stderr, flush=True)
            return
        if reporter._tw.width_of_current_line:  # after pytest's progress dots: a line of its own
            reporter._tw.line()
        reporter.write_line(line, yellow=True)

    def pytest_hwbench_session_start(self, config: pytest.Config, session: SessionInfo) -> None:
        # An xdist controller measures nothing: it writes each record as it arrives. xdist
        # registers its "dsession" in a trylast pytest_configure, so ask here, not there.
        self.defer = not config.pluginmanager.hasplugin("dsession")
        self._reporter = config.pluginmanager.get_plugin("terminalreporter")
        self._pytest_config = config
        # The stores are opened at the first record, so a session without benchmark cases
        # (e.g. the project's own tests) creates nothing.
        self._session = session

    def pytest_hwbench_record(self, record: BenchmarkRecord) -> None:
        if self.recorder is None:
            assert self._session is not None and self._pytest_config is not None, \
                "pytest_hwbench_session_start must come first"
            hook = self._pytest_config.hook
            defaults = hook.pytest_hwbench_default_sinks(config=self._pytest_config, tracking=self.config) or []
            for sink in defaults:
                check_sink(sink, "pytest_hwbench_default_sinks")
            sinks = [*defaults, *(self._open_extra(spec) for spec in self.config.extra_sinks)]
            self.recorder = Recorder(Spool(self.config.spool_dir), sinks, defer=self.defer,
                                     deadline_s=self.config.sink_timeout_s, notify=self._notify)
            self.recorder.start(self._session)
        self.recorder.emit(record)

    def _open_extra(self, spec: str) -> Sink:
        """A ``--hwbench-sink``; an MLflow one logs to the session's experiment too."""
        name, _ = resolve_sink(spec)
        return open_sink(spec, **({"experiment": self.config.experiment} if name == "mlflow" else {}))

    def pytest_hwbench_session_finish(self, exitstatus: int) -> None:
        if self.recorder is not None:
            self.report = self.recorder.finish(_status(exitstatus))

    def _write_runs_link(self, write: Any) -> None:
        """The MLflow UI address of the session's runs table (issue 18, item 13)."""
        for sink in self.recorder.sinks if self.recorder is not None else ():
            link = sink.browse()
            if link:
                write(f"hwbench: {link}")
                return

    @pytest.hookimpl(trylast=True)  # after the plugin's own "hwbench" summary line
    def pytest_terminal_summary(self, terminalreporter: Any) -> None:
        report = self.report
        if report is None or not (report.records or report.refused):
            return
        write = terminalreporter.write_line
        write(f"hwbench: MLflow {redact_uri(self.config.mlflow_uri)} (experiment {self.config.experiment!r}), "
              f"DuckDB {self.config.db_path}")
        self._write_runs_link(write)
        if report.refused:
            terminalreporter.write_line(
                f"hwbench: WARNING {report.refused} records refused, not stored: not measurements (the warnings "
                "above say why)", yellow=True, bold=True)
        pending = {name: n for name, n in report.pending.items() if n}
        if pending:
            counts = ", ".join(f"{n} for {name}" for name, n in pending.items())
            terminalreporter.write_line(
                f"hwbench: WARNING {max(pending.values())} records spooled, not yet delivered ({counts}); "
                f"run `hwbench replay --store {self.config.store_dir}` once the store is back",
                yellow=True, bold=True,
            )
            for name, error in report.errors.items():
                write(f"hwbench:   {name}: {redact_uri(error)}")


__all__ = ["Tracker", "TrackingConfig", "pytest_addoption", "pytest_configure", "pytest_hwbench_default_sinks",
           "pytest_hwbench_package_versions"]
