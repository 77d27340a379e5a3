"""Backends: one module per runtime behind the `Backend` protocol (see `base`)."""

from __future__ import annotations

from .base import Backend, LoadedModel, get_backend, register_backend, registered_backends

__all__ = ["Backend", "LoadedModel", "get_backend", "register_backend", "registered_backends"]
