"""`write_report`: markdown tables, PNG plots and compatibility.json from real records."""

from __future__ import annotations

import dataclasses
import json
import statistics
from pathlib import Path

import matplotlib.image as mpimg
import numpy as np
import pandas as pd
import pytest

from pytest_hwbench.record import BenchmarkRecord
from pytest_hwbench.report import RATING_THRESHOLDS, compatibility_matrix, write_report
from pytest_hwbench.trackers import Latency

SESSION = "sess-report-1"
PNG_SIGNATURE = b"\x89PNG\r\n\x1a\n"
CUDA_ERROR = "RuntimeError: CUDA error: no kernel image is available for execution on the device"

# (family, model, hardware, backend, precision) -> median latency at batch 1 (ms); batch b
# costs base * b**0.6, so throughput grows with batch size.
BASE_MS = {
    ("embedding", "bert-tiny", "cpu", "torch", "fp32"): 12.3456,
    ("embedding", "bert-tiny", "cpu", "torch", "bf16"): 9.1,
    ("embedding", "bert-tiny", "cuda", "torch", "fp16"): 1.02,
    ("embedding", "bert-tiny", "cuda", "torch", "fp32"): 1.61,
    ("embedding", "distilbert", "cpu", "torch", "fp32"): 25.7,
    ("embedding", "distilbert", "cuda", "torch", "fp16"): 1.9,
    ("vision", "vit-tiny", "cpu", "torch", "fp32"): 31.4,
    ("vision", "vit-tiny", "cuda", "torch", "fp16"): 2.45,
    ("audio", "whisper-tiny", "cpu", "torch", "fp32"): 88.0,
}
BATCHES = (1, 8)
MODEL_TYPES = {"bert-tiny": "bert", "distilbert": "distilbert", "vit-tiny": "vit", "whisper-tiny": "whisper",
               "vit-base": "vit", "bert-base": "bert", "gpt2": "gpt2"}


def passed_record(rng: np.random.Generator, family: str, model: str, hardware: str, backend: str,
                  precision: str, batch: int, base_ms: float, session: str = SESSION) -> BenchmarkRecord:
    median = base_ms * batch**0.6
    timings = np.abs(rng.normal(median, median * 0.03, size=40))
    lat = Latency.from_values(timings.tolist())
    on_gpu = hardware != "cpu"
    return BenchmarkRecord(
        case_id=f"{model}-{hardware}-{backend}-{precision}-b{batch}", session_id=session, status="passed",
        model=model, family=family, model_type=MODEL_TYPES[model], backend=backend, hardware=hardware,
        device_name="NVIDIA H100 80GB HBM3" if on_gpu else "AMD EPYC 7R13", precision=precision,
        mode="inference", batch_size=batch, sequence_length=128 if family != "vision" else None,
        image_size=224 if family == "vision" else None, param_count=4_400_000, threads=None if on_gpu else 8,
        latency_ms_mean=lat.mean, latency_ms_median=lat.median, latency_ms_min=lat.min, latency_ms_max=lat.max,
        latency_ms_stddev=lat.stddev, latency_ms_iqr=lat.iqr, latency_ms_p90=lat.p90, latency_ms_p95=lat.p95,
        latency_ms_p99=lat.p99, iterations=lat.iterations, throughput_items_per_s=lat.throughput(batch),
        load_time_s=0.8, cold_latency_ms=median * 3,
        peak_host_rss_mb=900.0 + 12.5 * batch + (300.0 if on_gpu else 0.0),
        peak_device_memory_mb=(150.0 + 20.0 * batch) if on_gpu else None,
        timings_ms=lat.values_ms, host="bench-01", extra={"load_cached": batch != 1},
    )


def failed_record(family: str, model: str, hardware: str, precision: str, batch: int, error: str,
                  session: str = SESSION) -> BenchmarkRecord:
    return BenchmarkRecord(
        case_id=f"{model}-{hardware}-torch-{precision}-b{batch}", session_id=session, status="failed",
        model=model, family=family, model_type=MODEL_TYPES[model], backend="torch", hardware=hardware,
        device_name="", precision=precision, mode="inference", batch_size=batch, error=error, host="bench-01",
    )


def frame(records: list[BenchmarkRecord]) -> pd.DataFrame:
    df = pd.DataFrame([r.to_dict() for r in records]).drop(columns=["timings_ms"])
    df["extra"] = [json.dumps(e) for e in df["extra"]]  # as the DuckDB loader may hand it over
    return df


@pytest.fixture(scope="module")
def records() -> list[BenchmarkRecord]:
    rng = np.random.default_rng(20240611)
    out = [passed_record(rng, *key, batch, base) for key, base in BASE_MS.items() for batch in BATCHES]
    # audio on cuda: every case failed -> incompatible, with the error.
    out += [failed_record("audio", "whisper-tiny", "cuda", "fp16", b, f"{CUDA_ERROR}\n  (batch {b})") for b in BATCHES]
    # embedding on cuda: one OOM next to passed cases -> still compatible, failure counted.
    out.append(failed_record("embedding", "distilbert", "cuda", "fp32", 8,
                             "torch.OutOfMemoryError: CUDA out of memory. Tried to allocate 2.00 GiB"))
    return out


HARDWARE = {
    "cpu": {"available": True, "reason": "", "precisions": ["fp32", "bf16", "int8"],
            "devices": [{"index": 0, "name": "AMD EPYC 7R13", "memory_mb": 128000.0, "capability": None,
                         "precisions": ["fp32", "bf16", "int8"]}], "details": {}},
    "cuda": {"available": True, "reason": "", "precisions": ["fp32", "fp16", "bf16"],
             "devices": [{"index": 0, "name": "NVIDIA H100 80GB HBM3", "memory_mb": 81559.0, "capability": "9.0",
                          "precisions": ["fp32", "fp16", "bf16"]}], "details": {}},
    "mps": {"available": False, "reason": "torch.backends.mps.is_available() is False", "precisions": [],
            "devices": [], "details": {}},
}


@pytest.fixture(scope="module")
def report(records: list[BenchmarkRecord], tmp_path_factory: pytest.TempPathFactory):
    out = tmp_path_factory.mktemp("report")
    system = {"platform": "Linux-6.8-x86_64", "python": "3.11.9", "torch": "2.5.1+cu124"}
    return write_report(frame(records), out, system_info=system, hardware=HARDWARE)


def find(records: list[BenchmarkRecord], model: str, config: str, batch: int) -> BenchmarkRecord:
    hardware, backend, precision = config.split("/")
    (rec,) = [r for r in records if (r.model, r.hardware, r.backend, r.precision, r.batch_size)
              == (model, hardware, backend, precision, batch)]
    return rec


def section(markdown: str, family: str, heading: str) -> dict[tuple[str, str], dict[str, str]]:
    """The markdown table under `#### heading` of `### family`, keyed by its first two cells."""
    family_text = markdown.split(f"\n### {family}\n", 1)[1].split("\n### ", 1)[0].split("\n## ", 1)[0]
    body = family_text.split(f"#### {heading}", 1)[1].split("\n#### ", 1)[0]
    lines = [ln for ln in body.splitlines() if ln.startswith("|")]
    header = [c.strip() for c in lines[0].strip("|").split("|")]
    table = {}
    for line in lines[2:]:
        cells = [c.strip() for c in line.strip("|").split("|")]
        table[(cells[0], cells[1])] = dict(zip(header, cells, strict=True))
    return table


def test_latency_and_throughput_tables_show_measured_medians(report, records):
    md = report.markdown.read_text()
    latency = section(md, "embedding", "Latency, median (ms)")
    throughput = section(md, "embedding", "Throughput (items/s)")
    for config in ("cpu/torch/fp32", "cpu/torch/bf16", "cuda/torch/fp16", "cuda/torch/fp32"):
        for batch in BATCHES:
            rec = find(records, "bert-tiny", config, batch)
            assert latency[("bert-tiny", str(batch))][config] == f"{rec.latency_ms_median:,.2f}"
            assert throughput[("bert-tiny", str(batch))][config] == f"{rec.throughput_items_per_s:,.2f}"
    # a known value, spelled out: the CPU baseline's median is about 12.35 ms at batch 1
    assert abs(find(records, "bert-tiny", "cpu/torch/fp32", 1).latency_ms_median - 12.3456) < 0.5
    # distilbert never ran cpu bf16; its cuda fp32 b8 case failed (OOM)
    assert latency[("distilbert", "1")]["cpu/torch/bf16"] == "–"
    assert latency[("distilbert", "8")]["cuda/torch/fp32"] == "failed"
    # baseline first among the columns
    assert list(latency[("bert-tiny", "1")])[2] == "cpu/torch/fp32"


def test_speedup_is_baseline_over_config_latency(report, records):
    md = report.markdown.read_text()
    speedup = section(md, "embedding", "Speedup vs cpu/torch/fp32")
    for model in ("bert-tiny", "distilbert"):
        for batch in BATCHES:
            base = find(records, model, "cpu/torch/fp32", batch).latency_ms_median
            fast = find(records, model, "cuda/torch/fp16", batch).latency_ms_median
            assert speedup[(model, str(batch))]["cuda/torch/fp16"] == f"{base / fast:.2f}x"
    assert "cpu/torch/fp32" not in speedup[("bert-tiny", "1")]  # the baseline is not its own column
    assert speedup[("distilbert", "8")]["cuda/torch/fp32"] == "n/a"


def test_batch_scaling_and_memory_tables(report, records):
    md = report.markdown.read_text()
    scaling = section(md, "vision", "Batch-size scaling")
    row = scaling[("vit-tiny", "cuda/torch/fp16")]
    t1 = find(records, "vit-tiny", "cuda/torch/fp16", 1).throughput_items_per_s
    t8 = find(records, "vit-tiny", "cuda/torch/fp16", 8).throughput_items_per_s
    assert row["b1"] == f"{t1:,.2f}" and row["b8"] == f"{t8:,.2f}"
    assert row["largest/smallest batch"] == f"{t8 / t1:.2f}x (b1→b8)"
    memory = section(md, "vision", "Peak memory (MB)")
    rec = find(records, "vit-tiny", "cuda/torch/fp16", 8)
    assert memory[("vit-tiny", "8")]["cuda/torch/fp16"] == f"{rec.peak_host_rss_mb:,.2f} / {rec.peak_device_memory_mb:,.2f}"
    assert memory[("vit-tiny", "8")]["cpu/torch/fp32"].endswith("/ n/a")  # no device memory on CPU


def test_system_hardware_and_failures_sections(report):
    md = report.markdown.read_text()
    assert "- **torch**: 2.5.1+cu124" in md
    assert "AMD EPYC 7R13" in md and "NVIDIA H100 80GB HBM3 (81,559.00 MB)" in md
    mps_line = next(ln for ln in md.splitlines() if ln.startswith("| mps |"))
    assert "| no |" in mps_line and "is_available() is False" in mps_line
    cuda_line = next(ln for ln in md.splitlines() if ln.startswith("| cuda |"))
    assert cuda_line.endswith("| 8 / 3 |")  # 8 passed, 3 failed cuda records
    failures = md.split("## Failures", 1)[1]
    assert "3 failed case(s)" in failures
    assert f"whisper-tiny cuda/torch/fp16 b8 (`whisper-tiny-cuda-torch-fp16-b8`): {CUDA_ERROR} (batch 8)" in failures
    assert "CUDA out of memory" in failures


def test_plots_are_valid_pngs(report):
    expected = {f"{fam}/{kind}" for fam in ("embedding", "vision")
                for kind in ("hardware_comparison", "batch_scaling", "speedup", "memory")}
    # audio passed only on the baseline: no speedup bar to draw, but the rest is there
    expected |= {"audio/hardware_comparison", "audio/batch_scaling", "audio/memory"}
    assert set(report.plots) == expected
    md = report.markdown.read_text()
    for path in report.plots.values():
        assert path.parent == report.out_dir / "plots"
        assert path.read_bytes()[:8] == PNG_SIGNATURE
        assert path.stat().st_size > 10_000
        image = mpimg.imread(path)
        assert image.ndim == 3 and image.shape[0] >= 300 and image.shape[1] >= 500 and image.shape[2] in (3, 4)
        assert image.std() > 0.05  # something drawn, not a blank canvas
        assert f"](plots/{path.name})" in md
    assert set(report.all()) == {report.markdown, report.compatibility, *report.plots.values()}


def _expected_relative(records: list[BenchmarkRecord], family: str, target: str) -> float:
    best: dict[tuple[str, str, int], float] = {}
    for r in records:
        if r.family == family and r.status == "passed":
            key = (f"{r.hardware}/{r.backend}", r.model, r.batch_size)
            best[key] = max(best.get(key, 0.0), r.throughput_items_per_s)
    ratios = []
    for (t, model, batch), value in best.items():
        rivals = [v for (t2, m2, b2), v in best.items() if (m2, b2) == (model, batch)]
        if t == target and len(rivals) >= 2:
            ratios.append(value / max(rivals))
    return statistics.median(ratios)


def test_compatibility_json_matches_rows(report, records):
    doc = json.loads(report.compatibility.read_text())
    fams = doc["families"]
    assert set(fams) == {"audio", "embedding", "vision"}
    assert doc["sessions"] == [SESSION] and doc["targets"] == ["cpu/torch", "cuda/torch"]
    assert doc["rating"]["thresholds"] == dict(RATING_THRESHOLDS)

    audio_cuda = fams["audio"]["cuda/torch"]
    assert audio_cuda["compatible"] is False and audio_cuda["performance_rating"] == "none"
    assert (audio_cuda["passed"], audio_cuda["failed"]) == (0, 2)
    assert audio_cuda["models_failed_only"] == ["whisper-tiny"]
    # two messages differing only in the batch suffix stay distinct, whitespace collapsed
    assert [f["message"] for f in audio_cuda["failures"]] == [f"{CUDA_ERROR} (batch 1)", f"{CUDA_ERROR} (batch 8)"]
    audio_cpu = fams["audio"]["cpu/torch"]
    assert audio_cpu["compatible"] is True and audio_cpu["performance_rating"] == "unrated"  # nothing to compare

    emb_cuda, emb_cpu = fams["embedding"]["cuda/torch"], fams["embedding"]["cpu/torch"]
    assert emb_cuda["compatible"] and (emb_cuda["passed"], emb_cuda["failed"]) == (6, 1)
    assert emb_cuda["failures"] == [{"message": "torch.OutOfMemoryError: CUDA out of memory. Tried to allocate "
                                                "2.00 GiB", "count": 1}]
    assert emb_cuda["precisions_passed"] == ["fp16", "fp32"]
    assert emb_cuda["relative_throughput"] == 1.0 and emb_cuda["performance_rating"] == "high"
    expected = _expected_relative(records, "embedding", "cpu/torch")
    assert emb_cpu["relative_throughput"] == pytest.approx(expected, abs=1e-4)
    assert expected < RATING_THRESHOLDS[-1][1] and emb_cpu["performance_rating"] == "low"
    assert emb_cpu["cases_compared"] == 4

    rec = find(records, "vit-tiny", "cpu/torch/fp32", 8)
    (row,) = [r for r in fams["vision"]["cpu/torch"]["results"] if r["batch_size"] == 8]
    assert row == {"model": "vit-tiny", "precision": "fp32", "batch_size": 8, "records": 1,
                   "latency_ms_median": round(rec.latency_ms_median, 6),
                   "throughput_items_per_s": round(rec.throughput_items_per_s, 6)}
    assert compatibility_matrix(frame(records)) == fams


def test_medium_rating_from_throughput_ratio(tmp_path):
    rng = np.random.default_rng(7)
    recs = [passed_record(rng, "vision", "vit-tiny", "cuda", "torch", "fp16", 1, 2.0),
            passed_record(rng, "vision", "vit-tiny", "xpu", "torch", "fp16", 1, 6.0)]  # ~1/3 of the best
    paths = write_report(frame(recs), tmp_path)
    entry = json.loads(paths.compatibility.read_text())["families"]["vision"]["xpu/torch"]
    assert entry["performance_rating"] == "medium"
    assert entry["relative_throughput"] == pytest.approx(recs[0].latency_ms_median / recs[1].latency_ms_median, rel=1e-3)
    assert "speedup" not in " ".join(paths.plots)  # no cpu/torch/fp32 baseline measured
    assert "No speedup: no (model, batch size) has both a passed cpu/torch/fp32" in paths.markdown.read_text()


def test_failed_only_input(tmp_path):
    recs = [failed_record("audio", "whisper-tiny", "cuda", "fp16", 1, CUDA_ERROR),
            failed_record("audio", "whisper-tiny", "cpu", "fp32", 1, "ValueError: bad input shape")]
    paths = write_report(frame(recs), tmp_path)
    assert paths.plots == {}
    md = paths.markdown.read_text()
    assert "No passed cases in this family: no plots." in md
    assert CUDA_ERROR in md and "ValueError: bad input shape" in md
    assert section(md, "audio", "Latency, median (ms)")[("whisper-tiny", "1")]["cpu/torch/fp32"] == "failed"
    fams = json.loads(paths.compatibility.read_text())["families"]
    assert all(not e["compatible"] and e["performance_rating"] == "none" for e in fams["audio"].values())


def test_empty_input_names_the_session_filter(tmp_path, records):
    empty = frame(records).iloc[0:0]
    with pytest.raises(ValueError, match=r"session_id"):
        write_report(empty, tmp_path)
    with pytest.raises(ValueError, match=r"session_id='nope'.*sess-report-1"):
        write_report(frame(records), tmp_path, session_id="nope")
    assert not (tmp_path / "report.md").exists()


def test_session_filter_keeps_one_session(tmp_path, records):
    rng = np.random.default_rng(3)
    other = passed_record(rng, "vision", "vit-tiny", "cpu", "torch", "fp32", 64, 5.0, session="sess-other")
    paths = write_report(frame([*records, other]), tmp_path, session_id="sess-other")
    md = paths.markdown.read_text()
    assert "- **sessions**: sess-other" in md and "bert-tiny" not in md
    assert "Hardware detection not provided" in md and "system information: not provided" in md


def test_missing_columns_are_named(tmp_path, records):
    with pytest.raises(ValueError, match="throughput_items_per_s"):
        write_report(frame(records).drop(columns=["throughput_items_per_s"]), tmp_path)


def test_duplicate_records_are_aggregated_by_median(tmp_path):
    rng = np.random.default_rng(11)
    recs = [passed_record(rng, "vision", "vit-tiny", "cpu", "torch", "fp32", 1, base) for base in (10.0, 11.0, 30.0)]
    paths = write_report(frame(recs), tmp_path)
    md = paths.markdown.read_text()
    value = statistics.median(r.latency_ms_median for r in recs)
    assert section(md, "vision", "Latency, median (ms)")[("vit-tiny", "1")]["cpu/torch/fp32"] == f"{value:,.2f}"
    assert "1 table cell(s) aggregate several passed records" in md


def test_report_does_not_touch_pyplot_state(tmp_path, records):
    import matplotlib

    backend = matplotlib.get_backend()
    write_report(frame(records[:4]), Path(tmp_path))
    assert matplotlib.get_backend() == backend


def test_generate_train_and_compiled_records_get_their_own_tables(tmp_path):
    rng = np.random.default_rng(7)
    eager = passed_record(rng, "embedding", "bert-tiny", "cuda", "torch", "fp16", 1, 6.0)
    compiled = dataclasses.replace(passed_record(rng, "embedding", "bert-tiny", "cuda", "torch-compile-ro", "fp16",
                                                 1, 0.7), compile_time_s=14.5, achieved_tflops=3.25)
    gen = dataclasses.replace(passed_record(rng, "embedding", "bert-tiny", "cuda", "torch", "fp16", 1, 120.0),
                              mode="generate", new_tokens=32, ttft_ms=9.5, decode_ms_per_token=3.5,
                              tokens_per_s=266.0)
    train = dataclasses.replace(passed_record(rng, "embedding", "bert-tiny", "cuda", "torch", "bf16", 8, 40.0),
                                mode="train")
    md = write_report(frame([eager, compiled, gen, train]), tmp_path).markdown.read_text()
    inference = section(md, "embedding", "Latency, median (ms)")[("bert-tiny", "1")]
    # generate and train latencies stay out of the inference tables
    assert inference["cuda/torch/fp16"] == f"{eager.latency_ms_median:,.2f}" and "cuda/torch/bf16" not in inference
    generation = md.split("\n## Generation\n", 1)[1].split("\n## ", 1)[0]
    assert "exactly 32 new tokens" in generation
    ttft = generation.split("#### Time to first token (ms)", 1)[1].split("####", 1)[0]
    assert "| bert-tiny | 1 | 9.50 |" in ttft
    training = md.split("\n## Training\n", 1)[1].split("\n## ", 1)[0]
    assert f"| bert-tiny | 8 | {train.latency_ms_median:,.2f} |" in training
    compile_table = md.split("## Compile time (s)", 1)[1].split("\n## ", 1)[0]
    assert "14.50" in compile_table and "cuda/torch-compile-ro/fp16" in compile_table
    assert "3.25" in md.split("## Achieved TFLOP/s", 1)[1].split("\n## ", 1)[0]


def test_a_compiled_case_slower_than_eager_gets_a_line_with_both_figures(tmp_path):
    # The H100 run of 2026-11-23 (issue 9): vit-base fp16 b64 ran slower compiled than eager,
    # bert-base faster. Medians as recorded there.
    rng = np.random.default_rng(9)

    def rec(model: str, family: str, backend: str, batch: int, median: float, compile_s: float | None,
            **fields):
        base = passed_record(rng, family, model, "cuda", backend, "fp16", batch, 1.0)
        values = [median] * 5
        lat = Latency.from_values(values)
        return dataclasses.replace(base, latency_ms_median=lat.median, latency_ms_mean=lat.mean,
                                   throughput_items_per_s=lat.throughput(batch), compile_time_s=compile_s,
                                   timings_ms=values, **fields)

    recs = [rec("vit-base", "vision", "torch", 64, 6.708, None),
            rec("vit-base", "vision", "torch-compile", 64, 12.472, 10.7),
            rec("vit-base", "vision", "torch-compile-ro", 64, 12.26, 10.2),
            rec("vit-base", "vision", "torch-compile-ro", 1, 0.916, 10.6),  # no eager b1: nothing to compare
            rec("bert-base", "embedding", "torch", 64, 4.318, None),
            rec("bert-base", "embedding", "torch-compile", 64, 3.849, 8.5),
            # the same model at another input length is another case
            rec("bert-base", "embedding", "torch", 64, 15.0, None, sequence_length=512),
            rec("bert-base", "embedding", "torch-compile", 64, 16.5, 9.0, sequence_length=512)]
    md = write_report(frame(recs), tmp_path).markdown.read_text()
    section_text = md.split("\n## Compiled vs eager\n", 1)[1].split("\n## ", 1)[0]
    lines = [ln for ln in section_text.splitlines() if ln.startswith("- ")]
    assert lines == [
        "- bert-base cuda fp16 b64 in512: torch-compile 16.50 ms is slower than eager torch 15.00 ms (1.10x)",
        "- vit-base cuda fp16 b64: torch-compile 12.47 ms is slower than eager torch 6.71 ms (1.86x)",
        "- vit-base cuda fp16 b64: torch-compile-ro 12.26 ms is slower than eager torch 6.71 ms (1.83x)",
    ]

    # All compiled cases faster: the section says so, with the number compared.
    md = write_report(frame(recs[4:6]), tmp_path / "fast").markdown.read_text()
    assert "- no compiled case is slower than eager torch (1 compared)" in md


def test_generation_puts_eager_and_compiled_tokens_per_second_side_by_side(tmp_path):
    rng = np.random.default_rng(5)

    def gen(backend: str, precision: str, batch: int, tokens_per_s: float, compile_s: float | None = None,
            hardware: str = "cuda"):
        base = passed_record(rng, "text_generation", "gpt2", hardware, backend, precision, batch, 1.0)
        median = batch * 32 / tokens_per_s * 1e3  # the whole call of 32 tokens per sequence
        return dataclasses.replace(base, mode="generate", new_tokens=32, ttft_ms=9.0, tokens_per_s=tokens_per_s,
                                   latency_ms_median=median, decode_ms_per_token=7.5, compile_time_s=compile_s)

    recs = [gen("torch", "bf16", 1, 129.6), gen("torch-compile-ro", "bf16", 1, 972.0, 31.5),
            gen("torch-compile", "bf16", 1, 259.2, 20.25),
            gen("torch", "bf16", 8, 1000.0),  # eager only: no row
            gen("torch-compile-ro", "fp16", 1, 900.0, 30.0),  # no eager fp16: no row
            gen("torch", "fp32", 1, 80.0, hardware="cpu"), gen("torch-compile", "fp32", 1, 40.0, 12.0, hardware="cpu")]
    md = write_report(frame(recs), tmp_path).markdown.read_text()
    generation = md.split("\n## Generation\n", 1)[1].split("\n## ", 1)[0]
    table = generation.split("#### Eager vs compiled decoding: generated tokens/s", 1)[1].split("\n####", 1)[0]
    rows = [ln for ln in table.splitlines() if ln.startswith("| gpt2")]
    assert rows == [
        "| gpt2 | cpu | fp32 | 1 | 32 | 80.00 | torch-compile | 40.00 | 0.50x | 12.00 |",
        "| gpt2 | cuda | bf16 | 1 | 32 | 129.60 | torch-compile | 259.20 | 2.00x | 20.25 |",
        "| gpt2 | cuda | bf16 | 1 | 32 | 129.60 | torch-compile-ro | 972.00 | 7.50x | 31.50 |",
    ]
    # The slower compiled decode also gets its line, with the whole calls' latencies.
    compiled = md.split("\n## Compiled vs eager\n", 1)[1].split("\n## ", 1)[0]
    assert [ln for ln in compiled.splitlines() if ln.startswith("- ")] == [
        "- gpt2 cpu fp32 b1 generate out32: torch-compile 800.00 ms is slower than eager torch 400.00 ms (2.00x)"]
    assert "| model | hardware | precision | batch | new tokens | eager torch tokens/s | compiled |" in table
    # Eager-only generation has no such table.
    md = write_report(frame([recs[0], recs[3]]), tmp_path / "eager").markdown.read_text()
    assert "Eager vs compiled decoding" not in md


def test_crashed_cases_count_as_failures_in_tables_and_compatibility(tmp_path):
    crashed = dataclasses.replace(
        failed_record("audio", "whisper-tiny", "cpu", "fp32", 1,
                      "crashed: xdist worker gw1 died running t.py::t[x] (killed by signal 9 (SIGKILL))"),
        status="crashed")
    paths = write_report(frame([crashed]), tmp_path)
    md = paths.markdown.read_text()
    assert section(md, "audio", "Latency, median (ms)")[("whisper-tiny", "1")]["cpu/torch/fp32"] == "crashed"
    assert "killed by signal 9" in md
    entry = json.loads(paths.compatibility.read_text())["families"]["audio"]["cpu/torch"]
    assert (entry["passed"], entry["failed"], entry["compatible"]) == (0, 1, False)


def test_aggregated_cells_are_named_with_why(tmp_path):
    """A cell that shows the median of several records says which cell and why (other sessions,
    other tests), and records of other modes never count as a duplicate of an inference cell."""
    rng = np.random.default_rng(5)
    one = passed_record(rng, "vision", "vit-tiny", "cpu", "torch", "fp32", 1, 10.0)
    other_session = passed_record(rng, "vision", "vit-tiny", "cpu", "torch", "fp32", 1, 11.0, session="sess-b")
    bert = [dataclasses.replace(passed_record(rng, "embedding", "bert-tiny", "cpu", "torch", "fp32", 8, 9.0),
                                nodeid=f"bench_suites/test_x.py::{name}") for name in ("test_a", "test_b")]
    gen = dataclasses.replace(passed_record(rng, "vision", "vit-tiny", "cpu", "torch", "fp32", 8, 50.0),
                              mode="generate", new_tokens=8)
    single = passed_record(rng, "vision", "vit-tiny", "cpu", "torch", "fp32", 8, 12.0)
    md = write_report(frame([one, other_session, *bert, gen, single]), tmp_path).markdown.read_text()
    assert "- 2 table cell(s) aggregate several passed records: the median of their values" in md
    assert "  - bert-tiny b8 cpu/torch/fp32 (inference): 2 records, 2 tests" in md
    assert "  - vit-tiny b1 cpu/torch/fp32 (inference): 2 records, 2 sessions" in md
    assert "vit-tiny b8" not in md.split("## System information")[0]  # generate + inference: own tables


def test_runtime_targets_count_the_records_of_their_backend(tmp_path):
    """A runtime target (onnxruntime, openvino) runs its cases on the cpu: the hardware table
    counts them by backend, not as 0 / 0."""
    rng = np.random.default_rng(6)
    recs = [passed_record(rng, "embedding", "bert-tiny", "cpu", backend, "fp32", 1, 9.0)
            for backend in ("torch", "onnxruntime", "onnxruntime")]
    hardware = {name: {"available": True, "devices": [], "precisions": ["fp32"], "reason": ""}
                for name in ("cpu", "onnxruntime", "openvino")}
    md = write_report(frame(recs), tmp_path, hardware=hardware).markdown.read_text()
    rows = {line.split("|")[1].strip(): line.split("|")[-2].strip()
            for line in md.split("## Available hardware")[1].split("##")[0].splitlines() if line.startswith("| ")}
    assert rows["cpu"] == "3 / 0"
    assert rows["onnxruntime"] == "2 / 0 (its backend, on cpu)"
    assert rows["openvino"] == "0 / 0"
