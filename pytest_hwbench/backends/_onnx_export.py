"""Export zoo models to ONNX once, into a cache shared by processes and backends.

`export_onnx(spec)` gives one graph with a dynamic batch dimension, its weights built from
`EXPORT_SEED`; derived files (int8, fp16, OpenVINO IR) live beside it (`cached_variant`). An entry
is ``$HWBENCH_CACHE_DIR/onnx/<model>-<key>/``, renamed into place whole, so concurrent processes
never see half a file; the key hashes the config, the inputs, the library versions and
`FORMAT_VERSION`.
"""

from __future__ import annotations

import hashlib
import json
import os
import re
import shutil
import tempfile
import time
import warnings
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from ..errors import UnsupportedCase
from ..models import ModelSpec
from ..vocabulary import cache_dir

#: Bump to invalidate every cached export (a change in how we export).
FORMAT_VERSION = 1
#: Weights of exported models come from this seed (``spec.build_model("cpu", seed=EXPORT_SEED)``).
EXPORT_SEED = 0
#: Opset for the TorchScript (legacy) exporter: read by onnxruntime >= 1.14 and OpenVINO >= 2023.
LEGACY_OPSET = 17
#: Batch size of the example inputs. Not 1: exporters specialise a dimension traced at size 1.
EXAMPLE_BATCH = 2
MODEL_FILE = "model.onnx"
_META = "meta.json"
_FAILED: dict[str, str] = {}  # cache key -> why the export failed, so a process tries once


@dataclass(frozen=True)
class ExportedModel:
    """An ONNX file in the cache and what we know about it."""

    path: Path
    input_names: tuple[str, ...]
    output_names: tuple[str, ...]
    exporter: str
    opset: int
    key: str

    @property
    def directory(self) -> Path:
        return self.path.parent


def _tensor_outputs(output: Any) -> list[str]:
    # transformers returns a ModelOutput: keep its top-level tensors (caches and nested model
    # outputs, e.g. CLIP's text_model_output, are not graph outputs).
    import torch

    items = output.items() if hasattr(output, "items") else enumerate(output)
    return [str(k) for k, v in items if isinstance(v, torch.Tensor)]


def _flat_module(model: Any, input_names: list[str], output_names: list[str]) -> Any:
    """A module taking positional tensors and returning a tuple: what both exporters want."""
    import torch

    class Flat(torch.nn.Module):
        def __init__(self) -> None:
            super().__init__()
            self.model = model

        def forward(self, *args: Any) -> tuple[Any, ...]:
            out = self.model(**dict(zip(input_names, args, strict=True)))
            return tuple(out[k] for k in output_names)

    # A fresh Module is in training mode, and the legacy exporter restores the wrapper's mode
    # after export, which would switch dropout on in the wrapped model: keep it in eval mode.
    return Flat().eval()


def summarize_error(exc: BaseException, limit: int = 300) -> str:
    """One line about an exporter failure (the dynamo exporter's messages run to pages)."""
    text = re.sub(r"\x1b\[[0-9;]*m", "", str(exc))
    if "## Exception summary" in text:
        text = text.split("## Exception summary", 1)[1]
    line = next((ln.strip() for ln in text.splitlines() if ln.strip()), "")
    line = f"{type(exc).__name__}: {line}" if line else type(exc).__name__
    return line if len(line) <= limit else line[: limit - 3] + "..."


def _export_legacy(flat: Any, args: tuple[Any, ...], path: Path, inputs: list[str], outputs: list[str]) -> None:
    import torch

    axes = {name: {0: "batch"} for name in inputs + outputs}
    torch.onnx.export(flat, args, str(path), input_names=inputs, output_names=outputs, dynamic_axes=axes,
                      opset_version=LEGACY_OPSET, do_constant_folding=True, dynamo=False)


def _export_dynamo(flat: Any, args: tuple[Any, ...], path: Path, inputs: list[str], outputs: list[str]) -> None:
    import torch

    batch = torch.export.Dim("batch", min=1, max=65536)
    big = sum(p.numel() * p.element_size() for p in flat.parameters()) > 1.8 * 2**30  # protobuf's 2 GB cap
    torch.onnx.export(flat, args, str(path), input_names=inputs, output_names=outputs,
                      dynamic_shapes={"args": tuple({0: batch} for _ in inputs)},
                      dynamo=True, external_data=big, verbose=False)


#: Tried in order. Legacy first: it exports 7 of the 8 tiny zoo models (all but T5 load through
#: the dynamo exporter too) and is faster (BERT-base 10 s vs 16 s, FACTS.md); dynamo catches
#: models the TorchScript tracer cannot handle.
EXPORTERS: tuple[tuple[str, Callable[..., None]], ...] = (("legacy", _export_legacy), ("dynamo", _export_dynamo))


def _key(spec: ModelSpec) -> str:
    import torch
    import transformers

    inputs = spec.make_inputs(EXAMPLE_BATCH)
    payload = {
        "format": FORMAT_VERSION,
        "seed": EXPORT_SEED,
        "torch": torch.__version__,
        "transformers": transformers.__version__,
        "config": json.loads(spec.build_config().to_json_string()),
        "auto_class": spec.auto_class,
        "modality": spec.modality,
        "inputs": {k: [list(v.shape), str(v.dtype)] for k, v in inputs.items()},
        "exporters": [name for name, _ in EXPORTERS],
    }
    digest = hashlib.sha256(json.dumps(payload, sort_keys=True, default=str).encode()).hexdigest()[:16]
    return f"{_short_name(spec.name)}-{digest}"


#: Characters of a model name kept in a cache entry's name. File names stop at 255 bytes, and
#: an entry's temporary twin and its variants (``.<key>.XXXX``, ``<key>.ov-int8``) add to the key.
NAME_CHARS = 48


def _short_name(name: str) -> str:
    """`name` made safe for a file name, at most `NAME_CHARS` long: a longer one keeps its start
    and a hash of the whole, so two long names sharing a start stay apart."""
    safe = re.sub(r"[^A-Za-z0-9_.-]", "_", name)
    if len(safe) <= NAME_CHARS and safe == name:
        return safe
    suffix = hashlib.sha256(name.encode()).hexdigest()[:8]
    return f"{safe[: NAME_CHARS - len(suffix) - 1]}~{suffix}"


def _atomic_entry(final: Path, build: Callable[[Path], dict[str, Any]]) -> dict[str, Any]:
    """The meta of cache entry `final`, building it in a temporary directory when missing."""
    meta_file = final / _META
    if meta_file.exists():
        return dict(json.loads(meta_file.read_text()))
    final.parent.mkdir(parents=True, exist_ok=True)
    if final.exists():  # a leftover without meta (killed mid-way before the rename existed)
        shutil.rmtree(final, ignore_errors=True)
    tmp = Path(tempfile.mkdtemp(prefix=f".{final.name}.", dir=final.parent))
    try:
        meta = build(tmp)
        (tmp / _META).write_text(json.dumps(meta, indent=1))
        try:
            os.rename(tmp, final)
        except OSError:
            if not meta_file.exists():  # not a lost race with another process: a real error
                raise
    finally:
        shutil.rmtree(tmp, ignore_errors=True)
    return dict(json.loads(meta_file.read_text()))


def export_onnx(spec: ModelSpec) -> ExportedModel:
    """The cached ONNX export of `spec` (exported now if missing); `UnsupportedCase` naming each
    exporter's error when none handles the model."""
    key = _key(spec)
    if key in _FAILED:
        raise UnsupportedCase(_FAILED[key])
    final = cache_dir("onnx") / key

    def build(tmp: Path) -> dict[str, Any]:
        import torch

        model = spec.build_model("cpu", seed=EXPORT_SEED)
        example = spec.make_inputs(EXAMPLE_BATCH)
        with torch.inference_mode():
            outputs = _tensor_outputs(model(**example))
        inputs = list(example)
        flat = _flat_module(model, inputs, outputs)
        errors = []
        for name, export in EXPORTERS:
            start = time.perf_counter()
            try:
                with warnings.catch_warnings():
                    warnings.simplefilter("ignore")  # tracer and deprecation warnings, once per model
                    export(flat, tuple(example.values()), tmp / MODEL_FILE, inputs, outputs)
            except Exception as exc:  # each exporter fails in its own way; we try the next
                errors.append(f"{name} exporter: {summarize_error(exc)}")
                for leftover in tmp.iterdir():
                    shutil.rmtree(leftover) if leftover.is_dir() else leftover.unlink()
                continue
            return {"model": spec.name, "exporter": name, "inputs": inputs, "outputs": outputs,
                    "opset": _opset(tmp / MODEL_FILE), "export_time_s": round(time.perf_counter() - start, 3),
                    "errors": errors}
        raise UnsupportedCase(f"{spec.name}: ONNX export failed ({'; '.join(errors)})")

    try:
        meta = _atomic_entry(final, build)
    except UnsupportedCase as exc:
        _FAILED[key] = str(exc)
        raise
    return ExportedModel(final / MODEL_FILE, tuple(meta["inputs"]), tuple(meta["outputs"]), meta["exporter"],
                         int(meta["opset"]), key)


def numpy_feeds(inputs: Mapping[str, Any], dtypes: Mapping[str, Any], runtime: str) -> dict[str, Any]:
    """`inputs` (torch tensors) as contiguous numpy arrays for the inputs named in `dtypes`, each
    cast to its dtype there (None: kept); ValueError naming the inputs `runtime` misses."""
    import numpy as np

    missing = sorted(set(dtypes) - set(inputs))
    if missing:
        raise ValueError(f"{runtime} needs inputs {missing}; got {sorted(inputs)}")
    arrays = {name: inputs[name].detach().cpu().numpy() for name in dtypes}
    return {name: np.ascontiguousarray(a if dtypes[name] is None else a.astype(dtypes[name], copy=False))
            for name, a in arrays.items()}


def _opset(path: Path) -> int:
    try:
        import onnx
    except ImportError:
        return -1
    model = onnx.load(str(path), load_external_data=False)
    return max((o.version for o in model.opset_import if o.domain in ("", "ai.onnx")), default=-1)


def cached_variant(exported: ExportedModel, variant: str, build: Callable[[Path], str],
                   failure: str | None = None) -> Path:
    """A file derived from `exported` (``int8``, ``fp16``, ``ov-int8``...), built once and cached:
    `build(directory)` writes it and returns its file name; when it raises, `UnsupportedCase`
    says `failure` and the error (no `failure`: the error itself is raised)."""
    final = exported.directory.parent / f"{exported.key}.{variant}"

    def make(tmp: Path) -> dict[str, Any]:
        start = time.perf_counter()
        name = build(tmp)
        return {"file": name, "source": exported.key, "variant": variant,
                "build_time_s": round(time.perf_counter() - start, 3)}

    try:
        meta = _atomic_entry(final, make)
    except Exception as exc:
        if failure is None:
            raise
        raise UnsupportedCase(f"{failure}: {summarize_error(exc)}") from exc
    return final / str(meta["file"])


__all__ = ["EXPORT_SEED", "ExportedModel", "cached_variant", "export_onnx", "numpy_feeds", "summarize_error"]
