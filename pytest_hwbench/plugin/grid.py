"""The case grid, without pytest: what a run asks for (`Selection`), narrowed per test by its
hwbench markers (`marker_values`), expanded into cases (`generate_cases`). Errors are ValueErrors."""

from __future__ import annotations

import difflib
import itertools
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass, fields
from typing import Any

from ..backends.base import Backend, registered_backends
from ..case import DEFAULT_NEW_TOKENS, BenchCase, parse_case_id
from ..hardware import HardwareInfo, not_available
from ..models import FAMILIES, MODELS, ModelSpec, get_model
from ..scenarios import get_scenario, registered_modes
from ..vocabulary import DEFAULT_MODE, PRECISIONS, TOKEN_MODES

DEFAULT_BATCH_SIZES: tuple[int, ...] = (1, 8, 32)
#: Modalities whose main input is a token sequence, which ``input_lengths`` sets.
_TEXT_MODALITIES = frozenset({"text", "text2text"})


def hardware_targets() -> tuple[str, ...]:
    """Every hardware value a registered backend addresses (``cpu``, ``cuda``, ``qnn``...)."""
    return tuple(dict.fromkeys(h for backend in registered_backends().values() for h in backend.hardware))


@dataclass(frozen=True)
class Selection:
    """What the command line asks for, each field its ``--hwbench-<field>`` option parsed
    (``batch_sizes``: ``--hwbench-batch-sizes``); None where it narrows nothing (the default grid)."""

    models: tuple[str, ...] | None = None
    families: tuple[str, ...] | None = None
    batch_sizes: tuple[int, ...] | None = None
    precisions: tuple[str, ...] | None = None
    backends: tuple[str, ...] | None = None
    hardware: tuple[str, ...] | None = None
    modes: tuple[str, ...] | None = None
    new_tokens: tuple[int, ...] | None = None
    input_lengths: tuple[int, ...] | None = None

    @classmethod
    def from_options(cls, getoption: Callable[[str], Any]) -> Selection:
        """The selection from ``getoption(dest)`` (``hwbench_models``...); an empty value narrows nothing."""
        values = {f.name: getoption(f"hwbench_{f.name}") for f in fields(cls)}
        return cls(**{name: tuple(value) if value else None for name, value in values.items()})


#: Keywords ``@pytest.mark.hwbench`` takes: each narrows the field of `Selection` of that name.
MARKER_KEYWORDS = frozenset(f.name for f in fields(Selection))


@dataclass(frozen=True)
class Grid:
    """The cases of one test, and lines for the run's summary."""

    cases: list[BenchCase]
    notes: tuple[str, ...] = ()


def _marker_choices(key: str) -> tuple[str, ...] | None:
    """The values a name-valued hwbench marker keyword accepts (None: positive integers)."""
    if key == "models":
        return tuple(MODELS)
    return {"families": FAMILIES, "backends": tuple(registered_backends()), "precisions": PRECISIONS,
            "modes": registered_modes(), "hardware": hardware_targets()}.get(key)


def _check_marker_values(nodeid: str, key: str, value: Any) -> tuple[Any, ...]:
    """`value` of marker keyword `key` as a tuple, or ValueError naming the test, value and choices."""
    values = tuple(value) if isinstance(value, (list, tuple, set, frozenset)) else (value,)
    where = f"{nodeid}: @pytest.mark.hwbench({key}=...)"
    if not values:
        raise ValueError(f"{where}: empty list; leave the keyword out to keep the whole grid")
    allowed = _marker_choices(key)
    for item in values:
        if allowed is None:
            if isinstance(item, bool) or not isinstance(item, int) or item < 1:
                raise ValueError(f"{where}: {item!r} is not accepted; accepted: positive integers")
        elif item not in allowed:
            if key == "models":
                close = difflib.get_close_matches(str(item), allowed, n=3)
                hint = f"did you mean {', '.join(close)}? " if close else ""
                raise ValueError(f"{where}: unknown model {item!r}; {hint}`hwbench models` lists the zoo")
            raise ValueError(f"{where}: {item!r} is not accepted; accepted: {', '.join(allowed)}")
    return values


def marker_values(nodeid: str, marks: Iterable[tuple[tuple[Any, ...], Mapping[str, Any]]]) -> dict[str, Any]:
    """Keyword -> values the hwbench marks of test `nodeid` narrow (``(args, kwargs)`` each, closest
    first, which wins); ValueError on an unknown keyword, a positional argument or a bad value."""
    narrowed: dict[str, Any] = {}
    for args, kwargs in marks:
        unknown = set(kwargs) - MARKER_KEYWORDS
        if unknown or args:
            raise ValueError(
                f"{nodeid}: @pytest.mark.hwbench takes keyword arguments "
                f"{', '.join(sorted(MARKER_KEYWORDS))}; got {', '.join(sorted(unknown)) or args}"
            )
        for key, value in kwargs.items():
            narrowed.setdefault(key, _check_marker_values(nodeid, key, value))
    return narrowed


def generate_cases(selection: Selection, detect: Callable[[Sequence[str]], HardwareInfo],
                   narrowed: Mapping[str, Any] | None = None, test: str = "",
                   keeps: Callable[[Iterable[str]], bool] | None = None) -> Grid:
    """The grid of cases `selection` asks for, in an order that reuses loaded models.

    `detect(targets)` (``detect_hardware``, or a fixed `HardwareInfo` in a test) is called once,
    with the targets the kept cases' backends read (`Backend.detects`). `narrowed` holds the hwbench
    marker's keywords of `test` (`marker_values`); one that the selection narrows to nothing gives a
    note. `keeps(marks)` says whether a case with these marks survives ``-m``: the cases it drops
    are still generated (pytest deselects them), their targets not probed.
    """
    narrowed = narrowed or {}
    notes: list[str] = []

    def pick(key: str, default: Any) -> Any:
        # A marker narrows the test, the command line narrows the run: both apply (and may
        # leave nothing, e.g. a generate-only test under --hwbench-modes inference).
        from_option, from_marker = getattr(selection, key), narrowed.get(key)
        if from_option and from_marker:
            both = tuple(v for v in from_marker if v in from_option)
            if not both:
                notes.append(f"{test or 'a test'}: its marker's {key}={list(from_marker)} and "
                             f"--hwbench-{key.replace('_', '-')} {','.join(map(str, from_option))} leave no case")
            return both
        chosen = from_option or from_marker
        return tuple(chosen) if chosen else default

    backends = registered_backends()
    models = pick("models", tuple(MODELS))
    families = pick("families", None)
    batch_sizes = pick("batch_sizes", DEFAULT_BATCH_SIZES)
    precisions = pick("precisions", None)
    named_backends = pick("backends", None)
    wanted_backends = named_backends if named_backends is not None else tuple(backends)
    wanted_hardware = pick("hardware", None)
    modes = pick("modes", (DEFAULT_MODE,))
    new_tokens = pick("new_tokens", (DEFAULT_NEW_TOKENS,))
    input_lengths = pick("input_lengths", (None,))
    # The grid's points first, then one detection of the targets the kept points read, then precisions.
    points = []
    for mode in modes:
        scenario = get_scenario(mode)
        tokens_per_case = new_tokens if mode in TOKEN_MODES else (None,)
        for name in models:
            spec: ModelSpec = get_model(name)
            if families is not None and spec.family not in families:
                continue
            if not scenario.supports(spec):
                continue  # e.g. generate on an encoder: no case, rather than a skip per grid point
            lengths = input_lengths if spec.modality in _TEXT_MODALITIES else (None,)
            for backend_name in wanted_backends:
                if backend_name not in scenario.backends:
                    continue  # e.g. train on onnxruntime: no case
                backend = backends[backend_name]
                for hardware in backend.hardware:
                    if wanted_hardware is not None and hardware not in wanted_hardware:
                        continue
                    if named_backends is None and hardware in backend.opt_in_hardware:
                        continue  # e.g. torch.compile on cpu: only when asked for by name
                    kept = keeps is None or keeps(case_marks(backend, hardware, mode, spec))
                    points.append((mode, scenario, tokens_per_case, name, lengths, backend_name, backend, hardware, kept))
    wanted = dict.fromkeys(t for *_, backend, hardware, kept in points if kept for t in backend.detects(hardware))
    hw = detect(tuple(wanted)) if wanted else HardwareInfo({})
    cases = []
    for mode, scenario, tokens_per_case, name, lengths, backend_name, backend, hardware, kept in points:
        why = "not probed: the run's -m selection keeps no case on it"
        seen = hw if kept else HardwareInfo({t: not_available(t, why) for t in backend.detects(hardware)})
        defaults = backend.default_precisions(hardware, seen)
        # asked-for precisions the mode lacks skip with its reason
        defaults = tuple(p for p in defaults if p in scenario.precisions)
        chosen = precisions if precisions is not None else defaults
        for precision, length, tokens, batch in itertools.product(chosen, lengths, tokens_per_case, batch_sizes):
            cases.append(BenchCase(name, backend_name, hardware, precision, int(batch), mode, tokens, length))
    return Grid(cases, tuple(notes))


def case_marks(backend: Backend, hardware: str, mode: str, spec: ModelSpec) -> list[str]:
    """The marks a case carries: its backend's markers on `hardware`, its mode, ``quick`` (quick tier)."""
    return [*backend.markers(hardware), mode, *(("quick",) if spec.tier == "quick" else ())]


def case_from_id(case_id: str) -> BenchCase | None:
    """The case whose `BenchCase.id` is `case_id`, or None when it is none of this run's cases."""
    return parse_case_id(case_id, models=MODELS, hardware=hardware_targets(), backends=registered_backends(),
                         modes=registered_modes())


__all__ = ["DEFAULT_BATCH_SIZES", "MARKER_KEYWORDS", "Grid", "Selection", "case_from_id", "case_marks",
           "generate_cases",
           "hardware_targets", "marker_values"]
