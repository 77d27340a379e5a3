"""What hwsel's commands start and print: a CPU question starts no browser, `select` marks targets
this machine lacks, `train` names the metric behind its score.

The browser check is on the real process tree: ``$HWBENCH_BROWSER`` points at a sentinel
executable that writes a file when anything starts it, the web probe cache is cold
(``HWBENCH_WEB_PROBE=fresh``), and the command's descendants are polled while it runs.
"""

from __future__ import annotations

import json
import os
import stat
import subprocess
import sys
import time
from pathlib import Path

import psutil
import pytest

#: Every test here starts another process, a server or a training: the end-to-end tier.
pytestmark = pytest.mark.e2e

ROOT = Path(__file__).resolve().parents[1]
SNAPSHOT = ROOT / "benchmarks" / "data" / "cpu_runs.parquet"


def _env(tmp_path: Path) -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if not k.startswith(("MLFLOW_TRACKING", "HWSEL_"))}
    env["PYTHONPATH"] = str(ROOT) + os.pathsep + env.get("PYTHONPATH", "")
    env["HWBENCH_WEB_PROBE"] = "fresh"
    env["XDG_CACHE_HOME"] = str(tmp_path / "cache")
    return env


def _cuda_here() -> bool:
    from pytest_hwbench.hardware import detect_hardware

    target = detect_hardware(targets=("cuda",)).targets.get("cuda")
    return bool(target is not None and target.available)


def test_a_cold_cpu_question_starts_no_browser(tmp_path: Path) -> None:
    started = tmp_path / "browser-started"
    sentinel = tmp_path / "chromium"
    sentinel.write_text(f"#!/bin/sh\necho \"$@\" >> {started}\nexit 1\n")
    sentinel.chmod(sentinel.stat().st_mode | stat.S_IXUSR)
    env = {**_env(tmp_path), "HWBENCH_BROWSER": str(sentinel)}
    proc = subprocess.Popen([sys.executable, "-m", "hwsel", "predict", "--model", "bert-tiny", "--hardware", "cpu",
                             "--json"], cwd=tmp_path, env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    seen: set[str] = set()
    parent = psutil.Process(proc.pid)
    deadline = time.monotonic() + 300
    while proc.poll() is None and time.monotonic() < deadline:
        try:
            seen |= {" ".join(c.cmdline()[:1]) for c in parent.children(recursive=True)}
        except psutil.Error:
            pass
        time.sleep(0.02)
    out, err = proc.communicate(timeout=60)
    assert proc.returncode == 0, err
    assert json.loads(out)["predictions"]["cpu"]["device_source"] == "detected"  # the CPU was probed ...
    assert not started.exists(), started.read_text()  # ... and nothing started the browser
    assert not any("chrom" in c.lower() for c in seen), seen


def test_select_marks_targets_this_machine_lacks(tmp_path: Path) -> None:
    out = subprocess.run([sys.executable, "-m", "hwsel", "select", "--model", "bert-base-uncased", "--batch-size", "8",
                          "--hardware", "cpu", "cuda"], cwd=tmp_path, env=_env(tmp_path), capture_output=True,
                         text=True, timeout=300, check=False)
    assert out.returncode == 0, out.stderr
    text = out.stdout
    if _cuda_here():
        assert "not on this machine" not in text, text
    else:
        assert "cuda (not on this machine: roofline for " in text, text  # in primary/fallbacks
        assert "[not on this machine: roofline for " in text, text  # and on cuda's own line
    assert "cpu (not on this machine" not in text, text  # every machine has a CPU


def test_train_names_the_metric_behind_its_score(tmp_path: Path) -> None:
    from hwsel.data import load_runs

    runs = load_runs(str(SNAPSHOT))
    small = runs[runs["model"].isin(("bert-tiny", "gpt2-tiny")) & runs["batch_size"].isin([1, 4])]
    source = tmp_path / "runs.parquet"
    small.to_parquet(source, index=False)
    uri = f"sqlite:///{tmp_path / 'mlflow.db'}"
    out = subprocess.run([sys.executable, "-m", "hwsel", "train", "--source", str(source), "--tracking-uri", uri,
                          "--trials", "1", "--no-progress"], cwd=tmp_path, env=_env(tmp_path), capture_output=True,
                         text=True, timeout=900, check=False)
    assert out.returncode == 0, out.stderr
    lines = [line for line in out.stdout.splitlines() if "score" in line]
    assert lines, out.stdout
    for line in lines:
        assert "(mean |log(predicted / measured)| over held-out folds" in line, line
        assert "lower is better" in line, line


@pytest.mark.parametrize("command", ["predict", "select", "serve", "train"])
def test_every_store_command_takes_a_timeout(command: str) -> None:
    out = subprocess.run([sys.executable, "-m", "hwsel", command, "--help"], env={**os.environ, "PYTHONPATH": str(ROOT)},
                         capture_output=True, text=True, timeout=120, check=False)
    assert out.returncode == 0
    if command != "train":
        assert "--timeout SECONDS" in out.stdout, out.stdout
