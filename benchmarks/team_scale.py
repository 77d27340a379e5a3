"""Team scale: many runners and a growing store against one `mlflow server` on PostgreSQL.

Starts PostgreSQL (``initdb`` into a temporary directory, 127.0.0.1) and `mlflow server` with 4
workers on it (tests/_postgres.py), then prints:

1. K = 1, 4, 8 runners replaying their spools at once (one process each): records/s over all,
   p99 of one record's write, records lost and records doubled (child runs per record id, read
   back from the server).
2. For experiments already holding about 1k, 10k and 50k runs: the time to replay 500 new
   records, to import them into a DuckDB file that holds the rest (`hwbench import-mlflow`,
   incremental), and a second import of the unchanged server. Sizes are interleaved over
   `--rounds` rounds, and each figure is the median of its rounds, so the machine's load
   drifts over all sizes alike.
3. `hwsel train` (``--trials 1``) at each size: from the DuckDB file (its wall time, the seconds it
   took to read and build its training table, its peak memory), and from the server the night
   after (its DuckDB mirror holds the earlier nights, the new night is copied in first: the
   records it copied prove it read that night only). ``--duckdb-only-sizes`` adds sizes with the
   DuckDB figures only (no server fill: 171k runs in PostgreSQL take more memory than this runner has).

2b. `hwbench compare PREV LATEST` reading the server at each size (wall time, peak memory).
4. On DuckDB files of nights (``--history-sizes``, default 1k, 10k, 50k, 170k records, built once
   into ``--history-dir``, each night's timings moved a little): `hwbench compare PREV LATEST`,
   `compare all LATEST` and `report --session all`, each with wall time and peak memory
   (``--history-only``: this section alone, no server).

The experiments are filled fast by PostgreSQL's COPY into MLflow's own tables (runs, tags, params,
metrics, latest_metrics), with the very tags, params and metrics `MlflowSink` writes for each
record, one night per day: a parent run per night holding one copy of every record of
``--records`` (default: the real H100 records of the GPU evidence, 469 a night, where the folder
exists; else 500 synthetic CPU records); the DuckDB file gets the same records through `DuckDBSink`.
Going through MLflow's REST API instead costs about 3 requests per run (hours at 50k here).

Run it alone: ``flock /tmp/hwbench-timing.lock python benchmarks/team_scale.py``.
"""

from __future__ import annotations

import argparse
import dataclasses
import datetime as dt
import json
import os
import statistics
import subprocess
import sys
import tempfile
import time
import uuid
from collections import Counter
from collections.abc import Iterator
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "tests"))

from _postgres import TeamServer, missing, team_server_running  # noqa: E402
from test_sinks import make_record, make_session  # noqa: E402

from pytest_hwbench.record import BenchmarkRecord, SessionInfo  # noqa: E402
from pytest_hwbench.sinks import DuckDBSink, MlflowSink, Spool, import_mlflow_sessions, replay_each  # noqa: E402
from pytest_hwbench.sinks._fields import epoch_ms, to_text  # noqa: E402
from pytest_hwbench.sinks.mlflow_layout import record_tags, session_run_name, session_tags  # noqa: E402

RECORDS_PER_SESSION = 500
#: The real H100 records one night of the quick tier holds (`--records`' default where present).
GPU_EVIDENCE = Path("/work/shared/gpu-evidence")
NIGHT0 = dt.datetime(2025, 1, 1, 2, 0, tzinfo=dt.timezone.utc)

RUNNER = """
import json, sys, time
from pytest_hwbench.sinks import MlflowSink, Spool, replay_each

class Timed:
    def __init__(self, sink):
        self.sink, self.name, self.durations = sink, sink.name, []
    def where(self): return self.sink.where()
    def browse(self): return None
    def existing_ids(self, ids): return self.sink.existing_ids(ids)
    def open_session(self, session): self.sink.open_session(session)
    def close(self, status): self.sink.close(status)
    def write(self, records):
        for record in records:  # one record per call: the unit the p99 is of
            began = time.perf_counter()
            self.sink.write([record])
            self.durations.append(time.perf_counter() - began)

uri, experiment, spool, barrier = sys.argv[1:5]
import mlflow.tracking, pathlib  # imported before the start line, which all runners pass together
timed = Timed(MlflowSink(uri, experiment))
pathlib.Path(barrier, pathlib.Path(spool).name).touch()
while not pathlib.Path(barrier, "go").exists():
    time.sleep(0.01)
began = time.time()
[result] = replay_each(Spool(spool), [timed], deadline_s=120)
print(json.dumps({"ok": result.ok, "error": result.error, "written": result.written,
                  "began": began, "ended": time.time(), "durations": timed.durations}))
"""


def records_for(session: SessionInfo, n: int, offset: int = 0) -> list[BenchmarkRecord]:
    return [make_record(session, offset + i, kind="vision" if (offset + i) % 2 else "text") for i in range(n)]


def spool_with(directory: Path, session: SessionInfo, records: list[BenchmarkRecord]) -> Path:
    spool = Spool(directory)
    spool.append_session(session)
    for record in records:
        spool.append(record)
    spool.append_session_end(session.session_id, "finished")
    return directory


def child_counts(uri: str, experiment: str) -> Counter[str]:
    from mlflow.tracking import MlflowClient

    client = MlflowClient(tracking_uri=uri)
    found = client.get_experiment_by_name(experiment)
    counts: Counter[str] = Counter()
    if found is None:
        return counts
    token = None
    while True:
        page = client.search_runs([found.experiment_id], "tags.`hwbench.kind` = 'record'", max_results=1000,
                                  page_token=token)
        counts.update(run.data.tags.get("hwbench.record_id", "") for run in page if run.info.status in ("FINISHED", "FAILED", "KILLED"))
        token = page.token
        if not token:
            return counts


def p99(values: list[float]) -> float:
    return statistics.quantiles(values, n=100)[98] if len(values) >= 2 else (values[0] if values else float("nan"))


def runners(server: TeamServer, k: int, per_runner: int, work: Path) -> str:
    experiment = f"team-k{k}-{uuid.uuid4().hex[:6]}"
    expected: set[str] = set()
    spools = []
    for i in range(k):
        session = make_session(f"runner-{i}")
        records = records_for(session, per_runner)
        expected.update(r.record_id for r in records)
        spools.append(spool_with(work / f"k{k}-{i}", session, records))
    env = {**os.environ, "PYTHONPATH": str(ROOT)}
    barrier = work / f"barrier-k{k}"
    barrier.mkdir()
    procs = [subprocess.Popen([sys.executable, "-c", RUNNER, server.uri, experiment, str(s), str(barrier)], env=env,
                              stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True) for s in spools]
    deadline = time.monotonic() + 600
    while len(list(barrier.iterdir())) < k and time.monotonic() < deadline and all(p.poll() is None for p in procs):
        time.sleep(0.05)
    (barrier / "go").touch()  # all runners have imported MLflow: they start replaying together
    outs = [p.communicate(timeout=1800) for p in procs]
    durations: list[float] = []
    errors = []
    spans: list[tuple[float, float]] = []
    for proc, (out, err) in zip(procs, outs, strict=True):
        if proc.returncode != 0:
            errors.append(err.strip().splitlines()[-1] if err.strip() else f"exit {proc.returncode}")
            continue
        result = json.loads(out.strip().splitlines()[-1])
        durations += result["durations"]
        spans.append((result["began"], result["ended"]))
        if not result["ok"]:
            errors.append(result["error"])
    wall = (max(e for _, e in spans) - min(b for b, _ in spans)) if spans else float("nan")
    counts = child_counts(server.uri, experiment)
    lost = len(expected - set(counts))
    doubled = sum(n - 1 for rid, n in counts.items() if rid in expected and n > 1)
    line = (f"K={k:<2} {k * per_runner:>5} records in {wall:6.1f} s: {k * per_runner / wall:6.1f} records/s, "
            f"p99 of one write {1000 * p99(durations):7.1f} ms, lost {lost}, doubled {doubled}")
    return line + (f"  errors: {errors}" if errors else "")


def night_templates(files: list[Path]) -> list[BenchmarkRecord]:
    """One night's records: those of `files` (records files), else 500 synthetic CPU records."""
    import warnings

    from pytest_hwbench.sinks import read_records

    records: list[BenchmarkRecord] = []
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")  # the evidence folder's sessions.jsonl holds sessions, not records
        for file in files:
            records += read_records(file)
    if records:
        return records
    session = make_session("filler")
    return [make_record(session, i, kind="vision" if i % 2 else "text") for i in range(RECORDS_PER_SESSION)]


def nights(base: list[BenchmarkRecord], n_runs: int, first: int = 0) -> Iterator[tuple[SessionInfo, list[BenchmarkRecord]]]:
    """`n_runs` records as nights of `base` (one session a night, a day apart, from night `first`),
    each record with its own id."""
    done, night = 0, first
    while done < n_runs:
        started = NIGHT0 + dt.timedelta(days=night)
        session = dataclasses.replace(make_session(f"night-{night}"), started_at=started.isoformat())
        records = [dataclasses.replace(template, record_id=uuid.uuid4().hex, session_id=session.session_id,
                                       created_at=(started + dt.timedelta(seconds=i)).isoformat())
                   for i, template in enumerate(base[: n_runs - done])]
        yield session, records
        done += len(records)
        night += 1


def fill_duckdb(db: Path, base: list[BenchmarkRecord], n_runs: int) -> int:
    """`n_runs` records as nights of `base` into the DuckDB file at `db`; returns the nights."""
    duck = DuckDBSink(db)
    count = 0
    for session, records in nights(base, n_runs):
        duck.open_session(session)
        duck.write(records)
        duck.close("finished")
        count += 1
    return count


def fill(server: TeamServer, experiment: str, n_runs: int, db: Path, base: list[BenchmarkRecord]) -> None:
    """`n_runs` child runs (and their parents), nights of `base`, straight into MLflow's tables;
    the same records into the DuckDB file at `db`. Ids, sessions and tags are each run's own."""
    import psycopg

    sink = MlflowSink(server.uri, experiment)
    with sink._mlflow_env():
        experiment_id = sink._experiment()
        location = sink._client().get_experiment(experiment_id).artifact_location
    by_position = [([(key, to_text(key, value)) for key, value in t.params().items()],
                    [(key, float(value)) for key, value in t.metrics().items() if value is not None]) for t in base]
    duck = DuckDBSink(db)
    with psycopg.connect(server.backend_uri) as con, con.cursor() as cur:
        for session, records in nights(base, n_runs):
            runs, tags, params, metrics = [], [], [], []
            parent = uuid.uuid4().hex
            started = epoch_ms(session.started_at)
            runs.append((parent, session_run_name(session), "FINISHED", started, started + 60_000, "active",
                         f"{location}/{parent}/artifacts", int(experiment_id), "hwbench"))
            tags += [(key, value, parent) for key, value in session_tags(session).items()]
            tags.append(("mlflow.runName", session_run_name(session), parent))
            for i, record in enumerate(records):
                template_params, template_metrics = by_position[i]
                run = uuid.uuid4().hex
                created = epoch_ms(record.created_at) or started
                runs.append((run, record.run_name, "FINISHED" if record.status == "passed" else "FAILED",
                             created - 1000, created, "active", f"{location}/{run}/artifacts", int(experiment_id),
                             "hwbench"))
                tags += [(key, value, run) for key, value in record_tags(record, parent).items()]
                tags.append(("mlflow.runName", record.run_name, run))
                params += [(key, value, run) for key, value in template_params]
                metrics += [(key, value, created, 0, False, run) for key, value in template_metrics]
            duck.open_session(session)
            duck.write(records)
            duck.close("finished")
            for table, columns, rows in (
                ("runs", "run_uuid, name, status, start_time, end_time, lifecycle_stage, artifact_uri, experiment_id, "
                 "user_id", runs),
                ("tags", "key, value, run_uuid", tags),
                ("params", "key, value, run_uuid", params),
                ("metrics", "key, value, timestamp, step, is_nan, run_uuid", metrics),
                ("latest_metrics", "key, value, timestamp, step, is_nan, run_uuid", metrics),
            ):
                with cur.copy(f"COPY {table} ({columns}) FROM STDIN") as copy:
                    for row in rows:
                        copy.write_row(row)
        con.commit()
        cur.execute("ANALYZE")


def year_duckdb(path: str | Path, n_records: int, base: list[BenchmarkRecord]) -> Path:
    """A DuckDB file of about `n_records` records: nights of `base`, one a day; the first written
    through `DuckDBSink`, the others copied from it in SQL, each record with its own ids and its
    timings moved by up to +-2 % (a hash of its id: every night differs a little, as nights do,
    so `hwbench compare` learns a between-run spread). Built once: an existing file is kept."""
    import duckdb

    path = Path(path)
    if path.exists():
        return path
    session, records = next(nights(base, len(base)))
    copies = max(2, round(n_records / len(records)))
    sink = DuckDBSink(path)
    sink.open_session(session)
    sink.write(records)
    sink.close("finished")
    ids = "md5(session_id || n.range::VARCHAR)"
    with duckdb.connect(str(path)) as con:
        con.execute(f"CREATE TEMP TABLE n AS SELECT range FROM range(1, {copies})")
        con.execute(f"INSERT INTO sessions SELECT sessions.* REPLACE ({ids} AS session_id, "
                    "started_at + n.range * INTERVAL 1 DAY AS started_at) FROM sessions, n")
        moved = "(1 + ((hash(t.record_id || n.range::VARCHAR) % 1000) / 1000.0 - 0.5) * 0.04)"
        con.execute(f"INSERT INTO timings SELECT md5(t.record_id || n.range::VARCHAR), t.iteration, t.ms * {moved} "
                    "FROM timings t, n")
        # a median moves with its timings: the copy's rounds are the rounds of its moved timings
        con.execute(f"INSERT INTO rounds SELECT md5(t.record_id || n.range::VARCHAR), "
                    f"list_transform(t.ms, lambda x: x * {moved}) FROM rounds t, n")
        con.execute(f"INSERT INTO results SELECT results.* REPLACE (md5(record_id || n.range::VARCHAR) AS record_id, "
                    f"{ids} AS session_id, created_at + n.range * INTERVAL 1 DAY AS created_at) FROM results, n")
    return path


#: Runs the command after its first argument, then writes the command's exit status and peak
#: resident KiB into the file that argument names. The command starts from this small process, not
#: from the benchmark: Linux counts into a process's peak the peak of the memory it replaced at
#: exec, which for a child of the benchmark (subprocess shares the parent's memory until exec) is
#: the benchmark's own, hundreds of MB once it has built a store.
_MEASURED = ("import os, subprocess, sys\n"
             "proc = subprocess.Popen(sys.argv[2:])\n"
             "_, status, usage = os.wait4(proc.pid, 0)\n"
             "with open(sys.argv[1], 'w') as out:\n"
             "    out.write(f'{os.waitstatus_to_exitcode(status)} {usage.ru_maxrss}')\n")


def measured(cmd: list[str], **popen: Any) -> tuple[int, float]:
    """Run `cmd` (`popen`: subprocess.run's stdout, stderr, stdin, cwd): its exit status and its
    own peak resident memory in MiB."""
    fd, name = tempfile.mkstemp(prefix="hwbench-peak-")
    os.close(fd)
    try:
        subprocess.run([sys.executable, "-c", _MEASURED, name, *cmd], check=False, **popen)
        code, kib = Path(name).read_text().split()
    finally:
        os.unlink(name)
    return int(code), int(kib) / 1024


def peak_run(cmd: list[str], cwd: Path) -> tuple[float, float, str]:
    """Run `cmd`: its wall time (s), its peak resident memory (MB, of that process alone) and
    ``ok`` or what went wrong (exit 1, a regression found, is ok)."""
    began = time.perf_counter()
    with tempfile.TemporaryFile("w+") as err:
        code, peak = measured(cmd, cwd=cwd, stdout=subprocess.DEVNULL, stderr=err)
        took = time.perf_counter() - began
        err.seek(0)
        text = err.read()
    ok = "ok" if code in (0, 1) else f"exit {code}: {(text.strip().splitlines() or [''])[-1][:120]}"
    return took, peak, ok


HWBENCH = str(Path(sys.executable).with_name("hwbench"))


def history_figures(sizes: list[int], folder: Path, base: list[BenchmarkRecord], work: Path) -> None:
    """`compare PREV LATEST`, `compare all LATEST` and `report --session all` on DuckDB files of
    nights of `base` (`year_duckdb`, built once into `folder`), each with wall time and peak memory."""
    from pytest_hwbench.sinks._duckdb_read import session_ids

    folder.mkdir(parents=True, exist_ok=True)
    print(f"  {'records':>8}  {'compare PREV LATEST':>22}  {'compare all LATEST':>22}  {'report --session all':>22}",
          flush=True)
    for size in sizes:
        db = year_duckdb(folder / f"year{size}.duckdb", size, base)
        prev = session_ids(db)[1]
        cells = []
        for args in (["compare", "--db", str(db), prev, "latest"], ["compare", "--db", str(db), "all", "latest"],
                     ["report", "--db", str(db), "--session", "all", "--out", str(work / f"report-{size}")]):
            took, peak, ok = peak_run([HWBENCH, *args], work)
            cells.append(f"{took:6.1f} s {peak:6.0f} MB" + ("" if ok == "ok" else f" ({ok})"))
        print(f"  {size:>8}  " + "  ".join(f"{c:>22}" for c in cells), flush=True)


def server_compare_figures(server: TeamServer, experiments: dict[int, str], work: Path) -> None:
    """`hwbench compare --source-a SERVER PREV latest` at each size: wall time and peak memory."""
    for size, experiment in experiments.items():
        sessions = sorted(MlflowSink(server.uri, experiment).read_sessions(), key=lambda item: item[0].started_at)
        prev = sessions[-2][0].session_id
        took, peak, ok = peak_run([HWBENCH, "compare", "--source-a", server.uri, "--experiment", experiment,
                                   prev, "latest"], work)
        print(f"  {size:>6} runs: compare PREV LATEST from the server {took:6.1f} s, peak {peak:5.0f} MB ({ok})",
              flush=True)


def timed(fn: object) -> float:
    began = time.perf_counter()
    fn()  # type: ignore[operator]
    return time.perf_counter() - began


@dataclasses.dataclass(frozen=True)
class TrainFigures:
    """One `hwsel train` process: wall seconds, its own read_s (records read and training table
    built), peak RSS in MiB, and its JSON answer (None when it failed; `error` says why)."""

    wall_s: float
    peak_mb: float
    answer: dict[str, object] | None
    error: str = ""

    def text(self) -> str:
        if self.answer is None:
            return f"{self.wall_s:6.1f} s, peak {self.peak_mb:5.0f} MiB ({self.error})"
        mirrored = self.answer.get("mirrored")
        return (f"{self.wall_s:6.1f} s, read and table {float(self.answer['read_s']):5.2f} s, peak {self.peak_mb:5.0f} "
                f"MiB, {self.answer['records']} records -> {self.answer['rows']} rows"
                + (f", mirror copied {mirrored} records" if mirrored else ""))


def hwsel_train(args: list[str], work: Path, timeout: float) -> TrainFigures:
    """`hwsel train --trials 1 --no-progress --json ARGS` in its own process, its peak memory from
    the kernel's accounting of that process (`measured`)."""
    out, err = work / "train.out", work / "train.err"
    cmd = [str(Path(sys.executable).with_name("hwsel")), "train", "--trials", "1", "--no-progress", "--json",
           "--timeout", f"{timeout:g}", *args]
    began = time.perf_counter()
    with out.open("w") as stdout, err.open("w") as stderr:
        code, peak = measured(cmd, stdout=stdout, stderr=stderr, stdin=subprocess.DEVNULL)
    wall = time.perf_counter() - began
    if code != 0:
        tail = (err.read_text().strip().splitlines() or [""])[-1][:160]
        return TrainFigures(wall, peak, None, f"exit {code}: {tail}")
    return TrainFigures(wall, peak, json.loads(out.read_text()))


def train_from_duckdb(db: Path, work: Path, timeout: float) -> TrainFigures:
    """hwsel train reading the DuckDB file at `db`."""
    return hwsel_train(["--source", str(db), "--tracking-uri", f"sqlite:///{work / f'registry-{db.stem}.db'}"],
                       work, timeout)


def train_next_night(server: TeamServer, experiment: str, db: Path, base: list[BenchmarkRecord], work: Path,
                     timeout: float) -> TrainFigures:
    """hwsel train from the server the night after: its mirror (a copy of `db`, which holds every
    earlier night) gets the new night, replayed to the server first, then answers."""
    import shutil

    mirror = work / f"mirror-{db.stem}.duckdb"
    shutil.copyfile(db, mirror)
    import duckdb

    with duckdb.connect(str(db), read_only=True) as con:
        held = int(con.execute("SELECT count(*) FROM sessions").fetchone()[0])  # type: ignore[index]
    session, records = next(nights(base, len(base), first=held))
    spool = spool_with(work / f"night-{db.stem}", session, records)
    [result] = replay_each(Spool(spool), [MlflowSink(server.uri, experiment)], deadline_s=300)
    assert result.ok and result.written == len(records), result
    return hwsel_train(["--source", server.uri, "--experiment", experiment, "--mirror", str(mirror),
                        "--tracking-uri", f"sqlite:///{work / f'registry-server-{db.stem}.db'}"], work, timeout)


def train_section(server: TeamServer | None, experiments: dict[int, str], dbs: dict[int, Path],
                  base: list[BenchmarkRecord], work: Path, timeout: float) -> None:
    """Section 3: hwsel train per size, from DuckDB and (where a server holds the size) from the
    server the night after; then each figure against the smallest size's."""
    print(f"\n3. hwsel train --trials 1 per size (timeout {timeout:g} s): from the DuckDB file, and from the "
          "server the night after through its incremental DuckDB mirror", flush=True)
    duck: dict[int, TrainFigures] = {}
    for size in sorted(dbs):
        duck[size] = train_from_duckdb(dbs[size], work, timeout)
        print(f"  {size:>7} runs, DuckDB: {duck[size].text()}", flush=True)
        if server is not None and size in experiments:
            night = train_next_night(server, experiments[size], dbs[size], base, work, timeout)
            ratio = night.wall_s / duck[size].wall_s
            print(f"  {size:>7} runs, server, next night: {night.text()} ({ratio:.2f}x the DuckDB figure)", flush=True)
    smallest = min(duck)
    for size in sorted(duck):
        if size != smallest:
            print(f"  {size:>7} runs from DuckDB: wall {duck[size].wall_s / duck[smallest].wall_s:.2f}x, peak memory "
                  f"{duck[size].peak_mb / duck[smallest].peak_mb:.2f}x the {smallest}-run figures", flush=True)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--runners", default="1,4,8", help="runner counts K (default 1,4,8)")
    parser.add_argument("--per-runner", type=int, default=60, help="records each runner replays (default 60)")
    parser.add_argument("--sizes", default="1000,10000,50000", help="runs already in the experiment")
    parser.add_argument("--new", type=int, default=500, help="new records replayed and imported (default 500)")
    parser.add_argument("--rounds", type=int, default=1, help="interleaved rounds over the sizes (default 1)")
    parser.add_argument("--train-timeout", type=float, default=600, help="seconds given to one hwsel train (its --timeout)")
    parser.add_argument("--skip-train", action="store_true", help="leave out the hwsel train timings")
    parser.add_argument("--duckdb-only-sizes", default="",
                        help="more sizes for the hwsel train figures from DuckDB only, no server fill (e.g. 171185)")
    parser.add_argument("--duckdb-cache", type=Path, default=None, metavar="DIR",
                        help="keep the --duckdb-only-sizes files in DIR (nights-SIZE.duckdb) and reuse them on a "
                             "later run (default: built in the temporary folder each run)")
    parser.add_argument("--records", nargs="*", type=Path, default=None, metavar="FILE",
                        help="records files one night holds (default: the GPU evidence's *.jsonl where present, "
                             "else 500 synthetic CPU records)")
    parser.add_argument("--history-sizes", default="1000,10000,50000,170000",
                        help="records in the DuckDB files of nights that compare and report read (section 4)")
    parser.add_argument("--history-dir", type=Path, default=Path(tempfile.gettempdir()) / "hwbench-year",
                        help="where those files are built once and kept (default: TMP/hwbench-year)")
    parser.add_argument("--history-only", action="store_true",
                        help="section 4 alone: compare and report on DuckDB files (no server)")
    args = parser.parse_args(argv)
    files = args.records if args.records is not None else sorted(GPU_EVIDENCE.glob("*/*.jsonl"))
    one_night = night_templates(files)
    print(f"one night: {len(one_night)} records ({'synthetic' if not files else f'{len(files)} records files'})",
          flush=True)
    history = [int(s) for s in args.history_sizes.split(",") if s]
    if args.history_only:
        with tempfile.TemporaryDirectory(prefix="hwbench-history-") as tmp:
            print("\n4. compare and report on nights in DuckDB", flush=True)
            history_figures(history, args.history_dir, one_night, Path(tmp))
        return 0
    reason = missing()
    if reason:
        print(f"team_scale: {reason}", file=sys.stderr)
        return 2
    ks = [int(k) for k in args.runners.split(",") if k]
    sizes = [int(s) for s in args.sizes.split(",") if s]
    duckdb_only = [int(s) for s in args.duckdb_only_sizes.split(",") if s]
    with tempfile.TemporaryDirectory(prefix="hwbench-team-") as tmp:
        work = Path(tmp)
        began = time.perf_counter()
        with team_server_running(work / "server") as server:
            print(f"team server: PostgreSQL + mlflow server (4 workers) up in {time.perf_counter() - began:.0f} s",
                  flush=True)
            print("\n1. runners replaying at once", flush=True)
            for k in ks:
                print("  " + runners(server, k, args.per_runner, work), flush=True)

            print(f"\n2. {args.new} new records against experiments of growing size "
                  f"(median of {args.rounds} interleaved rounds)", flush=True)
            experiments = {}
            for size in sizes:
                experiment = f"team-size{size}"
                fill_s = timed(lambda e=experiment, s=size: fill(server, e, s, work / f"size{s}.duckdb", one_night))
                experiments[size] = experiment
                print(f"  filled {size} runs in {fill_s:.0f} s", flush=True)
            figures: dict[int, dict[str, list[float]]] = {s: {"replay": [], "import": [], "again": []} for s in sizes}
            for r in range(args.rounds):
                for size in sizes:
                    session = make_session(f"new-{r}")
                    spool = spool_with(work / f"new-{size}-{r}", session, records_for(session, args.new))
                    sink = MlflowSink(server.uri, experiments[size])
                    began = time.perf_counter()
                    [result] = replay_each(Spool(spool), [sink], deadline_s=120)
                    figures[size]["replay"].append(time.perf_counter() - began)
                    assert result.ok and result.written == args.new, result
                    db = work / f"size{size}.duckdb"
                    imported = []
                    for _ in range(2):  # the new records, then the unchanged server
                        began = time.perf_counter()
                        imported.append((import_mlflow_sessions(server.uri, experiments[size], db).records,
                                         time.perf_counter() - began))
                    assert [n for n, _ in imported] == [args.new, 0], imported
                    import_s, again_s = imported[0][1], imported[1][1]
                    figures[size]["import"].append(import_s)
                    figures[size]["again"].append(again_s)
                    print(f"  round {r + 1}, {size:>6} runs: replay {figures[size]['replay'][-1]:6.1f} s, "
                          f"import {import_s:5.1f} s, second import {again_s:5.2f} s", flush=True)
            base = statistics.median(figures[sizes[0]]["replay"]) if sizes else 0.0
            for size in sizes:
                med = {key: statistics.median(values) for key, values in figures[size].items()}
                print(f"  {size:>6} runs (+{args.new * args.rounds} replayed): replay {med['replay']:6.1f} s "
                      f"({med['replay'] / base:.2f}x the {sizes[0]}-run figure), import {med['import']:5.1f} s, "
                      f"second import of the unchanged server {med['again']:5.2f} s", flush=True)

            print("\n2b. hwbench compare PREV LATEST reading the server (those two sessions only)", flush=True)
            server_compare_figures(server, experiments, work)

            if not args.skip_train:
                dbs = {size: work / f"size{size}.duckdb" for size in sizes}
                for size in duckdb_only:
                    dbs[size] = (args.duckdb_cache or work) / f"nights-{size}.duckdb"
                    if dbs[size].exists():
                        print(f"  reusing {dbs[size]} ({size} runs, no server)", flush=True)
                        continue
                    dbs[size].parent.mkdir(parents=True, exist_ok=True)
                    fill_s = timed(lambda d=dbs[size], s=size: fill_duckdb(d, one_night, s))
                    print(f"  filled a DuckDB file with {size} runs in {fill_s:.0f} s (no server)", flush=True)
                train_section(server, experiments, dbs, one_night, work, args.train_timeout)

            print("\n4. compare and report on nights in DuckDB", flush=True)
            history_figures(history, args.history_dir, one_night, work)
    return 0


if __name__ == "__main__":
    sys.exit(main())
