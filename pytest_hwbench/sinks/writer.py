"""The sink writer: a child process that writes records to the sinks between cases, so that the
pytest process never imports a sink's library and a run killed midway has its finished cases in
the stores.

The pytest process spools every record before handing it over, so a writer that fails, hangs or
dies loses nothing: what it did not acknowledge is pending, for ``hwbench replay``. The writer is
idle whenever a case is timed (`SinkWriter.wait_idle`), applies `Recorder`'s failure policy and
deadlines, runs in its own session (a Ctrl-C reaches pytest only) and closes the session as
``killed`` when its input ends without ``finish``. Only `shippable` sinks travel.

Messages are pickled objects on two pipes (`multiprocessing.connection`): ``("hello", sinks,
deadline, spool)``, ``("open", session)``, ``("record", record)`` per case and ``("finish",
status)``, each answered in order with ``{"ack": n, ...}``; a ``{"notify": line}`` (a sink that
keeps the run waiting) may come at any time.
"""

from __future__ import annotations

import contextlib
import os
import pickle
import signal
import subprocess
import sys
import time
from collections.abc import Callable, Sequence
from multiprocessing.connection import Connection, Pipe
from pathlib import Path
from typing import Any

import psutil

from pytest_hwbench.record import BenchmarkRecord, SessionInfo
from pytest_hwbench.sinks._recorder import Recorder, RecorderReport, _stderr_line
from pytest_hwbench.sinks.base import Sink
from pytest_hwbench.sinks.spool import Spool

#: Seconds added to the sinks' own time before the parent stops waiting for an answer.
_SLACK_S = 60.0


def shippable(sink: Sink) -> bool:
    """Whether `sink` can be rebuilt in the writer: its class is defined in a package module
    (not a conftest or ``__main__``) and it pickles."""
    module = type(sink).__module__
    if "." not in module or module.startswith("__main__") or module.rsplit(".", 1)[-1] == "conftest":
        return False
    try:
        pickle.dumps(sink)
    except Exception:  # noqa: BLE001 - any pickling failure means: write it here
        return False
    return True


class SinkWriter:
    """The pytest side: `start` spawns the writer and hands over the sinks; `open`, `record`,
    `send_finish` and `finish` follow the recorder's life; `wait_idle` blocks until the writer has
    answered everything sent. A writer that dies or stops answering is stopped; `failed` says why,
    and what it did not acknowledge is pending in `finish`'s report."""

    def __init__(self, sinks: Sequence[Sink], names: Sequence[str], *, deadline_s: float | None,
                 spool_dir: Path, log_path: Path, notify: Callable[[str], None] | None = None) -> None:
        self.names = list(names)
        self._sinks = list(sinks)
        self.deadline_s = deadline_s
        self.spool_dir = spool_dir
        self.log_path = log_path
        self.notify = notify
        self.failed: str | None = None
        self.proc: subprocess.Popen[bytes] | None = None
        #: the writer's input, and its answers
        self._input: Connection | None = None
        self._answers: Connection | None = None
        self._sent = 0
        self._acked = 0
        self._records = 0
        self._written: dict[str, int] = dict.fromkeys(self.names, 0)
        self._opened = False
        #: the writer's answer to ``finish``
        self._final: RecorderReport | None = None
        #: where a person sees each sink's runs (`Sink.browse`), in sink order, None where none
        self.links: list[str | None] = [None] * len(self.names)
        #: (begin, end) monotonic seconds of each message the writer handled, as it reported them
        self.busy: list[tuple[float, float]] = []
        #: seconds `wait_idle` kept the pytest process waiting, in all
        self.waited_s = 0.0

    # -- parent side ------------------------------------------------------------------------
    def start(self) -> None:
        """Spawn the writer with this interpreter and the same `pytest_hwbench` package."""
        root = str(Path(__file__).resolve().parents[2])  # the folder that holds pytest_hwbench/
        bootstrap = ("import sys; sys.path[0] = sys.argv[1]; "
                     "from pytest_hwbench.sinks.writer import main; main(int(sys.argv[2]), int(sys.argv[3]))")
        their_input, self._input = Pipe(duplex=False)
        self._answers, their_answers = Pipe(duplex=False)
        fds = (their_input.fileno(), their_answers.fileno())
        self.log_path.parent.mkdir(parents=True, exist_ok=True)
        with self.log_path.open("ab") as log, their_input, their_answers:
            self.proc = subprocess.Popen(
                [sys.executable, "-c", bootstrap, root, *map(str, fds)], stdin=subprocess.DEVNULL, stdout=log,
                stderr=log, pass_fds=fds, start_new_session=True,
            )
        # The sinks travel pickled apart, so that one the writer cannot rebuild is its answer's error.
        self._send(("hello", pickle.dumps(self._sinks), self.deadline_s, self.spool_dir))

    @property
    def alive(self) -> bool:
        return self.proc is not None and self.failed is None

    def open(self, session: SessionInfo) -> None:
        """Open the session on every sink (in the writer); once per writer."""
        self._opened = True
        self._send(("open", session))

    def record(self, record: BenchmarkRecord) -> None:
        """Hand over one record, already spooled; returns at once."""
        self._records += 1
        self._send(("record", record))

    def wait_idle(self) -> None:
        """Return once the writer has answered every message sent (it is then idle), or has
        failed (it is then stopped)."""
        began = time.monotonic()
        self._drain()
        self.waited_s += time.monotonic() - began

    def _drain(self) -> None:
        limit_s = None if self.deadline_s is None else self.deadline_s * max(1, len(self.names)) + _SLACK_S
        while self.alive and self._acked < self._sent:
            self._read_one(limit_s)

    def cpu_seconds(self) -> float | None:
        """CPU time (user + system) the writer process has used so far; None where unknown."""
        if self.proc is None:
            return None
        try:
            times = psutil.Process(self.proc.pid).cpu_times()
        except psutil.Error:
            return None
        return float(times.user + times.system)

    def send_finish(self, status: str) -> None:
        """Ask the writer to close the session on every sink with `status`; returns at once
        (`finish` waits for the answer)."""
        if self._opened:
            self._send(("finish", status))

    def finish(self) -> RecorderReport:
        """What each sink has and lacks once the writer answered everything sent (`send_finish`
        included). The writer then ends on its own; `stop` waits for it."""
        self._drain()
        self._close_input()
        if self._final is not None:
            return self._final
        errors = {name: f"writer: {self.failed}" for name in self.names} if self.failed else {}
        return RecorderReport(
            records=self._records, written=dict(self._written),
            pending={name: self._records - self._written.get(name, 0) for name in self.names},
            errors=errors, spool_dir=str(self.spool_dir),
        )

    def stop(self, timeout: float = 30.0) -> None:
        """Close the writer's input and wait for it to end (kill it when it does not)."""
        proc = self.proc
        if proc is None or proc.returncode is not None:
            return
        self._close_input()
        try:
            proc.wait(timeout=timeout)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait(timeout=10)
        if self._answers is not None:
            self._answers.close()

    def _close_input(self) -> None:
        """End the writer's input: it writes what it was sent, then exits."""
        if self._input is not None:
            self._input.close()

    def _fail(self, why: str) -> None:
        if self.failed is None:
            self.failed = why
        proc = self.proc
        if proc is not None and proc.poll() is None:
            proc.kill()
            proc.wait(timeout=10)

    def _send(self, message: tuple[Any, ...]) -> None:
        if not self.alive:
            return
        assert self.proc is not None and self._input is not None
        try:
            self._input.send(message)
        except OSError as exc:  # also its input closed (`finish`)
            self._fail(f"the writer process ended ({exc.__class__.__name__}; exit status {self.proc.poll()})")
            return
        self._sent += 1

    def _read_one(self, limit_s: float | None) -> None:
        """Read one answer from the writer (a notice is shown); fail the writer when it ends or
        says nothing for `limit_s` seconds (None: no limit)."""
        assert self.proc is not None and self._answers is not None
        if not self._answers.poll(limit_s):
            self._fail(f"no answer for {limit_s:.0f} s")
            return
        try:
            message: dict[str, Any] = self._answers.recv()
        except (EOFError, OSError):
            self._fail(f"the writer process ended (exit status {self.proc.wait()}; its log: {self.log_path})")
            return
        if "notify" in message:
            (self.notify or _stderr_line)(str(message["notify"]))
            return
        self._acked = message["ack"]
        self._written = message["written"]
        if "busy" in message:
            self.busy.append(message["busy"])
        self._final = message.get("report", self._final)
        self.links = message.get("links", self.links)
        if "error" in message:
            self._fail(f"the writer failed: {message['error']} (its log: {self.log_path})")


# -- the writer process -------------------------------------------------------------------------

class _NoSpool(Spool):
    """The writer's `Recorder` spools nothing: the pytest process has spooled every record."""

    def append_session(self, session: SessionInfo) -> None: ...

    def append(self, record: BenchmarkRecord) -> None: ...

    def append_session_end(self, session_id: str, status: str) -> None: ...


def _browse(sink: Sink) -> str | None:
    try:
        return sink.browse()
    except Exception:  # noqa: BLE001 - a link is a courtesy
        return None


def serve(messages: Connection, answers: Connection) -> int:
    """The writer's loop: read `messages` until ``finish`` or the end of input, answer each one
    on `answers`."""
    import warnings

    signal.signal(signal.SIGINT, signal.SIG_IGN)  # the parent decides when the session ends
    warnings.simplefilter("default")

    def send(message: dict[str, Any]) -> None:
        # A broken pipe: the parent died; what it sent is still written, and the session ends as killed.
        with contextlib.suppress(BrokenPipeError):
            answers.send(message)

    recorder: Recorder | None = None
    seq = 0

    def written() -> dict[str, int]:
        return dict(recorder.report().written) if recorder is not None else {}

    while True:
        try:
            op, *args = messages.recv()
        except (EOFError, OSError):  # the end of input, or the parent died while sending a message
            break
        seq += 1
        began = time.monotonic()
        try:
            if op == "hello":
                sinks, deadline_s, spool_dir = args
                recorder = Recorder(_NoSpool(spool_dir), pickle.loads(sinks), deadline_s=deadline_s,  # noqa: S301
                                    notify=lambda text: send({"notify": text}))
            elif recorder is None:
                raise RuntimeError(f"message {op!r} before hello")
            elif op == "open":
                recorder.start(*args)
            elif op == "record":
                recorder.emit(*args)
            elif op == "finish":
                report = recorder.finish(*args)
                send({"ack": seq, "written": dict(report.written), "busy": (began, time.monotonic()),
                      "report": report, "links": [_browse(sink) for sink in recorder.sinks]})
                return 0
            else:
                raise ValueError(f"unknown message {op!r}")
        except Exception as exc:  # noqa: BLE001 - said to the parent, which stops us
            send({"ack": seq, "written": written(), "error": f"{type(exc).__name__}: {exc}"})
            return 1
        send({"ack": seq, "written": written(), "busy": (began, time.monotonic())})
    # End of input without finish: the pytest process died. Store what arrived, close as killed.
    if recorder is not None and recorder.session is not None:
        recorder.finish("killed")
    return 0


def main(messages_fd: int, answers_fd: int) -> None:
    """The writer process: `serve` on the two pipes it was given, then end without the
    interpreter's teardown (logging and the standard streams flushed first): the exit handlers
    the sinks' libraries registered (MLflow's telemetry) hold nothing of ours and take a second."""
    import logging

    code = serve(Connection(messages_fd, writable=False), Connection(answers_fd, readable=False))
    logging.shutdown()
    for stream in (sys.stdout, sys.stderr):
        with contextlib.suppress(OSError, ValueError):
            stream.flush()
    os._exit(code)


__all__ = ["SinkWriter", "main", "serve", "shippable"]
