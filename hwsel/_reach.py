"""Reaching a tracking server: credentials passed as MLflow passes them, no password in any
message, waits bounded and announced (`bounded`, `HwselTimeout`)."""

from __future__ import annotations

import sys
from collections.abc import Callable, Iterable
from typing import Any, TypeVar

from pytest_hwbench._deadline import call_with_deadline
from pytest_hwbench.sinks import redact_uri

#: Seconds hwsel waits for a tracking server or store per command (CLI ``--timeout``).
DEFAULT_TIMEOUT_S = 30.0

_T = TypeVar("_T")


class HwselTimeout(TimeoutError):
    """A store or server did not answer within hwsel's deadline (``--timeout``)."""


class HwselUnreachable(ConnectionError):
    """A tracking server that a command cannot do without does not answer its ``/health``."""


#: What to do instead when the tracking server an option names does not answer.
_INSTEAD = {"--source": "or pass --source a .duckdb, .parquet or .jsonl file",
            "--tracking-uri": "or pass --tracking-uri another store (e.g. sqlite:///mlruns/mlflow.db)"}


def require_reachable(stores: Iterable[tuple[Any, str]], timeout: float) -> None:
    """Raise `HwselUnreachable` naming the option of the first store among `stores` (``(uri,
    option)`` pairs) that does not answer (`pytest_hwbench.sinks.mlflow_uri.require_answer`, an
    ``http(s)://`` server within ``min(2, timeout)`` seconds); ValueError where it refuses the
    credentials or is no database."""
    from pytest_hwbench.sinks.mlflow_uri import require_answer

    for uri, option in stores:
        try:
            require_answer(None if uri is None else str(uri), option, timeout=min(2.0, timeout),
                           fix=f"start the tracking server, {_INSTEAD.get(option, 'or name another')}")
        except ConnectionError as exc:
            raise HwselUnreachable(str(exc)) from None


def bounded(fn: Callable[[], _T], budget_s: float, waiting: str, *, then: str = "the other layers answer") -> _T:
    """`fn()` in a daemon thread, waiting at most `budget_s` seconds (`call_with_deadline`): one line
    on stderr says what it waits for (`waiting`, redacted) and what happens at the deadline (`then`). Raises `HwselTimeout` at the deadline, else what `fn` raised."""
    shown = redact_uri(waiting)

    def waited(left: float) -> None:
        print(f"hwsel: waiting for {shown} (at most {left:.0f} s more, --timeout; then {then})",
              file=sys.stderr, flush=True)

    return call_with_deadline(
        fn, budget_s, name=f"hwsel ({shown})", on_wait=waited,
        on_deadline=lambda: HwselTimeout(f"no answer within {budget_s:g} s while waiting for {shown} (--timeout)"),
    )


__all__ = ["DEFAULT_TIMEOUT_S", "HwselTimeout", "HwselUnreachable", "bounded", "require_reachable"]
