"""Two processes opening one new local MLflow store (which MLflow creates and migrates without a
lock of its own): one creates and migrates it, the next finds it migrated (`store_init_lock`), and
a race with a process that takes no lock is tried again (`retry_migration`)."""

from __future__ import annotations

import contextlib
import os
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

#: Seconds a local SQLite store's first open waits for another process creating the same store.
STORE_INIT_WAIT_S = 120.0


@contextlib.contextmanager
def store_init_lock(directory: Path) -> Iterator[None]:
    """Hold an exclusive lock on `directory` (flock on its descriptor: no file left behind) for up
    to `STORE_INIT_WAIT_S` seconds of waiting; without ``fcntl`` (Windows) only the retry helps."""
    try:
        import fcntl
    except ImportError:
        yield
        return
    fd = os.open(directory, os.O_RDONLY)
    try:
        deadline = time.monotonic() + STORE_INIT_WAIT_S
        while True:
            try:
                fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
                break
            except BlockingIOError:
                if time.monotonic() > deadline:
                    raise TimeoutError(f"another process has been creating the MLflow store in {directory} "
                                       f"for over {STORE_INIT_WAIT_S:.0f} s") from None
                time.sleep(0.1)
        yield
    finally:
        os.close(fd)  # releases the lock


#: Words of the errors two processes migrating one new store at once get from Alembic/SQLite.
_MIGRATION_RACE = ("online migration", "duplicate column", "already exists", "alembic", "database is locked")


def retry_migration(make: Any, tries: int = 4) -> Any:
    """`make()`, tried again (after 1, 2, 4 s) while it fails the way a migration race does (a
    store created by a process that does not take our lock, e.g. an older hwbench)."""
    for attempt in range(tries - 1):
        try:
            return make()
        except Exception as exc:
            if not any(word in str(exc).lower() for word in _MIGRATION_RACE):
                raise
            time.sleep(2**attempt)
    return make()


__all__ = ["STORE_INIT_WAIT_S", "retry_migration", "store_init_lock"]
