"""Numbers read from the environment (``HWBENCH_WEB_TIMEOUT_S`` and the like), each declared
once in `ENV_SETTINGS` and all checked when a session starts, so a bad value is a usage error.
"""

from __future__ import annotations

import math
import os
from collections.abc import Mapping
from dataclasses import dataclass


@dataclass(frozen=True)
class EnvSetting:
    """One environment variable holding a number: unset or blank means `default`."""

    name: str
    default: float | None
    minimum: float
    help: str
    #: the minimum itself is accepted (else only values above it)
    inclusive: bool = True
    integer: bool = False

    def read(self, environ: Mapping[str, str] | None = None) -> float | None:
        """The value set, or `default`; ValueError naming the variable and what it accepts."""
        text = (os.environ if environ is None else environ).get(self.name, "").strip()
        if not text:
            return self.default
        try:
            value: float | None = int(text) if self.integer else float(text)
        except ValueError:
            value = None
        if value is None or not math.isfinite(value) or not (
                value >= self.minimum if self.inclusive else value > self.minimum):
            kind = "a whole number" if self.integer else "a finite number"
            bound = f">= {self.minimum:g}" if self.inclusive else f"> {self.minimum:g}"
            default = "unset" if self.default is None else f"{self.default:g}"
            raise ValueError(f"{self.name}={text!r} is not accepted; accepted: {kind} {bound} "
                             f"(default {default}: {self.help})")
        return value


#: Every numeric environment setting of the harness, by variable name.
ENV_SETTINGS: dict[str, EnvSetting] = {s.name: s for s in (
    EnvSetting("HWBENCH_WEB_PROBE_TIMEOUT_S", 30.0, 0.0, "seconds the web probe may take, the browser's start "
               "included", inclusive=False),
    EnvSetting("HWBENCH_WEB_TIMEOUT_S", 300.0, 0.0, "seconds one load or measurement may take in the page",
               inclusive=False),
    EnvSetting("HWBENCH_WEB_WARMUP_S", 1.0, 0.0, "seconds of warm-up in the page"),
    EnvSetting("HWBENCH_WEB_SETTLE_S", 10.0, 0.0, "longest warm-up until steady in a fresh page; 0: off"),
    EnvSetting("HWBENCH_WEB_THREADS", None, 1, "wasm threads; unset: onnxruntime-web's default", integer=True),
    EnvSetting("HWBENCH_QAI_HUB_TIMEOUT_S", 3600, 1, "seconds to wait for one AI Hub compile or profile job",
               integer=True),
)}


def check_env_settings(environ: Mapping[str, str] | None = None) -> None:
    """Raise ValueError naming the first environment setting whose value is not accepted."""
    for setting in ENV_SETTINGS.values():
        setting.read(environ)


__all__ = ["ENV_SETTINGS", "EnvSetting", "check_env_settings"]
