"""hwsel's shape: no import cycle between its modules (issue 19, item 4).

`import_graph` reads a package's source with `ast` (nothing is imported) and returns module ->
the package's modules it imports, at module level and inside functions alike: an import inside a
function still runs, only later, and two modules that need each other that way are one module
split in two. Imports under ``if TYPE_CHECKING:`` do not count: they never run, and annotations
that name each other's types are not a dependency at run time.

How an import statement becomes edges (the rules import-linter and pydeps use):

- ``import a.b.c`` and ``from a.b import c`` name the module they load: ``from pkg import name``
  is an edge to ``pkg.name`` when that is a module of the package, else to ``pkg`` itself
  (``pkg/__init__.py``: the name is an attribute of the package).
- Relative imports are resolved against the importing module (``from . import x`` in
  ``pkg/sub/mod.py`` is ``pkg.sub.x``; ``from ..q import y`` is ``pkg.q``).
- Loading ``pkg.sub.mod`` runs ``pkg/__init__.py`` first, but that is not counted as an edge:
  every submodule would otherwise depend on its package's ``__init__``, which imports the
  submodules, and everything would be one cycle.
- Dynamic imports (``importlib.import_module``, lazy ``__getattr__`` exports) are not seen.

`find_cycle` is generic: point it at any package (``pytest_hwbench`` as well); this file asserts
on ``hwsel`` only.
"""

from __future__ import annotations

import ast
import importlib.util
from collections.abc import Iterator
from pathlib import Path

import pytest


def _modules(package: str) -> dict[str, Path]:
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


def _is_type_checking(test: ast.expr) -> bool:
    """``TYPE_CHECKING`` or ``typing.TYPE_CHECKING`` (the test of an ``if`` whose body never runs)."""
    return (isinstance(test, ast.Name) and test.id == "TYPE_CHECKING") or (
        isinstance(test, ast.Attribute) and test.attr == "TYPE_CHECKING")


def _imports(tree: ast.AST) -> Iterator[ast.Import | ast.ImportFrom]:
    """Every import statement that can run: module level and in functions, not under TYPE_CHECKING."""
    todo: list[ast.AST] = [tree]
    while todo:
        node = todo.pop()
        if isinstance(node, ast.If) and _is_type_checking(node.test):
            todo.extend(node.orelse)  # the else branch does run
            continue
        if isinstance(node, ast.Import | ast.ImportFrom):
            yield node
        todo.extend(ast.iter_child_nodes(node))


def _base(module: str, is_package: bool, node: ast.ImportFrom) -> str:
    """The absolute module ``from <this> import ...`` names."""
    if not node.level:
        return node.module or ""
    parts = module.split(".") if is_package else module.split(".")[:-1]
    if node.level > 1:
        parts = parts[: len(parts) - (node.level - 1)]
    return ".".join(parts + ([node.module] if node.module else []))


def import_graph(package: str) -> dict[str, set[str]]:
    """Module -> modules of `package` it imports (see the module docstring for the rules)."""
    modules = _modules(package)
    graph: dict[str, set[str]] = {name: set() for name in modules}
    for name, path in modules.items():
        is_package = path.name == "__init__.py"
        for node in _imports(ast.parse(path.read_text(encoding="utf-8"), str(path))):
            if isinstance(node, ast.Import):
                targets = [alias.name for alias in node.names]
            else:
                base = _base(name, is_package, node)
                targets = [f"{base}.{a.name}" if f"{base}.{a.name}" in modules else base for a in node.names]
            for target in targets:
                # ``import a.b.c`` loads a.b.c; the longest known prefix is the module it names
                while target and target not in modules:
                    target = target.rpartition(".")[0]
                if target and target != name:
                    graph[name].add(target)
    return graph


def find_cycle(package: str) -> list[str] | None:
    """One import cycle among `package`'s modules, as ``[a, b, ..., a]``, or None."""
    graph = import_graph(package)
    state: dict[str, int] = {}  # 1: on the current path, 2: done
    path: list[str] = []

    def visit(node: str) -> list[str] | None:
        state[node] = 1
        path.append(node)
        for nxt in sorted(graph[node]):
            if state.get(nxt) == 1:
                return [*path[path.index(nxt):], nxt]
            if nxt not in state:
                found = visit(nxt)
                if found:
                    return found
        path.pop()
        state[node] = 2
        return None

    for start in sorted(graph):
        if start not in state:
            found = visit(start)
            if found:
                return found
    return None


def test_hwsel_has_no_import_cycle() -> None:
    cycle = find_cycle("hwsel")
    assert cycle is None, "import cycle in hwsel: " + " -> ".join(cycle or [])


def test_hwsel_imports_nothing_of_pytest_hwbench_that_imports_hwsel() -> None:
    """hwsel may import pytest_hwbench (record, zoo, vocabulary, detection, readers), never the
    reverse: a pytest_hwbench module importing hwsel would close a cycle across the packages."""
    back = {name: sorted(t for t in _targets(path) if t == "hwsel" or t.startswith("hwsel."))
            for name, path in _modules("pytest_hwbench").items()}
    assert not {k: v for k, v in back.items() if v}, back


def _targets(path: Path) -> set[str]:
    out: set[str] = set()
    for node in _imports(ast.parse(path.read_text(encoding="utf-8"), str(path))):
        if isinstance(node, ast.Import):
            out.update(alias.name for alias in node.names)
        elif not node.level and node.module:
            out.add(node.module)
    return out


# --- the checker itself ------------------------------------------------------------------------

def _package(root: Path, files: dict[str, str]) -> None:
    for rel, text in files.items():
        path = root / rel
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(text, encoding="utf-8")


@pytest.fixture
def toy(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    monkeypatch.syspath_prepend(str(tmp_path))
    return tmp_path


@pytest.mark.parametrize(("name", "files", "cycle"), [
    ("cyc_func", {"__init__.py": "", "a.py": "def f():\n    from .b import g\n", "b.py": "from . import a\n"},
     ["cyc_func.a", "cyc_func.b", "cyc_func.a"]),
    ("cyc_abs", {"__init__.py": "", "sub/__init__.py": "", "sub/x.py": "import cyc_abs.y\n",
                 "y.py": "from .sub import x\n"}, ["cyc_abs.sub.x", "cyc_abs.y", "cyc_abs.sub.x"]),
    ("cyc_typing", {"__init__.py": "", "a.py": "from typing import TYPE_CHECKING\nif TYPE_CHECKING:\n"
                    "    from .b import B\n", "b.py": "from .a import f\n"}, None),
    ("cyc_init", {"__init__.py": "from .a import f\n", "a.py": "def f():\n    from . import g\n"},
     ["cyc_init", "cyc_init.a", "cyc_init"]),
    ("cyc_none", {"__init__.py": "from .a import f\nfrom .b import g\n", "a.py": "from .b import g\n",
                  "b.py": "import os\n"}, None),
])
def test_find_cycle_follows_every_kind_of_import(toy: Path, name: str, files: dict[str, str],
                                                 cycle: list[str] | None) -> None:
    _package(toy / name, files)
    assert find_cycle(name) == cycle


# --- one model description -----------------------------------------------------------------------

def test_model_info_takes_the_architecture_fields_by_name_from_the_zoo() -> None:
    """`hwsel.features.ModelInfo` is hwsel's one model description: each architecture number is
    `pytest_hwbench.models.ModelArchitecture`'s field of that name and type (copied generically by
    `ModelInfo.from_architecture`), so the two cannot drift apart."""
    import dataclasses

    from hwsel.features import ModelInfo
    from pytest_hwbench.models import ModelArchitecture

    arch = {f.name: f.type for f in dataclasses.fields(ModelArchitecture)}
    info = {f.name: f.type for f in dataclasses.fields(ModelInfo)}
    unused = {"activation_bytes_per_item"}  # hwsel's memory model derives activations itself
    assert set(arch) - unused <= set(info), set(arch) - unused - set(info)
    assert {k: info[k] for k in set(arch) - unused} == {k: arch[k] for k in set(arch) - unused}
    built = ModelInfo.from_architecture(
        ModelArchitecture(model_type="bert", param_count=10, flops_per_item=2, num_layers=2, hidden_size=8,
                          activation_bytes_per_item=1.0, launches_per_forward=5, num_attention_heads=2,
                          num_key_value_heads=1),
        name="toy", family="embedding", shape={"sequence_length": 16})
    assert built == ModelInfo("toy", "embedding", "bert", 10, 2.0, 2, 8, 16, launches_per_forward=5,
                              num_attention_heads=2, num_key_value_heads=1)
    assert isinstance(built.flops_per_item, float)


# --- the Predictor stores, build() builds; one question builder ----------------------------------

class _Untouchable:
    """A parameter value that fails on any use: `Predictor.__init__` may only store it."""

    def __getattr__(self, name: str) -> None:
        raise AssertionError(f"__init__ used its parameter ({name})")

    def __iter__(self) -> None:
        raise AssertionError("__init__ iterated its parameter")


def test_predictor_init_only_stores_its_parameters() -> None:
    from hwsel.predict import Predictor

    params = {"runs": _Untouchable(), "champions": _Untouchable(), "config": _Untouchable(), "layers": ("rules",),
              "notes": _Untouchable(), "champion_domain": _Untouchable(), "training_devices": _Untouchable(),
              "detect": False, "champion_modes": _Untouchable()}
    predictor = Predictor(**params)
    assert {name: getattr(predictor, name) for name in params} == params
    assert not [name for name in vars(predictor) if name.endswith("_")]  # nothing built yet
    with pytest.raises(ValueError, match="unknown layer 'oracle'"):
        Predictor(layers=("oracle",))  # a typo fails at once, without side effects
    built = Predictor(layers=("rules",), detect=False)
    assert built.build() is built and built.config_.origin == "defaults" and built.status_["rules"].available


def test_one_question_builds_the_model_once(monkeypatch: pytest.MonkeyPatch) -> None:
    """However many targets, `hwsel.query.ask` resolves the model once, for every front door."""
    import hwsel.query
    from hwsel.performance import predict_performance
    from hwsel.predict import Predictor
    from hwsel.select import select_hardware

    calls: list[object] = []
    real = hwsel.query.model_info

    def counting(model: object, config: object = None) -> object:
        calls.append(model)
        return real(model, config)  # type: ignore[arg-type]

    monkeypatch.setattr(hwsel.query, "model_info", counting)
    predictor = Predictor(layers=("rules",), detect=False)
    preds = predict_performance("bert-tiny", ["cpu", "cuda", "mps"], predictor=predictor)
    assert set(preds) == {"cpu", "cuda", "mps"} and calls == ["bert-tiny"]
    calls.clear()
    select_hardware("bert-tiny", available_hardware=["cpu", "cuda"], mode="training", predictor=predictor)
    assert calls == ["bert-tiny"]
    with pytest.raises(hwsel.query.QuestionError) as bad:
        predict_performance("bert-tiny", "cpu", mode="serving", predictor=predictor)
    assert bad.value.field == "mode" and "'serving'" in str(bad.value) and "inference, train" in str(bad.value)
    with pytest.raises(KeyError) as unknown:  # UnknownModelError is a QuestionError and a KeyError
        predict_performance("bert-bse", "cpu", predictor=predictor)
    assert isinstance(unknown.value, hwsel.query.QuestionError) and str(unknown.value).startswith("unknown model")
