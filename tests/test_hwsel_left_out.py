"""Issue 41, part 3: an answer says which records of its case it left out and why.

Real parts only: `BenchmarkRecord`s written through the harness's own `DuckDBSink` into a DuckDB
file, read by `hwsel predict`/`hwsel select` (the CLI in this process) and `Predictor.load`.
The first hour of a new machine: the one record of a case was measured while the machine was
busy (``noise="noisy"``), another case failed, a third was measured on another device. The CPU
records carry the CPU detected here (the CLI's default device), whatever machine runs the tests.
"""

from __future__ import annotations

import json
import uuid
from pathlib import Path
from typing import Any

import pytest
from _here import cpu_name

from hwsel import Predictor, predict_performance, select_hardware
from hwsel.cli import main as cli_main
from hwsel.resolution import resolve_model
from pytest_hwbench.record import BenchmarkRecord, SessionInfo

SESSION = SessionInfo(session_id=uuid.uuid4().hex, started_at="2026-11-25T00:00:00+00:00", host="new-machine")
#: The noisy record's median latency (ms).
NOISY_MS = 2.0
BUSY = "1.7 of 2 cores busy with other processes (python)"
A100 = "NVIDIA A100-SXM4-80GB"

#: This machine's CPU: the new machine whose first hour the records are.
HERE = cpu_name()


def _record(batch: int, *, hardware: str = "cpu", device: str = HERE, latency: float | None = NOISY_MS,
            **fields: Any) -> BenchmarkRecord:
    info = resolve_model("bert-tiny")
    lat = latency
    return BenchmarkRecord(
        case_id=f"bert-tiny-{hardware}-torch-fp32-b{batch}", session_id=SESSION.session_id, model="bert-tiny",
        family=info.family, model_type=info.model_type, backend="torch", hardware=hardware, device_name=device,
        precision="fp32", mode="inference", batch_size=batch, sequence_length=info.sequence_length,
        param_count=info.param_count, flops_per_forward=info.flops_per_item * batch, threads=2,
        latency_ms_median=lat, latency_ms_min=None if lat is None else lat * 0.9,
        latency_ms_p95=None if lat is None else lat * 1.3, iterations=50,
        throughput_items_per_s=None if lat is None else batch / lat * 1e3, peak_host_rss_mb=600.0,
        **{"status": "passed", **fields})


@pytest.fixture(scope="module")
def store(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A DuckDB file: bert-tiny at batch 1 measured once, on a busy machine; batch 4 failed (out
    of memory); batch 8 measured cleanly on an A100 only."""
    from pytest_hwbench.sinks import DuckDBSink

    path = tmp_path_factory.mktemp("first-hour") / "hwbench.duckdb"
    sink = DuckDBSink(path)
    sink.open_session(SESSION)
    sink.write([_record(1, noise="noisy", noise_reason=BUSY),
                _record(4, latency=None, status="failed", error="RuntimeError: out of memory"),
                _record(8, hardware="cuda", device=A100, latency=1.5, noise="clean")])
    sink.close("finished")
    return path



def _cli(capsys: pytest.CaptureFixture[str], *args: str) -> tuple[int, str, str]:
    code = cli_main(list(args))
    out = capsys.readouterr()
    return code, out.out, out.err


NOTE = "left out 1 record of this case: 1 noisy (other processes on our cores); --include-noisy keeps the noisy ones"


def test_predict_says_the_noisy_record_was_left_out_and_include_noisy_answers_from_it(
        store: Path, empty_cwd: Path, capsys: pytest.CaptureFixture[str]) -> None:
    code, out, err = _cli(capsys, "predict", "--model", "bert-tiny", "--hardware", "cpu", "--source", str(store))
    assert code == 0, err
    assert "roofline" in out and NOTE in out, out
    code, out, err = _cli(capsys, "predict", "--model", "bert-tiny", "--hardware", "cpu", "--source", str(store),
                          "--include-noisy", "--json")
    assert code == 0, err
    cpu = json.loads(out)["predictions"]["cpu"]
    assert cpu["source"] == "measured" and cpu["latency_ms"] == pytest.approx(NOISY_MS)
    assert f"1 run(s) on {HERE}" in cpu["detail"] and "1 of them noisy (kept: --include-noisy)" in cpu["detail"]
    assert "left out" not in cpu["detail"]
    # the Python API: the same note by default, the measured answer with include_noisy
    pred = predict_performance("bert-tiny", "cpu", predictor=Predictor.load(store, detect=False))["cpu"]
    assert pred.source == "roofline" and NOTE in pred.detail
    kept = predict_performance("bert-tiny", "cpu", predictor=Predictor.load(store, detect=False,
                                                                           include_noisy=True))["cpu"]
    assert kept.source == "measured" and kept.latency_ms == pytest.approx(NOISY_MS)


def test_select_names_the_left_out_record_instead_of_no_passed_runs(
        store: Path, empty_cwd: Path, capsys: pytest.CaptureFixture[str]) -> None:
    code, out, err = _cli(capsys, "select", "--model", "bert-tiny", "--hardware", "cpu", "--source", str(store))
    assert code == 0, err
    assert "no passed benchmark runs" not in out, out
    assert NOTE in out, out  # the candidate's line and the explanation
    code, out, err = _cli(capsys, "select", "--model", "bert-tiny", "--hardware", "cpu", "--source", str(store),
                          "--include-noisy", "--json")
    assert code == 0, err
    rec = json.loads(out)
    assert rec["all_scores"]["cpu"]["prediction"]["source"] == "measured"


def test_a_store_of_noisy_records_only_says_so(tmp_path: Path, empty_cwd: Path) -> None:
    from pytest_hwbench.sinks import DuckDBSink

    path = tmp_path / "noisy.duckdb"
    sink = DuckDBSink(path)
    sink.open_session(SESSION)
    sink.write([_record(1, noise="noisy", noise_reason=BUSY)])
    sink.close("finished")
    predictor = Predictor.load(path, detect=False)
    note = predictor.describe()["measured"]["note"]
    assert note == ("no benchmark record to answer from: left out 1 record: 1 noisy (other processes on our cores); "
                    "--include-noisy keeps the noisy ones"), note
    rec = select_hardware("bert-tiny", available_hardware=["cpu"], predictor=predictor)
    assert "no passed benchmark runs" not in rec.explanation and "left out 1 record" in rec.explanation


def test_failed_records_and_other_devices_are_named(store: Path) -> None:
    predictor = Predictor.load(store, layers=("measured", "roofline", "rules"), detect=False)
    failed = predict_performance("bert-tiny", "cpu", batch_size=4, predictor=predictor)["cpu"]
    assert failed.source == "roofline" and "left out 1 record of this case: 1 failed" in failed.detail
    assert "--include-noisy" not in failed.detail  # no flag keeps a failed record
    h100 = predict_performance("bert-tiny", "cuda", batch_size=8, device="h100", predictor=predictor)["cuda"]
    assert h100.source == "roofline"
    assert f"left out 1 record of this case: 1 on {A100} (another device)" in h100.detail
    a100 = predict_performance("bert-tiny", "cuda", batch_size=8, device="a100", predictor=predictor)["cuda"]
    assert a100.source == "measured" and "left out" not in a100.detail
    onnx = predict_performance("bert-tiny", "cuda", batch_size=8, device=A100, backend="onnxruntime",
                               predictor=predictor)["cuda"]
    assert onnx.source == "roofline" and "1 on backend torch (another backend)" in onnx.detail
    counts = predictor.describe()["measured"]["left_out"]
    assert counts == {"failed": 1, "noisy: other processes on our cores": 1}
