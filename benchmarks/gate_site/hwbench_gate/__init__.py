"""``gate-torch``: a third party's backend that runs torch eager and then busy-works, on the same
thread, ``HWBENCH_GATE_WORK - 1`` times each call's own duration (``HWBENCH_GATE_WORK=1.3``: a
planted 30 % slowdown; unset: none).

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
        factor = float(os.environ.get("HWBENCH_GATE_WORK", "1.0"))

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
