"""Drive one headless Chromium through a page that long-polls a local server for commands.

The browser is a subprocess in a session of its own; the page (``page/bench.js``) fetches commands
from a 127.0.0.1 server sending the cross-origin isolation headers (without them
``performance.now()`` ticks in 100 us steps and wasm threads fall back to one) and posts results
back. A browser or renderer that dies, or a command that outlives its timeout, kills the browser
with its process group, and the next command starts a fresh one. The browser also dies with this
process (``atexit``, ``PR_SET_PDEATHSIG``); its files live in the process's run folder.
"""

from __future__ import annotations

import atexit
import contextlib
import itertools
import json
import os
import queue
import re
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
from http.server import SimpleHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any
from urllib.parse import parse_qs, urlparse

from ..errors import HwbenchError
from ._runfolder import browser_tmp, run_folder, sweep_stale_runs

#: Flags for every launch. ``--enable-unsafe-webgpu`` gives WebGPU an adapter (SwiftShader where
#: there is no GPU); the feature flag exposes ``navigator.ml`` (WebNN); the rest keep a headless
#: run quiet and off the network (FACTS.md). ``--no-sandbox``: Chromium refuses to run as root
#: without it. ``--enable-logging=stderr``: a release build logs nothing otherwise, and its "Tab
#: Killed/Crashed/OOM" line is how a page whose renderer died is told from a slow page.
BROWSER_FLAGS: tuple[str, ...] = (
    "--headless=new", "--no-sandbox", "--no-first-run", "--no-default-browser-check", "--disable-quic",
    "--disable-background-networking", "--disable-component-update", "--disable-sync", "--disable-extensions",
    "--disable-default-apps", "--disable-background-timer-throttling", "--disable-renderer-backgrounding",
    "--disable-backgrounding-occluded-windows", "--mute-audio", "--enable-unsafe-webgpu",
    "--enable-features=WebMachineLearningNeuralNetwork", "--enable-logging=stderr", "--log-level=1",
)
#: Extra flags for every launch, split on whitespace (e.g. ``--use-angle=vulkan`` on a GPU host).
FLAGS_ENV = "HWBENCH_BROWSER_FLAGS"
#: Seconds for the browser to start and the page to load its onnxruntime-web bundle.
START_TIMEOUT_S = 90.0
#: Seconds a page waits on one ``/cmd`` request before asking again.
POLL_S = 20.0
#: Chromium's line when a tab's renderer dies (chrome/browser/ui/sad_tab.cc; kinds Killed, Crashed, OOM),
#: logged with ``--enable-logging=stderr``.
SAD_TAB = re.compile(r"sad_tab\.cc:\d+\] Tab (\w+)")
#: What each kind means (Chromium's SadTabKind from the renderer's termination status).
SAD_TAB_KINDS = {"Killed": "killed by a signal (SIGKILL or SIGTERM from outside the browser)",
                 "Crashed": "crashed (a fatal signal inside the renderer, e.g. SIGSEGV, or an abort)",
                 "OOM": "ran out of memory (an allocation failed inside the renderer)"}
#: Seconds between two looks at the browser's processes while a command runs.
WATCH_S = 0.25
#: Types that ``mimetypes`` may not know on every host (the rest are its, else octet-stream).
_MIME = {".mjs": "text/javascript", ".js": "text/javascript", ".wasm": "application/wasm"}
_PAGE_ASSETS = frozenset({"bench.html", "bench.js"})
#: The page's files (``page/bench.*``).
PAGE_DIR = Path(__file__).with_name("page")


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
    # Best effort: atexit and close() still kill the group.
    with contextlib.suppress(Exception):
        import ctypes

        ctypes.CDLL(None, use_errno=True).prctl(1, signal.SIGKILL, 0, 0, 0)


class _Server(ThreadingHTTPServer):
    daemon_threads = True
    allow_reuse_address = True
    driver: WebDriver

    def handle_error(self, request: Any, client_address: Any) -> None:
        pass  # a killed browser resets its connections: not news (the driver reports the kill)


class _Handler(SimpleHTTPRequestHandler):
    server: _Server
    protocol_version = "HTTP/1.1"
    extensions_map = {**SimpleHTTPRequestHandler.extensions_map, **_MIME}

    def log_message(self, format: str, *args: Any) -> None:  # noqa: A002 - the base class's name
        pass

    def end_headers(self) -> None:
        if self.server.driver.isolate:
            # Cross-origin isolation: 5 us timer resolution and SharedArrayBuffer (wasm threads).
            self.send_header("Cross-Origin-Opener-Policy", "same-origin")
            self.send_header("Cross-Origin-Embedder-Policy", "require-corp")
            self.send_header("Cross-Origin-Resource-Policy", "same-origin")
        self.send_header("Cache-Control", "no-store")
        super().end_headers()

    def _send(self, status: int, body: bytes = b"", content_type: str = "application/octet-stream") -> None:
        self.send_response(status)
        self.send_header("Content-Type", content_type)
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        if body:
            self.wfile.write(body)

    def translate_path(self, path: str) -> str:
        """The file a GET of `path` serves: a page asset, an onnxruntime-web file or a file blob
        ("" for none, which http.server answers with a 404)."""
        driver = self.server.driver
        head, _, rest = urlparse(path).path.strip("/").partition("/")
        if head == "page" and rest in _PAGE_ASSETS:
            return str(PAGE_DIR / rest)
        if head == "ort" and driver.ort_dist is not None and rest and "/" not in rest and not rest.startswith("."):
            return str(driver.ort_dist / rest)
        blob = driver._blobs.get(rest) if head == "blob" else None
        return str(blob) if isinstance(blob, Path) else ""

    def do_GET(self) -> None:  # noqa: N802 - http.server's name
        url = urlparse(self.path)
        head, _, rest = url.path.strip("/").partition("/")
        blob = self.server.driver._blobs.get(rest) if head == "blob" else None
        if head == "cmd":
            status, body = self.server.driver._next_command(parse_qs(url.query).get("page", [""])[0])
            self._send(status, body, "application/json")
        elif isinstance(blob, bytes):
            self._send(200, blob)
        elif head == "favicon.ico":
            self._send(204)
        else:
            super().do_GET()

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
    what the timer resolution is without them). `start_timeout_s` bounds the browser's start up
    to the page's hello (default `START_TIMEOUT_S`). Thread-safe: a lock serialises `call`.
    """

    def __init__(self, browser: str, ort_dist: Path | None = None, *, isolate: bool = True,
                 start_timeout_s: float = START_TIMEOUT_S) -> None:
        self.browser = browser
        self.ort_dist = ort_dist
        self.isolate = isolate
        self.extra_flags = tuple(os.environ.get(FLAGS_ENV, "").split())
        self._blobs: dict[str, Path | bytes] = {}
        self.start_timeout_s = float(start_timeout_s)
        self._channels: dict[str, queue.Queue[dict[str, Any] | None]] = {}
        self._inbox: queue.Queue[tuple[str, dict[str, Any]]] = queue.Queue()
        self._ids = itertools.count(1)
        self._lock = threading.RLock()
        self._server: _Server | None = None
        self._process: subprocess.Popen[bytes] | None = None
        self._folders: list[Path] = []  # the browser's profile and TMPDIR
        self._stderr: Any = None
        self._stderr_seen = 0
        self._sad_tab: str | None = None
        self._page: str | None = None
        self._bundle: str | None = None
        #: why a browser this driver started never showed its page (set once): no browser is
        #: started again, every later command fails at once with it
        self.start_hung: str | None = None
        self.hello: dict[str, Any] = {}
        self.page_errors: list[str] = []
        self.launches = 0

    # --- server -----------------------------------------------------------------------------

    @property
    def port(self) -> int:
        """The page server's port; the server starts at the first ask."""
        if self._server is None:
            self._server = _Server(("127.0.0.1", 0), _Handler)
            self._server.driver = self
            threading.Thread(target=self._server.serve_forever, kwargs={"poll_interval": 0.2},
                             name="hwbench-web-server", daemon=True).start()
            _OPEN.add(self)
        return int(self._server.server_address[1])

    def _next_command(self, page: str) -> tuple[int, bytes]:
        channel = self._channels.get(page)
        if channel is None:
            return 410, b'{"gone": true}'  # an old page: stop polling
        try:
            command = channel.get(timeout=POLL_S)
        except queue.Empty:
            return 204, b""
        if command is None:  # the page was closed while this request waited
            return 410, b'{"gone": true}'
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
        sweep_stale_runs()
        profile, tmp = Path(tempfile.mkdtemp(prefix="profile-", dir=run_folder())), browser_tmp()
        self._folders = [profile, tmp]
        self._stderr = tempfile.TemporaryFile()
        self._stderr_seen, self._sad_tab = 0, None
        # Chromium's own temporary folders (.org.chromium.Chromium.*, its singleton socket) go
        # into the run folder too, so nothing of a killed browser stays in $TMPDIR or /tmp.
        env = {**os.environ, "TMPDIR": str(tmp)}
        args = [self.browser, *BROWSER_FLAGS, *self.extra_flags, f"--user-data-dir={profile}", url]
        self._process = subprocess.Popen(  # noqa: S603 - our own binary and flags
            args, stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL, stderr=self._stderr, env=env,
            start_new_session=True, preexec_fn=_child_setup if sys.platform.startswith("linux") else None)
        self.launches += 1

    def _stderr_from(self, offset: int) -> bytes:
        """What the browser wrote to stderr from byte `offset` on."""
        if self._stderr is None:
            return b""
        self._stderr.seek(offset)
        return bytes(self._stderr.read())

    def page_died(self) -> str | None:
        """Chromium's verdict when the page's renderer died since the browser started ("Tab Killed:
        URL" from its log), else None."""
        if self._sad_tab is None:
            new = self._stderr_from(self._stderr_seen)  # only what it wrote since the last look
            self._stderr_seen += len(new)
            for line in new.decode(errors="replace").splitlines():
                if SAD_TAB.search(line) and (self._server is None or f":{self.port}/" in line):
                    self._sad_tab = line
                    break
        return self._sad_tab

    def renderers(self) -> set[int]:
        """Process ids of the browser's renderers (the page's, and a spare one Chromium keeps)."""
        import psutil

        pid, found = self.pid, set()
        with contextlib.suppress(psutil.Error):  # it just ended, or a child did
            for proc in psutil.Process(pid).children(recursive=True) if pid is not None else []:
                with contextlib.suppress(psutil.Error):
                    if "--type=renderer" in proc.cmdline():
                        found.add(proc.pid)
        return found

    def stderr_tail(self, limit: int = 1500) -> str:
        """The end of the browser's stderr, without the noise the Debian wrapper and D-Bus write there."""
        text = self._stderr_from(0).decode(errors="replace")
        lines = [ln for ln in text.splitlines() if ln.strip() and "dbus" not in ln.lower()
                 and "unexpected operator" not in ln and ":WARNING:" not in ln]
        return "\n".join(lines)[-limit:]

    def kill(self) -> None:
        """End the browser and every process of its group; safe to call at any time."""
        process, self._process = self._process, None
        self._page, self._bundle = None, None
        channels, self._channels = self._channels, {}
        for channel in channels.values():
            channel.put(None)  # wakes a request still waiting on it
        if process is not None:
            _kill_tree(process)
        for folder in self._folders:
            shutil.rmtree(folder, ignore_errors=True)
        self._folders = []
        if self._stderr is not None:
            self._stderr.close()
            self._stderr = None
        self._inbox = queue.Queue()  # what the dead browser posted last is nobody's answer

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
            if self.running() and self.page_died() is not None:
                self.kill()  # its renderer died while the page was idle: start afresh
            if self.running() and self._page is not None and self._bundle == bundle:
                return self.hello
            page = uuid.uuid4().hex[:12]
            url = f"http://127.0.0.1:{self.port}/page/bench.html?page={page}&bundle={bundle}"
            timeout_s, launched = 30.0, False
            if self.running() and self._page is not None:
                self._channels[page] = queue.Queue()  # before the new page can ask
                self._send({"op": "navigate", "url": url}, timeout_s=30.0)
                self._channels.pop(self._page).put(None)  # the old page's: wakes a request still waiting on it
            else:
                if self.start_hung is not None:
                    raise BrowserTimeout(f"the browser hung at start earlier in this run ({self.start_hung}); it is "
                                         "not started again: check the browser (HWBENCH_BROWSER, "
                                         "HWBENCH_BROWSER_FLAGS) and run again")
                self.kill()
                self._channels[page] = queue.Queue()
                self._launch(url)
                timeout_s, launched = self.start_timeout_s, True
            self._page, self._bundle = page, bundle
            try:
                hello = self._wait(lambda kind, body: kind == "hello" and body.get("page") == page, timeout_s,
                                   f"starting the page (bundle {bundle or 'none'})", watch_page=True)
            except BrowserTimeout as exc:
                if launched:
                    self.start_hung = str(exc)
                raise
            if hello.get("error"):
                self.kill()
                raise PageError(f"{hello['error']}{hello_hint(str(hello['error']))}")
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
        self._channels[self._page or ""].put(command)  # open_page made the page's channel
        result = self._wait(lambda kind, body: kind == "result" and body.get("id") == command["id"], timeout_s,
                            f"op {command['op']!r}", watch_page=command["op"] != "navigate")
        if not result.get("ok"):
            raise PageError(str(result.get("error") or "the page reported a failure without a message"))
        return result.get("value")

    def _wait(self, wanted: Callable[[str, dict[str, Any]], bool], timeout_s: float, what: str, *,
              watch_page: bool = False) -> dict[str, Any]:
        deadline = time.monotonic() + timeout_s
        renderers = self.renderers() if watch_page else set()
        oom_kills = _oom_kills()
        next_look = time.monotonic() + WATCH_S
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
                raise BrowserCrashed(f"the browser exited ({_exit_status(code)}) during {what}"
                                     + _oom_note(oom_kills) + self._page_errors_note()
                                     + (f"; its stderr ends: {tail}" if tail else ""))
            if watch_page and time.monotonic() >= next_look:
                next_look = time.monotonic() + WATCH_S
                died = self.page_died()
                if died is not None:
                    gone = sorted(renderers - self.renderers())
                    match = SAD_TAB.search(died)
                    kind = match.group(1) if match else "?"
                    self.kill()
                    raise BrowserCrashed(
                        f"the page's renderer process died during {what}: Chromium says 'Tab {kind}', "
                        f"{SAD_TAB_KINDS.get(kind, 'it ended')}"
                        + (f" (renderer pid {', '.join(map(str, gone))})" if gone else "")
                        + _oom_note(oom_kills) + "; the browser was killed, the next command starts a new one")
            if time.monotonic() > deadline:
                self.kill()
                raise BrowserTimeout(f"{what} did not finish within {timeout_s:.0f} s; the browser was killed"
                                     + self._page_errors_note())

    def _page_errors_note(self) -> str:
        return f"; page errors: {' | '.join(self.page_errors)}" if self.page_errors else ""


def hello_hint(error: str) -> str:
    """The fix to add to a page's failure to load onnxruntime-web (a missing or broken install)."""
    from ._locate import INSTALL_ORT_WEB

    return f"; onnxruntime-web looks missing or broken: {INSTALL_ORT_WEB}" if error else ""


def _exit_status(code: int | None) -> str:
    if code is None:
        return "status unknown"
    if code < 0:
        with contextlib.suppress(ValueError):
            return f"killed by {signal.Signals(-code).name}"
        return f"killed by signal {-code}"
    return f"code {code}"


def _oom_kills() -> int | None:
    """The kernel's count of out-of-memory kills since boot (``/proc/vmstat`` ``oom_kill``)."""
    with contextlib.suppress(OSError, ValueError), open("/proc/vmstat") as stats:
        for line in stats:
            if line.startswith("oom_kill "):
                return int(line.split()[1])
    return None


def _oom_note(before: int | None) -> str:
    after = _oom_kills()
    if before is None or after is None or after <= before:
        return ""
    return (f"; out of memory: the kernel's out-of-memory killer ended {after - before} process(es) meanwhile "
            "(/proc/vmstat oom_kill; `dmesg` names them)")


def _kill_tree(process: subprocess.Popen[bytes]) -> None:
    """SIGKILL the browser's process group and any descendant that left it, then reap."""
    import psutil

    try:
        victims: list[Any] = psutil.Process(process.pid).children(recursive=True)
    except psutil.Error:  # already gone
        victims = []
    with contextlib.suppress(ProcessLookupError, PermissionError):
        os.killpg(process.pid, signal.SIGKILL)
    for child in victims:
        with contextlib.suppress(Exception):  # gone already
            child.kill()
    with contextlib.suppress(subprocess.TimeoutExpired):
        process.wait(timeout=10)
    if victims:  # wait until they are gone, so a count right after close() sees none
        psutil.wait_procs(victims, timeout=10)


__all__ = ["BROWSER_FLAGS", "BrowserCrashed", "BrowserTimeout", "PageError", "WebDriver", "WebError", "hello_hint"]
