"""Keep MLflow's noise off the user's terminal while hwsel calls it.

With mlflow 3.17 / SQLAlchemy 2, every ``hwsel train`` prints three
``mlflow.sklearn`` warnings that pickled models run code when loaded (we save with cloudpickle on
purpose, see `hwsel.registry.SERIALIZATION`) and SQLAlchemy's deprecation of ``noload`` from
MLflow's own store, and every load of a champion draws a "Downloading artifacts" progress bar.
Inside `quiet_mlflow()` those go to the ``hwsel`` logger at debug level instead; everything else
(our own `HwselWarning`s included) passes as usual, and a progress-bar setting the user made is
left alone.
"""

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
#: MLflow's switch for the run links it prints to stdout (read on every `set_terminated`).
_SUPPRESS_URL = "MLFLOW_SUPPRESS_PRINTING_URL_TO_STDOUT"
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
    progress = "MLFLOW_ENABLE_ARTIFACTS_PROGRESS_BAR"
    try:  # mlflow's handle on its own setting (read on every download); plain environment otherwise
        from mlflow.environment_variables import MLFLOW_ENABLE_ARTIFACTS_PROGRESS_BAR as setting
    except ImportError:
        setting = None
    added = progress not in os.environ
    if added:
        if setting is not None:
            setting.set("false")
        else:
            os.environ[progress] = "false"
    # MLflow's "View run ... at: http://user:PASSWORD@host/..." lines on stdout after every
    # set_terminated against a server: off, as the harness's MLflow sink has them.
    url_added = _SUPPRESS_URL not in os.environ
    if url_added:
        os.environ[_SUPPRESS_URL] = "true"
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
        if added:
            os.environ.pop(progress, None)
        if url_added:
            os.environ.pop(_SUPPRESS_URL, None)


__all__ = ["quiet_mlflow"]
