"""What a session is and where this process runs in it: its `SessionInfo`, the command line's
paths that name nothing, and each xdist worker's placement (its GPU and a slice of the cores)."""

from __future__ import annotations

import datetime as _dt
import os
import socket
import subprocess
from collections.abc import Iterable
from dataclasses import dataclass
from pathlib import Path

import pytest

from ..hardware import detect_hardware
from ..plugin_api import core_versions
from ..record import SessionInfo
from ..torch_device import INDEXED_TARGETS


def _git(*args: str) -> str:
    try:
        return subprocess.run(["git", *args], capture_output=True, text=True, timeout=5, check=False).stdout.strip()
    except (OSError, subprocess.SubprocessError):
        return ""


def runner_label() -> str:
    """The CI runner's label: HWBENCH_RUNNER, else the usual CI variables, else ''."""
    names = ("HWBENCH_RUNNER", "RUNNER_NAME", "CI_RUNNER_DESCRIPTION", "BUILDKITE_AGENT_NAME", "NODE_NAME")
    return next((os.environ[name] for name in names if os.environ.get(name)), "")


def pytest_hwbench_package_versions(config: pytest.Config) -> dict[str, str]:
    return core_versions()


def _what_runs(config: pytest.Config) -> dict[str, str]:
    """What the session runs, for names people read: ``suite`` (the test paths, from the rootdir)
    and ``markers`` (the ``-m`` expression)."""
    paths = []
    for arg in config.args:
        path, sep, rest = str(arg).partition("::")
        try:
            shown = Path(path).resolve().relative_to(config.rootpath).as_posix()
        except (ValueError, OSError):
            shown = path
        paths.append(shown + sep + rest)
    out = {"suite": ",".join(paths) or "."}
    if config.option.markexpr:
        out["markers"] = str(config.option.markexpr)
    return out


def describe_session(config: pytest.Config, session_id: str, hardware: Iterable[str]) -> SessionInfo:
    """The `SessionInfo` of session `session_id`, which holds cases on `hardware`: host, git commit
    and branch, runner label, hardware (the CPU and `hardware`), package versions, what it runs."""
    return SessionInfo(
        session_id=session_id,
        started_at=_dt.datetime.now(_dt.timezone.utc).isoformat(),
        host=socket.gethostname(),
        git_commit=_git("rev-parse", "HEAD"),
        git_branch=_git("rev-parse", "--abbrev-ref", "HEAD"),
        runner_label=runner_label(),
        hardware_summary=detect_hardware(targets=["cpu", *sorted(set(hardware))]).summary(),
        package_versions={k: v for answer in config.hook.pytest_hwbench_package_versions(config=config)
                          for k, v in answer.items()},
        extra=_what_runs(config),
    )


def missing_paths(config: pytest.Config) -> list[str]:
    """The test paths and node ids on the command line that name nothing, as serial pytest refuses
    them (an xdist controller only hears of empty collections): a missing file, or one that defines
    no class or function of each ``::`` name (parameter ids in brackets left out)."""
    if config.option.pyargs:  # arguments may be module names, not paths
        return []
    here = Path(config.invocation_params.dir)
    missing: list[str] = []
    for arg in map(str, config.args):
        path, _, names = arg.partition("::")
        file = here / path
        if not file.exists():
            missing.append(arg)
        elif names and file.is_file() and file.suffix == ".py":
            import ast

            try:
                tree = ast.parse(file.read_text(encoding="utf-8", errors="replace"))
            except SyntaxError:
                continue  # pytest reports the collection error itself
            defined = {node.name for node in ast.walk(tree)
                       if isinstance(node, ast.FunctionDef | ast.AsyncFunctionDef | ast.ClassDef)}
            if any(name.partition("[")[0] not in defined for name in names.split("::") if name):
                missing.append(arg)
    return missing


@dataclass(frozen=True)
class Placement:
    """Where this process runs cases: device index for accelerators, CPU cores for the host."""

    worker: str
    device_index: int
    cpu_affinity: tuple[int, ...]


def place_worker(config: pytest.Config) -> Placement:
    """Give this process, one of several xdist workers, its own GPU and a disjoint slice of the
    usable cores (probing torch's GPU runtimes); a lone process uses device 0 and all its cores."""
    cores: tuple[int, ...] = tuple(sorted(os.sched_getaffinity(0))) if hasattr(os, "sched_getaffinity") else ()
    workerinput = getattr(config, "workerinput", None)
    if workerinput is None:
        return Placement("main", 0, cores)
    worker = str(workerinput["workerid"])
    index, count = int(worker.lstrip("gw") or 0), int(workerinput.get("workercount", 1))
    if count <= 1:
        return Placement(worker, 0, cores)
    if cores:
        share = max(1, len(cores) // count)
        mine = cores[(index * share) % len(cores):][:share]
        os.sched_setaffinity(0, mine)
        cores = mine
    hw = detect_hardware(targets=INDEXED_TARGETS)
    gpus = max((len(hw[t].devices) for t in INDEXED_TARGETS if t in hw.targets and hw[t].available), default=0)
    return Placement(worker, index % gpus if gpus else 0, cores)
