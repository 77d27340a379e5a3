"""The one way to read records back, whatever holds them: a spool, a JSON-lines file of records
or anything a readable sink takes, upgraded from older schema versions on the way
(`pytest_hwbench.record.normalize_record`). Reports and hwsel read through these, so tag names,
casts and table layouts stay with the sinks that own them."""

from __future__ import annotations

import os
from collections.abc import Callable, Iterable, Sequence
from pathlib import Path
from typing import TYPE_CHECKING

from pytest_hwbench.record import BenchmarkRecord
from pytest_hwbench.sinks.base import READERS, accepted_forms, read_sink, registered_sinks, resolve_sink
from pytest_hwbench.sinks.spool import Spool, read_records_file

if TYPE_CHECKING:
    import pandas as pd

#: File suffixes read as JSON-lines record files.
JSONL_SUFFIXES = (".jsonl", ".json")


def source_kind(source: str | os.PathLike[str]) -> str:
    """``jsonl``, ``spool`` or the name of the sink that reads `source` (``duckdb``, ``mlflow``...)."""
    text = os.fspath(source)
    prefix, sep, _ = text.partition(":")
    if sep and len(prefix) > 1 and prefix in registered_sinks():  # NAME:TARGET
        return prefix
    path = Path(text)
    if "://" not in text:
        if path.suffix.lower() in JSONL_SUFFIXES:
            return "jsonl"
        if path.is_dir():
            return "spool"
    try:
        return resolve_sink(text)[0]
    except ValueError:
        raise ValueError(
            f"{text}: not a record source; give a spool directory, a .jsonl records file, or what a sink "
            f"reads ({accepted_forms()})"
        ) from None


def is_local_path(text: str) -> bool:
    """Whether `text` names a file by its path alone (no ``NAME:`` prefix, no URI scheme)."""
    prefix, sep, _ = text.partition(":")
    return not sep or len(prefix) == 1  # a Windows drive letter is a path


def read_records(source: str | os.PathLike[str], *, experiment: str | None = None, with_timings: bool = False,
                 choose: Callable[[Sequence[str]], Sequence[str] | None] | None = None) -> list[BenchmarkRecord]:
    """Every record `source` holds (see `source_kind`); `experiment` names the MLflow experiment
    (default: the harness's), `with_timings` also fetches raw timings MLflow keeps apart. With
    `choose`, only the sessions it picks of the source's session ids (newest first; None: every
    session): a sink whose reader takes `choose` reads only those (MLflow's), other sources are
    read whole and filtered. Raises FileNotFoundError for a path that does not exist, ValueError
    for a source of no known kind, and what `choose` raises."""
    import inspect

    text = os.fspath(source)
    path = Path(text)
    if is_local_path(text) and not path.exists():
        raise FileNotFoundError(f"{path} does not exist")
    kind = source_kind(source)
    if kind == "jsonl":
        records = list(read_records_file(path))
    elif kind == "spool":
        records = list(Spool(path).records())
    elif choose is not None and "choose" in inspect.signature(READERS.get(kind, read_sink)).parameters:
        return read_sink(text, experiment=experiment, with_timings=with_timings, choose=choose)
    else:
        records = read_sink(text, experiment=experiment, with_timings=with_timings)
    if choose is None:
        return records
    newest: dict[str, str] = {}
    for record in records:
        newest[record.session_id] = max(newest.get(record.session_id, ""), record.created_at)
    chosen = choose(sorted(newest, key=newest.__getitem__, reverse=True))
    wanted = None if chosen is None else set(chosen)
    return records if wanted is None else [r for r in records if r.session_id in wanted]


def read_all(sources: Iterable[str | os.PathLike[str]], *, experiment: str | None = None) -> list[BenchmarkRecord]:
    """The records of several sources, each record once (by ``record_id``, the last source wins)."""
    merged: dict[str, BenchmarkRecord] = {}
    for source in sources:
        for record in read_records(source, experiment=experiment):
            merged[record.record_id] = record
    return list(merged.values())


def records_frame(records: Sequence[BenchmarkRecord]) -> pd.DataFrame:
    """One row per record, one column per record field (``extra`` as a dict, timings left out)."""
    import pandas as pd

    frame = pd.DataFrame([{k: v for k, v in record.to_dict().items() if k != "timings_ms"} for record in records])
    if len(frame):
        frame["created_at"] = pd.to_datetime(frame["created_at"], utc=True, errors="coerce")
    return frame


__all__ = ["is_local_path", "read_all", "read_records", "records_frame", "source_kind"]
