"""The ``qnn`` target: Qualcomm NPUs through Qualcomm AI Hub (cloud devices; qai-hub and a token)."""

from __future__ import annotations

import importlib
import os
from pathlib import Path

from ..hardware import TargetInfo, not_available, register_probe


def qai_hub_configured() -> str | None:
    """None when Qualcomm AI Hub has a token, else how to configure one."""
    if os.environ.get("QAI_HUB_API_TOKEN"):
        return None
    ini = os.environ.get("QAIHUB_CLIENT_INI") or str(Path.home() / ".qai_hub" / "client.ini")
    if Path(ini).exists():
        return None
    return ("no Qualcomm AI Hub token: run `qai-hub configure --api_token TOKEN` "
            "or set QAI_HUB_API_TOKEN")


def detect_qnn() -> TargetInfo:
    """Qualcomm NPUs through Qualcomm AI Hub (cloud devices; needs qai-hub and a token)."""
    try:
        hub = importlib.import_module("qai_hub")
    except ImportError:
        return not_available("qnn", "qai-hub is not installed (pip install 'pytest-hwbench[qnn]')")
    reason = qai_hub_configured()
    if reason:
        return not_available("qnn", reason, version=getattr(hub, "__version__", "?"))
    # The Hexagon NPU runs float graphs in fp16: there is no native fp32 there.
    return TargetInfo("qnn", True, "", (), ("fp16", "int8"),
                      {"version": getattr(hub, "__version__", "?")})


register_probe("qnn", detect_qnn)

__all__ = ["detect_qnn", "qai_hub_configured"]
