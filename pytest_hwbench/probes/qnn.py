"""The ``qnn`` target: Qualcomm NPUs through Qualcomm AI Hub (cloud devices; qai-hub and a token)."""

from __future__ import annotations

import importlib
import os
from pathlib import Path

from ..hardware import TargetInfo, not_available, register_probe


def detect_qnn() -> TargetInfo:
    """Qualcomm NPUs through Qualcomm AI Hub (cloud devices; needs qai-hub and a token)."""
    try:
        hub = importlib.import_module("qai_hub")
    except ImportError:
        return not_available("qnn", "qai-hub is not installed (pip install 'pytest-hwbench[qnn]')")
    version = getattr(hub, "__version__", "?")
    ini = os.environ.get("QAIHUB_CLIENT_INI") or str(Path.home() / ".qai_hub" / "client.ini")
    if not os.environ.get("QAI_HUB_API_TOKEN") and not Path(ini).exists():
        return not_available("qnn", "no Qualcomm AI Hub token: run `qai-hub configure --api_token TOKEN` "
                                    "or set QAI_HUB_API_TOKEN", version=version)
    # The Hexagon NPU runs float graphs in fp16: there is no native fp32 there.
    return TargetInfo("qnn", True, "", (), ("fp16", "int8"), {"version": version})


register_probe("qnn", detect_qnn)

__all__ = ["detect_qnn"]
