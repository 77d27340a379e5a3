"""Reaching a tracking server: credentials passed as MLflow passes them, no password in any
message, waits bounded and announced (`bounded`, `HwselTimeout`); and MLflow's noise (pickle
cautions, SQLAlchemy deprecations, progress bars, run links) kept off the user's terminal while
hwsel calls it: `quiet_mlflow` sends it to the ``hwsel.mlflow`` logger."""

from __future__ import annotations

import contextlib
import logging
import os
import sys
import warnings
from collections.abc import Callable, Iterable, Iterator
from typing import Any, TypeVar

from pytest_hwbench._deadline import call_with_deadline
from pytest_hwbench.sinks import redact_uri

#: Seconds hwsel waits for a tracking server or store per command (CLI ``--timeout``).
DEFAULT_TIMEOUT_S = 30.0

_T = TypeVar("_T")

log = logging.getLogger("hwsel.mlflow")

#: MLflow loggers whose records inside `quiet_mlflow` go to debug: the pickle caution on save and
#: the store's "Creating initial MLflow database tables" on first use of a SQLite store.
_LOGGERS = ("mlflow.sklearn", "mlflow.store.db.utils", "mlflow.models.model")
#: MLflow settings `quiet_mlflow` makes where the user made none: no artifact progress bars (read
#: on every download), no "View run ... at: http://user:PASSWORD@host/..." lines on stdout after
#: every `set_terminated` against a server (off, as the harness's MLflow sink has them).
_SETTINGS = {"MLFLOW_ENABLE_ARTIFACTS_PROGRESS_BAR": "false", "MLFLOW_SUPPRESS_PRINTING_URL_TO_STDOUT": "true"}
#: Warnings from MLflow's own calls that tell the user nothing they can act on.
_WARNING_MESSAGES = (r".*``noload`` loader strategy is deprecated.*", r".*pickle or cloudpickle.*")


class _ToDebug(logging.Filter):
    """Drops a record from an MLflow logger and logs it again on ``hwsel.mlflow`` at debug."""

    def filter(self, record: logging.LogRecord) -> bool:
        if record.levelno < logging.ERROR:
            log.debug("%s: %s", record.name, record.getMessage())
            return False
        return True


@contextlib.contextmanager
def quiet_mlflow() -> Iterator[None]:
    """MLflow's progress bars, run links, pickle cautions and deprecation warnings to debug, inside the block."""
    added = {name: value for name, value in _SETTINGS.items() if name not in os.environ}
    os.environ.update(added)
    demote = _ToDebug()
    loggers = [logging.getLogger(name) for name in _LOGGERS]
    for logger in loggers:
        logger.addFilter(demote)
    try:
        with warnings.catch_warnings():
            for message in _WARNING_MESSAGES:
                warnings.filterwarnings("ignore", message=message)
            yield
    finally:
        for logger in loggers:
            logger.removeFilter(demote)
        for name in added:
            os.environ.pop(name, None)


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


__all__ = ["DEFAULT_TIMEOUT_S", "HwselTimeout", "HwselUnreachable", "bounded", "quiet_mlflow", "require_reachable"]
