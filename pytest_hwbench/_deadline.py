"""One slow call with a deadline: how the sinks (a tracking server, a locked DuckDB file) and hwsel
(records and champions behind a tracking server) wait for what may never answer."""

from __future__ import annotations

import threading
import time
from collections.abc import Callable
from typing import Any, TypeVar

#: A call still waiting after this share of its budget gets one line saying what it waits for.
NOTICE_FRACTION = 1 / 3

_T = TypeVar("_T")


def call_with_deadline(
    fn: Callable[[], _T],
    budget_s: float,
    *,
    name: str,
    on_wait: Callable[[float], None],
    on_deadline: Callable[[], TimeoutError],
) -> _T:
    """`fn()`, waiting at most `budget_s` seconds: `on_wait` gets the seconds left, once, when `fn`
    has not answered after `NOTICE_FRACTION` of them; at the deadline, raises what `on_deadline()`
    builds. Else returns what `fn` returned, or raises what it raised, with the seconds spent in
    its ``hwbench_elapsed_s``. `name` names the thread (seen in a stack dump)."""
    box: dict[str, Any] = {}

    def run() -> None:
        try:
            box["value"] = fn()
        except BaseException as exc:  # handed to the caller's thread
            box["error"] = exc

    began = time.monotonic()
    thread = threading.Thread(target=run, name=name, daemon=True)
    thread.start()
    thread.join(budget_s * NOTICE_FRACTION)
    if thread.is_alive():
        on_wait(budget_s - (time.monotonic() - began))
        thread.join(max(0.0, budget_s - (time.monotonic() - began)))
    if thread.is_alive():
        raise on_deadline()
    if "error" in box:
        error = box["error"]
        error.hwbench_elapsed_s = time.monotonic() - began
        raise error
    return box["value"]  # type: ignore[no-any-return]


__all__ = ["NOTICE_FRACTION", "call_with_deadline"]
