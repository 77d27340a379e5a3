"""A tracking server on 127.0.0.1 that answers its ``/health`` (and, when asked to, the
one-experiment search that `pytest_hwbench.sinks.mlflow_uri.ping` probes the API with) and holds
every other request until it is closed: a server whose store hangs behind a live front."""

from __future__ import annotations

import threading
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

PROBE = "/api/2.0/mlflow/experiments/search"


class HangingServer:
    """Started on construction; `uri` is its address; `close` releases the held requests."""

    def __init__(self, *, answers_probe: bool) -> None:
        release = self._release = threading.Event()
        answered = {"/health": b"OK", **({PROBE: b"{}"} if answers_probe else {})}

        class Handler(BaseHTTPRequestHandler):
            def do_GET(self) -> None:  # noqa: N802 - http.server's name
                body = answered.get(self.path.split("?", 1)[0].rstrip("/"))
                if body is None:
                    release.wait(300)
                    return
                self.send_response(200)
                self.send_header("Content-Length", str(len(body)))
                self.end_headers()
                self.wfile.write(body)

            do_POST = do_GET  # noqa: N815

            def log_message(self, format: str, *args: object) -> None:  # noqa: A002 - the base class's name
                pass

        self._server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self._server.daemon_threads = True
        self.uri = f"http://127.0.0.1:{self._server.server_address[1]}"
        threading.Thread(target=self._server.serve_forever, daemon=True).start()

    def close(self) -> None:
        self._release.set()
        self._server.shutdown()
        self._server.server_close()
