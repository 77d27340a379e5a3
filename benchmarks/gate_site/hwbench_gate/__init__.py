"""``gate-torch``: a third party's backend that runs torch eager and then busy-works, on the same
thread, ``work - 1`` times each call's own duration: ``HWBENCH_GATE_WORK=1.3`` plants a 30 %
slowdown in every model, ``HWBENCH_GATE_WORK=bert-tiny=1.1,vit-tiny=1.3`` one per model named
(the others none); unset: none.

The folder above this package is a distribution (``hwbench_gate-0.1.dist-info``) that registers it
through the ``pytest_hwbench.backends`` entry-point group, the way a third party does: put the
folder on ``PYTHONPATH``. `benchmarks/gate_quality.py` and ``tests/test_ab.py`` plant their
slowdowns with it.
"""

from __future__ import annotations

import os
import time
from collections.abc import Callable
from typing import Any

from pytest_hwbench import (
    Backend,
    HardwareInfo,
    LoadedModel,
    ModelSpec,
    WrappedModel,
    get_backend,
    register_backend,
)


def work_of(model: str, setting: str) -> float:
    """The work factor `setting` (``HWBENCH_GATE_WORK``) gives `model`: a number for every model,
    or ``name=factor`` items joined by commas (1.0 for a model not named)."""
    if "=" not in setting:
        return float(setting or "1.0")
    factors = dict(item.split("=", 1) for item in setting.split(",") if item)
    return float(factors.get(model, "1.0"))


class GateTorch(Backend):
    name = "gate-torch"
    hardware = ("cpu",)
    precisions = ("fp32",)

    def markers(self, hardware: str) -> tuple[str, ...]:
        return get_backend("torch").markers(hardware)

    def default_precisions(self, hardware: str, hw: HardwareInfo) -> tuple[str, ...]:
        return ("fp32",)

    def unavailable(self, hardware: str, precision: str, hw: HardwareInfo) -> str | None:
        return get_backend("torch").unavailable(hardware, precision, hw)

    def load(self, spec: ModelSpec, hardware: str, precision: str, device_index: int = 0) -> LoadedModel:
        loaded = get_backend("torch").load(spec, hardware, precision, device_index)
        factor = work_of(spec.name, os.environ.get("HWBENCH_GATE_WORK", ""))

        def slower(call: Callable[[], Any]) -> Callable[[], Any]:
            def work() -> Any:
                start = time.perf_counter()
                out = call()
                until = start + factor * (time.perf_counter() - start)
                while time.perf_counter() < until:  # the extra work: busy, on this thread
                    pass
                return out

            return work

        return WrappedModel.around(loaded, slower)


register_backend(GateTorch())
