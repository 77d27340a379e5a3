"""The faults a team meets, each run as a user would, with its wall time and exit code. Figures,
not assertions: the tests assert each behaviour; this prints them side by side.

Every case runs the real command in a fresh folder against a real fault made here: a port that
accepts and never answers (an HTTP server, an SQL store), a SQLite source that does not exist, a
model set that is a FIFO or a link to ``/dev/zero``, a setting that is not a number, a DuckDB
file held by another process, a side of ``hwbench ab`` whose python hangs, a node id that names
no case under ``-n 2``. Printed per case: exit code (and the one expected), wall time, whether a
traceback reached the user, and the first line the command printed to stderr. The aims: no wait
over 30 s beyond the documented timeout, no traceback.

    python benchmarks/faults.py               # about 3 minutes on 2 cores
    python benchmarks/faults.py --only sql    # the cases whose name holds 'sql'

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
import time
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
HWBENCH = [sys.executable, "-c", "import sys; from pytest_hwbench.cli import main; sys.exit(main(sys.argv[1:]))"]
HWSEL = [sys.executable, "-m", "hwsel"]
SNAPSHOT = ROOT / "benchmarks" / "data" / "cpu_runs.parquet"
BENCH_FILE = "def test_inference(hwbench_case, hwbench):\n    hwbench.measure(hwbench_case)\n"


@dataclass(frozen=True)
class Fault:
    """One case: its name, the command, the exit code it should give and the seconds it may take
    (its documented timeout plus 30 s)."""

    name: str
    argv: list[str]
    expect: int
    bound_s: float
    env: tuple[tuple[str, str], ...] = ()


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


def faults(work: Path, port: int) -> list[Fault]:
    """The cases, built in `work` around the silent `port`."""
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
    return [
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
    """(exit code, seconds, traceback shown, first stderr line) of `fault` run in `work`."""
    env = {k: v for k, v in os.environ.items() if k not in ("MLFLOW_TRACKING_URI", "PYTEST_ADDOPTS")}
    env.update(fault.env)
    env["HWBENCH_CACHE_DIR"] = str(work / "cache")
    began = time.monotonic()
    try:
        proc = subprocess.run(fault.argv, cwd=work, env=env, capture_output=True, text=True, stdin=subprocess.DEVNULL,
                              timeout=fault.bound_s + 300)
        code, out, err = proc.returncode, proc.stdout, proc.stderr
    except subprocess.TimeoutExpired as exc:
        code, out, err = -9, str(exc.stdout or ""), str(exc.stderr or "")
    seconds = time.monotonic() - began
    lines = [ln for ln in err.splitlines() if ln.strip() and "Warning" not in ln and not ln.startswith("  ")]
    return code, seconds, "Traceback" in out + err, (lines[0] if lines else "")[:110]


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--only", default="", help="run only the cases whose name holds this text")
    args = parser.parse_args(argv)
    bad = 0
    with tempfile.TemporaryDirectory(prefix="hwbench-faults-") as tmp, silent_port() as port:
        work = Path(tmp)
        cases = [f for f in faults(work, port) if args.only in f.name]
        print(f"{'case':58} {'exit':>4} {'want':>4} {'s':>6} {'bound':>6} tb  first line", flush=True)
        with held_duckdb(work / "held.duckdb"):
            for i, fault in enumerate(cases, 1):
                print(f"  ({i}/{len(cases)}) {fault.name} ...", file=sys.stderr, flush=True)
                code, seconds, traceback, first = run(fault, work)
                ok = code == fault.expect and seconds <= fault.bound_s and not traceback
                bad += not ok
                print(f"{fault.name[:58]:58} {code:>4} {fault.expect:>4} {seconds:6.1f} {fault.bound_s:6.0f} "
                      f"{'yes' if traceback else 'no ':3} {first}{'' if ok else '   <-- NOT AS EXPECTED'}", flush=True)
    print(f"{len(cases) - bad} of {len(cases)} cases as expected")
    return 1 if bad else 0


if __name__ == "__main__":
    sys.exit(main())
