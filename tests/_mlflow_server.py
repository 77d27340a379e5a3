"""A real `mlflow server` for tests: start on a free port, kill its process group, restart.

SQLite backend (or another `backend_uri`) and artifact root in a temporary directory, one uvicorn
worker, the GenAI job runner off, and a new session so that the server and its workers form one
process group that a test can signal as a whole.
"""

from __future__ import annotations

import contextlib
import os
import signal
import socket
import subprocess
import sys
import time
import urllib.request
from pathlib import Path

MLFLOW_BIN = Path(sys.executable).with_name("mlflow")


def free_port() -> int:
    """A TCP port on 127.0.0.1 that nothing listens on right now."""
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


def healthy(port: int, timeout: float = 1.0) -> bool:
    """True when the server on `port` answers ``/health`` with 200."""
    try:
        with urllib.request.urlopen(f"http://127.0.0.1:{port}/health", timeout=timeout) as response:
            return bool(response.status == 200)
    except OSError:
        return False


class MlflowServer:
    """One `mlflow server` process group over a SQLite file (or `backend_uri`, e.g. PostgreSQL);
    can be killed and started again.

    `start` may be called again after `kill`: same port, same database, same artifact root.
    """

    def __init__(self, db: Path, artifacts: Path, log: Path, port: int | None = None, *,
                 backend_uri: str | None = None, workers: int = 1) -> None:
        self.db, self.artifacts, self.log = Path(db), Path(artifacts), Path(log)
        self.port = port or free_port()
        self.backend_uri = backend_uri or f"sqlite:///{self.db}"
        self.workers = workers
        self.proc: subprocess.Popen[bytes] | None = None

    @property
    def uri(self) -> str:
        return f"http://127.0.0.1:{self.port}"

    @property
    def running(self) -> bool:
        return self.proc is not None and self.proc.poll() is None

    def start(self, timeout: float = 90.0) -> None:
        """Start the server and wait until ``/health`` answers (RuntimeError with the log if not)."""
        if self.running:
            raise RuntimeError(f"mlflow server on port {self.port} is already running")
        cmd = [
            str(MLFLOW_BIN), "server", "--host", "127.0.0.1", "--port", str(self.port),
            "--backend-store-uri", self.backend_uri, "--default-artifact-root", str(self.artifacts),
            "--workers", str(self.workers),
        ]  # fmt: skip
        # The job runner (huey consumer processes) serves GenAI jobs; tracking does not need it,
        # and on a small machine it doubles start and stop times.
        env = {**os.environ, "MLFLOW_SERVER_ENABLE_JOB_EXECUTION": "false"}
        env.pop("MLFLOW_TRACKING_URI", None)
        with self.log.open("ab") as out:
            self.proc = subprocess.Popen(
                cmd, stdout=out, stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL, start_new_session=True, env=env
            )
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            if self.proc.poll() is not None:
                raise RuntimeError(f"mlflow server exited with {self.proc.returncode}: {self.tail()}")
            if healthy(self.port):
                return
            time.sleep(0.25)
        self.kill(signal.SIGKILL)
        raise RuntimeError(f"mlflow server did not answer /health in {timeout} s: {self.tail()}")

    def kill(self, sig: int = signal.SIGTERM, timeout: float = 30.0) -> None:
        """Send `sig` to the server's process group, wait for it, then sweep the group with SIGKILL."""
        proc = self.proc
        if proc is None:
            return
        with contextlib.suppress(ProcessLookupError, PermissionError):
            os.killpg(proc.pid, sig)  # start_new_session: the group id is the server's pid
        try:
            proc.wait(timeout=timeout)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait(timeout=10)
        with contextlib.suppress(ProcessLookupError, PermissionError):
            os.killpg(proc.pid, signal.SIGKILL)

    def tail(self, chars: int = 3000) -> str:
        try:
            return self.log.read_text(errors="replace")[-chars:]
        except OSError:
            return "(no log)"


__all__ = ["MLFLOW_BIN", "MlflowServer", "free_port", "healthy"]
