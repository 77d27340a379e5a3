"""The ``qnn`` target: Qualcomm NPUs through Qualcomm AI Hub (cloud devices; qai-hub and a token),
and where qai-hub's token comes from (the backend, `pytest_hwbench.backends.qai_hub`, reads it here).
"""

from __future__ import annotations

import importlib
import os
from pathlib import Path

from ..hardware import TargetInfo, not_available, register_probe

#: Environment variable holding an API token; qai-hub itself reads only its ini file, so the
#: backend passes this one through `qai_hub.ClientConfig`.
TOKEN_ENV = "QAI_HUB_API_TOKEN"
#: The ini file ``qai-hub configure`` writes is this variable's path when set.
CLIENT_INI_ENV = "QAIHUB_CLIENT_INI"
NOT_INSTALLED = "qai-hub is not installed (pip install 'pytest-hwbench[qnn]')"
NO_TOKEN = f"no Qualcomm AI Hub token: run `qai-hub configure --api_token TOKEN` or set {TOKEN_ENV}"


def client_ini() -> Path:
    """The ini file qai-hub reads its token from."""
    return Path(os.environ.get(CLIENT_INI_ENV) or "~/.qai_hub/client.ini").expanduser()


def detect_qnn() -> TargetInfo:
    """Qualcomm NPUs through Qualcomm AI Hub (cloud devices; needs qai-hub and a token)."""
    try:
        hub = importlib.import_module("qai_hub")
    except ImportError:
        return not_available("qnn", NOT_INSTALLED)
    version = getattr(hub, "__version__", "?")
    if not os.environ.get(TOKEN_ENV) and not client_ini().exists():
        return not_available("qnn", NO_TOKEN, version=version)
    # The Hexagon NPU runs float graphs in fp16: there is no native fp32 there.
    return TargetInfo("qnn", True, "", (), ("fp16", "int8"), {"version": version})


register_probe("qnn", detect_qnn)

__all__ = ["CLIENT_INI_ENV", "NOT_INSTALLED", "NO_TOKEN", "TOKEN_ENV", "client_ini", "detect_qnn"]
