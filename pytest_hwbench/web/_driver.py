"""Drive one headless Chromium through a page that long-polls a local server for commands.

No browser-automation package: the browser is a plain subprocess in a session of its own
(``start_new_session``), the page (``page/bench.js``) fetches commands from a stdlib
``ThreadingHTTPServer`` bound to 127.0.0.1 on a free port and posts the results back
(FACTS.md, "Web platforms"). The server sends the cross-origin isolation headers, without which
``performance.now()`` ticks in 100 us steps and wasm threads fall back to one.

`WebDriver.call` sends one command and waits for its result, bounded by a timeout; while it
waits it watches the browser process. A page error is an ordinary failed result (`PageError`,
carrying the browser's message). A browser that exits or a command that outlives its timeout
kills the browser with its whole process group (`BrowserCrashed`, `BrowserTimeout`); the next
command starts a fresh one. `close` ends the browser; so does interpreter exit (`atexit`) for
every driver still open, and on Linux the browser dies with this process (``PR_SET_PDEATHSIG``).
"""

from __future__ import annotations

import atexit
import itertools
import json
import mimetypes
import os
import queue
import shutil
import signal
import subprocess
import sys
import tempfile
import threading
import time
import uuid
import weakref
from collections.abc import Callable
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from importlib import resources
from pathlib import Path
from typing import Any
from urllib.parse import parse_qs, urlparse

from ..errors import HwbenchError

#: Flags for every launch. ``--enable-unsafe-webgpu`` gives WebGPU an adapter (SwiftShader where
#: there is no GPU); the feature flag exposes ``navigator.ml`` (WebNN); the rest keep a headless
#: run quiet and off the network (FACTS.md). ``--no-sandbox``: Chromium refuses to run as root
#: without it.
BROWSER_FLAGS: tuple[str, ...] = (
    "--headless=new", "--no-sandbox", "--no-first-run", "--no-default-browser-check", "--disable-quic",
    "--disable-background-networking", "--disable-component-update", "--disable-sync", "--disable-extensions",
    "--disable-default-apps", "--disable-background-timer-throttling", "--disable-renderer-backgrounding",
    "--disable-backgrounding-occluded-windows", "--mute-audio", "--enable-unsafe-webgpu",
    "--enable-features=WebMachineLearningNeuralNetwork",
)
#: Extra flags for every launch, split on whitespace (e.g. ``--use-angle=vulkan`` on a GPU host).
FLAGS_ENV = "HWBENCH_BROWSER_FLAGS"
#: Seconds for the browser to start and the page to load its onnxruntime-web bundle.
START_TIMEOUT_S = 90.0
#: Seconds a page waits on one ``/cmd`` request before asking again.
POLL_S = 20.0
#: Longest $TMPDIR under which Chromium's singleton socket path still fits (else a short one is made).
SHORT_PATH = 60
_MIME = {".mjs": "text/javascript", ".js": "text/javascript", ".wasm": "application/wasm", ".html": "text/html",
         ".onnx": "application/octet-stream", ".bin": "application/octet-stream", ".map": "application/json"}
_PAGE_ASSETS = frozenset({"bench.html", "bench.js"})


class WebError(HwbenchError):
    """The browser could not run a command."""


class PageError(WebError):
    """The page ran the command and it failed: the message is the browser's (an unsupported
    operator, a bad model file, an exception in onnxruntime-web)."""


class BrowserCrashed(WebError):
    """The browser process exited while a command was in flight (the browser is gone)."""


class BrowserTimeout(WebError):
    """A command outlived its timeout; the browser was killed."""


def _child_setup() -> None:  # pragma: no cover - runs in the forked child
    # Die with the parent even when it is SIGKILLed (no atexit then): PR_SET_PDEATHSIG = 1.
    try:
        import ctypes

        ctypes.CDLL(None, use_errno=True).prctl(1, signal.SIGKILL, 0, 0, 0)
    except Exception:  # noqa: BLE001 - best effort; atexit and close() still kill the group
        pass


class _Server(ThreadingHTTPServer):
    daemon_threads = True
    allow_reuse_address = True
    driver: WebDriver

    def handle_error(self, request: Any, client_address: Any) -> None:
        pass  # a killed browser resets its connections: not news (the driver reports the kill)


class _Handler(BaseHTTPRequestHandler):
    server: _Server
    protocol_version = "HTTP/1.1"

    def log_message(self, format: str, *args: Any) -> None:  # noqa: A002 - the base class's name
        pass

    def _send(self, status: int, body: bytes = b"", content_type: str = "application/octet-stream") -> None:
        self.send_response(status)
        if self.server.driver.isolate:
            # Cross-origin isolation: 5 us timer resolution and SharedArrayBuffer (wasm threads).
            self.send_header("Cross-Origin-Opener-Policy", "same-origin")
            self.send_header("Cross-Origin-Embedder-Policy", "require-corp")
            self.send_header("Cross-Origin-Resource-Policy", "same-origin")
        self.send_header("Cache-Control", "no-store")
        self.send_header("Content-Type", content_type)
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        if body:
            self.wfile.write(body)

    def _file(self, path: Path) -> None:
        if not path.is_file():
            self._send(404, f"not found: {path.name}".encode(), "text/plain")
            return
        kind = _MIME.get(path.suffix) or mimetypes.guess_type(path.name)[0] or "application/octet-stream"
        self._send(200, path.read_bytes(), kind)

    def do_GET(self) -> None:  # noqa: N802 - http.server's name
        driver = self.server.driver
        url = urlparse(self.path)
        parts = url.path.strip("/").split("/", 1)
        head, rest = parts[0], parts[1] if len(parts) > 1 else ""
        if head == "cmd":
            page = parse_qs(url.query).get("page", [""])[0]
            status, body = driver._next_command(page)
            self._send(status, body, "application/json")
        elif head == "page" and rest in _PAGE_ASSETS:
            data = resources.files("pytest_hwbench.web").joinpath("page", rest).read_bytes()
            self._send(200, data, _MIME[Path(rest).suffix])
        elif head == "ort" and driver.ort_dist is not None and "/" not in rest and not rest.startswith("."):
            self._file(driver.ort_dist / rest)
        elif head == "blob" and rest in driver._blobs:
            blob = driver._blobs[rest]
            if isinstance(blob, Path):
                self._file(blob)
            else:
                self._send(200, blob)
        elif head == "favicon.ico":
            self._send(204)
        else:
            self._send(404, b"not found", "text/plain")

    def do_POST(self) -> None:  # noqa: N802
        length = int(self.headers.get("Content-Length") or 0)
        raw = self.rfile.read(length) if length else b"{}"
        try:
            payload = json.loads(raw)
        except ValueError:
            payload = {"error": raw[:500].decode(errors="replace")}
        self._send(204)
        self.server.driver._inbox.put((self.path.strip("/").split("?")[0], payload))


_OPEN: weakref.WeakSet[WebDriver] = weakref.WeakSet()


@atexit.register
def _close_all() -> None:
    for driver in list(_OPEN):
        driver.close()


class WebDriver:
    """One server and at most one browser, showing one page at a time.

    `browser` is the Chromium binary, `ort_dist` onnxruntime-web's ``dist`` folder (None: the
    probe page only). `isolate` False leaves out the cross-origin isolation headers (to show
    what the timer resolution is without them). Thread-safe: a lock serialises `call`.
    """

    def __init__(self, browser: str, ort_dist: Path | None = None, *, extra_flags: tuple[str, ...] = (),
                 isolate: bool = True) -> None:
        self.browser = browser
        self.ort_dist = ort_dist
        self.isolate = isolate
        self.extra_flags = tuple(extra_flags) + tuple(os.environ.get(FLAGS_ENV, "").split())
        self._blobs: dict[str, Path | bytes] = {}
        self._commands: queue.Queue[dict[str, Any]] = queue.Queue()
        self._inbox: queue.Queue[tuple[str, dict[str, Any]]] = queue.Queue()
        self._ids = itertools.count(1)
        self._lock = threading.RLock()
        self._server: _Server | None = None
        self._thread: threading.Thread | None = None
        self._process: subprocess.Popen[bytes] | None = None
        self._profile: str | None = None
        self._short_tmp: str | None = None
        self._stderr: Any = None
        self._page: str | None = None
        self._bundle: str | None = None
        self.hello: dict[str, Any] = {}
        self.page_errors: list[str] = []
        self.launches = 0

    # --- server -----------------------------------------------------------------------------

    @property
    def port(self) -> int:
        self._serve()
        assert self._server is not None
        return int(self._server.server_address[1])

    def _serve(self) -> None:
        if self._server is not None:
            return
        server = _Server(("127.0.0.1", 0), _Handler)
        server.driver = self
        self._server = server
        self._thread = threading.Thread(target=server.serve_forever, kwargs={"poll_interval": 0.2},
                                        name="hwbench-web-server", daemon=True)
        self._thread.start()
        _OPEN.add(self)

    def _next_command(self, page: str) -> tuple[int, bytes]:
        if page != self._page:
            return 410, b'{"gone": true}'  # an old page: stop polling
        try:
            command = self._commands.get(timeout=POLL_S)
        except queue.Empty:
            return 204, b""
        return 200, json.dumps(command).encode()

    def add_blob(self, data: Path | bytes) -> str:
        """Serve `data` (a file or bytes) at the returned URL path until `drop_blob`."""
        token = uuid.uuid4().hex
        self._blobs[token] = data
        return f"/blob/{token}"

    def drop_blob(self, url: str) -> None:
        self._blobs.pop(url.rsplit("/", 1)[-1], None)

    # --- browser ----------------------------------------------------------------------------

    @property
    def pid(self) -> int | None:
        """The browser's process id (also its process group's), None when none runs."""
        return self._process.pid if self._process is not None and self._process.poll() is None else None

    def running(self) -> bool:
        return self.pid is not None

    def _launch(self, url: str) -> None:
        self._profile = tempfile.mkdtemp(prefix="hwbench-chromium-")
        self._stderr = tempfile.TemporaryFile()
        env = dict(os.environ)
        if len(self._profile) > SHORT_PATH and Path("/tmp").is_dir():
            # Chromium puts its singleton socket under $TMPDIR and aborts when that path passes
            # the 108-byte limit of a Unix socket ("Socket path too long").
            self._short_tmp = tempfile.mkdtemp(prefix="hwb-", dir="/tmp")
            env["TMPDIR"] = self._short_tmp
        args = [self.browser, *BROWSER_FLAGS, *self.extra_flags, f"--user-data-dir={self._profile}", url]
        self._process = subprocess.Popen(  # noqa: S603 - our own binary and flags
            args, stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL, stderr=self._stderr, env=env,
            start_new_session=True, preexec_fn=_child_setup if sys.platform.startswith("linux") else None)
        self.launches += 1

    def stderr_tail(self, limit: int = 1500) -> str:
        """The end of the browser's stderr (noise included: the Debian wrapper and D-Bus write there)."""
        if self._stderr is None:
            return ""
        try:
            self._stderr.seek(0)
            text = self._stderr.read().decode(errors="replace")
        except (OSError, ValueError):
            return ""
        lines = [ln for ln in text.splitlines() if ln.strip() and "dbus" not in ln.lower()
                 and "unexpected operator" not in ln]
        return "\n".join(lines)[-limit:]

    def kill(self) -> None:
        """End the browser and every process of its group; safe to call at any time."""
        process, self._process = self._process, None
        self._page, self._bundle = None, None
        if process is not None:
            _kill_tree(process)
        for folder in (self._profile, self._short_tmp):
            if folder is not None:
                shutil.rmtree(folder, ignore_errors=True)
        self._profile = self._short_tmp = None
        if self._stderr is not None:
            self._stderr.close()
            self._stderr = None
        self._drain()

    def _drain(self) -> None:
        for q in (self._commands, self._inbox):
            while True:
                try:
                    q.get_nowait()
                except queue.Empty:
                    break

    def close(self) -> None:
        """End the browser and the server."""
        with self._lock:
            self.kill()
            server, self._server = self._server, None
            if server is not None:
                server.shutdown()
                server.server_close()
            _OPEN.discard(self)

    # --- pages and commands -----------------------------------------------------------------

    def open_page(self, bundle: str = "") -> dict[str, Any]:
        """Show the page with onnxruntime-web `bundle` loaded ("" loads none), starting the
        browser when none runs; returns the page's hello (user agent, ort version...)."""
        with self._lock:
            if self.running() and self._page is not None and self._bundle == bundle:
                return self.hello
            page = uuid.uuid4().hex[:12]
            url = f"http://127.0.0.1:{self.port}/page/bench.html?page={page}&bundle={bundle}"
            if self.running() and self._page is not None:
                self._send({"op": "navigate", "url": url}, timeout_s=30.0)
            else:
                self.kill()
                self._launch(url)
            self._page, self._bundle = page, bundle
            hello = self._wait(lambda kind, body: kind == "hello" and body.get("page") == page, START_TIMEOUT_S,
                               f"starting the page (bundle {bundle or 'none'})")
            if hello.get("error"):
                self.kill()
                raise PageError(str(hello["error"]))
            self.hello = hello
            return hello

    def call(self, op: str, *, bundle: str = "", timeout_s: float = 120.0, **payload: Any) -> Any:
        """Run `op` in the page showing `bundle`; its value, or `WebError` with the browser's message."""
        with self._lock:
            self.open_page(bundle)
            return self._send({"op": op, **payload}, timeout_s=timeout_s)

    def _send(self, command: dict[str, Any], *, timeout_s: float) -> Any:
        command = {**command, "id": next(self._ids)}
        self.page_errors.clear()
        self._commands.put(command)
        result = self._wait(lambda kind, body: kind == "result" and body.get("id") == command["id"], timeout_s,
                            f"op {command['op']!r}")
        if not result.get("ok"):
            raise PageError(str(result.get("error") or "the page reported a failure without a message"))
        return result.get("value")

    def _wait(self, wanted: Callable[[str, dict[str, Any]], bool], timeout_s: float, what: str) -> dict[str, Any]:
        deadline = time.monotonic() + timeout_s
        while True:
            try:
                kind, body = self._inbox.get(timeout=0.1)
            except queue.Empty:
                kind, body = "", {}
            if kind == "page-error":
                self.page_errors.append(str(body.get("error")))
            elif kind and wanted(kind, body):
                return body
            if self._process is None or self._process.poll() is not None:
                code = self._process.returncode if self._process is not None else None
                tail = self.stderr_tail()
                self.kill()
                raise BrowserCrashed(f"the browser exited (code {code}) during {what}"
                                     + (f"; page errors: {' | '.join(self.page_errors)}" if self.page_errors else "")
                                     + (f"; its stderr ends: {tail}" if tail else ""))
            if time.monotonic() > deadline:
                errors = list(self.page_errors)
                self.kill()
                raise BrowserTimeout(f"{what} did not finish within {timeout_s:.0f} s; the browser was killed"
                                     + (f"; page errors: {' | '.join(errors)}" if errors else ""))


def _kill_tree(process: subprocess.Popen[bytes]) -> None:
    """SIGKILL the browser's process group and any descendant that left it, then reap."""
    victims: list[Any] = []
    try:
        import psutil

        victims = psutil.Process(process.pid).children(recursive=True)
    except Exception:  # noqa: BLE001 - already gone, or psutil cannot see it
        victims = []
    try:
        os.killpg(process.pid, signal.SIGKILL)
    except (ProcessLookupError, PermissionError):
        pass
    for child in victims:
        try:
            child.kill()
        except Exception:  # noqa: BLE001 - gone already
            pass
    try:
        process.wait(timeout=10)
    except subprocess.TimeoutExpired:
        pass
    if victims:  # wait until they are gone, so a count right after close() sees none
        import psutil

        psutil.wait_procs(victims, timeout=10)


__all__ = ["BROWSER_FLAGS", "BrowserCrashed", "BrowserTimeout", "PageError", "WebDriver", "WebError"]
