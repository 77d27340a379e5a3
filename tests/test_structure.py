"""pytest_hwbench's shape: no import cycle (in hwsel either), no plug-in named in base code, no
``getattr`` probe of a protocol-typed value, a runner that is its loop.

What a plug-in is comes from ``pyproject.toml``: every module listed under one of our entry-point
groups (``pytest11`` besides the base plugin, which shares the console script's name, and the
``pytest_hwbench.*`` groups), and what only plug-ins import when it is a private helper, a package
of plug-ins, or itself built on plug-ins. Every other module of the package is base code,
``cli.py`` included.

Imports are read from the source with `ast` (nothing is imported). Every import counts: module
level, inside functions, and under ``if TYPE_CHECKING:`` (an annotation that names a type still
ties the modules together for a reader and a type checker).
"""

from __future__ import annotations

import ast
import importlib.util
from collections.abc import Iterator
from pathlib import Path

import pytest
import tomllib

import pytest_hwbench

PACKAGE = "pytest_hwbench"
ROOT = Path(pytest_hwbench.__file__).parent
PYPROJECT = ROOT.parent / "pyproject.toml"
#: Entry-point groups whose modules are plug-ins: pytest's, and ours.
PLUGIN_GROUP_PREFIXES = ("pytest11", f"{PACKAGE}.")
#: Libraries only a plug-in may import.
PLUGIN_LIBRARIES = ("mlflow", "duckdb", "onnxruntime", "openvino", "qai_hub", "onnx")
#: Modules of data that may name a backend or a library as a word, with why.
WORDS: dict[str, str] = {
    f"{PACKAGE}.vocabulary": "hardware kinds such as ``openvino`` are targets there, not plug-ins",
    f"{PACKAGE}.facts": "the table's rows are keyed by target and backend name: data, not imports",
    f"{PACKAGE}.models": "the zoo's known gaps are facts about a model on a runtime, keyed by its name",
    f"{PACKAGE}.models.zoo": "the zoo's known gaps are facts about a model on a runtime, keyed by its name",
}

#: Import cycles (the modules of one strongly connected component) allowed to remain, each with
#: why. Empty: a cycle found fails the test.
ALLOWED_CYCLES: dict[frozenset[str], str] = {}


# --- the module graph --------------------------------------------------------------------------

def modules_of(package: str) -> dict[str, Path]:
    """Dotted module name -> source file, for every module of `package` (found, not imported)."""
    spec = importlib.util.find_spec(package)
    if spec is None or not spec.submodule_search_locations:
        raise ValueError(f"{package!r} is not an importable package")
    root = Path(next(iter(spec.submodule_search_locations)))
    out: dict[str, Path] = {}
    for path in sorted(root.rglob("*.py")):
        parts = list(path.relative_to(root).with_suffix("").parts)
        if parts[-1] == "__init__":
            parts.pop()
        out[".".join([package, *parts])] = path
    return out


def _imports(tree: ast.AST) -> Iterator[ast.Import | ast.ImportFrom]:
    """Every import statement: module level, in functions, under ``if TYPE_CHECKING:``."""
    for node in ast.walk(tree):
        if isinstance(node, ast.Import | ast.ImportFrom):
            yield node


def _base_of(module: str, is_package: bool, node: ast.ImportFrom) -> str:
    """The absolute module ``from <this> import ...`` names."""
    if not node.level:
        return node.module or ""
    parts = module.split(".") if is_package else module.split(".")[:-1]
    if node.level > 1:
        parts = parts[: len(parts) - (node.level - 1)]
    return ".".join(parts + ([node.module] if node.module else []))


def import_graph(*packages: str) -> dict[str, dict[str, int]]:
    """Module -> {module of `packages` it imports: the line of the first such import}.

    ``from pkg import name`` is an edge to ``pkg.name`` when that is a module, else to ``pkg``;
    relative imports are resolved; loading ``pkg.sub`` running ``pkg/__init__.py`` is no edge
    (every submodule would depend on its package's ``__init__``, which imports the submodules).
    """
    modules = {name: path for package in packages for name, path in modules_of(package).items()}
    graph: dict[str, dict[str, int]] = {name: {} for name in modules}
    for name, path in modules.items():
        is_package = path.name == "__init__.py"
        for node in _imports(ast.parse(path.read_text(encoding="utf-8"), str(path))):
            if isinstance(node, ast.Import):
                targets = [alias.name for alias in node.names]
            else:
                base = _base_of(name, is_package, node)
                targets = [f"{base}.{a.name}" if f"{base}.{a.name}" in modules else base for a in node.names]
            for target in targets:
                while target and target not in modules:  # ``import a.b.c`` names the longest known prefix
                    target = target.rpartition(".")[0]
                if target and target != name:
                    graph[name].setdefault(target, node.lineno)
    return graph


def cycles(graph: dict[str, dict[str, int]]) -> list[frozenset[str]]:
    """The import cycles of `graph`: each strongly connected component of more than one module."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    on_stack: set[str] = set()
    found: list[frozenset[str]] = []
    counter = 0
    for start in sorted(graph):
        if start in index:
            continue
        work = [(start, iter(sorted(graph[start])))]
        index[start] = low[start] = counter
        counter += 1
        stack.append(start)
        on_stack.add(start)
        while work:
            node, children = work[-1]
            child = next(children, None)
            if child is not None:
                if child not in index:
                    index[child] = low[child] = counter
                    counter += 1
                    stack.append(child)
                    on_stack.add(child)
                    work.append((child, iter(sorted(graph[child]))))
                elif child in on_stack:
                    low[node] = min(low[node], index[child])
                continue
            work.pop()
            if work:
                low[work[-1][0]] = min(low[work[-1][0]], low[node])
            if low[node] == index[node]:
                component = set()
                while True:
                    member = stack.pop()
                    on_stack.discard(member)
                    component.add(member)
                    if member == node:
                        break
                if len(component) > 1:
                    found.append(frozenset(component))
    return found


def _edges(graph: dict[str, dict[str, int]], component: frozenset[str]) -> list[str]:
    return [f"{a} -> {b} (line {line})" for a in sorted(component) for b, line in sorted(graph[a].items())
            if b in component]


# --- what a plug-in is -------------------------------------------------------------------------

def _entry_points() -> dict[str, dict[str, str]]:
    project = tomllib.loads(PYPROJECT.read_text(encoding="utf-8"))["project"]
    return project["entry-points"]


def base_plugin() -> str:
    """The base plugin: our ``pytest11`` entry point that shares the console script's name."""
    scripts = tomllib.loads(PYPROJECT.read_text(encoding="utf-8"))["project"]["scripts"]
    (name,) = [n for n, target in scripts.items() if target.startswith(f"{PACKAGE}.")]
    return _entry_points()["pytest11"][name].split(":")[0]


def plugin_modules() -> set[str]:
    """The modules of our entry-point groups (the base plugin aside), and every module that only
    those import when it is a private helper (``_name``), a package whose public modules are all
    plug-ins (``web``), or itself imports a plug-in (a feature built on plug-ins): repeated until
    nothing changes."""
    listed = {target.split(":")[0] for group, entries in _entry_points().items()
              if group.startswith(PLUGIN_GROUP_PREFIXES) for target in entries.values()}
    found = listed - {base_plugin()}
    modules = modules_of(PACKAGE)
    graph = import_graph(PACKAGE)
    importers: dict[str, set[str]] = {m: set() for m in graph}
    for module, targets in graph.items():
        for target in targets:
            importers[target].add(module)

    def of_plugins(package: str) -> bool:
        public = [m for m in modules if m.rpartition(".")[0] == package and not m.rpartition(".")[2].startswith("_")]
        return modules[package].name == "__init__.py" and bool(public) and set(public) <= found

    changed = True
    while changed:
        changed = False
        for module in graph:
            if module in found or not importers[module] <= found:
                continue
            private = module.rpartition(".")[2].startswith("_")
            if (private and importers[module]) or of_plugins(module) or (importers[module] and set(graph[module]) & found):
                found.add(module)
                changed = True
    return found


def base_modules() -> dict[str, Path]:
    plugins = plugin_modules()
    return {name: path for name, path in modules_of(PACKAGE).items() if name not in plugins}


def _docstrings(tree: ast.AST) -> set[int]:
    ids = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.Module | ast.ClassDef | ast.FunctionDef | ast.AsyncFunctionDef) and node.body:
            first = node.body[0]
            if isinstance(first, ast.Expr) and isinstance(first.value, ast.Constant):
                ids.add(id(first.value))
    return ids


# --- protocol-typed values ---------------------------------------------------------------------

def protocols(packages: tuple[str, ...] = (PACKAGE, "hwsel")) -> set[str]:
    """The names of the classes that list ``Protocol`` (or ``Protocol[...]``) among their bases."""
    names = set()
    for package in packages:
        for path in modules_of(package).values():
            for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
                if isinstance(node, ast.ClassDef) and any(
                        "Protocol" in {n.id for n in ast.walk(base) if isinstance(n, ast.Name)}
                        | {n.attr for n in ast.walk(base) if isinstance(n, ast.Attribute)} for base in node.bases):
                    names.add(node.name)
    return names


def _names_in(annotation: ast.expr | None) -> set[str]:
    """Every name an annotation mentions (``Sink | None``, ``"Backend"``, ``base.Sink``)."""
    if annotation is None:
        return set()
    if isinstance(annotation, ast.Constant) and isinstance(annotation.value, str):
        try:
            annotation = ast.parse(annotation.value, mode="eval").body
        except SyntaxError:
            return set()
    return ({n.id for n in ast.walk(annotation) if isinstance(n, ast.Name)}
            | {n.attr for n in ast.walk(annotation) if isinstance(n, ast.Attribute)})


def _target_key(node: ast.expr) -> str | None:
    """``x`` for a name, ``self.x`` for an attribute of ``self``; None for anything else."""
    if isinstance(node, ast.Name):
        return node.id
    if isinstance(node, ast.Attribute) and isinstance(node.value, ast.Name) and node.value.id == "self":
        return f"self.{node.attr}"
    return None


def protocol_probes(tree: ast.AST, protos: set[str]) -> list[tuple[int, str, str, str]]:
    """(line, getattr/hasattr, the value, the constant name) for each ``getattr(v, "name", ...)``
    or ``hasattr(v, "name")`` whose `v` is annotated with a protocol in its scope: a parameter,
    an annotated assignment, or a ``self.x`` annotated in its class or assigned annotated."""
    found = []

    def typed_in(scope: ast.AST) -> set[str]:
        keys = set()
        for node in ast.walk(scope):
            if isinstance(node, ast.arg) and _names_in(node.annotation) & protos:
                keys.add(node.arg)
            elif isinstance(node, ast.AnnAssign) and _names_in(node.annotation) & protos:
                key = _target_key(node.target)
                if key:
                    keys.add(key)
        return keys

    for cls in [n for n in ast.walk(tree) if isinstance(n, ast.ClassDef)] + [tree]:
        own = typed_in(cls)
        if isinstance(cls, ast.ClassDef):  # class-level ``x: Proto`` is ``self.x`` in its methods
            own |= {f"self.{k}" for k in own if not k.startswith("self.")}
        for node in ast.walk(cls):
            if (isinstance(node, ast.Call) and isinstance(node.func, ast.Name)
                    and node.func.id in ("getattr", "hasattr") and len(node.args) >= 2
                    and isinstance(node.args[1], ast.Constant) and isinstance(node.args[1].value, str)):
                key = _target_key(node.args[0])
                if key in own:
                    found.append((node.lineno, node.func.id, key, node.args[1].value))
    return sorted(set(found))


# --- the checks --------------------------------------------------------------------------------

@pytest.mark.parametrize("package", [PACKAGE, "hwsel"])
def test_no_import_cycle_counting_function_and_type_checking_imports(package: str) -> None:
    graph = import_graph(package)
    unexpected = [c for c in cycles(graph) if c not in ALLOWED_CYCLES]
    assert not unexpected, "import cycles:\n" + "\n".join(
        "  " + "; ".join(_edges(graph, c)) for c in unexpected)


def test_the_cycle_finder_sees_every_kind_of_import(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    files = {"__init__.py": "", "a.py": "from typing import TYPE_CHECKING\nif TYPE_CHECKING:\n    from .b import B\n",
             "b.py": "def f():\n    from . import c\n", "c.py": "import cyc_toy.a\n", "d.py": "from . import a\n"}
    for rel, text in files.items():
        (tmp_path / "cyc_toy").mkdir(exist_ok=True)
        (tmp_path / "cyc_toy" / rel).write_text(text, encoding="utf-8")
    monkeypatch.syspath_prepend(str(tmp_path))
    assert cycles(import_graph("cyc_toy")) == [frozenset({"cyc_toy.a", "cyc_toy.b", "cyc_toy.c"})]


def test_plugins_are_derived_from_the_entry_points() -> None:
    plugins = plugin_modules()
    assert base_plugin() == f"{PACKAGE}.plugin"
    assert {f"{PACKAGE}.recording", f"{PACKAGE}.sinks.mlflow_sink", f"{PACKAGE}.store_commands",
            f"{PACKAGE}.backends.qai_hub", f"{PACKAGE}.web.detect"} <= plugins
    assert {f"{PACKAGE}.web", f"{PACKAGE}.web._driver"} <= plugins
    base = base_modules()
    assert {f"{PACKAGE}.cli", f"{PACKAGE}.hookspecs", f"{PACKAGE}.plugin_api", f"{PACKAGE}.plugin.session",
            f"{PACKAGE}.sinks", f"{PACKAGE}.sinks.base", f"{PACKAGE}.scenarios", f"{PACKAGE}.report",
            f"{PACKAGE}.runner", f"{PACKAGE}.sinks.transfer"} <= set(base)


def test_no_base_module_names_a_plugin() -> None:
    """A base module imports no plug-in module (also under TYPE_CHECKING or in a function), no
    library only a plug-in may use, and names no backend or sink entry point in a string."""
    plugins = plugin_modules()
    graph = import_graph(PACKAGE)
    entries = _entry_points()
    names = (set(entries[f"{PACKAGE}.backends"]) | set(entries[f"{PACKAGE}.sinks"])) - {"torch"}
    problems = []
    for module, path in base_modules().items():
        problems += [f"{module}:{line} imports plug-in {target}" for target, line in sorted(graph[module].items())
                     if target in plugins]
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
                    and module not in WORDS:
                text = node.value
                named = [n for n in (*names, *PLUGIN_LIBRARIES) if text == n or text.startswith(f"{n}:")]
                problems += [f"{module}:{node.lineno} names plug-in {n!r} in {text[:60]!r}" for n in named]
    assert not problems, "\n".join(problems)


def test_no_getattr_probe_of_a_protocol_typed_value() -> None:
    """A value typed with a protocol (`Sink`, `Backend`, `Scenario`, `Layer`...) is used through
    its members; ``getattr(sink, "browse", None)`` on it says the protocol lacks a member."""
    protos = protocols()
    assert {"Sink", "Backend", "Scenario", "Layer"} <= protos, protos
    problems = []
    for package in (PACKAGE, "hwsel"):
        for module, path in modules_of(package).items():
            for line, func, value, name in protocol_probes(ast.parse(path.read_text(encoding="utf-8")), protos):
                problems.append(f"{module}:{line} {func}({value}, {name!r})")
    assert not problems, "\n".join(problems)


def test_the_probe_finder_sees_parameters_and_attributes() -> None:
    source = ("class Sink(Protocol):\n    name: str\n"
              "def f(sink: Sink | None, other: int):\n    getattr(sink, 'browse', None)\n    hasattr(other, 'x')\n"
              "class Holder:\n    backend: 'Sink'\n    def g(self):\n        return hasattr(self.backend, 'shutdown')\n")
    tree = ast.parse(source)
    assert protocol_probes(tree, {"Sink"}) == [(4, "getattr", "sink", "browse"),
                                               (9, "hasattr", "self.backend", "shutdown")]


def test_the_recording_plugin_declares_the_hook_only_it_calls() -> None:
    """Each ``pytest_hwbench_*`` hook is declared by the module (base or plug-in) that calls it."""
    calls: dict[str, set[str]] = {}
    for module, path in modules_of(PACKAGE).items():
        for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
            if isinstance(node, ast.Attribute) and node.attr.startswith("pytest_hwbench_") \
                    and isinstance(node.value, ast.Attribute) and node.value.attr == "hook":
                calls.setdefault(node.attr, set()).add(module)
    from pytest_hwbench import hookspecs
    from pytest_hwbench.recording import RecordingHooks

    base_hooks = {n for n in vars(hookspecs) if n.startswith("pytest_hwbench_")}
    recording_hooks = {n for n in vars(RecordingHooks) if n.startswith("pytest_hwbench_")}
    assert recording_hooks == {"pytest_hwbench_default_sinks"}
    assert calls["pytest_hwbench_default_sinks"] == {f"{PACKAGE}.recording"}
    plugins = plugin_modules()
    assert {hook for hook, callers in calls.items() if callers & plugins} == recording_hooks
    assert set(calls) - recording_hooks <= base_hooks


def test_the_case_module_imports_the_vocabulary_only_at_import_time() -> None:
    tree = ast.parse((ROOT / "case.py").read_text(encoding="utf-8"))
    top = [n for n in tree.body if isinstance(n, ast.ImportFrom) and n.level]
    assert [n.module for n in top] == ["vocabulary"]


def test_the_runner_holds_the_loop_only() -> None:
    tree = ast.parse((ROOT / "runner.py").read_text(encoding="utf-8"))
    classes = [n.name for n in tree.body if isinstance(n, ast.ClassDef)]
    assert classes == ["_Try", "Runner"]
    functions = [n.name for n in tree.body if isinstance(n, ast.FunctionDef)]
    assert functions == ["is_out_of_memory"]


@pytest.mark.parametrize("member", ["opt_in_hardware", "marker_docs", "shutdown", "distributions"])
def test_a_backend_that_subclasses_the_protocol_inherits_its_defaults(member: str) -> None:
    from pytest_hwbench import Backend

    class Minimal(Backend):
        name, hardware, precisions = "minimal", ("cpu",), ("fp32",)

        def markers(self, hardware): return (hardware,)
        def default_precisions(self, hardware, hw): return ("fp32",)
        def unavailable(self, hardware, precision, hw): return None
        def load(self, spec, hardware, precision, device_index=0): raise NotImplementedError

    assert hasattr(Minimal(), member)
    assert isinstance(Minimal(), Backend)


def test_a_backend_missing_a_member_is_refused_naming_the_fix() -> None:
    from pytest_hwbench import register_backend

    class Bare:
        name, hardware, precisions = "bare", ("cpu",), ("fp32",)

    with pytest.raises(TypeError, match="subclass pytest_hwbench.Backend"):
        register_backend(Bare())


def test_detection_lists_the_tables_targets_in_its_order() -> None:
    from pytest_hwbench.facts import target_names
    from pytest_hwbench.hardware import detect_hardware

    found = list(detect_hardware().targets)
    table = target_names()
    ours = [t for t in found if t in table]
    assert ours == [t for t in table if t in found]
    assert found[: len(ours)] == ours  # a third party's targets come after


def test_no_module_over_600_lines_and_none_over_500_without_its_reason() -> None:
    """ARCHITECTURE.md: a room holds one job; one over 500 lines says why in its first paragraph."""
    too_long, unexplained = [], []
    for package in (ROOT, ROOT.parent / "hwsel"):
        for path in sorted(package.rglob("*.py")):
            lines = path.read_text().count("\n")
            docstring = ast.get_docstring(ast.parse(path.read_text())) or ""
            first_paragraph = " ".join(docstring.split("\n\n")[0].split())
            if lines > 600:
                too_long.append(f"{path.relative_to(ROOT.parent)} ({lines})")
            elif lines > 500 and "over 500 lines because" not in first_paragraph:
                unexplained.append(f"{path.relative_to(ROOT.parent)} ({lines})")
    assert not too_long, f"modules over 600 lines: {too_long}"
    assert not unexplained, f"modules over 500 lines that do not say why in their first paragraph: {unexplained}"
