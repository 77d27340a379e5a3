"""This machine's CPU as hwbench names it: the device that a cpu or wasm question asked here
defaults to, so records of "this machine" carry it whatever machine runs the tests."""

from __future__ import annotations

import functools


@functools.cache
def cpu_name() -> str:
    """The detected CPU's name, whitespace collapsed as hwsel reads it."""
    from pytest_hwbench.hardware import detect_hardware

    return " ".join(str(detect_hardware(targets=("cpu",)).targets["cpu"].devices[0].name).split())
