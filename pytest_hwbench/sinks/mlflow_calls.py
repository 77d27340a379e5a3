"""The surroundings of our MLflow calls: some of MLflow's variables set for our calls only
(`call_env`), and errors that quoted credentials raised again masked (`MlflowStoreError`)."""

from __future__ import annotations

import contextlib
import os
from collections.abc import Iterator

from pytest_hwbench.sinks.redact import redact_uri


class MlflowStoreError(RuntimeError):
    """An MLflow call failed; raised in place of MLflow's error when that one quoted credentials."""


@contextlib.contextmanager
def call_env(*, http: bool, max_retries: int, timeout_s: int) -> Iterator[None]:
    """Fail fast and quietly: set some of MLflow's variables for our calls only.

    MLflow reads them from the environment on every call and offers no per-client setting.
    Variables the user set are left alone; the ones we add are removed afterwards.
    """
    wanted = {
        # A tqdm bar per artifact download, in the middle of pytest's or the CLI's output.
        "MLFLOW_ENABLE_ARTIFACTS_PROGRESS_BAR": "false",
    }
    if http:
        wanted.update(
            {
                "MLFLOW_HTTP_REQUEST_MAX_RETRIES": str(max_retries),
                # Retries (connection errors, 429, 5xx) wait 1, 2, 4... s plus up to 1 s at
                # random, so runners that a busy server turned away do not all return at once.
                "MLFLOW_HTTP_REQUEST_BACKOFF_FACTOR": "1",
                "MLFLOW_HTTP_REQUEST_BACKOFF_JITTER": "1.0",
                "MLFLOW_HTTP_REQUEST_TIMEOUT": str(int(timeout_s)),
                # Else set_terminated fetches the run again (one more request per record)
                # just to print "View run ... at: URL" to stdout.
                "MLFLOW_SUPPRESS_PRINTING_URL_TO_STDOUT": "true",
            }
        )
    added = [key for key in wanted if key not in os.environ]
    for key in added:
        os.environ[key] = wanted[key]
    try:
        yield
    except Exception as exc:
        # MLflow quotes the URI it was given ("API request to http://alice:SECRET@host/...
        # failed"): re-raise such an error with the credentials masked, and without the
        # original as context, so that no message or traceback shows them.
        text = str(exc)
        safe = redact_uri(text)
        if safe == text:
            raise
        raise MlflowStoreError(f"{type(exc).__name__}: {safe}") from None
    finally:
        for key in added:
            os.environ.pop(key, None)


__all__ = ["MlflowStoreError", "call_env"]
