"""`hwbench ab`: the paired verdict, the side options, a real A/B job of two worker processes
(one with a planted slowdown through a third-party backend) whose two sessions land in DuckDB and
MLflow tagged as one pair and compare again as a pair, and an A/B job of two real environments (a
second venv with another onnxruntime, whose startup plants the slowdown) in which each side imports
and records its own packages."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import time
import venv
from dataclasses import dataclass
from pathlib import Path

import pytest

from pytest_hwbench.ab import format_versions, parse_env, parse_side_options
from pytest_hwbench.ab_worker import SideEnvironment
from pytest_hwbench.verdict import paired_verdict

#: Their verdicts rest on how fast this machine measures: one at a time under `--dist loadgroup`.
pytestmark = pytest.mark.xdist_group("timing")

#: The third-party backend ``gate-torch`` that plants a slowdown (``HWBENCH_GATE_WORK``), as a
#: distribution to put on PYTHONPATH: the one `benchmarks/gate_quality.py` plants its slowdowns with.
GATE_SITE = Path(__file__).resolve().parents[1] / "benchmarks" / "gate_site"


def test_the_paired_verdict_judges_per_round_ratios() -> None:
    slower = paired_verdict("c", [1.31, 1.28, 1.33, 1.30, 1.29])
    assert slower.verdict == "regression" and slower.change == pytest.approx(0.30, abs=0.02) and slower.p_value < 0.05
    assert paired_verdict("c", [0.80, 0.79, 0.81]).verdict == "improvement"
    same = paired_verdict("c", [1.01, 0.99, 1.00, 1.02])
    assert same.verdict == "unchanged" and -0.05 <= same.low < same.high <= 0.05
    wild = paired_verdict("c", [0.5, 2.5, 1.4, 0.9])
    assert wild.verdict == "inconclusive" and "more rounds would tell" in wild.note
    assert paired_verdict("c", [1.5, 1.5]).note == "2 paired rounds; need 3"
    # A mean change inside the threshold whose interval reaches past it is not unchanged (a point
    # estimate of +1 % at p 0.9 over 18 rounds, interval about -5 % to +6 %).
    ratios = [1.18, 0.88, 1.08, 0.84, 1.15, 0.95, 1.03, 0.87, 1.20, 0.98, 1.04, 0.92, 1.12, 0.89, 1.09, 0.97,
              1.02, 0.94]
    loose = paired_verdict("c", ratios)
    assert abs(loose.change) < 0.05 and loose.verdict == "inconclusive" and loose.high > 0.05


def test_side_options_and_environments_are_checked() -> None:
    settings = parse_side_options("--hwbench-min-time 0.5 --hwbench-warmup=1")
    assert settings["min_time_s"] == 0.5 and settings["warmup_iterations"] == 1
    with pytest.raises(ValueError, match=r"option '--hwbench-models' cannot vary between ab sides; accepted: "):
        parse_side_options("--hwbench-models bert-tiny")
    with pytest.raises(ValueError, match="--hwbench-min-iterations: 'x' is not an integer"):
        parse_side_options("--hwbench-min-iterations x")
    with pytest.raises(ValueError, match="'FOO' is not NAME=VALUE"):
        parse_env(["FOO"])


def test_ab_refuses_bad_usage_with_exit_2(capsys) -> None:
    import pytest_hwbench.ab  # noqa: F401 - registers the command
    from pytest_hwbench.cli import main

    assert main(["ab", "--models", "bert-tiny", "--a-options", "--hwbench-models x", "--no-sinks"]) == 2
    assert "cannot vary between ab sides" in capsys.readouterr().err
    assert main(["ab", "--models", "nope-model", "--no-sinks"]) == 2
    assert "nope-model not in the model zoo" in capsys.readouterr().err
    assert main(["ab", "--models", "bert-tiny", "--rounds", "2", "--no-sinks"]) == 2
    assert "at least 3 rounds" in capsys.readouterr().err
    assert main(["ab", "--models", "bert-tiny", "--threshold", "-1", "--no-sinks"]) == 2
    assert "--threshold must be a finite number >= 0 (0.10 = 10 %), got -1.0" in capsys.readouterr().err
    assert main(["ab", "--models", "bert-tiny", "--alpha", "5", "--no-sinks"]) == 2
    assert "--alpha must be in (0, 1), e.g. 0.05, got 5.0" in capsys.readouterr().err


def test_the_version_header_names_what_differs_between_the_sides() -> None:
    def side(python: str, **versions: str) -> SideEnvironment:
        return SideEnvironment("/venv/bin/python", python, versions, "cpu")

    same = {"A": side("3.11.7", torch="2.13.0"), "B": side("3.11.7", torch="2.13.0")}
    assert format_versions(same) == "same package versions on both sides"
    differ = {"A": side("3.11.7", onnxruntime="1.32.0", torch="2.13.0", openvino="2025.1"),
              "B": side("3.12.1", onnxruntime="1.22.1", torch="2.13.0")}
    assert format_versions(differ) == ("A: python 3.11.7, onnxruntime 1.32.0, openvino 2025.1 | "
                                       "B: python 3.12.1, onnxruntime 1.22.1, openvino not installed")


def _hwbench(args: list[str], env: dict[str, str], cwd: Path) -> subprocess.CompletedProcess[str]:
    code = "import sys; from pytest_hwbench.cli import main; sys.exit(main(sys.argv[1:]))"
    return subprocess.run([sys.executable, "-c", code, *args], env=env, cwd=cwd, capture_output=True, text=True,
                          timeout=900)


@pytest.mark.e2e
def test_ab_finds_a_planted_slowdown_and_lands_the_pair_in_duckdb_and_mlflow(tmp_path: Path) -> None:
    env = {k: v for k, v in os.environ.items() if k not in ("MLFLOW_TRACKING_URI", "PYTEST_ADDOPTS")}
    env["PYTHONPATH"] = os.pathsep.join([str(GATE_SITE), env.get("PYTHONPATH", "")])
    env["HWBENCH_CACHE_DIR"] = str(tmp_path / "cache")
    store = tmp_path / "store"
    # Two option sets; B's worker also does 3x the work of each call (a planted slowdown).
    proc = _hwbench(["ab", "--models", "bert-tiny", "--backends", "gate-torch", "--rounds", "5", "--threads", "1",
                     "--store", str(store),
                     "--a-options", "--hwbench-min-time 0.1 --hwbench-warmup 2",
                     "--b-options", "--hwbench-min-time=0.1 --hwbench-warmup 1", "--b-env", "HWBENCH_GATE_WORK=3"],
                    env, tmp_path)
    out = proc.stdout
    assert proc.returncode == 1, out + proc.stderr  # a regression in B
    assert "hwbench ab: round 5 of 5" in out
    line = next(ln for ln in out.splitlines() if ln.startswith("bert-tiny-cpu-gate-torch-fp32-b1"))
    assert " regression " in line, out
    pair = out.split("`hwbench compare pair:")[1].split("`")[0]

    from pytest_hwbench.sinks import list_sessions, load_records, read_records

    sessions = list_sessions(store / "hwbench.duckdb")
    sides = {e["ab_side"]: sid for sid, e in zip(sessions["session_id"], sessions["extra"], strict=True)
             if e.get("ab_pair") == pair}
    assert set(sides) == {"A", "B"}
    records = load_records(store / "hwbench.duckdb")
    # 5 rounds, and as many more as the case needed to be decided (each measured on both sides)
    rounds = sorted((r.extra["ab_side"], r.extra["ab_round"]) for r in records)
    measured = len(rounds) // 2
    assert measured >= 5 and rounds == [(side, n) for side in "AB" for n in range(measured)]
    assert {r.session_id for r in records if r.extra["ab_side"] == "B"} == {sides["B"]}

    uri = f"sqlite:///{store / 'mlflow.db'}"
    in_mlflow = read_records(uri, experiment="hwbench")
    assert {r.session_id for r in in_mlflow} == set(sides.values()) and len(in_mlflow) == 2 * measured
    import mlflow

    client = mlflow.MlflowClient(uri)
    experiment = client.get_experiment_by_name("hwbench")
    parents = client.search_runs([experiment.experiment_id], "tags.`hwbench.kind` = 'session'")
    tagged = [json.loads(run.data.tags["hwbench.extra"]) for run in parents]
    assert sorted(t["ab_side"] for t in tagged if t.get("ab_pair") == pair) == ["A", "B"]

    again = _hwbench(["compare", f"pair:{pair}", "--store", str(store)], env, tmp_path)
    assert again.returncode == 1, again.stdout + again.stderr
    # the pair judged again round by round, by the same contract: the same verdict
    again_line = next(ln for ln in again.stdout.splitlines() if ln.startswith("bert-tiny-cpu-gate-torch-fp32-b1"))
    assert again_line.split()[1] == "regression" and "decisiveness" in again.stdout


#: onnxruntime versions the second venv may install: the first that differs from the controller's.
OTHER_ONNXRUNTIME = ("1.22.1", "1.24.4")


@dataclass(frozen=True)
class OtherVenv:
    """A second environment: its python, and the onnxruntime version installed in it."""

    python: Path
    onnxruntime: str


@pytest.fixture(scope="module")
def other_venv(tmp_path_factory: pytest.TempPathFactory) -> OtherVenv:
    """A venv of this interpreter's base python with packages of its own: another onnxruntime
    (from the package registry, without its dependencies: those come from the controller's
    environment, after the venv's own), and a ``.pth`` file that sets ``HWBENCH_GATE_WORK=3`` when
    its python starts, so the third-party backend ``gate-torch`` does 3x the work in this venv only."""
    import onnxruntime

    version = next(v for v in OTHER_ONNXRUNTIME if v != onnxruntime.__version__)
    root = tmp_path_factory.mktemp("venv-b")
    venv.create(root, with_pip=False)  # from sys._base_executable: none of this venv's packages
    python = root / "bin" / "python"
    pip = subprocess.run([sys.executable, "-m", "pip", "--python", str(python), "install", "--no-deps",
                          "--disable-pip-version-check", "--no-input", f"onnxruntime=={version}"],
                         capture_output=True, text=True, timeout=600)
    if pip.returncode != 0:
        pytest.fail(f"pip could not install onnxruntime=={version} from the package registry into {root} (is the "
                    f"registry reachable from here?):\n{pip.stdout[-2000:]}\n{pip.stderr[-2000:]}", pytrace=False)
    site_packages = subprocess.run([str(python), "-c", "import sysconfig; print(sysconfig.get_paths()['purelib'])"],
                                   capture_output=True, text=True, check=True).stdout.strip()
    (Path(site_packages) / "hwbench_gate_work.pth").write_text(
        "import os; os.environ['HWBENCH_GATE_WORK'] = '3'\n")
    return OtherVenv(python, version)


def test_ab_sides_in_two_environments_import_and_record_their_own_packages(tmp_path: Path,
                                                                          other_venv: OtherVenv) -> None:
    import onnxruntime

    env = {k: v for k, v in os.environ.items()
           if k not in ("MLFLOW_TRACKING_URI", "PYTEST_ADDOPTS", "HWBENCH_GATE_WORK")}
    env["PYTHONPATH"] = os.pathsep.join([str(GATE_SITE), env.get("PYTHONPATH", "")])
    env["HWBENCH_CACHE_DIR"] = str(tmp_path / "cache")
    store = tmp_path / "store"
    # 5 rounds of 0.1 s per side, as above: fewer or shorter ones leave a 3x change undecided on a busy runner
    proc = _hwbench(["ab", "--models", "bert-tiny", "--backends", "onnxruntime,gate-torch", "--rounds", "5",
                     "--threads", "1", "--store", str(store), "--b-python", str(other_venv.python),
                     "--a-options", "--hwbench-min-time 0.1", "--b-options", "--hwbench-min-time 0.1"],
                    env, tmp_path)
    out = proc.stdout
    assert proc.returncode == 1, out + proc.stderr  # a regression in B: its venv plants 3x gate-torch work
    header = f"A: onnxruntime {onnxruntime.__version__} | B: onnxruntime {other_venv.onnxruntime}"
    lines = out.splitlines()
    table = lines.index(next(ln for ln in lines if ln.startswith("case_id")))
    assert lines[table - 1] == header, out
    gate = next(ln for ln in lines if ln.startswith("bert-tiny-cpu-gate-torch-fp32-b1"))
    assert " regression " in gate, out
    assert any(ln.startswith("bert-tiny-cpu-onnxruntime-fp32-b1") for ln in lines), out
    pair = out.split("`hwbench compare pair:")[1].split("`")[0]

    from pytest_hwbench.sinks import list_sessions, load_records

    sessions = list_sessions(store / "hwbench.duckdb")
    sides = {e["ab_side"]: (sid, versions, e, hw) for sid, versions, e, hw in zip(
        sessions["session_id"], sessions["package_versions"], sessions["extra"], sessions["hardware_summary"],
        strict=True) if e.get("ab_pair") == pair}
    assert set(sides) == {"A", "B"}
    expected = {"A": (onnxruntime.__version__, sys.executable), "B": (other_venv.onnxruntime, str(other_venv.python))}
    for side, (ort, python) in expected.items():
        _, versions, extra, hardware = sides[side]
        assert versions["onnxruntime"] == ort and versions["pytest-hwbench"], (side, versions)
        assert extra["python"] == python and extra["python_version"] == ".".join(map(str, sys.version_info[:3]))
        assert hardware and hardware == sides["A"][3]
    # what each side measured with: the version its worker imported
    measured = {(r.session_id, r.extra["onnxruntime_version"]) for r in load_records(store / "hwbench.duckdb")
                if r.backend == "onnxruntime" and not r.error}
    assert measured == {(sides[side][0], ort) for side, (ort, _) in expected.items()}


#: A side B that dies: its python loads this first (PYTHONPATH) and ends the process at its third case.
_DIE_AT_THIRD_CASE = """
import os

import pytest_hwbench.runner as runner

_run, _calls = runner.Runner.run, []


def _run_or_die(self, *args, **kwargs):
    _calls.append(1)
    if len(_calls) > 2:
        os._exit(9)
    return _run(self, *args, **kwargs)


runner.Runner.run = _run_or_die
"""


@pytest.mark.e2e
def test_a_side_that_hangs_at_start_or_dies_mid_run_is_named_and_its_rounds_kept(tmp_path: Path) -> None:
    env = {k: v for k, v in os.environ.items() if k not in ("MLFLOW_TRACKING_URI", "PYTEST_ADDOPTS")}
    env["HWBENCH_CACHE_DIR"] = str(tmp_path / "cache")
    hangs = tmp_path / "hangs"
    hangs.write_text("#!/bin/sh\nexec sleep 600\n")
    dies_dir = tmp_path / "dies"
    dies_dir.mkdir()
    (dies_dir / "sitecustomize.py").write_text(_DIE_AT_THIRD_CASE)
    dies = tmp_path / "dies.sh"
    dies.write_text(f'#!/bin/sh\nPYTHONPATH="{dies_dir}:$PYTHONPATH" exec "{sys.executable}" "$@"\n')
    for script in (hangs, dies):
        script.chmod(0o755)
    base = ["ab", "--models", "bert-tiny", "--rounds", "3", "--threads", "1", "--a-options", "--hwbench-min-time 0.05",
            "--b-options", "--hwbench-min-time 0.05"]

    began = time.monotonic()
    # side A starts first: a good side needs more than 5 s on a busy runner (torch, hardware detection)
    proc = _hwbench([*base, "--no-sinks", "--a-python", str(hangs), "--side-timeout", "5"], env, tmp_path)
    assert proc.returncode == 3 and time.monotonic() - began < 120, proc.stdout + proc.stderr
    assert (f"hwbench ab: error: side A (python {hangs}, --hwbench-min-time 0.05) did not start within 5 s (--side-timeout); after 0 "
            "complete rounds; no complete round to keep") in proc.stderr, proc.stderr

    store = tmp_path / "store"
    proc = _hwbench([*base, "--store", str(store), "--b-python", str(dies)], env, tmp_path)
    out = proc.stdout + proc.stderr
    assert proc.returncode == 3, out
    assert f"hwbench ab: error: side B (python {dies}, --hwbench-min-time 0.05) failed: " in proc.stderr, out
    assert "after 2 complete rounds; the rounds before it are judged and written below" in proc.stderr, out
    line = next(ln for ln in proc.stdout.splitlines() if ln.startswith("bert-tiny-cpu-torch-fp32-b1"))
    assert " inconclusive " in line and "2 paired rounds; need 3" in line, out
    from pytest_hwbench.sinks import load_records

    kept = sorted((r.extra["ab_side"], r.extra["ab_round"]) for r in load_records(store / "hwbench.duckdb"))
    assert kept == [("A", 0), ("A", 1), ("B", 0), ("B", 1)]
