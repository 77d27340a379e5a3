"""Interference per case: readings around the timed loop, a clean/noisy verdict with its
reason, noisy cases re-measured, and the verdict stored, read back and used.

The busy machine is real: a child process that spins on one of our cores while a real tiny model
is measured. NVML cannot run here; its translation is tested on recorded readings.
"""

from __future__ import annotations

import dataclasses
import json
import os
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path

import pytest

from pytest_hwbench import BenchCase, Runner
from pytest_hwbench.interference import (
    MAX_OTHER_CORES,
    HostSnapshot,
    _per_core_seconds,
    crowded,
    free_cores,
    host_readings,
    judge,
    severity,
    tick_error,
)
from pytest_hwbench.record import BenchmarkRecord
from pytest_hwbench.sinks import DuckDBSink, MlflowSink, load_records, read_records
from pytest_hwbench.trackers import Latency, TimingConfig

#: Their verdicts rest on how fast this machine measures: one at a time under `--dist loadgroup`.
pytestmark = pytest.mark.xdist_group("timing")

SPIN = "import os, sys\nos.sched_setaffinity(0, {int(sys.argv[1])})\nwhile True:\n    pass\n"


@pytest.fixture
def spinner() -> Iterator[subprocess.Popen[bytes]]:
    """A child process spinning on the last core this process may use, for the whole test."""
    core = max(os.sched_getaffinity(0))
    proc = subprocess.Popen([sys.executable, "-c", SPIN, str(core)])
    time.sleep(0.3)  # running, not starting
    try:
        yield proc
    finally:
        proc.kill()
        proc.wait()


def _case() -> BenchCase:
    return BenchCase("bert-tiny", "torch", "cpu", "fp32", 1)


def test_a_spinning_child_makes_the_record_noisy_names_it_and_is_re_measured(spinner) -> None:
    runner = Runner(TimingConfig(warmup_iterations=2, min_iterations=5, min_time_s=0.4), noise_retries=0)
    record = runner.run(_case()).to_record("s")
    assert record.noise == "noisy", record.interference
    assert "cores busy with other processes" in record.noise_reason
    assert f"pid {spinner.pid}" in record.noise_reason  # the busiest process, named
    assert record.interference["other_cores"] > MAX_OTHER_CORES
    assert record.interference["cores_allowed"] == len(os.sched_getaffinity(0))

    # With a retry: measured again after the wait, on the cores the spinner left free.
    runner.noise_retries, runner.noise_wait_s = 1, 0.1
    again = runner.run(_case()).to_record("s")
    runner.close()
    assert again.tries == 2
    cores = len(os.sched_getaffinity(0))
    assert again.threads is not None and again.threads <= max(1, cores - 1)
    if cores >= 2:
        # Its threads had cores of their own: the spinner on the other core is no interference.
        # Something besides it (a third process on a shared runner, the host changing speed) may
        # still make the retry noisy; busy cores are a reason only beyond the spinner's one.
        if "cores busy with other processes" in again.noise_reason:
            assert again.interference["other_cores"] > 1.0 + MAX_OTHER_CORES, again.interference


def test_a_process_on_a_core_the_case_left_free_is_no_interference() -> None:
    beside = {"window_s": 1.0, "cores_allowed": 2, "other_cores": 1.0, "steal_cores": 0.0}
    assert judge(beside, threads=1) == ("clean", "")
    verdict, reason = judge(beside, threads=2)
    assert verdict == "noisy" and reason == "1.0 of 2 cores busy with other processes"
    assert judge(beside)[0] == "noisy"  # threads unknown: every core counts as needed
    assert judge({**beside, "other_cores": 1.4}, threads=1)[0] == "noisy"  # it spilled onto ours


def test_the_thread_count_is_restored_after_a_busy_case(spinner) -> None:
    import torch

    before = torch.get_num_threads()
    runner = Runner(TimingConfig(warmup_iterations=1, min_iterations=3, min_time_s=0.3), noise_retries=1,
                    noise_wait_s=0.1)
    runner.run(_case())
    runner.close()
    assert torch.get_num_threads() == before


def test_without_retries_a_noisy_case_is_measured_once(spinner) -> None:
    runner = Runner(TimingConfig(warmup_iterations=1, min_iterations=3, min_time_s=0.3), noise_retries=0)
    record = runner.run(_case()).to_record("s")
    runner.close()
    assert (record.noise, record.tries) == ("noisy", 1)


def test_bad_retry_settings_are_refused() -> None:
    with pytest.raises(ValueError, match="noise_retries must be an integer >= 0, got -1"):
        Runner(noise_retries=-1)
    with pytest.raises(ValueError, match="noise_wait_s must be between 0 and 60"):
        Runner(noise_wait_s=600)


def _snapshot(wall: float, busy: tuple[float, float], steal: tuple[float, float], own: float) -> HostSnapshot:
    return HostSnapshot(wall, (0, 1), {0: (busy[0], steal[0]), 1: (busy[1], steal[1])}, own)


def test_host_readings_count_others_as_busy_time_less_our_own() -> None:
    # 2 s window; 3.6 core-seconds busy on our two cores, 1.2 of them ours: 1.2 cores of others.
    start = _snapshot(100.0, (50.0, 70.0), (1.0, 1.0), 10.0)
    end = _snapshot(102.0, (51.8, 71.8), (1.1, 1.3), 11.2)
    readings = host_readings(start, end)
    assert readings["other_cores"] == pytest.approx(1.2)
    assert readings["own_cores"] == pytest.approx(0.6)
    assert readings["steal_cores"] == pytest.approx(0.2)
    assert readings["window_s"] == pytest.approx(2.0)
    verdict, reason = judge(readings)
    assert verdict == "noisy"
    assert reason.startswith("1.2 of 2 cores busy with other processes; 0.20 cores stolen by the hypervisor")


def test_per_core_counters_are_keyed_by_the_cpu_id_each_line_names() -> None:
    # /proc/stat of a 4-CPU host with cpu1 offline: its line is missing, so cpu2 and cpu3 keep their
    # ids (the affinity mask names them so); counting by position would read cpu2 as cpu1.
    ticks = os.sysconf("SC_CLK_TCK")
    stat = (
        "cpu  400 0 200 9000 10 0 0 40 0 0\n"
        "cpu0 100 0 50 3000 5 0 0 10 0 0\n"
        "cpu2 200 10 100 3000 5 5 5 20 0 0\n"
        "cpu3 100 0 50 3000 0 0 0 10 0 0\n"
        "intr 12345 0 0\n"
    )
    cores = _per_core_seconds(stat)
    assert sorted(cores) == [0, 2, 3]
    assert cores[2] == pytest.approx((320 / ticks, 20 / ticks))
    assert set(os.sched_getaffinity(0)) <= set(_per_core_seconds())


def test_quiet_readings_are_clean_and_a_short_window_cannot_see_interference() -> None:
    quiet = {"window_s": 1.0, "cores_allowed": 2, "other_cores": 0.05, "steal_cores": 0.0}
    assert judge(quiet) == ("clean", "")
    # 0.3 of a core in 5 ms is 1.5 ticks: within what the 10 ms counters can resolve, not evidence.
    blink = {"window_s": 0.005, "cores_allowed": 2, "other_cores": 0.4}
    assert tick_error(blink) > 0.4 and judge(blink) == ("clean", "")
    assert judge({**blink, "window_s": 1.0})[0] == "noisy"
    assert MAX_OTHER_CORES < 0.4


def test_free_cores_and_severity_prefer_the_try_whose_threads_had_cores_of_their_own() -> None:
    busy = {"cores_allowed": 2, "other_cores": 1.0, "steal_cores": 0.0, "own_cores": 1.0}
    assert free_cores(busy) == 1
    assert free_cores({"cores_allowed": 2, "other_cores": 1.9}) == 1  # never fewer than one
    assert free_cores({"cores_allowed": 16, "other_cores": 2.2}) == 14
    assert severity(busy, threads=1) < severity(busy, threads=2)


#: NVML readings as `gpu_readings` records them (nvmlDeviceGetClockInfo / GetMaxClockInfo in MHz,
#: nvmlDeviceGetCurrentClocksEventReasons bit mask, compute process pids), shaped on an H100 SXM.
NVML_HOT = {"gpu_sm_clock_mhz": 1350, "gpu_sm_clock_max_mhz": 1980,
            "gpu_clock_event_reasons": 0x40 | 0x4, "gpu_process_pids": [4242]}
NVML_POWER_CAPPED = {"gpu_sm_clock_mhz": 1755, "gpu_sm_clock_max_mhz": 1980, "gpu_clock_event_reasons": 0x4,
                     "gpu_process_pids": [4242]}
NVML_SHARED = {"gpu_sm_clock_mhz": 1980, "gpu_sm_clock_max_mhz": 1980, "gpu_clock_event_reasons": 0,
               "gpu_process_pids": [4242, 5151, 6161]}


def test_nvml_readings_translate_to_verdicts() -> None:
    own = {4242}
    verdict, reason = judge(NVML_HOT, own_pids=own)
    assert verdict == "noisy"
    assert reason == "GPU clocks reduced by hardware thermal slowdown (SM clock 1350 of 1980 MHz)"
    # A power cap is the case's own heavy load, not interference.
    assert judge(NVML_POWER_CAPPED, own_pids=own) == ("clean", "")
    assert judge(NVML_SHARED, own_pids=own) == ("noisy", "2 other processes on the GPU (pid 5151, 6161)")


def _record(**changes) -> BenchmarkRecord:
    base = BenchmarkRecord(
        case_id="bert-tiny-cpu-torch-fp32-b1", session_id="s1", status="passed", model="bert-tiny",
        family="embedding", model_type="bert", backend="torch", hardware="cpu", device_name="cpu",
        precision="fp32", mode="inference", batch_size=1, threads=1, latency_ms_median=0.5,
        timings_ms=(0.5, 0.51, 0.49), noise="noisy", noise_reason="1.0 of 2 cores busy with other processes",
        tries=3, interference={"other_cores": 1.0, "cores_allowed": 2, "busiest": ["python3 (pid 7) 1.00 cores"]},
    )
    return dataclasses.replace(base, **changes)


@pytest.mark.e2e
def test_the_verdict_travels_through_duckdb_and_mlflow(tmp_path: Path) -> None:
    from pytest_hwbench.record import SessionInfo

    record = _record()
    session = SessionInfo(session_id="s1", started_at="2026-11-24T00:00:00+00:00", host="h")
    duck = DuckDBSink(tmp_path / "r.duckdb")
    duck.open_session(session)
    duck.write([record])
    (back,) = load_records(tmp_path / "r.duckdb")
    assert (back.noise, back.noise_reason, back.tries) == ("noisy", record.noise_reason, 3)
    assert back.interference == record.interference

    uri = f"sqlite:///{tmp_path / 'mlflow.db'}"
    sink = MlflowSink(uri)
    sink.open_session(session)
    sink.write([record])
    sink.close("finished")
    from mlflow.tracking import MlflowClient

    client = MlflowClient(tracking_uri=uri)
    (child,) = client.search_runs([client.get_experiment_by_name("hwbench").experiment_id],
                                  "tags.`hwbench.kind` = 'record'")
    assert child.data.tags["hwbench.noise"] == "noisy"  # a tag people can filter the runs table on
    (again,) = read_records(uri)
    assert (again.noise, again.tries, again.interference) == ("noisy", 3, record.interference)


def test_a_schema_2_record_reads_back_not_judged(tmp_path: Path) -> None:
    # A record as schema 2 wrote it (the H100 evidence files are such records): no noise fields.
    old = {k: v for k, v in _record().to_dict().items() if k not in ("noise", "noise_reason", "tries", "interference")}
    old["schema_version"] = 2
    path = tmp_path / "old.jsonl"
    path.write_text(json.dumps(old) + "\n")
    (back,) = read_records(path)
    assert back.noise is None and back.noise_reason == "" and back.tries is None and back.interference == {}
    assert back.schema_version == 4
    evidence = read_records(Path(__file__).parent / "data" / "h100_subset.jsonl")
    assert evidence and all(r.noise is None for r in evidence)


def test_a_schema_2_duckdb_file_is_upgraded_with_the_new_columns_empty(tmp_path: Path) -> None:
    import duckdb

    from pytest_hwbench.sinks import _duckdb_schema

    path = tmp_path / "v2.duckdb"
    con = duckdb.connect(str(path))
    con.execute("CREATE TABLE schema_info (version INTEGER NOT NULL, applied_at TIMESTAMPTZ)")
    for version in (1, 2):
        for statement in _duckdb_schema.UPGRADES[version]:
            con.execute(statement)
        con.execute("INSERT INTO schema_info VALUES (?, now())", [version])
    con.execute("INSERT INTO results (record_id, session_id, case_id, status, model, family, model_type, backend, "
                "hardware, device_name, precision, mode, batch_size, latency_ms_median, extra, schema_version) "
                "VALUES ('r1', 's1', 'c', 'passed', 'bert-tiny', 'embedding', 'bert', 'torch', 'cpu', 'cpu', "
                "'fp32', 'inference', 1, 0.5, '{}', 2)")
    con.close()
    DuckDBSink(path).write([_record(record_id="r2")])  # upgrades the file, then writes
    records = {r.record_id: r for r in load_records(path)}
    assert records["r1"].noise is None and records["r1"].interference == {} and records["r1"].tries is None
    assert records["r2"].noise == "noisy"


def test_hwsel_leaves_noisy_records_out_and_says_how_many(tmp_path: Path) -> None:
    from hwsel.data import load_runs

    path = tmp_path / "runs.jsonl"
    rows = [_record(record_id=f"n{i}", batch_size=b) for i, b in enumerate((1, 2))]
    rows += [_record(record_id=f"c{i}", batch_size=b, noise="clean", noise_reason="", tries=1)
             for i, b in enumerate((1, 2, 4))]
    rows.append(_record(record_id="old", batch_size=8, noise=None, noise_reason="", tries=None, interference={}))
    path.write_text("".join(r.to_json() + "\n" for r in rows))
    clean = load_runs(path)
    assert sorted(clean["record_id"]) == ["c0", "c1", "c2", "old"] and clean.attrs["noisy"] == 2
    everything = load_runs(path, include_noisy=True)
    assert len(everything) == 6 and everything.attrs["noisy"] == 0


def test_hwsel_corrects_for_host_speed_and_says_in_one_line_why_rows_are_left_out(tmp_path: Path) -> None:
    from hwsel.data import load_runs, training_table, usable_rows_text

    path = tmp_path / "runs.jsonl"
    slow = {"other_cores": 0.0, "reference_us": 600.0, "host_speed": 0.75}
    rows = [_record(record_id="slow", batch_size=1, noise="clean", noise_reason="", tries=1, latency_ms_median=0.8,
                    timings_ms=(0.8,), interference=slow),
            _record(record_id="plain", batch_size=2, noise="clean", noise_reason="", tries=1, interference={}),
            _record(record_id="busy", batch_size=4),
            _record(record_id="moved", batch_size=8, noise_reason="the host changed speed during the case: a reference "
                    "kernel ran 1.40x slower after the case than before")]
    path.write_text("".join(r.to_json() + "\n" for r in rows))
    runs = load_runs(path)
    assert list(runs["record_id"]) == ["slow", "plain"] and runs.attrs["noisy"] == 2
    table = training_table(runs).set_index("record_id")
    assert table.loc["slow", "latency_ms"] == pytest.approx(0.8 * 0.75)  # as on the host at its recent best
    assert table.loc["plain", "latency_ms"] == pytest.approx(0.5) and not table.loc["plain", "host_speed_corrected"]
    # An accelerator's latency does not move with the host CPU's kernel: carried, not corrected.
    gpu = _record(record_id="gpu", hardware="cuda", device_name="NVIDIA H100 80GB HBM3", batch_size=1, noise="clean",
                  noise_reason="", tries=1, latency_ms_median=0.8, timings_ms=(0.8,), interference=slow)
    gpu_path = tmp_path / "gpu.jsonl"
    gpu_path.write_text(gpu.to_json() + "\n")
    gpu_table = training_table(load_runs(gpu_path)).set_index("record_id")
    assert gpu_table.loc["gpu", "latency_ms"] == pytest.approx(0.8) and not gpu_table.loc["gpu", "host_speed_corrected"]
    assert usable_rows_text(runs, 2) == ("found 2 usable rows; left out 2 interfered records (1 host changed speed "
                                         "during the case, 1 other processes on our cores); --include-noisy keeps them")
    only_noisy = load_runs([path], include_noisy=False).iloc[0:0]
    only_noisy.attrs.update(noisy=2, noisy_reasons={"other processes on our cores": 2})
    assert usable_rows_text(only_noisy, 0).startswith("found 0 usable rows; left out 2 interfered records")
    empty = runs.iloc[0:0]
    empty.attrs.update(noisy=0, dropped={})
    assert "run the benchmarks first" in usable_rows_text(empty, 0)


def test_a_busy_session_says_so_in_its_summary_and_report(pytester: pytest.Pytester, spinner) -> None:
    pytester.makepyfile(test_inference="def test_inference(hwbench_case, hwbench):\n"
                                       "    hwbench.measure(hwbench_case)\n")
    store = pytester.path / "store"
    result = pytester.runpytest_subprocess(
        "--hwbench-store", str(store), "--hwbench-models", "bert-tiny", "--hwbench-backends", "torch",
        "--hwbench-precisions", "fp32", "--hwbench-batch-sizes", "1", "--hwbench-hardware", "cpu",
        "--hwbench-min-time", "0.3", "--hwbench-noise-retries", "0", "-p", "no:cacheprovider", "-m", "cpu",
        timeout=300,
    )
    assert result.ret == 0, result.stdout.str()
    result.stdout.fnmatch_lines(["hwbench: 1 records (0 failed, 1 noisy), session *",
                                 "hwbench: noisy records were measured on a busy machine, e.g. "
                                 "bert-tiny-cpu-torch-fp32-b1: * cores busy with other processes*"])
    (record,) = load_records(store / "hwbench.duckdb")
    assert record.noise == "noisy" and record.tries == 1

    # The report in a process of its own: matplotlib imported inside a pytester test is dropped
    # with the test's modules, and later tests would meet two copies of its classes.
    report = subprocess.run([str(Path(sys.executable).with_name("hwbench")), "report", "--store", str(store),
                             "--session", "all", "--out", str(pytester.path / "report")],
                            capture_output=True, text=True, timeout=300)
    assert report.returncode == 0, report.stdout + report.stderr
    text = (pytester.path / "report" / "report.md").read_text()
    assert "1 passed, 0 failed; 1 noisy, see Noisy records" in text
    section = text.split("## Noisy records", 1)[1].split("\n## ", 1)[0]
    assert "1 of 1 judged records were measured while other work held the machine" in section
    assert "`bert-tiny-cpu-torch-fp32-b1`" in section and "cores busy with other processes" in section


def test_retries_option_is_bounded(pytester: pytest.Pytester) -> None:
    result = pytester.runpytest_subprocess("--hwbench-noise-retries", "11", "-p", "no:cacheprovider")
    assert result.ret == pytest.ExitCode.USAGE_ERROR
    result.stderr.fnmatch_lines(["*--hwbench-noise-retries: '11' is out of range; accepted: 0 to 10*"])


@pytest.mark.e2e
def test_hwsel_train_leaves_noisy_records_out_and_says_so(tmp_path: Path) -> None:
    """Real training (one Optuna trial) on measured CPU records, some of them marked noisy."""
    import pandas as pd

    from hwsel.data import load_runs

    snapshot = Path(__file__).resolve().parents[1] / "benchmarks" / "data" / "cpu_runs.parquet"
    runs = load_runs(snapshot)
    runs = runs[runs["model"].isin(["bert-tiny", "resnet-tiny", "gpt2-tiny"]) & runs["batch_size"].isin([1, 4, 16])]
    fields = set(BenchmarkRecord.__dataclass_fields__)
    records = []
    for i, row in enumerate(runs.head(40).to_dict("records")):
        record = BenchmarkRecord.from_dict({k: v for k, v in row.items() if k in fields and not pd.isna(v)})
        records.append(dataclasses.replace(record, noise="noisy" if i % 8 == 0 else "clean",
                                           noise_reason="busy" if i % 8 == 0 else ""))
    noisy = sum(r.noise == "noisy" for r in records)
    source = tmp_path / "runs.jsonl"
    source.write_text("".join(r.to_json() + "\n" for r in records))
    hwsel = Path(sys.executable).with_name("hwsel")
    proc = subprocess.run([str(hwsel), "train", "--source", str(source), "--tracking-uri",
                           f"sqlite:///{tmp_path / 'mlflow.db'}", "--trials", "1", "--no-progress", "--json"],
                          capture_output=True, text=True, timeout=600, cwd=tmp_path)
    assert proc.returncode == 0, proc.stdout + proc.stderr
    answer = json.loads(proc.stdout)
    assert answer["noisy_left_out"] == noisy > 0
    assert answer["rows"] <= len(records) - noisy


def test_a_faster_best_in_the_baseline_file_no_longer_makes_a_steady_run_noisy(tmp_path: Path) -> None:
    from pytest_hwbench.interference import ReferenceBaseline, _host_key, reference_us

    assert 0 < reference_us(repeats=3) < 1e6
    path = tmp_path / "reference" / "baseline.json"
    # the older form: an all-time best 100x faster than anything this host runs now
    path.parent.mkdir(parents=True)
    path.write_text(json.dumps({_host_key(): 1.0}))
    assert ReferenceBaseline(path).recent == []  # an all-time best is no recent baseline
    runner = Runner(TimingConfig(warmup_iterations=1, min_iterations=3, min_time_s=0.05), noise_retries=0,
                    reference=ReferenceBaseline(path))
    record = runner.run(_case()).to_record("s")
    runner.close()
    readings = record.interference
    assert readings["reference_us"] > 0 and readings["reference_before_us"] > 0 and readings["reference_after_us"] > 0
    # whatever else this shared machine does, the reference kernel is no reason for the verdict
    assert "reference kernel ran" not in record.noise_reason or "during the case" in record.noise_reason
    assert "best" not in record.noise_reason
    import torch

    from pytest_hwbench.interference import cpu_crowded

    if cpu_crowded(readings, torch.get_num_threads()):
        # beside other work on the kernel's cores the reading is not remembered: no baseline yet,
        # so no host speed, and still no recent reading in the file
        assert record.host_speed is None and "host_speed" not in readings
        assert ReferenceBaseline(path).recent == []
    else:
        assert record.host_speed is not None and record.host_speed == readings["host_speed"]
        # the readings of that file now: the newest, the older form gone
        assert ReferenceBaseline(path).recent == [pytest.approx(readings["reference_us"], abs=0.01)]

    # a recent baseline twice as fast as now: host speed about 0.5, and still clean
    fast = ReferenceBaseline(tmp_path / "fast.json")
    for _ in range(20):
        fast.host_speed(100.0)
    assert fast.host_speed(200.0) == pytest.approx(0.5)
    assert ReferenceBaseline(tmp_path / "fast.json").baseline_us == pytest.approx(100.0)  # kept across runs
    steady_slow = {"window_s": 1.0, "cores_allowed": 2, "other_cores": 0.0, "reference_before_us": 200.0,
                   "reference_after_us": 205.0, "reference_us": 202.5, "host_speed": 0.49}
    assert judge(steady_slow) == ("clean", "")
    # one lucky reading among many moves the baseline by nothing
    for _ in range(30):
        fast.host_speed(200.0)
    fast.host_speed(10.0)
    assert fast.baseline_us == pytest.approx(100.0)
    assert ReferenceBaseline(None).host_speed(500.0) == 1.0  # in memory only
    with pytest.raises(ValueError, match="measured_us must be > 0"):
        ReferenceBaseline(None).host_speed(0.0)


def test_a_kernel_reading_beside_other_work_joins_no_baseline(tmp_path: Path, spinner) -> None:
    import torch

    from pytest_hwbench.interference import InterferenceMonitor, ReferenceBaseline

    path = tmp_path / "baseline.json"
    threads = torch.get_num_threads()
    torch.set_num_threads(len(os.sched_getaffinity(0)))  # the kernel needs every core, the spinner's too
    try:
        with InterferenceMonitor(reference=ReferenceBaseline(path)) as monitor:
            time.sleep(0.5)
        readings = monitor.readings
        assert readings["other_cores"] > MAX_OTHER_CORES, readings
        assert readings["reference_us"] > 0  # measured and kept with the record...
        assert "host_speed" not in readings  # ...but no baseline yet, so no speed against one
        assert ReferenceBaseline(path).recent == []  # and the crowded reading is no baseline

        known = ReferenceBaseline(path)
        for _ in range(5):
            known.host_speed(1000.0)
        with InterferenceMonitor(reference=ReferenceBaseline(path)) as monitor:
            time.sleep(0.5)
        readings = monitor.readings
        assert readings["host_speed"] == pytest.approx(1000.0 / readings["reference_us"], rel=1e-2)
        assert ReferenceBaseline(path).recent == [1000.0] * 5
    finally:
        torch.set_num_threads(threads)
    assert ReferenceBaseline(None).host_speed(500.0, remember=False) is None


def test_a_host_that_changes_speed_during_the_case_is_noisy() -> None:
    changed = {"window_s": 1.0, "cores_allowed": 2, "other_cores": 0.0, "reference_before_us": 200.0,
               "reference_after_us": 300.0}
    verdict, reason = judge(changed)
    assert verdict == "noisy"
    assert reason == "the host changed speed during the case: a reference kernel ran 1.50x slower after the case than before"
    assert severity(changed, 1) > severity({**changed, "reference_after_us": 200.0}, 1)
    # The loop itself says whether the change reached it: a loop that did not move the kernel's way
    # (flat, or faster while the kernel got slower) keeps the case clean.
    assert judge({**changed, "rounds_trend": 1.04}) == ("clean", "")
    assert judge({**changed, "rounds_trend": 0.7}) == ("clean", "")
    verdict, reason = judge({**changed, "rounds_trend": 1.31})
    assert verdict == "noisy"
    assert reason == ("the host changed speed during the case: a reference kernel ran 1.50x slower after the case "
                      "than before, and the timed loop ended 1.31x slower")
    faster = {**changed, "reference_before_us": 300.0, "reference_after_us": 200.0}
    assert judge({**faster, "rounds_trend": 1.3}) == ("clean", "")
    assert judge({**faster, "rounds_trend": 0.8})[1].endswith("before the case than after, and the timed loop "
                                                              "ended 1.25x faster")
    # A change of host speed is no crowding: the runner retries it at once, without a wait.
    assert crowded({**changed, "rounds_trend": 1.31}) == []
    assert crowded({**changed, "other_cores": 1.2}) == ["1.2 of 2 cores busy with other processes"]


def test_a_loops_trend_is_its_last_round_over_its_first() -> None:
    assert Latency.from_values([1.0] * 20).rounds_trend == 1.0
    stepped = Latency.from_values([1.0] * 10 + [1.5] * 10)  # rounds 1, 1, 1.25, 1.5, 1.5
    assert stepped.rounds_trend == pytest.approx(1.5)
    assert Latency.from_values([2.0] * 10 + [1.0] * 10).rounds_trend == pytest.approx(0.5)
    assert Latency.from_values([1.0, 2.0, 3.0]).rounds_trend is None  # fewer iterations than rounds


def test_a_schema_3_record_without_host_speed_reads_back_as_unknown(tmp_path: Path) -> None:
    # A record as schema 3 wrote it: judged clean against an all-time best, no host speed.
    old = _record(noise="clean", noise_reason="", tries=1,
                  interference={"other_cores": 0.0, "reference_us": 450.0, "reference_ratio": 1.0}).to_dict()
    old["schema_version"] = 3
    path = tmp_path / "old.jsonl"
    path.write_text(json.dumps(old) + "\n")
    (back,) = read_records(path)
    assert back.schema_version == 4
    assert back.host_speed is None
    # a schema-3 writer could not know host speed: a stray value is not taken for one
    stray = {**old, "interference": {**old["interference"], "host_speed": 1.0}}
    assert BenchmarkRecord.from_dict(stray).host_speed is None
    # through DuckDB as well
    DuckDBSink(tmp_path / "r.duckdb").write([back])
    (stored,) = load_records(tmp_path / "r.duckdb")
    assert stored.host_speed is None
    new = dataclasses.replace(back, interference={**back.interference, "host_speed": 0.8})
    DuckDBSink(tmp_path / "n.duckdb").write([new])
    (stored,) = load_records(tmp_path / "n.duckdb")
    assert stored.host_speed == 0.8
