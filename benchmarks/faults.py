"""The faults a team meets, each run as a user would, with its wall time and exit code. Figures,
not assertions: the tests assert each behaviour; this prints them side by side.

Every case runs the real command in a fresh folder against a real fault made here: a port that
accepts and never answers (an HTTP server, an SQL store), a tracking server whose ``/health``
answers while its API hangs (at once, or after the first call), one that refuses the credentials,
a SQLite source that does not exist or that SQLite cannot read, a DuckDB file that cannot grow (a
file size limit, as a full disk), a model set that is a FIFO or a link to ``/dev/zero``, a setting
that is not a number, a DuckDB file held by another process, a side of ``hwbench ab`` whose python
hangs, a node id that names no case under ``-n 2``, the REST service's ``/measure/next`` on a
source that is silent or refuses, and the first session on a new local store (which must print no
waiting line). Where PostgreSQL is installed (`tests/_postgres.py`), a real team server adds: a
role and a database that do not exist, and three concurrent replays of one spool, twice, counted
in the server (each record once, none lost).

Printed per case: exit code (and the one expected), wall time, whether a traceback reached the
user, and the first line the command printed to stderr. The aims: no wait over 30 s beyond the
documented timeout, no traceback, no record doubled or lost.

    python benchmarks/faults.py               # about 5 minutes on 2 cores (with the team server)
    python benchmarks/faults.py --only sql    # the cases whose name holds 'sql'
    python benchmarks/faults.py --no-team     # without PostgreSQL

Exit code: 0 when every case exits as expected within its bound and without a traceback, else 1.
"""

from __future__ import annotations

import argparse
import contextlib
import os
import socket
import subprocess
import sys
import tempfile
import threading
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "tests"))  # the test servers: a hanging API, PostgreSQL with mlflow server
HWBENCH = [sys.executable, "-c", "import sys; from pytest_hwbench.cli import main; sys.exit(main(sys.argv[1:]))"]
HWSEL = [sys.executable, "-m", "hwsel"]
SNAPSHOT = ROOT / "benchmarks" / "data" / "cpu_runs.parquet"
BENCH_FILE = "def test_inference(hwbench_case, hwbench):\n    hwbench.measure(hwbench_case)\n"


@dataclass(frozen=True)
class Fault:
    """One case: its name, the command, the exit code it should give and the seconds it may take
    (its documented timeout plus 30 s), what it must not print and the file size limit it runs
    under."""

    name: str
    argv: list[str]
    expect: int
    bound_s: float
    env: tuple[tuple[str, str], ...] = ()
    #: text that must not reach the user (stdout or stderr)
    forbid: str = ""
    #: bytes a file the command writes may grow to (RLIMIT_FSIZE), as on a full disk
    file_limit: int | None = None


@contextlib.contextmanager
def silent_port() -> Iterator[int]:
    """A port on 127.0.0.1 that accepts connections and never answers."""
    sock = socket.socket()
    sock.bind(("127.0.0.1", 0))
    sock.listen(64)
    try:
        yield int(sock.getsockname()[1])
    finally:
        sock.close()


@contextlib.contextmanager
def refusing_server() -> Iterator[str]:
    """The address of an HTTP server on 127.0.0.1 that answers 401 to every request (a tracking
    server behind basic auth, given the wrong password)."""
    from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

    class Refuse(BaseHTTPRequestHandler):
        def do_GET(self) -> None:  # noqa: N802 - http.server's name
            self.send_response(401)
            self.send_header("WWW-Authenticate", 'Basic realm="mlflow"')
            self.send_header("Content-Length", "0")
            self.end_headers()

        do_POST = do_GET  # noqa: N815

        def log_message(self, format: str, *args: object) -> None:  # noqa: A002 - the base class's name
            pass

    server = ThreadingHTTPServer(("127.0.0.1", 0), Refuse)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    try:
        yield f"http://127.0.0.1:{server.server_address[1]}"
    finally:
        server.shutdown()
        server.server_close()


@contextlib.contextmanager
def held_duckdb(path: Path) -> Iterator[None]:
    """A DuckDB file at `path` with one table, held open by another process."""
    code = ("import duckdb, sys\ncon = duckdb.connect(sys.argv[1])\ncon.execute('CREATE TABLE IF NOT EXISTS t (x INT)')\n"
            "print('held', flush=True)\nsys.stdin.readline()\n")
    holder = subprocess.Popen([sys.executable, "-c", code, str(path)], stdin=subprocess.PIPE, stdout=subprocess.PIPE,
                              text=True)
    try:
        assert holder.stdout is not None and holder.stdout.readline().strip() == "held"
        yield
    finally:
        holder.communicate("\n", timeout=30)


@dataclass(frozen=True)
class Servers:
    """The faulty servers the cases talk to."""

    #: a port that accepts and never answers
    silent_port: int
    #: a tracking server whose /health answers and whose API hangs
    api_hangs: str
    #: a tracking server whose /health and first API call answer, then every request hangs
    hangs_after_probe: str
    #: a tracking server that answers 401
    refusing: str


#: ``/measure/next`` of the REST service on a source given as argv[2]: exit 0 when it answers 503.
REST_NEXT = """
import sys
from fastapi.testclient import TestClient
from hwsel import Predictor
from hwsel.app import create_app
predictor = Predictor.load(sys.argv[1], tracking_uri=sys.argv[3], detect=False)
answer = TestClient(create_app(predictor, source=sys.argv[2], timeout=5)).post("/measure/next", json={"budget": 2})
print(answer.status_code, answer.json().get("message", "")[:200], file=sys.stderr)
sys.exit(0 if answer.status_code == 503 else 1)
"""


def faults(work: Path, servers: Servers) -> list[Fault]:
    """The cases, built in `work` around the faulty `servers`. The first session on a new local
    store runs before the DuckDB case that replays its spool."""
    port = servers.silent_port
    fifo = work / "set.toml"
    os.mkfifo(fifo)
    zero = work / "zero.json"
    zero.symlink_to("/dev/zero")
    nested = work / "nested.json"
    nested.write_text('{"model_type": "llava", "text_config": {"text_config": {"text_config": {}}}}')
    hangs = work / "hangs.sh"
    hangs.write_text("#!/bin/sh\nexec sleep 600\n")
    hangs.chmod(0o755)
    (work / "test_inference.py").write_text(BENCH_FILE)
    missing = f"sqlite:///{work / 'nonexistent' / 'dir' / 'm.db'}"
    silent_sql = f"postgresql://u:secret@127.0.0.1:{port}/db"
    silent_http = f"http://u:secret@127.0.0.1:{port}"
    store = ["--store", str(work / "store")]
    broken = work / "broken" / "mlflow.db"
    broken.parent.mkdir()
    broken.write_bytes(b"SQLite format 3\x00" + os.urandom(20_000))  # a header over random pages
    broken_uri = f"sqlite:///{broken}"
    fresh = work / "fresh-store"
    hangs_api, after_probe, refusing = servers.api_hangs, servers.hangs_after_probe, servers.refusing
    return [
        Fault("local: the first session on a new local store prints no waiting line",
              [sys.executable, "-m", "pytest", "-p", "no:cacheprovider", "-q", "-m", "cpu", "--hwbench-store",
               str(fresh), "--hwbench-models", "bert-tiny", "--hwbench-backends", "torch", "--hwbench-precisions",
               "fp32", "--hwbench-batch-sizes", "1,2,4,8", "--hwbench-min-time", "0", "--hwbench-min-iterations", "500",
               str(work / "test_inference.py")],
              0, 120, forbid="waiting for"),
        Fault("http: export --to a server whose API hangs behind /health",
              [*HWBENCH, "export", "--to", f"mlflow:{hangs_api}", *store], 3, 5 + 30),
        Fault("http: import-mlflow from a server whose API hangs", [*HWBENCH, "import-mlflow", "--mlflow-uri",
                                                                    hangs_api, *store], 3, 5 + 30),
        Fault("http: compare --source-a a server whose API hangs", [*HWBENCH, "compare", "latest", "latest",
                                                                    "--source-a", hangs_api, *store], 3, 5 + 30),
        Fault("http: import-mlflow --timeout 2, hangs after its probe",
              [*HWBENCH, "import-mlflow", "--mlflow-uri", after_probe, "--timeout", "2", *store], 3, 3 * 2 + 3 + 30),
        Fault("http: export --to a server that refuses the credentials",
              [*HWBENCH, "export", "--to", f"mlflow:{refusing}", *store], 2, 30),
        Fault("rest: /measure/next, a source that refuses the credentials (503)",
              [sys.executable, "-c", REST_NEXT, str(SNAPSHOT), refusing, f"sqlite:///{work / 'reg.db'}"], 0, 5 + 30),
        Fault("rest: /measure/next, a silent source (503)",
              [sys.executable, "-c", REST_NEXT, str(SNAPSHOT), f"http://u:secret@127.0.0.1:{port}",
               f"sqlite:///{work / 'reg.db'}"], 0, 5 + 30),
        Fault("sqlite: import-mlflow from an mlflow.db SQLite cannot read",
              [*HWBENCH, "import-mlflow", "--mlflow-uri", broken_uri, *store], 2, 30),
        Fault("sqlite: hwsel train --source an mlflow.db SQLite cannot read",
              [*HWSEL, "train", "--source", broken_uri, "--trials", "1", "--tracking-uri",
               f"sqlite:///{work / 'r4.db'}"], 2, 30),
        Fault("duckdb: replay into a file that cannot grow (a full disk)",
              [*HWBENCH, "replay", "--store", str(fresh), "--sinks", "duckdb", "--db", str(work / "small.duckdb")],
              3, 30, forbid="cannot rollback", file_limit=12_400),  # the header fits, a record not
        Fault("sql: export --to a silent PostgreSQL port", [*HWBENCH, "export", "--to", f"mlflow:{silent_sql}", *store],
              3, 5 + 30),
        Fault("sql: import-mlflow from a silent PostgreSQL port", [*HWBENCH, "import-mlflow", "--mlflow-uri",
                                                                   silent_sql, *store], 3, 5 + 30),
        Fault("sql: compare --source-a a silent PostgreSQL port", [*HWBENCH, "compare", "latest", "latest",
                                                                   "--source-a", silent_sql, *store], 3, 5 + 30),
        Fault("sql: hwsel train --tracking-uri a silent PostgreSQL port",
              [*HWSEL, "train", "--source", str(SNAPSHOT), "--trials", "1", "--tracking-uri", silent_sql], 1, 30 + 30),
        Fault("http: hwsel predict --source a silent tracking server",
              [*HWSEL, "predict", "--model", "bert-tiny", "--hardware", "cpu", "--source", silent_http,
               "--tracking-uri", f"sqlite:///{work / 'reg.db'}", "--timeout", "5"], 0, 5 + 30),
        Fault("source: compare --source-a a SQLite file that does not exist",
              [*HWBENCH, "compare", "latest", "latest", "--source-a", missing, *store], 2, 30),
        Fault("source: hwsel train --source a SQLite file that does not exist",
              [*HWSEL, "train", "--source", missing, "--trials", "1", "--tracking-uri", f"sqlite:///{work / 'r.db'}"],
              2, 30),
        Fault("model set: a FIFO", [*HWSEL, "predict", "--config", str(fifo), "--hardware", "cpu"], 2, 30),
        Fault("model set: a link to /dev/zero", [*HWSEL, "predict", "--config", str(zero), "--hardware", "cpu"], 2, 30),
        Fault("config: a text_config inside a text_config",
              [*HWSEL, "predict", "--config", str(nested), "--hardware", "cpu"], 2, 30),
        Fault("question: training at int8",
              [*HWSEL, "predict", "--model", "bert-tiny", "--hardware", "cpu", "--precision", "int8", "--mode",
               "train"], 2, 30),
        Fault("setting: HWBENCH_WEB_TIMEOUT_S=abc", [sys.executable, "-m", "pytest", "-p", "no:cacheprovider", "-q",
                                                    "-m", "wasm", "--hwbench-no-track", str(work)], 4, 30,
              (("HWBENCH_WEB_TIMEOUT_S", "abc"),)),
        Fault("xdist: a parameter id that names no case under -n 2",
              [sys.executable, "-m", "pytest", "-p", "no:cacheprovider", "-q", "-n", "2", "--hwbench-no-track",
               f"{work / 'test_inference.py'}::test_inference[no-such-case]"], 4, 60),
        Fault("ab: side A's python hangs", [*HWBENCH, "ab", "--models", "bert-tiny", "--rounds", "3", "--no-sinks",
                                            "--a-python", str(hangs), "--side-timeout", "10"], 3, 10 + 30),
        Fault("duckdb: hwsel train on a file held by another process",
              [*HWSEL, "train", "--source", str(work / "held.duckdb"), "--trials", "1", "--tracking-uri",
               f"sqlite:///{work / 'r2.db'}"], 3, 30),
    ]


def run(fault: Fault, work: Path) -> tuple[int, float, bool, str]:
    """(exit code, seconds, traceback or forbidden text shown, first stderr line) of `fault` run in
    `work`."""
    env = {k: v for k, v in os.environ.items() if k not in ("MLFLOW_TRACKING_URI", "PYTEST_ADDOPTS")}
    env.update(fault.env)
    env["HWBENCH_CACHE_DIR"] = str(work / "cache")
    began = time.monotonic()
    try:
        proc = subprocess.run(fault.argv, cwd=work, env=env, capture_output=True, text=True, stdin=subprocess.DEVNULL,
                              timeout=fault.bound_s + 300, preexec_fn=_file_limit(fault.file_limit))
        code, out, err = proc.returncode, proc.stdout, proc.stderr
    except subprocess.TimeoutExpired as exc:
        code, out, err = -9, str(exc.stdout or ""), str(exc.stderr or "")
    seconds = time.monotonic() - began
    lines = [ln for ln in err.splitlines() if ln.strip() and "Warning" not in ln and not ln.startswith("  ")]
    shown = "Traceback" in out + err or bool(fault.forbid and fault.forbid in out + err)
    return code, seconds, shown, (lines[0] if lines else "")[:110]


def _file_limit(size: int | None) -> Callable[[], None] | None:
    """What the child runs before the command: its file size limit set to `size` bytes."""
    if size is None:
        return None

    def limit() -> None:
        import resource

        resource.setrlimit(resource.RLIMIT_FSIZE, (size, size))

    return limit


def team_faults(work: Path, postgres_port: int) -> list[Fault]:
    """The cases against a real PostgreSQL: a role and a database that do not exist."""
    store = ["--store", str(work / "store")]
    no_role = f"postgresql://nobody:pw@127.0.0.1:{postgres_port}/mlflow"
    no_db = f"postgresql://hwbench:pw@127.0.0.1:{postgres_port}/nosuchdb"
    return [
        Fault("sql: export --to a PostgreSQL role that does not exist",
              [*HWBENCH, "export", "--to", f"mlflow:{no_role}", *store], 2, 5 + 30),
        Fault("sql: import-mlflow from a PostgreSQL database that does not exist",
              [*HWBENCH, "import-mlflow", "--mlflow-uri", no_db, *store], 2, 5 + 30),
        Fault("sql: hwsel train --tracking-uri a database that does not exist",
              [*HWSEL, "train", "--source", str(SNAPSHOT), "--trials", "1", "--tracking-uri", no_db], 2, 5 + 30),
    ]


def concurrent_replays(work: Path, server_uri: str, rounds: int = 2, at_once: int = 3) -> tuple[bool, float, str]:
    """Replay the spool of the first local session into the team server `at_once` times at once,
    `rounds` times; (each record there exactly once, seconds, what was counted)."""
    from mlflow.tracking import MlflowClient

    from pytest_hwbench.sinks import Spool

    store = work / "fresh-store"
    ids = {r.record_id for r in Spool(store / "spool").records()}
    experiment = f"faults-{os.getpid()}"
    argv = [*HWBENCH, "replay", "--store", str(store), "--sinks", "mlflow", "--mlflow-uri", server_uri,
            "--experiment", experiment, "--timeout", "120"]
    began = time.monotonic()
    codes = []
    for _ in range(rounds):
        procs = [subprocess.Popen(argv, cwd=work, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
                 for _ in range(at_once)]
        codes += [proc.wait(timeout=600) for proc in procs]
    seconds = time.monotonic() - began
    client = MlflowClient(tracking_uri=server_uri)
    found = client.get_experiment_by_name(experiment)
    runs = client.search_runs([found.experiment_id], "tags.`hwbench.kind` = 'record'", max_results=1000) if found else []
    counted = [run.data.tags.get("hwbench.record_id") for run in runs]
    doubled = len(counted) - len(set(counted))
    lost = len(ids - set(counted))
    ok = not doubled and not lost and all(code == 0 for code in codes) and bool(ids)
    return ok, seconds, f"{len(ids)} records, {len(counted)} child runs: {doubled} doubled, {lost} lost, exits {codes}"


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--only", default="", help="run only the cases whose name holds this text")
    parser.add_argument("--no-team", action="store_true", help="leave out the cases that need PostgreSQL")
    args = parser.parse_args(argv)
    from _hanging import HangingServer
    from _postgres import missing, team_server_running

    results: list[bool] = []
    print(f"{'case':58} {'exit':>4} {'want':>4} {'s':>6} {'bound':>6} tb  first line", flush=True)
    with contextlib.ExitStack() as stack:
        work = Path(stack.enter_context(tempfile.TemporaryDirectory(prefix="hwbench-faults-")))
        hangs, after = HangingServer(answers_probe=False), HangingServer(answers_probe=True)
        stack.callback(hangs.close)
        stack.callback(after.close)
        servers = Servers(stack.enter_context(silent_port()), hangs.uri, after.uri,
                          stack.enter_context(refusing_server()))
        cases = [f for f in faults(work, servers) if args.only in f.name]
        with held_duckdb(work / "held.duckdb"):
            results += [report(fault, work, i, len(cases)) for i, fault in enumerate(cases, 1)]
        why_not = "--no-team" if args.no_team else missing()
        if why_not:
            print(f"(the team server's cases are left out: {why_not})")
        else:
            team = stack.enter_context(team_server_running(work / "team"))
            cases = [f for f in team_faults(work, team.postgres.port) if args.only in f.name]
            results += [report(fault, work, i, len(cases)) for i, fault in enumerate(cases, 1)]
            name = "replay: 3 concurrent replays x 2 into the team server"
            if args.only in name and (work / "fresh-store" / "spool").exists():
                ok, seconds, counted = concurrent_replays(work, team.uri)
                results.append(ok)
                print(f"{name[:58]:58} {'':>4} {'':>4} {seconds:6.1f} {'':>6} {'':3} {counted}"
                      f"{'' if ok else '   <-- NOT AS EXPECTED'}", flush=True)
    print(f"{sum(results)} of {len(results)} cases as expected")
    return 0 if all(results) else 1


def report(fault: Fault, work: Path, i: int, n: int) -> bool:
    """Run `fault`, print its row, and say whether it went as expected."""
    print(f"  ({i}/{n}) {fault.name} ...", file=sys.stderr, flush=True)
    code, seconds, shown, first = run(fault, work)
    ok = code == fault.expect and seconds <= fault.bound_s and not shown
    print(f"{fault.name[:58]:58} {code:>4} {fault.expect:>4} {seconds:6.1f} {fault.bound_s:6.0f} "
          f"{'yes' if shown else 'no ':3} {first}{'' if ok else '   <-- NOT AS EXPECTED'}", flush=True)
    return ok


if __name__ == "__main__":
    sys.exit(main())
