"""The README tells the truth: its first two commands are what CI runs, and its runnable block
runs as written on this machine, in a fresh folder, doing what its comments say."""

from __future__ import annotations

import re
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
README = (ROOT / "README.md").read_text(encoding="utf-8")
CI_RUN = (ROOT / ".ci" / "run").read_text(encoding="utf-8")
BLOCKS = ROOT / ".ci" / "readme_blocks.py"


def _first_block() -> list[str]:
    block = re.search(r"```bash\n(.*?)\n```", README, re.DOTALL)
    assert block, "the README starts with a bash block"
    return [line.split("#", 1)[0].strip() for line in block.group(1).splitlines()]


def test_the_readme_starts_with_the_main_job_and_the_tests_and_ci_runs_both():
    main_job, tests = _first_block()
    assert main_job == 'pytest bench_suites -m "cpu and quick"'
    assert tests == "pytest tests"
    ci_lines = [line.strip() for line in CI_RUN.splitlines()]
    assert main_job in ci_lines
    # the README's test command as written, with the slowest tests printed, and the e2e tier after it
    assert f"{tests} --durations=20" in ci_lines and f"{tests} -m e2e -n 3 --dist loadgroup --durations=30" in ci_lines


def test_the_readme_names_what_ci_adds():
    """Every tool `.ci/run` installs or runs besides the two commands is named in the README."""
    for needle in ("chromium", "npm", "hwbench web install", "ruff check", "hwbench detect", "postgresql"):
        assert needle in CI_RUN.lower(), needle
        assert needle in README.lower(), f"the README does not say that .ci/run adds {needle!r}"


def test_the_torch_install_line_says_why_its_order_matters():
    assert "pip install torch==2.13.0 --index-url https://download.pytorch.org/whl/cpu" in README
    setup = README.split("pip install torch==2.13.0", 1)[1].split('pip install -e ".[all]"', 1)[0]
    assert "first" in setup


@pytest.mark.e2e
def test_the_first_hour_block_runs_as_written(tmp_path):
    listed = subprocess.run([sys.executable, str(BLOCKS), "--list"], capture_output=True, text=True, check=True)
    commands = listed.stdout.splitlines()
    assert commands and all(shutil.which(c.split()[0]) for c in commands), commands
    assert all("cuda" not in c for c in commands), "the first hour asks about this machine's own hardware"
    proc = subprocess.run([sys.executable, str(BLOCKS), "--workdir", str(tmp_path)], capture_output=True, text=True,
                          timeout=900, check=False)
    out = proc.stdout + proc.stderr
    assert proc.returncode == 0, out[-4000:]
    assert f"[{len(commands)}/{len(commands)}] exit 0" in out
    # "hwbench report  # ... mlruns/report/": the report lands in the store, not in the working tree
    assert (tmp_path / "mlruns" / "report" / "report.md").is_file()
    assert not (tmp_path / "hwbench-report").exists()
    assert re.search(r"^[0-9a-f]{32} .* 1\s*$", out, re.MULTILINE), "hwbench sessions lists the one session"
