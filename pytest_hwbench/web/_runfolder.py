"""The one folder a process keeps its browsers' files in (``$TMPDIR/hwbench-web-run-<pid>-XXXX``,
removed at exit), and the removal of a killed run's folder by a later process (`sweep_stale_runs`):
its ``flock`` is free, since the kernel drops a lock when its holder dies.
"""

from __future__ import annotations

import atexit
import contextlib
import fcntl
import os
import shutil
import tempfile
import threading
import time
from pathlib import Path

#: Name prefix of run folders (in ``$TMPDIR`` and /tmp).
RUN_PREFIX = "hwbench-web-run-"
#: Longest base folder under which Chromium's singleton socket path still fits.
SHORT_PATH = 60
#: A run folder without a pid file younger than this is being created: left alone.
CREATING_S = 30.0

_LOCK = threading.Lock()
_MINE: dict[str, tuple[Path, int]] = {}


def run_folder(base: str | None = None) -> Path:
    """This process's run folder under `base` (default ``$TMPDIR``), made at the first call; a
    child process (fork) makes its own."""
    base = base or tempfile.gettempdir()
    with _LOCK:
        mine = _MINE.get(base)
        if mine is not None and mine[0].name.startswith(f"{RUN_PREFIX}{os.getpid()}-") and mine[0].is_dir():
            return mine[0]
        folder = Path(tempfile.mkdtemp(prefix=f"{RUN_PREFIX}{os.getpid()}-", dir=base))
        fd = os.open(folder / "lock", os.O_CREAT | os.O_RDWR, 0o600)
        fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        (folder / "pid").write_text(str(os.getpid()))  # after the lock: a folder with a pid file is complete
        _MINE[base] = (folder, fd)
        return folder


def browser_tmp() -> Path:
    """A fresh folder for a browser's ``TMPDIR`` in the run folder: under ``$TMPDIR``, or under
    /tmp where that path would be longer than `SHORT_PATH` (Chromium aborts with "Socket path too
    long" when its singleton socket's path passes 108 bytes)."""
    folder = run_folder()
    if len(str(folder)) + 10 > SHORT_PATH and Path("/tmp").is_dir():
        folder = run_folder("/tmp")
    return Path(tempfile.mkdtemp(prefix="t", dir=folder))


def _old(folder: Path) -> bool:
    try:
        return time.time() - folder.stat().st_mtime > CREATING_S
    except OSError:
        return False


def _stale(folder: Path) -> bool:
    """Whether `folder` is a run folder whose process is gone (its lock is free)."""
    try:
        fd = os.open(folder / "lock", os.O_RDWR)
    except FileNotFoundError:  # no lock yet: being made now, or a crash between mkdtemp and open
        return _old(folder)
    except OSError:
        return False
    try:
        fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
    except OSError:
        return False  # held: its process lives
    finally:
        os.close(fd)  # closing drops a lock this call took
    # Free: the pid file is written after the lock is taken, so a folder with a pid file is dead;
    # one without is being made (taken lock, pid not written yet) unless it is old.
    return (folder / "pid").exists() or _old(folder)


def sweep_stale_runs() -> list[Path]:
    """Remove the run folders of dead processes in ``$TMPDIR`` and /tmp; the folders removed."""
    mine = {folder for folder, _ in _MINE.values()}
    removed = []
    for base in dict.fromkeys((tempfile.gettempdir(), "/tmp")):
        try:
            candidates = list(Path(base).glob(f"{RUN_PREFIX}*"))
        except OSError:
            continue
        for folder in candidates:
            if folder in mine or not folder.is_dir():
                continue
            if _stale(folder):
                shutil.rmtree(folder, ignore_errors=True)
                removed.append(folder)
    return removed


@atexit.register
def _remove_mine() -> None:
    with _LOCK:
        for folder, fd in _MINE.values():
            if folder.name.startswith(f"{RUN_PREFIX}{os.getpid()}-"):
                shutil.rmtree(folder, ignore_errors=True)
            with contextlib.suppress(OSError):
                os.close(fd)
        _MINE.clear()


__all__ = ["RUN_PREFIX", "browser_tmp", "run_folder", "sweep_stale_runs"]
