"""The traced architecture is stored per config, input and library versions, and read back by a
new process instead of tracing again (`stored_architecture`)."""

from __future__ import annotations

import dataclasses
import json
import os
import subprocess
import sys

import pytest

from pytest_hwbench.models import get_model

#: Every test here starts another process, a server or a training: the end-to-end tier.
pytestmark = pytest.mark.e2e


@pytest.fixture
def store(tmp_path, monkeypatch):
    monkeypatch.setenv("HWBENCH_CACHE_DIR", str(tmp_path))
    return tmp_path / "architecture"


def _fresh(name: str, **config):
    spec = get_model(name)
    kwargs = {**spec.config_kwargs, **config}
    return dataclasses.replace(spec, config_kwargs=kwargs)  # its own cached properties


def _untraceable(monkeypatch) -> None:
    def refuse(*args, **kwargs):
        raise AssertionError("traced, although the store holds the answer")

    monkeypatch.setattr("pytest_hwbench.models.spec.trace_architecture", refuse)


def test_a_second_spec_reads_the_stored_trace(store, monkeypatch):
    traced = _fresh("bert-tiny").architecture
    files = list(store.glob("*.json"))
    assert len(files) == 1
    assert json.loads(files[0].read_text())["param_count"] == traced.param_count
    _untraceable(monkeypatch)
    assert _fresh("bert-tiny").architecture == traced


def test_another_config_or_input_is_traced_again(store):
    base = _fresh("bert-tiny").architecture
    deeper = _fresh("bert-tiny", num_hidden_layers=4).architecture
    longer = dataclasses.replace(_fresh("bert-tiny"), sequence_length=64).architecture
    assert len(list(store.glob("*.json"))) == 3
    assert deeper.param_count > base.param_count and deeper.num_layers == 4
    assert longer.param_count == base.param_count and longer.flops_per_item > base.flops_per_item


def test_a_damaged_file_is_traced_again_and_rewritten(store):
    traced = _fresh("bert-tiny").architecture
    (path,) = store.glob("*.json")
    path.write_text('{"model_type": "bert", "param_co')
    assert _fresh("bert-tiny").architecture == traced
    assert json.loads(path.read_text())["flops_per_item"] == traced.flops_per_item
    path.write_text(json.dumps({"model_type": "bert", "unknown_field": 1}))
    assert _fresh("bert-tiny").architecture == traced


@pytest.mark.skipif(os.geteuid() == 0, reason="root writes into a read-only folder")
def test_a_store_that_cannot_be_written_still_answers(store):
    store.parent.chmod(0o500)
    try:
        assert _fresh("bert-tiny").architecture.param_count > 0
    finally:
        store.parent.chmod(0o700)


def test_a_new_process_reads_what_an_earlier_one_traced(store):
    code = ("import sys, pytest_hwbench.models.spec as s\n"
            "from pytest_hwbench.models import get_model\n"
            "if sys.argv[1] == 'read':\n"
            "    s.trace_architecture = None  # calling it would raise\n"
            "print(get_model('gpt2-tiny').architecture.flops_per_item)\n")
    env = {**os.environ, "HWBENCH_CACHE_DIR": str(store.parent)}
    first = subprocess.run([sys.executable, "-c", code, "trace"], env=env, capture_output=True, text=True, check=True)
    second = subprocess.run([sys.executable, "-c", code, "read"], env=env, capture_output=True, text=True)
    assert second.returncode == 0, second.stderr[-2000:]
    assert float(second.stdout) == float(first.stdout) > 0
