"""`BenchCase`, one point of the benchmark grid, and the way back from its id. A value: the
module imports the vocabulary only, and looks registries up only when asked.
"""

from __future__ import annotations

import dataclasses
import re
from collections.abc import Iterable
from dataclasses import dataclass
from typing import TYPE_CHECKING

from .vocabulary import DEFAULT_MODE, PRECISIONS, TOKEN_MODES, check_precision, normalise_mode

if TYPE_CHECKING:
    from .hardware import HardwareInfo
    from .models import ModelSpec

#: Tokens a generate case makes per sequence when none is given.
DEFAULT_NEW_TOKENS = 32


@dataclass(frozen=True)
class BenchCase:
    """One point of the benchmark grid. `new_tokens` (token modes only, default `DEFAULT_NEW_TOKENS`):
    the tokens each sequence generates; `input_length` replaces the model's sequence length (the
    prompt length in generate mode) for text inputs."""

    model: str
    backend: str
    hardware: str
    precision: str
    batch_size: int
    mode: str = DEFAULT_MODE
    new_tokens: int | None = None
    input_length: int | None = None

    def __post_init__(self) -> None:
        # Checks of the value itself only: whether its names exist in the registries (the mode's
        # scenario, the backend, the model) is asked by whoever builds or runs cases.
        if self.batch_size < 1:
            raise ValueError(f"batch_size must be >= 1, got {self.batch_size}")
        object.__setattr__(self, "precision", check_precision(self.precision))
        object.__setattr__(self, "mode", normalise_mode(self.mode))  # "training" is "train"
        if not self.mode:
            raise ValueError("mode must be a mode's name, got ''")
        if self.mode in TOKEN_MODES:
            if self.new_tokens is None:
                object.__setattr__(self, "new_tokens", DEFAULT_NEW_TOKENS)
            elif self.new_tokens < 1:
                raise ValueError(f"new_tokens must be >= 1, got {self.new_tokens}")
        elif self.new_tokens is not None:
            raise ValueError(f"new_tokens applies to modes that generate tokens, not {self.mode!r}")
        if self.input_length is not None and self.input_length < 1:
            raise ValueError(f"input_length must be >= 1, got {self.input_length}")

    @property
    def id(self) -> str:
        """Readable case id, e.g. ``bert-base-cpu-torch-fp32-b8``, ``gpt2-cpu-torch-fp32-b1-generate-out32``."""
        base = f"{self.model}-{self.hardware}-{self.backend}-{self.precision}-b{self.batch_size}"
        if self.mode != DEFAULT_MODE:
            base += f"-{self.mode}"
        if self.input_length is not None:
            base += f"-in{self.input_length}"
        if self.new_tokens is not None:
            base += f"-out{self.new_tokens}"
        return base

    @property
    def load_key(self) -> tuple[str, ...]:
        """Cases with the same key share one loaded model (a token mode's new tokens are part of it)."""
        key = (self.model, self.backend, self.hardware, self.precision, self.mode)
        return key if self.new_tokens is None else (*key, f"out{self.new_tokens}")

    def spec(self) -> ModelSpec:
        """The zoo model, with `input_length` as its sequence length when given."""
        from .models import get_model

        spec = get_model(self.model)
        if self.input_length is not None and self.input_length != spec.sequence_length:
            spec = dataclasses.replace(spec, sequence_length=self.input_length)
        return spec

    def unavailable(self, hw: HardwareInfo | None = None) -> str | None:
        """None when this case can run here, else the skip reason (`pytest_hwbench.availability`)."""
        from .availability import unavailable

        return unavailable(self, hw)


def parse_case_id(case_id: str, *, models: Iterable[str], hardware: Iterable[str], backends: Iterable[str],
                  modes: Iterable[str]) -> BenchCase | None:
    """The case whose `BenchCase.id` is `case_id`, made of the names given, or None."""
    def alternatives(names: Iterable[str]) -> str:
        return "|".join(re.escape(n) for n in sorted(names, key=len, reverse=True))

    pattern = (rf"^(?P<model>{alternatives(models)})-(?P<hardware>{alternatives(hardware)})"
               rf"-(?P<backend>{alternatives(backends)})-(?P<precision>{alternatives(PRECISIONS)})"
               rf"-b(?P<batch>\d+)(?:-(?P<mode>{alternatives(m for m in modes if m != DEFAULT_MODE)}))?"
               rf"(?:-in(?P<input>\d+))?(?:-out(?P<tokens>\d+))?$")
    match = re.match(pattern, case_id)
    if match is None:
        return None
    try:
        case = BenchCase(match["model"], match["backend"], match["hardware"], match["precision"],
                         int(match["batch"]), match["mode"] or DEFAULT_MODE,
                         int(match["tokens"]) if match["tokens"] else None,
                         int(match["input"]) if match["input"] else None)
    except ValueError:
        return None
    return case if case.id == case_id else None


__all__ = ["DEFAULT_NEW_TOKENS", "BenchCase", "parse_case_id"]
