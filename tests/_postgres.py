"""A real team server for tests: PostgreSQL from the system packages and `mlflow server` on it.

`PostgresServer` runs ``initdb`` into a temporary directory and ``postgres`` on 127.0.0.1 at a
free port (trust authentication, fsync off: a throwaway cluster). PostgreSQL refuses to run as
root, so as root the cluster belongs to the ``postgres`` user (or ``nobody``) and its commands run
through ``runuser``.

Fixtures (import them into a test module, or conftest, to use them):

- ``team_server`` (session scope): a `TeamServer`, PostgreSQL plus `mlflow server` with 4 workers
  on it; skips with the install command as its reason where the binaries or the driver are absent;
- ``team_experiment``: a fresh experiment name per test, so tests sharing the server never see
  each other's runs.
"""

from __future__ import annotations

import contextlib
import glob
import os
import shutil
import signal
import subprocess
import tempfile
import time
import uuid
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import pytest
from _mlflow_server import MlflowServer, free_port

#: What to run where the binaries or the driver are missing (the skip reason says it).
INSTALL_HINT = ("PostgreSQL server binaries and the SQL driver are needed: "
                "apt-get install -y postgresql && pip install 'pytest-hwbench[team]'")


def pg_bin_dir() -> Path | None:
    """The directory holding ``initdb`` and ``postgres``: on PATH, else Debian's
    ``/usr/lib/postgresql/*/bin`` (newest first); None if neither has them."""
    found = shutil.which("initdb")
    if found and Path(found).with_name("postgres").exists():
        return Path(found).resolve().parent
    for candidate in sorted(glob.glob("/usr/lib/postgresql/*/bin/initdb"), reverse=True):
        return Path(candidate).parent
    return None


def missing() -> str | None:
    """Why a team server cannot start here (the install command), or None."""
    if pg_bin_dir() is None:
        return INSTALL_HINT
    try:
        import psycopg  # noqa: F401  (the driver SQLAlchemy 2.1 picks for postgresql://)
    except ImportError:
        return INSTALL_HINT
    return None


def _run_as() -> str | None:
    """The user PostgreSQL runs as when we are root (it refuses root), else None (ourselves)."""
    if os.geteuid() != 0:
        return None
    import pwd

    for name in ("postgres", "nobody"):
        with contextlib.suppress(KeyError):
            pwd.getpwnam(name)
            return name
    raise RuntimeError("running as root and no 'postgres' or 'nobody' user to run PostgreSQL as")


class PostgresServer:
    """A throwaway PostgreSQL cluster on 127.0.0.1; `start` makes it and waits for it, `stop`
    stops it and removes its directory."""

    def __init__(self, port: int | None = None) -> None:
        bin_dir = pg_bin_dir()
        if bin_dir is None:
            raise RuntimeError(INSTALL_HINT)
        self.bin_dir = bin_dir
        self.port = port or free_port()
        self.user = _run_as()
        self.root = Path(tempfile.mkdtemp(prefix="hwbench-pg-"))
        self.data = self.root / "data"
        self.log = self.root / "postgres.log"
        self.proc: subprocess.Popen[bytes] | None = None

    def _cmd(self, *args: str) -> list[str]:
        return (["runuser", "-u", self.user, "--"] if self.user else []) + list(args)

    def uri(self, database: str = "postgres") -> str:
        """The SQLAlchemy URI of `database` (the cluster's superuser is ``hwbench``, no password)."""
        return f"postgresql://hwbench@127.0.0.1:{self.port}/{database}"

    def start(self, timeout: float = 60.0) -> None:
        if self.user:
            shutil.chown(self.root, self.user)
        subprocess.run(self._cmd(str(self.bin_dir / "initdb"), "-D", str(self.data), "-U", "hwbench",
                                 "-A", "trust", "-E", "UTF8", "--no-sync"),
                       check=True, capture_output=True, timeout=120)
        with self.log.open("ab") as out:
            self.proc = subprocess.Popen(
                self._cmd(str(self.bin_dir / "postgres"), "-D", str(self.data), "-h", "127.0.0.1",
                          "-p", str(self.port), "-k", str(self.root), "-c", "fsync=off",
                          "-c", "synchronous_commit=off", "-c", "full_page_writes=off",
                          "-c", "max_connections=200"),
                stdout=out, stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL, start_new_session=True)
        import psycopg

        deadline = time.monotonic() + timeout
        while True:
            if self.proc.poll() is not None:
                raise RuntimeError(f"postgres exited with {self.proc.returncode}: {self.tail()}")
            try:
                psycopg.connect(self.uri()).close()
                return
            except psycopg.OperationalError:
                if time.monotonic() > deadline:
                    self.stop()
                    raise RuntimeError(f"postgres did not accept connections in {timeout} s: {self.tail()}") \
                        from None
                time.sleep(0.2)

    def create_database(self, name: str) -> str:
        """Create database `name`; its URI."""
        import psycopg

        con = psycopg.connect(self.uri())
        try:
            con.autocommit = True
            with con.cursor() as cur:
                cur.execute(f'CREATE DATABASE "{name}"')
        finally:
            con.close()
        return self.uri(name)

    def stop(self) -> None:
        proc, self.proc = self.proc, None
        if proc is not None:
            with contextlib.suppress(ProcessLookupError, PermissionError):
                os.killpg(proc.pid, signal.SIGINT)  # postgres: "fast" shutdown
            try:
                proc.wait(timeout=30)
            except subprocess.TimeoutExpired:
                with contextlib.suppress(ProcessLookupError, PermissionError):
                    os.killpg(proc.pid, signal.SIGKILL)
                proc.wait(timeout=10)
        shutil.rmtree(self.root, ignore_errors=True)

    def tail(self, chars: int = 3000) -> str:
        try:
            return self.log.read_text(errors="replace")[-chars:]
        except OSError:
            return "(no log)"


@dataclass(frozen=True)
class TeamServer:
    """PostgreSQL and the `mlflow server` that uses it."""

    postgres: PostgresServer
    mlflow: MlflowServer
    #: the MLflow backend store (a database in `postgres`)
    backend_uri: str

    @property
    def uri(self) -> str:
        """The tracking URI runners log to (``http://127.0.0.1:PORT``)."""
        return self.mlflow.uri


@contextlib.contextmanager
def team_server_running(directory: Path, workers: int = 4) -> Iterator[TeamServer]:
    """PostgreSQL and `mlflow server` (`workers` uvicorn workers) on it, artifacts and logs in
    `directory`; both stopped on exit."""
    directory.mkdir(parents=True, exist_ok=True)
    pg = PostgresServer()
    pg.start()
    try:
        backend = pg.create_database("mlflow")
        server = MlflowServer(directory / "unused.db", directory / "artifacts", directory / "mlflow.log",
                              backend_uri=backend, workers=workers)
        server.start(timeout=180)
        try:
            yield TeamServer(pg, server, backend)
        finally:
            server.kill()
    finally:
        pg.stop()


@pytest.fixture(scope="session")
def team_server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[TeamServer]:
    """PostgreSQL plus `mlflow server` on it (4 workers), shared by the session's tests."""
    reason = missing()
    if reason:
        pytest.skip(reason)
    with team_server_running(tmp_path_factory.mktemp("team-server")) as server:
        yield server


@pytest.fixture
def team_experiment() -> str:
    """An experiment name no other test uses."""
    return f"hwbench-test-{uuid.uuid4().hex[:10]}"


__all__ = ["INSTALL_HINT", "PostgresServer", "TeamServer", "missing", "pg_bin_dir", "team_experiment",
           "team_server", "team_server_running"]
