"""Sessions: tests, lint, per-hardware benchmarks. `nox -l` lists them."""

from __future__ import annotations

import importlib.util
import os
import sys
from pathlib import Path

import nox

nox.options.sessions = ["lint", "tests"]
nox.options.reuse_existing_virtualenvs = True


def _facts():  # the target table (standard library only), read without installing the package
    spec = importlib.util.spec_from_file_location("hwbench_facts", Path(__file__).parent / "pytest_hwbench" / "facts.py")
    module = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = module  # dataclasses look their module up while a class is built
    spec.loader.exec_module(module)
    return module


_FACTS = _facts()
#: The web targets (onnxruntime-web in headless Chromium), run together by "bench(web)".
WEB_MARKERS = " or ".join(_FACTS.target_names("web"))
#: One benchmark session per marked target of the facts table, the web targets as one ("web").
HARDWARE = [name for name in _FACTS.marker_docs() if name not in _FACTS.target_set("web")] + ["web"]
#: Targets whose runners install torch's default (GPU) build.
GPU_TARGETS = _FACTS.target_set("accelerator")
# The CPU wheel that lies on the CI disk; GPU runners get the default (CUDA) build instead.
CPU_TORCH = os.environ.get("HWBENCH_TORCH", "torch==2.13.0")
GPU_TORCH = os.environ.get("HWBENCH_TORCH", "torch>=2.4")


def _install(session: nox.Session, torch_spec: str, extras: str) -> None:
    session.install(torch_spec)
    session.install("-e", f".[{extras}]")


@nox.session
def tests(session: nox.Session) -> None:
    """Run the fast tier of the tests (real MLflow/DuckDB stores, tiny real models), as the README's `pytest tests`."""
    _install(session, CPU_TORCH, "all")
    session.run("pytest", "tests", "--strict-markers", "--strict-config", *session.posargs)


@nox.session(default=False)
def e2e(session: nox.Session) -> None:
    """Run the end-to-end tier of the tests (nested sessions, servers, Chromium, trainings), as .ci/run does."""
    _install(session, CPU_TORCH, "all")
    session.run("pytest", "tests", "-m", "e2e", "-n", "3", "--dist", "loadgroup", "--strict-markers", "--strict-config", *session.posargs)


@nox.session(default=False)
def test_time(session: nox.Session) -> None:
    """Print what the test suite costs: wall time per tier and the slowest tests (benchmarks/test_time.py)."""
    _install(session, CPU_TORCH, "all")
    session.run("python", "benchmarks/test_time.py", *session.posargs)


@nox.session
def lint(session: nox.Session) -> None:
    """Lint with ruff."""
    session.install("ruff>=0.6")
    session.run("ruff", "check", "pytest_hwbench", "hwsel", "bench_suites", "tests", "benchmarks", "noxfile.py",
                *session.posargs)


@nox.session(default=False)
@nox.parametrize("hardware", HARDWARE, ids=HARDWARE)  # ids: the sessions are "bench(cuda)", "bench(web)"...
def bench(session: nox.Session, hardware: str) -> None:
    """Run the benchmark suite for one hardware marker, e.g. nox -s "bench(cuda)"."""
    gpu = hardware in GPU_TARGETS
    _install(session, GPU_TORCH if gpu else CPU_TORCH, "all" if hardware != "qnn" else "all,qnn")
    if hardware == "web":  # onnxruntime-web from npm (the browser is the system's: see the README)
        session.run("hwbench", "web", "install")
    marker = WEB_MARKERS if hardware == "web" else hardware
    session.run("pytest", "bench_suites", "-m", marker, "--strict-markers", "-rs", *session.posargs)


@nox.session(default=False)
def smoke(session: nox.Session) -> None:
    """Run the quick CPU tier (tiny models), as CI does."""
    _install(session, CPU_TORCH, "all")
    session.run("pytest", "bench_suites", "-m", "cpu and quick", "--strict-markers", *session.posargs)
