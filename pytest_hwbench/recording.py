"""The recording plug-in (``pytest11`` entry point ``hwbench-recording``): on the controller or the
serial process, every record to the spool first, then to the default sinks (the store's MLflow
tracking URI and DuckDB file, or what ``pytest_hwbench_default_sinks`` gives) and ``--hwbench-sink``.
``-p no:hwbench-recording`` records nothing."""

from __future__ import annotations

import dataclasses
import functools
import os
import tempfile
import time
from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any

import pytest

from .case import BenchCase
from .plugin_api import (
    MAX_CASE_SECONDS,
    case_of,
    installed_versions,
    positive_option,
    terminal_line,
    text_option,
    writes_records,
)
from .record import BenchmarkRecord, SessionInfo
from .sinks.base import Sink, check_sink, open_sink, resolve_sink
from .sinks.mlflow_uri import resolve_tracking_uri, validate_tracking_uri
from .sinks.redact import redact_uri
from .vocabulary import DEFAULT_DEADLINE_S, DEFAULT_EXPERIMENT, DEFAULT_STORE_DIR

if TYPE_CHECKING:
    from .sinks._recorder import Recorder, RecorderReport
    from .sinks.writer import SinkWriter


class RecordingHooks:
    """The hooks only the recording plug-in calls (added in its `pytest_addhooks`)."""

    @staticmethod
    @pytest.hookspec(firstresult=True)
    def pytest_hwbench_default_sinks(config: pytest.Config, tracking: TrackingConfig) -> list[Sink] | None:
        """Controller or serial process, when the first hwbench case is collected: the sinks every
        record goes to after the spool, besides ``--hwbench-sink``. Ours (trylast) gives the store's
        sinks (`TrackingConfig.store_sinks`: MLflow and DuckDB); the first answer that is not None
        wins, so a conftest's or a plug-in's replaces ours. A conftest that may run with this
        plug-in off (``-p no:hwbench-recording``) marks its implementation ``optionalhook=True``."""


def pytest_addhooks(pluginmanager: pytest.PytestPluginManager) -> None:
    pluginmanager.add_hookspecs(RecordingHooks)


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
    if not writes_records(config) or config.getoption("hwbench_no_track"):
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
    return [store_sink.open() for store_sink in tracking.store_sinks()]


#: The names of the store's sinks (`TrackingConfig.store_sinks`), in the order records are replayed.
STORE_SINK_NAMES = ("mlflow", "duckdb")


@dataclass(frozen=True)
class StoreSink:
    """One sink of the store: its registered `name`, the `open_sink` `spec` and `options` that
    build it, and how messages show it (`shown`, credentials masked)."""

    name: str
    spec: str
    shown: str
    options: Mapping[str, Any] = field(default_factory=dict)

    def open(self) -> Sink:
        """The sink, built by its registered factory (nothing connects until it is used)."""
        return open_sink(self.spec, **self.options)


@dataclass(frozen=True)
class TrackingConfig:
    """Resolved store locations for one session. `mlflow_uri` is the real URI, credentials
    included, for connecting; show `redact_uri(mlflow_uri)` (as `__repr__` does) anywhere else."""

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

    def store_sinks(self) -> tuple[StoreSink, ...]:
        """The store's sinks (`STORE_SINK_NAMES`), in the order records are replayed to them: the
        MLflow tracking URI (the session's experiment) and the DuckDB file."""
        return (StoreSink("mlflow", f"mlflow:{self.mlflow_uri}", f"MLflow {redact_uri(self.mlflow_uri)}",
                          {"experiment": self.experiment}),
                StoreSink("duckdb", f"duckdb:{self.db_path}", f"DuckDB {self.db_path}"))

    @classmethod
    def resolve(cls, store_dir: str | os.PathLike[str] | None, mlflow_uri: str | None, db_path: str | None,
                experiment: str | None, root: Path, extra_sinks: tuple[str, ...] = (),
                sink_timeout_s: float | None = DEFAULT_DEADLINE_S,
                flags: tuple[str, str] = ("--hwbench-store", "--hwbench-db")) -> TrackingConfig:
        """Fill defaults and validate; raises ValueError naming the bad setting and the fix.
        `flags`: how the store folder and the DuckDB file are named in messages (pytest's options,
        or a command's ``--store``/``--db``)."""
        store_flag, db_flag = flags
        store = root / (store_dir or DEFAULT_STORE_DIR)  # an absolute store_dir stays as it is
        uri = validate_tracking_uri(resolve_tracking_uri(mlflow_uri, store))
        db = Path.cwd() / (db_path or store / "hwbench.duckdb")  # relative to the working directory
        if db.is_dir():
            raise ValueError(f"{db_flag} {db} is a directory; give a file path such as {db / 'hwbench.duckdb'}")
        if db_path:  # else the file goes in the store's folder, checked next
            _check_creatable(db_flag, db.parent, db)
        _check_creatable(store_flag, store, store)
        name = experiment or os.environ.get("HWBENCH_EXPERIMENT") or DEFAULT_EXPERIMENT
        for spec in extra_sinks:
            try:
                resolve_sink(spec)
            except ValueError as exc:
                raise ValueError(f"--hwbench-sink: {redact_uri(str(exc))}") from None
        return cls(store, uri, db, name, tuple(extra_sinks), sink_timeout_s or None)


def _check_creatable(option: str, directory: Path, shown: Path) -> None:
    """Raise ValueError unless `directory` exists writable or can be made (probed with a temporary
    directory in the nearest existing ancestor: `os.access` says yes to root even on /proc)."""
    probe = directory
    while not probe.exists():
        probe = probe.parent
    if not probe.is_dir():
        raise ValueError(f"{option} {shown}: cannot be created, {probe} is a file; choose another path")
    try:
        os.rmdir(tempfile.mkdtemp(prefix=".hwbench-probe-", dir=probe))
    except OSError as exc:
        raise ValueError(f"{option} {shown}: cannot be created in {probe} ({exc.strerror}); "
                         "choose another path") from None


#: pytest's exit status -> the session's status (any other: ``failed``)
_STATUS = {pytest.ExitCode.OK: "finished", pytest.ExitCode.NO_TESTS_COLLECTED: "finished",
           pytest.ExitCode.INTERRUPTED: "killed"}


class Tracker:
    """Controller-side plugin: session start -> records -> finish, spool first, sinks between cases.

    A serial session's sinks that can travel (ours) are written by a `SinkWriter` process, started
    once the first hwbench case is collected (beside collection and the first model's load) and
    idle before every timed window (`pytest_hwbench_timing_starts`); sessions without hwbench
    cases start nothing. Sinks that cannot travel (a conftest's) and an xdist controller's (it
    measures nothing) are written in this process as each record arrives.
    """

    def __init__(self, config: TrackingConfig) -> None:
        self.config = config
        self.recorder: Recorder | None = None
        self.writer: SinkWriter | None = None
        self._report: RecorderReport | None = None
        #: whether the session finished here while the writer still closes its sinks
        self._closing = False
        self._session: SessionInfo | None = None
        self._pytest_config: pytest.Config | None = None
        self._has_cases = False
        self._opened = False
        self._links: list[str | None] = []
        #: (begin, end) monotonic seconds of each timed window (cold call, warm-up, timed loop
        #: of one try of a case), when a writer runs
        self.timed_windows: list[tuple[float, float]] = []
        #: CPU seconds the writer used during those windows, in all (None: not known here)
        self.writer_cpu_in_windows: float | None = None
        self._window: tuple[float, float | None] | None = None

    def _make_sinks(self, config: pytest.Config) -> None:
        """Once: the sinks, split into those the writer process takes and those written here."""
        if self.recorder is not None:
            return
        # Imported with the first case: a session without one (``--co``, other tests) needs none.
        from .sinks._recorder import Recorder, unique_names
        from .sinks.spool import Spool
        from .sinks.writer import SinkWriter, shippable

        self._pytest_config = config
        notify = functools.partial(terminal_line, config, yellow=True)  # a sink that keeps the run waiting says so
        defaults = config.hook.pytest_hwbench_default_sinks(config=config, tracking=self.config) or []
        for sink in defaults:
            check_sink(sink, "pytest_hwbench_default_sinks")
        sinks = [*defaults, *(self._open_extra(spec) for spec in self.config.extra_sinks)]
        # An xdist controller measures nothing: it writes each record here as it arrives. xdist
        # registers its "dsession" in a trylast pytest_configure, so ask now, not at configure.
        serial = not config.pluginmanager.hasplugin("dsession")
        names = unique_names(sinks)
        away = [i for i, sink in enumerate(sinks) if serial and shippable(sink)]
        here = [sinks[i] for i in range(len(sinks)) if i not in away]
        self.recorder = Recorder(Spool(self.config.spool_dir), here, deadline_s=self.config.sink_timeout_s,
                                 notify=notify)
        if away:
            self.writer = SinkWriter([sinks[i] for i in away], [names[i] for i in away],
                                     deadline_s=self.config.sink_timeout_s, spool_dir=self.config.spool_dir,
                                     log_path=self.config.store_dir / "writer.log", notify=notify)
            self.writer.start()

    def _open(self) -> None:
        """Open the session on the spool and every sink, once its info and a case are known."""
        if self._opened or self._session is None or not self._has_cases or self.recorder is None:
            return
        self._opened = True
        self.recorder.start(self._session)
        if self.writer is not None:
            self.writer.open(self._session)

    def pytest_itemcollected(self, item: pytest.Item) -> None:
        if self.recorder is None and not item.config.option.collectonly and case_of(item) is not None:
            self._make_sinks(item.config)  # the writer starts beside the rest of the collection

    def pytest_collection_finish(self, session: pytest.Session) -> None:
        if not session.config.option.collectonly and any(case_of(item) is not None for item in session.items):
            self._make_sinks(session.config)
            self._has_cases = True
            self._open()

    def pytest_hwbench_timing_starts(self, config: pytest.Config, case: BenchCase) -> None:
        writer = self.writer
        if writer is None:
            return
        writer.wait_idle()  # no sink I/O while the case is timed
        self._window = (time.monotonic(), writer.cpu_seconds())

    def pytest_hwbench_timing_ends(self, config: pytest.Config, case: BenchCase) -> None:
        writer, window = self.writer, self._window
        if writer is None or window is None:
            return
        self._window = None
        began, cpu = window
        self.timed_windows.append((began, time.monotonic()))
        after = writer.cpu_seconds()
        if cpu is not None and after is not None:
            self.writer_cpu_in_windows = (self.writer_cpu_in_windows or 0.0) + after - cpu

    def pytest_hwbench_session_start(self, config: pytest.Config, session: SessionInfo) -> None:
        self._pytest_config = config
        self._session = session
        self._open()

    def pytest_hwbench_record(self, record: BenchmarkRecord) -> None:
        assert self._session is not None and self._pytest_config is not None, \
            "pytest_hwbench_session_start must come first"
        self._make_sinks(self._pytest_config)
        self._has_cases = True
        self._open()
        assert self.recorder is not None
        accepted = self.recorder.emit(record)  # spooled first; then the sinks written here
        if self.writer is not None and accepted:
            self.writer.record(record)

    def _open_extra(self, spec: str) -> Sink:
        """A ``--hwbench-sink``; an MLflow one logs to the session's experiment too."""
        name, _ = resolve_sink(spec)
        return open_sink(spec, **({"experiment": self.config.experiment} if name == "mlflow" else {}))

    def pytest_hwbench_session_finish(self, exitstatus: int) -> None:
        """Close the session on the sinks here, and ask the writer to close it on its own: the
        writer does that while pytest prints its summaries, and `report` waits for its answer."""
        if self.recorder is None or not self._opened:
            return
        status = _STATUS.get(exitstatus, "failed")
        self._report = self.recorder.finish(status)
        self._links = [sink.browse() for sink in self.recorder.sinks]
        if self.writer is not None:
            self.writer.send_finish(status)
            self._closing = True

    @property
    def report(self) -> RecorderReport | None:
        """What every sink has and lacks once the session finished (None before); waits for the
        writer to close the session on its sinks."""
        if self._closing and self.writer is not None:
            away = self.writer.finish()
            self._closing = False
            self._links = [*self.writer.links, *self._links]
            report = self._report
            assert report is not None
            self._report = dataclasses.replace(
                report, written={**away.written, **report.written}, pending={**away.pending, **report.pending},
                errors={**away.errors, **report.errors})
        return self._report

    @pytest.hookimpl(trylast=True)
    def pytest_unconfigure(self, config: pytest.Config) -> None:
        _ = self.report  # no terminal summary asked for it (``-p no:terminal``): the writer closes now
        if self.writer is not None:
            self.writer.stop()  # a session that never opened (every case deselected), or ended early

    def writer_summary(self) -> str:
        """One line on the writer against the timed cases (shown with ``-v``): the timed windows
        during which it reported work (0 is the promise), and its CPU time in them."""
        writer = self.writer
        assert writer is not None
        overlaps = sum(any(b < end and began < e for b, e in writer.busy) for began, end in self.timed_windows)
        cpu = "unknown" if self.writer_cpu_in_windows is None else f"{self.writer_cpu_in_windows * 1e3:.0f} ms"
        return (f"sink writer (pid {writer.proc.pid if writer.proc else '-'}): busy during "
                f"{overlaps} of {len(self.timed_windows)} timed windows, CPU used while they ran "
                f"{cpu}; the cases waited {writer.waited_s:.2f} s for it in all")

    def _replay_hint(self) -> str:
        """The `hwbench replay` command for this run's stores: each store setting that is not the
        store folder's own default is repeated, so following it never fills another store."""
        from .sinks.spool import replay_command

        cfg, store = self.config, self.config.store_dir
        default_uri = f"sqlite:///{store.resolve() / 'mlflow.db'}"
        return replay_command(store, db_path=None if cfg.db_path == store / "hwbench.duckdb" else cfg.db_path,
                              mlflow_uri=None if cfg.mlflow_uri == default_uri else cfg.mlflow_uri,
                              experiment=None if cfg.experiment == DEFAULT_EXPERIMENT else cfg.experiment)

    @pytest.hookimpl(optionalhook=True)  # under the run's hwbench summary, the last lines on the console
    def pytest_hwbench_terminal_summary(self, config: pytest.Config, terminalreporter: Any) -> None:
        report = self.report
        if report is None or not (report.records or report.refused):
            return
        write = terminalreporter.write_line
        write(f"hwbench: MLflow {redact_uri(self.config.mlflow_uri)} (experiment {self.config.experiment!r}), "
              f"DuckDB {self.config.db_path}")
        link = next((link for link in self._links if link), None)  # the MLflow UI's runs table
        if link:
            write(f"hwbench: {link}")
        if self.writer is not None and terminalreporter.config.option.verbose > 0:
            write(f"hwbench: {self.writer_summary()}")
        if report.refused:
            write(f"hwbench: WARNING {report.refused} records refused, not stored: not measurements "
                  "(the warnings above say why)", yellow=True, bold=True)
        pending = {name: n for name, n in report.pending.items() if n}
        if pending:
            counts = ", ".join(f"{n} for {name}" for name, n in pending.items())
            write(f"hwbench: WARNING {max(pending.values())} records spooled, not yet delivered ({counts}); "
                  f"run `{self._replay_hint()}` once the store is back", yellow=True, bold=True)
            for name, error in report.errors.items():
                write(f"hwbench:   {name}: {redact_uri(error)}")


__all__ = ["STORE_SINK_NAMES", "RecordingHooks", "StoreSink", "Tracker", "TrackingConfig", "pytest_addhooks",
           "pytest_addoption", "pytest_configure", "pytest_hwbench_default_sinks",
           "pytest_hwbench_package_versions"]
