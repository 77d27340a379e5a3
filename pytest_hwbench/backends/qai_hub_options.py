"""The qai_hub backend's pytest options (``pytest11`` entry point ``hwbench-qai-hub``), as a
third party's backend would have them: the device reaches the backend at configure time, in the
controller and in every xdist worker."""

from __future__ import annotations

import pytest


def pytest_addoption(parser: pytest.Parser) -> None:
    parser.getgroup("hwbench").addoption(
        "--hwbench-qai-hub-device", dest="hwbench_qai_hub_device", default=None, metavar="NAME",
        help="Qualcomm AI Hub device for qnn cases (`qai-hub list-devices`; default: "
             "$HWBENCH_QAI_HUB_DEVICE, else Samsung Galaxy S24 (Family))")


def pytest_configure(config: pytest.Config) -> None:
    device = config.getoption("hwbench_qai_hub_device", None)
    if device is None:
        return
    if not device.strip():
        raise pytest.UsageError("--hwbench-qai-hub-device: empty device name; see `qai-hub list-devices`")
    from .qai_hub import BACKEND

    BACKEND.device = device.strip()
