"""Opening the DuckDB file (`checked`): a lock held for milliseconds is waited out, a file that
stays locked or is corrupt raises a `DuckDBFileError` that says what to do (`classify_error`);
readers open it at the current schema (`read_connection`)."""

from __future__ import annotations

import os
import time
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import TYPE_CHECKING, Any

from pytest_hwbench.sinks._duckdb_schema import SCHEMA_VERSION, schema_version, upgrade

if TYPE_CHECKING:
    import duckdb

#: Seconds opening a file another process holds is retried (two runs starting together collide on
#: locks held for milliseconds; a real holder outlasts it).
LOCK_WAIT_S = 2.0
_CORRUPT_SIGNS = ("not a valid duckdb database file", "corrupt", "checksum", "serialization error",
                  "failed to load metadata", "internal error",
                  # a file cut short (a full disk, a copy interrupted): its blocks end early
                  "could not read enough bytes", "truncated")


class DuckDBFileError(RuntimeError):
    """The DuckDB file cannot be used. `kind` is ``locked`` (another process holds it: wait and
    run again) or ``corrupt`` (move it aside and rebuild it from the spool with `hwbench replay`);
    the message says which, and what to do."""

    def __init__(self, path: Path, kind: str, cause: BaseException) -> None:
        self.path, self.kind = path, kind
        detail = f"{type(cause).__name__}: {cause}".strip()
        if kind == "locked":
            message = (f"DuckDB file {path} is locked by another process ({detail}); nothing is lost: "
                       "run again once that process has finished or closed the file")
        else:
            message = (f"DuckDB file {path} is corrupt ({detail}); move it aside and rebuild it from the "
                       f"spool: hwbench replay --store STORE --db {path} --sinks duckdb --move-corrupt "
                       "(or `hwbench import-mlflow` from the MLflow store)")
        super().__init__(message)


def classify_error(exc: duckdb.Error, path: Path) -> DuckDBFileError | None:
    """`exc` as a `DuckDBFileError` when it says the file at `path` is locked or corrupt, else None."""
    import duckdb

    text = str(exc).lower()
    if isinstance(exc, duckdb.IOException) and "lock" in text:
        return DuckDBFileError(path, "locked", exc)
    if any(sign in text for sign in _CORRUPT_SIGNS):
        return DuckDBFileError(path, "corrupt", exc)
    return None


@contextmanager
def checked(path: Path, **kwargs: Any) -> Iterator[duckdb.DuckDBPyConnection]:
    """A connection to the file at `path` (`duckdb.connect` with `kwargs`, a lock retried for up
    to `LOCK_WAIT_S` seconds), closed on exit; a file that stays locked, or is corrupt (also when
    a query inside finds it so), raises `DuckDBFileError`."""
    import duckdb

    deadline = time.monotonic() + LOCK_WAIT_S
    pause = 0.01
    while True:
        try:
            con = duckdb.connect(str(path), **kwargs)
            break
        except duckdb.Error as exc:
            problem = classify_error(exc, path)
            if problem is None:
                raise
            if problem.kind != "locked" or time.monotonic() + pause > deadline:
                raise problem from None
        time.sleep(pause)
        pause = min(pause * 2, 0.2)
    try:
        yield con
    except duckdb.Error as exc:  # a corrupt block shows when a query reads it
        problem = classify_error(exc, path)
        if problem is None:
            raise
        raise problem from None
    finally:
        con.close()


@contextmanager
def read_connection(path: str | os.PathLike[str]) -> Iterator[duckdb.DuckDBPyConnection]:
    """A read-only connection to the file at `path` at the current schema (an older file is
    upgraded in place first), closed on exit; a locked or corrupt file raises `DuckDBFileError`."""
    file = Path(path).expanduser()
    if not file.exists():
        raise FileNotFoundError(f"no hwbench DuckDB file at {file}; run benchmarks with --hwbench-db {file} "
                                "first")
    with checked(file, read_only=True) as con:
        version = schema_version(con)
        if version == SCHEMA_VERSION:
            yield con
            return
    if not 0 < version < SCHEMA_VERSION:
        raise RuntimeError(f"{file} has hwbench DuckDB schema version {version}, this hwbench reads "
                           f"{SCHEMA_VERSION}; open it once with DuckDBSink (which upgrades it) or use a "
                           "matching pytest-hwbench")
    with checked(file) as writer:  # an older file: upgrade it in place (adds columns only), then read it
        upgrade(writer, file)
    with checked(file, read_only=True) as con:
        yield con


__all__ = ["LOCK_WAIT_S", "DuckDBFileError", "checked", "classify_error", "read_connection"]
