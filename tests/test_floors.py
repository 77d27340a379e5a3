"""The floors of ARCHITECTURE.md hold: no import climbs a floor, every module stands on one, and
hwsel reads only the floors of the readers.

The floors are read from ARCHITECTURE.md's ``## Floors`` list, so the document and this check
cannot drift apart. Imports are read with `ast` as in `test_structure.import_graph` (function-level
and ``TYPE_CHECKING`` imports count).
"""

from __future__ import annotations

import re
from pathlib import Path

import pytest
from test_structure import import_graph

ROOT = Path(__file__).resolve().parents[1]
ARCHITECTURE = ROOT / "ARCHITECTURE.md"
PACKAGES = ("pytest_hwbench", "hwsel")
#: The floors whose modules hwsel may import: words, values, stores and detection.
READER_FLOORS = 3
#: The longest chain of imports between rooms (a top-level module or a subpackage of
#: pytest_hwbench, hwsel as one room) that the layout has today; a longer one fails.
MAX_CHAIN = 12


def floors_from(text: str) -> dict[str, int]:
    """Dotted name -> floor, from the numbered list under ``## Floors``."""
    section = text.split("## Floors", 1)[1].split("\n## ", 1)[0]
    out: dict[str, int] = {}
    for number, names in re.findall(r"^(\d+)\. [^:]+: (.+)$", section, flags=re.MULTILINE):
        for name in re.findall(r"`([\w.]+)`", names):
            dotted = ("pytest_hwbench" if name == "__init__" else name if name.split(".")[0] in PACKAGES
                      else f"pytest_hwbench.{name}")
            if dotted in out:
                raise ValueError(f"{name} stands on floors {out[dotted]} and {number}")
            out[dotted] = int(number)
    if not out:
        raise ValueError("ARCHITECTURE.md has no numbered list under '## Floors'")
    return out


def floor_of(module: str, floors: dict[str, int]) -> int | None:
    """The floor of the longest listed name that holds `module` (the package face only by name)."""
    holders = [name for name in floors if module == name or (module.startswith(name + ".") and name != "pytest_hwbench")]
    return floors[max(holders, key=len)] if holders else None


def climbs(graph: dict[str, dict[str, int]], floors: dict[str, int]) -> list[str]:
    """Each import from a module to one on a higher floor, as ``a (floor) -> b (floor), line n``
    (a module on no floor is `test_every_module_stands_on_a_floor`'s to report)."""
    found = []
    for a, targets in sorted(graph.items()):
        for b, line in sorted(targets.items()):
            low, high = floor_of(a, floors), floor_of(b, floors)
            if low is not None and high is not None and low < high:
                found.append(f"{a} ({low}) -> {b} ({high}), line {line}")
    return found


def room(module: str) -> str:
    """The room a module belongs to: hwsel whole, else pytest_hwbench's top-level module or subpackage."""
    parts = module.split(".")
    return parts[0] if parts[0] == "hwsel" else ".".join(parts[:2])


def longest_chain(graph: dict[str, dict[str, int]]) -> list[str]:
    """The longest chain of imports between rooms (the room graph has no cycle: `test_structure`)."""
    edges: dict[str, set[str]] = {}
    for a, targets in graph.items():
        edges.setdefault(room(a), set()).update(room(b) for b in targets if room(b) != room(a))
    best: dict[str, list[str]] = {}

    def chain(r: str) -> list[str]:
        if r not in best:
            best[r] = [r]  # guards a cycle; the real value replaces it
            best[r] = [r, *max((chain(t) for t in sorted(edges.get(r, ()))), key=len, default=[])]
        return best[r]

    return max((chain(r) for r in sorted(edges)), key=len)


@pytest.fixture(scope="module")
def floors() -> dict[str, int]:
    return floors_from(ARCHITECTURE.read_text(encoding="utf-8"))


@pytest.fixture(scope="module")
def graph() -> dict[str, dict[str, int]]:
    return import_graph(*PACKAGES)


def test_no_import_climbs_a_floor(floors: dict[str, int], graph: dict[str, dict[str, int]]) -> None:
    found = climbs(graph, floors)
    assert not found, "imports that climb a floor (ARCHITECTURE.md, ## Floors):\n" + "\n".join(found)


def test_every_module_stands_on_a_floor(floors: dict[str, int], graph: dict[str, dict[str, int]]) -> None:
    homeless = sorted(m for m in graph if floor_of(m, floors) is None)
    assert not homeless, f"modules on no floor; add them to ARCHITECTURE.md's ## Floors: {homeless}"


def test_hwsel_reads_only_the_readers(floors: dict[str, int], graph: dict[str, dict[str, int]]) -> None:
    above = sorted({f"{a} -> {b}" for a, targets in graph.items() if a.startswith("hwsel") for b in targets
                    if b.startswith("pytest_hwbench") and (floor_of(b, floors) or 99) > READER_FLOORS})
    assert not above, f"hwsel imports above the readers (floors 1-{READER_FLOORS}): {above}"


def test_the_longest_chain_between_rooms_does_not_grow(graph: dict[str, dict[str, int]]) -> None:
    chain = longest_chain(graph)
    assert len(chain) <= MAX_CHAIN, f"{len(chain)} floors: " + " -> ".join(chain)


def test_the_checks_see_a_climb_a_homeless_module_and_a_long_chain() -> None:
    floors = floors_from("## Floors\n\n1. low: `record`\n2. high: `runner`\n\n## Next\n")
    graph = {"pytest_hwbench.record": {"pytest_hwbench.runner": 7}, "pytest_hwbench.runner": {},
             "pytest_hwbench.sinks.base": {"pytest_hwbench.record": 3}}
    assert climbs(graph, floors) == ["pytest_hwbench.record (1) -> pytest_hwbench.runner (2), line 7"]
    assert floor_of("pytest_hwbench.sinks.base", floors) is None
    assert longest_chain(graph) == ["pytest_hwbench.sinks", "pytest_hwbench.record", "pytest_hwbench.runner"]
    with pytest.raises(ValueError, match="floors 1 and 2"):
        floors_from("## Floors\n\n1. a: `record`\n2. b: `record`\n")
