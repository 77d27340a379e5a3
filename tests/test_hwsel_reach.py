"""hwsel reaches its stores as MLflow does, waits bounded, and shares the migration guard.

- A real ``mlflow server`` behind a 127.0.0.1 reverse proxy that refuses any request without the
  right basic-auth header: with ``http://user:SECRET@...`` the registered layer answers, and the
  password appears in no output.
- A server that accepts connections and never answers: ``hwsel predict`` finishes within its
  bound and says why the layers are off; a slow step is announced and cut at ``--timeout``.
- ``hwsel train`` and ``hwsel next``, which cannot answer without their records, stop at once on
  a server that does not answer its ``/health`` or its API, and at ``--timeout`` on one whose
  ``/health`` and first API call answer but whose records never come, naming the store each time.
- Wrong credentials are a usage error naming them; ``/measure/next`` answers 503 for a source
  that refuses them.
- Two ``hwsel train`` at once on a new SQLite store both succeed.
"""

from __future__ import annotations

import base64
import http.client
import json
import os
import re
import subprocess
import sys
import threading
import time
import uuid
from collections.abc import Iterator
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path

import pytest
from _hanging import HangingServer

from hwsel._reach import HwselTimeout, bounded
from pytest_hwbench.sinks.mlflow_uri import ping

#: Every test here starts another process, a server or a training: the end-to-end tier.
pytestmark = pytest.mark.e2e

ROOT = Path(__file__).resolve().parents[1]
SNAPSHOT = ROOT / "benchmarks" / "data" / "cpu_runs.parquet"
_HOP = {"connection", "keep-alive", "transfer-encoding", "te", "trailer", "upgrade", "proxy-authorization",
        "proxy-authenticate", "content-length"}


def _hwsel(*args: str, cwd: Path, timeout: float = 600) -> subprocess.CompletedProcess[str]:
    env = {k: v for k, v in os.environ.items() if not k.startswith("MLFLOW_TRACKING")}
    env["PYTHONPATH"] = str(ROOT) + os.pathsep + env.get("PYTHONPATH", "")
    return subprocess.run([sys.executable, "-m", "hwsel", *args], cwd=cwd, env=env, capture_output=True, text=True,
                          timeout=timeout, check=False)


class _AuthProxy:
    """A reverse proxy on 127.0.0.1 that forwards to `upstream_port` only requests carrying
    ``Authorization: Basic base64(user:password)``; others get 401. Counts both."""

    def __init__(self, upstream_port: int, user: str, password: str) -> None:
        expected = "Basic " + base64.b64encode(f"{user}:{password}".encode()).decode()
        self.allowed = self.refused = 0
        proxy = self

        class Handler(BaseHTTPRequestHandler):
            def log_message(self, *args: object) -> None:
                pass

            def _forward(self) -> None:
                if self.headers.get("Authorization") != expected:
                    proxy.refused += 1
                    self.send_response(401)
                    self.send_header("WWW-Authenticate", 'Basic realm="mlflow"')
                    self.send_header("Content-Length", "0")
                    self.end_headers()
                    return
                proxy.allowed += 1
                length = int(self.headers.get("Content-Length") or 0)
                body = self.rfile.read(length) if length else None
                conn = http.client.HTTPConnection("127.0.0.1", upstream_port, timeout=60)
                headers = {k: v for k, v in self.headers.items() if k.lower() not in _HOP | {"host", "authorization"}}
                conn.request(self.command, self.path, body=body, headers=headers)
                response = conn.getresponse()
                data = response.read()
                self.send_response(response.status)
                for k, v in response.getheaders():
                    if k.lower() not in _HOP:
                        self.send_header(k, v)
                self.send_header("Content-Length", str(len(data)))
                self.end_headers()
                self.wfile.write(data)
                conn.close()

            do_GET = do_POST = do_PUT = do_PATCH = do_DELETE = _forward

        self.server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.port = self.server.server_address[1]
        threading.Thread(target=self.server.serve_forever, daemon=True).start()

    def close(self) -> None:
        self.server.shutdown()
        self.server.server_close()


@pytest.fixture(scope="module")
def small_runs(tmp_path_factory: pytest.TempPathFactory) -> Path:
    from hwsel.data import load_runs

    runs = load_runs(str(SNAPSHOT))
    runs = runs[runs["model"].isin(("bert-tiny", "resnet-tiny", "gpt2-tiny")) & runs["batch_size"].isin([1, 4, 16])]
    path = tmp_path_factory.mktemp("runs") / "small_runs.parquet"
    runs.to_parquet(path, index=False)
    return path


@pytest.fixture(scope="module")
def guarded_server(tmp_path_factory: pytest.TempPathFactory, small_runs: Path) -> Iterator[tuple[str, str, _AuthProxy]]:
    """(URI with user:password through the proxy, the password, the proxy) of a real mlflow server
    holding champions trained on `small_runs`."""
    from _mlflow_server import MlflowServer

    from hwsel.train import train

    root = tmp_path_factory.mktemp("guarded")
    server = MlflowServer(root / "mlflow.db", root / "artifacts", root / "server.log")
    server.start()
    secret = f"S3CRET{uuid.uuid4().hex[:8]}"
    proxy = _AuthProxy(server.port, "user", secret)
    uri = f"http://user:{secret}@127.0.0.1:{proxy.port}"
    try:
        train(str(small_runs), tracking_uri=uri, trials=1, seed=0, progress=False, snapshot_dir=root / "snapshots")
        yield uri, secret, proxy
    finally:
        proxy.close()
        server.kill()


def test_reach_sends_the_uri_credentials_and_never_shows_them(guarded_server: tuple[str, str, _AuthProxy]) -> None:
    uri, secret, proxy = guarded_server
    assert ping(uri) is None  # the credentials travel as basic auth, not in the host name
    wrong = uri.replace(secret, "wrong")
    why = ping(wrong)
    assert why is not None and "HTTP 401" in why and "wrong" not in why and "***@127.0.0.1" in why
    plain = f"http://127.0.0.1:{proxy.port}"
    assert "HTTP 401" in (ping(plain) or "")


def test_the_harness_ping_sends_the_uri_credentials_too(guarded_server: tuple[str, str, _AuthProxy]) -> None:
    """The recording plug-in's reachability check (`ping`) reaches the same guarded server."""
    uri, secret, proxy = guarded_server
    assert ping(uri) is None
    why = ping(uri.replace(secret, "wrong"))
    assert why is not None and "HTTP 401" in why and "wrong" not in why and secret not in why


def test_wrong_credentials_are_a_usage_error_and_measure_next_answers_503(
        guarded_server: tuple[str, str, _AuthProxy], small_runs: Path, tmp_path: Path,
        capsys: pytest.CaptureFixture[str]) -> None:
    """A server that refuses the credentials: the store commands stop with exit 2 naming them (no
    waiting, no retries), and the REST service's ``/measure/next`` answers 503, never 500."""
    from fastapi.testclient import TestClient

    from hwsel import Predictor
    from hwsel.app import create_app
    from pytest_hwbench.cli import main

    uri, secret, proxy = guarded_server
    wrong = uri.replace(secret, "wrong-pw")
    shown = f"http://***@127.0.0.1:{proxy.port}"
    for argv in (["import-mlflow", "--mlflow-uri", wrong], ["export", "--to", f"mlflow:{wrong}"],
                 ["compare", "latest", "latest", "--source-a", wrong]):
        began = time.monotonic()
        assert main([*argv, "--store", str(tmp_path / "store")]) == 2, argv
        err = capsys.readouterr().err
        assert time.monotonic() - began < 10, argv
        assert f"{shown}: {shown}/health answered HTTP 401" in err and "refuses these credentials" in err, err
        assert "wrong-pw" not in err and "Traceback" not in err
    predictor = Predictor.load(small_runs, tracking_uri=f"sqlite:///{tmp_path / 'none.db'}", detect=False)
    client = TestClient(create_app(predictor, source=wrong, timeout=10))
    r = client.post("/measure/next", json={"budget": 2})
    assert r.status_code == 503, r.text
    assert f"no benchmark records to suggest from ({shown})" in r.json()["message"], r.text
    assert "wrong-pw" not in r.text


def test_registered_layer_answers_behind_basic_auth(guarded_server: tuple[str, str, _AuthProxy],
                                                    small_runs: Path, tmp_path: Path) -> None:
    uri, secret, proxy = guarded_server
    before = proxy.allowed
    out = _hwsel("predict", "--model", "bert-tiny", "--hardware", "cpu", "--batch-size", "3", "--source",
                 str(small_runs), "--tracking-uri", uri, "--timeout", "120", "--json", cwd=tmp_path, timeout=600)
    assert out.returncode == 0, out.stderr
    answer = json.loads(out.stdout)["predictions"]["cpu"]
    assert answer["source"] == "registered", (answer, out.stderr)
    assert proxy.allowed > before
    assert secret not in out.stdout + out.stderr
    health = _hwsel("predict", "--model", "bert-tiny", "--hardware", "cpu", "--tracking-uri",
                    uri.replace(secret, "nope"), "--source", str(small_runs), "--batch-size", "3", "--json",
                    cwd=tmp_path, timeout=300)
    assert health.returncode == 0, health.stderr
    assert json.loads(health.stdout)["predictions"]["cpu"]["source"] != "registered"  # refused: another layer
    assert secret not in health.stdout + health.stderr and "nope" not in health.stdout + health.stderr


def test_a_server_that_never_answers_costs_seconds_not_minutes(silent_port: int, tmp_path: Path) -> None:
    uri = f"http://u:pw-{uuid.uuid4().hex[:6]}@127.0.0.1:{silent_port}"
    started = time.monotonic()
    out = _hwsel("predict", "--model", "bert-tiny", "--hardware", "cpu", "--source", uri, "--tracking-uri", uri,
                 "--timeout", "10", "--json", cwd=tmp_path, timeout=120)
    elapsed = time.monotonic() - started
    assert out.returncode == 0, out.stderr
    assert elapsed < 40, elapsed  # was 104.8 s: MLflow's own retries
    assert json.loads(out.stdout)["predictions"]["cpu"]["source"] in ("roofline", "rules")
    assert "cannot reach http://***@127.0.0.1" in out.stderr
    assert uri.split(":")[2].split("@")[0] not in out.stdout + out.stderr


def test_a_slow_step_is_announced_and_cut_at_the_deadline(capsys: pytest.CaptureFixture[str]) -> None:
    started = time.monotonic()
    with pytest.raises(HwselTimeout, match=r"no answer within 4 s while waiting for the records \(--timeout\)"):
        bounded(lambda: time.sleep(30), 4.0, "the records")
    assert 3.5 < time.monotonic() - started < 10
    assert "hwsel: waiting for the records (at most 3 s more, --timeout" in capsys.readouterr().err
    assert bounded(lambda: 42, 4.0, "x") == 42


def test_train_and_next_stop_at_once_naming_a_server_that_does_not_answer(silent_port: int, tmp_path: Path) -> None:
    uri = f"http://127.0.0.1:{silent_port}"
    store = f"sqlite:///{tmp_path / 'store' / 'mlflow.db'}"
    for args in (("train", "--tracking-uri", store, "--trials", "1"), ("next", "--budget", "2")):
        out = _hwsel(*args, "--source", uri, "--timeout", "10", cwd=tmp_path, timeout=120)
        assert out.returncode == 1, out.stdout + out.stderr
        assert f"hwsel {args[0]}: failed: HwselUnreachable: --source {uri}: cannot reach {uri}/health within 2 s" in out.stderr, \
            out.stderr
        assert "start the tracking server, or pass --source a .duckdb, .parquet or .jsonl file" in out.stderr
        assert "Retrying" not in out.stderr  # MLflow's own retries (30 s each) never start
    out = _hwsel("train", "--source", str(SNAPSHOT), "--tracking-uri", uri, "--trials", "1", cwd=tmp_path, timeout=120)
    assert out.returncode == 1, out.stdout + out.stderr
    assert f"HwselUnreachable: --tracking-uri {uri}: cannot reach" in out.stderr, out.stderr
    assert "or pass --tracking-uri another store" in out.stderr


def test_train_and_next_stop_at_the_deadline_when_the_records_do_not_come(tmp_path: Path) -> None:
    server = HangingServer(answers_probe=True)
    uri = server.uri
    store = f"sqlite:///{tmp_path / 'store' / 'mlflow.db'}"
    try:
        for args in (("train", "--tracking-uri", store, "--trials", "1"), ("next", "--budget", "2")):
            out = _hwsel(*args, "--source", uri, "--timeout", "5", cwd=tmp_path, timeout=120)
            assert out.returncode == 1, out.stdout + out.stderr
            assert re.search(rf"hwsel: waiting for the records of {re.escape(uri)} \(at most \d s more, --timeout; "
                             rf"then hwsel {args[0]} stops\)", out.stderr), out.stderr
            assert (f"hwsel {args[0]}: failed: HwselTimeout: no answer within 5 s while waiting for the records of "
                    f"{uri} (--timeout)") in out.stderr, out.stderr
    finally:
        server.close()


def test_two_trainings_at_once_on_a_new_sqlite_store(small_runs: Path, tmp_path: Path) -> None:
    uri = f"sqlite:///{tmp_path / 'store' / 'mlflow.db'}"
    env = {k: v for k, v in os.environ.items() if not k.startswith("MLFLOW_TRACKING")}
    env["PYTHONPATH"] = str(ROOT) + os.pathsep + env.get("PYTHONPATH", "")
    cmd = [sys.executable, "-m", "hwsel", "train", "--source", str(small_runs), "--tracking-uri", uri,
           "--trials", "1", "--no-progress", "--json"]
    procs = [subprocess.Popen(cmd, cwd=tmp_path, env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
             for _ in range(2)]
    outs = [p.communicate(timeout=900) for p in procs]
    for p, (stdout, stderr) in zip(procs, outs, strict=True):
        assert p.returncode == 0, stderr
        assert "duplicate column" not in stderr
        assert json.loads(stdout)["rows"] > 0
