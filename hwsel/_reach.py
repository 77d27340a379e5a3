"""Reaching a tracking server: credentials passed as MLflow passes them, waits bounded and announced.

`reach` asks an ``http(s)://`` tracking URI's ``/health`` endpoint. Credentials in the URI
(``http://user:password@host``) are taken out of the URL and sent as HTTP basic auth, as MLflow's
client does with them (and with ``MLFLOW_TRACKING_USERNAME`` / ``MLFLOW_TRACKING_PASSWORD``, or
``MLFLOW_TRACKING_TOKEN`` as a bearer token); no message ever holds the password
(`pytest_hwbench.sinks.redact_uri`).

`bounded` runs one slow step (reading records, loading champions) in a daemon thread: after
`NOTICE_AFTER_S` without an answer it prints one line to stderr saying what it waits for and for
how long at most, and at the deadline it gives up with `HwselTimeout`, so the caller answers from
the other layers.
"""

from __future__ import annotations

import sys
import threading
import time
from collections.abc import Callable
from typing import Any, TypeVar
from urllib.parse import urlsplit

from pytest_hwbench.sinks import redact_uri
from pytest_hwbench.sinks.mlflow_sink import ping

#: Seconds hwsel waits for a tracking server or store per command (CLI ``--timeout``).
DEFAULT_TIMEOUT_S = 30.0
#: A step still waiting after this long gets a line on stderr.
NOTICE_AFTER_S = 3.0

_T = TypeVar("_T")


class HwselTimeout(TimeoutError):
    """A store or server did not answer within hwsel's deadline (``--timeout``)."""


def is_http(uri: Any) -> bool:
    """Whether `uri` is an ``http(s)://`` tracking URI (a server to reach)."""
    return isinstance(uri, str) and urlsplit(uri).scheme.lower() in ("http", "https")


def reach(uri: str, timeout: float = 2.0) -> str | None:
    """Why the tracking server at `uri` cannot be used now, or None when its ``/health`` answers
    200 within `timeout` seconds (None at once for a store that is not a server). Never raises;
    the reason never holds a password."""
    return ping(uri, timeout) if is_http(uri) else None


def bounded(fn: Callable[[], _T], budget_s: float, waiting: str) -> _T:
    """`fn()`, waiting at most `budget_s` seconds (see the module docstring); `waiting` says what
    for (redacted before it is shown). Raises `HwselTimeout` at the deadline, else what `fn` raised."""
    box: dict[str, Any] = {}

    def run() -> None:
        try:
            box["value"] = fn()
        except BaseException as exc:  # handed to the caller's thread
            box["error"] = exc

    shown = redact_uri(waiting)
    began = time.monotonic()
    thread = threading.Thread(target=run, name=f"hwsel ({shown})", daemon=True)
    thread.start()
    thread.join(min(budget_s, NOTICE_AFTER_S))
    if thread.is_alive() and budget_s > NOTICE_AFTER_S:
        left = budget_s - (time.monotonic() - began)
        print(f"hwsel: waiting for {shown} (at most {left:.0f} s more, --timeout; then the other layers answer)",
              file=sys.stderr, flush=True)
        thread.join(max(0.0, left))
    if thread.is_alive():
        raise HwselTimeout(f"no answer within {budget_s:g} s while waiting for {shown} (--timeout)")
    if "error" in box:
        raise box["error"]
    return box["value"]  # type: ignore[no-any-return]


__all__ = ["DEFAULT_TIMEOUT_S", "NOTICE_AFTER_S", "HwselTimeout", "bounded", "is_http", "reach"]
