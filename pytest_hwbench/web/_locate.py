"""Where the browser and onnxruntime-web are, and how to get them (the skip reasons name the fix).
Nothing here starts a browser.
"""

from __future__ import annotations

import contextlib
import functools
import json
import os
import shutil
import signal
import subprocess
import time
from dataclasses import dataclass
from pathlib import Path

from ..vocabulary import cache_dir

#: The onnxruntime-web release `hwbench web install` installs (FACTS.md, "Web platforms").
ORT_WEB_VERSION = "1.30.0"
BROWSER_ENV = "HWBENCH_BROWSER"
ORT_WEB_ENV = "HWBENCH_ORT_WEB"
#: Looked up on PATH in this order: the headless shell is the lightest (no GTK).
BROWSER_NAMES: tuple[str, ...] = ("chromium-headless-shell", "chromium", "chromium-browser")
INSTALL_BROWSER = ("install Chromium (Debian/Ubuntu: `apt-get install -y --no-install-recommends chromium`) "
                   f"or set {BROWSER_ENV} to a Chromium or Chrome binary")
INSTALL_ORT_WEB = (f"run `hwbench web install` (npm install onnxruntime-web@{ORT_WEB_VERSION} into hwbench's cache) "
                   f"or set {ORT_WEB_ENV} to an onnxruntime-web package folder")


@dataclass(frozen=True)
class Browser:
    """A Chromium binary and the version it reports."""

    path: str
    version: str


@dataclass(frozen=True)
class OrtWeb:
    """An onnxruntime-web package: its ``dist`` folder and version."""

    dist: Path
    version: str


def install_dir() -> Path:
    """Where `hwbench web install` puts onnxruntime-web: ``$HWBENCH_CACHE_DIR/web``, else
    ``$XDG_CACHE_HOME/hwbench/web`` (``~/.cache/hwbench/web``)."""
    return cache_dir("web")


#: Seconds ``BROWSER --version`` may take (a fraction of a second here).
VERSION_TIMEOUT_S = 10.0
#: Seconds a version that could not be read is remembered (a read one is kept while the file is the same).
VERSION_RETRY_S = 24 * 3600.0


def _ask_version(path: str) -> tuple[str, bool]:
    """The version line and whether it was read; killed with its process group after
    `VERSION_TIMEOUT_S` (a wrapper script's children hold the pipe open)."""
    try:
        process = subprocess.Popen([path, "--version"], stdin=subprocess.DEVNULL, stdout=subprocess.PIPE,  # noqa: S603
                                   stderr=subprocess.DEVNULL, start_new_session=True)
    except OSError as exc:
        return f"unknown ({type(exc).__name__}: {exc})", False
    try:
        out, _ = process.communicate(timeout=VERSION_TIMEOUT_S)
    except subprocess.TimeoutExpired:
        with contextlib.suppress(OSError):
            os.killpg(process.pid, signal.SIGKILL)
        process.communicate()
        return f"unknown (no answer to --version within {VERSION_TIMEOUT_S:g} s)", False
    line = next((ln.strip() for ln in out.decode(errors="replace").splitlines() if ln.strip()), "")
    return (line.split(" built on ")[0], True) if line else ("unknown", False)


@functools.cache
def browser_version(path: str) -> str:
    """``Chromium 156.0.8078.79`` from ``PATH --version`` (the Debian wrapper adds noise on stderr),
    remembered across processes for the same file."""
    try:
        real = os.path.realpath(path)
        stat = os.stat(real)
    except OSError as exc:
        return f"unknown ({type(exc).__name__}: {exc})"
    key = f"{real}|{stat.st_size}|{stat.st_mtime_ns}"
    store = cache_dir("web") / "browsers.json"
    try:
        known = json.loads(store.read_text())
        if not isinstance(known, dict):
            known = {}
    except (OSError, ValueError):
        known = {}
    entry = known.get(key)
    if isinstance(entry, dict) and (entry.get("read") or time.time() - float(entry.get("at", 0)) < VERSION_RETRY_S):
        return str(entry.get("version"))
    version, read = _ask_version(path)
    known[key] = {"version": version, "read": read, "at": time.time()}
    write_cache(store, known)
    return version


def write_cache(path: Path, data: object) -> None:
    """`data` as JSON in `path`, whole or not at all (parallel workers may write at once); a
    read-only cache costs the next process a new look, nothing more."""
    with contextlib.suppress(OSError):
        path.parent.mkdir(parents=True, exist_ok=True)
        tmp = path.with_name(f".{path.name}.{os.getpid()}")
        tmp.write_text(json.dumps(data))
        tmp.replace(path)


def find_browser() -> tuple[Browser | None, str]:
    """The browser to drive (``$HWBENCH_BROWSER``, a path or a command name, else the first of
    `BROWSER_NAMES` on PATH), or None and why (naming the fix)."""
    wanted = os.environ.get(BROWSER_ENV, "").strip()
    if wanted:
        found = shutil.which(wanted) or (wanted if os.access(wanted, os.X_OK) and Path(wanted).is_file() else None)
        if not found:
            return None, f"{BROWSER_ENV}={wanted!r} is not an executable file or a command on PATH; {INSTALL_BROWSER}"
        return Browser(found, browser_version(found)), ""
    for name in BROWSER_NAMES:
        found = shutil.which(name)
        if found:
            return Browser(found, browser_version(found)), ""
    return None, f"no Chromium found ({', '.join(BROWSER_NAMES)} are not on PATH): {INSTALL_BROWSER}"


def _package(folder: Path) -> OrtWeb | None:
    folder = folder.expanduser()
    if folder.name == "dist":
        folder = folder.parent
    manifest, dist = folder / "package.json", folder / "dist"
    if not manifest.is_file() or not dist.is_dir():
        return None
    try:
        meta = json.loads(manifest.read_text())
    except (OSError, ValueError):
        return None
    if meta.get("name") != "onnxruntime-web":
        return None
    return OrtWeb(dist.resolve(), str(meta.get("version", "unknown")))


def find_ort_web() -> tuple[OrtWeb | None, str]:
    """onnxruntime-web (``$HWBENCH_ORT_WEB``, the package folder or its ``dist``, else
    ``./node_modules/onnxruntime-web``, else `install_dir`'s), or None and why (naming the fix)."""
    wanted = os.environ.get(ORT_WEB_ENV, "").strip()
    if wanted:
        found = _package(Path(wanted))
        if found is None:
            return None, (f"{ORT_WEB_ENV}={wanted!r} is not an onnxruntime-web package folder (package.json and dist/); "
                          f"{INSTALL_ORT_WEB}")
        return found, ""
    candidates = [Path.cwd() / "node_modules" / "onnxruntime-web", install_dir() / "node_modules" / "onnxruntime-web"]
    for folder in candidates:
        found = _package(folder)
        if found is not None:
            return found, ""
    where = ", ".join(str(p) for p in candidates)
    return None, f"onnxruntime-web is not installed (looked in {where}): {INSTALL_ORT_WEB}"


__all__ = ["BROWSER_ENV", "BROWSER_NAMES", "ORT_WEB_ENV", "ORT_WEB_VERSION", "Browser", "OrtWeb", "browser_version",
           "find_browser", "find_ort_web", "install_dir"]
