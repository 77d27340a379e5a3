"""What does one benchmark invocation cost besides its cases? Two checkouts, side by side.

The fixed cost of an invocation is what it pays before and around its cases (pytest start and
collection, imports at option time, FLOP counting, sink writes). This measures the fixed cost of
the acceptance command

    pytest bench_suites/test_inference.py -m cpu --hwbench-models bert-tiny \
        --hwbench-batch-sizes 1 --hwbench-backends torch

for a "before" git revision and an "after" tree (default: this working tree), interleaved
(before, after, after, before, ...) so that a slow stretch of a noisy machine hits both sides
and each side runs first in half of the rounds, and prints medians and minima.

Each side runs its own code and its own entry-point metadata: a throwaway venv per side (no
pip, no torch of its own) whose site-packages holds a ``.pth`` line naming this interpreter's
site-packages (so torch, mlflow, ... resolve; ``.pth`` files in a directory added that way are
not processed, so the editable finder of the main checkout stays off), and the side's tree
installed into it with ``pip install --no-deps --no-build-isolation -e``. Its own dist-info is
first on ``sys.path``, so ``importlib.metadata`` (first distribution of a name wins) reads that
side's entry points; the script prints where ``pytest11: hwbench`` and ``pytest_hwbench``
resolve on each side and refuses to measure if either points at the other tree.

Definitions (each printed with the table):

- pytest's own start: ``pytest -p no:hwbench --co -q`` of a one-test file in an empty folder:
  the interpreter, pytest and the other installed pytest plugins (xdist, benchmark, timeout),
  which any pytest run in this environment pays, the hwbench plugin disabled.
- fixed cost: wall time of the whole acceptance command minus its cases' own time (setup + call
  of each test, taken by a small timing plugin loaded with ``-p``); above pytest's start: fixed
  cost minus pytest's own start. The aim is <= 3 s.

The whole command writes to a store per side in a temporary folder (``--hwbench-store``), warmed
by one untimed run first (its figures are shown as "fresh store"), never the repository's
``mlruns/``; pytest's cache goes there too.

    python benchmarks/fixed_cost.py [--before 5c859b2] [--after .] [--repeats 5] [--json out.json]
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import statistics
import subprocess
import sys
import sysconfig
import tempfile
import time
from pathlib import Path
from typing import Any

REPO = Path(__file__).resolve().parent.parent
SUITE_ARGS = ["bench_suites/test_inference.py", "-m", "cpu", "--hwbench-models", "bert-tiny",
              "--hwbench-batch-sizes", "1", "--hwbench-backends", "torch"]
AIM_S = 3.0
OWN_START = "pytest's own start (hwbench blocked, --co, empty)"

#: Loaded with ``-p fc_timing``: monotonic timestamps (comparable across processes on Linux) of
#: the phases of a run, written at exit to $FC_TIMING_OUT.
TIMING_PLUGIN = r'''
import atexit, json, os, time
import pytest

_t = {"plugin_import": time.monotonic()}
_cases = []


def _write():
    _t["atexit"] = time.monotonic()
    with open(os.environ["FC_TIMING_OUT"], "w") as fh:
        json.dump({"marks": _t, "cases": _cases}, fh)


atexit.register(_write)  # registered first, so it runs after the atexit handlers of later imports


@pytest.hookimpl(tryfirst=True)
def pytest_cmdline_main(config):  # options parsed (plugins imported, pytest_addoption run)
    _t["options_parsed"] = time.monotonic()


@pytest.hookimpl(trylast=True)
def pytest_configure(config):  # every plugin's pytest_configure done
    _t["configure_end"] = time.monotonic()


@pytest.hookimpl(wrapper=True)
def pytest_sessionstart(session):
    _t["sessionstart_begin"] = time.monotonic()
    try:
        return (yield)
    finally:
        _t["sessionstart_end"] = time.monotonic()


@pytest.hookimpl(wrapper=True)
def pytest_collection(session):
    _t["collection_begin"] = time.monotonic()
    try:
        return (yield)
    finally:
        _t["collection_end"] = time.monotonic()


def _phase(name):
    @pytest.hookimpl(wrapper=True)
    def hook(item):
        begin = time.monotonic()
        try:
            return (yield)
        finally:
            _cases.append({"nodeid": item.nodeid, "phase": name, "begin": begin, "end": time.monotonic()})
    return hook


pytest_runtest_setup = _phase("setup")
pytest_runtest_call = _phase("call")
pytest_runtest_teardown = _phase("teardown")


@pytest.hookimpl(wrapper=True)
def pytest_sessionfinish(session):
    _t["sessionfinish_begin"] = time.monotonic()
    try:
        return (yield)
    finally:
        _t["sessionfinish_end"] = time.monotonic()


@pytest.hookimpl(wrapper=True)
def pytest_unconfigure(config):
    _t["unconfigure_begin"] = time.monotonic()
    try:
        return (yield)
    finally:
        _t["unconfigure_end"] = time.monotonic()
'''


class Failure(Exception):
    """A step that makes the comparison meaningless: the message says which and why."""


def log(line: str) -> None:
    print(f"fixed_cost: {line}", file=sys.stderr, flush=True)


def run(cmd: list[str], *, cwd: Path, env: dict[str, str] | None = None, check: bool = True,
        timeout: float = 900) -> tuple[float, subprocess.CompletedProcess[str]]:
    """Run `cmd`, return (wall seconds, the completed process)."""
    start = time.monotonic()
    proc = subprocess.run(cmd, cwd=cwd, env=env, capture_output=True, text=True, timeout=timeout, check=False)
    wall = time.monotonic() - start
    if check and proc.returncode != 0:
        raise Failure(f"{' '.join(cmd)} (in {cwd}) exited {proc.returncode}:\n{proc.stdout[-3000:]}\n"
                      f"{proc.stderr[-3000:]}")
    return wall, proc


# --- sides ------------------------------------------------------------------------------------

class Side:
    """One checkout with a venv of its own that sees the main venv's packages but its own dist."""

    def __init__(self, name: str, tree: Path, work: Path) -> None:
        self.name = name
        self.tree = tree
        self.venv = work / f"venv-{name}"
        self.store = work / f"store-{name}"
        self.python = self.venv / "bin" / "python"
        self.pytest = self.venv / "bin" / "pytest"
        self.where: dict[str, str] = {}

    def env(self, **extra: str) -> dict[str, str]:
        env = {k: v for k, v in os.environ.items() if k not in ("PYTHONPATH", "VIRTUAL_ENV", "PYTHONHOME")}
        env["PATH"] = f"{self.venv / 'bin'}{os.pathsep}{env.get('PATH', '')}"
        env["VIRTUAL_ENV"] = str(self.venv)
        env.update(extra)
        return env

    def create(self, base_sites: list[Path]) -> None:
        run([sys.executable, "-m", "venv", "--without-pip", str(self.venv)], cwd=self.tree)
        _, proc = run([str(self.python), "-c", "import sysconfig; print(sysconfig.get_paths()['purelib'])"],
                      cwd=self.tree)
        site = Path(proc.stdout.strip())
        # Plain path lines: the main venv's packages come after this venv's own site-packages, and
        # .pth files there are not processed. They are the filtered copies (`base_site_view`): pytest
        # loads pytest11 plugins of every distribution on sys.path, duplicates included (pluggy's
        # load_setuptools_entrypoints), so the main checkout's metadata must not be visible at all.
        (site / "zzz_fixed_cost_base.pth").write_text("".join(f"{path}\n" for path in base_sites))
        # pytest's own console script with this side's interpreter; not `python -m pytest`, which
        # puts the cwd (a tree with its own egg-info) first on sys.path.
        script = (Path(sys.executable).parent / "pytest").read_text().split("\n", 1)[1]
        self.pytest.write_text(f"#!{self.python}\n{script}")
        self.pytest.chmod(0o755)
        log(f"{self.name}: pip install --no-deps --no-build-isolation -e {self.tree}")
        run([str(self.python), "-m", "pip", "install", "-q", "--no-deps", "--no-build-isolation",
             "--disable-pip-version-check", "-e", str(self.tree)], cwd=self.tree, env=self.env())
        self.verify()

    def blocked(self) -> list[str]:
        """``-p no:NAME`` for every pytest11 plugin of this side's distribution (a side may have
        several, and the others need hwbench's hook specifications)."""
        return [arg for ep in self.where["entry_points"] for arg in ("-p", f"no:{ep.split(' = ')[0]}")]

    def verify(self) -> None:
        """Fail unless this side's package, its only pytest-hwbench metadata and every pytest11
        module of it resolve into its own tree."""
        probe = (
            "import importlib.metadata as m, importlib.util as u, json, pytest_hwbench\n"
            "dists = [d for d in m.distributions() if d.name == 'pytest-hwbench']\n"
            "eps = [e for d in dists for e in d.entry_points if e.group == 'pytest11']\n"
            "print(json.dumps({'package': pytest_hwbench.__file__, 'dists': [str(d._path) for d in dists],\n"
            "  'dist': str(m.distribution('pytest-hwbench')._path),\n"
            "  'entry_points': [f'{e.name} = {e.value}' for e in eps],\n"
            "  'entry_point_files': [getattr(u.find_spec(e.module), 'origin', None) for e in eps]}))\n"
        )
        neutral = Path(tempfile.mkdtemp(prefix="fc-probe-"))
        try:
            _, proc = run([str(self.python), "-c", probe], cwd=neutral, env=self.env())
        finally:
            shutil.rmtree(neutral, ignore_errors=True)
        self.where = json.loads(proc.stdout.strip().splitlines()[-1])
        package = Path(self.where["package"]).resolve()
        if self.tree.resolve() not in package.parents:
            raise Failure(f"{self.name}: pytest_hwbench resolves to {package}, not into {self.tree}")
        if self.where["dists"] != [self.where["dist"]] or not self.where["dist"].startswith(str(self.venv)):
            raise Failure(f"{self.name}: pytest-hwbench metadata visible: {self.where['dists']}; only this "
                          f"side's, under {self.venv}, may be")
        outside = [f"{ep} ({origin})" for ep, origin in zip(self.where["entry_points"], self.where["entry_point_files"], strict=True)
                   if origin is None or self.tree.resolve() not in Path(origin).resolve().parents]
        if outside or not self.where["entry_points"]:
            raise Failure(f"{self.name}: pytest11 entry points not in {self.tree}: "
                          f"{outside or 'none found'}")
        log(f"{self.name}: pytest_hwbench = {package}; pytest11: {'; '.join(self.where['entry_points'])} "
            f"from {self.where['dist']}")


def _is_own_metadata(name: str) -> bool:
    """Whether a site-packages entry belongs to an install of pytest-hwbench (metadata, the
    editable finder and its .pth), or is a .pth file (not processed in a .pth-added folder)."""
    lowered = name.lower().replace("-", "_")
    return lowered.endswith(".pth") or (lowered.startswith(("pytest_hwbench", "__editable__"))
                                        and "pytest_hwbench" in lowered)


def base_site_view(work: Path) -> list[Path]:
    """This interpreter's site-packages as folders of symbolic links without pytest-hwbench's own
    entries, so the sides see torch, mlflow, ... but neither the main checkout's code nor its
    entry points."""
    paths = sysconfig.get_paths()
    views = []
    for key in dict.fromkeys(str(Path(paths[k]).resolve()) for k in ("purelib", "platlib")):
        view = work / f"base-site-{len(views)}"
        view.mkdir()
        for entry in Path(key).iterdir():
            if not _is_own_metadata(entry.name):
                (view / entry.name).symlink_to(entry)
        views.append(view)
    return views


# --- measurements -----------------------------------------------------------------------------

def parse_importtime(stderr: str) -> list[tuple[str, float, float, int]]:
    """``-X importtime`` lines -> [(module, self s, cumulative s, depth)], in print order."""
    out = []
    for line in stderr.splitlines():
        if not line.startswith("import time:") or "self [us]" in line:
            continue
        self_us, cum_us, name = line.split(":", 1)[1].split("|", 2)
        depth = (len(name) - len(name.lstrip(" ")) - 1) // 2
        out.append((name.strip(), int(self_us) / 1e6, int(cum_us) / 1e6, depth))
    return out


def _package(module: str) -> str:
    parts = module.split(".")
    return ".".join(parts[:2]) if parts[0] == "pytest_hwbench" and len(parts) > 1 else parts[0]


def top_packages(lines: list[tuple[str, float, float, int]], n: int = 10) -> list[tuple[str, float]]:
    """The `n` packages (top-level, and our own subpackages) with the largest cumulative import
    time. A module imported with `importlib.import_module` (entry points, lazy imports) gets no
    line of its own, and its children are printed one level up: so a package's time is the sum
    of its modules whose importer (the next line one level less deep) is outside the package."""
    totals: dict[str, float] = {}
    for i, (name, _, cumulative, depth) in enumerate(lines):
        parent = next((other for other, _, _, d in lines[i + 1:] if d < depth), None)
        if parent is None or _package(parent) != _package(name):
            totals[_package(name)] = totals.get(_package(name), 0.0) + cumulative
    return sorted(totals.items(), key=lambda item: -item[1])[:n]


def whole_command(side: Side, work: Path, plugin_dir: Path, tag: str) -> dict[str, float]:
    """Run the acceptance command once; the wall time and its phases from the timing plugin."""
    out = work / f"timing-{side.name}-{tag}.json"
    cmd = [str(side.pytest), *SUITE_ARGS, "-q", "-p", "fc_timing", "--hwbench-store", str(side.store),
           "-o", f"cache_dir={work / ('cache-' + side.name)}"]
    env = side.env(PYTHONPATH=str(plugin_dir), FC_TIMING_OUT=str(out))
    t0 = time.monotonic()
    wall, proc = run(cmd, cwd=side.tree, env=env)
    t_end = t0 + wall
    data = json.loads(out.read_text())
    marks, cases = data["marks"], data["cases"]
    if not cases:
        raise Failure(f"{side.name}: the acceptance command ran no case:\n{proc.stdout[-2000:]}")
    own = sum(c["end"] - c["begin"] for c in cases if c["phase"] in ("setup", "call"))
    calls = [c["end"] - c["begin"] for c in cases if c["phase"] == "call"]
    first = min(c["begin"] for c in cases)
    last = max(c["end"] for c in cases)
    fig = {
        "whole command": wall,
        "cases' own time (setup+call)": own,
        "fixed cost": wall - own,
        "  start -> pytest loaded (-p plugin import)": marks["plugin_import"] - t0,
        "  -> options parsed (plugins imported, addoption)": marks["options_parsed"] - marks["plugin_import"],
        "  -> configure done (markers, option checks, stores)": marks["configure_end"] - marks["options_parsed"],
        "  sessionstart (hwbench: git, hardware, versions)": marks["sessionstart_end"] - marks["sessionstart_begin"],
        "  collection (generate, FLOPs?, skips)": marks["collection_end"] - marks["collection_begin"],
        "  start -> first case starts": first - t0,
        "  teardowns": sum(c["end"] - c["begin"] for c in cases if c["phase"] == "teardown"),
        "  last case end -> exit": t_end - last,
        "    sessionfinish (sink writes)": marks["sessionfinish_end"] - marks["sessionfinish_begin"],
        "    sessionfinish end -> unconfigure (terminal summary)": marks["unconfigure_begin"] - marks["sessionfinish_end"],
        "    unconfigure": marks["unconfigure_end"] - marks["unconfigure_begin"],
        "    unconfigure end -> last atexit handler": marks["atexit"] - marks["unconfigure_end"],
        "    last atexit handler -> process gone (finalization)": t_end - marks["atexit"],
        "first case call": calls[0],
        "later case calls (median)": statistics.median(calls[1:]) if len(calls) > 1 else float("nan"),
    }
    return fig


def one_round(side: Side, work: Path, plugin_dir: Path, empty: Path, tag: str) -> dict[str, float]:
    fig: dict[str, float] = {}
    fig["python -c pass"] = run([str(side.python), "-c", "pass"], cwd=empty, env=side.env())[0]
    own = [str(side.pytest), "--co", "-q", "-p", "no:cacheprovider", "test_one.py"]
    fig[OWN_START] = run([*own, *side.blocked()], cwd=empty, env=side.env())[0]
    fig["pytest + hwbench --co, empty folder"] = run(own, cwd=empty, env=side.env())[0]
    fig["python -c 'import pytest_hwbench.plugin'"] = run(
        [str(side.python), "-c", "import pytest_hwbench.plugin"], cwd=empty, env=side.env())[0]
    fig["acceptance command --co (collection)"] = run(
        [str(side.pytest), *SUITE_ARGS, "--co", "-q", "-o", f"cache_dir={work / ('cache-' + side.name)}",
         "--hwbench-store", str(side.store)], cwd=side.tree, env=side.env())[0]
    fig.update(whole_command(side, work, plugin_dir, tag))
    return fig


def importtime(side: Side, work: Path, empty: Path) -> dict[str, Any]:
    """Import attribution (``-X importtime``) of the plugin module and of the collect-only run."""
    _, proc = run([str(side.python), "-X", "importtime", "-c", "import pytest_hwbench.plugin"], cwd=empty,
                  env=side.env())
    plugin = parse_importtime(proc.stderr)
    plugin_cumulative = max((cum for name, _, cum, _ in plugin if name == "pytest_hwbench.plugin"), default=0.0)
    # -s: pytest's fd capture would otherwise swallow the import lines written after it starts.
    _, proc = run([str(side.python), "-X", "importtime", str(side.pytest), *SUITE_ARGS, "--co", "-q", "-s",
                   "-o", f"cache_dir={work / ('cache-' + side.name)}", "--hwbench-store", str(side.store)],
                  cwd=side.tree, env=side.env())
    collect = parse_importtime(proc.stderr)
    return {
        "plugin_cumulative_s": plugin_cumulative,
        "plugin_top": top_packages(plugin),
        "collect_top": top_packages(collect),
        "collect_modules": len(collect),
    }


# --- report -----------------------------------------------------------------------------------

def summarize(rounds: dict[str, list[dict[str, float]]]) -> dict[str, dict[str, dict[str, float]]]:
    out: dict[str, dict[str, dict[str, float]]] = {}
    for name, figs in rounds.items():
        out[name] = {key: {"median": statistics.median(f[key] for f in figs), "min": min(f[key] for f in figs)}
                     for key in figs[0]}
    return out


def print_table(summary: dict[str, dict[str, dict[str, float]]], fresh: dict[str, dict[str, float]],
                repeats: int) -> tuple[float, float]:
    before, after = summary["before"], summary["after"]
    for side in (before, after):
        own = side[OWN_START]
        side["fixed cost above pytest's own start"] = {
            "median": side["fixed cost"]["median"] - own["median"], "min": side["fixed cost"]["min"] - own["min"]}
    width = max(map(len, before)) + 2
    print(f"\nmedian (min) of {repeats} interleaved runs (before/after order alternating), seconds")
    print(f"{'component':<{width}} | {'before':>15} | {'after':>15} | after/before")
    print("-" * (width + 50))
    for key in before:
        b, a = before[key], after[key]
        ratio = a["median"] / b["median"] if b["median"] > 0 else float("nan")
        print(f"{key:<{width}} | {b['median']:6.2f} ({b['min']:6.2f}) | {a['median']:6.2f} ({a['min']:6.2f}) | "
              f"{ratio:6.2f}")
    for key in ("whole command", "fixed cost"):
        print(f"{key + ', fresh store (1 run)':<{width}} | {fresh['before'][key]:6.2f}          | "
              f"{fresh['after'][key]:6.2f}          |")
    print("\npytest's own start: `pytest -p no:hwbench --co -q` (every pytest11 plugin of pytest-hwbench blocked) "
          "of a one-test file in an empty folder: interpreter, pytest, the other installed plugins.")
    print("fixed cost: the acceptance command's wall time minus its cases' setup+call; above pytest's own "
          "start: minus the row above.")
    b = before["fixed cost above pytest's own start"]["median"]
    a = after["fixed cost above pytest's own start"]["median"]
    print(f"\nfixed cost above pytest's own start: before {b:.2f} s, after {a:.2f} s (aim <= {AIM_S:g} s)")
    return b, a


def print_imports(imports: dict[str, dict[str, Any]]) -> None:
    for name, data in imports.items():
        print(f"\n{name}: -X importtime, `import pytest_hwbench.plugin` cumulative "
              f"{data['plugin_cumulative_s']:.2f} s; top 10 packages:")
        print("  " + ", ".join(f"{m} {s:.2f}" for m, s in data["plugin_top"]))
        print(f"{name}: -X importtime of the acceptance command --co ({data['collect_modules']} modules); top 10:")
        print("  " + ", ".join(f"{m} {s:.2f}" for m, s in data["collect_top"]))


def add_worktree(rev: str, path: Path, option: str) -> Path:
    """``git worktree add --detach`` of `rev` (removed again at the end)."""
    _, proc = run(["git", "rev-parse", "--verify", f"{rev}^{{commit}}"], cwd=REPO, check=False)
    if proc.returncode != 0:
        raise Failure(f"{option} {rev}: neither a folder nor a commit in {REPO}")
    log(f"git worktree add --detach {path} {rev}")
    run(["git", "worktree", "add", "--detach", str(path), rev], cwd=REPO)
    return path


def snapshot(tree: Path, path: Path) -> Path:
    """A copy of `tree`'s tracked and untracked, not ignored files (its working state now), so a
    concurrent edit cannot change the side between rounds; a tree outside git is copied whole."""
    _, proc = run(["git", "ls-files", "-z", "--cached", "--others", "--exclude-standard"], cwd=tree, check=False)
    if proc.returncode != 0:
        log(f"{tree}: not a git checkout, copying all of it")
        shutil.copytree(tree, path, symlinks=True)
        return path
    names = [n for n in proc.stdout.split("\0") if n]
    for name in names:
        source = tree / name
        if source.is_file():  # listed but deleted in the working tree: not part of it
            (path / name).parent.mkdir(parents=True, exist_ok=True)
            shutil.copy2(source, path / name)
    # A repository of its own, so the plugin's `git rev-parse` at session start costs what it
    # costs on the other side.
    git = ["git", "-c", "user.name=fixed_cost", "-c", "user.email=fixed_cost@localhost"]
    for cmd in (["init", "-q"], ["add", "-A"], ["commit", "-q", "--no-verify", "-m", "snapshot"]):
        run([*git, *cmd], cwd=path)
    log(f"after: copied the working tree of {tree} ({len(names)} files) to {path}")
    return path


# --- main -------------------------------------------------------------------------------------

def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0],
                                     formatter_class=argparse.RawDescriptionHelpFormatter,
                                     epilog="Progress goes to stderr, the table to stdout.")
    parser.add_argument("--before", default="5c859b2", help="git revision of the 'before' side (default 5c859b2)")
    parser.add_argument("--after", default=str(REPO),
                        help="the 'after' side: a tree (default: this checkout's working tree, copied once at the "
                             "start so that edits made meanwhile do not change it between rounds) or a git revision")
    parser.add_argument("--repeats", type=int, default=5, help="interleaved rounds per side (default 5)")
    parser.add_argument("--json", type=Path, default=None, help="also write every figure to this JSON file")
    parser.add_argument("--keep", action="store_true", help="keep the temporary folder (venvs, stores, timings)")
    args = parser.parse_args(argv)
    if args.repeats < 1:
        parser.error("--repeats must be >= 1")
    after_path = Path(args.after).resolve()
    after_is_tree = after_path.is_dir()
    if after_is_tree and not (after_path / "pyproject.toml").is_file():
        parser.error(f"--after {after_path}: no pyproject.toml there")

    work = Path(tempfile.mkdtemp(prefix="hwbench-fixed-cost-"))
    worktrees: list[Path] = []
    try:
        before_tree = add_worktree(args.before, work / "before-tree", "--before")
        worktrees.append(before_tree)
        if after_is_tree:
            after_tree = snapshot(after_path, work / "after-tree")
        else:
            after_tree = add_worktree(args.after, work / "after-tree", "--after")
            worktrees.append(after_tree)
        plugin_dir = work / "plugin"
        plugin_dir.mkdir()
        (plugin_dir / "fc_timing.py").write_text(TIMING_PLUGIN)
        empty = work / "empty"
        empty.mkdir()
        (empty / "pytest.ini").write_text("[pytest]\n")
        (empty / "test_one.py").write_text("def test_one():\n    pass\n")
        sides = {"before": Side("before", before_tree, work), "after": Side("after", after_tree, work)}
        base_sites = base_site_view(work)
        for side in sides.values():
            side.create(base_sites)
        if sides["before"].where["package"] == sides["after"].where["package"]:
            raise Failure("both sides import the same pytest_hwbench")

        fresh: dict[str, dict[str, float]] = {}
        for name, side in sides.items():
            log(f"{name}: warm-up run of the acceptance command (fresh store)")
            fresh[name] = whole_command(side, work, plugin_dir, "warmup")
        imports = {}
        for name, side in sides.items():
            log(f"{name}: -X importtime")
            imports[name] = importtime(side, work, empty)
        rounds: dict[str, list[dict[str, float]]] = {"before": [], "after": []}
        for i in range(args.repeats):
            # ABBA: the first command of a pair runs slower (seen: pytest's start 1.0-1.5 s first, 0.8 s
            # second, same side), so each side goes first in half of the rounds.
            for name, side in (list(sides.items()) if i % 2 == 0 else list(sides.items())[::-1]):
                fig = one_round(side, work, plugin_dir, empty, str(i))
                rounds[name].append(fig)
                log(f"round {i + 1}/{args.repeats} {name}: whole {fig['whole command']:.2f} s, fixed "
                    f"{fig['fixed cost']:.2f} s, pytest's own start {fig[OWN_START]:.2f} s")
        summary = summarize(rounds)
        b, a = print_table(summary, fresh, args.repeats)
        print_imports(imports)
        print("\nwhere each side resolves:")
        for name, side in sides.items():
            print(f"  {name}: {side.where['package']} (pytest11: {'; '.join(side.where['entry_points'])}, "
                  f"metadata {side.where['dist']})")
        if args.json:
            args.json.write_text(json.dumps({
                "command": ["pytest", *SUITE_ARGS], "before": args.before, "after": args.after,
                "repeats": args.repeats, "summary": summary, "rounds": rounds, "fresh_store": fresh,
                "imports": imports, "where": {n: s.where for n, s in sides.items()},
                "above_pytest_start": {"before": b, "after": a, "aim": AIM_S},
            }, indent=2))
            log(f"figures written to {args.json}")
        return 0
    except (Failure, subprocess.TimeoutExpired, OSError, json.JSONDecodeError, KeyError) as exc:
        print(f"fixed_cost: FAILED: {exc}", file=sys.stderr)
        return 1
    finally:
        for tree in worktrees:
            run(["git", "worktree", "remove", "--force", str(tree)], cwd=REPO, check=False)
        if args.keep:
            log(f"kept {work}")
        else:
            shutil.rmtree(work, ignore_errors=True)


if __name__ == "__main__":
    sys.exit(main())
