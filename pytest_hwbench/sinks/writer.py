"""The sink writer: a child process that writes records to the sinks between cases, so that the
pytest process never imports a sink's library and a run killed midway has its finished cases in
the stores.

The pytest process spools every record before handing it over, so a writer that fails, hangs or
dies loses nothing: what it did not acknowledge is pending, for ``hwbench replay``. The writer is
idle, blocked on its input, whenever a case is timed (`SinkWriter.wait_idle`); it applies
`Recorder`'s failure policy and deadlines; it runs in its own session, so a Ctrl-C reaches pytest
only, and it closes the session as ``killed`` when its input ends without ``finish``. Only sinks
whose class lives in a package module travel (`shippable`); the others are written in pytest.

Protocol, one JSON object per line: ``hello`` (pickled sinks, the recorder's settings), ``open``,
``record`` per case and ``finish``, each answered in order with ``{"ack": n, ...}``; a
``{"notify": line}`` (a sink that keeps the run waiting) may come at any time.
"""

from __future__ import annotations

import base64
import contextlib
import dataclasses
import json
import os
import pickle
import select
import signal
import subprocess
import sys
import time
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import IO, Any

from pytest_hwbench.record import BenchmarkRecord, SessionInfo
from pytest_hwbench.sinks._recorder import Recorder, RecorderReport, _stderr_line
from pytest_hwbench.sinks.base import Sink

#: Seconds the parent waits for a writer whose sinks have no deadline (``--hwbench-sink-timeout 0``)
#: before each check that the process still lives.
_POLL_S = 1.0
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
    """The pytest side: starts the writer process and talks to it.

    `start` spawns it and hands over the sinks; `open`, `record` and `finish` follow the
    recorder's life; `wait_idle` blocks until the writer has answered everything sent. A writer
    that dies or stops answering is stopped; `failed` then says why, and the records it did not
    acknowledge are pending in `finish`'s report.
    """

    def __init__(self, sinks: Sequence[Sink], names: Sequence[str], *, deadline_s: float | None,
                 retry_every: int, spool_dir: Path, log_path: Path,
                 notify: Callable[[str], None] | None = None) -> None:
        self.names = list(names)
        self._sinks = list(sinks)
        self.deadline_s = deadline_s
        self.retry_every = retry_every
        self.spool_dir = spool_dir
        self.log_path = log_path
        self.notify = notify
        self.failed: str | None = None
        self.proc: subprocess.Popen[bytes] | None = None
        self._sent = 0
        self._acked = 0
        self._buffer = b""
        self._records = 0
        self._written: dict[str, int] = dict.fromkeys(self.names, 0)
        self._opened = False
        self._finishing = False
        #: the writer's answer to ``finish``: its `RecorderReport` as a dict
        self._final: dict[str, Any] | None = None
        #: where a person sees each sink's runs (`Sink.browse`), in sink order, None where none
        self.links: list[str | None] = [None] * len(self.names)
        #: (begin, end) monotonic seconds of each message the writer handled (comparable across
        #: processes on Linux), as it reported them
        self.busy: list[tuple[float, float]] = []
        #: seconds `wait_idle` kept the pytest process waiting, in all
        self.waited_s = 0.0

    # -- parent side ------------------------------------------------------------------------
    def start(self) -> None:
        """Spawn the writer with this interpreter and the same `pytest_hwbench` package."""
        root = str(Path(__file__).resolve().parents[2])  # the folder that holds pytest_hwbench/
        bootstrap = ("import sys; sys.path[0] = sys.argv[1]; "
                     "from pytest_hwbench.sinks.writer import main; main()")
        self.log_path.parent.mkdir(parents=True, exist_ok=True)
        with self.log_path.open("ab") as log:
            self.proc = subprocess.Popen(
                [sys.executable, "-c", bootstrap, root], stdin=subprocess.PIPE, stdout=subprocess.PIPE,
                stderr=log, start_new_session=True,
            )
        self._send({"op": "hello", "names": self.names, "deadline_s": self.deadline_s,
                    "retry_every": self.retry_every, "spool_dir": str(self.spool_dir),
                    "sinks": [base64.b64encode(pickle.dumps(s)).decode("ascii") for s in self._sinks]})

    @property
    def alive(self) -> bool:
        return self.proc is not None and self.failed is None

    def open(self, session: SessionInfo) -> None:
        """Open the session on every sink (in the writer); once per writer."""
        self._opened = True
        self._send({"op": "open", "session": session.to_dict()})

    def record(self, record: BenchmarkRecord) -> None:
        """Hand over one record, already spooled; returns at once."""
        self._records += 1
        self._send({"op": "record", "record": record.to_dict()})

    def wait_idle(self) -> None:
        """Return once the writer has answered every message sent (it is then idle), or has
        failed (it is then stopped)."""
        began = time.monotonic()
        self._drain()
        self.waited_s += time.monotonic() - began

    def _drain(self) -> None:
        while self.alive and self._acked < self._sent:
            self._read_one(self._wait_limit())

    def cpu_seconds(self) -> float | None:
        """CPU time (user + system) the writer process has used so far; None where unknown
        (no such process, or no ``/proc``)."""
        if self.proc is None:
            return None
        try:
            fields = Path(f"/proc/{self.proc.pid}/stat").read_text().rsplit(")", 1)[1].split()
        except (OSError, IndexError):
            return None
        return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")

    def send_finish(self, status: str) -> None:
        """Ask the writer to close the session on every sink with `status`; returns at once
        (`finish` waits for the answer)."""
        if self.alive and self._opened and not self._finishing:
            self._finishing = True
            self._send({"op": "finish", "status": status})

    def finish(self, status: str) -> RecorderReport:
        """Close the session on every sink with `status` (unless `send_finish` asked already);
        what each sink has and lacks. The writer then ends on its own; `stop` waits for it."""
        if self.alive and self._opened:
            self.send_finish(status)
            self._drain()
        self._close_input()
        report = self._final
        if report is None:
            errors = {name: f"writer: {self.failed}" for name in self.names} if self.failed else {}
            return RecorderReport(
                records=self._records, written=dict(self._written),
                pending={name: self._records - self._written.get(name, 0) for name in self.names},
                errors=errors, spool_dir=str(self.spool_dir),
            )
        return RecorderReport(**report)

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
        if proc.stdout is not None:
            proc.stdout.close()

    def _close_input(self) -> None:
        """End the writer's input: it writes what it was sent, then exits."""
        stdin = self.proc.stdin if self.proc is not None else None
        if stdin is not None and not stdin.closed:
            with contextlib.suppress(OSError):
                stdin.close()

    def _wait_limit(self) -> float | None:
        if self.deadline_s is None:
            return None
        return self.deadline_s * max(1, len(self.names)) + _SLACK_S

    def _fail(self, why: str) -> None:
        if self.failed is None:
            self.failed = why
        proc = self.proc
        if proc is not None and proc.poll() is None:
            proc.kill()
            proc.wait(timeout=10)

    def _send(self, message: dict[str, Any]) -> None:
        if not self.alive:
            return
        assert self.proc is not None and self.proc.stdin is not None
        try:
            self.proc.stdin.write(json.dumps(message).encode() + b"\n")
            self.proc.stdin.flush()
        except (OSError, ValueError) as exc:  # ValueError: its input was closed (`finish`)
            self._fail(f"the writer process ended ({exc.__class__.__name__}; exit status {self.proc.poll()})")
            return
        self._sent += 1

    def _read_one(self, limit_s: float | None) -> None:
        """Read one line from the writer (a notice is shown); fail the writer when it ends or says
        nothing for `limit_s` seconds."""
        assert self.proc is not None and self.proc.stdout is not None
        fd = self.proc.stdout.fileno()
        began = time.monotonic()
        while b"\n" not in self._buffer:
            waited = time.monotonic() - began
            if limit_s is not None and waited >= limit_s:
                self._fail(f"no answer for {limit_s:.0f} s")
                return
            step = _POLL_S if limit_s is None else min(_POLL_S, limit_s - waited)
            ready, _, _ = select.select([fd], [], [], step)
            if not ready:
                continue
            chunk = os.read(fd, 65536)
            if not chunk:
                self._fail(f"the writer process ended (exit status {self.proc.wait()}; its log: {self.log_path})")
                return
            self._buffer += chunk
        line, self._buffer = self._buffer.split(b"\n", 1)
        message: dict[str, Any] = json.loads(line)
        if "notify" in message:
            (self.notify or _stderr_line)(str(message["notify"]))
            return
        self._acked = int(message["ack"])
        self._written = dict(message.get("written", self._written))
        if "busy" in message:
            self.busy.append(tuple(message["busy"]))  # type: ignore[arg-type]
        self._final = message.get("report", self._final)
        self.links = message.get("links", self.links)
        if "error" in message:
            self._fail(f"the writer failed: {message['error']} (its log: {self.log_path})")


# -- the writer process -------------------------------------------------------------------------

class _NoSpool:
    """The writer's `Recorder` spools nothing: the pytest process has spooled every record."""

    def __init__(self, directory: str) -> None:
        self.directory = Path(directory)

    def append_session(self, session: SessionInfo) -> None:
        pass

    def append(self, record: BenchmarkRecord) -> None:
        pass

    def append_session_end(self, session_id: str, status: str) -> None:
        pass


def serve(stdin: IO[bytes] | None = None) -> int:
    """The writer's loop: read messages until ``finish`` or the end of input, answer each one."""
    import warnings

    signal.signal(signal.SIGINT, signal.SIG_IGN)  # the parent decides when the session ends
    # Answers go to a copy of stdout; stdout itself goes to the log, so that a library's print()
    # cannot break the protocol.
    out = os.fdopen(os.dup(1), "wb", buffering=0)
    os.dup2(2, 1)
    source = stdin if stdin is not None else sys.stdin.buffer
    warnings.simplefilter("default")

    def send(message: dict[str, Any]) -> None:
        # A broken pipe: the parent died; what it sent is still written, and the session ends as killed.
        with contextlib.suppress(BrokenPipeError):
            out.write(json.dumps(message).encode() + b"\n")

    recorder: Recorder | None = None
    seq = 0

    def written() -> dict[str, int]:
        return dict(recorder.report().written) if recorder is not None else {}

    for line in source:
        if not line.endswith(b"\n"):
            break  # the parent died while writing this message: as good as the end of input
        seq += 1
        began = time.monotonic()
        message = json.loads(line)
        op = message.get("op")
        try:
            if op == "hello":
                sinks = [pickle.loads(base64.b64decode(s)) for s in message["sinks"]]
                recorder = Recorder(_NoSpool(message["spool_dir"]), sinks, retry_every=message["retry_every"],
                                    deadline_s=message["deadline_s"], notify=lambda text: send({"notify": text}))
            elif recorder is None:
                raise RuntimeError(f"message {op!r} before hello")
            elif op == "open":
                recorder.start(SessionInfo.from_dict(message["session"]))
            elif op == "record":
                recorder.emit(BenchmarkRecord.from_dict(message["record"]))
            elif op == "finish":
                report = recorder.finish(message["status"])
                links = []
                for sink in recorder.sinks:
                    try:
                        links.append(sink.browse())
                    except Exception:  # noqa: BLE001 - a link is a courtesy
                        links.append(None)
                send({"ack": seq, "written": dict(report.written), "busy": [began, time.monotonic()],
                      "report": dataclasses.asdict(report), "links": links})
                _close(out)
                return 0
            else:
                raise ValueError(f"unknown message {op!r}")
        except Exception as exc:  # noqa: BLE001 - said to the parent, which stops us
            send({"ack": seq, "written": written(), "error": f"{type(exc).__name__}: {exc}"})
            _close(out)
            return 1
        send({"ack": seq, "written": written(), "busy": [began, time.monotonic()]})
    # End of input without finish: the pytest process died. Store what arrived, close as killed.
    if recorder is not None and recorder.session is not None:
        recorder.finish("killed")
    _close(out)
    return 0


def main() -> None:
    """The writer process: `serve`, then end without the interpreter's teardown (logging and the
    standard streams flushed first)."""
    # Once `serve` returns every sink has closed its session; the exit handlers its libraries
    # registered (MLflow's telemetry, finalizers) hold nothing of ours and take about a second.
    import logging

    code = serve()
    logging.shutdown()
    for stream in (sys.stdout, sys.stderr):
        with contextlib.suppress(OSError, ValueError):
            stream.flush()
    os._exit(code)


def _close(out: IO[bytes]) -> None:
    """Close the answer pipe, whose reader may be gone."""
    with contextlib.suppress(BrokenPipeError):
        out.close()


__all__ = ["SinkWriter", "main", "serve", "shippable"]
