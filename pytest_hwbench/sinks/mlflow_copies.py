"""One copy of each run in an MLflow store that several writers fill with the same session at once:
MLflow has no unique key on a tag, so two writers starting together each create their own runs
(`keep_one_copy` settles it after each writer, whatever the interleaving)."""

from __future__ import annotations

import tempfile
from collections.abc import Callable, Iterable
from typing import Any

from pytest_hwbench.sinks import mlflow_layout as layout


def keep_one_copy(client: Any, search: Callable[[str], Iterable[Any]], session_id: str) -> int:
    """Delete the extra copies of `session_id`'s parent run and of its records' child runs (see the
    module docstring); returns how many runs were deleted. `search` gives every run of the
    experiment a filter string finds (`MlflowSink._search`). `session_id` holds no quote (checked
    when the session was opened)."""
    session = f"tags.`{layout.SESSION_TAG}` = '{session_id}'"
    parents = sorted(search(f"{session} AND tags.`{layout.KIND_TAG}` = 'session'"),
                     key=lambda run: run.info.run_id)
    if not parents:
        return 0
    keeper = parents[0].info.run_id
    deleted = 0
    by_record: dict[str, list[Any]] = {}
    for run in search(f"{session} AND tags.`{layout.KIND_TAG}` = 'record'"):
        if run.info.status in layout.TERMINAL:  # a copy still being written is its writer's to settle
            by_record.setdefault(run.data.tags.get(layout.RECORD_TAG, ""), []).append(run)
    for copies in by_record.values():
        copies.sort(key=lambda run: run.info.run_id)
        kept = copies[0]
        for extra in copies[1:]:
            client.delete_run(extra.info.run_id)
            deleted += 1
        if kept.data.tags.get(layout.PARENT_TAG) != keeper:
            client.set_tag(kept.info.run_id, layout.PARENT_TAG, keeper)
    for loser in parents[1:]:
        if loser.info.status not in layout.TERMINAL:
            continue
        _copy_artifacts(client, loser.info.run_id, keeper)
        client.delete_run(loser.info.run_id)
        deleted += 1
    return deleted


def _copy_artifacts(client: Any, source: str, target: str) -> None:
    """Log the records artifacts of run `source` to run `target`, same folder."""
    if not client.list_artifacts(source, layout.RECORDS_ARTIFACT_DIR):
        return
    with tempfile.TemporaryDirectory(prefix="hwbench-mlflow-") as tmp:
        client.log_artifacts(target, client.download_artifacts(source, layout.RECORDS_ARTIFACT_DIR, tmp),
                             layout.RECORDS_ARTIFACT_DIR)


__all__ = ["keep_one_copy"]
