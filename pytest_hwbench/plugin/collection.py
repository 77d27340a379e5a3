"""Collection: parametrize ``hwbench_case`` from the grid, and skip by capability."""

from __future__ import annotations

from collections.abc import Callable, Iterable
from typing import Any

import pytest

from ..availability import targets_for
from ..backends.base import registered_backends
from ..case import BenchCase
from ..hardware import detect_hardware
from ..models import get_model
from ..plugin_api import case_of
from .grid import case_marks, generate_cases, marker_values
from .state import STATE


def _param(case: BenchCase) -> Any:
    backend = registered_backends()[case.backend]
    marks = [getattr(pytest.mark, m) for m in case_marks(backend, case.hardware, case.mode, get_model(case.model))]
    # `--dist loadgroup` keeps the batch sizes of one loaded model on one worker.
    marks.append(pytest.mark.xdist_group("-".join(case.load_key)))
    return pytest.param(case, id=case.id, marks=marks)


def _mark_selection(config: pytest.Config, metafunc: pytest.Metafunc) -> Callable[[Iterable[str]], bool] | None:
    """Whether a case of this test with the given marks (and the test's) survives the run's ``-m``
    expression, by pytest's own grammar; None (all may) without one or for one on mark arguments."""
    text = config.option.markexpr
    if not text or "(" in text:
        return None
    try:
        from _pytest.mark.expression import Expression  # pytest's -m grammar; no public handle

        expression = Expression.compile(text)
    except Exception:  # noqa: BLE001 - pytest reports a bad expression itself
        return None
    own = {mark.name for mark in metafunc.definition.iter_markers()}

    def keeps(marks: Iterable[str]) -> bool:
        names = own | set(marks)
        try:
            return bool(expression.evaluate(lambda name, /, **kwargs: name in names))
        except Exception:  # noqa: BLE001 - a grammar this pytest evaluates otherwise: keep the case
            return True

    return keeps


def pytest_generate_tests(metafunc: pytest.Metafunc) -> None:
    if "hwbench_case" not in metafunc.fixturenames:
        return
    config, state, test = metafunc.config, metafunc.config.stash[STATE], metafunc.definition
    try:
        narrowed = marker_values(test.nodeid, ((m.args, m.kwargs) for m in test.iter_markers("hwbench")))
    except ValueError as exc:
        raise pytest.UsageError(str(exc)) from None
    # Only the targets the kept cases read are probed.
    keeps = _mark_selection(config, metafunc)
    grid = generate_cases(state.selection, detect_hardware, narrowed, test.nodeid, keeps=keeps)
    cases = grid.cases
    config.hook.pytest_hwbench_modify_cases(config=config, cases=cases)
    state.notes.extend(grid.notes)
    state.collection["generated"] += len(cases)
    metafunc.parametrize("hwbench_case", [_param(c) for c in cases])


@pytest.hookimpl(tryfirst=True, specname="pytest_collection_modifyitems")  # before `-m`/`-k` deselect
def count_matched_cases(config: pytest.Config, items: list[pytest.Item]) -> None:
    """Count the cases the command line's paths and node ids matched, before any deselection."""
    config.stash[STATE].collection["matched"] += sum(1 for item in items if case_of(item) is not None)


@pytest.hookimpl(trylast=True)  # after `-m`/`-k` deselection: check only the cases that will run
def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    # Skip by capability at collection: absent hardware costs no fixture set-up.
    kept = [(item, case) for item in items if (case := case_of(item)) is not None]
    config.stash[STATE].collection["selected"] += len(kept)
    if not kept:
        return
    hw = detect_hardware(targets=dict.fromkeys(t for _, case in kept for t in targets_for(case)))
    for item, case in kept:
        reason = case.unavailable(hw)
        if reason:
            item.add_marker(pytest.mark.skip(reason=reason))


__all__ = ["count_matched_cases", "pytest_collection_modifyitems", "pytest_generate_tests"]
