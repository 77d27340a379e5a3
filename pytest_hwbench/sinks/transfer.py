"""Copying one store into another through the sink protocol, incrementally (`hwbench import-mlflow`,
`hwbench export --to`)."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

from pytest_hwbench.record import BenchmarkRecord, SessionInfo
from pytest_hwbench.sinks.base import SessionSource, Sink


@dataclass(frozen=True)
class ImportResult:
    """What `import_mlflow_sessions` did: sessions listed in MLflow, sessions fetched (those the
    DuckDB file lacked or held unfinished), records added."""

    sessions: int
    fetched: int
    records: int


def copy_sessions(source: SessionSource, target: Sink, *, full: bool = False,
                  notify: Callable[[str], None] | None = None,
                  names: tuple[str, str] | None = None) -> ImportResult:
    """Bring `target` up to date with `source`, session by session, through the sink protocol:
    only sessions the target lacks, holds as running or holds with another final status are
    fetched (a target that cannot list its sessions holds none), or with `full` every record
    (also those whose session is gone). Records the target holds (`Sink.existing_ids`) are
    skipped: copying twice adds nothing. `notify` gets one line per step, naming source and
    target as `names` gives them (default: their sink names)."""
    say = notify or (lambda line: None)
    shown_source, shown_target = names or (source.name, target.name)
    sessions = source.read_sessions()
    listed = isinstance(target, SessionSource)
    held = {info.session_id: status for info, status in target.read_sessions()} if listed else {}
    todo = [(info, status) for info, status in sessions
            if full or held.get(info.session_id) in (None, "running") or held[info.session_id] != status]
    say(f"{len(sessions)} sessions in {shown_source}, {len(sessions) - len(todo)} already in {shown_target}; "
        f"fetching {len(todo)}")
    if full or todo:
        records = source.read_records(session_ids=None if full else [info.session_id for info, _ in todo])
    else:
        records = []
    have = target.existing_ids([r.record_id for r in records]) if records else set()
    by_session: dict[str, list[BenchmarkRecord]] = {}
    for record in records:
        if record.record_id not in have:
            by_session.setdefault(record.session_id, []).append(record)
    known = {info.session_id: (info, status) for info, status in todo}
    added = 0
    for session_id in dict.fromkeys([*known, *by_session]):
        info, status = known.get(session_id, (None, "finished"))
        new = by_session.get(session_id, [])
        if not new and (session_id not in held and not listed or held.get(session_id) == status):
            continue
        if info is None:
            first = new[0]
            info = SessionInfo(session_id=session_id, started_at=first.created_at, host=first.host)
        target.open_session(info)
        if new:
            target.write(new)
        added += len(new)
        if status != "running":  # a session still running in the source keeps no status here either
            target.close(status)
    return ImportResult(sessions=len(sessions), fetched=len(todo), records=added)


__all__ = ["ImportResult", "copy_sessions"]
