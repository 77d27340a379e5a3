"""A file that is no package module (a benchmark script, bench_suites' conftest) imported by path."""

from __future__ import annotations

import contextlib
import importlib.util
import sys
from collections.abc import Iterator
from pathlib import Path
from types import ModuleType


@contextlib.contextmanager
def script_module(path: Path, name: str) -> Iterator[ModuleType]:
    """`path` imported as the module `name`, which is in `sys.modules` while in use (dataclasses
    look their module up while a class is built) and gone after."""
    spec = importlib.util.spec_from_file_location(name, path)
    assert spec is not None and spec.loader is not None, path
    module = importlib.util.module_from_spec(spec)
    sys.modules[name] = module
    try:
        spec.loader.exec_module(module)
        yield module
    finally:
        sys.modules.pop(name, None)
