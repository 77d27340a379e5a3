"""Keep MLflow's noise (pickle cautions, SQLAlchemy deprecations, progress bars, run links) off
the user's terminal while hwsel calls it: `quiet_mlflow` sends it to the ``hwsel.mlflow`` logger."""

from __future__ import annotations

import contextlib
import logging
import os
import warnings
from collections.abc import Iterator

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


__all__ = ["quiet_mlflow"]
