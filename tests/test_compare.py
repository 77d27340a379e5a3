"""`compare_records`: verdicts on rounds (between-run spread), never on iterations; noisy, thin or
mismatched data is `inconclusive` with its reason, and only a regression fails the gate (issue 16)."""

from __future__ import annotations

import dataclasses
import json
import math

import numpy as np
import pytest

from pytest_hwbench.compare import (
    DECISIVE_SHARE,
    Comparison,
    advice,
    compare_records,
    decisiveness,
    exit_code,
    format_table,
    run_spread_of,
    to_json,
)
from pytest_hwbench.compare_sides import sides_of
from pytest_hwbench.record import BenchmarkRecord
from pytest_hwbench.trackers import Latency, round_medians
from pytest_hwbench.verdict import MIN_ROUNDS


def record(session: str, model: str, timings: np.ndarray | list[float], *, noise: str | None = "clean",
           reason: str = "", threads: int | None = 2, device: str = "AMD EPYC 7R13") -> BenchmarkRecord:
    lat = Latency.from_values([float(t) for t in timings])
    return BenchmarkRecord(
        case_id=f"{model}-cpu-torch-fp32-b1", session_id=session, status="passed",
        model=model, family="embedding", model_type="bert", backend="torch", hardware="cpu",
        device_name=device, precision="fp32", mode="inference", batch_size=1, threads=threads,
        latency_ms_mean=lat.mean, latency_ms_median=lat.median, latency_ms_min=lat.min,
        latency_ms_max=lat.max, latency_ms_stddev=lat.stddev, latency_ms_iqr=lat.iqr, latency_ms_p90=lat.p90,
        latency_ms_p95=lat.p95, latency_ms_p99=lat.p99, iterations=lat.iterations,
        throughput_items_per_s=lat.throughput(1), timings_ms=lat.values_ms,
        noise=noise, noise_reason=reason, tries=1 if noise else None,
    )


def failed(session: str, model: str, error: str) -> BenchmarkRecord:
    return BenchmarkRecord(
        case_id=f"{model}-cpu-torch-fp32-b1", session_id=session, status="failed", model=model,
        family="embedding", model_type="bert", backend="torch", hardware="cpu", device_name="",
        precision="fp32", mode="inference", batch_size=1, error=error,
    )


RNG = np.random.default_rng(12345)


def steady(center: float, n: int = 100, sd: float = 0.01) -> np.ndarray:
    return RNG.normal(center, center * sd, n)


def one(a: list[BenchmarkRecord], b: list[BenchmarkRecord], **kw) -> Comparison:
    (c,) = compare_records(a, b, **kw)
    return c


#: Run-to-run shifts of six other cases of an A/A pair that agree to about 1 %.
QUIET_SHIFTS = (1.01, 0.99, 1.005, 0.995, 1.012, 0.988)


def among_quiet_peers(a: list[BenchmarkRecord], b: list[BenchmarkRecord], **kw) -> Comparison:
    """The first case of `a`/`b`, compared beside six peers whose runs agree to about 1 %: enough
    cases to learn a small between-run spread, without which no case is called unchanged."""
    peers_a = [record(a[0].session_id, f"peer{i}", steady(10.0, sd=0.002)) for i in range(len(QUIET_SHIFTS))]
    peers_b = [record(b[0].session_id, f"peer{i}", steady(10.0 * s, sd=0.002)) for i, s in enumerate(QUIET_SHIFTS)]
    return compare_records(a + peers_a, b + peers_b, **kw)[0]


def test_round_medians_are_block_medians():
    assert round_medians([1, 2, 3, 10, 11, 12, 20, 21, 22, 30], rounds=3) == [2.5, 12.0, 22.0]  # blocks of 4, 3, 3
    assert round_medians([4.0, float("nan"), 5.0]) == [4.0, 5.0]  # one round per iteration when few
    assert round_medians([]) == []


def test_a_30_percent_slowdown_on_clean_rounds_is_a_regression():
    c = one([record("A", "m", steady(10.0))], [record("B", "m", steady(13.0))])
    assert c.verdict == "regression" and c.change == pytest.approx(0.30, abs=0.02)
    assert (c.n_a, c.n_b) == (5, 5)  # rounds, not 100 iterations
    assert c.p_value is not None and c.p_value < 0.05 and c.noise == "clean/clean"
    assert exit_code([c]) == 1


def test_a_speedup_is_an_improvement_and_does_not_fail_the_gate():
    c = one([record("A", "m", steady(20.0))], [record("B", "m", steady(14.0))])
    assert c.verdict == "improvement" and exit_code([c]) == 0


def test_a_significant_iteration_level_shift_below_the_threshold_is_unchanged():
    # 4 % apart with 1 % noise over 200 iterations each: Mann-Whitney on iterations gives p < 1e-10,
    # the old gate's basis; on rounds and against the threshold it is no change.
    c = among_quiet_peers([record("A", "m", steady(10.0, 200))], [record("B", "m", steady(10.4, 200))])
    assert c.verdict == "unchanged" and c.change == pytest.approx(0.04, abs=0.01)
    assert c.low is not None and c.high is not None and -0.10 <= c.low < c.change < c.high <= 0.10
    # Alone, nothing shows how far separate runs differ: the interval holds the rounds only, and
    # that is not enough to call it unchanged.
    alone = one([record("A", "m", steady(10.0, 200))], [record("B", "m", steady(10.4, 200))])
    assert alone.verdict == "inconclusive" and alone.note.startswith("between-run spread unknown")


def test_a_noisy_side_is_inconclusive_with_its_reason():
    busy = "1.0 of 2 cores busy with other processes (busiest: python3 (pid 42) 1.00 cores)"
    c = one([record("A", "m", steady(10.0))], [record("B", "m", steady(25.0), noise="noisy", reason=busy)])
    assert c.verdict == "inconclusive" and f"noisy in B: {busy}" in c.note
    assert c.noise == "clean/noisy" and c.change == pytest.approx(1.5, abs=0.05)
    assert exit_code([c]) == 0  # the gate does not fail on what it cannot tell


def test_a_clean_record_beside_a_noisy_one_is_what_counts():
    b = [record("B", "m", steady(25.0), noise="noisy", reason="busy"), record("B", "m", steady(10.0))]
    c = among_quiet_peers([record("A", "m", steady(10.0))], b)
    assert c.verdict == "unchanged" and c.noise == "clean/clean"


def test_single_round_data_is_inconclusive():
    c = one([record("A", "m", [10.0, 10.1])], [record("B", "m", [20.0, 20.2])])
    assert c.verdict == "inconclusive" and f"too few rounds (2 in A, 2 in B; need {MIN_ROUNDS})" in c.note
    assert c.p_value is None and c.change == pytest.approx(1.0, abs=0.02)


def test_different_thread_counts_are_inconclusive():
    c = one([record("A", "m", steady(10.0), threads=2)], [record("B", "m", steady(14.0), threads=1)])
    assert c.verdict == "inconclusive" and "threads 2 in A, 1 in B" in c.note


def test_rounds_that_overlap_are_inconclusive_not_a_verdict():
    # medians 30 % apart, but every round wanders by +-40 %: the spread is larger than the change
    a = [record("A", "m", np.repeat([6.0, 14.0, 10.0, 7.0, 13.0], 20))]
    b = [record("B", "m", np.repeat([8.0, 18.0, 13.0, 9.0, 17.0], 20))]
    c = one(a, b)
    assert c.verdict == "inconclusive" and "rounds +-" in c.note and c.spread is not None and c.spread > 0.3
    assert c.low is not None and c.low < 0 < 0.10 < c.high  # the interval says why


def test_a_history_of_sessions_widens_the_baseline():
    # Three baseline sessions, each steady within itself but 15 % apart from each other: a 20 %
    # change in B is within what the history shows between sessions.
    history = [record(s, "m", steady(center)) for s, center in (("A1", 10.0), ("A2", 11.5), ("A3", 8.7))]
    c = one(history, [record("B", "m", steady(12.0))])
    assert c.verdict == "inconclusive" and c.n_a == 15
    alone = one(history[:1], [record("B", "m", steady(12.0))])
    assert alone.verdict == "regression"  # the same B against one quiet session


def test_records_before_schema_3_have_no_verdict_and_still_compare():
    old = BenchmarkRecord.from_dict({k: v for k, v in record("A", "m", steady(10.0)).to_dict().items()
                                     if k not in ("noise", "noise_reason", "tries", "interference")}
                                    | {"schema_version": 2})
    assert old.noise is None and old.tries is None and old.interference == {}
    c = one([old], [record("B", "m", steady(13.0))])
    assert c.verdict == "regression" and c.noise == "-/clean"


def test_cases_in_one_side_only_or_failed_are_missing():
    a = [record("A", "only-a", steady(5.0)), record("A", "breaks", steady(5.0))]
    b = [failed("B", "breaks", "torch.OutOfMemoryError: CUDA out of memory"), record("B", "only-b", steady(5.0))]
    got = {c.case_id.split("-cpu-")[0]: c for c in compare_records(a, b)}
    assert list(got) == ["only-a", "breaks", "only-b"]
    assert got["only-a"].verdict == "missing" and got["only-a"].note == "absent from B"
    assert got["only-b"].note == "absent from A"
    assert "failed in B: torch.OutOfMemoryError" in got["breaks"].note


def test_without_raw_timings_the_median_is_one_round():
    a = dataclasses.replace(record("A", "m", steady(10.0)), timings_ms=())
    b = dataclasses.replace(record("B", "m", steady(20.0)), timings_ms=())
    c = one([a], [b])
    assert c.verdict == "inconclusive" and "too few rounds (1 in A, 1 in B" in c.note


def test_threshold_and_alpha_are_checked_and_honoured():
    a, b = [record("A", "m", steady(10.0, sd=0.002))], [record("B", "m", steady(10.5, sd=0.002))]
    assert one(a, b, threshold=0.02).verdict == "regression"
    assert one(a, b, threshold=0.02, alpha=1e-6).verdict == "inconclusive"
    with pytest.raises(ValueError, match="alpha"):
        compare_records(a, b, alpha=0)
    with pytest.raises(ValueError, match="threshold"):
        compare_records(a, b, threshold=-0.1)
    with pytest.raises(TypeError, match="BenchmarkRecords"):
        compare_records([{"case_id": "x"}], b)  # type: ignore[list-item]


def test_format_table_has_the_noise_column_and_counts():
    comps = compare_records([record("A", "slow", steady(10.0)), record("A", "busy", steady(10.0))],
                            [record("B", "slow", steady(13.0)),
                             record("B", "busy", steady(30.0), noise="noisy", reason="busy machine")])
    lines = format_table(comps).splitlines()
    assert "noise A/B" in lines[0] and "host B/A" in lines[0]
    busy = next(ln for ln in lines if ln.startswith("busy-cpu"))
    assert "clean/noisy" in busy and "inconclusive" in busy
    assert lines[-2] == "1 regression, 0 improvement, 0 unchanged, 1 inconclusive, 0 missing (2 cases)"
    assert lines[-1] == "decisiveness 50% (1 of 2 compared cases have a verdict)"


def test_compared_cases_come_first_missing_ones_fold_into_one_line_and_lines_fit_120_columns(capsys):
    # A session against one that ran 3 of its 40 cases: the 3 compared lines must not drown
    # in 37 rows of `missing`, and no line may pass 120 columns (details go to --verbose / JSON).
    long = "a-model-with-a-rather-long-name-for-its-family"
    a = [record("A", f"{long}-{i}", steady(10.0)) for i in range(40)]
    busy = "1.0 of 2 cores busy with other processes (busiest: python3 (pid 42) 1.00 cores, pytest (pid 7) 0.3 cores)"
    b = [record("B", f"{long}-0", steady(13.0)), record("B", f"{long}-1", steady(10.0)),
         record("B", f"{long}-2", steady(30.0), noise="noisy", reason=busy), failed("B", f"{long}-3", "boom " * 50)]
    comps = compare_records(a, b)
    text = format_table(comps)
    lines = text.splitlines()
    assert max(len(line) for line in lines) <= 120
    assert [ln.split()[0] for ln in lines[2:5]] == [f"{long}-{i}-cpu-torch-fp32-b1" for i in range(3)]
    assert sum("missing" in ln for ln in lines) == 2  # the fold line and the count line
    assert "37 missing (36 absent from B, 1 failed in B); --all lists them" in text
    # 3 compared cases teach no between-run spread: the unchanged-looking one is not called unchanged
    assert "decisiveness 33% (1 of 3 compared cases have a verdict)" in text
    everything = format_table(comps, show_missing=True).splitlines()
    assert sum(" missing " in ln for ln in everything) == 37 + 1 and max(len(ln) for ln in everything) <= 120
    verbose = format_table(comps, verbose=True)
    assert busy in verbose and "p-value" in verbose

    import json

    from pytest_hwbench.compare import to_json

    data = json.loads(to_json(comps))
    assert data["decided"] == 1 and data["compared"] == 3 and len(data["comparisons"]) == 40
    assert data["comparisons"][2]["note"] == (f"noisy in B: {busy}; fewer than 5 cases with an interfered side "
                                              "compared to learn how far interference moved them")


def _jsonl(path, records: list[BenchmarkRecord]):
    path.write_text("".join(r.to_json() + "\n" for r in records))
    return str(path)


@pytest.mark.e2e
def test_cli_compares_records_replayed_from_other_machines_and_mlflow_runs(tmp_path, capsys):
    from pytest_hwbench.cli import main
    from pytest_hwbench.record import SessionInfo
    from pytest_hwbench.sinks import MlflowSink

    a = _jsonl(tmp_path / "a.jsonl", [record("A", "m", steady(10.0)), record("A", "k", steady(5.0))])
    b_records = [record("B", "m", steady(13.0)),
                 record("B", "k", steady(9.0), noise="noisy", reason="1.0 of 2 cores busy with other processes")]
    b = _jsonl(tmp_path / "b.jsonl", b_records)
    assert main(["compare", "--source-a", a, "--source-b", b, "all", "all"]) == 1  # m regressed
    out = capsys.readouterr().out
    assert "1 regression, 0 improvement, 0 unchanged, 1 inconclusive, 0 missing (2 cases)" in out
    assert "noisy in B: 1.0 of 2" in out

    # B as MLflow runs (timings from the session's artifact), picked by session id prefix.
    uri = f"sqlite:///{tmp_path / 'mlflow.db'}"
    sink = MlflowSink(uri)
    sink.open_session(SessionInfo(session_id="B", started_at="2026-11-24T00:00:00+00:00", host="h"))
    sink.write(b_records[1:])  # only the noisy case: nothing to gate on
    sink.close("finished")
    assert main(["compare", "--source-a", a, "--source-b", uri, "all", "B"]) == 0
    out = capsys.readouterr().out
    assert "k-cpu-torch-fp32-b1" in out and "clean/noisy" in out and "inconclusive" in out

    assert main(["compare", "--source-a", a, "--source-b", b, "all", "nope"]) == 2
    assert "session 'nope' matches no session" in capsys.readouterr().err


def _at_host(rec: BenchmarkRecord, reference_us: float) -> BenchmarkRecord:
    return dataclasses.replace(rec, interference={"reference_us": reference_us, "host_speed": 300.0 / reference_us})


def test_compare_corrects_each_side_for_host_speed_learned_from_the_records():
    from pytest_hwbench.compare import host_model_of

    # Both sides quiet by every counter, but B ran on a host 1.5x slower by its reference kernel,
    # and every model moved with it (latency ~ kernel ** 1.0 here); one model also regressed 40 %.
    models = [f"m{i}" for i in range(8)]
    a = [_at_host(record("A", m, steady(10.0 + i)), 300.0) for i, m in enumerate(models)]
    b = [_at_host(record("B", m, steady((10.0 + i) * 1.5 * (1.4 if m == "m3" else 1.0))), 450.0)
         for i, m in enumerate(models)]
    host = host_model_of(sides_of(a), sides_of(b))
    assert host.learned_from == 8 and host.elasticity == pytest.approx(1.0, abs=0.02) and host.established
    got = {c.case_id.split("-cpu-")[0]: c for c in compare_records(a, b)}
    assert got["m3"].verdict == "regression" and got["m3"].corrected_change == pytest.approx(0.40, abs=0.03)
    assert got["m3"].change == pytest.approx(1.10, abs=0.05) and got["m3"].host_ratio == pytest.approx(1.5)
    assert got["m3"].judged_change == got["m3"].corrected_change and got["m3"].low > 0.10
    # The others moved with the host; a correction of 1.5x carries +-|log 1.5| x 0.15 of its own,
    # too wide to call them unchanged at 10 %, and none is a false alarm.
    others = [got[m] for m in models if m != "m3"]
    assert all(c.verdict == "inconclusive" and abs(c.corrected_change) < 0.02 for c in others)
    assert all(c.low < -0.10 and c.high > 0.10 for c in others)

    # One case alone on a host 1.5x slower: nothing establishes how it moves with the kernel, so
    # nothing is corrected and the host's difference widens the interval (+80 % raw is inside it);
    # on a host only 3 % slower the raw +44 % is a regression.
    (alone,) = compare_records(a[:1], [_at_host(record("B", "m0", steady(10.0 * 1.5 * 1.2)), 450.0)])
    assert alone.verdict == "inconclusive" and "host speed +-" in alone.note and alone.corrected_change is None
    (near,) = compare_records(a[:1], [_at_host(record("B", "m0", steady(10.0 * 1.03 * 1.4)), 309.0)])
    assert near.verdict == "regression" and near.corrected_change is None
    assert near.judged_change == pytest.approx(0.44, abs=0.03)

    # A host 3x slower on one side is beyond what a correction can carry.
    (far,) = compare_records(a[:1], [_at_host(record("B", "m0", steady(30.0)), 900.0)])
    assert far.verdict == "inconclusive" and "the host ran 3.0x slower in B" in far.note
    assert far.corrected_change is None and f"{far.change * 100:+.1f}%" in format_table([far])  # the raw figure

    # Records without host speed (older than schema 4) compare uncorrected.
    plain_a = [dataclasses.replace(r, interference={"reference_us": 300.0}) for r in a[:1]]
    plain_b = [dataclasses.replace(r, interference={"reference_us": 450.0}) for r in b[:1]]
    (c,) = compare_records(plain_a, plain_b)
    assert c.host_ratio is None and c.verdict == "regression" and c.corrected_change is None


def test_an_accelerators_cases_are_not_corrected_by_the_hosts_cpu_kernel():
    # A CUDA case whose host CPU ran its kernel 1.8x slower in B (other work on the host's cores,
    # as seen on an H100 host): the GPU latency did not move with it, and is compared as measured.
    def on_cuda(rec: BenchmarkRecord) -> BenchmarkRecord:
        return dataclasses.replace(rec, hardware="cuda", case_id=rec.case_id.replace("-cpu-", "-cuda-"),
                                   device_name="NVIDIA H100 80GB HBM3")

    models = [f"m{i}" for i in range(6)]
    a = [on_cuda(_at_host(record("A", m, steady(5.0 + i)), 300.0)) for i, m in enumerate(models)]
    b = [on_cuda(_at_host(record("B", m, steady((5.0 + i) * (1.3 if m == "m2" else 1.0))), 540.0))
         for i, m in enumerate(models)]
    assert all(not r.host_bound for r in a + b) and all(r.host_speed for r in a + b)
    got = {c.case_id.split("-cuda-")[0]: c for c in compare_records(a, b)}
    assert all(c.host_ratio is None and c.corrected_change is None for c in got.values())
    assert got["m2"].verdict == "regression" and got["m2"].change == pytest.approx(0.30, abs=0.01)
    assert all(got[m].verdict == "unchanged" for m in models if m != "m2")
    # The same records on the CPU are corrected: the 1.8x kernel moves them all.
    cpu = {c.case_id.split("-cpu-")[0]: c for c in compare_records([_at_host(record("A", m, steady(5.0 + i)), 300.0)
                                                                   for i, m in enumerate(models)],
                                                                  [_at_host(record("B", m, steady(5.0 + i)), 540.0)
                                                                   for i, m in enumerate(models)])}
    assert all(c.host_ratio == pytest.approx(1.8) for c in cpu.values())


def test_the_between_run_spread_of_the_compared_cases_keeps_a_lone_outlier_from_a_false_alarm():
    # An A/A pair of 12 cases whose run-to-run shifts spread by about 6 % (tight rounds each):
    # the case that moved +17 % is within three between-run spreads, not a regression.
    shifts = [0.97, 1.04, 0.95, 1.06, 1.02, 0.93, 1.08, 0.99, 1.05, 0.96, 1.01, 1.17]
    a = [record("A", f"m{i}", steady(10.0, sd=0.002)) for i in range(12)]
    b = [record("B", f"m{i}", steady(10.0 * s, sd=0.002)) for i, s in enumerate(shifts)]
    got = compare_records(a, b)
    assert not [c for c in got if c.verdict in ("regression", "improvement")]
    outlier = got[-1]
    assert outlier.verdict == "inconclusive" and "between runs +-" in outlier.note
    assert outlier.between_runs == pytest.approx(run_spread_of(sides_of(a), sides_of(b)).clean)
    assert 0.03 < outlier.between_runs < 0.1
    # Without the other cases the same pair has only its rounds to go by, and calls it a regression.
    assert one(a[-1:], b[-1:]).verdict == "regression"

    # A change that moves every case alike does not widen the spread: all 12 regress by 30 %.
    slower = [record("B", f"m{i}", steady(10.0 * s * 1.3, sd=0.002)) for i, s in enumerate(shifts[:-1])]
    assert all(c.verdict == "regression" for c in compare_records(a[:-1], slower))


def test_interfered_cases_are_compared_when_enough_of_them_teach_how_far_interference_moved_them():
    busy = "1.0 of 2 cores busy with other processes"
    # Six cases, B measured beside a busy process: every one 20-40 % slower. A shift common to
    # interfered cases is what interference does: inconclusive or unchanged, never a regression.
    shifts = [1.2, 1.3, 1.25, 1.4, 1.35, 1.28]
    a = [record("A", f"m{i}", steady(10.0)) for i in range(6)]
    b = [record("B", f"m{i}", steady(10.0 * s), noise="noisy", reason=busy) for i, s in enumerate(shifts)]
    got = compare_records(a, b)
    assert not [c for c in got if c.verdict in ("regression", "improvement")]
    assert all(f"noisy in B: {busy}" in c.note for c in got)
    spread = run_spread_of(sides_of(a), sides_of(b))
    assert spread.noisy_cases == 6 and spread.noisy == pytest.approx(1.4826 * np.median(np.log(shifts)), rel=0.01)
    # Mostly small shifts under interference: those get a verdict, and a 3x one is a regression.
    small = [1.01, 0.99, 1.015, 0.995, 1.01, 3.0]
    b = [record("B", f"m{i}", steady(10.0 * s), noise="noisy", reason=busy) for i, s in enumerate(small)]
    got = compare_records(a, b)
    assert [c.verdict for c in got] == ["unchanged"] * 5 + ["regression"]


def test_when_runs_differ_more_than_their_rounds_compare_says_to_measure_both_sides_in_one_job():
    # An A/A pair of 12 cases with tight rounds whose run-to-run shifts spread by about 30 %
    # (this project's 2-core runner): most cases cannot be told, and the table says what helps.
    shifts = [0.70, 1.35, 0.85, 1.25, 1.10, 0.75, 1.40, 0.95, 1.30, 0.80, 1.05, 1.20]
    a = [record("A", f"m{i}", steady(10.0, sd=0.002)) for i in range(12)]
    b = [record("B", f"m{i}", steady(10.0 * s, sd=0.002)) for i, s in enumerate(shifts)]
    got = compare_records(a, b)
    decided, total = decisiveness(got)
    assert decided / total < DECISIVE_SHARE
    hint = advice(got)
    assert hint.startswith(f"{sum(c.verdict == 'inconclusive' for c in got)} of 12 cases are inconclusive")
    assert "hwbench ab" in hint and "+-" in hint
    assert hint in format_table(got).splitlines()
    assert json.loads(to_json(got))["advice"] == hint
    # the two sides of an `hwbench ab` pair already ran interleaved: `compare pair:ID` gives no such advice
    assert "hwbench ab" not in format_table(got, advise=False)
    assert json.loads(to_json(got, advise=False))["advice"] is None

    # Runs that agree to about 1 % decide, and the table gives no such advice.
    steady_shifts = [1.01, 0.99, 1.005, 0.995, 1.012, 0.988, 1.0, 1.008, 0.992, 1.003, 0.997, 1.01]
    b = [record("B", f"m{i}", steady(10.0 * s, sd=0.002)) for i, s in enumerate(steady_shifts)]
    got = compare_records(a, b)
    assert advice(got) == "" and "hwbench ab" not in format_table(got)
    assert json.loads(to_json(got))["advice"] is None


def _real_session() -> list[BenchmarkRecord]:
    """40 inference records of one real H100 session (``../shared/gpu-evidence``), raw timings kept."""
    from pathlib import Path

    path = Path(__file__).parent / "data" / "h100_quick_session.jsonl"
    return [BenchmarkRecord.from_dict(json.loads(line)) for line in path.read_text().splitlines()]


def _scaled(rec: BenchmarkRecord, session: str, factor: float) -> BenchmarkRecord:
    return dataclasses.replace(rec, session_id=session, timings_ms=tuple(t * factor for t in rec.timings_ms),
                               latency_ms_median=rec.latency_ms_median * factor)


def test_on_real_records_a_planted_change_whose_interval_reaches_past_the_threshold_is_never_unchanged():
    a = _real_session()
    assert len(a) == 40 and all(len(r.timings_ms) >= 10 for r in a)
    # B: the same session again on a host whose separate runs differ by about 8 % per case, with
    # +12 % planted in every third case: close enough to the threshold that many intervals reach
    # past it.
    rng = np.random.default_rng(7)
    planted = {r.case_id for i, r in enumerate(a) if i % 3 == 0}
    b = [_scaled(r, "B", math.exp(rng.normal(0, 0.08)) * (1.12 if r.case_id in planted else 1.0)) for r in a]
    got = compare_records(a, b)
    assert run_spread_of(sides_of(a), sides_of(b)).clean is not None
    for c in got:
        assert c.low is not None and c.high is not None and c.low < c.judged_change < c.high
        if c.verdict == "unchanged":
            assert -0.10 <= c.low and c.high <= 0.10 and c.case_id not in planted
        if c.low < 0.10 < c.high or c.low < -0.10 < c.high:
            assert c.verdict == "inconclusive", c
    assert not [c for c in got if c.case_id in planted and c.verdict in ("unchanged", "improvement")]
    assert not [c for c in got if c.case_id not in planted and c.verdict in ("regression", "improvement")]
    # +30 % planted on runs that agree to 1 %: the intervals narrow, and most are found; the rest
    # (10 iterations, rounds that scatter by 14-27 % on their own) are inconclusive, never unchanged.
    quiet = [_scaled(r, "Q", math.exp(rng.normal(0, 0.01)) * (1.30 if r.case_id in planted else 1.0)) for r in a]
    found = [c for c in compare_records(a, quiet) if c.case_id in planted]
    assert sum(c.verdict == "regression" for c in found) >= len(planted) // 2
    assert {c.verdict for c in found} <= {"regression", "inconclusive"}


def test_an_elasticity_whose_interval_contains_zero_corrects_nothing():
    from pytest_hwbench.compare import host_model_of
    from pytest_hwbench.compare_sides import UNPROVEN_ELASTICITY_SD

    # B's kernel ran 1.3x slower on every case, but the latencies did not follow it (one up, one
    # down, most flat): the per-case slopes scatter around zero.
    moves = [1.0, 1.25, 0.85, 1.02, 0.97, 1.3, 0.8, 1.01]
    a = [_at_host(record("A", f"m{i}", steady(10.0, sd=0.002)), 300.0) for i in range(len(moves))]
    b = [_at_host(record("B", f"m{i}", steady(10.0 * s, sd=0.002)), 390.0) for i, s in enumerate(moves)]
    host = host_model_of(sides_of(a), sides_of(b))
    assert host.learned_from == len(moves) and not host.established
    assert host.elasticity - 2 * host.standard_error <= 0
    assert "correction: none" in host.describe()
    for c in compare_records(a, b):
        assert c.corrected_change is None and c.judged_change == pytest.approx(c.change)
        assert c.host_ratio == pytest.approx(1.3)
        assert c.uncertainty >= abs(math.log(1.3)) * UNPROVEN_ELASTICITY_SD  # the host's move widens it
    # Three cases that disagree (0.00, 0.87 and 1.75 as elasticities): not enough to apply either.
    few_a, few_b = a[:3], [_at_host(record("B", f"m{i}", steady(10.0 * 1.3 ** k, sd=0.002)), 390.0)
                           for i, k in enumerate((0.0, 0.87, 1.75))]
    assert not host_model_of(sides_of(few_a), sides_of(few_b)).established
    assert all(c.corrected_change is None for c in compare_records(few_a, few_b))


def test_a_bimodal_history_is_the_noise_of_a_case_and_a_change_inside_it_is_not_unchanged():
    # Five nightly sessions of the same code, each steady within itself, that land in one of two
    # modes (10 ms or 13 ms): robust spreads of the five medians would say 0; the history's spread
    # is what a new session must be judged against.
    history = [record(f"H{i}", "m", steady(center, sd=0.003)) for i, center in enumerate((10, 10, 10, 13, 13))]
    same = one(history, [record("B", "m", steady(10.2, sd=0.003))])
    assert same.verdict == "inconclusive" and same.between_runs > 0.1 and "more sessions in the history" in same.note
    slower = one(history, [record("B", "m", steady(13.0, sd=0.003))])
    assert slower.verdict == "inconclusive" and slower.low < 0 < 0.10 < slower.high
    # A history whose sessions agree decides a planted +30 % from one new session.
    tight = [record(f"H{i}", "m", steady(center, sd=0.003)) for i, center in enumerate((10, 10.1, 9.9, 10.05, 9.95))]
    assert one(tight, [record("B", "m", steady(13.0, sd=0.003))]).verdict == "regression"


def test_one_contract_for_every_verdict_in_the_paired_interval_too():
    from pytest_hwbench.verdict import judge_interval, paired_interval

    assert judge_interval(0.30, 0.20, 0.40, 0.10) == ("regression", "")
    assert judge_interval(-0.30, -0.40, -0.20, 0.10) == ("improvement", "")
    assert judge_interval(0.02, -0.05, 0.08, 0.10) == ("unchanged", "")
    # the point estimate inside the threshold, the interval reaching past it: never unchanged
    verdict, why = judge_interval(0.02, -0.07, 0.11, 0.10)
    assert verdict == "inconclusive" and "reaches past +-10%" in why
    # a real change (interval above zero) that may or may not pass the threshold
    verdict, why = judge_interval(0.06, 0.01, 0.12, 0.10)
    assert verdict == "inconclusive" and "a real change" in why
    # per-round ratios of a pair about 1 % apart whose rounds scatter by 11 %: p ~ 0.7, interval
    # about -5 % to +7 %: inconclusive at 5 %, where a point estimate would have said unchanged
    ratios = [1.18, 0.88, 1.08, 0.84, 1.15, 0.95, 1.03, 0.87, 1.20, 0.98, 1.04, 0.92, 1.12, 0.89, 1.09, 0.97,
              1.02, 0.94]
    change, low, high, p = paired_interval(ratios, 0.05)
    assert abs(change) < 0.05 and p > 0.3 and low < -0.02 and high > 0.05
    assert judge_interval(change, low, high, 0.05)[0] == "inconclusive"
    assert paired_interval([1.1, 1.2], 0.05) is None
