"""pytest_hwbench's shape (issue 19): no import cycle, no plug-in named in base code, no
``getattr`` probe of a contract member, a runner that is its loop.

Plug-ins are the modules our own distribution lists in its entry-point groups (``pytest11``
besides the base plugin, and the ``pytest_hwbench.*`` groups), every module of a package that holds
only plug-ins (``web``, ``probes``), and helpers that only plug-ins import (``_onnx_export``).
Base modules (`BASE`) are what one case walks through: the case, the runner and its trackers,
the registries and protocols, detection, the record, the sinks' recorder and the pytest plugin.
"""

from __future__ import annotations

import ast
from importlib.metadata import distribution
from pathlib import Path

import pytest
from test_hwsel_structure import find_cycle, import_graph

import pytest_hwbench

PACKAGE = "pytest_hwbench"
ROOT = Path(pytest_hwbench.__file__).parent
#: Our entry-point groups: what is listed there is a plug-in.
GROUPS = ("pytest11", "pytest_hwbench.backends", "pytest_hwbench.scenarios", "pytest_hwbench.sinks",
          "pytest_hwbench.hardware", "pytest_hwbench.commands")
#: Libraries only a plug-in may import.
PLUGIN_LIBRARIES = ("mlflow", "duckdb", "onnxruntime", "openvino", "qai_hub", "onnx")
#: Attributes the runner, grid and recorder once probed with getattr; now members of a protocol.
CONTRACT_MEMBERS = ("options", "forwards_per_iteration", "measure_more", "measure_remote", "opt_in_hardware",
                    "marker_docs", "shutdown", "runs_table_url", "shown_uri", "path", "name", "distributions")
#: Words every module shares: hardware kinds such as ``openvino`` are targets there, not plug-ins.
WORDS = "pytest_hwbench.vocabulary"
#: What one case walks through (modules and whole packages).
BASE = ("case", "availability", "result", "runner", "trackers", "torch_device", "interference", "hardware",
        "record", "vocabulary", "_plugins", "hookspecs", "errors", "energy", "backends.base", "backends",
        "scenarios", "sinks.base", "sinks._recorder", "sinks.spool", "plugin")


def _module_name(path: Path) -> str:
    parts = list(path.relative_to(ROOT).with_suffix("").parts)
    if parts[-1] == "__init__":
        parts.pop()
    return ".".join([PACKAGE, *parts])


def _base_modules() -> dict[str, Path]:
    out = {}
    for path in sorted(ROOT.rglob("*.py")):
        name = _module_name(path)
        rel = name[len(PACKAGE) + 1:]
        if rel in BASE or (rel.startswith("plugin.") and "plugin" in BASE):
            out[name] = path
    return out


def plugin_modules() -> set[str]:
    """Entry-point modules of our distribution, the packages holding only those, and modules
    that only plug-ins import."""
    found = {ep.value.split(":")[0] for ep in distribution("pytest-hwbench").entry_points
             if ep.group in GROUPS and ep.value.split(":")[0] != f"{PACKAGE}.plugin"}
    assert f"{PACKAGE}.backends.qai_hub" in found and f"{PACKAGE}.sinks.mlflow_sink" in found, found
    graph = import_graph(PACKAGE)
    for package in ("web", "probes"):
        found |= {m for m in graph if m == f"{PACKAGE}.{package}" or m.startswith(f"{PACKAGE}.{package}.")}
    changed = True
    while changed:  # helpers imported by plug-ins only
        changed = False
        for module in graph:
            importers = {m for m, targets in graph.items() if module in targets}
            if module not in found and importers and importers <= found and module.rpartition(".")[2].startswith("_"):
                found.add(module)
                changed = True
    return found


def _docstrings(tree: ast.AST) -> set[int]:
    ids = set()
    for node in ast.walk(tree):
        if isinstance(node, (ast.Module, ast.ClassDef, ast.FunctionDef, ast.AsyncFunctionDef)) and node.body:
            first = node.body[0]
            if isinstance(first, ast.Expr) and isinstance(first.value, ast.Constant):
                ids.add(id(first.value))
    return ids


def test_no_import_cycle_in_pytest_hwbench():
    assert find_cycle(PACKAGE) is None


def test_the_base_modules_exist():
    names = {n[len(PACKAGE) + 1:] for n in _base_modules()}
    assert set(BASE) - {"plugin"} <= names, set(BASE) - names


def test_no_base_module_names_a_plugin():
    plugins = plugin_modules()
    graph = import_graph(PACKAGE)
    entry_names = {ep.name for ep in distribution("pytest-hwbench").entry_points
                   if ep.group in ("pytest_hwbench.backends", "pytest_hwbench.sinks")} - {"torch"}
    problems = []
    for module, path in _base_modules().items():
        if module in plugins:
            continue
        problems += [f"{module} imports plug-in {target}" for target in sorted(graph[module] & plugins)]
        tree = ast.parse(path.read_text(encoding="utf-8"))
        docs = _docstrings(tree)
        for node in ast.walk(tree):
            if isinstance(node, ast.Import):
                libs = [a.name.split(".")[0] for a in node.names]
            elif isinstance(node, ast.ImportFrom) and not node.level:
                libs = [(node.module or "").split(".")[0]]
            else:
                libs = []
            problems += [f"{module}:{node.lineno} imports {lib}" for lib in libs if lib in PLUGIN_LIBRARIES]
            if isinstance(node, ast.Constant) and isinstance(node.value, str) and id(node) not in docs \
                    and module != WORDS:
                text = node.value
                named = [n for n in (*entry_names, *PLUGIN_LIBRARIES) if text == n or text.startswith(f"{n}:")]
                problems += [f"{module}:{node.lineno} names plug-in {n!r} in {text[:60]!r}" for n in named]
    assert not problems, "\n".join(problems)


def test_no_getattr_probe_of_a_contract_member_in_base_modules():
    problems = []
    for module, path in _base_modules().items():
        for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
            if (isinstance(node, ast.Call) and isinstance(node.func, ast.Name) and node.func.id in ("getattr", "hasattr")
                    and len(node.args) >= 2 and isinstance(node.args[1], ast.Constant)
                    and node.args[1].value in CONTRACT_MEMBERS):
                problems.append(f"{module}:{node.lineno} {node.func.id}(..., {node.args[1].value!r})")
    assert not problems, "\n".join(problems)


def test_the_case_module_imports_the_vocabulary_only_at_import_time():
    tree = ast.parse((ROOT / "case.py").read_text(encoding="utf-8"))
    top = [n for n in tree.body if isinstance(n, ast.ImportFrom) and n.level]
    assert [n.module for n in top] == ["vocabulary"]


def test_the_runner_holds_the_loop_only():
    tree = ast.parse((ROOT / "runner.py").read_text(encoding="utf-8"))
    classes = [n.name for n in tree.body if isinstance(n, ast.ClassDef)]
    assert classes == ["_Try", "Runner"]
    functions = [n.name for n in tree.body if isinstance(n, ast.FunctionDef)]
    assert functions == ["is_out_of_memory"]


@pytest.mark.parametrize("member", ["opt_in_hardware", "marker_docs", "shutdown", "distributions"])
def test_a_backend_that_subclasses_the_protocol_inherits_its_defaults(member):
    from pytest_hwbench import Backend

    class Minimal(Backend):
        name, hardware, precisions = "minimal", ("cpu",), ("fp32",)

        def markers(self, hardware): return (hardware,)
        def default_precisions(self, hardware, hw): return ("fp32",)
        def unavailable(self, hardware, precision, hw): return None
        def load(self, spec, hardware, precision, device_index=0): raise NotImplementedError

    assert hasattr(Minimal(), member)
    assert isinstance(Minimal(), Backend)


def test_a_backend_missing_a_member_is_refused_naming_the_fix():
    from pytest_hwbench import register_backend

    class Bare:
        name, hardware, precisions = "bare", ("cpu",), ("fp32",)

    with pytest.raises(TypeError, match="subclass pytest_hwbench.Backend"):
        register_backend(Bare())


def test_detection_lists_the_vocabularys_targets_in_its_order():
    from pytest_hwbench.hardware import TARGETS, detect_hardware

    found = list(detect_hardware().targets)
    ours = [t for t in found if t in TARGETS]
    assert ours == [t for t in TARGETS if t in found]
    assert found[: len(ours)] == ours  # a third party's targets come after
