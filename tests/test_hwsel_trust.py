"""hwsel trust and bounds (issue 18, items 1-4), each against the real part.

1. No tracking-URI password in any answer: a real ``mlflow server`` on 127.0.0.1 reached through
   ``http://user:SECRET@...``; the REST app's ``/health``, ``hwsel predict``'s warning and
   ``hwsel train``'s output (MLflow's "View run ... at:" links) hold no secret.
2. Poisoned records never become ``@champion``: impossible measurements are dropped on read with
   a count and the reason, repeats combine by their median, and a candidate is promoted only
   when it beats the champion on the same evaluation.
3. Two ``hwsel train`` on one store: the alias moves by compare-and-set; the loser says so.
4. ``POST /performance/predict`` with a huge config: refused fast, naming the limit.

Nothing is mocked: a real SQLite MLflow store, a real server, the real FastAPI app.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import uuid
from collections.abc import Iterator
from pathlib import Path

import pytest

from hwsel.data import CONFIG_KEYS, load_runs

SNAPSHOT = Path(__file__).resolve().parents[1] / "benchmarks" / "data" / "cpu_runs.parquet"
ROOT = Path(__file__).resolve().parents[1]


@pytest.fixture(scope="module")
def small_runs(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A small slice of the committed CPU runs (three models, three batch sizes) as Parquet."""
    runs = load_runs(SNAPSHOT)
    runs = runs[runs["model"].isin(("bert-tiny", "resnet-tiny", "gpt2-tiny")) & runs["batch_size"].isin([1, 4, 16])]
    keys = [runs[k].map(repr) for k in CONFIG_KEYS]
    runs = runs.sort_values("created_at").groupby(keys, sort=False).head(2).reset_index(drop=True)
    path = tmp_path_factory.mktemp("runs") / "small_runs.parquet"
    runs.to_parquet(path, index=False)
    return path


def _hwsel(*args: str, cwd: Path, timeout: float = 600) -> subprocess.CompletedProcess[str]:
    env = {k: v for k, v in os.environ.items() if k != "MLFLOW_TRACKING_URI"}
    env["PYTHONPATH"] = str(ROOT) + os.pathsep + env.get("PYTHONPATH", "")
    env["HWSEL_CACHE_DIR"] = str(cwd / "cache")
    return subprocess.run([sys.executable, "-m", "hwsel", *args], cwd=cwd, env=env, capture_output=True, text=True,
                          timeout=timeout, check=False)


# --- 1. no password in any answer ----------------------------------------------------------------

@pytest.fixture(scope="module")
def secret_server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[tuple[str, str]]:
    """(URI with a password, the password) of a real `mlflow server` on 127.0.0.1 (no hwbench experiment)."""
    from _mlflow_server import MlflowServer

    root = tmp_path_factory.mktemp("server")
    server = MlflowServer(root / "mlflow.db", root / "artifacts", root / "server.log")
    server.start()
    secret = f"S3CRET{uuid.uuid4().hex[:8]}"
    try:
        yield f"http://user:{secret}@127.0.0.1:{server.port}", secret
    finally:
        server.kill()


def test_health_note_hides_the_password(secret_server: tuple[str, str]) -> None:
    from fastapi.testclient import TestClient
    from mlflow.tracking import MlflowClient

    from hwsel.app import create_app
    from hwsel.predict import Predictor

    uri, secret = secret_server
    experiment = f"empty-{uuid.uuid4().hex[:6]}"
    MlflowClient(tracking_uri=uri).create_experiment(experiment)  # there, but no runs in it
    predictor = Predictor.load(uri, tracking_uri=uri, experiment=experiment, detect=False)
    body = TestClient(create_app(predictor)).get("/health").text
    assert "measured" in body and "127.0.0.1" in body  # the note names the store ...
    assert secret not in body  # ... without its password
    assert "***@127.0.0.1" in body


def test_predict_warning_hides_the_password(secret_server: tuple[str, str], tmp_path: Path) -> None:
    uri, secret = secret_server  # the server has no hwbench experiment: the data layer warns
    out = _hwsel("predict", "--model", "gpt2", "--hardware", "cpu", "--source", uri, "--tracking-uri", uri,
                 cwd=tmp_path, timeout=300)
    assert out.returncode == 0, out.stderr
    assert "benchmark data not loaded from http://***@127.0.0.1" in out.stderr
    assert secret not in out.stdout + out.stderr


def test_train_prints_no_run_link_and_no_password(secret_server: tuple[str, str], small_runs: Path,
                                                  tmp_path: Path) -> None:
    uri, secret = secret_server
    out = _hwsel("train", "--source", str(small_runs), "--tracking-uri", uri, "--trials", "1", "--no-progress",
                 "--json", cwd=tmp_path)
    assert out.returncode == 0, out.stderr
    assert "View run" not in out.stdout + out.stderr  # MLflow's run links are off, as in the harness
    assert secret not in out.stdout + out.stderr
    assert json.loads(out.stdout)["tracking_uri"].startswith("http://***@127.0.0.1")
