"""Our warning category and error types."""

from __future__ import annotations


class HwbenchWarning(UserWarning):
    """Warnings from hwbench (filter with ``-W ignore::pytest_hwbench.HwbenchWarning``)."""


class HwbenchError(Exception):
    """Base class of hwbench errors."""


class UnsupportedCase(HwbenchError):
    """A backend cannot run this combination here (missing runtime, device or precision); the
    message names what is missing, and the plugin turns it into a skip reason."""


class PrecisionMismatch(HwbenchError):
    """The runtime ran a different precision from the one asked for."""


class OutOfMemory(HwbenchError):
    """A case ran out of device or host memory (freed); it is recorded as failed, the next runs."""


__all__ = ["HwbenchError", "HwbenchWarning", "OutOfMemory", "PrecisionMismatch", "UnsupportedCase"]
